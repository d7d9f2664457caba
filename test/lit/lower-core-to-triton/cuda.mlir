// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-lower-core-to-triton{target=cuda:90}' | FileCheck %s

// rank and num_ranks become i32 kernel arguments, recorded in ditron.abi; function_type and arg_attrs follow.
// CHECK-LABEL: module attributes {ditron.target = "cuda:90"}
// CHECK: ^bb0(%[[X:.*]]: !tt.ptr<i32>, %[[RANK:.*]]: i32, %[[NR:.*]]: i32):
// CHECK-NOT: ditron_core
// CHECK: "tt.store"(%[[X]], %[[RANK]])
// CHECK: "tt.store"(%[[X]], %[[NR]])
// CHECK: arg_attrs = [{}, {}, {}], ditron.abi = {{\[}}["rank", "i32"], ["num_ranks", "i32"]], function_type = (!tt.ptr<i32>, i32, i32) -> (), sym_name = "ranks"
"tt.func"() ({
^bb0(%x: !tt.ptr<i32>):
  %n = "ditron_core.num_ranks"() : () -> i32
  %r = "ditron_core.rank"() : () -> i32
  "tt.store"(%x, %r) {cache = 1 : i32, evict = 1 : i32} : (!tt.ptr<i32>, i32) -> ()
  "tt.store"(%x, %n) {cache = 1 : i32, evict = 1 : i32} : (!tt.ptr<i32>, i32) -> ()
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<i32>) -> (), sym_name = "ranks", sym_visibility = "public"} : () -> ()

// -----

// symm_at: addptr by (base[peer] - base[rank]) / sizeof(bf16), with a 16-byte divisibility hint (8 bf16 elements).
// CHECK-LABEL: module attributes {ditron.target = "cuda:90"}
// CHECK: ^bb0(%[[X:.*]]: !tt.ptr<bf16>, %[[PEER:.*]]: i32, %[[RANK:.*]]: i32, %[[BASES:.*]]: !tt.ptr<i64>):
// CHECK: %[[MYP:.*]] = "tt.addptr"(%[[BASES]], %[[RANK]]) : (!tt.ptr<i64>, i32) -> !tt.ptr<i64>
// CHECK: %[[MY:.*]] = "tt.load"(%[[MYP]])
// CHECK: %[[PP:.*]] = "tt.addptr"(%[[BASES]], %[[PEER]])
// CHECK: %[[PB:.*]] = "tt.load"(%[[PP]]) {{.*}} -> i64
// CHECK: %[[D:.*]] = arith.subi %[[PB]], %[[MY]] : i64
// CHECK: %[[TWO:.*]] = arith.constant 2 : i64
// CHECK: %[[E:.*]] = arith.divsi %[[D]], %[[TWO]] {tt.divisibility = dense<8> : tensor<1xi32>} : i64
// CHECK: %[[Q:.*]] = "tt.addptr"(%[[X]], %[[E]]) : (!tt.ptr<bf16>, i64) -> !tt.ptr<bf16>
// CHECK: "tt.splat"(%[[Q]])
// CHECK: {tt.divisibility = 16 : i32}], ditron.abi = {{\[}}["rank", "i32"], ["heap_bases", "*i64"]]
"tt.func"() ({
^bb0(%x: !tt.ptr<bf16>, %peer: i32):
  %q = "ditron_core.symm_at"(%x, %peer) : (!tt.ptr<bf16>, i32) -> !tt.ptr<bf16>
  %r = "tt.make_range"() <{end = 256 : i32, start = 0 : i32}> : () -> tensor<256xi32>
  %s = "tt.splat"(%q) : (!tt.ptr<bf16>) -> tensor<256x!tt.ptr<bf16>>
  %p = "tt.addptr"(%s, %r) : (tensor<256x!tt.ptr<bf16>>, tensor<256xi32>) -> tensor<256x!tt.ptr<bf16>>
  %v = "tt.load"(%p) {cache = 1 : i32, evict = 1 : i32, isVolatile = false, operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x!tt.ptr<bf16>>) -> tensor<256xbf16>
  "tt.store"(%p, %v) {cache = 1 : i32, evict = 1 : i32} : (tensor<256x!tt.ptr<bf16>>, tensor<256xbf16>) -> ()
  "tt.return"() : () -> ()
}) {arg_attrs = [{tt.divisibility = 16 : i32}, {}], function_type = (!tt.ptr<bf16>, i32) -> (), sym_name = "symm_scalar", sym_visibility = "public"} : () -> ()

// -----

// symm_at of a tensor of pointers: the element delta is splat to the tensor's shape.
// CHECK-LABEL: module attributes {ditron.target = "cuda:90"}
// CHECK: %[[E:.*]] = arith.divsi {{.*}} {tt.divisibility = dense<4> : tensor<1xi32>} : i64
// CHECK: %[[S:.*]] = "tt.splat"(%[[E]]) : (i64) -> tensor<4x64xi64>
// CHECK: "tt.addptr"(%{{.*}}, %[[S]]) : (tensor<4x64x!tt.ptr<f32>>, tensor<4x64xi64>) -> tensor<4x64x!tt.ptr<f32>>
"tt.func"() ({
^bb0(%x: tensor<4x64x!tt.ptr<f32>>, %peer: i32):
  %q = "ditron_core.symm_at"(%x, %peer) : (tensor<4x64x!tt.ptr<f32>>, i32) -> tensor<4x64x!tt.ptr<f32>>
  %v = "tt.load"(%q) {cache = 1 : i32, evict = 1 : i32, isVolatile = false, operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4x64x!tt.ptr<f32>>) -> tensor<4x64xf32>
  "tt.store"(%x, %v) {cache = 1 : i32, evict = 1 : i32} : (tensor<4x64x!tt.ptr<f32>>, tensor<4x64xf32>) -> ()
  "tt.return"() : () -> ()
}) {function_type = (tensor<4x64x!tt.ptr<f32>>, i32) -> (), sym_name = "symm_tensor", sym_visibility = "public"} : () -> ()

// -----

// wait on one slot: every thread spins on an acquire load at system scope, at most wait_bound polls (an i64
// counter carried by the loop, no memory access), with a nanosleep between failed polls; the token is the value seen. Giving up adds 1 to wait_err[0] and
// writes wait_tag to wait_err[1] and the value seen to wait_err[2] (relaxed, gpu scope), then goes on.
// consume_token: the pointer is offset by an opaque zero made from the token (with a large divisibility hint).
// CHECK-LABEL: module attributes {ditron.target = "cuda:90"}
// CHECK: ^bb0(%[[SIG:.*]]: !tt.ptr<i32>, %[[X:.*]]: !tt.ptr<f16>, %[[V:.*]]: i32, %[[BOUND:.*]]: i64, %[[ERR:.*]]: !tt.ptr<i32>, %[[TAG:.*]]: i32):
// CHECK: %[[ZERO:.*]] = arith.constant 0 : i64
// CHECK: %[[LOOP:.*]]:2 = scf.while (%[[N:.*]] = %[[ZERO]]) : (i64) -> (i64, i32) {
// CHECK-NEXT:   %[[SEEN:.*]] = "tt.elementwise_inline_asm"(%[[SIG]]) {asm_string = "ld.acquire.sys.global.b32 $0, [$1];", constraints = "=r,l", packed_element = 1 : i32, pure = false} : (!tt.ptr<i32>) -> i32
// CHECK-NEXT:   %[[LOW:.*]] = arith.cmpi slt, %[[SEEN]], %[[V]] : i32
// CHECK-NEXT:   %[[LEFT:.*]] = arith.cmpi slt, %[[N]], %[[BOUND]] : i64
// CHECK-NEXT:   %[[AGAIN:.*]] = arith.andi %[[LOW]], %[[LEFT]] : i1
// CHECK-NEXT:   scf.condition(%[[AGAIN]]) %[[N]], %[[SEEN]] : i64, i32
// CHECK-NEXT: } do {
// CHECK-NEXT: ^bb0(%[[M:.*]]: i64, %[[WAS:.*]]: i32):
// CHECK-NEXT:   %{{.*}} = "tt.elementwise_inline_asm"(%[[WAS]]) {asm_string = "nanosleep.u32 64;\0A\09mov.b32 $0, $1;", constraints = "=r,r", packed_element = 1 : i32, pure = false} : (i32) -> i32
// CHECK-NEXT:   %[[ONE:.*]] = arith.constant 1 : i64
// CHECK-NEXT:   %[[NEXT:.*]] = arith.addi %[[M]], %[[ONE]] : i64
// CHECK-NEXT:   scf.yield %[[NEXT]] : i64
// CHECK-NEXT: }
// CHECK-NEXT: %[[GAVE_UP:.*]] = arith.cmpi slt, %[[LOOP]]#1, %[[V]] : i32
// CHECK-NEXT: scf.if %[[GAVE_UP]] {
// CHECK:   "tt.atomic_rmw"(%[[ERR]], %{{.*}}, %{{.*}}) {atomic_rmw_op = 4 : i32, scope = 1 : i32, sem = 1 : i32}
// CHECK:   %[[E1:.*]] = "tt.addptr"(%[[ERR]], %{{.*}})
// CHECK:   "tt.atomic_rmw"(%[[E1]], %[[TAG]], %{{.*}}) {atomic_rmw_op = 10 : i32, scope = 1 : i32, sem = 1 : i32}
// CHECK:   %[[E2:.*]] = "tt.addptr"(%[[ERR]], %{{.*}})
// CHECK:   "tt.atomic_rmw"(%[[E2]], %[[LOOP]]#1, %{{.*}}) {atomic_rmw_op = 10 : i32, scope = 1 : i32, sem = 1 : i32}
// CHECK-NEXT: }
// CHECK-NEXT: %[[Z:.*]] = "tt.elementwise_inline_asm"(%[[LOOP]]#1) {asm_string = "mov.b32 $0, 0;", constraints = "=r,r", packed_element = 1 : i32, pure = true, tt.divisibility = dense<1073741824> : tensor<1xi32>} : (i32) -> i32
// CHECK: %[[Y:.*]] = "tt.addptr"(%[[X]], %[[Z]]) : (!tt.ptr<f16>, i32) -> !tt.ptr<f16>
// CHECK: "tt.load"(%[[Y]])
// CHECK: arg_attrs = [{}, {}, {}, {}, {tt.divisibility = 16 : i32}, {}], ditron.abi = {{\[}}["wait_bound", "i64"], ["wait_err", "*i32"], ["wait_tag", "i32"]], function_type = (!tt.ptr<i32>, !tt.ptr<f16>, i32, i64, !tt.ptr<i32>, i32) -> ()
"tt.func"() ({
^bb0(%sig: !tt.ptr<i32>, %x: !tt.ptr<f16>, %v: i32):
  %t = "ditron_core.wait"(%sig, %v) {scope = "sys", semantic = "acquire"} : (!tt.ptr<i32>, i32) -> i32
  %y = "ditron_core.consume_token"(%x, %t) : (!tt.ptr<f16>, i32) -> !tt.ptr<f16>
  %a = "tt.load"(%y) {cache = 1 : i32, evict = 1 : i32, isVolatile = false, operandSegmentSizes = array<i32: 1, 0, 0>} : (!tt.ptr<f16>) -> f16
  "tt.store"(%x, %a) {cache = 1 : i32, evict = 1 : i32} : (!tt.ptr<f16>, f16) -> ()
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<i32>, !tt.ptr<f16>, i32) -> (), sym_name = "wait_scalar", sym_visibility = "public"} : () -> ()

// -----

// wait on a tensor of slots at gpu scope, relaxed: loads of every slot, reduced with min; consume_token of an
// integer tensor adds the (extended, splat) opaque zero.
// CHECK-LABEL: module attributes {ditron.target = "cuda:90"}
// CHECK: scf.while (%{{.*}} = %{{.*}}) : (i64) -> (i64, i32) {
// CHECK:   %[[L:.*]] = "tt.elementwise_inline_asm"(%{{.*}}) {asm_string = "ld.relaxed.gpu.global.b32 $0, [$1];", {{.*}}} : (tensor<8x!tt.ptr<i32>>) -> tensor<8xi32>
// CHECK:   %[[M:.*]] = "tt.reduce"(%[[L]]) ({
// CHECK:   ^bb0(%[[A:.*]]: i32, %[[B:.*]]: i32):
// CHECK:     %[[MIN:.*]] = arith.minsi %[[A]], %[[B]] : i32
// CHECK:     "tt.reduce.return"(%[[MIN]]) : (i32) -> ()
// CHECK:   }) {axis = 0 : i32} : (tensor<8xi32>) -> i32
// CHECK:   arith.cmpi slt, %[[M]]
// CHECK: "tt.elementwise_inline_asm"({{.*}}) {asm_string = "nanosleep.u32 64;
// CHECK: %[[Z:.*]] = "tt.elementwise_inline_asm"({{.*}}) {asm_string = "mov.b32 $0, 0;"
// CHECK: %[[W:.*]] = arith.extsi %[[Z]] : i32 to i64
// CHECK: %[[S:.*]] = "tt.splat"(%[[W]]) : (i64) -> tensor<8xi64>
// CHECK: arith.addi %{{.*}}, %[[S]] : tensor<8xi64>
"tt.func"() ({
^bb0(%sig: !tt.ptr<i32>, %offs: tensor<8xi64>):
  %c1 = "arith.constant"() <{value = 1 : i32}> : () -> i32
  %r = "tt.make_range"() <{end = 8 : i32, start = 0 : i32}> : () -> tensor<8xi32>
  %s = "tt.splat"(%sig) : (!tt.ptr<i32>) -> tensor<8x!tt.ptr<i32>>
  %p = "tt.addptr"(%s, %r) : (tensor<8x!tt.ptr<i32>>, tensor<8xi32>) -> tensor<8x!tt.ptr<i32>>
  %t = "ditron_core.wait"(%p, %c1) {scope = "gpu", semantic = "relaxed"} : (tensor<8x!tt.ptr<i32>>, i32) -> i32
  %o = "ditron_core.consume_token"(%offs, %t) : (tensor<8xi64>, i32) -> tensor<8xi64>
  %q = "tt.addptr"(%p, %o) : (tensor<8x!tt.ptr<i32>>, tensor<8xi64>) -> tensor<8x!tt.ptr<i32>>
  %v = "tt.load"(%q) {cache = 1 : i32, evict = 1 : i32, isVolatile = false, operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<8x!tt.ptr<i32>>) -> tensor<8xi32>
  "tt.store"(%p, %v) {cache = 1 : i32, evict = 1 : i32} : (tensor<8x!tt.ptr<i32>>, tensor<8xi32>) -> ()
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<i32>, tensor<8xi64>) -> (), sym_name = "wait_tensor", sym_visibility = "public"} : () -> ()

// -----

// notify: CTA barrier, then a release atomic at system scope on the peer's slot (add: op 4; set: exchange, op 10).
// CHECK-LABEL: module attributes {ditron.target = "cuda:90"}
// CHECK: ^bb0(%[[SIG:.*]]: !tt.ptr<i32>, %[[PEER:.*]]: i32, %[[V:.*]]: i32, %{{.*}}: i32, %{{.*}}: !tt.ptr<i64>):
// CHECK: gpu.barrier
// CHECK: %[[E:.*]] = arith.divsi {{.*}} {tt.divisibility = dense<4> : tensor<1xi32>} : i64
// CHECK: %[[Q:.*]] = "tt.addptr"(%[[SIG]], %[[E]])
// CHECK: %[[T:.*]] = arith.constant true
// CHECK: "tt.atomic_rmw"(%[[Q]], %[[V]], %[[T]]) {atomic_rmw_op = 4 : i32, scope = 3 : i32, sem = 3 : i32} : (!tt.ptr<i32>, i32, i1) -> i32
// CHECK: gpu.barrier
// CHECK: "tt.atomic_rmw"({{.*}}) {atomic_rmw_op = 10 : i32, scope = 1 : i32, sem = 3 : i32}
"tt.func"() ({
^bb0(%sig: !tt.ptr<i32>, %peer: i32, %v: i32):
  "ditron_core.notify"(%sig, %peer, %v) {op = "add", scope = "sys", semantic = "release"} : (!tt.ptr<i32>, i32, i32) -> ()
  "ditron_core.notify"(%sig, %peer, %v) {op = "set", scope = "gpu", semantic = "release"} : (!tt.ptr<i32>, i32, i32) -> ()
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<i32>, i32, i32) -> (), sym_name = "notify", sym_visibility = "public"} : () -> ()

// -----

// notify clear: a CTA barrier (every thread has left its spin on the slot: waits spin per thread), then a relaxed
// compare-and-swap (value -> 0) at system scope on the slot (sem 1).
// CHECK-LABEL: module attributes {ditron.target = "cuda:90"}
// CHECK: ^bb0(%[[SIG:.*]]: !tt.ptr<i32>, %[[V:.*]]: i32, %[[RANK:.*]]: i32, %{{.*}}: !tt.ptr<i64>):
// CHECK: gpu.barrier
// CHECK: %[[Q:.*]] = "tt.addptr"(%[[SIG]], %{{.*}})
// CHECK: %[[ZERO:.*]] = arith.constant 0 : i32
// CHECK: "tt.atomic_cas"(%[[Q]], %[[V]], %[[ZERO]]) {scope = 3 : i32, sem = 1 : i32} : (!tt.ptr<i32>, i32, i32) -> i32
// CHECK-NOT: gpu.barrier
"tt.func"() ({
^bb0(%sig: !tt.ptr<i32>, %v: i32):
  %r = "ditron_core.rank"() : () -> i32
  "ditron_core.notify"(%sig, %r, %v) {op = "clear", scope = "sys", semantic = "relaxed"} : (!tt.ptr<i32>, i32, i32) -> ()
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<i32>, i32) -> (), sym_name = "clear", sym_visibility = "public"} : () -> ()

// -----

// barrier_all: bump this rank's generation (slot num_ranks), set slot `rank` of every peer's pad to it (release),
// then spin until every local slot has reached it (acquire), each spin bounded like a wait.
// CHECK-LABEL: module attributes {ditron.target = "cuda:90"}
// CHECK: ^bb0(%[[PAD:.*]]: !tt.ptr<i32>, %[[RANK:.*]]: i32, %[[NR:.*]]: i32, %[[BASES:.*]]: !tt.ptr<i64>, %[[BOUND:.*]]: i64, %[[ERR:.*]]: !tt.ptr<i32>, %[[TAG:.*]]: i32):
// CHECK: gpu.barrier
// CHECK: %[[GS:.*]] = "tt.addptr"(%[[PAD]], %[[NR]])
// CHECK: %[[OLD:.*]] = "tt.load"(%[[GS]]) {{.*}}isVolatile = true
// CHECK: %[[GEN:.*]] = arith.addi %[[OLD]], %{{.*}} : i32
// CHECK: gpu.barrier
// CHECK: "tt.store"(%[[GS]], %[[GEN]])
// CHECK: %[[MINE:.*]] = "tt.addptr"(%[[PAD]], %[[RANK]])
// CHECK: scf.for %[[P:.*]] = %{{.*}} to %[[NR]] step
// CHECK:   "tt.addptr"(%[[BASES]], %[[P]])
// CHECK:   %[[THERE:.*]] = "tt.addptr"(%[[MINE]], %{{.*}})
// CHECK:   "tt.atomic_rmw"(%[[THERE]], %[[GEN]], %{{.*}}) {atomic_rmw_op = 10 : i32, scope = 3 : i32, sem = 3 : i32}
// CHECK: scf.for %[[Q:.*]] = %{{.*}} to %[[NR]] step
// CHECK:   %[[SLOT:.*]] = "tt.addptr"(%[[PAD]], %[[Q]])
// CHECK:   %[[SPIN:.*]]:2 = scf.while
// CHECK:     "tt.elementwise_inline_asm"(%[[SLOT]]) {asm_string = "ld.acquire.sys.global.b32 $0, [$1];"
// CHECK:     arith.cmpi slt, %{{.*}}, %[[GEN]]
// CHECK:     arith.cmpi slt, %{{.*}}, %[[BOUND]] : i64
// CHECK:   %[[GAVE_UP:.*]] = arith.cmpi slt, %[[SPIN]]#1, %[[GEN]] : i32
// CHECK:   scf.if %[[GAVE_UP]] {
// CHECK:     "tt.atomic_rmw"(%[[ERR]], {{.*}}) {atomic_rmw_op = 4 : i32, scope = 1 : i32, sem = 1 : i32}
// CHECK:     "tt.atomic_rmw"(%{{.*}}, %[[TAG]], {{.*}}) {atomic_rmw_op = 10 : i32, scope = 1 : i32, sem = 1 : i32}
// CHECK: gpu.barrier
// CHECK-NEXT: "tt.return"
// CHECK: ditron.abi = {{\[}}["rank", "i32"], ["num_ranks", "i32"], ["heap_bases", "*i64"], ["wait_bound", "i64"], ["wait_err", "*i32"], ["wait_tag", "i32"]]
"tt.func"() ({
^bb0(%pad: !tt.ptr<i32>):
  "ditron_core.barrier_all"(%pad) {scope = "sys"} : (!tt.ptr<i32>) -> ()
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<i32>) -> (), sym_name = "barrier", sym_visibility = "public"} : () -> ()

// -----

// A kernel lowered before (ditron.abi present) reuses its arguments and appends only what is new.
// CHECK-LABEL: module attributes {ditron.target = "cuda:90"}
// CHECK: ^bb0(%[[X:.*]]: !tt.ptr<i32>, %[[RANK:.*]]: i32, %[[NR:.*]]: i32):
// CHECK: "tt.store"(%[[X]], %[[RANK]])
// CHECK: ditron.abi = {{\[}}["rank", "i32"], ["num_ranks", "i32"]], function_type = (!tt.ptr<i32>, i32, i32) -> ()
"tt.func"() ({
^bb0(%x: !tt.ptr<i32>, %rank: i32):
  %n = "ditron_core.num_ranks"() : () -> i32
  %r = "ditron_core.rank"() : () -> i32
  "tt.store"(%x, %r) {cache = 1 : i32, evict = 1 : i32} : (!tt.ptr<i32>, i32) -> ()
  "tt.store"(%x, %n) {cache = 1 : i32, evict = 1 : i32} : (!tt.ptr<i32>, i32) -> ()
  "tt.return"() : () -> ()
}) {ditron.abi = [["rank", "i32"]], function_type = (!tt.ptr<i32>, i32) -> (), sym_name = "again", sym_visibility = "public"} : () -> ()
