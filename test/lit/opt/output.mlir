// -o writes the result to a file, which re-parses; stdin works as input ('-' or nothing).
// RUN: ditron-opt %s --pass-pipeline=ditron-canonicalize -o %t.out
// RUN: ditron-opt %t.out | FileCheck %s
// RUN: ditron-opt - < %s | ditron-opt | FileCheck %s --check-prefix=STDIN
// RUN: ditron-opt < %s | FileCheck %s --check-prefix=STDIN
// RUN: not ditron-opt %s -o %S 2>&1 | FileCheck %s --check-prefix=DIR
// A failed run leaves the output file as it was, even when it is the input (written in place on success).
// RUN: cp %s %t.in
// RUN: not ditron-opt %t.in --pass-pipeline=ditron-lower-task-to-device -o %t.in
// RUN: ditron-opt %t.in | FileCheck %s --check-prefix=STDIN
// RUN: ditron-opt %t.in --pass-pipeline=ditron-canonicalize -o %t.in
// RUN: ditron-opt %t.in | FileCheck %s

// CHECK-LABEL: func.func @f
// CHECK-NEXT: return %arg0 : tensor<8xf32>

// STDIN-LABEL: func.func @f
// STDIN-NEXT: "ditron_task.all_reduce"

// DIR: error: cannot write output file '{{.*}}opt': Is a directory

module attributes {ditron.mesh = {axes = ["dp"], shape = array<i64: 1>}} {
  func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
    %0 = "ditron_task.all_reduce"(%x) {axis = "dp", reduce = "sum"} : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
