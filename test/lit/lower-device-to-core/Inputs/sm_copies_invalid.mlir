// SM copies that have no copy kernel (checked by ../sm_copies.mlir): located errors, not a copy that runs on
// another engine than the one the program names.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @rank3(%x: memref<2x4x8xbf16> {ditron.io = "in"}, %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    %g = "ditron_device.alloc_symmetric"() {name = "g"} : () -> memref<2x4x8xbf16>
    %me = "ditron_device.rank"() : () -> index
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c8 = arith.constant 8 : index
    // ERR: sm_copies_invalid.mlir:[[# @LINE + 1]]:5: error: ditron-lower-device-to-core: 'ditron_device.copy' op copies a rank-3 region with engine = "sm", which has no SM copy kernel (static rank-1 and rank-2 regions only); use engine = "copy_engine"
    "ditron_device.copy"(%x, %g, %me, %me, %c0, %c0, %c0, %c0, %c0, %c0, %c2, %c4, %c8) {engine = "sm"} : (memref<2x4x8xbf16>, memref<2x4x8xbf16>, index, index, index, index, index, index, index, index, index, index, index) -> ()
    return
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @dynamic(%x: memref<64xbf16> {ditron.io = "in"}, %n: index {ditron.io = "in"}, %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    %g = "ditron_device.alloc_symmetric"() {name = "g"} : () -> memref<64xbf16>
    %me = "ditron_device.rank"() : () -> index
    %c0 = arith.constant 0 : index
    // ERR: sm_copies_invalid.mlir:[[# @LINE + 1]]:5: error: ditron-lower-device-to-core: 'ditron_device.copy' op copies a dynamic-size rank-1 region with engine = "sm", which has no SM copy kernel (static rank-1 and rank-2 regions only); use engine = "copy_engine"
    "ditron_device.copy"(%x, %g, %me, %me, %c0, %c0, %n) {engine = "sm"} : (memref<64xbf16>, memref<64xbf16>, index, index, index, index, index) -> ()
    return
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @third_party(%e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    %g = "ditron_device.alloc_symmetric"() {name = "g"} : () -> memref<64xbf16>
    %h = "ditron_device.alloc_symmetric"() {name = "h"} : () -> memref<64xbf16>
    %me = "ditron_device.rank"() : () -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c64 = arith.constant 64 : index
    %a = arith.addi %me, %c1 : index
    %b = arith.addi %me, %c2 : index
    // ERR: sm_copies_invalid.mlir:[[# @LINE + 1]]:5: error: ditron-lower-device-to-core: 'ditron_device.copy' op copies with engine = "sm" between two ranks neither of which is the executing one (ditron_device.rank); an SM copy pulls into or pushes from the executing rank's memory
    "ditron_device.copy"(%g, %h, %a, %b, %c0, %c0, %c64) {engine = "sm"} : (memref<64xbf16>, memref<64xbf16>, index, index, index, index, index) -> ()
    return
  }
}

// -----

// a buffer of 2^32 rows: the copy kernel's i32 offsets cannot reach its far rows
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @big(%big: memref<4294967296x64xbf16> {ditron.io = "in"}, %out: memref<1024x64xbf16> {ditron.io = "out"},
                 %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    %me = "ditron_device.rank"() : () -> index
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %c1024 = arith.constant 1024 : index
    %row = arith.constant 4294966272 : index
    // ERR: sm_copies_invalid.mlir:[[# @LINE + 1]]:5: error: ditron-lower-device-to-core: 'ditron_device.copy' op copies with engine = "sm" a region of a buffer with a dim of 4294967296, past the i32 offsets of the SM copy kernel; use engine = "copy_engine"
    "ditron_device.copy"(%big, %out, %me, %me, %row, %c0, %c0, %c0, %c1024, %c64) {engine = "sm"} : (memref<4294967296x64xbf16>, memref<1024x64xbf16>, index, index, index, index, index, index, index, index) -> ()
    return
  }
}
