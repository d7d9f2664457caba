// RUN: not ditron-opt %s --split-input-file --pass-pipeline=ditron-fuse-epilogue 2>&1 | FileCheck %s

// A hand-written mark whose step cannot be what it says: after an all-reduce, a per-rank (not replicated) bias.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @per_rank_bias(%x: tensor<128x64xbf16>, %w: tensor<64x32xbf16>, %b: tensor<32xbf16>) -> tensor<128x32xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%x, %w) {ditron.epilogue = {group = 0 : i64, steps = 1 : i64}, ditron.overlap = {group = 0 : i64, kind = "matmul_ar", role = "producer"}} : (tensor<128x64xbf16>, tensor<64x32xbf16>) -> tensor<128x32xbf16>
    %y = "ditron_task.all_reduce"(%p) {axis = "tp", reduce = "sum", ditron.overlap = {group = 0 : i64, kind = "matmul_ar", role = "consumer"}} : (tensor<128x32xbf16>) -> tensor<128x32xbf16>
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-fuse-epilogue: 'ditron_task.elementwise' op cannot be step 0 of the epilogue of the matmul at {{.*}}: after an all-reduce only an operand every rank holds alike
    %z = "ditron_task.elementwise"(%y, %b) {fn = "add", ditron.epilogue = {group = 0 : i64, step = 0 : i64}} : (tensor<128x32xbf16>, tensor<32xbf16>) -> tensor<128x32xbf16>
    return %z : tensor<128x32xbf16>
  }
}

// -----

// Shape mismatch: a marked step whose operand has the wrong number of columns for the GEMM (a bias of the
// scattered columns after a reduce-scatter of dim 1).
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @bias_of_other_columns(%x: tensor<64x64xbf16>, %w: tensor<64x32xbf16>, %b: tensor<16xbf16>) -> tensor<64x16xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%x, %w) {ditron.epilogue = {group = 0 : i64, steps = 1 : i64}, ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "producer"}} : (tensor<64x64xbf16>, tensor<64x32xbf16>) -> tensor<64x32xbf16>
    %y = "ditron_task.reduce_scatter"(%p) {axis = "tp", dim = 1 : i64, reduce = "sum", ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "consumer"}} : (tensor<64x32xbf16>) -> tensor<64x16xbf16>
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-fuse-epilogue: 'ditron_task.elementwise' op cannot be step 0 of the epilogue of the matmul at {{.*}}: its operand's 16 columns are not the GEMM's 32
    %z = "ditron_task.elementwise"(%y, %b) {fn = "add", ditron.epilogue = {group = 0 : i64, step = 0 : i64}} : (tensor<64x16xbf16>, tensor<16xbf16>) -> tensor<64x16xbf16>
    return %z : tensor<64x16xbf16>
  }
}

// -----

module {
  func.func @missing_step(%x: tensor<64x32xbf16>, %w: tensor<32x32xbf16>) -> tensor<64x32xbf16> {
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-fuse-epilogue: 'ditron_task.matmul' op heads epilogue group 0 of 2 step(s), but steps [0] are marked
    %h = "ditron_task.matmul"(%x, %w) {ditron.epilogue = {group = 0 : i64, steps = 2 : i64}} : (tensor<64x32xbf16>, tensor<32x32xbf16>) -> tensor<64x32xbf16>
    %y = "ditron_task.elementwise"(%h) {fn = "gelu", ditron.epilogue = {group = 0 : i64, step = 0 : i64}} : (tensor<64x32xbf16>) -> tensor<64x32xbf16>
    return %y : tensor<64x32xbf16>
  }
}

// -----

module {
  func.func @not_the_one_use(%x: tensor<64x32xbf16>, %w: tensor<32x32xbf16>) -> (tensor<64x32xbf16>, tensor<64x32xbf16>) {
    %h = "ditron_task.matmul"(%x, %w) {ditron.epilogue = {group = 0 : i64, steps = 1 : i64}} : (tensor<64x32xbf16>, tensor<32x32xbf16>) -> tensor<64x32xbf16>
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-fuse-epilogue: 'ditron_task.elementwise' op is step 0 of epilogue group 0 but is not the one use of the value before it
    %y = "ditron_task.elementwise"(%h) {fn = "gelu", ditron.epilogue = {group = 0 : i64, step = 0 : i64}} : (tensor<64x32xbf16>) -> tensor<64x32xbf16>
    return %h, %y : tensor<64x32xbf16>, tensor<64x32xbf16>
  }
}

// -----

// A hand-written mark on a scale that cannot be a step: a product after a reduce-scatter does not move before it.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @row_scale_after_rs(%x: tensor<128x64xbf16>, %w: tensor<64x32xbf16>, %s: tensor<64x1xbf16>) -> tensor<64x32xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%x, %w) {ditron.epilogue = {group = 0 : i64, steps = 1 : i64}, ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "producer"}} : (tensor<128x64xbf16>, tensor<64x32xbf16>) -> tensor<128x32xbf16>
    %y = "ditron_task.reduce_scatter"(%p) {axis = "tp", dim = 0 : i64, reduce = "sum", ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "consumer"}} : (tensor<128x32xbf16>) -> tensor<64x32xbf16>
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: ditron-fuse-epilogue: 'ditron_task.elementwise' op cannot be step 0 of the epilogue of the matmul at {{.*}}: 'mul' does not commute with the reduction before it
    %z = "ditron_task.elementwise"(%y, %s) {fn = "mul", ditron.epilogue = {group = 0 : i64, step = 0 : i64}} : (tensor<64x32xbf16>, tensor<64x1xbf16>) -> tensor<64x32xbf16>
    return %z : tensor<64x32xbf16>
  }
}

// -----

// A row vector of the wrong row count: the task verifier refuses it, located, before the pass reads the mark.
module {
  func.func @row_of_other_rows(%a: tensor<72x64xf8E4M3FN>, %b: tensor<64x40xf8E4M3FN>, %s: tensor<36x1xf32>) -> tensor<72x40xf32> {
    %p = "ditron_task.matmul"(%a, %b) {ditron.epilogue = {group = 0 : i64, steps = 1 : i64}} : (tensor<72x64xf8E4M3FN>, tensor<64x40xf8E4M3FN>) -> tensor<72x40xf32>
    // CHECK: errors.mlir:[[# @LINE + 1]]:10: error: 'ditron_task.elementwise' op operand shape tensor<36x1xf32> differs from result shape tensor<72x40xf32> (a second operand may be a [N] bias, an [M, 1] row vector or a [1] scalar
    %z = "ditron_task.elementwise"(%p, %s) {fn = "mul", ditron.epilogue = {group = 0 : i64, step = 0 : i64}} : (tensor<72x40xf32>, tensor<36x1xf32>) -> tensor<72x40xf32>
    return %z : tensor<72x40xf32>
  }
}
