// The driver verifies after parsing and after every pass unless --verify-each=false.
// RUN: not ditron-opt %s 2>&1 | FileCheck %s --check-prefix=ON
// RUN: not ditron-opt %s --verify-each 2>&1 | FileCheck %s --check-prefix=ON
// RUN: not ditron-opt %s --verify-each=true --pass-pipeline=ditron-canonicalize 2>&1 | FileCheck %s --check-prefix=ON
// RUN: ditron-opt %s --verify-each=false | FileCheck %s --check-prefix=OFF
// RUN: ditron-opt %s --verify-each=0 --pass-pipeline='ditron-canonicalize{upstream=false}' | FileCheck %s --check-prefix=OFF

// ON: {{.*}}verify_each.mlir:[[# @LINE + 7]]:10: error: 'ditron_task.elementwise' op has fn 'softplus'; expected one of:
// ON-NOT: error

// OFF: "ditron_task.elementwise"(%arg0) {fn = "softplus"}

module {
  func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
    %0 = "ditron_task.elementwise"(%x) {fn = "softplus"} : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
