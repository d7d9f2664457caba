"""Eager calls with fresh tensors on a real GPU (runtime/eager.py call plans, ditron.fastcall): every fused op and
its torch operator at W = 1 and a virtual world of 2 ranks, each call with new input tensors, against torch; no
host synchronisation on the call path (``torch.cuda.set_sync_debug_mode("error")`` around the calls); plans and
interpreted calls give the same results; ``graph="copy"`` with fresh tensors replays one capture.

Artifacts: those of test_torch_ops_gpu.py (W = 1) plus the W = 2 virtual signatures below, built where the
compiler is (``python test/py/test_eager_gpu.py build DIR``, then DITRON_OPS_DIR=DIR), or here when it is.

    DITRON_OPS_DIR=DIR python -m pytest -q -m gpu test/py/test_eager_gpu.py
"""
from __future__ import annotations

import os

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from ditron import ops  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_torch_ops_gpu as T  # noqa: E402

FUSED = ("ag_gemm", "gemm_rs", "gemm_ar")
CALLS = 4
COPY_SHAPE = (96, 320)


def signatures() -> list[ops.Signature]:
    out = list(T.signatures())
    out += [ops.signature_for(op, T.op_shapes(op, 2), "bf16", 2, True, T.TARGET) for op in FUSED]
    out += [ops.signature_for("all_reduce", [COPY_SHAPE], "bf16", 1, True, T.TARGET, algorithm="one_shot"),
            ops.signature_for("all_to_all", [COPY_SHAPE], "bf16", 2, True, T.TARGET, split_dim=1, concat_dim=0)]
    # copies of whole rows (the all-reduce's output) and of column blocks (the reshard): the plans' C copies
    return out


def build(directory: str) -> None:
    ops.build(signatures(), directory, log=print)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    T._gpu()
    given = os.environ.get("DITRON_OPS_DIR")
    if not given:
        if not ops.compiler_available():
            pytest.skip("set DITRON_OPS_DIR to a directory built by `python test/py/test_eager_gpu.py build DIR`")
        given = str(tmp_path_factory.mktemp("eager_arts"))
        build(given)
    library = ops.Library(given, target=T.TARGET, compile=False)
    yield library
    library.close()


def _no_sync(fn):
    import torch
    torch.cuda.set_sync_debug_mode("error")  # a host synchronisation on the call path raises
    try:
        return fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.gpu
@pytest.mark.parametrize("W", [1, 2])
@pytest.mark.parametrize("op", FUSED)
def test_fresh_tensor_eager_calls_match_torch_without_host_sync(lib, op, W):
    import torch

    from ditron.runtime import eager
    from ditron.runtime.world import World
    world = World.virtual(W)
    sig = ops.signature_for(op, T.op_shapes(op, W), "bf16", W, True, T.TARGET)
    fn = getattr(ops, op)
    batches = [T.inputs_of(sig.shapes, W, seed) for seed in range(1, CALLS + 1)]
    args = [[list(col) for col in zip(*xs)] for xs in batches]
    first = fn(*args[0], world, library=lib)  # the checked call that makes the plan
    torch.cuda.synchronize()
    assert all(T.close_enough(g, w) for g, w in zip(first, ops.reference(sig, batches[0])))
    got = _no_sync(lambda: [fn(*a, world, library=lib, sync=False) for a in args[1:]])
    torch.cuda.synchronize()
    assert lib._eager, "the calls went through a call plan"
    for xs, outs in zip(batches[1:], got):
        for r, (g, w) in enumerate(zip(outs, ops.reference(sig, xs))):
            assert T.close_enough(g, w), (op, W, r, float((g.float() - w).abs().max()))
    eager.ENABLED = False  # the interpreted calls agree
    try:
        again = fn(*args[-1], world, library=lib)
    finally:
        eager.ENABLED = True
    assert all(torch.equal(a, b) for a, b in zip(again, got[-1]))


@pytest.mark.gpu
@pytest.mark.parametrize("W", [1, 2])
@pytest.mark.parametrize("op", FUSED)
def test_the_c_path_launches_what_tritons_launcher_does(lib, op, W, monkeypatch):
    """The plans' C path (runtime/hotpath.c: cuLaunchKernel, fork / join, memops and copies in one C call each) and
    Triton's launcher with ctypes fork / join give the same results bit for bit, without host synchronisation;
    the C path is taken where the helper is built."""
    import torch

    from ditron.runtime import eager, memops
    from ditron.runtime.world import World
    sig = ops.signature_for(op, T.op_shapes(op, W), "bf16", W, True, T.TARGET)
    fn = getattr(ops, op)
    args = [[list(col) for col in zip(*T.inputs_of(sig.shapes, W, seed))] for seed in range(1, CALLS + 1)]
    results = {}
    for c_path in (False, True):
        monkeypatch.setattr(eager, "C_PATH", c_path)
        fresh = ops.Library(lib.directory, target=T.TARGET, compile=False)  # its own executors: new plans
        world = World.virtual(W)
        fn(*args[0], world, library=fresh)
        torch.cuda.synchronize()
        results[c_path] = _no_sync(lambda: [fn(*a, world, library=fresh, sync=False) for a in args[1:]])
        torch.cuda.synchronize()
        (fast,) = fresh._eager.values()
        assert (fast.plan.c_launches > 0) == (c_path and memops.hotpath() is not None)
        fresh.close()
    for a, b in zip(results[False], results[True]):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.gpu
@pytest.mark.parametrize("op", FUSED)
def test_fresh_tensor_torch_operator_calls_match_torch_without_host_sync(lib, op):
    import torch

    from ditron import fastcall, torch_ops
    from ditron.runtime.world import World
    world = World.virtual(1)
    handle = torch_ops.register_world(world, lib)
    sig = ops.signature_for(op, T.op_shapes(op, 1), "bf16", 1, True, T.TARGET)
    call = getattr(torch.ops.ditron, op)
    batches = [T.inputs_of(sig.shapes, 1, seed) for seed in range(1, CALLS + 1)]
    call(*batches[0][0], handle)  # checked: the plan and the capture plan
    torch.cuda.synchronize()
    got = _no_sync(lambda: [call(*xs[0], handle) for xs in batches[1:]])
    torch.cuda.synchronize()
    assert any(k[0] == op and k[1] == handle for k in fastcall._ops), "the calls took the fast path"
    for xs, g in zip(batches[1:], got):
        want = ops.reference(sig, xs)[0]
        assert T.close_enough(g, want), (op, float((g.float() - want).abs().max()))
    torch_ops.close(world)


@pytest.mark.gpu
@pytest.mark.parametrize("op", FUSED)
def test_graph_copy_with_fresh_tensors_matches_torch_with_one_capture(lib, op):
    """graph="copy": fresh activations copied into one captured set; every call against torch, fresh results."""
    import torch

    from ditron.runtime.world import World
    world = World.virtual(1)
    sig = ops.signature_for(op, T.op_shapes(op, 1), "bf16", 1, True, T.TARGET)
    fn = getattr(ops, op)
    weight = T.inputs_of(sig.shapes, 1, 0)[0][1]
    batches = [[[T.inputs_of(sig.shapes, 1, seed)[0][0], weight]] for seed in range(1, CALLS + 1)]
    got = [fn(*[list(col) for col in zip(*xs)], world, library=lib, graph="copy", sync=False) for xs in batches]
    torch.cuda.synchronize()
    for xs, g in zip(batches, got):
        want = ops.reference(sig, xs)[0]
        assert T.close_enough(g[0], want), (op, float((g[0].float() - want).abs().max()))
    runner = lib.executable(sig).executor(world, graph=True)._graphs
    assert runner.captures == 2 and len(runner._copied) == 1  # one graph per parity for every call


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "build":
        build(sys.argv[2])
    else:
        sys.exit("usage: python test/py/test_eager_gpu.py build DIR")


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["all_reduce_w1", "reshard_w2"])
def test_the_c_paths_copies_match_torchs_copy(lib, case, monkeypatch):
    """Copies through the plans' C path (hotpath.c: cuMemcpyDtoDAsync for whole rows -- a one-shot all-reduce's
    output at W = 1 -- and cuMemcpy2DAsync for column blocks -- all_to_all resharding rows to columns at W = 2)
    and through torch's copy_ give the same results, equal to torch's, with fresh tensors each call and no host
    synchronisation."""
    import torch

    from ditron.runtime import eager, memops
    from ditron.runtime.world import World
    W = 1 if case == "all_reduce_w1" else 2
    call = (lambda a, world, lib_, **kw: ops.all_reduce(*a, world, "one_shot", library=lib_, **kw)) if W == 1 else \
        (lambda a, world, lib_, **kw: ops.all_to_all(*a, world, split_dim=1, concat_dim=0, library=lib_, **kw))
    args = [[list(col) for col in zip(*T.inputs_of([COPY_SHAPE], W, seed))] for seed in range(1, CALLS + 1)]
    results = {}
    for c_path in (False, True):
        monkeypatch.setattr(eager, "C_PATH", c_path)
        fresh = ops.Library(lib.directory, target=T.TARGET, compile=False)
        world = World.virtual(W)
        call(args[0], world, fresh)
        torch.cuda.synchronize()
        results[c_path] = _no_sync(lambda: [call(a, world, fresh, sync=False) for a in args[1:]])
        torch.cuda.synchronize()
        (fast,) = fresh._eager.values()
        assert (fast.plan.c_copies > 0) == (c_path and memops.hotpath() is not None)
        fresh.close()
    for a, got_c, got_torch in zip(args[1:], results[True], results[False]):
        xs = a[0]
        cols = COPY_SHAPE[1] // W
        want = [sum(x.float() for x in xs)] if W == 1 else \
            [torch.cat([x[:, r * cols:(r + 1) * cols] for x in xs]).float() for r in range(W)]
        for x, y, ref in zip(got_c, got_torch, want):
            assert torch.equal(x, y)
            torch.testing.assert_close(x.float(), ref, rtol=2e-2, atol=2e-2)
