// RUN: not ditron-opt %s --split-input-file --pass-pipeline=ditron-tile 2>&1 | FileCheck %s
// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{bogus=1}' 2>&1 | FileCheck %s --check-prefix=OPT
// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{block-m=100}' 2>&1 | FileCheck %s --check-prefix=POW2
// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{engine=nvlink}' 2>&1 | FileCheck %s --check-prefix=ENGINE
// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{chunk-rows=4 num-chunks=2}' 2>&1 | FileCheck %s --check-prefix=BOTH
// OPT: error: pass 'ditron-tile' has no option 'bogus' (options: target, num-sms, block-m
// POW2: error: pass 'ditron-tile': block-m must be a power of two >= 16, got 100
// ENGINE: error: pass 'ditron-tile': engine must be one of copy_engine, sm, got 'nvlink'
// BOTH: error: pass 'ditron-tile': give chunk-rows or num-chunks, not both

// A fused pair whose shapes do not line up: the matmul's lhs is not the gathered value.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @not_connected(%x: tensor<4x8xbf16>, %w: tensor<8x8xbf16>) -> (tensor<8x8xbf16>, tensor<8x8xbf16>) attributes {ditron.view = "local"} {
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}} : (tensor<4x8xbf16>) -> tensor<8x8xbf16>
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.matmul' op is the consumer of overlap group 0 but its lhs is not the all_gather's result; AG+GEMM overlaps the gathered rows of the lhs only
    %y = "ditron_task.matmul"(%w, %g) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}} : (tensor<8x8xbf16>, tensor<8x8xbf16>) -> tensor<8x8xbf16>
    return %g, %y : tensor<8x8xbf16>, tensor<8x8xbf16>
  }
}

// -----

// AG+GEMM gathers the rows of the lhs: a gather along the columns does not line up with the GEMM's M.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @wrong_dim(%x: tensor<8x4xbf16>, %w: tensor<8x8xbf16>) -> tensor<8x8xbf16> attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.all_gather' op gathers dim 1, but AG+GEMM (overlap group 0) needs the rows (dim 0) of the matmul's lhs gathered
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 1 : i64, ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}} : (tensor<8x4xbf16>) -> tensor<8x8xbf16>
    %y = "ditron_task.matmul"(%g, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}} : (tensor<8x8xbf16>, tensor<8x8xbf16>) -> tensor<8x8xbf16>
    return %y : tensor<8x8xbf16>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @wrong_kinds(%x: tensor<8x8xbf16>, %w: tensor<8x8xbf16>) -> tensor<8x8xbf16> attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.matmul' op is the producer of overlap group 0 ('ag_matmul'), which needs a 'ditron_task.all_gather' there
    %p = "ditron_task.matmul"(%x, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}} : (tensor<8x8xbf16>, tensor<8x8xbf16>) -> tensor<8x8xbf16>
    %y = "ditron_task.matmul"(%p, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}} : (tensor<8x8xbf16>, tensor<8x8xbf16>) -> tensor<8x8xbf16>
    return %y : tensor<8x8xbf16>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @half_a_group(%x: tensor<8x8xbf16>, %w: tensor<8x8xbf16>) -> tensor<8x8xbf16> attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.matmul' op is in overlap group 5 ('matmul_rs') but the group has no consumer
    %p = "ditron_task.matmul"(%x, %w) {ditron.overlap = {group = 5 : i64, kind = "matmul_rs", role = "producer"}} : (tensor<8x8xbf16>, tensor<8x8xbf16>) -> tensor<8x8xbf16>
    return %p : tensor<8x8xbf16>
  }
}

// -----

// Device IR handed to a task-level pass.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @device(%x: memref<8xf32> {ditron.io = "in"}, %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_device.rank' op is device-level IR, but this pass transforms task-level IR in the local view; run it before ditron-lower-task-to-device
    %r = "ditron_device.rank"() : () -> index
    return
  }
}

// -----

// The global view (sharded arguments, no ditron.view = "local") must be partitioned first.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK: errors.mlir:[[# @LINE + 1]]:3: error: ditron-tile: 'func.func' op is in the global view (sharded arguments, no ditron.view = "local"); run ditron-partition first
  func.func @global(%x: tensor<8x8xbf16> {ditron.sharding = {dims = [["tp"], []]}}) -> tensor<8x8xbf16> {
    return %x : tensor<8x8xbf16>
  }
}

// -----

// An overlap kind ditron-tile does not know.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @bad_kind(%x: tensor<4x8xbf16>) -> tensor<8x8xbf16> attributes {ditron.view = "local"} {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.all_gather' op has overlap kind 'ag_gemm'; known kinds: ag_matmul, matmul_rs, matmul_ar, a2a_grouped_matmul
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.overlap = {group = 0 : i64, kind = "ag_gemm", role = "producer"}} : (tensor<4x8xbf16>) -> tensor<8x8xbf16>
    return %g : tensor<8x8xbf16>
  }
}
