// Each rank sends its block to its right neighbour (push): y on rank r+1 = x on rank r. The receiver waits for
// slot 0 >= epoch - ${LAG}: with LAG = 0 this is right; with LAG = 1 the wait is satisfied too early (in call 1
// by the initial zero), so the read of the pushed block is not ordered after the push. ${BARRIER} is empty, or a
// barrier before the push (so that the previous call's reader is done with the buffer).
module {
  func.func @shift(%x: memref<16x8xf32> {ditron.io = "in"}, %y: memref<16x8xf32> {ditron.io = "out"},
                   %epoch: index {ditron.io = "epoch"}) attributes {ditron.level = "device"} {
    %buf = "ditron_device.alloc_symmetric"() {name = "inbox"} : () -> memref<16x8xf32>
    %sig = "ditron_device.alloc_symmetric"() {name = "inbox_sig"} : () -> memref<1xi32>
    %bar = "ditron_device.alloc_symmetric"() {name = "bar_pad"} : () -> memref<1xi32>
    %r = "ditron_device.rank"() : () -> index
    %w = "ditron_device.num_ranks"() : () -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c16 = arith.constant 16 : index
    %c8 = arith.constant 8 : index
    %lag = arith.constant ${LAG} : index
    %r1 = arith.addi %r, %c1 : index
    %right = arith.remui %r1, %w : index
    %want = arith.subi %epoch, %lag : index
    ${BARRIER}
    "ditron_device.copy"(%x, %buf, %r, %right, %c0, %c0, %c0, %c0, %c16, %c8) {engine = "copy_engine"} : (memref<16x8xf32>, memref<16x8xf32>, index, index, index, index, index, index, index, index) -> ()
    "ditron_device.signal"(%sig, %right, %c0, %epoch) {op = "set", scope = "sys"} : (memref<1xi32>, index, index, index) -> ()
    "ditron_device.wait"(%sig, %want, %c0) {where = "stream"} : (memref<1xi32>, index, index) -> ()
    "ditron_device.copy"(%buf, %y, %r, %r, %c0, %c0, %c0, %c0, %c16, %c8) {engine = "copy_engine"} : (memref<16x8xf32>, memref<16x8xf32>, index, index, index, index, index, index, index, index) -> ()
    return
  }
}
