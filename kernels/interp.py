"""A numpy interpreter for the TTIR (+ ditron_core) that the kernel templates emit, one program at a time.

It exists to check the templates on a machine without a GPU: it runs the *emitted IR* on small problems, so tests
can compare its numbers with numpy and its trace of memory accesses, waits and notifies with what the template's
``tiles()`` claims. It covers the subset the templates use (arith, scf.for/if/while, tt.make_range/splat/
broadcast/expand_dims/reshape/trans/split/addptr/load/store/dot/atomic_rmw/reduce, math.exp/erf, tensor descriptors,
ditron_core);
anything else raises ``NotImplementedError`` naming the op. Integer results wrap to their type's width as on the GPU
(``wrap``: an i32 offset past 2**31 turns negative, and the load it addresses fails), and an ``scf.for`` whose
induction variable would overflow on its last step raises ``OverflowError``.

Memory is a dict ``{(arg name, rank): flat numpy array}`` (storage dtypes of ``numerics``). Pointer arguments
point at ``(name, rank)``; ``ditron_core.symm_at`` moves a pointer to the same buffer name on the peer. Programs
run sequentially, so a wait whose slot is not yet reached cannot be satisfied later: it raises ``Blocked``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mlir import ir

from ..dialects import ttir as T
from . import expanded, notify_effects, notify_pad
from .numerics import round_to, storage_dtype

_MLIR_TO_DTYPE = {"bf16": "bf16", "f16": "fp16", "f32": "fp32", "f8E4M3FN": "fp8e4m3", "f8E5M2": "fp8e5m2",
                  "i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64"}
SPIN_LIMIT = 10_000


class Blocked(RuntimeError):
    """A wait (or a spin loop) that sequential execution can never satisfy."""


def dtype_name(t: ir.Type) -> str:
    t = T.elem(t)
    if T.is_ptr(t):
        return "ptr"
    if str(t) not in _MLIR_TO_DTYPE:
        raise NotImplementedError(f"interp: element type {t}")
    return _MLIR_TO_DTYPE[str(t)]


def pointee_name(t: ir.Type) -> str:
    return _MLIR_TO_DTYPE[str(T.pointee(T.elem(t)))]


@dataclass
class Ptr:
    """A pointer (off: int) or tensor of pointers (off: int64 array) into buffer ``key`` = (arg name, rank)."""
    key: tuple[str, int]
    off: Any
    dtype: str


@dataclass
class Desc:
    key: tuple[str, int]
    base: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block: tuple[int, ...]
    dtype: str


@dataclass
class Event:
    """kind: 'read' | 'write' (index: flat element indices), 'wait' (index: slots, value: threshold),
    'notify' (index: slots, value, op), 'atomic' (index, value, op = the rmw kind, sem)."""
    kind: str
    key: tuple[str, int]
    index: np.ndarray
    value: int | None = None
    op: str | None = None
    sem: str | None = None


_RMW = {v: k for k, v in T.RMW.items()}    # Triton's enum value -> kind
_SEM = {v: k for k, v in T.SEM.items()}


def _int_attr(op, name, default=None):
    a = op.attributes[name] if name in op.attributes else None
    return default if a is None else int(ir.IntegerAttr(a).value)


def _divsi(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((np.asarray(a) < 0) ^ (np.asarray(b) < 0), -q, q)


_BINARY = {
    "arith.addi": np.add, "arith.subi": np.subtract, "arith.muli": np.multiply, "arith.divsi": _divsi,
    "arith.remsi": lambda a, b: a - b * _divsi(a, b), "arith.minsi": np.minimum, "arith.maxsi": np.maximum,
    "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor,
    "arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply, "arith.divf": np.divide,
    "arith.maximumf": np.maximum, "arith.minimumf": np.minimum,
}


def _erf(x):
    from ..reference import _erf as erf
    return erf(np.asarray(x, np.float32))


_UNARY_F = {"math.exp": np.exp, "math.erf": _erf}  # the elementwise fns and GEMM epilogues use these
_CMPI = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater, 5: np.greater_equal,
         6: np.less, 7: np.less_equal, 8: np.greater, 9: np.greater_equal}


def _scalar(x):
    return x.item() if isinstance(x, np.ndarray) and x.ndim == 0 else x


def wrap(x, t: ir.Type):
    """x as a value of integer type t holds it on a GPU: two's complement, wrapped to t's width (an i32 offset
    past 2**31 turns negative, as it does in the kernel). Booleans (i1) and non-integers pass unchanged."""
    e = T.elem(t)
    if not isinstance(e, ir.IntegerType) or ir.IntegerType(e).width < 2:
        return x
    width = ir.IntegerType(e).width
    half, mask = 1 << (width - 1), (1 << width) - 1
    if isinstance(x, np.ndarray):
        if x.dtype == np.bool_ or width == 64:  # int64 arithmetic wraps by itself
            return x
        return ((x.astype(np.int64) + half) & mask) - half
    if isinstance(x, (bool, np.bool_)):
        return x
    return ((int(x) + half) & mask) - half


def _combiner(op) -> str:
    """The name of the single op a tt.reduce / tt.scan region combines with."""
    return [o.operation.name for o in op.regions[0].blocks[0].operations][0]


_FAST_REDUCE = {"arith.addi": lambda a, axis: a.astype(np.int64).sum(axis=axis),
                "arith.minsi": lambda a, axis: a.min(axis=axis), "arith.maxsi": lambda a, axis: a.max(axis=axis)}


class Program:
    """Runs one tt.func for one program id."""

    def __init__(self, func_op, memory: dict, *, pid: int, grid: int, rank: int, num_ranks: int,
                 args: dict[str, Any]):
        self.func = func_op.operation if hasattr(func_op, "operation") else func_op
        self.memory, self.pid, self.grid = memory, pid, grid
        self.rank, self.num_ranks = rank, num_ranks
        self.args = args
        self.events: list[Event] = []

    # -- memory
    def _buf(self, key):
        if key not in self.memory:
            raise KeyError(f"interp: no buffer {key} in memory")
        return self.memory[key]

    def _gather(self, p: Ptr, mask):
        buf = self._buf(p.key)
        off = np.asarray(p.off, dtype=np.int64)
        m = np.ones(off.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), off.shape)
        if ((off[m] < 0) | (off[m] >= buf.size)).any():
            raise IndexError(f"interp: load out of bounds of {p.key} (size {buf.size})")
        out = np.zeros(off.shape, buf.dtype)
        out[m] = buf[off[m]]
        self.events.append(Event("read", p.key, off[m].ravel()))
        return out, m

    def _scatter(self, p: Ptr, value, mask):
        buf = self._buf(p.key)
        off = np.asarray(p.off, dtype=np.int64)
        m = np.ones(off.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), off.shape)
        if ((off[m] < 0) | (off[m] >= buf.size)).any():
            raise IndexError(f"interp: store out of bounds of {p.key} (size {buf.size})")
        v = np.broadcast_to(round_to(p.dtype, value) if p.dtype.startswith(("bf", "fp")) else value, off.shape)
        buf[off[m]] = v[m]
        self.events.append(Event("write", p.key, off[m].ravel()))

    # -- evaluation
    def run(self) -> list[Event]:
        block = self.func.regions[0].blocks[0]
        env = {}
        for a, name in zip(block.arguments, self.args["__names__"]):
            env[a] = self.args[name]
        self._block(block, env)
        return self.events

    def _block(self, block, env):
        """Evaluate a block's ops; returns the operands of its terminator (yield/condition/return)."""
        for op in block.operations:
            op = op.operation
            name = op.name
            if name in ("scf.yield", "tt.return", "scf.condition", "tt.reduce.return"):
                return [env[v] for v in op.operands]
            results = self._op(op, name, [env[v] for v in op.operands], env)
            for r, v in zip(op.results, results):
                env[r] = v
        return []

    def _op(self, op, name, x, env):  # noqa: C901 - one dispatch table
        if name in _BINARY:
            out = _BINARY[name](np.asarray(x[0]), np.asarray(x[1]))
            if name.endswith("f"):
                out = round_to(dtype_name(op.results[0].type), out)
            else:
                out = wrap(out, op.results[0].type)
            return [_scalar(out)]
        if name in _UNARY_F:
            with np.errstate(over="ignore"):
                out = _UNARY_F[name](np.asarray(x[0], np.float32))
            return [_scalar(round_to(dtype_name(op.results[0].type), out))]
        if name == "arith.constant":
            a = op.attributes["value"]
            t = op.results[0].type
            if isinstance(t, ir.RankedTensorType):
                d = ir.DenseElementsAttr(a)
                v = d.get_splat_value()
                val = v.value if hasattr(v, "value") else v
                return [np.full(t.shape, val, dtype=storage_dtype(dtype_name(t)))]
            return [a.value]
        if name == "arith.cmpi":
            return [_scalar(_CMPI[_int_attr(op, "predicate")](np.asarray(x[0]), np.asarray(x[1])))]
        if name == "arith.select":
            return [_scalar(np.where(x[0], x[1], x[2]))]
        if name == "arith.extsi" and T.elem(op.operands[0].type) == ir.IntegerType.get_signless(1):
            return [_scalar(-np.asarray(x[0], np.int64))]  # i1 true sign-extends to -1, as on the GPU
        if name in ("arith.extsi", "arith.extui", "arith.index_cast"):
            return [_scalar(np.asarray(x[0]).astype(np.int64)) if np.asarray(x[0]).dtype == np.bool_ else x[0]]
        if name == "arith.trunci":
            return [_scalar(wrap(np.asarray(x[0]), op.results[0].type))]
        if name in ("arith.truncf", "arith.extf"):
            return [round_to(dtype_name(op.results[0].type), np.asarray(x[0], np.float32))]
        if name == "tt.scan" or (name == "tt.reduce" and _combiner(op) in _FAST_REDUCE):
            return [self._reduce_or_scan(op, name, np.asarray(v)) for v in x]
        if name == "tt.get_program_id":
            return [self.pid if _int_attr(op, "axis") == 0 else 0]
        if name == "tt.get_num_programs":
            return [self.grid if _int_attr(op, "axis") == 0 else 1]
        if name == "tt.make_range":
            return [np.arange(_int_attr(op, "start"), _int_attr(op, "end"), dtype=np.int64)]
        if name in ("tt.splat", "tt.broadcast"):
            shape = op.results[0].type.shape
            if isinstance(x[0], Ptr):
                return [Ptr(x[0].key, np.broadcast_to(np.asarray(x[0].off, np.int64), shape).copy(), x[0].dtype)]
            return [np.broadcast_to(np.asarray(x[0]), shape).copy()]
        if name == "tt.expand_dims":
            return [self._map(x[0], lambda a: np.expand_dims(a, _int_attr(op, "axis")))]
        if name == "tt.reshape":
            return [self._map(x[0], lambda a: a.reshape(op.results[0].type.shape))]
        if name == "tt.trans":
            order = list(ir.DenseI32ArrayAttr(op.attributes["order"]))
            return [self._map(x[0], lambda a: np.ascontiguousarray(np.transpose(a, order)))]
        if name == "tt.split":
            return [x[0][..., 0].copy(), x[0][..., 1].copy()]
        if name == "tt.join":
            return [np.stack([x[0], x[1]], axis=-1)]
        if name == "tt.addptr":
            p = x[0]
            return [Ptr(p.key, np.asarray(p.off, np.int64) + np.asarray(x[1], np.int64), p.dtype)]
        if name == "tt.load":
            seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
            mask = x[1] if seg[1] else None
            out, m = self._gather(x[0], mask)
            if seg[2]:
                out = np.where(m, out, np.asarray(x[2]))
            return [_scalar(out)]
        if name == "tt.store":
            self._scatter(x[0], x[1], x[2] if len(x) > 2 else None)
            return []
        if name == "tt.dot":
            a, b, c = (np.asarray(v, np.float32) for v in x)
            return [(c + a @ b).astype(np.float32)]
        if name == "tt.make_tensor_descriptor":
            p, rest = x[0], x[1:]
            r = len(rest) // 2
            block = tuple(ir.Type.parse(re.match(r"^!tt\.tensordesc<(.+)>$", str(op.results[0].type)).group(1)).shape)
            return [Desc(p.key, int(p.off), tuple(int(v) for v in rest[:r]), tuple(int(v) for v in rest[r:]),
                         block, p.dtype)]
        if name == "tt.descriptor_load":
            d, idx = x[0], [int(v) for v in x[1:]]
            off, inb = self._desc_offsets(d, idx)
            out, _ = self._gather(Ptr(d.key, off, d.dtype), inb)
            return [out]
        if name == "tt.descriptor_store":
            d, v, idx = x[0], x[1], [int(i) for i in x[2:]]
            off, inb = self._desc_offsets(d, idx)
            self._scatter(Ptr(d.key, off, d.dtype), v, inb)
            return []
        if name == "tt.atomic_rmw":
            return [self._atomic(op, x)]
        if name == "gpu.barrier":
            return []
        if name == "tt.reduce":  # the combiner region folded along the axis, elementwise over the other dims
            vals = np.moveaxis(np.asarray(x[0]), _int_attr(op, "axis", 0), 0)
            body = op.regions[0].blocks[0]
            acc = vals[0]
            for v in vals[1:]:
                inner = dict(env)
                inner[body.arguments[0]], inner[body.arguments[1]] = acc, v
                acc = np.asarray(self._block(body, inner)[0])
            return [_scalar(np.asarray(acc))]
        if name == "scf.for":
            lb, ub, st, carried = int(x[0]), int(x[1]), int(x[2]), list(x[3:])
            body = op.regions[0].blocks[0]
            if ub > lb and wrap(lb + (ub - lb - 1) // st * st + st, body.arguments[0].type) < ub:
                # the GPU's loop steps past its last iteration to iv + step, which wraps and keeps it running
                raise OverflowError(f"interp: scf.for at {op.location} from {lb} to {ub} step {st}: the induction "
                                    f"variable's last step overflows {body.arguments[0].type}")
            for i in range(lb, ub, st):
                inner = dict(env)
                inner[body.arguments[0]] = i
                for a, v in zip(list(body.arguments)[1:], carried):
                    inner[a] = v
                carried = self._block(body, inner)
            return carried
        if name == "scf.if":
            region = op.regions[0] if bool(x[0]) else op.regions[1]
            if not region.blocks:
                return []
            return self._block(region.blocks[0], dict(env))
        if name == "scf.while":
            carried = list(x)
            before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
            for _ in range(SPIN_LIMIT):
                inner = dict(env, **{})
                for a, v in zip(before.arguments, carried):
                    inner[a] = v
                cond, *vals = self._block(before, inner)
                if not bool(cond):
                    return vals
                inner = dict(env)
                for a, v in zip(after.arguments, vals):
                    inner[a] = v
                carried = self._block(after, inner)
            raise Blocked(f"interp: program {self.pid} spins forever in an scf.while (rank {self.rank})")
        if name == "ditron_core.rank":
            return [self.rank]
        if name == "ditron_core.num_ranks":
            return [self.num_ranks]
        if name == "ditron_core.symm_at":
            p, peer = x
            return [Ptr((p.key[0], int(peer)), p.off, p.dtype)]
        if name == "ditron_core.consume_token":
            return [x[0]]
        if name == "ditron_core.wait":
            p, value = x
            buf = self._buf(p.key)
            slots = np.atleast_1d(np.asarray(p.off, np.int64)).ravel()
            self.events.append(Event("wait", p.key, slots, int(value)))
            if (buf[slots] < int(value)).any():
                raise Blocked(f"interp: program {self.pid} of rank {self.rank} waits for {p.key} slots "
                              f"{slots.tolist()} >= {int(value)}, which hold {buf[slots].tolist()}")
            return [0]
        if name == "ditron_core.notify":
            p, peer, value = x
            key = (p.key[0], int(peer))
            kind = ir.StringAttr(op.attributes["op"]).value
            slots = np.atleast_1d(np.asarray(p.off, np.int64)).ravel()
            buf = self._buf(key)
            if kind == "add":
                np.add.at(buf, slots, int(value))
            elif kind == "clear":
                buf[slots] = np.where(buf[slots] == int(value), 0, buf[slots])
            else:
                buf[slots] = int(value)
            self.events.append(Event("notify", key, slots, int(value), kind))
            return []
        if name == "ditron_core.barrier_all":
            self.events.append(Event("barrier_all", x[0].key, np.zeros(0, np.int64)))
            return []
        raise NotImplementedError(f"interp: op '{name}' is not supported")

    @staticmethod
    def _reduce_or_scan(op, name, v):
        """tt.scan with arith.addi, and tt.reduce whose combiner is one integer arith op of _FAST_REDUCE, in numpy
        (other combiners: the region, folded along the axis)."""
        combine, axis = _combiner(op), _int_attr(op, "axis", 0)
        if name == "tt.scan":
            if combine != "arith.addi" or bool(ir.BoolAttr(op.attributes["reverse"]).value):
                raise NotImplementedError(f"interp: tt.scan with {combine}")
            return wrap(np.cumsum(v.astype(np.int64), axis=axis), op.results[0].type)
        return _scalar(wrap(np.asarray(_FAST_REDUCE[combine](v, axis)), op.results[0].type))

    @staticmethod
    def _map(v, fn):
        if isinstance(v, Ptr):
            return Ptr(v.key, fn(np.asarray(v.off)), v.dtype)
        return fn(np.asarray(v))

    def _desc_offsets(self, d: Desc, idx):
        grids = np.meshgrid(*[np.arange(b) + i for b, i in zip(d.block, idx)], indexing="ij")
        inb = np.ones(d.block, bool)
        off = np.full(d.block, d.base, np.int64)
        for g, size, stride in zip(grids, d.shape, d.strides):
            inb &= (g >= 0) & (g < size)
            off += g * stride
        return off, inb

    def _atomic(self, op, x):
        p, val = x[0], x[1]
        mask = x[2] if len(x) > 2 else None
        kind = _RMW[_int_attr(op, "atomic_rmw_op")]
        buf = self._buf(p.key)
        off = np.atleast_1d(np.asarray(p.off, np.int64))
        m = np.ones(off.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), off.shape)
        vals = np.broadcast_to(np.asarray(val), off.shape)
        old = np.zeros(off.shape, buf.dtype)
        old[m] = buf[off[m]]  # masked-off lanes may point past the buffer: they read nothing
        for i in zip(*np.nonzero(m)):
            o = off[i]
            if kind in ("add", "fadd"):
                buf[o] += vals[i]
            elif kind == "xchg":
                buf[o] = vals[i]
            elif kind == "max":
                buf[o] = max(buf[o], vals[i])
            elif kind == "min":
                buf[o] = min(buf[o], vals[i])
            else:
                raise NotImplementedError(f"interp: atomic_rmw {kind}")
        self.events.append(Event("atomic", p.key, off[m].ravel(), vals[m].ravel(), kind,
                                 _SEM[_int_attr(op, "sem")]))
        return _scalar(old.reshape(np.shape(p.off)))


def run(func_op, memory: dict, *, grid: int, rank: int = 0, num_ranks: int = 1, scalars: dict | None = None,
        arg_names: list[str] | None = None, programs=None) -> list[list[Event]]:
    """Run programs 0..grid-1 of one rank in order (``programs``: only those program ids, e.g. the last of a large
    grid); returns each program's events. Pointer arguments point at ``(name, rank)`` in memory; scalar arguments
    come from scalars."""
    func = func_op.operation if hasattr(func_op, "operation") else func_op
    block = func.regions[0].blocks[0]
    if arg_names is None:
        from . import KernelRecord
        arg_names = KernelRecord.of(func)["args"]
    args: dict[str, Any] = {"__names__": arg_names}
    for a, n in zip(block.arguments, arg_names):
        if T.is_ptr(a.type):
            args[n] = Ptr((n, rank), 0, pointee_name(a.type))
        else:
            if scalars is None or n not in scalars:
                raise KeyError(f"interp: scalar argument '{n}' needs a value")
            args[n] = int(scalars[n])
    out = []
    for pid in range(grid) if programs is None else programs:
        out.append(Program(func, memory, pid=pid, grid=grid, rank=rank, num_ranks=num_ranks, args=args).run())
    return out


@dataclass
class TileTrace:
    """Events of one tile, grouped: a tile is the waits and reads up to (and including) its writes and the
    notifies that follow them."""
    waits: list[Event] = field(default_factory=list)
    reads: list[Event] = field(default_factory=list)
    writes: list[Event] = field(default_factory=list)
    notifies: list[Event] = field(default_factory=list)
    atomics: list[Event] = field(default_factory=list)


def group_tiles(events: list[Event]) -> list[TileTrace]:
    """Split one program's events into tiles: a new tile starts at a wait or read that follows a write or
    notify."""
    tiles: list[TileTrace] = []
    cur = TileTrace()
    done = False
    for e in events:
        if e.kind in ("wait", "read") and done:
            tiles.append(cur)
            cur, done = TileTrace(), False
        if e.kind == "wait":
            cur.waits.append(e)
        elif e.kind == "read":
            cur.reads.append(e)
        elif e.kind == "write":
            cur.writes.append(e)
            done = True
        elif e.kind == "notify":
            cur.notifies.append(e)
            done = True
        elif e.kind == "atomic":
            cur.atomics.append(e)
    if cur.waits or cur.reads or cur.writes or cur.notifies or cur.atomics:
        tiles.append(cur)
    return tiles


# ------------------------------------------------------------------------------- checking tiles() against the IR

def region_indices(region, ld: int | None) -> np.ndarray:
    """Flat element indices of a Region in a buffer whose rows are ld elements apart (1-D buffers: ld None)."""
    if len(region.offsets) == 1:
        return np.arange(region.offsets[0], region.offsets[0] + region.sizes[0], dtype=np.int64)
    r = np.arange(region.offsets[0], region.offsets[0] + region.sizes[0], dtype=np.int64)
    c = np.arange(region.offsets[1], region.offsets[1] + region.sizes[1], dtype=np.int64)
    return (r[:, None] * ld + c[None, :]).ravel()


def apply_tiles(steps_by_program, memory: dict, *, rank: int, lds: dict[str, int | None]) -> list:
    """Run what tiles() describes on memory, program after program (waits are checked, notifies applied, steps
    with ``expand`` replaced by their expansion); returns the steps run, per program (for ``compare_trace``)."""
    def view(region):
        buf = memory[(region.arg, rank if region.rank is None else region.rank)]
        ld = lds.get(region.arg)
        if ld is None:
            return buf[region.offsets[0]:region.offsets[0] + region.sizes[0]]
        grid2d = buf.reshape(-1, ld)
        return grid2d[region.offsets[0]:region.offsets[0] + region.sizes[0],
                      region.offsets[1]:region.offsets[1] + region.sizes[1]]

    ran = []
    for pid, steps in enumerate(steps_by_program):
        steps = list(steps)
        i = 0
        while i < len(steps):
            step = steps[i]
            if step.expand is not None:
                steps[i:i + 1] = step.expand(view)
                continue
            i += 1
            for w in step.waits:
                have = memory[(w.arg, rank if w.rank is None else w.rank)][w.slot]
                if have < w.value:
                    raise Blocked(f"tiles(): program {pid} step {i - 1} waits for {w.arg}[{w.slot}] >= {w.value}, "
                                  f"which holds {have}")
            if step.compute is not None:
                step.compute(view)
            for n in step.notifies:
                notify_pad(n, memory[(n.arg, rank if n.rank is None else n.rank)])
        ran.append(steps)
    return ran


def _atomics_as_notifies(trace: TileTrace):
    """Kernel-local signalling written with raw atomics (split-K's locks): an add / xchg is a notify add / set."""
    return [(e.key[0], e.key[1], int(s), int(v), "add" if e.op == "add" else "set")
            for e in trace.atomics if e.op in ("add", "xchg") for s, v in zip(e.index, e.value)]


def compare_trace(steps_by_program, events_by_program, *, rank: int, lds: dict[str, int | None]) -> None:
    """Raise AssertionError (saying where) unless the IR's events match tiles(): same programs, same tiles in the
    same order, and per tile the same waits (in order), the same elements read and written per buffer, and the
    same notifies."""
    arrived: dict[tuple[str, int, int], int] = {}  # arrival counts ('arrive' notifies), in program order
    if len(steps_by_program) != len(events_by_program):
        raise AssertionError(f"tiles() has {len(steps_by_program)} programs, the IR ran {len(events_by_program)}")
    for pid, (steps, events) in enumerate(zip(steps_by_program, events_by_program)):
        traces = group_tiles(events)
        if len(steps) != len(traces):
            raise AssertionError(f"program {pid}: tiles() lists {len(steps)} tiles, the IR did {len(traces)}")
        for i, (st, tr) in enumerate(zip(steps, traces)):
            where = f"program {pid} tile {i}"
            got_w = [(e.key[0], e.key[1], int(s), e.value) for e in tr.waits for s in e.index]
            exp_w = [(w.arg, rank if w.rank is None else w.rank, w.slot, w.value) for w in st.waits]
            if got_w != exp_w:
                raise AssertionError(f"{where}: waits differ: IR {got_w} vs tiles() {exp_w}")
            for kind, regions, evs in (("reads", st.reads, tr.reads), ("writes", st.writes, tr.writes)):
                exp: dict = {}
                for r in regions:
                    key = (r.arg, rank if r.rank is None else r.rank)
                    exp[key] = np.union1d(exp.get(key, np.zeros(0, np.int64)), region_indices(r, lds.get(r.arg)))
                got: dict = {}
                for e in evs:
                    if len(e.index):  # a load or store masked off everywhere touches nothing
                        got[e.key] = np.union1d(got.get(e.key, np.zeros(0, np.int64)), e.index)
                if set(exp) != set(got):
                    raise AssertionError(f"{where}: {kind} touch buffers {sorted(got)} in the IR, {sorted(exp)} "
                                         "in tiles()")
                for key in exp:
                    if not np.array_equal(exp[key], got[key]):
                        raise AssertionError(f"{where}: {kind} of {key} differ: IR {len(got[key])} elements "
                                             f"[{got[key].min()}..{got[key].max()}], tiles() {len(exp[key])} "
                                             f"[{exp[key].min()}..{exp[key].max()}]")
            got_n = sorted([(e.key[0], e.key[1], int(s), int(e.value), e.op) for e in tr.notifies for s in e.index]
                           + _atomics_as_notifies(tr))
            exp_n = []
            for n in st.notifies:
                key = (n.arg, rank if n.rank is None else n.rank, n.slot)
                effects = notify_effects(n, arrived.get(key, 0))
                if n.op == "arrive":  # the last waiter sets the count back to 0
                    arrived[key] = 0 if len(effects) > 1 else arrived.get(key, 0) + 1
                exp_n += [(n.arg, key[1], slot, value, op) for slot, op, value in effects]
            exp_n.sort()
            if got_n != exp_n:
                raise AssertionError(f"{where}: notifies differ: IR {got_n} vs tiles() {exp_n}")
