// RUN: ditron-opt %s --mlir-print-debuginfo --pass-pipeline='ditron-lower-core-to-triton{target=cuda:90}' | FileCheck %s --check-prefix=WAIT
// RUN: ditron-opt %s --mlir-print-debuginfo --pass-pipeline='ditron-lower-core-to-triton{target=cuda:90}' | FileCheck %s --check-prefix=NOTIFY

// Every op built for a primitive carries the primitive's location.
// WAIT: #[[W:loc[0-9]*]] = loc("{{.*}}locations.mlir":15:8)
// WAIT: "tt.elementwise_inline_asm"({{.*}}"ld.acquire.sys.global.b32 $0, [$1];"{{.*}} loc(#[[W]])
// WAIT-NEXT: arith.cmpi slt, {{.*}} loc(#[[W]])
// WAIT: "tt.atomic_rmw"({{.*}} loc(#[[W]])
// NOTIFY: gpu.barrier loc(#[[N:loc[0-9]*]])
// NOTIFY: arith.divsi {{.*}} loc(#[[N]])
// NOTIFY: "tt.atomic_rmw"({{.*}} loc(#[[N]])
// NOTIFY: #[[N]] = loc("{{.*}}locations.mlir":16:3)
"tt.func"() ({
^bb0(%sig: !tt.ptr<i32>, %v: i32, %peer: i32):
  %t = "ditron_core.wait"(%sig, %v) {scope = "sys", semantic = "acquire"} : (!tt.ptr<i32>, i32) -> i32
  "ditron_core.notify"(%sig, %peer, %t) {op = "add", scope = "sys", semantic = "release"} : (!tt.ptr<i32>, i32, i32) -> ()
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<i32>, i32, i32) -> (), sym_name = "located", sym_visibility = "public"} : () -> ()
