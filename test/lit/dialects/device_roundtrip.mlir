// RUN: ditron-opt %s | ditron-opt | FileCheck %s
// Every ditron_device op, positive cases: the printed form re-parses and prints the same.

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @rank_and_buffers
  // CHECK: %[[R:.*]] = "ditron_device.rank"() : () -> index
  // CHECK: %[[W:.*]] = "ditron_device.num_ranks"() : () -> index
  // CHECK: "ditron_device.alloc_symmetric"() {name = "ag_buf"} : () -> memref<4096x512xbf16>
  // CHECK: "ditron_device.alloc_symmetric"() {name = "ag_sig"} : () -> memref<8xi32>
  // CHECK: "ditron_device.alloc_symmetric"() {name = "scalar"} : () -> memref<f32>
  // CHECK: return %[[R]], %[[W]] : index, index
  func.func @rank_and_buffers() -> (index, index) attributes {ditron.level = "device"} {
    %r = "ditron_device.rank"() : () -> index
    %w = "ditron_device.num_ranks"() : () -> index
    %buf = "ditron_device.alloc_symmetric"() {name = "ag_buf"} : () -> memref<4096x512xbf16>
    %sig = "ditron_device.alloc_symmetric"() {name = "ag_sig"} : () -> memref<8xi32>
    %s = "ditron_device.alloc_symmetric"() {name = "scalar"} : () -> memref<f32>
    return %r, %w : index, index
  }

  // CHECK-LABEL: func.func @copy
  // CHECK: "ditron_device.copy"(%arg0, %arg1, %[[PEER:.*]], %[[ME:.*]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) {engine = "copy_engine"} : (memref<1024x256xbf16>, memref<4096x256xbf16>, index, index, index, index, index, index, index, index) -> ()
  // CHECK: "ditron_device.copy"(%arg0, %arg1, %{{.*}}) {engine = "sm"}
  // CHECK: "ditron_device.copy"(%arg2, %arg3, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %arg4) {engine = "copy_engine"} : (memref<?xf32>, memref<?xf32>, index, index, index, index, index) -> ()
  // CHECK: "ditron_device.copy"(%arg2, %arg3, %{{.*}}) {engine = "sm", stream = 1 : i64}
  // CHECK: "ditron_device.copy"(%arg5, %arg5, %{{.*}}, %{{.*}}) {engine = "copy_engine"} : (memref<f32>, memref<f32>, index, index) -> ()
  func.func @copy(%src: memref<1024x256xbf16>, %dst: memref<4096x256xbf16>, %s1: memref<?xf32>, %d1: memref<?xf32>,
                  %n: index, %s0: memref<f32>) {
    %me = "ditron_device.rank"() : () -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %c1024 = arith.constant 1024 : index
    %peer = arith.addi %me, %c1 : index
    %row = arith.muli %peer, %c1024 : index
    "ditron_device.copy"(%src, %dst, %peer, %me, %c0, %c0, %row, %c0, %c1024, %c256) {engine = "copy_engine"} : (memref<1024x256xbf16>, memref<4096x256xbf16>, index, index, index, index, index, index, index, index) -> ()
    "ditron_device.copy"(%src, %dst, %peer, %me, %c0, %c0, %row, %c0, %c1024, %c256) {engine = "sm"} : (memref<1024x256xbf16>, memref<4096x256xbf16>, index, index, index, index, index, index, index, index) -> ()
    "ditron_device.copy"(%s1, %d1, %peer, %me, %c0, %c0, %n) {engine = "copy_engine"} : (memref<?xf32>, memref<?xf32>, index, index, index, index, index) -> ()
    "ditron_device.copy"(%s1, %d1, %me, %peer, %n, %c0, %n) {engine = "sm", stream = 1 : i64} : (memref<?xf32>, memref<?xf32>, index, index, index, index, index) -> ()
    "ditron_device.copy"(%s0, %s0, %peer, %me) {engine = "copy_engine"} : (memref<f32>, memref<f32>, index, index) -> ()
    return
  }

  // CHECK-LABEL: func.func @signal_wait_barrier
  // CHECK: "ditron_device.signal"(%arg0, %{{.*}}, %{{.*}}, %arg1) {op = "set", scope = "sys"} : (memref<8xi32>, index, index, index) -> ()
  // CHECK: "ditron_device.signal"(%arg0, %{{.*}}, %{{.*}}, %{{.*}}) {op = "add", scope = "gpu"}
  // CHECK: "ditron_device.signal"(%arg2, {{.*}}) {op = "add", scope = "sys"} : (memref<4xi64>, index, index, index) -> ()
  // CHECK: "ditron_device.wait"(%arg0, %arg1, %{{.*}}) {where = "stream"} : (memref<8xi32>, index, index) -> ()
  // CHECK: "ditron_device.wait"(%arg0, %arg1, %{{.*}}, %{{.*}}, %{{.*}}) {where = "kernel"} : (memref<8xi32>, index, index, index, index) -> ()
  // CHECK: "ditron_device.barrier"(%arg0) : (memref<8xi32>) -> ()
  func.func @signal_wait_barrier(%sig: memref<8xi32>, %epoch: index, %sig64: memref<4xi64>) {
    %me = "ditron_device.rank"() : () -> index
    %w = "ditron_device.num_ranks"() : () -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    "ditron_device.signal"(%sig, %me, %c0, %epoch) {op = "set", scope = "sys"} : (memref<8xi32>, index, index, index) -> ()
    "ditron_device.signal"(%sig, %w, %c1, %c1) {op = "add", scope = "gpu"} : (memref<8xi32>, index, index, index) -> ()
    "ditron_device.signal"(%sig64, %me, %c0, %c1) {op = "add", scope = "sys"} : (memref<4xi64>, index, index, index) -> ()
    "ditron_device.wait"(%sig, %epoch, %c0) {where = "stream"} : (memref<8xi32>, index, index) -> ()
    "ditron_device.wait"(%sig, %epoch, %c0, %c1, %c2) {where = "kernel"} : (memref<8xi32>, index, index, index, index) -> ()
    "ditron_device.barrier"(%sig) : (memref<8xi32>) -> ()
    return
  }

  // A launch's arguments may have any types; each fills one of 16 optional slots (operandSegmentSizes).
  // CHECK-LABEL: func.func @launch
  // CHECK: "ditron_device.launch"(%arg0, %arg1, %arg2) {grid = array<i64: 132>, kernel = @gemm_kernel, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, sm_budget = 132 : i64, tile_order = "rank_rotated"} : (memref<1024x256xbf16>, memref<8xi32>, index) -> ()
  // CHECK: "ditron_device.launch"() {grid = array<i64: 4, 2, 1>, kernel = @gemm_kernel, operandSegmentSizes = array<i32: 0, {{.*}}>, sm_budget = 8 : i64, tile_order = "grouped"} : () -> ()
  // CHECK: "ditron_device.launch"(%arg2) {grid = array<i64: 1, 1>, kernel = @host_kernel, operandSegmentSizes = array<i32: 1, 0, {{.*}}>, sm_budget = 1 : i64, tile_order = "row_major"} : (index) -> ()
  func.func @launch(%a: memref<1024x256xbf16>, %sig: memref<8xi32>, %epoch: index) {
    "ditron_device.launch"(%a, %sig, %epoch) {kernel = @gemm_kernel, grid = array<i64: 132>, sm_budget = 132 : i64, tile_order = "rank_rotated", operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (memref<1024x256xbf16>, memref<8xi32>, index) -> ()
    "ditron_device.launch"() {kernel = @gemm_kernel, grid = array<i64: 4, 2, 1>, sm_budget = 8 : i64, tile_order = "grouped", operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : () -> ()
    "ditron_device.launch"(%epoch) {kernel = @host_kernel, grid = array<i64: 1, 1>, sm_budget = 1 : i64, tile_order = "row_major", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (index) -> ()
    return
  }
  // A core kernel is a Triton function (generic form: tt is unregistered here); a func.func serves as well.
  // CHECK-LABEL: "tt.func"()
  // CHECK: ^bb0(%{{.*}}: !tt.ptr<bf16>, %{{.*}}: !tt.ptr<i32>, %{{.*}}: i32):
  // CHECK: sym_name = "gemm_kernel"
  "tt.func"() ({
  ^bb0(%p: !tt.ptr<bf16>, %s: !tt.ptr<i32>, %e: i32):
    "tt.return"() : () -> ()
  }) {sym_name = "gemm_kernel", function_type = (!tt.ptr<bf16>, !tt.ptr<i32>, i32) -> ()} : () -> ()
  func.func private @host_kernel(index)
}
