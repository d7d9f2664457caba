// Options that cannot be realised for this program.
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{chunk-rows=1000}' 2>&1 | FileCheck %s --check-prefix=CHUNK
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{block-m=256 block-n=256 block-k=128 num-stages=4}' 2>&1 | FileCheck %s --check-prefix=SMEM
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-reduce=two_shot engine=copy_engine}' 2>&1 | FileCheck %s --check-prefix=TWO
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-reduce=push engine=copy_engine}' 2>&1 | FileCheck %s --check-prefix=PUSH
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{target=cuda:75}' 2>&1 | FileCheck %s --check-prefix=TARGET
// TARGET: error: ditron-tile: no performance numbers for target 'cuda:75'; known: cuda:90, cuda:80, hip:gfx942, hip:gfx950
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{own-first=true all-gather=pull}' 2>&1 | FileCheck %s --check-prefix=OWN
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{repack=b}' 2>&1 | FileCheck %s --check-prefix=REPACK
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{loads=ldg}' 2>&1 | FileCheck %s --check-prefix=LOADS
// LOADS: error: pass 'ditron-tile': loads must be tma or pointer (default: the template's rule), got 'ldg'
// REPACK: error: pass 'ditron-tile': repack must be off or all (default: the model's choice), got 'b'
// OWN: error: pass 'ditron-tile': own-first orders the tiles of all-gather=one_launch; it does not apply to all-gather=pull

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @gemm_rs(%a: tensor<16364x64xbf16>, %w: tensor<64x64xbf16>) -> tensor<4091x64xbf16> attributes {ditron.view = "local"} {
    // SMEM: errors_options.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.matmul' op tile 256x256x128 with 4 stages needs 524288 bytes of shared memory; cuda:90 has 232448: lower num-stages or the block sizes
    %p = "ditron_task.matmul"(%a, %w) {ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "producer"}} : (tensor<16364x64xbf16>, tensor<64x64xbf16>) -> tensor<16364x64xbf16>
    // CHUNK: errors_options.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.reduce_scatter' op chunk-rows=1000 does not divide the 4091 rows of a shard; choose a divisor of 4091
    %y = "ditron_task.reduce_scatter"(%p) {axis = "tp", dim = 0 : i64, reduce = "sum", ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "consumer"}} : (tensor<16364x64xbf16>) -> tensor<4091x64xbf16>
    return %y : tensor<4091x64xbf16>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @uneven(%x: tensor<10x64xbf16>) -> tensor<10x64xbf16> attributes {ditron.view = "local"} {
    // TWO: errors_options.mlir:[[# @LINE + 2]]:10: error: ditron-tile: 'ditron_task.all_reduce' op all-reduce=two_shot with the copy engine needs the 10 rows divisible by the 4 ranks; use one_shot or engine=sm
    // PUSH: errors_options.mlir:[[# @LINE + 1]]:10: error: ditron-tile: 'ditron_task.all_reduce' op all-reduce=push stores into the peers' buffers with SMs; it cannot use engine=copy_engine
    %y = "ditron_task.all_reduce"(%x) {axis = "tp", reduce = "sum"} : (tensor<10x64xbf16>) -> tensor<10x64xbf16>
    return %y : tensor<10x64xbf16>
  }
}
