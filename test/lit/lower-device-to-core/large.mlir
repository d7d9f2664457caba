// RUN: ditron-opt %s --pass-pipeline=ditron-lower-device-to-core | FileCheck %s
// An SM copy gets a copy kernel, whose offsets are i32 arguments, only where every dim of its buffers fits i32:
// a copy out of a buffer of 2^32 rows is left to the executor's own copy.

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @copies
  // CHECK: "ditron_device.copy"(%arg0, %arg2, {{.*}}) {ditron.copy_kernel = @{{.*}}, engine = "sm"} : (memref<1024x64xbf16>
  // CHECK: "ditron_device.copy"(%arg1, %arg2, {{.*}}) {engine = "sm"} : (memref<4294967296x64xbf16>
  // CHECK: template = "copy"
  // CHECK-NOT: template = "copy"
  func.func @copies(%small: memref<1024x64xbf16> {ditron.io = "in"}, %big: memref<4294967296x64xbf16> {ditron.io = "in"},
                    %out: memref<1024x64xbf16> {ditron.io = "out"}, %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    %me = "ditron_device.rank"() : () -> index
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %c1024 = arith.constant 1024 : index
    %row = arith.constant 4294966272 : index
    "ditron_device.copy"(%small, %out, %me, %me, %c0, %c0, %c0, %c0, %c1024, %c64) {engine = "sm"} : (memref<1024x64xbf16>, memref<1024x64xbf16>, index, index, index, index, index, index, index, index) -> ()
    "ditron_device.copy"(%big, %out, %me, %me, %row, %c0, %c0, %c0, %c1024, %c64) {engine = "sm"} : (memref<4294967296x64xbf16>, memref<1024x64xbf16>, index, index, index, index, index, index, index, index) -> ()
    return
  }
}
