// RUN: ditron-opt %s --pass-pipeline=ditron-lower-task-to-device | FileCheck %s
// AG+GEMM from hand-written tilings: 4 ranks, shards of 64 rows in 2 chunks of 32.

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @ag_gemm
  // CHECK-SAME: (%[[X:.*]]: memref<64x32xbf16> {ditron.io = "in", ditron.layout = {dims = {{\[}}["tp"], []]}}, %[[W:.*]]: memref<32x48xbf16> {ditron.io = "in"}, %[[OUT:.*]]: memref<256x48xbf16> {ditron.io = "out"}, %[[EPOCH:.*]]: index {ditron.io = "epoch"})
  // CHECK-SAME: attributes {ditron.axis = "tp", ditron.epoch_limit = 2147483647 : i64, ditron.level = "device", ditron.target = "cuda:90"}
  // Every buffer first: the gather buffer, its pads (4 ranks x 2 chunks), the end-of-call barrier.
  // CHECK-NEXT: "ditron_device.alloc_symmetric"() {name = "sync"} : () -> memref<1xi32>
  // CHECK-NEXT: %[[G:.*]] = "ditron_device.alloc_symmetric"() {name = "ag_gather"} : () -> memref<256x32xbf16>
  // CHECK-NEXT: %[[READY:.*]] = "ditron_device.alloc_symmetric"() {name = "ag_ready"} : () -> memref<8xi32>
  // CHECK-NEXT: %[[AVAIL:.*]] = "ditron_device.alloc_symmetric"() {name = "ag_avail"} : () -> memref<8xi32>
  // CHECK-NEXT: %[[BAR:.*]] = "ditron_device.alloc_symmetric"() {name = "barrier"} : () -> memref<4xi32>
  // CHECK-NEXT: %[[R:.*]] = "ditron_device.rank"() : () -> index
  // CHECK: %[[NR:.*]] = "ditron_device.num_ranks"() : () -> index
  // The side lane starts after stream 0 (the previous call's barrier).
  // CHECK: "ditron_device.signal"({{.*}}) {ditron.lane = "compute", ditron.role = "entry.signal", op = "set", scope = "gpu"}
  // CHECK: "ditron_device.wait"({{.*}}) {ditron.lane = "comm", ditron.role = "entry.wait", where = "stream"}
  // Stage each chunk of the own shard into G at rows rank*64 + c*32, mark it ready, offer it to the 3 peers.
  // CHECK: scf.for %[[C:.*]] = %{{.*}} to %{{.*}} step
  // CHECK: %[[OFF:.*]] = arith.muli %[[C]], %c32
  // CHECK: %[[BASE:.*]] = arith.muli %[[R]], %c64
  // CHECK: %[[ROW:.*]] = arith.addi %[[BASE]], %[[OFF]]
  // CHECK: "ditron_device.copy"(%[[X]], %[[G]], %[[R]], %[[R]], %[[OFF]], %c0, %[[ROW]], %c0, %c32, %c32) {{{.*}}ditron.role = "ag.stage", engine = "copy_engine"}
  // CHECK: "ditron_device.signal"(%[[READY]], %[[R]], %[[SLOT:.*]], %[[EPOCH]]) {{{.*}}ditron.role = "ag.ready", op = "set", scope = "sys"}
  // CHECK: scf.for %[[D:.*]] = %c1 to %c4 step %c1 {
  // CHECK: %[[P:.*]] = arith.remui %{{.*}}, %[[NR]]
  // CHECK: "ditron_device.signal"(%[[AVAIL]], %[[P]], %[[SLOT]], %[[EPOCH]]) {{{.*}}ditron.role = "ag.offer_signal"
  // CHECK: } {ditron.gather = 0 : i64, ditron.group = 0 : i64, ditron.role = "ag.offer"}
  // Pull each peer's chunks when offered.
  // CHECK: scf.for %[[S:.*]] = %c1 to %c4 step %c1 {
  // CHECK: %[[Q:.*]] = arith.remui %{{.*}}, %[[NR]]
  // CHECK: "ditron_device.wait"(%[[AVAIL]], %[[EPOCH]], %[[QS:.*]]) {{{.*}}ditron.role = "ag.await", where = "stream"}
  // CHECK: "ditron_device.copy"(%[[G]], %[[G]], %[[Q]], %[[R]], {{.*}}) {{{.*}}ditron.role = "ag.pull", engine = "copy_engine"}
  // CHECK: "ditron_device.signal"(%[[READY]], %[[R]], %[[QS]], %[[EPOCH]]) {{{.*}}ditron.role = "ag.arrive"
  // The GEMM waits per tile on the ready slots (rows_per_slot = 32), writing the output in place.
  // CHECK: "ditron_device.launch"(%[[G]], %[[W]], %[[OUT]], %[[READY]], %[[EPOCH]]) {{{.*}}ditron.lane = "compute", ditron.role = "ag.gemm", grid = array<i64: 2, 1, 1>, kernel = @gemm, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, sm_budget = 2 : i64, tile_order = "grouped"}
  // CHECK: "ditron_device.barrier"(%[[BAR]]) {ditron.lane = "compute", ditron.role = "end_barrier"}
  // CHECK-NEXT: return
  // CHECK: func.func private @gemm(memref<256x32xbf16>, memref<32x48xbf16>, memref<256x48xbf16>, memref<8xi32>, index)
  // CHECK-SAME: ditron.kernel = {args = ["a", "b", "c", "ready", "wait_value"]
  // CHECK-SAME: block_m = 128 : i64
  // CHECK-SAME: m = 256 : i64, n = 48 : i64
  // CHECK-SAME: rows_per_rank = 64 : i64
  // CHECK-SAME: template = "gemm"
  // CHECK-SAME: wait = {arg = "ready", rows_per_slot = 32 : i64, scope = "sys", value_arg = "wait_value"}
  func.func @ag_gemm(%x: tensor<64x32xbf16> {ditron.sharding = {dims = [["tp"], []]}}, %w: tensor<32x48xbf16>) -> tensor<256x48xbf16> attributes {ditron.view = "local"} {
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64,
        ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"},
        ditron.tiling = {block_k = 32 : i64, block_m = 128 : i64, block_n = 64 : i64, chunk_rows = 32 : i64, comm_sms = 0 : i64, engine = "copy_engine", group_m = 8 : i64, kind = "ag_matmul", num_chunks = 2 : i64, num_stages = 3 : i64, num_warps = 4 : i64, persistent = true, shard_rows = 64 : i64, sm_budget = 132 : i64, target = "cuda:90", world = 4 : i64}}
        : (tensor<64x32xbf16>) -> tensor<256x32xbf16>
    %h = "ditron_task.matmul"(%g, %w) {
        ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"},
        ditron.tiling = {block_k = 32 : i64, block_m = 128 : i64, block_n = 64 : i64, chunk_rows = 32 : i64, comm_sms = 0 : i64, engine = "copy_engine", group_m = 8 : i64, kind = "ag_matmul", num_chunks = 2 : i64, num_stages = 3 : i64, num_warps = 4 : i64, persistent = true, shard_rows = 64 : i64, sm_budget = 132 : i64, target = "cuda:90", world = 4 : i64}}
        : (tensor<256x32xbf16>, tensor<32x48xbf16>) -> tensor<256x48xbf16>
    return %h : tensor<256x48xbf16>
  }
}
