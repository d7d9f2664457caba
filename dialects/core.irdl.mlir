// ditron_core: distributed primitives inside a core kernel (Triton TTIR, whose tt.* ops stay unregistered).
// Pointers are Triton pointer types (!tt.ptr<T>) or tensors of them, hence the open type constraints.
irdl.dialect @ditron_core {
  irdl.operation @rank {
    %i = irdl.is i32
    irdl.results(rank: %i)
  }
  irdl.operation @num_ranks {
    %i = irdl.is i32
    irdl.results(num_ranks: %i)
  }
  // The address of the same symmetric-heap location on rank `peer`.
  irdl.operation @symm_at {
    %p = irdl.any
    %peer = irdl.is i32
    %q = irdl.any
    irdl.operands(ptr: %p, peer: %peer)
    irdl.results(result: %q)
  }
  // Spin until every slot that ptr points at is >= value; returns a token that orders later loads after it.
  irdl.operation @wait {
    %p = irdl.any
    %v = irdl.is i32
    %t = irdl.is i32
    irdl.operands(ptr: %p, value: %v)
    irdl.results(token: %t)
    %scope = irdl.base "#builtin.string"
    %sem = irdl.base "#builtin.string"
    irdl.attributes { "scope" = %scope, "semantic" = %sem }
  }
  // value, made to depend on token (the loads that use it stay after the wait).
  irdl.operation @consume_token {
    %x = irdl.any
    %t = irdl.is i32
    %y = irdl.any
    irdl.operands(value: %x, token: %t)
    irdl.results(result: %y)
  }
  // The slot ptr points at, on rank peer: set to value or add value, with release semantics at scope; or clear it
  // (op "clear", semantic "relaxed"): 0 if it still holds value (a compare-and-swap), a waiter consuming its signal.
  irdl.operation @notify {
    %p = irdl.any
    %peer = irdl.is i32
    %v = irdl.is i32
    irdl.operands(ptr: %p, peer: %peer, value: %v)
    %op = irdl.base "#builtin.string"
    %scope = irdl.base "#builtin.string"
    %sem = irdl.base "#builtin.string"
    irdl.attributes { "op" = %op, "scope" = %scope, "semantic" = %sem }
  }
  // All ranks meet, through the signal pad that signals points at (one slot per rank).
  irdl.operation @barrier_all {
    %p = irdl.any
    irdl.operands(signals: %p)
    %scope = irdl.base "#builtin.string"
    irdl.attributes { "scope" = %scope }
  }
}
