// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-fuse-overlap,ditron-fuse-epilogue | FileCheck %s
// Running it twice keeps the marks (and numbers no new group):
// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-fuse-overlap,ditron-fuse-epilogue,ditron-fuse-epilogue | FileCheck %s
// From the global view: the MLP's gelu after its AG+GEMM joins the GEMM's epilogue.
// RUN: ditron-opt %S/../../../examples/mlp.mlir --pass-pipeline=ditron-partition,ditron-fuse-overlap,ditron-fuse-epilogue | FileCheck %s --check-prefix=MLP

// MLP-LABEL: func.func @mlp
// MLP: "ditron_task.matmul"{{.*}}ditron.epilogue = {group = 0 : i64, steps = 1 : i64}, ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}
// MLP: "ditron_task.elementwise"{{.*}}{ditron.epilogue = {group = 0 : i64, step = 0 : i64}, fn = "gelu"}
// MLP: "ditron_task.matmul"
// MLP-NOT: ditron.epilogue
// MLP-SAME: kind = "matmul_rs", role = "producer"

module {
  // CHECK-LABEL: func.func @bias_gelu
  // CHECK: %[[H:.*]] = "ditron_task.matmul"(%arg0, %arg1) {ditron.epilogue = {group = 0 : i64, steps = 2 : i64}}
  // CHECK: %[[B:.*]] = "ditron_task.elementwise"(%[[H]], %arg2) {ditron.epilogue = {group = 0 : i64, step = 0 : i64}, fn = "add"}
  // CHECK: "ditron_task.elementwise"(%[[B]]) {ditron.epilogue = {group = 0 : i64, step = 1 : i64}, fn = "gelu"}
  func.func @bias_gelu(%x: tensor<256x64xbf16>, %w: tensor<64x128xbf16>, %b: tensor<128xbf16>) -> tensor<256x128xbf16> {
    %h = "ditron_task.matmul"(%x, %w) : (tensor<256x64xbf16>, tensor<64x128xbf16>) -> tensor<256x128xbf16>
    %a = "ditron_task.elementwise"(%h, %b) {fn = "add"} : (tensor<256x128xbf16>, tensor<128xbf16>) -> tensor<256x128xbf16>
    %y = "ditron_task.elementwise"(%a) {fn = "gelu"} : (tensor<256x128xbf16>) -> tensor<256x128xbf16>
    return %y : tensor<256x128xbf16>
  }

  // A cast and a residual (the matmul's result second) join; a product with a value computed after the matmul
  // does not: the chain stops before it.
  // CHECK-LABEL: func.func @residual_cast
  // CHECK: "ditron_task.matmul"{{.*}}{ditron.epilogue = {group = 0 : i64, steps = 2 : i64}}
  // CHECK: "ditron_task.elementwise"{{.*}}{ditron.epilogue = {group = 0 : i64, step = 0 : i64}, fn = "add"}
  // CHECK: "ditron_task.elementwise"{{.*}}{ditron.epilogue = {group = 0 : i64, step = 1 : i64}, fn = "cast"}
  // CHECK: "ditron_task.elementwise"(%{{.*}}) {fn = "exp"}
  // CHECK: "ditron_task.elementwise"(%{{.*}}) {fn = "mul"}
  func.func @residual_cast(%x: tensor<64x32xbf16>, %w: tensor<32x32xbf16>, %r: tensor<64x32xbf16>, %q: tensor<64x32xf32>) -> tensor<64x32xf32> {
    %h = "ditron_task.matmul"(%x, %w) : (tensor<64x32xbf16>, tensor<32x32xbf16>) -> tensor<64x32xbf16>
    %a = "ditron_task.elementwise"(%r, %h) {fn = "add"} : (tensor<64x32xbf16>, tensor<64x32xbf16>) -> tensor<64x32xbf16>
    %c = "ditron_task.elementwise"(%a) {fn = "cast"} : (tensor<64x32xbf16>) -> tensor<64x32xf32>
    %e = "ditron_task.elementwise"(%q) {fn = "exp"} : (tensor<64x32xf32>) -> tensor<64x32xf32>
    %y = "ditron_task.elementwise"(%c, %e) {fn = "mul"} : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
    return %y : tensor<64x32xf32>
  }

  // A gated feed-forward layer, silu_mul(gate, up): joins the later matmul (the up projection), whose result is its second
  // operand; the gate's result is read by that epilogue.
  // CHECK-LABEL: func.func @gated
  // CHECK: "ditron_task.matmul"(%arg0, %arg1) :
  // CHECK: "ditron_task.matmul"(%arg0, %arg2) {ditron.epilogue = {group = 0 : i64, steps = 1 : i64}}
  // CHECK: "ditron_task.elementwise"{{.*}}{ditron.epilogue = {group = 0 : i64, step = 0 : i64}, fn = "silu_mul"}
  func.func @gated(%x: tensor<64x32xbf16>, %wg: tensor<32x96xbf16>, %wu: tensor<32x96xbf16>) -> tensor<64x96xbf16> {
    %g = "ditron_task.matmul"(%x, %wg) : (tensor<64x32xbf16>, tensor<32x96xbf16>) -> tensor<64x96xbf16>
    %u = "ditron_task.matmul"(%x, %wu) : (tensor<64x32xbf16>, tensor<32x96xbf16>) -> tensor<64x96xbf16>
    %y = "ditron_task.elementwise"(%g, %u) {fn = "silu_mul"} : (tensor<64x96xbf16>, tensor<64x96xbf16>) -> tensor<64x96xbf16>
    return %y : tensor<64x96xbf16>
  }

  // Negative: a result with two uses is materialised, nothing fuses.
  // CHECK-LABEL: func.func @two_uses
  // CHECK-NOT: ditron.epilogue
  // CHECK: return
  func.func @two_uses(%x: tensor<64x32xbf16>, %w: tensor<32x32xbf16>) -> (tensor<64x32xbf16>, tensor<64x32xbf16>) {
    %h = "ditron_task.matmul"(%x, %w) : (tensor<64x32xbf16>, tensor<32x32xbf16>) -> tensor<64x32xbf16>
    %y = "ditron_task.elementwise"(%h) {fn = "gelu"} : (tensor<64x32xbf16>) -> tensor<64x32xbf16>
    return %h, %y : tensor<64x32xbf16>, tensor<64x32xbf16>
  }
}

// -----

// After GEMM+RS the bias moves before the sum (each rank adds its own to the rows it owns: the lowering's
// own_rows); the gelu after the sum does not commute with it and stays an elementwise op.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @gemm_rs_bias_gelu
  // CHECK: "ditron_task.matmul"{{.*}}{ditron.epilogue = {group = 0 : i64, steps = 1 : i64}, ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "producer"}}
  // CHECK: "ditron_task.reduce_scatter"
  // CHECK-NOT: ditron.epilogue
  // CHECK-SAME: role = "consumer"
  // CHECK: "ditron_task.elementwise"{{.*}}{ditron.epilogue = {group = 0 : i64, step = 0 : i64}, fn = "add"}
  // CHECK: "ditron_task.elementwise"(%{{.*}}) {fn = "gelu"}
  func.func @gemm_rs_bias_gelu(%x: tensor<128x64xbf16>, %w: tensor<64x32xbf16>, %b: tensor<32xbf16>) -> tensor<64x32xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%x, %w) : (tensor<128x64xbf16>, tensor<64x32xbf16>) -> tensor<128x32xbf16>
    %y = "ditron_task.reduce_scatter"(%p) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<128x32xbf16>) -> tensor<64x32xbf16>
    %z = "ditron_task.elementwise"(%y, %b) {fn = "add"} : (tensor<64x32xbf16>, tensor<32xbf16>) -> tensor<64x32xbf16>
    %g = "ditron_task.elementwise"(%z) {fn = "gelu"} : (tensor<64x32xbf16>) -> tensor<64x32xbf16>
    return %g : tensor<64x32xbf16>
  }

  // Negative: an activation right after the reduction -- it would have to move before the sum -- is not fused,
  // and nothing after it is either.
  // CHECK-LABEL: func.func @gemm_ar_gelu_first
  // CHECK-NOT: ditron.epilogue
  // CHECK: return
  func.func @gemm_ar_gelu_first(%x: tensor<128x64xbf16>, %w: tensor<64x32xbf16>, %b: tensor<32xbf16> {ditron.sharding = {dims = [[]]}}) -> tensor<128x32xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%x, %w) : (tensor<128x64xbf16>, tensor<64x32xbf16>) -> tensor<128x32xbf16>
    %y = "ditron_task.all_reduce"(%p) {axis = "tp", reduce = "sum"} : (tensor<128x32xbf16>) -> tensor<128x32xbf16>
    %g = "ditron_task.elementwise"(%y) {fn = "gelu"} : (tensor<128x32xbf16>) -> tensor<128x32xbf16>
    %z = "ditron_task.elementwise"(%g, %b) {fn = "add"} : (tensor<128x32xbf16>, tensor<32xbf16>) -> tensor<128x32xbf16>
    return %z : tensor<128x32xbf16>
  }
}
