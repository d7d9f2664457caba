// A plain local GEMM (the input of a schedule-overlap error test).
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @matmul(%a: tensor<128x64xbf16>, %w: tensor<64x64xbf16>) -> tensor<128x64xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%a, %w) : (tensor<128x64xbf16>, tensor<64x64xbf16>) -> tensor<128x64xbf16>
    return %p : tensor<128x64xbf16>
  }
}
