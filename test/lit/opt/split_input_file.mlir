// Each '// -----' chunk is parsed, verified and transformed on its own; the outputs are joined with the marker;
// an error in one chunk does not stop the others but makes the exit code 1. Line numbers stay those of the file.
// RUN: not ditron-opt %s --split-input-file --pass-pipeline=ditron-canonicalize > %t.out 2> %t.err
// RUN: FileCheck %s --input-file=%t.out
// RUN: FileCheck %s --input-file=%t.err --check-prefix=ERR
// Without the flag the markers are plain comments: one module, whose first error is reported.
// RUN: not ditron-opt %s 2>&1 | FileCheck %s --check-prefix=WHOLE

// CHECK: func.func @first
// CHECK-NEXT: return %arg0
// CHECK: // -----
// CHECK-NEXT: module
// CHECK-NEXT: func.func @third
// CHECK-NOT: // -----

// ERR: {{.*}}split_input_file.mlir:[[# @LINE + 16]]:8: error: 'ditron_task.matmul' op contraction sizes differ
// ERR-NOT: error

// WHOLE: {{.*}}split_input_file.mlir:[[# @LINE + 24]]:1: error: 'func.func' op redefinition of symbol named 'second'
// WHOLE-NEXT: {{.*}}split_input_file.mlir:[[# @LINE + 11]]:1: note: see existing symbol definition here

module attributes {ditron.mesh = {axes = ["dp"], shape = array<i64: 1>}} {
  func.func @first(%x: tensor<8xf32>) -> tensor<8xf32> {
    %0 = "ditron_task.all_reduce"(%x) {axis = "dp", reduce = "sum"} : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}

// -----

func.func @second(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "ditron_task.matmul"(%x, %x) : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// ----- a comment after the marker is allowed, as in mlir-opt

func.func @third() {
  return
}

// ------ (six dashes) is not a marker
func.func @second() {
  return
}
