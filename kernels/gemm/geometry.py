"""The GEMM template's tile geometry, shared by the record checks, the tile model (tiles()) and the emitter
(build()): the launch geometry, the tile orders (written once over an arithmetic namespace: PyOps on ints,
IrOps on IR values), each program's tiles and stream-K pieces, and the signal slots a tile waits on or notifies."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...dialects import ttir as T


@dataclass(frozen=True)
class Geometry:
    tiles_m: int
    tiles_n: int
    k_tiles: int
    split_tiles: int  # K tiles per split
    grid: int

    @property
    def tiles(self) -> int:
        return self.tiles_m * self.tiles_n


def geometry(rec) -> Geometry:
    tm, tn = math.ceil(rec["m"] / rec["block_m"]), math.ceil(rec["n"] / rec["block_n"])
    kt = math.ceil(rec["k"] / rec["block_k"])
    s = rec.get("split_k", 1)
    if rec.get("stream_k", 0):
        grid = rec["num_sms"]
    else:
        grid = min(rec["num_sms"] * rec.get("programs_per_sm", 1), tm * tn) if rec["persistent"] else tm * tn * s
    return Geometry(tm, tn, kt, math.ceil(kt / s), grid)


def grid(rec) -> tuple[int, int, int]:
    """The launch grid the kernel expects."""
    return geometry(rec).grid, 1, 1


class PyOps:
    """Integer arithmetic on Python ints (for tiles()); IrOps does the same on i32 IR values (for build())."""

    add = staticmethod(lambda a, b: a + b)
    sub = staticmethod(lambda a, b: a - b)
    mul = staticmethod(lambda a, b: a * b)
    div = staticmethod(lambda a, b: a // b)
    rem = staticmethod(lambda a, b: a % b)
    min = staticmethod(min)


class IrOps:
    add, sub, mul, div, rem, min = (staticmethod(f) for f in (T.add, T.sub, T.mul, T.div, T.rem, T.min_))


def _row_major(o, t, rec, g, rank):
    return o.div(t, g.tiles_n), o.rem(t, g.tiles_n)


def _grouped(o, t, rec, g, rank):
    """Triton's GROUP_M swizzle: group_m m-blocks share each sweep over the n-blocks (L2 reuse of B)."""
    gm = rec["group_m"]
    per_group = gm * g.tiles_n
    first = o.mul(o.div(t, per_group), gm)
    size = o.min(o.sub(g.tiles_m, first), gm) if g.tiles_m % gm else gm
    return o.add(first, o.rem(t, size)), o.div(o.rem(t, per_group), size)


def _rank_rotated(o, t, rec, g, rank):
    """Grouped, then the m-blocks rotated so that tile 0 is the block holding row rank * rows_per_rank."""
    pid_m, pid_n = _grouped(o, t, rec, g, rank)
    first_rank = o.add(rank, rec["rank_shift"]) if rec.get("rank_shift", 0) else rank
    start = o.div(o.mul(first_rank, rec["rows_per_rank"]), rec["block_m"])
    return o.rem(o.add(pid_m, start), g.tiles_m), pid_n


# The hook for tile orders: name -> fn(ops, t, record, geometry, rank) -> (pid_m, pid_n), written once over an
# arithmetic namespace so that build() (IrOps on IR values) and tiles() (PyOps on ints) share the definition.
# Arguments are non-negative, so Python's // and % agree with arith.divsi/remsi. An order that needs the rank
# gets ditron_core.rank in the IR.
TILE_ORDER_FNS = {"row_major": _row_major, "grouped": _grouped, "rank_rotated": _rank_rotated}
ORDERS_USING_RANK = ("rank_rotated",)


def tile_coords(rec, t: int, rank: int = 0) -> tuple[int, int]:
    """(pid_m, pid_n) of tile t in the record's tile order."""
    return TILE_ORDER_FNS[rec["tile_order"]](PyOps, t, rec, geometry(rec), rank)


def program_tiles(rec, pid: int) -> list[tuple[int, int]]:
    """(tile, split) pairs program pid visits, in order."""
    g = geometry(rec)
    if rec["persistent"]:  # stream-K: the data-parallel tiles (stream_k_segments gives the rest)
        return [(t, 0) for t in range(pid, g.tiles - rec.get("stream_k", 0), g.grid)]
    return [(pid % g.tiles, pid // g.tiles)]


def stream_k_segments(rec, pid: int) -> list[tuple[int, int, int, list[int] | None]]:
    """Program pid's stream-K pieces in the order it runs them: (tile, first K step, end K step, contributors) --
    contributors None for the trailing piece of a tile it does not own (its partial goes to workspace slot pid),
    else the lower programs whose partials of the tile it adds before storing C."""
    g = geometry(rec)
    sk = rec.get("stream_k", 0)
    if not sk:
        return []
    K, G, d = g.k_tiles, g.grid, g.tiles - sk
    total = sk * K
    start, end = pid * total // G, (pid + 1) * total // G
    last = (end - 1) // K
    out: list[tuple[int, int, int, list[int] | None]] = []
    tail = end % K != 0
    if tail:
        out.append((d + last, max(start, last * K) - last * K, end - last * K, None))
    for t in range(start // K, last if tail else last + 1):
        k0 = max(start - t * K, 0)
        first = ((t * K + 1) * G - 1) // total  # the program holding the tile's first K step
        out.append((d + t, k0, K, list(range(first, pid)) if k0 else []))
    return out


def _slots(m0: int, rows: int, spec) -> range:
    rps = spec["rows_per_slot"]
    return range(m0 // rps, (m0 + rows - 1) // rps + 1)


def _peer(spec, slot: int, rank: int, num_ranks: int, rec, scalars) -> int:
    peer = spec["peer"]
    if peer == "rank":
        return rank
    if peer == "slot_owner":
        return slot * spec["rows_per_slot"] // rec["rows_per_rank"]
    if peer.startswith("arg:"):
        return int(scalars[peer[4:]])
    return (rank + _rank_shift(peer)) % num_ranks


def notify_slots(rec) -> range:
    """The slots of the notify pad one launch adds to: those covering rows [0, m) (none without a notify)."""
    return range((rec["m"] - 1) // rec["notify"]["rows_per_slot"] + 1) if "notify" in rec else range(0)


def notify_count(rec, slot: int) -> int:
    """How much notify slot ``slot`` receives from one launch, for the consumer's expected count: ``value`` from
    each tile of every row block meeting the slot's rows (a closed form: no walk over the tiles)."""
    bm, rps = rec["block_m"], rec["notify"]["rows_per_slot"]
    first, last = slot * rps, min(rec["m"], (slot + 1) * rps) - 1
    return (last // bm - first // bm + 1) * geometry(rec).tiles_n * rec["notify"]["value"]


def notify_count_values(rec) -> set[int]:
    """The distinct counts of ``notify_slots``, without visiting them all: a full slot's count depends only on its
    first row modulo block_m, which repeats every block_m / gcd(rows_per_slot, block_m) slots, so one such period
    and the last slot (the one cut at m) give every value."""
    slots = notify_slots(rec)
    if not slots:
        return set()
    period = rec["block_m"] // math.gcd(rec["notify"]["rows_per_slot"], rec["block_m"])
    return {notify_count(rec, s) for s in range(min(period, len(slots)))} | {notify_count(rec, slots[-1])}


def sum_own_slot(o, rec, g, slab, block, pid_n):
    """'push.sum_own': the pad slot, in slab ``slab``, of the own tile at row block ``block`` of the shard and
    column block pid_n (a slab holds one slot per tile of the shard). Written once over an arithmetic namespace
    (PyOps on ints for tiles(), IrOps on IR values for build()), as the tile orders are."""
    return o.add(o.mul(slab, rec["rows_per_rank"] // rec["block_m"] * g.tiles_n), o.add(o.mul(block, g.tiles_n), pid_n))


def _rank_shift(peer: str) -> int | None:
    if peer.startswith("rank+") or peer.startswith("rank-"):
        try:
            return int(peer[4:])
        except ValueError:
            return None
    return None


def _and(a, b, shape_):
    """The IR mask a & b broadcast to shape_ (a None: no mask yet)."""
    b = T.broadcast(b, shape_)
    return b if a is None else T.and_(T.broadcast(a, shape_), b)
