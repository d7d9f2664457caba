"""The GEMM template's fused epilogue (record field ``epilogue``): pointwise steps applied to the fp32 accumulator
of each tile before it is stored -- or pushed, or added to the peers' partials -- so that a bias, an activation, a
residual add or a dtype cast after a matmul costs no kernel and no round trip through HBM of its own.

``epilogue`` is a list of steps, applied in order, each a dict:

    {"fn": <unary fn>}                     relu, silu, gelu (erf form), sigmoid, tanh, exp, neg, copy
    {"fn": "cast", "dtype": d}             round to d (bf16 | fp16 | fp32) and go on in fp32 (the task
                                           program's cast; the last cast is the store's out_dtype itself)
    {"fn": <binary fn>, "arg": name,       add, sub, mul, div, max, min, silu_mul with a second operand, the
     "operand": "bias" | "row" |           kernel argument ``name`` of element type ``dtype``: "bias" a [n] vector
               "scalar" | "full",          over C's columns (broadcast over the rows: a per-column scale of B),
     "dtype": d, "acc": 0 | 1,             "row" an [m, 1] column over C's rows (broadcast over the columns:
     "first_rank": bool,                   a per-row scale of A), "scalar" a [1] tensor (a per-tensor scale),
                                           "full" an [m, n] tensor
                                           (rows n elements apart) at C's rows and columns; ``acc``: the
     "own_rows": R}                        accumulator's position among the fn's operands (silu_mul(x, acc) =
                                           silu(x) * acc). Adds before a reduction over the ranks, so that the
                                           term is added once, not W times: ``first_rank``, only rank 0 applies
                                           it (a term every rank holds alike); ``own_rows``, rank r applies it
                                           to rows [r R, (r + 1) R) alone, the rows it owns after a
                                           reduce-scatter (a "full" operand is then [R, n], a "row" one [R, 1],
                                           those rows' own; a "scalar" one the rank's own [1])

An fp8 GEMM with scales is ``mul`` by a "row" (or "scalar") scale of A and a "bias" (or "scalar") scale of B on
the fp32 accumulator, then the store's rounding to C's dtype: the scales apply before any rounding.

The step arguments follow the template's other arguments, before a split-K / stream-K workspace. The template
applies the steps once per output tile on its full K sum: after the K loop (plain, waiting, gathering, notifying,
pushing and reduce_own tiles: before the pushes and before the peers' partials are added), after the last split's
sum (split-K) and after the contributors' partials (stream-K). Only ``first_rank`` adds may come before a
reduction; ditron-fuse-epilogue fuses nothing else into the GEMMs of GEMM+RS / GEMM+AR.
"""
from __future__ import annotations

import numpy as np

from ...dialects import ttir as T
from ...errors import VerificationError

UNARY = ("relu", "silu", "gelu", "sigmoid", "tanh", "exp", "neg", "copy")
BINARY = ("add", "sub", "mul", "div", "max", "min", "silu_mul")
DTYPES = ("bf16", "fp16", "fp32")
OPERANDS = ("bias", "row", "scalar", "full")


def _err(message: str) -> VerificationError:
    return VerificationError(f"gemm template: epilogue {message}")


def arg_names(rec) -> list[str]:
    return [s["arg"] for s in rec.get("epilogue", []) if "arg" in s]


def check(rec) -> None:
    steps = rec.get("epilogue")
    if steps is None:
        return
    if not isinstance(steps, list) or not steps:
        raise _err(f"must be a non-empty list of steps, got {steps!r}")
    for i, s in enumerate(steps):
        fn = s.get("fn") if isinstance(s, dict) else None
        if fn in UNARY:
            extra = set(s) - {"fn"}
        elif fn == "cast":
            if s.get("dtype") not in DTYPES:
                raise _err(f"step {i}: cast needs dtype one of {', '.join(DTYPES)}, got {s.get('dtype')!r}")
            extra = set(s) - {"fn", "dtype"}
        elif fn in BINARY:
            if not isinstance(s.get("arg"), str) or s.get("operand") not in OPERANDS or \
                    s.get("dtype") not in DTYPES or s.get("acc", 0) not in (0, 1):
                raise _err(f"step {i}: '{fn}' needs arg (a name), operand (one of {', '.join(OPERANDS)}), dtype "
                           f"(one of {', '.join(DTYPES)}) and acc (0 or 1), got {s}")
            once = [k for k in ("first_rank", "own_rows") if s.get(k)]
            if once and fn != "add":
                raise _err(f"step {i}: only an add can be {once[0]} (applied once before a reduction)")
            if len(once) > 1 or (s.get("own_rows") is not None and (not isinstance(s["own_rows"], int) or
                                                                    s["own_rows"] < 1)):
                raise _err(f"step {i}: own_rows must be a row count >= 1, and not with first_rank")
            extra = set(s) - {"fn", "arg", "operand", "dtype", "acc", "first_rank", "own_rows"}
        else:
            raise _err(f"step {i}: fn {fn!r} is unknown; known: {', '.join(UNARY + BINARY + ('cast',))}")
        if extra:
            raise _err(f"step {i}: unknown field(s) {sorted(extra)}")
    if ("reduce_own" in rec or "push" in rec) and not all(_once(s) for s in steps):
        # a GEMM that sums partials over the ranks: only a term added once commutes with the sum
        raise _err("of a GEMM that sums partials over the ranks (reduce_own, push) may only hold first_rank or "
                   "own_rows adds")


def _once(s) -> bool:
    return bool(s.get("first_rank") or s.get("own_rows"))


def arg_types(rec) -> dict:
    return {s["arg"]: T.ptr(T.dtype(s["dtype"])) for s in rec.get("epilogue", []) if "arg" in s}


# ------------------------------------------------------------------------------------------------ the IR

def emit(em, acc, m0, n0):
    """The steps on the [BM, BN] fp32 accumulator of the tile at (m0, n0) (em: the GEMM's _Emitter)."""
    from ..elementwise import _fn_ir
    rec = em.rec
    steps = rec.get("epilogue")
    if not steps:
        return acc
    shape = [em.bm, em.bn]
    rm = T.add(m0, T.make_range(0, em.bm))
    rn = T.add(n0, T.make_range(0, em.bn))
    for s in steps:
        fn = s["fn"]
        if fn == "cast":
            acc = T.cast(T.cast(acc, s["dtype"]), "fp32")
            continue
        if "arg" not in s:
            acc = _fn_ir(fn, acc)
            continue
        base = em.arg[s["arg"]]
        col_ok = T.lt(rn, em.n) if em.n % em.bn else None
        own = s.get("own_rows")
        row0 = T.mul(em.rank, own) if own else None  # the first row this rank owns
        row_ok = T.and_(T.ge(rm, row0), T.lt(rm, T.add(row0, own))) if own else None
        if s["operand"] == "bias":
            ptrs = T.addptr(T.splat(base, [em.bn]), em._wide(rn))
            mask = col_ok
            if s.get("first_rank"):
                mask = _and1(mask, T.splat(T.cmp("eq", em.rank, 0), [em.bn]))
            if own:  # read only by tiles holding an own row
                touches = T.and_(T.lt(m0, T.add(row0, own)), T.cmp("sgt", T.add(m0, em.bm), row0))
                mask = _and1(mask, T.splat(touches, [em.bn]))
            x = T.load(ptrs, mask, 0.0 if mask is not None else None)
            x = T.broadcast(T.expand_dims(T.cast(x, "fp32"), 0), shape)
        elif s["operand"] in ("row", "scalar"):  # x[row] (or x[0]) the same for every column
            ptrs = T.splat(base, [em.bm])
            mask = T.lt(rm, em.m) if em.m % em.bm else None
            if s["operand"] == "row":
                ptrs = T.addptr(ptrs, em._wide(T.sub(rm, row0) if own else rm))
            if s.get("first_rank"):
                mask = _and1(mask, T.splat(T.cmp("eq", em.rank, 0), [em.bm]))
            if own:
                mask = _and1(mask, row_ok)
            x = T.load(ptrs, mask, 0.0 if mask is not None else None)
            x = T.broadcast(T.expand_dims(T.cast(x, "fp32"), 1), shape)
        else:
            rows = T.sub(rm, row0) if own else rm
            off = T.add(T.mul(T.expand_dims(em._wide(rows), 1), em.n), T.expand_dims(em._wide(rn), 0))
            ptrs = T.addptr(T.splat(base, shape), off)
            mask = None
            if em.m % em.bm:
                mask = _and2(mask, T.expand_dims(T.lt(rm, em.m), 1), shape)
            if col_ok is not None:
                mask = _and2(mask, T.expand_dims(col_ok, 0), shape)
            if s.get("first_rank"):
                mask = _and2(mask, T.splat(T.cmp("eq", em.rank, 0), shape), shape)
            if own:
                mask = _and2(mask, T.expand_dims(row_ok, 1), shape)
            x = T.cast(T.load(ptrs, mask, 0.0 if mask is not None else None), "fp32")
        if own:  # the other rows add nothing
            x = T.select(T.broadcast(T.expand_dims(row_ok, 1), shape), x, T.zeros(shape, "fp32"))
        acc = _fn_ir(fn, *((acc, x) if s.get("acc", 0) == 0 else (x, acc)))
    return acc


def _and1(a, b):
    return b if a is None else T.and_(a, b)


def _and2(a, b, shape):
    b = T.broadcast(b, shape)
    return b if a is None else T.and_(T.broadcast(a, shape), b)


def uses_rank(rec) -> bool:
    return any(_once(s) for s in rec.get("epilogue", []))


def _own(s, m0: int, rows: int, rank: int) -> tuple[int, int] | None:
    """An own_rows step: the tile's rows [lo, hi) (GEMM rows) that the rank owns, None if none."""
    r = s["own_rows"]
    lo, hi = max(m0, rank * r), min(m0 + rows, (rank + 1) * r)
    return (lo, hi) if lo < hi else None


# ------------------------------------------------------------------------------------------------ the model

def _read(s, m0: int, n0: int, rows: int, cols: int, rank: int):
    """(what step s reads, and the GEMM rows [lo, hi) it applies to) on the tile at (m0, n0) of the launching
    rank, or None where it applies to none (a first_rank step off rank 0, an own_rows step off the rank's rows)."""
    from .. import Region
    if s.get("first_rank") and rank != 0:
        return None
    lo, hi, row = m0, m0 + rows, m0
    if s.get("own_rows"):
        own = _own(s, m0, rows, rank)
        if own is None:
            return None
        (lo, hi), row = own, own[0] - rank * s["own_rows"]
    start, size = {"bias": ((n0,), (cols,)), "row": ((row, 0), (hi - lo, 1)), "scalar": ((0,), (1,)),
                   "full": ((row, n0), (hi - lo, cols))}[s["operand"]]
    return Region(s["arg"], start, size), lo, hi


def regions(rec, m0: int, n0: int, rows: int, cols: int, rank: int) -> list:
    """What the steps of the tile at (m0, n0) read (rank: the launching rank)."""
    reads = [_read(s, m0, n0, rows, cols, rank) for s in rec.get("epilogue", []) if "arg" in s]
    return [r[0] for r in reads if r is not None]


def apply(rec, acc: np.ndarray, view, m0: int, n0: int, rank: int) -> np.ndarray:
    """The steps on a tile's fp32 accumulator in numpy, as emit() computes them."""
    from ..elementwise import NUMPY
    from ..numerics import round_to
    steps = rec.get("epilogue")
    if not steps:
        return acc
    rows, cols = acc.shape
    acc = np.array(acc, np.float32)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        for s in steps:
            fn = s["fn"]
            if fn == "cast":
                acc = np.asarray(round_to(s["dtype"], acc), np.float32)
                continue
            if "arg" not in s:
                acc = np.asarray(NUMPY[fn](acc), np.float32)
                continue
            read = _read(s, m0, n0, rows, cols, rank)
            if read is None:
                continue
            region, lo, hi = read
            x = np.asarray(view(region), np.float32)
            kind = s["operand"]
            x = np.broadcast_to(x[None, :] if kind == "bias" else x[:, None] if kind == "scalar" else x,
                                (hi - lo, cols))
            part = acc[lo - m0:hi - m0]
            acc[lo - m0:hi - m0] = NUMPY[fn](*((part, x) if s.get("acc", 0) == 0 else (x, part)))
    return acc
