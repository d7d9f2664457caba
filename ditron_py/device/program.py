"""ditron.device's Program: one rank's device-level program, its declarations (arguments, symmetric buffers,
signal pads), its host control flow and its device work (copies, signals, waits, barriers); its kernels and launches
are in launch.py, its IR and what is made of it in emit.py."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

from .emit import _Emission
from .launch import _Launches
from .values import (_COMPARISONS, DTYPES, ENGINES, SCOPES, SIGNAL_OPS, Buffer, Index, Pad, _as_index, _call_site,
                     _error, _Op)


class Program(_Launches, _Emission):
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
        return self._owned(pad, "signal pad", what)

    def _buffer(self, buf: Any, what: str) -> Buffer:
        if isinstance(buf, str):
            found = self._names.get(buf)
            if found is None:
                raise _error(f"{what}: there is no buffer '{buf}' in program '{self.name}'")
            buf = found
        if not isinstance(buf, Buffer):
            raise _error(f"{what}: expected a buffer of the program, got {type(buf).__name__}")
        return self._owned(buf, "buffer", what)

    def _owned(self, buf: Buffer, noun: str, what: str) -> Buffer:
        if buf.program is not self:
            raise _error(f"{what}: {noun} '{buf.name}' belongs to program '{buf.program.name}', not to "
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

