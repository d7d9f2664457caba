// B in nn.Linear's [N, K] layout (transpose_b): partitioning maps B's dim 0 to N and dim 1 to K, and keeps the
// attribute on the local matmul; the GEMM kernel then reads B [N/W, K] in place (b_trans, ldb = K), no copy.
// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-partition | FileCheck %s
// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-device | FileCheck %s --check-prefix=DEV
// RUN: not ditron-opt %S/Inputs/transpose_b_bad.mlir 2>&1 | FileCheck %S/Inputs/transpose_b_bad.mlir

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @ag_gemm
  // CHECK: "ditron_task.all_gather"
  // CHECK: "ditron_task.matmul"(%{{.*}}, %arg1) {transpose_b = true} : (tensor<128x64xbf16>, tensor<48x64xbf16>) -> tensor<128x48xbf16>
  // DEV-LABEL: func.func @ag_gemm
  // DEV: b_trans = true{{.*}}ldb = 64 : i64{{.*}}n = 48 : i64
  func.func @ag_gemm(%x: tensor<128x64xbf16> {ditron.sharding = {dims = [["tp"], []]}},
                     %w: tensor<96x64xbf16> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<128x96xbf16> {ditron.sharding = {dims = [[], ["tp"]]}}) {
    %y = "ditron_task.matmul"(%x, %w) {transpose_b = true} : (tensor<128x64xbf16>, tensor<96x64xbf16>) -> tensor<128x96xbf16>
    return %y : tensor<128x96xbf16>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // K sharded: B [N, K] splits its dim 1, and the partial sums are reduce-scattered.
  // CHECK-LABEL: func.func @gemm_rs
  // CHECK: "ditron_task.matmul"(%arg0, %arg1) {transpose_b = true} : (tensor<64x32xbf16>, tensor<96x32xbf16>) -> tensor<64x96xbf16>
  // CHECK: "ditron_task.reduce_scatter"
  // DEV-LABEL: func.func @gemm_rs
  // DEV: b_trans = true{{.*}}ldb = 32 : i64
  func.func @gemm_rs(%x: tensor<64x64xbf16> {ditron.sharding = {dims = [[], ["tp"]]}},
                     %w: tensor<96x64xbf16> {ditron.sharding = {dims = [[], ["tp"]]}})
      -> (tensor<64x96xbf16> {ditron.sharding = {dims = [["tp"], []]}}) {
    %y = "ditron_task.matmul"(%x, %w) {transpose_b = true} : (tensor<64x64xbf16>, tensor<96x64xbf16>) -> tensor<64x96xbf16>
    return %y : tensor<64x96xbf16>
  }
}
