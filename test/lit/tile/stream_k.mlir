// ditron-tile{stream-k=true}: a matmul whose tiles fill the SMs in a partial last wave shares that wave's tiles
// out by K steps over every SM (1024x7168 in 128x128 tiles: 448 tiles on 132 SMs, the last 52 by stream-K), in a
// persistent grid of 132 programs with a per-program fp32 workspace tile and lock (errors_stream_k.mlir: a GEMM
// overlapped with communication refuses it).
// RUN: ditron-opt %s --pass-pipeline='ditron-tile{stream-k=true},ditron-lower-task-to-device' | FileCheck %s

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  // CHECK-LABEL: func.func @mm
  // CHECK: %[[WS:.*]] = "ditron_device.alloc_symmetric"() {name = "gemm_workspace"} : () -> memref<16896x128xf32>
  // CHECK: %[[LOCKS:.*]] = "ditron_device.alloc_symmetric"() {name = "gemm_locks"} : () -> memref<132xi32>
  // CHECK: "ditron_device.launch"({{.*}}%[[WS]], %[[LOCKS]]) {{{.*}}grid = array<i64: 132, 1, 1>
  // CHECK: func.func private @gemm({{.*}}args = ["a", "b", "c", "workspace", "locks"]{{.*}}block_m = 128 : i64, block_n = 128 : i64{{.*}}flatten = false{{.*}}persistent = true{{.*}}stream_k = 52 : i64
  func.func @mm(%a: tensor<1024x4096xbf16>, %b: tensor<4096x7168xbf16>) -> tensor<1024x7168xbf16> attributes {ditron.view = "local"} {
    %c = "ditron_task.matmul"(%a, %b) : (tensor<1024x4096xbf16>, tensor<4096x7168xbf16>) -> tensor<1024x7168xbf16>
    return %c : tensor<1024x7168xbf16>
  }
}
