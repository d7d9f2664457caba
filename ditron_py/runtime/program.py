"""Host programs at run time: the JSON ``ditron.hostprog`` wrote (format there), checked once, and interpreted for
one rank of one call. Imports neither torch nor mlir: this part is tested on the CPU.

    prog = HostProgram(exe.host_program)              # HostProgramError names the op and its location
    for action in prog.trace(rank=1, world_size=4, epoch=3):
        ...                                           # Copy / Signal / Wait / Barrier / Launch, values resolved

Host values are Python ints (index and integer values, 64-bit two's complement; i1 is 0/1) and buffer
references (``Buf("arg", i)``: function argument i of the executing rank; ``Buf("sym", j)``: the j-th symmetric
allocation). Ops run in program order; ``scf.for`` / ``scf.if`` are host control flow (docs/device_ir.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Union

from ..errors import DitronRuntimeError

FORMAT_VERSION = 1
FENCES = ("barrier", "waits")  # how call e + 1 is ordered after the peers' call e (HostProgram.fence)
_MASK64 = (1 << 64) - 1

DEVICE = "ditron_device."
RANK, NUM_RANKS, ALLOC = DEVICE + "rank", DEVICE + "num_ranks", DEVICE + "alloc_symmetric"
COPY, SIGNAL, WAIT, BARRIER, LAUNCH = (DEVICE + n for n in ("copy", "signal", "wait", "barrier", "launch"))
ENQUEUED = (COPY, SIGNAL, WAIT, BARRIER, LAUNCH)

# MLIR element type -> (torch dtype attribute name, bytes)
DTYPES: dict[str, tuple[str, int]] = {
    "bf16": ("bfloat16", 2), "f16": ("float16", 2), "f32": ("float32", 4), "f64": ("float64", 8),
    "i1": ("bool", 1), "i8": ("int8", 1), "i16": ("int16", 2), "i32": ("int32", 4), "i64": ("int64", 8),
    "f8E4M3FN": ("float8_e4m3fn", 1), "f8E5M2": ("float8_e5m2", 1),
}


class HostProgramError(DitronRuntimeError):
    """A host program that cannot run: malformed JSON, or an op that fails (division by zero, bad operand)."""


def _where(loc: str | None) -> str:
    return f"{loc}: " if loc else ""


# ------------------------------------------------------------------------------------------------ data

@dataclass(frozen=True)
class Buf:
    """A memref value: argument ``index`` ("arg") or symmetric allocation ``index`` ("sym")."""

    kind: str
    index: int


@dataclass(frozen=True)
class ArgInfo:
    index: int
    io: str                    # "in" | "out" | "epoch"
    shape: tuple[int, ...]     # -1: dynamic
    dtype: str


@dataclass(frozen=True)
class AllocInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str
    loc: str | None
    rotate: bool = False       # held twice: call e uses copy e % 2 (a graph replay: its parity's)
    consumed: bool = False     # a signal pad whose waiters clear every slot each call (no zeroing between graphs)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPES[self.dtype][1]


@dataclass(frozen=True)
class KernelInfo:
    name: str
    spins: bool                # may spin-wait: all its programs must be resident at once
    template: str | None
    wait: Mapping[str, Any] | None
    args: tuple[str, ...] | None
    # a copy-template kernel: {"direction": "pull" | "push", "grid": programs, "rows": r, "cols": c}
    copy: Mapping[str, Any] | None = None


@dataclass
class Action:
    """Device work for one stream. ``site``: which op of the program (stable across calls and ranks)."""

    stream: int
    loc: str | None
    site: int


@dataclass
class CopyAction(Action):
    src: Buf
    dst: Buf
    src_rank: int
    dst_rank: int
    src_off: tuple[int, ...]
    dst_off: tuple[int, ...]
    sizes: tuple[int, ...]
    engine: str


@dataclass
class SignalAction(Action):
    pad: Buf
    target: int
    slot: int
    value: int
    op: str                    # "set" | "add"
    scope: str


@dataclass
class WaitAction(Action):
    pad: Buf
    value: int
    slots: tuple[int, ...]
    where: str


@dataclass
class BarrierAction(Action):
    pad: Buf


@dataclass
class LaunchAction(Action):
    kernel: str
    operands: tuple[Union[Buf, int], ...]
    grid: tuple[int, ...]
    sm_budget: int
    tile_order: str


# ---------------------------------------------------------------------------------------------- parsing

class _Op:
    __slots__ = ("name", "ins", "outs", "attrs", "regions", "loc", "site")

    def __init__(self, name, ins, outs, attrs, regions, loc, site):
        self.name, self.ins, self.outs, self.attrs, self.regions, self.loc, self.site = (
            name, ins, outs, attrs, regions, loc, site)


_BINARY = {
    "arith.addi": lambda a, b: a + b,
    "arith.subi": lambda a, b: a - b,
    "arith.muli": lambda a, b: a * b,
    "arith.divsi": lambda a, b: _trunc_div(a, b),
    "arith.divui": lambda a, b: (a & _MASK64) // (b & _MASK64),
    "arith.remsi": lambda a, b: a - b * _trunc_div(a, b),
    "arith.remui": lambda a, b: (a & _MASK64) % (b & _MASK64),
    "arith.ceildivsi": lambda a, b: -((-a) // b),
    "arith.ceildivui": lambda a, b: -((-(a & _MASK64)) // (b & _MASK64)),
    "arith.floordivsi": lambda a, b: a // b,
    "arith.minsi": min,
    "arith.maxsi": max,
    "arith.minui": lambda a, b: a if (a & _MASK64) <= (b & _MASK64) else b,
    "arith.maxui": lambda a, b: a if (a & _MASK64) >= (b & _MASK64) else b,
    "arith.andi": lambda a, b: a & b,
    "arith.ori": lambda a, b: a | b,
    "arith.xori": lambda a, b: a ^ b,
    "arith.shli": lambda a, b: a << b,
    "arith.shrsi": lambda a, b: a >> b,
    "arith.shrui": lambda a, b: (a & _MASK64) >> b,
}
_DIVIDES = {"arith.divsi", "arith.divui", "arith.remsi", "arith.remui", "arith.ceildivsi", "arith.ceildivui",
            "arith.floordivsi"}
_CASTS = {"arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui", "arith.trunci"}
_PREDICATES = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")
# (fixed operand count or None, result count) of each op; -1: variadic
_ARITY = {**{k: (2, 1) for k in _BINARY}, **{k: (1, 1) for k in _CASTS}, "arith.constant": (0, 1),
          "arith.cmpi": (2, 1), "arith.select": (3, 1), "scf.yield": (None, 0), "func.return": (None, 0),
          RANK: (0, 1), NUM_RANKS: (0, 1), ALLOC: (0, 1), SIGNAL: (4, 0), BARRIER: (1, 0), LAUNCH: (None, 0),
          COPY: (None, 0), WAIT: (None, 0), "scf.for": (None, None), "scf.if": (1, None)}


def _signed(x: int) -> int:
    x &= _MASK64
    return x - (1 << 64) if x >> 63 else x


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _compare(pred: int, a: int, b: int) -> bool:
    if pred >= 6:
        a, b = a & _MASK64, b & _MASK64
    return (a == b, a != b, a < b, a <= b, a > b, a >= b, a < b, a <= b, a > b, a >= b)[pred]


def _need(obj: Mapping[str, Any], key: str, kind, where: str) -> Any:
    if key not in obj:
        raise HostProgramError(f"{where}missing field '{key}'")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise HostProgramError(f"{where}field '{key}' has the wrong type ({type(value).__name__})")
    return value


def _mesh(value: Any, axis: Any, where: str) -> tuple[tuple[str, ...], tuple[int, ...]] | None:
    """(axes, shape) of the host program's mesh, checked; None where it has none."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise HostProgramError(f"{where}mesh must be an object {{axes, shape}}")
    axes, shape = value.get("axes"), value.get("shape")
    if not isinstance(axes, list) or not all(isinstance(a, str) for a in axes):
        raise HostProgramError(f"{where}mesh axes must be a list of names")
    shape = _ints(shape, "mesh shape", where)
    if len(axes) != len(shape) or any(n < 1 for n in shape):
        raise HostProgramError(f"{where}mesh {value} needs one size >= 1 per axis")
    if axis is not None and axis not in axes:
        raise HostProgramError(f"{where}axis {axis!r} is not an axis of its mesh ({', '.join(axes)})")
    return tuple(axes), shape


def _ints(value: Any, what: str, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise HostProgramError(f"{where}{what} must be a list of integers")
    return tuple(value)


class HostProgram:
    """A checked host program. ``args``/``allocs``/``kernels``/``streams`` describe it; ``trace`` runs it."""

    def __init__(self, data: Mapping[str, Any]):
        if not isinstance(data, Mapping):
            raise HostProgramError("a host program must be a JSON object")
        self.name = _need(data, "name", str, "host program: ")
        self.loc = data.get("loc")
        where = f"host program '{self.name}': "
        self.axis = data.get("axis")
        self.mesh = _mesh(data.get("mesh"), self.axis, where)
        # how call e + 1 is ordered after the peers' call e: "barrier" (the program ends with one) or "waits" (its
        # own waits do it; its peer-written buffers rotate, see lower_task_to_device._FunctionLowering._end)
        self.fence = data.get("fence", "barrier")
        if self.fence not in FENCES:
            raise HostProgramError(f"{where}fence '{self.fence}' is not one of {', '.join(FENCES)}")
        self.args: list[ArgInfo] = []
        self._arg_values: dict[int, int] = {}
        for i, a in enumerate(_need(data, "args", list, where)):
            w = f"{where}argument {i}: "
            if not isinstance(a, Mapping):
                raise HostProgramError(f"{w}must be an object")
            io = _need(a, "io", str, w)
            if io not in ("in", "out", "epoch"):
                raise HostProgramError(f"{w}io '{io}' is not in, out or epoch")
            shape = () if io == "epoch" else _ints(_need(a, "shape", list, w), "shape", w)
            dtype = "index" if io == "epoch" else _need(a, "dtype", str, w)
            if io != "epoch" and dtype not in DTYPES:
                raise HostProgramError(f"{w}element type '{dtype}' is not supported (known: {', '.join(DTYPES)})")
            self.args.append(ArgInfo(i, io, shape, dtype))
            self._arg_values[_need(a, "value", int, w)] = i
        if not self.args or self.args[-1].io != "epoch" or sum(a.io == "epoch" for a in self.args) != 1:
            raise HostProgramError(f"{where}the last argument, and only it, must be the epoch")
        self.allocs: list[AllocInfo] = []
        for j, a in enumerate(_need(data, "allocs", list, where)):
            w = f"{where}symmetric buffer {j}: "
            if not isinstance(a, Mapping):
                raise HostProgramError(f"{w}must be an object")
            info = AllocInfo(_need(a, "name", str, w), _ints(_need(a, "shape", list, w), "shape", w),
                             _need(a, "dtype", str, w), a.get("loc"), a.get("rotate", False),
                             a.get("consumed", False))
            for flag in ("rotate", "consumed"):
                if not isinstance(getattr(info, flag), bool):
                    raise HostProgramError(f"{w}'{flag}' must be true or false")
            if info.consumed and (info.rotate or info.dtype != "i32" or len(info.shape) != 1):
                raise HostProgramError(f"{w}'{info.name}' is consumed: only a signal pad (1-d i32, not rotating) "
                                       "has slots that its waiters clear")
            if info.dtype not in DTYPES or any(s < 0 for s in info.shape):
                raise HostProgramError(f"{w}'{info.name}' needs a static shape and a supported element type")
            self.allocs.append(info)
        self.streams = _ints(data.get("streams", [0]), "streams", where) or (0,)
        self.kernels: dict[str, KernelInfo] = {}
        for name, k in _need(data, "kernels", Mapping, where).items():
            if not isinstance(k, Mapping):
                raise HostProgramError(f"{where}kernel '{name}' must be an object")
            args = k.get("args")
            copy = k.get("copy")
            if copy is not None and not (isinstance(copy, Mapping) and copy.get("direction") in ("pull", "push")
                                         and all(isinstance(copy.get(f), int) and copy[f] >= 1
                                                 for f in ("grid", "rows", "cols"))):
                raise HostProgramError(f"{where}kernel '{name}': malformed copy facts {copy!r}")
            self.kernels[name] = KernelInfo(name, bool(k.get("spins", True)), k.get("template"), k.get("wait"),
                                            tuple(args) if isinstance(args, list) else None, copy)
        runtime = data.get("runtime") or {}
        self.wait_kernel: str | None = runtime.get("wait")
        self.wait_lanes: int = int(runtime.get("wait_lanes", 128))
        self.signal_kernels: dict[str, str] = dict(runtime.get("signal") or {})
        self.barrier_kernel: str | None = runtime.get("barrier")  # absent from artifacts of older ditrons
        self._sites = 0
        defined = set(self._arg_values)
        self.body = self._block(_need(data, "body", list, where), defined, where)
        self.num_sites = self._sites

    @property
    def world_size(self) -> int | None:
        """The world the program is written for: the size of the mesh axis it runs over (on a mesh of several axes,
        one group of ranks along that axis; docs/device_ir.md); None where the host program names no mesh."""
        if self.mesh is None:
            return None
        axes, shape = self.mesh
        return shape[axes.index(self.axis)] if self.axis is not None else math.prod(shape)

    def describe_world(self) -> str:
        """Which world the program needs, for messages: '2 rank(s), the size of mesh axis 'tp' (mesh dp=2 x tp=2:
        one group of ranks along 'tp' ...)'."""
        axes, shape = self.mesh
        mesh = " x ".join(f"{a}={n}" for a, n in zip(axes, shape))
        if self.axis is None:
            return f"{self.world_size} rank(s), the size of its mesh ({mesh})"
        text = f"{self.world_size} rank(s), the size of mesh axis '{self.axis}' (mesh {mesh}"
        if len(axes) > 1:
            text += (f": it runs within one group of ranks along '{self.axis}'; give each group its own world, e.g. "
                     f"World.from_torch(group=<that group's process group>)")
        return text + ")"

    # -- checking
    def _block(self, ops: list, defined: set[int], where: str) -> list[_Op]:
        return [self._op(op, defined, where) for op in ops]

    def _op(self, op: Any, defined: set[int], where: str) -> _Op:
        if not isinstance(op, Mapping):
            raise HostProgramError(f"{where}an op must be an object")
        name = _need(op, "op", str, where)
        loc = op.get("loc")
        w = f"{where}{_where(loc)}'{name}': "
        if name not in _ARITY:
            raise HostProgramError(f"{w}not an op a host program can run (device ops and arith/scf on index "
                                   "values only)")
        ins = _ints(_need(op, "in", list, w), "'in'", w)
        outs = _ints(_need(op, "out", list, w), "'out'", w)
        for v in ins:
            if v not in defined:
                raise HostProgramError(f"{w}operand %{v} is used before it is defined")
        n_in, n_out = _ARITY[name]
        if (n_in is not None and len(ins) != n_in) or (n_out is not None and len(outs) != n_out):
            raise HostProgramError(f"{w}takes {n_in} operand(s) and {n_out} result(s), got {len(ins)} and "
                                   f"{len(outs)}")
        attrs: dict[str, Any] = {}
        if name == "arith.constant":
            attrs["value"] = _need(op, "value", int, w)
        elif name == "arith.cmpi":
            attrs["predicate"] = _need(op, "predicate", int, w)
            if not 0 <= attrs["predicate"] < len(_PREDICATES):
                raise HostProgramError(f"{w}unknown predicate {attrs['predicate']}")
        elif name in _CASTS:
            attrs["width"] = _need(op, "width", int, w)
            attrs["src_width"] = int(op.get("src_width", 64))
        site = -1
        if name.startswith(DEVICE) and name not in (RANK, NUM_RANKS, ALLOC):
            site = self._sites
            self._sites += 1
            attrs["stream"] = _need(op, "stream", int, w)
            if attrs["stream"] not in self.streams:
                raise HostProgramError(f"{w}stream {attrs['stream']} is not among the program's streams "
                                       f"{list(self.streams)}")
            self._device_attrs(name, op, ins, attrs, w)
        elif name == ALLOC:
            attrs["alloc"] = _need(op, "alloc", int, w)
            if not 0 <= attrs["alloc"] < len(self.allocs):
                raise HostProgramError(f"{w}names symmetric buffer {attrs['alloc']}, which does not exist")
        regions = []
        for r in op.get("regions", []) if name in ("scf.for", "scf.if") else []:
            inner = set(defined) | set(_ints(_need(r, "args", list, w), "region args", w))
            regions.append((_ints(r["args"], "region args", w), self._block(_need(r, "body", list, w), inner, where)))
        if name == "scf.for" and (len(regions) != 1 or len(ins) < 3 or len(regions[0][0]) != len(ins) - 2
                                  or len(outs) != len(ins) - 3):
            raise HostProgramError(f"{w}malformed scf.for (lb, ub, step, inits; one region with iv and iter args)")
        if name == "scf.if" and not 1 <= len(regions) <= 2:
            raise HostProgramError(f"{w}malformed scf.if (one or two regions)")
        defined.update(outs)
        return _Op(name, ins, outs, attrs, tuple(regions), loc, site)

    def _device_attrs(self, name: str, op: Mapping, ins: tuple[int, ...], attrs: dict, w: str) -> None:
        if name == COPY:
            attrs["engine"] = _need(op, "engine", str, w)
            n = attrs["ndim"] = _need(op, "ndim", int, w)
            if len(ins) != 4 + 3 * n:
                raise HostProgramError(f"{w}a copy of {n}-d regions takes {4 + 3 * n} operands, got {len(ins)}")
            kernel = op.get("kernel")
            if kernel is not None:
                info = self.kernels.get(kernel)
                if attrs["engine"] != "sm" or n not in (1, 2) or info is None or info.copy is None \
                        or info.args is None or len(info.args) != 7:
                    raise HostProgramError(f"{w}copy kernel '{kernel}' is not a copy-template kernel of this "
                                           "program (an SM copy of a rank-1 or rank-2 region)")
                attrs["kernel"] = info
        elif name == SIGNAL:
            attrs["kind"], attrs["scope"] = _need(op, "kind", str, w), _need(op, "scope", str, w)
            if attrs["kind"] not in ("set", "add"):
                raise HostProgramError(f"{w}signal op '{attrs['kind']}' is not set or add")
        elif name == WAIT:
            attrs["where"] = _need(op, "where", str, w)
            if len(ins) < 3:
                raise HostProgramError(f"{w}a wait needs a signal pad, a value and at least one slot")
        elif name == LAUNCH:
            attrs["kernel"] = _need(op, "kernel", str, w)
            attrs["grid"] = _ints(_need(op, "grid", list, w), "grid", w)
            attrs["sm_budget"] = _need(op, "sm_budget", int, w)
            attrs["tile_order"] = op.get("tile_order", "row_major")
            if attrs["kernel"] not in self.kernels:
                raise HostProgramError(f"{w}launches '@{attrs['kernel']}', which the program's kernel table lacks")
            if not 1 <= len(attrs["grid"]) <= 3 or any(g < 0 for g in attrs["grid"]):
                raise HostProgramError(f"{w}grid {list(attrs['grid'])} must have 1 to 3 non-negative sizes")

    # -- facts
    @property
    def inputs(self) -> list[ArgInfo]:
        return [a for a in self.args if a.io == "in"]

    @property
    def outputs(self) -> list[ArgInfo]:
        return [a for a in self.args if a.io == "out"]

    def alloc_index(self, name: str) -> int:
        for j, a in enumerate(self.allocs):
            if a.name == name:
                return j
        raise KeyError(name)

    # -- running
    def trace(self, rank: int, world_size: int, epoch: int) -> list[Action]:
        """The device work rank ``rank`` of ``world_size`` enqueues in call ``epoch``, in program order."""
        env: dict[int, Any] = {}
        for value, index in self._arg_values.items():
            env[value] = epoch if self.args[index].io == "epoch" else Buf("arg", index)
        out: list[Action] = []
        _Run(rank, world_size, out).block(self.body, env)
        return out


def without_entry_fork(trace: list[Action], rank: int) -> list[Action]:
    """``trace`` less the part of its entry fork that the executor's own fork implies, where that helps. The entry
    fork (ditron's lowering, ``entry_fork`` / ``sync`` at program entry) orders the side streams after stream 0's
    start: stream 0's first action sets a slot of the rank's own pad (gpu scope) and each side stream's first action
    waits for it. The executor starts every stream of a call from one event on the caller's stream, recorded after
    the previous call's streams were joined into it, so those waits hold when the streams start. A side stream's
    wait is dropped where the stream waits for nothing else (an all-gather by push: copies and signals only), so
    its copies start with the call (2xH200, AG+GEMM by push at M = 128: 8B 56 -> 48 us, 70B 99 -> 92). A stream
    that waits for the peers (an all-gather by pull) keeps it: without it the pulls' AG+GEMM measured 464 us at
    70B M = 1024 against 401 with it, 2-3 % slower at M = 8192 (and 7 % faster at 8B M = 1024); why was not
    established. The signal goes when no wait or kernel reads its slot any more."""
    firsts: dict[int, int] = {}
    for i, a in enumerate(trace):
        firsts.setdefault(a.stream, i)
    head = trace[firsts[0]] if 0 in firsts else None
    if not (isinstance(head, SignalAction) and head.op == "set" and head.scope == "gpu" and head.target == rank
            and head.pad.kind == "sym"):
        return trace
    def waits_for_nothing_else(i: int) -> bool:
        return not any(isinstance(b, WaitAction) and b.stream == trace[i].stream for b in trace[i + 1:])
    waits = {i for s, i in firsts.items()
             if s != 0 and isinstance(a := trace[i], WaitAction) and a.where == "stream" and a.pad == head.pad
             and a.slots == (head.slot,) and a.value <= head.value and waits_for_nothing_else(i)}
    if not waits:
        return trace
    rest = [a for i, a in enumerate(trace) if i not in waits and i != firsts[0]]
    if any(isinstance(a, WaitAction) and a.pad == head.pad and head.slot in a.slots or
           isinstance(a, LaunchAction) and head.pad in a.operands for a in rest):
        return [a for i, a in enumerate(trace) if i not in waits]  # another reader of the slot: keep setting it
    return rest


class _Run:
    def __init__(self, rank: int, world_size: int, out: list[Action]):
        self.rank, self.world_size, self.out = rank, world_size, out
        self.device: dict[str, Callable[[_Op, list], None]] = {
            COPY: self.copy, SIGNAL: self.signal, WAIT: self.wait, BARRIER: self.barrier, LAUNCH: self.launch}

    def block(self, ops: list[_Op], env: dict[int, Any]) -> list | None:
        for op in ops:
            name = op.name
            if name == "scf.yield" or name == "func.return":
                return [env[v] for v in op.ins]
            vals = [env[v] for v in op.ins]
            if name in _BINARY:
                a, b = self.ints(op, vals)
                if name in _DIVIDES and b == 0:
                    raise HostProgramError(f"{_where(op.loc)}'{name}' divides by zero on rank {self.rank}")
                env[op.outs[0]] = _signed(_BINARY[name](a, b))
            elif name == "arith.constant":
                env[op.outs[0]] = op.attrs["value"]
            elif name == "arith.cmpi":
                a, b = self.ints(op, vals)
                env[op.outs[0]] = int(_compare(op.attrs["predicate"], a, b))
            elif name == "arith.select":
                env[op.outs[0]] = vals[1] if vals[0] else vals[2]
            elif name in _CASTS:
                env[op.outs[0]] = self.cast(op, vals[0])
            elif name == "scf.for":
                self.loop(op, vals, env)
            elif name == "scf.if":
                self.branch(op, vals, env)
            elif name == RANK:
                env[op.outs[0]] = self.rank
            elif name == NUM_RANKS:
                env[op.outs[0]] = self.world_size
            elif name == ALLOC:
                env[op.outs[0]] = Buf("sym", op.attrs["alloc"])
            else:
                self.device[name](op, vals)
        return None

    def ints(self, op: _Op, vals: list) -> list[int]:
        for v in vals:
            if not isinstance(v, int):
                raise HostProgramError(f"{_where(op.loc)}'{op.name}' on rank {self.rank} needs integer operands, got "
                                       "a buffer")
        return vals

    def cast(self, op: _Op, x: int) -> int:
        """Zero- or sign-extend from the source width, then wrap to the result width (i1 stays 0/1)."""
        w, src = op.attrs["width"], op.attrs["src_width"]
        x &= (1 << src) - 1
        if op.name not in ("arith.extui", "arith.index_castui") and x >> (src - 1):
            x -= 1 << src
        x &= (1 << w) - 1
        if w > 1 and x >> (w - 1):
            x -= 1 << w
        return x

    def loop(self, op: _Op, vals: list, env: dict[int, Any]) -> None:
        lb, ub, step = self.ints(op, vals[:3])
        carried = list(vals[3:])
        if step <= 0:
            raise HostProgramError(f"{_where(op.loc)}scf.for step must be positive, got {step} on rank {self.rank}")
        args, body = op.regions[0]
        i = lb
        while i < ub:
            inner = dict(env)
            inner[args[0]] = i
            inner.update(zip(args[1:], carried))
            carried = self.block(body, inner) or []
            i += step
        env.update(zip(op.outs, carried))

    def branch(self, op: _Op, vals: list, env: dict[int, Any]) -> None:
        taken = op.regions[0] if vals[0] else (op.regions[1] if len(op.regions) > 1 else None)
        if taken is None:
            return
        results = self.block(taken[1], dict(env)) or []
        env.update(zip(op.outs, results))

    def buf(self, op: _Op, v: Any, what: str) -> Buf:
        if not isinstance(v, Buf):
            raise HostProgramError(f"{_where(op.loc)}'{op.name}': {what} must be a buffer")
        return v

    def rank_of(self, op: _Op, r: Any, what: str) -> int:
        if not isinstance(r, int) or not 0 <= r < self.world_size:
            raise HostProgramError(f"{_where(op.loc)}'{op.name}' on rank {self.rank} names {what} {r}, outside the "
                                   f"world of {self.world_size} rank(s)")
        return r

    def copy(self, op: _Op, vals: list) -> None:
        n = op.attrs["ndim"]
        src, dst = self.buf(op, vals[0], "src"), self.buf(op, vals[1], "dst")
        src_rank = self.rank_of(op, vals[2], "source rank")
        dst_rank = self.rank_of(op, vals[3], "destination rank")
        coords = self.ints(op, vals[4:])
        src_off, dst_off, sizes = tuple(coords[:n]), tuple(coords[n:2 * n]), tuple(coords[2 * n:])
        kernel: KernelInfo | None = op.attrs.get("kernel")
        if kernel is None:
            self.out.append(CopyAction(op.attrs["stream"], op.loc, op.site, src, dst, src_rank, dst_rank, src_off,
                                       dst_off, sizes, op.attrs["engine"]))
            return
        # an SM copy: the launch of its copy kernel (src, dst, peer, src_row, src_col, dst_row, dst_col), which
        # reaches the peer's buffer through symm_at of this rank's own view of it
        pull = kernel.copy["direction"] == "pull"
        if (dst_rank if pull else src_rank) != self.rank:
            raise HostProgramError(f"{_where(op.loc)}SM copy on rank {self.rank}: its kernel '{kernel.name}' "
                                   f"{'pulls into' if pull else 'pushes from'} the executing rank, but the copy "
                                   f"goes from rank {src_rank} to rank {dst_rank}")
        if sizes != ((kernel.copy["cols"],) if n == 1 else (kernel.copy["rows"], kernel.copy["cols"])):
            raise HostProgramError(f"{_where(op.loc)}SM copy on rank {self.rank} of sizes {list(sizes)}: its kernel "
                                   f"'{kernel.name}' copies {kernel.copy['rows']} x {kernel.copy['cols']}")
        row = (lambda off: 0) if n == 1 else (lambda off: off[0])
        operands = (src, dst, src_rank if pull else dst_rank, row(src_off), src_off[-1], row(dst_off), dst_off[-1])
        grid = kernel.copy["grid"]
        self.out.append(LaunchAction(op.attrs["stream"], op.loc, op.site, kernel.name, operands, (grid, 1, 1), grid,
                                     "row_major"))

    def signal(self, op: _Op, vals: list) -> None:
        pad = self.buf(op, vals[0], "the signal pad")
        target = self.rank_of(op, vals[1], "target rank")
        slot, value = self.ints(op, vals[2:])
        self.out.append(SignalAction(op.attrs["stream"], op.loc, op.site, pad, target, slot, value,
                                     op.attrs["kind"], op.attrs["scope"]))

    def wait(self, op: _Op, vals: list) -> None:
        pad = self.buf(op, vals[0], "the signal pad")
        value, *slots = self.ints(op, vals[1:])
        self.out.append(WaitAction(op.attrs["stream"], op.loc, op.site, pad, value, tuple(slots), op.attrs["where"]))

    def barrier(self, op: _Op, vals: list) -> None:
        self.out.append(BarrierAction(op.attrs["stream"], op.loc, op.site, self.buf(op, vals[0], "the signal pad")))

    def launch(self, op: _Op, vals: list) -> None:
        a = op.attrs
        self.out.append(LaunchAction(a["stream"], op.loc, op.site, a["kernel"], tuple(vals), a["grid"],
                                     a["sm_budget"], a["tile_order"]))


def slot_runs(slots: tuple[int, ...], lanes: int) -> list[tuple[int, int]]:
    """Slots as (first, count) runs of consecutive slots, each at most ``lanes`` long (duplicates dropped)."""
    runs: list[tuple[int, int]] = []
    for s in sorted(set(slots)):
        if runs and runs[-1][0] + runs[-1][1] == s and runs[-1][1] < lanes:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((s, 1))
    return runs


__all__ = ["Action", "AllocInfo", "ArgInfo", "BarrierAction", "Buf", "CopyAction", "DTYPES", "HostProgram",
           "HostProgramError", "KernelInfo", "LaunchAction", "SignalAction", "WaitAction", "slot_runs",
           "without_entry_fork"]
