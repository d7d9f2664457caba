// RUN: not ditron-opt %s --split-input-file --pass-pipeline=ditron-partition 2>&1 | FileCheck %s --check-prefix=PART
// RUN: not ditron-opt %s --split-input-file --pass-pipeline=ditron-device 2>&1 | FileCheck %s --check-prefix=LOWER
// ditron-partition cannot split a replicated operand to the rule's sharding (a rank-dependent slice): a located
// error. ditron-lower-task-to-device lowers a custom op only when this process registered its kernel program
// (ditron.register_op): ditron-opt registers none.

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @needs_a_slice(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    // PART: {{.*}}custom_passes_invalid.mlir:[[# @LINE + 1]]:10: error: ditron-partition: 'ditron_task.custom' op operand 0 (the kernel program 'k' takes it {dims = {{\[\["tp"\], \[\]\]}}}): dim 0 is replicated but must be split over 'tp'
    %y = "ditron_task.custom"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>, kernel = "k", axis = "tp", in_shardings = [{dims = [["tp"], []]}],
                                   out_shardings = [{dims = [[], []]}], params = {}} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %y : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @unregistered(%x: tensor<8x8xf32> {ditron.sharding = {dims = [["tp"], []]}}) -> tensor<8x8xf32> {
    // LOWER: {{.*}}custom_passes_invalid.mlir:[[# @LINE + 1]]:10: error: ditron-lower-task-to-device: 'ditron_task.custom' op no kernel program 'k' is registered in this process (ditron.register_op; registered: none): register it before lowering
    %y = "ditron_task.custom"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>, kernel = "k", axis = "tp", in_shardings = [{dims = [["tp"], []]}],
                                   out_shardings = [{dims = [[], []]}], params = {}} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %y : tensor<8x8xf32>
  }
}
