// all_reduce over W ranks, one-shot: out[WM, N] = sum over ranks q of x_q on every rank. Placeholders (a dollar
// sign and a name in braces) are filled in by the tests: W, M rows per chunk (one chunk per rank), WM = W*M, N,
// GRID programs of the reduce kernel @ar_reduce (ditron.kernels.reduce over all WM rows, with an in-kernel wait:
// before reading a tile from rank q it waits until q's ar_ready slots covering the tile's rows are >= epoch).
//
// Stream 0 stages x chunk by chunk in the symmetric ar_buf and marks each chunk ready on its own pad. Stream 1
// runs the reduce at once (it waits per tile, on the peers' pads), then acks every rank; stream 0 restages only
// once every reader of its previous call is done.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: ${W}>}} {
  func.func @all_reduce(%x: memref<${WM}x${N}xbf16> {ditron.io = "in"},
                        %out: memref<${WM}x${N}xbf16> {ditron.io = "out"},
                        %epoch: index {ditron.io = "epoch"})
      attributes {ditron.level = "device", ditron.axis = "tp"} {
    %buf = "ditron_device.alloc_symmetric"() {name = "ar_buf"} : () -> memref<${WM}x${N}xbf16>
    %ready = "ditron_device.alloc_symmetric"() {name = "ar_ready"} : () -> memref<${W}xi32>
    %ack = "ditron_device.alloc_symmetric"() {name = "ar_ack"} : () -> memref<${W}xi32>
    %r = "ditron_device.rank"() : () -> index
    %w = "ditron_device.num_ranks"() : () -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cm = arith.constant ${M} : index
    %cn = arith.constant ${N} : index
    %prev = arith.subi %epoch, %c1 : index
    // Stream 0: nobody reads my previous partials any more -> stage chunk by chunk, mark each ready.
    scf.for %q = %c0 to %w step %c1 {
      "ditron_device.wait"(%ack, %prev, %q) {where = "stream"} : (memref<${W}xi32>, index, index) -> ()
    }
    scf.for %i = %c0 to %w step %c1 {
      %p0 = arith.addi %r, %i : index
      %p = arith.remui %p0, %w : index
      %prow = arith.muli %p, %cm : index
      "ditron_device.copy"(%x, %buf, %r, %r, %prow, %c0, %prow, %c0, %cm, %cn) {engine = "copy_engine"}
          : (memref<${WM}x${N}xbf16>, memref<${WM}x${N}xbf16>, index, index, index, index, index, index, index, index) -> ()
      "ditron_device.signal"(%ready, %r, %p, %epoch) {op = "set", scope = "sys"} : (memref<${W}xi32>, index, index, index) -> ()
    }
    // Stream 1: the reduce waits per tile on every source rank's pad; then ack every rank.
    "ditron_device.launch"(%buf, %out, %ready, %epoch) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, kernel = @ar_reduce, grid = array<i64: ${GRID}>,
        sm_budget = ${GRID} : i64, tile_order = "row_major", stream = 1 : i64}
        : (memref<${WM}x${N}xbf16>, memref<${WM}x${N}xbf16>, memref<${W}xi32>, index) -> ()
    scf.for %q = %c0 to %w step %c1 {
      "ditron_device.signal"(%ack, %q, %r, %epoch) {op = "set", scope = "sys", stream = 1 : i64} : (memref<${W}xi32>, index, index, index) -> ()
    }
    return
  }
}
