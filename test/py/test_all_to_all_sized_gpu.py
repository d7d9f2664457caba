"""ditron.ops.all_to_all with split sizes computed on the device, on a GPU (issue 29 item 1): virtual worlds of
W = 1, 2, 3, 4, 8 ranks (uneven and skewed routing, int64 sizes as torch.bincount gives), a small capacity that
overflows (CapacityOverflowError in the eager API, the count on the device otherwise), graph=True replays and a
capture in the caller's torch.cuda.graph replayed with new sizes. Checked against ditron.op_reference.

The GPU machine needs torch + triton only. Build the artifacts where the compiler is, then run there:

    python test/py/test_all_to_all_sized_gpu.py build build/a2a_sized_arts             # CPU machine (MLIR)
    DITRON_A2A_SIZED_DIR=build/a2a_sized_arts python -m pytest -q -m gpu test/py/test_all_to_all_sized_gpu.py

Without DITRON_A2A_SIZED_DIR the programs are compiled there (which needs the compiler).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from ditron.op_reference import all_to_all_sized

# The GPU cases: (w, shape, dtype, capacity), whose artifacts ``build`` writes.
GPU_CASES = [*((w, (256, 512), "bf16", w * 256) for w in (1, 2, 3, 4, 8)), (2, (64, 128), "bf16", 100),
             (2, (128, 256), "bf16", 256)]


def _library():
    from ditron import ops
    given = os.environ.get("DITRON_A2A_SIZED_DIR")
    return ops.Library(given, target="cuda:90") if given else None


def _gpu_inputs(w, n, h, skew=False):
    import torch
    g = torch.Generator().manual_seed(w)
    xs = [torch.randn(n, h, generator=g).to(torch.bfloat16).cuda() for _ in range(w)]
    ss = []
    for r in range(w):
        if skew:
            s = torch.zeros(w, dtype=torch.int64)
            s[0] = n
        else:
            cut = torch.sort(torch.randint(0, n + 1, (w - 1,), generator=g)).values
            s = torch.diff(torch.cat([torch.tensor([0]), cut, torch.tensor([n])]))
        ss.append(s.cuda())  # int64, as torch.bincount gives: converted on the device
    return xs, ss


def _check(xs, ss, outs, recvs, capacity):
    want, counts = all_to_all_sized([x.float().cpu().numpy() for x in xs], [s.cpu().numpy() for s in ss], capacity)
    for r in range(len(xs)):
        np.testing.assert_array_equal(recvs[r].cpu().numpy(), counts[r])
        np.testing.assert_array_equal(outs[r].float().cpu().numpy(), want[r])


@pytest.mark.gpu
@pytest.mark.parametrize("w", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("skew", [False, True])
def test_gpu_virtual_world_matches_reference(w, skew):
    from ditron import World, ops
    world = World.virtual(w)
    xs, ss = _gpu_inputs(w, 256, 512, skew)
    for _ in range(3):
        outs, recvs = ops.all_to_all(xs, world, splits=ss, library=_library())
        _check(xs, ss, outs, recvs, w * 256)


@pytest.mark.gpu
def test_gpu_small_capacity_raises_in_eager_and_counts_in_async():
    from ditron import World, ops
    from ditron.ops_sized import CapacityOverflowError, overflow
    world = World.virtual(2)
    xs, ss = _gpu_inputs(2, 64, 128, skew=True)
    with pytest.raises(CapacityOverflowError, match="rank 0: 28 row"):
        ops.all_to_all(xs, world, splits=ss, capacity=100, library=_library())
    outs, recvs = ops.all_to_all(xs, world, splits=ss, capacity=100, sync=False, library=_library())
    assert [int(v) for v in overflow(recvs, 100)] == [28, 0]
    _check(xs, ss, outs, recvs, 100)


@pytest.mark.gpu
def test_gpu_graph_replay_and_capture_in_the_callers_graph():
    """No host sync anywhere: ops' graph=True replays, and the whole call is captured by torch.cuda.graph."""
    import torch
    from ditron import World, ops
    world = World.virtual(2)
    xs, ss = _gpu_inputs(2, 128, 256)
    for _ in range(3):
        outs, recvs = ops.all_to_all(xs, world, splits=ss, graph=True, library=_library())
        torch.cuda.synchronize()
        _check(xs, ss, outs, recvs, 256)
    ops.all_to_all(xs, world, splits=ss, sync=False, library=_library())  # loaded, with its plan, before
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs, recvs = ops.all_to_all(xs, world, splits=ss, sync=False, library=_library())
    for skew in (False, True):
        new_x, new_s = _gpu_inputs(2, 128, 256, skew)
        for r in range(2):
            xs[r].copy_(new_x[r])
            ss[r].copy_(new_s[r])
        graph.replay()
        torch.cuda.synchronize()
        _check(xs, ss, outs, recvs, 256)


if __name__ == "__main__":  # python test/py/test_all_to_all_sized_gpu.py build DIR: the GPU cases' artifacts
    import sys
    if len(sys.argv) != 3 or sys.argv[1] != "build":
        raise SystemExit("usage: test_all_to_all_sized_gpu.py build DIR")
    from ditron import ops_sized
    for built in ops_sized.build(sys.argv[2], GPU_CASES):
        print(f"built {built}")

