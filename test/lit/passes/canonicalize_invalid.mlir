// RUN: not ditron-opt %s --pass-pipeline='ditron-canonicalize{upstream=maybe}' 2>&1 | FileCheck %s --check-prefix=VALUE
// RUN: not ditron-opt %s --pass-pipeline='ditron-canonicalize{aggressive=true}' 2>&1 | FileCheck %s --check-prefix=OPTION
// RUN: not ditron-opt %s --pass-pipeline='ditron-canonicalize{upstream}' 2>&1 | FileCheck %s --check-prefix=NOVALUE
// RUN: not ditron-opt %s --verify-each=false --pass-pipeline=ditron-canonicalize 2>&1 | FileCheck %s --check-prefix=MESH

// VALUE: error: pass 'ditron-canonicalize': option 'upstream' expects true or false, got 'maybe'
// OPTION: error: pass 'ditron-canonicalize' has no option 'aggressive' (options: upstream)
// NOVALUE: error: pass 'ditron-canonicalize': option 'upstream' needs a value (write upstream=VALUE)

// Without the verifier in front, the pass itself reports a malformed mesh instead of failing inside.
// MESH: {{.*}}canonicalize_invalid.mlir:[[# @LINE + 1]]:1: error: ditron-canonicalize: bad 'ditron.mesh': mesh has 1 axis names but 2 sizes
module attributes {ditron.mesh = {axes = ["dp"], shape = array<i64: 1, 4>}} {
  func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %y = "ditron_task.all_gather"(%x) {axis = "dp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}
