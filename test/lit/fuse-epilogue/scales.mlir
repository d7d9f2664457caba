// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-fuse-epilogue | FileCheck %s

// An fp8 GEMM with per-row scales of A ([M, 1]) and per-column scales of B ([N]) on its f32 result, then the cast
// to bf16: all three fuse, the scales applied to the fp32 accumulator before the store's rounding.
// CHECK-LABEL: func.func @fp8_per_row
// CHECK: "ditron_task.matmul"(%arg0, %arg1) {ditron.epilogue = {group = 0 : i64, steps = 3 : i64}}
// CHECK: "ditron_task.elementwise"(%0, %arg2) {ditron.epilogue = {group = 0 : i64, step = 0 : i64}, fn = "mul"}
// CHECK: "ditron_task.elementwise"(%1, %arg3) {ditron.epilogue = {group = 0 : i64, step = 1 : i64}, fn = "mul"}
// CHECK: "ditron_task.elementwise"(%2) {ditron.epilogue = {group = 0 : i64, step = 2 : i64}, fn = "cast"}
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @fp8_per_row(%a: tensor<72x64xf8E4M3FN>, %b: tensor<64x40xf8E4M3FN>, %sa: tensor<72x1xf32>, %sb: tensor<40xf32>) -> tensor<72x40xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%a, %b) : (tensor<72x64xf8E4M3FN>, tensor<64x40xf8E4M3FN>) -> tensor<72x40xf32>
    %r = "ditron_task.elementwise"(%p, %sa) {fn = "mul"} : (tensor<72x40xf32>, tensor<72x1xf32>) -> tensor<72x40xf32>
    %c = "ditron_task.elementwise"(%r, %sb) {fn = "mul"} : (tensor<72x40xf32>, tensor<40xf32>) -> tensor<72x40xf32>
    %y = "ditron_task.elementwise"(%c) {fn = "cast"} : (tensor<72x40xf32>) -> tensor<72x40xbf16>
    return %y : tensor<72x40xbf16>
  }
}

// -----

// Per-tensor scales: two [1] scalars (the second operand either way round).
// CHECK-LABEL: func.func @fp8_per_tensor
// CHECK: "ditron_task.matmul"(%arg0, %arg1) {ditron.epilogue = {group = 0 : i64, steps = 3 : i64}}
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @fp8_per_tensor(%a: tensor<72x64xf8E4M3FN>, %b: tensor<64x40xf8E4M3FN>, %sa: tensor<1xf32>, %sb: tensor<1xf32>) -> tensor<72x40xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%a, %b) : (tensor<72x64xf8E4M3FN>, tensor<64x40xf8E4M3FN>) -> tensor<72x40xf32>
    %r = "ditron_task.elementwise"(%p, %sa) {fn = "mul"} : (tensor<72x40xf32>, tensor<1xf32>) -> tensor<72x40xf32>
    %c = "ditron_task.elementwise"(%r, %sb) {fn = "mul"} : (tensor<72x40xf32>, tensor<1xf32>) -> tensor<72x40xf32>
    %y = "ditron_task.elementwise"(%c) {fn = "cast"} : (tensor<72x40xf32>) -> tensor<72x40xbf16>
    return %y : tensor<72x40xbf16>
  }
}

// -----

// After a reduce-scatter of the rows only adds move before the sum: each rank adds its own [R, 1] row vector to
// the rows it owns (own_rows); the per-row scale after it stays an elementwise op of its own.
// CHECK-LABEL: func.func @row_add_after_rs
// CHECK: "ditron_task.matmul"(%arg0, %arg1) {ditron.epilogue = {group = 0 : i64, steps = 1 : i64}
// CHECK: "ditron_task.elementwise"(%1, %arg2) {ditron.epilogue = {group = 0 : i64, step = 0 : i64}, fn = "add"}
// CHECK: "ditron_task.elementwise"(%2, %arg2) {fn = "mul"}
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @row_add_after_rs(%x: tensor<128x64xbf16>, %w: tensor<64x32xbf16>, %s: tensor<64x1xbf16>) -> tensor<64x32xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%x, %w) {ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "producer"}} : (tensor<128x64xbf16>, tensor<64x32xbf16>) -> tensor<128x32xbf16>
    %y = "ditron_task.reduce_scatter"(%p) {axis = "tp", dim = 0 : i64, reduce = "sum", ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "consumer"}} : (tensor<128x32xbf16>) -> tensor<64x32xbf16>
    %z = "ditron_task.elementwise"(%y, %s) {fn = "add"} : (tensor<64x32xbf16>, tensor<64x1xbf16>) -> tensor<64x32xbf16>
    %t = "ditron_task.elementwise"(%z, %s) {fn = "mul"} : (tensor<64x32xbf16>, tensor<64x1xbf16>) -> tensor<64x32xbf16>
    return %t : tensor<64x32xbf16>
  }
}

// -----

// Not fused: a row vector of the wrong length, and a scale computed after the matmul.
// CHECK-LABEL: func.func @not_scales
// CHECK-NOT: ditron.epilogue
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @not_scales(%a: tensor<72x64xf8E4M3FN>, %b: tensor<64x40xf8E4M3FN>, %s: tensor<1xf32>) -> tensor<72x40xf32> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%a, %b) : (tensor<72x64xf8E4M3FN>, tensor<64x40xf8E4M3FN>) -> tensor<72x40xf32>
    %e = "ditron_task.elementwise"(%s) {fn = "exp"} : (tensor<1xf32>) -> tensor<1xf32>
    %r = "ditron_task.elementwise"(%p, %e) {fn = "mul"} : (tensor<72x40xf32>, tensor<1xf32>) -> tensor<72x40xf32>
    return %r : tensor<72x40xf32>
  }
}
