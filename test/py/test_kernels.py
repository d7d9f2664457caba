"""CPU tests of the GEMM kernel template (ditron.kernels.gemm) and its configs; copy and reduce are in
test_kernels_copy_reduce.py, grouped GEMM and epilogues in test_kernels_grouped_epilogue.py, helpers in kernel_checks.py.

Three views are checked against each other on small problems, including shapes that do not divide evenly:
the emitted IR run by the numpy interpreter (ditron.kernels.interp), the template's ``tiles()`` run on the same
data, and numpy itself. The IR's trace (waits, elements read and written, notifies per tile, per program) must
match ``tiles()`` exactly. Emitted modules are re-parsed by Triton, and a few are compiled to machine code:
wgmma in the sm_90 GEMM, v_mfma on gfx942, vector loads through symm_at.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from mlir import ir

from ditron.dialects import ditron_context
from ditron.errors import VerificationError
from ditron.kernels import KERNEL_ATTR, KernelRecord, copy, gemm, get_template, interp, reduce
from ditron.kernels.numerics import random, round_to
from kernel_checks import RNG_SEED, SMALL, emit, triton_parse, run_both, close, gemm_memory, rank_products, gemm_lds


# ------------------------------------------------------------------------------------------------ GEMM

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
