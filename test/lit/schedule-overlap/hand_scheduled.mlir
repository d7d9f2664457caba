// RUN: ditron-opt %s --pass-pipeline=ditron-schedule-overlap | FileCheck %s

// A device function written with its streams and no ditron.lane (scheduled by hand, e.g. by ditron.device's
// builder users or in IR) has nothing for the pass to map onto streams: it is left as it is, with no rank op
// and launches of kernels that have no template record.
// CHECK-LABEL: func.func @hand
// CHECK: "ditron_device.launch"(%arg0, %0, %c2048) {{.*}}kernel = @scale{{.*}}stream = 1 : i64
// CHECK-NOT: tile_order = "rank_rotated"
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func private @scale(memref<64x32xbf16>, memref<64x32xbf16>, index) attributes {ditron.jit = {key = "0123abcd", params = ["x_ptr", "y_ptr", "n"]}}
  func.func @hand(%x: memref<64x32xbf16> {ditron.io = "in"}, %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    %t = "ditron_device.alloc_symmetric"() {name = "t"} : () -> memref<64x32xbf16>
    %n = arith.constant 2048 : index
    "ditron_device.launch"(%x, %t, %n) {kernel = @scale, grid = array<i64: 4, 1, 1>, sm_budget = 4 : i64, tile_order = "row_major", stream = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (memref<64x32xbf16>, memref<64x32xbf16>, index) -> ()
    return
  }
}
