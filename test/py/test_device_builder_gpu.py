"""ditron.device programs on a real GPU: examples/ag_gemm_user.py (AG+GEMM written with the device builder) against
torch in virtual worlds W in {1, 2, 4} on one GPU (rows per rank 128 and 1000: the tiles straddle ranks' rows),
eager and CUDA-graph mode, several calls, with the built-in GEMM template or the user @ditron.jit GEMM; a user
kernel waiting in-kernel for a copy; a program whose signal is missing ends in WaitTimeoutError naming rank and
pad, not a hang; the example as a user op on torch tensors; and a real two-process world on the same GPU.

The GPU machine needs torch + triton only. Build the artifacts where the compiler is, then run there:

    python test/py/test_device_builder_gpu.py build build/device_arts           # CPU machine (needs MLIR)
    DITRON_DEVICE_ARTS=build/device_arts python -m pytest -q -m gpu test/py/test_device_builder_gpu.py

Without DITRON_DEVICE_ARTS the artifacts are compiled here (which needs the compiler).
"""
from __future__ import annotations

import os

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")  # effective only if CUDA has not started yet

import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2] / "examples"))
import ag_gemm_user as example  # noqa: E402

import ditron.device as dd  # noqa: E402

TARGET = "cuda:90"
K, N = 256, 192
CALLS = 3
NUM_SMS = 132


def budget(W: int) -> int:
    """The SMs one rank's spinning GEMM may hold in a virtual world of W ranks (World.cta_budget)."""
    from ditron.runtime.world import World
    return World(W, None, None).cta_budget(NUM_SMS) if W > 1 else NUM_SMS


def stuck(W: int = 2) -> dd.Program:
    """Rank 0 never signals rank 1's slot 0: rank 1's wait cannot complete."""
    p = dd.Program("stuck", W)
    x = p.input("x", (16, 16), "bf16")
    y = p.output("y", (W * 16, 16), "bf16")
    g = p.symmetric("g", (W * 16, 16), "bf16")
    ready = p.signal_pad("ready", W)
    with p.loop(0, p.num_ranks) as d:
        q = (p.rank + d) % p.num_ranks
        p.copy(x, g, dst_rank=q, dst_offsets=(p.rank * 16, 0))
        with p.if_((p.rank + q).ne(1)):  # rank 0 -> 1 and rank 1 -> 0 dropped
            p.signal(ready, rank=q, slot=p.rank)
    with p.loop(0, p.num_ranks) as r:
        p.wait(ready, r)
    p.copy(g, y)
    p.barrier()
    return p


def jit_scale(W: int, n: int = 5000, *, signal: bool = True) -> dd.Program:
    """A user kernel (examples/jit_kernels.py) waiting in-kernel for a peer's copy on another stream."""
    import jit_kernels
    return jit_kernels.scale_program(W, n, block=512, copy_stream=1, signal=signal)


REAL_MS = (128, 1000)
REAL_NAMES = [f"ag_gemm_user_real_w2_m{m}" for m in REAL_MS]  # known without building (a GPU box cannot build)


def cases(real: bool = False) -> dict[str, dd.Program]:
    """The programs of the tests by artifact name (building them needs the compiler's kernel templates)."""
    out = {}
    if real:
        for m, name in zip(REAL_MS, REAL_NAMES):
            out[name] = example.program(2, m, K, N, chunk=m // 2)
        return out
    for W in (1, 2, 4):
        for m in (128, 1000):
            out[f"ag_gemm_user_w{W}_m{m}"] = example.program(W, m, K, N, chunk=m // 2, num_sms=budget(W))
            for gemm in ("jit", "jit_tma"):
                out[f"ag_gemm_user_{gemm}_w{W}_m{m}"] = example.program(W, m, K, N, chunk=m // 2,
                                                                        num_sms=budget(W), gemm=gemm)
    out["stuck_w2"] = stuck(2)
    out["jit_scale_w2"] = jit_scale(2)
    out["jit_stuck_w2"] = jit_scale(2, signal=False)
    return out


OP_CASES = [(2, 1000), (4, 128)]  # (W, m) of the user-op calls (virtual worlds)


def build(directory: str) -> None:
    for name, p in {**cases(), **cases(real=True)}.items():
        p.compile(TARGET, out_dir=Path(directory) / name, cache=False)
        print(f"built {name}", flush=True)
    op = example.op(directory=Path(directory) / "ops")
    for W, m in OP_CASES:
        op.prebuild(W, True, [(m, K), (K, N)], "bf16", TARGET)
        print(f"built the user op at W={W} m={m}", flush=True)


def load(name: str):
    import ditron
    given = os.environ.get("DITRON_DEVICE_ARTS")
    if given:
        return ditron.load(Path(given) / name)
    programs = {**cases(), **cases(real=True)}
    return programs[name].compile(TARGET)


def inputs(W: int, m: int, call: int):
    import torch
    g = torch.Generator(device="cpu").manual_seed(1000 * call + W)
    return [[(torch.randn(m, K, generator=g) / 4).to(torch.bfloat16).cuda(),
             (torch.randn(K, N, generator=g) / 4).to(torch.bfloat16).cuda()] for _ in range(W)]


def expected(xs):
    import torch
    gathered = torch.cat([x[0].float() for x in xs], 0)
    return [gathered @ x[1].float() for x in xs]


def close(got, want) -> bool:
    err = (got.float() - want).abs().max().item()
    return err <= 2.0 ** -6 * max(want.abs().max().item(), 1.0)


@pytest.fixture(scope="module")
def gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch


VIRTUAL = [(W, m) for W in (1, 2, 4) for m in (128, 1000)]


@pytest.mark.gpu
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("gemm", ["template", "jit", "jit_tma"])
@pytest.mark.parametrize("W,m", VIRTUAL)
def test_ag_gemm_user_virtual_world_matches_torch(gpu, W, m, gemm, graph):
    """The built-in GEMM template with per-tile waits, or the user @ditron.jit GEMM (examples/ag_gemm_user.py:
    pointer loads, or TMA loads through descriptors made in the kernel)."""
    from ditron.runtime.world import World
    exe = load(f"ag_gemm_user{'' if gemm == 'template' else '_' + gemm}_w{W}_m{m}")
    world = World.virtual(W)
    try:
        for call in range(1, CALLS + 1):
            xs = inputs(W, m, call)
            ys = exe.run(world, xs, graph=graph)
            for r, (got, want) in enumerate(zip(ys, expected(xs))):
                assert close(got[0], want), f"rank {r} call {call}: max error {(got[0].float() - want).abs().max()}"
    finally:
        exe.close()


@pytest.mark.gpu
@pytest.mark.parametrize("W,m", OP_CASES)
def test_ag_gemm_user_as_an_op_on_torch_tensors(gpu, W, m):
    """The program called like ditron.ops.ag_gemm (ditron.user_ops.UserOp): lists of one tensor per rank."""
    from ditron.runtime.world import World
    given = os.environ.get("DITRON_DEVICE_ARTS")
    op = example.op(directory=Path(given) / "ops" if given else None)
    world = World.virtual(W)
    try:
        for call in range(1, CALLS + 1):
            xs = inputs(W, m, call)
            ys = op([x[0] for x in xs], [x[1] for x in xs], world=world, graph=call > 1)
            for r, (got, want) in enumerate(zip(ys, expected(xs))):
                assert close(got, want), f"rank {r} call {call}"
    finally:
        op.close()


@pytest.mark.gpu
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_a_user_kernel_waiting_in_kernel_for_a_copy(gpu, graph):
    from ditron.runtime.world import World
    exe = load("jit_scale_w2")
    world = World.virtual(2)
    try:
        for call in range(1, CALLS + 1):
            xs = [[gpu.randn(5000, device="cuda") + 10 * r + call] for r in range(2)]
            ys = exe.run(world, xs, graph=graph)
            for r in range(2):
                gpu.testing.assert_close(ys[r][0], 2 * xs[(r - 1) % 2][0])
    finally:
        exe.close()


@pytest.mark.gpu
def test_a_user_kernel_whose_signal_never_comes_gives_up_naming_the_kernel_and_pad(gpu):
    """The planted missing signal of examples/jit_kernels.scale_program: the user kernel's bounded in-kernel wait
    gives up (its wait_bound / wait_err / wait_tag bound by the executor) and the error names it, not a hang."""
    from ditron.errors import WaitTimeoutError
    from ditron.runtime.world import World
    exe = load("jit_stuck_w2")
    ex = exe.executor(World.virtual(2), timeout_s=20)
    ex.max_iters = 20_000  # a few milliseconds of polling per wait
    x = [[gpu.ones(5000, device="cuda")] for _ in range(2)]
    start = time.monotonic()
    with pytest.raises(WaitTimeoutError) as err:
        ex.run(x)
    assert time.monotonic() - start < 60
    message = str(err.value)
    assert "scale_after_wait" in message and "rank 0" in message, message
    exe.close()


@pytest.mark.gpu
def test_a_missing_signal_times_out_naming_rank_and_slot(gpu):
    from ditron.errors import DitronRuntimeError, WaitTimeoutError
    from ditron.runtime.world import World
    exe = load("stuck_w2")
    ex = exe.executor(World.virtual(2), timeout_s=2)
    x = [[gpu.ones(16, 16, dtype=gpu.bfloat16, device="cuda")] for _ in range(2)]
    start = time.monotonic()
    with pytest.raises(WaitTimeoutError) as err:
        ex.run(x)
    assert time.monotonic() - start < 60
    message = str(err.value)
    assert "signal pad 'ready'" in message and "rank 1" in message and "rank 0" in message, message
    gpu.cuda.synchronize()
    with pytest.raises(DitronRuntimeError, match="cannot run again"):
        ex.run(x)
    exe.close()


@pytest.mark.gpu
def test_ag_gemm_user_two_processes_on_one_gpu(gpu):
    """W = 2 processes on this GPU (torch symmetric memory): the real rendezvous path."""
    from two_ranks import run_two_ranks
    run_two_ranks([str(HERE), "worker", *REAL_NAMES], REAL_NAMES)


def worker(names: list[str]) -> int:
    import torch
    import torch.distributed as dist

    from ditron.runtime.world import World
    torch.cuda.set_device(0)
    dist.init_process_group("gloo")  # NCCL refuses two ranks on one GPU; symmetric memory needs only the store
    world = World.from_torch()
    failed = 0
    for name in names:
        m = int(name.rsplit("_m", 1)[1])
        exe = load(name)
        ok = True
        for call in range(1, CALLS + 1):
            xs = inputs(2, m, call)
            got = exe.run(world, xs[world.rank], graph=call == CALLS)
            want = expected(xs)[world.rank]
            if not close(got[0], want):
                ok = False
                print(f"rank {world.rank}: {name} call {call} MISMATCH", flush=True)
        exe.close()
        failed += not ok
        if ok:
            print(f"rank {world.rank}: {name} ok", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "build":
        build(argv[1])
        return 0
    if len(argv) >= 1 and argv[0] == "worker":
        return worker(argv[1:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
