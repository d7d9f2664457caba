"""CPU tests of the kernel templates (ditron.kernels: gemm, copy, reduce).

Three views are checked against each other on small problems, including shapes that do not divide evenly:
the emitted IR run by the numpy interpreter (ditron.kernels.interp), the template's ``tiles()`` run on the same
data, and numpy itself. The IR's trace (waits, elements read and written, notifies per tile, per program) must
match ``tiles()`` exactly. Emitted modules are re-parsed by Triton, and a few are compiled to machine code:
wgmma in the sm_90 GEMM, v_mfma on gfx942, vector loads through symm_at.
"""
from __future__ import annotations

import math
import os
import tempfile

import re

import numpy as np
import pytest
from mlir import ir

from ditron.dialects import ditron_context
from ditron.errors import VerificationError
from ditron.kernels import KERNEL_ATTR, KernelRecord, chunk, copy, expanded, gemm, get_template, interp, reduce
from ditron.dialects import ttir as T
from ditron.kernels.numerics import random, round_to, storage_dtype
from tolerances import assert_matmul_close, assert_sum_close

RNG_SEED = 1234


# ------------------------------------------------------------------------------------------------ helpers

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


# ------------------------------------------------------------------------------------------------ GEMM

SMALL = dict(block_m=32, block_n=32, block_k=16, group_m=2, num_sms=3)

GEMM_CASES = {
    "pointer-plain-ragged": dict(m=70, n=50, k=40, loads="pointer", store="pointer", persistent=False,
                                 epilogue_split=1, flatten=False),
    "tma-persistent-flat-split-epilogue": dict(m=70, n=56, k=40, loads="tma", store="tma", persistent=True,
                                               epilogue_split=2, flatten=True),
    "tma-bT-rowmajor-pointer-store": dict(m=45, n=64, k=72, b_trans=True, tile_order="row_major", loads="tma",
                                          store="pointer", persistent=True, epilogue_split=1, flatten=False),
    "pointer-bT-fp16-to-fp32-persistent": dict(m=33, n=47, k=35, in_dtype="fp16", out_dtype="fp32", b_trans=True,
                                               loads="pointer", store="pointer", persistent=True, epilogue_split=1,
                                               flatten=False),
    "fp8-pointer": dict(m=40, n=48, k=64, in_dtype="fp8e4m3", out_dtype="bf16", loads="pointer", store="pointer",
                        persistent=False, epilogue_split=1, flatten=False),
    "fp8-tma-bT": dict(m=40, n=48, k=64, in_dtype="fp8e4m3", out_dtype="fp16", b_trans=True, loads="tma",
                       store="tma", persistent=False, epilogue_split=1, flatten=False),
    "splitk3-pointer": dict(m=70, n=40, k=200, loads="pointer", store="pointer", persistent=False, split_k=3,
                            epilogue_split=1, flatten=False, num_sms=100),
    # K a multiple of block_k, K tiles not a multiple of the splits (7 = 3 + 3 + 1): the last split stops at K
    # (it read a whole K tile past it -- wrong sums on the GPU -- before)
    "splitk3-pointer-uneven-splits": dict(m=70, n=40, k=112, loads="pointer", store="pointer", persistent=False,
                                          split_k=3, epilogue_split=1, flatten=False, num_sms=100),
    "splitk2-tma": dict(m=64, n=64, k=96, loads="tma", store="pointer", persistent=False, split_k=2,
                        epilogue_split=1, flatten=False, num_sms=100),
    "streamk2-pointer": dict(m=70, n=50, k=200, loads="pointer", store="pointer", persistent=True, stream_k=2,
                             epilogue_split=1, flatten=False, num_sms=4),
    "streamk6-tma-three-programs-per-tile": dict(m=70, n=56, k=200, loads="tma", store="tma", persistent=True,
                                                 stream_k=6, epilogue_split=1, flatten=False, num_sms=16),
    "streamk6-bT-pointer-whole-and-partial": dict(m=70, n=50, k=200, b_trans=True, loads="pointer",
                                                  store="pointer", persistent=True, stream_k=6, epilogue_split=1,
                                                  flatten=False, num_sms=4),
    "strided-lda-ldc": dict(m=50, n=40, k=30, lda=48, ldc=64, loads="pointer", store="pointer", persistent=True,
                            epilogue_split=1, flatten=False),
    "tma-strided-ragged-k": dict(m=50, n=40, k=30, lda=48, ldc=64, loads="tma", store="tma", persistent=True,
                                 epilogue_split=1, flatten=True),
}


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


@pytest.mark.parametrize("case", sorted(GEMM_CASES))
def test_gemm_ir_matches_tiles_and_numpy(case):
    fields = dict(SMALL, **GEMM_CASES[case])
    m, n, k = fields.pop("m"), fields.pop("n"), fields.pop("k")
    rec = gemm.make_record(m, n, k, name=f"gemm_{case.replace('-', '_')}", **fields)
    mem, ref = gemm_memory(rec, np.random.default_rng(RNG_SEED))
    mem_ir, mem_tiles = run_both(rec, mem, gemm_lds(rec))
    c_ir = mem_ir[("c", 0)].reshape(m, rec["ldc"])[:, :n]
    c_tiles = mem_tiles[("c", 0)].reshape(m, rec["ldc"])[:, :n]
    close(c_ir, round_to(rec["out_dtype"], ref))
    close(c_tiles, c_ir)
    assert not mem_ir[("c", 0)].reshape(m, rec["ldc"])[:, n:].any(), "wrote past column n"
    if gemm.scratch(rec):
        assert not mem_ir[("locks", 0)].any(), "split-K and stream-K must leave their locks at zero"
    triton_parse(emit(rec, lower="cuda:90"))


@pytest.mark.parametrize("loads", ["pointer", "tma"])
def test_gemm_wait_notify_rank_rotated_matches_tiles(loads):
    """AG+GEMM shape: 4 ranks' rows, each rank starts on its own rows, waits per tile on the slots of the rows it
    reads and notifies the owner of the rows it wrote."""
    W, rows_per_rank = 4, 24
    rec = gemm.make_record(W * rows_per_rank, 40 if loads == "pointer" else 48, 32, name="ag_gemm",
                           tile_order="rank_rotated", rows_per_rank=rows_per_rank,
                           wait={"arg": "a_sig", "rows_per_slot": 12},
                           notify={"arg": "c_sig", "rows_per_slot": 8, "peer": "slot_owner"},
                           loads=loads, store="pointer", persistent=True, epilogue_split=1, flatten=False,
                           **dict(SMALL, block_m=16, num_sms=4))
    assert rec["args"] == ["a", "b", "c", "a_sig", "wait_value", "c_sig"]
    rng = np.random.default_rng(RNG_SEED)
    mem, ref = gemm_memory(rec, rng)
    n_slots = math.ceil(rec["m"] / 8)
    for r in range(W):
        mem[("a", r)], mem[("b", r)] = mem[("a", 0)], mem[("b", 0)]
        mem[("c", r)] = np.zeros_like(mem[("c", 0)])
        mem[("a_sig", r)] = np.full(rec["m"] // 12 + 1, 3, np.int32)
        mem[("c_sig", r)] = np.zeros(n_slots, np.int32)
    mem_ir, mem_tiles = run_both(rec, mem, gemm_lds(rec) | {"a_sig": None, "c_sig": None}, ranks=range(W),
                                 num_ranks=W, scalars={"wait_value": 3})
    for r in range(W):
        close(mem_ir[("c", r)].reshape(rec["m"], -1), round_to("bf16", ref))
        np.testing.assert_array_equal(mem_ir[("c_sig", r)], mem_tiles[("c_sig", r)])
    counts = {slot: gemm.notify_count(rec, slot) for slot in gemm.notify_slots(rec)}
    total = sum(mem_ir[("c_sig", r)] for r in range(W))  # every rank's launch notified slot owners
    for slot, expected in counts.items():
        assert total[slot] == W * expected
    # rank 2 starts on its own rows: the first tile of program 0 reads A rows 48..63
    first = gemm.tiles(rec, rank=2, num_ranks=W, scalars={"wait_value": 3})[0][0]
    assert first.reads[0].offsets[0] == 2 * rows_per_rank
    assert [w.slot for w in first.waits] == [4, 5]


@pytest.mark.parametrize("loads,num_sms", [("pointer", 4), ("tma", 7)])
def test_gemm_stream_k_with_waits_matches_tiles(loads, num_sms):
    """AG+GEMM's consumer with stream-K: rank-rotated tiles that wait on their rows' slots; the data-parallel tiles
    first, then the last tiles shared out by K steps -- every piece waits for its rows, owners wait for the lower
    programs' partials, add them, store C and leave the locks zero. Ragged M, N and K."""
    W, rows_per_rank, m, n, k = 3, 24, 72, 88 if loads == "pointer" else 96, 150 if loads == "pointer" else 152
    probe = gemm.make_record(m, n, k, loads=loads, store="pointer", persistent=True, epilogue_split=1,
                             flatten=False, **dict(SMALL, block_m=16, num_sms=num_sms))
    tiles = gemm.geometry(probe).tiles
    sk = tiles % num_sms + num_sms
    rec = gemm.make_record(m, n, k, name="ag_gemm_sk", tile_order="rank_rotated", rows_per_rank=rows_per_rank,
                           wait={"arg": "a_sig", "rows_per_slot": 12}, loads=loads, store="pointer",
                           persistent=True, epilogue_split=1, flatten=False, stream_k=sk,
                           **dict(SMALL, block_m=16, num_sms=num_sms))
    assert rec["args"] == ["a", "b", "c", "a_sig", "wait_value", "workspace", "locks"]
    segs = [gemm.stream_k_segments(rec, p) for p in range(num_sms)]
    assert any(c for prog in segs for *_, c in prog), "some owner must add a lower program's partial"
    assert sum(k1 - k0 for prog in segs for _, k0, k1, _ in prog) == sk * gemm.geometry(rec).k_tiles
    rng = np.random.default_rng(RNG_SEED)
    mem, ref = gemm_memory(rec, rng)
    for r in range(W):
        for key in ("a", "b", "workspace", "locks"):
            mem[(key, r)] = mem[(key, 0)].copy()
        mem[("c", r)] = np.zeros_like(mem[("c", 0)])
        mem[("a_sig", r)] = np.full(m // 12, 3, np.int32)
    mem_ir, mem_tiles = run_both(rec, mem, gemm_lds(rec) | {"a_sig": None}, ranks=range(W), num_ranks=W,
                                 scalars={"wait_value": 3})
    for r in range(W):
        close(mem_ir[("c", r)].reshape(m, n), round_to("bf16", ref))
        close(mem_tiles[("c", r)], mem_ir[("c", r)])
        assert not mem_ir[("locks", r)].any()
    triton_parse(emit(rec, lower="cuda:90"))
    bad = dict(loads=loads, store="pointer", epilogue_split=1, **dict(SMALL, block_m=16, num_sms=num_sms))
    with pytest.raises(VerificationError, match="not a multiple of the"):
        gemm.make_record(m, n, k, persistent=True, flatten=False, stream_k=sk + 1, **bad)
    with pytest.raises(VerificationError, match="stream_k works with persistent, unflattened kernels"):
        gemm.make_record(m, n, k, persistent=False, flatten=False, stream_k=sk, **bad)
    with pytest.raises(VerificationError, match="stream_k works with persistent, unflattened kernels"):
        gemm.make_record(m, n, k, persistent=True, flatten=False, stream_k=sk, **bad,
                         notify={"arg": "s", "rows_per_slot": 16})
    with pytest.raises(VerificationError, match=r"must be a number of tiles in \[0, "):
        gemm.make_record(m, n, k, persistent=True, flatten=False, stream_k=tiles + num_sms, **bad)
    with pytest.raises(VerificationError, match="fewer K steps than the"):
        gemm.make_record(16, 16 * (num_sms + 1), 16, persistent=True, flatten=False, stream_k=1,
                         **dict(bad, block_m=16, block_n=16))


def _run_gather(rec, W: int, shard: int, blocks: int):
    """A gathering GEMM on W ranks one after the other, as if the peers' rows and counts had landed already (and
    not the own ones; the pad's slots W.. count the waiters): (the shards, the wanted C, IR memory, tiles()
    memory)."""
    m, n, k = rec["m"], rec["n"], rec["k"]
    rng = np.random.default_rng(RNG_SEED)
    xs = [random("bf16", (shard * k,), rng) for _ in range(W)]
    b = random("bf16", (k * n,), rng)
    mem = {}
    for r in range(W):
        a = np.concatenate(xs)
        a[r * shard * k:(r + 1) * shard * k] = 0
        mem[("a", r)], mem[("b", r)], mem[("x", r)] = a, b.copy(), xs[r].copy()
        mem[("c", r)] = np.zeros(m * n, np.float32)
        mem[("ready", r)] = np.array([0 if q == r else blocks for q in range(W)] + [0] * W, np.int32)
    mem_ir, mem_tiles = run_both(rec, mem, gemm_lds(rec) | {"x": k, "ready": None}, ranks=range(W), num_ranks=W,
                                 scalars={"wait_value": blocks})
    want = round_to("bf16", np.concatenate(xs).reshape(m, k).astype(np.float32) @ b.reshape(k, n).astype(np.float32))
    return xs, want, mem_ir, mem_tiles


@pytest.mark.parametrize("W,shard,block_m", [(2, 20, 32), (3, 16, 16)])
def test_gemm_gather_prologue_matches_tiles(W, shard, block_m):
    """AG+GEMM in one launch (gather): each program first copies its blocks of the rank's shard x into A on every
    rank (the peers first) and counts each block in slot rank of every rank's ready pad; the tiles wait until the
    slots of their rows count every block of those ranks. Ranks run one after the other here (the simulator checks
    the concurrent protocol): the peers' rows and counts are already there, and each rank's own count reaches the
    blocks of its shard through its own prologue (one program: the interpreter runs programs one after the other
    too). Shards of 20 rows and k = 40 leave ragged blocks; with three programs, program p copies blocks p, p + 3,
    ..."""
    m, n, k = W * shard, 48, 40
    rec = gemm.make_record(m, n, k, wait={"arg": "ready", "rows_per_slot": shard}, gather={"arg": "x",
                           "block": [8, 16]}, rows_per_rank=shard, loads="pointer", store="pointer",
                           epilogue_split=1, flatten=False, persistent=True, **dict(SMALL, block_m=block_m,
                                                                                    num_sms=1))
    assert rec["args"] == ["a", "b", "c", "ready", "wait_value", "x"]
    blocks = gemm.gather_blocks(rec)
    assert blocks == -(-shard // 8) * 3
    xs, want, mem_ir, mem_tiles = _run_gather(rec, W, shard, blocks)
    for r in range(W):
        close(mem_ir[("c", r)].reshape(m, n), want)
        np.testing.assert_array_equal(mem_ir[("a", r)], np.concatenate(xs))
        close(mem_tiles[("c", r)], mem_ir[("c", r)])
        # the last waiter of each slot took one call's counts off (the peers' own launches added theirs on top of
        # the ones set up as landed); every waiter count back to 0
        np.testing.assert_array_equal(mem_ir[("ready", r)], [0 if q == r else blocks for q in range(W)] + [0] * W)
        np.testing.assert_array_equal(mem_tiles[("ready", r)], mem_ir[("ready", r)])
    waiters = [gemm.gather_waiters(gemm.PyOps, rec, gemm.geometry(rec), s) for s in range(W)]
    assert waiters == [len(range(s * shard // block_m, ((s + 1) * shard - 1) // block_m + 1)) * 2 for s in range(W)]
    three = gemm.make_record(m, n, k, wait={"arg": "ready", "rows_per_slot": shard}, gather={"arg": "x",
                             "block": [8, 16]}, rows_per_rank=shard, loads="pointer", store="pointer",
                             persistent=True, **dict(SMALL, block_m=block_m))
    steps = gemm.tiles(three, rank=1, num_ranks=W, scalars={"wait_value": blocks})
    assert len(steps) == 3 and [len([st for st in prog if not st.waits]) for prog in steps] == \
        [len(range(p, blocks, 3)) for p in range(3)]
    copies = [st for prog in steps for st in prog if not st.waits]
    assert all([d.rank for d in st.writes] == [(1 + d) % W for d in range(1, W + 1)] for st in copies)
    assert {(st.reads[0].offsets, st.writes[0].offsets[0] - shard) for st in copies} == \
        {((r, c), r) for r in range(0, shard, 8) for c in range(0, k, 16)}
    with pytest.raises(VerificationError, match="'gather' needs loads='pointer'"):
        gemm.make_record(m, n, k, wait={"arg": "ready", "rows_per_slot": shard}, gather={"arg": "x"},
                         rows_per_rank=shard, loads="tma", store="pointer", persistent=True)
    with pytest.raises(VerificationError, match="wait.rows_per_slot = rows_per_rank"):
        gemm.make_record(m, n, k, wait={"arg": "ready", "rows_per_slot": 4}, gather={"arg": "x"},
                         rows_per_rank=shard, loads="pointer", store="pointer", persistent=True)
    with pytest.raises(VerificationError, match="every program resident"):
        gemm.make_record(m, n, k, wait={"arg": "ready", "rows_per_slot": shard}, gather={"arg": "x"},
                         rows_per_rank=shard, loads="pointer", store="pointer", persistent=False, num_sms=1,
                         block_m=16, block_n=16)


@pytest.mark.parametrize("W,num_sms", [(2, 6), (3, 5), (2, 3)])
def test_gemm_gather_own_tiles_read_the_shard_and_copiers_count(W, num_sms):
    """AG+GEMM in one launch, rank-rotated: the tiles of the rank's own rows lead every program's list and read the
    shard itself, without a wait. With fewer own tiles than programs (6 or 5 programs, 4 own tiles of 2 + 2 ragged
    column blocks) the programs without one copy the shard and count it at once; with more (3 programs) every
    program copies and counts its blocks after its own tiles. Ranks run one after the other (the peers' rows and
    counts are there already, as in the test above)."""
    shard, m, n, k = 32, W * 32, 48, 40
    rec = gemm.make_record(m, n, k, wait={"arg": "ready", "rows_per_slot": shard}, gather={"arg": "x",
                           "block": [8, 16]}, rows_per_rank=shard, tile_order="rank_rotated", loads="pointer",
                           store="pointer", epilogue_split=1, flatten=False, persistent=True,
                           **dict(SMALL, block_m=16, num_sms=num_sms))
    own, first, blocks = gemm.gather_own_tiles(rec), gemm.gather_copiers(rec), gemm.gather_blocks(rec)
    assert own == 4 and first == (own if own < num_sms else 0)
    xs, want, mem_ir, mem_tiles = _run_gather(rec, W, shard, blocks)
    for r in range(W):
        close(mem_ir[("c", r)].reshape(m, n), want)
        close(mem_tiles[("c", r)], mem_ir[("c", r)])
        np.testing.assert_array_equal(mem_ir[("a", r)], np.concatenate(xs))
        # the own launch counted its blocks on the peers (not in its own slot: nothing waits there), and consumed
        # the peers' counts it found (the last waiter of each slot took them off)
        np.testing.assert_array_equal(mem_ir[("ready", r)], [0 if q == r else blocks for q in range(W)] + [0] * W)
        np.testing.assert_array_equal(mem_tiles[("ready", r)], mem_ir[("ready", r)])
    steps = gemm.tiles(rec, rank=1, num_ranks=W, scalars={"wait_value": blocks})
    for p, prog in enumerate(steps):
        copied = [st for st in prog if st.writes and st.writes[0].arg == "a"]
        assert bool(copied) == (p >= first and p - first < blocks)
        own_steps = [st for st in prog if st.reads[0].arg == "x" and st.writes[0].arg == "c"]
        assert len(own_steps) == len(range(p, own, num_sms)) and not any(st.waits for st in own_steps)
        counted = [st for st in prog if any(nt.op == "add" for nt in st.notifies)]
        assert len(counted) == (1 if copied else 0)
        # every other tile waits for a peer's rows and arrives at that slot's count (slot W + q)
        waited = [st for st in prog if st.waits]
        assert all([(nt.op, nt.slot, nt.consumes) for nt in st.notifies] ==
                   [("arrive", W + w.slot, (w.slot, blocks)) for w in st.waits] for st in waited)
        assert all(w.slot != 1 for st in waited for w in st.waits)
        if copied:  # right after the copies, or after the own tiles where every program has one
            assert counted[0] is (own_steps[-1] if own >= num_sms else copied[-1])
            assert {nt.value for nt in counted[0].notifies} == {len(copied)}
            assert sorted(nt.rank for nt in counted[0].notifies) == [q for q in range(W) if q != 1]


def _sum_pushed(mem_ir, W: int, rows: int, n: int, expect: int):
    """The reduce launch that sums a GEMM push's results (publish.push, pushed counts): each rank's own c and the
    W - 1 inbox slabs, every slot awaited at ``expect``; run in both interpreters -> (record, ir mem, tiles mem)."""
    red = reduce.make_record(rows, n, dtype="bf16", block_m=8, block_n=32, grid=3,
                             publish={"arg": "pushed", "value_arg": "expect", "copy_from": "c", "push": W - 1,
                                      "pushed": 16})
    rmem = {}
    for r in range(W):
        rmem[("src", r)], rmem[("c", r)] = mem_ir[("inbox", r)].copy(), mem_ir[("c", r)].copy()
        rmem[("pushed", r)], rmem[("dst", r)] = mem_ir[("pushed", r)].copy(), np.zeros(rows * n, np.float32)
    r_ir, r_tiles = run_both(red, rmem, {"src": n, "dst": n, "c": n, "pushed": None}, ranks=range(W), num_ranks=W,
                             scalars={"expect": expect})
    return red, r_ir, r_tiles


@pytest.mark.parametrize("W,split", [(2, 1), (3, 1), (2, 2), (3, 3)])
def test_gemm_push_then_reduce_pushed_match_tiles(W, split):
    """GEMM+AR by push: each rank's GEMM stores every C tile into c and into its slab of every peer's inbox, and
    adds 1 to the peer's slot of the tile's row block (split-K: the last split, with the sum); then the reduce
    template (publish.pushed) sums c with the inbox once those slots count every column tile. Ranks run one after
    the other (the simulator checks the concurrent protocol), each GEMM on its own B."""
    m, n, k = 40, 48, 32 * split
    shape = dict(persistent=True, num_sms=3) if split == 1 else dict(persistent=False, num_sms=6 * split)
    rec = gemm.make_record(m, n, k, push={"arg": "inbox", "pad": "pushed", "slabs": W - 1}, loads="pointer",
                           store="pointer", epilogue_split=1, flatten=False, split_k=split,
                           **dict(SMALL, block_m=16, **shape))
    assert rec["args"] == ["a", "b", "c", "inbox", "pushed"] + (["workspace", "locks"] if split > 1 else [])
    tiles_m, tiles_n = 3, -(-n // rec["block_n"])
    rng = np.random.default_rng(RNG_SEED)
    mem, _ = gemm_memory(rec, rng)
    refs = []
    for r in range(W):
        if split > 1:
            mem[("workspace", r)], mem[("locks", r)] = mem[("workspace", 0)].copy(), mem[("locks", 0)].copy()
        mem[("a", r)], mem[("b", r)] = mem[("a", 0)], random("bf16", (k * n,), rng)
        refs.append(round_to("bf16", mem[("a", r)].reshape(m, k).astype(np.float32)
                             @ mem[("b", r)].reshape(k, n).astype(np.float32)))
        mem[("c", r)] = np.zeros(m * n, np.float32)
        mem[("inbox", r)] = np.zeros((W - 1) * m * n, np.float32)
        mem[("pushed", r)] = np.zeros((W - 1) * tiles_m, np.int32)
    mem_ir, mem_tiles = run_both(rec, mem, gemm_lds(rec) | {"inbox": n, "pushed": None}, ranks=range(W),
                                 num_ranks=W)
    for r in range(W):
        close(mem_ir[("c", r)].reshape(m, n), refs[r])
        for j in range(1, W):  # slab j - 1 holds rank r + j's C, every row block counted tiles_n times
            close(mem_ir[("inbox", r)].reshape(W - 1, m, n)[j - 1], refs[(r + j) % W])
        np.testing.assert_array_equal(mem_ir[("pushed", r)], np.full((W - 1) * tiles_m, tiles_n))
        np.testing.assert_array_equal(mem_tiles[("inbox", r)], mem_ir[("inbox", r)])
        if split > 1:  # the last splits left their locks zero
            assert not mem_ir[("locks", r)].any()
    if split > 1:
        return
    red, r_ir, r_tiles = _sum_pushed(mem_ir, W, m, n, tiles_n)
    assert red["args"] == ["src", "dst", "c", "pushed", "expect"]
    for r in range(W):
        want = round_to("bf16", sum(mem_ir[("c", (r + j) % W)].astype(np.float32) for j in range(W)))
        np.testing.assert_array_equal(r_ir[("dst", r)], want)
        np.testing.assert_array_equal(r_tiles[("dst", r)], r_ir[("dst", r)])
    steps = reduce.tiles(red, rank=0, num_ranks=W, scalars={"expect": tiles_n})[1]
    assert not any(st.notifies for st in steps)  # no pushes of its own
    # program 1's first tile: rows 8..15 (row block 0), then rows 32..39 (block 2): slots slab * 3 + block
    assert [w.slot for w in steps[0].waits] == [j * 3 for j in range(W - 1)]
    with pytest.raises(VerificationError, match="a world of 3 ranks needs 2"):
        gemm.tiles(gemm.make_record(m, n, k, push={"arg": "i", "pad": "p", "slabs": 1}, loads="pointer",
                                    store="pointer", **SMALL), rank=0, num_ranks=3, scalars={})
    with pytest.raises(VerificationError, match="'push' works without notify and reduce_own, with store='pointer'"):
        gemm.make_record(m, n, k, push={"arg": "i", "pad": "p", "slabs": 1}, store="tma", loads="tma")
    with pytest.raises(VerificationError, match="'push' needs 'arg'"):
        gemm.make_record(m, n, k, push={"arg": "i", "slabs": 1}, loads="pointer", store="pointer")


@pytest.mark.parametrize("W,split", [(2, 1), (3, 1), (2, 2), (3, 3)])
def test_gemm_push_sum_is_an_all_reduce_in_one_launch(W, split):
    """GEMM+AR in one launch (push.sum): each tile, rounded, goes into every peer's inbox slab with the peer's slot
    t * slabs + slab set; then, once its own slots are set, the tile plus the inbox tiles is stored to c and the own
    slots are cleared -- on persistent programs beyond one wave after the program's next tile was pushed, its own
    part waiting in c meanwhile. Ranks run one after the other here, so each rank's inbox and slots start as the peers will
    leave them (the simulator checks the concurrent protocol). Ragged rows and columns; split-K: the last split of a
    tile pushes and sums the tile."""
    m, n, k = 40, 44, 32 * split
    shape = dict(persistent=True, num_sms=3) if split == 1 else dict(persistent=False, num_sms=6 * split)
    rec = gemm.make_record(m, n, k, push={"arg": "inbox", "pad": "pushed", "slabs": W - 1, "sum": True,
                                          "value_arg": "expect"}, loads="pointer", store="pointer", epilogue_split=1,
                           flatten=False, split_k=split, **dict(SMALL, block_m=16, **shape))
    assert rec["args"] == ["a", "b", "c", "inbox", "pushed", "expect"] + (["workspace", "locks"] if split > 1 else [])
    g = gemm.geometry(rec)
    a, bs, tiles = rank_products(W, m, n, k, np.random.default_rng(RNG_SEED))
    mem = {}
    for r in range(W):
        mem[("a", r)], mem[("b", r)], mem[("c", r)] = a, bs[r], np.zeros(m * n, np.float32)
        mem[("inbox", r)] = np.concatenate([tiles[(r + j) % W].ravel() for j in range(1, W)]).astype(np.float32)
        mem[("pushed", r)] = np.full(g.tiles * (W - 1), 7, np.int32)
        if split > 1:
            mem[("workspace", r)] = np.zeros((split - 1) * m * n, np.float32)
            mem[("locks", r)] = np.zeros(g.tiles, np.int32)
    mem_ir, mem_tiles = run_both(rec, mem, gemm_lds(rec) | {"inbox": n, "pushed": None}, ranks=range(W),
                                 num_ranks=W, scalars={"expect": 7})
    want = round_to("bf16", sum(t.astype(np.float32) for t in tiles))
    for r in range(W):
        close(mem_ir[("c", r)].reshape(m, n), want)
        close(mem_tiles[("c", r)], mem_ir[("c", r)])
        for j in range(1, W):
            close(mem_ir[("inbox", r)].reshape(W - 1, m, n)[j - 1], tiles[(r + j) % W])
    # the last rank cleared its own slots (the others' were set again by the ranks after them)
    assert not mem_ir[("pushed", W - 1)].any() and not mem_tiles[("pushed", W - 1)].any()
    if split > 1:
        return
    # three programs, two tiles each: each tile's sum after the next tile's push (the own part waits in c), so a
    # program never stalls between two K loops; the last tile's sum ends the program
    assert gemm.deferred_sum(rec) and g.tiles == 2 * g.grid
    steps = gemm.tiles(rec, rank=0, num_ranks=W, scalars={"expect": 7})[0]
    assert [bool(st.waits) for st in steps] == [False, False, True, True]
    assert all(st.writes[-1].arg == "c" for st in steps)  # the own part into c, then the sum over it
    with pytest.raises(VerificationError, match="'push.sum' needs every program resident"):
        gemm.make_record(m, n, k, push={"arg": "i", "pad": "p", "slabs": 1, "sum": True, "value_arg": "v"},
                         loads="pointer", store="pointer", persistent=False, **dict(SMALL, block_m=16, num_sms=2))
    with pytest.raises(VerificationError, match="'push.sum' needs 'value_arg'"):
        gemm.make_record(m, n, k, push={"arg": "i", "pad": "p", "slabs": 1, "sum": True}, loads="pointer",
                         store="pointer", **SMALL)


def _owner_push(W: int, spec: dict, **fields):
    """A GEMM+RS by push (push.owner + spec) of W ranks' rows, 32 each, n = 44 (ragged 32-column tiles), k = 32;
    -> (record, rows per rank, n, A, each rank's B, each rank's rounded partial)."""
    R, n, k = 32, 44, 32
    rec = gemm.make_record(W * R, n, k, push={"arg": "inbox", "pad": "pushed", "slabs": W - 1, "owner": True, **spec},
                           rows_per_rank=R, tile_order="rank_rotated", rank_shift=1, loads="pointer",
                           store="pointer", epilogue_split=1, flatten=False, **dict(SMALL, block_m=16, **fields))
    return (rec, R, n) + rank_products(W, W * R, n, k, np.random.default_rng(RNG_SEED))


@pytest.mark.parametrize("W", [2, 3, 4])
def test_gemm_push_owner_then_reduce_pushed_is_a_reduce_scatter(W):
    """GEMM+RS by push (push.owner): a tile of rank q's rows goes to q alone -- into c at its row within the shard
    when q is the launching rank, else into the launcher's slab of q's inbox, counted in q's slot of its row block
    -- so the reduce template's publish.pushed over the R own rows sums every rank's partial of them. Ragged
    columns (n = 44 of 32-column tiles); ranks run one after the other, each GEMM on its own B."""
    rec, R, n, a, bs, refs = _owner_push(W, {}, persistent=True)
    m, k, tiles_r, tiles_n = W * R, rec["k"], R // 16, -(-n // rec["block_n"])
    mem = {}
    for r in range(W):
        mem[("a", r)], mem[("b", r)] = a, bs[r]
        mem[("c", r)] = np.zeros(R * n, np.float32)
        mem[("inbox", r)] = np.zeros((W - 1) * R * n, np.float32)
        mem[("pushed", r)] = np.zeros((W - 1) * tiles_r, np.int32)
    mem_ir, mem_tiles = run_both(rec, mem, gemm_lds(rec) | {"inbox": n, "pushed": None}, ranks=range(W),
                                 num_ranks=W)
    for r in range(W):
        close(mem_ir[("c", r)].reshape(R, n), refs[r][r * R:(r + 1) * R])
        for j in range(1, W):  # slab j - 1 holds rank r + j's partial of r's rows
            close(mem_ir[("inbox", r)].reshape(W - 1, R, n)[j - 1], refs[(r + j) % W][r * R:(r + 1) * R])
        np.testing.assert_array_equal(mem_ir[("pushed", r)], np.full((W - 1) * tiles_r, tiles_n))
        close(mem_tiles[("inbox", r)], mem_ir[("inbox", r)])
        close(mem_tiles[("c", r)], mem_ir[("c", r)])
    red, r_ir, r_tiles = _sum_pushed(mem_ir, W, R, n, tiles_n)
    for r in range(W):
        want = round_to("bf16", sum(refs[q][r * R:(r + 1) * R].astype(np.float32) for q in range(W)))
        close(r_ir[("dst", r)].reshape(R, n), want)
        np.testing.assert_array_equal(r_tiles[("dst", r)], r_ir[("dst", r)])
    for bad in (dict(rows_per_rank=24), dict(rows_per_rank=R, block_m=64)):
        with pytest.raises(VerificationError, match="'push.owner' needs m = \\(slabs \\+ 1\\) \\* rows_per_rank"):
            gemm.make_record(m, n, k, push={"arg": "i", "pad": "p", "slabs": W - 1, "owner": True}, loads="pointer",
                             store="pointer", **dict(SMALL, **{"block_m": 16, **bad}))


@pytest.mark.parametrize("W,layout", [(2, "persistent"), (3, "persistent"), (4, "grid"), (2, "one_wave")])
def test_gemm_push_owner_sum_own_is_a_reduce_scatter_in_one_launch(W, layout):
    """push.sum_own: the peers' rows' tiles go to their owners' inboxes as in push.owner, setting the owner's slot of
    the tile, and each own tile -- last in every program -- waits for its slot of every slab, adds the slabs' inbox
    tiles, stores the sum into c and clears its slots: the whole reduce-scatter in the GEMM. Ranks run one after the
    other, so each rank's inbox and slots start as the peers will leave them (the simulator checks the concurrent
    protocol). A persistent grid of 3
    programs counts each tile after the next one's K loop -- before an own tile's wait (tiles() splits an own tile
    into its K loop and its sum, so the count falls between); ragged columns. One wave (a resident program per
    tile) may take any order: GROUP_M 4 groups both ranks' rows."""
    shape = {"persistent": dict(persistent=True, num_sms=3), "grid": dict(persistent=False, num_sms=64),
             "one_wave": dict(persistent=True, num_sms=64, group_m=4)}[layout]
    persistent = layout == "persistent"
    rec, R, n, a, bs, refs = _owner_push(W, {"sum_own": True, "value_arg": "expect"}, **shape)
    assert rec["args"] == ["a", "b", "c", "inbox", "pushed", "expect"]
    m, k, tiles_r, tiles_n = W * R, rec["k"], R // 16, -(-n // rec["block_n"])
    mem = {}
    for r in range(W):
        mem[("a", r)], mem[("b", r)] = a, bs[r]
        mem[("c", r)] = np.zeros(R * n, np.float32)
        mem[("inbox", r)] = np.concatenate([refs[(r + j) % W][r * R:(r + 1) * R].ravel() for j in range(1, W)])
        mem[("pushed", r)] = np.full((W - 1) * tiles_r * tiles_n, 7, np.int32)
    mem_ir, mem_tiles = run_both(rec, mem, gemm_lds(rec) | {"inbox": n, "pushed": None}, ranks=range(W),
                                 num_ranks=W, scalars={"expect": 7})
    for r in range(W):  # the own partial unrounded (the accumulator), the peers' as they pushed them
        own = a.reshape(m, k)[r * R:(r + 1) * R].astype(np.float32) @ bs[r].reshape(k, n).astype(np.float32)
        want = round_to("bf16", own + sum(refs[q][r * R:(r + 1) * R].astype(np.float32) for q in range(W) if q != r))
        close(mem_ir[("c", r)].reshape(R, n), want)
        close(mem_tiles[("c", r)], mem_ir[("c", r)])
    # the last rank cleared its slots (the others' were set again by the ranks after them)
    assert not mem_ir[("pushed", W - 1)].any() and not mem_tiles[("pushed", W - 1)].any()
    steps = gemm.tiles(rec, rank=0, num_ranks=W, scalars={"expect": 7})
    waiting = [st for prog in steps for st in prog if st.waits]
    assert len(waiting) == tiles_r * tiles_n and all(len(st.waits) == W - 1 for st in waiting)
    if persistent:  # every wait comes after the program's counts of the tiles before it
        for prog in steps:
            first = next((i for i, st in enumerate(prog) if st.waits), len(prog))
            pushes = [len([nt for nt in st.notifies if nt.op == "set"]) for st in prog]
            assert sum(pushes[:first]) == sum(pushes)
    spec = {"arg": "i", "pad": "p", "slabs": W - 1, "owner": True, "sum_own": True}
    for bad, msg in ((dict(push=spec), "'push.sum_own' needs 'owner' and 'value_arg'"),
                     (dict(push=dict(spec, owner=False, value_arg="v")), "needs 'owner'"),
                     (dict(rank_shift=0), "needs the own rows' tiles last"),
                     (dict(group_m=4), "group_m dividing rows_per_rank / block_m = 2")):
        fields = dict(rows_per_rank=R, tile_order="rank_rotated", rank_shift=1, loads="pointer", store="pointer",
                      push=dict(spec, value_arg="v"), **dict(SMALL, block_m=16))
        fields.update(bad)
        with pytest.raises(VerificationError, match=re.escape(msg)):
            gemm.make_record(m, n, k, **fields)


@pytest.mark.parametrize("W,dst_rows,from_peers", [(2, "shard", False), (3, "shard", False), (2, "global", False),
                                                   (3, "shard", True), (2, "global", True)])
def test_gemm_reduce_own_epilogue_matches_tiles(W, dst_rows, from_peers):
    """GEMM+RS epilogue: each rank computes the next ranks' rows first (into c, notifying their owner) and its own
    rows last, adding the staged peer partials and storing the sum to out (GEMM+AR: at the global rows, counting
    the reduced tiles on 'done')."""
    R = 32
    done = {"done": "done"} if dst_rows == "global" else {}
    peers = {"from_peers": True, "arg": "counts"} if from_peers else {}
    rec = gemm.make_record(W * R, 40, 32, name="gemm_rs", tile_order="rank_rotated", rows_per_rank=R, rank_shift=1,
                           notify={"arg": "counts", "rows_per_slot": 16, "peer": "slot_owner"},
                           reduce_own={"arg": "staged", "rows_per_slot": 16, "parts": W - 1, "dst_rows": dst_rows,
                                       **done, **peers},
                           loads="pointer", store="pointer", persistent=True, epilogue_split=1, flatten=False,
                           **dict(SMALL, block_m=16, group_m=2, num_sms=3))
    if from_peers:
        assert rec["args"] == ["a", "b", "c", "counts", "own_value", "out"] + list(done)
    else:
        assert rec["args"] == ["a", "b", "c", "counts", "staged", "own_value", "stage", "out"] + list(done)
    out_rows = R if dst_rows == "shard" else W * R
    rng = np.random.default_rng(RNG_SEED)
    mem, ref = gemm_memory(rec, rng)
    stage = random("bf16", ((W - 1) * R, 40), rng)
    for r in range(W):
        mem[("a", r)], mem[("b", r)] = mem[("a", 0)], mem[("b", 0)]
        mem[("c", r)] = np.zeros_like(mem[("c", 0)])
        mem[("counts", r)] = np.zeros(W * R // 16, np.int32)
        if from_peers:  # the ranks run one after the other here: every peer's partial is already in its c
            mem[("c", r)] = round_to("bf16", ref).astype(mem[("c", 0)].dtype).ravel()
            mem[("counts", r)] += 5
        mem[("staged", r)] = np.full(W * R // 16, 5, np.int32)
        mem[("stage", r)] = stage.ravel().copy()
        mem[("out", r)] = np.zeros(out_rows * 40, mem[("c", 0)].dtype)
        mem[("done", r)] = np.zeros(W * R // 16, np.int32)
    lds = gemm_lds(rec) | {"counts": None, "staged": None, "stage": 40, "out": 40, "done": None}
    mem_ir, mem_tiles = run_both(rec, mem, lds, ranks=range(W), num_ranks=W, scalars={"own_value": 5})
    parts = sum(stage[j * R:(j + 1) * R].astype(np.float32) for j in range(W - 1))
    for r in range(W):
        own = slice(r * R, (r + 1) * R)
        if from_peers:
            parts = (W - 1) * round_to("bf16", ref[own]).astype(np.float32)
        out = mem_ir[("out", r)].reshape(out_rows, 40)
        close(out[own] if dst_rows == "global" else out, round_to("bf16", ref[own] + parts))
        close(mem_tiles[("out", r)].reshape(out_rows, 40), out)
        if dst_rows == "global":
            assert not np.delete(out, np.s_[r * R:(r + 1) * R], axis=0).any(), "wrote rows it does not own"
            want = np.zeros(W * R // 16, np.int32)
            want[r * R // 16:(r + 1) * R // 16] = math.ceil(40 / 32)  # one per column tile of the slot's rows
            np.testing.assert_array_equal(mem_ir[("done", r)], want)
            np.testing.assert_array_equal(mem_tiles[("done", r)], want)
        c = mem_ir[("c", r)].reshape(W * R, 40)
        assert from_peers or not c[own].any(), "own rows must go to out, not c"
        others = [q for q in range(W) if q != r]
        close(np.concatenate([c[q * R:(q + 1) * R] for q in others]),
              round_to("bf16", np.concatenate([ref[q * R:(q + 1) * R] for q in others])))
        np.testing.assert_array_equal(mem_ir[("counts", r)], mem_tiles[("counts", r)])
    # every slot of rank q's rows got one count per tile from each of the W-1 other ranks, none from q itself
    total = sum(mem_ir[("counts", r)] for r in range(W)) - (5 * W if from_peers else 0)
    for slot in gemm.notify_slots(rec):
        assert total[slot] == (W - 1) * gemm.notify_count(rec, slot)
    # own tiles come last in every program
    for r in range(W):
        for prog in gemm.tiles(rec, rank=r, num_ranks=W, scalars={"own_value": 5}):
            kinds = [bool(s.waits) for s in prog]
            assert kinds == sorted(kinds), "a program reaches an own (waiting) tile before a peer tile"
    triton_parse(emit(rec, lower="cuda:90"))


@pytest.mark.parametrize("change,match", [
    (dict(rank_shift=0), "own rows' tiles last"),
    (dict(group_m=4), "own rows' tiles last"),
    (dict(rows_per_rank=24), "block_m dividing rows_per_rank"),
    (dict(store="tma"), "store='pointer'"),
])
def test_gemm_reduce_own_rejects_unsafe_records(change, match):
    fields = dict(tile_order="rank_rotated", rows_per_rank=32, rank_shift=1, loads="pointer", store="pointer",
                  persistent=True, epilogue_split=1, flatten=False, **dict(SMALL, block_m=16, group_m=2))
    fields.update(change)
    with pytest.raises(VerificationError, match=match):
        gemm.make_record(64, 40, 32, reduce_own={"arg": "staged", "rows_per_slot": 16, "parts": 1}, **fields)


def test_gemm_wait_blocks_until_slot_reaches_value():
    rec = gemm.make_record(64, 32, 32, wait={"arg": "sig", "rows_per_slot": 32}, loads="pointer",
                           store="pointer", persistent=False, epilogue_split=1, flatten=False,
                           **dict(SMALL, block_m=32))
    mem, _ = gemm_memory(rec, np.random.default_rng(0))
    mem[("sig", 0)] = np.array([1, 0], np.int32)  # rows 32..63 not ready
    with ditron_context():
        module = ir.Module.create()
        func = gemm.build(rec, ip=ir.InsertionPoint(module.body))
        with pytest.raises(interp.Blocked, match=r"slots \[1\] >= 1"):
            interp.run(func, mem, grid=gemm.grid(rec)[0], scalars={"wait_value": 1})


@pytest.mark.parametrize("order,persistent", [("row_major", False), ("grouped", True), ("grouped", False),
                                              ("rank_rotated", True)])
def test_gemm_tile_order_visits_every_tile_once(order, persistent):
    rec = gemm.make_record(1000, 3000, 256, tile_order=order, rows_per_rank=250, persistent=persistent,
                           loads="pointer", store="pointer", epilogue_split=1, flatten=False, block_m=64,
                           block_n=128, group_m=4, num_sms=7)
    g = gemm.geometry(rec)
    for rank in (0, 3):
        seen = [gemm.tile_coords(rec, t, rank) for pid in range(g.grid) for t, _ in gemm.program_tiles(rec, pid)]
        assert sorted(seen) == [(i, j) for i in range(g.tiles_m) for j in range(g.tiles_n)]
        steps = gemm.tiles(rec, rank=rank, num_ranks=4, scalars={})
        assert sum(len(s) for s in steps) == g.tiles
    if order == "grouped":  # consecutive tiles sweep GROUP_M m-blocks before moving right
        assert [gemm.tile_coords(rec, t) for t in range(5)] == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1)]
    if order == "rank_rotated":
        assert gemm.tile_coords(rec, 0, rank=3) == (750 // 64, 0)


def test_gemm_tile_order_hook(monkeypatch):
    """A tile order registered once (here: column-major) drives both the IR and tiles()."""
    def column_major(o, t, rec, g, rank):
        return o.rem(t, g.tiles_m), o.div(t, g.tiles_m)

    monkeypatch.setitem(gemm.TILE_ORDER_FNS, "column_major", column_major)
    rec = gemm.make_record(70, 50, 40, tile_order="column_major", loads="pointer", store="pointer",
                           persistent=True, epilogue_split=1, flatten=False, **SMALL)
    assert [gemm.tile_coords(rec, t) for t in range(4)] == [(0, 0), (1, 0), (2, 0), (0, 1)]
    mem, ref = gemm_memory(rec, np.random.default_rng(RNG_SEED))
    mem_ir, _ = run_both(rec, mem, gemm_lds(rec))
    close(mem_ir[("c", 0)].reshape(70, 50), round_to("bf16", ref))


def test_gemm_notify_counts_cover_every_row():
    rec = gemm.make_record(100, 64, 32, notify={"arg": "sig", "rows_per_slot": 24}, loads="pointer",
                           store="pointer", persistent=False, epilogue_split=1, flatten=False,
                           **dict(SMALL, block_m=32))
    # m-blocks [0,32) [32,64) [64,96) [96,100) x 2 n-blocks; slots of 24 rows: 0..4
    assert {slot: gemm.notify_count(rec, slot) for slot in gemm.notify_slots(rec)} == {0: 2, 1: 4, 2: 4, 3: 2, 4: 2}
    assert gemm.notify_count_values(rec) == {2, 4}


def _notify_counts_by_walking_tiles(rec) -> dict[int, int]:
    """What the closed forms replace: every tile adds value to each slot its rows meet."""
    counts: dict[int, int] = {}
    g, bm, rps = gemm.geometry(rec), rec["block_m"], rec["notify"]["rows_per_slot"]
    for pm in range(g.tiles_m):
        m0 = pm * bm
        for slot in range(m0 // rps, (m0 + min(bm, rec["m"] - m0) - 1) // rps + 1):
            counts[slot] = counts.get(slot, 0) + g.tiles_n * rec["notify"]["value"]
    return counts


def test_gemm_notify_count_closed_forms_match_walking_the_tiles():
    rng = np.random.default_rng(RNG_SEED)
    for _ in range(300):
        m, n = int(rng.integers(1, 700)), int(rng.integers(1, 200))
        rec = gemm.make_record(m, n, 32, notify={"arg": "sig", "rows_per_slot": int(rng.integers(1, 90)),
                                                  "value": int(rng.integers(1, 4))},
                               loads="pointer", store="pointer", persistent=False, epilogue_split=1, flatten=False,
                               **dict(SMALL, block_m=int(rng.choice([16, 32, 64, 128])), block_n=32))
        walked = _notify_counts_by_walking_tiles(rec)
        assert list(gemm.notify_slots(rec)) == sorted(walked)
        assert {slot: gemm.notify_count(rec, slot) for slot in gemm.notify_slots(rec)} == walked
        assert gemm.notify_count_values(rec) == set(walked.values())


def test_gemm_large_problem_uses_64_bit_offsets():
    rec = gemm.make_record(49152, 49152, 12288, loads="pointer", store="pointer", persistent=False,
                           epilogue_split=1, flatten=False)
    text = emit(rec)
    assert "arith.extsi" in text and "tensor<128x256xi64>" in text
    triton_parse(text)


# ------------------------------------------------------------------------------------------------ configs

def test_choose_config_rules():
    big = gemm.choose_config(8192, 8192, 8192, "bf16", "cuda:90")
    assert (big["block_m"], big["block_n"], big["loads"], big["persistent"]) == (128, 256, "tma", True)
    assert big["num_stages"] == 4 and big["epilogue_split"] == 2
    small = gemm.choose_config(128, 8192, 8192, "bf16", "cuda:90")
    programs = gemm.geometry(dict(small, m=128, n=8192, k=8192)).grid
    assert 96 <= programs <= 132, "small M must still fill most SMs in one wave"
    assert gemm.choose_config(4096, 4096, 4091, "bf16", "cuda:90")["loads"] == "pointer"  # rows not 16B aligned
    assert gemm.choose_config(8192, 8192, 8192, "bf16", "hip:gfx942")["loads"] == "pointer"
    fused = gemm.choose_config(8192, 8192, 8192, "bf16", "cuda:90", fused=True)
    assert fused["store"] == "pointer" and not fused["flatten"]
    assert gemm.choose_config(8192, 8192, 8192, "fp8e4m3", "cuda:90")["block_k"] == 128
    for m, n, k in ((128, 8192, 8192), (1024, 8192, 8192), (8192, 49152, 12288), (4091, 1000, 333)):
        for cfg in gemm.candidates(m, n, k, "bf16", "cuda:90"):
            gemm.make_record(m, n, k, **cfg)  # every candidate is a valid record


@pytest.mark.parametrize("fields,message", [
    (dict(k=4091, loads="tma"), "16-byte aligned"),
    (dict(tile_order="rank_rotated"), "rows_per_rank"),
    (dict(tile_order="spiral"), "tile_order 'spiral' is unknown"),
    (dict(store="tma", notify={"arg": "s", "rows_per_slot": 64}), "asynchronously"),
    (dict(split_k=8, persistent=False, block_m=64, block_n=64, m=1024), "must be resident"),
    (dict(block_m=48), "power of two"),
    (dict(in_dtype="fp32"), "in_dtype 'fp32' is not supported"),
    (dict(notify={"arg": "s", "rows_per_slot": 64, "peer": "everyone"}), "notify.peer 'everyone'"),
])
def test_gemm_record_errors(fields, message):
    args = dict(m=512, n=512, k=512) | fields
    with pytest.raises(VerificationError, match=message):
        gemm.make_record(args.pop("m"), args.pop("n"), args.pop("k"), **args)


def test_record_round_trip_and_lookup():
    rec = gemm.make_record(256, 256, 256, wait={"arg": "sig", "rows_per_slot": 64})
    with ditron_context():
        module = ir.Module.create()
        func = gemm.build(rec, ip=ir.InsertionPoint(module.body))
        assert KERNEL_ATTR in func.attributes
        assert KernelRecord.of(func) == rec and KernelRecord.of(func)["wait"]["rows_per_slot"] == 64
    assert get_template("copy") is copy and get_template("reduce") is reduce
    with pytest.raises(KeyError, match="unknown kernel template"):
        get_template("fft")


# ------------------------------------------------------------------------------------------------ copy

@pytest.mark.parametrize("direction", ["pull", "push"])
def test_copy_ir_matches_tiles(direction):
    """Ragged 2-D region at run-time and constant offsets, three ranks, notify at the end of every program."""
    W, rows, cols = 3, 37, 50
    rec = copy.make_record(rows, cols, dtype="bf16", direction=direction, peer="rank+1", src_ld=64, dst_ld=80,
                           src_row="arg:src_row", src_col=6, dst_row=3, dst_col="arg:dst_col", block_m=16,
                           block_n=32, grid=4, notify={"arg": "sig", "slot": 2})
    assert rec["args"] == ["src", "dst", "sig", "src_row", "dst_col"]
    rng = np.random.default_rng(RNG_SEED)
    mem = {}
    for r in range(W):
        mem[("src", r)] = random("bf16", (50 * 64,), rng)
        mem[("dst", r)] = np.zeros(45 * 80, np.float32)
        mem[("sig", r)] = np.zeros(4, np.int32)
    scalars = {"src_row": 5, "dst_col": 20}
    mem_ir, mem_tiles = run_both(rec, mem, {"src": 64, "dst": 80, "sig": None}, ranks=range(W), num_ranks=W,
                                 scalars=scalars)
    for r in range(W):
        np.testing.assert_array_equal(mem_ir[("dst", r)], mem_tiles[("dst", r)])
        np.testing.assert_array_equal(mem_ir[("sig", r)], mem_tiles[("sig", r)])
        src_rank, dst_rank = ((r + 1) % W, r) if direction == "pull" else (r, (r + 1) % W)
        src = mem[("src", src_rank)].reshape(50, 64)[5:5 + rows, 6:6 + cols]
        dst = mem_ir[("dst", dst_rank)].reshape(45, 80)
        np.testing.assert_array_equal(dst[3:3 + rows, 20:20 + cols], src)
        assert dst.sum() != 0 and np.count_nonzero(dst) == np.count_nonzero(src)  # nothing outside the region
        assert mem_ir[("sig", r)][2] == chunk.notify_count(rec)  # every program of one launch notified


def test_copy_grid_larger_than_tiles_still_notifies_from_every_program():
    rec = copy.make_record(16, 32, dtype="fp32", peer="arg:peer", block_m=16, block_n=32, grid=3,
                           notify={"arg": "sig", "slot": 0, "value": 2})
    mem = {("src", 1): np.arange(512, dtype=np.float32), ("dst", 0): np.zeros(512, np.float32),
           ("sig", 0): np.zeros(1, np.int32)}
    mem_ir, _ = run_both(rec, mem, {"src": 32, "dst": 32, "sig": None}, num_ranks=2, scalars={"peer": 1})
    np.testing.assert_array_equal(mem_ir[("dst", 0)], mem[("src", 1)])
    assert mem_ir[("sig", 0)][0] == 6 == chunk.notify_count(rec)


# ------------------------------------------------------------------------------------------------ reduce

@pytest.mark.parametrize("W,dtype,out_dtype", [(2, "bf16", "bf16"), (4, "fp16", "fp32"), (3, "fp32", "bf16")])
def test_reduce_ir_matches_tiles_and_numpy(W, dtype, out_dtype):
    rows, cols = 45, 70
    rec = reduce.make_record(rows, cols, dtype=dtype, out_dtype=out_dtype, src_ld=72, src_row=10, dst_ld=70,
                             block_m=16, block_n=32, grid=5, wait={"arg": "ready", "rows_per_slot": 20},
                             notify={"arg": "done", "slot": "arg:slot"})
    assert rec["args"] == ["src", "dst", "ready", "wait_value", "done", "slot"]
    rng = np.random.default_rng(RNG_SEED)
    mem = {}
    for r in range(W):
        mem[("src", r)] = random(dtype, (60 * 72,), rng)
        mem[("dst", r)] = np.zeros(rows * 70, storage_dtype(out_dtype))
        mem[("ready", r)] = np.full(3, 7, np.int32)
        mem[("done", r)] = np.zeros(2, np.int32)
    scalars = {"wait_value": 7, "slot": 1}
    mem_ir, mem_tiles = run_both(rec, mem, {"src": 72, "dst": 70, "ready": None, "done": None}, ranks=range(W),
                                 num_ranks=W, scalars=scalars)
    want = sum(mem[("src", r)].reshape(60, 72)[10:10 + rows, :cols].astype(np.float32) for r in range(W))
    for r in range(W):
        close(mem_ir[("dst", r)].reshape(rows, 70), round_to(out_dtype, want))
        close(mem_tiles[("dst", r)], mem_ir[("dst", r)], tol=1e-6)
        assert mem_ir[("done", r)][1] == rec["grid"]
    # rank 1 reads its own copy first, then 2, ...; and waits on the slot of the same rank before each read
    step = reduce.tiles(rec, rank=1, num_ranks=W, scalars=scalars)[0][0]
    assert [reg.rank for reg in step.reads] == [None] + [(1 + i) % W for i in range(1, W)]
    assert [(w.rank, w.slot) for w in step.waits][:2] == [(None, 0), (None, 1)]  # rows 10..25 -> slots 0, 1


@pytest.mark.parametrize("W", [2, 3])
def test_reduce_push_consume_ir_matches_tiles_and_numpy(W):
    """The all-reduce by push with consume: each program stores its tiles into every peer's inbox slab and sets the
    peer's slot, sums each tile once its own slots are set, then clears them (0 where they still hold the value).
    Ranks run one after the other here, so each rank's inbox already holds its peers' x and its slots the value
    (the simulator checks the concurrent protocol); a rank clears its own slots after summing, and the ranks after
    it set them again."""
    rows, cols, value = 37, 40, 7
    rec = reduce.make_record(rows, cols, dtype="bf16", block_m=16, block_n=32, grid=4, src_row=0,
                             publish={"arg": "published", "copy_from": "x", "push": W - 1, "consume": True})
    slots = chunk.num_tiles(rec) * (W - 1)
    rng = np.random.default_rng(RNG_SEED)
    xs = [random("bf16", (rows * cols,), rng) for _ in range(W)]
    mem = {}
    for r in range(W):
        mem[("x", r)] = xs[r].copy()
        mem[("src", r)] = np.concatenate([xs[(r + j) % W] for j in range(1, W)])  # slab j - 1: rank r + j
        mem[("dst", r)] = np.zeros(rows * cols, np.float32)
        mem[("published", r)] = np.full(slots, value, np.int32)
    lds = {"src": cols, "dst": cols, "x": cols, "published": None}
    mem_ir, mem_tiles = run_both(rec, mem, lds, ranks=range(W), num_ranks=W, scalars={"publish_value": value})
    want = round_to("bf16", sum(x.astype(np.float32) for x in xs))
    for r in range(W):
        close(mem_ir[("dst", r)], want)
        np.testing.assert_array_equal(mem_tiles[("dst", r)], mem_ir[("dst", r)])
        np.testing.assert_array_equal(mem_tiles[("published", r)], mem_ir[("published", r)])
    np.testing.assert_array_equal(mem_ir[("published", W - 1)], np.zeros(slots, np.int32))  # the last rank's clears
    steps = reduce.tiles(rec, rank=0, num_ranks=W, scalars={"publish_value": value})[0]
    clears = [n for st in steps for n in st.notifies if n.op == "clear"]
    assert sorted(n.slot for n in clears) == sorted(w.slot for st in steps for w in st.waits)
    with pytest.raises(VerificationError, match="'publish.consume' clears each slot after its one wait"):
        reduce.make_record(rows, cols, dtype="bf16", src_row=0, publish={
            "arg": "p", "copy_from": "x", "push": 1, "pushed": 16, "consume": True})


@pytest.mark.parametrize("W,copy_from", [(2, "x"), (3, None)])
def test_reduce_publish_ir_matches_tiles_and_numpy(W, copy_from):
    """The one-launch all-reduce: phase one copies x into src tile by tile and sets the tile's slot (without a
    copy: sets every slot); phase two waits on every rank's slot before reading its tile. Ranks run one after the
    other here, so every pad starts at the value and src already holds x (the simulator checks the concurrent
    protocol)."""
    rows, cols = 37, 70
    rec = reduce.make_record(rows, cols, dtype="bf16", block_m=16, block_n=32, grid=4,
                             publish={"arg": "published", **({"copy_from": copy_from} if copy_from else {})})
    assert rec["args"] == ["src", "dst"] + ([copy_from] if copy_from else []) + ["published", "publish_value"]
    tiles = chunk.num_tiles(rec)
    rng = np.random.default_rng(RNG_SEED)
    mem, xs = {}, []
    for r in range(W):
        xs.append(random("bf16", (rows * cols,), rng))
        mem[("src", r)] = xs[r].copy() if not copy_from else np.zeros(rows * cols, np.float32)
        if copy_from:
            mem[("x", r)] = xs[r].copy()
        mem[("dst", r)] = np.zeros(rows * cols, np.float32)
        mem[("published", r)] = np.full(tiles, 3, np.int32)
    for r in range(1, W):  # peers published before (sequential ranks): their src already holds their x
        mem[("src", r)] = xs[r].copy()
    lds = {"src": cols, "dst": cols, "x": cols, "published": None}
    mem_ir, mem_tiles = run_both(rec, mem, lds, ranks=range(W), num_ranks=W, scalars={"publish_value": 3})
    want = round_to("bf16", sum(x.astype(np.float32) for x in xs))
    for r in range(W):
        close(mem_ir[("dst", r)], want)
        np.testing.assert_array_equal(mem_tiles[("dst", r)], mem_ir[("dst", r)])
        np.testing.assert_array_equal(mem_ir[("src", r)], xs[r])
    steps = reduce.tiles(rec, rank=0, num_ranks=W, scalars={"publish_value": 3})[1]
    mine = len(chunk.program_tiles(rec, 1))
    assert steps[0].notifies[0] == reduce.SlotNotify("published", 1, 3, None, op="set")
    reduce_step = steps[mine if copy_from else 1]
    assert [(w.rank, w.slot) for w in reduce_step.waits] == [(None, 1)] + [(r, 1) for r in range(1, W)]
    if copy_from:  # every tile copied and published before the first is reduced
        assert mine > 1 and len(steps) == 2 * mine and [w.arg for w in steps[0].writes] == ["src"]
        assert steps[1].notifies == [reduce.SlotNotify("published", 1 + rec["grid"], 3, None, op="set")]
    else:
        assert len(steps) == 1 + mine and len(steps[0].notifies) == mine


@pytest.mark.parametrize("copy_from", [None, "x"])
def test_reduce_publish_of_own_rows_matches_tiles_and_numpy(copy_from):
    """A reduce-scatter by one launch: each rank sums its own rows (run-time src_row) of every rank's src, after
    setting the slots of its region's tiles: src complete before the launch, or copied from x tile by tile, each
    tile at its place in every rank's rows (the rows the peers read)."""
    W, shard, cols = 3, 20, 40
    rec = reduce.make_record(shard, cols, dtype="bf16", block_m=16, block_n=32, grid=2, src_row="arg:src_row",
                             publish={"arg": "published", **({"copy_from": copy_from} if copy_from else {})})
    assert rec["args"] == ["src", "dst"] + ([copy_from] if copy_from else []) + ["published", "publish_value",
                                                                              "src_row"]
    rng = np.random.default_rng(RNG_SEED)
    mem, xs = {}, []
    for r in range(W):
        xs.append(random("bf16", (W * shard * cols,), rng))
        mem[("src", r)] = xs[r].copy()  # ranks run one after the other: the peers' copies are there
        if copy_from:
            mem[("x", r)] = xs[r].copy()
        mem[("dst", r)] = np.zeros(shard * cols, np.float32)
        mem[("published", r)] = np.full(chunk.num_tiles(rec), 5, np.int32)
    lds = {"src": cols, "dst": cols, "x": cols, "published": None}
    for r in range(W):
        if copy_from:
            mem[("src", r)] = np.zeros(W * shard * cols, np.float32)  # this rank's own copy happens in the launch
        mem_ir, mem_tiles = run_both(rec, mem, lds, ranks=[r], num_ranks=W,
                                     scalars={"publish_value": 5, "src_row": r * shard})
        rows = slice(r * shard * cols, (r + 1) * shard * cols)
        want = round_to("bf16", sum(xs[q][rows].astype(np.float32) for q in range(W)))
        close(mem_ir[("dst", r)], want)
        np.testing.assert_array_equal(mem_tiles[("dst", r)], mem_ir[("dst", r)])
        if copy_from:  # every rank's rows copied, not only its own, each tile's right before it is reduced
            np.testing.assert_array_equal(mem_ir[("src", r)], xs[r])
            np.testing.assert_array_equal(mem_tiles[("src", r)], xs[r])
            mem[("src", r)] = xs[r].copy()
            steps = reduce.tiles(rec, rank=r, num_ranks=W, scalars={"publish_value": 5, "src_row": r * shard})[0]
            assert [len(st.writes) for st in steps[:W + 1]] == [1] * W + [1] and steps[W].waits and \
                steps[W - 1].notifies and not steps[W].notifies
    with pytest.raises(VerificationError, match="'copy_from' needs a constant src_col"):
        reduce.make_record(8, 8, src_col="arg:c", publish={"arg": "p", "copy_from": "x"})


@pytest.mark.parametrize("W", [2, 3])
def test_reduce_two_shot_ir_matches_tiles_and_numpy(W):
    """publish.scatter (the two-shot all-reduce in one launch): tile t is summed on rank t mod W only, which stores
    the sum into its dst and every peer's src and sets the peer's scatter slot t; another rank copies its src tile
    into dst once its slot t is set. Ranks run one after the other here with every pad set beforehand, so a rank
    copies what its src holds when it runs (the simulator checks the concurrent protocol)."""
    rows, cols = 37, 70
    rec = reduce.make_record(rows, cols, dtype="bf16", block_m=16, block_n=32, grid=4,
                             publish={"arg": "published", "copy_from": "x", "scatter": "reduced"})
    assert rec["args"] == ["src", "dst", "x", "published", "publish_value", "reduced"]
    tiles, tn = chunk.num_tiles(rec), chunk.tiles_n(rec)
    rng = np.random.default_rng(RNG_SEED)
    mem, xs = {}, []
    for r in range(W):
        xs.append(random("bf16", (rows * cols,), rng))
        mem[("x", r)] = xs[r].copy()
        mem[("src", r)] = xs[r].copy()  # the peers' copies are there (sequential ranks)
        mem[("dst", r)] = np.zeros(rows * cols, np.float32)
        mem[("published", r)] = np.full(tiles, 3, np.int32)
        mem[("reduced", r)] = np.full(tiles, 3, np.int32)
    lds = {"src": cols, "dst": cols, "x": cols, "published": None, "reduced": None}
    mem_ir, mem_tiles = run_both(rec, mem, lds, ranks=range(W), num_ranks=W, scalars={"publish_value": 3})
    total = round_to("bf16", sum(x.astype(np.float32) for x in xs)).reshape(rows, cols)
    for r in range(W):
        np.testing.assert_array_equal(mem_tiles[("dst", r)], mem_ir[("dst", r)])
        np.testing.assert_array_equal(mem_tiles[("src", r)], mem_ir[("src", r)])
        dst = mem_ir[("dst", r)].reshape(rows, cols)
        for t in range(tiles):
            box = np.s_[t // tn * 16: t // tn * 16 + 16, t % tn * 32: t % tn * 32 + 32]
            if reduce.scatter_owner(rec, t, W) == r:  # owned: the sum, in dst and in the src of every peer that ran before (a later one's
                close(dst[box], total[box])  # own copy overwrites it: sequential ranks)
                for q in range(r):
                    close(mem_ir[("src", q)].reshape(rows, cols)[box], total[box])
            else:  # another rank's: a copy of this src tile (here this rank's own copy of x, made last)
                np.testing.assert_array_equal(dst[box], xs[r].reshape(rows, cols)[box])
    steps = reduce.tiles(rec, rank=1, num_ranks=W, scalars={"publish_value": 3})[1]
    mine = chunk.program_tiles(rec, 1)  # program 1's tiles 1, 5 (, 9): its k-th on rank k mod W; owned first
    phase2 = [st for st in steps if st.reads and st.reads[0].arg == "src"]
    assert [len(st.reads) for st in phase2] == sorted((W if k % W == 1 else 1 for k in range(len(mine))),
                                                      reverse=True)
    owned, copied = phase2[0], phase2[-1]
    assert [(w.arg, w.rank) for w in copied.waits] == [("reduced", None)]
    assert [w.rank for w in owned.writes[1:]] == [(1 + i) % W for i in range(1, W)]
    assert [(n.arg, n.rank) for n in owned.notifies] == [("reduced", (1 + i) % W) for i in range(1, W)]
    with pytest.raises(VerificationError, match="'publish.scatter' \\(two-shot\\) needs"):
        reduce.make_record(8, 8, src_row="arg:r", publish={"arg": "p", "scatter": "s"})


@pytest.mark.parametrize("W", [2, 3])
def test_reduce_push_ir_matches_tiles_and_numpy(W):
    """publish.push (the one-shot all-reduce by stores): each program stores its tiles of x into every peer's
    inbox slab for this rank (slab W - 1 - i on rank + i) and sets the peer's slot t * (W - 1) + slab, then waits
    on its own slots and sums x with its inbox (slab j - 1 = rank + j). Ranks run one after the other with every
    pad set and every inbox already holding what the peers push (the simulator checks the concurrent protocol)."""
    rows, cols = 37, 70
    rec = reduce.make_record(rows, cols, dtype="bf16", block_m=16, block_n=32, grid=4,
                             publish={"arg": "published", "copy_from": "x", "push": W - 1})
    assert rec["args"] == ["src", "dst", "x", "published", "publish_value"] and rec["src_extent"] == (W - 1) * rows
    tiles, tn = chunk.num_tiles(rec), chunk.tiles_n(rec)
    rng = np.random.default_rng(RNG_SEED)
    xs = [random("bf16", (rows * cols,), rng) for _ in range(W)]
    mem = {}
    for r in range(W):
        mem[("x", r)] = xs[r].copy()
        mem[("src", r)] = np.concatenate([xs[(r + j) % W] for j in range(1, W)])
        mem[("dst", r)] = np.zeros(rows * cols, np.float32)
        mem[("published", r)] = np.full(tiles * (W - 1), 3, np.int32)
    lds = {"src": cols, "dst": cols, "x": cols, "published": None}
    mem_ir, mem_tiles = run_both(rec, mem, lds, ranks=range(W), num_ranks=W, scalars={"publish_value": 3})
    # summed in rank order from the own rank on, in fp32, as tiles() does
    for r in range(W):
        want = round_to("bf16", sum(xs[(r + j) % W].astype(np.float32) for j in range(W)))
        np.testing.assert_array_equal(mem_ir[("dst", r)], want)
        np.testing.assert_array_equal(mem_tiles[("dst", r)], mem_ir[("dst", r)])
        np.testing.assert_array_equal(mem_ir[("src", r)], mem[("src", r)])
    steps = reduce.tiles(rec, rank=1, num_ranks=W, scalars={"publish_value": 3})[1]
    mine = chunk.program_tiles(rec, 1)  # stores+flags 0, stores 1, sum 0+flags 1, ..., sum of the last
    t = mine[0][0] * tn + mine[0][1]
    push, flags, total = steps[0], steps[0], steps[2]
    assert len(mine) > 1 and len(steps) == 2 * len(mine) and [reg.arg for reg in push.reads] == ["x"]
    assert [bool(st.notifies) for st in steps] == [True] + [False, True] * (len(mine) - 1) + [False]
    assert [reg.arg for reg in total.writes] == ["dst"] and total.notifies[0].slot == (t + 4) * (W - 1) + W - 2
    assert [(reg.rank, reg.offsets[0]) for reg in push.writes] == [((1 + i) % W, (W - 1 - i) * rows + 16 * mine[0][0])
                                                                   for i in range(1, W)]
    assert flags.notifies == [reduce.SlotNotify("published", t * (W - 1) + W - 1 - i, 3, (1 + i) % W, op="set")
                             for i in range(1, W)]
    assert [(w.rank, w.slot) for w in total.waits] == [(None, t * (W - 1) + j) for j in range(W - 1)]
    assert [reg.rank for reg in total.reads] == [None] * W
    # more programs than tiles: the spare ones push and sum nothing
    wide = reduce.make_record(20, 16, dtype="bf16", block_m=16, block_n=16, grid=4,
                              publish={"arg": "published", "copy_from": "x", "push": W - 1})
    small = {("x", r): xs[r][:320].copy() for r in range(W)}
    small |= {("src", r): np.concatenate([xs[(r + j) % W][:320] for j in range(1, W)]) for r in range(W)}
    small |= {("dst", r): np.zeros(320, np.float32) for r in range(W)}
    small |= {("published", r): np.full(2 * (W - 1), 3, np.int32) for r in range(W)}
    got, _ = run_both(wide, small, {"src": 16, "dst": 16, "x": 16, "published": None}, ranks=range(W), num_ranks=W,
                      scalars={"publish_value": 3})
    # the W partials are added in the kernel's order (own first), rounded to bf16 once
    terms = [xs[j][:320].astype(np.float64) for j in range(W)]
    assert_sum_close(got[("dst", 0)], sum(terms), sum(np.abs(x) for x in terms), W, "bf16")
    with pytest.raises(VerificationError, match="a world of 3 ranks needs 2"):
        reduce.tiles(rec if W == 2 else reduce.make_record(
            rows, cols, block_m=16, block_n=32, grid=4, publish={"arg": "p", "copy_from": "x", "push": 1}),
            rank=0, num_ranks=3, scalars={"publish_value": 1})
    with pytest.raises(VerificationError, match="needs 'copy_from' and excludes 'scatter'"):
        reduce.make_record(8, 8, publish={"arg": "p", "push": 1})
    with pytest.raises(VerificationError, match="src_row 0"):
        reduce.make_record(8, 8, src_row=8, publish={"arg": "p", "copy_from": "x", "push": 1})
    with pytest.raises(VerificationError, match="number of inbox slabs"):
        reduce.make_record(8, 8, publish={"arg": "p", "copy_from": "x", "push": 0})


def test_reduce_publish_rejects_unsafe_records():
    with pytest.raises(VerificationError, match="exclude each other"):
        reduce.make_record(8, 8, publish={"arg": "p"}, wait={"arg": "s", "rows_per_slot": 4})


def test_reduce_record_errors():
    with pytest.raises(VerificationError, match="dtype 'fp8e4m3' is not supported"):
        reduce.make_record(8, 8, dtype="fp8e4m3")
    with pytest.raises(VerificationError, match="constant src_row"):
        reduce.make_record(8, 8, src_row="arg:r", wait={"arg": "s", "rows_per_slot": 4})
    with pytest.raises(VerificationError, match="direction 'sideways'"):
        copy.make_record(8, 8, direction="sideways")
    with pytest.raises(VerificationError, match="columns run past"):
        copy.make_record(8, 8, src_ld=8, src_col=4)


# ------------------------------------------------------------------------------------------------ Triton

def test_gemm_sm90_persistent_tma_compiles_to_wgmma():
    rec = gemm.make_record(8192, 8192, 8192)
    asm, binary = compile_text(emit(rec, lower="cuda:90"), "cuda:90", rec["num_warps"], rec["num_stages"])
    ptx = asm["ptx"]
    assert binary[:4] == b"\x7fELF"
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx and "tensormap" in ptx
    assert ".entry gemm" in ptx


@pytest.mark.parametrize("target,telling", [("cuda:90", "wgmma.mma_async"), ("cuda:80", "mma.sync"),
                                            ("hip:gfx942", "v_mfma")])
def test_gemm_pointer_variant_compiles(target, telling):
    cfg = gemm.choose_config(4091, 1000, 333, "bf16", target)
    rec = gemm.make_record(4091, 1000, 333, target=target, **cfg)
    assert rec["loads"] == "pointer"
    asm, binary = compile_text(emit(rec, lower=target), target, rec["num_warps"], rec["num_stages"])
    assert telling in asm["amdgcn" if target.startswith("hip") else "ptx"]
    assert binary[:4] == b"\x7fELF"


def test_gemm_fp8_and_split_k_compile_for_sm90():
    rec = gemm.make_record(128, 4096, 4096, in_dtype="fp8e4m3", b_trans=True)
    text = emit(rec, lower="cuda:90")
    assert f"maxNumImpreciseAcc = {rec['block_k']}" in text  # fp32 accumulation at every K step by default
    asm, _ = compile_text(text, "cuda:90", rec["num_warps"], rec["num_stages"])
    assert "e4m3" in asm["ptx"] and "wgmma" in asm["ptx"]
    if rec["split_k"] > 1:
        assert "atom.global" in asm["ptx"] or "red.global" in asm["ptx"]


def test_a_full_operand_epilogue_leaves_room_in_shared_memory_on_sm90():
    """Triton stages a fused epilogue's [m, n] operand through shared memory (to the accumulator's layout): the
    default config's stages leave room for it, so the kernel fits one H200 SM (4 stages of 128x256 asked for 262 KB
    beside a residual add before)."""
    from ditron.backends import get_backend
    from ditron.backends.facts import target_facts
    plain = gemm.make_record(4096, 4096, 4096)
    rec = gemm.make_record(4096, 4096, 4096, epilogue=[{"fn": "add", "arg": "res", "operand": "full",
                                                        "dtype": "bf16", "acc": 1}])
    assert rec["num_stages"] < plain["num_stages"]
    be = get_backend("cuda:90")
    kernel = be.compile(emit(rec, lower="cuda:90"), be.options(num_warps=rec["num_warps"],
                                                               num_stages=rec["num_stages"]))
    assert kernel.metadata["shared"] <= target_facts("cuda:90").smem_per_sm


@pytest.mark.skipif(not _lower_available(), reason="ditron-lower-core-to-triton is not available yet")
@pytest.mark.parametrize("target", ["cuda:90", "hip:gfx942"])
def test_templates_with_primitives_compile(target):
    gemm_rec = gemm.make_record(4096, 1024, 1024, tile_order="rank_rotated", rows_per_rank=512, target=target,
                                wait={"arg": "sig", "rows_per_slot": 256},
                                notify={"arg": "out_sig", "rows_per_slot": 128, "peer": "rank+1"})
    copy_rec = copy.make_record(1000, 4096, peer="rank+1", notify={"arg": "sig", "slot": 3})
    reduce_rec = reduce.make_record(1000, 4096, wait={"arg": "sig", "rows_per_slot": 128},
                                    notify={"arg": "done", "slot": "arg:slot"})
    for rec in (gemm_rec, copy_rec, reduce_rec):
        text = emit(rec, lower=target)
        assert "ditron_core." not in text
        asm, binary = compile_text(text, target, rec["num_warps"], rec.get("num_stages", 2))
        code = asm["amdgcn" if target.startswith("hip") else "ptx"]
        if target.startswith("cuda"):
            if rec is gemm_rec:
                assert "wgmma.mma_async" in code and "acquire" in code and "release" in code
            else:  # loads through symm_at stay 16-byte vectors
                assert "ld.global.v4" in code or "ld.global.nc.v4" in code
        elif rec is gemm_rec:
            assert "v_mfma" in code
        else:
            assert "dwordx4" in code


# ------------------------------------------------------------------------------------------------ GPU inputs

def _load(path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("which", ["benchmark", "gpu_test"])
def test_gpu_kernel_sets_build(which, tmp_path):
    """The GPU box cannot run the templates (no MLIR): the kernels it runs are generated here (into build/, which
    the lead carries to the GPU box) by the benchmark's and the GPU test's --build step. Both builds must work and
    give one Triton-parsable TTIR file per manifest entry."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    if which == "benchmark":
        bench = _load(root / "benchmarks" / "bench_gemm.py")
        bench.build_kernels(tmp_path, bench.bench_kernels())
    else:
        gpu = _load(root / "test" / "py" / "test_gemm_gpu.py")
        gpu.build(tmp_path)
    import json
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    fresh = sorted(p.name for p in tmp_path.glob("*.ttir"))
    assert fresh and len(fresh) == len(manifest["kernels"])
    triton_parse((tmp_path / fresh[0]).read_text())


def test_gemm_stages_grid_fits_and_builds(tmp_path):
    """bench_gemm --stages: every pipeline depth of the small tiles that fits an H200's shared memory, TMA and
    pointer loads, per M = 128 shape; the depths ditron-tile's candidates use are among them, and they build."""
    from pathlib import Path
    from ditron.cost_model import gemm_candidates, peaks_for
    bench = _load(Path(__file__).resolve().parents[2] / "benchmarks" / "bench_gemm.py")
    grid = bench.stage_kernels(shapes=[(128, 4096, 7168)])
    fields = [e["fields"] for e in grid]
    smem = peaks_for(bench.TARGET).smem_per_sm
    assert all(f["num_stages"] * (f["block_m"] + f["block_n"]) * f["block_k"] * 2 <= smem for f in fields)
    seen = {(f["block_m"], f["block_n"], f["block_k"], f["num_stages"]) for f in fields}
    small = [c for c in gemm_candidates(peaks_for("cuda:90")) if 64 <= c.block_m <= 128 and c.block_n <= 128]
    assert small and all((c.block_m, c.block_n, c.block_k, c.num_stages) in seen for c in small)
    assert {f["loads"] for f in fields} == {"tma", "pointer"} and len({e["name"] for e in grid}) == len(grid)
    picked = [e for e in grid if (e["fields"]["block_m"], e["fields"]["block_n"], e["fields"]["block_k"],
                                  e["fields"]["num_stages"]) in {(64, 64, 128, 6), (64, 128, 64, 8)}][:2]
    bench.build_kernels(tmp_path, picked)
    for p in sorted(tmp_path.glob("*.ttir")):
        triton_parse(p.read_text())


# ------------------------------------------------------------------------------------------------ grouped GEMM

GROUPED_CASES = {  # t, k, n, sizes (their sum at most t), dtype, tile
    "ragged-empty-group-rows-past-the-end": (70, 40, 50, [20, 0, 45], "bf16", (16, 32, 16)),
    "fp32-one-group-every-row": (33, 16, 16, [33, 0], "fp32", (16, 16, 16)),
    "groups-inside-one-tile": (64, 32, 48, [5, 17, 16, 10], "bf16", (32, 16, 16)),
    "fp16-in-fp32-out-i64-sizes": (40, 24, 20, [7, 0, 0, 30], "fp16", (16, 16, 16)),
    # TMA loads whose last K step runs past k: a reads zeros there, b the next group's rows (which add nothing)
    "tma-k-step-past-k": (50, 40, 32, [10, 25, 15], "bf16", (16, 16, 32)),
    # skewed routing: empty groups first and between, one group holding almost every row, many groups
    "skewed-many-groups-empty-first": (61, 16, 32, [0, 0, 50] + [0] * 20 + [3, 0, 1] + [0] * 10, "bf16",
                                       (16, 16, 16)),
    # sizes past t are clamped to the rows a has, a negative size counts as 0
    "sizes-past-t-and-negative": (30, 16, 16, [12, -5, 40, 7], "bf16", (16, 16, 16)),
    # an expert-parallel MoE's received rows: W = 3 sources x 2 experts, group g times b[g % 2], empty groups
    "cycled-weights-w3": (60, 32, 32, [4, 0, 17, 9, 0, 21], "bf16", (16, 16, 16), dict(b_groups=2)),
    # act(gate) * up: b [e, k, 2n], gate columns first; ragged n (the gate tile's last columns read up's)
    "gated-silu-pointer": (50, 40, 50, [20, 0, 25], "bf16", (16, 32, 16), dict(gated="silu")),
    "gated-silu-tma-cycled": (70, 32, 48, [0, 30, 5, 0, 20, 11], "bf16", (16, 32, 16),
                              dict(gated="silu", b_groups=3)),
}


def _case(name):
    t, k, n, sizes, dtype, tile, *extra = GROUPED_CASES[name]
    return t, k, n, sizes, dtype, tile, (extra[0] if extra else {})


def test_grouped_gemm_cases_cover_both_loads():
    from ditron.kernels import grouped_gemm
    loads = {grouped_gemm.make_record(t, k, n, len(sizes), dtype=dtype, **extra)["loads"]
             for t, k, n, sizes, dtype, _, extra in map(_case, GROUPED_CASES)}
    assert loads == {"tma", "pointer"}  # 16-byte row strides or not


@pytest.mark.parametrize("case", sorted(GROUPED_CASES))
def test_grouped_gemm_ir_and_tiles_match_numpy(case):
    """The emitted IR (interpreted) and tiles()' compute both give each row its own group's product, rows past the
    last group zero (group g times b[g % b_groups]; gated: silu(gate) * up); Triton parses the kernel for both
    vendors."""
    from ditron.kernels import grouped_gemm
    t, k, n, sizes, dtype, (bm, bn, bk), extra = _case(case)
    out_dtype, sizes_dtype = ("fp32", "i64") if dtype == "fp16" else (dtype, "i32")
    rec = grouped_gemm.make_record(t, k, n, len(sizes), dtype=dtype, out_dtype=out_dtype, sizes_dtype=sizes_dtype,
                                   block_m=bm, block_n=bn, block_k=bk, num_sms=2, waves=1, **extra)
    gated, e_b = extra.get("gated"), extra.get("b_groups", len(sizes))
    rng = np.random.default_rng(RNG_SEED)
    a, b = random(dtype, (t, k), rng), random(dtype, (e_b, k, 2 * n if gated else n), rng)
    # each row's product with its group's b, exact (float64), and a bound of its terms' magnitudes
    exact, magnitude, start = np.zeros((t, n)), np.zeros((t, n)), 0
    for g, size in enumerate(sizes):
        end = min(start + max(size, 0), t)
        rows, w = a[start:end].astype(np.float64), b[g % e_b].astype(np.float64)
        if gated:  # silu(G) * U: |silu'| < 1.1, |silu(G)| <= |G| + 1; G, U, silu(G) and the product each rounded
            gate, up = rows @ w[:, :n], rows @ w[:, n:]     # to out_dtype: four roundings of the bound's one
            mag_gate, mag_up = np.abs(rows) @ np.abs(w[:, :n]), np.abs(rows) @ np.abs(w[:, n:])
            exact[start:end] = gate / (1 + np.exp(-gate)) * up
            magnitude[start:end] = 4 * ((np.abs(gate) + mag_gate + 1) * mag_up + 1.1 * mag_gate * np.abs(up))
        else:
            exact[start:end] = rows @ w
            magnitude[start:end] = np.abs(rows) @ np.abs(w)
        start = end

    def check(got):  # the kernel adds K steps in its own order: within fp32 accumulation + output rounding
        assert_sum_close(got, exact, magnitude, k, out_dtype)
    group_sizes = np.array(sizes, np.int64 if sizes_dtype == "i64" else np.int32)
    mem = {("a", 0): a.ravel().copy(), ("b", 0): b.ravel().copy(), ("sizes", 0): group_sizes,
           ("c", 0): np.full(t * n, 7, storage_dtype(out_dtype))}
    with ditron_context():
        module = ir.Module.create()
        func = grouped_gemm.build(rec, ip=ir.InsertionPoint(module.body))
        assert KernelRecord.of(func) == rec
        interp.run(func, mem, grid=grouped_gemm.grid(rec)[0])
        del module, func
    check(mem[("c", 0)].reshape(t, n))
    views = {"a": a, "b": b, "sizes": group_sizes, "c": np.full((t, n), 7, np.float32)}
    steps = grouped_gemm.tiles(rec, rank=0, num_ranks=1, scalars={})
    written = np.zeros((t, n), int)

    def view(r):
        return views[r.arg][tuple(slice(o, o + s) for o, s in zip(r.offsets, r.sizes))]
    for program in steps:
        for step in expanded(program, view):
            step.compute(view)
            (c,) = step.writes
            written[c.offsets[0]:c.offsets[0] + c.sizes[0], c.offsets[1]:c.offsets[1] + c.sizes[1]] += 1
            if step.reads:  # a tile of group g reads only its group's rows of a and b[g % b_groups] (twice gated)
                a_reg, *b_regs = step.reads
                assert len(b_regs) == (2 if gated else 1)
                rows = np.arange(a_reg.offsets[0], a_reg.offsets[0] + a_reg.sizes[0])
                groups = grouped_gemm.group_of_rows(group_sizes, rows)
                assert all((groups % e_b == r.offsets[0]).all() for r in b_regs)
                if gated:
                    assert b_regs[1].offsets[2] == b_regs[0].offsets[2] + n
    assert (written == 1).all()  # every element of c written once: tiles never straddle or overlap
    check(views["c"])
    for target in ("cuda:90", "hip:gfx942"):
        triton_parse(emit(rec, lower=target), ("cuda", 90, 32) if target == "cuda:90" else ("hip", "gfx942", 64))


@pytest.mark.parametrize("change,match", [
    (dict(block_m=8), "block_m must be a power of two >= 16"), (dict(sizes_dtype="f32"), "sizes_dtype 'f32'"),
    (dict(e=0), "field 'e' must be a positive integer"), (dict(dtype="fp8e4m3"), "dtype 'fp8e4m3' is not supported"),
    (dict(n=33, loads="tma"), "TMA loads need 16-byte row strides"), (dict(loads="cp.async"), "loads 'cp.async'"),
    (dict(gated="gelu"), "gated 'gelu' is not supported"), (dict(b_groups=3), "e = 2 groups do not cycle"),
])
def test_grouped_gemm_rejects_bad_records(change, match):
    from ditron.kernels import grouped_gemm
    rec = grouped_gemm.make_record(64, 32, 32, 2)
    rec.update(change)
    with pytest.raises(VerificationError, match=match):
        grouped_gemm.check(rec)


# ------------------------------------------------------------------------------------------ GEMM epilogues

EPILOGUE_CASES = {
    # bias + gelu, then a cast to fp16 on a bf16 GEMM stored as fp32
    "pointer-bias-gelu-cast": (dict(m=70, n=50, k=40, loads="pointer", store="pointer", persistent=False,
                                    out_dtype="fp32", epilogue_split=1, flatten=False),
                               [("add", "bias", 0), ("gelu",), ("cast", "fp16")]),
    "tma-persistent-residual-silu": (dict(m=70, n=56, k=40, loads="tma", store="tma", persistent=True,
                                          epilogue_split=2, flatten=True),
                                     [("silu",), ("add", "full", 1)]),
    "splitk3-bias-silu-mul": (dict(m=70, n=40, k=200, loads="pointer", store="pointer", persistent=False,
                                   split_k=3, epilogue_split=1, flatten=False, num_sms=100),
                              [("add", "bias", 0), ("silu_mul", "full", 1)]),
    "streamk-bias-relu": (dict(m=70, n=50, k=200, loads="pointer", store="pointer", persistent=True, stream_k=2,
                               epilogue_split=1, flatten=False, num_sms=4),
                          [("add", "bias", 1), ("relu",)]),
}


def _epilogue_steps(spec):
    steps = []
    for i, s in enumerate(spec):
        if s[0] == "cast":
            steps.append({"fn": "cast", "dtype": s[1]})
        elif len(s) == 1:
            steps.append({"fn": s[0]})
        else:
            steps.append({"fn": s[0], "arg": f"ep{i}", "operand": s[1], "dtype": "bf16", "acc": s[2]})
    return steps


def _epilogue_numpy(steps, acc, operands):
    from ditron.kernels.elementwise import NUMPY
    for s in steps:
        if s["fn"] == "cast":
            acc = round_to(s["dtype"], acc).astype(np.float32)
        elif "arg" not in s:
            acc = NUMPY[s["fn"]](acc)
        else:
            x = operands[s["arg"]].astype(np.float32)
            acc = NUMPY[s["fn"]](*((acc, x) if s["acc"] == 0 else (x, acc)))
    return acc


@pytest.mark.parametrize("case", sorted(EPILOGUE_CASES))
def test_gemm_epilogue_ir_matches_tiles_and_numpy(case):
    fields, spec = EPILOGUE_CASES[case]
    fields = dict(SMALL, **fields)
    m, n, k = fields.pop("m"), fields.pop("n"), fields.pop("k")
    steps = _epilogue_steps(spec)
    rec = gemm.make_record(m, n, k, name=f"gemm_ep_{case.replace('-', '_')}", epilogue=steps, **fields)
    assert rec["args"][3:3 + sum("arg" in s for s in steps)] == [s["arg"] for s in steps if "arg" in s]
    rng = np.random.default_rng(RNG_SEED)
    mem, ref = gemm_memory(rec, rng)
    operands, lds = {}, gemm_lds(rec)
    for s in steps:
        if "arg" in s:
            shape = (n,) if s["operand"] == "bias" else (m, n)
            operands[s["arg"]] = random("bf16", shape, rng)
            mem[(s["arg"], 0)] = operands[s["arg"]].ravel().copy()
            lds[s["arg"]] = None if s["operand"] == "bias" else n
    mem_ir, mem_tiles = run_both(rec, mem, lds)
    c_ir = mem_ir[("c", 0)].reshape(m, rec["ldc"])[:, :n]
    c_tiles = mem_tiles[("c", 0)].reshape(m, rec["ldc"])[:, :n]
    want = round_to(rec["out_dtype"], _epilogue_numpy(steps, ref.astype(np.float32), operands))
    close(c_ir, want, tol=2e-2)
    close(c_tiles, c_ir)
    triton_parse(emit(rec, lower="cuda:90"))


@pytest.mark.parametrize("steps, match", [
    ([{"fn": "erfc"}], "fn 'erfc' is unknown"),
    ([{"fn": "add", "arg": "ep0", "operand": "column", "dtype": "bf16"}], "needs arg"),
    ([{"fn": "mul", "arg": "ep0", "operand": "bias", "dtype": "bf16", "first_rank": True}], "only an add"),
    ([{"fn": "cast", "dtype": "fp64"}], "cast needs dtype"),
    ([], "non-empty"),
])
def test_gemm_epilogue_rejects_bad_steps(steps, match):
    rec = gemm.make_record(64, 64, 64, **SMALL)
    rec["epilogue"] = steps
    with pytest.raises(VerificationError, match=match):
        gemm.check(rec)


def test_gemm_epilogue_before_a_sum_over_ranks_is_adds_once_only():
    spec = {"arg": "inbox", "pad": "pushed", "slabs": 1, "sum": True, "value_arg": "epoch"}
    with pytest.raises(VerificationError, match="first_rank or own_rows adds"):
        gemm.make_record(64, 64, 64, push=spec, store="pointer", persistent=True,
                         epilogue=[{"fn": "gelu"}], **SMALL)
    rec = gemm.make_record(64, 64, 64, push=spec, store="pointer", persistent=True,
                           epilogue=[{"fn": "add", "arg": "bias", "operand": "bias", "dtype": "bf16",
                                      "first_rank": True}], **SMALL)
    assert rec["args"][-1] == "bias"


@pytest.mark.parametrize("fn, bias, out_dtype", [("gelu", False, None), ("add", True, None),
                                                 ("silu_mul", True, None), ("cast", False, "fp32")])
def test_elementwise_ir_matches_tiles_and_numpy(fn, bias, out_dtype):
    from ditron.kernels import elementwise
    rows, cols = 37, 70
    arity = elementwise.ARITY[fn]
    rec = elementwise.make_record(fn, arity, [rows, cols], "bf16", name=f"ew_{fn}", block=256, num_sms=2, waves=1,
                                  bias=bias, out_dtype=out_dtype)
    rng = np.random.default_rng(RNG_SEED)
    xs = [random("bf16", (cols,) if bias and i == 1 else (rows, cols), rng) for i in range(arity)]
    mem = {(f"x{i}", 0): x.ravel().copy() for i, x in enumerate(xs)}
    mem[("y", 0)] = np.zeros(rows * cols, storage_dtype(out_dtype or "bf16"))
    lds = {f"x{i}": cols for i in range(arity)}
    lds["y"] = cols
    if bias:
        lds["x1"] = None
    mem_ir, mem_tiles = run_both(rec, mem, lds)
    args = [x.astype(np.float32) for x in xs]
    want = round_to(out_dtype or "bf16", elementwise.NUMPY[fn](*args))
    close(mem_ir[("y", 0)].reshape(rows, cols), want)
    close(mem_tiles[("y", 0)], mem_ir[("y", 0)])
    triton_parse(emit(rec, lower="cuda:90"))


@pytest.mark.parametrize("W", [2, 3])
def test_gemm_epilogue_adds_once_before_a_sum_match_tiles(W):
    """The adds that move before a reduction over the ranks: rank r adds its bias and residual to the rows it owns
    (own_rows R: rows [r R, (r + 1) R), a residual [R, n] of its own) and rank 0 alone adds a replicated term
    (first_rank); row tiles straddle the ranks' rows (R = 20, BLOCK_M 16); summed over the ranks, each row got its
    owner's bias and residual and the replicated term once."""
    R, n, k = 20, 44, 32
    m = W * R
    steps = [{"fn": "add", "arg": "bias", "operand": "bias", "dtype": "bf16", "own_rows": R},
             {"fn": "add", "arg": "res", "operand": "full", "dtype": "bf16", "own_rows": R, "acc": 1},
             {"fn": "add", "arg": "rep", "operand": "full", "dtype": "bf16", "first_rank": True}]
    rec = gemm.make_record(m, n, k, loads="pointer", store="pointer", persistent=True, epilogue_split=1,
                           flatten=False, out_dtype="fp32", epilogue=steps, **dict(SMALL, block_m=16))
    rng = np.random.default_rng(RNG_SEED)
    a, bs, _ = rank_products(W, m, n, k, rng)
    rep = random("bf16", (m, n), rng)
    biases = [random("bf16", (n,), rng) for _ in range(W)]
    res = [random("bf16", (R, n), rng) for _ in range(W)]
    mem = {}
    for r in range(W):
        mem[("a", r)], mem[("b", r)], mem[("c", r)] = a, bs[r], np.zeros(m * n, np.float32)
        mem[("bias", r)], mem[("res", r)], mem[("rep", r)] = biases[r], res[r].ravel().copy(), rep.ravel().copy()
    lds = gemm_lds(rec) | {"bias": None, "res": n, "rep": n}
    mem_ir, mem_tiles = run_both(rec, mem, lds, ranks=range(W), num_ranks=W)
    a32 = a.reshape(m, k).astype(np.float32)
    total = np.zeros((m, n), np.float32)
    for r in range(W):
        want = a32 @ bs[r].reshape(k, n).astype(np.float32)
        want[r * R:(r + 1) * R] += biases[r].astype(np.float32) + res[r].astype(np.float32)
        if r == 0:
            want += rep.astype(np.float32)
        close(mem_ir[("c", r)].reshape(m, n), want)
        close(mem_tiles[("c", r)], mem_ir[("c", r)])
        total += mem_ir[("c", r)].reshape(m, n)
    owner = np.repeat(np.arange(W), R)
    expect = sum(a32 @ b.reshape(k, n).astype(np.float32) for b in bs) + rep.astype(np.float32) + \
        np.stack([biases[q] for q in owner]).astype(np.float32) + np.concatenate(res).astype(np.float32)
    close(total, expect, tol=3e-2)
    triton_parse(emit(rec, lower="cuda:90"))
