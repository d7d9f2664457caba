// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile,ditron-lower-task-to-device,ditron-lower-device-to-core' | FileCheck %s
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-reduce=push_sum engine=copy_engine}' 2>&1 | FileCheck %s --check-prefix=CE
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-reduce=push_sum num-sms=8 persistent=false}' 2>&1 | FileCheck %s --check-prefix=WAVE
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-reduce=push_sum}' 2>&1 | FileCheck %s --check-prefix=ALONE
// GEMM+AR in one launch, the model's choice for a one-wave GEMM (LLaMA-70B M = 128 on two ranks): each tile goes
// into its slab of the peer's inbox and sets the peer's slot of the tile to the epoch; then it waits for its own
// slot, adds the peer's tile and stores the sum into the output. No reduce launch; the pad has one waiter per slot,
// which clears it (ditron.consumed); the inbox rotates and the program ends without a barrier.

// CHECK-LABEL: func.func @gemm_ar
// CHECK-SAME: ditron.fence = "waits"
// CHECK: %[[IN:.*]] = "ditron_device.alloc_symmetric"() {ditron.rotate, name = "ar_inbox"} : () -> memref<128x8192xbf16>
// CHECK: %[[PAD:.*]] = "ditron_device.alloc_symmetric"() {ditron.consumed, name = "ar_pushed"} : () -> memref<{{[0-9]+}}xi32>
// CHECK: "ditron_device.launch"(%arg0, %arg1, %arg2, %[[IN]], %[[PAD]], %arg3) {{{.*}}ditron.role = "ar.gemm_push_sum"
// CHECK-NEXT: return
// CHECK: args = ["a", "b", "c", "inbox", "pushed", "epoch"]{{.*}}push = {arg = "inbox", pad = "pushed", scope = "sys", slabs = 1 : i64, sum = true, value_arg = "epoch"}
// CHECK: "ditron_core.notify"({{.*}}) {op = "set", scope = "sys", semantic = "release"}
// CHECK: "ditron_core.wait"
// CHECK: "ditron_core.notify"({{.*}}) {op = "clear", scope = "sys", semantic = "relaxed"}
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @gemm_ar(%a: tensor<128x14336xbf16>, %w: tensor<14336x8192xbf16>) -> tensor<128x8192xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%a, %w) {ditron.overlap = {group = 0 : i64, kind = "matmul_ar", role = "producer"}} : (tensor<128x14336xbf16>, tensor<14336x8192xbf16>) -> tensor<128x8192xbf16>
    // CE: gemm_ar_push_sum.mlir:[[# @LINE + 2]]:10: error: ditron-tile: 'ditron_task.all_reduce' op all-reduce=push_sum stores into the peers' buffers with SMs; it cannot use engine=copy_engine
    // WAVE: gemm_ar_push_sum.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.all_reduce' op all-reduce=push_sum sums each tile in the GEMM's epilogue once the peers' copy of it landed, so every program must stay resident: {{[0-9]+}} tiles of {{[0-9]+}}x{{[0-9]+}} over 8 SMs need persistent=true
    %y = "ditron_task.all_reduce"(%p) {axis = "tp", reduce = "sum", ditron.overlap = {group = 0 : i64, kind = "matmul_ar", role = "consumer"}} : (tensor<128x8192xbf16>) -> tensor<128x8192xbf16>
    return %y : tensor<128x8192xbf16>
  }
}

// -----

// An all-reduce that no GEMM produces has no epilogue to sum in.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @alone(%x: tensor<256x32xbf16>) -> tensor<256x32xbf16> attributes {ditron.view = "local"} {
    // ALONE: gemm_ar_push_sum.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.all_reduce' op all-reduce=push_sum sums in a GEMM's epilogue; this all-reduce does not follow a GEMM (use one_shot or two_shot)
    %y = "ditron_task.all_reduce"(%x) {axis = "tp", reduce = "sum"} : (tensor<256x32xbf16>) -> tensor<256x32xbf16>
    return %y : tensor<256x32xbf16>
  }
}
