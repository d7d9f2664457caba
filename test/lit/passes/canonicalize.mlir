// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-canonicalize | FileCheck %s
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-canonicalize{upstream=false}' | FileCheck %s --check-prefix=NOUP

// Collectives over an axis of size 1 are the identity; over a larger axis they stay.
module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 1, 4>}} {
  // CHECK-LABEL: func.func @size_one_axis
  // CHECK-SAME: (%[[X:.*]]: tensor<16x8xf32>, %[[S:.*]]: tensor<1xi32>)
  // CHECK-NOT: ditron_task
  // CHECK: %[[CAST:.*]] = tensor.cast %[[X]] : tensor<16x8xf32> to tensor<?x8xf32>
  // CHECK-NOT: ditron_task
  // CHECK: return %[[X]], %[[X]], %[[X]], %[[X]], %[[CAST]] :
  func.func @size_one_axis(%x: tensor<16x8xf32>, %s: tensor<1xi32>)
      -> (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<?x8xf32>) {
    %0 = "ditron_task.all_gather"(%x) {axis = "dp", dim = 0 : i64} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    %1 = "ditron_task.reduce_scatter"(%x) {axis = "dp", dim = 1 : i64, reduce = "sum"} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    %2 = "ditron_task.all_reduce"(%x) {axis = "dp", reduce = "max"} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    %3 = "ditron_task.all_to_all"(%x) {axis = "dp", split_dim = 0 : i64, concat_dim = 1 : i64} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    %4 = "ditron_task.all_to_all"(%x, %s) {axis = "dp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<16x8xf32>, tensor<1xi32>) -> tensor<?x8xf32>
    return %0, %1, %2, %3, %4 : tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<?x8xf32>
  }

  // The bounded all_to_all of run-time sizes stays even over a size-1 axis (it clips to its capacity, zeroes the
  // rest and counts the rows), though its output and input types agree here; unused, it goes like any task op.
  // CHECK-LABEL: func.func @bounded_size_one
  // CHECK-NEXT: %[[B:.*]]:2 = "ditron_task.all_to_all"(%arg0, %arg1) {axis = "dp", concat_dim = 0 : i64, split_dim = 0 : i64} : (tensor<16x8xf32>, tensor<1xi32>) -> (tensor<16x8xf32>, tensor<1xi32>)
  // CHECK-NEXT: return %[[B]]#0, %[[B]]#1
  func.func @bounded_size_one(%x: tensor<16x8xf32>, %s: tensor<1xi32>) -> (tensor<16x8xf32>, tensor<1xi32>) {
    %0, %1 = "ditron_task.all_to_all"(%x, %s) {axis = "dp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<16x8xf32>, tensor<1xi32>) -> (tensor<16x8xf32>, tensor<1xi32>)
    %2, %3 = "ditron_task.all_to_all"(%x, %s) {axis = "dp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<16x8xf32>, tensor<1xi32>) -> (tensor<16x8xf32>, tensor<1xi32>)
    return %0, %1 : tensor<16x8xf32>, tensor<1xi32>
  }

  // A chain of collectives over size-1 axes folds all the way.
  // CHECK-LABEL: func.func @chain
  // CHECK-NEXT: return %arg0 : tensor<16x8xf32>
  func.func @chain(%x: tensor<16x8xf32>) -> tensor<16x8xf32> {
    %0 = "ditron_task.all_reduce"(%x) {axis = "dp", reduce = "sum"} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    %1 = "ditron_task.all_gather"(%0) {axis = "dp", dim = 1 : i64} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    %2 = "ditron_task.reduce_scatter"(%1) {axis = "dp", dim = 0 : i64, reduce = "sum"} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    return %2 : tensor<16x8xf32>
  }

  // Over tp (size 4) nothing folds.
  // CHECK-LABEL: func.func @size_four_axis
  // CHECK: %[[AG:.*]] = "ditron_task.all_gather"(%arg0) {axis = "tp", dim = 0 : i64} : (tensor<16x8xf32>) -> tensor<64x8xf32>
  // CHECK: %[[RS:.*]] = "ditron_task.reduce_scatter"(%arg0) {axis = "tp", dim = 1 : i64, reduce = "sum"} : (tensor<16x8xf32>) -> tensor<16x2xf32>
  // CHECK: %[[AR:.*]] = "ditron_task.all_reduce"(%arg0) {axis = "tp", reduce = "sum"}
  // CHECK: %[[A2A:.*]] = "ditron_task.all_to_all"(%arg0) {axis = "tp", concat_dim = 0 : i64, split_dim = 0 : i64}
  // CHECK: %[[A2AV:.*]] = "ditron_task.all_to_all"(%arg0, %arg1) {axis = "tp", concat_dim = 0 : i64, split_dim = 0 : i64}
  // CHECK: return %[[AG]], %[[RS]], %[[AR]], %[[A2A]], %[[A2AV]]
  func.func @size_four_axis(%x: tensor<16x8xf32>, %s: tensor<4xi64>)
      -> (tensor<64x8xf32>, tensor<16x2xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<?x8xf32>) {
    %0 = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<16x8xf32>) -> tensor<64x8xf32>
    %1 = "ditron_task.reduce_scatter"(%x) {axis = "tp", dim = 1 : i64, reduce = "sum"} : (tensor<16x8xf32>) -> tensor<16x2xf32>
    %2 = "ditron_task.all_reduce"(%x) {axis = "tp", reduce = "sum"} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    %3 = "ditron_task.all_to_all"(%x) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    %4 = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<16x8xf32>, tensor<4xi64>) -> tensor<?x8xf32>
    return %0, %1, %2, %3, %4 : tensor<64x8xf32>, tensor<16x2xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<?x8xf32>
  }
}

// -----

// Shard of shard: the outer annotation wins and the inner one, now unused, goes.
module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 4>}} {
  // CHECK-LABEL: func.func @shard_of_shard
  // CHECK-NEXT: %[[S:.*]] = "ditron_task.shard"(%arg0) {sharding = {dims = {{\[\[}}"dp"], ["tp"]]}}
  // CHECK-NEXT: return %[[S]]
  func.func @shard_of_shard(%x: tensor<16x8xf32>) -> tensor<16x8xf32> {
    %0 = "ditron_task.shard"(%x) {sharding = {dims = [["tp"], []]}} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    %1 = "ditron_task.shard"(%0) {sharding = {dims = [[], ["dp"]]}} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    %2 = "ditron_task.shard"(%1) {sharding = {dims = [["dp"], ["tp"]]}} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    return %2 : tensor<16x8xf32>
  }

  // The inner shard has another use: it stays, the outer one reads x directly.
  // CHECK-LABEL: func.func @shard_of_used_shard
  // CHECK-NEXT: %[[IN:.*]] = "ditron_task.shard"(%arg0) {sharding = {dims = {{\[\[}}"tp"], []]}}
  // CHECK-NEXT: %[[OUT:.*]] = "ditron_task.shard"(%arg0) {sharding = {dims = {{\[\[}}], ["dp"]]}}
  // CHECK-NEXT: return %[[IN]], %[[OUT]]
  func.func @shard_of_used_shard(%x: tensor<16x8xf32>) -> (tensor<16x8xf32>, tensor<16x8xf32>) {
    %0 = "ditron_task.shard"(%x) {sharding = {dims = [["tp"], []]}} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    %1 = "ditron_task.shard"(%0) {sharding = {dims = [[], ["dp"]]}} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    return %0, %1 : tensor<16x8xf32>, tensor<16x8xf32>
  }

  // Dead Task ops (value semantics) go, whole chains at once; collectives over size > 1 axes too when unused.
  // CHECK-LABEL: func.func @dead_task_ops
  // CHECK-NEXT: %[[M:.*]] = "ditron_task.matmul"(%arg0, %arg1)
  // CHECK-NEXT: return %[[M]]
  func.func @dead_task_ops(%a: tensor<16x8xf32>, %b: tensor<8x16xf32>, %g: tensor<4xi32>, %w: tensor<4x8x16xf32>) -> tensor<16x16xf32> {
    %0 = "ditron_task.matmul"(%a, %b) : (tensor<16x8xf32>, tensor<8x16xf32>) -> tensor<16x16xf32>
    %1 = "ditron_task.matmul"(%a, %b) : (tensor<16x8xf32>, tensor<8x16xf32>) -> tensor<16x16xf32>
    %2 = "ditron_task.elementwise"(%1) {fn = "gelu"} : (tensor<16x16xf32>) -> tensor<16x16xf32>
    %3 = "ditron_task.all_gather"(%2) {axis = "tp", dim = 0 : i64} : (tensor<16x16xf32>) -> tensor<64x16xf32>
    %4 = "ditron_task.all_reduce"(%3) {axis = "tp", reduce = "sum"} : (tensor<64x16xf32>) -> tensor<64x16xf32>
    %5 = "ditron_task.grouped_matmul"(%a, %w, %g) : (tensor<16x8xf32>, tensor<4x8x16xf32>, tensor<4xi32>) -> tensor<16x16xf32>
    %6 = "ditron_task.shard"(%a) {sharding = {dims = [["tp"], []]}} : (tensor<16x8xf32>) -> tensor<16x8xf32>
    return %0 : tensor<16x16xf32>
  }
}

// -----

// Device level: empty copies go, copies of unknown or non-zero size stay; queries without side effects go when
// unused; buffers, signals, waits, barriers and launches always stay.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @device
  // CHECK-NOT: ditron_device.num_ranks
  // CHECK: %[[ME:.*]] = "ditron_device.rank"()
  // CHECK-NEXT: "ditron_device.alloc_symmetric"() {name = "unused"}
  // CHECK-NEXT: "ditron_device.copy"(%arg0, %arg0, %[[ME]], %[[ME]], %{{.*}}, %{{.*}}, %arg2) {engine = "sm"}
  // CHECK-NEXT: "ditron_device.copy"(%arg0, %arg0, %[[ME]], %[[ME]], %{{.*}}, %{{.*}}, %c1{{.*}}) {engine = "copy_engine"}
  // CHECK-NEXT: "ditron_device.signal"
  // CHECK-NEXT: "ditron_device.wait"
  // CHECK-NEXT: "ditron_device.barrier"
  // CHECK-NEXT: "ditron_device.launch"
  // CHECK-NEXT: return
  func.func @device(%buf: memref<64xf32>, %sig: memref<4xi32>, %n: index) {
    %w = "ditron_device.num_ranks"() : () -> index
    %me = "ditron_device.rank"() : () -> index
    %unused = "ditron_device.alloc_symmetric"() {name = "unused"} : () -> memref<8xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    "ditron_device.copy"(%buf, %buf, %me, %me, %c1, %c0, %c0) {engine = "copy_engine"} : (memref<64xf32>, memref<64xf32>, index, index, index, index, index) -> ()
    "ditron_device.copy"(%buf, %buf, %me, %me, %c1, %c0, %n) {engine = "sm"} : (memref<64xf32>, memref<64xf32>, index, index, index, index, index) -> ()
    "ditron_device.copy"(%buf, %buf, %me, %me, %c1, %c0, %c1) {engine = "copy_engine"} : (memref<64xf32>, memref<64xf32>, index, index, index, index, index) -> ()
    "ditron_device.signal"(%sig, %me, %c0, %c1) {op = "add", scope = "sys"} : (memref<4xi32>, index, index, index) -> ()
    "ditron_device.wait"(%sig, %c1, %c0) {where = "stream"} : (memref<4xi32>, index, index) -> ()
    "ditron_device.barrier"(%sig) : (memref<4xi32>) -> ()
    "ditron_device.launch"(%n) {kernel = @k, grid = array<i64: 1>, sm_budget = 1 : i64, tile_order = "row_major", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (index) -> ()
    return
  }
  func.func private @k(index)

  // A 2-d copy with one empty dim is empty.
  // CHECK-LABEL: func.func @empty_2d
  // CHECK-NEXT: return
  func.func @empty_2d(%buf: memref<8x8xf32>, %r: index) {
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    "ditron_device.copy"(%buf, %buf, %r, %r, %c0, %c0, %c0, %c0, %c4, %c0) {engine = "sm"} : (memref<8x8xf32>, memref<8x8xf32>, index, index, index, index, index, index, index, index) -> ()
    return
  }
}

// -----

// Core level: rank, num_ranks, symm_at and consume_token go when unused; a wait stays even if its token is unused.
// CHECK-LABEL: func.func @core
// CHECK-NEXT: %[[T:.*]] = "ditron_core.wait"(%arg0, %arg1) {scope = "sys", semantic = "acquire"}
// CHECK-NEXT: "ditron_core.notify"
// CHECK-NEXT: return
func.func @core(%sig: !tt.ptr<i32>, %v: i32, %p: !tt.ptr<f16>) {
  %me = "ditron_core.rank"() : () -> i32
  %w = "ditron_core.num_ranks"() : () -> i32
  %peer = "ditron_core.symm_at"(%p, %w) : (!tt.ptr<f16>, i32) -> !tt.ptr<f16>
  %tok = "ditron_core.wait"(%sig, %v) {scope = "sys", semantic = "acquire"} : (!tt.ptr<i32>, i32) -> i32
  %q = "ditron_core.consume_token"(%peer, %tok) : (!tt.ptr<f16>, i32) -> !tt.ptr<f16>
  "ditron_core.notify"(%sig, %v, %v) {op = "add", scope = "sys", semantic = "release"} : (!tt.ptr<i32>, i32, i32) -> ()
  return
}

// -----

// MLIR's canonicalizer folds arith unless upstream=false.
// CHECK-LABEL: func.func @arith
// CHECK-NEXT: %[[C:.*]] = arith.constant 5 : index
// CHECK-NEXT: return %[[C]]
// NOUP-LABEL: func.func @arith
// NOUP: arith.addi
func.func @arith() -> index {
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %s = arith.addi %c2, %c3 : index
  return %s : index
}
