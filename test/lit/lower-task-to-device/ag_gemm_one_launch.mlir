// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-gather=one_launch},ditron-lower-task-to-device' | FileCheck %s
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-gather=one_launch},ditron-lower-task-to-device,ditron-schedule-overlap,ditron-fuse-overlap' | FileCheck %s --check-prefix=SCHED
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-gather=one_launch engine=copy_engine}' 2>&1 | FileCheck %s --check-prefix=ENGINE
// AG+GEMM in one launch (all-gather=one_launch): no copy, no signal, no stream; the GEMM's programs push this
// rank's shard (%x) into the gathered A of every rank before their tiles and count each of its blocks (gemm
// gather.block 16 x 256: 4 row blocks x 1 column block of the 64 x 32 shard) in slot `rank` of ag_ready there;
// a tile waits until the slots of its rows reach 4, the count of one call, and the last waiter of a slot takes
// them off (slots 4..7 count the waiters): ag_ready is consumed, a CUDA graph zeroes nothing. The push fences
// itself: no end barrier, and the gathered A rotates. This GEMM is memory-bound: its tiles of all ranks' rows run together (own_first = false),
// sharing B in L2; the compute-bound one of the second case reads its own rows first, from the shard (own_first
// = true, GROUP_M cut to the 4 row blocks of a shard so the own tiles lead the rank-rotated order).

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @ag_gemm
  // CHECK-SAME: (%[[X:.*]]: memref<64x32xbf16> {{.*}}, %[[W:.*]]: memref<32x48xbf16> {{.*}}, %[[OUT:.*]]: memref<256x48xbf16> {{.*}}, %[[EPOCH:.*]]: index {ditron.io = "epoch"})
  // CHECK-SAME: ditron.fence = "waits"
  // CHECK: %[[G:.*]] = "ditron_device.alloc_symmetric"() {ditron.rotate, name = "ag_gather"} : () -> memref<256x32xbf16>
  // CHECK-NEXT: %[[READY:.*]] = "ditron_device.alloc_symmetric"() {ditron.consumed, name = "ag_ready"} : () -> memref<8xi32>
  // CHECK-NOT: ditron_device.copy
  // CHECK-NOT: ditron_device.signal
  // CHECK: %[[VALUE:.*]] = arith.constant 4 : index
  // CHECK-NOT: arith.muli
  // CHECK: "ditron_device.launch"(%[[G]], %[[W]], %[[OUT]], %[[READY]], %[[VALUE]], %[[X]]) {{{.*}}ditron.role = "ag.gemm"
  // CHECK-NOT: ditron_device.barrier
  // CHECK: return
  // CHECK: func.func private @gemm({{.*}}args = ["a", "b", "c", "ready", "wait_value", "x"]{{.*}}gather = {arg = "x", block = [16, 256], own_first = false}{{.*}}loads = "pointer"{{.*}}rows_per_rank = 64 : i64{{.*}}wait = {arg = "ready", rows_per_slot = 64 : i64, scope = "sys", value_arg = "wait_value"}
  // SCHED: "ditron_device.launch"({{.*}}ditron.role = "ag.gemm"{{.*}}stream = 0 : i64{{.*}}tile_order = "rank_rotated"
  // SCHED-NOT: ditron_device.barrier
  // ENGINE: ag_gemm_one_launch.mlir:[[# @LINE + 2]]:10: error: ditron-tile: 'ditron_task.all_gather' op all-gather=one_launch pushes whole shards with the GEMM's own SMs: it takes no engine=copy_engine, comm-sms, chunk-rows or num-chunks
  func.func @ag_gemm(%x: tensor<64x32xbf16> {ditron.sharding = {dims = [["tp"], []]}}, %w: tensor<32x48xbf16>) -> tensor<256x48xbf16> attributes {ditron.view = "local"} {
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64,
        ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}} : (tensor<64x32xbf16>) -> tensor<256x32xbf16>
    %h = "ditron_task.matmul"(%g, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}}
        : (tensor<256x32xbf16>, tensor<32x48xbf16>) -> tensor<256x48xbf16>
    return %h : tensor<256x48xbf16>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @ag_gemm_own_first
  // CHECK: "ditron_device.launch"({{.*}}ditron.role = "ag.gemm"{{.*}}tile_order = "rank_rotated"
  // CHECK: func.func private @gemm({{.*}}gather = {arg = "x", block = [16, 256], own_first = true}{{.*}}group_m = 4 : i64{{.*}}rows_per_rank = 512 : i64{{.*}}tile_order = "rank_rotated"
  func.func @ag_gemm_own_first(%x: tensor<512x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}}, %w: tensor<4096x7168xbf16>) -> tensor<1024x7168xbf16> attributes {ditron.view = "local"} {
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64,
        ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}} : (tensor<512x4096xbf16>) -> tensor<1024x4096xbf16>
    %h = "ditron_task.matmul"(%g, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}}
        : (tensor<1024x4096xbf16>, tensor<4096x7168xbf16>) -> tensor<1024x7168xbf16>
    return %h : tensor<1024x7168xbf16>
  }
}
