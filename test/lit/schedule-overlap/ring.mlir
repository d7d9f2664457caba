// RUN: ditron-opt %S/Inputs/ag_gemm.mlir --pass-pipeline='ditron-tile{all-gather=pull chunk-rows=32 engine=copy_engine},ditron-lower-task-to-device,ditron-schedule-overlap{pull=ring}' | FileCheck %s
// RUN: ditron-opt %S/Inputs/ag_gemm.mlir --pass-pipeline='ditron-tile{all-gather=pull chunk-rows=32 engine=copy_engine},ditron-lower-task-to-device,ditron-schedule-overlap{copy-streams=3}' | FileCheck %s --check-prefix=SPREAD

// Ring: offer only to rank-1 (the offer loop runs d = 3 .. 4), pull from rank+1, forward to rank-1 what arrived
// unless it is rank-1's own shard (s < 3).
// CHECK-LABEL: func.func @ag_gemm
// CHECK: %[[R:.*]] = "ditron_device.rank"
// CHECK: %[[NR:.*]] = "ditron_device.num_ranks"
// CHECK: scf.for %{{.*}} = %c3{{.*}} to %c4 step %c1 {
// CHECK-NEXT: arith.addi
// CHECK-NEXT: arith.remui
// CHECK-NEXT: "ditron_device.signal"({{.*}}ditron.role = "ag.offer_signal"
// CHECK-NEXT: } {ditron.gather = 0 : i64, ditron.group = 0 : i64, ditron.role = "ag.offer"}
// CHECK: scf.for %[[S:.*]] = %c1 to %c4 step %c1 {
// CHECK: %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[NEXT:.*]] = arith.addi %[[R]], %[[ONE]] : index
// CHECK-NEXT: %[[SRC:.*]] = arith.remui %[[NEXT]], %[[NR]] : index
// CHECK: "ditron_device.copy"(%{{.*}}, %{{.*}}, %[[SRC]], %[[R]], {{.*}}ditron.role = "ag.pull"
// CHECK: "ditron_device.signal"({{.*}}ditron.role = "ag.arrive"
// CHECK: %[[LAST:.*]] = arith.cmpi ult, %[[S]], %{{.*}} : index
// CHECK: scf.if %[[LAST]] {
// CHECK: %[[PREV:.*]] = arith.remui %{{.*}}, %[[NR]] : index
// CHECK: "ditron_device.signal"(%{{.*}}, %[[PREV]], {{.*}}ditron.role = "ag.forward"{{.*}}stream = 1 : i64
// CHECK: } {ditron.gather = 0 : i64, ditron.group = 0 : i64, ditron.pull = "ring", ditron.role = "ag.pull_loop"}

// Direct pulls over 3 streams: one pull loop per peer distance.
// SPREAD-LABEL: func.func @ag_gemm
// SPREAD: scf.for %{{.*}} = %c1{{.*}} to %c2{{.*}} step
// SPREAD: ditron.role = "ag.pull"{{.*}}stream = 1 : i64
// SPREAD: scf.for %{{.*}} = %c2{{.*}} to %c3{{.*}} step
// SPREAD: ditron.role = "ag.pull"{{.*}}stream = 2 : i64
// SPREAD: scf.for %{{.*}} = %c3{{.*}} to %c4{{.*}} step
// SPREAD: ditron.role = "ag.pull"{{.*}}stream = 3 : i64
