// Input of ../dtypes.mlir: matmuls no GEMM template takes.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @f32(%a: tensor<256x128xf32>, %b: tensor<128x256xf32>) -> tensor<256x256xf32> attributes {ditron.view = "local"} {
    // CHECK: dtypes_bad.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.matmul' op has f32 operands, which its GEMM template does not take (it takes bf16, f16, f8E4M3FN, f8E5M2); cast the operands to bf16 or f16 first
    %c = "ditron_task.matmul"(%a, %b) : (tensor<256x128xf32>, tensor<128x256xf32>) -> tensor<256x256xf32>
    return %c : tensor<256x256xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @grouped_f32(%a: tensor<64x32xf32>, %b: tensor<4x32x16xf32>, %g: tensor<4xi32>) -> tensor<64x16xf32> attributes {ditron.view = "local"} {
    // CHECK: dtypes_bad.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.grouped_matmul' op has f32 operands, which its GEMM template does not take (it takes bf16, f16); cast the operands to bf16 or f16 first
    %c = "ditron_task.grouped_matmul"(%a, %b, %g) : (tensor<64x32xf32>, tensor<4x32x16xf32>, tensor<4xi32>) -> tensor<64x16xf32>
    return %c : tensor<64x16xf32>
  }
}
