"""Grouped GEMM template (MoE experts): ``c[rows of group g] = a[rows of group g] @ b[g]``, the groups' rows
consecutive in ``a`` in group order, their sizes read from ``sizes`` at run time.

Record fields (``make_record`` fills and checks them):

    t, k, n, e              a [t, k], b [e, k, n], sizes [e], c [t, n] (row-major, contiguous)
    dtype, out_dtype        'bf16' | 'fp16' | 'fp32' (a and b; c); fp32 accumulation
    sizes_dtype             'i32' | 'i64'
    block_m, block_n, block_k, num_warps, num_stages, grid
                            tiles of c; program p: tiles p, p + grid, ... (tile -> (tile // tiles_n, tile % tiles_n))

Per tile of c the kernel walks the groups in order, keeping the first row of each (a prefix sum of ``sizes``), and
runs a K loop only for the groups whose rows meet the tile's (a tile on a group boundary runs one per group): each
loads the tile's rows of a with the other groups' rows masked to zero, so the sums add every row's own product
once. Rows past the last group stay zero. Groups are data, not shapes: one kernel serves every routing.

Arguments (``record["args"]``): a, b, sizes, c.
"""
from __future__ import annotations

import math

import numpy as np
from mlir import ir

from ..dialects import ttir as T
from ..errors import VerificationError
from . import KERNEL_ATTR, KernelRecord, Region, TileStep
from .numerics import round_to

name = "grouped_gemm"

DTYPES = ("bf16", "fp16", "fp32")
SIZES_DTYPES = ("i32", "i64")
ARGS = ["a", "b", "sizes", "c"]


def _err(message: str) -> VerificationError:
    return VerificationError(f"grouped_gemm template: {message}")


def make_record(t: int, k: int, n: int, e: int, *, name: str = "grouped_gemm", dtype: str = "bf16",
                out_dtype: str | None = None, sizes_dtype: str = "i32", block_m: int = 64, block_n: int = 128,
                block_k: int = 64, num_warps: int = 4, num_stages: int = 3, num_sms: int = 132,
                waves: int = 4) -> KernelRecord:
    """A checked record: at most ``waves`` programs per SM, each looping over its tiles."""
    rec = KernelRecord(template="grouped_gemm", name=name, t=t, k=k, n=n, e=e, dtype=dtype,
                       out_dtype=out_dtype or dtype, sizes_dtype=sizes_dtype, block_m=block_m, block_n=block_n,
                       block_k=block_k, num_warps=num_warps, num_stages=num_stages, grid=1, args=list(ARGS))
    rec["grid"] = max(1, min(_num_tiles(rec), num_sms * waves))
    check(rec)
    return rec


def check(rec) -> None:
    for key in ("t", "k", "n", "e", "block_m", "block_n", "block_k", "num_warps", "num_stages", "grid"):
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
    if rec.get("args") != ARGS:
        raise _err(f"args must be {ARGS}, got {rec.get('args')}")
    if rec["t"] * rec["n"] >= 2 ** 31 - 1 or rec["t"] >= 2 ** 31 - rec["block_m"]:
        raise _err(f"{rec['t']} x {rec['n']} outputs: tile indices would overflow 32 bits")


def grid(rec) -> tuple[int, int, int]:
    return rec["grid"], 1, 1


def _tiles_n(rec) -> int:
    return math.ceil(rec["n"] / rec["block_n"])


def _num_tiles(rec) -> int:
    return math.ceil(rec["t"] / rec["block_m"]) * _tiles_n(rec)


# ------------------------------------------------------------------------------------------------ tiles()

def tiles(record, *, rank: int, num_ranks: int, scalars: dict[str, int]) -> list[list[TileStep]]:
    """Each tile reads its rows of a (every column), all of b and sizes (which groups meet the tile is data), and
    writes its box of c."""
    rec = record
    t_rows, k, n, e = rec["t"], rec["k"], rec["n"], rec["e"]
    bm, bn, tn = rec["block_m"], rec["block_n"], _tiles_n(rec)
    out = []
    for pid in range(rec["grid"]):
        steps = []
        for tile in range(pid, _num_tiles(rec), rec["grid"]):
            r0, c0 = (tile // tn) * bm, (tile % tn) * bn
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
        width = view(c).shape[1]
        result = np.zeros((av.shape[0], width), dtype=np.float32)
        for g in np.unique(group[group < rec["e"]]):
            mine = group == g
            result[mine] = av[mine] @ bv[g][:, c0:c0 + width]
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
    elem, out_elem = T.dtype(rec["dtype"]), T.dtype(rec["out_dtype"])
    args = [("a", T.ptr(elem), {"tt.divisibility": 16}), ("b", T.ptr(elem), {"tt.divisibility": 16}),
            ("sizes", T.ptr(rec["sizes_dtype"]), {}), ("c", T.ptr(out_elem), {"tt.divisibility": 16})]
    f, values = T.func(rec["name"], args, attrs={KERNEL_ATTR: rec.to_attr()})
    a_ptr, b_ptr, sizes_ptr, c_ptr = values
    idx = T.i64() if max(t_rows * k, e * k * n, t_rows * n) >= 2 ** 31 else T.i32()
    with ir.InsertionPoint(f.regions[0].blocks[0]):
        tn, k_tiles = _tiles_n(rec), math.ceil(k / bk)
        with T.For(T.program_id(0), _num_tiles(rec), rec["grid"]) as loop:
            tile = loop.iv
            r0, c0 = T.mul(T.div(tile, tn), bm), T.mul(T.rem(tile, tn), bn)
            rows = T.add(T.expand_dims(T.make_range(0, bm), 1), r0)  # [bm, 1]
            cols = T.add(T.expand_dims(T.make_range(0, bn), 0), c0)  # [1, bn]
            a_rows = T.broadcast(T.mul(T.int_cast(rows, idx), T.c(k, idx)), [bm, bk])
            b_cols = T.broadcast(T.int_cast(cols, idx), [bk, bn])
            col_ok = T.lt(cols, n)
            with T.For(0, e, 1, [T.zeros([bm, bn], "fp32"), T.c(0, T.i32())]) as groups:
                acc, start = groups.args
                g = groups.iv
                end = T.add(start, T.int_cast(T.load(T.addptr(sizes_ptr, g)), T.i32()))
                meets = T.and_(T.lt(r0, end), T.lt(start, T.add(r0, bm)))
                row_ok = T.and_(T.and_(T.ge(rows, start), T.lt(rows, end)), T.lt(rows, t_rows))
                b_group = T.mul(T.int_cast(g, idx), T.c(k * n, idx))
                with T.For(0, T.select(meets, T.c(k_tiles, T.i32()), T.c(0, T.i32())), 1, [acc]) as kloop:
                    (acc_in,) = kloop.args
                    k0 = T.mul(kloop.iv, bk)
                    ka = T.add(T.expand_dims(T.make_range(0, bk), 0), k0)  # [1, bk]
                    a_mask = T.and_(T.broadcast(row_ok, [bm, bk]), T.broadcast(T.lt(ka, k), [bm, bk]))
                    a_tile = T.load(T.addptr(a_ptr, T.add(a_rows, T.broadcast(T.int_cast(ka, idx), [bm, bk]))),
                                    a_mask, 0.0)
                    kb = T.add(T.expand_dims(T.make_range(0, bk), 1), k0)  # [bk, 1]
                    b_off = T.add(T.add(T.broadcast(T.mul(T.int_cast(kb, idx), T.c(n, idx)), [bk, bn]), b_cols),
                                  T.splat(b_group, [bk, bn]))
                    b_mask = T.and_(T.broadcast(T.lt(kb, k), [bk, bn]), T.broadcast(col_ok, [bk, bn]))
                    b_tile = T.load(T.addptr(b_ptr, b_off), b_mask, 0.0)
                    kloop.yield_(T.dot(a_tile, b_tile, acc_in, precision="ieee" if rec["dtype"] == "fp32" else "tf32"))
                groups.yield_(kloop.results[0], end)
            c_off = T.add(T.broadcast(T.mul(T.int_cast(rows, idx), T.c(n, idx)), [bm, bn]),
                          T.broadcast(T.int_cast(cols, idx), [bm, bn]))
            c_mask = T.and_(T.broadcast(T.lt(rows, t_rows), [bm, bn]), T.broadcast(col_ok, [bm, bn]))
            T.store(T.addptr(c_ptr, c_off), T.cast(groups.results[0], out_elem), c_mask)
        T.ret()
    return f
