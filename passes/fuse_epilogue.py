"""ditron-fuse-epilogue: fold chains of elementwise ops that consume a matmul's result into the matmul's GEMM
epilogue (kernels/gemm/epilogue.py), so that a bias, an activation, a residual add or a cast after a matmul is no
kernel of its own and its tensor no round trip through HBM. It only annotates; ``ditron-lower-task-to-device``
reads the marks (``epilogue_chains``), gives the GEMM the steps and their operands, writes the GEMM's C straight
into the chain's last value and launches no elementwise kernel for the fused ops.

A chain starts at the matmul's result -- or, for the producer of a ``matmul_rs`` / ``matmul_ar`` overlap group
(ditron-fuse-overlap runs first), at the reduce-scatter's / all-reduce's output -- and takes the next op while the
value has exactly one use, that use is an ``elementwise`` op, and the op is a step the GEMM can apply:

* a unary fn (relu, silu, gelu, sigmoid, tanh, exp, neg, copy) or a ``cast`` to bf16 / fp16 / fp32;
* a binary fn (add, sub, mul, div, max, min, silu_mul) of the value and one other operand defined before the
  matmul (an argument or an earlier op: the GEMM reads it when it runs), either a [N] bias (the second operand,
  broadcast over rows: a per-column scale of B), an [M, 1] row vector (broadcast over the columns: a per-row
  scale of A), a [1] scalar (a per-tensor scale) or a tensor of the value's shape (a residual; for a gated MLP
  ``silu_mul(gate, up)`` fused into the later of the two matmuls, the other one's result being that operand).
  An fp8 matmul into f32 scaled by ``mul``s and then cast to bf16 is so one GEMM scaling its fp32 accumulator
  before the store rounds it.

After a reduction (GEMM+RS, GEMM+AR) the GEMM holds a partial sum: only an ``add`` can move before the sum, and
only so that its term is added once, not W times. After a reduce-scatter of the rows each rank adds its own bias,
[M/W, 1] row vector, [1] scalar or [M/W, N] residual to the rows it owns (``own_rows``: rank r's operand is its
own, as the program says); after an all-reduce, whose every rank's output gets the rank's own operand, only an
operand known to be the same on every rank (an argument whose ``ditron.sharding`` is replicated) can be added, by
rank 0 (``first_rank``). Activations, casts and products (a scale, too: a per-row scale after a reduce-scatter
is not moved before it) do not commute with the sum: the chain stops there and the op stays a kernel of its own
(fusing them into the reduce / gather finalisation is not done). grouped_matmul, ops on a multi-use value and
elementwise ops before a collective (e.g. ``gelu`` on a matmul feeding a reduce_scatter: the ``matmul_rs`` pair
is the fusion there) are left alone.

Marks: the matmul gets ``ditron.epilogue = {group = G : i64, steps = S : i64}``, its i-th fused op ``ditron.epilogue
= {group = G, step = i}`` (G unique per function). A second run keeps and checks existing marks::

    %h = "ditron_task.matmul"(%x, %w) : (tensor<256x64xbf16>, tensor<64x128xbf16>) -> tensor<256x128xbf16>
    %b = "ditron_task.elementwise"(%h, %bias) {fn = "add"} : (tensor<256x128xbf16>, tensor<128xbf16>) -> ...
    %y = "ditron_task.elementwise"(%b) {fn = "gelu"} : (tensor<256x128xbf16>) -> tensor<256x128xbf16>

becomes::

    %h = "ditron_task.matmul"(%x, %w) {ditron.epilogue = {group = 0 : i64, steps = 2 : i64}} : ...
    %b = "ditron_task.elementwise"(%h, %bias) {ditron.epilogue = {group = 0 : i64, step = 0 : i64}, fn = "add"} ...
    %y = "ditron_task.elementwise"(%b) {ditron.epilogue = {group = 0 : i64, step = 1 : i64}, fn = "gelu"} : ...
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir

from ..dialects import task
from ..dialects.opbase import walk_ops
from ..schema import EPILOGUE_ATTR
from .registry import Pass
from .tiling import OVERLAP_ATTR, functions, op_error

UNARY = ("relu", "silu", "gelu", "sigmoid", "tanh", "exp", "neg", "copy")
BINARY = ("add", "sub", "mul", "div", "max", "min", "silu_mul")
CAST_TO = {"bf16": "bf16", "f16": "fp16", "f32": "fp32"}  # element types a GEMM can store, by their MLIR name
NAME = "ditron-fuse-epilogue"


@dataclass
class Chain:
    """A matmul's fused epilogue: its ops in order, the value the chain starts at (the matmul's result or, after
    a reduction, the collective's output), and the record steps with the operands they read."""

    group: int
    matmul: ir.Operation
    start: ir.Value
    reduced: bool
    ops: list[ir.Operation] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    operands: list[ir.Value] = field(default_factory=list)

    @property
    def final(self) -> ir.Value:
        return self.ops[-1].results[0]


def _i64(v: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


def _shape(v: ir.Value) -> list[int]:
    return list(ir.RankedTensorType(v.type).shape)


def _elem(v: ir.Value) -> str:
    return str(ir.RankedTensorType(v.type).element_type)


def _only_user(v: ir.Value) -> ir.Operation | None:
    uses = list(v.uses)
    if len(uses) != 1:
        return None
    owner = uses[0].owner
    return owner.operation if isinstance(owner, ir.OpView) else owner


def _defined_before(x: ir.Value, op: ir.Operation, order: dict) -> bool:
    if isinstance(x, ir.BlockArgument):
        return True
    owner = x.owner.operation if isinstance(x.owner, ir.OpView) else x.owner
    return order.get(owner, len(order)) < order[op]


def _overlap_kind(op: ir.Operation) -> tuple[str, str] | None:
    if OVERLAP_ATTR not in op.attributes:
        return None
    d = ir.DictAttr(op.attributes[OVERLAP_ATTR])
    return ir.StringAttr(d["kind"]).value, ir.StringAttr(d["role"]).value


def _start(mm: ir.Operation) -> tuple[ir.Value, bool]:
    """Where a matmul's chain starts: its result, or the output of the reduction it is the producer of."""
    result = mm.results[0]
    mark = _overlap_kind(mm)
    if mark is not None and mark[0] in ("matmul_rs", "matmul_ar") and mark[1] == "producer":
        user = _only_user(result)
        if user is not None:
            return user.results[0], True
    return result, False


def step_of(chain: Chain, op: ir.Operation, v: ir.Value, order: dict) -> tuple[dict, ir.Value | None] | str:
    """The record step of elementwise op on the chain's value v (and the operand it reads), or why it is none."""
    e = task.Elementwise(op)
    fn, ins = e.fn, list(e.inputs)
    partial = _shape(chain.matmul.results[0])
    if fn in UNARY or fn == "cast":
        if chain.reduced:
            return f"'{fn}' does not commute with the reduction before it"
        if fn == "cast":
            to = _elem(e.result)
            if to not in CAST_TO:
                return f"a GEMM cannot store {to}"
            return {"fn": "cast", "dtype": CAST_TO[to]}, None
        return {"fn": fn}, None
    if fn not in BINARY or len(ins) != 2 or (ins[0] == v) == (ins[1] == v):
        return f"'{fn}' is not a step of the GEMM epilogue"
    pos = 0 if ins[0] == v else 1
    x = ins[1 - pos]
    if _elem(x) not in CAST_TO:
        return f"its operand's element type {_elem(x)} is not one the GEMM reads"
    if not _defined_before(x, chain.matmul, order):
        return "its other operand is computed after the matmul"
    xs, rs = _shape(x), _shape(e.result)
    if xs == rs:
        kind = "full"
    elif xs == [1]:
        kind = "scalar"
    elif len(xs) == 1 and len(rs) == 2 and xs[0] == rs[1]:
        kind = "bias"
    elif len(rs) == 2 and xs == [rs[0], 1]:
        kind = "row"
    else:
        return f"its operand shape {xs} fits none of a [N] bias, an [M, 1] row vector, a [1] scalar or {rs}"
    if kind in ("full", "bias") and xs[-1] != partial[1]:
        return f"its operand's {xs[-1]} columns are not the GEMM's {partial[1]}"
    if not chain.reduced:
        return {"fn": fn, "operand": kind, "acc": pos}, x
    if fn != "add":
        return f"'{fn}' does not commute with the reduction before it (only an add can move before it)"
    coll = chain.start.owner.operation if isinstance(chain.start.owner, ir.OpView) else chain.start.owner
    if task.ReduceScatter.match(coll):
        if task.ReduceScatter(coll).dim != 0:
            return "an add after a reduce-scatter of the columns is not moved before it"
        # rank r adds its operand to the rows it owns after the scatter: once per row, its own term
        return {"fn": "add", "operand": kind, "acc": pos, "own_rows": rs[0]}, x
    if not _replicated(chain.matmul, x):
        return ("after an all-reduce only an operand every rank holds alike (a replicated argument) can be added "
                "before it, by one rank")
    return {"fn": "add", "operand": kind, "acc": pos, "first_rank": True}, x


def _replicated(mm: ir.Operation, x: ir.Value) -> bool:
    """x is an argument of the function whose ditron.sharding says it is replicated (the same on every rank)."""
    from ..dialects.sharding import arg_sharding
    if not isinstance(x, ir.BlockArgument):
        return False
    fn = mm.parent
    while fn is not None and fn.name != "func.func":
        fn = fn.parent
    sh = arg_sharding(fn, ir.BlockArgument(x).arg_number) if fn is not None else None
    return sh is not None and sh.is_replicated


def _finish(chain: Chain) -> Chain:
    from .device_kernels import dtype_name
    for i, (s, x) in enumerate(zip(chain.steps, chain.operands)):
        if x is not None:
            s["dtype"] = dtype_name(x.type)
            s["arg"] = f"ep{i}"
    return chain


def epilogue_chains(fn: ir.Operation, pass_name: str = NAME) -> dict[ir.Operation, Chain]:
    """The marked chains of a function: matmul -> Chain, checked (a located PassError when a mark is malformed,
    a step is missing or out of order, or an op cannot be the step it is marked as)."""
    fn = fn.operation if isinstance(fn, ir.OpView) else fn
    heads: dict[int, tuple[ir.Operation, int]] = {}
    members: dict[int, dict[int, ir.Operation]] = {}
    order = {}
    for op in walk_ops(fn):
        order[op] = len(order)
        if EPILOGUE_ATTR not in op.attributes:
            continue
        a = op.attributes[EPILOGUE_ATTR]
        d = ir.DictAttr(a) if isinstance(a, ir.DictAttr) else None
        if d is None or "group" not in d or ("steps" in d) == ("step" in d):
            raise op_error(pass_name, op, f"'{EPILOGUE_ATTR}' must be {{group, steps}} on a matmul or {{group, "
                                          f"step}} on an elementwise op, got {a}")
        group = ir.IntegerAttr(d["group"]).value
        if "steps" in d:
            if not task.Matmul.match(op):
                raise op_error(pass_name, op, f"carries an epilogue group's head mark but is no matmul")
            if group in heads:
                raise op_error(pass_name, op, f"is a second matmul of epilogue group {group}")
            heads[group] = (op, ir.IntegerAttr(d["steps"]).value)
        else:
            if not task.Elementwise.match(op):
                raise op_error(pass_name, op, f"carries an epilogue step mark but is no elementwise op")
            step = ir.IntegerAttr(d["step"]).value
            if step in members.setdefault(group, {}):
                raise op_error(pass_name, op, f"is a second step {step} of epilogue group {group}")
            members[group][step] = op
    out = {}
    for group, ops in members.items():
        if group not in heads:
            op = next(iter(ops.values()))
            raise op_error(pass_name, op, f"is a step of epilogue group {group}, which has no matmul")
    for group, (mm, count) in sorted(heads.items()):
        ops = members.get(group, {})
        if sorted(ops) != list(range(count)) or count < 1:
            raise op_error(pass_name, mm, f"heads epilogue group {group} of {count} step(s), but steps "
                                          f"{sorted(ops)} are marked")
        start, reduced = _start(mm)
        chain = Chain(group, mm, start, reduced)
        v = start
        for i in range(count):
            op = ops[i]
            user = _only_user(v)
            if user is None or user != op:
                raise op_error(pass_name, op, f"is step {i} of epilogue group {group} but is not the one use of "
                                              "the value before it")
            found = step_of(chain, op, v, order)
            if isinstance(found, str):
                raise op_error(pass_name, op, f"cannot be step {i} of the epilogue of the matmul at "
                                              f"{mm.location}: {found}")
            chain.ops.append(op)
            chain.steps.append(found[0])
            chain.operands.append(found[1])
            v = op.results[0]
        out[mm] = _finish(chain)
    return out


def _grow(mm: ir.Operation, group: int, order: dict) -> Chain:
    start, reduced = _start(mm)
    chain = Chain(group, mm, start, reduced)
    v = start
    while True:
        op = _only_user(v)
        if op is None or not task.Elementwise.match(op) or EPILOGUE_ATTR in op.attributes:
            return chain
        found = step_of(chain, op, v, order)
        if isinstance(found, str):
            return chain
        chain.ops.append(op)
        chain.steps.append(found[0])
        chain.operands.append(found[1])
        v = op.results[0]


@dataclass(frozen=True)
class FuseEpiloguePass(Pass):
    name = NAME
    summary = "Fold bias / activation / residual / cast elementwise chains after a matmul into its GEMM epilogue"

    def run(self, module: ir.Module) -> None:
        for fn in functions(module):
            existing = epilogue_chains(fn, self.name)
            group = max((c.group for c in existing.values()), default=-1) + 1
            order = {op: i for i, op in enumerate(walk_ops(fn))}
            for op in list(walk_ops(fn)):
                if not task.Matmul.match(op) or op in existing or EPILOGUE_ATTR in op.attributes:
                    continue
                chain = _grow(op, group, order)
                if not chain.ops:
                    continue
                op.attributes[EPILOGUE_ATTR] = ir.DictAttr.get({"group": _i64(group),
                                                                "steps": _i64(len(chain.ops))})
                for i, e in enumerate(chain.ops):
                    e.attributes[EPILOGUE_ATTR] = ir.DictAttr.get({"group": _i64(group), "step": _i64(i)})
                group += 1
