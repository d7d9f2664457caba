// RUN: ditron-opt %s --pass-pipeline='ditron-verify,ditron-canonicalize{upstream=false}' --print-ir-after-all -o %t 2>&1 | FileCheck %s --check-prefix=ALL
// RUN: ditron-opt %s --pass-pipeline=ditron-verify,ditron-canonicalize --print-ir-after=ditron-canonicalize 2>&1 >/dev/null | FileCheck %s --check-prefix=ONE
// RUN: ditron-opt %s --pass-pipeline=ditron-verify --print-ir-after=ditron-canonicalize 2>&1 >/dev/null | FileCheck %s --check-prefix=ABSENT
// RUN: not ditron-opt %s --pass-pipeline=ditron-verify --print-ir-after=ditron-nonesuch 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: ditron-opt %s --pass-pipeline=ditron-verify,ditron-canonicalize --time-passes 2>&1 >/dev/null | FileCheck %s --check-prefix=TIME

// The IR after every pass goes to stderr, each dump headed by the pass and its non-default options.
// ALL: // -----// IR Dump After ditron-verify //----- //
// ALL-NEXT: module attributes {ditron.mesh = {axes = ["dp"], shape = array<i64: 1>}} {
// ALL: "ditron_task.all_reduce"
// ALL: // -----// IR Dump After ditron-canonicalize{upstream=false} //----- //
// ALL-NOT: ditron_task.all_reduce
// ALL: return %arg0

// Only the named pass's dump, which shows the folded IR.
// ONE-NOT: IR Dump After ditron-verify
// ONE: // -----// IR Dump After ditron-canonicalize //----- //
// ONE-NOT: ditron_task.all_reduce
// ONE: return %arg0

// ABSENT: warning: --print-ir-after=ditron-canonicalize: the pipeline does not run that pass
// ABSENT-NOT: IR Dump
// UNKNOWN: error: --print-ir-after: unknown pass 'ditron-nonesuch'
// TIME: // time ditron-verify: {{[0-9.]+}} ms
// TIME: // time ditron-canonicalize: {{[0-9.]+}} ms

module attributes {ditron.mesh = {axes = ["dp"], shape = array<i64: 1>}} {
  func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
    %0 = "ditron_task.all_reduce"(%x) {axis = "dp", reduce = "sum"} : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
