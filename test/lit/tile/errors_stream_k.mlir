// ditron-tile{stream-k=true} on a GEMM overlapped with communication: refused, since stream-K's owners wait for
// lower programs' partials, so every program must stay resident -- and such a kernel takes the whole register file,
// leaving no room beside it for a copy the GEMM may be waiting for (2xH200, AG+GEMM 70B M = 1024 by pull timed out;
// results/ablation_ag_stream_k.csv).
// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{stream-k=true}' 2>&1 | FileCheck %s

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @ag_gemm(%x: tensor<512x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}}, %w: tensor<4096x7168xbf16>) -> tensor<1024x7168xbf16> attributes {ditron.view = "local"} {
    // CHECK: errors_stream_k.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.all_gather' op stream-k applies to a matmul alone: stream-K's programs must all stay resident, which a GEMM overlapped with communication cannot promise
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64,
        ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}} : (tensor<512x4096xbf16>) -> tensor<1024x4096xbf16>
    %h = "ditron_task.matmul"(%g, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}}
        : (tensor<1024x4096xbf16>, tensor<4096x7168xbf16>) -> tensor<1024x7168xbf16>
    return %h : tensor<1024x7168xbf16>
  }
}
