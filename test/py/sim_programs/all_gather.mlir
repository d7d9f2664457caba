// all_gather over W ranks, pull-based, copy engine. Placeholders (a dollar sign and a name in braces) are filled in by the tests
// (string.Template): W ranks, M rows per rank, K columns, T element type.
//
// Each rank stages its shard in a symmetric buffer, tells every peer (slot <rank> := epoch), and pulls the
// peers' shards in ring order as their flags arrive. After pulling from p, it tells p (slot W + <rank> := epoch)
// that it is done reading p's stage, so that p's next call does not overwrite the stage too early.
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: ${W}>}} {
  func.func @all_gather(%x: memref<${M}x${K}x${T}> {ditron.io = "in"},
                        %out: memref<${WM}x${K}x${T}> {ditron.io = "out"},
                        %epoch: index {ditron.io = "epoch"})
      attributes {ditron.level = "device", ditron.axis = "tp"} {
    %stage = "ditron_device.alloc_symmetric"() {name = "ag_stage"} : () -> memref<${M}x${K}x${T}>
    %sig = "ditron_device.alloc_symmetric"() {name = "ag_sig"} : () -> memref<${W2}xi32>
    %r = "ditron_device.rank"() : () -> index
    %w = "ditron_device.num_ranks"() : () -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cm = arith.constant ${M} : index
    %ck = arith.constant ${K} : index
    %prev = arith.subi %epoch, %c1 : index
    // Stream 0: wait until every peer has read my previous stage, restage, announce.
    scf.for %i = %c1 to %w step %c1 {
      %q0 = arith.addi %r, %i : index
      %q = arith.remui %q0, %w : index
      %slot = arith.addi %w, %q : index
      "ditron_device.wait"(%sig, %prev, %slot) {where = "stream"} : (memref<${W2}xi32>, index, index) -> ()
    }
    "ditron_device.copy"(%x, %stage, %r, %r, %c0, %c0, %c0, %c0, %cm, %ck) {engine = "copy_engine"}
        : (memref<${M}x${K}x${T}>, memref<${M}x${K}x${T}>, index, index, index, index, index, index, index, index) -> ()
    scf.for %q = %c0 to %w step %c1 {
      "ditron_device.signal"(%sig, %q, %r, %epoch) {op = "set", scope = "sys"} : (memref<${W2}xi32>, index, index, index) -> ()
    }
    // Stream 1: my own rows, then the peers' in ring order.
    %row = arith.muli %r, %cm : index
    "ditron_device.copy"(%x, %out, %r, %r, %c0, %c0, %row, %c0, %cm, %ck) {engine = "copy_engine", stream = 1 : i64}
        : (memref<${M}x${K}x${T}>, memref<${WM}x${K}x${T}>, index, index, index, index, index, index, index, index) -> ()
    scf.for %i = %c1 to %w step %c1 {
      %p0 = arith.addi %r, %i : index
      %p = arith.remui %p0, %w : index
      "ditron_device.wait"(%sig, %epoch, %p) {where = "stream", stream = 1 : i64} : (memref<${W2}xi32>, index, index) -> ()
      %prow = arith.muli %p, %cm : index
      "ditron_device.copy"(%stage, %out, %p, %r, %c0, %c0, %prow, %c0, %cm, %ck) {engine = "copy_engine", stream = 1 : i64}
          : (memref<${M}x${K}x${T}>, memref<${WM}x${K}x${T}>, index, index, index, index, index, index, index, index) -> ()
      %done = arith.addi %w, %r : index
      "ditron_device.signal"(%sig, %p, %done, %epoch) {op = "set", scope = "sys", stream = 1 : i64} : (memref<${W2}xi32>, index, index, index) -> ()
    }
    return
  }
}
