// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-partition | FileCheck %s
// A second run is a no-op:
// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-partition,ditron-partition | FileCheck %s

// The Megatron MLP: AG + matmul, gelu, matmul + RS.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @mlp
  // CHECK-SAME: (%[[X:.*]]: tensor<2048x4096xbf16> {ditron.sharding = {dims = {{\[\["tp"\], \[\]\]}}}}
  // CHECK-SAME: %[[W1:.*]]: tensor<4096x3584xbf16> {ditron.sharding = {dims = {{\[\[\], \["tp"\]\]}}}}
  // CHECK-SAME: %[[W2:.*]]: tensor<3584x4096xbf16>
  // CHECK-SAME: -> (tensor<2048x4096xbf16> {ditron.sharding = {dims = {{\[\["tp"\], \[\]\]}}}})
  // CHECK-SAME: attributes {ditron.view = "local"}
  // CHECK: %[[G:.*]] = "ditron_task.all_gather"(%[[X]]) {axis = "tp", dim = 0 : i64} : (tensor<2048x4096xbf16>) -> tensor<8192x4096xbf16>
  // CHECK: %[[H:.*]] = "ditron_task.matmul"(%[[G]], %[[W1]]) : (tensor<8192x4096xbf16>, tensor<4096x3584xbf16>) -> tensor<8192x3584xbf16>
  // CHECK: %[[A:.*]] = "ditron_task.elementwise"(%[[H]]) {fn = "gelu"} : (tensor<8192x3584xbf16>) -> tensor<8192x3584xbf16>
  // CHECK: %[[P:.*]] = "ditron_task.matmul"(%[[A]], %[[W2]]) : (tensor<8192x3584xbf16>, tensor<3584x4096xbf16>) -> tensor<8192x4096xbf16>
  // CHECK: %[[Y:.*]] = "ditron_task.reduce_scatter"(%[[P]]) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<8192x4096xbf16>) -> tensor<2048x4096xbf16>
  // CHECK: return %[[Y]] : tensor<2048x4096xbf16>
  func.func @mlp(%x: tensor<8192x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}},
                 %w1: tensor<4096x14336xbf16> {ditron.sharding = {dims = [[], ["tp"]]}},
                 %w2: tensor<14336x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<8192x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}}) {
    %h = "ditron_task.matmul"(%x, %w1) : (tensor<8192x4096xbf16>, tensor<4096x14336xbf16>) -> tensor<8192x14336xbf16>
    %a = "ditron_task.elementwise"(%h) {fn = "gelu"} : (tensor<8192x14336xbf16>) -> tensor<8192x14336xbf16>
    %y = "ditron_task.matmul"(%a, %w2) : (tensor<8192x14336xbf16>, tensor<14336x4096xbf16>) -> tensor<8192x4096xbf16>
    return %y : tensor<8192x4096xbf16>
  }
}

// -----

// GEMM + AR: a replicated output resolves the partial sum with all_reduce; the unannotated argument is replicated.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 8>}} {
  // CHECK-LABEL: func.func @gemm_ar
  // CHECK-SAME: tensor<1024x512xf16> {ditron.sharding = {dims = {{\[\[\], \["tp"\]\]}}}}
  // CHECK-SAME: tensor<512x256xf16> {ditron.sharding = {dims = {{\[\[\], \[\]\]}}}}
  // CHECK: %[[P:.*]] = "ditron_task.matmul"
  // CHECK-NOT: all_gather
  // CHECK: "ditron_task.all_reduce"(%[[P]]) {axis = "tp", reduce = "sum"} : (tensor<1024x256xf16>) -> tensor<1024x256xf16>
  func.func @gemm_ar(%x: tensor<1024x4096xf16> {ditron.sharding = {dims = [[], ["tp"]]}},
                     %w: tensor<4096x256xf16> {ditron.sharding = {dims = [["tp"], []]}},
                     %v: tensor<512x256xf16>)
      -> (tensor<1024x256xf16> {ditron.sharding = {dims = [[], []]}}, tensor<512x256xf16>) {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<1024x4096xf16>, tensor<4096x256xf16>) -> tensor<1024x256xf16>
    return %y, %v : tensor<1024x256xf16>, tensor<512x256xf16>
  }
}

// -----

// An unannotated result keeps the split it has and gets that sharding written out.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @derived
  // CHECK-SAME: -> (tensor<8x4xf32> {ditron.sharding = {dims = {{\[\[\], \["tp"\]\]}}}})
  // CHECK-NOT: all_gather
  func.func @derived(%x: tensor<8x16xf32>, %w: tensor<16x8xf32> {ditron.sharding = {dims = [[], ["tp"]]}})
      -> tensor<8x8xf32> {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    return %y : tensor<8x8xf32>
  }
}

// -----

// Elementwise: a sharded operand meeting a replicated one is gathered; the split result is gathered for the output.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @add_mixed
  // CHECK-SAME: (%[[A:.*]]: tensor<2x16xf32> {{.*}}, %[[B:.*]]: tensor<8x16xf32>
  // CHECK: %[[G:.*]] = "ditron_task.all_gather"(%[[A]]) {axis = "tp", dim = 0 : i64} : (tensor<2x16xf32>) -> tensor<8x16xf32>
  // CHECK: "ditron_task.elementwise"(%[[G]], %[[B]]) {fn = "add"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  func.func @add_mixed(%a: tensor<8x16xf32> {ditron.sharding = {dims = [["tp"], []]}}, %b: tensor<8x16xf32>)
      -> tensor<8x16xf32> {
    %s = "ditron_task.elementwise"(%a, %b) {fn = "add"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
    return %s : tensor<8x16xf32>
  }
}

// -----

// Partial sums stay partial through add and mul-by-replicated; one reduce_scatter over the columns at the end.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @partial_chain
  // CHECK-COUNT-2: "ditron_task.matmul"
  // CHECK: "ditron_task.elementwise"({{.*}}) {fn = "add"}
  // CHECK: %[[M:.*]] = "ditron_task.elementwise"({{.*}}) {fn = "mul"}
  // CHECK: "ditron_task.reduce_scatter"(%[[M]]) {axis = "tp", dim = 1 : i64, reduce = "sum"} : (tensor<8x12xf32>) -> tensor<8x6xf32>
  // CHECK-NOT: all_reduce
  func.func @partial_chain(%x: tensor<8x16xf32> {ditron.sharding = {dims = [[], ["tp"]]}},
                           %w: tensor<16x12xf32> {ditron.sharding = {dims = [["tp"], []]}},
                           %v: tensor<16x12xf32> {ditron.sharding = {dims = [["tp"], []]}},
                           %s: tensor<8x12xf32>)
      -> (tensor<8x12xf32> {ditron.sharding = {dims = [[], ["tp"]]}}) {
    %p = "ditron_task.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x12xf32>) -> tensor<8x12xf32>
    %q = "ditron_task.matmul"(%x, %v) : (tensor<8x16xf32>, tensor<16x12xf32>) -> tensor<8x12xf32>
    %r = "ditron_task.elementwise"(%p, %q) {fn = "add"} : (tensor<8x12xf32>, tensor<8x12xf32>) -> tensor<8x12xf32>
    %m = "ditron_task.elementwise"(%r, %s) {fn = "mul"} : (tensor<8x12xf32>, tensor<8x12xf32>) -> tensor<8x12xf32>
    return %m : tensor<8x12xf32>
  }
}

// -----

// 2-D mesh: rows over dp, the MLP's tensor parallelism over tp; the output rows over (dp, tp).
module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 4>}} {
  // CHECK-LABEL: func.func @mlp_2d
  // CHECK-SAME: tensor<64x32xbf16>
  // CHECK-NOT: all_gather
  // CHECK: "ditron_task.matmul"{{.*}} -> tensor<64x32xbf16>
  // CHECK: "ditron_task.elementwise"
  // CHECK: "ditron_task.matmul"{{.*}} -> tensor<64x64xbf16>
  // CHECK: "ditron_task.reduce_scatter"{{.*}} {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<64x64xbf16>) -> tensor<16x64xbf16>
  func.func @mlp_2d(%x: tensor<128x64xbf16> {ditron.sharding = {dims = [["dp"], []]}},
                    %w1: tensor<64x128xbf16> {ditron.sharding = {dims = [[], ["tp"]]}},
                    %w2: tensor<128x64xbf16> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<128x64xbf16> {ditron.sharding = {dims = [["dp", "tp"], []]}}) {
    %h = "ditron_task.matmul"(%x, %w1) : (tensor<128x64xbf16>, tensor<64x128xbf16>) -> tensor<128x128xbf16>
    %a = "ditron_task.elementwise"(%h) {fn = "silu"} : (tensor<128x128xbf16>) -> tensor<128x128xbf16>
    %y = "ditron_task.matmul"(%a, %w2) : (tensor<128x128xbf16>, tensor<128x64xbf16>) -> tensor<128x64xbf16>
    return %y : tensor<128x64xbf16>
  }
}

// -----

// A shard annotation moving the split from rows to columns is an all_to_all; the shard op disappears.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @move
  // CHECK-NOT: ditron_task.shard
  // CHECK: "ditron_task.all_to_all"(%arg0) {axis = "tp", concat_dim = 0 : i64, split_dim = 1 : i64} : (tensor<2x16xf32>) -> tensor<8x4xf32>
  // CHECK-NOT: ditron_task.shard
  func.func @move(%x: tensor<8x16xf32> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<8x16xf32> {ditron.sharding = {dims = [[], ["tp"]]}}) {
    %y = "ditron_task.shard"(%x) {sharding = {dims = [[], ["tp"]]}} : (tensor<8x16xf32>) -> tensor<8x16xf32>
    %z = "ditron_task.elementwise"(%y) {fn = "relu"} : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %z : tensor<8x16xf32>
  }
}

// -----

// Padded rows: M = 10 over 4 ranks gives shards of 3; the gathered rows keep the padded size 12.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @padded
  // CHECK-SAME: tensor<3x8xf32> {ditron.global_shape = array<i64: 10, 8>, ditron.sharding = {dims = {{\[\["tp"\], \[\]\]}}, padded = true}}
  // CHECK-SAME: -> (tensor<3x8xf32> {ditron.global_shape = array<i64: 10, 8>, ditron.sharding = {dims = {{\[\["tp"\], \[\]\]}}, padded = true}})
  // CHECK: "ditron_task.all_gather"{{.*}} : (tensor<3x8xf32>) -> tensor<12x8xf32>
  // CHECK: "ditron_task.reduce_scatter"{{.*}} : (tensor<12x8xf32>) -> tensor<3x8xf32>
  func.func @padded(%x: tensor<10x8xf32> {ditron.sharding = {dims = [["tp"], []], padded = true}},
                    %w1: tensor<8x16xf32> {ditron.sharding = {dims = [[], ["tp"]]}},
                    %w2: tensor<16x8xf32> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<10x8xf32> {ditron.sharding = {dims = [["tp"], []], padded = true}}) {
    %h = "ditron_task.matmul"(%x, %w1) : (tensor<10x8xf32>, tensor<8x16xf32>) -> tensor<10x16xf32>
    %y = "ditron_task.matmul"(%h, %w2) : (tensor<10x16xf32>, tensor<16x8xf32>) -> tensor<10x8xf32>
    return %y : tensor<10x8xf32>
  }
}
