// RUN: not ditron-opt %s --pass-pipeline='ditron-default{target=cuda:90}' 2>&1 | FileCheck %s --check-prefix=OPTS
// RUN: not ditron-opt %s --pass-pipeline='ditron-defualt' 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: not ditron-opt %s --split-input-file --pass-pipeline=ditron-default 2>&1 | FileCheck %s
// OPTS: error: pipeline 'ditron-default' takes no options; set them on its passes
// NAME: error: unknown pass or pipeline 'ditron-defualt'; did you mean 'ditron-default'?

// Device IR handed to the whole pipeline: its first task-level pass that cares says so.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK: errors.mlir:[[# @LINE + 1]]:3: error: ditron-tile: 'func.func' op is a device-level function (ditron.level = "device"); this pass expects task-level IR
  func.func @device(%x: memref<8xf32> {ditron.io = "in"}, %e: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    return
  }
}
