"""Grouped GEMM template (MoE experts): ``c[rows of group g] = a[rows of group g] @ b[g]``, the groups' rows
consecutive in ``a`` in group order, their sizes read from ``sizes`` at run time.

Record fields (``make_record`` fills and checks them):

    t, k, n, e              a [t, k], b [b_groups, k, n] (or [b_groups, k, 2n] gated), sizes [e], c [t, n]
                            (row-major, contiguous)
    b_groups                the weight matrices in b (default e): e is a multiple of it, and group g multiplies
                            b[g % b_groups] -- an expert-parallel MoE's received rows, source-major and
                            expert-minor, are W * E_l groups over E_l experts, used as they arrive (no regroup)
    gated (optional)        an activation of ``GATED`` ('silu'): c = act(a @ b[:, :, :n]) * (a @ b[:, :, n:])
                            -- the gated MLP's gate and up projections in one launch, the gate's columns first;
                            each tile loads both b tiles of its columns (two accumulators) and applies
                            elementwise's fns (act, mul: the GEMM epilogue's own) before its one store, rounding
                            gate, up and act(gate) to out_dtype as the unfused GEMM, act and mul would (a
                            transformers block's numerics: ExpertParallelMoE equals the block to the GEMMs'
                            accumulation order)
    dtype, out_dtype        'bf16' | 'fp16' | 'fp32' (a and b; c); fp32 accumulation
    sizes_dtype             'i32' | 'i64'
    block_m, block_n, block_k, num_warps, num_stages, grid
                            tiles of c; a persistent grid: program p runs tiles p, p + grid, ...
    group_m                 tile order: Triton's GROUP_M swizzle over the tiles' row slots (group_m row slots share
                            a sweep over the column blocks, so an expert's weights are read from L2 that many times)
    loads                   'tma' (descriptors over a [t, k] and b as [e * k, n]; needs 16-byte row strides) or
                            'pointer'

Tiles never straddle groups. Group g owns rows [start_g, end_g) (the prefix sums of the sizes, a negative size
counting as 0, clamped to t); it gets ceil(rows / block_m) row slots of block_m rows from start_g, the last one
partial, and the rows past the last group form one more group whose tiles store zeros. Every program computes the
slots once from ``sizes`` (vector prefix sums, no host round trip), then runs its tiles: a tile's group is the one
whose slots hold the tile's slot, its K loop one plain loop over its group's b (TMA loads, or pointer loads masked
to the group's rows), its store masked to the group's rows. A tile's rows past its group's end load whatever a
holds there (the next group's rows, or zeros past t) and are not stored; a K step past k reads a as zero, so
whatever b's rows hold there (the next group's) adds nothing. Groups are data, not shapes: one kernel serves every
routing, and the simulator sees each tile's real rows (``tiles()``: a data-dependent step per program that reads
``sizes`` and expands into the program's tiles).

Arguments (``record["args"]``): a, b, sizes, c.

A gated tile holds two [block_m, block_n] fp32 accumulators: the planner halves the GEMM's block_n for it.
"""
from __future__ import annotations

import math

import numpy as np
from mlir import ir

from ..dialects import ttir as T
from ..errors import VerificationError
from ..schema import GATED_ACTS as GATED  # act(gate) * up: the activations elementwise has a fused <act>_mul for
from . import I32_LIMIT, KERNEL_ATTR, KernelRecord, Region, TileStep, check_i32
from . import offset_type as _offset_type
from .gemm import IrOps, PyOps
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
                loads: str | None = None, num_sms: int = 132, waves: int = 1, b_groups: int | None = None,
                gated: str | None = None) -> KernelRecord:
    """A checked record: a persistent grid of at most ``waves`` programs per SM, each looping over its tiles; TMA
    loads where the row strides allow them (``loads``: force one)."""
    if loads is None:
        aligned = (k * _BYTES.get(dtype, 2)) % 16 == 0 and (n * _BYTES.get(dtype, 2)) % 16 == 0
        loads = "tma" if aligned and _b_rows_fit_a_descriptor(b_groups or e, k, block_k) else "pointer"
    extra = {"gated": gated} if gated else {}
    rec = KernelRecord(template="grouped_gemm", name=name, t=t, k=k, n=n, e=e, b_groups=b_groups or e, **extra,
                       dtype=dtype,
                       out_dtype=out_dtype or dtype, sizes_dtype=sizes_dtype, block_m=block_m, block_n=block_n,
                       block_k=block_k, group_m=group_m, num_warps=num_warps, num_stages=num_stages, loads=loads,
                       grid=1, args=list(ARGS))
    rec["grid"] = max(1, min(max_tiles(rec), num_sms * waves))
    check(rec)
    return rec


def check(rec) -> None:
    rec.setdefault("b_groups", rec.get("e"))
    for key in ("t", "k", "n", "e", "b_groups", "block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages", "grid"):
        v = rec.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise _err(f"field '{key}' must be a positive integer, got {v!r}")
    if rec["e"] % rec["b_groups"]:
        raise _err(f"e = {rec['e']} groups do not cycle over b_groups = {rec['b_groups']} weight matrices (group g "
                   "multiplies b[g % b_groups]); e must be a multiple of b_groups")
    if rec.get("gated") is not None and rec["gated"] not in GATED:
        raise _err(f"gated '{rec['gated']}' is not supported (act(gate) * up); use one of {', '.join(GATED)}, or "
                   "the GEMM without gated followed by the activation")
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
    if rec["loads"] == "tma" and not _b_rows_fit_a_descriptor(rec["b_groups"], rec["k"], rec["block_k"]):
        raise _err(f"TMA loads read b as one descriptor of b_groups * k = {rec['b_groups'] * rec['k']} rows, past "
                   "its 32-bit "
                   "shape; use loads 'pointer'")
    if rec["e"] > MAX_GROUPS:
        raise _err(f"e = {rec['e']} groups: every program keeps the groups' row slots in registers, at most "
                   f"{MAX_GROUPS} groups")
    check_i32(name, f"tiles (at most {max_tiles(rec)} of {rec['block_m']}x{rec['block_n']}, plus a grid)",
              max_tiles(rec) + rec["grid"])
    offset_type(rec)


# every program keeps the groups' row slots as vectors of next_pow2(e + 1) lanes
MAX_GROUPS = 4095


def offset_type(rec) -> str:
    """The width of the element offsets into a, b and c: i64 where one can pass 2**31, else i32."""
    t, k, n = rec["t"], rec["k"], rec["n"]
    return _offset_type(name, max(t * k, rec.get("b_groups", rec["e"]) * k * b_columns(rec), t * n), 4)


def b_columns(rec) -> int:
    """The columns of each weight matrix: n, or 2n (gate, then up) when gated."""
    return 2 * rec["n"] if rec.get("gated") else rec["n"]


def _b_rows_fit_a_descriptor(e: int, k: int, block_k: int) -> bool:
    """Whether b's e * k rows (and a K step past them) can be the i32 shape and coordinates of a descriptor."""
    return e * k + block_k < I32_LIMIT


def grid(rec) -> tuple[int, int, int]:
    return rec["grid"], 1, 1


def _tiles_n(rec) -> int:
    return math.ceil(rec["n"] / rec["block_n"])


def max_tiles(rec) -> int:
    """The most tiles any routing gives: every group, and the rows past the last, may add one partial row slot."""
    return (math.ceil(rec["t"] / rec["block_m"]) + rec["e"] + 1) * _tiles_n(rec)


def _coords(o, tile, slots, tiles_n: int, group_m: int):
    """(row slot, column block) of a tile: Triton's GROUP_M swizzle over ``slots`` row slots (a run-time count),
    one definition for the IR (o = IrOps) and tiles() (o = PyOps)."""
    per_group = group_m * tiles_n
    first = o.mul(o.div(tile, per_group), group_m)
    size = o.min(o.sub(slots, first), group_m)
    return o.add(first, o.rem(tile, size)), o.div(o.rem(tile, per_group), size)


def group_bounds(sizes, t: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the e groups' rows and, last, of the rows past them: prefix sums of the sizes (a negative
    size counts as 0), clamped to t."""
    ends = np.minimum(np.cumsum(np.maximum(np.asarray(sizes, np.int64), 0)), t)
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    return np.append(starts, ends[-1] if len(ends) else 0), np.append(ends, t)


def group_of_rows(sizes: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The group of each row (len(sizes) for a row past the last group): groups own consecutive rows in order."""
    ends = np.cumsum(np.maximum(np.asarray(sizes, dtype=np.int64), 0))
    return np.searchsorted(ends, rows, side="right")


def tile_boxes(rec, sizes) -> list[tuple[int, int, int, int, int]]:
    """Every tile as (group, first row, rows, first column, columns), in tile order (the kernel's tile i is entry
    i; program p runs entries p, p + grid, ...)."""
    starts, ends = group_bounds(sizes, rec["t"])
    bm, bn, n = rec["block_m"], rec["block_n"], rec["n"]
    slots = -(-(ends - starts) // bm)
    first_slot = np.concatenate([[0], np.cumsum(slots)[:-1]])
    total, tiles_n = int(slots.sum()), _tiles_n(rec)
    last_slot = np.cumsum(slots)
    out = []
    for tile in range(total * tiles_n):
        slot, pid_n = _coords(PyOps, tile, total, tiles_n, rec["group_m"])
        g = int(np.searchsorted(last_slot, slot, side="right"))
        r0 = int(starts[g]) + (slot - int(first_slot[g])) * bm
        c0 = pid_n * bn
        out.append((g, r0, min(bm, int(ends[g]) - r0), c0, min(bn, n - c0)))
    return out


# ------------------------------------------------------------------------------------------------ tiles()

def tiles(record, *, rank: int, num_ranks: int, scalars: dict[str, int]) -> list[list[TileStep]]:
    """Each program reads sizes, then runs its tiles (known once sizes is): a tile of group g reads its rows of a
    and its columns of b[g] and writes its box of c; a tile past the last group writes zeros."""
    rec = record
    sizes = Region("sizes", (0,), (rec["e"],))
    boxes: dict[tuple, list] = {}  # the launch's tiles by the sizes read: every program of it reads the same

    def program(pid: int) -> list[TileStep]:
        def expand(view) -> list[TileStep]:
            counts = np.asarray(view(sizes))
            key = tuple(counts.tolist())
            if key not in boxes:
                boxes[key] = tile_boxes(rec, counts)
            starts, ends = group_bounds(counts, rec["t"])
            return [_tile_step(rec, *box, span=(int(starts[box[0]]), int(ends[box[0]])))
                    for box in boxes[key][pid::rec["grid"]]]
        return [TileStep(reads=[sizes], expand=expand)]

    return [program(pid) for pid in range(rec["grid"])]


def _tile_step(rec, g: int, r0: int, rows: int, c0: int, cols: int, *, span: tuple[int, int]) -> TileStep:
    """Tile (g, r0, rows, c0, cols) of group g, whose rows of a are span = [first, end)."""
    c = Region("c", (r0, c0), (rows, cols))
    if g == rec["e"]:  # the rows past the last group
        def zeros(view):
            view(c)[...] = 0.0
        return TileStep(writes=[c], compute=zeros)
    a = Region("a", (r0, 0), (rows, rec["k"]))
    w = g % rec.get("b_groups", rec["e"])
    bs = [Region("b", (w, 0, c0 + half), (1, rec["k"], cols)) for half in ((0, rec["n"]) if rec.get("gated")
                                                                            else (0,))]

    def compute(view):
        # the group's rows of a (a simulator may batch the products of a group's tiles: ditron.sim.products)
        x = np.asarray(view(a), np.float32)
        products = [matmul(x, np.asarray(view(b), np.float32)[0], rows=span) for b in bs]
        if rec.get("gated"):
            from .elementwise import NUMPY
            gate, up = (np.asarray(round_to(rec["out_dtype"], p), np.float32) for p in products)
            with np.errstate(over="ignore"):
                act = np.asarray(round_to(rec["out_dtype"], NUMPY[rec["gated"]](gate)), np.float32)
            products = [np.asarray(NUMPY["mul"](act, up), np.float32)]
        view(c)[...] = round_to(rec["out_dtype"], products[0])
    return TileStep(reads=[a, *bs], writes=[c], compute=compute)


# ------------------------------------------------------------------------------------------------ build()

def build(record, *, ip, loc=None):
    rec = KernelRecord(record)
    check(rec)
    with (loc or ir.Location.unknown()), ip:
        return _emit(rec)


def _pick(vec, lanes, g):
    """vec[g] of an integer vector, as a scalar (a masked sum)."""
    return T.reduce_sum(T.select(T.cmp("eq", lanes, T.splat(g, T.shape(lanes))), vec, T.zeros(T.shape(vec),
                                                                                                T.elem(vec))))


def _slots(rec, sizes_ptr):
    """Per program, once: the groups' (and the rows past them') starts, ends, first row slots and slot counts, as
    [side] i32 vectors, and the total of row slots."""
    t_rows, e, bm = rec["t"], rec["e"], rec["block_m"]
    side = 1 << e.bit_length()  # next power of two above e: room for the rows past the last group
    lanes = T.make_range(0, side)
    i64 = T.i64()
    raw = T.load(T.addptr(T.splat(sizes_ptr, [side]), lanes), T.lt(lanes, T.splat(T.c(e, T.i32()), [side])), 0)
    size = T.min_(T.max_(T.int_cast(raw, i64), T.zeros([side], i64)), T.splat(T.c(t_rows, i64), [side]))
    incl = T.cumsum(size)  # i64: e sizes of up to t rows each
    t_vec = T.splat(T.c(t_rows, i64), [side])
    starts = T.int_cast(T.min_(T.sub(incl, size), t_vec), T.i32())
    ends = T.int_cast(T.min_(incl, t_vec), T.i32())
    t32 = T.splat(T.c(t_rows, T.i32()), [side])
    e_vec = T.splat(T.c(e, T.i32()), [side])
    ends = T.select(T.cmp("eq", lanes, e_vec), t32, ends)  # the rows past the last group
    ends = T.select(T.cmp("sgt", lanes, e_vec), starts, ends)  # padding lanes: empty
    slots = T.div(T.add(T.sub(ends, starts), T.splat(T.c(bm - 1, T.i32()), [side])),
                  T.splat(T.c(bm, T.i32()), [side]))
    incl_slots = T.cumsum(slots)
    return lanes, starts, ends, incl_slots, T.sub(incl_slots, slots), T.reduce_sum(slots)


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
    tiles_n = _tiles_n(rec)
    e_b, nb, gated = rec.get("b_groups", e), b_columns(rec), rec.get("gated")
    halves = (0, n) if gated else (0,)  # the b tiles' column offsets: gate and up, or the one
    with ir.InsertionPoint(f.regions[0].blocks[0]):
        k_tiles = math.ceil(k / bk)
        if tma:
            one = T.c(1, T.i64())
            a_desc = T.make_desc(a_ptr, [T.c(t_rows), T.c(k)], [T.c(k, T.i64()), one], [bm, bk])
            b_desc = T.make_desc(b_ptr, [T.c(e_b * k), T.c(nb)], [T.c(nb, T.i64()), one], [bk, bn])
        lanes, starts, ends, incl_slots, first_slots, total = _slots(rec, sizes_ptr)
        with T.For(T.program_id(0), T.mul(total, tiles_n), rec["grid"]) as loop:
            slot, pid_n = _coords(IrOps, loop.iv, total, tiles_n, rec["group_m"])
            g = T.reduce_sum(T.int_cast(T.cmp("sle", incl_slots, T.splat(slot, T.shape(lanes))), T.i32()))
            start, end = _pick(starts, lanes, g), _pick(ends, lanes, g)
            wg = T.rem(g, T.c(e_b, T.i32())) if e_b != e else g  # the weight matrix: b[g % b_groups]
            r0 = T.add(start, T.mul(T.sub(slot, _pick(first_slots, lanes, g)), bm))
            c0 = T.mul(pid_n, bn)
            rows = T.add(T.expand_dims(T.make_range(0, bm), 1), r0)  # [bm, 1]
            cols = T.add(T.expand_dims(T.make_range(0, bn), 0), c0)  # [1, bn]
            col_ok = T.lt(cols, n)
            n_k = T.select(T.lt(g, e), T.c(k_tiles, T.i32()), T.c(0, T.i32()))  # the rows past the groups: zeros
            accs0 = [T.zeros([bm, bn], "fp32") for _ in halves]
            if tma:
                with T.For(0, n_k, 1, accs0) as kloop:
                    k0 = T.mul(kloop.iv, bk)
                    a_tile = T.desc_load(a_desc, [r0, k0])
                    b_row = T.add(T.mul(wg, k), k0)
                    kloop.yield_(*[T.dot(a_tile, T.desc_load(b_desc, [b_row, T.add(c0, half) if half else c0]),
                                         part, precision=precision) for half, part in zip(halves, kloop.args)])
            else:
                row_ok = T.broadcast(T.lt(rows, end), [bm, bk])
                a_rows = T.broadcast(T.mul(T.int_cast(rows, idx), T.c(k, idx)), [bm, bk])
                b_cols = T.broadcast(T.int_cast(cols, idx), [bk, bn])
                b_group = T.mul(T.int_cast(wg, idx), T.c(k * nb, idx))
                with T.For(0, n_k, 1, accs0) as kloop:
                    k0 = T.mul(kloop.iv, bk)
                    ka = T.add(T.expand_dims(T.make_range(0, bk), 0), k0)  # [1, bk]
                    a_mask = T.and_(row_ok, T.broadcast(T.lt(ka, k), [bm, bk]))
                    a_tile = T.load(T.addptr(a_ptr, T.add(a_rows, T.broadcast(T.int_cast(ka, idx), [bm, bk]))),
                                    a_mask, 0.0)
                    kb = T.add(T.expand_dims(T.make_range(0, bk), 1), k0)  # [bk, 1]
                    b_off = T.add(T.add(T.broadcast(T.mul(T.int_cast(kb, idx), T.c(nb, idx)), [bk, bn]), b_cols),
                                  T.splat(b_group, [bk, bn]))
                    b_mask = T.and_(T.broadcast(T.lt(kb, k), [bk, bn]), T.broadcast(col_ok, [bk, bn]))
                    parts = []
                    for half, part in zip(halves, kloop.args):
                        off = T.add(b_off, T.splat(T.c(half, idx), [bk, bn])) if half else b_off
                        parts.append(T.dot(a_tile, T.load(T.addptr(b_ptr, off), b_mask, 0.0), part,
                                           precision=precision))
                    kloop.yield_(*parts)
            c_off = T.add(T.broadcast(T.mul(T.int_cast(rows, idx), T.c(n, idx)), [bm, bn]),
                          T.broadcast(T.int_cast(cols, idx), [bm, bn]))
            c_mask = T.and_(T.broadcast(T.lt(rows, end), [bm, bn]), T.broadcast(col_ok, [bm, bn]))
            acc = kloop.results[0]
            if gated:  # act(gate) * up: elementwise's fns, each result rounded to c's type as the unfused ops do
                from .elementwise import _fn_ir

                def rounded(x):
                    return T.cast(T.cast(x, rec["out_dtype"]), "fp32") if rec["out_dtype"] != "fp32" else x
                gate, up = rounded(kloop.results[0]), rounded(kloop.results[1])
                acc = _fn_ir("mul", rounded(_fn_ir(gated, gate)), up)
            T.store(T.addptr(c_ptr, c_off), T.cast(acc, out_elem), c_mask)
        T.ret()
    return f
