// RUN: not ditron-opt %s --split-input-file 2>&1 | FileCheck %s
// Negative cases for ditron_core: what IRDL checks, then one case per rule of dialects/verify.py.

func.func @unknown_op() {
  // CHECK: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:3: error: unregistered operation 'ditron_core.fence' found in dialect ('ditron_core') that does not allow unknown operations
  "ditron_core.fence"() : () -> ()
  return
}

// -----

func.func @rank_type() -> index {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_core.rank' op expected 'i32' but got 'index'
  %0 = "ditron_core.rank"() : () -> index
  return %0 : index
}

// -----

func.func @num_ranks_operand(%x: i32) -> i32 {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_core.num_ranks' op expects exactly 0 operands, but got 1
  %0 = "ditron_core.num_ranks"(%x) : (i32) -> i32
  return %0 : i32
}

// -----

func.func @symm_at_peer_i64(%p: !tt.ptr<f16>, %peer: i64) -> !tt.ptr<f16> {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_core.symm_at' op expected 'i32' but got 'i64'
  %0 = "ditron_core.symm_at"(%p, %peer) : (!tt.ptr<f16>, i64) -> !tt.ptr<f16>
  return %0 : !tt.ptr<f16>
}

// -----

func.func @wait_no_semantic(%p: !tt.ptr<i32>, %v: i32) -> i32 {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_core.wait' op attribute "semantic" is expected but not provided
  %0 = "ditron_core.wait"(%p, %v) {scope = "sys"} : (!tt.ptr<i32>, i32) -> i32
  return %0 : i32
}

// -----

func.func @notify_operands(%p: !tt.ptr<i32>, %v: i32) {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_core.notify' op expects exactly 3 operands, but got 2
  "ditron_core.notify"(%p, %v) {op = "set", scope = "sys", semantic = "release"} : (!tt.ptr<i32>, i32) -> ()
  return
}

// -----

func.func @barrier_all_scope_kind(%p: !tt.ptr<i32>) {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_core.barrier_all' op expected base attribute 'builtin.string' but got 'builtin.integer'
  "ditron_core.barrier_all"(%p) {scope = 1 : i32} : (!tt.ptr<i32>) -> ()
  return
}

// -----

func.func @wait_scope(%p: !tt.ptr<i32>, %v: i32) -> i32 {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_core.wait' op has scope 'cta'; expected one of: gpu, sys
  %0 = "ditron_core.wait"(%p, %v) {scope = "cta", semantic = "acquire"} : (!tt.ptr<i32>, i32) -> i32
  return %0 : i32
}

// -----

func.func @wait_semantic(%p: !tt.ptr<i32>, %v: i32) -> i32 {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_core.wait' op has semantic 'release'; expected one of: acquire, relaxed
  %0 = "ditron_core.wait"(%p, %v) {scope = "sys", semantic = "release"} : (!tt.ptr<i32>, i32) -> i32
  return %0 : i32
}

// -----

func.func @notify_op(%p: !tt.ptr<i32>, %peer: i32, %v: i32) {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_core.notify' op has op 'max'; expected one of: set, add, clear
  "ditron_core.notify"(%p, %peer, %v) {op = "max", scope = "sys", semantic = "release"} : (!tt.ptr<i32>, i32, i32) -> ()
  return
}

// -----

func.func @notify_scope(%p: !tt.ptr<i32>, %peer: i32, %v: i32) {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_core.notify' op has scope 'system'; expected one of: gpu, sys
  "ditron_core.notify"(%p, %peer, %v) {op = "add", scope = "system", semantic = "release"} : (!tt.ptr<i32>, i32, i32) -> ()
  return
}

// -----

func.func @notify_semantic(%p: !tt.ptr<i32>, %peer: i32, %v: i32) {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_core.notify' op has semantic 'acquire'; expected one of: release, relaxed
  "ditron_core.notify"(%p, %peer, %v) {op = "add", scope = "sys", semantic = "acquire"} : (!tt.ptr<i32>, i32, i32) -> ()
  return
}

// -----

func.func @barrier_all_scope(%p: !tt.ptr<i32>) {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_core.barrier_all' op has scope 'node'; expected one of: gpu, sys
  "ditron_core.barrier_all"(%p) {scope = "node"} : (!tt.ptr<i32>) -> ()
  return
}

// -----

func.func @symm_at_type(%p: !tt.ptr<f16>, %peer: i32) -> !tt.ptr<f32> {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_core.symm_at' op result type !tt.ptr<f32> differs from operand type !tt.ptr<f16>
  %0 = "ditron_core.symm_at"(%p, %peer) : (!tt.ptr<f16>, i32) -> !tt.ptr<f32>
  return %0 : !tt.ptr<f32>
}

// -----

func.func @consume_token_type(%x: tensor<16xf32>, %t: i32) -> tensor<16xf16> {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_core.consume_token' op result type tensor<16xf16> differs from operand type tensor<16xf32>
  %0 = "ditron_core.consume_token"(%x, %t) : (tensor<16xf32>, i32) -> tensor<16xf16>
  return %0 : tensor<16xf16>
}

// -----

func.func @notify_clear_releases(%p: !tt.ptr<i32>, %peer: i32, %v: i32) {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_core.notify' op clears its slot with semantic 'release'; a clear is relaxed (it consumes a signal already acquired and releases nothing)
  "ditron_core.notify"(%p, %peer, %v) {op = "clear", scope = "sys", semantic = "release"} : (!tt.ptr<i32>, i32, i32) -> ()
  return
}

// -----

// Triton's parser corrupts the process on an expand_dims past the operand's rank: ditron checks it first.
func.func @expand_dims_axis(%x: tensor<32xi32>) {
  // CHECK-NEXT: {{.*}}core_invalid.mlir:[[# @LINE + 1]]:8: error: 'tt.expand_dims' op axis 100 is out of range for an operand of rank 1 (0..1)
  %0 = "tt.expand_dims"(%x) {axis = 100 : i32} : (tensor<32xi32>) -> tensor<1x32xi32>
  %1 = "tt.expand_dims"(%x) {axis = 1 : i32} : (tensor<32xi32>) -> tensor<32x1xi32>
  return
}
