// A Megatron-style MLP block in the global view on a 4-way tensor-parallel mesh:
// x's rows are sharded, W1 is column-sharded, W2 row-sharded; the output is row-sharded again.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @mlp(%x: tensor<8192x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}},
                 %w1: tensor<4096x14336xbf16> {ditron.sharding = {dims = [[], ["tp"]]}},
                 %w2: tensor<14336x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<8192x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}}) {
    %h = "ditron_task.matmul"(%x, %w1) : (tensor<8192x4096xbf16>, tensor<4096x14336xbf16>) -> tensor<8192x14336xbf16>
    %a = "ditron_task.elementwise"(%h) {fn = "gelu"} : (tensor<8192x14336xbf16>) -> tensor<8192x14336xbf16>
    %y = "ditron_task.matmul"(%a, %w2) : (tensor<8192x14336xbf16>, tensor<14336x4096xbf16>) -> tensor<8192x4096xbf16>
    return %y : tensor<8192x4096xbf16>
  }
}
