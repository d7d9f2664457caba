"""ditron.ops on the CPU: signatures and their checks, the task programs the ops are written as, that every choice
in their compiled programs comes from the passes (not from ops.py), the simulated programs against the ops'
semantics for W in {1, 2, 4, 8} (M = 4091·W included), and the artifact library (build, look-up, cache, a GPU box
without the compiler). The GPU side is test_ops_gpu.py."""
from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ditron import ops
from ditron.cost_model import (all_reduce_estimates, all_reduce_one_launch_time, all_reduce_push_launch_time,
                                all_reduce_two_shot_launch_time, peaks_for)
from ditron.errors import DitronRuntimeError, PassError
from ditron.passes.registry import PIPELINES
from ditron.sim import simulate

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DITRON_OPS_DIR", raising=False)


def sig(op, shapes, W, virtual=True, target="cuda:90", passes=None, **params) -> ops.Signature:
    return ops.signature_for(op, shapes, "bf16", W, virtual, target, passes=passes, **params)


def simulate_op(s: ops.Signature, seeds=(0,), calls: int = 2) -> None:
    text, _ = ops.lower(s)
    for seed in seeds:
        result = simulate(text, world_size=s.world_size, seed=seed, calls=calls, num_sms=s.cta_budget(),
                          reference=lambda xs: [[y] for y in ops.reference(s, xs)])
        assert result.ok, f"{s.key} seed {seed}:\n{result.summary()}"


# ------------------------------------------------------------------------------------------------ signatures

def test_signature_fills_defaults_and_keys_are_stable():
    a = sig("all_reduce", [(64, 32)], 4)
    assert a.param == {"algorithm": "auto"} and a.output_shape() == (64, 32)
    assert a == ops.Signature.from_json(json.loads(json.dumps(a.to_json())))
    assert a.key == sig("all_reduce", [(64, 32)], 4).key
    assert a.key.startswith("all_reduce-bf16-w4v-64x32-cuda90-")
    others = [sig("all_reduce", [(64, 32)], 4, algorithm="one_shot"), sig("all_reduce", [(64, 32)], 4, virtual=False),
              sig("all_reduce", [(64, 32)], 2), sig("all_reduce", [(64, 32)], 4, target="hip:gfx942"),
              sig("all_reduce", [(64, 32)], 4, passes={"ditron-tile": {"num-chunks": 2}})]
    assert len({a.key, *(o.key for o in others)}) == 6
    assert sig("all_gather", [(8, 4)], 2, dim=-1).param == {"dim": 1}
    assert sig("ag_gemm", [(16, 8), (8, 4)], 4).output_shape() == (64, 4)
    assert sig("gemm_rs", [(16, 8), (8, 4)], 4).output_shape() == (4, 4)
    assert sig("reduce_scatter", [(8, 12)], 4, dim=1).output_shape() == (8, 3)
    assert sig("all_to_all", [(8, 12)], 4).output_shape() == (8, 12)
    assert sig("all_to_all", [(5, 12)], 4, split_dim=-1, concat_dim=0).output_shape() == (20, 3)
    assert sig("all_to_all", [(5, 12)], 4, split_dim=-1).param == {"concat_dim": 0, "split_dim": 1}


@pytest.mark.parametrize("make,message", [
    (lambda: sig("all_to_none", [(4, 4)], 2), "unknown op 'all_to_none'"),
    (lambda: sig("ag_gemm", [(4, 8), (4, 4)], 2), r"needs a \[M, K\] and b \[K, N\] with the same K"),
    (lambda: sig("ag_gemm", [(4, 8)], 2), "ag_gemm takes 2 tensor"),
    (lambda: sig("gemm_rs", [(6, 8), (8, 4)], 4), "the 6 rows of a @ b do not split over 4 ranks"),
    (lambda: sig("reduce_scatter", [(6, 8)], 4), r"dim 0 of \[6, 8\] \(size 6\) does not split over 4 ranks"),
    (lambda: sig("all_gather", [(6, 8)], 4, dim=2), r"dim 2 is out of range for a tensor of shape \[6, 8\]"),
    (lambda: sig("all_to_all", [(6, 8)], 4), r"all_to_all: split_dim 0 of \[6, 8\] \(size 6\) does not split over 4"),
    (lambda: sig("all_to_all", [(8, 8)], 4, concat_dim=2), r"concat_dim 2 is out of range for a tensor of shape"),
    (lambda: sig("all_to_all", [(8, 8)], 4, split_dim=True), r"split_dim True is out of range"),
    (lambda: sig("all_to_all", [(8, 8)], 4, dim=0), r"all_to_all: unknown parameter 'dim' \(parameters: "
                                                    r"split_dim, concat_dim\)"),
    (lambda: sig("all_reduce", [(6, 8)], 4, algorithm="two_shot"), "two_shot' scatters the 6 rows over the 4 ranks"),
    (lambda: sig("all_reduce", [(8, 8)], 4, algorithm="three_shot"), "algorithm must be one of auto, one_shot"),
    (lambda: sig("all_reduce", [(8, 8)], 4, algorithm="push_sum"), r"all_reduce: algorithm must be one of auto, "
                                                                     r"one_shot, two_shot, push, got 'push_sum'"),
    (lambda: sig("all_reduce", [(8, 8)], 4, dim=0), "all_reduce: unknown parameter 'dim'"),
    (lambda: ops.signature_for("all_reduce", [(8, 8)], "i8", 2, True), "element type 'i8' is not supported"),
    (lambda: sig("all_reduce", [(8, 8)], 0), "world size must be a positive int"),
    # pass options are spliced into a pipeline string: no spaces, braces or '=' in them
    (lambda: sig("all_reduce", [(8, 8)], 2, passes={"ditron-tile": {"block-m": "64 block-n=32"}}),
     r"passes= ditron-tile: block-m='64 block-n=32': option names and values are plain words"),
    (lambda: sig("all_reduce", [(8, 8)], 2, passes={"ditron-tile": {"num-chunks": "2}"}}), "are plain words"),
    (lambda: sig("all_reduce", [(8, 8)], 2, passes={"bogus": {}}), "passes= gives pass 'bogus' no option"),
])
def test_signature_errors_say_what_to_do(make, message):
    with pytest.raises(ops.OpError, match=message):
        make()


def test_unknown_target_is_a_target_error():
    from ditron.errors import TargetError
    with pytest.raises(TargetError):
        sig("all_reduce", [(8, 8)], 2, target="cuda:75")


# ----------------------------------------------------------------------------------- programs and pipeline

def test_task_programs_state_the_math_and_shardings_only():
    """The GEMM ops are global-view programs: one matmul, shardings on arguments and result, no collective, no
    tiling or overlap mark: ditron-partition finds the communication, the later passes the rest."""
    for op, spec in (("ag_gemm", ('[["tp"], []]', '[[], ["tp"]]', '[[], ["tp"]]')),
                     ("gemm_rs", ('[[], ["tp"]]', '[["tp"], []]', '[["tp"], []]')),
                     ("gemm_ar", ('[[], ["tp"]]', '[["tp"], []]', '[[], []]'))):
        text = ops.task_program(sig(op, [(64, 32), (32, 16)], 4)).to_mlir()
        assert re.findall(r'"ditron_task\.(\w+)"', text) == ["matmul"], text
        assert "ditron.tiling" not in text and "ditron.overlap" not in text and "ditron.view" not in text
        assert [m for m in re.findall(r"dims = (\[\[.*?\]\])", text)] == list(spec), text
    text = ops.task_program(sig("all_reduce", [(64, 32)], 4)).to_mlir()
    assert 'partial = ["tp"]' in text and "ditron_task" not in text


def test_pipeline_is_ditron_device_plus_what_was_asked():
    default = ",".join(PIPELINES["ditron-device"])  # ditron.compile emits the host program
    assert ops.pipeline(sig("ag_gemm", [(64, 32), (32, 16)], 4, virtual=False)) == default
    assert ops.pipeline(sig("ag_gemm", [(64, 32), (32, 16)], 1)) == default  # one rank: nothing spins
    assert ops.pipeline(sig("ag_gemm", [(64, 32), (32, 16)], 4)) == default.replace(
        "ditron-tile", "ditron-tile{num-sms=32}")  # (132 SMs - 4 for copies) / 4 ranks
    assert ops.pipeline(sig("all_reduce", [(64, 32)], 2, virtual=False, algorithm="two_shot")) == default.replace(
        "ditron-tile", "ditron-tile{all-reduce=two_shot}")
    s = sig("ag_gemm", [(64, 32), (32, 16)], 2, passes={"ditron-schedule-overlap": {"pull": "ring"}})
    assert "ditron-schedule-overlap{pull=ring}" in ops.pipeline(s) and "ditron-tile{num-sms=64}" in ops.pipeline(s)


@pytest.mark.parametrize("s,message", [
    (lambda: sig("ag_gemm", [(8, 8), (8, 8)], 2, passes={"ditron-frobnicate": {"x": 1}}),
     "names ditron-frobnicate, which are not in ditron-device"),
    (lambda: sig("ag_gemm", [(8, 8), (8, 8)], 4, passes={"ditron-tile": {"num-sms": 100}}),
     "num-sms=100 exceeds the 32 SMs each rank of a virtual world of 4 may use"),
    (lambda: sig("all_reduce", [(8, 8)], 2, algorithm="one_shot", passes={"ditron-tile": {"all-reduce": "two_shot"}}),
     "algorithm='one_shot' contradicts the override ditron-tile all-reduce=two_shot"),
])
def test_bad_pass_options(s, message):
    with pytest.raises(ops.OpError, match=message):
        ops.pipeline(s())


def test_bad_pass_option_reaches_the_pass():
    with pytest.raises(PassError, match="has no option 'block-q'"):
        ops.lower(sig("ag_gemm", [(64, 32), (32, 16)], 2, passes={"ditron-tile": {"block-q": 4}}))


def test_reduce_scatter_of_columns_is_refused_by_the_lowering():
    """The device lowering scatters rows only; the op does not work around it, the pass names the limit."""
    with pytest.raises(PassError, match="scatters dim 1; the device lowering scatters rows"):
        ops.lower(sig("reduce_scatter", [(16, 32)], 2, dim=1))


# ------------------------------------------------------------------------- the choices come from the passes

def _tile_alone(s: ops.Signature) -> list[dict]:
    """ditron-tile's tilings when the passes run on their own on the task program (no ops.lower)."""
    from ditron.dialects import ditron_context, parse_module
    from ditron.dialects.opbase import walk_ops
    from ditron.passes.tile import Tiling
    head = ops.pipeline(s).split(",ditron-lower-task-to-device")[0]
    text = ops.task_program(s).to_mlir(head.replace("ditron-tile", f"ditron-tile{{target={s.target}}}", 1)
                                       if "ditron-tile{" not in head else
                                       head.replace("ditron-tile{", f"ditron-tile{{target={s.target} ", 1))
    with ditron_context():
        module = parse_module(text)
        out = [{"op": op.name, **{k: v for k, v in vars(Tiling.of(op)).items() if v is not None}}
               for op in walk_ops(module.operation) if "ditron.tiling" in op.attributes]
        del module
    return out


BIG = [("ag_gemm", [(1024, 8192), (8192, 3584)], {}), ("ag_gemm", [(16, 8192), (8192, 3584)], {}),
       ("gemm_rs", [(8192, 3584), (3584, 8192)], {}), ("gemm_ar", [(128, 3584), (3584, 8192)], {}),
       ("all_reduce", [(8, 512)], {}), ("all_reduce", [(16384, 512)], {})]


@pytest.mark.parametrize("op,shapes,params", BIG, ids=[f"{o}-{s[0][0]}" for o, s, _ in BIG])
def test_choices_are_ditron_tiles(op, shapes, params):
    for W, virtual in ((8, False), (4, True)):
        s = sig(op, shapes, W, virtual=virtual, **params)
        _, chosen = ops.lower(s)
        assert chosen and chosen == _tile_alone(s)
        if virtual:
            assert all(c.get("sm_budget", 0) <= s.cta_budget() for c in chosen)


def test_choices_follow_the_problem_and_the_target():
    """Different shapes and targets get different chunking, engines or tiles, which ops.py never names."""
    def pick(s):
        c = ops.lower(s)[1][0]
        return tuple(c.get(k) for k in ("engine", "num_chunks", "comm_sms", "block_m", "block_n", "algorithm"))
    small = pick(sig("ag_gemm", [(16, 8192), (8192, 3584)], 8, virtual=False))
    large = pick(sig("ag_gemm", [(1024, 8192), (8192, 3584)], 8, virtual=False))
    amd = pick(sig("ag_gemm", [(1024, 8192), (8192, 3584)], 8, virtual=False, target="hip:gfx942"))
    assert len({small, large, amd}) == 3, (small, large, amd)


@pytest.mark.parametrize("rows", [8, 16384])
def test_all_reduce_auto_is_the_cost_models_pick(rows):
    s = sig("all_reduce", [(rows, 512)], 8, virtual=False)
    chosen = ops.lower(s)[1][0]["algorithm"]
    pk = peaks_for("cuda:90")
    options = [(t, a) for a, t in all_reduce_estimates(rows, 512, 8, pk, elem_bytes=2, sms=132).items()]  # staged
    options += [(f(rows, 512, 8, pk, elem_bytes=2, sms=132), a) for a, f in  # one launch
                (("one_shot", all_reduce_one_launch_time), ("two_shot", all_reduce_two_shot_launch_time),
                 ("push", all_reduce_push_launch_time))]
    assert chosen == min(options)[1]


def test_forced_algorithm_and_overrides_reach_the_program():
    assert ops.lower(sig("all_reduce", [(64, 32)], 4, algorithm="one_shot"))[1][0]["algorithm"] == "one_shot"
    assert ops.lower(sig("all_reduce", [(64, 32)], 4, algorithm="two_shot"))[1][0]["algorithm"] == "two_shot"
    gemm_ar = ops.lower(sig("gemm_ar", [(64, 32), (32, 16)], 2, algorithm="push_sum"))[1]
    assert [c["algorithm"] for c in gemm_ar if c["op"].endswith("all_reduce")] == ["push_sum"]
    chosen = ops.lower(sig("ag_gemm", [(64, 32), (32, 16)], 2, passes={"ditron-tile": {"num-chunks": 2}}))[1]
    assert {c["num_chunks"] for c in chosen} == {2}


# ------------------------------------------------------------------------------------------- simulation

SMALL = [("ag_gemm", [(64, 32), (32, 16)], {}), ("gemm_rs", [("R", 32), (32, 16)], {}),
         ("gemm_ar", [("R", 32), (32, 16)], {}), ("all_gather", [(64, 32)], {}), ("all_gather", [(16, 24)], {"dim": 1}),
         ("reduce_scatter", [("R", 32)], {}), ("all_reduce", [("R", 32)], {"algorithm": "one_shot"}),
         ("all_reduce", [("R", 32)], {"algorithm": "two_shot"}), ("all_reduce", [(40, 32)], {}),
         # all_to_all: MoE's exchange of rows, a resharding of rows into columns (strided parts), a rank-3 one
         ("all_to_all", [("R", 24)], {}), ("all_to_all", [(37, 24)], {"split_dim": 1, "concat_dim": 0}),
         ("all_to_all", [(8, 3, 5)], {"split_dim": 0, "concat_dim": 2}),
         ("all_to_all", [("R", 24)], {"passes": {"ditron-tile": {"engine": "copy_engine"}}}),
         # AG+GEMM in one launch, own rows first: copiers beside the own tiles, and (two programs) every program
         # copying and counting after its own tiles
         ("ag_gemm", [(64, 32), (32, 16)], {"passes": {"ditron-tile": {"own-first": "true"}}}),
         ("ag_gemm", [(64, 32), (32, 16)], {"passes": {"ditron-tile": {"own-first": "true", "num-sms": "2",
                                                                       "persistent": "true"}}})]


def _shapes(shapes, W, m=64):
    return [tuple(W * m if d == "R" else d for d in s) for s in shapes]


@pytest.mark.parametrize("W", [1, 2, 4, 8])
@pytest.mark.parametrize("op,shapes,params", SMALL, ids=[f"{o}-{'-'.join(map(str, p.values())) or 'default'}"
                                                         for o, _, p in SMALL])
def test_ops_simulate_to_their_semantics(op, shapes, params, W):
    simulate_op(sig(op, _shapes(shapes, W), W, **params), seeds=(0, 1))


@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs", "gemm_ar", "all_reduce", "all_to_all"])
def test_ops_simulate_at_m_4091_w(op):
    W = 8 if op in ("ag_gemm", "all_to_all") else 2
    shapes = {"ag_gemm": [(4091, 32), (32, 16)], "gemm_rs": [(4091 * W, 32), (32, 16)],
              "gemm_ar": [(4091 * W, 32), (32, 16)], "all_reduce": [(4091 * W, 32)],
              "all_to_all": [(4091 * W, 32)]}[op]
    simulate_op(sig(op, shapes, W))


def test_real_world_programs_simulate_too():
    for op, shapes in (("ag_gemm", [(64, 32), (32, 16)]), ("gemm_rs", [(256, 32), (32, 16)])):
        simulate_op(sig(op, shapes, 4, virtual=False))


def test_reference_in_numpy_and_torch_agree():
    import torch
    rng = np.random.default_rng(0)
    for s in (sig("ag_gemm", [(4, 3), (3, 2)], 2), sig("gemm_rs", [(4, 3), (3, 2)], 2),
              sig("all_gather", [(4, 3)], 2, dim=1), sig("reduce_scatter", [(4, 6)], 2, dim=1),
              sig("all_to_all", [(4, 6)], 2, split_dim=1)):
        xs = [[rng.standard_normal(shape) for shape in s.shapes] for _ in range(2)]
        a = ops.reference(s, xs)
        b = ops.reference(s, [[torch.tensor(x) for x in row] for row in xs])
        assert all(x.shape == s.output_shape() and np.allclose(x, y.double().numpy(), atol=1e-5)
                   for x, y in zip(a, b))


# --------------------------------------------------------------------------------------------- artifacts

@pytest.fixture(scope="module")
def library_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("ops_lib")
    cache = tmp_path_factory.mktemp("ops_cache")
    import os
    old = os.environ.get("DITRON_CACHE_DIR")
    os.environ["DITRON_CACHE_DIR"] = str(cache)
    try:
        ops.build([sig("ag_gemm", [(64, 32), (32, 16)], 2), sig("all_gather", [(64, 32)], 1),
                   sig("all_reduce", [(64, 32)], 4, virtual=False)], root)
    finally:
        if old is None:
            del os.environ["DITRON_CACHE_DIR"]
        else:
            os.environ["DITRON_CACHE_DIR"] = old
    return root


def test_build_writes_artifacts_with_their_signature_and_choices(library_dir):
    s = sig("ag_gemm", [(64, 32), (32, 16)], 2)
    path = library_dir / s.key
    assert (path / "manifest.json").exists()
    data = json.loads((path / "op.json").read_text())
    assert ops.Signature.from_json(data["signature"]) == s and data["pipeline"] == ops.pipeline(s)
    assert [c["op"] for c in ops.choices(path)] == ["ditron_task.all_gather", "ditron_task.matmul"]
    host = json.loads((path / "manifest.json").read_text())["host_program"]["program"]
    budget = s.cta_budget()
    launches = [op for op in _walk(host["body"]) if op["op"] == "ditron_device.launch"]
    assert launches and all(_grid(op, host) <= budget for op in launches
                            if host["kernels"][op["kernel"]].get("spins"))
    # a one-rank all_gather is a copy: the artifact holds a host program and no kernel
    one = json.loads((library_dir / sig("all_gather", [(64, 32)], 1).key / "manifest.json").read_text())
    assert one["kernels"] == [] and one["host_program"] is not None


def _walk(body):
    for op in body:
        yield op
        for region in op.get("regions", []):
            yield from _walk(region["body"])


def _grid(op, host) -> int:
    import math
    return math.prod(op.get("grid", [1]))


def test_build_skips_what_is_there_unless_the_sources_changed(tmp_path):
    s = sig("all_gather", [(64, 32)], 2)
    path = ops.build_one(s, tmp_path)
    stamp = (path / "manifest.json").stat().st_mtime_ns
    assert ops.build_one(s, tmp_path) == path and (path / "manifest.json").stat().st_mtime_ns == stamp
    data = json.loads((path / "op.json").read_text())
    (path / "op.json").write_text(json.dumps(dict(data, source_hash="0" * 64)))
    with pytest.warns(RuntimeWarning, match="built from other ditron sources"):
        ops.Library(tmp_path, target="cuda:90", compile=False).executable(s)
    ops.build_one(s, tmp_path)
    assert json.loads((path / "op.json").read_text())["source_hash"] == data["source_hash"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_library_loads_once_per_signature(library_dir):
    lib = ops.Library(library_dir, target="cuda:90", compile=False)
    s = sig("ag_gemm", [(64, 32), (32, 16)], 2)
    exe = lib.executable(s)
    assert lib.executable(sig("ag_gemm", [(64, 32), (32, 16)], 2)) is exe
    assert exe.host_program is not None and "gemm" in exe.kernels  # rank-rotated from the lowering on
    lib.release(s)
    assert lib.executable(s) is not exe


def test_missing_artifact_without_compiler_says_how_to_build(library_dir):
    lib = ops.Library(library_dir, target="cuda:90", compile=False)
    s = sig("ag_gemm", [(64, 32), (32, 16)], 4)
    with pytest.raises(ops.ArtifactMissingError) as info:
        lib.executable(s)
    message = str(info.value)
    assert s.key in message and str(library_dir) in message and "ditron.ops.build" in message
    assert ops.Signature.from_json(json.loads(message.split("Signature.from_json(")[1].split("), then")[0])) == s


def test_a_mismatched_op_file_is_refused(library_dir, tmp_path):
    import shutil
    s = sig("ag_gemm", [(64, 32), (32, 16)], 2)
    other = sig("ag_gemm", [(64, 32), (32, 16)], 4)
    shutil.copytree(library_dir / s.key, tmp_path / other.key)
    with pytest.raises(DitronRuntimeError, match=f"holds {s.key}"):
        ops.Library(tmp_path, target="cuda:90", compile=False).executable(other)


def test_missing_artifact_is_built_on_the_spot(tmp_path):
    lib = ops.Library(tmp_path / "lib", target="cuda:90")
    s = sig("all_reduce", [(32, 16)], 2, virtual=False)
    exe = lib.executable(s)
    assert (tmp_path / "lib" / s.key / "op.json").exists() and exe.host_program is not None


def test_the_gpu_box_needs_no_compiler(library_dir):
    """A process where `import mlir` fails: the library loads prebuilt artifacts and reports missing ones."""
    s = sig("all_reduce", [(64, 32)], 4, virtual=False)
    missing = sig("all_reduce", [(64, 32)], 2, virtual=False)
    script = f"""
import json, sys
sys.modules["mlir"] = None          # no MLIR bindings on this box
from ditron import ops
lib = ops.Library({str(library_dir)!r}, target="cuda:90")
exe = lib.executable(ops.Signature.from_json(json.loads({json.dumps(s.to_json())!r})))
print("loaded", sorted(exe.kernels))
try:
    lib.executable(ops.Signature.from_json(json.loads({json.dumps(missing.to_json())!r})))
except ops.ArtifactMissingError as err:
    print("missing:", "no compiler here" in str(err))
print("mlir imported:", any(m.startswith("mlir.") for m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "loaded [" in out.stdout and "missing: True" in out.stdout and "mlir imported: False" in out.stdout


# ---------------------------------------------------------------------------------------------- calls

class _FakeWorld:
    def __init__(self, W, virtual=True):
        self.world_size, self.is_virtual = W, virtual


def _two(t, shape):
    return [t(shape), t(shape)]


@pytest.mark.parametrize("call,message", [
    (lambda t, w, lib: ops.ag_gemm(t((8, 4)), _two(t, (4, 2)), w, library=lib),
     "argument 0 is a list of one tensor per rank; got a tensor"),
    (lambda t, w, lib: ops.ag_gemm([t((8, 4))] * 3, _two(t, (4, 2)), w, library=lib), "got 3 item"),
    (lambda t, w, lib: ops.ag_gemm([t((8, 4)), t((6, 4))], _two(t, (4, 2)), w, library=lib),
     "argument 0 of rank 1 is \\(6, 4\\)"),
    (lambda t, w, lib: ops.all_reduce([t((8, 4), "int32")] * 2, w, library=lib),
     "tensors of torch.int32 are not supported"),
    (lambda t, w, lib: ops.gemm_rs(_two(t, (7, 4)), _two(t, (4, 2)), w, library=lib),
     "the 7 rows of a @ b do not split over 2"),
    (lambda t, w, lib: ops.all_reduce(_two(t, (8, 4)), 2, library=lib),
     r"all_reduce: world must be a ditron.World \(World.virtual\(W\) or World.from_torch\(\)\), got int"),
    (lambda t, w, lib: ops.all_reduce(_two(t, (8, 4)), w, library="/tmp/ops"),
     "library= takes an ops.Library"),
    (lambda t, w, lib: ops.all_reduce(_two(t, (8, 4)), w, library=lib, out=5),
     "out= is a list of one tensor per rank; got int"),
])
def test_call_arguments_are_checked_before_anything_runs(call, message):
    import torch
    lib = ops.Library(None, target="cuda:90", compile=False)

    def t(shape, dtype="bfloat16"):
        return torch.zeros(shape, dtype=getattr(torch, dtype))
    with pytest.raises(ops.OpError, match=message):
        call(t, _FakeWorld(2), lib)
    assert not lib._executables


def test_a_call_goes_to_the_executor(library_dir):
    """A well-formed call reaches the executor of its artifact (which, on this CPU box, refuses for want of a GPU)."""
    import torch

    from ditron.runtime.world import World
    lib = ops.Library(library_dir, target="cuda:90", compile=False)
    world = World(2, None, torch.device("cpu"))
    a = [torch.zeros(64, 32, dtype=torch.bfloat16) for _ in range(2)]
    b = [torch.zeros(32, 16, dtype=torch.bfloat16) for _ in range(2)]
    with pytest.raises(DitronRuntimeError, match="needs a GPU"):
        ops.ag_gemm(a, b, world, library=lib)
    assert list(lib._executables) == [sig("ag_gemm", [(64, 32), (32, 16)], 2)]


def test_repeated_calls_skip_the_signature_but_not_the_checks(library_dir, monkeypatch):
    """The second call with the same shapes finds its executable without building a Signature; a call with other
    shapes takes the full path again (and its checks)."""
    import torch

    from ditron.runtime.world import World
    lib = ops.Library(library_dir, target="cuda:90", compile=False)
    world = World(2, None, torch.device("cpu"))
    runs = []
    a = [torch.zeros(64, 32, dtype=torch.bfloat16) for _ in range(2)]
    b = [torch.zeros(32, 16, dtype=torch.bfloat16) for _ in range(2)]
    exe = lib.executable(sig("ag_gemm", [(64, 32), (32, 16)], 2))
    monkeypatch.setattr(exe, "run", lambda w, inputs, outputs, sync=True, **kw: runs.append(inputs) or [[0], [0]])
    ops.ag_gemm(a, b, world, library=lib)
    built = []
    real = ops.Signature.__post_init__
    monkeypatch.setattr(ops.Signature, "__post_init__", lambda self: built.append(self) or real(self))
    ops.ag_gemm(a, b, world, library=lib)
    assert not built and len(runs) == 2 and runs[1] == [[a[0], b[0]], [a[1], b[1]]]
    with pytest.raises(ops.OpError, match="argument 0 of rank 1 is \\(6, 32\\)"):
        ops.ag_gemm([torch.zeros(8, 32, dtype=torch.bfloat16), torch.zeros(6, 32, dtype=torch.bfloat16)], b, world,
                    library=lib)
    lib.release(sig("ag_gemm", [(64, 32), (32, 16)], 2))
    assert not lib._fast



def _fake_binds(monkeypatch, exe, world, record, reply):
    """exe's graph-mode executor in ``world`` replaced by a stand-in: bind() makes a live bound call (kept in
    ``binds``); calling one appends ``record(bound, sync)`` to ``calls`` and returns ``reply(bound)``."""
    binds, calls = [], []

    from types import SimpleNamespace

    from ditron.runtime.graphs import BoundCall

    class Bound:
        runner = SimpleNamespace(ex=SimpleNamespace(exe=exe, _closed=False, _broken=None))
        again = BoundCall.again  # the real fast path, over this stand-in's entry

        def __init__(self, inputs, outputs):
            self.inputs, self.outputs = inputs, outputs
            self.entry = SimpleNamespace(live=True, enqueue=lambda sync: calls.append(record(self, sync)) or True)

        @property
        def live(self):
            return self.entry.live

        @live.setter
        def live(self, value):
            self.entry.live = value

        def __call__(self, sync=True):
            calls.append(record(self, sync))
            return reply(self)

    class Ex:
        def bind(self, inputs, outputs=None):
            binds.append(Bound(inputs, outputs))
            return binds[-1]
    monkeypatch.setattr(exe, "executor", lambda w, graph=False: Ex() if graph and w is world else pytest.fail())
    return binds, calls


def test_repeated_graph_calls_replay_their_bound_call(library_dir, monkeypatch):
    """graph=True: the first call with a set of tensors binds it (Executor.bind); the next calls with the same
    tensors (address, dtype, shape, strides) only call the bound call, until it is no longer live."""
    import torch

    from ditron.runtime.world import World
    lib = ops.Library(library_dir, target="cuda:90", compile=False)
    world = World(2, None, torch.device("cpu"))
    exe = lib.executable(sig("ag_gemm", [(64, 32), (32, 16)], 2))
    binds, calls = _fake_binds(monkeypatch, exe, world, lambda b, sync: (b, sync),
                               lambda b: [[torch.zeros(1)] for _ in range(2)])
    a = [torch.zeros(64, 32, dtype=torch.bfloat16) for _ in range(2)]
    b = [torch.zeros(32, 16, dtype=torch.bfloat16) for _ in range(2)]
    for _ in range(3):
        ops.ag_gemm(a, b, world, library=lib, graph=True, sync=False)
    assert len(binds) == 1 and [c[0] for c in calls] == [binds[0]] * 3 and calls[-1][1] is False
    assert binds[0].inputs == [[a[0], b[0]], [a[1], b[1]]] and binds[0].outputs is None
    ops.ag_gemm([a[1], a[0]], b, world, library=lib, graph=True)  # other tensors (addresses): bound anew
    ops.ag_gemm(a, b, world, library=lib, graph=True, out=[torch.zeros(128, 16, dtype=torch.bfloat16)] * 2)
    assert len(binds) == 3 and binds[2].outputs is not None
    out = [torch.zeros(128, 16, dtype=torch.bfloat16)] * 2
    monkeypatch.setattr(torch.Tensor, "unbind", lambda *a: pytest.fail("keyed the rows of a tensor"))
    for _ in range(2):
        ops.ag_gemm(a, b, world, library=lib, graph=True, out=out)
    views = [o.view(128, 16) for o in out]  # other objects, the same memory: the same bound call, its own result
    got = ops.ag_gemm(a, b, world, library=lib, graph=True, out=views)
    assert len(binds) == 4 and calls[-1][0] is binds[3] and all(g is v for g, v in zip(got, views))
    binds[0].live = False  # evicted by the executor: the next call binds the same tensors again
    ops.ag_gemm(a, b, world, library=lib, graph=True)
    assert len(binds) == 5 and calls[-1][0] is binds[4]
    lib.release(sig("ag_gemm", [(64, 32), (32, 16)], 2))
    assert not lib._bound

def test_a_real_world_repeats_its_last_graph_call_without_a_key(library_dir, monkeypatch):
    """A real world's op called again with the same tensor objects, unchanged (address, dtype, shape, strides), the
    same world and parameters and the same out: the bound call replays with no key built. Any change -- another
    out, an in-place transpose, other parameters, a bound call no longer live, the executable released -- takes
    the full path again."""
    import torch

    from ditron.runtime.world import World
    lib = ops.Library(library_dir, target="cuda:90", compile=False)
    world = World(4, 1, torch.device("cpu"))  # rank 1 of a real world
    s = sig("all_reduce", [(64, 32)], 4, virtual=False)
    exe = lib.executable(s)
    monkeypatch.setattr(lib, "executable", lambda got: exe)  # one artifact stands for every shape and parameter
    binds, calls = _fake_binds(monkeypatch, exe, world, lambda b, sync: b,
                               lambda b: list(b.outputs))  # as Executor.bind's: the given outputs
    x, out = torch.zeros(16, 16, dtype=torch.bfloat16), torch.zeros(16, 16, dtype=torch.bfloat16)
    keyed = []
    real_key = ops._tensors_key
    monkeypatch.setattr(ops, "_tensors_key", lambda *a: keyed.append(1) or real_key(*a))

    def call(**kw):
        got = ops.all_reduce(x, world, library=lib, graph=True, sync=False, out=out, **kw)
        assert got is out
    for _ in range(4):
        call()
    assert len(binds) == 1 and calls == [binds[0]] * 4 and len(keyed) == 2 * 2  # calls 3 and 4: no key
    x.t_()  # the same object and memory, other strides: keyed again (the bound call's key has other strides)
    call()
    assert len(binds) == 2 and calls[-1] is binds[1]
    x.t_()
    call(algorithm="push")  # other parameters
    assert len(binds) == 3
    n = len(keyed)
    call(algorithm="push")
    call(algorithm="push")
    assert len(keyed) == n + 2 and calls[-2:] == [binds[2]] * 2  # the second repeat is the fast one
    binds[2].live = False
    call(algorithm="push")
    assert len(binds) == 4 and calls[-1] is binds[3]
    call(algorithm="push")  # bound again: the next call is the fast one
    assert lib._last["all_reduce"].bound is binds[3]
    assert not lib._last["all_reduce"](world, ("not a tensor",), out, {"algorithm": "push"}, False)
    assert lib._last["all_reduce"](world, (x,), out, {"algorithm": "push"}, False) and calls[-1] is binds[3]
    # an op of two tensors: the same, checked in a loop
    a, b = torch.zeros(16, 16, dtype=torch.bfloat16), torch.zeros(16, 16, dtype=torch.bfloat16)

    def gemm(**kw):
        assert ops.gemm_ar(a, b, world, library=lib, graph=True, sync=False, out=out, **kw) is out
    n = len(binds)
    for _ in range(3):
        gemm()
    assert len(binds) == n + 1 and calls[-2:] == [binds[n]] * 2 and lib._last["gemm_ar"].bound is binds[n]
    k = len(keyed)
    gemm()
    assert len(keyed) == k and calls[-1] is binds[n]  # no key
    b.t_()  # same shape, other strides: keyed again
    gemm()
    assert len(keyed) == k + 2 and not lib._last["gemm_ar"](world, (a, b), out, {"algorithm": "auto"}, False)
    lib.release(s)
    assert not lib._last and not lib._bound


# ------------------------------------------------------------------------------------- the benchmark's cases

def _bench(name: str = "bench_dist"):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_host_benchmark_builds_its_artifact(tmp_path):
    """bench_host --build compiles the one-rank all-reduce whose calls --run times; the library finds it."""
    bench = _bench("bench_host")
    bench.build(tmp_path)
    lib = ops.Library(tmp_path, compile=False)
    assert lib.path(bench.signature()).is_dir() and lib.executable(bench.signature()).host_program is not None


def test_host_benchmark_breakdown_runs_dry(tmp_path, monkeypatch):
    """bench_host --breakdown without a GPU (device calls no-ops): a row per W = 1 case with every layer timed, the
    whole call the largest, written to host_breakdown.csv."""
    from ditron.runtime import memops
    if memops.hotpath() is None:
        pytest.skip("no C compiler or Python headers here: the dry driver's helper cannot be built")
    bench = _bench("bench_host")
    bench.build(tmp_path / "arts")
    monkeypatch.setattr(bench, "DRY_CALLS", 20)
    monkeypatch.setattr(bench, "REPEATS", 1)
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the dry path, on a GPU host too
    assert bench.breakdown(tmp_path / "arts", tmp_path / "out") == 0
    rows = list(csv.DictReader(open(tmp_path / "out" / "host_breakdown.csv")))
    assert [r["op"] for r in rows] == [c[0] for c in bench.DRY_CASES if c[3] == 1]
    for r in rows:
        layers = [float(r[k]) for k in ("enqueue_us", "bind_us", "outputs_us", "fork_join_us", "steps_us")]
        assert all(v > 0 for v in layers) and float(r["full_us"]) > float(r["enqueue_us"]), r
        assert r["device"] == "dry (no GPU)" and int(r["steps"]) >= 1


def test_link_benchmark_kernels_compile_with_the_flags_they_claim():
    """bench_link's copy kernel compiles for sm_90 in each flag mode: no atomic without flags, a system-scope
    release exchange per tile (or per other tile), and a relaxed one for the fence-free comparison; its compute
    kernel stores its tiles by pointers or by TMA."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    bench = _bench("bench_link")
    sig = {"src": "*bf16", "dst": "*bf16", "flags": "*i32", "n_elems": "i32", "BLOCK": "constexpr",
           "RELEASE": "constexpr", "EVERY": "constexpr"}
    for release, every, atom in ((0, 1, None), (1, 1, "sys.release.exch"), (1, 2, "sys.release.exch"),
                                 (2, 1, "sys.relaxed.exch")):
        src = ASTSource(bench._sm_copy, sig, {"BLOCK": 16384, "RELEASE": release, "EVERY": every})
        ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8}).asm["ptx"]
        atoms = [line for line in ptx.splitlines() if "atom." in line]
        assert (not atoms) if atom is None else all(atom in line for line in atoms) and atoms
    sig = {"a": "*bf16", "b": "*bf16", "dst": "*bf16", "rounds": "i32", "K_STEPS": "constexpr", "PUSH": "constexpr",
           "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
    for push in (1, 2):  # pointer stores, then a TMA store of the tile
        src = ASTSource(bench._compute_push, sig, {"K_STEPS": 4, "PUSH": push, "BM": 128, "BN": 256, "BK": 64})
        ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8}).asm["ptx"]
        assert "wgmma" in ptx and ("cp.async.bulk.tensor" in ptx) == (push == 2)


def test_benchmark_cases_are_valid_signatures():
    bench = _bench()
    for W in (1, 2, 4, 8):
        for size in ("quick", "default", "full"):
            cs = bench.cases(W, size)
            assert cs and len({c.label for c in cs}) == len(cs)
            for c in cs:
                s = c.signature(W, True)
                assert s.world_size == W and s.op == c.op
        assert {c.label for c in bench.cases(W, "quick")} <= {c.label for c in bench.cases(W, "default")}


def test_benchmark_ideal_is_design_section_7():
    from ditron.cost_model import ag_gemm_ideal, gemm_rs_ideal
    bench = _bench()
    p = peaks_for("cuda:90")
    for W in (2, 8):
        ag = bench.Case("ag_gemm", 8192, 28672, 8192)
        assert bench.ideal_us(ag, W, p.gemm_flops, p.link_bw, False) == pytest.approx(
            ag_gemm_ideal(8192, 28672, 8192, W, p) * 1e6)
        rs = bench.Case("gemm_rs", 8192, 8192, 28672)
        assert bench.ideal_us(rs, W, p.gemm_flops, p.link_bw, False) == pytest.approx(
            gemm_rs_ideal(8192, 8192, 28672, W, p) * 1e6)
        # a virtual world: W ranks share one GPU's F and B
        t_comp = 2 * 8192 * 28672 * 8192 / p.gemm_flops
        t_comm = (W - 1) * 8192 * 8192 * 2 / p.link_bw
        assert bench.ideal_us(ag, W, p.gemm_flops, p.link_bw, True) == pytest.approx(
            max(t_comp, t_comm + t_comp / W) * 1e6)


# --------------------------------------------------------- the ops through the executor, on a stand-in GPU

class _FakeExecutable:
    """An op's compiled artifact whose kernels run on test_executor.FakeGPU (the executor itself is the real one)."""

    def __init__(self, monkeypatch, s: ops.Signature, path: Path):
        import ditron
        from test_executor import FakeGPU
        self.gpu = FakeGPU(monkeypatch, _kernel_records(ops.lower(s)[0]))
        self.inner = self.gpu.executable(ditron.load(path))
        self._executors = []

    def executor(self, world):
        from ditron.runtime import executor as X
        for ex in self._executors:
            if ex.world is world:
                return ex
        ex = self.gpu.ex = X.Executor(self.inner, world)
        self._executors.append(ex)
        return ex

    def run(self, world, inputs, outputs=None, *, sync=True):
        return self.executor(world).run(inputs, outputs, sync=sync)

    def close(self):
        for ex in self._executors:
            ex.close()


def _kernel_records(text: str) -> list[dict]:
    from mlir import ir

    from ditron.dialects import ditron_context, parse_module
    from ditron.kernels import KernelRecord
    with ditron_context():
        module = parse_module(text)
        out = [dict(KernelRecord.from_attr(op.operation.attributes["ditron.kernel"]),
                    name=ir.StringAttr(op.operation.attributes["sym_name"]).value)
               for op in module.body.operations
               if op.operation.name == "tt.func" and "ditron.kernel" in op.operation.attributes]
        del module
    return out


FAKE = [("ag_gemm", [(40, 32), (32, 16)], {}, (1, 2, 3)), ("gemm_rs", [("R", 32), (32, 16)], {}, (1, 2, 4)),
        ("gemm_ar", [("R", 32), (32, 16)], {}, (2, 3)), ("all_gather", [(40, 24)], {}, (1, 3)),
        ("all_gather", [(16, 8)], {"dim": 1}, (2,)), ("reduce_scatter", [("R", 24)], {}, (1, 4)),
        ("all_reduce", [("R", 24)], {"algorithm": "one_shot"}, (3,)),
        ("all_reduce", [("R", 24)], {"algorithm": "two_shot"}, (2, 4)), ("all_reduce", [(20, 24)], {}, (1, 2)),
        ("all_reduce", [(20, 24)], {"algorithm": "push"}, (1, 3)), ("gemm_ar", [(20, 32), (32, 16)],
                                                                   {"algorithm": "push"}, (2,))]


@pytest.mark.parametrize("op,shapes,params,worlds", FAKE, ids=[f"{o}-{'-'.join(map(str, p.values())) or 'default'}"
                                                               for o, _, p, _ in FAKE])
def test_ops_run_through_the_executor(monkeypatch, tmp_path, op, shapes, params, worlds):
    """The public ops, each compiled by ditron-default, run by the real executor (binding, streams, signals, waits,
    barriers) on a CPU stand-in for the GPU: three calls reuse one executor, then pipelined calls into given
    outputs."""
    import torch

    from ditron.runtime.world import World
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32")  # the executor warns about fewer queues than streams
    for W in worlds:
        s = sig(op, _shapes(shapes, W, 20), W, **params)
        lib = ops.Library(tmp_path / "lib", target="cuda:90")
        fake = _FakeExecutable(monkeypatch, s, ops.build_one(s, tmp_path / "lib"))
        monkeypatch.setattr(lib, "_load", lambda got, fake=fake, s=s: fake if got == s else pytest.fail(got.key))
        world = World.virtual(W, device="cpu")
        fn = getattr(ops, op)

        def inputs(call):
            g = torch.Generator().manual_seed(call)
            return [[torch.randn(shape, generator=g).to(torch.bfloat16) for shape in s.shapes] for _ in range(W)]

        def args(xs):
            return [list(col) for col in zip(*xs)]
        for call in (1, 2, 3):
            xs = inputs(call)
            got = fn(*args(xs), world, library=lib, **params)
            for r, (g, w) in enumerate(zip(got, ops.reference(s, xs))):
                assert g.shape == s.output_shape() and torch.allclose(
                    g.float(), w, rtol=2 ** -6, atol=2 ** -6 * float(w.abs().max())), (W, call, r)
        assert fake.executor(world).epoch == 3 and len(fake._executors) == 1
        batches = [inputs(call) for call in (4, 5)]
        outs = [[torch.zeros(s.output_shape(), dtype=torch.bfloat16) for _ in range(W)] for _ in batches]
        results = [fn(*args(xs), world, library=lib, out=o, sync=False, **params) for xs, o in zip(batches, outs)]
        lib.synchronize(world)
        for xs, o, got in zip(batches, outs, results):
            assert all(g is given for g, given in zip(got, o))
            assert all(torch.allclose(g.float(), w, rtol=2 ** -6, atol=2 ** -6 * float(w.abs().max()))
                       for g, w in zip(got, ops.reference(s, xs)))
        lib.close()


@pytest.mark.parametrize("W,shapes", [(1, [(128, 14336), (14336, 4096)]), (1, [(128, 28672), (28672, 8192)]),
                                      (2, [(128, 7168), (7168, 4096)])])
def test_small_m_gemms_get_a_resident_split_k(W, shapes):
    """Decode-sized GEMMs with a long K (the benchmark's M = 128 rows): the split-K the template picks must fit the
    tiles ditron-tile chose (every program of a split-K GEMM resident)."""
    import math
    s = sig("gemm_rs", shapes, W)
    text, _ = ops.lower(s)
    gemms = [rec for rec in _kernel_records(text) if rec["template"] == "gemm"]
    assert gemms
    for rec in gemms:
        tiles = math.ceil(rec["m"] / rec["block_m"]) * math.ceil(rec["n"] / rec["block_n"])
        assert rec["split_k"] == 1 or tiles * rec["split_k"] <= rec["num_sms"]
        assert rec["num_sms"] <= (s.cta_budget() or 132)
