// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile,ditron-lower-task-to-device,ditron-lower-device-to-core' | FileCheck %s
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{reduce-scatter=push engine=copy_engine}' 2>&1 | FileCheck %s --check-prefix=CE
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{reduce-scatter=push_sum block-m=128}' 2>&1 | FileCheck %s --check-prefix=BM
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{reduce-scatter=push},ditron-lower-task-to-device,ditron-lower-device-to-core' 2>/dev/null | FileCheck %s --check-prefix=PUSH
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{reduce-scatter=push}' 2>&1 | FileCheck %s --check-prefix=ALONE
// GEMM+RS by push with the sum in the GEMM (push_sum), the model's choice for a one-wave GEMM (LLaMA-70B M = 128
// on two ranks): the GEMM stores each tile of the peer's rows into the peer's inbox (push.owner), setting the
// peer's slot of the tile to the epoch, and each tile of its own rows waits for its slot, adds the inbox tile,
// stores the sum into the output and clears the slot (push.sum_own; one slot per own tile, 64 of them, consumed:
// a CUDA graph zeroes nothing): no reduce launch. reduce-scatter=push keeps the own rows' partial in a local
// [R, n] buffer, counts the pushed tiles per row block and sums the inbox in a reduce launch. Either way the push
// fences itself: the inbox rotates and the program ends without a barrier.

// CHECK-LABEL: func.func @gemm_rs
// CHECK-SAME: ditron.fence = "waits"
// CHECK-NOT: rs_own
// CHECK: %[[IN:.*]] = "ditron_device.alloc_symmetric"() {ditron.rotate, name = "rs_inbox"} : () -> memref<64x8192xbf16>
// CHECK: %[[PAD:.*]] = "ditron_device.alloc_symmetric"() {ditron.consumed, name = "rs_pushed"} : () -> memref<64xi32>
// CHECK: "ditron_device.launch"(%arg0, %arg1, %arg2, %[[IN]], %[[PAD]], %arg3) {{{.*}}ditron.role = "rs.gemm_push_sum"{{.*}}tile_order = "rank_rotated"
// CHECK-NEXT: return
// CHECK: push = {arg = "inbox", owner = true, pad = "pushed", scope = "sys", slabs = 1 : i64, sum_own = true, value_arg = "expect"}, rank_shift = 1 : i64

// PUSH-LABEL: func.func @gemm_rs
// PUSH-SAME: ditron.fence = "waits"
// PUSH: %[[OWN:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_own"} : () -> memref<64x8192xbf16>
// PUSH: %[[IN:.*]] = "ditron_device.alloc_symmetric"() {ditron.rotate, name = "rs_inbox"} : () -> memref<64x8192xbf16>
// PUSH: %[[PAD:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_pushed"} : () -> memref<{{[0-9]+}}xi32>
// PUSH: "ditron_device.launch"(%arg0, %arg1, %[[OWN]], %[[IN]], %[[PAD]]) {{{.*}}ditron.role = "rs.gemm_push"{{.*}}tile_order = "rank_rotated"
// PUSH-NEXT: arith.muli %arg3
// PUSH-NEXT: "ditron_device.launch"(%[[IN]], %arg2, %[[OWN]], %[[PAD]], %{{.*}}) {{{.*}}ditron.role = "rs.sum_pushed"
// PUSH-NEXT: return
// PUSH: push = {arg = "inbox", owner = true, pad = "pushed", scope = "sys", slabs = 1 : i64}, rank_shift = 1 : i64
// PUSH: publish = {arg = "pushed", copy_from = "x", push = 1 : i64, pushed = 64 : i64
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @gemm_rs(%a: tensor<128x14336xbf16>, %w: tensor<14336x8192xbf16>) -> tensor<64x8192xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%a, %w) {ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "producer"}} : (tensor<128x14336xbf16>, tensor<14336x8192xbf16>) -> tensor<128x8192xbf16>
    // CE: gemm_rs_push.mlir:[[# @LINE + 2]]:10: error: ditron-tile: 'ditron_task.reduce_scatter' op reduce-scatter=push stores into the peers' inboxes with SMs; it cannot use engine=copy_engine
    // BM: gemm_rs_push.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.reduce_scatter' op reduce-scatter=push_sum needs GEMM row tiles inside one rank's rows: BLOCK_M 128 does not divide the 64 rows of a shard (pass a block-m that does, or use one_launch)
    %y = "ditron_task.reduce_scatter"(%p) {axis = "tp", dim = 0 : i64, reduce = "sum", ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "consumer"}} : (tensor<128x8192xbf16>) -> tensor<64x8192xbf16>
    return %y : tensor<64x8192xbf16>
  }
}

// -----

// A reduce-scatter that no GEMM produces has no tiles to push.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @alone(%x: tensor<256x32xbf16>) -> tensor<128x32xbf16> attributes {ditron.view = "local"} {
    // ALONE: gemm_rs_push.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.reduce_scatter' op reduce-scatter=push pushes a GEMM's tiles; this reduce-scatter does not follow a GEMM (use reduce_kernel or one_launch)
    %y = "ditron_task.reduce_scatter"(%x) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<256x32xbf16>) -> tensor<128x32xbf16>
    return %y : tensor<128x32xbf16>
  }
}
