"""ditron.ops on the CPU: signatures and their checks, the task programs the ops are written as, that every choice
in their compiled programs comes from the passes (not from ops.py), the simulated programs against the ops'
semantics for W in {1, 2, 4, 8} (M = 4091·W included), and the artifact library (build, look-up, cache, a GPU box
without the compiler). The GPU side is test_ops_gpu.py."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ditron import ops
from ditron.cost_model import all_reduce_estimates, peaks_for
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


@pytest.mark.parametrize("make,message", [
    (lambda: sig("all_to_none", [(4, 4)], 2), "unknown op 'all_to_none'"),
    (lambda: sig("ag_gemm", [(4, 8), (4, 4)], 2), r"needs a \[M, K\] and b \[K, N\] with the same K"),
    (lambda: sig("ag_gemm", [(4, 8)], 2), "ag_gemm takes 2 tensor"),
    (lambda: sig("gemm_rs", [(6, 8), (8, 4)], 4), "the 6 rows of a @ b do not split over 4 ranks"),
    (lambda: sig("reduce_scatter", [(6, 8)], 4), r"dim 0 of \[6, 8\] \(size 6\) does not split over 4 ranks"),
    (lambda: sig("all_gather", [(6, 8)], 4, dim=2), r"dim 2 is out of range for a tensor of shape \[6, 8\]"),
    (lambda: sig("all_reduce", [(6, 8)], 4, algorithm="two_shot"), "two_shot' scatters the 6 rows over the 4 ranks"),
    (lambda: sig("all_reduce", [(8, 8)], 4, algorithm="three_shot"), "algorithm must be one of auto, one_shot"),
    (lambda: sig("all_reduce", [(8, 8)], 4, dim=0), "all_reduce: unknown parameter 'dim'"),
    (lambda: ops.signature_for("all_reduce", [(8, 8)], "i8", 2, True), "element type 'i8' is not supported"),
    (lambda: sig("all_reduce", [(8, 8)], 0), "world size must be a positive int"),
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


def test_pipeline_is_ditron_default_plus_what_was_asked():
    default = ",".join(PIPELINES["ditron-default"])
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
     "names ditron-frobnicate, which are not in ditron-default"),
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
    estimates = all_reduce_estimates(rows, 512, 8, peaks_for("cuda:90"), elem_bytes=2, sms=132)
    assert chosen == min(estimates, key=estimates.get)


def test_forced_algorithm_and_overrides_reach_the_program():
    assert ops.lower(sig("all_reduce", [(64, 32)], 4, algorithm="one_shot"))[1][0]["algorithm"] == "one_shot"
    assert ops.lower(sig("all_reduce", [(64, 32)], 4, algorithm="two_shot"))[1][0]["algorithm"] == "two_shot"
    chosen = ops.lower(sig("ag_gemm", [(64, 32), (32, 16)], 2, passes={"ditron-tile": {"num-chunks": 2}}))[1]
    assert {c["num_chunks"] for c in chosen} == {2}


# ------------------------------------------------------------------------------------------- simulation

SMALL = [("ag_gemm", [(64, 32), (32, 16)], {}), ("gemm_rs", [("R", 32), (32, 16)], {}),
         ("gemm_ar", [("R", 32), (32, 16)], {}), ("all_gather", [(64, 32)], {}), ("all_gather", [(16, 24)], {"dim": 1}),
         ("reduce_scatter", [("R", 32)], {}), ("all_reduce", [("R", 32)], {"algorithm": "one_shot"}),
         ("all_reduce", [("R", 32)], {"algorithm": "two_shot"}), ("all_reduce", [(40, 32)], {})]


def _shapes(shapes, W, m=64):
    return [tuple(W * m if d == "R" else d for d in s) for s in shapes]


@pytest.mark.parametrize("W", [1, 2, 4, 8])
@pytest.mark.parametrize("op,shapes,params", SMALL, ids=[f"{o}-{'-'.join(map(str, p.values())) or 'default'}"
                                                         for o, _, p in SMALL])
def test_ops_simulate_to_their_semantics(op, shapes, params, W):
    simulate_op(sig(op, _shapes(shapes, W), W, **params), seeds=(0, 1))


@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs", "gemm_ar", "all_reduce"])
def test_ops_simulate_at_m_4091_w(op):
    W = 8 if op == "ag_gemm" else 2
    shapes = {"ag_gemm": [(4091, 32), (32, 16)], "gemm_rs": [(4091 * W, 32), (32, 16)],
              "gemm_ar": [(4091 * W, 32), (32, 16)], "all_reduce": [(4091 * W, 32)]}[op]
    simulate_op(sig(op, shapes, W))


def test_real_world_programs_simulate_too():
    for op, shapes in (("ag_gemm", [(64, 32), (32, 16)]), ("gemm_rs", [(256, 32), (32, 16)])):
        simulate_op(sig(op, shapes, 4, virtual=False))


def test_reference_in_numpy_and_torch_agree():
    import torch
    rng = np.random.default_rng(0)
    for s in (sig("ag_gemm", [(4, 3), (3, 2)], 2), sig("gemm_rs", [(4, 3), (3, 2)], 2),
              sig("all_gather", [(4, 3)], 2, dim=1), sig("reduce_scatter", [(4, 6)], 2, dim=1)):
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


def test_build_skips_what_is_there(library_dir):
    s = sig("ag_gemm", [(64, 32), (32, 16)], 2)
    stamp = (library_dir / s.key / "manifest.json").stat().st_mtime_ns
    ops.build_one(s, library_dir)
    assert (library_dir / s.key / "manifest.json").stat().st_mtime_ns == stamp


def test_library_loads_once_per_signature(library_dir):
    lib = ops.Library(library_dir, target="cuda:90", compile=False)
    s = sig("ag_gemm", [(64, 32), (32, 16)], 2)
    exe = lib.executable(s)
    assert lib.executable(sig("ag_gemm", [(64, 32), (32, 16)], 2)) is exe
    assert exe.host_program is not None and "gemm_1" in exe.kernels
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


@pytest.mark.parametrize("call,message", [
    (lambda t, w, lib: ops.ag_gemm(t((8, 4)), [t((4, 2))] * 2, w, library=lib), "argument 0 is a list of one tensor per rank; got a tensor"),
    (lambda t, w, lib: ops.ag_gemm([t((8, 4))] * 3, [t((4, 2))] * 2, w, library=lib), "got 3 item"),
    (lambda t, w, lib: ops.ag_gemm([t((8, 4)), t((6, 4))], [t((4, 2))] * 2, w, library=lib), "argument 0 of rank 1 is \\(6, 4\\)"),
    (lambda t, w, lib: ops.all_reduce([t((8, 4), "int32")] * 2, w, library=lib), "tensors of torch.int32 are not supported"),
    (lambda t, w, lib: ops.gemm_rs([t((7, 4))] * 2, [t((4, 2))] * 2, w, library=lib), "the 7 rows of a @ b do not split over 2"),
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
