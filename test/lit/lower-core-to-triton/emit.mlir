// RUN: ditron-opt %s --emit=ptx --target=cuda:90 | FileCheck %s --check-prefix=PTX
// RUN: ditron-opt %s --emit=ttir --target=cuda:80 | FileCheck %s --check-prefix=TTIR
// RUN: ditron-opt %s --emit=amdgcn --target=hip:gfx942 | FileCheck %s --check-prefix=GCN
// RUN: not ditron-opt %s --emit=ptx 2>&1 | FileCheck %s --check-prefix=NOTARGET
// RUN: not ditron-opt %s --emit=ptx --target=hip:gfx942 2>&1 | FileCheck %s --check-prefix=WRONGSTAGE

// --emit lowers the primitives for the target, then runs Triton's stages up to the one asked for.
// PTX: .target sm_90a
// PTX: .visible .entry handoff(
// PTX: ld.acquire.sys.global.b32
// PTX: setp.lt.s64
// PTX: atom.global.gpu.relaxed.add.u32
// PTX: atom.global.gpu.relaxed.exch.b32
// PTX: ld.global.v4.b32
// PTX: atom.global.sys.release.add.u32
// PTX: atom.global.relaxed.sys.cas.b32
// TTIR: tt.func public @handoff(
// TTIR-SAME: %arg4: i32
// TTIR-SAME: %arg5: !tt.ptr<i64> {tt.divisibility = 16 : i32}
// TTIR-SAME: %arg6: i64
// TTIR-SAME: %arg7: !tt.ptr<i32> {tt.divisibility = 16 : i32}
// TTIR-SAME: %arg8: i32
// TTIR: tt.elementwise_inline_asm "ld.acquire.sys.global.b32 $0, [$1];"
// GCN: .amdgcn_target "amdgcn-amd-amdhsa--gfx942
// GCN: global_load_dword {{.*}} sc0 sc1
// GCN: buffer_inv sc0 sc1
// GCN: buffer_wbl2 sc0 sc1
// GCN: global_atomic_add {{.*}} sc1
// GCN: global_atomic_cmpswap
// NOTARGET: error: no target given: pass --target=cuda:90 (or hip:gfx942, ...) or set the module attribute ditron.target
// WRONGSTAGE: error: --emit=ptx is not a stage of hip:gfx942; its stages are ttir, ttgir, llir, amdgcn
"tt.func"() ({
^bb0(%sig: !tt.ptr<i32>, %x: !tt.ptr<bf16>, %y: !tt.ptr<bf16>, %peer: i32):
  %c1 = "arith.constant"() <{value = 1 : i32}> : () -> i32
  %t = "ditron_core.wait"(%sig, %c1) {scope = "sys", semantic = "acquire"} : (!tt.ptr<i32>, i32) -> i32
  %q = "ditron_core.symm_at"(%x, %peer) : (!tt.ptr<bf16>, i32) -> !tt.ptr<bf16>
  %z = "ditron_core.consume_token"(%q, %t) : (!tt.ptr<bf16>, i32) -> !tt.ptr<bf16>
  %r = "tt.make_range"() <{end = 1024 : i32, start = 0 : i32}> : () -> tensor<1024xi32>
  %s = "tt.splat"(%z) : (!tt.ptr<bf16>) -> tensor<1024x!tt.ptr<bf16>>
  %p = "tt.addptr"(%s, %r) : (tensor<1024x!tt.ptr<bf16>>, tensor<1024xi32>) -> tensor<1024x!tt.ptr<bf16>>
  %v = "tt.load"(%p) {cache = 1 : i32, evict = 1 : i32, isVolatile = false, operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1024x!tt.ptr<bf16>>) -> tensor<1024xbf16>
  %ys = "tt.splat"(%y) : (!tt.ptr<bf16>) -> tensor<1024x!tt.ptr<bf16>>
  %yp = "tt.addptr"(%ys, %r) : (tensor<1024x!tt.ptr<bf16>>, tensor<1024xi32>) -> tensor<1024x!tt.ptr<bf16>>
  "tt.store"(%yp, %v) {cache = 1 : i32, evict = 1 : i32} : (tensor<1024x!tt.ptr<bf16>>, tensor<1024xbf16>) -> ()
  "ditron_core.notify"(%sig, %peer, %c1) {op = "add", scope = "sys", semantic = "release"} : (!tt.ptr<i32>, i32, i32) -> ()
  %r0 = "ditron_core.rank"() : () -> i32
  "ditron_core.notify"(%sig, %r0, %c1) {op = "clear", scope = "sys", semantic = "relaxed"} : (!tt.ptr<i32>, i32, i32) -> ()
  "tt.return"() : () -> ()
}) {arg_attrs = [{}, {tt.divisibility = 16 : i32}, {tt.divisibility = 16 : i32}, {}], function_type = (!tt.ptr<i32>, !tt.ptr<bf16>, !tt.ptr<bf16>, i32) -> (), sym_name = "handoff", sym_visibility = "public"} : () -> ()
