"""All-to-all of run-time split sizes, by pull on SMs: each rank copies, from every rank's symmetric send buffer,
the rows that rank sends it, at offsets computed on the device from the matrix of every rank's split sizes.

The device program (passes/collectives/all_to_all_sized.py) first gathers the split sizes: rank p's ``splits``
(W sizes: rows 0.. of its x go to rank 0, the next to rank 1, ...) land in row p of every rank's ``counts``
(W x W, i32, row-major), and only then launches this kernel, which reads ``counts`` and nothing the host knows.
The sizes are data-dependent, so a copy engine (whose sizes the host enqueues) cannot move them without a host
synchronisation; an SM kernel reads them where they are.

The sizes are clamped as every rank sees them alike: a negative size counts 0, and rank p sends the rows of its
x its prefix sums reach within its ``rows`` (``c[p][d] = min(P[d + 1], rows) - min(P[d], rows)``, P the prefix
sums of the sizes clamped to [0, rows], so that no i32 sum wraps whatever the sizes hold). Rank r receives ``c[q][r]`` rows from each q, placed in source order at row
``sum_{p < q} c[p][r]`` of its output; rows at or past the ``capacity`` are not written (the overflow: the caller
sees ``sum(recv) > capacity``, nothing is written past the buffer), and the rows past the received ones are set
to zero (a deterministic output that consumers may read whole). Program 0 stores ``recv[q] = c[q][r]`` (the rows
q sent here, overflow included).

Record fields (``make_record``): rows (of x), cols (elements per row: the product of the other dims), capacity
(rows of out), world, dtype, block_m, block_n, grid, num_warps. Arguments: send (symmetric [rows, cols], read on
every rank through symm_at), out ([capacity, cols], local), counts ([world * world] i32, local), recv ([world] i32,
local). Program p copies tiles p, p + grid, ... of each source's rows (sources in the order rank, rank + 1, ...),
then of the rows to zero. No wait, no notify: the launch's end on its stream orders everything it wrote.

``tiles()`` describes the data-dependent part with ``TileStep.expand``: each program's first step reads
``counts``, and its expansion (given the values read) lists the program's tiles."""
from __future__ import annotations

import math

import numpy as np
from mlir import ir

from ..dialects import core
from ..dialects import ttir as T
from . import KERNEL_ATTR, KernelRecord, Region, TileStep, check_i32, copies
from . import offset_type as _offset_type
from .chunk import err

name = "a2a_sized"
_TEMPLATE = "a2a_sized"


def make_record(rows: int, cols: int, capacity: int, world: int, *, name: str = "a2a_sized", dtype: str = "bf16",
                block_m: int | None = None, block_n: int | None = None, grid: int = 16,
                num_warps: int = 4) -> KernelRecord:
    """A checked record. Default tiles: 16 KB (e.g. 32 x 256 bf16), at most the rows' and columns' sizes."""
    elem = T.DTYPE_BYTES.get(dtype, 0)
    if block_n is None:
        block_n = min(_pow2_ceil(cols), max(16, 512 // max(elem, 1)))
    if block_m is None:
        block_m = min(_pow2_ceil(max(rows, capacity)), max(1, 16384 // max(elem, 1) // block_n))
    rec = KernelRecord(template=_TEMPLATE, name=name, rows=rows, cols=cols, capacity=capacity, world=world,
                       dtype=dtype, block_m=block_m, block_n=block_n, grid=grid, num_warps=num_warps,
                       args=["send", "out", "counts", "recv"])
    check(rec)
    return rec


def _pow2_ceil(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def check(rec) -> None:
    for key in ("rows", "cols", "capacity", "world", "block_m", "block_n", "grid", "num_warps"):
        if not isinstance(rec.get(key), int) or isinstance(rec.get(key), bool) or rec[key] < 1:
            raise err(_TEMPLATE, f"field '{key}' must be a positive integer, got {rec.get(key)!r}")
    for key in ("block_m", "block_n"):
        if rec[key] & (rec[key] - 1):
            raise err(_TEMPLATE, f"{key}={rec[key]} must be a power of two")
    if rec["dtype"] not in T.DTYPES or rec["dtype"] == "i1":
        raise err(_TEMPLATE, f"dtype '{rec['dtype']}' is not supported")
    if rec.get("args") != ["send", "out", "counts", "recv"]:
        raise err(_TEMPLATE, f"args must be ['send', 'out', 'counts', 'recv'], got {rec.get('args')!r}")
    rows = max(rec["rows"], rec["capacity"])
    check_i32(_TEMPLATE, "rows (the larger of rows and capacity, plus a tile)", rows + rec["block_m"])
    check_i32(_TEMPLATE, "tiles (plus a grid)", math.ceil(rows / rec["block_m"]) * _tiles_n(rec) + rec["grid"])
    check_i32(_TEMPLATE, "the counts' slots", rec["world"] * rec["world"])
    check_i32(_TEMPLATE, "the sums of the sizes (world x rows)", rec["world"] * rec["rows"] + rec["capacity"])


def _tiles_n(rec) -> int:
    return math.ceil(rec["cols"] / rec["block_n"])


def grid(rec) -> tuple[int, int, int]:
    return rec["grid"], 1, 1


def offset_type(rec) -> str:
    return _offset_type(_TEMPLATE, max(rec["rows"], rec["capacity"]) * rec["cols"], T.DTYPE_BYTES[rec["dtype"]])


# ------------------------------------------------------------------------------------------------ the plan

def clamped(splits: np.ndarray, rows: int) -> np.ndarray:
    """c[p][d]: the rows rank p sends rank d, from the raw W x W matrix of split sizes (row p = rank p's)."""
    s = np.clip(np.asarray(splits, np.int64), 0, rows)
    pref = np.concatenate([np.zeros((s.shape[0], 1), np.int64), np.cumsum(s, axis=1)], axis=1)
    pref = np.minimum(pref, rows)
    return pref[:, 1:] - pref[:, :-1]


def plan(rec, counts: np.ndarray, rank: int) -> dict:
    """What rank ``rank`` receives: per source q (in the kernel's order), (q, src_row, dst_row, rows stored), the
    first zeroed row, and recv (the rows each rank sent here)."""
    w, cap = rec["world"], rec["capacity"]
    c = clamped(np.asarray(counts).reshape(w, w), rec["rows"])
    starts = np.minimum(np.cumsum(np.maximum(c, 0), axis=1) - c, rec["rows"])  # src_row of each (p, d)
    sources = []
    for i in range(w):
        q = (rank + i) % w
        dst = int(c[:q, rank].sum())
        stored = max(0, min(int(c[q, rank]), cap - dst))
        sources.append((q, int(starts[q, rank]), dst, stored))
    total = min(int(c[:, rank].sum()), cap)
    return {"sources": sources, "zero_from": total, "recv": c[:, rank].astype(np.int32)}


# ------------------------------------------------------------------------------------------------ tiles()

def tiles(record, *, rank: int, num_ranks: int, scalars: dict[str, int]) -> list[list[TileStep]]:
    rec = record
    w = rec["world"]
    if num_ranks != w:
        raise err(_TEMPLATE, f"the record is for {w} ranks, launched in a world of {num_ranks}")
    whole = Region("counts", (0,), (w * w,))
    out = []
    for pid in range(rec["grid"]):
        out.append([TileStep(reads=[whole], expand=_expansion(rec, rank, pid, whole))])
    return out


def _expansion(rec, rank: int, pid: int, whole: Region):
    def expand(view) -> list[TileStep]:
        p = plan(rec, view(whole), rank)
        fine = [TileStep(reads=[whole])]
        bm, bn, cols, tn = rec["block_m"], rec["block_n"], rec["cols"], _tiles_n(rec)
        for q, src_row, dst_row, stored in p["sources"]:
            if q == rank and pid == 0:
                recv = Region("recv", (0,), (rec["world"],))
                fine.append(TileStep(writes=[recv], compute=_store(recv, p["recv"])))
            for t in range(pid, math.ceil(stored / bm) * tn, rec["grid"]):
                r0, c0 = t // tn * bm, t % tn * bn
                size = (min(bm, stored - r0), min(bn, cols - c0))
                src = Region("send", (src_row + r0, c0), size, rank=None if q == rank else q)
                dst = Region("out", (dst_row + r0, c0), size)
                fine.append(TileStep(reads=[src], writes=[dst], compute=copies(src, dst)))
        zero = rec["capacity"] - p["zero_from"]
        for t in range(pid, math.ceil(zero / bm) * tn, rec["grid"]):
            r0, c0 = t // tn * bm, t % tn * bn
            dst = Region("out", (p["zero_from"] + r0, c0), (min(bm, zero - r0), min(bn, cols - c0)))
            fine.append(TileStep(writes=[dst], compute=_store(dst, 0)))
        return merge(fine)
    return expand


def _store(region: Region, value):
    def compute(view) -> None:
        view(region)[...] = value
    return compute


def merge(fine: list[TileStep]) -> list[TileStep]:
    """Steps grouped as a kernel's trace groups its accesses (``interp.group_tiles``): a step that waits or reads
    after a write or notify starts a new tile; the others join the tile before."""
    out: list[TileStep] = []
    for s in fine:
        cur = out[-1] if out else None
        if cur is None or ((s.waits or s.reads) and (cur.writes or cur.notifies)):
            out.append(TileStep(list(s.waits), list(s.reads), list(s.writes), s.compute, list(s.notifies)))
            continue
        cur.waits += s.waits
        cur.reads += s.reads
        cur.writes += s.writes
        cur.notifies += s.notifies
        cur.compute = _then(cur.compute, s.compute)
    return out


def _then(a, b):
    if a is None or b is None:
        return a or b

    def compute(view) -> None:
        a(view)
        b(view)
    return compute


# ------------------------------------------------------------------------------------------------ build()

def build(record, *, ip, loc=None):
    rec = KernelRecord(record)
    check(rec)
    elem = T.dtype(rec["dtype"])
    with (loc or ir.Location.unknown()), ip:
        aligned = {"tt.divisibility": 16}
        args = [("send", T.ptr(elem), aligned), ("out", T.ptr(elem), aligned), ("counts", T.ptr("i32"), aligned),
                ("recv", T.ptr("i32"), aligned)]
        f, values = T.func(rec["name"], args, attrs={KERNEL_ATTR: rec.to_attr()})
        with ir.InsertionPoint(f.regions[0].blocks[0]):
            _emit(rec, *values)
            T.ret()
    return f


def _emit(rec, send, out, counts, recv) -> None:
    w, rows, cap, cols = rec["world"], rec["rows"], rec["capacity"], rec["cols"]
    bm, bn, tn = rec["block_m"], rec["block_n"], _tiles_n(rec)
    wp = _pow2_ceil(max(w, 2))
    idx = T.dtype(offset_type(rec))
    pid, rank = T.program_id(0), core.Rank.build().rank
    p_col = T.expand_dims(T.make_range(0, wp), 1)  # [wp, 1]: the source rank p
    d_row = T.expand_dims(T.make_range(0, wp), 0)  # [1, wp]: the destination rank d
    inside = T.and_(T.broadcast(T.lt(p_col, w), [wp, wp]), T.broadcast(T.lt(d_row, w), [wp, wp]))
    ptrs = T.addptr(T.splat(counts, [wp, wp]), T.add(T.broadcast(T.mul(p_col, w), [wp, wp]),
                                                     T.broadcast(d_row, [wp, wp])))
    # [wp, wp]: rank p's size for d in [0, rows] (negatives as 0; larger ones cut, so that no sum wraps i32)
    sizes = T.min_(T.max_(T.load(ptrs, inside, 0), 0), rows)
    me = T.broadcast(T.cmp("eq", d_row, rank), [wp, wp])
    before_me = T.broadcast(T.lt(d_row, rank), [wp, wp])
    lo = T.min_(T.reduce_sum(T.select(before_me, sizes, 0), 1), rows)   # [wp]: rank p's first row for me
    hi = T.min_(T.add(T.reduce_sum(T.select(me, sizes, 0), 1), lo), rows)
    got = T.sub(hi, lo)                                                 # [wp]: c[p][rank]
    ranks = T.make_range(0, wp)
    with T.if_(T.cmp("eq", pid, 0)):
        T.store(T.addptr(T.splat(recv, [wp]), ranks), got, T.lt(ranks, w))
    r_i = T.expand_dims(T.make_range(0, bm), 1)  # [bm, 1]
    c_i = T.expand_dims(T.make_range(0, bn), 0)  # [1, bn]
    with T.For(0, w, 1) as sources:
        q = T.rem(T.add(rank, sources.iv), w)
        src_row = T.reduce_sum(T.select(T.cmp("eq", ranks, q), lo, 0), 0)
        dst_row = T.reduce_sum(T.select(T.lt(ranks, q), got, 0), 0)
        count = T.reduce_sum(T.select(T.cmp("eq", ranks, q), got, 0), 0)
        stored = T.max_(T.min_(count, T.sub(T.c(cap), dst_row)), 0)
        src = core.SymmAt.build(send, q).result
        with T.For(pid, T.mul(T.cdiv(stored, bm), tn), rec["grid"]) as loop:
            r, cc, mask = _tile(loop.iv, r_i, c_i, stored, rec)
            src_off = _offsets(T.add(r, src_row), cc, idx, cols, bm, bn)
            dst_off = _offsets(T.add(r, dst_row), cc, idx, cols, bm, bn)
            vals = T.load(T.addptr(T.splat(src, [bm, bn]), src_off), mask)
            T.store(T.addptr(T.splat(out, [bm, bn]), dst_off), vals, mask)
    total = T.min_(T.reduce_sum(got, 0), cap)
    zero = T.sub(T.c(cap), total)
    with T.For(pid, T.mul(T.cdiv(zero, bm), tn), rec["grid"]) as loop:
        r, cc, mask = _tile(loop.iv, r_i, c_i, zero, rec)
        off = _offsets(T.add(r, total), cc, idx, cols, bm, bn)
        T.store(T.addptr(T.splat(out, [bm, bn]), off), T.zeros([bm, bn], rec["dtype"]), mask)


def _tile(t, r_i, c_i, limit, rec):
    """Rows [bm, 1] and columns [1, bn] of tile t of a region of ``limit`` rows, and the [bm, bn] mask."""
    bm, bn, tn = rec["block_m"], rec["block_n"], _tiles_n(rec)
    r = T.add(r_i, T.mul(T.div(t, tn), bm))
    cc = T.add(c_i, T.mul(T.rem(t, tn), bn))
    mask = T.and_(T.broadcast(T.lt(r, limit), [bm, bn]), T.broadcast(T.lt(cc, rec["cols"]), [bm, bn]))
    return r, cc, mask


def _offsets(rows, cols, idx, ld: int, bm: int, bn: int):
    return T.add(T.broadcast(T.mul(T.int_cast(rows, idx), T.c(ld, idx)), [bm, bn]),
                 T.broadcast(T.int_cast(cols, idx), [bm, bn]))
