// RUN: ditron-opt %s | ditron-opt | FileCheck %s
// Every ditron_task op, positive cases: the printed form re-parses and prints the same.

module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 4>}} {
  // CHECK-LABEL: func.func @shard
  // CHECK-SAME: {ditron.sharding = {dims = {{\[\["tp"\], \[\]\]}}}}
  // CHECK: "ditron_task.shard"(%{{.*}}) {sharding = {dims = {{\[\[\], \["dp", "tp"\]\]}}}} : (tensor<16x64xf32>) -> tensor<16x64xf32>
  // CHECK: "ditron_task.shard"(%{{.*}}) {sharding = {dims = {{\[\[\], \[\]\]}}, partial = ["dp"]}}
  // CHECK: "ditron_task.shard"(%{{.*}}) {sharding = {dims = {{\[\["tp"\], \[\]\]}}, padded = true}} : (tensor<10x64xf32>) -> tensor<10x64xf32>
  func.func @shard(%x: tensor<16x64xf32> {ditron.sharding = {dims = [["tp"], []]}}, %p: tensor<10x64xf32>)
      -> (tensor<16x64xf32>, tensor<16x64xf32>, tensor<10x64xf32>) {
    %a = "ditron_task.shard"(%x) {sharding = {dims = [[], ["dp", "tp"]]}} : (tensor<16x64xf32>) -> tensor<16x64xf32>
    %b = "ditron_task.shard"(%x) {sharding = {dims = [[], []], partial = ["dp"]}} : (tensor<16x64xf32>) -> tensor<16x64xf32>
    %c = "ditron_task.shard"(%p) {sharding = {dims = [["tp"], []], padded = true}} : (tensor<10x64xf32>) -> tensor<10x64xf32>
    return %a, %b, %c : tensor<16x64xf32>, tensor<16x64xf32>, tensor<10x64xf32>
  }

  // CHECK-LABEL: func.func @matmul
  // CHECK: %[[C:.*]] = "ditron_task.matmul"(%arg0, %arg1) : (tensor<128x64xbf16>, tensor<64x32xbf16>) -> tensor<128x32xbf16>
  // CHECK: "ditron_task.matmul"(%arg2, %arg3) : (tensor<?x64xf8E4M3FN>, tensor<64x?xf8E4M3FN>) -> tensor<?x?xf32>
  // CHECK: "ditron_task.matmul"(%arg4, %arg4) : (tensor<8x8xi8>, tensor<8x8xi8>) -> tensor<8x8xi32>
  func.func @matmul(%a: tensor<128x64xbf16>, %b: tensor<64x32xbf16>, %a8: tensor<?x64xf8E4M3FN>,
                    %b8: tensor<64x?xf8E4M3FN>, %i: tensor<8x8xi8>)
      -> (tensor<128x32xbf16>, tensor<?x?xf32>, tensor<8x8xi32>) {
    %c = "ditron_task.matmul"(%a, %b) : (tensor<128x64xbf16>, tensor<64x32xbf16>) -> tensor<128x32xbf16>
    %d = "ditron_task.matmul"(%a8, %b8) : (tensor<?x64xf8E4M3FN>, tensor<64x?xf8E4M3FN>) -> tensor<?x?xf32>
    %e = "ditron_task.matmul"(%i, %i) : (tensor<8x8xi8>, tensor<8x8xi8>) -> tensor<8x8xi32>
    return %c, %d, %e : tensor<128x32xbf16>, tensor<?x?xf32>, tensor<8x8xi32>
  }

  // The largest dims the kernels take (kernels.MAX_DIM = 2^30) and the smallest.
  // CHECK-LABEL: func.func @matmul_extreme_dims
  // CHECK: "ditron_task.matmul"(%arg0, %arg1) : (tensor<1073741824x1xbf16>, tensor<1x1073741824xbf16>) -> tensor<1073741824x1073741824xbf16>
  func.func @matmul_extreme_dims(%a: tensor<1073741824x1xbf16>, %b: tensor<1x1073741824xbf16>)
      -> tensor<1073741824x1073741824xbf16> {
    %c = "ditron_task.matmul"(%a, %b) : (tensor<1073741824x1xbf16>, tensor<1x1073741824xbf16>) -> tensor<1073741824x1073741824xbf16>
    return %c : tensor<1073741824x1073741824xbf16>
  }

  // CHECK-LABEL: func.func @grouped_matmul
  // CHECK: "ditron_task.grouped_matmul"(%arg0, %arg1, %arg2) : (tensor<256x64xbf16>, tensor<8x64x128xbf16>, tensor<8xi32>) -> tensor<256x128xbf16>
  // CHECK: "ditron_task.grouped_matmul"(%arg3, %arg1, %arg4) : (tensor<?x64xbf16>, tensor<8x64x128xbf16>, tensor<?xi64>) -> tensor<?x128xbf16>
  func.func @grouped_matmul(%a: tensor<256x64xbf16>, %b: tensor<8x64x128xbf16>, %g: tensor<8xi32>,
                            %ad: tensor<?x64xbf16>, %gd: tensor<?xi64>) -> (tensor<256x128xbf16>, tensor<?x128xbf16>) {
    %c = "ditron_task.grouped_matmul"(%a, %b, %g) : (tensor<256x64xbf16>, tensor<8x64x128xbf16>, tensor<8xi32>) -> tensor<256x128xbf16>
    %d = "ditron_task.grouped_matmul"(%ad, %b, %gd) : (tensor<?x64xbf16>, tensor<8x64x128xbf16>, tensor<?xi64>) -> tensor<?x128xbf16>
    return %c, %d : tensor<256x128xbf16>, tensor<?x128xbf16>
  }

  // 16 groups cycling over 8 experts (an expert-parallel rank's received rows from 2 sources), silu(gate) * up
  // CHECK-LABEL: func.func @grouped_matmul_gated_cycled
  // CHECK: "ditron_task.grouped_matmul"(%arg0, %arg1, %arg2) {gated = "silu"} : (tensor<256x64xbf16>, tensor<8x64x128xbf16>, tensor<16xi32>) -> tensor<256x64xbf16>
  func.func @grouped_matmul_gated_cycled(%a: tensor<256x64xbf16>, %b: tensor<8x64x128xbf16>, %g: tensor<16xi32>) -> tensor<256x64xbf16> {
    %c = "ditron_task.grouped_matmul"(%a, %b, %g) {gated = "silu"} : (tensor<256x64xbf16>, tensor<8x64x128xbf16>, tensor<16xi32>) -> tensor<256x64xbf16>
    return %c : tensor<256x64xbf16>
  }

  // CHECK-LABEL: func.func @elementwise
  // CHECK: %[[ADD:.*]] = "ditron_task.elementwise"(%arg0, %arg1) {fn = "add"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: %[[SM:.*]] = "ditron_task.elementwise"(%[[ADD]], %arg1) {fn = "silu_mul"}
  // CHECK: %[[G:.*]] = "ditron_task.elementwise"(%[[SM]]) {fn = "gelu"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: "ditron_task.elementwise"(%[[G]]) {fn = "relu"} : (tensor<4x8xf32>) -> tensor<?x8xf32>
  func.func @elementwise(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<?x8xf32> {
    %0 = "ditron_task.elementwise"(%x, %y) {fn = "add"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %1 = "ditron_task.elementwise"(%0, %y) {fn = "silu_mul"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %2 = "ditron_task.elementwise"(%1) {fn = "gelu"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %3 = "ditron_task.elementwise"(%2) {fn = "relu"} : (tensor<4x8xf32>) -> tensor<?x8xf32>
    return %3 : tensor<?x8xf32>
  }

  // CHECK-LABEL: func.func @all_gather
  // CHECK: "ditron_task.all_gather"(%arg0) {axis = "tp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<16x8xf32>
  // CHECK: "ditron_task.all_gather"(%arg0) {axis = "dp", dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x16xf32>
  // CHECK: "ditron_task.all_gather"(%arg1) {axis = "tp", dim = 0 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  func.func @all_gather(%x: tensor<4x8xf32>, %d: tensor<?x8xf32>) -> (tensor<16x8xf32>, tensor<4x16xf32>, tensor<?x8xf32>) {
    %0 = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<16x8xf32>
    %1 = "ditron_task.all_gather"(%x) {axis = "dp", dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x16xf32>
    %2 = "ditron_task.all_gather"(%d) {axis = "tp", dim = 0 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
    return %0, %1, %2 : tensor<16x8xf32>, tensor<4x16xf32>, tensor<?x8xf32>
  }

  // CHECK-LABEL: func.func @reduce_scatter
  // CHECK: "ditron_task.reduce_scatter"(%arg0) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<16x8xbf16>) -> tensor<4x8xbf16>
  // CHECK: "ditron_task.reduce_scatter"(%arg0) {axis = "dp", dim = 1 : i64, reduce = "max"} : (tensor<16x8xbf16>) -> tensor<16x4xbf16>
  // CHECK: "ditron_task.reduce_scatter"(%arg0) {axis = "tp", dim = 1 : i64, reduce = "min"}
  // CHECK: "ditron_task.reduce_scatter"(%arg0) {axis = "tp", dim = 0 : i64, reduce = "prod"}
  func.func @reduce_scatter(%x: tensor<16x8xbf16>) -> (tensor<4x8xbf16>, tensor<16x4xbf16>, tensor<16x2xbf16>, tensor<4x8xbf16>) {
    %0 = "ditron_task.reduce_scatter"(%x) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<16x8xbf16>) -> tensor<4x8xbf16>
    %1 = "ditron_task.reduce_scatter"(%x) {axis = "dp", dim = 1 : i64, reduce = "max"} : (tensor<16x8xbf16>) -> tensor<16x4xbf16>
    %2 = "ditron_task.reduce_scatter"(%x) {axis = "tp", dim = 1 : i64, reduce = "min"} : (tensor<16x8xbf16>) -> tensor<16x2xbf16>
    %3 = "ditron_task.reduce_scatter"(%x) {axis = "tp", dim = 0 : i64, reduce = "prod"} : (tensor<16x8xbf16>) -> tensor<4x8xbf16>
    return %0, %1, %2, %3 : tensor<4x8xbf16>, tensor<16x4xbf16>, tensor<16x2xbf16>, tensor<4x8xbf16>
  }

  // CHECK-LABEL: func.func @all_reduce
  // CHECK: %[[S:.*]] = "ditron_task.all_reduce"(%arg0) {axis = "tp", reduce = "sum"} : (tensor<4x8xf16>) -> tensor<4x8xf16>
  // CHECK: "ditron_task.all_reduce"(%[[S]]) {axis = "dp", reduce = "max"} : (tensor<4x8xf16>) -> tensor<4x8xf16>
  func.func @all_reduce(%x: tensor<4x8xf16>) -> tensor<4x8xf16> {
    %0 = "ditron_task.all_reduce"(%x) {axis = "tp", reduce = "sum"} : (tensor<4x8xf16>) -> tensor<4x8xf16>
    %1 = "ditron_task.all_reduce"(%0) {axis = "dp", reduce = "max"} : (tensor<4x8xf16>) -> tensor<4x8xf16>
    return %1 : tensor<4x8xf16>
  }

  // CHECK-LABEL: func.func @all_to_all
  // CHECK: "ditron_task.all_to_all"(%arg0) {axis = "tp", concat_dim = 1 : i64, split_dim = 0 : i64} : (tensor<16x8xf32>) -> tensor<4x32xf32>
  // CHECK: "ditron_task.all_to_all"(%arg0) {axis = "tp", concat_dim = 0 : i64, split_dim = 0 : i64} : (tensor<16x8xf32>) -> tensor<16x8xf32>
  // CHECK: "ditron_task.all_to_all"(%arg0, %arg1) {axis = "tp", concat_dim = 0 : i64, split_dim = 0 : i64} : (tensor<16x8xf32>, tensor<4xi32>) -> tensor<?x8xf32>
  // CHECK: "ditron_task.all_to_all"(%arg0, %arg2) {axis = "dp", concat_dim = 0 : i64, split_dim = 0 : i64} : (tensor<16x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  // The bounded form: the output's dim is its capacity, with the rows received from each rank.
  // CHECK: %{{.*}}:2 = "ditron_task.all_to_all"(%arg0, %arg1) {axis = "tp", concat_dim = 0 : i64, split_dim = 0 : i64} : (tensor<16x8xf32>, tensor<4xi32>) -> (tensor<40x8xf32>, tensor<4xi32>)
  func.func @all_to_all(%x: tensor<16x8xf32>, %s: tensor<4xi32>, %sd: tensor<?xi64>)
      -> (tensor<4x32xf32>, tensor<16x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) {
    %0 = "ditron_task.all_to_all"(%x) {axis = "tp", split_dim = 0 : i64, concat_dim = 1 : i64} : (tensor<16x8xf32>) -> tensor<4x32xf32>
    %1 = "ditron_task.all_to_all"(%x) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    %2 = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<16x8xf32>, tensor<4xi32>) -> tensor<?x8xf32>
    %3 = "ditron_task.all_to_all"(%x, %sd) {axis = "dp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<16x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
    %4, %5 = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<16x8xf32>, tensor<4xi32>) -> (tensor<40x8xf32>, tensor<4xi32>)
    return %0, %1, %2, %3 : tensor<4x32xf32>, tensor<16x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>
  }
}
