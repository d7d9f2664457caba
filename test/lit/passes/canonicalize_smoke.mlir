// RUN: ditron-opt %s --pass-pipeline=ditron-verify,ditron-canonicalize | FileCheck %s

module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 1, 4>}} {
  // CHECK-LABEL: func.func @size_one_axis
  // CHECK-NOT: ditron_task.all_gather
  // CHECK: return %arg0
  func.func @size_one_axis(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %y = "ditron_task.all_gather"(%x) {axis = "dp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}
