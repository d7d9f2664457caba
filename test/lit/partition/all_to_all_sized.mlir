// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-partition | FileCheck %s

// The bounded all_to_all of run-time sizes is a collective of the local view: a local function keeps it as it is.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @local
  // CHECK: %[[Y:.*]]:2 = "ditron_task.all_to_all"(%arg0, %arg1) {axis = "tp", concat_dim = 0 : i64, split_dim = 0 : i64} : (tensor<8x16xbf16>, tensor<2xi32>) -> (tensor<16x16xbf16>, tensor<2xi32>)
  // CHECK: return %[[Y]]#0, %[[Y]]#1
  func.func @local(%x: tensor<8x16xbf16>, %s: tensor<2xi32>) -> (tensor<16x16xbf16>, tensor<2xi32>) attributes {ditron.view = "local"} {
    %y, %c = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<8x16xbf16>, tensor<2xi32>) -> (tensor<16x16xbf16>, tensor<2xi32>)
    return %y, %c : tensor<16x16xbf16>, tensor<2xi32>
  }
}
