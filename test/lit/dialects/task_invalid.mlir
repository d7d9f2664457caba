// RUN: not ditron-opt %s --split-input-file 2>&1 | FileCheck %s
// Negative cases for ditron_task: first what IRDL checks (op names, arity, attribute and type kinds), then one
// case per rule of dialects/verify.py. Each case's errors follow the previous case's (CHECK-NEXT): no extras.

func.func @unknown_op(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: unregistered operation 'ditron_task.all_gatherr' found in dialect ('ditron_task') that does not allow unknown operations
  %0 = "ditron_task.all_gatherr"(%x) {axis = "tp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @too_few_operands(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op expects exactly 2 operands, but got 1
  %0 = "ditron_task.matmul"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @two_results(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.matmul' op expects exactly 1 results, but got 2
  %0:2 = "ditron_task.matmul"(%x, %x) : (tensor<8x8xf32>, tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>)
  return %0#0 : tensor<8x8xf32>
}

// -----

func.func @missing_attribute(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.shard' op attribute "sharding" is expected but not provided
  %0 = "ditron_task.shard"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @attribute_kind(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.all_reduce' op expected base attribute 'builtin.string' but got 'builtin.integer'
  %0 = "ditron_task.all_reduce"(%x) {axis = 1 : i64, reduce = "sum"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @unranked_operand(%x: tensor<*xf32>, %y: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op expected base type 'builtin.tensor' but got 'builtin.unranked_tensor'
  %0 = "ditron_task.matmul"(%x, %y) : (tensor<*xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

func.func @memref_operand(%x: memref<8x8xf32>) -> tensor<8x8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.elementwise' op expected base type 'builtin.tensor' but got 'builtin.memref'
  %0 = "ditron_task.elementwise"(%x) {fn = "neg"} : (memref<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

func.func @with_region(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op unexpected number of regions: expected 0 but got 1
  %0 = "ditron_task.matmul"(%x, %x) ({
    "func.return"() : () -> ()
  }) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

func.func @properties(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: invalid properties {fast = true} for op ditron_task.matmul: extensible Dialects don't support properties
  %0 = "ditron_task.matmul"(%x, %x) <{fast = true}> : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// The operands of one elementwise op share the result's element type (only a cast changes it).
func.func @elementwise_mixed_operands(%x: tensor<8x8xf32>, %y: tensor<8x8xf16>) -> tensor<8x8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.elementwise' op element types differ: operand f16, result f32
  %0 = "ditron_task.elementwise"(%x, %y) {fn = "add"} : (tensor<8x8xf32>, tensor<8x8xf16>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_to_all_three_operands(%x: tensor<8x8xf32>, %s: tensor<4xi32>) -> tensor<?x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_to_all' op expects at most 2 operands, but got 3
    %0 = "ditron_task.all_to_all"(%x, %s, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<8x8xf32>, tensor<4xi32>, tensor<4xi32>) -> tensor<?x8xf32>
    return %0 : tensor<?x8xf32>
  }
}

// ----- dialects/verify.py: ditron_task.shard

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @shard_changes_type(%x: tensor<8x8xf32>) -> tensor<8x8xf16> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.shard' op result type tensor<8x8xf16> differs from the input type tensor<8x8xf32>
    %0 = "ditron_task.shard"(%x) {sharding = {dims = [["tp"], []]}} : (tensor<8x8xf32>) -> tensor<8x8xf16>
    return %0 : tensor<8x8xf16>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @shard_unknown_axis(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.shard' op the annotated value: mesh axis 'dp' is not in the mesh (axes: tp)
    %0 = "ditron_task.shard"(%x) {sharding = {dims = [["dp"], []]}} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @shard_uneven(%x: tensor<10x8xf32>) -> tensor<10x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.shard' op the annotated value: dim 0 of size 10 does not divide evenly into 4 shards; pad the tensor or mark the sharding 'padded = true'
    %0 = "ditron_task.shard"(%x) {sharding = {dims = [["tp"], []]}} : (tensor<10x8xf32>) -> tensor<10x8xf32>
    return %0 : tensor<10x8xf32>
  }
}

// -----

func.func @shard_without_mesh(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.shard' op the annotated value is sharded over mesh axes but the module has no 'ditron.mesh' attribute
  %0 = "ditron_task.shard"(%x) {sharding = {dims = [["tp"], []]}} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

func.func @shard_malformed(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.shard' op the annotated value: a sharding needs 'dims', got {partial = ["tp"]}
  %0 = "ditron_task.shard"(%x) {sharding = {partial = ["tp"]}} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// ----- ditron_task.matmul

func.func @matmul_rank(%x: tensor<8x8x8xf32>, %y: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op expects 2-d operands and result, got ranks 3, 2 -> 2
  %0 = "ditron_task.matmul"(%x, %y) : (tensor<8x8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

func.func @matmul_contraction(%x: tensor<16x32xbf16>, %y: tensor<64x8xbf16>) -> tensor<16x8xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op contraction sizes differ: lhs tensor<16x32xbf16> has K = 32, rhs tensor<64x8xbf16> has K = 64
  %0 = "ditron_task.matmul"(%x, %y) : (tensor<16x32xbf16>, tensor<64x8xbf16>) -> tensor<16x8xbf16>
  return %0 : tensor<16x8xbf16>
}

// -----

func.func @matmul_result_shape(%x: tensor<16x32xbf16>, %y: tensor<32x8xbf16>) -> tensor<16x16xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op result tensor<16x16xbf16> should be 16x8
  %0 = "ditron_task.matmul"(%x, %y) : (tensor<16x32xbf16>, tensor<32x8xbf16>) -> tensor<16x16xbf16>
  return %0 : tensor<16x16xbf16>
}

// -----

func.func @matmul_fast_accum_of_bf16(%x: tensor<16x32xbf16>, %y: tensor<32x8xbf16>) -> tensor<16x8xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op fast_accum is an fp8 accumulation mode; bf16 operands accumulate in f32
  %0 = "ditron_task.matmul"(%x, %y) {fast_accum = true} : (tensor<16x32xbf16>, tensor<32x8xbf16>) -> tensor<16x8xbf16>
  return %0 : tensor<16x8xbf16>
}

// -----

func.func @matmul_fast_accum_not_bool(%x: tensor<16x32xf8E4M3FN>, %y: tensor<32x8xf8E4M3FN>) -> tensor<16x8xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op attribute 'fast_accum' must be a boolean: expected a boolean, got 1 : i64
  %0 = "ditron_task.matmul"(%x, %y) {fast_accum = 1} : (tensor<16x32xf8E4M3FN>, tensor<32x8xf8E4M3FN>) -> tensor<16x8xbf16>
  return %0 : tensor<16x8xbf16>
}

// -----

func.func @matmul_operand_types(%x: tensor<16x32xbf16>, %y: tensor<32x8xf16>) -> tensor<16x8xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op operand element types differ: bf16 and f16
  %0 = "ditron_task.matmul"(%x, %y) : (tensor<16x32xbf16>, tensor<32x8xf16>) -> tensor<16x8xbf16>
  return %0 : tensor<16x8xbf16>
}

// -----

func.func @matmul_result_type(%x: tensor<16x32xbf16>, %y: tensor<32x8xbf16>) -> tensor<16x8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op result element type f32 differs from the operands' bf16
  %0 = "ditron_task.matmul"(%x, %y) : (tensor<16x32xbf16>, tensor<32x8xbf16>) -> tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}

// ----- ditron_task.grouped_matmul

func.func @grouped_matmul_ranks(%a: tensor<64x32xbf16>, %b: tensor<32x16xbf16>, %g: tensor<4xi32>) -> tensor<64x16xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.grouped_matmul' op expects lhs [T, K], rhs [E, K, N], group_sizes [E], result [T, N]; got ranks 2, 2, 1 -> 2
  %0 = "ditron_task.grouped_matmul"(%a, %b, %g) : (tensor<64x32xbf16>, tensor<32x16xbf16>, tensor<4xi32>) -> tensor<64x16xbf16>
  return %0 : tensor<64x16xbf16>
}

// -----

func.func @grouped_matmul_contraction(%a: tensor<64x32xbf16>, %b: tensor<4x16x16xbf16>, %g: tensor<4xi32>) -> tensor<64x16xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.grouped_matmul' op contraction sizes differ: lhs has K = 32, rhs has K = 16
  %0 = "ditron_task.grouped_matmul"(%a, %b, %g) : (tensor<64x32xbf16>, tensor<4x16x16xbf16>, tensor<4xi32>) -> tensor<64x16xbf16>
  return %0 : tensor<64x16xbf16>
}

// -----

func.func @grouped_matmul_groups(%a: tensor<64x32xbf16>, %b: tensor<4x32x16xbf16>, %g: tensor<6xi32>) -> tensor<64x16xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.grouped_matmul' op group_sizes has 6 entries, not a multiple of the 4 groups of rhs (group g multiplies rhs[g % E])
  %0 = "ditron_task.grouped_matmul"(%a, %b, %g) : (tensor<64x32xbf16>, tensor<4x32x16xbf16>, tensor<6xi32>) -> tensor<64x16xbf16>
  return %0 : tensor<64x16xbf16>
}

// -----

func.func @grouped_matmul_gated_act(%a: tensor<64x32xbf16>, %b: tensor<4x32x16xbf16>, %g: tensor<4xi32>) -> tensor<64x8xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.grouped_matmul' op gated 'gelu' needs an activation of silu and rhs [E, K, 2N] (gate, then up), got rhs tensor<4x32x16xbf16>
  %0 = "ditron_task.grouped_matmul"(%a, %b, %g) {gated = "gelu"} : (tensor<64x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32>) -> tensor<64x8xbf16>
  return %0 : tensor<64x8xbf16>
}

// -----

func.func @grouped_matmul_gated_result(%a: tensor<64x32xbf16>, %b: tensor<4x32x16xbf16>, %g: tensor<4xi32>) -> tensor<64x16xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.grouped_matmul' op result tensor<64x16xbf16> should be 64x8
  %0 = "ditron_task.grouped_matmul"(%a, %b, %g) {gated = "silu"} : (tensor<64x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32>) -> tensor<64x16xbf16>
  return %0 : tensor<64x16xbf16>
}

// -----

func.func @grouped_matmul_float_sizes(%a: tensor<64x32xbf16>, %b: tensor<4x32x16xbf16>, %g: tensor<4xf32>) -> tensor<64x16xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.grouped_matmul' op group_sizes must hold integers, got f32
  %0 = "ditron_task.grouped_matmul"(%a, %b, %g) : (tensor<64x32xbf16>, tensor<4x32x16xbf16>, tensor<4xf32>) -> tensor<64x16xbf16>
  return %0 : tensor<64x16xbf16>
}

// -----

func.func @grouped_matmul_result(%a: tensor<64x32xbf16>, %b: tensor<4x32x16xbf16>, %g: tensor<4xi32>) -> tensor<64x32xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.grouped_matmul' op result tensor<64x32xbf16> should be 64x16
  %0 = "ditron_task.grouped_matmul"(%a, %b, %g) : (tensor<64x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32>) -> tensor<64x32xbf16>
  return %0 : tensor<64x32xbf16>
}

// -----

func.func @grouped_matmul_types(%a: tensor<64x32xbf16>, %b: tensor<4x32x16xf16>, %g: tensor<4xi32>) -> tensor<64x16xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.grouped_matmul' op operand element types differ: bf16 and f16
  %0 = "ditron_task.grouped_matmul"(%a, %b, %g) : (tensor<64x32xbf16>, tensor<4x32x16xf16>, tensor<4xi32>) -> tensor<64x16xbf16>
  return %0 : tensor<64x16xbf16>
}

// ----- ditron_task.elementwise

func.func @elementwise_unknown_fn(%x: tensor<8xf32>) -> tensor<8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.elementwise' op has fn 'softmax'; expected one of: add, sub, mul, div, max, min, neg, relu, silu, gelu, exp, sigmoid, tanh, copy, silu_mul
  %0 = "ditron_task.elementwise"(%x) {fn = "softmax"} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @elementwise_arity(%x: tensor<8xf32>) -> tensor<8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.elementwise' op fn 'add' takes 2 operand(s), got 1
  %0 = "ditron_task.elementwise"(%x) {fn = "add"} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @elementwise_result_type(%x: tensor<8xf32>) -> tensor<8xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.elementwise' op element types differ: operand f32, result bf16
  %0 = "ditron_task.elementwise"(%x) {fn = "exp"} : (tensor<8xf32>) -> tensor<8xbf16>
  return %0 : tensor<8xbf16>
}

// -----

func.func @elementwise_result_shape(%x: tensor<8xf32>, %y: tensor<8xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.elementwise' op operand shape tensor<8xf32> differs from result shape tensor<4xf32>
  %0 = "ditron_task.elementwise"(%x, %y) {fn = "mul"} : (tensor<8xf32>, tensor<8xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// ----- collectives: the mesh and its axes

func.func @collective_without_mesh(%x: tensor<8xf32>) -> tensor<8xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.all_reduce' op uses mesh axis 'tp' but the module has no 'ditron.mesh' attribute
  %0 = "ditron_task.all_reduce"(%x) {axis = "tp", reduce = "sum"} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 4>}} {
  func.func @collective_unknown_axis(%x: tensor<8xf32>) -> tensor<32xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_gather' op mesh axis 'ep' is not in the mesh (axes: dp, tp)
    %0 = "ditron_task.all_gather"(%x) {axis = "ep", dim = 0 : i64} : (tensor<8xf32>) -> tensor<32xf32>
    return %0 : tensor<32xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @collective_element_type(%x: tensor<8xf32>) -> tensor<32xf16> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_gather' op element types differ: input f32, output f16
    %0 = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<8xf32>) -> tensor<32xf16>
    return %0 : tensor<32xf16>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @collective_rank(%x: tensor<8xf32>) -> tensor<4x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_gather' op input rank 1 differs from output rank 2
    %0 = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// ----- ditron_task.all_gather

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_gather_output_dim(%x: tensor<4x8xf32>) -> tensor<8x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_gather' op output dim 0 is 8; expected input dim 4 x axis 'tp' size 4 = 16
    %0 = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_gather_other_dim(%x: tensor<4x8xf32>) -> tensor<16x16xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_gather' op dim 1 changes from 8 to 16; only the collective's dim may change
    %0 = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<16x16xf32>
    return %0 : tensor<16x16xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_gather_dim_range(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_gather' op dim 2 is out of range for a tensor of rank 2
    %0 = "ditron_task.all_gather"(%x) {axis = "tp", dim = 2 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_gather_negative_dim(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_gather' op dim -1 is out of range for a tensor of rank 2
    %0 = "ditron_task.all_gather"(%x) {axis = "tp", dim = -1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_gather_bool_dim(%x: tensor<4x8xf32>) -> tensor<4x32xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_gather' op attribute 'dim' must be a 64-bit integer, got true
    %0 = "ditron_task.all_gather"(%x) {axis = "tp", dim = true} : (tensor<4x8xf32>) -> tensor<4x32xf32>
    return %0 : tensor<4x32xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_gather_huge_dim(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_gather' op attribute 'dim' must be a 64-bit integer, got 100000000000000000000 : i128
    %0 = "ditron_task.all_gather"(%x) {axis = "tp", dim = 100000000000000000000 : i128} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// ----- ditron_task.reduce_scatter

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @reduce_scatter_reduce(%x: tensor<16x8xf32>) -> tensor<4x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.reduce_scatter' op has reduce 'avg'; expected one of: sum, max, min, prod
    %0 = "ditron_task.reduce_scatter"(%x) {axis = "tp", dim = 0 : i64, reduce = "avg"} : (tensor<16x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @reduce_scatter_uneven(%x: tensor<10x8xf32>) -> tensor<2x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.reduce_scatter' op input dim 0 of size 10 does not divide evenly over axis 'tp' of size 4
    %0 = "ditron_task.reduce_scatter"(%x) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<10x8xf32>) -> tensor<2x8xf32>
    return %0 : tensor<2x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @reduce_scatter_output_dim(%x: tensor<16x8xf32>) -> tensor<8x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.reduce_scatter' op output dim 0 is 8; expected input dim 16 / axis 'tp' size 4 = 4
    %0 = "ditron_task.reduce_scatter"(%x) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<16x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @reduce_scatter_other_dim(%x: tensor<16x8xf32>) -> tensor<4x4xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.reduce_scatter' op dim 1 changes from 8 to 4; only the collective's dim may change
    %0 = "ditron_task.reduce_scatter"(%x) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<16x8xf32>) -> tensor<4x4xf32>
    return %0 : tensor<4x4xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @reduce_scatter_dim_range(%x: tensor<16x8xf32>) -> tensor<16x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.reduce_scatter' op dim 5 is out of range for a tensor of rank 2
    %0 = "ditron_task.reduce_scatter"(%x) {axis = "tp", dim = 5 : i64, reduce = "sum"} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    return %0 : tensor<16x8xf32>
  }
}

// ----- ditron_task.all_reduce

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_reduce_reduce(%x: tensor<16x8xf32>) -> tensor<16x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_reduce' op has reduce 'mean'; expected one of: sum, max, min, prod
    %0 = "ditron_task.all_reduce"(%x) {axis = "tp", reduce = "mean"} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    return %0 : tensor<16x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_reduce_shape(%x: tensor<16x8xf32>) -> tensor<4x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_reduce' op output type tensor<4x8xf32> differs from input type tensor<16x8xf32>
    %0 = "ditron_task.all_reduce"(%x) {axis = "tp", reduce = "sum"} : (tensor<16x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// ----- ditron_task.all_to_all

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_to_all_split_dim_range(%x: tensor<16x8xf32>) -> tensor<16x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_to_all' op split_dim 2 is out of range for a tensor of rank 2
    %0 = "ditron_task.all_to_all"(%x) {axis = "tp", split_dim = 2 : i64, concat_dim = 0 : i64} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    return %0 : tensor<16x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_to_all_concat_dim_range(%x: tensor<16x8xf32>) -> tensor<16x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_to_all' op concat_dim -1 is out of range for a tensor of rank 2
    %0 = "ditron_task.all_to_all"(%x) {axis = "tp", split_dim = 0 : i64, concat_dim = -1 : i64} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    return %0 : tensor<16x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_to_all_other_dim(%x: tensor<16x8x2xf32>) -> tensor<4x32x4xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_to_all' op dim 2 changes from 2 to 4; only the collective's dim may change
    %0 = "ditron_task.all_to_all"(%x) {axis = "tp", split_dim = 0 : i64, concat_dim = 1 : i64} : (tensor<16x8x2xf32>) -> tensor<4x32x4xf32>
    return %0 : tensor<4x32x4xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_to_all_uneven(%x: tensor<10x8xf32>) -> tensor<10x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_to_all' op split dim 0 of size 10 does not divide evenly over axis 'tp' of size 4; pass split_sizes for uneven splits
    %0 = "ditron_task.all_to_all"(%x) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<10x8xf32>) -> tensor<10x8xf32>
    return %0 : tensor<10x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_to_all_output(%x: tensor<16x8xf32>) -> tensor<16x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_to_all' op output shape [16, 8] should be [4, 32]
    %0 = "ditron_task.all_to_all"(%x) {axis = "tp", split_dim = 0 : i64, concat_dim = 1 : i64} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    return %0 : tensor<16x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_to_all_split_sizes_dims(%x: tensor<16x8xf32>, %s: tensor<4xi32>) -> tensor<16x?xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_to_all' op with split_sizes, split_dim (0) must equal concat_dim (1): parts of uneven size can only be concatenated along the dim they were split on
    %0 = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 1 : i64} : (tensor<16x8xf32>, tensor<4xi32>) -> tensor<16x?xf32>
    return %0 : tensor<16x?xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_to_all_split_sizes_length(%x: tensor<16x8xf32>, %s: tensor<8xi32>) -> tensor<?x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_to_all' op split_sizes must be a tensor<4xi32> or tensor<4xi64> (one size per rank of axis 'tp'), got tensor<8xi32>
    %0 = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<16x8xf32>, tensor<8xi32>) -> tensor<?x8xf32>
    return %0 : tensor<?x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_to_all_split_sizes_float(%x: tensor<16x8xf32>, %s: tensor<4xf32>) -> tensor<?x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_to_all' op split_sizes must be a tensor<4xi32> or tensor<4xi64> (one size per rank of axis 'tp'), got tensor<4xf32>
    %0 = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<16x8xf32>, tensor<4xf32>) -> tensor<?x8xf32>
    return %0 : tensor<?x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_to_all_bounded_dynamic_capacity(%x: tensor<16x8xf32>, %s: tensor<4xi32>) -> (tensor<?x8xf32>, tensor<4xi32>) {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:14: error: 'ditron_task.all_to_all' op output dim 0 is its capacity and must be static in the bounded form (with recv_counts); the unbounded form has one result
    %0, %1 = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<16x8xf32>, tensor<4xi32>) -> (tensor<?x8xf32>, tensor<4xi32>)
    return %0, %1 : tensor<?x8xf32>, tensor<4xi32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_to_all_bounded_counts_type(%x: tensor<16x8xf32>, %s: tensor<4xi32>) -> (tensor<64x8xf32>, tensor<4xi64>) {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:14: error: 'ditron_task.all_to_all' op recv_counts must be a tensor<4xi32> (rows received from each rank of axis 'tp'), got tensor<4xi64>
    %0, %1 = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<16x8xf32>, tensor<4xi32>) -> (tensor<64x8xf32>, tensor<4xi64>)
    return %0, %1 : tensor<64x8xf32>, tensor<4xi64>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_to_all_counts_without_sizes(%x: tensor<16x8xf32>) -> (tensor<4x32xf32>, tensor<4xi32>) {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:14: error: 'ditron_task.all_to_all' op has a recv_counts result but no split_sizes: only parts of run-time sizes have received counts
    %0, %1 = "ditron_task.all_to_all"(%x) {axis = "tp", split_dim = 0 : i64, concat_dim = 1 : i64} : (tensor<16x8xf32>) -> (tensor<4x32xf32>, tensor<4xi32>)
    return %0, %1 : tensor<4x32xf32>, tensor<4xi32>
  }
}

// -----

// Zero-size tensors (issue 25: the cost model divided by zero, the GEMM template refused 'k' without a location).
func.func @matmul_zero_k(%x: tensor<128x0xbf16>, %w: tensor<0x64xbf16>) -> tensor<128x64xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 2]]:8: error: 'ditron_task.matmul' op operand 0 (tensor<128x0xbf16>) has size 0 in dim 1; ditron computes on non-empty tensors only (every dim >= 1)
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op operand 1 (tensor<0x64xbf16>) has size 0 in dim 0; ditron computes on non-empty tensors only (every dim >= 1)
  %0 = "ditron_task.matmul"(%x, %w) : (tensor<128x0xbf16>, tensor<0x64xbf16>) -> tensor<128x64xbf16>
  return %0 : tensor<128x64xbf16>
}

// -----

func.func @matmul_zero_n(%x: tensor<128x64xbf16>, %w: tensor<64x0xbf16>) -> tensor<128x0xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 2]]:8: error: 'ditron_task.matmul' op operand 1 (tensor<64x0xbf16>) has size 0 in dim 1; ditron computes on non-empty tensors only (every dim >= 1)
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op result 0 (tensor<128x0xbf16>) has size 0 in dim 1; ditron computes on non-empty tensors only (every dim >= 1)
  %0 = "ditron_task.matmul"(%x, %w) : (tensor<128x64xbf16>, tensor<64x0xbf16>) -> tensor<128x0xbf16>
  return %0 : tensor<128x0xbf16>
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @all_gather_zero_rows(%x: tensor<0x8xf32>) -> tensor<0x8xf32> {
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 2]]:10: error: 'ditron_task.all_gather' op operand 0 (tensor<0x8xf32>) has size 0 in dim 0; ditron computes on non-empty tensors only (every dim >= 1)
    // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_gather' op result 0 (tensor<0x8xf32>) has size 0 in dim 0; ditron computes on non-empty tensors only (every dim >= 1)
    %0 = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<0x8xf32>) -> tensor<0x8xf32>
    return %0 : tensor<0x8xf32>
  }
}

// -----

// A dim the kernels cannot index in 32 bits (issue 25: K = 2^40 compiled to a GEMM whose K loop never ran).
func.func @matmul_k_2_40(%x: tensor<128x1099511627776xbf16>, %w: tensor<1099511627776x128xbf16>) -> tensor<128x128xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 2]]:8: error: 'ditron_task.matmul' op operand 0 (tensor<128x1099511627776xbf16>) has size 1099511627776 in dim 1; ditron's kernels index a dim in 32 bits: at most 1073741824 (2^30) per dim
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op operand 1 (tensor<1099511627776x128xbf16>) has size 1099511627776 in dim 0; ditron's kernels index a dim in 32 bits: at most 1073741824 (2^30) per dim
  %0 = "ditron_task.matmul"(%x, %w) : (tensor<128x1099511627776xbf16>, tensor<1099511627776x128xbf16>) -> tensor<128x128xbf16>
  return %0 : tensor<128x128xbf16>
}

// -----

func.func @elementwise_rows_2_31(%x: tensor<2147483648x2xbf16>) -> tensor<2147483648x2xbf16> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 2]]:8: error: 'ditron_task.elementwise' op operand 0 (tensor<2147483648x2xbf16>) has size 2147483648 in dim 0; ditron's kernels index a dim in 32 bits: at most 1073741824 (2^30) per dim
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.elementwise' op result 0 (tensor<2147483648x2xbf16>) has size 2147483648 in dim 0; ditron's kernels index a dim in 32 bits: at most 1073741824 (2^30) per dim
  %0 = "ditron_task.elementwise"(%x) {fn = "relu"} : (tensor<2147483648x2xbf16>) -> tensor<2147483648x2xbf16>
  return %0 : tensor<2147483648x2xbf16>
}

// -----

// A bias is a [N] second operand of an [M, N] result, a row vector [M, 1], a scalar [1]; any other shape is an
// error (a per-row vector is [M, 1], not [M]: with M = N an [M] one would be ambiguous).
func.func @elementwise_bias_of_rows(%x: tensor<8x4xf32>, %b: tensor<8xf32>) -> tensor<8x4xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.elementwise' op operand shape tensor<8xf32> differs from result shape tensor<8x4xf32> (a second operand may be a [N] bias, an [M, 1] row vector or a [1] scalar of an [M, N] result)
  %0 = "ditron_task.elementwise"(%x, %b) {fn = "add"} : (tensor<8x4xf32>, tensor<8xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @elementwise_row_vector_of_other_rows(%x: tensor<8x4xf32>, %s: tensor<4x1xf32>) -> tensor<8x4xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.elementwise' op operand shape tensor<4x1xf32> differs from result shape tensor<8x4xf32>
  %0 = "ditron_task.elementwise"(%x, %s) {fn = "mul"} : (tensor<8x4xf32>, tensor<4x1xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @elementwise_scalar_first(%x: tensor<8x4xf32>, %s: tensor<1xf32>) -> tensor<8x4xf32> {
  // CHECK-NEXT: {{.*}}task_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.elementwise' op operand shape tensor<1xf32> differs from result shape tensor<8x4xf32>
  %0 = "ditron_task.elementwise"(%s, %x) {fn = "mul"} : (tensor<1xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
