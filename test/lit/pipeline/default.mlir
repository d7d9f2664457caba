// ditron-default: task IR in the global view -> core kernels (tt.func + ditron_core) + the host program.
// ditron-device is the same pipeline up to the device program (before ditron-emit-host-program): the device
// function that launches the kernels, which the simulator runs.
// RUN: ditron-opt %S/../../../examples/mlp.mlir --pass-pipeline=ditron-device | FileCheck %s --check-prefix=MLP
// RUN: ditron-opt %S/../../../examples/ag_gemm.mlir --pass-pipeline=ditron-device | FileCheck %s --check-prefix=AG
// RUN: ditron-opt %S/../../../examples/gemm_rs.mlir --pass-pipeline=ditron-device | FileCheck %s --check-prefix=RS
// RUN: ditron-opt %S/../../../examples/gemm_ar.mlir --pass-pipeline=ditron-device | FileCheck %s --check-prefix=AR
// ditron-default ends with the emission: the device function becomes the host program (JSON on the module), the
// runtime kernels join the kernels, the record lists every stage; ditron-device then the emission is the same.
// RUN: ditron-opt %S/../../../examples/gemm_rs.mlir --pass-pipeline=ditron-default | FileCheck %s --check-prefix=HOST
// RUN: ditron-opt %S/../../../examples/gemm_rs.mlir --pass-pipeline=ditron-device,ditron-emit-host-program | FileCheck %s --check-prefix=HOST
// An empty module has nothing to lower: it comes back as it is (as through mlir-opt), not as an error.
// RUN: echo 'module {}' | ditron-opt - --pass-pipeline=ditron-default | FileCheck %s --check-prefix=EMPTY
// RUN: echo 'module {}' | ditron-opt - --pass-pipeline=ditron-device | FileCheck %s --check-prefix=EMPTY
// EMPTY: module {
// EMPTY-NEXT: }
// RUN: ditron-opt %s --pass-pipeline=ditron-device | FileCheck %s
// RUN: ditron-opt %s --pass-pipeline=ditron-default | FileCheck %s --check-prefix=SINGLE

// HOST: module attributes {ditron.host_program = "{
// HOST-SAME: \22kernels\22: {\22gemm\22: {\22args\22: [\22a\22, \22b\22, \22c\22, \22counts\22, \22staged\22, \22own_value\22, \22stage\22, \22out\22], \22spins\22: true, \22template\22: \22gemm\22
// HOST-SAME: \22name\22: \22gemm_rs\22
// HOST-SAME: \22runtime\22: {\22barrier\22: \22ditron_rt_barrier\22, \22signal\22: {\22set:gpu\22: \22ditron_rt_signal_set_gpu\22, \22set:sys\22: \22ditron_rt_signal_set_sys\22}, \22wait\22: \22ditron_rt_wait\22
// HOST-SAME: ditron.pipeline = "ditron-partition,ditron-canonicalize,ditron-fuse-overlap,ditron-fuse-epilogue,ditron-tile,ditron-lower-task-to-device,ditron-schedule-overlap,ditron-lower-device-to-core,ditron-emit-host-program"
// HOST-NOT: func.func
// HOST-NOT: "ditron_device.
// HOST: sym_name = "gemm"
// HOST-NOT: func.func
// HOST-NOT: "ditron_device.
// HOST: sym_name = "ditron_rt_wait"
// HOST-NOT: func.func
// HOST-NOT: "ditron_device.

// One rank through ditron-default: a host program of one launch, no runtime kernel (nothing waits or signals).
// SINGLE: module attributes {ditron.host_program = "{
// SINGLE-SAME: \22name\22: \22single\22
// SINGLE-NOT: ditron_rt_
// SINGLE-NOT: func.func
// SINGLE: sym_name = "[[K:[a-z_0-9]+]]"
// SINGLE-NOT: ditron_rt_
// SINGLE-NOT: func.func

// MLP-LABEL: func.func @mlp
// MLP-SAME: ditron.level = "device"
// The gelu after the AG+GEMM is the GEMM's epilogue (ditron-fuse-epilogue): no elementwise kernel.
// MLP: "ditron_device.launch"({{.*}}ditron.role = "ag.gemm"{{.*}}kernel = @[[G1:[a-z_0-9]+]],{{.*}}tile_order = "rank_rotated"
// MLP-NOT: ditron.role = "elementwise"
// MLP: "ditron_device.launch"({{.*}}ditron.role = "rs.gemm"{{.*}}kernel = @[[G2:[a-z_0-9]+]],
// MLP: "ditron_device.copy"({{.*}}ditron.role = "rs.pull"
// MLP: "ditron_device.barrier"
// MLP-DAG: epilogue = [{fn = "gelu"}]{{.*}}sym_name = "[[G1]]"
// MLP-DAG: sym_name = "[[G2]]"
// MLP-NOT: template = "elementwise"
// MLP-NOT: func.func private

// AG-LABEL: func.func @ag_gemm(%arg0: memref<2048x4096xbf16> {{.*}}, %arg1: memref<4096x3584xbf16> {{.*}}, %arg2: memref<8192x3584xbf16> {ditron.io = "out", ditron.layout = {dims = {{\[}}[], ["tp"]]}}, %arg3: index {ditron.io = "epoch"})
// AG: "ditron_device.copy"({{.*}}ditron.role = "ag.pull"{{.*}}stream = 1 : i64
// AG: "ditron_device.launch"({{.*}}ditron.role = "ag.gemm"{{.*}}kernel = @[[K:[a-z_0-9]+]],{{.*}}stream = 0 : i64, tile_order = "rank_rotated"
// AG: sym_name = "[[K]]"

// RS-LABEL: func.func @gemm_rs
// The model puts the reduction in the GEMM's epilogue: the copy engine pulls peers' partials on stream 1 as they
// complete, and the GEMM's own tiles (visited last) wait for them; no reduce kernel, no SMs for communication.
// RS: "ditron_device.launch"({{.*}}ditron.role = "rs.gemm"{{.*}}kernel = @[[G:[a-z_0-9]+]],{{.*}}sm_budget = 132 : i64, stream = 0 : i64, tile_order = "rank_rotated"
// RS: "ditron_device.wait"({{.*}}ditron.role = "rs.await", stream = 1 : i64
// RS: "ditron_device.copy"({{.*}}ditron.role = "rs.pull", engine = "copy_engine", stream = 1 : i64
// RS: "ditron_device.signal"({{.*}}ditron.role = "rs.staged"{{.*}}stream = 1 : i64
// RS-NOT: rs.reduce
// RS: "ditron_device.barrier"
// RS: ditron.kernel = {args = ["a", "b", "c", "counts", "staged", "own_value", "stage", "out"]{{.*}}rank_shift = 1 : i64, reduce_own = {arg = "staged", dst = "out", dst_rows = "shard", parts = 3 : i64{{.*}}sym_name = "[[G]]"

// AR-LABEL: func.func @gemm_ar
// On four ranks the model reduces in the GEMM's epilogue and all-gathers the reduced rows (copy engine, beside the
// GEMM): a push would store three full copies of C from the SMs, and those stores add their link time to the
// GEMM's (cost_model.gemm_push_estimate; two ranks push: lower-task-to-device/collectives.mlir).
// AR: "ditron_device.launch"({{.*}}ditron.role = "rs.gemm"{{.*}}sm_budget = 132 : i64
// AR: "ditron_device.copy"({{.*}}ditron.role = "rs.pull", engine = "copy_engine"
// AR: "ditron_device.wait"({{.*}}ditron.role = "ar.reduced"
// AR: "ditron_device.copy"({{.*}}ditron.role = "ag.pull", engine = "copy_engine"
// AR: "ditron_device.wait"({{.*}}ditron.role = "ar.join"
// AR: "ditron_device.barrier"
// AR: reduce_own = {arg = "staged", done = "done", dst = "out", dst_rows = "global", parts = 3 : i64

// One rank: the same pipeline gives a plain GEMM, no communication at all.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  // CHECK-LABEL: func.func @single
  // CHECK-NOT: ditron_device.copy
  // CHECK-NOT: ditron_device.barrier
  // CHECK: "ditron_device.launch"(%arg0, %arg1, %arg2) {{{.*}}kernel = @[[K:[a-z_0-9]+]],
  // CHECK: sym_name = "[[K]]"
  func.func @single(%x: tensor<256x128xbf16> {ditron.sharding = {dims = [["tp"], []]}},
                    %w: tensor<128x64xbf16> {ditron.sharding = {dims = [[], ["tp"]]}})
      -> (tensor<256x64xbf16> {ditron.sharding = {dims = [[], ["tp"]]}}) {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<256x128xbf16>, tensor<128x64xbf16>) -> tensor<256x64xbf16>
    return %y : tensor<256x64xbf16>
  }
}
