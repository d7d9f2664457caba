// RUN: ditron-opt %s --pass-pipeline='ditron-tile{reduce-scatter=one_launch},ditron-lower-task-to-device' | FileCheck %s
// RUN: ditron-opt %s --pass-pipeline='ditron-tile{reduce-scatter=one_launch},ditron-lower-task-to-device,ditron-schedule-overlap,ditron-lower-device-to-core' | FileCheck %s --check-prefix=CORE
// GEMM+RS as the GEMM into the symmetric partial buffer P, then one reduce launch on stream 0 that sums this rank's
// rows [rank * 256, +256) of every rank's P: each program sets the slots of its tiles (the GEMM before it on the
// same stream finished all of P), then waits on every rank's slot of a tile before reading it. No count pad, no
// host signals, no copies.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @gemm_rs
  // CHECK: %[[P:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_partial"} : () -> memref<512x96xbf16>
  // CHECK: %[[PUB:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_published"} : () -> memref<{{[0-9]+}}xi32>
  // CHECK-NOT: ditron_device.signal
  // CHECK-NOT: ditron_device.copy
  // CHECK: "ditron_device.launch"(%arg0, %arg1, %[[P]]) {{{.*}}ditron.role = "rs.gemm"
  // CHECK: %[[ROW:.*]] = arith.muli %{{.*}}, %c256 : index
  // CHECK: "ditron_device.launch"(%[[P]], %arg2, %[[PUB]], %arg3, %[[ROW]]) {ditron.lane = "compute", ditron.role = "rs.one_launch"{{.*}}kernel = @reduce
  // CHECK-NEXT: "ditron_device.barrier"
  // CHECK: func.func private @reduce({{.*}}args = ["src", "dst", "published", "epoch", "src_row"]{{.*}}publish = {arg = "published", scope = "sys", value_arg = "epoch"}, rows = 256 : i64{{.*}}src_row = "arg:src_row"
  // CORE: "tt.func"() ({
  // CORE: sym_name = "gemm"
  // CORE: "tt.func"() ({
  // CORE: ditron_core.wait
  func.func @gemm_rs(%a: tensor<512x64xbf16>, %w: tensor<64x96xbf16>) -> tensor<256x96xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%a, %w) {ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "producer"}} : (tensor<512x64xbf16>, tensor<64x96xbf16>) -> tensor<512x96xbf16>
    %y = "ditron_task.reduce_scatter"(%p) {axis = "tp", dim = 0 : i64, reduce = "sum", ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "consumer"}} : (tensor<512x96xbf16>) -> tensor<256x96xbf16>
    return %y : tensor<256x96xbf16>
  }
}
