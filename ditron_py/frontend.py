"""ditron.frontend: write task programs in Python, over symbolic tensors with a shape, a dtype and a sharding.
The frontend traces the function once and builds task-level IR, so nobody has to write MLIR text (the text stays
the other way in: ``ditron-opt`` reads the same IR from files).

    import ditron.frontend as dt

    mesh = dt.Mesh(tp=4)

    @dt.program(mesh)
    def mlp(x: dt.Tensor[(8192, 4096), "bf16", dt.shard(0, "tp")],
            w1: dt.Tensor[(4096, 14336), "bf16", dt.shard(1, "tp")],
            w2: dt.Tensor[(14336, 4096), "bf16", dt.shard(0, "tp")]) -> dt.Sharded[dt.shard(0, "tp")]:
        return dt.gelu(x @ w1) @ w2

    text = mlp.to_mlir()                       # the global-view module, verified
    text = mlp.to_mlir("ditron-partition")     # ... after a pass pipeline
    with ditron_context() as ctx:
        module = mlp.build(ctx)                # an ir.Module in ctx

Views. ``@dt.program(mesh)`` writes the *global* view: whole tensors, shardings on arguments and results, and
``dt.with_sharding`` constraints inside; ``ditron-partition`` inserts the communication. ``@dt.program(mesh,
view="local")`` writes the SPMD view: each rank's shard, explicit ``dt.all_gather`` / ``dt.reduce_scatter`` /
``dt.all_reduce`` / ``dt.all_to_all``. In both views ``dt.Tensor[shape, ...]`` gives the *global* shape (what the
sharding splits); inside a local-view program a value's ``.shape`` is its local shape.

Shardings: ``dt.shard(dim, "tp")`` splits dim over a mesh axis (``("dp", "tp")``: over several, major to minor;
``padded=True`` for sizes the mesh does not divide), ``dt.partial("tp")`` marks an unreduced sum; combine them
with ``|``: ``dt.shard(0, "dp") | dt.shard(1, "tp")``. ``dt.replicated`` (or no sharding) replicates.

Operators: ``a @ b`` (matmul), ``+ - * /`` and unary ``-`` (elementwise; the right operand of an [M, N] left one
may be [N], [M, 1] or [1], broadcast), ``dt.cast(x, dtype)``, and the functions below. Shapes, dtypes,
mesh axes and dims are checked while tracing; errors are TraceError, located at the line of the user's code and
naming the op and the shapes. Element types: "bf16", "f16", "f32", "f64", "f8E4M3FN", "f8E5M2", "i8" ... "i64"
(also "bfloat16", "float32", numpy dtypes).

Annotations are evaluated when the program is traced; with ``from __future__ import annotations`` they must only
name module-level objects (closure variables are not visible to string annotations).
"""
from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from mlir import ir
from mlir.dialects import func as func_d

from .dialects import task
from .dialects.context import ditron_context
from .dialects.sharding import MESH_ATTR, SHARDING_ATTR, Mesh as _Mesh, Sharding
from .errors import DitronError
from .frontend_types import (Mesh, Sharded, Spec, Tensor, TraceError, _dtype_name, _to_sharding,  # noqa: F401
                             _trace_error, _user_position, partial, replicated, shard)
from .schema import VIEW_ATTR

__all__ = [
    "Mesh", "Spec", "shard", "partial", "replicated", "Tensor", "Sharded", "Value", "Program", "program",
    "TraceError", "matmul", "grouped_matmul", "elementwise", "add", "sub", "mul", "div", "maximum", "minimum", "neg",
    "relu", "silu", "gelu", "exp", "sigmoid", "tanh", "copy", "silu_mul", "cast", "with_sharding", "all_gather",
    "reduce_scatter", "all_reduce", "all_to_all", "custom",
]


# ---------------------------------------------------------------------------------------------- tracing

class _Trace:
    """The state of one trace: where ops go, the mesh and the view. Never shared between builds."""

    def __init__(self, mesh: _Mesh | None, view: str, block: ir.Block):
        self.mesh, self.view, self.block = mesh, view, block
        self.open = True

    def location(self) -> ir.Location:
        file, line, col = _user_position()
        return ir.Location.file(file, line, col)

    def ip(self) -> ir.InsertionPoint:
        return ir.InsertionPoint(self.block)

    def axis_size(self, op: str, axis: str) -> int:
        if self.mesh is None:
            raise _trace_error(f"{op}: uses mesh axis '{axis}' but the program has no mesh; pass one to dt.program")
        if axis not in self.mesh.axes:
            raise _trace_error(f"{op}: mesh axis '{axis}' is not in the mesh (axes: {', '.join(self.mesh.axes)})")
        return self.mesh.axis_size(axis)

    def require_view(self, op: str, view: str) -> None:
        if self.view != view:
            hint = ("a collective of the local (SPMD) view; write @dt.program(mesh, view=\"local\") programs to "
                    "use collectives, or leave them to ditron-partition") if view == "local" else \
                "a global-view annotation; in a local-view program the data layout is explicit"
            raise _trace_error(f"{op} is {hint}")


class Value:
    """A symbolic tensor inside a traced program: shape, dtype, the IR value that holds it."""

    __array_ufunc__ = None  # numpy defers to our reflected operators (which then give a clear error)

    def __init__(self, trace: _Trace, ir_value: ir.Value, shape: tuple[int, ...], dtype: str):
        self._trace, self.ir, self.shape, self.dtype = trace, ir_value, tuple(shape), dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Value(shape={self.shape}, dtype={self.dtype!r})"

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)

    def __add__(self, other):
        return elementwise("add", self, other)

    def __radd__(self, other):
        return elementwise("add", other, self)

    def __sub__(self, other):
        return elementwise("sub", self, other)

    def __rsub__(self, other):
        return elementwise("sub", other, self)

    def __mul__(self, other):
        return elementwise("mul", self, other)

    def __rmul__(self, other):
        return elementwise("mul", other, self)

    def __truediv__(self, other):
        return elementwise("div", self, other)

    def __rtruediv__(self, other):
        return elementwise("div", other, self)

    def __neg__(self):
        return elementwise("neg", self)

    def __bool__(self):
        raise _trace_error("a traced tensor has no truth value: its data exists only when the program runs")

    def __getitem__(self, item):
        raise _trace_error("indexing a traced tensor is not supported: the task level has no slice op")

    __hash__ = object.__hash__


def _values(op: str, xs: Iterable[Any]) -> tuple[_Trace, list[Value]]:
    xs = list(xs)
    for i, x in enumerate(xs):
        if not isinstance(x, Value):
            kind = "a Python scalar" if isinstance(x, (int, float, complex)) else f"a {type(x).__name__}"
            raise _trace_error(f"{op}: operand {i} is {kind} ({x!r:.40}); task ops take traced tensors only "
                               f"(there is no constant op: pass it as a program argument)")
    trace = xs[0]._trace
    for x in xs:
        if x._trace is not trace or not trace.open:
            raise _trace_error(f"{op}: operand {x!r} belongs to another (or a finished) trace; values cannot be "
                               f"kept across builds")
    return trace, xs


def _shape(s: Sequence[int]) -> str:
    return "(" + ", ".join(str(x) for x in s) + ("," if len(s) == 1 else "") + ")"


def _ir_type(shape: Sequence[int], dtype: str) -> ir.RankedTensorType:
    return task.tensor_type(list(shape), ir.Type.parse(dtype))


def _wrap(trace: _Trace, op: task.TaskOp, result: ir.Value, dtype: str | None = None) -> Value:
    t = ir.RankedTensorType(result.type)
    return Value(trace, result, tuple(t.shape), dtype or str(t.element_type))


# -------------------------------------------------------------------------------------------------- ops

def matmul(a: Value, b: Value, *, out_dtype: str | None = None, transpose_b: bool = False,
           fast_accum: bool = False) -> Value:
    """a[M, K] @ b[K, N] -> [M, N]. out_dtype: the result type for 8-bit float operands (default: the operands').
    transpose_b: b is given as [N, K] (nn.Linear's weight layout): a @ b.T, read in place by the GEMM.
    fast_accum (8-bit float operands; torch._scaled_mm's use_fast_accum): the tensor cores accumulate all of K in
    their reduced precision (default: each K step of the GEMM is added into an fp32 accumulator)."""
    trace, (a, b) = _values("matmul", (a, b))
    if a.ndim != 2 or b.ndim != 2:
        raise _trace_error(f"matmul: expects 2-d operands, got lhs {_shape(a.shape)} and rhs {_shape(b.shape)}")
    kd, nd = (1, 0) if transpose_b else (0, 1)
    if a.shape[1] != b.shape[kd]:
        layout = " (transpose_b: rhs is [N, K])" if transpose_b else ""
        raise _trace_error(f"matmul: contraction sizes differ: lhs {_shape(a.shape)} has K = {a.shape[1]} but rhs "
                           f"{_shape(b.shape)} has K = {b.shape[kd]}{layout}")
    if a.dtype != b.dtype:
        raise _trace_error(f"matmul: operand element types differ: lhs {a.dtype}, rhs {b.dtype}")
    out = _dtype_name(out_dtype) if out_dtype is not None else a.dtype
    if out != a.dtype and not a.dtype.startswith("f8"):
        raise _trace_error(f"matmul: out_dtype {out} differs from the operands' {a.dtype}; only 8-bit float "
                           f"operands may produce a wider result")
    if fast_accum and not a.dtype.startswith("f8"):
        raise _trace_error(f"matmul: fast_accum is an fp8 accumulation mode; {a.dtype} operands accumulate in f32")
    op = task.Matmul.build(a.ir, b.ir, result_type=_ir_type((a.shape[0], b.shape[nd]), out),
                           transpose_b=bool(transpose_b), fast_accum=bool(fast_accum), loc=trace.location(),
                           ip=trace.ip())
    return _wrap(trace, op, op.result, out)


def grouped_matmul(x: Value, w: Value, group_sizes: Value, *, gated: str | None = None) -> Value:
    """MoE experts: x[T, K] rows grouped by group_sizes[G] (consecutive), group g times w[g % E] ([E, K, N]; G a
    multiple of E: an expert-parallel rank's received rows, source-major, are W * E groups). ``gated`` ('silu'): w
    is [E, K, 2N], the gate's columns then the up's, and the result [T, N] is act(x @ gate) * (x @ up)."""
    trace, (x, w, g) = _values("grouped_matmul", (x, w, group_sizes))
    if (x.ndim, w.ndim, g.ndim) != (2, 3, 1):
        raise _trace_error(f"grouped_matmul: expects x [T, K], w [E, K, N], group_sizes [G]; got "
                           f"{_shape(x.shape)}, {_shape(w.shape)}, {_shape(g.shape)}")
    if x.shape[1] != w.shape[1] or g.shape[0] % w.shape[0]:
        raise _trace_error(f"grouped_matmul: sizes do not fit: x {_shape(x.shape)}, w {_shape(w.shape)}, "
                           f"group_sizes {_shape(g.shape)} (need x K = w K and a multiple of E group sizes)")
    if x.dtype != w.dtype or not g.dtype.startswith("i"):
        raise _trace_error(f"grouped_matmul: x and w must share an element type and group_sizes hold integers; "
                           f"got {x.dtype}, {w.dtype}, {g.dtype}")
    if gated is not None and (gated not in task.GATED_ACTS or w.shape[2] % 2):
        raise _trace_error(f"grouped_matmul: gated={gated!r} needs one of {', '.join(task.GATED_ACTS)} and w "
                           f"[E, K, 2N] (gate, then up); got w {_shape(w.shape)}")
    n = w.shape[2] // 2 if gated else w.shape[2]
    op = task.GroupedMatmul.build(x.ir, w.ir, g.ir, result_type=_ir_type((x.shape[0], n), x.dtype), gated=gated,
                                  loc=trace.location(), ip=trace.ip())
    return _wrap(trace, op, op.result, x.dtype)


def elementwise(fn: str, *xs: Value) -> Value:
    """A pointwise fn (task.ELEMENTWISE_FNS) over same-shaped, same-typed tensors (no broadcasting)."""
    if fn not in task.ELEMENTWISE_FNS:
        raise _trace_error(f"elementwise: unknown fn '{fn}' (known: {', '.join(task.ELEMENTWISE_FNS)})")
    arity = task.ELEMENTWISE_FNS[fn]
    if arity is not None and len(xs) != arity:
        raise _trace_error(f"{fn}: takes {arity} operand(s), got {len(xs)}")
    trace, xs_ = _values(fn, xs)
    first = xs_[0]
    for i, x in enumerate(xs_[1:], 1):
        if i == 1 and first.ndim == 2 and x.shape in (first.shape[1:], (first.shape[0], 1), (1,)):
            continue  # a [N] bias (over the rows), an [M, 1] row vector (over the columns) or a [1] scalar
        if x.shape != first.shape:
            raise _trace_error(f"{fn}: operand shapes differ: {_shape(first.shape)} and {_shape(x.shape)} "
                               f"(operand {i}); elementwise ops do not broadcast, except a second operand [N] "
                               f"(a bias), [M, 1] (a row vector) or [1] (a scalar) against an [M, N] first one")
        if x.dtype != first.dtype:
            raise _trace_error(f"{fn}: operand element types differ: {first.dtype} and {x.dtype} (operand {i})")
    op = task.Elementwise.build(fn, *[x.ir for x in xs_], result_type=first.ir.type, loc=trace.location(),
                                ip=trace.ip())
    return _wrap(trace, op, op.result, first.dtype)


def cast(x: Value, dtype: Any) -> Value:
    """x in another element type (``dtype`` as in ``dt.Tensor``): a ``cast`` elementwise op."""
    name = _dtype_name(dtype)
    trace, (x_,) = _values("cast", (x,))
    op = task.Elementwise.build("cast", x_.ir, result_type=_ir_type(x_.shape, name), loc=trace.location(),
                                ip=trace.ip())
    return _wrap(trace, op, op.result, name)


def _pointwise(fn: str) -> Callable[..., Value]:
    def apply(*xs: Value) -> Value:
        return elementwise(fn, *xs)
    apply.__name__ = apply.__qualname__ = fn
    apply.__doc__ = f"Elementwise '{fn}' ({task.ELEMENTWISE_FNS[fn]} operand(s))."
    return apply


add, sub, mul, div = _pointwise("add"), _pointwise("sub"), _pointwise("mul"), _pointwise("div")
maximum, minimum, neg = _pointwise("max"), _pointwise("min"), _pointwise("neg")
relu, silu, gelu, exp = _pointwise("relu"), _pointwise("silu"), _pointwise("gelu"), _pointwise("exp")
sigmoid, tanh, copy, silu_mul = _pointwise("sigmoid"), _pointwise("tanh"), _pointwise("copy"), _pointwise("silu_mul")


def with_sharding(x: Value, spec: Spec | Sharding) -> Value:
    """Global view: constrain x to a sharding (a ``ditron_task.shard`` annotation)."""
    trace, (x,) = _values("with_sharding", (x,))
    trace.require_view("with_sharding", "global")
    sharding = _to_sharding(spec, x.ndim, "with_sharding")
    _check_sharding(trace, sharding, x.shape, "with_sharding")
    op = task.Shard.build(x.ir, sharding, loc=trace.location(), ip=trace.ip())
    return _wrap(trace, op, op.output, x.dtype)


def _check_dim(op: str, dim: int, x: Value, what: str = "dim") -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise _trace_error(f"{op}: {what} must be an int, got {dim!r}")
    d = dim + x.ndim if dim < 0 else dim
    if not 0 <= d < x.ndim:
        raise _trace_error(f"{op}: {what} {dim} is out of range for a tensor of shape {_shape(x.shape)}")
    return d


def all_gather(x: Value, dim: int, axis: str) -> Value:
    """Local view: concatenate the shards of the ranks along mesh axis over dim."""
    trace, (x,) = _values("all_gather", (x,))
    trace.require_view("all_gather", "local")
    n, d = trace.axis_size("all_gather", axis), _check_dim("all_gather", dim, x)
    op = task.AllGather.build(x.ir, dim=d, axis=axis, axis_size=n, loc=trace.location(), ip=trace.ip())
    return _wrap(trace, op, op.output, x.dtype)


_REDUCTIONS = task.REDUCTIONS


def reduce_scatter(x: Value, dim: int, axis: str, reduce: str = "sum") -> Value:
    """Local view: reduce over the ranks of axis, each keeps its 1/n part of dim."""
    trace, (x,) = _values("reduce_scatter", (x,))
    trace.require_view("reduce_scatter", "local")
    n, d = trace.axis_size("reduce_scatter", axis), _check_dim("reduce_scatter", dim, x)
    if reduce not in _REDUCTIONS:
        raise _trace_error(f"reduce_scatter: reduce '{reduce}' is not one of {', '.join(_REDUCTIONS)}")
    if x.shape[d] % n:
        raise _trace_error(f"reduce_scatter: dim {dim} of {_shape(x.shape)} (size {x.shape[d]}) does not divide "
                           f"over axis '{axis}' of size {n}")
    op = task.ReduceScatter.build(x.ir, dim=d, axis=axis, axis_size=n, reduce=reduce, loc=trace.location(),
                                  ip=trace.ip())
    return _wrap(trace, op, op.output, x.dtype)


def all_reduce(x: Value, axis: str, reduce: str = "sum") -> Value:
    """Local view: reduce over the ranks of axis; every rank gets the whole result."""
    trace, (x,) = _values("all_reduce", (x,))
    trace.require_view("all_reduce", "local")
    trace.axis_size("all_reduce", axis)
    if reduce not in _REDUCTIONS:
        raise _trace_error(f"all_reduce: reduce '{reduce}' is not one of {', '.join(_REDUCTIONS)}")
    op = task.AllReduce.build(x.ir, axis=axis, reduce=reduce, loc=trace.location(), ip=trace.ip())
    return _wrap(trace, op, op.output, x.dtype)


def all_to_all(x: Value, split_dim: int, concat_dim: int, axis: str, split_sizes: Value | None = None,
               capacity: int | None = None):
    """Local view: split split_dim into one part per rank of axis, send part r to rank r, concatenate what
    arrives along concat_dim. split_sizes (an integer tensor [n]): parts of those run-time sizes (the result's dim
    dynamic); with ``capacity`` too, the bounded form: (output of ``capacity`` rows, recv_counts [n] i32)."""
    if capacity is not None and (split_sizes is None or isinstance(capacity, bool) or not isinstance(capacity, int)
                                 or capacity < 1):
        raise _trace_error(f"all_to_all: capacity (a positive int, the output's rows) bounds parts of run-time "
                           f"sizes and needs split_sizes; got capacity={capacity!r}"
                           f"{'' if split_sizes is not None else ' without split_sizes'}")
    operands = (x,) if split_sizes is None else (x, split_sizes)
    trace, vals = _values("all_to_all", operands)
    x = vals[0]
    trace.require_view("all_to_all", "local")
    n = trace.axis_size("all_to_all", axis)
    sd, cd = _check_dim("all_to_all", split_dim, x, "split_dim"), _check_dim("all_to_all", concat_dim, x,
                                                                             "concat_dim")
    sizes = vals[1].ir if split_sizes is not None else None
    if split_sizes is not None and (vals[1].shape != (n,) or not vals[1].dtype.startswith("i")):
        raise _trace_error(f"all_to_all: split_sizes must be an integer tensor of shape ({n},), one size per rank "
                           f"of axis '{axis}'; got {vals[1]!r}")
    if split_sizes is None and x.shape[sd] % n:
        raise _trace_error(f"all_to_all: split_dim {split_dim} of {_shape(x.shape)} (size {x.shape[sd]}) does not "
                           f"divide over axis '{axis}' of size {n}; pass split_sizes for uneven parts")
    op = task.AllToAll.build(x.ir, split_dim=sd, concat_dim=cd, axis=axis, axis_size=n, split_sizes=sizes,
                             capacity=capacity, loc=trace.location(), ip=trace.ip())
    if capacity is not None:
        return _wrap(trace, op, op.output, x.dtype), _wrap(trace, op, op.recv_counts, "i32")
    return _wrap(trace, op, op.output, x.dtype)


def custom(op: Any, *xs: Value, **params: Any) -> Value | tuple[Value, ...]:
    """A registered kernel program (``ditron.register_op``; ``op`` it or its name) applied to xs: a
    ``ditron_task.custom`` op with the op's sharding rule. Its builder runs for the local shapes (the mesh axis'
    size, the element type) to give the results' shapes; ``params`` are its own parameters (ints, floats, strings,
    bools). One result: a Value; several: a tuple."""
    from .custom_ops import registered
    from .device.values import DTYPES
    from .kernels import KernelRecord
    if isinstance(op, str):
        try:
            op = registered(op)
        except KeyError as err:
            raise _trace_error(str(err.args[0])) from None
    name = op.name
    trace, xs_ = _values(name, xs)
    if len(xs_) != len(op.inputs):
        raise _trace_error(f"{name}: takes {len(op.inputs)} tensor(s) (its sharding rule names {len(op.inputs)} "
                           f"input(s)), got {len(xs_)}")
    dtypes = {x.dtype for x in xs_}
    if len(dtypes) != 1 or next(iter(dtypes)) not in ("bf16", "f16", "f32", "i32"):
        raise _trace_error(f"{name}: a kernel program takes tensors of one element type (bf16, f16, f32, i32), got "
                           f"{', '.join(sorted(dtypes))}")
    dtype = next(iter(dtypes))
    axis = op.axis or (trace.mesh.axes[0] if trace.mesh is not None and trace.mesh.axes else None)
    if axis is None:
        raise _trace_error(f"{name}: a kernel program runs over a mesh axis; the program has no mesh")
    W = trace.axis_size(name, axis)
    ins = [spec.resolve(x.ndim, f"{name}: input {i}") for i, (spec, x) in enumerate(zip(op.inputs, xs_))]
    local_shapes = []
    for i, (sh, x) in enumerate(zip(ins, xs_)):
        if trace.view == "global":
            _check_sharding(trace, sh, x.shape, f"{name}: input {i}")
            local_shapes.append(sh.local_shape(x.shape, trace.mesh))
        else:
            local_shapes.append(x.shape)
    try:
        prog = op.program(W, local_shapes, dtype, **params)
        attr = KernelRecord(params).to_attr()
    except DitronError as err:  # the builder's own errors (ditron.device's are located in it: named)
        d = err.diagnostics[0]
        at = f" (in its builder, {d.file}:{d.line}:{d.col})" if getattr(d, "file", None) else ""
        raise _trace_error(f"{name}: {d.message}{at}") from None
    except TypeError as err:  # a parameter the builder does not take
        raise _trace_error(f"{name}: {err}") from None
    outs, types, dts = [], [], []
    for j, (spec, b) in enumerate(zip(op.outputs, prog.outputs)):
        sh = spec.resolve(len(b.shape), f"{name}: output {j}")
        shape = tuple(b.shape) if trace.view == "local" else tuple(
            n * sh.shards(d, trace.mesh) for d, n in enumerate(b.shape))
        outs.append(sh)
        types.append(_ir_type(shape, DTYPES[b.dtype][0]))
        dts.append(b.dtype)
    new = task.Custom.build(name, [x.ir for x in xs_], types, axis=axis, in_shardings=ins, out_shardings=outs,
                            params=attr, loc=trace.location(), ip=trace.ip())
    values = tuple(_wrap(trace, new, r, d) for r, d in zip(new.op.results, dts))
    return values[0] if len(values) == 1 else values


# ---------------------------------------------------------------------------------------------- programs

def _check_sharding(trace_or_mesh, sharding: Sharding, shape: Sequence[int], what: str,
                    where: tuple[str, int, int] | None = None) -> None:
    mesh = trace_or_mesh.mesh if isinstance(trace_or_mesh, _Trace) else trace_or_mesh
    if mesh is None:
        if sharding.axes_used():
            raise _trace_error(f"{what}: is sharded over mesh axes but the program has no mesh; "
                               f"use dt.program(dt.Mesh(...))", where)
        return
    problem = sharding.check(tuple(shape), mesh)
    if problem:
        raise _trace_error(f"{what}: {problem}", where)


@dataclass
class _Param:
    name: str
    spec: Tensor
    sharding: Sharding | None


def _result_specs(annotation) -> list | None:
    """The result shardings annotated (None entries: unannotated), or None when there is no annotation."""
    if annotation is inspect.Signature.empty or annotation is None:
        return None
    if typing.get_origin(annotation) is tuple:
        annotation = typing.get_args(annotation)
    items = list(annotation) if isinstance(annotation, (tuple, list)) else [annotation]
    out = []
    for item in items:
        if isinstance(item, Sharded):
            out.append(item.sharding)
        elif isinstance(item, (Spec, Sharding)) or item is None:
            out.append(item)
        else:
            raise TraceError(f"result annotation {item!r} is not dt.Sharded[...] (or a sharding)")
    return out


class Program:
    """A traced-on-demand task program. ``build(ctx)`` -> ir.Module; ``to_mlir()`` -> text;
    ``evaluate(*arrays)`` -> the numpy reference of a global-view program."""

    def __init__(self, fn: Callable, mesh: _Mesh | None, view: str, name: str | None = None):
        if view not in ("global", "local"):
            raise TraceError(f"dt.program: view must be 'global' or 'local', got {view!r}")
        if mesh is not None and not isinstance(mesh, _Mesh):
            raise TraceError(f"dt.program: expected a mesh (dt.Mesh(tp=4)), got {mesh!r}")
        self.fn, self.mesh, self.view = fn, mesh, view
        self.name = name or fn.__name__
        code = fn.__code__
        self._where = (code.co_filename, code.co_firstlineno, 1)

    def __repr__(self) -> str:
        return f"<dt.Program {self.name} view={self.view} mesh={self.mesh}>"

    def _params(self) -> tuple[list[_Param], list | None]:
        try:
            hints = inspect.get_annotations(self.fn, eval_str=True)
        except NameError as err:
            raise _trace_error(f"program '{self.name}': cannot evaluate an annotation ({err}); with `from "
                               f"__future__ import annotations`, annotations may only name module-level objects",
                               self._where) from None
        params = []
        for p in inspect.signature(self.fn).parameters.values():
            spec = hints.get(p.name)
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                raise _trace_error(f"program '{self.name}': parameter '{p.name}' must be a plain positional "
                                   f"parameter", self._where)
            if not isinstance(spec, Tensor):
                raise _trace_error(f"program '{self.name}': parameter '{p.name}' needs a dt.Tensor[shape, dtype, "
                                   f"sharding] annotation, got {spec!r}", self._where)
            sharding = _to_sharding(spec.sharding, len(spec.shape), f"parameter '{p.name}'")
            if sharding is not None:
                _check_sharding(self.mesh, sharding, spec.shape, f"parameter '{p.name}'", self._where)
            params.append(_Param(p.name, spec, sharding))
        return params, _result_specs(hints.get("return", inspect.Signature.empty))

    def build(self, ctx: ir.Context | None = None) -> ir.Module:
        """Trace the function into a new module in ctx (default: the current context, which must have ditron's
        dialects: use ``with ditron_context() as ctx``). The module is verified."""
        if ctx is None:
            try:
                ctx = ir.Context.current
            except ValueError:
                ctx = None
            if ctx is None:
                raise TraceError("Program.build needs an MLIR context with ditron's dialects: "
                                 "`with ditron_context() as ctx: program.build(ctx)`, or use to_mlir()")
        if not ctx.is_registered_operation(task.Matmul.op_name()):
            raise TraceError("Program.build: the context does not have ditron's dialects; create it with "
                             "ditron.dialects.ditron_context()")
        from .dialects.verify import verify
        from .errors import VerificationError
        with ctx, ir.Location.file(*self._where):
            module = self._trace()
            try:
                verify(module)
            except VerificationError as err:  # a frontend bug: its checks should have caught this first
                raise TraceError(f"program '{self.name}' built IR that does not verify: {err}",
                                 err.diagnostics) from None
        return module

    def _trace(self) -> ir.Module:
        params, result_specs = self._params()
        module = ir.Module.create()
        if self.mesh is not None:
            module.operation.attributes[MESH_ATTR] = self.mesh.to_attr()
        arg_shapes = []
        for p in params:
            shape = p.spec.shape
            if self.view == "local" and p.sharding is not None:
                shape = p.sharding.local_shape(shape, self.mesh)
            arg_shapes.append(tuple(shape))
        arg_types = [_ir_type(s, p.spec.dtype) for s, p in zip(arg_shapes, params)]
        fn_op = func_d.FuncOp(self.name, (arg_types, []), ip=ir.InsertionPoint(module.body))
        file, line, _ = self._where
        block = fn_op.add_entry_block(arg_locs=[ir.Location.name(p.name, ir.Location.file(file, line, 1))
                                                for p in params])
        trace = _Trace(self.mesh, self.view, block)
        args = [Value(trace, a, s, p.spec.dtype) for a, s, p in zip(block.arguments, arg_shapes, params)]
        try:
            out = self.fn(*args)
        finally:
            trace.open = False
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        for i, o in enumerate(outs):
            if not isinstance(o, Value) or o._trace is not trace:
                raise _trace_error(f"program '{self.name}': result {i} is {o!r}, not a tensor traced by this "
                                   f"program", self._where)
        if result_specs is not None and len(result_specs) != len(outs):
            raise _trace_error(f"program '{self.name}': the return annotation names {len(result_specs)} result(s) "
                               f"but the function returns {len(outs)}", self._where)
        result_shardings = []
        for i, o in enumerate(outs):
            spec = result_specs[i] if result_specs is not None else None
            sharding = _to_sharding(spec, o.ndim, f"result {i}")
            if sharding is not None and self.view == "global":
                _check_sharding(self.mesh, sharding, o.shape, f"program '{self.name}': result {i}", self._where)
            elif sharding is not None:
                _check_sharding(self.mesh, sharding, tuple(-1 for _ in o.shape), f"result {i}", self._where)
            result_shardings.append(sharding)
        with ir.Location.file(*self._where):
            func_d.ReturnOp([o.ir for o in outs], ip=ir.InsertionPoint(block))
        fn_op.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(arg_types, [o.ir.type for o in outs]))
        if any(p.sharding is not None for p in params):
            shapes = [p.spec.shape if self.view == "local" else None for p in params]
            fn_op.attributes["arg_attrs"] = _attrs_array([p.sharding for p in params], shapes)
        if any(s is not None for s in result_shardings):
            fn_op.attributes["res_attrs"] = _attrs_array(result_shardings)
        if self.view == "local":
            fn_op.attributes[VIEW_ATTR] = ir.StringAttr.get("local")
        return module

    def to_mlir(self, pipeline: str = "", *, debuginfo: bool = False) -> str:
        """The module as MLIR text (generic form for ditron ops), after the pass pipeline if one is given
        (e.g. "ditron-partition,ditron-fuse-overlap"); verified after each pass. The text is a view of what the
        passes made: it carries no record of them (``ditron.pipeline``, passes/manager.py)."""
        with ditron_context() as ctx:
            module = self.build(ctx)
            try:
                if pipeline:
                    from .passes.manager import PassManager
                    PassManager(pipeline, record=False).run(module)
                return module.operation.get_asm(enable_debug_info=debuginfo)
            finally:
                del module

    def evaluate(self, *inputs) -> list[np.ndarray]:
        """The numpy reference (ditron.reference.evaluate) of this global-view program on whole arrays."""
        from .reference import evaluate
        if self.view != "global":
            raise TraceError(f"program '{self.name}' is in the local view; use evaluate_spmd")
        with ditron_context() as ctx:
            module = self.build(ctx)
            try:
                return evaluate(module, list(inputs))
            finally:
                del module

    def evaluate_spmd(self, per_rank_inputs: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
        """The numpy reference (ditron.reference.evaluate_spmd) of this local-view program, per rank."""
        from .reference import evaluate_spmd
        if self.view != "local":
            raise TraceError(f"program '{self.name}' is in the global view; use evaluate")
        with ditron_context() as ctx:
            module = self.build(ctx)
            try:
                return evaluate_spmd(module, per_rank_inputs, self.mesh)
            finally:
                del module


def _attrs_array(shardings: Sequence[Sharding | None], global_shapes: Sequence | None = None) -> ir.ArrayAttr:
    """Argument/result attributes: the sharding, and in the local view the global shape of padded ones."""
    from .passes.partition import GLOBAL_SHAPE_ATTR
    out = []
    for i, s in enumerate(shardings):
        entries = {SHARDING_ATTR: s.to_attr()} if s is not None else {}
        if s is not None and s.padded and global_shapes is not None and global_shapes[i] is not None:
            entries[GLOBAL_SHAPE_ATTR] = ir.DenseI64ArrayAttr.get(list(global_shapes[i]))
        out.append(ir.DictAttr.get(entries))
    return ir.ArrayAttr.get(out)


def program(mesh: _Mesh | None = None, *, view: str = "global", name: str | None = None
            ) -> Callable[[Callable], Program]:
    """Decorator: ``@dt.program(mesh)`` (global view) or ``@dt.program(mesh, view="local")`` (SPMD view)."""
    if callable(mesh) and not isinstance(mesh, _Mesh):
        raise TraceError("dt.program needs its mesh: write @dt.program(mesh) (or @dt.program() without one)")

    def wrap(fn: Callable) -> Program:
        return Program(fn, mesh, view, name)
    return wrap
