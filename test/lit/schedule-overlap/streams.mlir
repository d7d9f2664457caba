// RUN: ditron-opt %S/Inputs/ag_gemm.mlir --pass-pipeline='ditron-tile{all-gather=pull chunk-rows=32 engine=copy_engine},ditron-lower-task-to-device,ditron-schedule-overlap' | FileCheck %s
// RUN: ditron-opt %S/Inputs/ag_gemm.mlir --pass-pipeline='ditron-tile{all-gather=pull chunk-rows=32 engine=copy_engine},ditron-lower-task-to-device,ditron-schedule-overlap{streams=false tile-order=row_major}' | FileCheck %s --check-prefix=SERIAL
// RUN: ditron-opt %S/Inputs/gemm_rs.mlir --pass-pipeline='ditron-tile{block-m=64 block-n=128 chunk-rows=128 comm-sms=8},ditron-lower-task-to-device,ditron-schedule-overlap' | FileCheck %s --check-prefix=RS
// RUN: ditron-opt %S/Inputs/gemm_rs.mlir --pass-pipeline='ditron-tile{block-m=64 block-n=128 chunk-rows=128 comm-sms=8},ditron-lower-task-to-device,ditron-schedule-overlap{comm-sms=20}' | FileCheck %s --check-prefix=SPLIT

// Lanes become streams: compute 0, comm 1. The GEMM that waits for gathered rows visits them rank_rotated (own
// shard first), through a kernel whose record says so.
// CHECK-LABEL: func.func @ag_gemm
// CHECK: "ditron_device.signal"({{.*}}ditron.role = "entry.signal"{{.*}}stream = 0 : i64
// CHECK: "ditron_device.wait"({{.*}}ditron.role = "entry.wait"{{.*}}stream = 1 : i64
// CHECK: "ditron_device.copy"({{.*}}ditron.role = "ag.stage"{{.*}}stream = 1 : i64
// CHECK: "ditron_device.signal"({{.*}}ditron.role = "ag.offer_signal"{{.*}}stream = 1 : i64
// CHECK: scf.for
// CHECK-SAME: {
// CHECK: "ditron_device.wait"({{.*}}ditron.role = "ag.await"{{.*}}stream = 1 : i64
// CHECK: "ditron_device.copy"({{.*}}ditron.role = "ag.pull"{{.*}}stream = 1 : i64
// CHECK: } {ditron.gather = 0 : i64, ditron.group = 0 : i64, ditron.pull = "direct", ditron.role = "ag.pull_loop"}
// CHECK: "ditron_device.launch"({{.*}}ditron.role = "ag.gemm"{{.*}}kernel = @[[GEMM:[a-z_0-9]+]],{{.*}}stream = 0 : i64, tile_order = "rank_rotated"}
// CHECK: "ditron_device.barrier"({{.*}}stream = 0 : i64
// CHECK: func.func private @[[GEMM]]({{.*}}rows_per_rank = 64 : i64{{.*}}tile_order = "rank_rotated"
// CHECK-NOT: func.func private @gemm(

// SERIAL-LABEL: func.func @ag_gemm
// SERIAL-NOT: stream = 1
// SERIAL: tile_order = "row_major"

// GEMM + reduce-scatter: the reduce lane gets its own stream beside the GEMM.
// RS-LABEL: func.func @gemm_rs
// RS: "ditron_device.launch"({{.*}}ditron.role = "rs.gemm", grid = array<i64: 8, 1, 1>{{.*}}sm_budget = 8 : i64, stream = 0 : i64, tile_order = "rank_rotated"}
// RS: "ditron_device.wait"({{.*}}ditron.role = "rs.await"{{.*}}stream = 2 : i64
// RS: "ditron_device.launch"({{.*}}ditron.role = "rs.reduce", grid = array<i64: 8, 1, 1>{{.*}}sm_budget = 8 : i64, stream = 2 : i64
// RS: "ditron_device.wait"({{.*}}ditron.role = "rs.join.wait"{{.*}}stream = 0 : i64

// SPLIT-LABEL: func.func @gemm_rs
// SPLIT: "ditron_device.launch"({{.*}}ditron.role = "rs.reduce", grid = array<i64: 20, 1, 1>
// SPLIT: func.func private @{{.*}}num_sms = 112 : i64
