// GEMM + RS in the global view on a 4-way tensor-parallel mesh (LLaMA-3-8B down-projection shapes):
// x is sharded along K (columns), W along K (rows); the result is row-sharded.
// ditron-partition: a local matmul (partial sums over tp) + reduce_scatter over the rows;
// ditron-fuse-overlap: kind "matmul_rs".
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @gemm_rs(%x: tensor<8192x14336xbf16> {ditron.sharding = {dims = [[], ["tp"]]}},
                     %w: tensor<14336x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<8192x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}}) {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<8192x14336xbf16>, tensor<14336x4096xbf16>) -> tensor<8192x4096xbf16>
    return %y : tensor<8192x4096xbf16>
  }
}
