// The device program's arguments keep the task arguments' layouts: ditron.layout, and for padded shardings the
// ditron.global_shape that ditron-partition wrote (where the padding is: the simulator's inputs and checks need it).
// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-device | FileCheck %s

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @padded
  // CHECK-SAME: (%arg0: memref<33x32xf32> {ditron.global_shape = array<i64: 65, 32>, ditron.io = "in", ditron.layout = {dims = {{\[}}["tp"], []], padded = true}}, %arg1: memref<64x32xf32> {ditron.io = "in", ditron.layout = {dims = {{\[}}[], []]}}, %arg2: memref<33x32xf32> {ditron.global_shape = array<i64: 65, 32>, ditron.io = "out", ditron.layout = {dims = {{\[}}["tp"], []], padded = true}}, %arg3: index {ditron.io = "epoch"})
  func.func @padded(%x: tensor<65x32xf32> {ditron.sharding = {dims = [["tp"], []], padded = true}},
                    %unused: tensor<64x32xf32> {ditron.sharding = {dims = [[], []]}})
      -> (tensor<65x32xf32> {ditron.sharding = {dims = [["tp"], []], padded = true}}) {
    %y = "ditron_task.elementwise"(%x) {fn = "relu"} : (tensor<65x32xf32>) -> tensor<65x32xf32>
    return %y : tensor<65x32xf32>
  }
}

// -----

// A dp x tp program whose collective runs over tp: its device program runs within the groups of axis tp.
module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 2>}} {
  // CHECK-LABEL: func.func @ag
  // CHECK-SAME: (%arg0: memref<16x32xbf16> {ditron.io = "in", ditron.layout = {dims = {{\[}}["dp", "tp"], []]}}
  // CHECK-NOT: ditron.global_shape
  // CHECK-SAME: ditron.axis = "tp"
  func.func @ag(%x: tensor<64x32xbf16> {ditron.sharding = {dims = [["dp", "tp"], []]}},
                %w: tensor<32x64xbf16> {ditron.sharding = {dims = [[], ["tp"]]}})
      -> (tensor<64x64xbf16> {ditron.sharding = {dims = [["dp"], ["tp"]]}}) {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<64x32xbf16>, tensor<32x64xbf16>) -> tensor<64x64xbf16>
    return %y : tensor<64x64xbf16>
  }
}
