// ditron-emit-host-program refuses what it cannot make a host program of, with a located error.
// RUN: not ditron-opt %s --split-input-file --pass-pipeline=ditron-emit-host-program 2>&1 | FileCheck %s
// The runtime kernels' target must be one ditron knows.
// RUN: not ditron-opt %S/emit.mlir --pass-pipeline='ditron-emit-host-program{target=cuda:1}' 2>&1 | FileCheck %s --check-prefix=TARGET
// TARGET: error: {{.*}}cuda:1
// TARGET-NOT: Traceback

// A launch of a kernel not yet instantiated (a declaration): ditron-lower-device-to-core comes first.
// CHECK: errors.mlir:[[# @LINE + 4]]:5: error: launch of '@k': the kernel is a func.func, not a tt.func; run ditron-lower-device-to-core first
module {
  func.func private @k() attributes {ditron.kernel = {template = "gemm"}}
  func.func @f(%x: memref<4xf32> {ditron.io = "in"}, %epoch: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    "ditron_device.launch"(%x) {kernel = @k, grid = array<i64: 1>, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, sm_budget = 1 : i64, tile_order = "row_major"} : (memref<4xf32>) -> ()
    return
  }
}

// -----

// An op a host program cannot run (it allocates; symmetric buffers are the only memory a host program makes).
// CHECK: errors.mlir:[[# @LINE + 3]]:10: error: 'memref.alloc' cannot run in a host program
module {
  func.func @f(%x: memref<4xf32> {ditron.io = "in"}, %epoch: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    %m = memref.alloc() : memref<4xf32>
    return
  }
}

// -----

// Nothing to emit: the module has kernels but no device function (an empty module comes back as it is: emit.mlir).
// CHECK: errors.mlir:[[# @LINE + 1]]:1: error: ditron-emit-host-program: the module has no device-level function (a func.func with ditron.level = "device") to make a host program of
module {
  "tt.func"() <{function_type = () -> (), sym_name = "k", sym_visibility = "public"}> ({
    "tt.return"() : () -> ()
  }) : () -> ()
}

// -----

// The pass runs once: a module already holding a host program is refused.
// CHECK: errors.mlir:[[# @LINE + 1]]:1: error: ditron-emit-host-program: the module already holds a host program (ditron.host_program); the pass runs once, on the device program
module attributes {ditron.host_program = "{}"} {
  func.func @f(%x: memref<4xf32> {ditron.io = "in"}, %epoch: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    return
  }
}

// -----

// Task-level ops outside the device function cannot be compiled beside it.
// CHECK: errors.mlir:[[# @LINE + 3]]:10: error: ditron-emit-host-program: 'ditron_task.matmul' is outside the device function; only core-level kernels may stay beside it
module {
  func.func @g(%a: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %c = "ditron_task.matmul"(%a, %a) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    return %c : tensor<8x8xf32>
  }
  func.func @f(%x: memref<4xf32> {ditron.io = "in"}, %epoch: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    return
  }
}
