// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile' | FileCheck %s
// RUN: not ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{engine=copy_engine}' 2>&1 | FileCheck %s --check-prefix=CE

// The bounded all_to_all of run-time split sizes: the sizes are on the device, so the rows move on SMs (one
// a2a_sized pull launch); its programs (comm_sms) from the model. A copy engine cannot (its sizes are the host's).
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @dispatch(%x: tensor<4096x4096xbf16>, %s: tensor<4xi32>) -> (tensor<16384x4096xbf16>, tensor<4xi32>) attributes {ditron.view = "local"} {
    // CHECK: "ditron_task.all_to_all"{{.*}}ditron.tiling = {algorithm = "pull_sized", comm_sms = {{[0-9]+}} : i64, engine = "sm", est_us = {{.*}}, kind = "all_to_all", shard_rows = 4096 : i64, target = "cuda:90", world = 4 : i64}
    // CE: all_to_all_sized.mlir:[[# @LINE + 1]]:14: error: ditron-tile: 'ditron_task.all_to_all' op engine=copy_engine cannot move parts of run-time sizes (the sizes are on the device, a copy engine's are the host's); use engine=sm
    %y, %c = "ditron_task.all_to_all"(%x, %s) {axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<4096x4096xbf16>, tensor<4xi32>) -> (tensor<16384x4096xbf16>, tensor<4xi32>)
    return %y, %c : tensor<16384x4096xbf16>, tensor<4xi32>
  }
}
