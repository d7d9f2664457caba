"""Verifiers for what IRDL cannot say: shapes, mesh axes, shardings, element types, symbol references, known
names. ``verify(module)`` runs MLIR's own verifier first, then these rules, and raises VerificationError with one
located diagnostic per broken rule. ditron-opt runs it after parsing and after every pass.
"""
from __future__ import annotations

from typing import Callable, Iterable

from mlir import ir

from ..errors import VerificationError
from . import core, device, task
from .context import DIALECT_NAMESPACES, diagnostic_at, diagnostics_of
from .opbase import OpWrapper, attribute, walk_ops
from .sharding import MESH_ATTR, SHARDING_ATTR, Mesh, Sharding, mesh_holder

VIEW_ATTR = "ditron.view"

# Dialects an input may use. tt/ttg are Triton's (unregistered in our context, checked by Triton's parser).
KNOWN_DIALECTS = frozenset({"builtin", "func", "arith", "math", "scf", "cf", "tensor", "memref", "gpu", "tt", "ttg",
                            "ttng", "ub", *DIALECT_NAMESPACES})

Report = Callable[[str], None]


class _Checker:
    def __init__(self, module: ir.Module):
        self.module = module
        self.diagnostics = []
        # op carrying ditron.mesh (usually the module) -> its mesh, or None if malformed (reported once, there)
        self.meshes: dict[ir.Operation, Mesh | None] = {}
        self.symbols: set[str] = set()

    def error(self, op: ir.Operation, message: str) -> None:
        self.diagnostics.append(diagnostic_at(op.location, f"'{op.name}' op {message}"))

    def mesh_at(self, op: ir.Operation) -> tuple[Mesh | None, bool]:
        """(the mesh in scope at op, or None; whether the ditron.mesh in scope is malformed)."""
        holder = mesh_holder(op)
        if holder is None:
            return None, False
        if holder not in self.meshes:
            try:
                self.meshes[holder] = Mesh.from_attr(attribute(holder.attributes, MESH_ATTR))
            except ValueError as err:
                self.error(holder, str(err))
                self.meshes[holder] = None
        mesh = self.meshes[holder]
        return mesh, mesh is None

    def axis_size(self, op: ir.Operation, axis: str) -> int | None:
        mesh, broken = self.mesh_at(op)
        if broken:
            return None
        if mesh is None:
            self.error(op, f"uses mesh axis '{axis}' but the module has no '{MESH_ATTR}' attribute")
            return None
        if axis not in mesh.axes:
            self.error(op, f"mesh axis '{axis}' is not in the mesh (axes: {', '.join(mesh.axes)})")
            return None
        return mesh.axis_size(axis)

    def run(self) -> None:
        top = self.module.operation
        ops = [top, *walk_ops(top)]
        for op in ops:
            if "sym_name" in op.attributes:
                try:
                    name = attribute(op.attributes, "sym_name")
                except ValueError:
                    continue
                if isinstance(name, ir.StringAttr):
                    self.symbols.add(name.value)
        for op in ops:
            if MESH_ATTR in op.attributes:
                self.mesh_at(op)  # a malformed mesh is reported where it is written, before any use
            declared = _WRAPPERS[op.name].attributes_declared() if op.name in _WRAPPERS else {}
            self.check_attribute_kinds(op, skip=declared)
            if op == top:
                continue
            dialect = op.name.split(".", 1)[0]
            if dialect not in KNOWN_DIALECTS:
                self.error(op, f"is unknown: dialect '{dialect}' is not one ditron accepts")
                continue
            if op.name == "func.func":
                self.check_func_shardings(op)
            wrapper = _WRAPPERS.get(op.name)
            if wrapper is not None:
                problems = wrapper(op).attribute_problems()
                for problem in problems:
                    self.error(op, problem)
                if problems:
                    continue
            if dialect == "ditron_task":
                self.check_task_sizes(op)
            rule = _RULES.get(op.name)
            if rule is not None:
                rule(self, op)

    def check_task_sizes(self, op: ir.Operation) -> None:
        """Every static dim of a task op's tensors is between 1 and the kernels' MAX_DIM: an empty tensor has no
        tile to compute (and the cost model would divide by zero), and a larger dim would not fit the kernels'
        32-bit row, column and K indices (with room for a tile past the end)."""
        from ..kernels import MAX_DIM
        values = [("operand", i, v) for i, v in enumerate(op.operands)] + \
                 [("result", i, v) for i, v in enumerate(op.results)]
        for what, i, v in values:
            t = _tensor(v.type)
            if t is None:
                continue
            for d, size in enumerate(t.shape):
                if size == ir.ShapedType.get_dynamic_size():
                    continue
                if size < 1:
                    self.error(op, f"{what} {i} ({t}) has size {size} in dim {d}; ditron computes on non-empty "
                                   "tensors only (every dim >= 1)")
                elif size > MAX_DIM:
                    self.error(op, f"{what} {i} ({t}) has size {size} in dim {d}; ditron's kernels index a dim in "
                                   f"32 bits: at most {MAX_DIM} (2^{MAX_DIM.bit_length() - 1}) per dim")

    def check_attribute_kinds(self, op: ir.Operation, skip=()) -> None:
        """The passes' own attributes have the kinds their readers expect (a string lane or role, an integer
        stream), and no attribute holds an integer wider than 64 bits: ``IntegerAttr.value`` aborts the process on
        one (MLIR_NOTES.md). ``skip``: the attributes the op's wrapper declares (it checks them itself)."""
        for name in list(op.attributes):
            if name in skip:
                continue
            try:
                attr = attribute(op.attributes, name)
            except ValueError:
                continue  # unreadable in Python: the op's own checks report it
            wide = _wide_integer(attr)
            if wide is not None:
                self.error(op, f"attribute '{name}' holds {wide}, an integer wider than 64 bits; ditron reads "
                               "integers of at most 64 bits")
            elif name in STRING_ATTRS and not isinstance(attr, ir.StringAttr):
                self.error(op, f"attribute '{name}' must be a string, got {attr}")
            elif name == KERNEL_RECORD_ATTR and not self.readable_record(attr):
                self.error(op, f"attribute '{name}' must be a dictionary of ints, floats, strings, bools, lists and "
                               f"dictionaries (a kernel record), got {attr}")
            elif name == "stream" and op.name.startswith("ditron_device.") and \
                    (not isinstance(attr, ir.IntegerAttr) or isinstance(attr, ir.BoolAttr)):
                self.error(op, f"attribute 'stream' must be an integer (the stream's number), got {attr}")

    @staticmethod
    def readable_record(attr: ir.Attribute) -> bool:
        from .opbase import attr_to_py
        if not isinstance(attr, ir.DictAttr):
            return False
        try:
            attr_to_py(attr, strict=True)
        except (TypeError, ValueError):
            return False
        return True

    def check_func_shardings(self, op: ir.Operation) -> None:
        ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        # local (SPMD) view: types are shards and the sharding describes the global tensor (sizes not checkable)
        try:
            local = "ditron.view" in op.attributes and str(attribute(op.attributes, "ditron.view")) == '"local"'
        except ValueError:
            local = False
        for what, key, types in (("argument", "arg_attrs", ftype.inputs), ("result", "res_attrs", ftype.results)):
            if key not in op.attributes:
                continue
            for i, (d, t) in enumerate(zip(ir.ArrayAttr(op.attributes[key]), types)):
                d = ir.DictAttr(d)
                if SHARDING_ATTR in d:
                    try:
                        sharding_attr = attribute(d, SHARDING_ATTR)
                    except ValueError as err:
                        self.error(op, f"{what} {i}: {err}")
                        continue
                    self.check_sharding(op, sharding_attr, t, f"{what} {i}", local=local)

    def check_sharding(self, op: ir.Operation, attr: ir.Attribute, t: ir.Type, what: str, local: bool = False) -> None:
        try:
            sharding = Sharding.from_attr(attr)
        except ValueError as err:
            self.error(op, f"{what}: {err}")
            return
        mesh, broken = self.mesh_at(op)
        if broken:
            return
        if not isinstance(t, ir.RankedTensorType):
            self.error(op, f"{what}: only ranked tensors can be sharded, got {t}")
            return
        if mesh is None and sharding.axes_used():
            self.error(op, f"{what} is sharded over mesh axes but the module has no '{MESH_ATTR}' attribute")
            return
        problem = sharding.check(tuple(-1 if local else s for s in t.shape), mesh or Mesh((), ()))
        if problem:
            self.error(op, f"{what}: {problem}")


_RULES: dict[str, Callable[[_Checker, ir.Operation], None]] = {}
_WRAPPERS: dict[str, type[OpWrapper]] = {w.op_name(): w for w in (*task.OPS, *device.OPS, *core.OPS)}


def rule(*wrappers: type[OpWrapper]):
    def register(fn):
        for w in wrappers:
            _RULES[w.op_name()] = fn
        return fn
    return register


def _tensor(t: ir.Type) -> ir.RankedTensorType | None:
    return ir.RankedTensorType(t) if isinstance(t, ir.RankedTensorType) else None


def _dims_agree(a: int, b: int) -> bool:
    dyn = ir.ShapedType.get_dynamic_size()
    return a == b or a == dyn or b == dyn


def _ranked_operands(c: _Checker, op: ir.Operation, values: Iterable[ir.Value]) -> list | None:
    out = []
    for v in values:
        t = _tensor(v.type)
        if t is None:
            c.error(op, f"expects ranked tensors, got {v.type}")
            return None
        out.append(t)
    return out


def _check_enum(c: _Checker, op: ir.Operation, key: str, value: str, allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        c.error(op, f"has {key} '{value}'; expected one of: {', '.join(allowed)}")


def _check_dim(c: _Checker, op: ir.Operation, key: str, dim: int, rank: int) -> bool:
    if not 0 <= dim < rank:
        c.error(op, f"{key} {dim} is out of range for a tensor of rank {rank}")
        return False
    return True


# ----------------------------------------------------------------------------------------------- task level

@rule(task.Shard)
def _shard(c: _Checker, op: ir.Operation) -> None:
    s = task.Shard(op)
    if s.input.type != s.output.type:
        c.error(op, f"result type {s.output.type} differs from the input type {s.input.type}")
    c.check_sharding(op, op.attributes["sharding"], s.input.type, "the annotated value")


@rule(task.Matmul)
def _matmul(c: _Checker, op: ir.Operation) -> None:
    m = task.Matmul(op)
    types = _ranked_operands(c, op, [m.lhs, m.rhs, m.result])
    if types is None:
        return
    a, b, r = types
    if a.rank != 2 or b.rank != 2 or r.rank != 2:
        c.error(op, f"expects 2-d operands and result, got ranks {a.rank}, {b.rank} -> {r.rank}")
        return
    try:
        kd, nd = m.b_dims
    except ValueError as err:
        c.error(op, f"attribute 'transpose_b' must be a boolean: {err}")
        return
    if not _dims_agree(a.shape[1], b.shape[kd]):
        layout = " (transpose_b: rhs is [N, K])" if kd else ""
        c.error(op, f"contraction sizes differ: lhs {a} has K = {a.shape[1]}, rhs {b} has K = {b.shape[kd]}{layout}")
    if not (_dims_agree(r.shape[0], a.shape[0]) and _dims_agree(r.shape[1], b.shape[nd])):
        c.error(op, f"result {r} should be {a.shape[0]}x{b.shape[nd]}")
    _check_matmul_types(c, op, a, b, r)
    try:
        fast = m.fast_accum
    except ValueError as err:
        c.error(op, f"attribute 'fast_accum' must be a boolean: {err}")
        return
    if fast and not (isinstance(a.element_type, ir.FloatType) and ir.FloatType(a.element_type).width == 8):
        c.error(op, f"fast_accum is an fp8 accumulation mode; {a.element_type} operands accumulate in f32")


def _check_matmul_types(c, op, a, b, r) -> None:
    if a.element_type != b.element_type:
        c.error(op, f"operand element types differ: {a.element_type} and {b.element_type}")
    elif r.element_type != a.element_type and isinstance(a.element_type, ir.FloatType) and \
            ir.FloatType(a.element_type).width > 8:
        c.error(op, f"result element type {r.element_type} differs from the operands' {a.element_type}")


@rule(task.GroupedMatmul)
def _grouped_matmul(c: _Checker, op: ir.Operation) -> None:
    g = task.GroupedMatmul(op)
    types = _ranked_operands(c, op, [g.lhs, g.rhs, g.group_sizes, g.result])
    if types is None:
        return
    a, b, sizes, r = types
    if (a.rank, b.rank, sizes.rank, r.rank) != (2, 3, 1, 2):
        c.error(op, "expects lhs [T, K], rhs [E, K, N], group_sizes [E], result [T, N]; got ranks "
                    f"{a.rank}, {b.rank}, {sizes.rank} -> {r.rank}")
        return
    if not _dims_agree(a.shape[1], b.shape[1]):
        c.error(op, f"contraction sizes differ: lhs has K = {a.shape[1]}, rhs has K = {b.shape[1]}")
    if min(sizes.shape[0], b.shape[0]) > 0 and sizes.shape[0] % b.shape[0]:
        c.error(op, f"group_sizes has {sizes.shape[0]} entries, not a multiple of the {b.shape[0]} groups of rhs "
                    "(group g multiplies rhs[g % E])")
    if not isinstance(sizes.element_type, ir.IntegerType):
        c.error(op, f"group_sizes must hold integers, got {sizes.element_type}")
    try:
        gated = g.gated
    except ValueError:
        c.error(op, "gated must be a string attribute")
        return
    if gated is not None and (gated not in task.GATED_ACTS or b.shape[2] % 2):
        c.error(op, f"gated '{gated}' needs an activation of {', '.join(task.GATED_ACTS)} and rhs [E, K, 2N] "
                    f"(gate, then up), got rhs {b}")
        return
    n = b.shape[2] // 2 if gated else b.shape[2]
    if not (_dims_agree(r.shape[0], a.shape[0]) and _dims_agree(r.shape[1], n)):
        c.error(op, f"result {r} should be {a.shape[0]}x{n}")
    _check_matmul_types(c, op, a, b, r)


@rule(task.Elementwise)
def _elementwise(c: _Checker, op: ir.Operation) -> None:
    e = task.Elementwise(op)
    if e.fn not in task.ELEMENTWISE_FNS:
        _check_enum(c, op, "fn", e.fn, task.ELEMENTWISE_FNS)
        return
    arity = task.ELEMENTWISE_FNS[e.fn]
    if arity is not None and len(e.inputs) != arity:
        c.error(op, f"fn '{e.fn}' takes {arity} operand(s), got {len(e.inputs)}")
    types = _ranked_operands(c, op, [*e.inputs, e.result])
    if types is None:
        return
    r = types[-1]
    for i, t in enumerate(types[:-1]):
        if t.element_type != r.element_type and e.fn != "cast":
            c.error(op, f"element types differ: operand {t.element_type}, result {r.element_type}")
            return
        if i > 0 and t.rank == 1 and r.rank == 2 and _dims_agree(t.shape[0], r.shape[1]):
            continue  # a bias: a second operand [N] broadcast over the rows of an [M, N] result
        if i > 0 and r.rank == 2 and (list(t.shape) == [1] or (t.rank == 2 and t.shape[1] == 1 and
                                                               _dims_agree(t.shape[0], r.shape[0]))):
            continue  # a [1] scalar, or an [M, 1] row vector broadcast over the columns (fp8 scales)
        if t.rank != r.rank or not all(_dims_agree(x, y) for x, y in zip(t.shape, r.shape)):
            bias = (" (a second operand may be a [N] bias, an [M, 1] row vector or a [1] scalar of an [M, N] "
                    "result)") if r.rank == 2 and i > 0 else ""
            c.error(op, f"operand shape {t} differs from result shape {r}{bias}")
            return


@rule(task.Custom)
def _custom(c: _Checker, op: ir.Operation) -> None:
    """A user kernel program called as an op: its name, its mesh axis, and a sharding rule of one sharding per
    operand and per result, each over that axis only, not padded, fitting the value (global view: its shape; local
    view: its rank)."""
    import re
    k = task.Custom(op)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", k.kernel):
        c.error(op, f"kernel '{k.kernel}' is not a name (letters, digits, '_' and '.')")
    n = c.axis_size(op, k.axis)
    fn = op.parent
    while fn is not None and fn.name != "func.func":
        fn = fn.parent
    local = fn is not None and VIEW_ATTR in fn.attributes and \
        isinstance(fn.attributes[VIEW_ATTR], ir.StringAttr) and ir.StringAttr(fn.attributes[VIEW_ATTR]).value == "local"
    for key, values, what in (("in_shardings", list(op.operands), "operand"),
                              ("out_shardings", list(op.results), "result")):
        attr = op.attributes[key]
        if not isinstance(attr, ir.ArrayAttr):
            c.error(op, f"attribute '{key}' must be an array of shardings (one per {what}), got {attr}")
            continue
        entries = list(ir.ArrayAttr(attr))
        if len(entries) != len(values):
            c.error(op, f"'{key}' gives {len(entries)} sharding(s) for {len(values)} {what}(s); the sharding rule "
                        f"names one per {what}")
            continue
        for i, (a, v) in enumerate(zip(entries, values)):
            where = f"{key}[{i}] ({what} {i})"
            c.check_sharding(op, a, v.type, where, local=local)
            try:
                sh = Sharding.from_attr(a)
            except ValueError:
                continue
            other = [x for x in sh.axes_used() if x != k.axis]
            if other:
                c.error(op, f"{where} uses mesh axis '{other[0]}'; the kernel program runs over axis '{k.axis}' only")
            if sh.padded:
                c.error(op, f"{where} is padded; a kernel program takes whole shards (sizes the axis divides)")
    if n is None:
        return
    if not op.operands and not op.results:
        c.error(op, "has no operands and no results")


def _collective_types(c: _Checker, op: ir.Operation, x: ir.Value, y: ir.Value):
    types = _ranked_operands(c, op, [x, y])
    if types is None:
        return None
    a, b = types
    if a.element_type != b.element_type:
        c.error(op, f"element types differ: input {a.element_type}, output {b.element_type}")
        return None
    if a.rank != b.rank:
        c.error(op, f"input rank {a.rank} differs from output rank {b.rank}")
        return None
    return a, b


def _other_dims_equal(c, op, a, b, dims) -> bool:
    for i, (x, y) in enumerate(zip(a.shape, b.shape)):
        if i not in dims and not _dims_agree(x, y):
            c.error(op, f"dim {i} changes from {x} to {y}; only the collective's dim may change")
            return False
    return True


@rule(task.AllGather)
def _all_gather(c: _Checker, op: ir.Operation) -> None:
    g = task.AllGather(op)
    n = c.axis_size(op, g.axis)
    types = _collective_types(c, op, g.input, g.output)
    if n is None or types is None:
        return
    a, b = types
    if not _check_dim(c, op, "dim", g.dim, a.rank) or not _other_dims_equal(c, op, a, b, {g.dim}):
        return
    x, y = a.shape[g.dim], b.shape[g.dim]
    if not _dims_agree(y, x * n if x >= 0 else x):
        c.error(op, f"output dim {g.dim} is {y}; expected input dim {x} x axis '{g.axis}' size {n} = {x * n}")


@rule(task.ReduceScatter)
def _reduce_scatter(c: _Checker, op: ir.Operation) -> None:
    r = task.ReduceScatter(op)
    _check_enum(c, op, "reduce", r.reduce, task.REDUCTIONS)
    n = c.axis_size(op, r.axis)
    types = _collective_types(c, op, r.input, r.output)
    if n is None or types is None:
        return
    a, b = types
    if not _check_dim(c, op, "dim", r.dim, a.rank) or not _other_dims_equal(c, op, a, b, {r.dim}):
        return
    x, y = a.shape[r.dim], b.shape[r.dim]
    if x >= 0 and x % n:
        c.error(op, f"input dim {r.dim} of size {x} does not divide evenly over axis '{r.axis}' of size {n}")
    elif not _dims_agree(y, x // n if x >= 0 else x):
        c.error(op, f"output dim {r.dim} is {y}; expected input dim {x} / axis '{r.axis}' size {n} = {x // n}")


@rule(task.AllReduce)
def _all_reduce(c: _Checker, op: ir.Operation) -> None:
    r = task.AllReduce(op)
    _check_enum(c, op, "reduce", r.reduce, task.REDUCTIONS)
    c.axis_size(op, r.axis)
    types = _collective_types(c, op, r.input, r.output)
    if types is not None and types[0] != types[1]:
        c.error(op, f"output type {types[1]} differs from input type {types[0]}")


@rule(task.AllToAll)
def _all_to_all(c: _Checker, op: ir.Operation) -> None:
    a2a = task.AllToAll(op)
    n = c.axis_size(op, a2a.axis)
    types = _collective_types(c, op, a2a.input, a2a.output)
    if n is None or types is None:
        return
    a, b = types
    sd, cd = a2a.split_dim, a2a.concat_dim
    if not (_check_dim(c, op, "split_dim", sd, a.rank) and _check_dim(c, op, "concat_dim", cd, a.rank)):
        return
    if not _other_dims_equal(c, op, a, b, {sd, cd}):
        return
    sizes = a2a.split_sizes
    if sizes is not None:
        if sd != cd:
            c.error(op, f"with split_sizes, split_dim ({sd}) must equal concat_dim ({cd}): parts of uneven size "
                        f"can only be concatenated along the dim they were split on")
            return
        t = _tensor(sizes.type)
        if t is None or t.rank != 1 or not isinstance(t.element_type, ir.IntegerType) or \
                not _dims_agree(t.shape[0], n):
            c.error(op, f"split_sizes must be a tensor<{n}xi32> or tensor<{n}xi64> (one size per rank of axis "
                        f"'{a2a.axis}'), got {sizes.type}")
            return
        if a2a.recv_counts is not None:
            _bounded_all_to_all(c, op, a2a, n, b)
        return
    if a2a.recv_counts is not None:
        c.error(op, "has a recv_counts result but no split_sizes: only parts of run-time sizes have received "
                    "counts")
        return
    expect = list(a.shape)
    if expect[sd] >= 0:
        if expect[sd] % n:
            c.error(op, f"split dim {sd} of size {expect[sd]} does not divide evenly over axis '{a2a.axis}' "
                        f"of size {n}; pass split_sizes for uneven splits")
            return
        expect[sd] //= n
    if expect[cd] >= 0:
        expect[cd] *= n
    if not all(_dims_agree(x, y) for x, y in zip(expect, b.shape)):
        c.error(op, f"output shape {list(b.shape)} should be {expect}")


def _bounded_all_to_all(c: _Checker, op: ir.Operation, a2a: task.AllToAll, n: int, out: ir.RankedTensorType) -> None:
    """The bounded form: the output's dim is its capacity (static, >= 1), recv_counts a tensor<n x i32>."""
    cap = out.shape[a2a.concat_dim]
    if cap == ir.ShapedType.get_dynamic_size():
        c.error(op, f"output dim {a2a.concat_dim} is its capacity and must be static in the bounded form (with "
                    "recv_counts); the unbounded form has one result")
        return
    t = _tensor(a2a.recv_counts.type)
    i32 = ir.IntegerType.get_signless(32)
    if t is None or t.rank != 1 or t.element_type != i32 or not _dims_agree(t.shape[0], n):
        c.error(op, f"recv_counts must be a tensor<{n}xi32> (rows received from each rank of axis "
                    f"'{a2a.axis}'), got {a2a.recv_counts.type}")


# --------------------------------------------------------------------------------------------- device level

def _memref(t: ir.Type) -> ir.MemRefType | None:
    return ir.MemRefType(t) if isinstance(t, ir.MemRefType) else None


@rule(device.AllocSymmetric)
def _alloc(c: _Checker, op: ir.Operation) -> None:
    t = _memref(device.AllocSymmetric(op).buffer.type)
    if t is not None and not t.has_static_shape:
        c.error(op, f"symmetric buffers need a static shape (every rank allocates the same size), got {t}")


@rule(device.Copy)
def _copy(c: _Checker, op: ir.Operation) -> None:
    cp = device.Copy(op)
    _check_enum(c, op, "engine", cp.engine, device.ENGINES)
    s, d = _memref(cp.src.type), _memref(cp.dst.type)
    if s.rank != d.rank:
        c.error(op, f"source rank {s.rank} differs from destination rank {d.rank}")
        return
    if s.element_type != d.element_type:
        c.error(op, f"element types differ: source {s.element_type}, destination {d.element_type}")
    if len(cp.coords) != 3 * s.rank:
        c.error(op, f"expects {3 * s.rank} region operands for rank-{s.rank} memrefs (source offsets, "
                    f"destination offsets, sizes), got {len(cp.coords)}")


def _signal_pad(c: _Checker, op: ir.Operation, v: ir.Value) -> None:
    t = _memref(v.type)
    if t.rank != 1 or not isinstance(t.element_type, ir.IntegerType) or \
            ir.IntegerType(t.element_type).width not in (32, 64):
        c.error(op, f"signal pads are 1-d memrefs of i32 or i64, got {v.type}")


@rule(device.Signal)
def _signal(c: _Checker, op: ir.Operation) -> None:
    s = device.Signal(op)
    _check_enum(c, op, "op", s.kind, device.SIGNAL_OPS)
    _check_enum(c, op, "scope", s.scope, device.SCOPES)
    _signal_pad(c, op, s.signals)


@rule(device.Wait)
def _device_wait(c: _Checker, op: ir.Operation) -> None:
    w = device.Wait(op)
    _check_enum(c, op, "where", w.where, device.WAIT_PLACES)
    _signal_pad(c, op, w.signals)
    if not w.slots:
        c.error(op, "waits on no slot; give at least one")


@rule(device.Barrier)
def _barrier(c: _Checker, op: ir.Operation) -> None:
    _signal_pad(c, op, device.Barrier(op).signals)


@rule(device.Launch)
def _launch(c: _Checker, op: ir.Operation) -> None:
    ln = device.Launch(op)
    if ln.kernel not in c.symbols:
        c.error(op, f"launches '@{ln.kernel}', which is not defined in the module")
    grid = ln.grid
    if not 1 <= len(grid) <= 3 or any(g < 1 for g in grid):
        c.error(op, f"grid must have 1 to 3 positive sizes, got {list(grid)}")
    if ln.sm_budget < 1:
        c.error(op, f"sm_budget must be >= 1, got {ln.sm_budget}")
    _check_enum(c, op, "tile_order", ln.tile_order, device.TILE_ORDERS)
    segments = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    n = len(ln.args)
    if segments != [1] * n + [0] * (len(segments) - n):
        c.error(op, f"operandSegmentSizes must be 1 for each of its {n} argument(s), then 0; got {segments}")


# ----------------------------------------------------------------------------------------------- core level

@rule(core.Wait)
def _core_wait(c: _Checker, op: ir.Operation) -> None:
    w = core.Wait(op)
    _check_enum(c, op, "scope", w.scope, core.SCOPES)
    _check_enum(c, op, "semantic", w.semantic, core.WAIT_SEMANTICS)


@rule(core.Notify)
def _core_notify(c: _Checker, op: ir.Operation) -> None:
    n = core.Notify(op)
    _check_enum(c, op, "op", n.kind, core.NOTIFY_OPS)
    _check_enum(c, op, "scope", n.scope, core.SCOPES)
    _check_enum(c, op, "semantic", n.semantic, core.NOTIFY_SEMANTICS)
    if n.kind == "clear" and n.semantic != "relaxed":
        c.error(op, f"clears its slot with semantic '{n.semantic}'; a clear is relaxed (it consumes a signal "
                    "already acquired and releases nothing)")


@rule(core.BarrierAll)
def _core_barrier(c: _Checker, op: ir.Operation) -> None:
    _check_enum(c, op, "scope", core.BarrierAll(op).scope, core.SCOPES)


KERNEL_RECORD_ATTR = "ditron.kernel"  # a template instance (ditron.kernels.KernelRecord)
# attributes the passes write and read as strings, wherever they appear
STRING_ATTRS = ("ditron.lane", "ditron.role", "ditron.level", "ditron.target", "ditron.axis")


def _wide_integer(attr: ir.Attribute) -> ir.Attribute | None:
    """The first integer wider than 64 bits in attr (through dictionaries and arrays), else None."""
    if isinstance(attr, ir.IntegerAttr) and not isinstance(attr, ir.BoolAttr):
        t = attr.type
        return attr if isinstance(t, ir.IntegerType) and t.width > 64 else None
    if isinstance(attr, ir.DictAttr):
        items = [attr[i].attr for i in range(len(attr))]  # by position: NamedAttribute
    elif isinstance(attr, ir.ArrayAttr):
        items = list(attr)
    else:
        return None
    for item in items:
        found = _wide_integer(item)
        if found is not None:
            return found
    return None


def _expand_dims(c: _Checker, op: ir.Operation) -> None:
    """tt.expand_dims: Triton's parser corrupts the process on an axis past the operand's rank (it printed its
    error, then the process aborted or segfaulted), so ditron checks the axis before handing the text over."""
    if "axis" not in op.attributes or len(op.operands) != 1:
        return
    t = _tensor(op.operands[0].type)
    axis = op.attributes["axis"]
    if t is None or not isinstance(axis, ir.IntegerAttr) or _wide_integer(axis) is not None:
        return
    if not 0 <= axis.value <= t.rank:
        c.error(op, f"axis {axis.value} is out of range for an operand of rank {t.rank} (0..{t.rank})")


_RULES["tt.expand_dims"] = _expand_dims


@rule(core.SymmAt, core.ConsumeToken)
def _same_type(c: _Checker, op: ir.Operation) -> None:
    if op.operands[0].type != op.results[0].type:
        c.error(op, f"result type {op.results[0].type} differs from operand type {op.operands[0].type}")


def verify(module: ir.Module) -> None:
    """Raise VerificationError listing every broken rule (MLIR's verifier first, then ditron's)."""
    try:
        module.operation.verify()
    except ir.MLIRError as err:
        raise VerificationError(str(err), diagnostics_of(err)) from None
    checker = _Checker(module)
    checker.run()
    if checker.diagnostics:
        raise VerificationError("verification failed", checker.diagnostics)
