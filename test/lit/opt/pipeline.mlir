// Pipeline syntax, as in mlir-opt: comma-separated passes, options in braces, an optional builtin.module(...)
// wrapper, named pipelines, spaces around items. All of these runs print the same folded module.
// RUN: ditron-opt %s --pass-pipeline='builtin.module(ditron-verify,ditron-canonicalize)' | FileCheck %s
// RUN: ditron-opt %s --pass-pipeline=ditron-check | FileCheck %s
// RUN: ditron-opt %s --pass-pipeline=' ditron-verify , ditron-canonicalize{ upstream=true } ' | FileCheck %s
// RUN: ditron-opt %s --pass-pipeline='ditron-canonicalize{upstream=1},ditron-verify,ditron-canonicalize{upstream=off}' | FileCheck %s
// An empty pipeline only parses, verifies and prints.
// RUN: ditron-opt %s --pass-pipeline= | FileCheck %s --check-prefix=NONE
// RUN: ditron-opt %s --pass-pipeline='builtin.module()' | FileCheck %s --check-prefix=NONE
// --list-passes names every pass with its summary and options, and the named pipelines.
// RUN: ditron-opt --list-passes | FileCheck %s --check-prefix=LIST

// CHECK-LABEL: func.func @f
// CHECK-NEXT: %[[C:.*]] = arith.constant 3 : index
// CHECK-NEXT: return %arg0, %[[C]]

// NONE: "ditron_task.all_reduce"
// NONE: arith.addi

// LIST: Passes:
// LIST: ditron-canonicalize {{ +}}Fold collectives over size-1 axes
// LIST-NEXT: upstream: bool = true
// LIST: ditron-verify {{ +}}Check the ditron dialect rules
// LIST: Pipelines:
// LIST: ditron-check {{ +}}ditron-verify,ditron-canonicalize

module attributes {ditron.mesh = {axes = ["dp"], shape = array<i64: 1>}} {
  func.func @f(%x: tensor<8xf32>) -> (tensor<8xf32>, index) {
    %0 = "ditron_task.all_reduce"(%x) {axis = "dp", reduce = "sum"} : (tensor<8xf32>) -> tensor<8xf32>
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %s = arith.addi %c1, %c2 : index
    return %0, %s : tensor<8xf32>, index
  }
}
