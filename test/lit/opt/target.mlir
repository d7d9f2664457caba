// --target sets the module's ditron.target where it has none: the passes tile for that target (ditron-tile reads
// the attribute for its peak numbers: an A100's 108 SMs here; ditron-lower-task-to-device stamps it on the
// function). A module that names another target, or a target ditron does not support, is an error.
// RUN: ditron-opt %s --target cuda:80 | FileCheck %s --check-prefix=SET
// RUN: ditron-opt %s --target cuda:80 --pass-pipeline=ditron-device | FileCheck %s --check-prefix=TILE
// RUN: ditron-opt %s --target cuda:80 | ditron-opt --target cuda:80 | FileCheck %s --check-prefix=SET
// RUN: ditron-opt %s --target cuda:80 | not ditron-opt --target cuda:90 2>&1 | FileCheck %s --check-prefix=OTHER
// RUN: not ditron-opt %s --target cuda:70 2>&1 | FileCheck %s --check-prefix=BADTARGET
// Without --target, --emit takes the target the pipeline tiled for (ditron-tile's default, stamped on the
// device function); with it, that target throughout.
// RUN: ditron-opt %s --pass-pipeline=ditron-device --emit=ptx | FileCheck %s --check-prefix=STAMPED
// RUN: ditron-opt %s --target cuda:80 --pass-pipeline=ditron-device --emit=ptx | FileCheck %s --check-prefix=SM80
// ditron-lower-core-to-triton lowers for the module's target unless told otherwise; told another, it refuses
// (lowered for NVIDIA, Triton's AMD backend aborted on the result).
// RUN: ditron-opt %s --target hip:gfx942 --pass-pipeline=ditron-default,ditron-lower-core-to-triton --emit=amdgcn | FileCheck %s --check-prefix=HIP
// RUN: not ditron-opt %s --target hip:gfx942 --pass-pipeline='ditron-default,ditron-lower-core-to-triton{target=cuda:90}' 2>&1 | FileCheck %s --check-prefix=LOWEROTHER

// SET: module attributes {ditron.mesh = {{.*}}, ditron.target = "cuda:80"}
// TILE: func.func @ar({{.*}} attributes {{{.*}}ditron.target = "cuda:80"
// TILE: num_sms = 108
// OTHER: error: --target cuda:90: the module's ditron.target is 'cuda:80'
// STAMPED: .target sm_90a
// SM80: .target sm_80
// HIP: .amdgcn_target "amdgcn-amd-amdhsa--gfx942"
// LOWEROTHER: error: pass 'ditron-lower-core-to-triton': target=cuda:90, but the module is for 'hip:gfx942' (ditron.target); lower for 'hip:gfx942', or change the module's target first
// BADTARGET: error: unsupported target 'cuda:70'; supported targets: cuda:80, cuda:90, hip:gfx942, hip:gfx950
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @ar(%x: tensor<256x1024xbf16> {ditron.sharding = {dims = [[], ["tp"]]}},
                %w: tensor<1024x512xbf16> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<256x512xbf16> {ditron.sharding = {dims = [[], []]}}) {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<256x1024xbf16>, tensor<1024x512xbf16>) -> tensor<256x512xbf16>
    return %y : tensor<256x512xbf16>
  }
}
