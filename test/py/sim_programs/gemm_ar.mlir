// GEMM+AR: out[WM, N] = sum over ranks q of A_q[WM, K] @ B_q[K, N] on every rank (Megatron row-parallel linear,
// replicated output). Placeholders (a dollar sign and a name in braces) are filled in by the tests: W, M rows per
// chunk, WM = W*M, K, N; the GEMM kernel @ar_gemm (GRID_G programs, T = tiles along M, TN tiles along N) adds 1 to
// done[<tile row>] on its own rank after each tile; the reduce kernel @ar_reduce (GRID_R programs) sums all rows
// over all ranks, waiting per tile until the source rank's done slots covering its rows reach epoch * TN.
//
// Stream 0: once every rank is done reading my previous partials (ar_ack), run the GEMM into the symmetric c_buf.
// Stream 1: run the reduce at once (it waits per tile, on every rank's pad), then ack every rank.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: ${W}>}} {
  func.func @gemm_ar(%a: memref<${WM}x${K}xbf16> {ditron.io = "in"},
                     %b: memref<${K}x${N}xbf16> {ditron.io = "in"},
                     %out: memref<${WM}x${N}xbf16> {ditron.io = "out"},
                     %epoch: index {ditron.io = "epoch"})
      attributes {ditron.level = "device", ditron.axis = "tp"} {
    %cbuf = "ditron_device.alloc_symmetric"() {name = "c_buf"} : () -> memref<${WM}x${N}xbf16>
    %done = "ditron_device.alloc_symmetric"() {name = "c_done"} : () -> memref<${T}xi32>
    %ack = "ditron_device.alloc_symmetric"() {name = "ar_ack"} : () -> memref<${W}xi32>
    %r = "ditron_device.rank"() : () -> index
    %w = "ditron_device.num_ranks"() : () -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %ctn = arith.constant ${TN} : index
    %prev = arith.subi %epoch, %c1 : index
    %want = arith.muli %epoch, %ctn : index
    scf.for %q = %c0 to %w step %c1 {
      "ditron_device.wait"(%ack, %prev, %q) {where = "stream"} : (memref<${W}xi32>, index, index) -> ()
    }
    "ditron_device.launch"(%a, %b, %cbuf, %done) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, kernel = @ar_gemm, grid = array<i64: ${GRID_G}>,
        sm_budget = ${GRID_G} : i64, tile_order = "grouped"}
        : (memref<${WM}x${K}xbf16>, memref<${K}x${N}xbf16>, memref<${WM}x${N}xbf16>, memref<${T}xi32>) -> ()
    "ditron_device.launch"(%cbuf, %out, %done, %want) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, kernel = @ar_reduce, grid = array<i64: ${GRID_R}>,
        sm_budget = ${GRID_R} : i64, tile_order = "row_major", stream = 1 : i64}
        : (memref<${WM}x${N}xbf16>, memref<${WM}x${N}xbf16>, memref<${T}xi32>, index) -> ()
    scf.for %q = %c0 to %w step %c1 {
      "ditron_device.signal"(%ack, %q, %r, %epoch) {op = "set", scope = "sys", stream = 1 : i64} : (memref<${W}xi32>, index, index, index) -> ()
    }
    return
  }
}
