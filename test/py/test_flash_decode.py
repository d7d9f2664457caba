"""examples/flash_decode.py on the CPU: the distributed flash-decode kernel in the simulator at W = 1, 2, 3, 4, 8 with
KV lengths that do not divide by W (empty shards and empty splits included), against torch's
scaled_dot_product_attention on the whole cache; planted bugs (a combine reading before its wait, a missing
notify, a missing consume_token) reported at the kernel's line; the kernel compiled at the benchmark's shapes; the
device program (ditron.device) it runs in on the GPU."""
from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import ditron.language as dl

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(source: str | None = None, tmp_path: Path | None = None):
    path = EXAMPLES / "flash_decode.py"
    if source is not None:
        path = tmp_path / "flash_decode_mutant.py"
        path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


fd = _load()


def _line(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# (W, L, budget, D): L never a multiple of W; budget = the programs a rank may hold (small: the simulator runs
# every program as an agent)
CASES = [(1, 37, 3, 16), (2, 37, 8, 32), (3, 40, 4, 16), (4, 70, 12, 16), (8, 37, 2, 16)]


@pytest.mark.parametrize("W,L,budget,D", CASES, ids=[f"w{c[0]}_L{c[1]}" for c in CASES])
def test_flash_decode_simulated_against_torch_sdpa(W, L, budget, D):
    assert W == 1 or L % W
    result = fd.simulate(W, L=L, D=D, budget=budget, seed=W)
    assert result.ok, result.summary()
    assert result.compared
    q, k, v = fd.make_inputs(2, 8, 2, D, L, seed=W)
    o, lse = fd.reference(q, k, v)
    for r in range(W):
        np.testing.assert_allclose(result.outputs[r]["o_ptr"], o.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(result.outputs[r]["lse_ptr"], lse.numpy(), rtol=1e-4, atol=1e-4)


def test_flash_decode_fp16_with_several_splits_and_empty_ones():
    """fp16 cache (fp16 tolerances), two splits per rank; rank 3's shard (17 positions) leaves its second split
    of 16-position blocks with one key, and a shard of 0 positions (L < W) contributes nothing."""
    splits, programs = fd.plan(2, 2, 70, 4, 12, 16)
    assert splits == 2 and programs == 8
    result = fd.simulate(4, L=70, budget=12, dtype=np.float16, rtol=1e-2, atol=1e-2)
    assert result.ok, result.summary()
    short = fd.simulate(8, L=5, budget=4)            # ranks 5, 6, 7 hold no position
    assert fd.shard_lengths(5, 8) == [1, 1, 1, 1, 1, 0, 0, 0]
    assert short.ok, short.summary()


def test_plan_fills_the_budget_evenly():
    for B in (1, 2, 7, 16, 64):
        for budget in (3, 64, 132):
            splits, programs = fd.plan(B, 8, 128 * 1024, 2, budget)
            tiles = B * 8 * splits
            assert 1 <= programs <= budget
            assert -(-tiles // programs) * programs - tiles < programs     # at most one short wave's share
            assert splits == max(1, budget // (B * 8))
    assert fd.plan(1, 8, 100, 1, 132, 64) == (2, 16)     # never more splits than the shard has blocks
    assert fd.shard_lengths(37, 8) == [5, 5, 5, 5, 5, 4, 4, 4] and fd.shard_starts(37, 8)[-1] == 33


def test_shard_kv_splits_the_cache_by_sequence():
    q, k, v = fd.make_inputs(1, 4, 2, 16, 11)
    ks, vs = fd.shard_kv(k, v, 3)
    assert [s.shape for s in ks] == [(1, 2, 4, 16)] * 3
    np.testing.assert_array_equal(np.concatenate([s[:, :, :n] for s, n in zip(ks, fd.shard_lengths(11, 3))], 2), k)
    assert not ks[2][:, :, 3:].any()


# (old, new, kind, message, the kernel line the finding is at)
MUTANTS = [
    ("token = dl.wait(pad_ptr, bh * parts + tl.minimum(offs_p, parts - 1), epoch)", "token = 0", "read-before-signal",
     r"before its guarding wait", "lse_j = tl.load("),
    ("            dl.notify(pad_ptr, bh * parts + j, epoch, peer)\n", "", "deadlock",
     r"waits forever for pad_ptr\[\d+\] of rank \d \(holds 0\).* to reach 1: no notify left", "token = dl.wait("),
    ("tl.load(dl.consume_token(part_lse_ptr, token)", "tl.load((part_lse_ptr)", "read-before-signal",
     r"does not depend on the wait's token", "lse_j = tl.load("),
]


@pytest.mark.parametrize("mutant", MUTANTS, ids=["read-before-wait", "missing-notify", "no-consume-token"])
def test_planted_bugs_are_reported_at_the_kernel_line(mutant, tmp_path):
    old, new, kind, message, at = mutant
    source = (EXAMPLES / "flash_decode.py").read_text()
    assert source.count(old) == 1
    module = _load(source.replace(old, new), tmp_path)
    result = module.simulate(2, L=21, budget=2)
    found = result.of_kind(kind)
    assert found, result.summary()
    line = _line(module.flash_decode_kernel.fn, at)
    located = [f for f in found if f.loc.file == module.__file__ and f.loc.line == line]
    assert located, f"no {kind} at line {line}:\n{result.summary()}"
    assert re.search(message, str(located[0])), str(located[0])
    assert f"flash_decode_mutant.py:{line}:" in result.summary()


SIGNATURE = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16", "lse_ptr": "*fp32",
             "part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "pad_ptr": "*i32", "B": "i32", "kv_len": "i32",
             "S": "i32", "splits": "i32", "epoch": "i32"}


@pytest.mark.parametrize("target,parts", [("cuda:90", 32), ("cuda:90", 2), ("hip:gfx942", 32)])
def test_kernel_compiles_at_the_benchmark_shapes(target, parts):
    """64 query heads over 8 KV heads, head dim 128: two tl.dot per block of keys (their loads pipelined into
    asynchronous copies on NVIDIA), the partials pushed through symm_at, the combine's bounded spin over 32
    partials (B = 1 at W = 2: 16 splits per rank) or 2 (B = 64)."""
    assert fd.combine_tile(64, 8, 128, parts) == ({32: (32, 2), 2: (2, 8)}[parts])
    ck = fd.flash_decode_kernel.compile(signature=SIGNATURE, constexprs=fd.constexprs(64, 8, 128, parts),
                                        target=target, num_warps=fd.NUM_WARPS, num_stages=fd.NUM_STAGES)
    asm = ck.asm["ptx" if target.startswith("cuda") else "amdgcn"]
    assert ck.binary
    if target.startswith("cuda"):
        assert "mma" in asm and "ld.acquire.sys.global.b32" in asm and "atom.global.sys.release.exch.b32" in asm
        assert "cp.async" in asm


def test_device_program_and_its_errors():
    p = fd.program(2, 4, 64, 8, 128, 4097, sm_budget=64)
    text = p.to_mlir()
    assert "flash_decode_kernel" in text and "ditron_device" in text
    with pytest.raises(ValueError, match="do not group"):
        fd.program(2, 1, 12, 8, 128, 100)
    with pytest.raises(ValueError, match="power of two"):
        fd.program(2, 1, 16, 8, 96, 100)
    with pytest.raises(ValueError, match="shards hold 10 positions"):
        fd.build(2, [(1, 16, 16), (8, 10, 16), (8, 10, 16)], "bf16", sm_budget=8, target="cuda:90", kv_len=37)


@pytest.mark.parametrize("heads", [1, 2])
def test_combine_tiles_of_fewer_heads_than_a_kv_head_has(heads):
    """combine_tile gives fewer heads per tile than G where the partials are many (BLOCK_P x HEADS x D values):
    here forced, at W = 2 with two splits per rank."""
    q, k, v = fd.make_inputs(2, 8, 2, 16, 45, seed=3)
    args, grid = fd.make_args(2, q, k, v, budget=8, block_n=16)
    assert args[0]["splits"] == 2 and args[0]["HEADS"] == 4
    for row in args:
        row["HEADS"] = heads
    result = dl.simulate(fd.flash_decode_kernel, grid, args, world=2, reference=fd.expected_outputs(2, q, k, v),
                         rtol=1e-4, atol=1e-4)
    assert result.ok and result.compared, result.summary()


def test_benchmark_cases_and_sweep_fit_the_acceptance_shapes():
    """benchmarks/bench_flash_decode.py: batch 1-64, KV length 4K-128K (+1: never a multiple of W), GQA 64 / 8 heads,
    head dim 128; the sweep keeps only tunings whose pipeline fits the target's shared memory."""
    sys.path.insert(0, str(EXAMPLES.parent / "benchmarks"))
    import bench_flash_decode as bench
    full, quick = bench.cases(False), bench.cases(True)
    assert {c.B for c in full} == {1, 4, 16, 64} and {c.L - 1 for c in full} == {4096, 16384, 65536, 131072}
    assert set(quick) <= set(full) | {bench.Case(16, 32769)} and len(quick) < len(full)
    assert (bench.HQ, bench.HKV, bench.D) == (64, 8, 128)
    variants = bench.sweep_variants()
    assert {"block_n": fd.BLOCK_N, "num_stages": fd.NUM_STAGES, "num_warps": fd.NUM_WARPS} in variants
    assert {"block_n": 128, "num_stages": 5, "num_warps": 4} not in variants     # 4 x 64 KB in flight
    assert bench.params(False) == {"barrier": True} and bench.params(True) == {}
