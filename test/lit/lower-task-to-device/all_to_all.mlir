// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{engine=copy_engine},ditron-lower-task-to-device' | FileCheck %s
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{engine=sm comm-sms=8},ditron-lower-task-to-device' | FileCheck %s --check-prefix=SM
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile' | FileCheck %s --check-prefix=TILE

// A resharding all_to_all (rows sharded -> columns sharded over 4 ranks: split the columns, concatenate rows).
// On the compute lane, part by part: for q = rank + 1, rank + 2, rank + 3, columns [4q, +4) of x are staged into the
// symmetric send buffer and offered to rank q alone (avail[rank] there); then the own part is copied locally
// (columns [4 rank, +4) of x -> rows [2 rank, +2) of the output). On the comm lane, from q = rank - 1 down (the
// order in which the peers stage this rank's part), columns [4 rank, +4) of the peer's send buffer are pulled into
// rows [2q, +2) once offered. Every part is marked in a2a_ready, which the compute lane waits for; peers read the
// send buffer until the end barrier. The pulls take the tiling's engine, the local copies the copy engine; the comm
// lane starts with a wait on the peers (no entry fork).
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // The tiling: the engine from the model, one copy per peer part; shard_rows is a part's size along split_dim.
  // TILE: "ditron_task.all_to_all"{{.*}}ditron.tiling = {{{.*}}engine = "{{copy_engine|sm}}", est_us = {{.*}}, kind = "all_to_all", num_chunks = 1 : i64, shard_rows = 4 : i64, target = "cuda:90", world = 4 : i64}
  // CHECK-LABEL: func.func @reshard(%arg0: memref<2x16xf32> {ditron.io = "in"}, %arg1: memref<8x4xf32> {ditron.io = "out"}, %arg2: index {ditron.io = "epoch"})
  // CHECK: %[[SEND:.*]] = "ditron_device.alloc_symmetric"() {name = "a2a_send"} : () -> memref<2x16xf32>
  // CHECK: %[[READY:.*]] = "ditron_device.alloc_symmetric"() {name = "a2a_ready"} : () -> memref<4xi32>
  // CHECK: %[[AVAIL:.*]] = "ditron_device.alloc_symmetric"() {name = "a2a_avail"} : () -> memref<4xi32>
  // CHECK: %[[RANK:.*]] = "ditron_device.rank"
  // CHECK-NOT: entry.wait
  // CHECK: scf.for %[[S:.*]] = %c1 to %c4 step %c1 {
  // CHECK: %[[UP:.*]] = arith.addi %[[RANK]], %[[S]] : index
  // CHECK: %[[Q:.*]] = arith.remui %[[UP]]
  // CHECK: %[[COLS:.*]] = arith.muli %[[Q]], %c4 : index
  // CHECK: "ditron_device.copy"(%arg0, %[[SEND]], %[[RANK]], %[[RANK]], %c0, %[[COLS]], %c0, %[[COLS]], %c2, %c4) {ditron.lane = "compute", ditron.role = "a2a.stage", engine = "copy_engine"}
  // CHECK: "ditron_device.signal"(%[[AVAIL]], %[[Q]], %[[RANK]], %arg2) {ditron.lane = "compute", ditron.role = "a2a.offer_signal", op = "set", scope = "sys"}
  // CHECK: } {ditron.role = "a2a.offer"}
  // CHECK: %[[COL:.*]] = arith.muli %[[RANK]], %c4 : index
  // CHECK: %[[ROW:.*]] = arith.muli %[[RANK]], %c2 : index
  // CHECK: "ditron_device.copy"(%arg0, %arg1, %[[RANK]], %[[RANK]], %c0, %[[COL]], %[[ROW]], %c0, %c2, %c4) {ditron.lane = "compute", ditron.role = "a2a.own", engine = "copy_engine"}
  // CHECK: "ditron_device.signal"(%[[READY]], %[[RANK]], %[[RANK]], %arg2) {ditron.lane = "compute", ditron.role = "a2a.arrive"
  // CHECK: scf.for %[[T:.*]] = %c1 to %c4 step %c1 {
  // CHECK: %[[DOWN:.*]] = arith.subi %c4, %[[T]] : index
  // CHECK: %[[P:.*]] = arith.remui
  // CHECK: "ditron_device.wait"(%[[AVAIL]], %arg2, %[[P]]) {ditron.lane = "comm", ditron.role = "a2a.await"
  // CHECK: %[[PCOL:.*]] = arith.muli %[[RANK]], %c4 : index
  // CHECK: %[[PROW:.*]] = arith.muli %[[P]], %c2 : index
  // CHECK: "ditron_device.copy"(%[[SEND]], %arg1, %[[P]], %[[RANK]], %c0, %[[PCOL]], %[[PROW]], %c0, %c2, %c4) {ditron.lane = "comm", ditron.role = "a2a.pull", engine = "copy_engine"}
  // CHECK: "ditron_device.signal"(%[[READY]], %[[RANK]], %[[P]], %arg2) {ditron.lane = "comm", ditron.role = "a2a.arrive"
  // CHECK: } {ditron.role = "a2a.pull_loop"}
  // CHECK: "ditron_device.wait"(%[[READY]], %arg2, %c0, %c1, %c2, %c3) {ditron.lane = "compute", ditron.role = "a2a.join"
  // CHECK: "ditron_device.barrier"
  // SM-LABEL: func.func @reshard
  // SM: ditron.role = "a2a.stage", engine = "copy_engine"
  // SM: ditron.role = "a2a.own", engine = "copy_engine"
  // SM: ditron.role = "a2a.pull", engine = "sm"
  func.func @reshard(%x: tensor<2x16xf32>) -> tensor<8x4xf32> attributes {ditron.view = "local"} {
    %y = "ditron_task.all_to_all"(%x) {axis = "tp", split_dim = 1 : i64, concat_dim = 0 : i64} : (tensor<2x16xf32>) -> tensor<8x4xf32>
    return %y : tensor<8x4xf32>
  }
}

// -----

// MoE's token exchange (split and concatenate rows) of a value computed on the rank: it lives in a symmetric
// buffer already, so nothing is staged: the offers follow the elementwise kernel on the compute lane.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @tokens
  // CHECK: %[[EW:.*]] = "ditron_device.alloc_symmetric"() {name = "ew"} : () -> memref<6x8xbf16>
  // CHECK-NOT: a2a_send
  // CHECK: ditron.role = "elementwise"
  // CHECK-NOT: a2a.stage
  // CHECK: ditron.role = "a2a.offer_signal"
  // CHECK: "ditron_device.copy"(%[[EW]], %arg1, {{.*}}ditron.role = "a2a.own"
  // CHECK: "ditron_device.copy"(%[[EW]], %arg1, {{.*}}ditron.role = "a2a.pull"
  // TILE-LABEL: func.func @tokens
  // TILE: kind = "all_to_all", num_chunks = 1 : i64, shard_rows = 3 : i64
  func.func @tokens(%x: tensor<6x8xbf16>) -> tensor<6x8xbf16> attributes {ditron.view = "local"} {
    %r = "ditron_task.elementwise"(%x) {fn = "relu"} : (tensor<6x8xbf16>) -> tensor<6x8xbf16>
    %y = "ditron_task.all_to_all"(%r) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<6x8xbf16>) -> tensor<6x8xbf16>
    return %y : tensor<6x8xbf16>
  }
}
