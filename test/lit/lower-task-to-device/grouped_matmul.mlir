// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-tile,ditron-lower-task-to-device | FileCheck %s
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{block-m=32 block-n=64 num-warps=2}' | FileCheck %s --check-prefix=OPT
// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-default | FileCheck %s --check-prefix=CORE

// grouped_matmul (MoE experts): one launch of the grouped_gemm template over a, b, the group sizes and c; the
// tile from the cost model (cost_model.best_grouped_gemm_config: here 25 rows an expert, 64-row tiles, which pad
// least; many rows an expert: 128x256 of 8 warps); a persistent grid of at most the tiles any routing gives
// ((2 row slots + 4 groups + 1) x 1 here); TMA loads, the rows of a and b being 16-byte multiples.
module attributes {ditron.mesh = {axes = ["ep"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @experts(%arg0: memref<100x64xbf16> {ditron.io = "in"}, %arg1: memref<4x64x48xbf16> {ditron.io = "in"}, %arg2: memref<4xi32> {ditron.io = "in"}, %arg3: memref<100x48xbf16> {ditron.io = "out"}
  // CHECK: "ditron_device.launch"(%arg0, %arg1, %arg2, %arg3) {ditron.lane = "compute", ditron.role = "grouped_gemm", grid = array<i64: 7, 1, 1>, kernel = @grouped_gemm
  // CHECK-NOT: ditron_device.barrier
  // CHECK: func.func private @grouped_gemm({{.*}}) attributes {ditron.kernel = {args = ["a", "b", "sizes", "c"], b_groups = 4 : i64, block_k = 128 : i64, block_m = 64 : i64, block_n = 128 : i64, dtype = "bf16", e = 4 : i64, grid = 7 : i64, group_m = 8 : i64, k = 64 : i64, loads = "tma", n = 48 : i64, name = "grouped_gemm", num_stages = 4 : i64, num_warps = 4 : i64, out_dtype = "bf16", sizes_dtype = "i32", t = 100 : i64, template = "grouped_gemm"}}
  // OPT: ditron.tiling = {block_k = 128 : i64, block_m = 32 : i64, block_n = 64 : i64, est_us = {{.*}}, kind = "grouped_matmul", num_stages = 4 : i64, num_warps = 2 : i64
  // CORE: "tt.func"() ({
  // CORE: "tt.dot"
  // CORE: }) {arg_attrs = {{.*}}sym_name = "grouped_gemm"
  func.func @experts(%x: tensor<100x64xbf16>, %w: tensor<4x64x48xbf16>, %g: tensor<4xi32>) -> tensor<100x48xbf16> attributes {ditron.view = "local"} {
    %y = "ditron_task.grouped_matmul"(%x, %w, %g) : (tensor<100x64xbf16>, tensor<4x64x48xbf16>, tensor<4xi32>) -> tensor<100x48xbf16>
    return %y : tensor<100x48xbf16>
  }
}

// -----

// Many rows an expert, i64 sizes: the big tile.
module attributes {ditron.mesh = {axes = ["ep"], shape = array<i64: 1>}} {
  // CHECK-LABEL: func.func @prefill
  // CHECK: ditron.kernel = {args = ["a", "b", "sizes", "c"], b_groups = 8 : i64, block_k = 64 : i64, block_m = 128 : i64, block_n = 256 : i64{{.*}}num_warps = 8 : i64{{.*}}sizes_dtype = "i64", t = 4096 : i64
  func.func @prefill(%x: tensor<4096x64xbf16>, %w: tensor<8x64x512xbf16>, %g: tensor<8xi64>) -> tensor<4096x512xbf16> {
    %y = "ditron_task.grouped_matmul"(%x, %w, %g) : (tensor<4096x64xbf16>, tensor<8x64x512xbf16>, tensor<8xi64>) -> tensor<4096x512xbf16>
    return %y : tensor<4096x512xbf16>
  }
}

// -----

// An expert-parallel rank's first MoE GEMM: 8 groups (2 sources x 4 experts) cycling over 4 experts' weights
// (b_groups = 4), silu(gate) * up fused (gated): the result [4096, 256] of w [4, 64, 2 * 256], the model's
// 128x256 tile halved to 128 output columns (a gate and an up accumulator).
module attributes {ditron.mesh = {axes = ["ep"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @gate_up
  // CHECK: ditron.kernel = {args = ["a", "b", "sizes", "c"], b_groups = 4 : i64, block_k = 64 : i64, block_m = 128 : i64, block_n = 128 : i64{{.*}}e = 8 : i64, gated = "silu"{{.*}}n = 256 : i64
  func.func @gate_up(%x: tensor<4096x64xbf16>, %w: tensor<4x64x512xbf16>, %g: tensor<8xi32>) -> tensor<4096x256xbf16> attributes {ditron.view = "local"} {
    %y = "ditron_task.grouped_matmul"(%x, %w, %g) {gated = "silu"} : (tensor<4096x64xbf16>, tensor<4x64x512xbf16>, tensor<8xi32>) -> tensor<4096x256xbf16>
    return %y : tensor<4096x256xbf16>
  }
}
