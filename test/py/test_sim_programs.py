"""ditron.sim on whole programs: hand-written device programs for reduce_scatter, all_reduce, AG+GEMM, GEMM+RS and
GEMM+AR (test/py/sim_programs/, kernels from ditron.kernels records) at W in {1, 2, 4, 8} and M in {128*W,
4091*W}, several seeds (one at W = 8, M = 4091*8), two calls each (reusing signal pads and buffers), all equal to
the numpy reference; and the output of the lowering pipeline, as far as it is registered."""
from __future__ import annotations

import numpy as np
import pytest

import sim_programs as P
from ditron.sim import DEADLOCK, simulate, task_reference

K, N = 64, 64
WORLDS = [1, 2, 4, 8]
ROWS = [128, 4091]  # rows per rank: M = 128 * W or 4091 * W


def _seeds(W: int, M: int) -> tuple[int, ...]:
    return (0, 1, 2) if W * M <= 4 * 4091 else (0,)  # W = 8 at 4091 rows a rank: one seed (two calls)


def _check(name: str, text: str, records, W: int, M: int, reference) -> None:
    for seed in _seeds(W, M):
        result = P.simulate_with_kernels(text, P.path(name), records, W, seed=seed, calls=2, reference=reference)
        assert result.ok, result.summary()
        assert result.compared and len(result.outputs) == W


def _marks(W: int, M: int):
    return [pytest.mark.slow] if W * M > 4 * 4091 else []


CASES = [pytest.param(W, M, marks=_marks(W, M), id=f"W{W}-M{M}x{W}") for W in WORLDS for M in ROWS]


@pytest.mark.parametrize("W, M", CASES)
def test_reduce_scatter(W, M):
    text, recs = P.reduce_scatter(W, M, N)
    _check("reduce_scatter", text, recs, W, M, P.reduce_scatter_reference)


@pytest.mark.parametrize("W, M", CASES)
def test_all_reduce(W, M):
    text, recs = P.all_reduce(W, M, N)
    _check("all_reduce", text, recs, W, M, P.all_reduce_reference)


@pytest.mark.parametrize("W, M", CASES)
def test_ag_gemm(W, M):
    text, recs = P.ag_gemm(W, M, K, N)
    _check("ag_gemm", text, recs, W, M, P.ag_gemm_reference)


@pytest.mark.parametrize("W, M", CASES)
def test_gemm_rs(W, M):
    text, recs = P.gemm_rs(W, M, K, N)
    _check("gemm_rs", text, recs, W, M, P.gemm_rs_reference)


@pytest.mark.parametrize("W, M", CASES)
def test_gemm_ar(W, M):
    text, recs = P.gemm_ar(W, M, K, N)
    _check("gemm_ar", text, recs, W, M, P.gemm_ar_reference)


def test_reduce_scatter_against_the_task_level_reference():
    W, M = 4, 96
    text, recs = P.reduce_scatter(W, M, N)
    result = P.simulate_with_kernels(text, P.path("reduce_scatter"), recs, W, seed=2, calls=2,
                                     reference=task_reference(P.task_reduce_scatter(W, M, N)))
    assert result.ok, result.summary()


def test_three_calls_with_sync_and_without():
    text, recs = P.gemm_rs(4, 100, K, N)
    for sync in (False, True):
        result = P.simulate_with_kernels(text, P.path("gemm_rs"), recs, 4, seed=7, calls=3,
                                         reference=P.gemm_rs_reference, sync_between_calls=sync)
        assert result.ok, result.summary()
        assert len(result.outputs_per_call) == 3
        # fresh inputs every call: the outputs of the calls differ
        assert not np.allclose(result.outputs_per_call[0][0][0], result.outputs_per_call[2][0][0])


def test_a_kernel_that_spins_on_every_sm_starves_its_producer():
    # GEMM+AR: the reduce (stream 1) waits per tile for the GEMM's notifies (stream 0). With 8 SMs per rank and
    # 8 reduce programs, a reduce that launches first takes every SM and the GEMM never starts: a deadlock that
    # only an SM budget shows. With SMs to spare, every seed completes.
    text, recs = P.gemm_ar(2, 1024, K, N)
    seen = []
    for seed in range(8):
        result = P.simulate_with_kernels(text, P.path("gemm_ar"), recs, 2, seed=seed, num_sms=8, calls=1,
                                         reference=P.gemm_ar_reference)
        seen.append(result.deadlocked)
        if result.deadlocked:
            (f,) = result.of_kind(DEADLOCK)
            assert "waiting for an SM: every SM of rank" in f.message
            assert "'c_done'" in f.message and f.loc.file.endswith("gemm_ar.mlir")
        else:
            assert result.ok, result.summary()
    assert any(seen) and not all(seen)  # whether it deadlocks depends on the interleaving
    for seed in range(3):
        result = P.simulate_with_kernels(text, P.path("gemm_ar"), recs, 2, seed=seed, num_sms=16,
                                         reference=P.gemm_ar_reference)
        assert result.ok, result.summary()


# ------------------------------------------------------------------------------------- the pipeline's output

def _registered(*names: str) -> bool:
    from ditron.passes.registry import PASSES

    return all(n in PASSES for n in names)


def _task_program(kind: str, W: int, M: int, K_: int, N_: int) -> str:
    mesh = f'{{ditron.mesh = {{axes = ["tp"], shape = array<i64: {W}>}}}}'
    if kind == "ag_gemm":  # rows of x sharded, W1 column-sharded -> all_gather + matmul
        sx, sw, sy = '[["tp"], []]', '[[], ["tp"]]', '[[], ["tp"]]'
    else:                  # K sharded -> matmul + reduce_scatter over the rows
        sx, sw, sy = '[[], ["tp"]]', '[["tp"], []]', '[["tp"], []]'
    return f"""module attributes {mesh} {{
  func.func @{kind}(%x: tensor<{M}x{K_}xbf16> {{ditron.sharding = {{dims = {sx}}}}},
                    %w: tensor<{K_}x{N_}xbf16> {{ditron.sharding = {{dims = {sw}}}}})
      -> (tensor<{M}x{N_}xbf16> {{ditron.sharding = {{dims = {sy}}}}}) {{
    %y = "ditron_task.matmul"(%x, %w) : (tensor<{M}x{K_}xbf16>, tensor<{K_}x{N_}xbf16>) -> tensor<{M}x{N_}xbf16>
    return %y : tensor<{M}x{N_}xbf16>
  }}
}}"""


def _pipeline() -> list[str]:
    from ditron.passes.registry import PASSES, PIPELINES

    if "ditron-device" in PIPELINES:
        return ["ditron-device"]
    passes = ["ditron-partition", "ditron-fuse-overlap", "ditron-tile", "ditron-lower-task-to-device"]
    for later in ("ditron-schedule-overlap", "ditron-lower-device-to-core"):
        if later in PASSES:
            passes.append(later)
    return passes


def _spmd_reference(kind: str):
    def reference(per_rank_inputs):
        if kind == "ag_gemm":
            x = np.concatenate([np.asarray(xs[0], dtype=np.float32) for xs in per_rank_inputs])
            return [[x @ np.asarray(xs[1], dtype=np.float32)] for xs in per_rank_inputs]
        total = sum(np.asarray(xs[0], dtype=np.float32) @ np.asarray(xs[1], dtype=np.float32)
                    for xs in per_rank_inputs)
        m = total.shape[0] // len(per_rank_inputs)
        return [[total[r * m:(r + 1) * m]] for r in range(len(per_rank_inputs))]
    return reference


@pytest.mark.skipif(not _registered("ditron-partition", "ditron-fuse-overlap", "ditron-tile",
                                    "ditron-lower-task-to-device"),
                    reason="the task-to-device passes are not registered yet")
@pytest.mark.parametrize("kind", ["ag_gemm", "gemm_rs"])
@pytest.mark.parametrize("W", [1, 2, 4])
def test_pipeline_output_simulates_to_the_reference(kind, W):
    from ditron.dialects.context import ditron_context, parse_module
    from ditron.passes.registry import parse_pipeline

    M = 96 * W
    with ditron_context():
        module = parse_module(_task_program(kind, W, M, 64, 32 * W), f"{kind}.mlir")
        for p in parse_pipeline(",".join(_pipeline())):
            p.run(module)
        for seed in (0, 1):
            result = simulate(module, W, seed=seed, calls=2, reference=_spmd_reference(kind))
            assert result.ok, result.summary()
        del module


@pytest.mark.skipif(not _registered("ditron-partition", "ditron-lower-task-to-device"),
                    reason="the task-to-device passes are not registered yet")
def test_pipeline_output_against_the_global_task_program():
    # The demo's check: the task program in the global view is the reference of its own lowering.
    from ditron.dialects.context import ditron_context, parse_module
    from ditron.passes.registry import parse_pipeline

    W = 4
    text = _task_program("ag_gemm", W, 64 * W, 32, 16 * W)
    with ditron_context():
        module = parse_module(text, "ag_gemm.mlir")
        for p in parse_pipeline(",".join(_pipeline())):
            p.run(module)
        result = simulate(module, W, seed=4, calls=2, reference=task_reference(text))
        del module
    assert result.ok, result.summary()


EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples"
# The examples use LLaMA-3-8B shapes; scaled down, the same programs simulate in a second.
SCALE = {"8192": "512", "4096": "64", "14336": "128"}


def _scaled_example(name: str) -> str:
    import re

    text = (EXAMPLES / f"{name}.mlir").read_text()
    return re.sub(r"(?<=[<x])(8192|4096|14336)(?=x)", lambda m: SCALE[m.group(1)], text)


@pytest.mark.skipif(not (EXAMPLES / "mlp.mlir").exists(), reason="no examples/")
@pytest.mark.parametrize("name", ["ag_gemm", "gemm_rs", "gemm_ar", "mlp"])
def test_examples_through_the_default_pipeline(name):
    from ditron.dialects.context import ditron_context, parse_module
    from ditron.passes.registry import PIPELINES, parse_pipeline

    if "ditron-device" not in PIPELINES:
        pytest.skip("ditron-device is not registered yet")
    if not (EXAMPLES / f"{name}.mlir").exists():
        pytest.skip(f"no examples/{name}.mlir")
    text = _scaled_example(name)
    assert "8192" not in text and "14336" not in text
    with ditron_context():
        module = parse_module(text, f"examples/{name}.mlir")
        for p in parse_pipeline("ditron-device"):
            p.run(module)
        for seed in (0, 1):
            result = simulate(module, 4, seed=seed, calls=2, reference=task_reference(text))
            assert result.ok, result.summary()
        del module
