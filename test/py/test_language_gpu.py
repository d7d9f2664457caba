"""ditron.language examples on a real GPU: the one-shot all-reduce and the ring all-gather (examples/) launched by
ditron.language.run_virtual in virtual worlds of W ranks on one GPU, against torch; a kernel with a planted
missing notify ends in WaitTimeoutError instead of hanging the GPU.

    CUDA_DEVICE_MAX_CONNECTIONS=32 python -m pytest -q -m gpu test/py/test_language_gpu.py    # GPU machine

Compiling needs stock Triton only (not the MLIR bindings). Run this file in its own pytest process: every rank
launches on its own stream and the ranks' kernels spin on each other, so each stream needs its own hardware queue
(CUDA_DEVICE_MAX_CONNECTIONS is read when CUDA starts).
"""
from __future__ import annotations

import os

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")  # effective only if CUDA has not started yet

import importlib.util  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import ditron.language as dl  # noqa: E402
from ditron.errors import WaitTimeoutError  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.gpu


def _example(name: str, source: str | None = None, tmp_path: Path | None = None):
    path = EXAMPLES / f"{name}.py"
    if source is not None:
        path = tmp_path / f"{name}_gpu_mutant.py"
        path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_all_reduce_one_shot_against_torch(world, dtype):
    import torch
    ex = _example("all_reduce_one_shot")
    n, block = 10_007, 1024                       # 9 full blocks and a partial one per rank
    args, xs = ex.make_args(world, n, block, seed=world, dtype=dtype)
    outputs = dl.run_virtual(ex.all_reduce_one_shot, ex.grid(n, block), args, world=world)
    expected = torch.stack([torch.from_numpy(x).cuda().float() for x in xs]).sum(0).cpu().numpy()
    tol = 1e-5 if dtype == np.float32 else 2e-2
    for r in range(world):
        np.testing.assert_allclose(outputs[r]["out_ptr"].astype(np.float32), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_ring_all_gather_against_torch(world):
    import torch
    ex = _example("ring_all_gather")
    n, block = 5_003, 512
    args, xs = ex.make_args(world, n, block, seed=world)
    outputs = dl.run_virtual(ex.ring_all_gather, ex.grid(n, block), args, world=world)
    expected = torch.cat([torch.from_numpy(x).cuda() for x in xs]).cpu().numpy()
    for r in range(world):
        np.testing.assert_array_equal(outputs[r]["out_ptr"], expected)


def test_missing_notify_times_out_instead_of_hanging(tmp_path):
    source = (EXAMPLES / "ring_all_gather.py").read_text()
    site = "        dl.notify(pad_ptr, chunk * programs + pid, epoch, nxt)\n"
    assert source.count(site) == 1
    ex = _example("ring_all_gather", source.replace(site, ""), tmp_path)
    args, _ = ex.make_args(2, 100, 64)
    with pytest.raises(WaitTimeoutError, match=r"rank \d: \d+ wait\(s\) gave up"):
        dl.run_virtual(ex.ring_all_gather, ex.grid(100, 64), args, world=2, wait_bound=1 << 16)
