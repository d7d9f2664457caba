// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-lower-core-to-triton{target=cuda:90}' 2>&1 | FileCheck %s
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-lower-core-to-triton{target=cuda:70}' 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-lower-core-to-triton{target=hip:gfx90a}' 2>&1 | FileCheck %s --check-prefix=TARGET

// TARGET: error: pass 'ditron-lower-core-to-triton': unsupported target '{{cuda:70|hip:gfx90a}}'; supported targets: cuda:80, cuda:90, hip:gfx942, hip:gfx950

// A primitive outside a kernel.
// CHECK: errors.mlir:[[# @LINE + 3]]:10: error: 'ditron_core.rank' is not inside a tt.func kernel: ditron-lower-core-to-triton lowers primitives only in core-level kernels
module {
  func.func @host() -> i32 {
    %r = "ditron_core.rank"() : () -> i32
    return %r : i32
  }
}

// -----

// wait needs i32 slots.
// CHECK: errors.mlir:[[# @LINE + 3]]:8: error: 'ditron_core.wait' expects ptr to be !tt.ptr<i32> or a tensor of them, got !tt.ptr<f32>
"tt.func"() ({
^bb0(%sig: !tt.ptr<f32>, %v: i32):
  %t = "ditron_core.wait"(%sig, %v) {scope = "sys", semantic = "acquire"} : (!tt.ptr<f32>, i32) -> i32
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<f32>, i32) -> (), sym_name = "bad_wait", sym_visibility = "public"} : () -> ()

// -----

// notify needs i32 slots; symm_at needs a pointer; consume_token needs a pointer or an integer. All are reported.
// CHECK: errors.mlir:[[# @LINE + 5]]:3: error: 'ditron_core.notify' expects ptr to be !tt.ptr<i32> or a tensor of them, got !tt.ptr<i64>
// CHECK: errors.mlir:[[# @LINE + 5]]:8: error: 'ditron_core.symm_at' expects a pointer (!tt.ptr<T>) or a tensor of pointers, got i32
// CHECK: errors.mlir:[[# @LINE + 5]]:8: error: 'ditron_core.consume_token' expects a pointer, an integer, or a tensor of them, got f32
"tt.func"() ({
^bb0(%sig: !tt.ptr<i64>, %peer: i32, %f: f32):
  "ditron_core.notify"(%sig, %peer, %peer) {op = "set", scope = "sys", semantic = "release"} : (!tt.ptr<i64>, i32, i32) -> ()
  %q = "ditron_core.symm_at"(%peer, %peer) : (i32, i32) -> i32
  %g = "ditron_core.consume_token"(%f, %peer) : (f32, i32) -> f32
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<i64>, i32, f32) -> (), sym_name = "bad_types", sym_visibility = "public"} : () -> ()

// -----

// barrier_all takes the pad's base pointer, not a tensor of slots.
// CHECK: errors.mlir:[[# @LINE + 6]]:3: error: 'ditron_core.barrier_all' expects signals to be a scalar !tt.ptr<i32> (a pad of num_ranks + 1 slots), got tensor<4x!tt.ptr<i32>>
"tt.func"() ({
^bb0(%sig: !tt.ptr<i32>):
  %r = "tt.make_range"() <{end = 4 : i32, start = 0 : i32}> : () -> tensor<4xi32>
  %s = "tt.splat"(%sig) : (!tt.ptr<i32>) -> tensor<4x!tt.ptr<i32>>
  %p = "tt.addptr"(%s, %r) : (tensor<4x!tt.ptr<i32>>, tensor<4xi32>) -> tensor<4x!tt.ptr<i32>>
  "ditron_core.barrier_all"(%p) {scope = "sys"} : (tensor<4x!tt.ptr<i32>>) -> ()
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<i32>) -> (), sym_name = "bad_barrier", sym_visibility = "public"} : () -> ()
