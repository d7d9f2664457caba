// RUN: ditron-opt %s --pass-pipeline='ditron-tile{num-chunks=2 engine=copy_engine},ditron-lower-task-to-device,ditron-schedule-overlap' | FileCheck %s
// RUN: ditron-opt %s --pass-pipeline='ditron-tile{num-chunks=2 engine=copy_engine},ditron-lower-task-to-device,ditron-schedule-overlap{pull=ring}' | FileCheck %s --check-prefix=RING
// A gather into a function output: direct pulls copy each peer's chunk straight into the output (nobody reads this
// rank's gather-buffer copy of it), so the local copy from the gather buffer goes away. A ring forwards chunks from
// the gather buffer, so it keeps pulling into the buffer and copying locally.

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @gather
  // CHECK-SAME: %[[X:[a-z0-9]+]]: memref<64x32xbf16> {ditron.io = "in"}, %[[OUT:[a-z0-9]+]]: memref<256x32xbf16> {ditron.io = "out"}
  // CHECK: %[[G:.*]] = "ditron_device.alloc_symmetric"() {name = "ag_gather"}
  // CHECK: scf.for
  // CHECK: "ditron_device.wait"({{.*}}ditron.role = "ag.await"
  // CHECK-NEXT: "ditron_device.copy"(%[[G]], %[[OUT]], {{.*}}ditron.role = "ag.pull"
  // CHECK-NEXT: "ditron_device.signal"({{.*}}ditron.role = "ag.arrive"
  // CHECK: } {ditron.gather = 0 : i64, ditron.pull = "direct", ditron.role = "ag.pull_loop"}
  // RING: "ditron_device.copy"(%[[G:.*]], %[[G]], {{.*}}ditron.role = "ag.pull"
  // RING-NEXT: "ditron_device.copy"(%[[G]], %{{.*}}, {{.*}}ditron.role = "ag.local"
  func.func @gather(%x: tensor<64x32xbf16>) -> tensor<256x32xbf16> attributes {ditron.view = "local"} {
    %y = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<64x32xbf16>) -> tensor<256x32xbf16>
    return %y : tensor<256x32xbf16>
  }
}
