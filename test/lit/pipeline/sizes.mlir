// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-device | FileCheck %s
// Programs at the kernels' largest dims (kernels.MAX_DIM = 2^30 rows) compile in about the time small ones do
// (issue 25: the GEMM's notify counts were a walk over every tile, 10 s at 2^30 rows, hours at 2^40) and their
// GEMMs store C (2^30 x 4096 bf16) with 64-bit offsets.

// GEMM+RS: every rank's tiles of a chunk's rows count in its owner's slot, 3 peers x 16 column tiles x 2^20 row
// tiles of the chunk's 2^27 rows = 50331648 per call; the signal values of 42 calls fit the i32 pads.
// CHECK-LABEL: func.func @gemm_rs
// CHECK-SAME: ditron.epoch_limit = 42 : i64
// CHECK: %[[PER:.*]] = arith.constant 50331648 : index
// CHECK: arith.muli %[[PER]], %arg3 : index
// CHECK: "ditron_device.wait"({{.*}}ditron.role = "rs.await"
// CHECK: "tt.func"
// CHECK: arith.extsi {{.*}} : tensor<128xi32> to tensor<128xi64>
// CHECK: "tt.addptr"({{.*}}) : (tensor<128x256x!tt.ptr<bf16>>, tensor<128x256xi64>)
// CHECK: m = 1073741824 : i64
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @gemm_rs(%x: tensor<1073741824x14336xbf16> {ditron.sharding = {dims = [[], ["tp"]]}},
                     %w: tensor<14336x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<1073741824x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}}) {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<1073741824x14336xbf16>, tensor<14336x4096xbf16>) -> tensor<1073741824x4096xbf16>
    return %y : tensor<1073741824x4096xbf16>
  }
}

// -----

// CHECK-LABEL: func.func @gemm_ar
// CHECK-SAME: ditron.epoch_limit = 42 : i64
// CHECK: "ditron_device.wait"({{.*}}ditron.role = "ar.reduced"
// CHECK: "tt.addptr"({{.*}}) : (tensor<128x256x!tt.ptr<bf16>>, tensor<128x256xi64>)
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @gemm_ar(%x: tensor<1073741824x14336xbf16> {ditron.sharding = {dims = [[], ["tp"]]}},
                     %w: tensor<14336x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<1073741824x4096xbf16> {ditron.sharding = {dims = [[], []]}}) {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<1073741824x14336xbf16>, tensor<14336x4096xbf16>) -> tensor<1073741824x4096xbf16>
    return %y : tensor<1073741824x4096xbf16>
  }
}

// -----

// The MLP at 2^28 rows with a square for an activation (h * h, no GEMM epilogue step: a kernel of its own, over
// 2^28 x 3584 in 2^30 tiles of 1024 elements; at 2^30 rows they would not be i32: sizes_invalid.mlir).
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: ditron.epoch_limit = 170 : i64
// CHECK: "ditron_device.launch"({{.*}}ditron.role = "ag.gemm"
// CHECK: "ditron_device.launch"({{.*}}ditron.role = "elementwise"
// CHECK: "ditron_device.launch"({{.*}}ditron.role = "rs.gemm"
// CHECK: shape = [268435456, 3584]{{.*}}template = "elementwise"
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @mlp(%x: tensor<268435456x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}},
                 %w1: tensor<4096x14336xbf16> {ditron.sharding = {dims = [[], ["tp"]]}},
                 %w2: tensor<14336x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<268435456x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}}) {
    %h = "ditron_task.matmul"(%x, %w1) : (tensor<268435456x4096xbf16>, tensor<4096x14336xbf16>) -> tensor<268435456x14336xbf16>
    %g = "ditron_task.elementwise"(%h, %h) {fn = "mul"} : (tensor<268435456x14336xbf16>, tensor<268435456x14336xbf16>) -> tensor<268435456x14336xbf16>
    %y = "ditron_task.matmul"(%g, %w2) : (tensor<268435456x14336xbf16>, tensor<14336x4096xbf16>) -> tensor<268435456x4096xbf16>
    return %y : tensor<268435456x4096xbf16>
  }
}
