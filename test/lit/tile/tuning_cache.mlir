// The tuning cache's winner over the model's choice (ditron tune writes the file; its key: target, GPU, dtype,
// world, kind, SM budget, M rounded up to a power of two, N, K).
// RUN: ditron-opt %s --pass-pipeline='ditron-tile{tuning-cache=%S/Inputs/tuning.json}' | FileCheck %s --check-prefix=TUNED
// RUN: ditron-opt %s --pass-pipeline='ditron-tile{tuning-cache=%S/Inputs/tuning.json tuning-device=other}' | FileCheck %s --check-prefix=MODEL
// RUN: ditron-opt %s --pass-pipeline='ditron-tile{tuning-cache=off}' | FileCheck %s --check-prefix=MODEL
// RUN: env DITRON_TUNING_CACHE=%S/Inputs/tuning.json ditron-opt %s --pass-pipeline='ditron-tile' | FileCheck %s --check-prefix=TUNED
// RUN: env DITRON_TUNING_CACHE=%S/Inputs/tuning_bad.json ditron-opt %s --pass-pipeline='ditron-tile' | FileCheck %s --check-prefix=MODEL
// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{tuning-cache=%S/Inputs/tuning_bad.json}' 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{tuning-cache=%S/Inputs/missing.json}' 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: ditron-opt %s --pass-pipeline='ditron-tile{gemm-config=64x128x64-w4-s8-g8}' | FileCheck %s --check-prefix=PINNED
// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{gemm-config=64x128}' 2>&1 | FileCheck %s --check-prefix=SYNTAX
// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{gemm-config=256x256x128-w8-s8-g8}' 2>&1 | FileCheck %s --check-prefix=SMEM
// TUNED: block_k = 64 : i64, block_m = 128 : i64, block_n = 128 : i64, config_from = "tuning-cache"{{.*}}num_stages = 6 : i64, num_warps = 4 : i64, persistent = false
// MODEL-NOT: config_from
// MODEL: block_m = 128 : i64, block_n = 256 : i64
// BAD: tuning_cache.mlir:[[# @LINE + 5]]:1: error: ditron-tile: 'builtin.module' op tuning-cache={{.*}}tuning_bad.json: tuning cache {{.*}}entry 'x' has no str 'target'
// MISSING: error: ditron-tile: 'builtin.module' op tuning-cache={{.*}}missing.json: no such file
// PINNED: block_m = 64 : i64, block_n = 128 : i64, config_from = "gemm-config"{{.*}}num_stages = 8 : i64
// SYNTAX: error: pass 'ditron-tile': '64x128' is not a GEMM config: write BMxBNxBK-wW-sS-gG
// SMEM: tuning_cache.mlir:[[# @LINE + 4]]:10: error: ditron-tile: 'ditron_task.matmul' op gemm-config=256x256x128-w8-s8-g8 needs 1048576 bytes of shared memory; cuda:90 has 232448
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @mm(%a: tensor<3000x3000xbf16>, %b: tensor<3000x5000xbf16>) -> tensor<3000x5000xbf16>
      attributes {ditron.view = "local"} {
    %c = "ditron_task.matmul"(%a, %b) : (tensor<3000x3000xbf16>, tensor<3000x5000xbf16>) -> tensor<3000x5000xbf16>
    return %c : tensor<3000x5000xbf16>
  }
}
