// RUN: ditron-opt %s --pass-pipeline='ditron-tile{comm-sms=8},ditron-lower-task-to-device' | FileCheck %s

// The bounded all_to_all of run-time split sizes over 4 ranks (8 local rows of 16, capacity 32 = 4 x 8 rows, the
// worst case). On the compute lane: x is staged into the symmetric send buffer; the 4 sizes go to row <rank> of
// every rank's a2a_counts (a static copy of 4 i32 by the copy engine), each followed by a2a_counted[rank] := epoch
// there; every rank waits for the 4 slots, then one a2a_sized launch pulls the rows (offsets computed on the
// device), zeroes the rest of the output and stores recv_counts. The end barrier keeps the send buffer and the
// counts until every peer read them.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @dispatch(%arg0: memref<8x16xbf16> {ditron.io = "in"}, %arg1: memref<4xi32> {ditron.io = "in"}, %arg2: memref<32x16xbf16> {ditron.io = "out"}, %arg3: memref<4xi32> {ditron.io = "out"}, %arg4: index {ditron.io = "epoch"})
  // CHECK: %[[SEND:.*]] = "ditron_device.alloc_symmetric"() {name = "a2a_send"} : () -> memref<8x16xbf16>
  // CHECK: %[[COUNTS:.*]] = "ditron_device.alloc_symmetric"() {name = "a2a_counts"} : () -> memref<16xi32>
  // CHECK: %[[COUNTED:.*]] = "ditron_device.alloc_symmetric"() {name = "a2a_counted"} : () -> memref<4xi32>
  // CHECK: %[[BARRIER:.*]] = "ditron_device.alloc_symmetric"() {name = "barrier"} : () -> memref<4xi32>
  // CHECK: %[[RANK:.*]] = "ditron_device.rank"
  // CHECK: "ditron_device.copy"(%arg0, %[[SEND]], %[[RANK]], %[[RANK]], %c0, %c0, %c0, %c0, %c8, %c16) {ditron.lane = "compute", ditron.role = "local", engine = "copy_engine"}
  // CHECK: scf.for %[[S:.*]] = %c0 to %c4 step %c1 {
  // CHECK: %[[Q:.*]] = arith.remui
  // CHECK: %[[ROW:.*]] = arith.muli %[[RANK]], %c4 : index
  // CHECK: "ditron_device.copy"(%arg1, %[[COUNTS]], %[[RANK]], %[[Q]], %c0, %[[ROW]], %c4) {ditron.lane = "compute", ditron.role = "a2a.counts", engine = "copy_engine"}
  // CHECK: "ditron_device.signal"(%[[COUNTED]], %[[Q]], %[[RANK]], %arg4) {ditron.lane = "compute", ditron.role = "a2a.counted", op = "set", scope = "sys"}
  // CHECK: } {ditron.role = "a2a.counts_loop"}
  // CHECK: "ditron_device.wait"(%[[COUNTED]], %arg4, %c0, %c1, %c2, %c3) {ditron.lane = "compute", ditron.role = "a2a.await_counts", where = "stream"}
  // CHECK: "ditron_device.launch"(%[[SEND]], %arg2, %[[COUNTS]], %arg3) {ditron.lane = "compute", ditron.role = "a2a.pull_sized", grid = array<i64: 8, 1, 1>, kernel = @a2a_sized
  // CHECK: "ditron_device.barrier"(%[[BARRIER]])
  // CHECK: func.func private @a2a_sized(memref<8x16xbf16>, memref<32x16xbf16>, memref<16xi32>, memref<4xi32>) attributes {ditron.kernel = {args = ["send", "out", "counts", "recv"], {{.*}}capacity = 32 : i64, cols = 16 : i64, dtype = "bf16", grid = 8 : i64, {{.*}}rows = 8 : i64, template = "a2a_sized", world = 4 : i64}}
  func.func @dispatch(%x: tensor<8x16xbf16>, %s: tensor<4xi32>) -> (tensor<32x16xbf16>, tensor<4xi32>) attributes {ditron.view = "local"} {
    %y, %c = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<8x16xbf16>, tensor<4xi32>) -> (tensor<32x16xbf16>, tensor<4xi32>)
    return %y, %c : tensor<32x16xbf16>, tensor<4xi32>
  }
}
