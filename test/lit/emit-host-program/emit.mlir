// ditron-emit-host-program: the device function becomes the host program (JSON, on the module), the device
// function and the kernel declarations go, the runtime kernels the program needs are added: core level is left.
// RUN: ditron-opt %s --pass-pipeline=ditron-emit-host-program | FileCheck %s
// The runtime kernels are built for the module's ditron.target, else the target option (here AMD's acquire load).
// RUN: ditron-opt %s --pass-pipeline='ditron-emit-host-program{target=hip:gfx942}' | FileCheck %s --check-prefix=HIP
// Without either, the target the device function was tiled for (ditron-lower-task-to-device stamps it there).
// RUN: sed 's/ditron.axis = "tp"}/ditron.axis = "tp", ditron.target = "hip:gfx942"}/' %s | ditron-opt - --pass-pipeline=ditron-emit-host-program | FileCheck %s --check-prefix=HIP
// An empty module has no device function and nothing to emit: it comes back as it is (as through ditron-default).
// RUN: echo 'module {}' | ditron-opt - --pass-pipeline=ditron-emit-host-program | FileCheck %s --check-prefix=EMPTY
// EMPTY: module {
// EMPTY-NEXT: }
// The whole way from task IR: ditron-default, whose last pass is the emission; the record lists every stage.
// RUN: ditron-opt %S/../../../examples/ag_gemm.mlir --pass-pipeline=ditron-default | FileCheck %s --check-prefix=AG

// CHECK: module attributes {ditron.host_program = "{
// CHECK-SAME: \22fence\22: \22barrier\22
// CHECK-SAME: \22kernels\22: {\22k\22: {\22spins\22: false, \22template\22: null, \22wait\22: null}}
// CHECK-SAME: \22name\22: \22f\22
// CHECK-SAME: \22runtime\22: {\22signal\22: {\22set:sys\22: \22ditron_rt_signal_set_sys\22}, \22wait\22: \22ditron_rt_wait\22, \22wait_lanes\22: 128}
// CHECK-NOT: func.func
// CHECK: sym_name = "k"
// CHECK: ld.acquire.sys
// CHECK-NOT: func.func
// CHECK: sym_name = "ditron_rt_wait"
// CHECK: sym_name = "ditron_rt_signal_set_sys"
// CHECK-NOT: ditron_device
// CHECK-NOT: func.func

// HIP: ditron.host_program
// HIP-NOT: ld.acquire
// HIP: "tt.atomic_rmw"({{.*}}scope = 3 : i32, sem = 2 : i32
// HIP: sym_name = "ditron_rt_wait"
// HIP-NOT: func.func

// AG: module attributes {ditron.host_program = "{
// AG-SAME: \22kernels\22: {\22
// AG-SAME: ditron.pipeline = "ditron-partition,ditron-canonicalize,ditron-fuse-overlap,ditron-fuse-epilogue,ditron-tile,ditron-lower-task-to-device,ditron-schedule-overlap,ditron-lower-device-to-core,ditron-emit-host-program"
// AG-NOT: ditron.level
// AG-NOT: ditron_device.
// AG: sym_name = "ditron_rt_wait"

module {
  "tt.func"() <{function_type = (!tt.ptr<f32>) -> (), sym_name = "k", sym_visibility = "public"}> ({
  ^bb0(%p: !tt.ptr<f32>):
    "tt.return"() : () -> ()
  }) : () -> ()
  func.func private @decl() attributes {ditron.kernel = {template = "gemm"}}
  func.func @f(%x: memref<4xf32> {ditron.io = "in"}, %epoch: index {ditron.io = "epoch"}) attributes {ditron.level = "device", ditron.axis = "tp"} {
    %sig = "ditron_device.alloc_symmetric"() {name = "sig"} : () -> memref<8xi32>
    %c0 = arith.constant 0 : index
    "ditron_device.signal"(%sig, %c0, %c0, %epoch) {op = "set", scope = "sys", stream = 0 : i64} : (memref<8xi32>, index, index, index) -> ()
    "ditron_device.wait"(%sig, %epoch, %c0) {where = "stream", stream = 0 : i64} : (memref<8xi32>, index, index) -> ()
    "ditron_device.launch"(%x) {kernel = @k, grid = array<i64: 1>, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, sm_budget = 1 : i64, tile_order = "row_major", stream = 0 : i64} : (memref<4xf32>) -> ()
    return
  }
}
