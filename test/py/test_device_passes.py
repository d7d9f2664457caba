"""ditron-tile, ditron-lower-task-to-device, ditron-schedule-overlap, ditron-lower-device-to-core and the
ditron-default pipeline: the cost model, the structure of what they emit, and — through ditron.sim — that the
programs are free of races and deadlocks and compute what the task program says, for W in {1, 2, 4, 8} and
M in {128·W, 4091·W}. Mutation tests check that every wait and signal the passes emit is needed."""
from __future__ import annotations

from pathlib import Path

import pytest
from mlir import ir

from ditron.cost_model import (PEAKS, ag_gemm_ideal, best_gemm_config, gemm_candidates, gemm_rs_ideal, gemm_time,
                               peaks_for)
from ditron.dialects import device, ditron_context, parse_module
from ditron.dialects.opbase import walk_ops
from ditron.dialects.verify import verify
from ditron.errors import PassError, TargetError
from ditron.kernels import KernelRecord
from ditron.passes.registry import PASSES, PIPELINES, get_pass_class, parse_pipeline
from ditron.sim import simulate, task_reference

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "ditron-tile{%s},ditron-lower-task-to-device,ditron-schedule-overlap{%s}"
FULL = DEVICE + ",ditron-lower-device-to-core"


# --------------------------------------------------------------------------------------------- programs

def _mesh(w: int) -> str:
    return f'module attributes {{ditron.mesh = {{axes = ["tp"], shape = array<i64: {w}>}}}}'


def _overlap(group: int, kind: str, role: str) -> str:
    return f'ditron.overlap = {{group = {group} : i64, kind = "{kind}", role = "{role}"}}'


def local_program(kind: str, w: int, m: int, k: int = 32, n: int = 32) -> str:
    """A local-view task program of one pattern; m = rows of one shard (the GEMM's M is w*m)."""
    big = w * m
    t = lambda r, c: f"tensor<{r}x{c}xbf16>"  # noqa: E731
    if kind == "ag_gemm":
        args, res = f"%x: {t(m, k)}, %w: {t(k, n)}", t(big, n)
        body = (f'%g = "ditron_task.all_gather"(%x) {{axis = "tp", dim = 0 : i64, {_overlap(0, "ag_matmul", "producer")}}}'
                f' : ({t(m, k)}) -> {t(big, k)}\n'
                f'    %y = "ditron_task.matmul"(%g, %w) {{{_overlap(0, "ag_matmul", "consumer")}}} : ({t(big, k)}, '
                f'{t(k, n)}) -> {t(big, n)}')
    elif kind in ("gemm_rs", "gemm_ar"):
        coll = "reduce_scatter" if kind == "gemm_rs" else "all_reduce"
        ok = "matmul_rs" if kind == "gemm_rs" else "matmul_ar"
        out = t(m, n) if kind == "gemm_rs" else t(big, n)
        dim = "dim = 0 : i64, " if kind == "gemm_rs" else ""
        args, res = f"%x: {t(big, k)}, %w: {t(k, n)}", out
        body = (f'%p = "ditron_task.matmul"(%x, %w) {{{_overlap(0, ok, "producer")}}} : ({t(big, k)}, {t(k, n)}) -> '
                f'{t(big, n)}\n'
                f'    %y = "ditron_task.{coll}"(%p) {{axis = "tp", {dim}reduce = "sum", {_overlap(0, ok, "consumer")}}}'
                f' : ({t(big, n)}) -> {out}')
    elif kind == "all_gather":
        args, res = f"%x: {t(m, k)}", t(big, k)
        body = f'%y = "ditron_task.all_gather"(%x) {{axis = "tp", dim = 0 : i64}} : ({t(m, k)}) -> {t(big, k)}'
    elif kind == "reduce_scatter":
        args, res = f"%x: {t(big, k)}", t(m, k)
        body = (f'%y = "ditron_task.reduce_scatter"(%x) {{axis = "tp", dim = 0 : i64, reduce = "sum"}} : '
                f'({t(big, k)}) -> {t(m, k)}')
    elif kind == "all_reduce":
        args, res = f"%x: {t(big, k)}", t(big, k)
        body = f'%y = "ditron_task.all_reduce"(%x) {{axis = "tp", reduce = "sum"}} : ({t(big, k)}) -> {t(big, k)}'
    elif kind == "all_to_all":
        args, res = f"%x: {t(big, k)}", t(big, k)
        body = (f'%y = "ditron_task.all_to_all"(%x) {{axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64}} : '
                f'({t(big, k)}) -> {t(big, k)}')
    else:
        raise ValueError(kind)
    return (f'{_mesh(w)} {{\n  func.func @{kind}({args}) -> {res} attributes {{ditron.view = "local"}} {{\n'
            f'    {body}\n    return %y : {res}\n  }}\n}}\n')


def lower(text: str, pipeline: str) -> str:
    with ditron_context():
        module = parse_module(text)
        for p in parse_pipeline(pipeline):
            p.run(module)
            verify(module)
        out = str(module)
        del module
    return out


def partitioned(text: str) -> str:
    return lower(text, "ditron-partition")


def check_sim(device_text: str, reference_text: str, w: int, seeds=(0,), calls: int = 2, graph: bool = False) -> None:
    reference = task_reference(reference_text)
    for seed in seeds:
        result = simulate(device_text, world_size=w, seed=seed, calls=calls, reference=reference, graph=graph)
        assert result.ok, result.summary()


# ------------------------------------------------------------------------------------------- cost model

def test_peak_table_covers_the_targets_and_names_its_sources():
    h200 = peaks_for("cuda:90")
    assert (h200.gemm_flops, h200.link_bw, h200.hbm_copy_bw) == (790e12, 371e9, 4.25e12)
    assert peaks_for("cuda:sm_90a").target == "cuda:90" and peaks_for("CUDA:90a").num_sms == 132
    assert peaks_for("hip:gfx942").link_topology == "mesh"
    assert all(p.source for p in PEAKS.values())
    with pytest.raises(TargetError, match="no performance numbers for target 'cuda:75'"):
        peaks_for("cuda:75")


def test_design_ideal_times():
    p = peaks_for("cuda:90")
    m, n, k, w = 8192, 28672, 8192, 8
    t_comp = 2 * m * k * (n / w) / p.gemm_flops
    t_comm = (w - 1) / w * m * k * 2 / p.link_bw
    assert ag_gemm_ideal(m, n, k, w, p) == pytest.approx(max(t_comp, t_comm + t_comp / w))
    t_comp = 2 * m * (k / w) * n / p.gemm_flops
    t_comm = (w - 1) / w * m * n * 2 / p.link_bw
    assert gemm_rs_ideal(m, n, k, w, p) == pytest.approx(max(t_comp, t_comm) + min(t_comp, t_comm) / w)


def test_gemm_configs_fit_shared_memory_and_follow_the_problem():
    for target in ("cuda:90", "cuda:80", "hip:gfx942"):
        p = peaks_for(target)
        vendor = target.split(":")[0]
        assert all(c.smem_bytes(2, vendor) <= p.smem_per_sm for c in gemm_candidates(p))
    p = peaks_for("cuda:90")
    big, _ = best_gemm_config(8192, 8192, 8192, p)
    small, _ = best_gemm_config(128, 4096, 4096, p)
    assert big.block_m * big.block_n > small.block_m * small.block_n
    # fewer SMs: never faster
    assert gemm_time(8192, 8192, 8192, big, p, sms=66) > gemm_time(8192, 8192, 8192, big, p)


def test_grouped_gemm_tiles_follow_the_rows_an_expert_gets():
    """Few rows an expert: memory-bound on the weights, every tile as fast; the model takes 64-row tiles, which pad
    least. Many rows an expert: math-bound, the big tile. The weights of the experts that get rows cross HBM once."""
    from ditron.cost_model import best_grouped_gemm_config, grouped_gemm_candidates, grouped_gemm_time
    p = peaks_for("cuda:90")
    assert all(c.smem_bytes(2, "cuda") <= p.smem_per_sm for c in grouped_gemm_candidates(p))
    few, t_few = best_grouped_gemm_config(256, 4096, 14336, 8, p)  # 32 rows an expert
    many, _ = best_grouped_gemm_config(16384, 4096, 14336, 8, p)  # 2048
    assert few.block_m == 64 and (many.block_m, many.block_n) == (128, 256)
    assert t_few >= 8 * 4096 * 14336 * 2 / p.hbm_copy_bw
    # more experts than tokens: only the experts that get a row are read
    t_sparse, _ = grouped_gemm_time(4, 4096, 4096, 128, few, p)
    assert t_sparse < 8 * 4096 * 4096 * 2 / p.hbm_copy_bw
    # AMD names no grouped tiles: its GEMM candidates serve
    assert grouped_gemm_candidates(peaks_for("hip:gfx942"))


def test_gated_gemm_time_is_the_tile_by_tile_schedule_in_constant_time_per_program():
    """cost_model.gated_gemm_time in closed form (per program: the own tiles' first, the peer tiles' two ends)
    equals the tile-by-tile schedule it models, and stays quick for any tile count (a loop over 2^30 tiles hung
    ditron-tile on a huge M)."""
    import math
    import random
    import time

    from ditron.cost_model import gated_gemm_time

    def by_tile(t_gemm, tiles, sms, *, own, first, last, start, own_ready):
        grid = max(1, min(sms, tiles))
        d, finish = t_gemm / math.ceil(tiles / grid), start
        for p in range(grid):
            t = start
            for j in range(p, tiles, grid):
                t = max(t, own_ready if j < own else first + (last - first) * (j - own + 1) / (tiles - own)) + d
            finish = max(finish, t)
        return finish

    rng = random.Random(7)
    for _ in range(3000):
        tiles = rng.randint(1, 400)
        kw = dict(own=rng.randint(0, tiles), first=rng.random(), last=2 * rng.random(), start=rng.random() / 2,
                  own_ready=rng.random())
        sms = rng.randint(1, 140)
        assert gated_gemm_time(1.0, tiles, sms, **kw) == pytest.approx(by_tile(1.0, tiles, sms, **kw), rel=1e-12)
    begin = time.perf_counter()
    gated_gemm_time(1.0, 2 ** 40, 132, own=2 ** 38, first=0.1, last=0.5)
    assert time.perf_counter() - begin < 0.1


def test_skinny_gemm_tiles_fill_shared_memory_and_a_split_pays_its_lock():
    """M = 128 GEMMs are memory-bound: the small tiles come with the deepest pipelines shared memory holds (a
    shallower twin for smaller shared memories), and a split-K costs the wait of its last split, so a whole-K
    wave of 64x64 tiles beats 64x128 tiles split in two (H200: 30.0-30.2 us against 30.9-32.3 for GEMM+AR)."""
    from ditron.cost_model import gemm_split
    p = peaks_for("cuda:90")
    tiles = [(c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages) for c in gemm_candidates(p)]
    assert {(64, 128, 64, 4, 8), (64, 64, 128, 4, 6), (128, 128, 64, 8, 5)} <= set(tiles)
    assert tiles.index((64, 128, 64, 4, 8)) < tiles.index((64, 128, 64, 4, 6))  # the deeper twin wins a tie
    for c in gemm_candidates(p):
        assert c.smem_bytes(2, "cuda") <= p.smem_per_sm
    a100 = {(c.block_m, c.block_n, c.block_k) for c in gemm_candidates(peaks_for("cuda:80"))}
    assert (64, 128, 64) in a100 and (64, 64, 64) in a100  # the 6-stage twins fit where 8 stages do not
    cfg = {(c.block_m, c.block_n, c.block_k, c.num_stages): c for c in gemm_candidates(p)}
    wide, whole = cfg[(64, 128, 64, 8)], cfg[(64, 64, 128, 6)]
    m, n, k = 128, 4096, 7168
    assert gemm_split(m, n, k, wide, p.num_sms) == 2 and gemm_split(m, n, k, whole, p.num_sms) == 1
    t_split = gemm_time(m, n, k, wide, p, split=2)
    assert t_split > gemm_time(m, n, k, whole, p)
    assert t_split - gemm_time(m, n, k, wide, p.__class__(**{**vars(p), "signal_latency": 0.0}), split=2) == \
        pytest.approx(p.signal_latency)


def test_split_k_partials_cost_one_sms_share_of_hbm():
    """The last split reads every other split's fp32 partial tile back alone, at one SM's share of HBM: a 5-way
    split of 128x256 tiles (640 KB of partials a tile) is not the model's choice at 257 x 2048 x 7168, where it ran
    57.3 us against 30.3 for whole 64x128 tiles (H200, results/tune_candidates.csv)."""
    from ditron.cost_model import gemm_split
    p = peaks_for("cuda:90")
    m, n, k = 257, 2048, 7168
    cands = gemm_candidates(p)

    def t(c):
        return gemm_time(m, n, k, c, p, split=gemm_split(m, n, k, c, p.num_sms))
    big = next(c for c in cands if (c.block_m, c.block_n) == (128, 256))
    assert gemm_split(m, n, k, big, p.num_sms) == 5
    best = min(cands, key=t)
    assert (best.block_m, best.block_n) != (128, 256)
    skinny = next(c for c in cands if (c.block_m, c.block_n, c.block_k, c.num_stages) == (64, 128, 64, 8))
    assert t(big) > 1.3 * t(skinny)  # measured 1.89x (the model: 1.44x)


# ---------------------------------------------------------------------------------------------- ditron-tile

def _tilings(text: str) -> list[dict]:
    from ditron.passes.tile import Tiling
    with ditron_context():
        module = parse_module(text)
        out = [dict(vars(Tiling.of(op))) for op in walk_ops(module.operation) if "ditron.tiling" in op.attributes]
        del module
    return out


@pytest.mark.parametrize("m", [128, 4091, 2048])
def test_tile_chunks_divide_the_shard(m):
    for kind in ("ag_gemm", "gemm_rs"):
        tilings = _tilings(lower(local_program(kind, 4, m, k=256, n=256), "ditron-tile"))
        assert tilings and all(t["shard_rows"] % t["chunk_rows"] == 0 for t in tilings)
        assert all(t["num_chunks"] == t["shard_rows"] // t["chunk_rows"] for t in tilings)


def test_tile_options_override_the_model():
    text = lower(local_program("gemm_rs", 4, 512, k=256, n=256),
                 "ditron-tile{block-m=64 block-n=64 block-k=32 num-warps=2 num-stages=2 chunk-rows=256 comm-sms=20}")
    for t in _tilings(text):
        assert (t["block_m"], t["block_n"], t["block_k"], t["num_warps"], t["num_stages"]) == (64, 64, 32, 2, 2)
        assert (t["chunk_rows"], t["comm_sms"], t["sm_budget"]) == (256, 20, 112)


def test_tile_rejects_bad_options():
    with pytest.raises(PassError, match="has no option 'block-q'"):
        parse_pipeline("ditron-tile{block-q=4}")
    with pytest.raises(PassError, match="num-warps must be 1, 2, 4, 8 or 16, got 3"):
        parse_pipeline("ditron-tile{num-warps=3}")
    with pytest.raises(PassError, match="all-reduce must be one of one_shot, two_shot, push, epilogue"):
        parse_pipeline("ditron-tile{all-reduce=three_shot}")
    with pytest.raises(PassError, match="reduce-scatter must be one of epilogue, reduce_kernel, one_launch"):
        parse_pipeline("ditron-tile{reduce-scatter=tree}")


def test_tile_epilogue_all_reduce_needs_a_gemm():
    with pytest.raises(PassError, match="all-reduce=epilogue reduces in a GEMM's epilogue; this all-reduce does not "
                                        "follow a GEMM"):
        lower(local_program("all_reduce", 2, 256, k=64), "ditron-tile{all-reduce=epilogue}")


@pytest.mark.parametrize("kind,W,algorithm", [("gemm_rs", 2, "epilogue"), ("gemm_ar", 4, "epilogue"),
                                              ("gemm_ar", 2, "push")])
def test_tile_model_reduces_large_gemms_in_the_epilogue(kind, W, algorithm):
    """At LLaMA-70B sizes the model keeps every SM on the GEMM: GEMM+RS moves partials with the copy engine and
    reduces in the epilogue; GEMM+AR on two ranks pushes each C tile into the peer's inbox from the GEMM's epilogue,
    which costs less than the epilogue reduction's gather and output copy, as measured on two ranks
    (cost_model.EPILOGUE_GATHER_SLOWDOWN). On four ranks a push stores three full copies of C, and the SMs' stores
    add their link time to the GEMM's (cost_model.gemm_push_estimate): the epilogue moves half the bytes, by the
    copy engine, beside the GEMM."""
    text = lower(local_program(kind, W, 4096, k=14336, n=8192), "ditron-tile")
    for t in _tilings(text):
        assert t["algorithm"] == algorithm and t["sm_budget"] == 132
        assert t["comm_sms"] == (0 if algorithm == "epilogue" else 132)


@pytest.mark.parametrize("W,algorithm", [(2, "push"), (4, "two_shot"), (8, "two_shot")])
def test_tile_model_all_reduces_large_tensors_two_shot_from_four_ranks(W, algorithm):
    """A 16 MB all-reduce runs in one launch (engine sm) either way: one-shot by push on two ranks, where every
    algorithm moves the same bytes, the two-shot launch measured slower (cost_model.TWO_SHOT_LAUNCH_SLOWDOWN) and
    stores beat loads over the link (cost_model.SM_STORE_LINK_GAIN); two-shot from four ranks on (each rank reads
    1/W of the tiles from every peer and writes the sums back, instead of W-1 full transfers)."""
    rows = 16384 // W  # local_program's m: one shard; the all-reduce's input is W * m rows
    text = lower(local_program("all_reduce", W, rows, k=512), "ditron-tile")
    (t,) = _tilings(text)
    assert (t["algorithm"], t["engine"]) == (algorithm, "sm")


@pytest.mark.parametrize("m,k,n,algorithm", [(64, 8192, 14336, "one_launch"), (64, 4096, 7168, "one_launch"),
                                             (512, 4096, 7168, "one_launch"), (512, 8192, 14336, "pull"),
                                             (4096, 4096, 7168, "pull")])
def test_tile_model_gathers_small_shards_in_the_gemm_launch(m, k, n, algorithm):
    """AG+GEMM on two ranks (LLaMA-3 70B / 8B shapes), as measured on 2xH200 (results/ablation_ag_one_launch.csv):
    at M = 128, and at 8B M = 1024, the GEMM's own programs push the shards before their tiles (one launch: no
    stream hand-off, which the model charges hop_latency to the peers' rows and to the own rows' staging alike);
    at 70B M = 1024 and M = 8192 the gather by streams hides under a GEMM long enough to overlap it, where one
    launch would expose the whole push, in one chunk (70B M = 1024 in 4 chunks ran 571-574 us against 403-407)."""
    t = _tilings(lower(local_program("ag_gemm", 2, m, k=k, n=n), "ditron-tile"))[0]  # the group's, on both ops
    assert t["kind"] == "ag_matmul"
    assert t["algorithm"] == algorithm and t["num_chunks"] == 1
    if algorithm == "one_launch":
        assert (t["engine"], t["comm_sms"], t["num_chunks"]) == ("sm", 0, 1)
        # own rows first from the shard where the GEMM is compute-bound (8B M = 1024: 94.5 us against 116.5); the
        # skinny ones keep every rank's tiles together, sharing B in L2 (8B M = 128: 27.9 against 33.9-34.8)
        assert t["own_first"] == (m == 512)


MATMUL = """module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @mm(%a: tensor<70x200xbf16>, %b: tensor<200x50xbf16>) -> tensor<70x50xbf16> attributes {ditron.view = "local"} {
    %c = "ditron_task.matmul"(%a, %b) : (tensor<70x200xbf16>, tensor<200x50xbf16>) -> tensor<70x50xbf16>
    return %c : tensor<70x50xbf16>
  }
}
"""


@pytest.mark.parametrize("sms,stream_k", [(4, 2), (8, 6), (16, 6)])
def test_stream_k_matmul_lowers_and_simulates(sms, stream_k):
    """ditron-tile{stream-k=true}: a matmul's partial last wave (6 tiles of 32x32 on 4 SMs: 2; below a wave: all
    6) shared out by K steps, lowered with its workspace and locks, and simulated over two calls (the locks left
    zero by the first) against the task program."""
    opts = f"stream-k=true num-sms={sms} block-m=32 block-n=32 block-k=16 num-stages=2 num-warps=4"
    (t,) = _tilings(lower(MATMUL, f"ditron-tile{{{opts}}}"))
    assert (t["stream_k"], t["persistent"]) == (stream_k, True)
    text = lower(MATMUL, f"ditron-tile{{{opts}}},ditron-lower-task-to-device")
    assert f"memref<{sms * 32}x32xf32>" in text and f"memref<{sms}xi32>" in text
    check_sim(text, MATMUL, 1, seeds=(0, 1))


@pytest.mark.parametrize("m,k,n,group", [(512, 8192, 14336, 4), (4096, 4096, 7168, 8)])
def test_ag_gemm_by_streams_visits_its_own_rows_first(m, k, n, group):
    """AG+GEMM by pull: the own rows are there at once, the peers' later, so the rank-rotated order must put every
    own tile first -- GROUP_M cut to divide the shard's row blocks (70B M = 1024: 4 blocks of 128; a group of 8
    mixed both ranks' rows into every column sweep, and the first wave's peer tiles waited for the pull: 2xH200
    369.6-370.4 us against 397.7-401.0, results/ablation_ag_group.csv)."""
    text = lower(local_program("ag_gemm", 2, m, k=k, n=n), "ditron-tile{all-gather=pull},ditron-lower-task-to-device,"
                                                             "ditron-schedule-overlap")
    with ditron_context():
        module = parse_module(text)
        (name,) = [device.Launch(op).kernel for op in walk_ops(module.operation) if device.Launch.match(op)
                   and ir.StringAttr(op.attributes["ditron.role"]).value == "ag.gemm"]
        (rec,) = [KernelRecord.from_attr(op.operation.attributes["ditron.kernel"]) for op in module.body.operations
                  if "sym_name" in op.operation.attributes
                  and ir.StringAttr(op.operation.attributes["sym_name"]).value == name]
        del module
    assert (rec["tile_order"], rec["group_m"]) == ("rank_rotated", group)
    assert (m // rec["block_m"]) % rec["group_m"] == 0


def test_one_launch_own_rows_first_hide_the_push_unless_b_is_read_twice():
    """The one-launch AG+GEMM model: with the own rows' tiles first (fewer than the programs), the push runs on the
    other programs beside them, so the estimate drops by about the push; a skinny GEMM that reads B from HBM once
    per rank that way pays for it instead; where the tiles mix two ranks' rows there are no own tiles."""
    from ditron.cost_model import ag_gemm_one_launch_estimate
    peaks = PEAKS["cuda:90"]
    shard, b = 512 * 4096 * 2, 4096 * 7168 * 2
    kw = dict(tiles=224, sms=132, b_bytes=b)
    first = ag_gemm_one_launch_estimate(88e-6, shard, 2, peaks, tiles_span_ranks=False, own_first=True, **kw)
    after = ag_gemm_one_launch_estimate(88e-6, shard, 2, peaks, tiles_span_ranks=False, own_first=False, **kw)
    assert first < after - 5e-6
    assert ag_gemm_one_launch_estimate(88e-6, shard, 2, peaks, tiles_span_ranks=True, own_first=True, **kw) == after
    skinny = dict(tiles=112, sms=132, b_bytes=b, tiles_span_ranks=False)
    assert ag_gemm_one_launch_estimate(19.6e-6, 64 * 4096 * 2, 2, peaks, own_first=True, **skinny) > \
        ag_gemm_one_launch_estimate(19.6e-6, 64 * 4096 * 2, 2, peaks, own_first=False, **skinny)


def test_tile_one_launch_gather_rejects_a_comm_engine():
    text = local_program("ag_gemm", 2, 64)
    for option in ("engine=copy_engine", "comm-sms=8", "num-chunks=2"):
        with pytest.raises(PassError, match="all-gather=one_launch pushes whole shards with the GEMM's own SMs: it "
                                            "takes no engine=copy_engine, comm-sms, chunk-rows or num-chunks"):
            lower(text, f"ditron-tile{{all-gather=one_launch {option}}}")
        assert _tilings(lower(text, f"ditron-tile{{{option}}}"))[0]["algorithm"] != "one_launch"


# ----------------------------------------------------------------------------------------- the registry

def test_passes_and_default_pipeline_are_registered():
    for name in ("ditron-fuse-epilogue", "ditron-tile", "ditron-lower-task-to-device", "ditron-schedule-overlap",
                 "ditron-lower-device-to-core"):
        cls = get_pass_class(name)
        assert cls.name == name and cls.summary
        module = __import__(f"ditron.passes.{PASSES[name].split(':')[0]}", fromlist=["x"])
        assert "becomes" in module.__doc__, f"{name}: the module docstring shows a before/after example"
    assert PIPELINES["ditron-default"] == (
        "ditron-partition", "ditron-canonicalize", "ditron-fuse-overlap", "ditron-fuse-epilogue", "ditron-tile",
        "ditron-lower-task-to-device", "ditron-schedule-overlap", "ditron-lower-device-to-core",
        "ditron-emit-host-program")
    assert PIPELINES["ditron-device"] == PIPELINES["ditron-default"][:-1]  # up to the device program


# ----------------------------------------------------------------------------------- structure of output

def _launches_and_kernels(text: str):
    with ditron_context():
        module = parse_module(text)
        launches = [device.Launch(op) for op in walk_ops(module.operation) if device.Launch.match(op)]
        records = {ir.StringAttr(op.operation.attributes["sym_name"]).value:
                   KernelRecord.from_attr(op.operation.attributes["ditron.kernel"])
                   for op in module.body.operations if op.operation.name == "tt.func"}
        info = [(ln.kernel, len(ln.args), ln.grid, ln.tile_order, int(ln.op.attributes["stream"].value))
                for ln in launches]
        decls = [op for op in module.body.operations if op.operation.name == "func.func"
                 and "ditron.kernel" in op.operation.attributes]
        assert not decls, "lower-device-to-core leaves no kernel declaration behind"
        del module, launches
    return info, records


@pytest.mark.parametrize("example", ["mlp", "ag_gemm", "gemm_rs", "gemm_ar"])
def test_default_pipeline_on_the_examples(example):
    text = (ROOT / "examples" / f"{example}.mlir").read_text()
    out = lower(text, "ditron-device")
    info, records = _launches_and_kernels(out)
    assert info, "the program launches kernels"
    for kernel, nargs, grid, order, stream in info:
        assert kernel in records, f"launch of @{kernel}, which is not instantiated"
        rec = records[kernel]
        assert len(rec["args"]) == nargs
        assert rec.get("tile_order", order) == order
    if example in ("ag_gemm", "mlp"):
        assert any(order == "rank_rotated" for _, _, _, order, _ in info)
    if example in ("gemm_rs", "mlp"):  # the model reduces in the GEMM's epilogue: no reduce kernel, all SMs
        rs = [records[k] for k, *_ in info if "reduce_own" in records[k]]
        assert rs and all(r["num_sms"] == 132 and r["reduce_own"]["parts"] == r["m"] // r["rows_per_rank"] - 1
                          for r in rs)
        assert not any(records[k]["template"] == "reduce" for k, *_ in info)
        assert "rs.pull" in out and "stream = 1 : i64" in out


def test_default_pipeline_kernels_compile_with_triton():
    """Every kernel ditron-device instantiates for the MLP goes through Triton for both vendors (its gelu in the
    first GEMM's epilogue: ditron-fuse-epilogue)."""
    from ditron.compiler import lower_and_compile
    text = partitioned_global_mlp(4, 64)
    out = lower(text, "ditron-device")
    for target in ("cuda:90", "hip:gfx942"):
        with ditron_context():
            module = parse_module(out)
            kernels = [op for op in module.body.operations if op.operation.name == "tt.func"]
            compiled = lower_and_compile(module, target)
            assert len(kernels) >= 2 and len(compiled) == len(kernels)  # the GEMMs, ...
            assert any("epilogue" in str(k.operation.attributes["ditron.kernel"]) for k in kernels)
            del module, kernels


def partitioned_global_mlp(w: int, m: int, k: int = 64, f: int = 32) -> str:
    """The Megatron MLP of examples/mlp.mlir at a small size: m rows per rank, f hidden columns per rank."""
    big, hid = w * m, w * f
    t = lambda r, c: f"tensor<{r}x{c}xbf16>"  # noqa: E731
    return (f'{_mesh(w)} {{\n'
            f'  func.func @mlp(%x: {t(big, k)} {{ditron.sharding = {{dims = [["tp"], []]}}}},\n'
            f'                 %w1: {t(k, hid)} {{ditron.sharding = {{dims = [[], ["tp"]]}}}},\n'
            f'                 %w2: {t(hid, k)} {{ditron.sharding = {{dims = [["tp"], []]}}}})\n'
            f'      -> ({t(big, k)} {{ditron.sharding = {{dims = [["tp"], []]}}}}) {{\n'
            f'    %h = "ditron_task.matmul"(%x, %w1) : ({t(big, k)}, {t(k, hid)}) -> {t(big, hid)}\n'
            f'    %a = "ditron_task.elementwise"(%h) {{fn = "gelu"}} : ({t(big, hid)}) -> {t(big, hid)}\n'
            f'    %y = "ditron_task.matmul"(%a, %w2) : ({t(big, hid)}, {t(hid, k)}) -> {t(big, k)}\n'
            f'    return %y : {t(big, k)}\n  }}\n}}\n')


def global_example(example: str, w: int, m: int, k: int = 64, n: int = 32) -> str:
    """examples/{ag_gemm,gemm_rs,gemm_ar}.mlir at a small size (same shardings); "reshard": relu of rows-sharded x,
    returned sharded by columns (ditron-partition's all_to_all)."""
    big = w * m
    t = lambda r, c: f"tensor<{r}x{c}xbf16>"  # noqa: E731
    if example == "reshard":
        return (f'{_mesh(w)} {{\n'
                f'  func.func @reshard(%x: {t(big, k)} {{ditron.sharding = {{dims = [["tp"], []]}}}})\n'
                f'      -> ({t(big, k)} {{ditron.sharding = {{dims = [[], ["tp"]]}}}}) {{\n'
                f'    %y = "ditron_task.elementwise"(%x) {{fn = "relu"}} : ({t(big, k)}) -> {t(big, k)}\n'
                f'    return %y : {t(big, k)}\n  }}\n}}\n')
    if example == "ag_gemm":
        xs, ws, ys, x, wt, y = '[["tp"], []]', '[[], ["tp"]]', '[[], ["tp"]]', t(big, k), t(k, w * n), t(big, w * n)
    else:
        out = '[["tp"], []]' if example == "gemm_rs" else '[[], []]'
        xs, ws, ys, x, wt, y = '[[], ["tp"]]', '[["tp"], []]', out, t(big, w * k), t(w * k, n), t(big, n)
    return (f'{_mesh(w)} {{\n'
            f'  func.func @{example}(%x: {x} {{ditron.sharding = {{dims = {xs}}}}}, %w: {wt} {{ditron.sharding = '
            f'{{dims = {ws}}}}}) -> ({y} {{ditron.sharding = {{dims = {ys}}}}}) {{\n'
            f'    %y = "ditron_task.matmul"(%x, %w) : ({x}, {wt}) -> {y}\n'
            f'    return %y : {y}\n  }}\n}}\n')


@pytest.mark.parametrize("w", [1, 2, 4])
@pytest.mark.parametrize("example", ["mlp", "ag_gemm", "gemm_rs", "gemm_ar", "reshard"])
def test_default_pipeline_simulates_equal_to_the_reference(example, w):
    text = partitioned_global_mlp(w, 64) if example == "mlp" else global_example(example, w, 64)
    check_sim(lower(text, "ditron-device"), partitioned(text), w, seeds=(0, 1))


def moe_program(w: int, rows: int, k: int = 32, n: int = 24, experts: int = 3) -> str:
    """MoE in the local view: all_to_all (dispatch) -> grouped_matmul (this rank's experts) -> all_to_all (combine)."""
    x, wt, g, y = f"tensor<{rows}x{k}xbf16>", f"tensor<{experts}x{k}x{n}xbf16>", f"tensor<{experts}xi32>", \
        f"tensor<{rows}x{n}xbf16>"
    a2a = '{axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64}'
    return (f'{_mesh(w)} {{\n  func.func @moe(%x: {x}, %w: {wt}, %g: {g}) -> {y} attributes {{ditron.view = "local"}} {{\n'
            f'    %d = "ditron_task.all_to_all"(%x) {a2a} : ({x}) -> {x}\n'
            f'    %h = "ditron_task.grouped_matmul"(%d, %w, %g) : ({x}, {wt}, {g}) -> {y}\n'
            f'    %y = "ditron_task.all_to_all"(%h) {a2a} : ({y}) -> {y}\n'
            f'    return %y : {y}\n  }}\n}}\n')


@pytest.mark.parametrize("w", [1, 2, 4, 8])
def test_moe_exchange_simulates_equal_to_the_reference(w):
    """Dispatch, experts, combine: 37 rows a part (odd), the group sizes random (the simulator's integer inputs:
    0..8 rows an expert, the other rows past the last group); the grouped GEMM's kernel runs from its tiles()."""
    text = moe_program(w, 37 * w)
    check_sim(lower(text, "ditron-device"), text, w, seeds=(0, 1))
    check_sim(lower(text, FULL % ("block-m=16 block-n=16 block-k=16", "")), text, w, seeds=(2,))


# -------------------------------------------------------------------------------------------- simulation

KINDS = [("ag_gemm", ""), ("ag_gemm", "all-gather=push"), ("ag_gemm", "all-gather=pull"),
         ("ag_gemm", "all-gather=one_launch"), ("gemm_rs", ""),
         ("gemm_rs", "reduce-scatter=one_launch"), ("gemm_ar", "all-reduce=one_shot"), ("gemm_ar", "all-reduce=two_shot"),
         ("all_gather", ""), ("reduce_scatter", ""), ("reduce_scatter", "reduce-scatter=reduce_kernel"),
         ("all_reduce", "all-reduce=one_shot"),
         ("all_reduce", "all-reduce=one_shot engine=copy_engine"), ("all_reduce", "all-reduce=two_shot engine=sm"),
         ("all_reduce", "all-reduce=two_shot engine=copy_engine"), ("all_reduce", "all-reduce=push"),
         ("gemm_ar", "all-reduce=push"), ("all_reduce", ""), ("all_to_all", ""), ("all_to_all", "engine=copy_engine")]


@pytest.mark.parametrize("w", [1, 2, 4, 8])
@pytest.mark.parametrize("kind,tile", KINDS, ids=[f"{k}-{o or 'auto'}" for k, o in KINDS])
def test_patterns_simulate_equal_to_the_reference(kind, tile, w):
    # rows that divide into no tile: 4091 a rank up to W = 4, 1031 at W = 8 (as uneven, a quarter of the cost)
    for m, seeds in ((128, (0, 1, 2)), (4091 if w <= 4 else 1031, (3,))):
        text = local_program(kind, w, m)
        check_sim(lower(text, FULL % (tile, "")), text, w, seeds=seeds)


@pytest.mark.parametrize("kind,tile,inbox", [("all_reduce", "all-reduce=push", "ar_inbox"),
                                             ("gemm_ar", "all-reduce=push", "ar_inbox"),
                                             ("gemm_rs", "reduce-scatter=push", "rs_inbox"),
                                             ("gemm_ar", "all-reduce=push_sum", "ar_inbox"),
                                             ("ag_gemm", "all-gather=one_launch", "ag_gather")])
@pytest.mark.parametrize("w", [2, 4])
def test_push_without_end_barrier_simulates_race_free_only_with_its_inbox_rotating(kind, tile, inbox, w):
    """A push program has no end barrier: four calls in a row simulate race-free and equal to the reference (call
    e + 2 stores into the inbox copy that call e read, after waits that order it behind those reads). With the
    inbox held once (its rotate attribute stripped), a fast rank's stores of call e + 1 meet a peer's reads of
    call e: the simulator reports the write-after-read race. AG+GEMM in one launch is such a push: its GEMM stores
    the rank's shard into every rank's gathered A, whose tiles all wait for every rank's shard."""
    text = local_program(kind, w, 64)
    device_text = lower(text, FULL % (tile, ""))
    assert "ditron_device.barrier" not in device_text and "ditron_rt_barrier" not in device_text
    check_sim(device_text, text, w, seeds=(0, 1), calls=4)
    once = device_text.replace("{ditron.rotate, ", "{")
    results = [simulate(once, world_size=w, seed=seed, calls=4) for seed in range(4)]
    assert any("[write-after-read]" in r.summary() and inbox in r.summary() for r in results)


@pytest.mark.parametrize("w", [1, 2, 4, 8])
def test_one_launch_ag_gemm_consumes_its_counts_and_replays_as_a_graph_without_zeroing(w, monkeypatch):
    """AG+GEMM in one launch counts each rank's shard in a slot of ag_ready on every rank; the tiles waiting on a
    slot count themselves in slot W + q, and the last of them takes the call's count off slot q. So each call leaves
    the pad as it found it (but for a fast peer's next counts): it is ditron.consumed, CUDA-graph replays (epoch
    1, nothing zeroed) simulate race-free and equal to the reference, as do eager calls -- tiles of all ranks' rows
    together, the own rows first (their own slot neither counted nor awaited), row tiles spanning two shards,
    ragged rows. With one waiter fewer counted, a slot is never consumed and a replay of the same parity finds
    the count of two calls before: its tiles read rows the peers have not stored yet."""
    from ditron.kernels import gemm
    for m, n, extra, seeds in ((64, 32, "", (0, 1)), (64, 96, " own-first=true num-sms=3 block-m=16 block-n=32",
                                                         (2,)), (20, 40, " block-m=32 block-n=16", (3,))):
        text = local_program("ag_gemm", w, m, n=n)
        dev = lower(text, FULL % ("all-gather=one_launch" + extra, ""))
        if w > 1:
            assert f'{{ditron.consumed, name = "ag_ready"}} : () -> memref<{2 * w}xi32>' in dev
            check_sim(dev, text, w, seeds=seeds, calls=4, graph=True)
        check_sim(dev, text, w, seeds=seeds, calls=3)
    if w == 1:
        return
    real = gemm.gather_waiters
    monkeypatch.setattr(gemm, "gather_waiters", lambda o, rec, g, slot: o.add(real(o, rec, g, slot), 1))
    results = [simulate(dev, world_size=w, seed=seed, calls=4, graph=True, reference=task_reference(text))
               for seed in range(4)]
    assert all(not r.ok for r in results) and any("[read-before-signal]" in r.summary() for r in results)


@pytest.mark.parametrize("w", [1, 2, 4, 8])
def test_push_gemm_rs_stores_peer_rows_into_their_inboxes_and_simulates_equal_to_the_reference(w):
    """GEMM+RS by push (reduce-scatter=push): the GEMM keeps the own rows' partial ([R, n], not symmetric) and stores
    every tile of a peer's rows into that peer's inbox ([(W - 1) * R, n], rotating), counted per row block; one
    launch sums the own rows. No end barrier. Three calls simulate race-free and equal to the reference, with
    ragged columns, and with two SMs (a persistent grid whose programs count each tile after the next one's K
    loop). Rows a GEMM tile cannot split by owner are refused with the reason."""
    for m, n, extra, seeds in ((128, 256, "", (0, 1)), (64, 100, "", (2,)), (64, 96, " num-sms=2 block-m=16 block-n=32 persistent=true", (3,))):
        text = local_program("gemm_rs", w, m, n=n)
        dev = lower(text, FULL % ("reduce-scatter=push" + extra, ""))
        if w > 1:
            assert "barrier" not in dev and 'ditron.fence = "waits"' in dev
            assert f'{{ditron.rotate, name = "rs_inbox"}} : () -> memref<{(w - 1) * m}x{n}xbf16>' in dev
            assert "owner = true" in dev and dev.count('ditron.role = "rs.sum_pushed"') == 1
        check_sim(dev, text, w, seeds=seeds, calls=3)
    if w > 1:
        with pytest.raises(PassError, match="reduce-scatter=push needs GEMM row tiles inside one rank's rows: "
                                            "BLOCK_M 64 does not divide the 100 rows"):
            lower(local_program("gemm_rs", w, 100), FULL % ("reduce-scatter=push block-m=64", ""))
        with pytest.raises(PassError, match="reduce-scatter=push stores into the peers' inboxes with SMs"):
            lower(local_program("gemm_rs", w, 64), FULL % ("reduce-scatter=push engine=copy_engine", ""))


@pytest.mark.parametrize("w", [1, 2, 4, 8])
def test_push_sum_gemm_rs_sums_the_own_rows_in_the_gemm_and_simulates_equal_to_the_reference(w):
    """GEMM+RS by push with the sum in the GEMM (reduce-scatter=push_sum): the GEMM writes the output itself -- the
    peers' rows' tiles go to their inboxes, the own rows' tiles (last in every program) wait for their row block's
    slots, add the inbox and store the sum -- so there is no own partial buffer and no reduce launch. Three calls
    simulate race-free and equal to the reference: one wave, ragged columns, and two SMs (each tile counted after
    the next one's K loop, before an own tile's wait)."""
    for m, n, extra, seeds in ((128, 256, "", (0, 1)), (64, 100, "", (2,)),
                               (64, 96, " num-sms=2 block-m=16 block-n=32 persistent=true", (3,))):
        text = local_program("gemm_rs", w, m, n=n)
        dev = lower(text, FULL % ("reduce-scatter=push_sum" + extra, ""))
        if w > 1:
            assert "barrier" not in dev and 'ditron.fence = "waits"' in dev and "rs_own" not in dev
            assert "sum_own = true" in dev and 'ditron.role = "rs.gemm_push_sum"' in dev
            assert '{ditron.consumed, name = "rs_pushed"}' in dev
            assert "rs.sum_pushed" not in dev
        check_sim(dev, text, w, seeds=seeds, calls=3)
    if w > 1:
        with pytest.raises(PassError, match="reduce-scatter=push_sum needs GEMM row tiles inside one rank's rows"):
            lower(local_program("gemm_rs", w, 100), FULL % ("reduce-scatter=push_sum block-m=64", ""))


@pytest.mark.parametrize("w", [1, 2, 4, 8])
def test_push_sum_gemm_ar_is_one_launch_and_replays_as_a_graph_without_zeroing(w):
    """GEMM+AR in one launch (all-reduce=push_sum, the model's choice for a one-wave GEMM): each tile goes into the
    peers' inboxes and sets their slot of it, then waits for its own slots and stores the sum into the output. No
    reduce launch, no end barrier; the pad has one waiter per slot, which clears it, so CUDA-graph replays (epoch
    1, nothing zeroed) simulate race-free and equal to the reference, as do eager calls, with ragged shapes, and
    beyond one wave: persistent programs on two SMs, each tile waiting for the peers' same tile before the program's
    next. A GEMM beyond one wave without persistent programs, a standalone all-reduce and the copy engine are
    refused."""
    for m, n, extra, seeds in ((64, 256, "", (0, 1)), (40, 100, "", (2,)),
                               (64, 96, " num-sms=2 block-m=16 block-n=32", (3,))):
        text = local_program("gemm_ar", w, m, n=n)
        dev = lower(text, FULL % ("all-reduce=push_sum" + extra, ""))
        if w > 1:
            assert "ditron_device.barrier" not in dev and dev.count('ditron.role = "ar.gemm_push_sum"') == 1
            assert "ar.sum_pushed" not in dev and '{ditron.consumed, name = "ar_pushed"}' in dev
            check_sim(dev, text, w, seeds=seeds, calls=4, graph=True)
        check_sim(dev, text, w, seeds=seeds, calls=3)
    if w == 1:
        return
    assert "push_sum" in [t["algorithm"] for t in _tilings(lower(local_program("gemm_ar", w, 64, k=14336 // w,
                                                                                n=8192), "ditron-tile"))]
    with pytest.raises(PassError, match="all-reduce=push_sum sums each tile in the GEMM's epilogue once the peers' "
                                        "copy of it landed, so every program must stay resident: [0-9]+ tiles of 16x32 "
                                        "over 2 SMs need persistent=true"):
        lower(local_program("gemm_ar", w, 64, n=256),
              FULL % ("all-reduce=push_sum num-sms=2 block-m=16 block-n=32 persistent=false", ""))
    with pytest.raises(PassError, match="all-reduce=push_sum sums in a GEMM's epilogue; this all-reduce does not "
                                        "follow a GEMM"):
        lower(local_program("all_reduce", w, 64), FULL % ("all-reduce=push_sum", ""))
    with pytest.raises(PassError, match="all-reduce=push_sum stores into the peers' buffers with SMs"):
        lower(local_program("gemm_ar", w, 64), FULL % ("all-reduce=push_sum engine=copy_engine", ""))


@pytest.mark.parametrize("w", [2, 4])
def test_a_persistent_push_counts_each_tile_after_the_next_ones_k_loop(w):
    """GEMM+AR's push on a persistent grid (two SMs, many tiles): each tile's counts go out after the next tile's
    K loop (the last after the loop), so a release never waits on stores still crossing the link; the program
    simulates race-free and equal to the reference over three calls."""
    text = local_program("gemm_ar", w, 64, n=96)
    dev = lower(text, FULL % ("all-reduce=push num-sms=2 block-m=16 block-n=32 persistent=true", ""))
    (mm,) = [k for k in _launches_and_kernels(dev)[1].values() if k["template"] == "gemm"]
    from ditron.kernels import gemm
    assert mm["persistent"] and gemm.deferred_push(mm)
    check_sim(dev, text, w, seeds=(0, 1), calls=3)


@pytest.mark.parametrize("w", [1, 2, 4, 8])
def test_push_all_reduce_consumes_its_pad_and_replays_as_a_graph_without_zeroing(w):
    """The push all-reduce clears each slot after its one wait (a compare-and-swap of the value back to 0), so a
    CUDA graph replays it with epoch 1 on each parity's pads and nothing zeroes them: six such calls simulate
    race-free and equal to the reference, also on rows that no tile divides. Without the clears (the record's
    consume stripped), call 3 finds its parity's slots still set by call 1: its sums read inbox tiles before the
    peers' stores of call 3 land (a race), or the wrong ones."""
    for m, seeds in ((64, (0, 1)), (45, (2,))):
        text = local_program("all_reduce", w, m)
        device_text = lower(text, FULL % ("all-reduce=push", ""))
        if w == 1:
            assert "ar_published" not in device_text  # one rank: nothing to push
            continue
        assert '"clear"' in device_text or "atomic_cas" in device_text
        check_sim(device_text, text, w, seeds=seeds, calls=6, graph=True)
        check_sim(device_text, text, w, seeds=seeds, calls=3)  # eager epochs: a clear never drops a newer value
    if w == 1:
        return
    kept = device_text.replace('"consume": true', '"consume": false').replace("consume = true", "consume = false")
    assert kept != device_text
    results = [simulate(kept, world_size=w, seed=seed, calls=4, graph=True, reference=task_reference(text))
               for seed in range(4)]
    assert any(not r.ok for r in results)
    # a program whose pads are not consumed cannot replay so (a graph zeroes them): reported, not simulated wrong
    barrier = lower(text, FULL.replace("ditron-lower-task-to-device", "ditron-lower-task-to-device{end-barrier=always}")
                    % ("all-reduce=one_shot", ""))
    result = simulate(barrier, world_size=w, seed=0, calls=2, graph=True)
    assert not result.ok and "not consumed (ditron.consumed)" in result.summary()


@pytest.mark.parametrize("kind,tile", [("gemm_ar", "all-reduce=push"), ("gemm_ar", "all-reduce=push_sum"),
                                       ("gemm_rs", "reduce-scatter=one_launch")])
def test_a_skinny_gemm_splits_k_and_simulates_equal_to_the_reference(kind, tile):
    """A one-wave GEMM whose tiles neither wait nor notify (GEMM+AR's push, GEMM+RS's one_launch) splits K as the
    model assumed (gemm.split_for): the launch gets the fp32 workspace and the locks, the last split of a tile adds
    the partials (and pushes the sum), and the program simulates equal to the reference."""
    text = local_program(kind, 2, 64, k=2048, n=256)
    device_text = lower(text, FULL % (tile, ""))
    (mm,) = [k for k in _launches_and_kernels(device_text)[1].values() if k["template"] == "gemm"]
    assert mm["split_k"] > 1 and mm["loads"] == "pointer" and mm["args"][-2:] == ["workspace", "locks"]
    assert f'name = "gemm_workspace"}} : () -> memref<{(mm["split_k"] - 1) * 128}x256xf32>' in device_text
    assert '"gemm_locks"' in device_text
    check_sim(device_text, text, 2, seeds=(0,), calls=2)


@pytest.mark.parametrize("rows,pull_m,push_m", [(2048, 16, 32), (16384, 64, 64), (128, 16, 16), (8, 8, 8)])
def test_push_all_reduce_tiles_leave_no_program_a_second_tile(rows, pull_m, push_m):
    """The one-launch all-reduce's tile (x of rows x 512 bf16 on two ranks, 132 SMs): a pull keeps a tile per
    program (more bytes in flight), a push takes the smallest tile up to 32 KB that makes one wave (each further
    tile of a program costs a signal's round trip); both stop at the region's height and at 32 KB."""
    from ditron.kernels.reduce import publish_tile
    assert publish_tile(rows, 512, 2, 132)["block_m"] == pull_m
    tile = publish_tile(rows, 512, 2, 132, push=True)
    assert tile["block_m"] == push_m and tile["block_m"] * tile["block_n"] * 2 <= 32768
    text = lower(local_program("all_reduce", 2, rows // 2, k=512), FULL % ("all-reduce=push", ""))
    (rec,) = [k for k in _launches_and_kernels(text)[1].values() if k["template"] == "reduce"]
    assert (rec["block_m"], rec["block_n"]) == (push_m, tile["block_n"])


def test_push_all_reduce_stores_into_an_inbox_of_w_minus_one_slabs():
    """all-reduce=push: one launch whose symmetric src is an inbox of W - 1 slabs of x (no copy into a local
    symmetric buffer), with W - 1 slots per tile. GEMM+AR's push: the GEMM stores its tiles into the peers'
    inboxes and counts them per row block (gemm push), then one launch sums (reduce publish.pushed)."""
    rows = 4 * 100  # local_program's m is a shard: W * m rows
    text = lower(local_program("all_reduce", 4, 100), FULL % ("all-reduce=push", ""))
    assert text.count('ditron.role = "ar.one_launch"') == 1 and "rs.stage" not in text
    # no end barrier: the inbox rotates and the program fences itself by its waits (the pass's end-barrier=always
    # keeps the barrier and one inbox)
    assert f'{{ditron.rotate, name = "ar_inbox"}} : () -> memref<{3 * rows}x' in text
    assert 'ditron.fence = "waits"' in text and "barrier" not in text
    kept = lower(local_program("all_reduce", 4, 100), FULL.replace("ditron-lower-task-to-device",
                                                                   "ditron-lower-task-to-device{end-barrier=always}")
                 % ("all-reduce=push", ""))
    assert f'{{name = "ar_inbox"}} : () -> memref<{3 * rows}x' in kept and "ditron.fence" not in kept
    assert kept.count('"ditron_device.barrier"') == 1 or "ditron_rt_barrier" in kept
    (rec,) = [k for k in _launches_and_kernels(text)[1].values() if k["template"] == "reduce"]
    assert rec["publish"]["push"] == 3 and rec["src_extent"] == 3 * rows and "pushed" not in rec["publish"]
    tiles = -(-rows // rec["block_m"]) * -(-rec["cols"] // rec["block_n"])
    # each slot's one waiter clears it: the pad is consumed (a CUDA graph needs not zero it)
    assert rec["publish"]["consume"] is True
    assert f'{{ditron.consumed, name = "ar_published"}} : () -> memref<{3 * tiles}xi32>' in text

    text = lower(local_program("gemm_ar", 4, 100), FULL % ("all-reduce=push", ""))
    assert f'{{ditron.rotate, name = "ar_inbox"}} : () -> memref<{3 * rows}x' in text and "ar.one_launch" not in text
    assert 'ditron.fence = "waits"' in text
    assert text.index('ditron.role = "ar.gemm_push"') < text.index('ditron.role = "ar.sum_pushed"')
    records = _launches_and_kernels(text)[1].values()
    (mm,) = [k for k in records if k["template"] == "gemm"]
    (red,) = [k for k in records if k["template"] == "reduce"]
    assert mm["push"] == {"arg": "inbox", "pad": "pushed", "slabs": 3, "scope": "sys"}
    assert red["publish"]["pushed"] == mm["block_m"] and red["publish"]["copy_from"] == "x"
    assert f'{{name = "ar_pushed"}} : () -> memref<{3 * -(-rows // mm["block_m"])}xi32>' in text
    with pytest.raises(PassError, match="all-reduce=push stores into the peers' buffers with SMs; it cannot use "
                                        "engine=copy_engine"):
        lower(local_program("all_reduce", 2, 64), "ditron-tile{all-reduce=push engine=copy_engine}")


def test_one_shot_all_reduce_is_one_launch_unless_the_copy_engine_is_asked_for():
    """The model runs a one-shot all-reduce as one reduce launch (publish, flag, reduce: no staging copy, no stream
    hand-off); engine=copy_engine keeps the staged form (copy-engine stage, host counts, reduce kernel)."""
    text = local_program("all_reduce", 4, 100)
    one = lower(text, FULL % ("all-reduce=one_shot", ""))
    assert one.count('ditron.role = "ar.one_launch"') == 1 and "rs.stage" not in one and "ditron_device.signal" not in one
    assert 'publish = {arg = "published", copy_from = "x"' in one
    staged = lower(text, FULL % ("all-reduce=one_shot engine=copy_engine", ""))
    assert "ar.one_launch" not in staged and 'ditron.role = "rs.stage"' in staged


def test_standalone_reduce_scatter_is_one_launch_unless_the_copy_engine_is_asked_for():
    """The model runs a standalone reduce-scatter as one reduce launch of the own rows that copies x into P tile by
    tile (the staged pipeline measured 1.48x slower at 128 MB on 2xH200); engine=copy_engine or
    reduce-scatter=reduce_kernel keeps the staged form."""
    text = local_program("reduce_scatter", 4, 100)
    one = lower(text, FULL % ("", ""))
    assert one.count('ditron.role = "rs.one_launch"') == 1 and "rs.stage" not in one and "ditron_device.signal" not in one
    assert 'copy_from = "x"' in one and "ditron_device.copy" not in one
    for option in ("engine=copy_engine", "reduce-scatter=reduce_kernel"):
        staged = lower(text, FULL % (option, ""))
        assert "rs.one_launch" not in staged and 'ditron.role = "rs.stage"' in staged


SCHEDULES = [("ag_gemm", "all-gather=pull num-chunks=4", "pull=ring"),
             ("ag_gemm", "all-gather=pull num-chunks=2", "copy-streams=3"),
             ("ag_gemm", "all-gather=push num-chunks=2", "copy-streams=3"),
             ("ag_gemm", "engine=copy_engine num-chunks=2", "engine=sm"), ("all_gather", "engine=sm", "engine=copy_engine"),
             ("ag_gemm", "engine=sm comm-sms=8 num-chunks=2", "comm-sms=12"),
             ("all_gather", "engine=copy_engine num-chunks=2", "pull=ring"),
             ("all_reduce", "all-reduce=two_shot engine=copy_engine num-chunks=2", "pull=ring"),
             ("gemm_ar", "all-reduce=two_shot block-m=32 num-chunks=4", "copy-streams=2"),
             ("gemm_rs", "block-m=32 num-chunks=4 reduce-scatter=reduce_kernel", "tile-order=row_major"),
             ("gemm_rs", "reduce-scatter=reduce_kernel", "streams=false"),
             ("gemm_rs", "block-m=32 num-chunks=2 reduce-scatter=epilogue", ""),
             ("gemm_ar", "block-m=32 num-chunks=2 all-reduce=epilogue engine=copy_engine", ""),
             ("gemm_rs", "block-m=32 num-chunks=2 reduce-scatter=epilogue engine=sm", ""),
             ("gemm_ar", "block-m=32 num-chunks=2 all-reduce=epilogue engine=sm", ""),
             ("gemm_ar", "block-m=32 num-chunks=2 all-reduce=epilogue engine=copy_engine", "pull=ring"),
             ("gemm_ar", "block-m=32 num-chunks=2 all-reduce=epilogue engine=copy_engine", "copy-streams=3")]


@pytest.mark.parametrize("kind,tile,sched", SCHEDULES)
def test_schedules_simulate_equal_to_the_reference(kind, tile, sched):
    w = 4
    text = local_program(kind, w, 128)
    check_sim(lower(text, FULL % (tile, sched)), text, w, seeds=(0, 1, 2))


def test_targets_change_choices_not_results():
    for kind in ("ag_gemm", "gemm_rs"):
        text = local_program(kind, 4, 128)
        for target in ("cuda:90", "hip:gfx942", "cuda:80"):
            check_sim(lower(text, FULL % (f"target={target}", "")), text, 4, seeds=(0,))


def test_point_to_point_links_spread_pulls_over_streams():
    """On gfx942 (a mesh of xGMI links) the default schedule of a gather by pull pulls from each peer on its own
    stream (this gather is so small that the model would push it: one hop less)."""
    out = lower(local_program("ag_gemm", 4, 128), DEVICE % ("target=hip:gfx942 all-gather=pull", ""))
    with ditron_context():
        module = parse_module(out)
        streams = {int(op.attributes["stream"].value) for op in walk_ops(module.operation)
                   if device.Copy.match(op) and ir.StringAttr(op.attributes["ditron.role"]).value == "ag.pull"}
        del module
    assert streams == {1, 2, 3}


# ------------------------------------------------------------------------------------------------ mutation

SYNC_OPS = ("ditron_device.wait", "ditron_device.signal")


def _mutants(device_text: str):
    """(description, text) with each wait or signal removed, and each pull/stage copy's destination shifted."""
    with ditron_context():
        module = parse_module(device_text)
        ops = [op for op in walk_ops(module.operation) if op.name in SYNC_OPS or op.name == "ditron_device.copy"]
        count = len(ops)
        del module, ops
    for i in range(count):
        with ditron_context():
            module = parse_module(device_text)
            op = [op for op in walk_ops(module.operation)
                  if op.name in SYNC_OPS or op.name == "ditron_device.copy"][i]
            role = ir.StringAttr(op.attributes["ditron.role"]).value if "ditron.role" in op.attributes else "?"
            if op.name in SYNC_OPS:
                desc = f"remove {op.name} {role}"
                op.erase()
            else:
                cp = device.Copy(op)
                from mlir.dialects import arith
                with op.location, ir.InsertionPoint(op):
                    one = arith.ConstantOp(ir.IndexType.get(), 1).result
                    shifted = arith.addi(cp.dst_offsets[0], one)
                op.operands[4 + cp.rank] = shifted
                desc = f"shift copy {role}"
            yield desc, str(module)
            del module, op


@pytest.mark.parametrize("kind,tile", [("ag_gemm", "num-chunks=2"), ("gemm_rs", "block-m=64 num-chunks=2"),
                                       ("gemm_ar", "all-reduce=two_shot"), ("all_reduce", "all-reduce=one_shot"),
                                       ("reduce_scatter", "num-chunks=2"), ("all_gather", "num-chunks=2"),
                                       ("all_to_all", "engine=copy_engine"), ("all_to_all", "engine=sm")])
def test_every_wait_signal_and_chunk_offset_matters(kind, tile):
    w = 4
    text = local_program(kind, w, 128)
    base = lower(text, DEVICE % (tile, ""))
    reference = task_reference(text)
    assert simulate(base, world_size=w, seed=0, calls=2, reference=reference).ok
    missed = []
    for desc, mutant in _mutants(base):
        caught = any(not simulate(mutant, world_size=w, seed=s, calls=2, reference=reference).ok for s in (0, 1))
        if not caught:
            missed.append(desc)
    assert not missed, f"mutations the simulator did not report: {missed}"
