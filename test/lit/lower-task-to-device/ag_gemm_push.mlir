// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-lower-task-to-device | FileCheck %s
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-gather=push},ditron-lower-task-to-device' | FileCheck %s --check-prefix=TILE
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-gather=push},ditron-lower-task-to-device,ditron-schedule-overlap' | FileCheck %s --check-prefix=SCHED
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-gather=push},ditron-lower-task-to-device,ditron-schedule-overlap{pull=ring}' 2>&1 | FileCheck %s --check-prefix=RING
// AG+GEMM with the gather by push (tiling algorithm = "push"): 4 ranks, shards of 64 rows in 2 chunks of 32. Each
// rank copies each chunk of its shard into the gather buffer of every rank and sets `ready` there: no avail pad, no
// offer, no pull. The GEMM's 128-row tiles span two shards, so the peers come first (q = rank + d + 1 mod 4, its
// own rank last); in the second case 64-row tiles start on the own rows, which come first (q = rank + d mod 4).

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @ag_gemm
  // CHECK-SAME: (%[[X:.*]]: memref<64x32xbf16> {{.*}}, %[[W:.*]]: memref<32x48xbf16> {ditron.io = "in"}, %[[OUT:.*]]: memref<256x48xbf16> {ditron.io = "out"}, %[[EPOCH:.*]]: index {ditron.io = "epoch"})
  // CHECK: %[[G:.*]] = "ditron_device.alloc_symmetric"() {name = "ag_gather"} : () -> memref<256x32xbf16>
  // CHECK-NEXT: %[[READY:.*]] = "ditron_device.alloc_symmetric"() {name = "ag_ready"} : () -> memref<8xi32>
  // CHECK-NOT: ag.offer
  // CHECK: %[[R:.*]] = "ditron_device.rank"() : () -> index
  // CHECK: scf.for %[[C:.*]] = %c0 to %c2 step %c1 {
  // CHECK: %[[OFF:.*]] = arith.muli %[[C]], %c32
  // CHECK: %[[ROW:.*]] = arith.addi %{{.*}}, %[[OFF]]
  // CHECK: %[[SLOT:.*]] = arith.addi %{{.*}}, %[[C]]
  // CHECK: scf.for %[[D:.*]] = %c0 to %c4 step %c1 {
  // CHECK-NEXT: %[[D1:.*]] = arith.addi %[[D]], %c1
  // CHECK-NEXT: %[[RD:.*]] = arith.addi %[[R]], %[[D1]]
  // CHECK-NEXT: %[[Q:.*]] = arith.remui %[[RD]], %{{.*}}
  // CHECK: "ditron_device.copy"(%[[X]], %[[G]], %[[R]], %[[Q]], %[[OFF]], %c0, %[[ROW]], %c0, %c32, %c32) {{{.*}}ditron.lane = "comm", ditron.role = "ag.push", engine = "copy_engine"}
  // CHECK-NEXT: "ditron_device.signal"(%[[READY]], %[[Q]], %[[SLOT]], %[[EPOCH]]) {{{.*}}ditron.role = "ag.arrive", op = "set", scope = "sys"}
  // CHECK: ditron.role = "ag.push_peers"
  // CHECK: ditron.role = "ag.push_loop"
  // CHECK-NOT: ag.pull
  // CHECK: "ditron_device.launch"(%[[G]], %[[W]], %[[OUT]], %[[READY]], %[[EPOCH]]) {{{.*}}ditron.role = "ag.gemm"
  // CHECK: "ditron_device.barrier"
  // TILE: ditron.role = "ag.push"
  // TILE-NOT: ag.pull
  // SCHED: "ditron_device.copy"({{.*}}ditron.role = "ag.push"{{.*}}stream = 1 : i64
  // RING: ag_gemm_push.mlir:[[# @LINE + 6]]:10: error: ditron-schedule-overlap: 'ditron_device.copy' op belongs to an all-gather by push (each rank copies its shard into every rank's buffer): there are no pulls to chain into a ring; use ditron-tile{all-gather=pull}
  func.func @ag_gemm(%x: tensor<64x32xbf16> {ditron.sharding = {dims = [["tp"], []]}}, %w: tensor<32x48xbf16>) -> tensor<256x48xbf16> attributes {ditron.view = "local"} {
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64,
        ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"},
        ditron.tiling = {algorithm = "push", block_k = 32 : i64, block_m = 128 : i64, block_n = 64 : i64, chunk_rows = 32 : i64, comm_sms = 0 : i64, engine = "copy_engine", group_m = 8 : i64, kind = "ag_matmul", num_chunks = 2 : i64, num_stages = 3 : i64, num_warps = 4 : i64, persistent = true, shard_rows = 64 : i64, sm_budget = 132 : i64, target = "cuda:90", world = 4 : i64}}
        : (tensor<64x32xbf16>) -> tensor<256x32xbf16>
    %h = "ditron_task.matmul"(%g, %w) {
        ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"},
        ditron.tiling = {algorithm = "push", block_k = 32 : i64, block_m = 128 : i64, block_n = 64 : i64, chunk_rows = 32 : i64, comm_sms = 0 : i64, engine = "copy_engine", group_m = 8 : i64, kind = "ag_matmul", num_chunks = 2 : i64, num_stages = 3 : i64, num_warps = 4 : i64, persistent = true, shard_rows = 64 : i64, sm_budget = 132 : i64, target = "cuda:90", world = 4 : i64}}
        : (tensor<256x32xbf16>, tensor<32x48xbf16>) -> tensor<256x48xbf16>
    return %h : tensor<256x48xbf16>
  }
}

// -----

// CHECK-LABEL: func.func @ag_gemm
// CHECK: scf.for %[[D:.*]] = %c0 to %c4 step %c1 {
// CHECK-NEXT: %[[RD:.*]] = arith.addi %{{.*}}, %[[D]]
// CHECK-NEXT: %[[Q:.*]] = arith.remui %[[RD]], %{{.*}}
// CHECK: ditron.role = "ag.push"
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @ag_gemm(%x: tensor<64x32xbf16> {ditron.sharding = {dims = [["tp"], []]}}, %w: tensor<32x48xbf16>) -> tensor<256x48xbf16> attributes {ditron.view = "local"} {
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64,
        ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"},
        ditron.tiling = {algorithm = "push", block_k = 32 : i64, block_m = 64 : i64, block_n = 64 : i64, chunk_rows = 32 : i64, comm_sms = 0 : i64, engine = "copy_engine", group_m = 8 : i64, kind = "ag_matmul", num_chunks = 2 : i64, num_stages = 3 : i64, num_warps = 4 : i64, persistent = true, shard_rows = 64 : i64, sm_budget = 132 : i64, target = "cuda:90", world = 4 : i64}}
        : (tensor<64x32xbf16>) -> tensor<256x32xbf16>
    %h = "ditron_task.matmul"(%g, %w) {
        ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"},
        ditron.tiling = {algorithm = "push", block_k = 32 : i64, block_m = 64 : i64, block_n = 64 : i64, chunk_rows = 32 : i64, comm_sms = 0 : i64, engine = "copy_engine", group_m = 8 : i64, kind = "ag_matmul", num_chunks = 2 : i64, num_stages = 3 : i64, num_warps = 4 : i64, persistent = true, shard_rows = 64 : i64, sm_budget = 132 : i64, target = "cuda:90", world = 4 : i64}}
        : (tensor<256x32xbf16>, tensor<32x48xbf16>) -> tensor<256x48xbf16>
    return %h : tensor<256x48xbf16>
  }
}
