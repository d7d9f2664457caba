// RUN: not ditron-opt %s --split-input-file --pass-pipeline=ditron-lower-device-to-core 2>&1 | FileCheck %s
// RUN: not ditron-opt %s --pass-pipeline='ditron-lower-device-to-core{target=cuda:90}' 2>&1 | FileCheck %s --check-prefix=OPT
// OPT: error: pass 'ditron-lower-device-to-core' has no option 'target' (options: none)

// Task IR handed to a device-level pass.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @task(%x: tensor<8x8xbf16>, %w: tensor<8x8xbf16>) -> tensor<8x8xbf16> attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-lower-device-to-core: 'ditron_task.matmul' op is task-level IR; lower it with ditron-lower-task-to-device (and schedule it with ditron-schedule-overlap) first
    %y = "ditron_task.matmul"(%x, %w) : (tensor<8x8xbf16>, tensor<8x8xbf16>) -> tensor<8x8xbf16>
    return %y : tensor<8x8xbf16>
  }
}

// -----

// CHECK: error: ditron-lower-device-to-core: the module has no device function (ditron.level = "device"); run ditron-lower-task-to-device first
module {
  func.func @nothing() {
    return
  }
}

// -----

// A launch of a kernel nobody recorded.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func private @mystery(memref<8xf32>)
  func.func @norecord(%x: memref<8xf32> {ditron.io = "in"}, %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:5: error: ditron-lower-device-to-core: 'ditron_device.launch' op launches '@mystery', which has no 'ditron.kernel' record to instantiate
    "ditron_device.launch"(%x) {kernel = @mystery, grid = array<i64: 1>, sm_budget = 1 : i64, tile_order = "grouped", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (memref<8xf32>) -> ()
    return
  }
}

// -----

// A launch whose operands do not match the record's arguments.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func private @relu(memref<64x32xbf16>) attributes {ditron.kernel = {template = "elementwise", name = "relu", fn = "relu", arity = 1 : i64, shape = [64, 32], dtype = "bf16", block_m = 32 : i64, block_n = 32 : i64, grid = 2 : i64, num_warps = 4 : i64, args = ["x0", "y"]}}
  func.func @short(%x: memref<64x32xbf16> {ditron.io = "in"}, %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:5: error: ditron-lower-device-to-core: 'ditron_device.launch' op passes 1 argument(s) to '@relu', whose record names 2: x0, y
    "ditron_device.launch"(%x) {kernel = @relu, grid = array<i64: 2>, sm_budget = 2 : i64, tile_order = "grouped", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (memref<64x32xbf16>) -> ()
    return
  }
}

// -----

// A record missing a field its template reads (an elementwise kernel without a shape): a located error, not an
// internal one.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK: errors.mlir:[[# @LINE + 1]]:3: error: ditron-lower-device-to-core: 'func.func' op kernel '@noshape': its ditron.kernel record is malformed (KeyError: 'shape')
  func.func private @noshape(memref<64x32xbf16>, memref<64x32xbf16>) attributes {ditron.kernel = {template = "elementwise", name = "noshape", fn = "relu", arity = 1 : i64, dtype = "bf16", block_m = 32 : i64, block_n = 32 : i64, grid = 2 : i64, num_warps = 4 : i64, args = ["x0", "y"]}}
  func.func @f(%x: memref<64x32xbf16> {ditron.io = "in"}, %y: memref<64x32xbf16> {ditron.io = "out"}, %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    "ditron_device.launch"(%x, %y) {kernel = @noshape, grid = array<i64: 2>, sm_budget = 2 : i64, tile_order = "grouped", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (memref<64x32xbf16>, memref<64x32xbf16>) -> ()
    return
  }
}

// -----

// A record the template refuses.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK: errors.mlir:[[# @LINE + 1]]:3: error: ditron-lower-device-to-core: 'func.func' op kernel '@bad' cannot be built: elementwise template: fn 'cube' is unknown
  func.func private @bad(memref<64x32xbf16>, memref<64x32xbf16>) attributes {ditron.kernel = {template = "elementwise", name = "bad", fn = "cube", arity = 1 : i64, shape = [64, 32], dtype = "bf16", block_m = 32 : i64, block_n = 32 : i64, grid = 2 : i64, num_warps = 4 : i64, args = ["x0", "y"]}}
  func.func @f(%x: memref<64x32xbf16> {ditron.io = "in"}, %y: memref<64x32xbf16> {ditron.io = "out"}, %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    "ditron_device.launch"(%x, %y) {kernel = @bad, grid = array<i64: 2>, sm_budget = 2 : i64, tile_order = "grouped", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (memref<64x32xbf16>, memref<64x32xbf16>) -> ()
    return
  }
}

// -----

// A template ditron.kernels does not have.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK: errors.mlir:[[# @LINE + 1]]:3: error: ditron-lower-device-to-core: 'func.func' op names kernel template 'fft', which ditron.kernels does not define
  func.func private @k(memref<8xf32>) attributes {ditron.kernel = {template = "fft", name = "k", args = ["x"]}}
  func.func @f(%x: memref<8xf32> {ditron.io = "in"}, %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    "ditron_device.launch"(%x) {kernel = @k, grid = array<i64: 1>, sm_budget = 1 : i64, tile_order = "grouped", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (memref<8xf32>) -> ()
    return
  }
}
