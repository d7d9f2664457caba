// Every choice of ditron-tile can be forced by an option; the target's numbers change the model's choices.
// RUN: ditron-opt %s --pass-pipeline='ditron-tile{block-m=64 block-n=128 block-k=32 num-warps=4 num-stages=2 group-m=4 chunk-rows=512 engine=sm comm-sms=16 persistent=false}' | FileCheck %s --check-prefix=FORCED
// RUN: ditron-opt %s --pass-pipeline='ditron-tile{num-chunks=3}' | FileCheck %s --check-prefix=CHUNKS
// RUN: ditron-opt %s --pass-pipeline='ditron-tile{target=hip:gfx942}' | FileCheck %s --check-prefix=HIP
// RUN: ditron-opt %s --pass-pipeline='ditron-tile{target=cuda:90 num-sms=33}' | FileCheck %s --check-prefix=SMS

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // FORCED-LABEL: func.func @ag_gemm
  // FORCED: ditron.tiling = {algorithm = "{{pull|push}}", block_k = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, chunk_rows = 512 : i64, comm_sms = 16 : i64, engine = "sm"
  // FORCED-SAME: group_m = 4 : i64, kind = "ag_matmul", num_chunks = 4 : i64, num_stages = 2 : i64, num_warps = 4 : i64, persistent = false, shard_rows = 2048 : i64, sm_budget = 116 : i64
  // CHUNKS: chunk_rows = 1024 : i64{{.*}}num_chunks = 2 : i64
  // HIP: block_n = 128 : i64{{.*}}engine = "sm"{{.*}}num_stages = 2 : i64, num_warps = 4 : i64{{.*}}sm_budget = 288 : i64, target = "hip:gfx942"
  // SMS: sm_budget = 33 : i64
  func.func @ag_gemm(%x: tensor<2048x4096xbf16>, %w: tensor<4096x3584xbf16>) -> tensor<8192x3584xbf16> attributes {ditron.view = "local"} {
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}} : (tensor<2048x4096xbf16>) -> tensor<8192x4096xbf16>
    %h = "ditron_task.matmul"(%g, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}} : (tensor<8192x4096xbf16>, tensor<4096x3584xbf16>) -> tensor<8192x3584xbf16>
    return %h : tensor<8192x3584xbf16>
  }
}
