// ditron_device: the Device level. One rank-generic function per program: what moves where, who waits for what.
// Regions are given by index operands (offsets and sizes may be run-time values); the rules IRDL cannot
// express (operand counts per memref rank, engine and scope names) live in dialects/verify.py.
irdl.dialect @ditron_device {
  // This rank and the world size, as run-time values: one program serves every rank.
  irdl.operation @rank {
    %i = irdl.is index
    irdl.results(rank: %i)
  }
  irdl.operation @num_ranks {
    %i = irdl.is index
    irdl.results(num_ranks: %i)
  }
  // A buffer of the same shape on every rank, addressable by peers. Signal pads are memref<N x i32> buffers.
  irdl.operation @alloc_symmetric {
    %m = irdl.base "!builtin.memref"
    irdl.results(buffer: %m)
    %name = irdl.base "#builtin.string"
    irdl.attributes { "name" = %name }
  }
  // Copy a region of src on src_rank into a region of dst on dst_rank.
  // coords = src offsets (rank r) ++ dst offsets (r) ++ sizes (r); engine: "copy_engine" | "sm".
  irdl.operation @copy {
    %s = irdl.base "!builtin.memref"
    %d = irdl.base "!builtin.memref"
    %sr = irdl.is index
    %dr = irdl.is index
    %c = irdl.is index
    irdl.operands(src: %s, dst: %d, src_rank: %sr, dst_rank: %dr, coords: variadic %c)
    %engine = irdl.base "#builtin.string"
    irdl.attributes { "engine" = %engine }
  }
  // signals[slot] on target_rank := value ("set") or += value ("add"), with release semantics at scope.
  irdl.operation @signal {
    %m = irdl.base "!builtin.memref"
    %r = irdl.is index
    %s = irdl.is index
    %v = irdl.is index
    irdl.operands(signals: %m, target_rank: %r, slot: %s, value: %v)
    %op = irdl.base "#builtin.string"
    %scope = irdl.base "#builtin.string"
    irdl.attributes { "op" = %op, "scope" = %scope }
  }
  // Block until every local signals[slot] >= value; where: "stream" (host stream) | "kernel" (inside a kernel).
  irdl.operation @wait {
    %m = irdl.base "!builtin.memref"
    %v = irdl.is index
    %s = irdl.is index
    irdl.operands(signals: %m, value: %v, slots: variadic %s)
    %where = irdl.base "#builtin.string"
    irdl.attributes { "where" = %where }
  }
  // Every rank arrives and waits for all others, through the given signal pad.
  irdl.operation @barrier {
    %m = irdl.base "!builtin.memref"
    irdl.operands(signals: %m)
  }
  // Launch the core kernel `kernel` over grid, on at most sm_budget SMs, visiting tiles in tile_order.
  // Arguments: up to 16, of any types (memrefs, index scalars). IRDL binds one constraint variable to a single
  // type for all elements of a variadic group, so each argument is its own optional operand with its own
  // variable; operandSegmentSizes holds 16 entries, 1 for each argument passed (a prefix), then 0.
  irdl.operation @launch {
    %a0 = irdl.any
    %a1 = irdl.any
    %a2 = irdl.any
    %a3 = irdl.any
    %a4 = irdl.any
    %a5 = irdl.any
    %a6 = irdl.any
    %a7 = irdl.any
    %a8 = irdl.any
    %a9 = irdl.any
    %a10 = irdl.any
    %a11 = irdl.any
    %a12 = irdl.any
    %a13 = irdl.any
    %a14 = irdl.any
    %a15 = irdl.any
    irdl.operands(a0: optional %a0, a1: optional %a1, a2: optional %a2, a3: optional %a3, a4: optional %a4, a5: optional %a5, a6: optional %a6, a7: optional %a7, a8: optional %a8, a9: optional %a9, a10: optional %a10, a11: optional %a11, a12: optional %a12, a13: optional %a13, a14: optional %a14, a15: optional %a15)
    %k = irdl.base "#builtin.symbol_ref"
    %g = irdl.base "#builtin.dense_array"
    %b = irdl.base "#builtin.integer"
    %o = irdl.base "#builtin.string"
    irdl.attributes { "kernel" = %k, "grid" = %g, "sm_budget" = %b, "tile_order" = %o }
  }
}
