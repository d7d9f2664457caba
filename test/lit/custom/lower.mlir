// RUN: ditron-opt %s --load %S/Inputs/push_gather.py --pass-pipeline=ditron-device | FileCheck %s
// RUN: ditron sim %s --load %S/Inputs/push_gather.py --calls 2 --seeds 0,1 | FileCheck %s --check-prefix=SIM
// RUN: not ditron-opt %s --load %S/Inputs/no_such_file.py --pass-pipeline=ditron-device 2>&1 | FileCheck %s --check-prefix=NOFILE
// ditron-lower-task-to-device inlines a registered kernel program (Inputs/push_gather.py, loaded first): its
// symmetric buffer and pads are allocated with the function's, its copies and signals of stream 1 go on the comm
// lane, its wait, copy and barrier on the compute lane, located at the builder's lines; the relu after it is a
// built-in op. ditron sim lowers it the same way and compares with the reference, the op's own (x itself).

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 3>}} {
  func.func @f(%x: tensor<15x8xf32> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<15x8xf32> {ditron.sharding = {dims = [[], []]}}) {
    %y = "ditron_task.custom"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>,
                                   resultSegmentSizes = array<i32: 1, 0, 0, 0>, kernel = "push_gather", axis = "tp",
                                   in_shardings = [{dims = [["tp"], []]}], out_shardings = [{dims = [[], []]}],
                                   params = {}} : (tensor<15x8xf32>) -> tensor<15x8xf32>
    %z = "ditron_task.elementwise"(%y) {fn = "relu"} : (tensor<15x8xf32>) -> tensor<15x8xf32>
    return %z : tensor<15x8xf32>
  }
}

// CHECK-LABEL: func.func @f(
// CHECK-SAME: memref<5x8xf32> {ditron.io = "in"
// CHECK-SAME: memref<15x8xf32> {ditron.io = "out"
// CHECK-DAG: "ditron_device.alloc_symmetric"() {name = "g"} : () -> memref<15x8xf32>
// CHECK-DAG: "ditron_device.alloc_symmetric"() {name = "ready"} : () -> memref<3xi32>
// CHECK: scf.for
// CHECK: "ditron_device.copy"({{.*}}) {ditron.lane = "comm", engine = "copy_engine", stream = 1 : i64}
// CHECK: "ditron_device.signal"({{.*}}) {ditron.lane = "comm", op = "set", scope = "sys", stream = 1 : i64}
// CHECK: "ditron_device.wait"({{.*}}) {ditron.lane = "compute", stream = 0 : i64
// CHECK: "ditron_device.copy"({{.*}}) {ditron.lane = "compute", engine = "copy_engine", stream = 0 : i64}
// CHECK: "ditron_device.barrier"
// CHECK: "ditron_device.launch"({{.*}}) {{.*}}kernel = @elementwise

// SIM: ditron.sim: @f, 3 rank(s), seed 0, 2 call(s)
// SIM-NEXT: OK: no deadlock, no race, outputs equal to the reference
// SIM: ditron.sim: @f, 3 rank(s), seed 1, 2 call(s)
// SIM-NEXT: OK: no deadlock, no race, outputs equal to the reference

// NOFILE: error: --load {{.*}}no_such_file.py: no such file
