// GEMM + AR in the global view on a 4-way tensor-parallel mesh: x and W sharded along K, the result replicated.
// ditron-partition: a local matmul (partial sums over tp) + all_reduce; ditron-fuse-overlap: kind "matmul_ar".
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @gemm_ar(%x: tensor<8192x14336xbf16> {ditron.sharding = {dims = [[], ["tp"]]}},
                     %w: tensor<14336x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<8192x4096xbf16> {ditron.sharding = {dims = [[], []]}}) {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<8192x14336xbf16>, tensor<14336x4096xbf16>) -> tensor<8192x4096xbf16>
    return %y : tensor<8192x4096xbf16>
  }
}
