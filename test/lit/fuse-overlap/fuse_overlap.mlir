// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-fuse-overlap | FileCheck %s
// Running it twice keeps the marks (and numbers no new group):
// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-fuse-overlap,ditron-fuse-overlap | FileCheck %s
// From the global view, through the partitioner:
// RUN: ditron-opt %S/../../../examples/mlp.mlir --pass-pipeline=ditron-partition,ditron-fuse-overlap | FileCheck %s --check-prefix=MLP

// MLP-LABEL: func.func @mlp
// MLP: "ditron_task.all_gather"{{.*}}ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}
// MLP: "ditron_task.matmul"{{.*}}ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}
// MLP: "ditron_task.elementwise"
// MLP-NOT: ditron.overlap
// MLP-SAME: {fn = "gelu"}
// MLP: "ditron_task.matmul"{{.*}}ditron.overlap = {group = 1 : i64, kind = "matmul_rs", role = "producer"}
// MLP: "ditron_task.reduce_scatter"{{.*}}ditron.overlap = {group = 1 : i64, kind = "matmul_rs", role = "consumer"}

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @pairs
  // CHECK: %[[G:.*]] = "ditron_task.all_gather"{{.*}}ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}
  // CHECK: "ditron_task.matmul"(%[[G]], %{{.*}}) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}}
  // CHECK: %[[P:.*]] = "ditron_task.matmul"{{.*}}{ditron.overlap = {group = 1 : i64, kind = "matmul_rs", role = "producer"}}
  // CHECK: "ditron_task.reduce_scatter"(%[[P]]) {{{.*}}ditron.overlap = {group = 1 : i64, kind = "matmul_rs", role = "consumer"}
  // CHECK: %[[Q:.*]] = "ditron_task.matmul"{{.*}}{ditron.overlap = {group = 2 : i64, kind = "matmul_ar", role = "producer"}}
  // CHECK: "ditron_task.all_reduce"(%[[Q]]) {{{.*}}ditron.overlap = {group = 2 : i64, kind = "matmul_ar", role = "consumer"}
  // CHECK: "ditron_task.reduce_scatter"{{.*}}dim = 1 : i64, ditron.overlap = {group = 3 : i64, kind = "matmul_rs", role = "consumer"}
  func.func @pairs(%x: tensor<2x8xf32>, %w: tensor<8x4xf32>, %h: tensor<8x8xf32>, %v: tensor<8x8xf32>)
      -> (tensor<8x4xf32>, tensor<2x8xf32>, tensor<8x8xf32>, tensor<8x2xf32>) {
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<2x8xf32>) -> tensor<8x8xf32>
    %y = "ditron_task.matmul"(%g, %w) : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %p = "ditron_task.matmul"(%h, %v) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %r = "ditron_task.reduce_scatter"(%p) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<8x8xf32>) -> tensor<2x8xf32>
    %q = "ditron_task.matmul"(%v, %h) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %a = "ditron_task.all_reduce"(%q) {axis = "tp", reduce = "sum"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %n = "ditron_task.matmul"(%h, %h) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %c = "ditron_task.reduce_scatter"(%n) {axis = "tp", dim = 1 : i64, reduce = "sum"} : (tensor<8x8xf32>) -> tensor<8x2xf32>
    return %y, %r, %a, %c : tensor<8x4xf32>, tensor<2x8xf32>, tensor<8x8xf32>, tensor<8x2xf32>
  }
}

// -----

// Not fusable: AG over the K dim; AG result used twice; AG feeding the rhs; matmul result used twice; a max
// reduction; something between the matmul and the collective.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @not_pairs
  // CHECK-NOT: ditron.overlap
  // CHECK: return
  func.func @not_pairs(%x: tensor<8x2xf32>, %y: tensor<2x8xf32>, %w: tensor<8x8xf32>)
      -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<2x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) {
    %k = "ditron_task.all_gather"(%x) {axis = "tp", dim = 1 : i64} : (tensor<8x2xf32>) -> tensor<8x8xf32>
    %a = "ditron_task.matmul"(%k, %w) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %g = "ditron_task.all_gather"(%y) {axis = "tp", dim = 0 : i64} : (tensor<2x8xf32>) -> tensor<8x8xf32>
    %b = "ditron_task.matmul"(%g, %w) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %c = "ditron_task.matmul"(%g, %w) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %g2 = "ditron_task.all_gather"(%y) {axis = "tp", dim = 0 : i64} : (tensor<2x8xf32>) -> tensor<8x8xf32>
    %d = "ditron_task.matmul"(%w, %g2) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %e = "ditron_task.reduce_scatter"(%d) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<8x8xf32>) -> tensor<2x8xf32>
    %f = "ditron_task.all_reduce"(%d) {axis = "tp", reduce = "sum"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %m = "ditron_task.matmul"(%w, %w) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %n = "ditron_task.all_reduce"(%m) {axis = "tp", reduce = "max"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %o = "ditron_task.matmul"(%w, %w) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %t = "ditron_task.elementwise"(%o) {fn = "relu"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %u = "ditron_task.all_reduce"(%t) {axis = "tp", reduce = "sum"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %a, %b, %c, %e, %f, %n, %u : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<2x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
  }
}

// -----

// AG -> matmul -> RS: the matmul joins the first pair in program order; the reduce_scatter stays unmarked.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @chain
  // CHECK: "ditron_task.all_gather"{{.*}}kind = "ag_matmul", role = "producer"
  // CHECK: "ditron_task.matmul"{{.*}}kind = "ag_matmul", role = "consumer"
  // CHECK-NOT: ditron.overlap
  // CHECK: return
  func.func @chain(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<8x8xf32>
    %y = "ditron_task.matmul"(%g, %w) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %r = "ditron_task.reduce_scatter"(%y) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<8x8xf32>) -> tensor<4x8xf32>
    return %r : tensor<4x8xf32>
  }
}

// -----

// MoE dispatch: all_to_all over the token dim feeding grouped_matmul's lhs.
module attributes {ditron.mesh = {axes = ["ep"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @moe
  // CHECK: "ditron_task.all_to_all"{{.*}}ditron.overlap = {group = 0 : i64, kind = "a2a_grouped_matmul", role = "producer"}
  // CHECK: "ditron_task.grouped_matmul"{{.*}}ditron.overlap = {group = 0 : i64, kind = "a2a_grouped_matmul", role = "consumer"}
  func.func @moe(%x: tensor<8x4xf32>, %w: tensor<2x4x6xf32>, %g: tensor<2xi64>) -> tensor<8x6xf32> {
    %t = "ditron_task.all_to_all"(%x) {axis = "ep", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %y = "ditron_task.grouped_matmul"(%t, %w, %g) : (tensor<8x4xf32>, tensor<2x4x6xf32>, tensor<2xi64>) -> tensor<8x6xf32>
    return %y : tensor<8x6xf32>
  }
}

// -----

// MoE dispatch of run-time sizes: the bounded all_to_all's output (result 0) feeds grouped_matmul's lhs, its recv
// counts the group sizes; the pair is marked alike. The combine back (sizes = the recv counts) stays unmarked.
module attributes {ditron.mesh = {axes = ["ep"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @moe_sized
  // CHECK: %[[D:.*]]:2 = "ditron_task.all_to_all"{{.*}}ditron.overlap = {group = 0 : i64, kind = "a2a_grouped_matmul", role = "producer"}
  // CHECK: "ditron_task.grouped_matmul"(%[[D]]#0, %arg2, %[[D]]#1) {ditron.overlap = {group = 0 : i64, kind = "a2a_grouped_matmul", role = "consumer"}}
  // CHECK: "ditron_task.all_to_all"
  // CHECK-NOT: ditron.overlap
  // CHECK: return
  func.func @moe_sized(%x: tensor<8x4xf32>, %s: tensor<2xi32>, %w: tensor<2x4x6xf32>) -> (tensor<8x6xf32>, tensor<2xi32>) {
    %t, %c = "ditron_task.all_to_all"(%x, %s) {axis = "ep", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<8x4xf32>, tensor<2xi32>) -> (tensor<16x4xf32>, tensor<2xi32>)
    %y = "ditron_task.grouped_matmul"(%t, %w, %c) : (tensor<16x4xf32>, tensor<2x4x6xf32>, tensor<2xi32>) -> tensor<16x6xf32>
    %z, %b = "ditron_task.all_to_all"(%y, %c) {axis = "ep", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<16x6xf32>, tensor<2xi32>) -> (tensor<8x6xf32>, tensor<2xi32>)
    return %z, %b : tensor<8x6xf32>, tensor<2xi32>
  }
}
