// AG+GEMM: C[W*M, N] = all_gather(A)[W*M, K] @ B[K, N] on every rank (Megatron: rows of x sharded, W1 column-
// sharded). Placeholders (a dollar sign and a name in braces) are filled in by the tests: W ranks, M rows per rank,
// K, N, GRID programs of the GEMM kernel @ag_gemm, which the tests build from ditron.kernels.gemm.
//
// Pull-based, copy engine, overlapped: stream 0 stages the own shard into the symmetric gather buffer and
// launches the GEMM at once; the GEMM waits per tile (in the kernel) until the rows it needs have arrived
// (ag_arrived[p] >= epoch, one slot per rank's chunk) and starts on its own rows (rank_rotated). Stream 1 pulls
// the peers' chunks in ring order as their ag_ready flags come, marks each arrived, and acks the peer (ag_ack),
// so that the peer does not restage before every reader is done. ag_done[0] tells stream 1 that the previous
// call's GEMM no longer reads the gather buffer.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: ${W}>}} {
  func.func @ag_gemm(%a: memref<${M}x${K}xbf16> {ditron.io = "in"},
                     %b: memref<${K}x${N}xbf16> {ditron.io = "in"},
                     %c: memref<${WM}x${N}xbf16> {ditron.io = "out"},
                     %epoch: index {ditron.io = "epoch"})
      attributes {ditron.level = "device", ditron.axis = "tp"} {
    %buf = "ditron_device.alloc_symmetric"() {name = "ag_buf"} : () -> memref<${WM}x${K}xbf16>
    %ready = "ditron_device.alloc_symmetric"() {name = "ag_ready"} : () -> memref<${W}xi32>
    %arrived = "ditron_device.alloc_symmetric"() {name = "ag_arrived"} : () -> memref<${W}xi32>
    %ack = "ditron_device.alloc_symmetric"() {name = "ag_ack"} : () -> memref<${W}xi32>
    %done = "ditron_device.alloc_symmetric"() {name = "ag_done"} : () -> memref<1xi32>
    %r = "ditron_device.rank"() : () -> index
    %w = "ditron_device.num_ranks"() : () -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cm = arith.constant ${M} : index
    %ck = arith.constant ${K} : index
    %prev = arith.subi %epoch, %c1 : index
    %row = arith.muli %r, %cm : index
    // Stream 0: every peer has read my previous stage -> restage, mark it arrived here, announce it.
    scf.for %i = %c1 to %w step %c1 {
      %q0 = arith.addi %r, %i : index
      %q = arith.remui %q0, %w : index
      "ditron_device.wait"(%ack, %prev, %q) {where = "stream"} : (memref<${W}xi32>, index, index) -> ()
    }
    "ditron_device.copy"(%a, %buf, %r, %r, %c0, %c0, %row, %c0, %cm, %ck) {engine = "copy_engine"}
        : (memref<${M}x${K}xbf16>, memref<${WM}x${K}xbf16>, index, index, index, index, index, index, index, index) -> ()
    "ditron_device.signal"(%arrived, %r, %r, %epoch) {op = "set", scope = "sys"} : (memref<${W}xi32>, index, index, index) -> ()
    scf.for %i = %c1 to %w step %c1 {
      %q0 = arith.addi %r, %i : index
      %q = arith.remui %q0, %w : index
      "ditron_device.signal"(%ready, %q, %r, %epoch) {op = "set", scope = "sys"} : (memref<${W}xi32>, index, index, index) -> ()
    }
    // Stream 0: the GEMM, waiting in the kernel for each tile's rows.
    "ditron_device.launch"(%buf, %b, %c, %arrived, %epoch) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, kernel = @ag_gemm_kernel, grid = array<i64: ${GRID}>,
        sm_budget = ${GRID} : i64, tile_order = "rank_rotated"}
        : (memref<${WM}x${K}xbf16>, memref<${K}x${N}xbf16>, memref<${WM}x${N}xbf16>, memref<${W}xi32>, index) -> ()
    "ditron_device.signal"(%done, %r, %c0, %epoch) {op = "set", scope = "sys"} : (memref<1xi32>, index, index, index) -> ()
    // Stream 1: the previous GEMM is done with the buffer -> pull the peers' chunks in ring order.
    "ditron_device.wait"(%done, %prev, %c0) {where = "stream", stream = 1 : i64} : (memref<1xi32>, index, index) -> ()
    scf.for %i = %c1 to %w step %c1 {
      %p0 = arith.addi %r, %i : index
      %p = arith.remui %p0, %w : index
      "ditron_device.wait"(%ready, %epoch, %p) {where = "stream", stream = 1 : i64} : (memref<${W}xi32>, index, index) -> ()
      %prow = arith.muli %p, %cm : index
      "ditron_device.copy"(%buf, %buf, %p, %r, %prow, %c0, %prow, %c0, %cm, %ck) {engine = "copy_engine", stream = 1 : i64}
          : (memref<${WM}x${K}xbf16>, memref<${WM}x${K}xbf16>, index, index, index, index, index, index, index, index) -> ()
      "ditron_device.signal"(%arrived, %r, %p, %epoch) {op = "set", scope = "sys", stream = 1 : i64} : (memref<${W}xi32>, index, index, index) -> ()
      "ditron_device.signal"(%ack, %p, %r, %epoch) {op = "set", scope = "sys", stream = 1 : i64} : (memref<${W}xi32>, index, index, index) -> ()
    }
    return
  }
}
