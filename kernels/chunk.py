"""What the chunk templates (copy, reduce) share: a 2-D region of rows x cols split into BLOCK_M x BLOCK_N
tiles, visited by ``grid`` programs (program p: tiles p, p + grid, ...; tile t -> (t // tiles_n, t % tiles_n)),
offsets that are constants or i32 arguments, peer expressions, and the end-of-program notify.

Record fields used here:

    rows, cols, block_m, block_n, grid, num_warps
    <side>_ld, <side>_row, <side>_col    per buffer side ('src', 'dst'): row stride in elements, and the region's
                                         first row/column: an int or 'arg:<name>' (an i32 argument, run-time)
    notify (optional)                    {arg, slot, peer, value, scope}: after all its tiles, each program adds
                                         ``value`` to slot ``slot`` (int or 'arg:<name>') of signal pad ``arg``
                                         on rank ``peer``, with release semantics. A consumer waits for
                                         ``slot >= grid * value`` (``notify_count``).

Peer expressions: 'rank' (own), 'rank+<d>' / 'rank-<d>' ((rank + d) mod num_ranks), 'arg:<name>'.
"""
from __future__ import annotations

import math

from mlir import ir

from ..dialects import core
from ..dialects import ttir as T
from ..errors import VerificationError
from . import I32_LIMIT, KERNEL_ATTR, SlotNotify, check_i32
from . import offset_type as _offset_type


def err(template: str, message: str) -> VerificationError:
    return VerificationError(f"{template} template: {message}")


def arg_of(spec) -> str | None:
    """The argument name in 'arg:<name>', else None."""
    return spec[4:] if isinstance(spec, str) and spec.startswith("arg:") else None


def rank_shift(peer: str) -> int | None:
    if isinstance(peer, str) and peer[:5] in ("rank+", "rank-"):
        try:
            return int(peer[4:])
        except ValueError:
            return None
    return 0 if peer == "rank" else None


def check_peer(template: str, field: str, peer, extra: tuple[str, ...] = ()) -> None:
    if not (peer in extra or arg_of(peer) or rank_shift(peer) is not None):
        raise err(template, f"{field} '{peer}' is not one of 'rank', 'rank+<d>', 'arg:<name>'"
                  + "".join(f", '{e}'" for e in extra))


def peer_py(peer: str, rank: int, num_ranks: int, scalars) -> int:
    if arg_of(peer):
        return int(scalars[arg_of(peer)])
    return (rank + rank_shift(peer)) % num_ranks


def value_py(spec, scalars) -> int:
    """An int field or 'arg:<name>' resolved with the run-time scalars."""
    return int(scalars[arg_of(spec)]) if arg_of(spec) else int(spec)


def scalar_args(rec, fields) -> list[str]:
    """Names of the i32 arguments that fields refer to ('arg:<name>'), in order, without repeats."""
    out: list[str] = []
    for f in fields:
        name_ = arg_of(f)
        if name_ and name_ not in out:
            out.append(name_)
    return out


def check_region(template: str, rec, sides=("src", "dst")) -> None:
    for key in ("rows", "cols", "block_m", "block_n", "grid", "num_warps"):
        if not isinstance(rec.get(key), int) or rec[key] < 1:
            raise err(template, f"field '{key}' must be a positive integer, got {rec.get(key)!r}")
    for key in ("block_m", "block_n"):
        if rec[key] & (rec[key] - 1):
            raise err(template, f"{key}={rec[key]} must be a power of two")
    for side in sides:
        if not isinstance(rec.get(f"{side}_ld"), int) or rec[f"{side}_ld"] < 1:
            raise err(template, f"field '{side}_ld' must be a positive integer")
        for f in ("row", "col"):
            v = rec.get(f"{side}_{f}", 0)
            if not (isinstance(v, int) and v >= 0) and not arg_of(v):
                raise err(template, f"field '{side}_{f}' must be a non-negative int or 'arg:<name>', got {v!r}")
        if isinstance(rec.get(f"{side}_col", 0), int) and rec.get(f"{side}_col", 0) + rec["cols"] > rec[f"{side}_ld"]:
            raise err(template, f"the region's columns run past {side}_ld={rec[f'{side}_ld']}")
    if "notify" in rec:
        n = rec["notify"]
        if not isinstance(n.get("arg"), str) or not (isinstance(n.get("slot"), int) or arg_of(n.get("slot"))):
            raise err(template, "'notify' needs 'arg' (the signal pad) and 'slot' (int or 'arg:<name>')")
    check_i32(template, f"tiles ({num_tiles(rec)} of {rec['block_m']}x{rec['block_n']}, plus a grid)",
              num_tiles(rec) + rec["grid"])
    for side in sides:  # a constant first row or column is an i32 constant, and so is the tile past the end
        for f, size, block in (("row", "rows", "block_m"), ("col", "cols", "block_n")):
            if isinstance(rec.get(f"{side}_{f}", 0), int):
                check_i32(template, f"{side}'s {f}s ({side}_{f} {rec.get(f'{side}_{f}', 0)} + {rec[size]} + a tile)",
                          rec.get(f"{side}_{f}", 0) + rec[size] + rec[block])
    offset_type(template, rec)


def offset_type(template: str, rec) -> str:
    """The width of the element offsets: i64 where they may pass 2**31 -- a run-time row offset (its bound is not in
    the record), or a last row * ld that large ({side}_extent: the buffer's rows where a kernel addresses more of it
    than its region, e.g. an inbox of several slabs) -- else i32."""
    largest = 0
    for side in ("src", "dst"):
        if f"{side}_ld" not in rec:
            continue
        row = rec.get(f"{side}_row", 0)
        rows = I32_LIMIT if arg_of(row) else max(row + rec["rows"], rec.get(f"{side}_extent", 0))
        largest = max(largest, rows * rec[f"{side}_ld"])
    return _offset_type(template, largest, 8)


def tiles_n(rec) -> int:
    return math.ceil(rec["cols"] / rec["block_n"])


def num_tiles(rec) -> int:
    return math.ceil(rec["rows"] / rec["block_m"]) * tiles_n(rec)


def program_tiles(rec, pid: int) -> list[tuple[int, int]]:
    """(tile row, tile col) of the tiles program pid copies, in order."""
    tn = tiles_n(rec)
    return [(t // tn, t % tn) for t in range(pid, num_tiles(rec), rec["grid"])]


def tile_box(rec, side: str, tm: int, tn: int, scalars) -> tuple[tuple[int, int], tuple[int, int]]:
    """(offsets, sizes) of tile (tm, tn) in buffer side's coordinates."""
    r0, c0 = tm * rec["block_m"], tn * rec["block_n"]
    rows, cols = min(rec["block_m"], rec["rows"] - r0), min(rec["block_n"], rec["cols"] - c0)
    return ((value_py(rec.get(f"{side}_row", 0), scalars) + r0, value_py(rec.get(f"{side}_col", 0), scalars) + c0),
            (rows, cols))


def notify_count(rec) -> int:
    """What the notified slot receives from one launch (every program adds once)."""
    return rec["grid"] * rec["notify"]["value"] if "notify" in rec else 0


def program_notifies(rec, rank: int, num_ranks: int, scalars, dst_peer: int | None) -> list[SlotNotify]:
    if "notify" not in rec:
        return []
    n = rec["notify"]
    peer = dst_peer if n["peer"] == "dst" else peer_py(n["peer"], rank, num_ranks, scalars)
    return [SlotNotify(n["arg"], value_py(n["slot"], scalars), n["value"], None if peer == rank else peer, op="add")]


# ------------------------------------------------------------------------------------------------ IR side

def build_kernel(rec, pointer_types, emit, *, ip, loc=None):
    """The tt.func of a chunk-template record at ip, carrying the record. Its arguments, in record order: the
    buffers ``pointer_types()`` names ({arg: !tt.ptr type}, called in the kernel's context) and the signal pads of
    the optional 'wait' / 'notify' parts, as 16-byte aligned pointers; every other argument i32. The body is
    ``emit(rec, {arg name: value})``."""
    with (loc or ir.Location.unknown()), ip:
        types = dict(pointer_types())
        for part in ("wait", "notify"):
            if part in rec:
                types[rec[part]["arg"]] = T.ptr("i32")
        args = [(a, types.get(a, T.i32()), {"tt.divisibility": 16} if a in types else {}) for a in rec["args"]]
        f, values = T.func(rec["name"], args, attrs={KERNEL_ATTR: rec.to_attr()})
        with ir.InsertionPoint(f.regions[0].blocks[0]):
            emit(rec, dict(zip(rec["args"], values)))
            T.ret()
    return f


class RegionEmitter:
    """IR helpers bound to one kernel's arguments (name -> value) and record."""

    def __init__(self, rec, args: dict[str, ir.Value]):
        self.rec, self.args = rec, args
        self._rank = None
        self._num_ranks = None
        self.idx_t = T.dtype(offset_type(rec["template"], rec))

    def rank(self):
        if self._rank is None:
            self._rank = core.Rank.build().rank
        return self._rank

    def num_ranks(self):
        if self._num_ranks is None:
            self._num_ranks = core.NumRanks.build().num_ranks
        return self._num_ranks

    def value(self, spec):
        """An int field or 'arg:<name>' as an i32 value."""
        return self.args[arg_of(spec)] if arg_of(spec) else T.c(int(spec))

    def peer(self, peer: str):
        if arg_of(peer):
            return self.args[arg_of(peer)]
        shift = rank_shift(peer)
        if shift == 0:
            return self.rank()
        nr = self.num_ranks()
        return T.rem(T.add(T.rem(T.add(self.rank(), shift), nr), nr), nr)

    def for_tiles(self):
        """The persistent tile loop of this program: a For whose body gets (tile row index, tile col index)."""
        rec = self.rec
        loop = T.For(T.program_id(0), num_tiles(rec), rec["grid"])
        return loop

    def tile_coords(self, t):
        tn = tiles_n(self.rec)
        return T.div(t, tn), T.rem(t, tn)

    def _wide(self, x):
        return T.int_cast(x, self.idx_t)

    def tile_offsets(self, side: str, tm, tn, slab=None, slab_rows: int = 0):
        """(element offsets [BM, BN] into buffer side, mask or None). ``slab`` (a value): the region's rows start at
        slab * slab_rows instead of the record's {side}_row (slab ``slab`` of a buffer of slabs), the product in
        the offsets' width."""
        rec = self.rec
        bm, bn = rec["block_m"], rec["block_n"]
        shift = T.mul(self._wide(slab), slab_rows) if slab is not None else None
        r = T.add(T.mul(tm, bm), T.make_range(0, bm))
        cc = T.add(T.mul(tn, bn), T.make_range(0, bn))
        mask = None
        if rec["rows"] % bm:
            mask = T.broadcast(T.expand_dims(T.lt(r, rec["rows"]), 1), [bm, bn])
        if rec["cols"] % bn:
            cm = T.broadcast(T.expand_dims(T.lt(cc, rec["cols"]), 0), [bm, bn])
            mask = cm if mask is None else T.and_(mask, cm)
        if shift is not None:
            rows = T.add(self._wide(r), shift)
        else:  # a row of the side's region: below its buffer's rows, an i32 (MAX_DIM) like the row argument
            rows = self._wide(T.add(r, self.value(rec[f"{side}_row"])) if rec.get(f"{side}_row", 0) != 0 else r)
        cols = T.add(cc, self.value(rec.get(f"{side}_col", 0))) if rec.get(f"{side}_col", 0) != 0 else cc
        off = T.add(T.mul(T.expand_dims(rows, 1), rec[f"{side}_ld"]), T.expand_dims(self._wide(cols), 0))
        return off, mask

    def notify(self, dst_peer=None):
        """The end-of-program notify (its lowering puts a CTA barrier first: every thread's stores are ordered
        before the release)."""
        rec = self.rec
        if "notify" not in rec:
            return
        n = rec["notify"]
        peer = dst_peer if n["peer"] == "dst" else self.peer(n["peer"])
        slot = T.addptr(self.args[n["arg"]], self.value(n["slot"]))
        core.Notify.build(slot, peer, T.c(n["value"]), op="add", scope=n.get("scope", "sys"), semantic="release")
