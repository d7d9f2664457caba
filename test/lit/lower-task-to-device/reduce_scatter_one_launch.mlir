// RUN: ditron-opt %s --pass-pipeline='ditron-tile{reduce-scatter=one_launch},ditron-lower-task-to-device' | FileCheck %s
// RUN: ditron-opt %s --pass-pipeline='ditron-tile{reduce-scatter=reduce_kernel},ditron-lower-task-to-device' | FileCheck %s --check-prefix=STAGED
// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{reduce-scatter=epilogue}' 2>&1 | FileCheck %s --check-prefix=EPI
// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{reduce-scatter=one_launch engine=copy_engine}' 2>&1 | FileCheck %s --check-prefix=CE
// A standalone reduce_scatter in one launch of this rank's rows [rank * 64, +64): for each of its tiles a program
// copies the tile's place in every rank's rows from x into the symmetric P, sets the tile's slot, then waits on
// every rank's slot of the tile before reading that rank's P. No copy engine, no count pad, no host signals.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @reduce_scatter
  // CHECK: %[[P:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_partial"} : () -> memref<256x32xbf16>
  // CHECK: %[[PUB:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_published"} : () -> memref<{{[0-9]+}}xi32>
  // CHECK-NOT: ditron_device.signal
  // CHECK-NOT: ditron_device.copy
  // CHECK: %[[ROW:.*]] = arith.muli %{{.*}}, %c64 : index
  // CHECK: "ditron_device.launch"(%[[P]], %arg1, %arg0, %[[PUB]], %arg2, %[[ROW]]) {ditron.lane = "compute", ditron.role = "rs.one_launch"{{.*}}kernel = @reduce
  // CHECK-NEXT: "ditron_device.barrier"
  // CHECK: func.func private @reduce({{.*}}args = ["src", "dst", "x", "published", "epoch", "src_row"]{{.*}}publish = {arg = "published", copy_from = "x", scope = "sys", value_arg = "epoch"}, rows = 64 : i64{{.*}}src_row = "arg:src_row"
  // STAGED: "ditron_device.copy"(%arg0, %{{.*}}) {ditron.lane = "comm", ditron.role = "rs.stage"
  // STAGED-NOT: rs.one_launch
  func.func @reduce_scatter(%x: tensor<256x32xbf16>) -> tensor<64x32xbf16> attributes {ditron.view = "local"} {
    // EPI: reduce_scatter_one_launch.mlir:[[# @LINE + 2]]:10: error: ditron-tile: 'ditron_task.reduce_scatter' op reduce-scatter=epilogue reduces in a GEMM's epilogue; this reduce-scatter does not follow a GEMM (use reduce_kernel or one_launch)
    // CE: reduce_scatter_one_launch.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.reduce_scatter' op reduce-scatter=one_launch reads the peers' partials with SMs; it cannot use engine=copy_engine
    %y = "ditron_task.reduce_scatter"(%x) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<256x32xbf16>) -> tensor<64x32xbf16>
    return %y : tensor<64x32xbf16>
  }
}
