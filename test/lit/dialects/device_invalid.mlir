// RUN: not ditron-opt %s --split-input-file 2>&1 | FileCheck %s
// Negative cases for ditron_device: what IRDL checks, then one case per rule of dialects/verify.py.

func.func @unknown_op() {
  // CHECK: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: unregistered operation 'ditron_device.fence' found in dialect ('ditron_device') that does not allow unknown operations
  "ditron_device.fence"() : () -> ()
  return
}

// -----

func.func @rank_type() -> i32 {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_device.rank' op expected 'index' but got 'i32'
  %0 = "ditron_device.rank"() : () -> i32
  return %0 : i32
}

// -----

func.func @alloc_tensor() {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_device.alloc_symmetric' op expected base type 'builtin.memref' but got 'builtin.tensor'
  %0 = "ditron_device.alloc_symmetric"() {name = "buf"} : () -> tensor<8xf32>
  return
}

// -----

func.func @alloc_no_name() {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_device.alloc_symmetric' op attribute "name" is expected but not provided
  %0 = "ditron_device.alloc_symmetric"() : () -> memref<8xf32>
  return
}

// -----

func.func @copy_tensor(%t: tensor<8xf32>, %m: memref<8xf32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.copy' op expected base type 'builtin.memref' but got 'builtin.tensor'
  "ditron_device.copy"(%t, %m, %i, %i, %i, %i, %i) {engine = "sm"} : (tensor<8xf32>, memref<8xf32>, index, index, index, index, index) -> ()
  return
}

// -----

func.func @copy_i32_rank(%m: memref<8xf32>, %r: i32, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.copy' op expected 'index' but got 'i32'
  "ditron_device.copy"(%m, %m, %r, %i, %i, %i, %i) {engine = "sm"} : (memref<8xf32>, memref<8xf32>, i32, index, index, index, index) -> ()
  return
}

// -----

func.func @signal_missing_scope(%s: memref<8xi32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.signal' op attribute "scope" is expected but not provided
  "ditron_device.signal"(%s, %i, %i, %i) {op = "set"} : (memref<8xi32>, index, index, index) -> ()
  return
}

// -----

func.func @wait_too_few(%s: memref<8xi32>) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.wait' op expects at least 2 operands, but got 1
  "ditron_device.wait"(%s) {where = "stream"} : (memref<8xi32>) -> ()
  return
}

// -----

func.func @launch_kernel_string() {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.launch' op expected base attribute 'builtin.symbol_ref' but got 'builtin.string'
  "ditron_device.launch"() {kernel = "k", grid = array<i64: 1>, sm_budget = 1 : i64, tile_order = "row_major", operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : () -> ()
  return
}

// -----

func.func @alloc_dynamic() {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_device.alloc_symmetric' op symmetric buffers need a static shape (every rank allocates the same size), got memref<?xf32>
  %0 = "ditron_device.alloc_symmetric"() {name = "buf"} : () -> memref<?xf32>
  return
}

// -----

func.func @alloc_name_kind() {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:8: error: 'ditron_device.alloc_symmetric' op expected base attribute 'builtin.string' but got 'builtin.symbol_ref'
  %0 = "ditron_device.alloc_symmetric"() {name = @buf} : () -> memref<8xf32>
  return
}

// -----

func.func @copy_engine(%m: memref<8xf32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.copy' op has engine 'dma'; expected one of: copy_engine, sm
  "ditron_device.copy"(%m, %m, %i, %i, %i, %i, %i) {engine = "dma"} : (memref<8xf32>, memref<8xf32>, index, index, index, index, index) -> ()
  return
}

// -----

// engines the executor does not implement are refused, not accepted and then run as another
func.func @copy_engine_tma(%m: memref<8xf32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.copy' op has engine 'tma'; expected one of: copy_engine, sm
  "ditron_device.copy"(%m, %m, %i, %i, %i, %i, %i) {engine = "tma"} : (memref<8xf32>, memref<8xf32>, index, index, index, index, index) -> ()
  return
}

// -----

func.func @copy_engine_rdma(%m: memref<8xf32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.copy' op has engine 'rdma'; expected one of: copy_engine, sm
  "ditron_device.copy"(%m, %m, %i, %i, %i, %i, %i) {engine = "rdma"} : (memref<8xf32>, memref<8xf32>, index, index, index, index, index) -> ()
  return
}

// -----

func.func @copy_ranks(%a: memref<8xf32>, %b: memref<8x8xf32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.copy' op source rank 1 differs from destination rank 2
  "ditron_device.copy"(%a, %b, %i, %i, %i, %i, %i) {engine = "sm"} : (memref<8xf32>, memref<8x8xf32>, index, index, index, index, index) -> ()
  return
}

// -----

func.func @copy_element_types(%a: memref<8xf32>, %b: memref<8xbf16>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.copy' op element types differ: source f32, destination bf16
  "ditron_device.copy"(%a, %b, %i, %i, %i, %i, %i) {engine = "sm"} : (memref<8xf32>, memref<8xbf16>, index, index, index, index, index) -> ()
  return
}

// -----

func.func @copy_region_operands(%a: memref<8x8xf32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.copy' op expects 6 region operands for rank-2 memrefs (source offsets, destination offsets, sizes), got 3
  "ditron_device.copy"(%a, %a, %i, %i, %i, %i, %i) {engine = "sm"} : (memref<8x8xf32>, memref<8x8xf32>, index, index, index, index, index) -> ()
  return
}

// -----

func.func @signal_op(%s: memref<8xi32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.signal' op has op 'xor'; expected one of: set, add
  "ditron_device.signal"(%s, %i, %i, %i) {op = "xor", scope = "sys"} : (memref<8xi32>, index, index, index) -> ()
  return
}

// -----

func.func @signal_scope(%s: memref<8xi32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.signal' op has scope 'cta'; expected one of: gpu, sys
  "ditron_device.signal"(%s, %i, %i, %i) {op = "set", scope = "cta"} : (memref<8xi32>, index, index, index) -> ()
  return
}

// -----

func.func @signal_pad_2d(%s: memref<2x4xi32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.signal' op signal pads are 1-d memrefs of i32 or i64, got memref<2x4xi32>
  "ditron_device.signal"(%s, %i, %i, %i) {op = "set", scope = "sys"} : (memref<2x4xi32>, index, index, index) -> ()
  return
}

// -----

func.func @signal_pad_float(%s: memref<8xf32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.signal' op signal pads are 1-d memrefs of i32 or i64, got memref<8xf32>
  "ditron_device.signal"(%s, %i, %i, %i) {op = "add", scope = "gpu"} : (memref<8xf32>, index, index, index) -> ()
  return
}

// -----

func.func @wait_where(%s: memref<8xi32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.wait' op has where 'host'; expected one of: stream, kernel
  "ditron_device.wait"(%s, %i, %i) {where = "host"} : (memref<8xi32>, index, index) -> ()
  return
}

// -----

func.func @wait_no_slot(%s: memref<8xi32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.wait' op waits on no slot; give at least one
  "ditron_device.wait"(%s, %i) {where = "stream"} : (memref<8xi32>, index) -> ()
  return
}

// -----

func.func @wait_pad(%s: memref<8xi16>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.wait' op signal pads are 1-d memrefs of i32 or i64, got memref<8xi16>
  "ditron_device.wait"(%s, %i, %i) {where = "kernel"} : (memref<8xi16>, index, index) -> ()
  return
}

// -----

func.func @barrier_pad(%s: memref<f32>) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.barrier' op signal pads are 1-d memrefs of i32 or i64, got memref<f32>
  "ditron_device.barrier"(%s) : (memref<f32>) -> ()
  return
}

// -----

func.func @launch_undefined() {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.launch' op launches '@gemm', which is not defined in the module
  "ditron_device.launch"() {kernel = @gemm, grid = array<i64: 1>, sm_budget = 1 : i64, tile_order = "row_major", operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : () -> ()
  return
}

// -----

func.func private @k()
func.func @launch_grid_empty() {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.launch' op grid must have 1 to 3 positive sizes, got []
  "ditron_device.launch"() {kernel = @k, grid = array<i64>, sm_budget = 1 : i64, tile_order = "row_major", operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : () -> ()
  return
}

// -----

func.func private @k()
func.func @launch_grid_4d() {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.launch' op grid must have 1 to 3 positive sizes, got [1, 1, 1, 1]
  "ditron_device.launch"() {kernel = @k, grid = array<i64: 1, 1, 1, 1>, sm_budget = 1 : i64, tile_order = "row_major", operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : () -> ()
  return
}

// -----

func.func private @k()
func.func @launch_grid_zero() {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.launch' op grid must have 1 to 3 positive sizes, got [4, 0]
  "ditron_device.launch"() {kernel = @k, grid = array<i64: 4, 0>, sm_budget = 1 : i64, tile_order = "row_major", operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : () -> ()
  return
}

// -----

func.func private @k()
func.func @launch_grid_i32() {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.launch' op attribute 'grid' must be array<i64: ...>, got array<i32: 4>
  "ditron_device.launch"() {kernel = @k, grid = array<i32: 4>, sm_budget = 1 : i64, tile_order = "row_major", operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : () -> ()
  return
}

// -----

func.func private @k()
func.func @launch_nested_symbol() {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.launch' op attribute 'kernel' must be a flat symbol reference like @name, got @k::@inner
  "ditron_device.launch"() {kernel = @k::@inner, grid = array<i64: 4>, sm_budget = 1 : i64, tile_order = "row_major", operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : () -> ()
  return
}

// -----

func.func private @k()
func.func @launch_sm_budget() {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.launch' op sm_budget must be >= 1, got 0
  "ditron_device.launch"() {kernel = @k, grid = array<i64: 4>, sm_budget = 0 : i64, tile_order = "row_major", operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : () -> ()
  return
}

// -----

func.func private @k()
func.func @launch_sm_budget_bool() {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.launch' op attribute 'sm_budget' must be a 64-bit integer, got true
  "ditron_device.launch"() {kernel = @k, grid = array<i64: 4>, sm_budget = true, tile_order = "row_major", operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : () -> ()
  return
}

// -----

func.func private @k()
func.func @launch_tile_order() {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.launch' op has tile_order 'zigzag'; expected one of: row_major, grouped, rank_rotated
  "ditron_device.launch"() {kernel = @k, grid = array<i64: 4>, sm_budget = 4 : i64, tile_order = "zigzag", operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : () -> ()
  return
}

// -----

func.func private @k(memref<8xf32>, index)
func.func @launch_no_segments(%m: memref<8xf32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.launch' op 'operandSegmentSizes' attribute is expected but not provided; a launch has 16 optional argument slots: write operandSegmentSizes = array<i32: ...> with 16 entries, 1 for each of its arguments and then 0 (ditron's Launch.build does this)
  "ditron_device.launch"(%m, %i) {kernel = @k, grid = array<i64: 1>, sm_budget = 1 : i64, tile_order = "row_major"} : (memref<8xf32>, index) -> ()
  return
}

// -----

func.func private @k(memref<8xf32>, index)
func.func @launch_segment_gap(%m: memref<8xf32>, %i: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.launch' op operandSegmentSizes must be 1 for each of its 2 argument(s), then 0; got [1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
  "ditron_device.launch"(%m, %i) {kernel = @k, grid = array<i64: 1>, sm_budget = 1 : i64, tile_order = "row_major", operandSegmentSizes = array<i32: 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (memref<8xf32>, index) -> ()
  return
}

// -----

// The passes' own attributes: a string lane and role, an integer stream, no integer wider than 64 bits anywhere
// (reading one would abort the process).
func.func @pass_attributes(%p: memref<4xi32>, %e: index, %c: index) {
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.wait' op attribute 'ditron.lane' must be a string, got 0 : i64
  "ditron_device.wait"(%p, %e, %c) {ditron.lane = 0 : i64, where = "stream"} : (memref<4xi32>, index, index) -> ()
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.wait' op attribute 'stream' must be an integer (the stream's number), got unit
  "ditron_device.wait"(%p, %e, %c) {stream, where = "stream"} : (memref<4xi32>, index, index) -> ()
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.wait' op attribute 'stream' holds 99999999999999999999999 : i128, an integer wider than 64 bits; ditron reads integers of at most 64 bits
  "ditron_device.wait"(%p, %e, %c) {stream = 99999999999999999999999 : i128, where = "stream"} : (memref<4xi32>, index, index) -> ()
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:8: error: 'arith.constant' op attribute 'value' holds 99999999999999999999999 : i128
  %w = arith.constant 99999999999999999999999 : i128
  // CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:3: error: 'ditron_device.wait' op attribute 'ditron.tiling' holds 4 : i65
  "ditron_device.wait"(%p, %e, %c) {ditron.tiling = {kind = "x", l = [1, {m = 4 : i65}]}, where = "stream"} : (memref<4xi32>, index, index) -> ()
  return
}

// -----

// A kernel record holding an attribute no record field can be (the passes that read it failed without a location).
// CHECK-NEXT: {{.*}}device_invalid.mlir:[[# @LINE + 1]]:1: error: 'func.func' op attribute 'ditron.kernel' must be a dictionary of ints, floats, strings, bools, lists and dictionaries (a kernel record), got {block_m = affine_map<(d0) -> (d0)>, template = "elementwise"}
func.func private @k(memref<8xf32>) attributes {ditron.kernel = {template = "elementwise", block_m = affine_map<(d0) -> (d0)>}}
