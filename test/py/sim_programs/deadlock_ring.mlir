// A ring exchange written wrong: every rank first waits for its left neighbour's flag, then raises the flag of
// its right neighbour. Nobody ever signals first: a deadlock on every rank.
module {
  func.func @ring(%x: memref<4x8xf32> {ditron.io = "in"}, %y: memref<4x8xf32> {ditron.io = "out"},
                  %epoch: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    %buf = "ditron_device.alloc_symmetric"() {name = "ring_buf"} : () -> memref<4x8xf32>
    %sig = "ditron_device.alloc_symmetric"() {name = "ring_sig"} : () -> memref<1xi32>
    %r = "ditron_device.rank"() : () -> index
    %w = "ditron_device.num_ranks"() : () -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c8 = arith.constant 8 : index
    %r1 = arith.addi %r, %c1 : index
    %right = arith.remui %r1, %w : index
    "ditron_device.copy"(%x, %buf, %r, %r, %c0, %c0, %c0, %c0, %c4, %c8) {engine = "copy_engine"} : (memref<4x8xf32>, memref<4x8xf32>, index, index, index, index, index, index, index, index) -> ()
    "ditron_device.wait"(%sig, %epoch, %c0) {where = "stream"} : (memref<1xi32>, index, index) -> ()
    "ditron_device.signal"(%sig, %right, %c0, %epoch) {op = "set", scope = "sys"} : (memref<1xi32>, index, index, index) -> ()
    "ditron_device.copy"(%buf, %y, %r, %r, %c0, %c0, %c0, %c0, %c4, %c8) {engine = "copy_engine"} : (memref<4x8xf32>, memref<4x8xf32>, index, index, index, index, index, index, index, index) -> ()
    return
  }
}
