// Input of ../transpose_b.mlir: with transpose_b, B is [N, K]; a B of [K, N] is a contraction mismatch, and the
// attribute must be a boolean.
func.func @bad(%x: tensor<16x32xbf16>, %w: tensor<32x64xbf16>) -> tensor<16x64xbf16> {
  // CHECK: transpose_b_bad.mlir:[[# @LINE + 2]]:8: error: 'ditron_task.matmul' op contraction sizes differ: lhs tensor<16x32xbf16> has K = 32, rhs tensor<32x64xbf16> has K = 64 (transpose_b: rhs is [N, K])
  // CHECK: transpose_b_bad.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op result tensor<16x64xbf16> should be 16x32
  %0 = "ditron_task.matmul"(%x, %w) {transpose_b = true} : (tensor<16x32xbf16>, tensor<32x64xbf16>) -> tensor<16x64xbf16>
  // CHECK: transpose_b_bad.mlir:[[# @LINE + 1]]:8: error: 'ditron_task.matmul' op attribute 'transpose_b' must be a boolean: expected a boolean, got 1 : i64
  %1 = "ditron_task.matmul"(%x, %w) {transpose_b = 1 : i64} : (tensor<16x32xbf16>, tensor<32x64xbf16>) -> tensor<16x64xbf16>
  return %0 : tensor<16x64xbf16>
}
