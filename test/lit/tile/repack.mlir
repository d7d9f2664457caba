// ditron-tile's operand repack: a matmul whose B rows (5000 bf16: 10000 bytes) start off TMA's 128-byte lines is
// slower than copying B to rows of 5056 elements first (cost_model.repack_choice, backends/nvidia/facts.py
// TMA_OFF_LINE): the tiling says repack = "b" and ditron-lower-task-to-device allocates the aligned buffer, copies
// B into it on the GEMM's lane and gives the GEMM ldb = 5056. repack=off keeps B; repack=all copies every operand
// whose rows start off lines (here A's 3000 too); rows on lines (4096) are never copied; an AMD target has no TMA
// loads and no repack; a GEMM too small for the copy to pay (M = 64) is left as it is.
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile,ditron-lower-task-to-device' | FileCheck %s
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{repack=off},ditron-lower-task-to-device' | FileCheck %s --check-prefix=OFF
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{repack=all},ditron-lower-task-to-device' | FileCheck %s --check-prefix=ALL
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{target=hip:gfx942},ditron-lower-task-to-device' | FileCheck %s --check-prefix=HIP

// CHECK-LABEL: func.func @off_lines
// CHECK: %[[B:.*]] = "ditron_device.alloc_symmetric"() {name = "repack_b"} : () -> memref<3000x5056xbf16>
// CHECK-NOT: repack_a
// CHECK: "ditron_device.copy"(%arg1, %[[B]], {{.*}}) {ditron.lane = "compute", ditron.role = "repack", engine = "copy_engine"}
// CHECK: "ditron_device.launch"(%arg0, %[[B]], %arg2) {{{.*}}ditron.role = "gemm"
// CHECK: func.func private @gemm({{.*}}lda = 3000 : i64, ldb = 5056 : i64, ldc = 5000 : i64, loads = "tma"
// OFF-LABEL: func.func @off_lines
// OFF-NOT: repack
// OFF: func.func private @gemm({{.*}}lda = 3000 : i64, ldb = 5000 : i64
// ALL-LABEL: func.func @off_lines
// ALL-DAG: "ditron_device.alloc_symmetric"() {name = "repack_a"} : () -> memref<3000x3008xbf16>
// ALL-DAG: "ditron_device.alloc_symmetric"() {name = "repack_b"} : () -> memref<3000x5056xbf16>
// ALL: func.func private @gemm({{.*}}lda = 3008 : i64, ldb = 5056 : i64
// HIP-LABEL: func.func @off_lines
// HIP-NOT: repack
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @off_lines(%a: tensor<3000x3000xbf16>, %b: tensor<3000x5000xbf16>) -> tensor<3000x5000xbf16> attributes {ditron.view = "local"} {
    %c = "ditron_task.matmul"(%a, %b) : (tensor<3000x3000xbf16>, tensor<3000x5000xbf16>) -> tensor<3000x5000xbf16>
    return %c : tensor<3000x5000xbf16>
  }
}

// -----

// CHECK-LABEL: func.func @on_lines
// CHECK-NOT: repack
// ALL-LABEL: func.func @on_lines
// ALL-NOT: repack
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @on_lines(%a: tensor<3000x4096xbf16>, %b: tensor<4096x4096xbf16>) -> tensor<3000x4096xbf16> attributes {ditron.view = "local"} {
    %c = "ditron_task.matmul"(%a, %b) : (tensor<3000x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<3000x4096xbf16>
    return %c : tensor<3000x4096xbf16>
  }
}

// -----

// CHECK-LABEL: func.func @small
// CHECK-NOT: repack
// ALL-LABEL: func.func @small
// ALL: repack_a
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @small(%a: tensor<64x3000xbf16>, %b: tensor<3000x5000xbf16>) -> tensor<64x5000xbf16> attributes {ditron.view = "local"} {
    %c = "ditron_task.matmul"(%a, %b) : (tensor<64x3000xbf16>, tensor<3000x5000xbf16>) -> tensor<64x5000xbf16>
    return %c : tensor<64x5000xbf16>
  }
}
