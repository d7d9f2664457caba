// AG + GEMM in the global view on a 4-way tensor-parallel mesh (LLaMA-3-8B up-projection shapes):
// x's rows are sharded, W is column-sharded, the result is column-sharded.
// ditron-partition: all_gather(x) over the rows + a local matmul; ditron-fuse-overlap: kind "ag_matmul".
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @ag_gemm(%x: tensor<8192x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}},
                     %w: tensor<4096x14336xbf16> {ditron.sharding = {dims = [[], ["tp"]]}})
      -> (tensor<8192x14336xbf16> {ditron.sharding = {dims = [[], ["tp"]]}}) {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<8192x4096xbf16>, tensor<4096x14336xbf16>) -> tensor<8192x14336xbf16>
    return %y : tensor<8192x14336xbf16>
  }
}
