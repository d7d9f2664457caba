// RUN: not ditron-opt %s --split-input-file 2>&1 | FileCheck %s
// Negative cases of ditron_task.custom (dialects/verify.py): the sharding rule names one sharding per operand
// and result, over the op's mesh axis only, unpadded, fitting the values; the kernel is a name.

module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 2>}} {
  func.func @arity(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    // CHECK: {{.*}}custom_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.custom' op 'in_shardings' gives 2 sharding(s) for 1 operand(s); the sharding rule names one per operand
    %y = "ditron_task.custom"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>, kernel = "k", axis = "tp", in_shardings = [{dims = [[], []]}, {dims = [[], []]}],
                                   out_shardings = [{dims = [[], []]}], params = {}} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %y : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 2>}} {
  func.func @other_axis(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    // CHECK-NEXT: {{.*}}custom_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.custom' op out_shardings[0] (result 0) uses mesh axis 'dp'; the kernel program runs over axis 'tp' only
    %y = "ditron_task.custom"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>, kernel = "k", axis = "tp", in_shardings = [{dims = [["tp"], []]}],
                                   out_shardings = [{dims = [["dp"], []]}], params = {}} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %y : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @not_dividing(%x: tensor<10x8xf32>) -> tensor<10x8xf32> {
    // CHECK-NEXT: {{.*}}custom_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.custom' op in_shardings[0] (operand 0): dim 0 of size 10 does not divide evenly into 4 shards
    %y = "ditron_task.custom"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>, kernel = "k", axis = "tp", in_shardings = [{dims = [["tp"], []]}],
                                   out_shardings = [{dims = [[], []]}], params = {}} : (tensor<10x8xf32>) -> tensor<10x8xf32>
    return %y : tensor<10x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @unknown_axis_and_bad_name(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    // CHECK-NEXT: {{.*}}custom_invalid.mlir:[[# @LINE + 2]]:10: error: 'ditron_task.custom' op kernel 'no good' is not a name (letters, digits, '_' and '.')
    // CHECK-NEXT: {{.*}}custom_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.custom' op mesh axis 'dp' is not in the mesh (axes: tp)
    %y = "ditron_task.custom"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>, kernel = "no good", axis = "dp", in_shardings = [{dims = [[], []]}],
                                   out_shardings = [{dims = [[], []]}], params = {}} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %y : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @padded(%x: tensor<10x8xf32>) -> tensor<10x8xf32> {
    // CHECK-NEXT: {{.*}}custom_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.custom' op in_shardings[0] (operand 0) is padded; a kernel program takes whole shards (sizes the axis divides)
    %y = "ditron_task.custom"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>, kernel = "k", axis = "tp", in_shardings = [{dims = [["tp"], []], padded = true}],
                                   out_shardings = [{dims = [[], []]}], params = {}} : (tensor<10x8xf32>) -> tensor<10x8xf32>
    return %y : tensor<10x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @not_an_array(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    // CHECK-NEXT: {{.*}}custom_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.custom' op expected base attribute 'builtin.array' but got 'builtin.dictionary'
    %y = "ditron_task.custom"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>, kernel = "k", axis = "tp", in_shardings = [{dims = [[], []]}],
                                   out_shardings = {dims = [[], []]}, params = {}} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %y : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @missing_params(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    // CHECK-NEXT: {{.*}}custom_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.custom' op {{.*}}params
    %y = "ditron_task.custom"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>, kernel = "k", axis = "tp", in_shardings = [{dims = [[], []]}],
                                   out_shardings = [{dims = [[], []]}]} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %y : tensor<8x8xf32>
  }
}
