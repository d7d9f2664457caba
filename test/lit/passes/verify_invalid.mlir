// ditron-verify as a pass, with the driver's own verification off: it reports every broken rule of the module,
// one located line each, in program order, and fails.
// RUN: not ditron-opt %s --verify-each=false --pass-pipeline=ditron-verify 2>&1 | FileCheck %s
// Without any pass the driver's verification after parsing reports the same.
// RUN: not ditron-opt %s 2>&1 | FileCheck %s
// With --verify-each=false and no pass, nothing checks the ditron rules: the module prints as parsed.
// RUN: ditron-opt %s --verify-each=false | FileCheck %s --check-prefix=NOVERIFY

// NOVERIFY: "ditron_task.all_gather"(%arg0) {axis = "tp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<8x8xf32>

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @two_errors(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>) -> tensor<8x8xf32> {
    // CHECK: {{.*}}verify_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.all_gather' op output dim 0 is 8; expected input dim 4 x axis 'tp' size 4 = 16
    %0 = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<8x8xf32>
    // CHECK-NEXT: {{.*}}verify_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.matmul' op contraction sizes differ: lhs tensor<8x8xf32> has K = 8, rhs tensor<16x8xf32> has K = 16
    %1 = "ditron_task.matmul"(%0, %w) : (tensor<8x8xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
  // CHECK-NEXT: {{.*}}verify_invalid.mlir:[[# @LINE + 1]]:3: error: 'func.func' op argument 0: mesh axis 'dp' is not in the mesh (axes: tp)
  func.func @bad_sharding(%x: tensor<8xf32> {ditron.sharding = {dims = [["dp"]]}}) -> tensor<8xf32> {
    return %x : tensor<8xf32>
  }
  // CHECK-NOT: error
}
