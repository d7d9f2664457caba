"""CUDA-graph mode and driver stream waits on a real GPU: ditron.ops (all_reduce one/two-shot, AG+GEMM, GEMM+RS) in
virtual worlds W in {1, 2, 4} with graph=True, five calls each (both pad parities, twice) against torch, new values
in the same tensors and new tensors; a stuck driver wait in graph and eager mode (WaitTimeoutError naming rank,
pad, slot and value, the GPU usable afterwards); and a real two-process world in graph mode.

It runs the artifacts of test_ops_gpu.py (no new ones). Build them where the compiler is, then run here:

    python test/py/test_ops_gpu.py build build/ops_arts                          # CPU machine (needs MLIR)
    CUDA_DEVICE_MAX_CONNECTIONS=32 DITRON_OPS_DIR=build/ops_arts \\
        python -m pytest -q -m gpu test/py/test_executor_graph_gpu.py             # GPU machine

Run this file in its own pytest process (CUDA_DEVICE_MAX_CONNECTIONS is read when CUDA starts). Every executor
here has a wait timeout of at most 20 s, so a deadlock fails a test instead of hanging it.
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

import executor_programs as EP  # noqa: E402
import test_ops_gpu as T  # noqa: E402
from ditron import ops  # noqa: E402
from ditron.errors import WaitTimeoutError  # noqa: E402

HERE = Path(__file__).resolve()
CALLS = 5
TIMEOUT_S = 20.0
lib = T.lib  # the same fixture: DITRON_OPS_DIR, else built here

pytestmark = pytest.mark.gpu


def _names() -> list[str]:
    out = []
    for W in (1, 2, 4):
        for op in ("ag_gemm", "gemm_rs"):
            out += [f"{op}_w{W}_m128"]
        out += [f"all_reduce1_w{W}_m128", f"all_reduce1ce_w{W}_m128", f"all_reduce2_w{W}_m128"] if W > 1 else \
            ["all_reduce_w1_m128"]
    return out + ["ag_gemm_w4_m4091", "gemm_rs_w4_m4091", "all_reduce2_w4_m4091"]


VIRTUAL = _names()
REAL = ["real_all_reduce1_w2_m4091", "real_all_reduce_w2_m4091", "real_ag_gemm_w2_m4091", "real_gemm_rs_w2_m4091"]


def refill(inputs, s: ops.Signature, call: int) -> None:
    """New values for the same tensors (a replay must read them)."""
    for row, new in zip(inputs, T.make_inputs(s, call)):
        for x, y in zip(row, new):
            x.copy_(y)


def check(s, name, call, got, inputs) -> None:
    want = ops.reference(s, inputs)
    for r, (g, w) in enumerate(zip(got, want)):
        assert tuple(g.shape) == s.output_shape() and T.close_enough(g, w), \
            f"{name} call {call}: rank {r} differs; max error {T.max_error(g, w)}"


@pytest.mark.parametrize("name", VIRTUAL)
def test_graph_calls_match_torch(lib, name):
    T._gpu()
    from ditron.runtime.world import World
    s = T.CASES[name]
    world = World.virtual(s.world_size)
    ex = lib.executable(s).executor(world, graph=True, timeout_s=TIMEOUT_S)
    assert ex.graph
    xs = T.make_inputs(s, 1)
    first = None
    for call in range(1, CALLS + 1):
        refill(xs, s, call)
        got = T.call_op(s, world, xs, lib, graph=True)
        check(s, name, call, got, xs)
        first = first or got
        assert all(g is f for g, f in zip(got, first)), "executor-owned outputs are reused for the same inputs"
    other = T.make_inputs(s, 99)  # other tensors: another key, captured on its own
    check(s, name, "other", T.call_op(s, world, other, lib, graph=True), other)
    assert ex.epoch == CALLS + 1 and ex._graphs.captures == 3 and ex.watch.done  # A: both parities; B: one
    lib.release(s)


@pytest.mark.parametrize("name", ["all_reduce1_w4_m128", "ag_gemm_w2_m128"])
def test_pipelined_graph_calls_into_given_outputs(lib, name):
    T._gpu()
    import torch

    from ditron.runtime.world import World
    s = T.CASES[name]
    world = World.virtual(s.world_size)
    lib.executable(s).executor(world, graph=True, timeout_s=TIMEOUT_S)
    inputs = [T.make_inputs(s, call) for call in range(1, 4)]
    outs = [[torch.full(s.output_shape(), 7.0, dtype=torch.bfloat16, device="cuda") for _ in range(s.world_size)]
            for _ in inputs]
    results = [T.call_op(s, world, xs, lib, out=o, sync=False, graph=True) for xs, o in zip(inputs, outs)]
    lib.synchronize(world)
    for call, (xs, o, got) in enumerate(zip(inputs, outs, results)):
        assert all(g is given for g, given in zip(got, o))
        check(s, name, call, got, xs)
    lib.release(s)


class _Finalized:
    """Garbage in a reference cycle whose finalizer notes whether it ran inside a stream capture."""

    seen: list[bool] = []

    def __init__(self):
        self.me = self

    def __del__(self):
        import torch
        _Finalized.seen.append(torch.cuda.is_current_stream_capturing())


def test_no_garbage_is_collected_inside_a_capture(lib, monkeypatch):
    """A collection inside ditron's capture runs finalizers there; one that calls CUDA as a capture refuses (a torch
    symmetric-memory tensor's free) aborted a benchmark process. Cyclic garbage made before each capturing call,
    with collections made as frequent as they go the moment a capture begins, is finalized outside the captures."""
    T._gpu()
    import gc

    import torch

    from ditron.runtime.world import World
    s = T.CASES["all_reduce1_w2_m128"]
    world = World.virtual(s.world_size)
    ex = lib.executable(s).executor(world, graph=True, timeout_s=TIMEOUT_S)
    xs = T.make_inputs(s, 1)
    begin = torch.cuda.CUDAGraph.capture_begin

    def capture_begin(self, *args, **kwargs):
        begin(self, *args, **kwargs)
        gc.set_threshold(1, 1, 1)  # from here on, nearly every allocation would collect

    thresholds = gc.get_threshold()
    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_begin", capture_begin)
    _Finalized.seen.clear()
    gc.collect()
    try:
        for call in range(1, 4):  # both parities captured, then a replay
            gc.set_threshold(10**9)  # no collection before the capture begins
            _Finalized()
            check(s, "all_reduce1_w2_m128", call, T.call_op(s, world, xs, lib, graph=True), xs)
    finally:
        gc.set_threshold(*thresholds)
    gc.collect()
    assert ex._graphs.captures == 2 and len(_Finalized.seen) == 3 and not any(_Finalized.seen)
    lib.release(s)


def _stuck_executor(lib, name: str, pad: str, **options):
    from ditron.runtime.executor import Executor
    from ditron.runtime.world import World
    s = T.CASES[name]
    exe = lib.executable(s)
    stuck = SimpleNamespace(host_program=EP.without_signals_to(exe.host_program, pad), kernels=exe.kernels,
                            path=exe.path, warmup=exe.warmup)
    return s, Executor(stuck, World.virtual(s.world_size), timeout_s=2, **options)


@pytest.mark.parametrize("graph", [True, False])
def test_a_stuck_memop_wait_raises_and_the_gpu_stays_usable(lib, graph):
    """one-shot all-reduce whose count signals are dropped: the reduce streams' driver waits never complete; the
    watchdog names them, releases them (INT32_MAX satisfies a GEQ wait) and raises."""
    T._gpu()
    import torch
    s, ex = _stuck_executor(lib, "all_reduce1ce_w2_m128", "ar_count", graph=graph, wait_via="memop")
    assert ex.wait_memop
    start = time.monotonic()
    with pytest.raises(WaitTimeoutError) as err:
        ex.run(T.make_inputs(s, 1))
    assert time.monotonic() - start < 30
    message = str(err.value)
    assert "signal pad 'ar_count' slot" in message and ">= 2" in message and "rank 0" in message and "rank 1" in \
        message, message
    assert ex.watch.done, "the blocked waits were not released"
    torch.cuda.synchronize()
    assert float(torch.ones(1000, device="cuda").sum()) == 1000.0
    ex.close()


def test_real_two_process_world_in_graph_mode(lib):
    T._gpu()
    run_two_ranks([str(HERE), "worker", str(lib.directory), *REAL], REAL)


def worker(directory: str, names: list[str]) -> int:
    """One rank of the real world (launched by the test above), graph mode, CALLS calls per op."""
    import torch
    import torch.distributed as dist

    from ditron.runtime.world import World
    torch.cuda.set_device(0)
    dist.init_process_group("gloo")  # NCCL refuses two ranks on one GPU; symmetric memory needs only the store
    world = World.from_torch()
    library = ops.Library(directory, target=T.TARGET, compile=False)
    failed = 0
    for name in names:
        s = T.CASES[name]
        library.executable(s).executor(world, graph=True, timeout_s=60)
        failed_before = failed
        xs = T.make_inputs(s, 1)
        mine = xs[world.rank]
        for call in range(1, CALLS + 1):
            refill(xs, s, call)
            got = T.call_op(s, world, mine, library, graph=True)
            failed += not T.checked(world, name, call, got, ops.reference(s, xs)[world.rank])
        T.case_done(world, library, s, name, failed == failed_before)
    return T.worker_done(library, failed)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    if len(sys.argv) >= 3 and sys.argv[1] == "worker":
        sys.exit(worker(sys.argv[2], sys.argv[3:]))
    print(__doc__)
    sys.exit(2)
