// RUN: not ditron-opt %s --split-input-file --pass-pipeline=ditron-lower-task-to-device 2>&1 | FileCheck %s
// RUN: not ditron-opt %s --pass-pipeline='ditron-lower-task-to-device{chunk-rows=4}' 2>&1 | FileCheck %s --check-prefix=OPT
// RUN: not ditron-opt %s --pass-pipeline='ditron-lower-task-to-device{end-barrier=never}' 2>&1 | FileCheck %s --check-prefix=END
// OPT: error: pass 'ditron-lower-task-to-device' has no option 'chunk-rows' (options: end-barrier)
// END: error: pass 'ditron-lower-task-to-device': end-barrier must be one of auto, always, got 'never'

// Not tiled yet.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @untiled(%x: tensor<4x8xbf16>) -> tensor<8x8xbf16> attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-lower-task-to-device: 'ditron_task.all_gather' op has no 'ditron.tiling'; run ditron-tile before ditron-lower-task-to-device
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<4x8xbf16>) -> tensor<8x8xbf16>
    return %g : tensor<8x8xbf16>
  }
}

// -----

// Device IR handed to a task-level pass.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @device(%e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-lower-task-to-device: 'ditron_device.num_ranks' op is device-level IR, but this pass transforms task-level IR in the local view; run it before ditron-lower-task-to-device
    %w = "ditron_device.num_ranks"() : () -> index
    return
  }
}

// -----

// The two ops of a fused pair must agree on the tiling.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @disagree(%x: tensor<64x32xbf16>, %w: tensor<32x32xbf16>) -> tensor<128x32xbf16> attributes {ditron.view = "local"} {
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}, ditron.tiling = {kind = "ag_matmul", target = "cuda:90", world = 2 : i64, chunk_rows = 64 : i64, shard_rows = 64 : i64, block_m = 64 : i64, block_n = 32 : i64, block_k = 32 : i64, engine = "copy_engine"}} : (tensor<64x32xbf16>) -> tensor<128x32xbf16>
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-lower-task-to-device: 'ditron_task.matmul' op and its producer in overlap group 0 carry different 'ditron.tiling'; run ditron-tile again
    %y = "ditron_task.matmul"(%g, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}, ditron.tiling = {kind = "ag_matmul", target = "cuda:90", world = 2 : i64, chunk_rows = 32 : i64, shard_rows = 64 : i64, block_m = 64 : i64, block_n = 32 : i64, block_k = 32 : i64, engine = "copy_engine"}} : (tensor<128x32xbf16>, tensor<32x32xbf16>) -> tensor<128x32xbf16>
    return %y : tensor<128x32xbf16>
  }
}

// -----

// A chunking the GEMM's per-tile waits cannot express (chunks must divide the shard).
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @ragged(%x: tensor<64x32xbf16>, %w: tensor<32x32xbf16>) -> tensor<128x32xbf16> attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-lower-task-to-device: 'ditron_task.all_gather' op chunk_rows 48 does not divide the shard's 64 rows; the GEMM's per-tile waits need uniform chunks (run ditron-tile, which picks a divisor)
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}, ditron.tiling = {kind = "ag_matmul", target = "cuda:90", world = 2 : i64, chunk_rows = 48 : i64, shard_rows = 64 : i64, block_m = 64 : i64, block_n = 32 : i64, block_k = 32 : i64, engine = "copy_engine"}} : (tensor<64x32xbf16>) -> tensor<128x32xbf16>
    %y = "ditron_task.matmul"(%g, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}, ditron.tiling = {kind = "ag_matmul", target = "cuda:90", world = 2 : i64, chunk_rows = 48 : i64, shard_rows = 64 : i64, block_m = 64 : i64, block_n = 32 : i64, block_k = 32 : i64, engine = "copy_engine"}} : (tensor<128x32xbf16>, tensor<32x32xbf16>) -> tensor<128x32xbf16>
    return %y : tensor<128x32xbf16>
  }
}

// -----

// Communication over two mesh axes in one program.
module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 2>}} {
  // CHECK: errors.mlir:[[# @LINE + 1]]:3: error: ditron-lower-task-to-device: 'func.func' op communicates over several mesh axes (dp, tp); a device program runs over one axis for now
  func.func @two_axes(%x: tensor<4x8xbf16>) -> tensor<16x8xbf16> attributes {ditron.view = "local"} {
    %a = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.tiling = {kind = "all_gather", target = "cuda:90", world = 2 : i64, chunk_rows = 4 : i64, shard_rows = 4 : i64, engine = "copy_engine"}} : (tensor<4x8xbf16>) -> tensor<8x8xbf16>
    %b = "ditron_task.all_gather"(%a) {axis = "dp", dim = 0 : i64, ditron.tiling = {kind = "all_gather", target = "cuda:90", world = 2 : i64, chunk_rows = 8 : i64, shard_rows = 8 : i64, engine = "copy_engine"}} : (tensor<8x8xbf16>) -> tensor<16x8xbf16>
    return %b : tensor<16x8xbf16>
  }
}

// -----

// A reduction the reduce template cannot do.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @max_scatter(%x: tensor<8x8xbf16>) -> tensor<4x8xbf16> attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-lower-task-to-device: 'ditron_task.reduce_scatter' op reduces with 'max'; the reduce template sums
    %y = "ditron_task.reduce_scatter"(%x) {axis = "tp", dim = 0 : i64, reduce = "max", ditron.tiling = {kind = "reduce_scatter", target = "cuda:90", world = 2 : i64, chunk_rows = 4 : i64, shard_rows = 4 : i64, engine = "sm", comm_sms = 8 : i64}} : (tensor<8x8xbf16>) -> tensor<4x8xbf16>
    return %y : tensor<4x8xbf16>
  }
}

// -----

// An all_to_all of parts of run-time sizes, unbounded.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @a2a(%x: tensor<8x8xbf16>, %s: tensor<2xi32>) -> tensor<?x8xbf16> attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-lower-task-to-device: 'ditron_task.all_to_all' op with split_sizes and one result of a dynamic dim is unbounded, which has no device-level lowering: give the output a capacity (the bounded form: results tensor<capacity x ...> and recv_counts tensor<W x i32>)
    %y = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64, ditron.tiling = {kind = "all_to_all", target = "cuda:90"}} : (tensor<8x8xbf16>, tensor<2xi32>) -> tensor<?x8xbf16>
    return %y : tensor<?x8xbf16>
  }
}

// -----

// A tiling made for another world size.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @stale(%x: tensor<4x8xbf16>) -> tensor<16x8xbf16> attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-lower-task-to-device: 'ditron_task.all_gather' op was tiled for 2 rank(s) but mesh axis 'tp' has 4; run ditron-tile again
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.tiling = {kind = "all_gather", target = "cuda:90", world = 2 : i64, chunk_rows = 4 : i64, shard_rows = 4 : i64, engine = "copy_engine"}} : (tensor<4x8xbf16>) -> tensor<16x8xbf16>
    return %g : tensor<16x8xbf16>
  }
}

// -----

// A malformed tiling.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @malformed(%x: tensor<4x8xbf16>) -> tensor<4x8xbf16> attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-lower-task-to-device: 'ditron_task.elementwise' op 'ditron.tiling' field 'block' must be an int, got "big"; run ditron-tile to write it
    %y = "ditron_task.elementwise"(%x) {fn = "relu", ditron.tiling = {kind = "elementwise", target = "cuda:90", block = "big"}} : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
    return %y : tensor<4x8xbf16>
  }
}

// -----

// The bounded all_to_all of run-time sizes: i64 sizes are not lowered (ditron.ops converts them on the device).
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @a2a_i64(%x: tensor<8x8xbf16>, %s: tensor<2xi64>) -> (tensor<16x8xbf16>, tensor<2xi32>) attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:14: error: ditron-lower-task-to-device: 'ditron_task.all_to_all' op split_sizes of type tensor<2xi64> are lowered as i32 only (convert them on the device first: ditron.ops.all_to_all does)
    %y, %c = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64, ditron.tiling = {kind = "all_to_all", target = "cuda:90", world = 2 : i64, algorithm = "pull_sized", engine = "sm", comm_sms = 4 : i64}} : (tensor<8x8xbf16>, tensor<2xi64>) -> (tensor<16x8xbf16>, tensor<2xi32>)
    return %y, %c : tensor<16x8xbf16>, tensor<2xi32>
  }
}

// -----

// The bounded all_to_all tiled for the static algorithm.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @a2a_static_algorithm(%x: tensor<8x8xbf16>, %s: tensor<2xi32>) -> (tensor<16x8xbf16>, tensor<2xi32>) attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:14: error: ditron-lower-task-to-device: 'ditron_task.all_to_all' op of parts of run-time sizes is tiled for algorithm 'pull'; the bounded form's is pull_sized (run ditron-tile again)
    %y, %c = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64, ditron.tiling = {kind = "all_to_all", target = "cuda:90", world = 2 : i64, algorithm = "pull", engine = "sm", comm_sms = 4 : i64}} : (tensor<8x8xbf16>, tensor<2xi32>) -> (tensor<16x8xbf16>, tensor<2xi32>)
    return %y, %c : tensor<16x8xbf16>, tensor<2xi32>
  }
}

// -----

// A tiling whose repack names no operand set.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @bad_repack(%a: tensor<64x200xbf16>, %b: tensor<200x264xbf16>) -> tensor<64x264xbf16> attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-lower-task-to-device: 'ditron_task.matmul' op ditron.tiling repack 'c' is not one of a, b, ab
    %c = "ditron_task.matmul"(%a, %b) {ditron.tiling = {kind = "matmul", target = "cuda:90", block_m = 64 : i64, block_n = 64 : i64, block_k = 64 : i64, num_warps = 4 : i64, num_stages = 3 : i64, group_m = 8 : i64, repack = "c"}} : (tensor<64x200xbf16>, tensor<200x264xbf16>) -> tensor<64x264xbf16>
    return %c : tensor<64x264xbf16>
  }
}
