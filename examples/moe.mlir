// A mixture-of-experts layer in the local (SPMD) view on a 4-way expert-parallel mesh: each rank holds 8192 tokens
// and 2 of the 8 experts. all_to_all sends a quarter of the tokens to each rank (dispatch), grouped_matmul runs
// every token through its expert (the group sizes are data: how many tokens each local expert got), and a second
// all_to_all brings the results back (combine). ditron-fuse-overlap marks all_to_all -> grouped_matmul; both are
// lowered one by one (the all-to-all by pull, the grouped GEMM as one kernel).
module attributes {ditron.mesh = {axes = ["ep"], shape = array<i64: 4>}} {
  func.func @moe(%x: tensor<8192x4096xbf16>, %w: tensor<2x4096x14336xbf16>, %g: tensor<2xi32>)
      -> tensor<8192x14336xbf16> attributes {ditron.view = "local"} {
    %d = "ditron_task.all_to_all"(%x) {axis = "ep", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<8192x4096xbf16>) -> tensor<8192x4096xbf16>
    %h = "ditron_task.grouped_matmul"(%d, %w, %g) : (tensor<8192x4096xbf16>, tensor<2x4096x14336xbf16>, tensor<2xi32>) -> tensor<8192x14336xbf16>
    %y = "ditron_task.all_to_all"(%h) {axis = "ep", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<8192x14336xbf16>) -> tensor<8192x14336xbf16>
    return %y : tensor<8192x14336xbf16>
  }
}
