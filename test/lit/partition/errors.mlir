// RUN: not ditron-opt %s --split-input-file --pass-pipeline=ditron-partition 2>&1 | FileCheck %s
// RUN: not ditron-opt %s --split-input-file --verify-each=false --pass-pipeline=ditron-partition 2>&1 | FileCheck %s

module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 2>}} {
  func.func @two_axes_on_k(%x: tensor<8x8xf32> {ditron.sharding = {dims = [[], ["dp"]]}},
                           %w: tensor<8x8xf32> {ditron.sharding = {dims = [["tp"], []]}}) -> tensor<8x8xf32> {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-partition: 'ditron_task.matmul' op contracts over dim K, which the lhs has split over 'dp' and the rhs split over 'tp'
    %y = "ditron_task.matmul"(%x, %w) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    return %y : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @replicated_to_split(%x: tensor<8x8xf32>) -> (tensor<8x8xf32> {ditron.sharding = {dims = [["tp"], []]}}) {
    %y = "ditron_task.elementwise"(%x) {fn = "relu"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    // CHECK: errors.mlir:[[# @LINE + 1]]:5: error: ditron-partition: 'func.return' op result 0: dim 0 is replicated but must be split over 'tp'; splitting it further over 'tp' needs a local slice
    return %y : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // (the verifier reports it before the pass runs; the pass checks the same with --verify-each=false)
  // CHECK: errors.mlir:[[# @LINE + 1]]:3: error: {{(ditron-partition: )?}}'func.func' op argument 0: dim 0 of size 10 does not divide evenly into 4 shards; pad the tensor or mark the sharding 'padded = true'
  func.func @not_dividing(%x: tensor<10x8xf32> {ditron.sharding = {dims = [["tp"], []]}}) -> tensor<10x8xf32> {
    return %x : tensor<10x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @unsupported(%x: tensor<6x4xf32> {ditron.sharding = {dims = [["tp"], []]}}, %w: tensor<2x4x3xf32>,
                         %g: tensor<2xi64>) -> tensor<6x3xf32> {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-partition: 'ditron_task.grouped_matmul' op has no partition rule, and its operand 0 is sharded {dims = [["tp"], []]}
    %y = "ditron_task.grouped_matmul"(%x, %w, %g) : (tensor<6x4xf32>, tensor<2x4x3xf32>, tensor<2xi64>) -> tensor<6x3xf32>
    return %y : tensor<6x3xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @collective_in_global_view(%x: tensor<4x8xf32>) -> tensor<8x8xf32> {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-partition: 'ditron_task.all_gather' op is a collective of the local (SPMD) view, but the function is in the global view
    %y = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<8x8xf32>
    return %y : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @padded_replicated(%x: tensor<10x8xf32> {ditron.sharding = {dims = [["tp"], []], padded = true}},
                               %w: tensor<8x8xf32>) -> (tensor<10x8xf32> {ditron.sharding = {dims = [[], []]}}) {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<10x8xf32>, tensor<8x8xf32>) -> tensor<10x8xf32>
    // CHECK: errors.mlir:[[# @LINE + 1]]:5: error: ditron-partition: 'func.return' op result 0: the partitioned value has local shape 12x8, but sharding {dims = [[], []]} of the 10x8 result needs 10x8
    return %y : tensor<10x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @padded_k(%x: tensor<8x6xf32> {ditron.sharding = {dims = [[], ["tp"]], padded = true}},
                      %w: tensor<6x4xf32> {ditron.sharding = {dims = [["tp"], []], padded = true}}) -> tensor<8x4xf32> {
    %a = "ditron_task.elementwise"(%x) {fn = "exp"} : (tensor<8x6xf32>) -> tensor<8x6xf32>
    %b = "ditron_task.elementwise"(%w) {fn = "sigmoid"} : (tensor<6x4xf32>) -> tensor<6x4xf32>
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-partition: 'ditron_task.matmul' op contracts over a padded dim K of size 6 whose padding may be non-zero in both operands
    %y = "ditron_task.matmul"(%a, %b) : (tensor<8x6xf32>, tensor<6x4xf32>) -> tensor<8x4xf32>
    return %y : tensor<8x4xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @rs_not_dividing(%x: tensor<10x8xf32> {ditron.sharding = {dims = [[], ["tp"]]}},
                             %w: tensor<8x8xf32> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<10x8xf32> {ditron.sharding = {dims = [["tp"], []], padded = true}}) {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<10x8xf32>, tensor<8x8xf32>) -> tensor<10x8xf32>
    // CHECK: errors.mlir:[[# @LINE + 1]]:5: error: ditron-partition: 'func.return' op result 0: the partial sum over 'tp' must be reduce-scattered along dim 0, whose local size 10 does not divide by 4
    return %y : tensor<10x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @make_partial(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-partition: 'ditron_task.shard' op sharding annotation: wants a partial sum over 'tp', but the value {dims = [[], []]} is not one
    %y = "ditron_task.shard"(%x) {sharding = {dims = [[], []], partial = ["tp"]}} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}

// -----

// CHECK: errors.mlir:[[# @LINE + 2]]:3: error: ditron-partition: 'func.func' op uses shardings but the module has no 'ditron.mesh' attribute
module {
  func.func @no_mesh(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %y = "ditron_task.shard"(%x) {sharding = {dims = [[], []]}} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}

// -----

// In the global view it is refused, at the op.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @global(%x: tensor<8x16xbf16>, %s: tensor<2xi32>) -> (tensor<16x16xbf16>, tensor<2xi32>) {
    // CHECK: errors.mlir:[[# @LINE + 1]]:14: error: ditron-partition: 'ditron_task.all_to_all' op is a collective of the local (SPMD) view, but the function is in the global view
    %y, %c = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<8x16xbf16>, tensor<2xi32>) -> (tensor<16x16xbf16>, tensor<2xi32>)
    return %y, %c : tensor<16x16xbf16>, tensor<2xi32>
  }
}
