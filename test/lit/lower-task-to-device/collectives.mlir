// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-reduce=one_shot engine=copy_engine},ditron-lower-task-to-device' | FileCheck %s
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-reduce=one_shot},ditron-lower-task-to-device' | FileCheck %s --check-prefix=ONE
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-reduce=two_shot engine=copy_engine},ditron-lower-task-to-device' | FileCheck %s --check-prefix=TWO
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-reduce=two_shot},ditron-lower-task-to-device' | FileCheck %s --check-prefix=TWOL
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-reduce=push},ditron-lower-task-to-device' | FileCheck %s --check-prefix=PUSH
// RUN: ditron-opt %s --split-input-file --pass-pipeline='ditron-tile{all-reduce=push},ditron-lower-task-to-device{end-barrier=always}' | FileCheck %s --check-prefix=PUSHB

// Standalone reduce_scatter of an argument: stage it into a symmetric buffer, count chunks on their owners.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-LABEL: func.func @reduce_scatter
  // CHECK: %[[P:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_partial"} : () -> memref<256x32xbf16>
  // CHECK: scf.for %{{.*}} = %c1 to %c5 step %c1 {
  // CHECK: "ditron_device.copy"(%arg0, %[[P]], {{.*}}) {ditron.lane = "comm", ditron.role = "rs.stage"
  // CHECK: "ditron_device.signal"({{.*}}) {ditron.lane = "comm", ditron.role = "rs.count", op = "add", scope = "sys"}
  // CHECK: %[[EXPECT:.*]] = arith.muli %c4, %arg2 : index
  // CHECK: "ditron_device.wait"(%{{.*}}, %[[EXPECT]], %{{.*}}) {ditron.lane = "reduce", ditron.role = "rs.await"
  // CHECK: "ditron_device.launch"(%[[P]], %arg1, {{.*}}kernel = @reduce
  func.func @reduce_scatter(%x: tensor<256x32xbf16>) -> tensor<64x32xbf16> attributes {ditron.view = "local"} {
    %y = "ditron_task.reduce_scatter"(%x) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (tensor<256x32xbf16>) -> tensor<64x32xbf16>
    return %y : tensor<64x32xbf16>
  }
}

// -----

// all_reduce: one-shot staged by the copy engine counts every chunk on every rank; one-shot on SMs (the model's
// choice) is one reduce launch that publishes x tile by tile and waits per tile; two-shot staged by the copy engine
// reduces by owner, then all-gathers; two-shot on SMs (the model's choice for two_shot) is one launch that also
// takes the ar_reduced pad (publish.scatter): each tile summed on one rank, written back into the peers' P. push
// is one launch whose src is an inbox of W - 1 slabs (here one) that the peers store into, W - 1 slots per tile.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // ONE-LABEL: func.func @all_reduce
  // ONE: %[[P:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_partial"} : () -> memref<128x32xbf16>
  // ONE: %[[PUB:.*]] = "ditron_device.alloc_symmetric"() {name = "ar_published"} : () -> memref<[[#TILES:]]xi32>
  // ONE-NOT: ditron_device.copy
  // ONE-NOT: ditron_device.signal
  // ONE: "ditron_device.launch"(%[[P]], %arg1, %arg0, %[[PUB]], %arg2) {ditron.lane = "compute", ditron.role = "ar.one_launch"{{.*}}kernel = @reduce
  // ONE-NEXT: "ditron_device.barrier"
  // ONE: func.func private @reduce({{.*}}args = ["src", "dst", "x", "published", "epoch"]{{.*}}publish = {arg = "published", copy_from = "x", scope = "sys", value_arg = "epoch"}
  // CHECK-LABEL: func.func @all_reduce
  // CHECK: "ditron_device.alloc_symmetric"() {name = "ar_count"} : () -> memref<{{[0-9]+}}xi32>
  // CHECK: "ditron_device.signal"({{.*}}) {{{.*}}ditron.role = "rs.count", op = "add"
  // CHECK: "ditron_device.launch"({{.*}}ditron.role = "rs.reduce"
  // CHECK-NOT: ag.pull
  // TWO-LABEL: func.func @all_reduce
  // TWO: "ditron_device.alloc_symmetric"() {name = "ag_gather"} : () -> memref<128x32xbf16>
  // TWO: "ditron_device.launch"({{.*}}ditron.role = "rs.reduce"
  // TWO: "ditron_device.signal"({{.*}}ditron.lane = "reduce", ditron.role = "ag.ready"
  // TWO: "ditron_device.copy"({{.*}}ditron.role = "ag.pull"
  // TWO: "ditron_device.wait"({{.*}}ditron.lane = "compute", ditron.role = "ar.join"
  // TWOL-LABEL: func.func @all_reduce
  // TWOL: %[[P:.*]] = "ditron_device.alloc_symmetric"() {name = "rs_partial"} : () -> memref<128x32xbf16>
  // TWOL: %[[PUB:.*]] = "ditron_device.alloc_symmetric"() {name = "ar_published"} : () -> memref<[[#TILES:]]xi32>
  // TWOL: %[[RED:.*]] = "ditron_device.alloc_symmetric"() {name = "ar_reduced"} : () -> memref<[[#TILES]]xi32>
  // TWOL-NOT: ditron_device.copy
  // TWOL: "ditron_device.launch"(%[[P]], %arg1, %arg0, %[[PUB]], %arg2, %[[RED]]) {ditron.lane = "compute", ditron.role = "ar.one_launch"{{.*}}kernel = @reduce
  // TWOL-NEXT: "ditron_device.barrier"
  // TWOL: func.func private @reduce({{.*}}args = ["src", "dst", "x", "published", "epoch", "reduced"]{{.*}}publish = {arg = "published", copy_from = "x", scatter = "reduced", scope = "sys", value_arg = "epoch"}
  // The push fences itself (every rank waits on every peer's stores each call): no end barrier, and its inbox
  // rotates so that a fast peer's stores of call e + 1 land in the copy call e - 1 read. end-barrier=always keeps
  // the barrier and one inbox. Each slot's one waiter clears it (consume): the pad is ditron.consumed.
  // PUSH-LABEL: func.func @all_reduce
  // PUSH-SAME: ditron.fence = "waits"
  // PUSH: %[[IN:.*]] = "ditron_device.alloc_symmetric"() {ditron.rotate, name = "ar_inbox"} : () -> memref<128x32xbf16>
  // PUSH: %[[PUB:.*]] = "ditron_device.alloc_symmetric"() {ditron.consumed, name = "ar_published"} : () -> memref<1xi32>
  // PUSH-NOT: ditron_device.copy
  // PUSH: "ditron_device.launch"(%[[IN]], %arg1, %arg0, %[[PUB]], %arg2) {ditron.lane = "compute", ditron.role = "ar.one_launch"{{.*}}kernel = @reduce
  // PUSH-NEXT: return
  // PUSHB-LABEL: func.func @all_reduce
  // PUSHB-NOT: ditron.fence
  // PUSHB: "ditron_device.alloc_symmetric"() {name = "ar_inbox"} : () -> memref<128x32xbf16>
  // PUSHB: ditron.role = "ar.one_launch"
  // PUSHB-NEXT: "ditron_device.barrier"
  // PUSH: func.func private @reduce({{.*}}args = ["src", "dst", "x", "published", "epoch"]{{.*}}publish = {arg = "published", consume = true, copy_from = "x", push = 1 : i64, scope = "sys", value_arg = "epoch"}, rows = 128 : i64, src_col = 0 : i64, src_extent = 128 : i64
  func.func @all_reduce(%x: tensor<128x32xbf16>) -> tensor<128x32xbf16> attributes {ditron.view = "local"} {
    %y = "ditron_task.all_reduce"(%x) {axis = "tp", reduce = "sum"} : (tensor<128x32xbf16>) -> tensor<128x32xbf16>
    return %y : tensor<128x32xbf16>
  }
}

// -----

// Local compute: GEMM and elementwise kernels on stream 0; an intermediate lives in a symmetric buffer; a returned
// argument is copied into its output.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  // CHECK-LABEL: func.func @local
  // CHECK-NOT: ditron_device.barrier
  // CHECK: %[[MM:.*]] = "ditron_device.alloc_symmetric"() {name = "mm"} : () -> memref<64x32xbf16>
  // CHECK: "ditron_device.launch"(%arg0, %arg1, %[[MM]]) {{{.*}}ditron.role = "gemm"{{.*}}kernel = @gemm
  // CHECK: "ditron_device.launch"(%[[MM]], %arg0, %arg2) {{{.*}}ditron.role = "elementwise"{{.*}}kernel = @elementwise
  // CHECK: "ditron_device.copy"(%arg0, %arg3, {{.*}}) {ditron.lane = "compute", ditron.role = "output", engine = "copy_engine"}
  // CHECK: func.func private @elementwise({{.*}}args = ["x0", "x1", "y"]{{.*}}fn = "silu_mul"
  func.func @local(%x: tensor<64x32xbf16>, %w: tensor<32x32xbf16>) -> (tensor<64x32xbf16>, tensor<64x32xbf16>) attributes {ditron.view = "local"} {
    %p = "ditron_task.matmul"(%x, %w) : (tensor<64x32xbf16>, tensor<32x32xbf16>) -> tensor<64x32xbf16>
    %y = "ditron_task.elementwise"(%p, %x) {fn = "silu_mul"} : (tensor<64x32xbf16>, tensor<64x32xbf16>) -> tensor<64x32xbf16>
    return %y, %x : tensor<64x32xbf16>, tensor<64x32xbf16>
  }
}

// -----

// One rank: a fused pair is just its GEMM; a collective is a local copy.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  // CHECK-LABEL: func.func @one_rank
  // CHECK-NOT: ag_ready
  // CHECK: "ditron_device.launch"(%arg0, %arg1, %arg2) {{{.*}}kernel = @gemm
  // CHECK-NOT: wait = {
  func.func @one_rank(%x: tensor<64x32xbf16>, %w: tensor<32x32xbf16>) -> tensor<64x32xbf16> attributes {ditron.view = "local"} {
    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}} : (tensor<64x32xbf16>) -> tensor<64x32xbf16>
    %y = "ditron_task.matmul"(%g, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}} : (tensor<64x32xbf16>, tensor<32x32xbf16>) -> tensor<64x32xbf16>
    return %y : tensor<64x32xbf16>
  }
}
