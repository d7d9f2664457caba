// ditron_task: the Task level. A program over whole tensors (global view) or rank-local shards (SPMD view).
// IRDL checks arity and attribute kinds; the rules it cannot express live in dialects/verify.py.
irdl.dialect @ditron_task {
  // %y = shard %x {sharding = {dims = [["tp"], []], partial = []}}: annotates %x's sharding over the mesh.
  irdl.operation @shard {
    %in = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(input: %in)
    irdl.results(output: %out)
    %sh = irdl.base "#builtin.dictionary"
    irdl.attributes { "sharding" = %sh }
  }
  // C[M, N] = A[M, K] @ B[K, N]
  irdl.operation @matmul {
    %a = irdl.base "!builtin.tensor"
    %b = irdl.base "!builtin.tensor"
    %c = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %a, rhs: %b)
    irdl.results(result: %c)
  }
  // MoE experts: C[T, N] = A[T, K] @ B[e, K, N] for the rows of group e; group_sizes[E] counts the rows per group.
  irdl.operation @grouped_matmul {
    %a = irdl.base "!builtin.tensor"
    %b = irdl.base "!builtin.tensor"
    %g = irdl.base "!builtin.tensor"
    %c = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %a, rhs: %b, group_sizes: %g)
    irdl.results(result: %c)
  }
  // Pointwise fn (add, sub, mul, div, max, min, neg, relu, silu, gelu, exp, cast, ...) over same-shaped tensors; a
  // binary fn's second operand may be a [N] bias of an [M, N] result (broadcast over rows); cast changes the
  // element type.
  irdl.operation @elementwise {
    %x = irdl.base "!builtin.tensor"
    %x2 = irdl.base "!builtin.tensor"
    %y = irdl.base "!builtin.tensor"
    irdl.operands(input: %x, more: variadic %x2)
    irdl.results(result: %y)
    %fn = irdl.base "#builtin.string"
    irdl.attributes { "fn" = %fn }
  }
  irdl.operation @all_gather {
    %x = irdl.base "!builtin.tensor"
    %y = irdl.base "!builtin.tensor"
    irdl.operands(input: %x)
    irdl.results(output: %y)
    %dim = irdl.base "#builtin.integer"
    %axis = irdl.base "#builtin.string"
    irdl.attributes { "dim" = %dim, "axis" = %axis }
  }
  irdl.operation @reduce_scatter {
    %x = irdl.base "!builtin.tensor"
    %y = irdl.base "!builtin.tensor"
    irdl.operands(input: %x)
    irdl.results(output: %y)
    %dim = irdl.base "#builtin.integer"
    %axis = irdl.base "#builtin.string"
    %red = irdl.base "#builtin.string"
    irdl.attributes { "dim" = %dim, "axis" = %axis, "reduce" = %red }
  }
  irdl.operation @all_reduce {
    %x = irdl.base "!builtin.tensor"
    %y = irdl.base "!builtin.tensor"
    irdl.operands(input: %x)
    irdl.results(output: %y)
    %axis = irdl.base "#builtin.string"
    %red = irdl.base "#builtin.string"
    irdl.attributes { "axis" = %axis, "reduce" = %red }
  }
  // Splits split_dim into axis-size parts, sends part r to rank r, concatenates what arrives along concat_dim.
  // With split_sizes (tensor<W x i32/i64>), parts are of those run-time sizes and the output dim is dynamic.
  irdl.operation @all_to_all {
    %x = irdl.base "!builtin.tensor"
    %s = irdl.base "!builtin.tensor"
    %y = irdl.base "!builtin.tensor"
    irdl.operands(input: %x, split_sizes: optional %s)
    irdl.results(output: %y)
    %sd = irdl.base "#builtin.integer"
    %cd = irdl.base "#builtin.integer"
    %axis = irdl.base "#builtin.string"
    irdl.attributes { "split_dim" = %sd, "concat_dim" = %cd, "axis" = %axis }
  }
}
