// RUN: not ditron-opt %s --split-input-file --pass-pipeline=ditron-fuse-overlap 2>&1 | FileCheck %s

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @bad_kind(%x: tensor<4x8xf32>) -> tensor<8x8xf32> {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-fuse-overlap: 'ditron_task.all_gather' op 'ditron.overlap' kind 'ag_gemm' is unknown (kinds: ag_matmul, matmul_rs, matmul_ar, a2a_grouped_matmul)
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.overlap = {group = 0 : i64, kind = "ag_gemm", role = "producer"}} : (tensor<4x8xf32>) -> tensor<8x8xf32>
    return %g : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @lonely(%x: tensor<4x8xf32>) -> tensor<8x8xf32> {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-fuse-overlap: 'ditron_task.all_gather' op is the producer of overlap group 3, which has no consumer
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.overlap = {group = 3 : i64, kind = "ag_matmul", role = "producer"}} : (tensor<4x8xf32>) -> tensor<8x8xf32>
    return %g : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @unrelated(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}} : (tensor<4x8xf32>) -> tensor<8x8xf32>
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-fuse-overlap: 'ditron_task.matmul' op is the consumer of overlap group 0 but does not use its producer's result
    %y = "ditron_task.matmul"(%w, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    return %g, %y : tensor<8x8xf32>, tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @not_a_dict(%x: tensor<4x8xf32>) -> tensor<8x8xf32> {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-fuse-overlap: 'ditron_task.all_gather' op 'ditron.overlap' must be a dictionary
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.overlap = 3 : i64} : (tensor<4x8xf32>) -> tensor<8x8xf32>
    return %g : tensor<8x8xf32>
  }
}
