// RUN: ditron-opt %s --pass-pipeline=ditron-lower-device-to-core | FileCheck %s

// A launch of a user @ditron.jit kernel (ditron.device Program.jit): its private declaration carries ditron.jit
// (the key of its Python function and its parameters) instead of a template record; the pass leaves it as it is
// (ditron.compile compiles it from Python) and instantiates the template kernels beside it. A declaration with
// neither is still refused (errors.mlir: "has no 'ditron.kernel' record to instantiate").
// CHECK: func.func private @scale(memref<64x32xbf16>, memref<64x32xbf16>, index) attributes {ditron.jit = {key = "0123abcd", params = ["x_ptr", "y_ptr", "n"]}}
// CHECK-NEXT: "tt.func"() ({
// CHECK: sym_name = "relu"
// CHECK-LABEL: func.func @user
// CHECK: "ditron_device.launch"({{.*}}kernel = @scale
// CHECK: "ditron_device.launch"({{.*}}kernel = @relu
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func private @scale(memref<64x32xbf16>, memref<64x32xbf16>, index) attributes {ditron.jit = {key = "0123abcd", params = ["x_ptr", "y_ptr", "n"]}}
  func.func private @relu(memref<64x32xbf16>, memref<64x32xbf16>) attributes {ditron.kernel = {template = "elementwise", name = "relu", fn = "relu", arity = 1 : i64, shape = [64, 32], dtype = "bf16", block_m = 32 : i64, block_n = 32 : i64, grid = 2 : i64, num_warps = 4 : i64, args = ["x0", "y"]}}
  func.func @user(%x: memref<64x32xbf16> {ditron.io = "in"}, %y: memref<64x32xbf16> {ditron.io = "out"}, %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    %t = "ditron_device.alloc_symmetric"() {name = "t"} : () -> memref<64x32xbf16>
    %n = arith.constant 2048 : index
    "ditron_device.launch"(%x, %t, %n) {kernel = @scale, grid = array<i64: 4, 1, 1>, sm_budget = 4 : i64, tile_order = "row_major", stream = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (memref<64x32xbf16>, memref<64x32xbf16>, index) -> ()
    "ditron_device.launch"(%t, %y) {kernel = @relu, grid = array<i64: 2, 1, 1>, sm_budget = 2 : i64, tile_order = "row_major", stream = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (memref<64x32xbf16>, memref<64x32xbf16>) -> ()
    return
  }
}
