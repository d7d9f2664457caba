"""examples/flash_decode.py on a real GPU, against torch's scaled_dot_product_attention on the whole cache (float32):

* the kernel alone through ditron.language.run_virtual in virtual worlds W = 1, 2, 3, 4, 8 (fp16, fp32), GQA 64 / 8
  heads, head dim 128, a KV length that does not divide by W;
* ``flash_decode(...)`` on torch tensors (the device program, ditron.device, through the executor) in virtual worlds
  W = 1, 2 (bf16, fp16), three calls with new inputs (both halves of the double-buffered partials), eager and
  CUDA-graph mode;
* a real two-process world (W = 2) on this one GPU (torch symmetric memory): eager calls of the program without
  an end barrier, and a program with one (``barrier=True``) in CUDA-graph mode;
* a planted missing notify ends in WaitTimeoutError, not a hang.

The GPU machine needs torch + triton only. Build the artifacts where the compiler is, then run there:

    python test/py/test_flash_decode_gpu.py build build/flash_decode_arts          # CPU machine (needs MLIR)
    DITRON_FLASH_DECODE_ARTS=build/flash_decode_arts CUDA_DEVICE_MAX_CONNECTIONS=32 \\
        python -m pytest -q -m gpu test/py/test_flash_decode_gpu.py                # GPU machine

Without DITRON_FLASH_DECODE_ARTS the device programs are compiled here (which needs the compiler); the
run_virtual tests need no artifacts.
"""
from __future__ import annotations

import os

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")  # effective only if CUDA has not started yet

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2] / "examples"))
import flash_decode as fd  # noqa: E402

TARGET = "cuda:90"
HQ, HKV, D = 64, 8, 128
CALLS = 3
# (W, B, L, dtype) of the device-program calls; L never divides by W
OP_CASES = [(1, 5, 3001, "bf16"), (2, 5, 3001, "bf16"), (2, 3, 1025, "f16")]
# (W, B, L, dtype, barrier): the program with an end barrier runs its last call in CUDA-graph mode
REAL = [(2, 5, 3001, "bf16", False), (2, 64, 4097, "bf16", False), (2, 5, 3001, "bf16", True)]
REAL_NAMES = [f"flash_decode_real_w{W}_b{B}_L{L}{'_barrier' if bar else ''}" for W, B, L, _, bar in REAL]


def shapes(W: int, B: int, L: int):
    S = fd.capacity(L, W)
    return [(B, HQ, D), (B * HKV, S, D), (B * HKV, S, D)]


def user_op():
    given = os.environ.get("DITRON_FLASH_DECODE_ARTS")
    return fd.op(directory=Path(given) if given else None, target=TARGET)


def build(directory: str) -> None:
    op = fd.op(directory=Path(directory), target=TARGET)
    for W, B, L, dtype in OP_CASES:
        op.prebuild(W, True, shapes(W, B, L), dtype, TARGET, kv_len=L)
        print(f"built flash_decode virtual W={W} B={B} L={L} {dtype}", flush=True)
    for W, B, L, dtype, barrier in REAL:
        op.prebuild(W, False, shapes(W, B, L), dtype, TARGET, kv_len=L, barrier=barrier)
        print(f"built flash_decode real W={W} B={B} L={L} {dtype} barrier={barrier}", flush=True)


def torch_inputs(B: int, L: int, dtype: str, seed: int):
    """q [B, HQ, D], k, v [B, HKV, L, D] on the GPU (q scaled up: the softmax is not flat)."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    t = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
    q = (torch.randn(B, HQ, D, generator=g) * 2).to(t).cuda()
    k = torch.randn(B, HKV, L, D, generator=g).to(t).cuda()
    v = torch.randn(B, HKV, L, D, generator=g).to(t).cuda()
    return q, k, v


def close(got, want, tol: float) -> float:
    """max |got - want| / max |want|; asserts it is within tol."""
    err = ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-6)).item()
    assert err <= tol, f"relative error {err:.3e} > {tol}"
    return err


@pytest.fixture(scope="module")
def gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_kernel_in_run_virtual_against_torch_sdpa(gpu, world, dtype):
    B, L = 3, 4099                                   # 4099 = 4096 + 3: no W > 1 divides it
    rng = np.random.default_rng(world)
    q = (rng.standard_normal((B, HQ, D)) * 2).astype(dtype)
    k = rng.standard_normal((B, HKV, L, D)).astype(dtype)
    v = rng.standard_normal((B, HKV, L, D)).astype(dtype)
    sms = gpu.cuda.get_device_properties(0).multi_processor_count
    args, grid = fd.make_args(world, q, k, v, budget=(sms - 4) // world)     # run_virtual keeps 4 SMs free
    outputs = dl_run(fd.flash_decode_kernel, grid, args, world)
    o, lse = fd.reference(*(gpu.from_numpy(x).cuda() for x in (q, k, v)))
    tol = 1e-2 if dtype == np.float32 else 2e-2       # fp32 dots are tf32
    for r in range(world):
        close(gpu.from_numpy(outputs[r]["o_ptr"]).cuda(), o, tol)
        close(gpu.from_numpy(outputs[r]["lse_ptr"]).cuda(), lse, 1e-3)


def dl_run(kernel, grid, args, world, **kw):
    import ditron.language as dl
    return dl.run_virtual(kernel, grid, args, world=world, num_warps=fd.NUM_WARPS, num_stages=fd.NUM_STAGES, **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("W,B,L,dtype", OP_CASES, ids=[f"w{c[0]}_b{c[1]}_L{c[2]}_{c[3]}" for c in OP_CASES])
def test_flash_decode_op_in_a_virtual_world(gpu, W, B, L, dtype):
    from ditron.runtime.world import World
    op = user_op()
    world = World.virtual(W)
    try:
        for call in range(1, CALLS + 1):
            q, k, v = torch_inputs(B, L, dtype, 100 * call + W)
            ks, vs = fd.shard_kv(k, v, W)
            os_, lses = fd.flash_decode([q] * W, ks, vs, kv_len=L, world=world, graph=call == CALLS, user_op=op)
            o_ref, lse_ref = fd.reference(q, k, v)
            for r in range(W):
                assert os_[r].dtype == q.dtype and os_[r].shape == q.shape
                close(os_[r], o_ref, 2e-2)
                close(lses[r], lse_ref, 1e-3)
    finally:
        op.close()


@pytest.mark.gpu
def test_missing_notify_times_out_instead_of_hanging(gpu, tmp_path):
    import importlib.util

    from ditron.errors import WaitTimeoutError
    source = (HERE.parents[2] / "examples" / "flash_decode.py").read_text()
    site = "            dl.notify(pad_ptr, bh * parts + j, epoch, peer)\n"
    assert source.count(site) == 1
    path = tmp_path / "flash_decode_gpu_mutant.py"
    path.write_text(source.replace(site, ""))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mutant = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mutant
    spec.loader.exec_module(mutant)
    q, k, v = fd.make_inputs(2, 16, 2, 32, 100, dtype=np.float16)
    args, grid = mutant.make_args(2, q, k, v, budget=8)
    with pytest.raises(WaitTimeoutError, match=r"rank \d: \d+ wait\(s\) gave up"):
        dl_run(mutant.flash_decode_kernel, grid, args, 2, wait_bound=1 << 16)


@pytest.mark.gpu
def test_flash_decode_two_processes_on_one_gpu(gpu):
    """W = 2 processes on this GPU (torch symmetric memory): the real rendezvous path."""
    from two_ranks import run_two_ranks
    run_two_ranks([str(HERE), "worker"], REAL_NAMES)


def worker() -> int:
    import torch
    import torch.distributed as dist

    from ditron.runtime.world import World
    torch.cuda.set_device(0)
    dist.init_process_group("gloo")  # NCCL refuses two ranks on one GPU; symmetric memory needs only the store
    world = World.from_torch()
    op = user_op()
    failed = 0
    for (W, B, L, dtype, barrier), name in zip(REAL, REAL_NAMES):
        ok = True
        for call in range(1, CALLS + 1):
            q, k, v = torch_inputs(B, L, dtype, 100 * call + W)       # the same on both ranks (same seed)
            ks, vs = fd.shard_kv(k, v, W)
            o, lse = fd.flash_decode(q, ks[world.rank], vs[world.rank], kv_len=L, world=world, user_op=op,
                                     barrier=barrier, graph=barrier and call == CALLS)
            o_ref, lse_ref = fd.reference(q, k, v)
            try:
                close(o, o_ref, 2e-2)
                close(lse, lse_ref, 1e-3)
            except AssertionError as err:
                ok = False
                print(f"rank {world.rank}: {name} call {call} MISMATCH {err}", flush=True)
        failed += not ok
        if ok:
            print(f"rank {world.rank}: {name} ok", flush=True)
    op.close()
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "build":
        build(argv[1])
        return 0
    if argv[:1] == ["worker"]:
        return worker()
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
