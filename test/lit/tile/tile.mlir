// RUN: ditron-opt %s --split-input-file --pass-pipeline=ditron-tile | FileCheck %s

// AG+GEMM: both ops of the group carry the same tiling; the chunk rows divide the shard's rows. The GEMM hides the
// gather either way here, so the model keeps the gather by pull.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @ag_gemm
  // CHECK: "ditron_task.all_gather"{{.*}}ditron.tiling = {algorithm = "pull", block_k = [[BK:[0-9]+]] : i64, block_m = [[BM:[0-9]+]] : i64, block_n = [[BN:[0-9]+]] : i64, chunk_rows = [[CR:[0-9]+]]
  // CHECK-SAME: kind = "ag_matmul"{{.*}}persistent = true{{.*}}shard_rows = 2048 : i64{{.*}}target = "cuda:90", world = 4 : i64
  // CHECK: "ditron_task.matmul"{{.*}}ditron.tiling = {algorithm = "pull", block_k = [[BK]] : i64, block_m = [[BM]] : i64, block_n = [[BN]] : i64, chunk_rows = [[CR]]
  func.func @ag_gemm(%x: tensor<2048x4096xbf16>, %w: tensor<4096x3584xbf16>) -> tensor<8192x3584xbf16> attributes {ditron.view = "local"} {
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}} : (tensor<2048x4096xbf16>) -> tensor<8192x4096xbf16>
    %h = "ditron_task.matmul"(%g, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}} : (tensor<8192x4096xbf16>, tensor<4096x3584xbf16>) -> tensor<8192x3584xbf16>
    return %h : tensor<8192x3584xbf16>
  }
}

// -----

// GEMM+RS: the model puts the reduction in the GEMM's epilogue (the copy engine moves the partials), so the GEMM
// keeps every SM; chunks are whole row tiles.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 8>}} {
  // CHECK-LABEL: func.func @gemm_rs
  // CHECK: "ditron_task.matmul"{{.*}}ditron.tiling = {algorithm = "epilogue", {{.*}}block_m = 128 : i64{{.*}}comm_sms = 0 : i64, engine = "copy_engine"{{.*}}kind = "matmul_rs"{{.*}}shard_rows = 1024 : i64, sm_budget = 132 : i64
  // CHECK: "ditron_task.reduce_scatter"{{.*}}kind = "matmul_rs"
  func.func @gemm_rs(%a: tensor<8192x1792xbf16>, %w: tensor<1792x4096xbf16>) -> tensor<1024x4096xbf16> attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%a, %w) {ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "producer"}} : (tensor<8192x1792xbf16>, tensor<1792x4096xbf16>) -> tensor<8192x4096xbf16>
    %y = "ditron_task.reduce_scatter"(%p) {axis = "tp", dim = 0 : i64, reduce = "sum", ditron.overlap = {group = 0 : i64, kind = "matmul_rs", role = "consumer"}} : (tensor<8192x4096xbf16>) -> tensor<1024x4096xbf16>
    return %y : tensor<1024x4096xbf16>
  }
}

// -----

// Standalone ops: plain GEMM, elementwise, collectives. An uneven shard (4091 rows, prime) gets one chunk.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @standalone
  // CHECK: "ditron_task.matmul"{{.*}}ditron.tiling = {{{.*}}kind = "matmul"
  // CHECK: "ditron_task.elementwise"{{.*}}ditron.tiling = {block = 1024 : i64, kind = "elementwise"
  // CHECK: "ditron_task.all_reduce"{{.*}}algorithm = "{{one_shot|two_shot|push}}"{{.*}}kind = "all_reduce"
  // CHECK: "ditron_task.reduce_scatter"{{.*}}chunk_rows = 4091 : i64{{.*}}kind = "reduce_scatter", num_chunks = 1 : i64
  // CHECK: "ditron_task.all_gather"{{.*}}kind = "all_gather"{{.*}}shard_rows = 16364
  func.func @standalone(%x: tensor<16364x256xbf16>, %w: tensor<256x256xbf16>) -> (tensor<16364x256xbf16>, tensor<4091x256xbf16>, tensor<65456x256xbf16>) attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%x, %w) : (tensor<16364x256xbf16>, tensor<256x256xbf16>) -> tensor<16364x256xbf16>
    %q = "ditron_task.elementwise"(%p) {fn = "silu"} : (tensor<16364x256xbf16>) -> tensor<16364x256xbf16>
    %r = "ditron_task.all_reduce"(%q) {axis = "tp", reduce = "sum"} : (tensor<16364x256xbf16>) -> tensor<16364x256xbf16>
    %s = "ditron_task.reduce_scatter"(%q) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<16364x256xbf16>) -> tensor<4091x256xbf16>
    %t = "ditron_task.all_gather"(%r) {axis = "tp", dim = 0 : i64} : (tensor<16364x256xbf16>) -> tensor<65456x256xbf16>
    return %r, %s, %t : tensor<16364x256xbf16>, tensor<4091x256xbf16>, tensor<65456x256xbf16>
  }
}

// -----

// The module's ditron.target wins over the default.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}, ditron.target = "hip:gfx942"} {
  // CHECK-LABEL: func.func @module_target
  // CHECK: target = "hip:gfx942"
  func.func @module_target(%x: tensor<128x64xbf16>, %w: tensor<64x64xbf16>) -> tensor<128x64xbf16> attributes {ditron.view = "local"} {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<128x64xbf16>, tensor<64x64xbf16>) -> tensor<128x64xbf16>
    return %y : tensor<128x64xbf16>
  }
}

// -----

// Beyond one wave of tiles a matmul is persistent when its rows are 16-byte aligned (TMA loads); with rows that
// are not (K = 1111 bf16), one program per tile (the persistent loop with pointer loads ran 6x slower on an H200).
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  // CHECK-LABEL: func.func @aligned
  // CHECK: "ditron_task.matmul"{{.*}}persistent = true
  func.func @aligned(%a: tensor<6000x1112xbf16>, %b: tensor<1112x3336xbf16>) -> tensor<6000x3336xbf16> attributes {ditron.view = "local"} {
    %c = "ditron_task.matmul"(%a, %b) : (tensor<6000x1112xbf16>, tensor<1112x3336xbf16>) -> tensor<6000x3336xbf16>
    return %c : tensor<6000x3336xbf16>
  }
  // CHECK-LABEL: func.func @unaligned
  // CHECK: "ditron_task.matmul"{{.*}}persistent = false
  func.func @unaligned(%a: tensor<6000x1111xbf16>, %b: tensor<1111x3333xbf16>) -> tensor<6000x3333xbf16> attributes {ditron.view = "local"} {
    %c = "ditron_task.matmul"(%a, %b) : (tensor<6000x1111xbf16>, tensor<1111x3333xbf16>) -> tensor<6000x3333xbf16>
    return %c : tensor<6000x3333xbf16>
  }
}
