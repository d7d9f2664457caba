// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-lower-core-to-triton{target=hip:gfx942}' | FileCheck %s
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-lower-core-to-triton{target=hip:gfx950}' | FileCheck %s --check-prefix=GFX950

// wait on AMD: a system-scope acquire atomic add of 0 (global_atomic ... sc1 + buffer_inv in the ISA), s_sleep
// between failed polls; consume_token uses a GCN v_mov_b32 as its opaque zero.
// CHECK-LABEL: module attributes {ditron.target = "hip:gfx942"}
// GFX950-LABEL: module attributes {ditron.target = "hip:gfx950"}
// CHECK: ^bb0(%[[SIG:.*]]: !tt.ptr<i32>, %[[X:.*]]: !tt.ptr<f16>, %[[V:.*]]: i32, %[[BOUND:.*]]: i64, %[[ERR:.*]]: !tt.ptr<i32>, %[[TAG:.*]]: i32):
// CHECK: %[[TOK:.*]]:2 = scf.while (%[[N:.*]] = %{{.*}}) : (i64) -> (i64, i32) {
// CHECK:   %[[ZERO:.*]] = arith.constant 0 : i32
// CHECK:   %[[TRUE:.*]] = arith.constant true
// CHECK:   %[[SEEN:.*]] = "tt.atomic_rmw"(%[[SIG]], %[[ZERO]], %[[TRUE]]) {atomic_rmw_op = 4 : i32, scope = 3 : i32, sem = 2 : i32} : (!tt.ptr<i32>, i32, i1) -> i32
// CHECK:   %[[C:.*]] = arith.cmpi slt, %[[SEEN]], %[[V]] : i32
// CHECK:   %[[LEFT:.*]] = arith.cmpi slt, %[[N]], %[[BOUND]] : i64
// CHECK:   %[[AGAIN:.*]] = arith.andi %[[C]], %[[LEFT]] : i1
// CHECK:   scf.condition(%[[AGAIN]]) %[[N]], %[[SEEN]] : i64, i32
// CHECK: } do {
// CHECK:   "tt.elementwise_inline_asm"(%{{.*}}) {asm_string = "s_sleep 1\0A\09v_mov_b32 $0, $1", constraints = "=v,v", packed_element = 1 : i32, pure = false} : (i32) -> i32
// CHECK: scf.if
// CHECK:   "tt.atomic_rmw"(%[[ERR]], {{.*}}) {atomic_rmw_op = 4 : i32, scope = 1 : i32, sem = 1 : i32}
// CHECK: %[[Z:.*]] = "tt.elementwise_inline_asm"(%[[TOK]]#1) {asm_string = "v_mov_b32 $0, 0", constraints = "=v,v", packed_element = 1 : i32, pure = true, tt.divisibility = dense<1073741824> : tensor<1xi32>} : (i32) -> i32
// CHECK: "tt.addptr"(%[[X]], %[[Z]]) : (!tt.ptr<f16>, i32) -> !tt.ptr<f16>
// GFX950: "tt.atomic_rmw"({{.*}}) {atomic_rmw_op = 4 : i32, scope = 3 : i32, sem = 2 : i32}
// GFX950: asm_string = "v_mov_b32 $0, 0"
"tt.func"() ({
^bb0(%sig: !tt.ptr<i32>, %x: !tt.ptr<f16>, %v: i32):
  %t = "ditron_core.wait"(%sig, %v) {scope = "sys", semantic = "acquire"} : (!tt.ptr<i32>, i32) -> i32
  %y = "ditron_core.consume_token"(%x, %t) : (!tt.ptr<f16>, i32) -> !tt.ptr<f16>
  %a = "tt.load"(%y) {cache = 1 : i32, evict = 1 : i32, isVolatile = false, operandSegmentSizes = array<i32: 1, 0, 0>} : (!tt.ptr<f16>) -> f16
  "tt.store"(%x, %a) {cache = 1 : i32, evict = 1 : i32} : (!tt.ptr<f16>, f16) -> ()
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<i32>, !tt.ptr<f16>, i32) -> (), sym_name = "wait_scalar", sym_visibility = "public"} : () -> ()

// -----

// A tensor of slots at gpu (agent) scope: one atomic per slot, then a min reduction. Ordered atomics at gpu scope are
// emitted as acq_rel (sem = 4): Triton 3.6 swaps the fences of AMD buffer atomics (backends/amd/primitives.py).
// CHECK-LABEL: module attributes {ditron.target = "hip:gfx942"}
// CHECK: scf.while (%{{.*}} = %{{.*}}) : (i64) -> (i64, i32) {
// CHECK:   %[[Z:.*]] = arith.constant dense<0> : tensor<8xi32>
// CHECK:   %[[T:.*]] = arith.constant dense<true> : tensor<8xi1>
// CHECK:   %[[L:.*]] = "tt.atomic_rmw"(%{{.*}}, %[[Z]], %[[T]]) {atomic_rmw_op = 4 : i32, scope = 1 : i32, sem = 4 : i32} : (tensor<8x!tt.ptr<i32>>, tensor<8xi32>, tensor<8xi1>) -> tensor<8xi32>
// CHECK:   "tt.reduce"(%[[L]])
// CHECK:     arith.minsi
"tt.func"() ({
^bb0(%sig: !tt.ptr<i32>):
  %c1 = "arith.constant"() <{value = 1 : i32}> : () -> i32
  %r = "tt.make_range"() <{end = 8 : i32, start = 0 : i32}> : () -> tensor<8xi32>
  %s = "tt.splat"(%sig) : (!tt.ptr<i32>) -> tensor<8x!tt.ptr<i32>>
  %p = "tt.addptr"(%s, %r) : (tensor<8x!tt.ptr<i32>>, tensor<8xi32>) -> tensor<8x!tt.ptr<i32>>
  %t = "ditron_core.wait"(%p, %c1) {scope = "gpu", semantic = "acquire"} : (tensor<8x!tt.ptr<i32>>, i32) -> i32
  "tt.store"(%sig, %t) {cache = 1 : i32, evict = 1 : i32} : (!tt.ptr<i32>, i32) -> ()
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<i32>) -> (), sym_name = "wait_tensor", sym_visibility = "public"} : () -> ()

// -----

// notify and symm_at on AMD: the same peer translation; a release atomic (add or exchange) at system scope.
// CHECK-LABEL: module attributes {ditron.target = "hip:gfx942"}
// CHECK: ^bb0(%[[SIG:.*]]: !tt.ptr<i32>, %[[PEER:.*]]: i32, %[[V:.*]]: i32, %[[RANK:.*]]: i32, %[[BASES:.*]]: !tt.ptr<i64>):
// CHECK: gpu.barrier
// CHECK: "tt.addptr"(%[[BASES]], %[[PEER]])
// CHECK: %[[Q:.*]] = "tt.addptr"(%[[SIG]], %{{.*}}) : (!tt.ptr<i32>, i64) -> !tt.ptr<i32>
// CHECK: "tt.atomic_rmw"(%[[Q]], %[[V]], %{{.*}}) {atomic_rmw_op = 10 : i32, scope = 3 : i32, sem = 3 : i32}
// CHECK: ditron.abi = {{\[}}["rank", "i32"], ["heap_bases", "*i64"]]
"tt.func"() ({
^bb0(%sig: !tt.ptr<i32>, %peer: i32, %v: i32):
  "ditron_core.notify"(%sig, %peer, %v) {op = "set", scope = "sys", semantic = "release"} : (!tt.ptr<i32>, i32, i32) -> ()
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<i32>, i32, i32) -> (), sym_name = "notify", sym_visibility = "public"} : () -> ()

// -----

// barrier_all on AMD: exchanges to every peer, then acquire atomics on every local slot.
// CHECK-LABEL: module attributes {ditron.target = "hip:gfx942"}
// CHECK: scf.for
// CHECK:   "tt.atomic_rmw"({{.*}}) {atomic_rmw_op = 10 : i32, scope = 3 : i32, sem = 3 : i32}
// CHECK: scf.for
// CHECK:   scf.while
// CHECK:     "tt.atomic_rmw"({{.*}}) {atomic_rmw_op = 4 : i32, scope = 3 : i32, sem = 2 : i32}
// CHECK: gpu.barrier
"tt.func"() ({
^bb0(%pad: !tt.ptr<i32>):
  "ditron_core.barrier_all"(%pad) {scope = "sys"} : (!tt.ptr<i32>) -> ()
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<i32>) -> (), sym_name = "barrier", sym_visibility = "public"} : () -> ()
