// RUN: not ditron-opt %s --split-input-file --pass-pipeline=ditron-lower-task-to-device 2>&1 | FileCheck %s
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-reduce=push},ditron-lower-task-to-device' | FileCheck %s --check-prefix=PUSH

// A tiling naming an algorithm no collective lowering registers (passes/collectives, the (op, algorithm) table).
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @bogus(%x: tensor<8x8xbf16>) -> tensor<8x8xbf16> attributes {ditron.view = "local"} {
    // CHECK: algorithms.mlir:[[# @LINE + 1]]:10: error: ditron-lower-task-to-device: 'ditron_task.all_reduce' op has all_reduce algorithm 'ring' in its 'ditron.tiling', which has no device lowering (registered: one_shot, push, two_shot); run ditron-tile again
    %y = "ditron_task.all_reduce"(%x) {axis = "tp", reduce = "sum", ditron.tiling = {kind = "all_reduce", target = "cuda:90", world = 2 : i64, chunk_rows = 8 : i64, shard_rows = 8 : i64, engine = "sm", comm_sms = 8 : i64, algorithm = "ring"}} : (tensor<8x8xbf16>) -> tensor<8x8xbf16>
    return %y : tensor<8x8xbf16>
  }
}

// -----

// A fused pattern's unknown algorithm is located at its collective.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @bogus_fused(%x: tensor<8x16xbf16>, %w: tensor<16x8xbf16>) -> tensor<4x8xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%x, %w) {ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "producer"}, ditron.tiling = {kind = "matmul_rs", target = "cuda:90", world = 2 : i64, block_m = 16 : i64, chunk_rows = 4 : i64, engine = "sm", algorithm = "tree"}} : (tensor<8x16xbf16>, tensor<16x8xbf16>) -> tensor<8x8xbf16>
    // CHECK: algorithms.mlir:[[# @LINE + 1]]:10: error: ditron-lower-task-to-device: 'ditron_task.reduce_scatter' op has matmul_rs algorithm 'tree' in its 'ditron.tiling', which has no device lowering (registered: epilogue, one_launch, push, push_sum, reduce_kernel); run ditron-tile again
    %y = "ditron_task.reduce_scatter"(%p) {axis = "tp", dim = 0 : i64, reduce = "sum", ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "consumer"}, ditron.tiling = {kind = "matmul_rs", target = "cuda:90", world = 2 : i64, block_m = 16 : i64, chunk_rows = 4 : i64, engine = "sm", algorithm = "tree"}} : (tensor<8x8xbf16>) -> tensor<4x8xbf16>
    return %y : tensor<4x8xbf16>
  }
}

// -----

// A registered algorithm, chosen by ditron-tile, lowers through the table: all-reduce by push (one launch whose
// programs store into the peers' inbox), no end barrier.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @push(%x: tensor<8x8xbf16>) -> tensor<8x8xbf16> attributes {ditron.view = "local"} {
    // PUSH-LABEL: func.func @push
    // PUSH-SAME: ditron.fence = "waits"
    // PUSH: ditron_device.alloc_symmetric"() {ditron.rotate, name = "ar_inbox"}
    // PUSH: ditron_device.launch"
    // PUSH-SAME: ditron.role = "ar.one_launch"
    // PUSH-NOT: ditron_device.barrier
    // PUSH: return
    %y = "ditron_task.all_reduce"(%x) {axis = "tp", reduce = "sum"} : (tensor<8x8xbf16>) -> tensor<8x8xbf16>
    return %y : tensor<8x8xbf16>
  }
}
