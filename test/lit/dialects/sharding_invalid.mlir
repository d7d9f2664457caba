// RUN: not ditron-opt %s --split-input-file 2>&1 | FileCheck %s
// Negative cases for the module's ditron.mesh attribute, the ditron.sharding of function arguments and results,
// and ops of dialects ditron does not accept (dialects/verify.py, dialects/sharding.py).

// CHECK: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:1: error: 'builtin.module' op 'ditron.mesh' must be a dictionary {axes = [...], shape = array<i64: ...>}, got ["tp"]
module attributes {ditron.mesh = ["tp"]} {
}

// -----

// CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:1: error: 'builtin.module' op 'ditron.mesh' needs both 'axes' and 'shape', got {axes = ["tp"]}
module attributes {ditron.mesh = {axes = ["tp"]}} {
}

// -----

// CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:1: error: 'builtin.module' op 'ditron.mesh' axes must be an array of strings, got [1, 2]
module attributes {ditron.mesh = {axes = [1, 2], shape = array<i64: 2, 2>}} {
}

// -----

// CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:1: error: 'builtin.module' op 'ditron.mesh' shape must be array<i64: ...>, got [4]
module attributes {ditron.mesh = {axes = ["tp"], shape = [4]}} {
}

// -----

// CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:1: error: 'builtin.module' op unknown 'ditron.mesh' key 'devices' (known: axes, shape)
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>, devices = [0, 1, 2, 3]}} {
}

// -----

// CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:1: error: 'builtin.module' op mesh has 2 axis names but 1 sizes
module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 4>}} {
}

// -----

// CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:1: error: 'builtin.module' op mesh axis names repeat: ['tp', 'tp']
module attributes {ditron.mesh = {axes = ["tp", "tp"], shape = array<i64: 2, 2>}} {
}

// -----

// A broken mesh is reported once, not again at every use of its axes.
// CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:1: error: 'builtin.module' op mesh axis sizes must be >= 1, got [0]
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 0>}} {
  func.func @uses_broken_mesh(%x: tensor<8xf32> {ditron.sharding = {dims = [["tp"]]}}) -> tensor<8xf32> {
    %0 = "ditron_task.all_reduce"(%x) {axis = "tp", reduce = "sum"} : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:3: error: 'func.func' op argument 0: a sharding must be a dictionary {dims = [{{\[}}axes...], ...]}, got "tp"
  func.func @sharding_not_dict(%x: tensor<8xf32> {ditron.sharding = "tp"}) -> tensor<8xf32> {
    return %x : tensor<8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:3: error: 'func.func' op argument 0: a sharding needs 'dims', got {partial = ["tp"]}
  func.func @sharding_no_dims(%x: tensor<8xf32> {ditron.sharding = {partial = ["tp"]}}) -> tensor<8xf32> {
    return %x : tensor<8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:3: error: 'func.func' op argument 0: sharding 'dims' must be an array of arrays of axis names, got "tp"
  func.func @sharding_dims_not_array(%x: tensor<8xf32> {ditron.sharding = {dims = "tp"}}) -> tensor<8xf32> {
    return %x : tensor<8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:3: error: 'func.func' op argument 0: sharding 'dims' entry must be an array of strings, got "tp"
  func.func @sharding_dims_entry(%x: tensor<8xf32> {ditron.sharding = {dims = ["tp"]}}) -> tensor<8xf32> {
    return %x : tensor<8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:3: error: 'func.func' op argument 0: sharding 'partial' must be an array of strings, got "tp"
  func.func @sharding_partial(%x: tensor<8xf32> {ditron.sharding = {dims = [[]], partial = "tp"}}) -> tensor<8xf32> {
    return %x : tensor<8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:3: error: 'func.func' op argument 0: sharding 'padded' must be true or false, got 1 : i64
  func.func @sharding_padded(%x: tensor<8xf32> {ditron.sharding = {dims = [["tp"]], padded = 1}}) -> tensor<8xf32> {
    return %x : tensor<8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:3: error: 'func.func' op argument 0: unknown sharding key 'replicated' (known: dims, partial, padded)
  func.func @sharding_unknown_key(%x: tensor<8xf32> {ditron.sharding = {dims = [[]], replicated = true}}) -> tensor<8xf32> {
    return %x : tensor<8xf32>
  }
}

// -----

// CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:1: error: 'func.func' op argument 0 is sharded over mesh axes but the module has no 'ditron.mesh' attribute
func.func @sharding_without_mesh(%x: tensor<8xf32> {ditron.sharding = {dims = [["tp"]]}}) -> tensor<8xf32> {
  return %x : tensor<8xf32>
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:3: error: 'func.func' op argument 0: only ranked tensors can be sharded, got memref<8xf32>
  func.func @sharding_memref(%x: memref<8xf32> {ditron.sharding = {dims = [["tp"]]}}) {
    return
  }
}

// -----

module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  // CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:3: error: 'func.func' op argument 0: sharding has 1 dims but the tensor has rank 2
  func.func @sharding_rank(%x: tensor<8x8xf32> {ditron.sharding = {dims = [["tp"]]}}) -> tensor<8x8xf32> {
    return %x : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 4>}} {
  // CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:3: error: 'func.func' op argument 1: mesh axis 'ep' is not in the mesh (axes: dp, tp)
  func.func @sharding_unknown_axis(%x: tensor<8xf32>, %y: tensor<8xf32> {ditron.sharding = {dims = [["ep"]]}}) -> tensor<8xf32> {
    return %x : tensor<8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 4>}} {
  // CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:3: error: 'func.func' op argument 0: mesh axis 'tp' is used twice in one sharding
  func.func @sharding_axis_twice(%x: tensor<8x8xf32> {ditron.sharding = {dims = [["tp"], []], partial = ["tp"]}}) -> tensor<8x8xf32> {
    return %x : tensor<8x8xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 4>}} {
  // CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:3: error: 'func.func' op argument 0: dim 0 of size 12 does not divide evenly into 8 shards; pad the tensor or mark the sharding 'padded = true'
  func.func @sharding_uneven(%x: tensor<12xf32> {ditron.sharding = {dims = [["dp", "tp"]]}}) -> tensor<12xf32> {
    return %x : tensor<12xf32>
  }
}

// -----

module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 4>}} {
  // CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:3: error: 'func.func' op result 0: dim 1 of size 6 does not divide evenly into 4 shards; pad the tensor or mark the sharding 'padded = true'
  func.func @result_sharding(%x: tensor<8x6xf32>) -> (tensor<8x6xf32> {ditron.sharding = {dims = [[], ["tp"]]}}) {
    return %x : tensor<8x6xf32>
  }
}

// -----

func.func @unknown_dialect(%x: tensor<8xf32>) -> tensor<8xf32> {
  // CHECK-NEXT: {{.*}}sharding_invalid.mlir:[[# @LINE + 1]]:8: error: 'mhlo.add' op is unknown: dialect 'mhlo' is not one ditron accepts
  %0 = "mhlo.add"(%x, %x) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
