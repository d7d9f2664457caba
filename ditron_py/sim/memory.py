"""Per-rank memory of the simulated world: data buffers with access tracking, signal pads with release/acquire
history, vector clocks.

Happens-before is tracked with vector clocks, one component per entity (host program, stream, kernel program).
Entity ``e`` stamps each access with its own component ``clock[e]``; a release (signal, notify, enqueue, end of a
launch) publishes a copy of the clock and then advances ``clock[e]``. An access stamped ``(e, n)`` happens before
an entity whose clock ``c`` has ``c[e] >= n``.

Each buffer keeps its writes and its reads as boxes (``lo``/``hi`` per dim) with their stamps, in numpy arrays so
that the overlap and ordering tests of one access are vectorised. A write that covers an earlier access ordered
before it retires that access; what stays is what a later access may still race with.
"""
from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .report import Loc

# --------------------------------------------------------------------------------------------- vector clocks

CLOCK = np.int32  # one component per entity; a component counts the entity's releases


def empty_clock() -> np.ndarray:
    return np.zeros(0, dtype=CLOCK)


def join(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The component-wise maximum of two clocks (of possibly different lengths), as a new array."""
    if len(a) < len(b):
        a, b = b, a
    out = a.copy()
    np.maximum(out[: len(b)], b, out=out[: len(b)])
    return out


def knows(clock: np.ndarray, entities: np.ndarray, stamps: np.ndarray) -> np.ndarray:
    """For each (entity, stamp): does clock include that event?"""
    seen = np.zeros(len(entities), dtype=np.int64)
    inside = entities < len(clock)
    seen[inside] = clock[entities[inside]]
    return seen >= stamps


# ----------------------------------------------------------------------------------------------- element types

FLOAT_TYPES = {"bf16": np.float32, "f16": np.float32, "f32": np.float32, "tf32": np.float32, "f64": np.float64,
               "f8E4M3FN": np.float32, "f8E5M2": np.float32}
_FP8 = {"f8E4M3FN": "fp8e4m3", "f8E5M2": "fp8e5m2"}  # MLIR element type -> ditron.kernels dtype
INT_TYPES = {"i1": np.int8, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "index": np.int64,
             "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64}


def storage_dtype(elem: str) -> np.dtype:
    if elem in FLOAT_TYPES:
        return np.dtype(FLOAT_TYPES[elem])
    if elem in INT_TYPES:
        return np.dtype(INT_TYPES[elem])
    raise KeyError(elem)


_LITTLE = sys.byteorder == "little"


def round_to(elem: str, x: np.ndarray) -> None:
    """Round float32 storage in place to what ``elem`` can hold (round to nearest even for bf16)."""
    if elem == "bf16":
        if _LITTLE and x.ndim and x.strides[-1] == 4:  # the low halves, read in place: no temporary
            if not x.view(np.uint16)[..., ::2].any():
                return  # already bf16 values (templates usually round their results themselves)
        bits = x.view(np.uint32)
        if not (bits & np.uint32(0xFFFF)).any():
            return
        finite = np.isfinite(x)
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
        np.copyto(bits, rounded, where=finite)
    elif elem == "f16":
        with np.errstate(over="ignore"):
            x[...] = x.astype(np.float16).astype(np.float32)
    elif elem in _FP8:
        from ..kernels.numerics import round_to as round_kernel

        x[...] = round_kernel(_FP8[elem], x)


def fill_value(elem: str):
    """What never-written memory holds: NaN for floats, so that reading it shows in the result."""
    return np.nan if elem in FLOAT_TYPES else np.iinfo(storage_dtype(elem)).min


# ---------------------------------------------------------------------------------------------- access logs


@dataclass(frozen=True)
class Access:
    """Who accessed a region: entity description, op location, call and what the op was."""

    entity: int
    who: str
    loc: Loc
    call: int
    what: str


class AccessLog:
    """Boxes with their entity, stamp and Access, in growable numpy arrays."""

    def __init__(self, ndim: int):
        self.ndim = ndim
        self.n = 0
        cap = 16
        self.lo = np.zeros((cap, ndim), dtype=np.int64)
        self.hi = np.zeros((cap, ndim), dtype=np.int64)
        self.ent = np.zeros(cap, dtype=np.int64)
        self.stamp = np.zeros(cap, dtype=np.int64)
        self.info: list[Access] = []

    def add(self, lo, hi, entity: int, stamp: int, info: Access) -> None:
        if self.n == len(self.ent):
            cap = 2 * len(self.ent)
            self.lo = np.resize(self.lo, (cap, self.ndim))
            self.hi = np.resize(self.hi, (cap, self.ndim))
            self.ent = np.resize(self.ent, cap)
            self.stamp = np.resize(self.stamp, cap)
        i = self.n
        self.lo[i], self.hi[i], self.ent[i], self.stamp[i] = lo, hi, entity, stamp
        self.info.append(info)
        self.n += 1

    def overlapping(self, lo, hi) -> np.ndarray:
        """Indices of the boxes that overlap [lo, hi)."""
        n = self.n
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        ov = (self.lo[:n, 0] < hi[0]) & (self.hi[:n, 0] > lo[0])
        for d in range(1, self.ndim):
            ov &= (self.lo[:n, d] < hi[d]) & (self.hi[:n, d] > lo[d])
        return ov.nonzero()[0]

    def covered_by(self, idx: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return np.all((self.lo[idx] >= lo) & (self.hi[idx] <= hi), axis=1)

    def remove(self, idx: np.ndarray) -> None:
        if len(idx) == 0:
            return
        keep = np.ones(self.n, dtype=bool)
        keep[idx] = False
        k = int(keep.sum())
        self.lo[:k] = self.lo[: self.n][keep]
        self.hi[:k] = self.hi[: self.n][keep]
        self.ent[:k] = self.ent[: self.n][keep]
        self.stamp[:k] = self.stamp[: self.n][keep]
        self.info = [a for a, kept in zip(self.info, keep) if kept]
        self.n = k


# ---------------------------------------------------------------------------------------------------- buffers


class Buffer:
    """One rank's instance of a buffer: a function argument of one call, or a symmetric allocation.

    ``changes`` lists the boxes written so far, in order (``version`` of them), for what keeps values computed from
    the buffer's data (sim.products).

    An input argument's buffer borrows its call's input array (``init`` of the buffer's shape and storage type,
    C-contiguous) instead of copying it: ``data`` is then a read-only view of it, and ``writable()`` -- which every
    write of data goes through -- copies it first. A program that never writes its inputs (the usual case) costs
    no copy of them, and the inputs the reference reads stay the ones the program was given."""

    _uids = itertools.count()

    def __init__(self, label: str, rank: int, shape: Sequence[int], elem: str, *, symmetric: bool, kind: str,
                 init: np.ndarray | None = None):
        self.label = label          # e.g. "'ag_buf'" or "argument 0 (in)"
        self.rank = rank
        self.shape = tuple(int(s) for s in shape)
        self.elem = elem
        self.symmetric = symmetric
        self.kind = kind            # "symmetric", "in", "out"
        self.borrowed = False
        if isinstance(init, np.ndarray) and init.shape == self.shape and init.dtype == storage_dtype(elem) and \
                init.flags.c_contiguous:  # a call's input, borrowed until a write (writable)
            self.data = init.view()
            self.data.flags.writeable = False
            self.borrowed = True
        elif init is not None and np.shape(init) == self.shape:  # a copy of init, in one pass
            self.data = np.array(init, dtype=storage_dtype(elem), copy=True, order="C")
        else:
            self.data = np.full(self.shape, fill_value(elem), dtype=storage_dtype(elem))
            if init is not None:
                self.data[...] = init
        self.written = np.zeros(self.shape, dtype=bool)
        self.unwritten = self.written.size  # elements never written (0: every read is of written data)
        ndim = max(len(self.shape), 1)
        self.writes = AccessLog(ndim)
        self.reads = AccessLog(ndim)
        self.uid = next(Buffer._uids)
        self.changes: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def writable(self) -> np.ndarray:
        """``data``, to write into: a borrowed input is copied first (see the class doc)."""
        if self.borrowed:
            self.data = np.array(self.data, copy=True, order="C")
            self.borrowed = False
        return self.data

    @property
    def version(self) -> int:
        return len(self.changes)

    def changed(self, lo: Sequence[int], hi: Sequence[int]) -> None:
        """Its data in [lo, hi) was written."""
        self.changes.append((tuple(lo), tuple(hi)))

    def changed_since(self, version: int, lo: Sequence[int], hi: Sequence[int]) -> bool:
        """Was a box overlapping [lo, hi) written after the first ``version`` changes?"""
        for clo, chi in self.changes[version:]:
            if all(a < d and c < b for a, b, c, d in zip(lo, hi, clo, chi)):
                return True
        return False

    def name(self) -> str:
        return f"{self.label} on rank {self.rank}"

    def box(self, offsets: Sequence[int], sizes: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """(lo, hi) of a region, as tuples of ints, or None if it does not fit in the buffer."""
        shape = self.shape or (1,)
        if not self.shape:
            offsets, sizes = (0,), (1,)
        if len(offsets) != len(shape) or len(sizes) != len(shape):
            return None
        lo = tuple(int(o) for o in offsets)
        hi = tuple(o + int(z) for o, z in zip(lo, sizes))
        for a, b, n in zip(lo, hi, shape):
            if a < 0 or b < a or b > n:
                return None
        return lo, hi

    def index(self, lo: Sequence[int], hi: Sequence[int]) -> tuple[slice, ...]:
        if not self.shape:
            return ()
        return tuple(map(slice, lo, hi))


@dataclass
class Race:
    kind: str
    other: Access
    lo: np.ndarray
    hi: np.ndarray


def check_read(buf: Buffer, lo: np.ndarray, hi: np.ndarray, clock: np.ndarray, me: int) -> list[Race]:
    """Races of a read of [lo, hi) by entity ``me`` with clock ``clock``: writes it does not know about."""
    idx = buf.writes.overlapping(lo, hi)
    if len(idx) == 0:
        return []
    ok = knows(clock, buf.writes.ent[idx], buf.writes.stamp[idx]) | (buf.writes.ent[idx] == me)
    bad = idx[~ok]
    if len(bad) == 0:
        return []
    last = int(bad[-1])
    return [Race("read", buf.writes.info[last], np.maximum(buf.writes.lo[last], lo),
                 np.minimum(buf.writes.hi[last], hi))]


def record_read(buf: Buffer, lo, hi, me: int, stamp: int, info: Access) -> None:
    buf.reads.add(lo, hi, me, stamp, info)


def check_and_record_write(buf: Buffer, lo: np.ndarray, hi: np.ndarray, clock: np.ndarray, me: int, stamp: int,
                           info: Access) -> list[Race]:
    """Races of a write of [lo, hi): earlier writes and reads not ordered before it. Then retire the accesses
    it covers and is ordered after, and log the write."""
    races = []
    for log, kind in ((buf.writes, "write"), (buf.reads, "war")):
        idx = log.overlapping(lo, hi)
        if len(idx) == 0:
            continue
        ordered = knows(clock, log.ent[idx], log.stamp[idx]) | (log.ent[idx] == me)
        bad = idx[~ordered]
        if len(bad):
            last = int(bad[-1])
            races.append(Race(kind, log.info[last], np.maximum(log.lo[last], lo), np.minimum(log.hi[last], hi)))
        good = idx[ordered]
        if len(good):
            log.remove(good[log.covered_by(good, lo, hi)])
    buf.writes.add(lo, hi, me, stamp, info)
    if buf.unwritten:
        region = buf.written[buf.index(lo, hi)]
        buf.unwritten -= region.size - int(np.count_nonzero(region))
        region[...] = True
    return races


# ------------------------------------------------------------------------------------------------ signal pads


class Pad:
    """One rank's instance of a signal pad: slot values and, per slot, the history of (value, release clock,
    writer, the writer's stamp).

    An acquire that needs ``slot >= v`` synchronises with the *earliest* modification from which every value up to
    now satisfies the condition — the weakest thing the waiter may have observed — so a wait that is satisfied too
    early (a wrong threshold, a signal reused across calls) does not hide the race that follows it. Coherence
    bounds it: a waiter cannot observe a value older than a modification that happens-before its wait (one by an
    entity whose stamp its clock knows). An ``add`` is a read-modify-write and extends the release sequence (its
    clock joins the previous one); a ``set`` starts anew; a ``clear`` (0 where the slot still holds its value)
    releases nothing.
    """

    HISTORY = 64

    def __init__(self, label: str, rank: int, nslots: int):
        self.label = label
        self.rank = rank
        self.nslots = nslots
        self.values = [0] * nslots
        self.history: list[list[tuple[int, np.ndarray, int, int]]] = [[] for _ in range(nslots)]
        self.waiters: dict[int, list] = {}

    def name(self) -> str:
        return f"{self.label} on rank {self.rank}"

    def apply(self, slot: int, op: str, value: int, clock: np.ndarray, writer: int = -1) -> None:
        """Modify ``slot`` (op add / set / clear) by entity ``writer`` (-1: unknown), releasing ``clock`` (its
        clock at the release, whose own component stamps the modification)."""
        hist = self.history[slot]
        stamp = int(clock[writer]) if 0 <= writer < len(clock) else 0
        if op == "add":
            new = self.values[slot] + value
            if hist:
                clock = join(hist[-1][1], clock)
        elif op == "clear":  # a relaxed compare-and-swap: a newer value stays; it releases nothing
            if self.values[slot] != value:
                return
            new, clock = 0, empty_clock()
        else:
            new = value
        self.values[slot] = new
        hist.append((new, clock, writer, stamp))
        if len(hist) > self.HISTORY:
            del hist[0]

    def acquire(self, slot: int, threshold: int, reader: np.ndarray | None = None) -> np.ndarray | None:
        """The clock an acquire of ``slot >= threshold`` synchronises with, or None while not satisfied; ``reader``:
        the waiter's clock (the modifications it knows of bound what it may observe)."""
        if self.values[slot] < threshold:
            return None
        hist = self.history[slot]
        if not hist:  # satisfied by the initial zero: nothing to synchronise with
            return empty_clock()
        known = 0  # the newest modification that happens-before the wait
        if reader is not None:
            for j in range(len(hist) - 1, -1, -1):
                writer, stamp = hist[j][2], hist[j][3]
                if 0 <= writer < len(reader) and reader[writer] >= stamp:
                    known = j
                    break
        i = len(hist) - 1
        while i > known and hist[i - 1][0] >= threshold:
            i -= 1
        if i == 0 and hist[0][0] >= threshold and threshold <= 0:
            return empty_clock()  # the initial value already satisfied it
        return hist[i][1]
