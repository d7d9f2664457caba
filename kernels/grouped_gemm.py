"""Grouped GEMM template (MoE experts): ``c[rows of group g] = a[rows of group g] @ b[g]``, the groups' rows
consecutive in ``a`` in group order, their sizes read from ``sizes`` at run time.

Record fields (``make_record`` fills and checks them):

    t, k, n, e              a [t, k], b [e, k, n], sizes [e], c [t, n] (row-major, contiguous)
    dtype, out_dtype        'bf16' | 'fp16' | 'fp32' (a and b; c); fp32 accumulation
    sizes_dtype             'i32' | 'i64'
    block_m, block_n, block_k, num_warps, num_stages, grid
                            tiles of c; program p: tiles p, p + grid, ...
    group_m                 tile order: Triton's GROUP_M swizzle (gemm's "grouped" order: group_m row blocks share a
                            sweep over the column blocks, so each expert's weights are read from L2 that many times)
    loads                   'tma' (descriptors over a [t, k] and b as [e * k, n]; needs 16-byte row strides) or
                            'pointer'

Per tile of c the kernel walks the groups in order, keeping the first row of each (a prefix sum of ``sizes``), and
runs a K loop only for the groups whose rows meet the tile's (a tile on a group boundary runs one per group). The
loop loads the tile's rows of a with the other groups' rows masked to zero (pointer loads), so every row adds its
own group's product once; a tile whose rows all belong to one group needs no mask, and with TMA loads it runs a
loop of descriptor loads instead (one accumulator either way: two would not fit the registers of a 128x256 tile).
A K step past k reads a as zero, so whatever b's rows hold there (the next group's) adds nothing. Rows past the
last group stay zero. Groups are data, not shapes: one kernel serves every routing.

Arguments (``record["args"]``): a, b, sizes, c.
"""
from __future__ import annotations

import math

import numpy as np
from mlir import ir

from ..dialects import ttir as T
from ..errors import VerificationError
from . import I32_LIMIT, KERNEL_ATTR, KernelRecord, Region, TileStep, check_i32
from . import offset_type as _offset_type
from .gemm import TILE_ORDER_FNS, Geometry, IrOps, PyOps
from .numerics import matmul, round_to

name = "grouped_gemm"

DTYPES = ("bf16", "fp16", "fp32")
SIZES_DTYPES = ("i32", "i64")
LOADS = ("tma", "pointer")
_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
ARGS = ["a", "b", "sizes", "c"]


def _err(message: str) -> VerificationError:
    return VerificationError(f"grouped_gemm template: {message}")


def make_record(t: int, k: int, n: int, e: int, *, name: str = "grouped_gemm", dtype: str = "bf16",
                out_dtype: str | None = None, sizes_dtype: str = "i32", block_m: int = 64, block_n: int = 128,
                block_k: int = 64, group_m: int = 8, num_warps: int = 4, num_stages: int = 3,
                loads: str | None = None, num_sms: int = 132, waves: int = 4) -> KernelRecord:
    """A checked record: at most ``waves`` programs per SM, each looping over its tiles; TMA loads where the row
    strides allow them (``loads``: force one)."""
    if loads is None:
        aligned = (k * _BYTES.get(dtype, 2)) % 16 == 0 and (n * _BYTES.get(dtype, 2)) % 16 == 0
        loads = "tma" if aligned and _b_rows_fit_a_descriptor(e, k, block_k) else "pointer"
    rec = KernelRecord(template="grouped_gemm", name=name, t=t, k=k, n=n, e=e, dtype=dtype,
                       out_dtype=out_dtype or dtype, sizes_dtype=sizes_dtype, block_m=block_m, block_n=block_n,
                       block_k=block_k, group_m=group_m, num_warps=num_warps, num_stages=num_stages, loads=loads,
                       grid=1, args=list(ARGS))
    rec["grid"] = max(1, min(_num_tiles(rec), num_sms * waves))
    check(rec)
    return rec


def check(rec) -> None:
    for key in ("t", "k", "n", "e", "block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages", "grid"):
        v = rec.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise _err(f"field '{key}' must be a positive integer, got {v!r}")
    for key in ("dtype", "out_dtype"):
        if rec.get(key) not in DTYPES:
            raise _err(f"{key} '{rec.get(key)}' is not supported; use one of {', '.join(DTYPES)}")
    if rec.get("sizes_dtype") not in SIZES_DTYPES:
        raise _err(f"sizes_dtype '{rec.get('sizes_dtype')}' is not supported; use one of {', '.join(SIZES_DTYPES)}")
    for key in ("block_m", "block_n", "block_k"):
        if rec[key] & (rec[key] - 1) or rec[key] < 16:
            raise _err(f"{key} must be a power of two >= 16 (tt.dot's smallest tile), got {rec[key]}")
    if rec.get("loads") not in LOADS:
        raise _err(f"loads '{rec.get('loads')}' is unknown; use one of {', '.join(LOADS)}")
    if rec["loads"] == "tma" and ((rec["k"] * _BYTES[rec["dtype"]]) % 16 or (rec["n"] * _BYTES[rec["dtype"]]) % 16):
        raise _err(f"TMA loads need 16-byte row strides: k = {rec['k']} and n = {rec['n']} {rec['dtype']} elements "
                   "do not give them; use loads 'pointer'")
    if rec["loads"] == "tma" and max(rec["block_m"], rec["block_n"], rec["block_k"]) > 256:
        raise _err("TMA boxes are at most 256 elements a side")
    if rec.get("args") != ARGS:
        raise _err(f"args must be {ARGS}, got {rec.get('args')}")
    if rec["loads"] == "tma" and not _b_rows_fit_a_descriptor(rec["e"], rec["k"], rec["block_k"]):
        raise _err(f"TMA loads read b as one descriptor of e * k = {rec['e'] * rec['k']} rows, past its 32-bit "
                   "shape; use loads 'pointer'")
    check_i32(name, f"tiles ({_num_tiles(rec)} of {rec['block_m']}x{rec['block_n']}, plus a grid)",
              _num_tiles(rec) + rec["grid"])
    offset_type(rec)


def offset_type(rec) -> str:
    """The width of the element offsets into a, b and c: i64 where one can pass 2**31, else i32."""
    t, k, n, e = rec["t"], rec["k"], rec["n"], rec["e"]
    return _offset_type(name, max(t * k, e * k * n, t * n), 4)


def _b_rows_fit_a_descriptor(e: int, k: int, block_k: int) -> bool:
    """Whether b's e * k rows (and a K step past them) can be the i32 shape and coordinates of a descriptor."""
    return e * k + block_k < I32_LIMIT


def grid(rec) -> tuple[int, int, int]:
    return rec["grid"], 1, 1


def _tiles_n(rec) -> int:
    return math.ceil(rec["n"] / rec["block_n"])


def _num_tiles(rec) -> int:
    return math.ceil(rec["t"] / rec["block_m"]) * _tiles_n(rec)


def _coords(ops, tile, rec):
    """(row block, column block) of a tile: gemm's grouped order, one definition for the IR and tiles()."""
    tm, kt = math.ceil(rec["t"] / rec["block_m"]), math.ceil(rec["k"] / rec["block_k"])
    return TILE_ORDER_FNS["grouped"](ops, tile, rec, Geometry(tm, _tiles_n(rec), kt, kt, rec["grid"]), 0)


# ------------------------------------------------------------------------------------------------ tiles()

def tiles(record, *, rank: int, num_ranks: int, scalars: dict[str, int]) -> list[list[TileStep]]:
    """Each tile reads its rows of a (every column), all of b and sizes (which groups meet the tile is data), and
    writes its box of c."""
    rec = record
    t_rows, k, n, e = rec["t"], rec["k"], rec["n"], rec["e"]
    bm, bn = rec["block_m"], rec["block_n"]
    out = []
    for pid in range(rec["grid"]):
        steps = []
        for tile in range(pid, _num_tiles(rec), rec["grid"]):
            pid_m, pid_n = _coords(PyOps, tile, rec)
            r0, c0 = pid_m * bm, pid_n * bn
            rows, cols = min(bm, t_rows - r0), min(bn, n - c0)
            a = Region("a", (r0, 0), (rows, k))
            b = Region("b", (0, 0, 0), (e, k, n))
            sizes = Region("sizes", (0,), (e,))
            c = Region("c", (r0, c0), (rows, cols))
            steps.append(TileStep(reads=[a, b, sizes], writes=[c], compute=_compute(rec, a, b, sizes, c, r0, c0)))
        out.append(steps)
    return out


def group_of_rows(sizes: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The group of each row (len(sizes) for a row past the last group): groups own consecutive rows in order."""
    ends = np.cumsum(np.asarray(sizes, dtype=np.int64))
    return np.searchsorted(ends, rows, side="right")


def _compute(rec, a, b, sizes, c, r0: int, c0: int):
    def compute(view):
        av = np.asarray(view(a), dtype=np.float32)
        bv = np.asarray(view(b), dtype=np.float32)
        rows = np.arange(r0, r0 + av.shape[0])
        group = group_of_rows(view(sizes), rows)
        ends = np.cumsum(np.asarray(view(sizes), dtype=np.int64))
        width = view(c).shape[1]
        result = np.zeros((av.shape[0], width), dtype=np.float32)
        for g in np.unique(group[group < rec["e"]]):
            mine = np.flatnonzero(group == g)  # groups own consecutive rows: one span of the tile
            lo, hi = int(mine[0]), int(mine[-1]) + 1
            first = int(ends[g - 1]) if g else 0  # the group's rows of a, which a simulator may batch
            result[lo:hi] = matmul(av[lo:hi], bv[g][:, c0:c0 + width], rows=(first, int(ends[g])))
        view(c)[...] = round_to(rec["out_dtype"], result)
    return compute


# ------------------------------------------------------------------------------------------------ build()

def build(record, *, ip, loc=None):
    rec = KernelRecord(record)
    check(rec)
    with (loc or ir.Location.unknown()), ip:
        return _emit(rec)


def _emit(rec):
    t_rows, k, n, e = rec["t"], rec["k"], rec["n"], rec["e"]
    bm, bn, bk = rec["block_m"], rec["block_n"], rec["block_k"]
    tma = rec["loads"] == "tma"
    elem, out_elem = T.dtype(rec["dtype"]), T.dtype(rec["out_dtype"])
    args = [("a", T.ptr(elem), {"tt.divisibility": 16}), ("b", T.ptr(elem), {"tt.divisibility": 16}),
            ("sizes", T.ptr(rec["sizes_dtype"]), {}), ("c", T.ptr(out_elem), {"tt.divisibility": 16})]
    f, values = T.func(rec["name"], args, attrs={KERNEL_ATTR: rec.to_attr()})
    a_ptr, b_ptr, sizes_ptr, c_ptr = values
    idx = T.dtype(offset_type(rec))
    precision = "ieee" if rec["dtype"] == "fp32" else "tf32"
    with ir.InsertionPoint(f.regions[0].blocks[0]):
        k_tiles = math.ceil(k / bk)
        if tma:
            one = T.c(1, T.i64())
            a_desc = T.make_desc(a_ptr, [T.c(t_rows), T.c(k)], [T.c(k, T.i64()), one], [bm, bk])
            b_desc = T.make_desc(b_ptr, [T.c(e * k), T.c(n)], [T.c(n, T.i64()), one], [bk, bn])
        with T.For(T.program_id(0), _num_tiles(rec), rec["grid"]) as loop:
            pid_m, pid_n = _coords(IrOps, loop.iv, rec)
            r0, c0 = T.mul(pid_m, bm), T.mul(pid_n, bn)
            rows = T.add(T.expand_dims(T.make_range(0, bm), 1), r0)  # [bm, 1]
            cols = T.add(T.expand_dims(T.make_range(0, bn), 0), c0)  # [1, bn]
            col_ok = T.lt(cols, n)
            a_rows = T.broadcast(T.mul(T.int_cast(rows, idx), T.c(k, idx)), [bm, bk])
            b_cols = T.broadcast(T.int_cast(cols, idx), [bk, bn])
            last = T.min_(T.add(r0, bm), T.c(t_rows, T.i32()))  # the tile's rows end here (or at t)
            with T.For(0, e, 1, [T.zeros([bm, bn], "fp32"), T.c(0, T.i32())]) as groups:
                acc, start = groups.args
                g = groups.iv
                end = T.add(start, T.int_cast(T.load(T.addptr(sizes_ptr, g)), T.i32()))
                meets = T.and_(T.lt(r0, end), T.lt(start, last))
                inside = T.and_(T.ge(r0, start), T.ge(end, last))
                if tma:
                    with T.For(0, T.select(inside, T.c(k_tiles, T.i32()), T.c(0, T.i32())), 1, [acc]) as whole:
                        (part,) = whole.args
                        k0 = T.mul(whole.iv, bk)
                        b_tile = T.desc_load(b_desc, [T.add(T.mul(g, k), k0), c0])
                        whole.yield_(T.dot(T.desc_load(a_desc, [r0, k0]), b_tile, part, precision=precision))
                    acc = whole.results[0]
                    meets = T.and_(meets, T.cmp("eq", inside, T.c(0, T.i1())))  # the edge tiles, by pointers
                row_ok = T.broadcast(T.and_(T.and_(T.ge(rows, start), T.lt(rows, end)), T.lt(rows, t_rows)), [bm, bk])
                b_group = T.mul(T.int_cast(g, idx), T.c(k * n, idx))
                with T.For(0, T.select(meets, T.c(k_tiles, T.i32()), T.c(0, T.i32())), 1, [acc]) as kloop:
                    (part,) = kloop.args
                    k0 = T.mul(kloop.iv, bk)
                    ka = T.add(T.expand_dims(T.make_range(0, bk), 0), k0)  # [1, bk]
                    a_mask = T.and_(row_ok, T.broadcast(T.lt(ka, k), [bm, bk]))
                    a_tile = T.load(T.addptr(a_ptr, T.add(a_rows, T.broadcast(T.int_cast(ka, idx), [bm, bk]))),
                                    a_mask, 0.0)
                    kb = T.add(T.expand_dims(T.make_range(0, bk), 1), k0)  # [bk, 1]
                    b_off = T.add(T.add(T.broadcast(T.mul(T.int_cast(kb, idx), T.c(n, idx)), [bk, bn]), b_cols),
                                  T.splat(b_group, [bk, bn]))
                    b_mask = T.and_(T.broadcast(T.lt(kb, k), [bk, bn]), T.broadcast(col_ok, [bk, bn]))
                    b_tile = T.load(T.addptr(b_ptr, b_off), b_mask, 0.0)
                    kloop.yield_(T.dot(a_tile, b_tile, part, precision=precision))
                groups.yield_(kloop.results[0], end)
            c_off = T.add(T.broadcast(T.mul(T.int_cast(rows, idx), T.c(n, idx)), [bm, bn]),
                          T.broadcast(T.int_cast(cols, idx), [bm, bn]))
            c_mask = T.and_(T.broadcast(T.lt(rows, t_rows), [bm, bn]), T.broadcast(col_ok, [bm, bn]))
            T.store(T.addptr(c_ptr, c_off), T.cast(groups.results[0], out_elem), c_mask)
        T.ret()
    return f
