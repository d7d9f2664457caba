// RUN: ditron-opt %s | FileCheck %s
// RUN: ditron-opt %s --pass-pipeline=ditron-partition | FileCheck %s --check-prefix=PART
// RUN: ditron-opt %s --pass-pipeline=ditron-partition,ditron-tile | FileCheck %s --check-prefix=TILE
// ditron_task.custom: a user kernel program (ditron.register_op) called with its sharding rule. The verifier
// accepts it; ditron-partition converts each operand to the sharding the rule takes (here: x arrives split by
// rows, the rule takes it replicated: an all_gather first) and types the results by the rule; ditron-tile records
// the world and SM budget the program is built for.

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @f(%x: tensor<64x32xf32> {ditron.sharding = {dims = [["tp"], []]}},
               %w: tensor<32x48xf32> {ditron.sharding = {dims = [[], ["tp"]]}})
      -> (tensor<64x48xf32> {ditron.sharding = {dims = [[], ["tp"]]}}) {
    // CHECK: "ditron_task.custom"(%arg0, %arg1) {axis = "tp", in_shardings = [{dims = {{\[\[\], \[\]\]}}}, {dims = {{\[\[\], \["tp"\]\]}}}], kernel = "my.mm", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, out_shardings = [{dims = {{\[\[\], \["tp"\]\]}}}], params = {block = 16 : i64}, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (tensor<64x32xf32>, tensor<32x48xf32>) -> tensor<64x48xf32>
    // PART: %[[G:.*]] = "ditron_task.all_gather"(%arg0) {axis = "tp", dim = 0 : i64} : (tensor<16x32xf32>) -> tensor<64x32xf32>
    // PART-NEXT: %[[Y:.*]] = "ditron_task.custom"(%[[G]], %arg1) {axis = "tp", {{.*}}kernel = "my.mm", {{.*}}params = {block = 16 : i64}{{.*}}} : (tensor<64x32xf32>, tensor<32x12xf32>) -> tensor<64x12xf32>
    // PART-NEXT: return %[[Y]] : tensor<64x12xf32>
    // TILE: "ditron_task.custom"{{.*}}ditron.tiling = {kind = "custom", sm_budget = 132 : i64, target = "cuda:90", world = 4 : i64}
    %y = "ditron_task.custom"(%x, %w) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>, kernel = "my.mm", axis = "tp",
                                       in_shardings = [{dims = [[], []]}, {dims = [[], ["tp"]]}],
                                       out_shardings = [{dims = [[], ["tp"]]}], params = {block = 16 : i64}}
        : (tensor<64x32xf32>, tensor<32x48xf32>) -> tensor<64x48xf32>
    return %y : tensor<64x48xf32>
  }
}
