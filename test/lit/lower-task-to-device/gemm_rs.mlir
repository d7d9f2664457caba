// RUN: ditron-opt %s --pass-pipeline='ditron-tile{block-m=64 block-n=128 chunk-rows=128 comm-sms=8},ditron-lower-task-to-device' | FileCheck %s
// GEMM+RS: the GEMM counts its tiles into the owner's pad; each owner reduces its chunks as they complete.

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @gemm_rs
  // CHECK-SAME: (%[[A:.*]]: memref<512x64xbf16> {ditron.io = "in"}, %[[W:.*]]: memref<64x96xbf16> {ditron.io = "in"}, %[[OUT:.*]]: memref<256x96xbf16> {ditron.io = "out"}, %[[EPOCH:.*]]: index {ditron.io = "epoch"})
  // Counted slots grow by 4 per call: the pads fit i32 up to epoch (2^31 - 1) / 4.
  // CHECK-SAME: ditron.epoch_limit = 536870911 : i64
  // CHECK: %[[P:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_partial"} : () -> memref<512x96xbf16>
  // CHECK: %[[COUNT:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_count"} : () -> memref<4xi32>
  // CHECK: %[[R:.*]] = "ditron_device.rank"
  // CHECK: "ditron_device.launch"(%[[A]], %[[W]], %[[P]], %[[COUNT]]) {{{.*}}ditron.role = "rs.gemm"{{.*}}kernel = @gemm
  // Each chunk of 128 rows holds 2 row tiles x 1 column tile of the GEMM, from 2 ranks: 4 per call.
  // CHECK: %[[EXPECT:.*]] = arith.muli %c4, %[[EPOCH]] : index
  // CHECK: scf.for %[[C:.*]] = %c0 to %c2 step %c1 {
  // CHECK: %[[SLOT:.*]] = arith.addi %{{.*}}, %[[C]]
  // CHECK: %[[OFF:.*]] = arith.muli %[[C]], %c128
  // CHECK: %[[SRC:.*]] = arith.addi %{{.*}}, %[[OFF]]
  // CHECK: "ditron_device.wait"(%[[COUNT]], %[[EXPECT]], %[[SLOT]]) {{{.*}}ditron.lane = "reduce", ditron.role = "rs.await", where = "stream"}
  // CHECK: "ditron_device.launch"(%[[P]], %[[OUT]], %[[SRC]], %[[OFF]]) {{{.*}}ditron.role = "rs.reduce", grid = array<i64: 8, 1, 1>, kernel = @reduce
  // CHECK: } {ditron.group = 0 : i64, ditron.role = "rs.reduce_loop"}
  // The reduce lane joins stream 0 before the barrier.
  // CHECK: "ditron_device.signal"({{.*}}) {ditron.lane = "reduce", ditron.role = "rs.join.signal"
  // CHECK: "ditron_device.wait"({{.*}}) {ditron.lane = "compute", ditron.role = "rs.join.wait"
  // CHECK: "ditron_device.barrier"
  // CHECK: func.func private @gemm({{.*}}notify = {arg = "counts", peer = "slot_owner", rows_per_slot = 128 : i64, scope = "sys", value = 1 : i64}
  // CHECK-SAME: rows_per_rank = 256 : i64
  // CHECK: func.func private @reduce({{.*}}args = ["src", "dst", "src_row", "dst_row"]{{.*}}dst_row = "arg:dst_row"{{.*}}rows = 128 : i64{{.*}}src_row = "arg:src_row", template = "reduce"
  func.func @gemm_rs(%a: tensor<512x64xbf16>, %w: tensor<64x96xbf16>) -> tensor<256x96xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%a, %w) {ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "producer"}} : (tensor<512x64xbf16>, tensor<64x96xbf16>) -> tensor<512x96xbf16>
    %y = "ditron_task.reduce_scatter"(%p) {axis = "tp", dim = 0 : i64, reduce = "sum", ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "consumer"}} : (tensor<512x96xbf16>) -> tensor<256x96xbf16>
    return %y : tensor<256x96xbf16>
  }
}
