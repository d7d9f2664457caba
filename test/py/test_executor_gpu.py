"""Host programs on a real GPU: virtual worlds W in {1, 2, 4, 8} on one GPU (all_gather, reduce_scatter, one- and
two-shot all_reduce, AG+GEMM, GEMM+RS) against torch, pipelined calls, both signal paths, the CTA-budget check,
both timeout paths, and a real two-process world through PyTorch symmetric memory on one GPU.

The GPU machine needs torch + triton only. Build the artifacts where the compiler is, then run there:

    python tools/build_gpu_test_artifacts.py /tmp/arts                    # CPU machine (needs MLIR)
    CUDA_DEVICE_MAX_CONNECTIONS=32 DITRON_TEST_ARTIFACTS=/tmp/arts \\
        python -m pytest -q -m gpu test/py/test_executor_gpu.py            # GPU machine

Run this file in its own pytest process: CUDA_DEVICE_MAX_CONNECTIONS is read when CUDA starts, and a virtual
world of 8 ranks uses 17 streams (with the default 8 hardware queues, a spinning wait can block an unrelated
stream queued behind it). Without DITRON_TEST_ARTIFACTS the artifacts are built here (which needs the compiler).
"""
from __future__ import annotations

import os

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")  # effective only if CUDA has not started yet

import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
from two_ranks import run_two_ranks  # noqa: E402
import torch  # noqa: E402

import ditron  # noqa: E402
import executor_programs as EP  # noqa: E402
from ditron.errors import DitronRuntimeError, WaitTimeoutError  # noqa: E402
from ditron.runtime.world import World  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

HERE = Path(__file__).resolve().parent
CALLS = 3
RUN_CASES = [name for name, c in EP.CASES.items() if c.op != "stuck" and not c.gemm_grid]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    given = os.environ.get("DITRON_TEST_ARTIFACTS")
    if given:
        root = Path(given) / "executor"
        missing = [n for n in EP.CASES if not (root / n / "manifest.json").exists()]
        if missing:
            pytest.fail(f"DITRON_TEST_ARTIFACTS={given} lacks executor artifacts {missing[:4]}...; build them with "
                        "tools/build_gpu_test_artifacts.py")
        return root
    try:
        import mlir  # noqa: F401
    except ImportError:
        pytest.skip("no MLIR bindings here to build the artifacts: set DITRON_TEST_ARTIFACTS to a directory built by "
                    "tools/build_gpu_test_artifacts.py")
    root = tmp_path_factory.mktemp("executor_artifacts")
    EP.build_all(root)
    return root


@pytest.fixture(autouse=True)
def _h200_only():
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        pytest.skip(f"the artifacts are built for cuda:90; this GPU is sm_{major}{minor}")


def close_enough(got, want, exact=False) -> bool:
    if exact:
        return torch.equal(got, want)
    scale = max(float(want.float().abs().max()), 1.0)
    return torch.allclose(got.float(), want.float(), rtol=2 ** -6, atol=2 ** -6 * scale)


def check(case, inputs, outputs):
    want = EP.reference(case, inputs)
    for r in range(case.W):
        for k, (g, w) in enumerate(zip(outputs[r], want[r])):
            assert g.shape == w.shape and g.dtype == w.dtype
            assert close_enough(g, w, exact=case.op == "all_gather"), (
                f"{case.name}: rank {r} output {k} differs; max error {float((g.float() - w.float()).abs().max())}")


@pytest.mark.parametrize("name", RUN_CASES)
def test_virtual_world_matches_torch(artifacts, name):
    case = EP.CASES[name]
    exe = ditron.load(artifacts / name)
    world = World.virtual(case.W)
    for call in range(1, CALLS + 1):
        xs = EP.make_inputs(case, call)
        check(case, xs, exe.run(world, xs))
    ex = exe.executor(world)
    assert ex.epoch == CALLS and ex.watch.done
    exe.close()


@pytest.mark.parametrize("name", ["ag_gemm_w4_m4091", "all_reduce2_w8_m4091", "gemm_rs_w8_m4091",
                                  "all_gather_w8_m4091"])
def test_pipelined_calls_without_host_sync(artifacts, name):
    """Calls enqueued back to back (sync=False); the epoch protocol keeps them apart."""
    case = EP.CASES[name]
    exe = ditron.load(artifacts / name)
    world = World.virtual(case.W)
    inputs = [EP.make_inputs(case, call) for call in range(1, CALLS + 2)]
    outputs = [exe.run(world, xs, sync=False) for xs in inputs]
    exe.executor(world).synchronize()
    for xs, outs in zip(inputs, outputs):
        check(case, xs, outs)
    exe.close()


@pytest.mark.parametrize("signal_via", ["kernel", "memop"])
def test_both_signal_paths(artifacts, signal_via):
    case = EP.CASES["all_reduce2_w4_m4091"]
    exe = ditron.load(artifacts / case.name)
    world = World.virtual(case.W)
    ex = exe.executor(world, signal_via=signal_via)
    assert ex.signal_memop == (signal_via == "memop")
    for call in range(1, CALLS + 1):
        xs = EP.make_inputs(case, call)
        check(case, xs, ex.run(xs))
    exe.close()


def test_given_outputs_and_the_callers_stream(artifacts):
    """Outputs given by the caller are written in place; work on the caller's stream after the call sees them."""
    case = EP.CASES["reduce_scatter_w4_m4091"]
    exe = ditron.load(artifacts / case.name)
    world = World.virtual(case.W)
    xs = EP.make_inputs(case, 1)
    outs = [[torch.full((case.M, case.N), 7.0, dtype=torch.bfloat16, device="cuda")] for _ in range(case.W)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # the inputs and outputs were made on the default stream
    with torch.cuda.stream(side):
        got = exe.run(world, xs, outputs=outs, sync=False)
        doubled = [o[0] * 2 for o in got]       # ordered after the call on the caller's stream
    torch.cuda.synchronize()
    assert got[0][0] is outs[0][0]
    want = EP.reference(case, xs)
    assert all(close_enough(doubled[r], want[r][0] * 2) for r in range(case.W))
    exe.close()


def test_calibrated_wait_bound(artifacts):
    case = EP.CASES["all_gather_w2_m4091"]
    exe = ditron.load(artifacts / case.name)
    ex = exe.executor(World.virtual(2), timeout_s=10)
    assert 1e-9 < ex.poll_seconds < 1e-4
    assert ex.max_iters >= 10_000
    assert ex.max_iters * ex.poll_seconds >= 10  # the in-kernel bound lasts at least the timeout
    exe.close()


def test_a_spinning_kernel_over_the_budget_is_refused(artifacts):
    case = EP.CASES["ag_gemm_w8_m256_biggrid"]
    exe = ditron.load(artifacts / case.name)
    with pytest.raises(DitronRuntimeError, match="launch of @ag_gemm_kernel has 64 programs and spin-waits"):
        exe.run(World.virtual(8), EP.make_inputs(case, 1))
    torch.cuda.synchronize()  # nothing was enqueued: nothing spins


def test_a_stuck_wait_raises_and_the_gpu_stays_usable(artifacts):
    case = EP.CASES["stuck_w2_m16"]
    exe = ditron.load(artifacts / case.name)
    world = World.virtual(2)
    ex = exe.executor(world, timeout_s=2)
    start = time.monotonic()
    with pytest.raises(WaitTimeoutError) as err:
        ex.run(EP.make_inputs(case, 1))
    assert time.monotonic() - start < 30
    message = str(err.value)
    assert "signal pad 'stuck_sig' slot 0 >= 1" in message and "rank 0" in message and "rank 1" in message
    assert ex.watch.done, "the blocked waits were not released"
    torch.cuda.synchronize()
    assert float(torch.ones(1000, device="cuda").sum()) == 1000.0
    with pytest.raises(DitronRuntimeError, match="cannot run again"):
        ex.run(EP.make_inputs(case, 2))
    exe.close()


def test_the_in_kernel_bound_fires_without_a_watching_host(artifacts):
    case = EP.CASES["stuck_w2_m16"]
    exe = ditron.load(artifacts / case.name)
    # the runtime wait kernel (a driver memop wait has no bound of its own: the watchdog releases it, see above)
    ex = exe.executor(World.virtual(2), timeout_s=20, wait_via="kernel")
    ex.max_iters = 20_000  # a few milliseconds of polling
    ex.run(EP.make_inputs(case, 1), sync=False)
    start = time.monotonic()
    with pytest.raises(WaitTimeoutError, match="gave up in-kernel"):
        ex.synchronize()  # the wait kernels give up on their own, long before the watchdog's 20 s
    assert time.monotonic() - start < 10
    exe.close()


def test_a_stuck_in_kernel_wait_gives_up_and_names_the_kernel(artifacts):
    """AG+GEMM whose rows never arrive (the program's signals of 'ag_arrived' dropped): the GEMM's bounded
    in-kernel waits give up on their own (the lowering appended wait_bound / wait_err / wait_tag, the executor
    bound them), the kernel finishes, and the executor names the kernel's wait -- long before the watchdog."""
    case = EP.CASES["ag_gemm_w2_m4091"]
    exe = ditron.load(artifacts / case.name)
    kinds = [a.kind for a in exe.kernels["ag_gemm_kernel"].args]
    assert kinds[-3:] == ["wait_bound", "wait_err", "wait_tag"]
    stuck = SimpleNamespace(host_program=EP.without_signals_to(exe.host_program, "ag_arrived"), kernels=exe.kernels,
                            path=exe.path, warmup=exe.warmup)
    from ditron.runtime.executor import Executor
    ex = Executor(stuck, World.virtual(2), timeout_s=20)
    ex.max_iters = 20_000  # a few milliseconds of polling per wait
    start = time.monotonic()
    with pytest.raises(WaitTimeoutError) as err:
        ex.run(EP.make_inputs(case, 1))
    assert time.monotonic() - start < 10, "the watchdog fired, not the in-kernel bound"
    message = str(err.value)
    assert "kernel @ag_gemm_kernel waits in-kernel (gave up in-kernel;" in message, message
    assert "signal pad 'ag_arrived' a slot >= 1" in message, message
    torch.cuda.synchronize()  # nothing spins any more
    assert float(torch.ones(1000, device="cuda").sum()) == 1000.0
    ex.close()
    exe.close()


def test_real_two_process_world_through_symmetric_memory(artifacts):
    """W = 2 processes on this one GPU: the real rendezvous path (torch symmetric memory, peer heaps mapped with
    CUDA IPC), without MPS the GPU time-slices between the two contexts, so this is slow but must be correct."""
    names = ["all_gather_w2_m4091", "all_reduce2_w2_m4091", "ag_gemm_w2_m4091", "gemm_rs_w2_m4091"]
    run_two_ranks([str(HERE / "executor_programs" / "real_world.py"), str(artifacts), *names], names)
