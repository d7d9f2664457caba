// The GEMMs' element types, checked where the task program meets the kernels: bf16, f16 and fp8 e4m3 / e5m2 (on
// targets whose tensor cores take fp8: backends/<vendor>/facts.py) are tiled, fp8 with its own candidates (BLOCK_K
// 128, 256x128 tiles on 8 warps as two dots: precise accumulation's registers, kernels/gemm/configs.py fp8_tile_fits); an f32
// matmul, and an fp8 one for cuda:80, are refused at the op, not later in the template or in the backend's LLVM.
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{target=cuda:90}' | FileCheck %s --check-prefix=OK
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{target=cuda:80}' 2>&1 | FileCheck %s --check-prefix=A100
// RUN: not ditron-opt %S/Inputs/dtypes_bad.mlir --split-input-file --pass-pipeline='ditron-tile{target=cuda:90}' 2>&1 | FileCheck %S/Inputs/dtypes_bad.mlir
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @bf16(%a: tensor<256x128xbf16>, %b: tensor<128x256xbf16>) -> tensor<256x256xbf16> attributes {ditron.view = "local"} {
    // OK: "ditron_task.matmul"{{.*}}kind = "matmul"
    %c = "ditron_task.matmul"(%a, %b) : (tensor<256x128xbf16>, tensor<128x256xbf16>) -> tensor<256x256xbf16>
    return %c : tensor<256x256xbf16>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @fp8(%a: tensor<256x128xf8E4M3FN>, %b: tensor<128x256xf8E4M3FN>) -> tensor<256x256xbf16> attributes {ditron.view = "local"} {
    // OK: "ditron_task.matmul"{{.*}}block_k = 128 : i64{{.*}}kind = "matmul"{{.*}}f8E4M3FN
    // A100: dtypes.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.matmul' op has f8E4M3FN operands, which need tensor cores that take fp8; cuda:80 has none (fp8 GEMMs need cuda:90 or hip:gfx950; use bf16 or f16 here)
    %c = "ditron_task.matmul"(%a, %b) : (tensor<256x128xf8E4M3FN>, tensor<128x256xf8E4M3FN>) -> tensor<256x256xbf16>
    return %c : tensor<256x256xbf16>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @e5m2(%a: tensor<4096x4096xf8E5M2>, %b: tensor<4096x4096xf8E5M2>) -> tensor<4096x4096xbf16> attributes {ditron.view = "local"} {
    // OK: "ditron_task.matmul"{{.*}}block_k = 128 : i64, block_m = 128 : i64, block_n = 128 : i64{{.*}}kind = "matmul"{{.*}}num_stages = 3 : i64, num_warps = 4 : i64{{.*}}f8E5M2
    // A100: dtypes.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.matmul' op has f8E5M2 operands, which need tensor cores that take fp8; cuda:80 has none (fp8 GEMMs need cuda:90 or hip:gfx950; use bf16 or f16 here)
    %c = "ditron_task.matmul"(%a, %b) : (tensor<4096x4096xf8E5M2>, tensor<4096x4096xf8E5M2>) -> tensor<4096x4096xbf16>
    return %c : tensor<4096x4096xbf16>
  }
}

// -----

// fast_accum (torch's use_fast_accum): no partial accumulator, so the model may take 128x256 (fast accumulation's
// own candidates)
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @fast_accum(%a: tensor<4096x4096xf8E4M3FN>, %b: tensor<4096x4096xf8E4M3FN>) -> tensor<4096x4096xbf16> attributes {ditron.view = "local"} {
    // OK: "ditron_task.matmul"{{.*}}block_k = 128 : i64, block_m = 128 : i64, block_n = 256 : i64{{.*}}fast_accum = true{{.*}}f8E4M3FN
    // A100: dtypes.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.matmul' op has f8E4M3FN operands, which need tensor cores
    %c = "ditron_task.matmul"(%a, %b) {fast_accum = true} : (tensor<4096x4096xf8E4M3FN>, tensor<4096x4096xf8E4M3FN>) -> tensor<4096x4096xbf16>
    return %c : tensor<4096x4096xbf16>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @grouped(%a: tensor<64x32xbf16>, %b: tensor<4x32x16xbf16>, %g: tensor<4xi32>) -> tensor<64x16xbf16> attributes {ditron.view = "local"} {
    // OK: "ditron_task.grouped_matmul"{{.*}}kind = "grouped_matmul"
    %c = "ditron_task.grouped_matmul"(%a, %b, %g) : (tensor<64x32xbf16>, tensor<4x32x16xbf16>, tensor<4xi32>) -> tensor<64x16xbf16>
    return %c : tensor<64x16xbf16>
  }
}
