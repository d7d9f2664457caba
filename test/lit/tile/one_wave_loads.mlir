// A matmul alone whose grid is one wave of programs (one tile each) loads its operands by TMA where each program's
// K loop is long and the GEMM bound by math (cost_model.one_wave_loads): 257 x 2048 x 7168 on 64x128 tiles; through
// pointers where the programs are short (200 x 7168 x 2048: 32 K steps). The tiling records loads, the GEMM record
// takes it. loads= and split-k= pin the choices; a persistent grid keeps the template's rule (no loads field).
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{tuning-cache=off}' | FileCheck %s --check-prefix=TILE
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{tuning-cache=off},ditron-lower-task-to-device' | FileCheck %s
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{tuning-cache=off loads=pointer split-k=1},ditron-lower-task-to-device' | FileCheck %s --check-prefix=PINNED

// TILE-LABEL: func.func @long_k
// TILE: ditron.tiling = {block_k = 64 : i64, block_m = 64 : i64, block_n = 128 : i64{{.*}}loads = "tma", num_stages = 8 : i64{{.*}}persistent = false
// CHECK-LABEL: func.func @long_k
// CHECK: func.func private @gemm({{.*}}block_m = 64 : i64{{.*}}loads = "tma"{{.*}}persistent = false{{.*}}split_k = 1 : i64
// PINNED-LABEL: func.func @long_k
// PINNED: func.func private @gemm({{.*}}loads = "pointer"{{.*}}split_k = 1 : i64
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @long_k(%a: tensor<257x7168xbf16>, %b: tensor<7168x2048xbf16>) -> tensor<257x2048xbf16> attributes {ditron.view = "local"} {
    %c = "ditron_task.matmul"(%a, %b) : (tensor<257x7168xbf16>, tensor<7168x2048xbf16>) -> tensor<257x2048xbf16>
    return %c : tensor<257x2048xbf16>
  }
}

// -----

// TILE-LABEL: func.func @short_k
// TILE: ditron.tiling = {{{.*}}loads = "pointer"{{.*}}persistent = false
// CHECK-LABEL: func.func @short_k
// CHECK: func.func private @gemm({{.*}}loads = "pointer"
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @short_k(%a: tensor<200x2048xbf16>, %b: tensor<2048x7168xbf16>) -> tensor<200x7168xbf16> attributes {ditron.view = "local"} {
    %c = "ditron_task.matmul"(%a, %b) : (tensor<200x2048xbf16>, tensor<2048x7168xbf16>) -> tensor<200x7168xbf16>
    return %c : tensor<200x7168xbf16>
  }
}

// -----

// TILE-LABEL: func.func @persistent
// TILE-NOT: loads =
// TILE: ditron.tiling = {{{.*}}persistent = true
// CHECK-LABEL: func.func @persistent
// CHECK: func.func private @gemm({{.*}}loads = "tma"{{.*}}persistent = true
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @persistent(%a: tensor<4096x4096xbf16>, %b: tensor<4096x4096xbf16>) -> tensor<4096x4096xbf16> attributes {ditron.view = "local"} {
    %c = "ditron_task.matmul"(%a, %b) : (tensor<4096x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<4096x4096xbf16>
    return %c : tensor<4096x4096xbf16>
  }
}
