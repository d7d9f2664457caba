// AG+GEMM on 4 ranks, 2 chunks of 32 rows per shard (the input of the schedule-overlap tests).
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @ag_gemm(%x: tensor<64x32xbf16>, %w: tensor<32x48xbf16>) -> tensor<256x48xbf16> attributes {ditron.view = "local"} {
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}} : (tensor<64x32xbf16>) -> tensor<256x32xbf16>
    %h = "ditron_task.matmul"(%g, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}} : (tensor<256x32xbf16>, tensor<32x48xbf16>) -> tensor<256x48xbf16>
    return %h : tensor<256x48xbf16>
  }
}
