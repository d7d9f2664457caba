"""ditron.device: write one rank's device-level program in Python (docs/language.md, "The device builder").

A ``Program`` is the schedule every rank runs (rank-generic, docs/device_ir.md): its arguments, its symmetric
buffers and signal pads, and, in program order, chunk copies with their engine, signals, waits, barriers and
launches of kernel templates, each enqueued on a stream. It produces ditron_device IR (``to_mlir``: text that
``ditron-opt`` and ``ditron sim`` read), compiles to an artifact (``compile``: ``ditron.compile`` of that IR) and
runs through the runtime's executor (``run``: real and virtual worlds, CUDA-graph mode, waits that time out naming
rank, stream, pad and slot); ``simulate`` runs it on the CPU for its W ranks (``ditron.sim``).

    import ditron.device as dd
    p = dd.Program("ag_gemm", world_size=4)
    x = p.input("x", (m, k), "bf16")                   # this rank's tensors, in argument order
    w = p.input("w", (k, n), "bf16")
    y = p.output("y", (4 * m, n), "bf16")
    g = p.symmetric("gathered", (4 * m, k), "bf16")    # the same buffer on every rank, peers may address it
    ready = p.signal_pad("ready", 4)                   # i32 slots, zero at allocation
    with p.loop(0, p.num_ranks) as d:                  # host control flow over index values
        q = (p.rank + d) % p.num_ranks
        p.copy(x, g, dst_rank=q, dst_offsets=(p.rank * m, 0), engine="copy_engine", stream=1)
        p.signal(ready, rank=q, slot=p.rank, stream=1)  # release: the copy is visible to whoever sees the epoch
    gemm = p.gemm(4 * m, n, k, wait={"arg": "ready", "rows_per_slot": m})
    p.launch(gemm, [g, w, y, ready, p.epoch], stream=0, sm_budget=32, tile_order="grouped")
    p.barrier()

Index values (``p.rank``, ``p.num_ranks``, ``p.epoch``, loop variables, ints and arithmetic on them: ``+ - * //
%``, ``dd.minimum`` / ``dd.maximum``, comparisons for ``p.if_``) are host values of the program, evaluated per rank
and per call. Signals have release semantics and waits acquire semantics; work on one stream runs in order, work on
different streams only as signals and waits order it. A signal's value and a wait's value default to the epoch (the
number of the call: a slot is ready when it reaches it), so pads need no reset between calls.

Every call is checked where it is made: a wrong dtype or shape, a region outside its buffer, a wait on something
that is not one of the program's pads, a launch with the wrong number of arguments, an unknown engine, stream or
template field raise ``DeviceBuildError`` located at the caller's line (``file:line:col: error: ...``), and the IR
carries the same locations, so the simulator's findings and the verifier's errors name the user's lines too.
"""
from __future__ import annotations

import contextlib
import inspect
import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from .errors import Diagnostic, DitronError

__all__ = ["Program", "Buffer", "Pad", "Index", "Kernel", "JitKernel", "DeviceBuildError", "minimum", "maximum",
           "ENGINES", "DTYPES", "jit_declarations", "compile_jit_kernels"]

ENGINES = ("copy_engine", "sm")           # dialects.device.ENGINES (not imported: this module loads without MLIR)
SIGNAL_OPS = ("set", "add")
SCOPES = ("gpu", "sys")
TILE_ORDERS = ("row_major", "grouped", "rank_rotated")
# element types of buffers: name -> (MLIR type name, template dtype name)
DTYPES = {"bf16": ("bf16", "bf16"), "f16": ("f16", "fp16"), "fp16": ("f16", "fp16"), "f32": ("f32", "fp32"),
          "fp32": ("f32", "fp32"), "i32": ("i32", "i32")}
AXIS = "tp"


class DeviceBuildError(DitronError):
    """A device program built wrongly: located at the line of the user's code that made the call."""


_THIS_FILE = __file__
_SKIPPED = (_THIS_FILE, contextlib.__file__)  # frames that are not the user's: this module, `with` machinery


def _call_site() -> tuple[str, int, int]:
    """(file, line, column) of the innermost frame outside this module: the user's call."""
    frame = inspect.currentframe()
    while frame is not None and frame.f_code.co_filename in _SKIPPED:
        frame = frame.f_back
    if frame is None:
        return "<unknown>", 0, 0
    positions = inspect.getframeinfo(frame, context=0).positions
    col = positions.col_offset if positions is not None and positions.col_offset is not None else 0
    return frame.f_code.co_filename, frame.f_lineno, col + 1


def _error(message: str, where: tuple[str, int, int] | None = None) -> DeviceBuildError:
    file, line, col = where or _call_site()
    return DeviceBuildError(message, [Diagnostic(message, file, line, col)])


# ------------------------------------------------------------------------------------------------ index values

class Index:
    """An index value of the host program: a constant, the rank, the world size, the epoch, a loop variable, or
    arithmetic on those. Built by the operators; evaluated on every rank at run time (or folded when constant)."""

    __slots__ = ("kind", "args", "program")

    def __init__(self, kind: str, args: tuple = (), program: "Program | None" = None):
        self.kind, self.args, self.program = kind, args, program

    # arithmetic
    def _bin(self, kind: str, other: Any, swap: bool = False) -> "Index":
        other = _as_index(other, self.program, f"the right operand of '{_SYMBOL[kind]}'")
        a, b = (other, self) if swap else (self, other)
        if a.kind == "const" and b.kind == "const":
            folded = _FOLD[kind](a.args[0], b.args[0])
            if folded is not None:
                return Index("const", (folded,), a.program or b.program)
        return Index(kind, (a, b), a.program or b.program)

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __floordiv__(self, o): return self._bin("div", o)
    def __rfloordiv__(self, o): return self._bin("div", o, True)
    def __mod__(self, o): return self._bin("rem", o)
    def __rmod__(self, o): return self._bin("rem", o, True)
    # comparisons (conditions of Program.if_)
    def __lt__(self, o): return self._bin("lt", o)
    def __le__(self, o): return self._bin("le", o)
    def __gt__(self, o): return self._bin("gt", o)
    def __ge__(self, o): return self._bin("ge", o)
    def eq(self, o) -> "Index": return self._bin("eq", o)
    def ne(self, o) -> "Index": return self._bin("ne", o)

    def __bool__(self):
        raise _error("an index value of a device program has no truth value while the program is built (it is "
                     "known per rank at run time): use Program.if_(cond) for a condition")

    __hash__ = object.__hash__

    @property
    def constant(self) -> int | None:
        return self.args[0] if self.kind == "const" else None

    def __repr__(self) -> str:
        if self.kind == "const":
            return str(self.args[0])
        if self.kind in _SYMBOL:
            return f"({self.args[0]!r} {_SYMBOL[self.kind]} {self.args[1]!r})"
        return self.kind if not self.args else f"{self.kind}{self.args[0]}"


def _nonneg(f):
    return lambda a, b: f(a, b) if a >= 0 and b > 0 else None


_FOLD: dict[str, Callable[[int, int], int | None]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": _nonneg(operator.floordiv),
    "rem": _nonneg(operator.mod), "min": min, "max": max, "lt": lambda a, b: int(a < b),
    "le": lambda a, b: int(a <= b), "gt": lambda a, b: int(a > b), "ge": lambda a, b: int(a >= b),
    "eq": lambda a, b: int(a == b), "ne": lambda a, b: int(a != b)}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "//", "rem": "%", "min": "min", "max": "max", "lt": "<",
           "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")


def _loop_vars(x: Index) -> Iterator[int]:
    if x.kind == "loop":
        yield x.args[0]
    elif x.kind in _SYMBOL:
        for a in x.args:
            yield from _loop_vars(a)


def _as_index(x: Any, program: "Program | None", what: str) -> Index:
    if isinstance(x, Index):
        if program is not None and x.program is not None and x.program is not program:
            raise _error(f"{what} is an index value of another program")
        if program is not None and any(v not in program._live_vars for v in _loop_vars(x)):
            raise _error(f"{what} uses the variable of a loop that has ended (a loop variable lives inside its "
                         "`with p.loop(...)` block)")
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        raise _error(f"{what} must be an int or an index value of the program (rank, num_ranks, epoch, a loop "
                     f"variable, arithmetic on them), got {type(x).__name__} {x!r}")
    return Index("const", (int(x),), program)


def minimum(a: Any, b: Any) -> Index:
    """The smaller of two index values."""
    a = _as_index(a, None, "minimum's first operand")
    return a._bin("min", b)


def maximum(a: Any, b: Any) -> Index:
    """The larger of two index values."""
    a = _as_index(a, None, "maximum's first operand")
    return a._bin("max", b)


# ------------------------------------------------------------------------------------------------ buffers

@dataclass(eq=False)
class Buffer:
    """A memref of the program: an "in" / "out" argument (this rank's tensor) or a symmetric buffer (the same
    buffer on every rank: peers may read and write it). ``kind``: "in", "out", "symmetric"."""

    program: "Program"
    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: str
    rotate: bool = False
    where: tuple[str, int, int] = ("<unknown>", 0, 0)
    index: int = -1           # argument position ("in" / "out")

    @property
    def symmetric(self) -> bool:
        return self.kind == "symmetric"

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name} {list(self.shape)} {self.dtype}>"


@dataclass(eq=False)
class Pad(Buffer):
    """A signal pad: a symmetric buffer of i32 slots, zero at allocation. ``consumed``: every slot is cleared by
    its one waiter each call (a kernel's wait that clears; then a CUDA graph needs not zero it)."""

    consumed: bool = False

    @property
    def slots(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<signal pad {self.name} [{self.slots}]>"


@dataclass
class Kernel:
    """A kernel a launch can name: a built-in template instance (``Program.gemm``, ``Program.template``). Its
    record is made when it is launched (with the launch's tile order and SM budget) and checked there."""

    template: str
    args: tuple
    fields: dict[str, Any]
    where: tuple[str, int, int]

    def record(self, *, tile_order: str | None, sm_budget: int | None, where) -> Any:
        from .kernels import get_template
        module = get_template(self.template)
        fields = dict(self.fields)
        params = inspect.signature(module.make_record).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for name, value in (("tile_order", tile_order), ("num_sms", sm_budget)):
            if value is None:
                continue
            if name not in params and not takes_any:
                what = "a tile order" if name == "tile_order" else "an SM budget of its own"
                raise _error(f"the {self.template} template takes no {name} ({what}): drop "
                             f"{'tile_order' if name == 'tile_order' else 'sm_budget'}=", where)
            fields[name] = value
        try:
            return module.make_record(*self.args, **fields)
        except DitronError as err:
            raise _error(f"{self.template} kernel: {err}", where) from None
        except TypeError as err:  # an unknown field or a missing one
            raise _error(f"{self.template} kernel: {err}", where) from None


# Triton's pointer and scalar type strings of a @ditron.jit kernel's parameters -> the buffers' element types
_POINTER_DTYPES = {"*bf16": "bf16", "*fp16": "f16", "*fp32": "f32", "*i32": "i32"}
_SCALAR_TYPES = ("i32", "i64", "u32", "u64")
# @ditron.jit kernels of the programs built in this process, by key (their declaration's ditron.jit attribute):
# ditron.compile finds the Python function of a launched kernel here (the IR cannot hold it)
JIT_KERNELS: dict[str, "JitKernel"] = {}


@dataclass
class JitKernel:
    """A user ``@ditron.jit`` kernel specialised for a program (``Program.jit``): the types of its parameters,
    the values of its constexprs, its compile options. Launched with the non-constexpr parameters in order."""

    fn: Any
    signature: dict[str, str]
    constexprs: dict[str, Any]
    options: dict[str, Any]
    where: tuple[str, int, int]
    wait: dict[str, str] | None = None   # {"arg": pad parameter, "value_arg": value parameter}: for the watchdog

    @property
    def name(self) -> str:
        return self.fn.__name__

    @property
    def params(self) -> list[str]:
        """The parameters a launch passes: the kernel's, less its tl.constexpr ones (given or defaulted)."""
        return [n for n in self.fn.arg_names if n not in self.fn.constexpr_names]

    def key(self, target: str) -> str:
        """What decides the compiled kernel: its source, types, constexprs, options and target (a hash)."""
        import hashlib
        import json
        try:
            source = inspect.getsource(self.fn.fn)
        except (OSError, TypeError):
            source = repr(self.fn.fn.__code__.co_code)
        spec = json.dumps([self.fn.fn.__module__, self.fn.fn.__qualname__, source, self.signature, self.wait,
                           sorted(self.constexprs.items(), key=lambda kv: kv[0]), sorted(self.options.items()),
                           target], default=repr)
        return hashlib.sha256(spec.encode()).hexdigest()[:20]

    def compile(self, target: str) -> Any:
        return self.fn.compile(signature=self.signature, constexprs=self.constexprs, target=target, **self.options)


# ------------------------------------------------------------------------------------------------ the recorded ops

@dataclass
class _Op:
    kind: str                          # copy, signal, wait, barrier, launch, loop, if
    where: tuple[str, int, int]
    fields: dict[str, Any]
    body: list["_Op"] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------ the program

class Program:
    """One rank's device-level program for a world of ``world_size`` ranks (shapes are static, so a program is
    built for one world size; build another for another W). ``target``: the GPU the kernels are tiled for."""

    def __init__(self, name: str, world_size: int, *, target: str = "cuda:90"):
        if not isinstance(name, str) or not name.isidentifier():
            raise _error(f"a program's name is an identifier (it names the device function), got {name!r}")
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise _error(f"world_size must be a positive int, got {world_size!r}")
        self.name = name
        self.world_size = world_size
        self.target = str(target)
        self.where = _call_site()
        self.inputs: list[Buffer] = []
        self.outputs: list[Buffer] = []
        self.buffers: list[Buffer] = []      # symmetric buffers and pads, in allocation order
        self._names: dict[str, Buffer] = {}
        self._ops: list[_Op] = []
        self._scope: list[_Op] = self._ops
        self._depth = 0
        self.rank = Index("rank", (), self)
        self.num_ranks = Index("num_ranks", (), self)
        self.epoch = Index("epoch", (), self)
        self._loop_vars = 0
        self._live_vars: set[int] = set()  # the loops the program is inside while it is built
        self._barrier_pad: Pad | None = None
        self._executables: dict[tuple, Any] = {}

    def __repr__(self) -> str:
        return f"<ditron.device.Program {self.name} W={self.world_size} ops={self._count(self._ops)}>"

    @staticmethod
    def _count(ops: list[_Op]) -> int:
        return sum(1 + Program._count(o.body) for o in ops)

    # ---- declarations

    def _declare(self, buf: Buffer) -> Buffer:
        if not isinstance(buf.name, str) or not buf.name.isidentifier():
            raise _error(f"a buffer's name is an identifier, got {buf.name!r}", buf.where)
        if buf.name in self._names:
            first = self._names[buf.name].where
            raise _error(f"'{buf.name}' is already declared (at {first[0]}:{first[1]}); give each buffer its own "
                         "name", buf.where)
        self._names[buf.name] = buf
        return buf

    def _shape_dtype(self, shape: Any, dtype: Any, what: str) -> tuple[tuple[int, ...], str]:
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = (shape,)
        if not isinstance(shape, (tuple, list)) or not shape or \
                not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in shape):
            raise _error(f"{what}: the shape is a tuple of positive ints, got {shape!r}")
        if len(shape) > 3:
            raise _error(f"{what}: buffers have rank 1 to 3, got shape {list(shape)}")
        name = str(dtype).removeprefix("torch.")
        name = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "int32": "i32"}.get(name, name)
        if name not in DTYPES:
            raise _error(f"{what}: element type {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
        return tuple(shape), name

    def _no_work_yet(self, what: str) -> None:
        if self._ops:
            raise _error(f"{what} after the first copy, signal, wait or launch: declare every argument and "
                         "buffer first (allocating while a kernel spins can deadlock the GPU)")

    def input(self, name: str, shape: Sequence[int], dtype: Any) -> Buffer:
        """This rank's input tensor (an "in" argument; inputs come first, in the order declared)."""
        self._no_work_yet("an input is declared")
        if self.outputs:
            raise _error(f"input '{name}' is declared after an output: declare the inputs first (arguments are "
                         "the inputs, then the outputs)")
        shape, dtype = self._shape_dtype(shape, dtype, f"input '{name}'")
        buf = self._declare(Buffer(self, name, shape, dtype, "in", where=_call_site(), index=len(self.inputs)))
        self.inputs.append(buf)
        return buf

    def output(self, name: str, shape: Sequence[int], dtype: Any) -> Buffer:
        """This rank's output tensor (an "out" argument, written by the program)."""
        self._no_work_yet("an output is declared")
        shape, dtype = self._shape_dtype(shape, dtype, f"output '{name}'")
        buf = self._declare(Buffer(self, name, shape, dtype, "out", where=_call_site(),
                                   index=len(self.inputs) + len(self.outputs)))
        self.outputs.append(buf)
        return buf

    def symmetric(self, name: str, shape: Sequence[int], dtype: Any, *, rotate: bool = False) -> Buffer:
        """A symmetric buffer (the same on every rank, addressable by peers). ``rotate``: held twice, call e using
        copy e % 2 (a program that fences itself stores into the copy the peers' previous call does not read)."""
        self._no_work_yet("a symmetric buffer is allocated")
        shape, dtype = self._shape_dtype(shape, dtype, f"symmetric buffer '{name}'")
        buf = self._declare(Buffer(self, name, shape, dtype, "symmetric", rotate=bool(rotate), where=_call_site()))
        self.buffers.append(buf)
        return buf

    def signal_pad(self, name: str, slots: int, *, consumed: bool = False) -> Pad:
        """A signal pad of ``slots`` i32 slots, zero at allocation."""
        self._no_work_yet("a signal pad is allocated")
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise _error(f"signal pad '{name}': slots must be a positive int, got {slots!r}")
        pad = self._declare(Pad(self, name, (slots,), "i32", "symmetric", where=_call_site(),
                                consumed=bool(consumed)))
        self.buffers.append(pad)
        return pad

    def pad(self, name: str) -> Pad:
        """The signal pad declared under ``name``."""
        return self._pad(name, "pad()")

    def _pad(self, pad: Any, what: str) -> Pad:
        if isinstance(pad, str):
            found = self._names.get(pad)
            if found is None:
                pads = [b.name for b in self.buffers if isinstance(b, Pad)]
                raise _error(f"{what}: there is no signal pad '{pad}' in program '{self.name}' (its pads: "
                             f"{', '.join(pads) or 'none'}); declare it with signal_pad('{pad}', slots)")
            pad = found
        if not isinstance(pad, Pad):
            raise _error(f"{what}: {pad!r} is not a signal pad (declare one with signal_pad(name, slots))")
        if pad.program is not self:
            raise _error(f"{what}: signal pad '{pad.name}' belongs to program '{pad.program.name}', not to "
                         f"'{self.name}'")
        return pad

    def _buffer(self, buf: Any, what: str) -> Buffer:
        if isinstance(buf, str):
            found = self._names.get(buf)
            if found is None:
                raise _error(f"{what}: there is no buffer '{buf}' in program '{self.name}'")
            buf = found
        if not isinstance(buf, Buffer):
            raise _error(f"{what}: expected a buffer of the program, got {type(buf).__name__}")
        if buf.program is not self:
            raise _error(f"{what}: buffer '{buf.name}' belongs to program '{buf.program.name}', not to "
                         f"'{self.name}'")
        return buf

    # ---- host control flow

    @contextlib.contextmanager
    def loop(self, lo: Any, hi: Any, step: Any = 1) -> Iterator[Index]:
        """``for i in range(lo, hi, step)`` on the host (scf.for); yields the loop variable."""
        lo_, hi_, step_ = (_as_index(v, self, f"loop {n}") for v, n in ((lo, "start"), (hi, "end"), (step, "step")))
        if step_.constant is not None and step_.constant < 1:
            raise _error(f"loop step must be >= 1, got {step_.constant}")
        var = Index("loop", (self._loop_vars,), self)
        self._loop_vars += 1
        op = _Op("loop", _call_site(), {"lo": lo_, "hi": hi_, "step": step_, "var": var})
        self._live_vars.add(var.args[0])
        try:
            with self._nested(op):
                yield var
        finally:
            self._live_vars.discard(var.args[0])

    @contextlib.contextmanager
    def if_(self, cond: Index) -> Iterator[None]:
        """Run the body on the ranks (and calls) where ``cond`` holds (a comparison of index values)."""
        if not isinstance(cond, Index) or cond.kind not in _COMPARISONS + ("const",):
            raise _error("if_ takes a comparison of index values (p.rank < 2, (p.rank % 2).eq(0), ...), got "
                         f"{cond!r}")
        op = _Op("if", _call_site(), {"cond": cond})
        with self._nested(op):
            yield

    @contextlib.contextmanager
    def _nested(self, op: _Op) -> Iterator[None]:
        self._scope.append(op)
        saved = self._scope
        self._scope, self._depth = op.body, self._depth + 1
        try:
            yield
        finally:
            self._scope, self._depth = saved, self._depth - 1

    # ---- device work

    @staticmethod
    def _stream(stream: Any, where) -> int:
        if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
            raise _error(f"stream must be an int >= 0 (streams are numbered from 0), got {stream!r}", where)
        return stream

    def _region(self, buf: Buffer, offsets: Any, sizes: list[Index], what: str, where) -> list[Index]:
        if offsets is None:
            offsets = [0] * len(buf.shape)
        if isinstance(offsets, (int, Index)):
            offsets = [offsets]
        offsets = list(offsets)
        if len(offsets) != len(buf.shape):
            raise _error(f"{what}: '{buf.name}' has rank {len(buf.shape)} ({list(buf.shape)}), but "
                         f"{len(offsets)} offset(s) were given", where)
        offs = [_as_index(o, self, f"{what} offset {d}") for d, o in enumerate(offsets)]
        for d, (o, s, extent) in enumerate(zip(offs, sizes, buf.shape)):
            lo, n = o.constant, s.constant
            if lo is not None and n is not None and (lo < 0 or lo + n > extent):
                raise _error(f"{what}: dim {d} covers [{lo}, {lo + n}) of '{buf.name}', whose size is {extent}",
                             where)
        return offs

    def copy(self, src: Buffer, dst: Buffer, *, src_rank: Any = None, dst_rank: Any = None,
             src_offsets: Any = None, dst_offsets: Any = None, sizes: Any = None, engine: str = "copy_engine",
             stream: int = 0) -> None:
        """Copy a region of ``src`` on ``src_rank`` into ``dst`` on ``dst_rank`` (default: this rank), with
        ``engine`` "copy_engine" (DMA, no SMs) or "sm" (a copy kernel). A buffer on another rank than the
        executing one must be symmetric. ``sizes`` default to the whole of ``src``; offsets to 0."""
        where = _call_site()
        src, dst = self._buffer(src, "copy source"), self._buffer(dst, "copy destination")
        if engine not in ENGINES:
            raise _error(f"copy: there is no engine {engine!r}; engines: {', '.join(ENGINES)}", where)
        if src.dtype != dst.dtype:
            raise _error(f"copy: '{src.name}' holds {src.dtype} and '{dst.name}' {dst.dtype}; a copy does not "
                         "convert", where)
        if len(src.shape) != len(dst.shape):
            raise _error(f"copy: '{src.name}' has rank {len(src.shape)} and '{dst.name}' rank {len(dst.shape)}",
                         where)
        if isinstance(dst, Pad) or isinstance(src, Pad):
            raise _error("copy: signal pads are written by signals, not copies", where)
        if dst.kind == "in":
            raise _error(f"copy: '{dst.name}' is an input of the program; write into an output or a symmetric "
                         "buffer", where)
        src_r = self.rank if src_rank is None else _as_index(src_rank, self, "copy src_rank")
        dst_r = self.rank if dst_rank is None else _as_index(dst_rank, self, "copy dst_rank")
        for buf, r, side in ((src, src_r, "source"), (dst, dst_r, "destination")):
            if not buf.symmetric and r is not self.rank:
                raise _error(f"copy: the {side} '{buf.name}' is an {buf.kind} argument, which only this rank can "
                             f"address; a copy to or from another rank needs a symmetric buffer", where)
        if sizes is None:
            sizes = src.shape
        if isinstance(sizes, (int, Index)):
            sizes = [sizes]
        sizes = [_as_index(s, self, f"copy size {d}") for d, s in enumerate(sizes)]
        if len(sizes) != len(src.shape):
            raise _error(f"copy: {len(sizes)} size(s) for buffers of rank {len(src.shape)}", where)
        if any(s.constant is not None and s.constant < 1 for s in sizes):
            raise _error(f"copy: sizes must be >= 1, got {sizes}", where)
        so = self._region(src, src_offsets, sizes, "copy source", where)
        do = self._region(dst, dst_offsets, sizes, "copy destination", where)
        self._scope.append(_Op("copy", where, {"src": src, "dst": dst, "src_rank": src_r, "dst_rank": dst_r,
                                               "src_offsets": so, "dst_offsets": do, "sizes": sizes,
                                               "engine": engine, "stream": self._stream(stream, where)}))

    def signal(self, pad: Any, *, slot: Any, rank: Any = None, value: Any = None, op: str = "set",
               scope: str = "sys", stream: int = 0) -> None:
        """Set (``op="set"``) or add to (``op="add"``) slot ``slot`` of ``pad`` on ``rank`` (default: this rank),
        with release semantics at ``scope`` ("sys" for another rank; "gpu" within this one): everything enqueued
        before it on its stream is visible to whoever observes the new value. ``value`` defaults to the epoch."""
        where = _call_site()
        pad = self._pad(pad, "signal")
        if op not in SIGNAL_OPS:
            raise _error(f"signal: op must be one of {', '.join(SIGNAL_OPS)}, got {op!r}", where)
        if scope not in SCOPES:
            raise _error(f"signal: scope must be one of {', '.join(SCOPES)}, got {scope!r}", where)
        slot_ = _as_index(slot, self, "signal slot")
        self._check_slot(pad, slot_, "signal", where)
        target = self.rank if rank is None else _as_index(rank, self, "signal rank")
        if scope != "sys" and target is not self.rank and self.world_size > 1:
            raise _error("signal: a signal to another rank needs scope='sys'", where)
        self._scope.append(_Op("signal", where, {"pad": pad, "slot": slot_, "rank": target,
                                                 "value": self.epoch if value is None else
                                                 _as_index(value, self, "signal value"),
                                                 "op": op, "scope": scope, "stream": self._stream(stream, where)}))

    @staticmethod
    def _check_slot(pad: Pad, slot: Index, what: str, where) -> None:
        if slot.constant is not None and not 0 <= slot.constant < pad.slots:
            raise _error(f"{what}: slot {slot.constant} is outside signal pad '{pad.name}' (slots 0..{pad.slots - 1})",
                         where)

    def wait(self, pad: Any, slots: Any, *, value: Any = None, stream: int = 0) -> None:
        """Block ``stream`` until every one of this rank's ``slots`` of ``pad`` is >= ``value`` (default: the
        epoch), with acquire semantics."""
        where = _call_site()
        pad = self._pad(pad, "wait")
        if isinstance(slots, (int, Index)):
            slots = [slots]
        slots = [_as_index(s, self, "wait slot") for s in slots]
        if not slots:
            raise _error("wait: no slot given", where)
        for s in slots:
            self._check_slot(pad, s, "wait", where)
        self._scope.append(_Op("wait", where, {"pad": pad, "slots": slots,
                                               "value": self.epoch if value is None else
                                               _as_index(value, self, "wait value"),
                                               "stream": self._stream(stream, where)}))

    def barrier(self, pad: Any = None, *, stream: int = 0) -> None:
        """Every rank arrives, then waits for all others (through ``pad``, default a pad 'barrier' of W slots
        the program allocates)."""
        where = _call_site()
        if pad is None:
            if self._barrier_pad is None:
                if "barrier" in self._names:
                    raise _error("barrier: the program already has a buffer named 'barrier'; pass the pad to use",
                                 where)
                self._barrier_pad = Pad(self, "barrier", (self.world_size,), "i32", "symmetric", where=where)
                self._names["barrier"] = self._barrier_pad
                self.buffers.append(self._barrier_pad)
            pad = self._barrier_pad
        pad = self._pad(pad, "barrier")
        self._scope.append(_Op("barrier", where, {"pad": pad, "stream": self._stream(stream, where)}))

    # ---- kernels

    def gemm(self, m: int, n: int, k: int, *, in_dtype: str = "bf16", out_dtype: str | None = None,
             **fields: Any) -> Kernel:
        """The built-in GEMM template ``C[m, n] = A[m, k] @ B[k, n]`` (kernels/gemm/: its record fields, e.g.
        ``wait={"arg": "ready", "rows_per_slot": R}`` for per-tile waits, block sizes, ``persistent``). Launch it
        with its arguments in the record's order: a, b, c, then those its parts name."""
        return Kernel("gemm", (m, n, k), {"in_dtype": _template_dtype(in_dtype, "gemm in_dtype"),
                                          **({"out_dtype": _template_dtype(out_dtype, "gemm out_dtype")}
                                             if out_dtype else {}), **fields}, _call_site())

    def template(self, name: str, *args: Any, **fields: Any) -> Kernel:
        """Any built-in template (gemm, copy, reduce, elementwise, grouped_gemm), with its make_record's
        arguments."""
        from .kernels import TEMPLATES
        if name not in TEMPLATES:
            raise _error(f"there is no kernel template '{name}'; templates: {', '.join(TEMPLATES)}")
        return Kernel(name, args, fields, _call_site())

    def jit(self, fn: Any, *, signature: dict[str, str], constexprs: dict[str, Any] | None = None,
            wait: dict[str, str] | None = None, **options: Any) -> JitKernel:
        """A user ``@ditron.jit`` kernel for this program: ``signature`` gives the Triton type of each parameter
        ("*bf16", "*fp32", "*i32", "i32", ...), ``constexprs`` the values of its ``tl.constexpr`` ones; ``options``
        are its compile options (num_warps, ...). Launch it with a grid; its hidden arguments (rank, heap bases,
        wait bounds) are bound by the executor. ``wait={"arg": pad parameter, "value_arg": value parameter}`` says
        which pad the kernel waits on for which value, so that a wait that times out names that pad's slots."""
        where = _call_site()
        if not (hasattr(fn, "arg_names") and hasattr(fn, "constexpr_names") and callable(getattr(fn, "compile", None))):
            raise _error(f"jit takes a @ditron.jit kernel, got {type(fn).__name__}", where)
        constexprs = dict(constexprs or {})
        try:
            fn._source(dict(signature), constexprs)  # the kernel's own checks of names and constexprs
        except DitronError as err:
            raise _error(str(err.diagnostics[0].message), where) from None
        for name in fn.arg_names:
            ty = signature.get(name)
            if name in fn.constexpr_names:
                continue
            if ty not in _POINTER_DTYPES and ty not in _SCALAR_TYPES:
                raise _error(f"kernel '{fn.__name__}': parameter '{name}' has type {ty!r}; a device program passes "
                             f"buffers ({', '.join(_POINTER_DTYPES)}) and index values ({', '.join(_SCALAR_TYPES)})",
                             where)
        if wait is not None:
            if not isinstance(wait, dict) or set(wait) != {"arg", "value_arg"}:
                raise _error(f"jit: wait is {{'arg': pad parameter, 'value_arg': value parameter}}, got {wait!r}",
                             where)
            if signature.get(wait["arg"]) != "*i32":
                raise _error(f"jit: wait arg {wait['arg']!r} is not an i32 pad parameter (*i32) of "
                             f"'{fn.__name__}'", where)
            if signature.get(wait["value_arg"]) not in _SCALAR_TYPES:
                raise _error(f"jit: wait value_arg {wait['value_arg']!r} is not an integer parameter of "
                             f"'{fn.__name__}'", where)
        return JitKernel(fn, dict(signature), constexprs, dict(options), where, dict(wait) if wait else None)

    def launch(self, kernel: Kernel, args: Sequence[Any], *, grid: Sequence[int] | int | None = None,
               sm_budget: int | None = None, stream: int = 0, tile_order: str | None = None) -> None:
        """Launch ``kernel`` on ``stream`` with ``args`` (buffers of the program and index values, in the
        kernel's argument order). ``grid``: the programs to launch (a template launches exactly its own grid:
        given, it must match). ``sm_budget``: the SMs it may hold (a template's num_sms). ``tile_order``:
        row_major, grouped or rank_rotated (templates with a tile order)."""
        where = _call_site()
        if isinstance(kernel, JitKernel):
            self._launch_jit(kernel, args, grid, sm_budget, stream, tile_order, where)
            return
        if not isinstance(kernel, Kernel):
            raise _error(f"launch takes a kernel (Program.gemm(...), Program.template(...), Program.jit(...)), got "
                         f"{type(kernel).__name__}", where)
        if tile_order is not None and tile_order not in TILE_ORDERS:
            raise _error(f"launch: tile_order must be one of {', '.join(TILE_ORDERS)}, got {tile_order!r}", where)
        if sm_budget is not None and (isinstance(sm_budget, bool) or not isinstance(sm_budget, int) or sm_budget < 1):
            raise _error(f"launch: sm_budget must be a positive int, got {sm_budget!r}", where)
        rec = kernel.record(tile_order=tile_order, sm_budget=sm_budget, where=where)
        names = list(rec.get("args", []))
        from .passes import device_kernels as K
        from .kernels import gemm as gemm_template
        scratch = gemm_template.scratch(rec) if rec["template"] == "gemm" else None
        args = list(args)
        if len(args) != len(names):
            raise _error(f"launch of the {kernel.template} kernel: {len(args)} argument(s) given, it takes "
                         f"{len(names)}: {', '.join(names)}", where)
        checked = [self._launch_arg(rec, name, a, where) for name, a in zip(names, args)]
        full_grid = list(K.grid_of(rec))
        if grid is not None:
            want = [grid] if isinstance(grid, int) else list(grid)
            want = want + [1] * (3 - len(want))
            if want != full_grid:
                raise _error(f"launch: the {kernel.template} template launches exactly grid {full_grid} for this "
                             f"record, not {want} (change its fields, e.g. num_sms / sm_budget, instead)", where)
        self._scope.append(_Op("launch", where, {"record": rec, "args": checked, "grid": full_grid,
                                                 "sm_budget": K.sm_budget_of(rec), "scratch": scratch,
                                                 "tile_order": rec.get("tile_order", "grouped"),
                                                 "stream": self._stream(stream, where)}))

    def _launch_jit(self, kernel: JitKernel, args, grid, sm_budget, stream, tile_order, where) -> None:
        if grid is None:
            raise _error(f"launch of @ditron.jit kernel '{kernel.name}': give its grid (programs to launch)", where)
        g = [grid] if isinstance(grid, int) else list(grid)
        if not 1 <= len(g) <= 3 or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in g):
            raise _error(f"launch: grid is 1 to 3 positive ints, got {grid!r}", where)
        g = g + [1] * (3 - len(g))
        if tile_order not in (None, "row_major"):
            raise _error(f"launch: a @ditron.jit kernel visits its programs as it is written; tile_order "
                         f"{tile_order!r} applies to templates only", where)
        for other in self._jit_launches():
            if other.name == kernel.name and other.key(self.target) != kernel.key(self.target):
                raise _error(f"launch: kernel '{kernel.name}' is launched with two specialisations in one program "
                             "(one compiled kernel per name): give both launches the same signature and constexprs",
                             where)
        params = kernel.params
        args = list(args)
        if len(args) != len(params):
            raise _error(f"launch of kernel '{kernel.name}': {len(args)} argument(s) given, it takes {len(params)}: "
                         f"{', '.join(params)}", where)
        checked = []
        for name, a in zip(params, args):
            ty = kernel.signature[name]
            if ty in _SCALAR_TYPES:
                if isinstance(a, Buffer):
                    raise _error(f"launch: argument '{name}' of kernel '{kernel.name}' is {ty}, got buffer "
                                 f"'{a.name}'", where)
                checked.append(_as_index(a, self, f"launch argument '{name}'"))
                continue
            buf = self._buffer(a, f"launch argument '{name}'")
            if buf.dtype != _POINTER_DTYPES[ty]:
                raise _error(f"launch: argument '{name}' of kernel '{kernel.name}' is {ty}, got '{buf.name}' of "
                             f"{buf.dtype}", where)
            checked.append(buf)
        budget = math.prod(g) if sm_budget is None else sm_budget
        self._scope.append(_Op("launch", where, {"jit": kernel, "args": checked, "grid": g, "sm_budget": budget,
                                                 "tile_order": "row_major", "stream": self._stream(stream, where)}))

    def _jit_launches(self) -> list[JitKernel]:
        out = []

        def visit(ops):
            for op in ops:
                if op.kind == "launch" and "jit" in op.fields:
                    out.append(op.fields["jit"])
                visit(op.body)
        visit(self._ops)
        return out

    def _launch_arg(self, rec, name: str, a: Any, where):
        """Check one launch argument against what the template expects of it (shapes and dtypes of a GEMM's
        operands, pads where the record waits or notifies)."""
        if isinstance(a, (Index, int)) and not isinstance(a, bool):
            if name in _buffer_args(rec):
                raise _error(f"launch: argument '{name}' of the {rec['template']} kernel is a buffer, got the "
                             f"index value {a!r}", where)
            return _as_index(a, self, f"launch argument '{name}'")
        buf = self._buffer(a, f"launch argument '{name}'")
        if name not in _buffer_args(rec):
            raise _error(f"launch: argument '{name}' of the {rec['template']} kernel is an index value, got "
                         f"buffer '{buf.name}'", where)
        if name in _pad_args(rec) and not isinstance(buf, Pad):
            raise _error(f"launch: argument '{name}' of the {rec['template']} kernel is a signal pad, got "
                         f"'{buf.name}' {list(buf.shape)} {buf.dtype}", where)
        expect = _gemm_operands(rec).get(name)
        if expect is not None:
            shape, dtype = expect
            if tuple(buf.shape) != tuple(shape) or DTYPES[buf.dtype][1] != dtype:
                raise _error(f"launch: argument '{name}' of the gemm kernel must be {list(shape)} {dtype}, got "
                             f"'{buf.name}' {list(buf.shape)} {buf.dtype}", where)
        return buf

    # ---- IR

    def build(self, ctx: Any = None) -> Any:
        """The program as an ir.Module in ``ctx`` (default: the current context), which must have the ditron
        dialects (``ditron.dialects.ditron_context()``), verified."""
        from .dialects.verify import verify
        if ctx is not None:
            from mlir import ir
            with ctx, ir.Location.unknown(ctx):
                module = _Emitter(self).module()
        else:
            module = _Emitter(self).module()
        verify(module)
        return module

    def to_mlir(self, pipeline: str = "", *, debuginfo: bool = True) -> str:
        """The module as MLIR text (after ``pipeline``, e.g. "ditron-lower-device-to-core"), with the Python
        locations of every op unless ``debuginfo=False``."""
        import gc
        from .dialects import ditron_context
        from .passes.registry import parse_pipeline, run_passes
        with ditron_context():
            module = self.build()
            try:
                if pipeline:
                    run_passes(module, parse_pipeline(pipeline))
                return module.operation.get_asm(enable_debug_info=debuginfo)
            finally:
                del module
                gc.collect()

    def compile(self, target: str | None = None, **options: Any) -> Any:
        """``ditron.compile(self, target, **options)``: its kernels and host program as an artifact (``out_dir=``
        to keep it, e.g. for a GPU box without the compiler: ``ditron.load(dir)`` runs it); the Executable."""
        from .api import compile as ditron_compile
        return ditron_compile(self, target or self.target, **options)

    def executable(self, target: str | None = None, **options: Any) -> Any:
        """The Executable of ``compile(target, **options)``, compiled once per program and options."""
        key = (target or self.target, tuple(sorted(options.items())))
        exe = self._executables.get(key)
        if exe is None:
            exe = self._executables[key] = self.compile(*key[:1], **options)
        return exe

    def executor(self, world: Any, *, graph: bool = False, target: str | None = None, **options: Any) -> Any:
        """The runtime executor of the program in ``world`` (a ditron.World of ``world_size`` ranks), compiled for
        ``target`` (default: this GPU's); ``options`` go to the executor (``timeout_s``, ``wait_via``, ...)."""
        if getattr(world, "world_size", None) != self.world_size:
            raise _error(f"program '{self.name}' is built for {self.world_size} rank(s); the world has "
                         f"{getattr(world, 'world_size', '?')}")
        if target is None:
            from .runtime.loader import device_target_name
            target = device_target_name()
        return self.executable(target).executor(world, graph=graph, **options)

    def run(self, world: Any, inputs: Sequence[Any], outputs: Sequence[Any] | None = None, *, sync: bool = True,
            graph: bool = False, target: str | None = None) -> Any:
        """Run the program in ``world``: inputs per rank in a virtual world (``[[x0, w0], [x1, w1], ...]``), this
        rank's in a real one; the outputs in the same shape. ``graph``: replay a CUDA graph per set of tensors."""
        return self.executor(world, graph=graph, target=target).run(inputs, outputs, sync=sync)

    def simulate(self, inputs: Any = None, *, reference: Callable | None = None, **options: Any) -> Any:
        """Run the program on the CPU for its ``world_size`` ranks (``ditron.sim.simulate``: deadlocks, races,
        unwritten outputs, mismatches against ``reference(per_rank_inputs) -> per_rank_outputs``)."""
        import gc
        from .dialects import ditron_context
        from .sim import simulate
        jit = self._jit_launches()
        if jit:
            raise _error(f"program '{self.name}' launches @ditron.jit kernel(s) ({', '.join(k.name for k in jit)}), "
                         "which the device-level simulator cannot run yet (it runs template kernels tile by tile): "
                         "check the kernel alone with ditron.language.simulate", jit[0].where)
        with ditron_context():
            module = self.build()
            try:
                return simulate(module, self.world_size, inputs, reference=reference, **options)
            finally:
                del module
                gc.collect()


def _template_dtype(name: str, what: str) -> str:
    if name in ("fp8e4m3",):
        return name
    if name not in DTYPES:
        raise _error(f"{what}: element type {name!r} is not supported; use one of {', '.join(DTYPES)}")
    return DTYPES[name][1]


def _pad_args(rec) -> set[str]:
    out = set()
    for part in ("wait", "notify", "reduce_own", "publish"):
        spec = rec.get(part)
        if isinstance(spec, dict):
            for key in ("arg", "done", "pad"):
                if isinstance(spec.get(key), str):
                    out.add(spec[key])
    push = rec.get("push")
    if isinstance(push, dict) and isinstance(push.get("pad"), str):
        out.add(push["pad"])
    if rec.get("split_k", 1) > 1 or rec.get("stream_k", 0):
        out.add("locks")
    return out & set(rec.get("args", []))


def _scalar_args(rec) -> set[str]:
    out = set()
    for part in ("wait", "notify", "reduce_own", "push", "publish"):
        spec = rec.get(part)
        if isinstance(spec, dict):
            for key in ("value_arg",):
                if isinstance(spec.get(key), str):
                    out.add(spec[key])
            peer = spec.get("peer")
            if isinstance(peer, str) and peer.startswith("arg:"):
                out.add(peer[4:])
    for key, value in rec.items():  # copy / reduce offsets given as arguments ("arg:src_row")
        if isinstance(value, str) and value.startswith("arg:"):
            out.add(value[4:])
    return out & set(rec.get("args", []))


def _buffer_args(rec) -> set[str]:
    return set(rec.get("args", [])) - _scalar_args(rec)


def _gemm_operands(rec) -> dict[str, tuple[tuple[int, ...], str]]:
    if rec["template"] != "gemm":
        return {}
    m, n, k = rec["m"], rec["n"], rec["k"]
    b = (n, k) if rec.get("b_trans") else (k, n)
    return {"a": ((m, rec["lda"]), rec["in_dtype"]), "b": ((b[0], rec["ldb"]), rec["in_dtype"]),
            "c": ((m, rec["ldc"]), rec["out_dtype"])}


# ------------------------------------------------------------------------------------------------ emission

class _Emitter:
    """Builds the device function of a Program with the lowering's DeviceBuilder (passes/device_builder.py)."""

    def __init__(self, program: Program):
        self.p = program

    def module(self) -> Any:
        from mlir import ir
        from mlir.dialects import func
        from .dialects import device
        from .dialects.sharding import Mesh
        from .passes.device_builder import DeviceBuilder, KernelTable
        from . import schema

        p = self.p
        loc = self.loc(p.where)
        module = ir.Module.create(loc=loc)
        module.operation.attributes[schema.MESH_ATTR] = Mesh((AXIS,), (p.world_size,)).to_attr()
        module.operation.attributes[schema.TARGET_ATTR] = ir.StringAttr.get(p.target)
        args = p.inputs + p.outputs
        types = [self.memref(b) for b in args] + [ir.IndexType.get()]
        fn = func.FuncOp(p.name, ir.FunctionType.get(types, []), ip=ir.InsertionPoint(module.body), loc=loc)
        fn = fn.operation
        fn.attributes[schema.LEVEL_ATTR] = ir.StringAttr.get("device")
        fn.attributes[schema.AXIS_ATTR] = ir.StringAttr.get(AXIS)
        fn.attributes[schema.TARGET_ATTR] = ir.StringAttr.get(p.target)
        io = [b.kind for b in args] + ["epoch"]
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get(
            [ir.DictAttr.get({schema.IO_ATTR: ir.StringAttr.get(r)}) for r in io])
        limit = _epoch_limit(p)
        if limit is not None:
            fn.attributes[schema.EPOCH_LIMIT_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), limit)
        entry = fn.regions[0].blocks.append(*types, arg_locs=[loc] * len(types))
        self.b = DeviceBuilder(fn, entry.arguments[len(args)], loc)
        self.kernels = KernelTable(module)
        self.values: dict[int, Any] = {}
        for b, a in zip(args, entry.arguments):
            self.values[id(b)] = a
        for b in p.buffers:
            with self.b.located(self.loc(b.where)):
                if isinstance(b, Pad):
                    v = self.b.pad(b.slots, b.name, consumed=b.consumed)
                else:
                    v = self.b.alloc(list(b.shape), self.elem(b.dtype), b.name)
                    if b.rotate:
                        self.b.rotate(v)
            if device.AllocSymmetric(v.owner).name != b.name:
                raise _error(f"buffer '{b.name}' clashes with a name ditron reserves", b.where)
            self.values[id(b)] = v
        self.vars: dict[int, Any] = {}
        self.ops(p._ops)
        with loc:
            func.ReturnOp([], ip=ir.InsertionPoint(entry))
        return module

    # ---- types and locations

    @staticmethod
    def loc(where) -> Any:
        from mlir import ir
        return ir.Location.file(where[0], where[1], where[2])

    @staticmethod
    def elem(dtype: str) -> Any:
        from mlir import ir
        return ir.Type.parse(DTYPES[dtype][0])

    def memref(self, b: Buffer) -> Any:
        from mlir import ir
        return ir.MemRefType.get(list(b.shape), self.elem(b.dtype))

    # ---- index values

    def index(self, x: Index) -> Any:
        from mlir.dialects import arith
        b = self.b
        if x.kind == "const":
            return b.c(x.args[0])
        if x.kind == "rank":
            return b.rank
        if x.kind == "num_ranks":
            return b.num_ranks
        if x.kind == "epoch":
            return b.epoch
        if x.kind == "loop":
            return self.vars[x.args[0]]
        lhs, rhs = (self.index(a) for a in x.args)
        if x.kind == "add":
            return b.add(lhs, rhs)
        if x.kind == "sub":
            return b.sub(lhs, rhs)
        if x.kind == "mul":
            return b.mul(lhs, rhs)
        if x.kind == "min":
            return b.min(lhs, rhs)
        if x.kind == "max":
            return b.max(lhs, rhs)
        fn = {"div": arith.floordivsi, "rem": arith.remsi}.get(x.kind)
        with b.loc, b.ip:
            if fn is not None:
                return fn(lhs, rhs)
            pred = {"lt": arith.CmpIPredicate.slt, "le": arith.CmpIPredicate.sle, "gt": arith.CmpIPredicate.sgt,
                    "ge": arith.CmpIPredicate.sge, "eq": arith.CmpIPredicate.eq,
                    "ne": arith.CmpIPredicate.ne}[x.kind]
            return arith.cmpi(pred, lhs, rhs)

    def cond(self, x: Index) -> Any:
        from mlir import ir
        from mlir.dialects import arith
        if x.kind == "const":
            with self.b.loc, self.b.ip:
                return arith.constant(ir.IntegerType.get_signless(1), int(bool(x.args[0])))
        return self.index(x)

    # ---- ops

    def ops(self, ops: list[_Op]) -> None:
        for op in ops:
            with self.b.located(self.loc(op.where)):
                getattr(self, "op_" + op.kind)(op.fields, op)

    def stream(self, emitted: Any, stream: int) -> None:
        from mlir import ir
        target = emitted.op if hasattr(emitted, "op") else emitted
        target = getattr(target, "operation", target)
        target.attributes["stream"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), stream)

    @staticmethod
    def lane(stream: int) -> str:
        return "compute" if stream == 0 else "comm"

    def op_loop(self, f, op: _Op) -> None:
        with self.b.loop(self.index(f["lo"]), self.index(f["hi"]), self.index(f["step"])) as iv:
            self.vars[f["var"].args[0]] = iv
            self.ops(op.body)

    def op_if(self, f, op: _Op) -> None:
        with self.b.if_(self.cond(f["cond"])):
            self.ops(op.body)

    def op_copy(self, f, op: _Op) -> None:
        c = self.b.copy(self.values[id(f["src"])], self.values[id(f["dst"])], src_rank=self.index(f["src_rank"]),
                        dst_rank=self.index(f["dst_rank"]), src_offsets=[self.index(o) for o in f["src_offsets"]],
                        dst_offsets=[self.index(o) for o in f["dst_offsets"]],
                        sizes=[self.index(s) for s in f["sizes"]], engine=f["engine"], lane=self.lane(f["stream"]))
        self.stream(c, f["stream"])

    def op_signal(self, f, op: _Op) -> None:
        s = self.b.signal(self.values[id(f["pad"])], target=self.index(f["rank"]), slot=self.index(f["slot"]),
                          value=self.index(f["value"]), op=f["op"], scope=f["scope"], lane=self.lane(f["stream"]))
        self.stream(s, f["stream"])

    def op_wait(self, f, op: _Op) -> None:
        w = self.b.wait(self.values[id(f["pad"])], [self.index(s) for s in f["slots"]],
                        value=self.index(f["value"]), lane=self.lane(f["stream"]))
        self.stream(w, f["stream"])

    def op_barrier(self, f, op: _Op) -> None:
        self.stream(self.b.barrier(self.values[id(f["pad"])]), f["stream"])

    def op_launch(self, f, op: _Op) -> None:
        from mlir import ir
        args = [self.values[id(a)] if isinstance(a, Buffer) else self.index(a) for a in f["args"]]
        if "jit" in f:
            ln = self.b.launch(self.declare_jit(f["jit"], [a.type for a in args]), args, grid=f["grid"],
                               sm_budget=f["sm_budget"], tile_order="row_major", lane=self.lane(f["stream"]))
            self.stream(ln, f["stream"])
            return
        if f["scratch"]:  # a split-K / stream-K GEMM's workspace and locks: the kernel's own, zero at allocation
            (ws_shape, _), ((locks,), _) = f["scratch"]["workspace"], f["scratch"]["locks"]
            args += [self.b.alloc(ws_shape, ir.F32Type.get(), "gemm_workspace"), self.b.pad(locks, "gemm_locks")]
        rec = f["record"]
        name = self.kernels.declare(rec, [a.type for a in args], self.b.loc)
        ln = self.b.launch(name, args, grid=f["grid"], sm_budget=f["sm_budget"], tile_order=f["tile_order"],
                           lane=self.lane(f["stream"]))
        self.stream(ln, f["stream"])


    def declare_jit(self, k: JitKernel, types: list) -> str:
        """The private declaration standing for a @ditron.jit kernel (schema.JIT_ATTR: its key in JIT_KERNELS and
        its parameters); ditron.compile compiles the kernel from its Python function under the same name."""
        from mlir import ir
        from mlir.dialects import func
        from . import schema
        key = k.key(self.p.target)
        JIT_KERNELS[key] = k
        for op in self.kernels.module.body.operations:
            op = op.operation
            if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == k.name:
                if schema.JIT_ATTR not in op.attributes:
                    raise _error(f"kernel '{k.name}' clashes with another symbol of the program", k.where)
                return k.name
        with self.loc(k.where):
            decl = func.FuncOp(k.name, ir.FunctionType.get(types, []), visibility="private",
                               ip=ir.InsertionPoint(self.kernels.module.body))
        fields = {"key": ir.StringAttr.get(key), "params": ir.ArrayAttr.get([ir.StringAttr.get(n) for n in k.params])}
        if k.wait:
            fields["wait"] = ir.DictAttr.get({n: ir.StringAttr.get(v) for n, v in k.wait.items()})
        decl.attributes[schema.JIT_ATTR] = ir.DictAttr.get(fields)
        self.kernels.names.add(k.name)
        return k.name


def jit_declarations(module: Any) -> dict[str, tuple[str, list[str]]]:
    """The @ditron.jit kernels a module's device program launches: name -> (key, parameter names)."""
    from mlir import ir
    from . import schema
    out = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and schema.JIT_ATTR in op.attributes:
            d = ir.DictAttr(op.attributes[schema.JIT_ATTR])
            out[ir.StringAttr(op.attributes["sym_name"]).value] = (
                ir.StringAttr(d["key"]).value, [ir.StringAttr(a).value for a in ir.ArrayAttr(d["params"])])
    return out


def compile_jit_kernels(declared: dict[str, tuple[str, list[str]]], target: Any) -> list[tuple[Any, list[str]]]:
    """The compiled kernels (ditron.backends.CompiledKernel) of declared @ditron.jit kernels, with their parameter
    names; a CompileError for one whose Python function this process does not hold."""
    from .errors import CompileError
    out = []
    for name, (key, params) in declared.items():
        k = JIT_KERNELS.get(key)
        if k is None:
            raise CompileError(f"the program launches @{name}, a @ditron.jit kernel whose Python function is not in "
                               "this process (the IR names it only): compile the ditron.device Program itself "
                               "(ditron.compile(program) or program.compile())")
        compiled = k.compile(str(target))
        if compiled.name != name:
            raise CompileError(f"@ditron.jit kernel '{name}' compiled as '{compiled.name}'")
        out.append((compiled, params))
    return out


def _epoch_limit(p: Program) -> int | None:
    """The last epoch for which every slot value fits i32 (docs/device_ir.md, ``ditron.epoch_limit``), where the
    most a slot grows per call is known while building: signals that set the epoch (or a constant multiple of it),
    adds of constants in loops of constant trip counts, barriers (W per call). None where it is not known."""
    growth = {}

    def trips(loop) -> int | None:
        lo, hi, st = (loop.fields[k].constant for k in ("lo", "hi", "step"))
        if lo is None or hi is None or st is None:
            return None
        return max(0, math.ceil((hi - lo) / st))

    def visit(ops, mult) -> bool:
        for op in ops:
            if op.kind == "loop":
                n = trips(op)
                if n is None or not visit(op.body, mult * n):
                    return False
            elif op.kind == "if":
                if not visit(op.body, mult):
                    return False
            elif op.kind == "signal":
                v = op.fields["value"]
                name = op.fields["pad"].name
                if op.fields["op"] == "set":
                    per = 1 if v.kind == "epoch" else (v.args[1].constant if v.kind == "mul" and
                                                       v.args[0].kind == "epoch" else None)
                    per = per if per is not None else (0 if v.kind == "const" else None)
                    if per is None:
                        return False
                    growth[name] = max(growth.get(name, 0), per)
                else:
                    if v.constant is None:
                        return False
                    growth[name] = growth.get(name, 0) + abs(v.constant) * mult
            elif op.kind == "barrier":
                name = op.fields["pad"].name
                growth[name] = growth.get(name, 0) + p.world_size * mult
        return True

    if not visit(p._ops, 1):
        return None
    step = max(growth.values(), default=1) or 1
    return (2 ** 31 - 1) // step
