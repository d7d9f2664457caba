"""The numpy reference of task-level programs: what a task program computes, evaluated op by op.

Two entry points:

* ``evaluate(func_op, inputs)`` runs a *global-view* program (whole tensors; ``ditron_task.shard`` is the
  identity; collectives are not allowed) and returns its results.
* ``evaluate_spmd(func_op, per_rank_inputs, mesh)`` runs a *local-view* (SPMD) program — e.g. the output of
  ``ditron-partition`` — on every rank of the mesh in lock step; collectives combine the ranks' values. It returns
  the results of every rank.

Helpers move between the two views with the shardings of the function's arguments and results
(``shard_inputs`` / ``unshard_outputs``, or ``shard_array`` / ``unshard_array`` for one tensor), so a check of a
partitioned program reads::

    want = evaluate(global_fn, xs)
    got = unshard_outputs(local_fn, evaluate_spmd(local_fn, shard_inputs(local_fn, xs, mesh), mesh), mesh)

Conventions (shared with the simulator and the runtime):

* Ranks are numbered row-major over the mesh: rank r has coordinates ``np.unravel_index(r, mesh.shape)``, one per
  mesh axis in the mesh's axis order. A collective over axis ``a`` combines the ranks that differ only in their
  coordinate on ``a``, ordered by that coordinate.
* A dim split over axes ``(a1, a2, ...)`` (major to minor) is cut into ``n = |a1|·|a2|·…`` blocks of
  ``ceil(size / n)``; block ``i = (c(a1)·|a2| + c(a2))·…`` lives on the ranks with those coordinates. With
  ``padded`` shardings the last blocks are filled up with **zeros** (``shard_array`` does it; the runtime must too).
* A value ``partial`` over axis ``a`` is the sum of the ranks' values along ``a``; ``shard_array`` puts the whole
  value on coordinate 0 and zeros elsewhere.
* Element types are not emulated: every op computes in the dtype of the arrays given (use float64 inputs for tight
  comparisons), so ``cast`` is a copy. ``gelu`` is the exact (erf) form; the numpy table of pointwise fns is
  ``ELEMENTWISE``; a [N] second operand broadcasts over the rows of an [M, N] one (numpy's rule).
"""
from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

import numpy as np
from mlir import ir

from .dialects import task
from .dialects.sharding import Mesh, Sharding, arg_sharding, result_sharding
from .errors import DitronError
from .schema import VIEW_ATTR
from .op_reference import all_to_all_sized


class EvaluationError(DitronError):
    """The reference interpreter cannot run a program (unsupported op, bad inputs, shape disagreement)."""


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), vectorised: numpy has no erf and scipy is not a dependency.
    # In place on three temporaries (the same operations in the same order as the textbook form, so the same bits).
    x = np.asarray(x)
    if x.ndim == 0:
        return _erf(x.reshape(1))[0]
    a = np.abs(x)
    t = 0.3275911 * a
    t += 1.0
    np.divide(1.0, t, out=t)
    poly = t * 1.061405429
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += c
        poly *= t
    np.multiply(a, a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a
    np.subtract(1.0, poly, out=poly)
    poly *= np.sign(x)
    return poly


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# fn of ditron_task.elementwise -> numpy implementation (same names and arities as task.ELEMENTWISE_FNS)
ELEMENTWISE: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum, "neg": np.negative,
    "relu": lambda x: np.maximum(x, 0),
    "silu": lambda x: x * _sigmoid(x),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "exp": np.exp, "sigmoid": _sigmoid, "tanh": np.tanh,
    "copy": lambda x: np.array(x, copy=True),
    "silu_mul": lambda a, b: a * _sigmoid(a) * b,
    "cast": lambda x: np.array(x, copy=True),  # element types are not emulated
}

REDUCE: dict[str, Callable[[Sequence[np.ndarray]], np.ndarray]] = {
    "sum": lambda xs: np.sum(np.stack(xs), axis=0),
    "max": lambda xs: np.max(np.stack(xs), axis=0),
    "min": lambda xs: np.min(np.stack(xs), axis=0),
    "prod": lambda xs: np.prod(np.stack(xs), axis=0),
}


# ------------------------------------------------------------------------------------------------ the mesh

def rank_coords(mesh: Mesh, rank: int) -> dict[str, int]:
    """The coordinates of rank on mesh, by axis name."""
    return dict(zip(mesh.axes, (int(c) for c in np.unravel_index(rank, mesh.shape))))


def rank_of(mesh: Mesh, coords: Mapping[str, int]) -> int:
    return int(np.ravel_multi_index(tuple(coords[a] for a in mesh.axes), mesh.shape))


def axis_group(mesh: Mesh, rank: int, axis: str) -> list[int]:
    """The ranks a collective over axis combines for rank, ordered by their coordinate on axis."""
    coords = rank_coords(mesh, rank)
    return [rank_of(mesh, {**coords, axis: i}) for i in range(mesh.axis_size(axis))]


def block_index(sharding: Sharding, dim: int, coords: Mapping[str, int], mesh: Mesh) -> int:
    """Which block of dim (0 .. shards - 1) the ranks at coords hold."""
    index = 0
    for axis in sharding.dims[dim]:
        index = index * mesh.axis_size(axis) + coords[axis]
    return index


def _block_slices(sharding: Sharding, shape: Sequence[int], coords, mesh: Mesh):
    """(slices into the zero-padded global array, local shape) of the block held at coords."""
    local = sharding.local_shape(tuple(shape), mesh)
    slices = tuple(slice(block_index(sharding, d, coords, mesh) * local[d],
                         (block_index(sharding, d, coords, mesh) + 1) * local[d]) for d in range(len(shape)))
    return slices, local


def _padded(array: np.ndarray, sharding: Sharding, mesh: Mesh) -> np.ndarray:
    local = sharding.local_shape(array.shape, mesh)
    full = [local[d] * sharding.shards(d, mesh) for d in range(array.ndim)]
    if list(array.shape) == full:
        return array
    out = np.zeros(full, dtype=array.dtype)
    out[tuple(slice(0, s) for s in array.shape)] = array
    return out


def shard_array(array: np.ndarray, sharding: Sharding, mesh: Mesh) -> list[np.ndarray]:
    """The shard of a global array held by each rank (flat rank order), zero-padded where the sharding is
    padded; for partial axes, coordinate 0 holds the value and the other ranks zeros."""
    array = np.asarray(array)
    problem = sharding.check(array.shape, mesh)
    if problem:
        raise EvaluationError(f"cannot shard an array of shape {array.shape}: {problem}")
    padded = _padded(array, sharding, mesh)
    out = []
    for r in range(mesh.size):
        coords = rank_coords(mesh, r)
        slices, _ = _block_slices(sharding, array.shape, coords, mesh)
        block = np.array(padded[slices], copy=True)
        if any(coords[a] for a in sharding.partial):
            block = np.zeros_like(block)
        out.append(block)
    return out


def unshard_array(per_rank: Sequence[np.ndarray], sharding: Sharding, mesh: Mesh, shape: Sequence[int], *,
                  check_replicas: bool = False) -> np.ndarray:
    """The global array of shape from each rank's shard: blocks are placed, partial axes summed, padding
    dropped. Replicas (ranks that differ only on axes the sharding does not use) are read from coordinate 0;
    with check_replicas, replicas that differ raise EvaluationError."""
    if len(per_rank) != mesh.size:
        raise EvaluationError(f"expected one array per rank ({mesh.size}), got {len(per_rank)}")
    shape = tuple(shape)
    local = sharding.local_shape(shape, mesh)
    unused = [a for a in mesh.axes if a not in sharding.axes_used()]
    full = [local[d] * sharding.shards(d, mesh) for d in range(len(shape))]
    out = None
    for r, block in enumerate(per_rank):
        block = np.asarray(block)
        if tuple(block.shape) != tuple(local):
            raise EvaluationError(f"rank {r} holds a shard of shape {block.shape}; sharding {sharding.dims} of "
                                  f"{shape} needs {local}")
        coords = rank_coords(mesh, r)
        if any(coords[a] for a in unused):
            if check_replicas:
                rep = rank_of(mesh, {**coords, **{a: 0 for a in unused}})
                if not np.array_equal(block, np.asarray(per_rank[rep]), equal_nan=True):
                    raise EvaluationError(f"rank {r} and rank {rep} should hold the same replica but differ")
            continue
        if out is None:
            out = np.zeros(full, dtype=block.dtype)
        slices, _ = _block_slices(sharding, shape, coords, mesh)
        out[slices] += block
    return out[tuple(slice(0, s) for s in shape)]


def shard_inputs(func_op, inputs, mesh: Mesh | None = None) -> list[list[np.ndarray]]:
    """Per rank, the shards of the global inputs, by the function's argument shardings (none: replicated)."""
    fn, mesh = _func(func_op), mesh or _mesh_of(func_op)
    arrays = _bind_inputs(fn, inputs)
    per_arg = [shard_array(a, _arg_sharding(fn, i, a.ndim), mesh) for i, a in enumerate(arrays)]
    return [[shards[r] for shards in per_arg] for r in range(mesh.size)]


def unshard_outputs(func_op, per_rank_outputs: Sequence[Sequence[np.ndarray]], mesh: Mesh | None = None, *,
                    shapes: Sequence[Sequence[int]] | None = None, check_replicas: bool = False
                    ) -> list[np.ndarray]:
    """The global results from every rank's results, by the function's result shardings. Global shapes come
    from ``shapes``, else from the results' ``ditron.global_shape`` (written by ditron-partition for padded
    shardings), else from the shardings and the local result types (exact when nothing is padded)."""
    fn, mesh = _func(func_op), mesh or _mesh_of(func_op)
    results = list(ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value).results)
    out = []
    for i, t in enumerate(results):
        t = ir.RankedTensorType(t)
        sharding = result_sharding(fn, i) or Sharding.replicated(t.rank)
        recorded = _global_shape(fn, i)
        shape = tuple(shapes[i]) if shapes is not None else recorded if recorded is not None else \
            tuple(s * sharding.shards(d, mesh) for d, s in enumerate(t.shape))
        out.append(unshard_array([outs[i] for outs in per_rank_outputs], sharding, mesh, shape,
                                 check_replicas=check_replicas))
    return out


# ------------------------------------------------------------------------------------------ the interpreter

def _global_shape(fn: ir.Operation, index: int) -> tuple[int, ...] | None:
    from .passes.partition import GLOBAL_SHAPE_ATTR
    if "res_attrs" not in fn.attributes:
        return None
    entries = ir.ArrayAttr(fn.attributes["res_attrs"])
    if index >= len(entries):
        return None
    d = ir.DictAttr(entries[index])
    return tuple(ir.DenseI64ArrayAttr(d[GLOBAL_SHAPE_ATTR])) if GLOBAL_SHAPE_ATTR in d else None


def _func(func_op) -> ir.Operation:
    if isinstance(func_op, ir.Module):
        funcs = [op.operation for op in func_op.body.operations if op.operation.name == "func.func"]
        if len(funcs) != 1:
            raise EvaluationError(f"the module has {len(funcs)} functions; pass the func.func to evaluate")
        return funcs[0]
    op = func_op.operation if isinstance(func_op, ir.OpView) else func_op
    if op.name != "func.func":
        raise EvaluationError(f"expected a func.func, got '{op.name}'")
    return op


def _mesh_of(func_op) -> Mesh:
    fn = _func(func_op)
    try:
        mesh = Mesh.enclosing(fn)
    except ValueError as err:
        raise EvaluationError(str(err)) from None
    if mesh is None:
        return Mesh(("world",), (1,))
    return mesh


def _arg_sharding(fn, i: int, rank: int) -> Sharding:
    return arg_sharding(fn, i) or Sharding.replicated(rank)


def _arg_name(arg: ir.BlockArgument) -> str | None:
    loc = arg.location
    return loc.name_str if loc.is_a_name() else None


def _bind_inputs(fn: ir.Operation, inputs) -> list[np.ndarray]:
    args = list(fn.regions[0].blocks[0].arguments)
    if isinstance(inputs, Mapping):
        by_name = {_arg_name(a): i for i, a in enumerate(args) if _arg_name(a)}
        arrays: list = [None] * len(args)
        for key, value in inputs.items():
            index = key if isinstance(key, int) else by_name.get(key)
            if index is None or not 0 <= index < len(args):
                raise EvaluationError(f"no argument '{key}' (arguments: {sorted(by_name) or len(args)})")
            arrays[index] = value
        missing = [i for i, a in enumerate(arrays) if a is None]
        if missing:
            raise EvaluationError(f"no input given for argument(s) {missing}")
    else:
        arrays = list(inputs)
        if len(arrays) != len(args):
            raise EvaluationError(f"the function takes {len(args)} arguments, got {len(arrays)} inputs")
    return [np.asarray(a) for a in arrays]


def _check_shape(op: ir.Operation, index: int, t: ir.Type, array, what: str) -> None:
    if not isinstance(t, ir.RankedTensorType):
        return
    want = list(t.shape)
    if isinstance(array, Rows):  # some rows of the value: its other dims only
        want, array = [len(array.index)] + want[1:], array.data
    if len(want) != array.ndim or any(w >= 0 and w != s for w, s in zip(want, array.shape)):
        raise EvaluationError(f"'{op.name}' {what} {index}: the IR says {t} but the value has shape "
                              f"{tuple(array.shape)}")


class _Interpreter:
    """Runs one function on R ranks in lock step: every SSA value maps to a list of R arrays."""

    def __init__(self, fn: ir.Operation, mesh: Mesh, ranks: int, spmd: bool):
        self.fn, self.mesh, self.ranks, self.spmd = fn, mesh, ranks, spmd

    def run(self, per_rank_inputs: Sequence[Sequence[np.ndarray]], rows=None) -> list[list[np.ndarray]]:
        """Per rank, the results. ``rows[r][i]``: the rows (dim 0) of result i wanted on rank r (None: all of
        them); a result wanted at some rows comes back as a ``Rows``, computed from just the rows of every value
        that those rows depend on (``_demand``; every row of a value used by an op that is not row-local)."""
        block = self.fn.regions[0].blocks[0]
        env: dict[ir.Value, list] = {}
        for i, arg in enumerate(block.arguments):
            values = [np.asarray(inputs[i]) for inputs in per_rank_inputs]
            for v in values:
                _check_shape(self.fn, i, arg.type, v, "argument")
            env[arg] = values
        ops = [op.operation for op in block.operations]
        need = self._needs(ops, rows) if rows is not None else {}
        for op in ops:
            operands = [env[v] for v in op.operands]
            if op.name == "func.return":
                return [[vals[r] for vals in operands] for r in range(self.ranks)]
            handler = _HANDLERS.get(op.name)
            if handler is None:
                raise EvaluationError(f"the reference interpreter does not know '{op.name}'")
            if op.name in _COLLECTIVE_NAMES and not self.spmd:
                raise EvaluationError(f"'{op.name}' is a collective of the local (SPMD) view; use evaluate_spmd")
            wanted = need.get(op.results[0]) if len(op.results) == 1 else None
            if wanted is None or any(isinstance(w, str) for w in wanted):
                results = handler(self, op, operands)
            else:
                results = [[Rows(idx, data) for idx, data in zip(wanted, vals)]
                           for vals in _ROW_HANDLERS[op.name](self, op, operands, wanted)]
            for j, (res, vals) in enumerate(zip(op.results, results)):
                for v in vals:
                    _check_shape(op, j, res.type, v, "result")
                env[res] = vals
        raise EvaluationError("the function has no func.return")

    def _needs(self, ops: list, rows) -> dict:
        """Per value, per rank: ALL or the rows of it (an index array) the results' ``rows`` are computed from."""
        R = self.ranks
        need: dict = {}
        ret = ops[-1] if ops and ops[-1].name == "func.return" else None
        if ret is None:
            raise EvaluationError("the function has no func.return")
        if len(rows) != R:
            raise EvaluationError(f"rows: expected one entry per rank ({R}), got {len(rows)}")
        for i, v in enumerate(ret.operands):
            for r in range(R):
                want = rows[r][i] if i < len(rows[r]) else None
                cur = need.setdefault(v, [None] * R)
                cur[r] = _union(cur[r], ALL if want is None else _rows_index(want))
        for op in reversed(ops[:-1]):
            if op.name not in _ROW_HANDLERS:
                wanted = None
            else:
                wanted = need.get(op.results[0]) if len(op.results) == 1 else None
            if wanted is not None:
                wanted = [np.zeros(0, np.int64) if w is None else w for w in wanted]
            demands = None if wanted is None or any(isinstance(w, str) for w in wanted) else \
                _demand(self, op, [wanted])
            for k, v in enumerate(op.operands):
                cur = need.setdefault(v, [None] * R)
                for r in range(R):
                    cur[r] = _union(cur[r], ALL if demands is None else demands[k][r])
        for v, per in need.items():
            need[v] = [np.zeros(0, np.int64) if w is None else w for w in per]
        return need

    def per_rank(self, operands, fn):
        return [[fn(*(vals[r] for vals in operands)) for r in range(self.ranks)]]


def _shard(it: _Interpreter, op, operands):
    return [list(operands[0])]


def _matmul(it: _Interpreter, op, operands):
    if task.Matmul(op).transpose_b:  # rhs [N, K]
        return it.per_rank(operands, lambda a, b: np.matmul(a, b.T))
    return it.per_rank(operands, np.matmul)


def _grouped_matmul(it: _Interpreter, op, operands):
    def run(a, b, sizes):
        out = np.zeros((a.shape[0], b.shape[2]), dtype=np.result_type(a, b))
        start = 0
        if (np.asarray(sizes) < 0).any():
            raise EvaluationError(f"'{op.name}': group sizes must be >= 0, got {np.asarray(sizes).tolist()}")
        for e, n in enumerate(np.asarray(sizes).astype(np.int64)):
            out[start:start + n] = a[start:start + n] @ b[e]
            start += int(n)
        if start > a.shape[0]:
            raise EvaluationError(f"'{op.name}': group sizes add up to {start} rows but lhs has {a.shape[0]}")
        return out
    return it.per_rank(operands, run)


def _elementwise(it: _Interpreter, op, operands):
    fn = task.Elementwise(op).fn
    if fn not in ELEMENTWISE:
        raise EvaluationError(f"'{op.name}': no numpy implementation of fn '{fn}'")
    return it.per_rank(operands, ELEMENTWISE[fn])


def _coll_all_gather(it: _Interpreter, op, operands):
    g = task.AllGather(op)
    xs = operands[0]
    return [[np.concatenate([xs[p] for p in axis_group(it.mesh, r, g.axis)], axis=g.dim) for r in range(it.ranks)]]


def _coll_reduce_scatter(it: _Interpreter, op, operands):
    rs = task.ReduceScatter(op)
    xs, n = operands[0], it.mesh.axis_size(rs.axis)
    out = []
    for r in range(it.ranks):
        total = REDUCE[rs.reduce]([xs[p] for p in axis_group(it.mesh, r, rs.axis)])
        if total.shape[rs.dim] % n:
            raise EvaluationError(f"'{op.name}': dim {rs.dim} of size {total.shape[rs.dim]} does not divide by {n}")
        out.append(np.split(total, n, axis=rs.dim)[rank_coords(it.mesh, r)[rs.axis]])
    return [out]


def _coll_all_reduce(it: _Interpreter, op, operands):
    ar = task.AllReduce(op)
    xs = operands[0]
    return [[REDUCE[ar.reduce]([xs[p] for p in axis_group(it.mesh, r, ar.axis)]) for r in range(it.ranks)]]


def _coll_all_to_all(it: _Interpreter, op, operands):
    a2a = task.AllToAll(op)
    xs, n = operands[0], it.mesh.axis_size(a2a.axis)
    sizes = operands[1] if len(operands) > 1 else None
    if a2a.bounded:  # per axis group: the group's inputs in order, the rank's own result
        outs, recvs = [], []
        for r in range(it.ranks):
            group = axis_group(it.mesh, r, a2a.axis)
            o, c = all_to_all_sized([xs[p] for p in group], [sizes[p] for p in group], a2a.capacity)
            me = rank_coords(it.mesh, r)[a2a.axis]
            outs.append(o[me].astype(xs[r].dtype))
            recvs.append(c[me])
        return [outs, recvs]

    def parts(r):
        x = xs[r]
        if sizes is None:
            if x.shape[a2a.split_dim] % n:
                raise EvaluationError(f"'{op.name}': split dim {a2a.split_dim} of size {x.shape[a2a.split_dim]} "
                                      f"does not divide by {n}")
            return np.split(x, n, axis=a2a.split_dim)
        bounds = np.cumsum(np.asarray(sizes[r]).astype(np.int64))[:-1]
        return np.split(x, bounds, axis=a2a.split_dim)

    split = [parts(r) for r in range(it.ranks)]
    out = []
    for r in range(it.ranks):
        me = rank_coords(it.mesh, r)[a2a.axis]
        out.append(np.concatenate([split[p][me] for p in axis_group(it.mesh, r, a2a.axis)], axis=a2a.concat_dim))
    return [out]


def _custom(it: _Interpreter, op, operands):
    """A user kernel program: its registered reference on the global arrays (local view: the operands unsharded
    by the op's sharding rule, the results sharded by it)."""
    from .custom_ops import registered
    k = task.Custom(op)
    try:
        custom = registered(k.kernel)
    except KeyError as err:
        raise EvaluationError(f"'{op.name}': {err.args[0]}") from None
    params = k.params
    if not it.spmd:
        return [[a] for a in custom.evaluate([vals[0] for vals in operands], params)]
    arrays = []
    for v, sh, vals in zip(op.operands, k.in_shardings, operands):
        local = ir.RankedTensorType(v.type).shape
        shape = [n * sh.shards(d, it.mesh) for d, n in enumerate(local)]
        arrays.append(unshard_array(vals, sh, it.mesh, shape))
    outs = custom.evaluate(arrays, params)
    return [shard_array(a, sh, it.mesh) for a, sh in zip(outs, k.out_shardings)]


# ------------------------------------------------------------------------------- evaluation at some rows only

class Rows:
    """A value known at some rows of its dim 0 only: ``data[j]`` is row ``index[j]`` (``index`` sorted, unique).
    What ``evaluate`` / ``evaluate_spmd`` return for a result asked at ``rows``."""

    __slots__ = ("index", "data")

    def __init__(self, index: np.ndarray, data: np.ndarray):
        self.index, self.data = index, data

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)


ALL = "all"  # a demand for every row of a value


def _rows_index(rows) -> np.ndarray:
    idx = np.unique(np.asarray(rows, dtype=np.int64).reshape(-1))
    return idx


def _union(a, b):
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, str) or isinstance(b, str):
        return ALL
    return np.union1d(a, b)


def _take(value, idx: np.ndarray) -> np.ndarray:
    """Rows idx of a whole array or of a Rows (which holds them: its index is the union of its users' needs)."""
    if isinstance(value, Rows):
        pos = np.searchsorted(value.index, idx)
        return value.data[pos]
    return np.asarray(value)[idx]


def _dim0(v: ir.Value) -> int | None:
    t = v.type
    if not isinstance(t, ir.RankedTensorType) or t.rank == 0:
        return None
    return t.shape[0]


def _row_operand(operand: ir.Value, result: ir.Value) -> bool:
    """Does an elementwise operand's row i feed the result's row i (else it broadcasts: every row of it)?"""
    a, r = operand.type, result.type
    return (isinstance(a, ir.RankedTensorType) and isinstance(r, ir.RankedTensorType) and a.rank == r.rank >= 1
            and a.shape[0] == r.shape[0])


def _demand(it: "_Interpreter", op: ir.Operation, needs: list) -> list | None:
    """Per operand, per rank, the rows of it that the results' rows ``needs[j][r]`` (index arrays) are computed
    from; None where the op is not row-local (every row of every operand)."""
    name, R = op.name, it.ranks
    n_ops = len(op.operands)
    out = [[None] * R for _ in range(n_ops)]

    def add(k, r, rows):
        out[k][r] = _union(out[k][r], rows)

    rows = needs[0]
    if name in (task.Matmul.op_name(), task.GroupedMatmul.op_name()):
        for r in range(R):
            add(0, r, rows[r])
            for k in range(1, n_ops):
                add(k, r, ALL)
        return out
    if name == task.Shard.op_name():
        for r in range(R):
            add(0, r, rows[r])
        return out
    if name == task.Elementwise.op_name():
        for k, v in enumerate(op.operands):
            row = _row_operand(v, op.results[0])
            for r in range(R):
                add(k, r, rows[r] if row else ALL)
        return out
    if name == task.AllReduce.op_name():
        ax = task.AllReduce(op).axis
        for r in range(R):
            for p in axis_group(it.mesh, r, ax):
                add(0, p, rows[r])
        return out
    if name == task.AllGather.op_name():
        g = task.AllGather(op)
        c = _dim0(op.operands[0])
        for r in range(R):
            group = axis_group(it.mesh, r, g.axis)
            for i, p in enumerate(group):
                if g.dim != 0:
                    add(0, p, rows[r])
                elif c is not None and c >= 0:
                    sel = rows[r][(rows[r] >= i * c) & (rows[r] < (i + 1) * c)]
                    add(0, p, sel - i * c)
                else:
                    return None
        return out
    if name == task.ReduceScatter.op_name():
        rs = task.ReduceScatter(op)
        c = _dim0(op.results[0])
        if rs.dim == 0 and (c is None or c < 0):
            return None
        for r in range(R):
            me = rank_coords(it.mesh, r)[rs.axis]
            for p in axis_group(it.mesh, r, rs.axis):
                add(0, p, rows[r] + me * c if rs.dim == 0 else rows[r])
        return out
    if name == task.AllToAll.op_name():
        a2a = task.AllToAll(op)
        if n_ops != 1 or len(op.results) != 1:
            return None
        n = it.mesh.axis_size(a2a.axis)
        c = _dim0(op.operands[0])
        if a2a.split_dim != 0 or a2a.concat_dim != 0 or c is None or c < 0 or c % n:
            return None
        c //= n
        for r in range(R):
            me = rank_coords(it.mesh, r)[a2a.axis]
            for i, p in enumerate(axis_group(it.mesh, r, a2a.axis)):
                sel = rows[r][(rows[r] >= i * c) & (rows[r] < (i + 1) * c)]
                add(0, p, sel - i * c + me * c)
        return out
    return None


def _rows_matmul(it, op, operands, rows):
    tb = task.Matmul(op).transpose_b
    return [[_take(a, idx) @ (b.T if tb else b) for a, b, idx in zip(operands[0], operands[1], rows)]]


def _rows_grouped_matmul(it, op, operands, rows):
    out = []
    for a, b, sizes, idx in zip(operands[0], operands[1], operands[2], rows):
        sizes = np.asarray(sizes).astype(np.int64)
        if (sizes < 0).any():
            raise EvaluationError(f"'{op.name}': group sizes must be >= 0, got {sizes.tolist()}")
        ends = np.cumsum(sizes)
        total = int(ends[-1]) if len(ends) else 0
        lhs_rows = _dim0(op.operands[0])
        if lhs_rows is not None and lhs_rows >= 0 and total > lhs_rows:
            raise EvaluationError(f"'{op.name}': group sizes add up to {total} rows but lhs has {lhs_rows}")
        a_rows = _take(a, idx)
        y = np.zeros((len(idx), b.shape[2]), dtype=np.result_type(a_rows, b))
        group = np.searchsorted(ends, idx, side="right")
        for e in np.unique(group[idx < total]):
            sel = group == e
            y[sel] = a_rows[sel] @ b[e]
        out.append(y)
    return [out]


def _rows_elementwise(it, op, operands, rows):
    fn = task.Elementwise(op).fn
    if fn not in ELEMENTWISE:
        raise EvaluationError(f"'{op.name}': no numpy implementation of fn '{fn}'")
    kinds = [_row_operand(v, op.results[0]) for v in op.operands]
    return [[ELEMENTWISE[fn](*(_take(vals[r], idx) if row else vals[r] for vals, row in zip(operands, kinds)))
             for r, idx in enumerate(rows)]]


def _gather(parts, idx: np.ndarray, rest) -> np.ndarray:
    """Rows idx of a value whose rows come from ``parts``: (lo, hi, source value, source row of lo)."""
    out = None
    for lo, hi, src, first in parts:
        sel = (idx >= lo) & (idx < hi)
        if not sel.any():
            continue
        got = _take(src, idx[sel] - lo + first)
        if out is None:
            out = np.zeros((len(idx), *got.shape[1:]), dtype=got.dtype)
        out[sel] = got
    return out if out is not None else np.zeros((len(idx), *rest), dtype=np.float32)


def _rows_collective(it, op, operands, rows):
    xs, name = operands[0], op.name
    res_t = ir.RankedTensorType(op.results[0].type)
    rest = tuple(res_t.shape[1:])
    out = []
    for r, idx in enumerate(rows):
        if name == task.AllReduce.op_name():
            ar = task.AllReduce(op)
            out.append(REDUCE[ar.reduce]([_take(xs[p], idx) for p in axis_group(it.mesh, r, ar.axis)]))
        elif name == task.ReduceScatter.op_name():
            rs = task.ReduceScatter(op)
            me = rank_coords(it.mesh, r)[rs.axis]
            at = idx + me * res_t.shape[0] if rs.dim == 0 else idx
            out.append(REDUCE[rs.reduce]([_take(xs[p], at) for p in axis_group(it.mesh, r, rs.axis)]))
        elif name == task.AllGather.op_name():
            g = task.AllGather(op)
            group = axis_group(it.mesh, r, g.axis)
            if g.dim != 0:
                out.append(np.concatenate([_take(xs[p], idx) for p in group], axis=g.dim))
            else:
                c = _dim0(op.operands[0])
                out.append(_gather([(i * c, (i + 1) * c, xs[p], 0) for i, p in enumerate(group)], idx, rest))
        else:  # all_to_all, equal parts along dim 0 (_demand)
            a2a = task.AllToAll(op)
            group = axis_group(it.mesh, r, a2a.axis)
            c = _dim0(op.operands[0]) // len(group)
            me = rank_coords(it.mesh, r)[a2a.axis]
            out.append(_gather([(i * c, (i + 1) * c, xs[p], me * c) for i, p in enumerate(group)], idx, rest))
    return [out]


_ROW_HANDLERS = {
    task.Shard.op_name(): lambda it, op, operands, rows: [[_take(v, idx) for v, idx in zip(operands[0], rows)]],
    task.Matmul.op_name(): _rows_matmul,
    task.GroupedMatmul.op_name(): _rows_grouped_matmul,
    task.Elementwise.op_name(): _rows_elementwise,
    task.AllGather.op_name(): _rows_collective,
    task.ReduceScatter.op_name(): _rows_collective,
    task.AllReduce.op_name(): _rows_collective,
    task.AllToAll.op_name(): _rows_collective,
}


_HANDLERS = {
    task.Custom.op_name(): _custom,
    task.Shard.op_name(): _shard,
    task.Matmul.op_name(): _matmul,
    task.GroupedMatmul.op_name(): _grouped_matmul,
    task.Elementwise.op_name(): _elementwise,
    task.AllGather.op_name(): _coll_all_gather,
    task.ReduceScatter.op_name(): _coll_reduce_scatter,
    task.AllReduce.op_name(): _coll_all_reduce,
    task.AllToAll.op_name(): _coll_all_to_all,
}


_COLLECTIVE_NAMES = frozenset(c.op_name() for c in task.COLLECTIVES)


def evaluate(func_op, inputs, rows=None) -> list:
    """Run a global-view task program on whole tensors. inputs: a list (argument order) or a dict keyed by
    argument index or argument name (the name location the frontend gives each argument). ``rows[i]``: compute
    result i at those rows of its dim 0 only (None: whole), returned as a ``Rows``; only what they depend on is
    computed (through row-local ops: matmul's lhs, elementwise, grouped_matmul's lhs), the rest whole."""
    fn = _func(func_op)
    if VIEW_ATTR in fn.attributes and ir.StringAttr(fn.attributes[VIEW_ATTR]).value == "local":
        raise EvaluationError("the function is in the local (SPMD) view; use evaluate_spmd")
    arrays = _bind_inputs(fn, inputs)
    return _Interpreter(fn, _mesh_of(fn), 1, spmd=False).run([arrays], None if rows is None else [rows])[0]


def evaluate_spmd(func_op, per_rank_inputs: Sequence, mesh: Mesh | None = None, rows=None) -> list[list]:
    """Run a local-view (SPMD) task program on every rank of mesh (default: the module's ``ditron.mesh``).
    per_rank_inputs[r] holds rank r's arguments (a list, or a dict as for evaluate). Returns per rank its results.
    ``rows[r][i]``: result i of rank r at those rows only (a ``Rows``; None: whole), as for ``evaluate``; the
    collectives move rows (all_gather, reduce_scatter, all_reduce, equal-part all_to_all along dim 0)."""
    fn = _func(func_op)
    mesh = mesh or _mesh_of(fn)
    if len(per_rank_inputs) != mesh.size:
        raise EvaluationError(f"the mesh has {mesh.size} ranks but {len(per_rank_inputs)} input sets were given")
    bound = [_bind_inputs(fn, inputs) for inputs in per_rank_inputs]
    return _Interpreter(fn, mesh, mesh.size, spmd=True).run(bound, rows)
