"""Elementwise template: ``y = fn(x0, x1, ...)`` over same-shaped rank-1 or rank-2 tensors, computed in fp32 (a
rank-2 kernel's x1 may be a [cols] bias broadcast over the rows, a [rows, 1] column broadcast over the columns or a
[1] scalar; ``cast`` stores x0 in out_dtype).

Record fields (``make_record`` fills and checks them):

    fn                      a pointwise function of ditron_task.elementwise (add, sub, mul, div, max, min, neg,
                            relu, silu, gelu (erf form), exp, sigmoid, tanh, copy, silu_mul)
    arity                   number of inputs
    shape                   [n] or [rows, cols] (row-major, contiguous)
    dtype                   'bf16' | 'fp16' | 'fp32' (inputs and output)
    out_dtype               (cast only) the output's dtype
    bias | row | scalar     (rank 2, binary fns; at most one, true) x1 is a [cols] vector broadcast over the rows,
                            a [rows, 1] column broadcast over the columns, or one element (a [1] tensor)
    block_m, block_n        tile shape (rank 1: block_m = 1)
    grid, num_warps         programs (program p: tiles p, p + grid, ...; tile t -> (t // tiles_n, t % tiles_n))

Arguments (``record["args"]``): x0, x1, ..., y.
"""
from __future__ import annotations

import math

import numpy as np
from mlir import ir
from mlir.dialects import arith, math as math_d

from ..dialects import ttir as T
from ..errors import VerificationError
from . import KERNEL_ATTR, KernelRecord, Region, TileStep, check_i32
from . import offset_type as _offset_type
from .numerics import round_to

name = "elementwise"

ARITY = {"add": 2, "sub": 2, "mul": 2, "div": 2, "max": 2, "min": 2, "neg": 1, "relu": 1, "silu": 1, "gelu": 1,
         "exp": 1, "sigmoid": 1, "tanh": 1, "copy": 1, "silu_mul": 2, "cast": 1}
DTYPES = ("bf16", "fp16", "fp32")


def _err(message: str) -> VerificationError:
    return VerificationError(f"elementwise template: {message}")


def _pow2_at_most(x: int, cap: int) -> int:
    p = 1
    while p * 2 <= min(x, cap):
        p *= 2
    return p


def _pow2_at_least(x: int, cap: int) -> int:
    p = 1
    while p < x and p < cap:
        p *= 2
    return p


def make_record(fn: str, arity: int, shape: list[int], dtype: str, *, name: str = "elementwise", block: int = 1024,
                num_warps: int = 4, num_sms: int = 132, waves: int = 4, out_dtype: str | None = None,
                bias: bool = False, broadcast: str | None = None) -> KernelRecord:
    """A checked record: tiles of about ``block`` elements, at most ``waves`` programs per SM; ``broadcast``: how x1
    is broadcast ("bias", "row", "scalar"; ``bias=True`` is "bias")."""
    if len(shape) not in (1, 2) or any(s < 1 for s in shape):
        raise _err(f"shape {shape} must be rank 1 or 2 with positive sizes")
    rows, cols = (1, shape[0]) if len(shape) == 1 else shape
    block_n = _pow2_at_least(max(cols, 1), max(block, 16))
    block_m = 1 if len(shape) == 1 else max(1, _pow2_at_most(max(block // block_n, 1), 1 << 20))
    tiles = math.ceil(rows / block_m) * math.ceil(cols / block_n)
    rec = KernelRecord(template="elementwise", name=name, fn=fn, arity=arity, shape=list(shape), dtype=dtype,
                       block_m=block_m, block_n=block_n, grid=max(1, min(tiles, num_sms * waves)),
                       num_warps=num_warps, args=[f"x{i}" for i in range(arity)] + ["y"])
    if out_dtype is not None and out_dtype != dtype:
        rec["out_dtype"] = out_dtype
    if bias or broadcast:
        if broadcast not in (None, *BROADCASTS) or (bias and broadcast not in (None, "bias")):
            raise _err(f"broadcast {broadcast!r} is none of {', '.join(BROADCASTS)}")
        rec[broadcast or "bias"] = True
    check(rec)
    return rec


BROADCASTS = ("bias", "row", "scalar")


def check(rec) -> None:
    if rec.get("fn") not in ARITY:
        raise _err(f"fn '{rec.get('fn')}' is unknown; known: {', '.join(ARITY)}")
    if rec["arity"] != ARITY[rec["fn"]]:
        raise _err(f"fn '{rec['fn']}' takes {ARITY[rec['fn']]} input(s), the record says {rec['arity']}")
    if rec.get("dtype") not in DTYPES or rec.get("out_dtype", rec.get("dtype")) not in DTYPES:
        raise _err(f"dtype '{rec.get('dtype')}' / out_dtype '{rec.get('out_dtype')}' is not supported; use one of "
                   f"{', '.join(DTYPES)}")
    if "out_dtype" in rec and rec["fn"] != "cast":
        raise _err(f"only cast has an out_dtype, not '{rec['fn']}'")
    kinds = [k for k in BROADCASTS if rec.get(k)]
    if kinds and (rec["arity"] != 2 or len(rec["shape"]) != 2 or len(kinds) > 1):
        raise _err(f"a broadcast operand ({', '.join(kinds)}) needs a binary fn over a rank-2 shape, and one kind")
    for key in ("block_m", "block_n", "grid", "num_warps"):
        v = rec.get(key)
        if not isinstance(v, int) or v < 1:
            raise _err(f"field '{key}' must be a positive integer, got {v!r}")
    if rec["block_m"] & (rec["block_m"] - 1) or rec["block_n"] & (rec["block_n"] - 1):
        raise _err("block_m and block_n must be powers of two")
    check_i32(name, f"tiles ({_num_tiles(rec)} of {rec['block_m']}x{rec['block_n']}, plus a grid)",
              _num_tiles(rec) + rec["grid"])
    offset_type(rec)


def offset_type(rec) -> str:
    """The width of the element offsets (row * cols + col): i64 once the tensor holds 2**31 elements."""
    rows, cols = _dims(rec)
    return _offset_type(name, rows * cols, T.DTYPE_BYTES[rec["dtype"]])


def grid(rec) -> tuple[int, int, int]:
    return rec["grid"], 1, 1


def _dims(rec) -> tuple[int, int]:
    shape = rec["shape"]
    return (1, shape[0]) if len(shape) == 1 else (shape[0], shape[1])


def _tiles_n(rec) -> int:
    return math.ceil(_dims(rec)[1] / rec["block_n"])


def _num_tiles(rec) -> int:
    rows, _ = _dims(rec)
    return math.ceil(rows / rec["block_m"]) * _tiles_n(rec)


# ------------------------------------------------------------------------------------------------ numerics

def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _erf(x):
    from ..reference import _erf as erf
    return erf(x)


NUMPY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "max": np.maximum, "min": np.minimum, "neg": lambda a: -a, "relu": lambda a: np.maximum(a, 0),
    "silu": lambda a: a * _sigmoid(a), "gelu": lambda a: 0.5 * a * (1.0 + _erf(a / math.sqrt(2.0))),
    "exp": np.exp, "sigmoid": _sigmoid, "tanh": lambda a: 2.0 * _sigmoid(2.0 * a) - 1.0, "copy": lambda a: a,
    "silu_mul": lambda a, b: a * _sigmoid(a) * b, "cast": lambda a: a,
}


def tiles(record, *, rank: int, num_ranks: int, scalars: dict[str, int]) -> list[list[TileStep]]:
    rec = record
    rows, cols = _dims(rec)
    bm, bn, tn = rec["block_m"], rec["block_n"], _tiles_n(rec)
    one_d = len(rec["shape"]) == 1
    out = []
    for pid in range(rec["grid"]):
        steps = []
        for t in range(pid, _num_tiles(rec), rec["grid"]):
            r0, c0 = (t // tn) * bm, (t % tn) * bn
            size = (min(bm, rows - r0), min(bn, cols - c0))
            box = ((c0,), (size[1],)) if one_d else ((r0, c0), size)
            ins = [Region(a, *box) for a in rec["args"][:-1]]
            if rec.get("bias"):
                ins[1] = Region(rec["args"][1], (c0,), (size[1],))
            elif rec.get("row"):
                ins[1] = Region(rec["args"][1], (r0, 0), (size[0], 1))
            elif rec.get("scalar"):
                ins[1] = Region(rec["args"][1], (0,), (1,))
            y = Region("y", *box)
            steps.append(TileStep(reads=ins, writes=[y], compute=_compute(rec, ins, y)))
        out.append(steps)
    return out


def _compute(rec, ins, y):
    def compute(view):
        args = [np.asarray(view(r), dtype=np.float32) for r in ins]
        if rec.get("bias"):
            args[1] = np.broadcast_to(args[1][None, :], args[0].shape)
        elif rec.get("row") or rec.get("scalar"):
            args[1] = np.broadcast_to(args[1].reshape(-1, 1), args[0].shape)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            result = NUMPY[rec["fn"]](*args)
        view(y)[...] = round_to(rec.get("out_dtype", rec["dtype"]), np.asarray(result, dtype=np.float32))
    return compute


# ------------------------------------------------------------------------------------------------ build()

def build(record, *, ip, loc=None):
    rec = KernelRecord(record)
    check(rec)
    with (loc or ir.Location.unknown()), ip:
        return _emit(rec)


def _sigmoid_ir(x):
    one = T.c(1.0, x.type)
    return arith.divf(one, arith.addf(one, math_d.exp(_neg(x))))


def _neg(x):
    # arith.negf has no lowering in Triton 3.6 (sm_90): 0 - x
    return arith.subf(T.c(0.0, x.type), x)


def _fn_ir(fn: str, a, b=None):
    if fn == "add":
        return arith.addf(a, b)
    if fn == "sub":
        return arith.subf(a, b)
    if fn == "mul":
        return arith.mulf(a, b)
    if fn == "div":
        return arith.divf(a, b)
    if fn == "max":
        return arith.maximumf(a, b)
    if fn == "min":
        return arith.minimumf(a, b)
    if fn == "neg":
        return _neg(a)
    if fn == "relu":
        return arith.maximumf(a, T.c(0.0, a.type))
    if fn == "exp":
        return math_d.exp(a)
    if fn == "sigmoid":
        return _sigmoid_ir(a)
    if fn == "silu":
        return arith.mulf(a, _sigmoid_ir(a))
    if fn == "silu_mul":
        return arith.mulf(arith.mulf(a, _sigmoid_ir(a)), b)
    if fn == "tanh":
        two = T.c(2.0, a.type)
        return arith.subf(arith.mulf(two, _sigmoid_ir(arith.mulf(two, a))), T.c(1.0, a.type))
    if fn == "gelu":
        half = T.c(0.5, a.type)
        inv_sqrt2 = T.c(1.0 / math.sqrt(2.0), a.type)
        erf = math_d.erf(arith.mulf(a, inv_sqrt2))
        return arith.mulf(arith.mulf(half, a), arith.addf(T.c(1.0, a.type), erf))
    if fn in ("copy", "cast"):
        return a
    raise _err(f"fn '{fn}' is unknown")


def _emit(rec):
    rows, cols = _dims(rec)
    bm, bn = rec["block_m"], rec["block_n"]
    elem, out_elem = T.dtype(rec["dtype"]), T.dtype(rec.get("out_dtype", rec["dtype"]))
    args = [(a, T.ptr(out_elem if a == "y" else elem), {"tt.divisibility": 16}) for a in rec["args"]]
    f, values = T.func(rec["name"], args, attrs={KERNEL_ATTR: rec.to_attr()})
    ptrs = dict(zip(rec["args"], values))
    with ir.InsertionPoint(f.regions[0].blocks[0]):
        tn, total = _tiles_n(rec), _num_tiles(rec)
        idx = T.dtype(offset_type(rec))
        with T.For(T.program_id(0), total, rec["grid"]) as loop:
            t = loop.iv
            r = T.add(T.expand_dims(T.make_range(0, bm), 1), T.mul(T.div(t, tn), bm))
            c = T.add(T.expand_dims(T.make_range(0, bn), 0), T.mul(T.rem(t, tn), bn))
            col_ok = T.lt(c, cols)
            mask = T.and_(T.broadcast(T.lt(r, rows), [bm, bn]), T.broadcast(col_ok, [bm, bn]))
            r, c = T.int_cast(r, idx), T.int_cast(c, idx)
            offs = T.add(T.broadcast(T.mul(r, T.c(cols, idx)), [bm, bn]), T.broadcast(c, [bm, bn]))
            ins = []
            for i, a in enumerate(rec["args"][:-1]):
                if i == 1 and rec.get("bias"):  # x1[c], the same for every row
                    x = T.broadcast(T.load(T.addptr(T.splat(ptrs[a], [1, bn]), c), col_ok), [bm, bn])
                elif i == 1 and (rec.get("row") or rec.get("scalar")):  # x1[r] (or x1[0]), the same for every column
                    p = T.splat(ptrs[a], [bm, 1])
                    x = T.broadcast(T.load(T.addptr(p, r) if rec.get("row") else p, T.lt(r, rows)), [bm, bn])
                else:
                    x = T.load(T.addptr(ptrs[a], offs), mask)
                ins.append(T.cast(x, "fp32"))
            y = _fn_ir(rec["fn"], *ins)
            T.store(T.addptr(ptrs["y"], offs), T.cast(y, out_elem), mask)
        T.ret()
    return f
