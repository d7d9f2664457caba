// --mlir-print-debuginfo prints locations; they name this file and survive ditron-canonicalize, including on
// ops a rewrite creates (the tensor.cast takes the location of the all_to_all it replaces).
// RUN: ditron-opt %s --pass-pipeline=ditron-verify,ditron-canonicalize --mlir-print-debuginfo | FileCheck %s
// Locations written in the input (here a frontend's) are kept as they are.
// RUN: ditron-opt %s --mlir-print-debuginfo | ditron-opt --mlir-print-debuginfo | FileCheck %s --check-prefix=ROUND
// Without the flag no location is printed.
// RUN: ditron-opt %s | FileCheck %s --check-prefix=NOLOC

// CHECK-LABEL: func.func @f
// CHECK-SAME: %arg0: tensor<8x8xf32> loc("{{.*}}debuginfo.mlir":[[# @LINE + 18]]:16)
// CHECK: %[[MM:.*]] = "ditron_task.matmul"(%arg0, %arg0) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32> loc(#[[MM_LOC:loc[0-9]*]])
// CHECK: tensor.cast %[[MM]] : tensor<8x8xf32> to tensor<?x8xf32> loc(#[[A2A_LOC:loc[0-9]*]])
// CHECK: "ditron_task.all_gather"({{.*}} loc(#[[AG_LOC:loc[0-9]*]])
// CHECK-DAG: #[[MM_LOC]] = loc("{{.*}}debuginfo.mlir":[[# @LINE + 16]]:10)
// CHECK-DAG: #[[A2A_LOC]] = loc("{{.*}}debuginfo.mlir":[[# @LINE + 16]]:10)
// CHECK-DAG: #[[AG_LOC]] = loc("{{.*}}debuginfo.mlir":[[# @LINE + 16]]:10)

// ROUND: "ditron_task.elementwise"{{.*}} loc(#[[NAMED:loc[0-9]*]])
// ROUND: "ditron_task.elementwise"{{.*}} loc(#[[CALL:loc[0-9]*]])
// ROUND-DAG: #[[NAMED]] = loc("relu"(#[[PY:loc[0-9]*]]))
// ROUND-DAG: #[[PY]] = loc("model.py":12:4)
// ROUND-DAG: #[[CALL]] = loc(callsite(#{{loc[0-9]*}} at #{{loc[0-9]*}}))
// ROUND-DAG: loc("{{.*}}debuginfo.mlir":[[# @LINE + 16]]:10)

// NOLOC-NOT: loc(

module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 1, 4>}} {
  func.func @f(%x: tensor<8x8xf32>, %s: tensor<1xi32>) -> tensor<32x8xf32> {
    %0 = "ditron_task.all_reduce"(%x) {axis = "dp", reduce = "sum"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = "ditron_task.matmul"(%0, %0) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %2 = "ditron_task.all_to_all"(%1, %s) {axis = "dp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<8x8xf32>, tensor<1xi32>) -> tensor<?x8xf32>
    %3 = "ditron_task.all_gather"(%2) {axis = "tp", dim = 0 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
    %4 = "tensor.cast"(%3) : (tensor<?x8xf32>) -> tensor<32x8xf32>
    return %4 : tensor<32x8xf32>
  }
  func.func @frontend(%x: tensor<8xf32>) -> tensor<8xf32> {
    %0 = "ditron_task.elementwise"(%x) {fn = "relu"} : (tensor<8xf32>) -> tensor<8xf32> loc("relu"("model.py":12:4))
    %1 = "ditron_task.elementwise"(%0) {fn = "exp"} : (tensor<8xf32>) -> tensor<8xf32> loc(callsite("model.py":13:4 at "main.py":2:1))
    %2 = "ditron_task.elementwise"(%1) {fn = "neg"} : (tensor<8xf32>) -> tensor<8xf32>
    return %2 : tensor<8xf32>
  }
}
