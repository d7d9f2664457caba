// RUN: not ditron-opt %s --split-input-file --pass-pipeline=ditron-schedule-overlap 2>&1 | FileCheck %s
// RUN: not ditron-opt %s --pass-pipeline='ditron-schedule-overlap{pull=tree}' 2>&1 | FileCheck %s --check-prefix=PULL
// RUN: not ditron-opt %s --pass-pipeline='ditron-schedule-overlap{tile-order=zigzag}' 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not ditron-opt %s --pass-pipeline='ditron-schedule-overlap{copy-streams=0}' 2>&1 | FileCheck %s --check-prefix=STREAMS
// RUN: not ditron-opt %s --pass-pipeline='ditron-schedule-overlap{ring=true}' 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not ditron-opt %s --pass-pipeline='ditron-schedule-overlap{engine=tma}' 2>&1 | FileCheck %s --check-prefix=ENGINE
// ENGINE: error: pass 'ditron-schedule-overlap': engine must be copy_engine or sm, got 'tma'
// RUN: not ditron-opt %S/Inputs/gemm_rs.mlir --pass-pipeline='ditron-tile,ditron-lower-task-to-device,ditron-schedule-overlap{comm-sms=500}' 2>&1 | FileCheck %s --check-prefix=SMS
// RUN: not ditron-opt %S/Inputs/matmul.mlir --pass-pipeline='ditron-tile,ditron-lower-task-to-device,ditron-schedule-overlap{tile-order=rank_rotated}' 2>&1 | FileCheck %s --check-prefix=ROT
// ROT: matmul.mlir:4:10: error: ditron-schedule-overlap: 'ditron_device.launch' op cannot visit its tiles rank_rotated: the GEMM's rows are not split over the ranks (use tile-order=grouped or row_major)
// PULL: error: pass 'ditron-schedule-overlap': pull must be direct or ring, got 'tree'
// ORDER: error: pass 'ditron-schedule-overlap': tile-order must be one of auto, row_major, grouped, rank_rotated, got 'zigzag'
// STREAMS: error: pass 'ditron-schedule-overlap': copy-streams must be >= 1, got 0
// UNKNOWN: error: pass 'ditron-schedule-overlap' has no option 'ring' (options: pull, copy-streams, tile-order, comm-sms, streams, engine)
// SMS: error: ditron-schedule-overlap: 'func.func' op comm-sms=500 must leave SMs to both sides (1 .. 131)

// Task IR handed to a device-level pass.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @task(%x: tensor<4x8xbf16>) -> tensor<8x8xbf16> attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-schedule-overlap: 'ditron_task.all_gather' op is task-level IR; run ditron-lower-task-to-device before ditron-schedule-overlap
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<4x8xbf16>) -> tensor<8x8xbf16>
    return %g : tensor<8x8xbf16>
  }
}

// -----

// CHECK: error: ditron-schedule-overlap: the module has no device function (ditron.level = "device"); run ditron-lower-task-to-device first
module {
  func.func @nothing() {
    return
  }
}

// -----

// A launch of a kernel without a record.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func private @k(memref<8xf32>)
  func.func @norecord(%x: memref<8xf32> {ditron.io = "in"}, %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    %r = "ditron_device.rank"() : () -> index
    %w = "ditron_device.num_ranks"() : () -> index
    // CHECK: errors.mlir:[[# @LINE + 1]]:5: error: ditron-schedule-overlap: 'ditron_device.launch' op launches '@k', which has no 'ditron.kernel' record
    "ditron_device.launch"(%x) {kernel = @k, grid = array<i64: 1>, sm_budget = 1 : i64, tile_order = "grouped", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (memref<8xf32>) -> ()
    return
  }
}
