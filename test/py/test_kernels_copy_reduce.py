"""CPU tests of the copy and reduce kernel templates (ditron.kernels: copy, reduce), and the templates compiled by
Triton to machine code (wgmma on sm_90, v_mfma on gfx942, vector loads through symm_at) and built as GPU test inputs.
As in test_kernels.py: the emitted IR run by the numpy interpreter must match ``tiles()`` and numpy."""
from __future__ import annotations

import numpy as np
import pytest

from ditron.errors import VerificationError
from ditron.kernels import chunk, copy, gemm, reduce
from ditron.kernels.numerics import random, round_to, storage_dtype
from tolerances import assert_sum_close
from kernel_checks import RNG_SEED, emit, triton_parse, compile_text, run_both, close, _lower_available


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
