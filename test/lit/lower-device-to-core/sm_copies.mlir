// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-lower-device-to-core 2>&1 | FileCheck %s
// RUN: not ditron-opt %S/Inputs/sm_copies_invalid.mlir --split-input-file --pass-pipeline=ditron-lower-device-to-core 2>&1 | FileCheck %S/Inputs/sm_copies_invalid.mlir --check-prefix=ERR

// An SM copy gets a copy-template kernel that moves its region: a pull (the destination on the executing rank)
// reads the peer's source through symm_at, a push (the source on the executing rank) writes the peer's
// destination. The executor launches it for the copy.
// CHECK-LABEL: func.func @pull_and_push
// CHECK: "ditron_device.copy"({{.*}}ditron.copy_kernel = @[[PULL:[a-z_0-9]+]]{{.*}}engine = "sm"
// CHECK: "ditron_device.copy"({{.*}}ditron.copy_kernel = @[[PUSH:[a-z_0-9]+]]{{.*}}engine = "sm"
// CHECK: "ditron_device.copy"({{.*}}) {engine = "copy_engine"}
// CHECK: "tt.func"() ({
// CHECK: }) {{{.*}}ditron.kernel = {{{.*}}direction = "pull"{{.*}}rows = 16 : i64{{.*}}template = "copy"{{.*}}sym_name = "[[PULL]]"
// CHECK: "tt.func"() ({
// CHECK: }) {{{.*}}ditron.kernel = {{{.*}}direction = "push"{{.*}}rows = 16 : i64{{.*}}template = "copy"{{.*}}sym_name = "[[PUSH]]"
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @pull_and_push(%x: memref<16x64xbf16> {ditron.io = "in"}, %y: memref<32x64xbf16> {ditron.io = "out"},
                           %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device", ditron.axis = "tp"} {
    %g = "ditron_device.alloc_symmetric"() {name = "g"} : () -> memref<32x64xbf16>
    %me = "ditron_device.rank"() : () -> index
    %w = "ditron_device.num_ranks"() : () -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c16 = arith.constant 16 : index
    %c64 = arith.constant 64 : index
    %next = arith.addi %me, %c1 : index
    %peer = arith.remui %next, %w : index
    %row = arith.muli %me, %c16 : index
    "ditron_device.copy"(%g, %y, %peer, %me, %row, %c0, %row, %c0, %c16, %c64) {engine = "sm"} : (memref<32x64xbf16>, memref<32x64xbf16>, index, index, index, index, index, index, index, index) -> ()
    "ditron_device.copy"(%x, %g, %me, %peer, %c0, %c0, %row, %c0, %c16, %c64) {engine = "sm"} : (memref<16x64xbf16>, memref<32x64xbf16>, index, index, index, index, index, index, index, index) -> ()
    "ditron_device.copy"(%x, %g, %me, %me, %c0, %c0, %row, %c0, %c16, %c64) {engine = "copy_engine"} : (memref<16x64xbf16>, memref<32x64xbf16>, index, index, index, index, index, index, index, index) -> ()
    return
  }
}
