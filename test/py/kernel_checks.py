"""Shared helpers of the kernel-template tests (test_kernels*.py, test_epilogue_scales.py, test_fp8_speed.py, ...):
emit a template's IR, re-parse or compile it with Triton, run it in the numpy interpreter beside the template's
``tiles()``, and the small GEMM problems the tests share."""
from __future__ import annotations

import math
import os
import tempfile

import numpy as np
from mlir import ir

from ditron.dialects import ditron_context
from ditron.kernels import KernelRecord, gemm, get_template, interp
from ditron.kernels.numerics import random, round_to, storage_dtype
from ditron.dialects import ttir as T

RNG_SEED = 1234


def _lower_available() -> bool:
    try:
        from ditron.passes.lower_core_to_triton import LowerCoreToTritonPass  # noqa: F401
        from ditron.backends import get_backend  # noqa: F401
    except ImportError:
        return False
    return True


def emit(rec, *, lower: str | None = None) -> str:
    """The record's kernel as generic-form text; ``lower``: run ditron-lower-core-to-triton for that target."""
    with ditron_context():
        module = ir.Module.create()
        get_template(rec["template"]).build(rec, ip=ir.InsertionPoint(module.body))
        assert module.operation.verify()
        if lower is not None:
            from ditron.passes.lower_core_to_triton import LowerCoreToTritonPass
            LowerCoreToTritonPass(target=lower).run(module)
        return T.module_text(module)


def triton_parse(text: str, target=("cuda", 90, 32)) -> None:
    """Triton's own parser must accept the text (raises RuntimeError otherwise)."""
    from triton._C.libtriton import ir as tir
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    ctx = tir.context()
    tir.load_dialects(ctx)
    make_backend(GPUTarget(*target)).load_dialects(ctx)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ttir")
        with open(path, "w") as f:
            f.write(text)
        tir.parse_mlir_module(path, ctx)


def compile_text(text: str, target: str, num_warps: int, num_stages: int):
    """(asm dict, binary bytes) through ditron's backend (or triton.compile while the backend is missing)."""
    try:
        from ditron.backends import get_backend
    except ImportError:
        get_backend = None
    if get_backend is not None:
        be = get_backend(target)
        k = be.compile(text, be.options(num_warps=num_warps, num_stages=num_stages))
        return k.asm, k.binary
    import triton
    from triton.backends.compiler import GPUTarget
    vendor, arch = target.split(":")
    tgt = GPUTarget("cuda", int(arch), 32) if vendor == "cuda" else GPUTarget("hip", arch, 64)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ttir")
        with open(path, "w") as f:
            f.write(text)
        c = triton.compile(path, target=tgt, options={"num_warps": num_warps, "num_stages": num_stages})
    return c.asm, c.asm["cubin" if vendor == "cuda" else "hsaco"]


def run_both(rec, memory: dict, lds: dict, *, ranks=(0,), num_ranks: int = 1, scalars=None):
    """Run the IR (interpreter) and tiles() for each rank in order on copies of memory; check their traces
    agree; return (memory after the IR, memory after tiles())."""
    scalars = scalars or {}
    mod = get_template(rec["template"])
    mem_ir = {k: v.copy() for k, v in memory.items()}
    mem_tiles = {k: v.copy() for k, v in memory.items()}
    with ditron_context():
        module = ir.Module.create()
        func = mod.build(rec, ip=ir.InsertionPoint(module.body))
        assert KernelRecord.of(func) == rec
        for rank in ranks:
            events = interp.run(func, mem_ir, grid=mod.grid(rec)[0], rank=rank, num_ranks=num_ranks,
                                scalars=scalars)
            steps = mod.tiles(rec, rank=rank, num_ranks=num_ranks, scalars=scalars)
            interp.compare_trace(steps, events, rank=rank, lds=lds)
            interp.apply_tiles(steps, mem_tiles, rank=rank, lds=lds)
    return mem_ir, mem_tiles


def close(got, want, tol=1e-2):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)



# GEMM problems: small tiles, A and B of a record and the numpy reference

SMALL = dict(block_m=32, block_n=32, block_k=16, group_m=2, num_sms=3)


def gemm_memory(rec, rng):
    m, n, k = rec["m"], rec["n"], rec["k"]
    a = random(rec["in_dtype"], (m, rec["lda"]), rng)
    b = random(rec["in_dtype"], (n, rec["ldb"]) if rec["b_trans"] else (k, rec["ldb"]), rng)
    mem = {("a", 0): a.ravel().copy(), ("b", 0): b.ravel().copy(),
           ("c", 0): np.zeros(m * rec["ldc"], storage_dtype(rec["out_dtype"]))}
    for name, (shape, dtype) in (gemm.scratch(rec) or {}).items():
        mem[(name, 0)] = np.zeros(math.prod(shape), np.float32 if dtype == "fp32" else np.int32)
    ref = a[:, :k].astype(np.float32) @ (b[:, :k].T if rec["b_trans"] else b[:, :n]).astype(np.float32)
    return mem, ref


def rank_products(W: int, m: int, n: int, k: int, rng):
    """One A for every rank, a B per rank and each rank's A @ B rounded to bf16 (the partials of a GEMM+AR/RS)."""
    a = random("bf16", (m * k,), rng)
    bs = [random("bf16", (k * n,), rng) for _ in range(W)]
    return a, bs, [round_to("bf16", a.reshape(m, k).astype(np.float32) @ b.reshape(k, n).astype(np.float32))
                   for b in bs]


def gemm_lds(rec):
    return {"a": rec["lda"], "b": rec["ldb"], "c": rec["ldc"], "locks": None,
            "workspace": gemm.scratch(rec)["workspace"][0][1] if gemm.scratch(rec) else None}

