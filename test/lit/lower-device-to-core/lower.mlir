// RUN: ditron-opt %S/../schedule-overlap/Inputs/ag_gemm.mlir --pass-pipeline='ditron-tile{all-gather=pull chunk-rows=32 engine=sm comm-sms=8},ditron-lower-task-to-device,ditron-schedule-overlap,ditron-lower-device-to-core' | FileCheck %s
// RUN: ditron-opt %S/../schedule-overlap/Inputs/gemm_rs.mlir --pass-pipeline='ditron-tile{block-m=64 block-n=128 chunk-rows=128 comm-sms=8},ditron-lower-task-to-device,ditron-schedule-overlap,ditron-lower-device-to-core' | FileCheck %s --check-prefix=RS
// RUN: ditron-opt %s --pass-pipeline=ditron-lower-device-to-core | FileCheck %s --check-prefix=HAND

// The host program stays (rank is a run-time value); the GEMM is a tt.func with a per-tile wait
// (ditron_core.wait on the ready slot, consumed before the A loads); SM copies name a copy kernel.
// CHECK-LABEL: func.func @ag_gemm
// CHECK: "ditron_device.rank"
// CHECK: "ditron_device.copy"({{.*}}ditron.copy_kernel = @[[COPY:[a-z_0-9]+]]{{.*}}ditron.role = "ag.stage", ditron.sms = 8 : i64, engine = "sm"
// CHECK: "ditron_device.launch"({{.*}}kernel = @[[GEMM:[a-z_0-9]+]],
// CHECK-NOT: func.func private
// CHECK: "tt.func"() ({
// CHECK: "ditron_core.rank"() : () -> i32
// CHECK: "ditron_core.wait"({{.*}}) {scope = "sys", semantic = "acquire"} : (!tt.ptr<i32>, i32) -> i32
// CHECK: "ditron_core.consume_token"
// CHECK: "tt.dot"
// CHECK: }) {{{.*}}ditron.kernel = {{{.*}}template = "gemm"{{.*}}sym_name = "[[GEMM]]"
// CHECK: "tt.func"() ({
// CHECK: "ditron_core.symm_at"
// CHECK: }) {{{.*}}ditron.kernel = {{{.*}}template = "copy"{{.*}}sym_name = "[[COPY]]"

// The GEMM of GEMM+RS notifies the owner of each finished tile's rows; the reduction reads every rank's rows.
// RS-LABEL: func.func @gemm_rs
// RS: "ditron_core.symm_at"
// RS: }) {{{.*}}sym_name = "reduce"
// RS: "ditron_core.notify"({{.*}}) {op = "add", scope = "sys", semantic = "release"}
// RS: }) {{{.*}}template = "gemm"

// A hand-written device program: the declaration becomes the template's kernel, with the same name and record.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // HAND-LABEL: func.func @scale
  // HAND: "ditron_device.launch"(%arg0, %arg1) {{{.*}}kernel = @relu
  // HAND: "tt.func"() ({
  // HAND: ^bb0(%{{.*}}: !tt.ptr<bf16>, %{{.*}}: !tt.ptr<bf16>):
  // HAND: "tt.store"
  // HAND: }) {{{.*}}ditron.kernel = {args = ["x0", "y"]{{.*}}fn = "relu"{{.*}}name = "relu"{{.*}}template = "elementwise"}{{.*}}sym_name = "relu"
  func.func @scale(%x: memref<64x32xbf16> {ditron.io = "in"}, %y: memref<64x32xbf16> {ditron.io = "out"}, %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    "ditron_device.launch"(%x, %y) {kernel = @relu, grid = array<i64: 2, 1, 1>, sm_budget = 2 : i64, tile_order = "row_major", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (memref<64x32xbf16>, memref<64x32xbf16>) -> ()
    return
  }
  func.func private @relu(memref<64x32xbf16>, memref<64x32xbf16>) attributes {ditron.kernel = {template = "elementwise", name = "relu", fn = "relu", arity = 1 : i64, shape = [64, 32], dtype = "bf16", block_m = 32 : i64, block_n = 32 : i64, grid = 2 : i64, num_warps = 4 : i64, args = ["x0", "y"]}}
}
