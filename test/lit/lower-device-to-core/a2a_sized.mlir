// RUN: ditron-opt %S/../lower-task-to-device/all_to_all_sized.mlir --pass-pipeline='ditron-tile{comm-sms=8},ditron-lower-task-to-device,ditron-lower-device-to-core' | FileCheck %s
// RUN: not ditron-opt %s --pass-pipeline=ditron-lower-device-to-core 2>&1 | FileCheck %s --check-prefix=BAD

// The bounded all_to_all's launch gets the a2a_sized kernel: the counts matrix loaded once (masked to the 4 ranks),
// the offsets as sums over it (tt.reduce), each source's rows read through symm_at, no wait and no notify.
// CHECK: "ditron_device.launch"(%{{.*}}) {{{.*}}kernel = @a2a_sized
// CHECK: "tt.func"() ({
// CHECK-NEXT: ^bb0(%arg0: !tt.ptr<bf16>, %arg1: !tt.ptr<bf16>, %arg2: !tt.ptr<i32>, %arg3: !tt.ptr<i32>):
// CHECK: "ditron_core.rank"
// CHECK: "tt.load"
// CHECK: "tt.reduce"
// CHECK: scf.for
// CHECK: "ditron_core.symm_at"(%arg0
// CHECK: scf.for
// CHECK: "tt.store"
// CHECK-NOT: ditron_core.wait
// CHECK-NOT: ditron_core.notify
// CHECK: sym_name = "a2a_sized"

// A record the template refuses is an error at the declaration.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @f(%x: memref<8x16xbf16>, %o: memref<16x16xbf16>, %c: memref<4xi32>, %r: memref<2xi32>, %e: index) attributes {ditron.level = "device", arg_attrs = [{ditron.io = "in"}, {ditron.io = "out"}, {ditron.io = "in"}, {ditron.io = "out"}, {ditron.io = "epoch"}]} {
    "ditron_device.launch"(%x, %o, %c, %r) {grid = array<i64: 4, 1, 1>, kernel = @bad, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, sm_budget = 4 : i64, stream = 0 : i64, tile_order = "grouped"} : (memref<8x16xbf16>, memref<16x16xbf16>, memref<4xi32>, memref<2xi32>) -> ()
    return
  }
  // BAD: a2a_sized.mlir:[[# @LINE + 1]]:3: error: {{.*}}a2a_sized template: block_m=3 must be a power of two
  func.func private @bad(memref<8x16xbf16>, memref<16x16xbf16>, memref<4xi32>, memref<2xi32>) attributes {ditron.kernel = {args = ["send", "out", "counts", "recv"], block_m = 3 : i64, block_n = 16 : i64, capacity = 16 : i64, cols = 16 : i64, dtype = "bf16", grid = 4 : i64, name = "bad", num_warps = 4 : i64, rows = 8 : i64, template = "a2a_sized", world = 2 : i64}}
}
