// The README's "A first program": examples/mlp.mlir through ditron-verify and ditron-canonicalize, and the
// error example. If this test changes, update the README section too.
// RUN: ditron-opt %S/../../../examples/mlp.mlir --pass-pipeline=ditron-verify,ditron-canonicalize | FileCheck %s --check-prefix=MLP
// RUN: not ditron-opt - --pass-pipeline=ditron-verify,ditron-canonicalize < %s 2>&1 | FileCheck %s --check-prefix=ERR

// MLP: module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
// MLP-NEXT: func.func @mlp(%arg0: tensor<8192x4096xbf16> {ditron.sharding = {dims = {{\[\["tp"\], \[\]\]}}}}, %arg1: tensor<4096x14336xbf16> {ditron.sharding = {dims = {{\[\[\], \["tp"\]\]}}}}, %arg2: tensor<14336x4096xbf16> {ditron.sharding = {dims = {{\[\["tp"\], \[\]\]}}}}) -> (tensor<8192x4096xbf16> {ditron.sharding = {dims = {{\[\["tp"\], \[\]\]}}}}) {
// MLP-NEXT: %0 = "ditron_task.matmul"(%arg0, %arg1) : (tensor<8192x4096xbf16>, tensor<4096x14336xbf16>) -> tensor<8192x14336xbf16>
// MLP-NEXT: %1 = "ditron_task.elementwise"(%0) {fn = "gelu"} : (tensor<8192x14336xbf16>) -> tensor<8192x14336xbf16>
// MLP-NEXT: %2 = "ditron_task.matmul"(%1, %arg2) : (tensor<8192x14336xbf16>, tensor<14336x4096xbf16>) -> tensor<8192x4096xbf16>
// MLP-NEXT: return %2 : tensor<8192x4096xbf16>
// MLP-NEXT: }
// MLP-NEXT: }

// ERR: <stdin>:[[# @LINE + 3]]:10: error: 'ditron_task.all_gather' op output dim 0 is 2048; expected input dim 1024 x axis 'tp' size 4 = 4096
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @gather(%x: tensor<1024x4096xbf16>) -> tensor<2048x4096xbf16> {
    %y = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<1024x4096xbf16>) -> tensor<2048x4096xbf16>
    return %y : tensor<2048x4096xbf16>
  }
}
