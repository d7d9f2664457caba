"""How the CPU views of kernels (``tiles()`` and ``interp``) hold and round numbers.

numpy has no bfloat16 or float8: values of those types are held in float32 arrays whose values are exactly
representable in the type (``storage_dtype``), and ``round_to`` rounds float32 results the way the GPU converts
them (round to nearest even; fp8 e4m3fn saturates to +-448 as ``cvt.rn.satfinite`` does).
"""
from __future__ import annotations

import contextlib
import functools

import numpy as np

FLOAT_DTYPES = ("bf16", "fp16", "fp32", "fp8e4m3", "fp8e5m2")


def storage_dtype(dtype: str) -> np.dtype:
    """The numpy dtype that holds values of a ditron dtype on the CPU."""
    if dtype in ("bf16", "fp32", "fp8e4m3", "fp8e5m2"):
        return np.dtype(np.float32)
    if dtype == "fp16":
        return np.dtype(np.float16)
    if dtype in ("i1", "i8", "i16", "i32", "i64"):
        return np.dtype({"i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64}[dtype])
    raise ValueError(f"unknown dtype '{dtype}'")


def _round_bf16(x: np.ndarray) -> np.ndarray:
    # in uint32: only NaN bit patterns (above 0xFFFF7FFF) can wrap, and NaNs are put back below
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF)
    rounded += (bits >> np.uint32(16)) & np.uint32(1)
    rounded &= np.uint32(0xFFFF0000)
    out = rounded.view(np.float32)
    nan = np.isnan(x)
    return np.where(nan, np.float32(np.nan), out) if nan.any() else out


@functools.cache
def _fp8_table(dtype: str) -> np.ndarray:
    """Every finite non-negative value of an fp8 type, ascending."""
    exp_bits, man_bits, bias = (4, 3, 7) if dtype == "fp8e4m3" else (5, 2, 15)
    values = []
    for e in range(2 ** exp_bits):
        for m in range(2 ** man_bits):
            if dtype == "fp8e4m3" and e == 15 and m == 7:
                continue  # NaN in e4m3fn (no infinities)
            if dtype == "fp8e5m2" and e == 31:
                continue  # inf / NaN
            if e == 0:
                values.append(m / 2 ** man_bits * 2.0 ** (1 - bias))
            else:
                values.append((1 + m / 2 ** man_bits) * 2.0 ** (e - bias))
    return np.array(sorted(values), dtype=np.float64)


def _round_fp8(x: np.ndarray, dtype: str) -> np.ndarray:
    table = _fp8_table(dtype)
    mag = np.minimum(np.abs(x.astype(np.float64)), table[-1])
    hi = np.clip(np.searchsorted(table, mag), 1, len(table) - 1)
    lo = hi - 1
    d_lo, d_hi = mag - table[lo], table[hi] - mag
    even_hi = (hi % 2) == 0  # mantissa LSB of consecutive codes alternates
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & even_hi)
    out = np.where(pick_hi, table[hi], table[lo]) * np.sign(x)
    return out.astype(np.float32)


_PRODUCTS: list = []  # providers installed by ``products``, innermost last


def matmul(a: np.ndarray, b: np.ndarray, rows: tuple[int, int] | None = None) -> np.ndarray:
    """``a @ b`` for the tile products of ``tiles()`` computes; a simulator may serve them from products it
    computes in larger blocks (``products``, ditron.sim.products), which hold the same values. ``rows``: where a
    is rows of a region of which only rows [lo, hi) (in the region's buffer) multiply this b -- a grouped GEMM's
    group -- the block may span those rows only (default: any)."""
    if not _PRODUCTS:
        return a @ b
    return _PRODUCTS[-1](a, b) if rows is None else _PRODUCTS[-1](a, b, rows)


@contextlib.contextmanager
def products(provider):
    """Within the block, ``matmul(a, b)`` is ``provider(a, b)``."""
    _PRODUCTS.append(provider)
    try:
        yield
    finally:
        _PRODUCTS.remove(provider)


def round_to(dtype: str, x) -> np.ndarray:
    """x (float32 results) rounded to dtype, in that dtype's storage."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "fp32":
        return x
    if dtype == "bf16":
        return _round_bf16(x)
    if dtype == "fp16":
        return x.astype(np.float16)
    if dtype in ("fp8e4m3", "fp8e5m2"):
        return _round_fp8(x, dtype)
    raise ValueError(f"cannot round to '{dtype}'")


def random(dtype: str, shape, rng: np.random.Generator, scale: float = 1.0) -> np.ndarray:
    """Random values representable in dtype (normal, times scale), in storage dtype."""
    if dtype.startswith("i"):
        return rng.integers(-8, 8, size=shape).astype(storage_dtype(dtype))
    return round_to(dtype, rng.standard_normal(shape).astype(np.float32) * scale).astype(storage_dtype(dtype))
