// RUN: ditron-opt %s --pass-pipeline=ditron-verify | FileCheck %s
// RUN: ditron-opt %s --verify-each=false --pass-pipeline=ditron-verify | FileCheck %s
// ditron-verify leaves valid IR of all three levels untouched.

// CHECK-LABEL: module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 4>}}
module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 4>}} {
  // CHECK-LABEL: func.func @task
  // CHECK-SAME: {ditron.sharding = {dims = {{\[\["dp"\], \[\]\]}}}}
  // CHECK-SAME: {ditron.sharding = {dims = {{\[\[\], \["tp"\]\]}}}}
  // CHECK-SAME: -> (tensor<64x32xbf16> {ditron.sharding = {dims = {{\[\[\], \[\]\]}}, partial = ["tp"]}})
  // CHECK-NEXT: %[[AG:.*]] = "ditron_task.all_gather"(%arg0) {axis = "dp", dim = 0 : i64} : (tensor<32x16xbf16>) -> tensor<64x16xbf16>
  // CHECK-NEXT: %[[MM:.*]] = "ditron_task.matmul"(%[[AG]], %arg1) : (tensor<64x16xbf16>, tensor<16x32xbf16>) -> tensor<64x32xbf16>
  // CHECK-NEXT: return %[[MM]]
  func.func @task(%x: tensor<32x16xbf16> {ditron.sharding = {dims = [["dp"], []]}},
                  %w: tensor<16x32xbf16> {ditron.sharding = {dims = [[], ["tp"]]}})
      -> (tensor<64x32xbf16> {ditron.sharding = {dims = [[], []], partial = ["tp"]}}) {
    %0 = "ditron_task.all_gather"(%x) {axis = "dp", dim = 0 : i64} : (tensor<32x16xbf16>) -> tensor<64x16xbf16>
    %1 = "ditron_task.matmul"(%0, %w) : (tensor<64x16xbf16>, tensor<16x32xbf16>) -> tensor<64x32xbf16>
    return %1 : tensor<64x32xbf16>
  }

  // Sharded dims that do not divide evenly are legal when marked padded.
  // CHECK-LABEL: func.func @padded
  // CHECK-SAME: padded = true
  func.func @padded(%x: tensor<4091x16xf32> {ditron.sharding = {dims = [["tp"], []], padded = true}}) -> tensor<4091x16xf32> {
    return %x : tensor<4091x16xf32>
  }

  // CHECK-LABEL: func.func @device
  // CHECK: "ditron_device.copy"
  // CHECK: "ditron_device.signal"
  // CHECK: "ditron_device.wait"
  // CHECK: "ditron_device.launch"
  func.func @device(%buf: memref<64xf32>, %sig: memref<4xi32>, %epoch: index) attributes {ditron.level = "device"} {
    %me = "ditron_device.rank"() : () -> index
    %c0 = arith.constant 0 : index
    %c8 = arith.constant 8 : index
    "ditron_device.copy"(%buf, %buf, %me, %me, %c0, %c8, %c8) {engine = "copy_engine"} : (memref<64xf32>, memref<64xf32>, index, index, index, index, index) -> ()
    "ditron_device.signal"(%sig, %me, %c0, %epoch) {op = "set", scope = "sys"} : (memref<4xi32>, index, index, index) -> ()
    "ditron_device.wait"(%sig, %epoch, %c0) {where = "stream"} : (memref<4xi32>, index, index) -> ()
    "ditron_device.launch"(%buf) {kernel = @kernel, grid = array<i64: 8>, sm_budget = 8 : i64, tile_order = "rank_rotated", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (memref<64xf32>) -> ()
    return
  }

  // CHECK-LABEL: "tt.func"()
  // CHECK: "ditron_core.wait"
  // CHECK: "ditron_core.notify"
  "tt.func"() ({
  ^bb0(%p: !tt.ptr<f32>, %s: !tt.ptr<i32>, %v: i32):
    %t = "ditron_core.wait"(%s, %v) {scope = "sys", semantic = "acquire"} : (!tt.ptr<i32>, i32) -> i32
    %me = "ditron_core.rank"() : () -> i32
    "ditron_core.notify"(%s, %me, %v) {op = "add", scope = "sys", semantic = "release"} : (!tt.ptr<i32>, i32, i32) -> ()
    "tt.return"() : () -> ()
  }) {sym_name = "kernel", function_type = (!tt.ptr<f32>, !tt.ptr<i32>, i32) -> ()} : () -> ()
}
