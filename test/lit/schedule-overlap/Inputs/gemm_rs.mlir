// GEMM+RS on 2 ranks (the input of the schedule-overlap tests).
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @gemm_rs(%a: tensor<512x64xbf16>, %w: tensor<64x96xbf16>) -> tensor<256x96xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%a, %w) {ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "producer"}} : (tensor<512x64xbf16>, tensor<64x96xbf16>) -> tensor<512x96xbf16>
    %y = "ditron_task.reduce_scatter"(%p) {axis = "tp", dim = 0 : i64, reduce = "sum", ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "consumer"}} : (tensor<512x96xbf16>) -> tensor<256x96xbf16>
    return %y : tensor<256x96xbf16>
  }
}
