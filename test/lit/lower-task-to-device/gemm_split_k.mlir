// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile,ditron-lower-task-to-device' | FileCheck %s
// A skinny GEMM whose tiles neither wait nor notify fills one wave of programs by splitting K (gemm.split_for,
// which ditron-tile's model assumes too): its launch also takes an fp32 workspace for the partials of every split
// but the last and a pad of locks, one per tile (zero at allocation; the last split leaves it zero). GEMM+AR's
// push (here in one launch, push_sum: the push and the sum of the peers' tiles) is done by the last split of a
// tile, with the sum.

// CHECK-LABEL: func.func @skinny
// CHECK: %[[WS:.*]] = "ditron_device.alloc_symmetric"() {name = "gemm_workspace"} : () -> memref<[[WSROWS:[0-9]+]]x512xf32>
// CHECK: %[[LOCKS:.*]] = "ditron_device.alloc_symmetric"() {name = "gemm_locks"} : () -> memref<{{[0-9]+}}xi32>
// CHECK: "ditron_device.launch"(%arg0, %arg1, %arg2, %[[WS]], %[[LOCKS]]) {{{.*}}ditron.role = "gemm"
// CHECK: func.func private @gemm({{.*}}args = ["a", "b", "c", "workspace", "locks"]{{.*}}loads = "pointer"{{.*}}split_k = {{[2-9]}} : i64
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @skinny(%a: tensor<128x4096xbf16>, %b: tensor<4096x512xbf16>) -> tensor<128x512xbf16> attributes {ditron.view = "local"} {
    %y = "ditron_task.matmul"(%a, %b) : (tensor<128x4096xbf16>, tensor<4096x512xbf16>) -> tensor<128x512xbf16>
    return %y : tensor<128x512xbf16>
  }
}

// -----

// CHECK-LABEL: func.func @gemm_ar
// CHECK: "ditron_device.alloc_symmetric"() {name = "gemm_workspace"} : () -> memref<{{[0-9]+}}x512xf32>
// CHECK: "ditron_device.launch"({{.*}}) {{{.*}}ditron.role = "ar.gemm_push_sum"
// CHECK: func.func private @gemm({{.*}}args = ["a", "b", "c", "inbox", "pushed", "epoch", "workspace", "locks"]{{.*}}push = {arg = "inbox", pad = "pushed"{{.*}}sum = true{{.*}}split_k = {{[2-9]}} : i64
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @gemm_ar(%a: tensor<128x4096xbf16>, %w: tensor<4096x512xbf16>) -> tensor<128x512xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%a, %w) {ditron.overlap = {group = 0 : i64, kind = "matmul_ar", role = "producer"}} : (tensor<128x4096xbf16>, tensor<4096x512xbf16>) -> tensor<128x512xbf16>
    %y = "ditron_task.all_reduce"(%p) {axis = "tp", reduce = "sum", ditron.overlap = {group = 0 : i64, kind = "matmul_ar", role = "consumer"}} : (tensor<128x512xbf16>) -> tensor<128x512xbf16>
    return %y : tensor<128x512xbf16>
  }
}
