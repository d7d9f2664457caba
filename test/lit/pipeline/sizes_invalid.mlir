// RUN: not ditron-opt %s --split-input-file --pass-pipeline=ditron-default 2>&1 | FileCheck %s
// What the kernels cannot index is refused where it is written, never compiled to wrong code (issue 25).

// 2^40 rows: past the 32-bit row indices; the verifier says so before any pass runs.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @gemm_rs(%x: tensor<1099511627776x14336xbf16> {ditron.sharding = {dims = [[], ["tp"]]}},
                     %w: tensor<14336x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<1099511627776x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}}) {
    // CHECK: sizes_invalid.mlir:[[# @LINE + 2]]:10: error: 'ditron_task.matmul' op operand 0 (tensor<1099511627776x14336xbf16>) has size 1099511627776 in dim 0; ditron's kernels index a dim in 32 bits: at most 1073741824 (2^30) per dim
    // CHECK: sizes_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.matmul' op result 0 (tensor<1099511627776x4096xbf16>) has size 1099511627776 in dim 0; ditron's kernels index a dim in 32 bits: at most 1073741824 (2^30) per dim
    %y = "ditron_task.matmul"(%x, %w) : (tensor<1099511627776x14336xbf16>, tensor<14336x4096xbf16>) -> tensor<1099511627776x4096xbf16>
    return %y : tensor<1099511627776x4096xbf16>
  }
}

// -----

// Every dim fits, but C's 2^30 x 2^30 elements make 2^45 tiles of 128x256, which the GEMM cannot count in i32
// (the loop bound was a constant silently wrapped to 0: a kernel that stored nothing).
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @outer(%x: tensor<1073741824x16xbf16> {ditron.sharding = {dims = [[], []]}},
                   %w: tensor<16x1073741824xbf16> {ditron.sharding = {dims = [[], []]}})
      -> (tensor<1073741824x1073741824xbf16> {ditron.sharding = {dims = [[], []]}}) {
    // CHECK: sizes_invalid.mlir:[[# @LINE + 1]]:10: error: ditron-lower-task-to-device: 'ditron_task.matmul' op cannot be lowered: gemm template: tiles ({{[0-9]+}} of {{[0-9]+}}x{{[0-9]+}}, x 1 K splits, plus a grid) reach {{[0-9]+}}, past the kernel's 32-bit indices (at most 2147483647)
    %y = "ditron_task.matmul"(%x, %w) : (tensor<1073741824x16xbf16>, tensor<16x1073741824xbf16>) -> tensor<1073741824x1073741824xbf16>
    return %y : tensor<1073741824x1073741824xbf16>
  }
}

// -----

// The MLP at 2^30 rows with a square for an activation (h * h: not a GEMM epilogue step, ditron-fuse-epilogue
// leaves it a kernel): over 2^30 x 3584 it would take 2^32 tiles of 1024 elements.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @mlp(%x: tensor<1073741824x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}},
                 %w1: tensor<4096x14336xbf16> {ditron.sharding = {dims = [[], ["tp"]]}},
                 %w2: tensor<14336x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<1073741824x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}}) {
    %h = "ditron_task.matmul"(%x, %w1) : (tensor<1073741824x4096xbf16>, tensor<4096x14336xbf16>) -> tensor<1073741824x14336xbf16>
    // CHECK: sizes_invalid.mlir:[[# @LINE + 1]]:10: error: ditron-lower-task-to-device: 'ditron_task.elementwise' op cannot be lowered: elementwise template: tiles (4294967296 of 1x1024, plus a grid) reach 4294967824, past the kernel's 32-bit indices (at most 2147483647)
    %g = "ditron_task.elementwise"(%h, %h) {fn = "mul"} : (tensor<1073741824x14336xbf16>, tensor<1073741824x14336xbf16>) -> tensor<1073741824x14336xbf16>
    %y = "ditron_task.matmul"(%g, %w2) : (tensor<1073741824x14336xbf16>, tensor<14336x4096xbf16>) -> tensor<1073741824x4096xbf16>
    return %y : tensor<1073741824x4096xbf16>
  }
}

// -----

// A zero-size dim: the verifier, at the op (the cost model divided by zero: an internal compiler error).
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @ag_gemm(%x: tensor<0x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}},
                     %w: tensor<4096x14336xbf16> {ditron.sharding = {dims = [[], ["tp"]]}})
      -> (tensor<0x14336xbf16> {ditron.sharding = {dims = [[], ["tp"]]}}) {
    // CHECK: sizes_invalid.mlir:[[# @LINE + 2]]:10: error: 'ditron_task.matmul' op operand 0 (tensor<0x4096xbf16>) has size 0 in dim 0; ditron computes on non-empty tensors only (every dim >= 1)
    // CHECK: sizes_invalid.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.matmul' op result 0 (tensor<0x14336xbf16>) has size 0 in dim 0; ditron computes on non-empty tensors only (every dim >= 1)
    %y = "ditron_task.matmul"(%x, %w) : (tensor<0x4096xbf16>, tensor<4096x14336xbf16>) -> tensor<0x14336xbf16>
    return %y : tensor<0x14336xbf16>
  }
}
