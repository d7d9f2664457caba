// GEMM+RS: out[M, N] on rank r = rows r*M.. of sum over ranks q of A_q[WM, K] @ B_q[K, N] (Megatron: the K dim
// sharded, the result row-sharded). Placeholders (a dollar sign and a name in braces) are filled in by the tests:
// W, M rows per rank, WM = W*M, K, N; the GEMM kernel @rs_gemm (GRID_G programs, BM rows per tile, T = tiles
// along M, TN tiles along N) adds 1 to done[<tile row>] on its own rank after each tile; the reduce kernel
// @rs_reduce (GRID_R programs) sums chunk <rank> over all ranks' partials.
//
// Stream 0: once every rank is done reading my previous partials (rs_ack), run the GEMM into the symmetric c_buf.
// Stream 1: for each chunk p (the peers' first), wait until the GEMM tiles covering it have all notified
// (done[s] >= epoch * TN: counts accumulate over calls), then tell p (rs_ready[<my rank>] := epoch on p).
// Stream 2: once every rank's chunk for me is complete, reduce them, then ack every rank.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: ${W}>}} {
  func.func @gemm_rs(%a: memref<${WM}x${K}xbf16> {ditron.io = "in"},
                     %b: memref<${K}x${N}xbf16> {ditron.io = "in"},
                     %out: memref<${M}x${N}xbf16> {ditron.io = "out"},
                     %epoch: index {ditron.io = "epoch"})
      attributes {ditron.level = "device", ditron.axis = "tp"} {
    %cbuf = "ditron_device.alloc_symmetric"() {name = "c_buf"} : () -> memref<${WM}x${N}xbf16>
    %done = "ditron_device.alloc_symmetric"() {name = "c_done"} : () -> memref<${T}xi32>
    %ready = "ditron_device.alloc_symmetric"() {name = "rs_ready"} : () -> memref<${W}xi32>
    %ack = "ditron_device.alloc_symmetric"() {name = "rs_ack"} : () -> memref<${W}xi32>
    %r = "ditron_device.rank"() : () -> index
    %w = "ditron_device.num_ranks"() : () -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cm = arith.constant ${M} : index
    %cbm = arith.constant ${BM} : index
    %ctn = arith.constant ${TN} : index
    %prev = arith.subi %epoch, %c1 : index
    %row = arith.muli %r, %cm : index
    %want = arith.muli %epoch, %ctn : index
    // Stream 0: the GEMM, once nobody reads my previous partials.
    scf.for %q = %c0 to %w step %c1 {
      "ditron_device.wait"(%ack, %prev, %q) {where = "stream"} : (memref<${W}xi32>, index, index) -> ()
    }
    "ditron_device.launch"(%a, %b, %cbuf, %done) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, kernel = @rs_gemm, grid = array<i64: ${GRID_G}>,
        sm_budget = ${GRID_G} : i64, tile_order = "grouped"}
        : (memref<${WM}x${K}xbf16>, memref<${K}x${N}xbf16>, memref<${WM}x${N}xbf16>, memref<${T}xi32>) -> ()
    // Stream 1: chunk p of my partials complete -> tell its owner.
    scf.for %i = %c1 to %w step %c1 {
      %p0 = arith.addi %r, %i : index
      %p = arith.remui %p0, %w : index
      %first = arith.muli %p, %cm : index
      %s0 = arith.divui %first, %cbm : index
      %next = arith.addi %first, %cm : index
      %s1 = arith.ceildivui %next, %cbm : index
      scf.for %s = %s0 to %s1 step %c1 {
        "ditron_device.wait"(%done, %want, %s) {where = "stream", stream = 1 : i64} : (memref<${T}xi32>, index, index) -> ()
      }
      "ditron_device.signal"(%ready, %p, %r, %epoch) {op = "set", scope = "sys", stream = 1 : i64} : (memref<${W}xi32>, index, index, index) -> ()
    }
    %own0 = arith.divui %row, %cbm : index
    %ownend = arith.addi %row, %cm : index
    %own1 = arith.ceildivui %ownend, %cbm : index
    scf.for %s = %own0 to %own1 step %c1 {
      "ditron_device.wait"(%done, %want, %s) {where = "stream", stream = 1 : i64} : (memref<${T}xi32>, index, index) -> ()
    }
    "ditron_device.signal"(%ready, %r, %r, %epoch) {op = "set", scope = "sys", stream = 1 : i64} : (memref<${W}xi32>, index, index, index) -> ()
    // Stream 2: every rank's partials of my rows are complete -> reduce -> ack.
    scf.for %q = %c0 to %w step %c1 {
      "ditron_device.wait"(%ready, %epoch, %q) {where = "stream", stream = 2 : i64} : (memref<${W}xi32>, index, index) -> ()
    }
    "ditron_device.launch"(%cbuf, %out, %row) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, kernel = @rs_reduce, grid = array<i64: ${GRID_R}>,
        sm_budget = ${GRID_R} : i64, tile_order = "row_major", stream = 2 : i64}
        : (memref<${WM}x${N}xbf16>, memref<${M}x${N}xbf16>, index) -> ()
    scf.for %q = %c0 to %w step %c1 {
      "ditron_device.signal"(%ack, %q, %r, %epoch) {op = "set", scope = "sys", stream = 2 : i64} : (memref<${W}xi32>, index, index, index) -> ()
    }
    return
  }
}
