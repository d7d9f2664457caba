"""Tolerances derived from the float arithmetic a test checks, so that they hold on any machine and library version.

A kernel and its numpy reference may add the same terms in different orders (BLAS blocking, K steps, the order in
which ranks' partials arrive), and both then round to the output type. With ``n`` terms accumulated in a type of
unit roundoff ``u_acc`` (fp32: 2^-24), the textbook bound on the accumulation error of any order is
``gamma_n * sum|terms|`` with ``gamma_n = n u_acc / (1 - n u_acc)``; rounding to the output type adds at most
``u_out`` of the value. A comparison against the exact (float64) result therefore holds with

    |got - exact| <= u_out * (|exact| + gamma_n * sum|terms|) + gamma_n * sum|terms|

and is as tight as the arithmetic allows: a wrong term or a missed one is far outside it.
"""
from __future__ import annotations

import numpy as np

# half an ulp of 1.0: the largest relative error of rounding to nearest
UNIT_ROUNDOFF = {"fp32": 2.0 ** -24, "f32": 2.0 ** -24, "bf16": 2.0 ** -8, "fp16": 2.0 ** -11, "f16": 2.0 ** -11,
                 "fp8e4m3": 2.0 ** -4, "fp8e5m2": 2.0 ** -3}
# the smallest normal of each output type: below it rounding is absolute (subnormals)
TINY = {"fp32": 2.0 ** -126, "f32": 2.0 ** -126, "bf16": 2.0 ** -126, "fp16": 2.0 ** -14, "f16": 2.0 ** -14,
        "fp8e4m3": 2.0 ** -6, "fp8e5m2": 2.0 ** -14}


def accumulation_bound(abs_terms: np.ndarray, n_terms: int, out_dtype: str, acc_dtype: str = "fp32") -> np.ndarray:
    """Per element, the most a sum of ``n_terms`` terms (their absolute values summing to ``abs_terms``),
    accumulated in ``acc_dtype`` in any order and rounded to ``out_dtype``, may differ from the exact sum."""
    u_acc, u_out = UNIT_ROUNDOFF[acc_dtype], UNIT_ROUNDOFF[out_dtype]
    n = max(1, int(n_terms))
    gamma = n * u_acc / (1 - n * u_acc)
    abs_terms = np.asarray(abs_terms, np.float64)
    return gamma * abs_terms * (1 + u_out) + u_out * abs_terms + TINY[out_dtype]


def assert_sum_close(got, exact, abs_terms, n_terms: int, out_dtype: str, acc_dtype: str = "fp32") -> None:
    """``got`` (a kernel's result) equals the exact sum ``exact`` within ``accumulation_bound``."""
    got = np.asarray(got, np.float64)
    exact = np.asarray(exact, np.float64)
    bound = accumulation_bound(abs_terms, n_terms, out_dtype, acc_dtype)
    err = np.abs(got - exact)
    bad = ~(err <= bound)
    if bad.any():
        i = np.unravel_index(int(np.argmax(np.where(bad, err / np.maximum(bound, 1e-300), 0))), err.shape)
        raise AssertionError(f"{int(bad.sum())}/{bad.size} element(s) outside the rounding bound; worst at "
                             f"{tuple(int(j) for j in i)}: got {got[i]!r}, exact {exact[i]!r}, |error| {err[i]:.3g} > "
                             f"bound {bound[i]:.3g} ({n_terms} terms in {acc_dtype}, rounded to {out_dtype})")


def assert_matmul_close(got, a, b, out_dtype: str, acc_dtype: str = "fp32") -> None:
    """``got`` = a @ b (k products per element, accumulated in acc_dtype, rounded to out_dtype), against the
    float64 product."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert_sum_close(got, a @ b, np.abs(a) @ np.abs(b), a.shape[-1], out_dtype, acc_dtype)
