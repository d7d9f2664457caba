// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{block-m=64 block-n=128 chunk-rows=128 reduce-scatter=epilogue engine=copy_engine},ditron-lower-task-to-device' | FileCheck %s
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{block-m=128 block-n=128 chunk-rows=64 reduce-scatter=epilogue},ditron-lower-task-to-device' 2>&1 | FileCheck %s --check-prefix=ERR
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{block-m=64 block-n=128 chunk-rows=128 reduce-scatter=epilogue},ditron-lower-task-to-device,ditron-schedule-overlap{tile-order=grouped}' 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{block-m=64 block-n=128 chunk-rows=128 reduce-scatter=epilogue},ditron-lower-task-to-device,ditron-schedule-overlap{streams=false}' 2>&1 | FileCheck %s --check-prefix=SERIAL
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{block-m=64 block-n=128 chunk-rows=128 reduce-scatter=epilogue engine=sm},ditron-lower-task-to-device' | FileCheck %s --check-prefix=SM
// GEMM+RS with the reduction in the GEMM's epilogue: each rank's GEMM computes the next ranks' rows first (into the
// symmetric partial P, counting its tiles on the owner's pad) and its own rows last; the comm lane pulls the peers'
// partials of each own chunk into the staging buffer once they are counted, then marks the chunk staged; the
// GEMM's own tiles wait for that, add the staged partials and store the sums to the output.

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @gemm_rs
  // CHECK-SAME: (%[[A:.*]]: memref<512x64xbf16> {ditron.io = "in"}, %[[W:.*]]: memref<64x96xbf16> {ditron.io = "in"}, %[[OUT:.*]]: memref<256x96xbf16> {ditron.io = "out"}, %[[EPOCH:.*]]: index {ditron.io = "epoch"})
  // CHECK: %[[P:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_partial"} : () -> memref<512x96xbf16>
  // CHECK: %[[COUNT:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_count"} : () -> memref<4xi32>
  // CHECK: %[[STAGE:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_stage"} : () -> memref<256x96xbf16>
  // CHECK: %[[STAGED:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_staged"} : () -> memref<4xi32>
  // A chunk of 128 rows is 2 row tiles x 1 column tile, counted by the one peer: 2 per call.
  // CHECK: %[[EXPECT:.*]] = arith.muli %c2, %[[EPOCH]] : index
  // CHECK: "ditron_device.launch"(%[[A]], %[[W]], %[[P]], %[[COUNT]], %[[STAGED]], %[[EPOCH]], %[[STAGE]], %[[OUT]]) {{{.*}}ditron.role = "rs.gemm"{{.*}}kernel = @gemm{{.*}}tile_order = "rank_rotated"
  // CHECK: scf.for %[[C:.*]] = %c0 to %c2 step %c1 {
  // CHECK: "ditron_device.wait"(%[[COUNT]], %[[EXPECT]], %{{.*}}) {{{.*}}ditron.lane = "comm", ditron.role = "rs.await", where = "stream"}
  // CHECK: scf.for
  // CHECK: "ditron_device.copy"(%[[P]], %[[STAGE]], {{.*}}) {{{.*}}ditron.role = "rs.pull", engine = "copy_engine"}
  // CHECK: "ditron_device.signal"(%[[STAGED]], {{.*}}) {{{.*}}ditron.role = "rs.staged"
  // CHECK: } {ditron.group = 0 : i64, ditron.role = "rs.stage_loop"}
  // CHECK-NOT: rs.reduce
  // CHECK: "ditron_device.barrier"
  // CHECK: func.func private @gemm({{.*}}notify = {arg = "counts", peer = "slot_owner", rows_per_slot = 128 : i64
  // CHECK-SAME: rank_shift = 1 : i64, reduce_own = {arg = "staged", dst = "out", dst_rows = "shard", parts = 1 : i64, rows_per_slot = 128 : i64
  // CHECK-SAME: rows_per_rank = 256 : i64
  // With engine=sm the own tiles wait on the counts themselves and read the peers' partials where they are: no
  // staging buffer, no comm lane.
  // SM: %[[P:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_partial"}
  // SM: %[[COUNT:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_count"}
  // SM-NOT: rs_stage
  // SM: %[[EXPECT:.*]] = arith.muli %c2, %{{.*}} : index
  // SM: "ditron_device.launch"(%{{.*}}, %{{.*}}, %[[P]], %[[COUNT]], %[[EXPECT]], %{{.*}}) {{{.*}}ditron.role = "rs.gemm"
  // SM-NOT: ditron.lane = "comm"
  // SM: "ditron_device.barrier"
  // SM: func.func private @gemm({{.*}}args = ["a", "b", "c", "counts", "own_value", "out"]
  // SM-SAME: reduce_own = {arg = "counts", dst = "out", dst_rows = "shard", from_peers = true, parts = 1 : i64
  // ERR: error: ditron-tile: {{.*}}the epilogue reduction needs the 256 rows of a shard to split into chunks of whole GEMM row tiles; use reduce-scatter=reduce_kernel
  // SERIAL: error: {{.*}}streams=false would queue that staging behind the GEMM (deadlock)
  // ORDER: error: {{.*}}reduces its own rows in the epilogue, which needs them visited last (tile_order 'rank_rotated'); tile-order=grouped would deadlock
  func.func @gemm_rs(%a: tensor<512x64xbf16>, %w: tensor<64x96xbf16>) -> tensor<256x96xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%a, %w) {ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "producer"}} : (tensor<512x64xbf16>, tensor<64x96xbf16>) -> tensor<512x96xbf16>
    %y = "ditron_task.reduce_scatter"(%p) {axis = "tp", dim = 0 : i64, reduce = "sum", ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "consumer"}} : (tensor<512x96xbf16>) -> tensor<256x96xbf16>
    return %y : tensor<256x96xbf16>
  }
}
