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
  // C[M, N] = A[M, K] @ B[K, N]; optional transpose_b = true: B given as [N, K] (nn.Linear's layout), read in place;
  // optional fast_accum = true (fp8 operands): the tensor cores accumulate all of K (torch's use_fast_accum)
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
  // With split_sizes (tensor<W x i32/i64>, computed on the device), parts are of those run-time sizes: either one
  // result with the dim dynamic (unbounded: no device lowering), or the bounded form, two results: the output with
  // the dim static = its capacity (rows 0 .. sum(recv_counts) hold what arrived, in source rank order) and
  // recv_counts (tensor<W x i32>: the rows each rank sent here; sum(recv_counts) > capacity = overflow).
  irdl.operation @all_to_all {
    %x = irdl.base "!builtin.tensor"
    %s = irdl.base "!builtin.tensor"
    %y = irdl.base "!builtin.tensor"
    %c = irdl.base "!builtin.tensor"
    irdl.operands(input: %x, split_sizes: optional %s)
    irdl.results(output: %y, recv_counts: optional %c)
    %sd = irdl.base "#builtin.integer"
    %cd = irdl.base "#builtin.integer"
    %axis = irdl.base "#builtin.string"
    irdl.attributes { "split_dim" = %sd, "concat_dim" = %cd, "axis" = %axis }
  }
  // A user's kernel program (ditron.register_op) called as an op: the program named by "kernel" runs over mesh
  // axis "axis"; in_shardings / out_shardings (one ditron.sharding dictionary per operand / result) are its
  // sharding rule: how it takes its inputs and gives its outputs; "params" are its builder's own parameters.
  // Operands and results of their own types: one optional group each (IRDL unifies a variadic's types), with
  // operandSegmentSizes / resultSegmentSizes; at most 8 inputs and 4 outputs.
  irdl.operation @custom {
    %i0 = irdl.base "!builtin.tensor"
    %i1 = irdl.base "!builtin.tensor"
    %i2 = irdl.base "!builtin.tensor"
    %i3 = irdl.base "!builtin.tensor"
    %i4 = irdl.base "!builtin.tensor"
    %i5 = irdl.base "!builtin.tensor"
    %i6 = irdl.base "!builtin.tensor"
    %i7 = irdl.base "!builtin.tensor"
    %o0 = irdl.base "!builtin.tensor"
    %o1 = irdl.base "!builtin.tensor"
    %o2 = irdl.base "!builtin.tensor"
    %o3 = irdl.base "!builtin.tensor"
    irdl.operands(in0: optional %i0, in1: optional %i1, in2: optional %i2, in3: optional %i3, in4: optional %i4, in5: optional %i5, in6: optional %i6, in7: optional %i7)
    irdl.results(out0: optional %o0, out1: optional %o1, out2: optional %o2, out3: optional %o3)
    %k = irdl.base "#builtin.string"
    %ax = irdl.base "#builtin.string"
    %ins = irdl.base "#builtin.array"
    %outs = irdl.base "#builtin.array"
    %p = irdl.base "#builtin.dictionary"
    irdl.attributes { "kernel" = %k, "axis" = %ax, "in_shardings" = %ins, "out_shardings" = %outs, "params" = %p }
  }
}
