// reduce_scatter over W ranks: out[M, N] on rank r = sum over ranks q of x_q[r*M : (r+1)*M]. Placeholders (a
// dollar sign and a name in braces) are filled in by the tests: W, M rows per rank, WM = W*M, N, GRID programs of
// the reduce kernel @rs_reduce (ditron.kernels.reduce: src_row = arg:row, no in-kernel wait).
//
// Stream 0 stages the chunks of x in the symmetric rs_buf, the peers' chunks first, and tells each chunk's owner
// (rs_ready[<my rank>] := epoch on the owner). Stream 1 waits until every rank's chunk for it is staged, reduces
// them (reading the peers' rs_buf), then acks every rank (rs_ack[<my rank>] := epoch), which restages only once
// every reader of its previous call is done.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: ${W}>}} {
  func.func @reduce_scatter(%x: memref<${WM}x${N}xbf16> {ditron.io = "in"},
                            %out: memref<${M}x${N}xbf16> {ditron.io = "out"},
                            %epoch: index {ditron.io = "epoch"})
      attributes {ditron.level = "device", ditron.axis = "tp"} {
    %buf = "ditron_device.alloc_symmetric"() {name = "rs_buf"} : () -> memref<${WM}x${N}xbf16>
    %ready = "ditron_device.alloc_symmetric"() {name = "rs_ready"} : () -> memref<${W}xi32>
    %ack = "ditron_device.alloc_symmetric"() {name = "rs_ack"} : () -> memref<${W}xi32>
    %r = "ditron_device.rank"() : () -> index
    %w = "ditron_device.num_ranks"() : () -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cm = arith.constant ${M} : index
    %cn = arith.constant ${N} : index
    %prev = arith.subi %epoch, %c1 : index
    %row = arith.muli %r, %cm : index
    // Stream 0: every rank is done reading my previous partials -> stage chunk by chunk, tell the owner.
    scf.for %q = %c0 to %w step %c1 {
      "ditron_device.wait"(%ack, %prev, %q) {where = "stream"} : (memref<${W}xi32>, index, index) -> ()
    }
    scf.for %i = %c1 to %w step %c1 {
      %p0 = arith.addi %r, %i : index
      %p = arith.remui %p0, %w : index
      %prow = arith.muli %p, %cm : index
      "ditron_device.copy"(%x, %buf, %r, %r, %prow, %c0, %prow, %c0, %cm, %cn) {engine = "copy_engine"}
          : (memref<${WM}x${N}xbf16>, memref<${WM}x${N}xbf16>, index, index, index, index, index, index, index, index) -> ()
      "ditron_device.signal"(%ready, %p, %r, %epoch) {op = "set", scope = "sys"} : (memref<${W}xi32>, index, index, index) -> ()
    }
    "ditron_device.copy"(%x, %buf, %r, %r, %row, %c0, %row, %c0, %cm, %cn) {engine = "copy_engine"}
        : (memref<${WM}x${N}xbf16>, memref<${WM}x${N}xbf16>, index, index, index, index, index, index, index, index) -> ()
    "ditron_device.signal"(%ready, %r, %r, %epoch) {op = "set", scope = "sys"} : (memref<${W}xi32>, index, index, index) -> ()
    // Stream 1: all W chunks of my rows staged -> reduce them -> ack every rank.
    scf.for %q = %c0 to %w step %c1 {
      "ditron_device.wait"(%ready, %epoch, %q) {where = "stream", stream = 1 : i64} : (memref<${W}xi32>, index, index) -> ()
    }
    "ditron_device.launch"(%buf, %out, %row) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, kernel = @rs_reduce, grid = array<i64: ${GRID}>, sm_budget = ${GRID} : i64,
        tile_order = "row_major", stream = 1 : i64} : (memref<${WM}x${N}xbf16>, memref<${M}x${N}xbf16>, index) -> ()
    scf.for %q = %c0 to %w step %c1 {
      "ditron_device.signal"(%ack, %q, %r, %epoch) {op = "set", scope = "sys", stream = 1 : i64} : (memref<${W}xi32>, index, index, index) -> ()
    }
    return
  }
}
