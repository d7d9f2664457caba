"""ditron-partition: task programs in the global view + shardings -> the local (SPMD) view + explicit collectives.

Input: ``func.func`` ops over whole-tensor types whose arguments/results carry ``ditron.sharding`` (none means
replicated), optional ``ditron_task.shard`` annotations inside, and the module's ``ditron.mesh``. Output: the same
functions over each rank's shard types (``Sharding.local_shape``), with ``all_gather`` / ``reduce_scatter`` /
``all_reduce`` (and ``all_to_all`` when an annotation moves a mesh axis from one dim to another) where the data must
move. Shard ops are gone; every argument and result keeps (or, when it had none, gets) its ``ditron.sharding``, so
later stages know the global view; the function gets ``ditron.view = "local"``.

Functions already marked ``ditron.view = "local"`` (hand-written SPMD programs, or a second run of this pass) and
device-level functions (``ditron.level``) are left alone: running the pass twice is a no-op. A function without
the mark that contains collectives is an error (it is a local-view program: mark it).

Megatron MLP on ``tp = 4`` (x rows-sharded, W1 column-sharded, W2 row-sharded, output rows-sharded)::

    %h = "ditron_task.matmul"(%x, %w1) : (tensor<8192x4096xbf16>, tensor<4096x14336xbf16>) -> tensor<8192x14336xbf16>
    %a = "ditron_task.elementwise"(%h) {fn = "gelu"} : ...
    %y = "ditron_task.matmul"(%a, %w2) : (tensor<8192x14336xbf16>, tensor<14336x4096xbf16>) -> tensor<8192x4096xbf16>

becomes (arguments now tensor<2048x4096xbf16>, tensor<4096x3584xbf16>, tensor<3584x4096xbf16>)::

    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<2048x4096xbf16>) -> tensor<8192x4096xbf16>
    %h = "ditron_task.matmul"(%g, %w1) : (...) -> tensor<8192x3584xbf16>
    %a = "ditron_task.elementwise"(%h) {fn = "gelu"} : (tensor<8192x3584xbf16>) -> tensor<8192x3584xbf16>
    %p = "ditron_task.matmul"(%a, %w2) : (...) -> tensor<8192x4096xbf16>           // partial sum over tp
    %y = "ditron_task.reduce_scatter"(%p) {axis = "tp", dim = 0 : i64, reduce = "sum"} : (...) -> tensor<2048x4096xbf16>

Rules (per value: which mesh axes split each dim, which axes it is an unreduced partial sum over):

* matmul A[M, K] @ B[K, N]: the contraction dims must agree; where one operand's K axes extend the other's, the
  extra axes are all-gathered (two different axes on K is an error). A contraction over a sharded K leaves a partial
  sum over K's axes. A mesh axis splitting both A's M and B's N is all-gathered out of A's rows (AG + GEMM). A
  partial operand stays partial (matmul is linear) unless the other operand uses that axis; then it is all-reduced.
* elementwise: every dim keeps the longest split common to all operands (the rest is all-gathered; a [N] bias
  operand shares the result's column dim, an [M, 1] row vector its row dim, a [1] scalar none; such a vector that
  is an argument is resharded at the function's start, before any matmul whose epilogue may read it). Partial sums
  flow through neg/copy, add/sub of operands partial over the same axes, mul (one partial factor), div (partial
  numerator), silu_mul (partial second operand); otherwise they are all-reduced first.
* a value converted to another sharding (shard ops, uses, results): dims split further in the value than wanted
  are all-gathered (minor axis first), an axis moving to another dim is an all_to_all, a partial sum becomes a
  reduce_scatter when the wanted sharding splits a dim over that axis next, else an all_reduce. Splitting a
  replicated dim would need a rank-dependent slice, which the task level does not have: that is an error.
* an unannotated result keeps the split it has (partial sums all-reduced) and gets that sharding written out.
* custom (a user's kernel program, ``ditron.register_op``): each operand is converted to the sharding its rule
  takes (``in_shardings``), each result is laid out as the rule gives it (``out_shardings``).
* any other op (e.g. grouped_matmul, arith on tensors) is kept as it is when all its operands are replicated.

Padding (``padded = true`` shardings whose dims the mesh does not divide): shards are ``ceil(size / n)`` long and
the padding is **zero** (the runtime pads arguments with zeros). Arguments and results with a padded sharding also
get ``ditron.global_shape = array<i64: ...>`` (their local type and sharding do not determine it). A gathered padded dim keeps its padded size; a
contraction over a padded dim needs one operand whose padding is still zero (pointwise fns with f(0) != 0 break
that), and a replicated result cannot drop padding: both are errors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mlir import ir

from ..dialects import task
from ..dialects.context import diagnostic_at
from ..dialects.opbase import walk_ops
from ..dialects.sharding import MESH_ATTR, SHARDING_ATTR, Mesh, Sharding, arg_sharding, result_sharding
from ..errors import PassError
from .registry import Pass
from .rewrite import erase_op

VIEW_ATTR = "ditron.view"
LEVEL_ATTR = "ditron.level"
# on arguments/results with a padded sharding: the global shape, which the local type and sharding do not determine
GLOBAL_SHAPE_ATTR = "ditron.global_shape"

# pointwise fns with f(0, ..., 0) == 0: they keep zero padding zero
_ZERO_PRESERVING = frozenset({"add", "sub", "mul", "max", "min", "neg", "relu", "silu", "gelu", "tanh", "copy", "cast",
                              "silu_mul"})

Dims = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class _Local:
    """A value of the local program standing for one global value: its global shape and how it is laid out."""

    value: ir.Value
    dims: Dims
    partial: tuple[str, ...]
    shape: tuple[int, ...]  # global shape
    pad_zero: bool = True  # its padding (if any) holds zeros

    @property
    def local(self) -> tuple[int, ...]:
        return tuple(ir.RankedTensorType(self.value.type).shape)

    @property
    def is_replicated(self) -> bool:
        return not any(self.dims) and not self.partial

    def describe(self) -> str:
        dims = ", ".join("[" + ", ".join(f'"{a}"' for a in d) + "]" for d in self.dims)
        text = f"{{dims = [{dims}]" + (f", partial = {list(self.partial)}" if self.partial else "") + "}"
        return text


def _is_prefix(a: tuple, b: tuple) -> bool:
    return len(a) <= len(b) and tuple(b[:len(a)]) == tuple(a)


def _operand_role(i: int, x, first) -> str | None:
    """How elementwise operand i (a _Local) lines up with the result (first: operand 0): "full" (its shape), "bias"
    ([N] over the columns), "row" ([M, 1] over the rows), "scalar" ([1]); None if it does not."""
    rank = len(first.dims)
    if i == 1 and rank == 2 and first.shape[1] != 1 and (x.shape == (1,) or
                                                           (len(x.shape) == 2 and x.shape[1] == 1)):
        return "scalar" if len(x.shape) == 1 else "row"
    if len(x.dims) == rank:
        return "full"
    return "bias" if i == 1 and rank == 2 and len(x.dims) == 1 else None


def _common_prefix(seqs: Sequence[tuple]) -> tuple:
    out = []
    for items in zip(*seqs):
        if any(x != items[0] for x in items):
            break
        out.append(items[0])
    return tuple(out)


def _show_dims(dims: tuple[str, ...]) -> str:
    return "replicated" if not dims else "split over " + "x".join(f"'{a}'" for a in dims)


class _FuncPartitioner:
    def __init__(self, fn: ir.Operation, mesh: Mesh, record_shardings: bool = True):
        self.fn, self.mesh, self.record_shardings = fn, mesh, record_shardings
        self.env: dict[ir.Value, _Local] = {}
        self.cache: dict[tuple, _Local] = {}
        self.op: ir.Operation = fn  # the op being partitioned (for locations and messages)
        self.result_shapes: list[tuple[int, ...]] = []

    # ------------------------------------------------------------------------------------------ helpers
    def error(self, message: str, op: ir.Operation | None = None) -> PassError:
        op = op or self.op
        text = f"ditron-partition: '{op.name}' op {message}"
        return PassError(text, [diagnostic_at(op.location, text)])

    def n(self, axis: str) -> int:
        return self.mesh.axis_size(axis)

    def shards(self, dims: tuple[str, ...]) -> int:
        out = 1
        for a in dims:
            out *= self.n(a)
        return out

    def padded(self, x: _Local, d: int) -> bool:
        size, local = x.shape[d], x.local[d]
        return size >= 0 and local * self.shards(x.dims[d]) != size

    def build_at(self):
        return dict(loc=self.op.location, ip=ir.InsertionPoint(self.op))

    def check_sharding(self, sharding: Sharding, shape: tuple[int, ...], what: str) -> None:
        problem = sharding.check(shape, self.mesh)
        if problem:
            raise self.error(f"{what}: {problem}")

    # -------------------------------------------------------------------------------------- resharding
    def convert(self, x: _Local, dims: Dims, partial: tuple[str, ...], what: str, at: dict | None = None) -> _Local:
        """x laid out as (dims, partial): all-gathers, all-to-alls, reduce-scatters, all-reduces as needed (built
        before the op being partitioned, or where ``at`` says)."""
        dims, partial = tuple(tuple(d) for d in dims), tuple(partial)
        if (x.dims, x.partial) == (dims, partial):
            return x
        key = (x.value, dims, partial)
        if key in self.cache:
            return self.cache[key]
        at = at or self.build_at()
        cur, v, rank = [tuple(d) for d in x.dims], x.value, len(x.dims)
        # 1. undo splits the target does not have (minor axis first); an axis wanted on another dim moves there
        for d in range(rank):
            while not _is_prefix(cur[d], dims[d]):
                axis, n = cur[d][-1], self.n(cur[d][-1])
                local = ir.RankedTensorType(v.type).shape
                to = next((e for e in range(rank) if e != d and _is_prefix(cur[e] + (axis,), dims[e])), None)
                moved = _Local(v, tuple(cur), x.partial, x.shape)
                if to is not None and local[to] >= 0 and local[to] % n == 0 and not self.padded(moved, d):
                    v = task.AllToAll.build(v, split_dim=to, concat_dim=d, axis=axis, axis_size=n, **at).output
                    cur[to] = cur[to] + (axis,)
                else:
                    v = task.AllGather.build(v, dim=d, axis=axis, axis_size=n, **at).output
                cur[d] = cur[d][:-1]
        # 2. partial sums the target does not have: reduce-scatter into a dim split next over that axis, or reduce
        cur_partial = list(x.partial)
        for axis in x.partial:
            if axis in partial:
                continue
            n = self.n(axis)
            d = next((d for d in range(rank) if _is_prefix(cur[d] + (axis,), dims[d])), None)
            if d is not None:
                size = ir.RankedTensorType(v.type).shape[d]
                if size >= 0 and size % n:
                    raise self.error(f"{what}: the partial sum over '{axis}' must be reduce-scattered along dim {d}, "
                                     f"whose local size {size} does not divide by {n}; the task level cannot pad "
                                     f"(make dim {d} a multiple of {n}, or keep the result replicated)")
                v = task.ReduceScatter.build(v, dim=d, axis=axis, axis_size=n, reduce="sum", **at).output
                cur[d] = cur[d] + (axis,)
            else:
                v = task.AllReduce.build(v, axis=axis, reduce="sum", **at).output
            cur_partial.remove(axis)
        missing = [a for a in partial if a not in cur_partial]
        if missing:
            raise self.error(f"{what}: wants a partial sum over '{missing[0]}', but the value {x.describe()} is not "
                             f"one; a partial sharding can only come from a contraction over a sharded dim")
        # 3. what is left to split would need a rank-dependent slice
        for d in range(rank):
            if cur[d] != dims[d]:
                extra = dims[d][len(cur[d]):]
                raise self.error(f"{what}: dim {d} is {_show_dims(cur[d])} but must be {_show_dims(dims[d])}; "
                                 f"splitting it further over {', '.join(repr(a) for a in extra)} needs a local slice "
                                 f"of a replicated value, which ditron-partition does not insert — shard the value "
                                 f"where it enters (an argument's ditron.sharding) or request a sharding it already "
                                 f"has")
        out = _Local(v, tuple(cur), tuple(cur_partial), x.shape, x.pad_zero)
        self.cache[key] = out
        return out

    # ------------------------------------------------------------------------------------------ op rules
    def matmul(self, op: ir.Operation) -> None:
        mm = task.Matmul(op)
        a, b = self.env[mm.lhs], self.env[mm.rhs]
        if len(a.dims) != 2 or len(b.dims) != 2:
            raise self.error(f"expects 2-d operands, got ranks {len(a.dims)} and {len(b.dims)}")
        a_keep = tuple(p for p in a.partial if p not in b.dims[0] + b.dims[1] + b.partial)
        b_keep = tuple(p for p in b.partial if p not in a.dims[0] + a.dims[1] + a.partial)
        kd, nd = mm.b_dims  # rhs [K, N], or [N, K] with transpose_b
        (am, ak), bk, bn = a.dims, b.dims[kd], b.dims[nd]
        common = _common_prefix([ak, bk])
        if ak[len(common):] and bk[len(common):]:
            raise self.error(f"contracts over dim K, which the lhs has {_show_dims(ak)} and the rhs "
                             f"{_show_dims(bk)}; both operands must split K over the same mesh axes (or one of "
                             f"them not at all) — change one operand's sharding")
        cut = next((i for i, axis in enumerate(am) if axis in bn), len(am))
        a2 = self.convert(a, (am[:cut], common), a_keep, "lhs")
        b2 = self.convert(b, (bn, common) if kd else (common, bn), b_keep, "rhs")
        if a2.local[1] != b2.local[kd]:
            raise self.error(f"local contraction sizes differ after partitioning: lhs {a2.local[1]}, rhs "
                             f"{b2.local[kd]} (the operands' padded layouts of K do not line up)")
        if (self.padded(a2, 1) or self.padded(b2, kd)) and not (a2.pad_zero or b2.pad_zero):
            raise self.error(f"contracts over a padded dim K of size {a.shape[1]} whose padding may be non-zero in "
                             f"both operands (a pointwise fn with f(0) != 0 ran on the padded shards); do not pad K "
                             f"or apply such fns after the contraction")
        result_type = ir.RankedTensorType(mm.result.type)
        local_type = task.tensor_type([a2.local[0], b2.local[nd]], result_type.element_type)
        new = task.Matmul.build(a2.value, b2.value, result_type=local_type, transpose_b=mm.transpose_b,
                                fast_accum=mm.fast_accum, **self.build_at())
        _copy_discardable(op, new)
        self.env[mm.result] = _Local(new.result, (a2.dims[0], b2.dims[nd]), a_keep + b_keep + common,
                                     tuple(result_type.shape), a2.pad_zero and b2.pad_zero)

    def elementwise(self, op: ir.Operation) -> None:
        ew = task.Elementwise(op)
        ins = [self.env[v] for v in ew.inputs]
        fn, partials = ew.fn, [x.partial for x in ins]
        keep: list[tuple[str, ...]] = [()] * len(ins)
        if fn in ("neg", "copy"):
            keep = partials
        elif fn in ("add", "sub") and all(set(p) == set(partials[0]) for p in partials):
            keep = [partials[0]] * len(ins)
        elif fn == "mul" and sum(1 for p in partials if p) == 1:
            keep = partials
        elif fn == "div" and len(ins) == 2 and not partials[1]:
            keep = partials
        elif fn == "silu_mul" and len(ins) == 2 and not partials[0]:
            keep = partials
        rank = len(ins[0].dims)
        roles = [_operand_role(i, x, ins[0]) for i, x in enumerate(ins)]
        if None in roles:
            raise self.error("operands of different ranks")
        # the operands' splits of each result dim: a bias [N] shares the columns, a row vector [M, 1] the rows, a
        # scalar [1] none (it stays whole on every rank)
        seen = {"full": lambda x, d: [x.dims[d]], "bias": lambda x, d: [x.dims[0]] if d == 1 else [],
                "row": lambda x, d: [x.dims[0]] if d == 0 else [], "scalar": lambda x, d: []}
        dims = tuple(_common_prefix([s for x, r in zip(ins, roles) for s in seen[r](x, d)]) for d in range(rank))
        want = {"full": dims, "bias": dims[1:], "row": (dims[0], ()), "scalar": ((),)}
        # a broadcast vector that is an argument is resharded at the function's start: a GEMM epilogue after an
        # earlier matmul can read it (ditron-fuse-epilogue takes only operands defined before the matmul)
        entry = dict(loc=self.op.location, ip=ir.InsertionPoint(self.op.parent.regions[0].blocks[0].operations[0]))
        conv = [self.convert(x, want[r], k, f"operand {i}",
                             entry if r != "full" and isinstance(x.value, ir.BlockArgument) else None)
                for i, (x, k, r) in enumerate(zip(ins, keep, roles))]
        lead = conv[0].local
        fits = {"full": lambda c: c.local == lead, "bias": lambda c: c.local == lead[1:],
                "row": lambda c: c.local[0] == lead[0], "scalar": lambda c: True}
        if not all(fits[r](c) for c, r in zip(conv, roles)):
            shapes = ", ".join("x".join(map(str, c.local)) for c in conv)
            raise self.error(f"operands have different local shapes after partitioning ({shapes}): their padded "
                             f"layouts do not line up; pad them the same way")
        result_type = ir.RankedTensorType(ew.result.type)
        local_type = task.tensor_type(conv[0].local, result_type.element_type)
        new = task.Elementwise.build(fn, *[c.value for c in conv], result_type=local_type, **self.build_at())
        _copy_discardable(op, new)
        partial = next((k for k in keep if k), ())
        pad_zero = fn in _ZERO_PRESERVING and all(c.pad_zero for c in conv)
        self.env[ew.result] = _Local(new.result, dims, partial, tuple(result_type.shape), pad_zero)

    def custom(self, op: ir.Operation) -> None:
        """A user kernel program: each operand converted to the sharding its rule takes (all-gathers, reductions
        as for any use), the results laid out as the rule gives them."""
        k = task.Custom(op)
        try:
            ins, outs = k.in_shardings, k.out_shardings
        except ValueError as err:
            raise self.error(str(err)) from None
        conv = []
        for i, (v, sh) in enumerate(zip(k.inputs, ins)):
            x = self.env[v]
            self.check_sharding(sh, x.shape, f"in_shardings[{i}]")
            c = self.convert(x, sh.dims, sh.partial, f"operand {i} (the kernel program '{k.kernel}' takes it "
                                                     f"{Sharding(sh.dims, sh.partial).to_attr()})")
            if any(self.padded(c, d) for d in range(len(c.dims))):
                raise self.error(f"operand {i} is padded; the kernel program '{k.kernel}' takes whole shards")
            conv.append(c)
        types = []
        for j, (r, sh) in enumerate(zip(op.results, outs)):
            t = ir.RankedTensorType(r.type)
            self.check_sharding(sh, tuple(t.shape), f"out_shardings[{j}]")
            types.append(task.tensor_type(sh.local_shape(tuple(t.shape), self.mesh), t.element_type))
        new = task.Custom.build(k.kernel, [c.value for c in conv], types, axis=k.axis, in_shardings=ins,
                                out_shardings=outs, params=op.attributes["params"], **self.build_at())
        _copy_discardable(op, new)
        for r, nr, sh in zip(op.results, new.op.results, outs):
            self.env[r] = _Local(nr, sh.dims, sh.partial, tuple(ir.RankedTensorType(r.type).shape))

    def shard(self, op: ir.Operation) -> None:
        sh = task.Shard(op)
        x = self.env[sh.input]
        try:
            sharding = sh.sharding
        except ValueError as err:
            raise self.error(str(err)) from None
        self.check_sharding(sharding, x.shape, "sharding")
        self.env[sh.output] = self.convert(x, sharding.dims, sharding.partial, "sharding annotation")

    def other(self, op: ir.Operation) -> None:
        if any(c.op_name() == op.name for c in task.COLLECTIVES):
            raise self.error("is a collective of the local (SPMD) view, but the function is in the global view; "
                             f"write the program without collectives, or mark the function {VIEW_ATTR} = \"local\" "
                             "if it is already partitioned")
        if op.name.startswith("func."):
            raise self.error("is not supported by ditron-partition: task programs are single functions (inline "
                             "callees before partitioning)")
        sharded = [i for i, v in enumerate(op.operands)
                   if not self.env[v].is_replicated or any(self.padded(self.env[v], d)
                                                         for d in range(len(self.env[v].dims)))]
        if sharded:
            x = self.env[op.operands[sharded[0]]]
            raise self.error(f"has no partition rule, and its operand {sharded[0]} is sharded {x.describe()}; "
                             "ditron-partition handles matmul, elementwise and shard (other ops only on replicated "
                             "operands): replicate its operands with a ditron_task.shard annotation")
        if len(op.regions):
            raise self.error("has regions; ditron-partition handles only region-free ops")
        new = op.clone(ip=ir.InsertionPoint(op))
        for i, v in enumerate(op.operands):
            new.operands[i] = self.env[v].value
        for old, res in zip(op.results, new.results):
            shape = tuple(ir.RankedTensorType(old.type).shape) if isinstance(old.type, ir.RankedTensorType) else ()
            self.env[old] = _Local(res, tuple(() for _ in shape), (), shape)

    def results(self, op: ir.Operation) -> tuple[list[Sharding], list[ir.Type]]:
        """Convert the returned values to the result shardings and build the new return op.
        Returns the result shardings (to record) and the local result types."""
        values, shardings = [], []
        for i, v in enumerate(op.operands):
            x = self.env[v]
            want = result_sharding(self.fn, i)
            what = f"result {i}"
            if want is None:
                padded = any(self.padded(x, d) for d in range(len(x.dims)))
                want = Sharding(x.dims, (), padded)
            else:
                self.check_sharding(want, x.shape, what)
            y = self.convert(x, want.dims, want.partial, what)
            expect = want.local_shape(x.shape, self.mesh)
            if y.local != expect:
                raise self.error(f"{what}: the partitioned value has local shape {'x'.join(map(str, y.local))}, but "
                                 f"sharding {y.describe()} of the {'x'.join(map(str, x.shape))} result needs "
                                 f"{'x'.join(map(str, expect))}: a gathered padded dim keeps its padding, which only "
                                 f"a sharded (padded) result can carry")
            values.append(y.value)
            shardings.append(want)
            self.result_shapes.append(x.shape)
        ir.Operation.create("func.return", operands=values, loc=op.location, ip=ir.InsertionPoint(op))
        return shardings, [v.type for v in values]

    # -------------------------------------------------------------------------------------------- driver
    def run(self) -> None:
        fn = self.fn
        block = fn.regions[0].blocks[0]
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        arg_shardings, arg_shapes = [], []
        for i, arg in enumerate(block.arguments):
            t = arg.type
            if not isinstance(t, ir.RankedTensorType):
                raise self.error(f"argument {i} has type {t}; ditron-partition handles ranked tensors")
            shape = tuple(ir.RankedTensorType(t).shape)
            sharding = arg_sharding(fn, i) or Sharding.replicated(len(shape))
            self.check_sharding(sharding, shape, f"argument {i}")
            arg.set_type(task.tensor_type(sharding.local_shape(shape, self.mesh), ir.RankedTensorType(t).element_type))
            self.env[arg] = _Local(arg, sharding.dims, sharding.partial, shape)
            arg_shardings.append(sharding)
            arg_shapes.append(shape)
        old_ops = [op.operation for op in block.operations]
        rules = {task.Matmul.op_name(): self.matmul, task.Elementwise.op_name(): self.elementwise,
                 task.Shard.op_name(): self.shard, task.Custom.op_name(): self.custom}
        result_shardings: list[Sharding] = []
        result_types = list(ftype.results)
        for op in old_ops:
            self.op = op
            if op.name == "func.return":
                result_shardings, result_types = self.results(op)
            else:
                rules.get(op.name, self.other)(op)
        for op in reversed(old_ops):
            erase_op(op)
        fn.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get([a.type for a in block.arguments], result_types))
        if self.record_shardings:
            fn.attributes["arg_attrs"] = _with_shardings(fn, "arg_attrs", arg_shardings, arg_shapes)
            fn.attributes["res_attrs"] = _with_shardings(fn, "res_attrs", result_shardings, self.result_shapes)
        fn.attributes[VIEW_ATTR] = ir.StringAttr.get("local")


def _copy_discardable(old: ir.Operation, new: task.TaskOp) -> None:
    """Keep attributes the op does not declare (hints other passes put on it) on its replacement."""
    declared = type(new).attributes_declared()
    for name in list(old.attributes):
        if name not in declared:
            new.op.attributes[name] = old.attributes[name]


def _with_shardings(fn: ir.Operation, key: str, shardings: list[Sharding],
                    shapes: list[tuple[int, ...]]) -> ir.ArrayAttr:
    old = list(ir.ArrayAttr(fn.attributes[key])) if key in fn.attributes else []
    out = []
    for i, (sharding, shape) in enumerate(zip(shardings, shapes)):
        entries = {n.name: n.attr for n in ir.DictAttr(old[i])} if i < len(old) else {}
        entries[SHARDING_ATTR] = sharding.to_attr()
        if sharding.padded:
            entries[GLOBAL_SHAPE_ATTR] = ir.DenseI64ArrayAttr.get(list(shape))
        out.append(ir.DictAttr.get(entries))
    return ir.ArrayAttr.get(out)


def is_local_view(fn: ir.Operation) -> bool:
    return VIEW_ATTR in fn.attributes and ir.StringAttr(fn.attributes[VIEW_ATTR]).value == "local"


def _uses_sharding(fn: ir.Operation) -> bool:
    for key in ("arg_attrs", "res_attrs"):
        if key in fn.attributes and any(SHARDING_ATTR in ir.DictAttr(d) for d in ir.ArrayAttr(fn.attributes[key])):
            return True
    return any(task.Shard.match(op) is not None for op in fn.regions[0].blocks[0].operations)


@dataclass(frozen=True)
class PartitionPass(Pass):
    name = "ditron-partition"
    summary = "Task level, global view + shardings -> local SPMD view with explicit collectives"

    def run(self, module: ir.Module) -> None:
        for fn in [op for op in walk_ops(module.operation) if op.name == "func.func"]:
            if is_local_view(fn) or LEVEL_ATTR in fn.attributes or not len(fn.regions[0].blocks):
                continue
            if len(fn.regions[0].blocks) != 1:
                text = f"ditron-partition: '{fn.name}' op has {len(fn.regions[0].blocks)} blocks; task programs have one"
                raise PassError(text, [diagnostic_at(fn.location, text)])
            try:
                mesh = Mesh.enclosing(fn)
            except ValueError as err:
                text = f"ditron-partition: {err}"
                raise PassError(text, [diagnostic_at(fn.location, text)]) from None
            if mesh is None and _uses_sharding(fn):
                text = (f"ditron-partition: '{fn.name}' op uses shardings but the module has no '{MESH_ATTR}' "
                        "attribute; add one, e.g. {ditron.mesh = {axes = [\"tp\"], shape = array<i64: 4>}}")
                raise PassError(text, [diagnostic_at(fn.location, text)])
            # without a mesh nothing is sharded: write no shardings (the verifier would reject them)
            _FuncPartitioner(fn, mesh or Mesh(("world",), (1,)), record_shardings=mesh is not None).run()
