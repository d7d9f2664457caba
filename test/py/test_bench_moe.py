"""benchmarks/bench_moe.py's torch baseline (TorchExpertParallel: router, split sizes exchanged, all_to_all_single
dispatch, torch._grouped_mm or a loop of torch.matmul, all_to_all_single combine) on the CPU against the
single-process MixtralSparseMoeBlock: in virtual worlds of W = 1, 2, 3, 4, 8 (its all_to_all_single as copies
between the ranks' buffers) with uneven token counts and skewed routing (every token to one expert: the other
ranks receive nothing), and in a real world of 2 and 3 processes over gloo (its all_to_all_single calls as they
run under NCCL). The benchmark's own numerics check (``compare``) must catch a wrong output."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_moe  # noqa: E402

H, I_, E = 32, 48, 24   # E divides over 1, 2, 3, 4, 8 ranks


def block(top_k: int = 2, skewed: bool = False):
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    config = MixtralConfig(hidden_size=H, intermediate_size=I_, num_local_experts=E, num_experts_per_tok=top_k,
                           router_jitter_noise=0.0)
    torch.manual_seed(0)
    b = MixtralSparseMoeBlock(config)
    with torch.no_grad():
        for p in b.parameters():
            p.normal_(0, p.shape[-1] ** -0.5)
        if skewed:  # feature 0 (set to 1 in every token) sends every token to experts 0 and 1
            b.gate.weight.zero_()
            b.gate.weight[0, 0], b.gate.weight[1, 0] = 20.0, 15.0
    return b.eval().requires_grad_(False)


def tokens(rank: int, t: int, skewed: bool = False):
    x = torch.randn(1, t, H, generator=torch.Generator().manual_seed(10 + rank))
    if skewed:
        x[..., 0] = 1.0
    return x


@pytest.mark.parametrize("grouped_mm", [True, False])
@pytest.mark.parametrize("w", [1, 2, 3, 4, 8])
def test_virtual_baseline_equals_the_block(w, grouped_mm):
    b = block()
    base = bench_moe.TorchExpertParallel(b, w, range(w), virtual=True, grouped_mm=grouped_mm)
    assert base.how == ("torch._grouped_mm" if grouped_mm else "loop of torch.matmul")
    xs = [tokens(r, 13) for r in range(w)]
    got = base(xs)
    for r in range(w):
        want = b(xs[r])
        torch.testing.assert_close(got[r], want, rtol=1e-5, atol=1e-5)
        assert bench_moe.compare(got[r], want)["ok"]


@pytest.mark.parametrize("grouped_mm", [True, False])
def test_virtual_baseline_skewed_routing(grouped_mm):
    """Every token to experts 0 and 1 (rank 0's at W = 4): ranks 1..3 receive no row, 22 experts stay empty."""
    b = block(skewed=True)
    base = bench_moe.TorchExpertParallel(b, 4, range(4), virtual=True, grouped_mm=grouped_mm)
    xs = [tokens(r, 9, skewed=True) for r in range(4)]
    got = base(xs)
    for r in range(4):
        torch.testing.assert_close(got[r], b(xs[r]), rtol=1e-5, atol=1e-5)


def test_compare_catches_a_wrong_output():
    b = block()
    x = tokens(0, 13)
    want = b(x)
    assert bench_moe.compare(want.clone(), want)["ok"]
    wrong = want.clone()
    wrong[0, 3] *= 0.0  # one token missing all its experts
    assert not bench_moe.compare(wrong, want)["ok"]
    assert not bench_moe.compare(want[:, :12], want)["ok"]


def _real_rank(rank: int, w: int, port: int, skewed: bool, queue) -> None:
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=w)
    try:
        b = block(skewed=skewed)
        base = bench_moe.TorchExpertParallel(b, w, [rank], virtual=False)
        x = tokens(rank, 7 + 3 * rank, skewed)   # uneven: every rank its own token count
        got = base([x])[0]
        queue.put((rank, float((got - b(x)).abs().max())))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("w,skewed", [(2, False), (3, False), (3, True)])
def test_real_baseline_over_gloo_equals_the_block(w, skewed):
    import socket

    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_real_rank, args=(r, w, port, skewed, queue)) for r in range(w)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    errs = dict(queue.get(timeout=5) for _ in range(w))
    assert sorted(errs) == list(range(w)) and max(errs.values()) < 1e-5, errs
