"""The autotuner (ditron_py/tune.py) on the CPU: a fake timer stands in for the GPU. Candidate enumeration, cache
keys, persistence (atomic, merged, versioned, corrupt files rebuilt), reuse by ditron-tile (the tiling record shows
the tuned config), ditron.compile(tune=...), the CLI. The GPU timing itself: test_tune_gpu below (marked gpu)."""
from __future__ import annotations

import io
import json

import pytest

from ditron import tune
from ditron.cli import run as cli_run
from ditron.cost_model import gemm_candidates, gemm_split, gemm_time, peaks_for


def fake_timer(fast: str | None = None, fail: str | None = None):
    """Seconds per call: 100 us for everything, 50 us for the config ``fast``; ``fail`` raises (a wrong result)."""
    calls = []

    def timer(case, sig, path):
        config = dict((o, v) for p, o, v in sig["passes"]).get("gemm-config", "model")
        calls.append((case, config))
        if fail and config.startswith(fail):
            raise tune.TuningError("output differs from the model plan's")
        return 50e-6 if fast and config.startswith(fast) else 100e-6
    timer.calls = calls
    timer.device_name = "Fake GPU"
    return timer


def tiling_of(m, n, k, cache, device=""):
    """ditron-tile's record for ops.ag_gemm's program at W = 1 (a GEMM alone) with the given tuning cache."""
    from mlir import ir

    from ditron import ops
    from ditron.dialects import ditron_context
    from ditron.dialects.opbase import walk_ops
    from ditron.passes.manager import PassManager
    from ditron.passes.registry import parse_pipeline
    from ditron.passes.tile import TARGET_ATTR, TilePass, Tiling
    sig = ops.signature_for("ag_gemm", ((m, k), (k, n)), "bf16", 1, True, "cuda:90")
    with ditron_context() as ctx:
        module = ops.task_program(sig).build(ctx)
        module.operation.attributes[TARGET_ATTR] = ir.StringAttr.get("cuda:90")
        passes = parse_pipeline("ditron-partition,ditron-canonicalize,ditron-fuse-overlap")
        PassManager([*passes, TilePass(tuning_cache=str(cache), tuning_device=device)]).run(module)
        found = [vars(Tiling.of(op)) for op in walk_ops(module.operation) if op.name == "ditron_task.matmul"]
        del module
    return {k: v for k, v in found[0].items() if v is not None}


# ---------------------------------------------------------------------------------------------- configs, keys

def test_config_text_round_trip_and_errors():
    pin = tune.GemmPin.parse("128x256x64-w8-s3-g8-np")
    assert (pin.config.block_m, pin.config.block_n, pin.config.block_k, pin.config.num_warps,
            pin.config.num_stages, pin.config.group_m, pin.persistent) == (128, 256, 64, 8, 3, 8, False)
    assert pin.text == "128x256x64-w8-s3-g8-np"
    assert tune.GemmPin.parse("64x64x128-w4-s6-g1").persistent is None
    for bad, why in (("128x256", "not a GEMM config"), ("100x256x64-w8-s3-g8", "power of two"),
                     ("128x256x64-w3-s3-g8", "warps"), ("128x256x64-w8-s0-g8", "from 1 to 8"),
                     ("64x128x64-w4-s9-g8", "from 1 to 8"), ("128x256x64-w8-s3-g0", "group >= 1")):
        with pytest.raises(ValueError, match=why):
            tune.GemmPin.parse(bad)


def test_variants_stay_within_the_stages_a_backend_compiles():
    # the tuner's neighbours of an 8-stage tile (the one-wave rule's 64x128x64 s8 at 257x2048x7168) had 9 stages,
    # which the backend refuses: bench_tune --build stopped with a TargetError
    from ditron.backends.facts import GemmConfig
    out = tune.variants(GemmConfig(64, 128, 64, 4, 8, 8))
    assert out and max(c.num_stages for c in out) == 8
    assert any(c.block_m == 128 and c.block_n == 64 for c in out)  # the transposed tile, without its extra stage


def test_keys_bucket_m_by_powers_of_two():
    assert [tune.m_bucket(m) for m in (1, 2, 3, 16, 17, 128, 129, 3000, 4096, 16384)] == \
        [1, 2, 4, 16, 32, 128, 256, 4096, 4096, 16384]
    key = tune.entry_key("cuda:90", "NVIDIA H200", "bf16", 1, "matmul", 132, 3000, 5000, 3000)
    assert key == "cuda:90|NVIDIA H200|bf16|w1|matmul|sms132|m4096|n5000|k3000"
    assert key == tune.entry_key("cuda:90", "NVIDIA H200", "bf16", 1, "matmul", 132, 2049, 5000, 3000)
    assert key != tune.entry_key("cuda:90", "NVIDIA H200", "bf16", 1, "matmul", 132, 2048, 5000, 3000)


def test_candidates_are_the_models_best_configs():
    case = tune.Case("matmul", 3000, 5000, 3000)
    got = tune.candidates(case, top=3)
    peaks = peaks_for("cuda:90")
    configs = gemm_candidates(peaks, 2)
    ranked = sorted(configs, key=lambda c: (gemm_time(3000, 5000, 3000, c, peaks, sms=132, elem_bytes=2,
                                                      split=gemm_split(3000, 5000, 3000, c, 132)), configs.index(c)))
    assert got[:3] == [tune.config_text(c) for c in ranked[:3]]
    # then the template's neighbours of the best that the model's table lacks, each once
    best = ranked[0]
    extra = [tune.config_text(c) for c in tune.variants(best)]
    assert got[3:-1] == [t for t in extra if t not in got[:3]] and len(set(got)) == len(got)
    assert f"{best.block_n}x{best.block_m}x{best.block_k}-w{best.num_warps}-s{best.num_stages}-g{best.group_m}" \
        in got  # the transposed tile
    # beyond one wave: the best one without a persistent grid too, last
    assert got[-1] == tune.config_text(best, False)
    small = tune.candidates(tune.Case("matmul", 16, 4096, 4096), top=2)
    assert not any(t.endswith("-np") for t in small)  # one wave: no twin
    # every candidate fits the target's shared memory (a deeper variant of a full pipeline is left out)
    for text in got + small:
        cfg = tune.GemmPin.parse(text).config
        assert cfg.smem_bytes(2, "cuda") <= peaks.smem_per_sm


def test_cases_check_their_arguments():
    assert tune.Case("ag_gemm", 1024, 4096, 512, world=2).shapes() == ((512, 512), (512, 2048))
    assert tune.Case("ag_gemm", 1024, 4096, 512, world=2).gemm() == (1024, 2048, 512)
    assert tune.Case("gemm_rs", 1024, 4096, 512, world=2).gemm() == (1024, 4096, 256)
    for kwargs, why in ((dict(op="matmul", world=2), "one GPU"), (dict(op="gemm_ar", world=3), "divide"),
                        (dict(op="bogus"), "unknown op"), (dict(op="matmul", dtype="f32"), "cannot be tuned")):
        with pytest.raises(tune.TuningError, match=why):
            tune.Case(m=1024, n=4096, k=512, **kwargs)
    with pytest.raises(tune.TuningError, match="MxNxK"):
        tune.Case.parse("12x3", op="matmul")


# -------------------------------------------------------------------------------------------- the cache file

def test_cache_atomic_merged_versioned(tmp_path):
    path = tmp_path / "tuning.json"
    entry = dict(target="cuda:90", device="A", dtype="bf16", world=1, kind="matmul", sms=132, m_bucket=256, n=64,
                 k=64, config="64x64x64-w4-s6-g8", time_us=1.0)
    a, b = tune.TuningCache(path), tune.TuningCache(path)
    a.record(entry)
    a.save()
    b.record(dict(entry, device="B", config="32x64x64-w4-s6-g8", tuned_at="2099"))
    b.save()  # merged with a's entry on disk
    data = json.loads(path.read_text())
    assert data["version"] == tune.VERSION and len(data["entries"]) == 2
    assert not list(tmp_path.glob(".tuning.json.tmp-*"))
    loaded = tune.TuningCache.load(path)
    assert loaded.lookup("cuda:90", "A", "bf16", 1, "matmul", 132, 200, 64, 64)["config"] == "64x64x64-w4-s6-g8"
    # no device: the latest tuned of any GPU of the target
    assert loaded.lookup("cuda:90", "", "bf16", 1, "matmul", 132, 200, 64, 64)["device"] == "B"
    assert loaded.lookup("cuda:90", "A", "bf16", 1, "matmul", 132, 300, 64, 64) is None  # another M bucket
    with pytest.raises(tune.TuningError, match="no str 'config'"):
        a.record({k: v for k, v in entry.items() if k != "config"})


@pytest.mark.parametrize("text, why", [("{not json", "not JSON"), ('{"version": 99, "entries": {}}', "version 99"),
                                       ('{"version": 1, "entries": {"x": {"config": "1x2"}}}', "no str 'target'")])
def test_corrupt_cache_refused_then_rebuilt(tmp_path, text, why):
    path = tmp_path / "tuning.json"
    path.write_text(text)
    with pytest.raises(tune.TuningError, match=why):
        tune.TuningCache.load(path)
    cache, damaged = tune.TuningCache.open(path)
    assert cache.entries == {} and why.split("'")[0] in damaged
    cache.record(dict(target="cuda:90", device="A", dtype="bf16", world=1, kind="matmul", sms=132, m_bucket=1,
                      n=8, k=8, config="16x64x128-w4-s6-g1", time_us=1.0))
    cache.save()  # the damaged file is replaced
    assert len(tune.TuningCache.load(path).entries) == 1


# ------------------------------------------------------------------------------- tuning, reuse by ditron-tile

@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tune")
    plan = tune.build([tune.Case("matmul", 200, 256, 128)], d, top=3, progress=False)
    return d, plan


def test_build_writes_the_model_plan_and_distinct_candidates(plan_dir):
    d, plan = plan_dir
    (entry,) = plan["cases"]
    assert entry["kind"] == "matmul" and entry["gemm"] == [200, 256, 128] and entry["sms"] == 132
    model = tiling_of(200, 256, 128, "off")
    assert entry["model"]["config"] == tune.config_text(model, model["persistent"])
    configs = [c["config"] for c in entry["candidates"]]
    assert entry["model"]["config"] not in configs and len(set(configs)) == len(configs) >= 1
    assert json.loads((d / tune.PLAN_FILE).read_text()) == plan


def test_run_keeps_the_fastest_and_ditron_tile_takes_it(plan_dir, tmp_path):
    d, plan = plan_dir
    fast = plan["cases"][0]["candidates"][0]["config"]
    cache = tmp_path / "tuning.json"
    timer = fake_timer(fast=fast.rsplit("-", 1)[0] if fast.endswith(("-p", "-np")) else fast)
    (result,) = tune.run(d, cache=cache, timer=timer, progress=False)
    assert len(timer.calls) == 1 + len(plan["cases"][0]["candidates"])
    assert result.tuned_config == fast and result.tuned_us == 50 and result.model_us == 100 and result.speedup == 2
    (entry,) = json.loads(cache.read_text())["entries"].values()
    assert entry["device"] == "Fake GPU" and entry["config"] == fast and entry["model_us"] == 100
    assert entry["m_bucket"] == 256 and (entry["n"], entry["k"], entry["kind"], entry["sms"]) == (256, 128, "matmul",
                                                                                                   132)
    # ditron-tile: the tuned config over the model's, for the same bucket of M; another bucket keeps the model's
    for m in (200, 129, 256):
        t = tiling_of(m, 256, 128, cache)
        assert t["config_from"] == "tuning-cache" and tune.config_text(t, t["persistent"]) == fast
    assert "config_from" not in tiling_of(100, 256, 128, cache)
    assert "config_from" not in tiling_of(200, 256, 128, cache, device="Other GPU")
    assert tiling_of(200, 256, 128, cache, device="Fake GPU")["config_from"] == "tuning-cache"
    table = tune.summary([result])
    assert "200x256x128" in table and fast in table and "2.000x" in table


def test_ties_keep_the_model_and_failing_candidates_are_dropped(plan_dir, tmp_path):
    d, plan = plan_dir
    bad = plan["cases"][0]["candidates"][0]["config"]
    logs = []
    (result,) = tune.run(d, cache=tmp_path / "t.json", timer=fake_timer(fail=bad.split("-np")[0]),
                         progress=False, log=logs.append)
    assert result.tuned_config == plan["cases"][0]["model"]["config"] and result.timings[bad] is None
    assert any("dropped" in line for line in logs)


def test_run_rebuilds_a_corrupt_cache(plan_dir, tmp_path):
    d, _ = plan_dir
    cache = tmp_path / "tuning.json"
    cache.write_text("garbage")
    logs = []
    tune.run(d, cache=cache, timer=fake_timer(), progress=False, log=logs.append)
    assert any("rebuilding" in line for line in logs)
    assert len(tune.TuningCache.load(cache).entries) == 1


def test_ditron_tile_refuses_a_bad_tuning_cache_option(tmp_path):
    from ditron.errors import PassError
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(PassError, match="tuning-cache=.*not JSON"):
        tiling_of(200, 256, 128, bad)
    with pytest.raises(PassError, match="no such file"):
        tiling_of(200, 256, 128, tmp_path / "missing.json")


def test_default_cache_damaged_is_passed_over(tmp_path, monkeypatch):
    from ditron import ops
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    monkeypatch.setenv("DITRON_TUNING_CACHE", str(bad))
    sig = ops.signature_for("ag_gemm", ((200, 128), (128, 256)), "bf16", 1, True, "cuda:90")
    assert "config_from" not in [c for c in ops.lower(sig)[1] if c.get("block_m")][0]


def test_tune_skips_what_the_cache_holds(tmp_path):
    cache = tmp_path / "tuning.json"
    case = tune.Case("matmul", 200, 256, 128)
    first = tune.tune([case], directory=tmp_path / "arts", cache=cache, timer=fake_timer(), top=1, progress=False)
    assert len(first) == 1
    assert tune.tune([case], directory=tmp_path / "arts", cache=cache, timer=fake_timer(), top=1,
                     progress=False) == []


def test_compile_tune_times_the_programs_gemms(tmp_path, monkeypatch):
    import ditron
    from ditron import ops
    cache = tmp_path / "tuning.json"
    monkeypatch.setenv("DITRON_TUNING_CACHE", str(cache))
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path / "cache"))
    mm = ops.task_program(ops.signature_for("ag_gemm", ((200, 128), (128, 256)), "bf16", 1, True)).to_mlir()
    timer = fake_timer(fast="32x64x64")
    exe = ditron.compile(mm, "cuda:90", tune=timer)
    assert timer.calls and all(c.m == 200 for c, _ in timer.calls)
    (entry,) = tune.TuningCache.load(cache).entries.values()
    assert entry["config"].startswith("32x64x64")
    assert exe.compile_info["cache"] == "miss"
    again = ditron.compile(mm, "cuda:90")  # the cache file did not change since: the same compile
    assert again.compile_info["cache"] == "hit"
    with pytest.raises(ditron.TargetError, match="tune takes"):
        ditron.compile(mm, "cuda:90", tune="yes")


# ------------------------------------------------------------------------------------------------- the CLI

def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    return cli_run(list(argv), out, err), out.getvalue(), err.getvalue()


def test_cli_help_and_bad_arguments(tmp_path, capsys):
    code, _, _ = cli("tune", "--help")
    out = capsys.readouterr().out
    assert code == 0 and "--shape" in out and "tuning cache" in out
    for argv, why in ((("tune",), "give at least one --shape"), (("tune", "--shape", "1x2"), "MxNxK"),
                      (("tune", "--shape", "8x8x8", "--op", "nope"), "invalid choice"),
                      (("tune", "--build", "a", "--run", "b"), "not allowed with"),
                      (("tune", "--run", str(tmp_path)), "holds no tune_plan.json"),
                      (("tune", "--run", str(tmp_path), "--shape", "8x8x8"), "given to --build"),
                      (("tune", "--shape", "8x8x8", "--top", "0"), "--top must be"),
                      (("tune", "--shape", "8x8x8", "--op", "matmul", "--world", "2"), "one GPU")):
        code, _, err = cli(*argv)
        assert code == 1 and why in err and "Traceback" not in err, (argv, err)


def test_cli_build_writes_a_plan(tmp_path):
    code, out, err = cli("tune", "--build", str(tmp_path), "--shape", "64x128x64", "--top", "1", "--no-progress")
    assert code == 0, err
    assert "ditron tune --run" in out and (tmp_path / tune.PLAN_FILE).exists()


# ------------------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_tune_gpu(tmp_path):
    """On the GPU: CUDA-event timing of a plan, the winners in the cache, none slower than the model's plan. The
    plan: $DITRON_TEST_TUNE_DIR (built on a box with the compiler: ditron tune --build DIR --shape 3000x5000x3000
    --shape 100x4096x4096 --top 3), else built here."""
    import os
    plan = os.environ.get("DITRON_TEST_TUNE_DIR")
    if plan is None:
        plan = tmp_path / "plan"
        tune.build([tune.Case("matmul", 3000, 5000, 3000), tune.Case("matmul", 100, 4096, 4096)], plan, top=3,
                   progress=False)
    cache = tmp_path / "tuning.json"
    results = tune.run(plan, cache=cache, progress=False)
    assert len(results) == len(tune.load_plan(plan)["cases"]) >= 1
    for r in results:
        assert 0 < r.tuned_us <= r.model_us
    entries = tune.TuningCache.load(cache).entries
    assert len(entries) == len(results) and all(e["device"].startswith("NVIDIA") for e in entries.values())


def test_tuned_config_of_an_op_call_tunes_once_then_reads_the_cache(tmp_path, monkeypatch):
    cache = tmp_path / "tuning.json"
    monkeypatch.setenv("DITRON_TUNING_CACHE", str(cache))
    case = tune.op_case("ag_gemm", [(200, 128), (128, 256)], "bf16", 1, "cuda:90", True)
    assert case == tune.Case("matmul", 200, 256, 128, "bf16", 1, "cuda:90", True)
    assert tune.op_case("gemm_rs", [(64, 32), (32, 48)], "bf16", 2, "cuda:90", True).k == 64
    timer = fake_timer(fast="32x64x64")
    first = tune.tuned_config(case, timer=timer, directory=tmp_path / "arts")
    calls = len(timer.calls)
    assert first.startswith("32x64x64") and calls >= 2
    assert tune.tuned_config(case, timer=timer, directory=tmp_path / "arts") == first
    assert len(timer.calls) == calls  # the second call read the cache


def test_ops_tune_refuses_a_real_world():
    class RealWorld:
        is_virtual, world_size = False, 2
    with pytest.raises(tune.TuningError, match="real world of 2 ranks"):
        tune.ops_passes("ag_gemm", [], RealWorld(), None, None)


def test_cli_compile_tune_without_a_gpu_is_a_clean_error(tmp_path, monkeypatch):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the tuning would run")
    from ditron import ops
    monkeypatch.setenv("DITRON_TUNING_CACHE", str(tmp_path / "tuning.json"))
    src = tmp_path / "mm.mlir"
    src.write_text(ops.task_program(ops.signature_for("ag_gemm", ((200, 128), (128, 256)), "bf16", 1, True)).to_mlir())
    code, _, err = cli("compile", str(src), "--tune", "-o", str(tmp_path / "art"))
    assert code == 1 and "tuning times candidates on a GPU" in err and "Traceback" not in err
