// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{all-gather=scatter}' 2>&1 | FileCheck %s --check-prefix=VALUE
// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{all-gather=push}' 2>&1 | FileCheck %s --check-prefix=PUSH
// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{all-gather=one_launch}' 2>&1 | FileCheck %s --check-prefix=ONE
// RUN: ditron-opt %s --pass-pipeline='ditron-tile{all-gather=pull}' | FileCheck %s --check-prefix=PULL
// VALUE: error: pass 'ditron-tile': all-gather must be one of pull, push, one_launch, got 'scatter'
// A standalone all_gather writes the function's output, which peers cannot be pushed into.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @gather(%x: tensor<64x32xbf16>) -> tensor<128x32xbf16> attributes {ditron.view = "local"} {
    // PUSH: all_gather_push.mlir:[[# @LINE + 3]]:10: error: ditron-tile: 'ditron_task.all_gather' op all-gather=push copies into the peers' gather buffers, which only AG+GEMM has (this all-gather's output is the function's); use pull
    // ONE: all_gather_push.mlir:[[# @LINE + 2]]:10: error: ditron-tile: 'ditron_task.all_gather' op all-gather=one_launch copies into the peers' gather buffers, which only AG+GEMM has (this all-gather's output is the function's); use pull
    // PULL: "ditron_task.all_gather"{{.*}}kind = "all_gather"
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<64x32xbf16>) -> tensor<128x32xbf16>
    return %g : tensor<128x32xbf16>
  }
}
