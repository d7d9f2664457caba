"""Mixture of experts through ditron (issue 29 item 5), on the CPU: the eager grouped GEMM op
(``ditron.ops.grouped_gemm``: its signature, task program, reference, the simulator of its compiled program at
W = 1, 2, 3, 4, 8 with uneven, skewed and empty groups, and the eager call through the real executor on a CPU
stand-in for the GPU), and ``ditron.nn.ExpertParallelMoE`` built from transformers' MixtralSparseMoeBlock (random
weights): its routing and regrouping against plain loops, and the whole block in virtual worlds of W = 1, 2, 3, 4, 8
ranks against the single-process block, the ditron ops replaced by their references (``call_dispatch``,
``call_exchange``, ``call_grouped_gemm``); skewed routing (every token to one expert, ranks with no expert hit), a
small capacity that overflows, and the errors. test_moe_gpu.py runs the real ops on a GPU."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ditron import ops
from ditron.errors import DitronError
from ditron.nn import ExpertParallelMoE, ParallelError, moe
from ditron.op_reference import all_to_all_sized, grouped_gemm as grouped_gemm_reference
from ditron.ops_sized import CapacityOverflowError
from ditron.runtime.world import World
from ditron.sim import simulate

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DITRON_OPS_DIR", raising=False)


def gsig(t, k, n, e, w=1, virtual=True, dtype="bf16", groups=None, gated=None):
    return ops.Signature("grouped_gemm", ((t, k), (e, k, n), (groups or e,)), dtype, w, virtual, "cuda:90",
                         (("gated", gated),))


# --------------------------------------------------------------------------------------- the grouped GEMM op

@pytest.mark.parametrize("shapes,message", [
    (((8, 16), (2, 8, 4), (2,)), "the same K"), (((8, 16), (2, 16, 4), (3,)), "G a multiple of E"),
    (((8, 16, 1), (2, 16, 4), (2,)), "x \\[T, K\\]"), (((8, 16), (2, 16, 4)), "takes 3 tensor"),
])
def test_signature_checks_the_shapes(shapes, message):
    with pytest.raises(ops.OpError, match=message):
        ops.Signature("grouped_gemm", shapes, "bf16", 1, True)


def test_signature_output_and_task_program():
    s = gsig(37, 16, 24, 5, w=3)
    assert s.output_shape() == (37, 24) and s.key.startswith("grouped_gemm-bf16-w3v-37x16_5x16x24_5-")
    from ditron.dialects import ditron_context
    with ditron_context() as ctx:
        text = str(ops.task_program(s).build(ctx))
    assert '"ditron_task.grouped_matmul"' in text and 'ditron.view = "local"' in text
    assert "tensor<5xi32>" in text and "all_to_all" not in text   # no communication


def _groups(kind: str, t: int, e: int, rng, rank: int) -> np.ndarray:
    """Group sizes: 'uneven' (random, summing to t or less), 'skewed' (every row to one group), 'empty' (half the
    groups empty), 'over' (sizes summing past t: cut at t), 'negative' (a negative size counts 0)."""
    if kind == "skewed":
        s = np.zeros(e, np.int32)
        s[rank % e] = t
    elif kind == "empty":
        s = np.zeros(e, np.int32)
        s[::2] = rng.multinomial(t - 3, np.ones(len(s[::2])) / len(s[::2]))
    elif kind == "over":
        s = np.full(e, t // 2 + 1, np.int32)
    elif kind == "negative":
        s = rng.integers(0, t // e + 1, e).astype(np.int32)
        s[0] = -4
    else:
        s = rng.multinomial(t - rank, np.ones(e) / e).astype(np.int32)
    return s


@pytest.mark.parametrize("w", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("kind", ["uneven", "skewed", "empty", "over", "negative"])
def test_grouped_gemm_program_simulates_to_the_reference(w, kind):
    """The op's compiled program (ditron-device) in the simulator, each rank its own rows, groups and weights, at
    an uneven row count (T = 37 over E = 5 groups), against ops.reference."""
    _simulate(gsig(37, 16, 24, 5, w=w), w, kind, seed=w)


def _simulate(s, w, kind, seed):
    """The compiled program of signature s (T = 37, K = 16, w [5, 16, 24]) in the simulator at w ranks, each rank
    its own rows, groups (``kind``) and weights, two calls, against ops.reference."""
    text, choices = ops.lower(s)
    assert [c["op"] for c in choices] == ["ditron_task.grouped_matmul"]
    rng = np.random.default_rng(seed)
    groups = s.shapes[2][0]

    def inputs(call):
        return [[rng.standard_normal((37, 16)).astype(np.float32), rng.standard_normal((5, 16, 24)).astype(
            np.float32) / 4, _groups(kind, 37, groups, rng, r + call)] for r in range(w)]
    result = simulate(text, world_size=w, inputs=inputs, seed=seed, calls=2, num_sms=s.cta_budget(),
                      reference=lambda xs: [[y] for y in ops.reference(s, xs)])
    assert result.ok, result.summary()


@pytest.mark.parametrize("w", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("kind", ["uneven", "skewed", "empty"])
def test_gated_cycled_grouped_gemm_simulates_to_the_reference(w, kind):
    """The MoE's first GEMM: 10 groups cycling over 5 experts' weights (source-major received rows, group g times
    w[g % 5]), silu(x @ gate) * (x @ up) fused (w [5, 16, 2 * 12] -> [37, 12]), in the simulator at W ranks."""
    s = gsig(37, 16, 24, 5, w=w, groups=10, gated="silu")
    assert s.output_shape() == (37, 12) and 'gated = "silu"' in ops.lower(s)[0]
    _simulate(s, w, kind, seed=10 + w)


def test_gated_and_cycled_signatures_check_their_shapes():
    with pytest.raises(ops.OpError, match="G a multiple of E"):
        gsig(8, 16, 24, 5, groups=7)
    with pytest.raises(ops.OpError, match="gated='gelu' needs one of silu"):
        gsig(8, 16, 24, 5, gated="gelu")
    with pytest.raises(ops.OpError, match=r"w \[E, K, 2N\]"):
        gsig(8, 16, 25, 5, gated="silu")
    x = np.arange(4, dtype=np.float64)[:, None] + np.zeros((4, 2))
    w = np.stack([np.concatenate([np.eye(2), np.eye(2)], 1), np.concatenate([np.eye(2), 2 * np.eye(2)], 1)])
    got = ops.reference(gsig(4, 2, 4, 2, groups=4, gated="silu"), [[x, w, np.array([1, 1, 1, 0])]])[0]
    silu = lambda v: v / (1 + np.exp(-v))  # noqa: E731
    # rows 0, 1, 2 in groups 0, 1, 2 (weights 0, 1, 0); row 3 past the groups
    np.testing.assert_allclose(got[:, 0], [silu(0) * 0, silu(1) * 2, silu(2) * 2, 0])


def test_reference_by_hand_and_numpy_torch_agree():
    x = np.arange(6, dtype=np.float64)[:, None] + np.zeros((6, 2))
    w = np.stack([np.eye(2), 2 * np.eye(2), 3 * np.eye(2)])
    got = ops.reference(gsig(6, 2, 2, 3), [[x, w, np.array([2, 0, 3])]])[0]
    np.testing.assert_array_equal(got[:, 0], [0, 1, 6, 9, 12, 0])   # group 1 empty, row 5 past the groups: 0
    np.testing.assert_array_equal(ops.reference(gsig(6, 2, 2, 3), [[x, w, np.array([-1, 4, 9])]])[0][:, 0],
                                  [0, 2, 4, 6, 12, 15])              # -1 counts 0, the sum cut at 6 rows
    t = ops.reference(gsig(6, 2, 2, 3), [[torch.tensor(x), torch.tensor(w), torch.tensor([2, 0, 3])]])[0]
    np.testing.assert_allclose(t.numpy(), got)


def test_eager_op_refuses_bad_arguments():
    world = World.virtual(2, device="cpu")
    x, w = [torch.zeros(8, 16, dtype=torch.bfloat16)] * 2, [torch.zeros(2, 16, 4, dtype=torch.bfloat16)] * 2
    with pytest.raises(ops.OpError, match="must hold integers"):
        ops.grouped_gemm(x, w, [torch.zeros(2)] * 2, world)
    with pytest.raises(ops.OpError, match="group_sizes is a device tensor"):
        ops.grouped_gemm(x, w, [[2, 3]] * 2, world)
    with pytest.raises(ops.OpError, match="different element types"):
        ops.grouped_gemm(x, [t.half() for t in w], [torch.ones(2, dtype=torch.int32)] * 2, world)
    with pytest.raises(ops.OpError, match="list of one tensor per rank"):
        ops.grouped_gemm(x[0], w, [torch.ones(2, dtype=torch.int32)] * 2, world)
    with pytest.raises(ops.OpError, match="the same K"):
        ops.grouped_gemm(x, [torch.zeros(2, 8, 4, dtype=torch.bfloat16)] * 2, [torch.ones(2, dtype=torch.int32)] * 2,
                         world)
    with pytest.raises(ops.OpError, match="holds sizes and must be an int32"):
        ops._per_rank("grouped_gemm", (x, w, [torch.ones(2, dtype=torch.int64)] * 2), world)


def test_torch_operator_checks_sizes_and_refuses_buckets():
    from ditron import torch_ops
    x, w = torch.zeros(8, 16, dtype=torch.bfloat16), torch.zeros(2, 16, 4, dtype=torch.bfloat16)
    assert torch_ops._check_all("grouped_gemm", (x, w, torch.ones(2, dtype=torch.int32)), 1, {}) == {}
    with pytest.raises(ops.OpError, match="int32"):
        torch_ops._check_all("grouped_gemm", (x, w, torch.ones(2, dtype=torch.int64)), 1, {})
    with pytest.raises(ops.OpError, match="max_rows"):
        torch_ops._max_rows("grouped_gemm", 64)
    assert torch_ops._output("grouped_gemm", (x, w, torch.ones(2, dtype=torch.int32)), 1, {}).shape == (8, 4)
    handle = torch_ops.register_world(World.virtual(1, device="cpu"))
    y = torch.ops.ditron.grouped_gemm(x.to("meta"), w.to("meta"), torch.ones(2, dtype=torch.int32, device="meta"),
                                      handle)
    assert y.shape == (8, 4) and y.dtype == torch.bfloat16
    with pytest.raises(ops.OpError, match="int32"):
        torch.ops.ditron.grouped_gemm(x.to("meta"), w.to("meta"), torch.ones(2, device="meta"), handle)


@pytest.mark.parametrize("w", [1, 3])
def test_eager_op_runs_through_the_executor(monkeypatch, tmp_path, w):
    """ops.grouped_gemm compiled by ditron-device and run by the real executor on test_executor's stand-in GPU
    (the template's tiles() with the sizes it reads): int64 sizes (torch.bincount's) become int32, skewed and
    empty groups, three calls on one executor."""
    from test_ops import _FakeExecutable
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    s = gsig(37, 16, 24, 5, w=w)
    lib = ops.Library(tmp_path / "lib", target="cuda:90")
    fake = _FakeExecutable(monkeypatch, s, ops.build_one(s, tmp_path / "lib"))
    monkeypatch.setattr(lib, "_load", lambda got: fake if got == s else pytest.fail(got.key))
    world = World.virtual(w, device="cpu")
    rng = np.random.default_rng(0)
    for call, kind in enumerate(("uneven", "skewed", "empty")):
        g = torch.Generator().manual_seed(call)
        xs = [torch.randn(37, 16, generator=g).to(torch.bfloat16) for _ in range(w)]
        ws = [(torch.randn(5, 16, 24, generator=g) / 4).to(torch.bfloat16) for _ in range(w)]
        sizes = [torch.tensor(_groups(kind, 37, 5, rng, r), dtype=torch.int64) for r in range(w)]
        got = ops.grouped_gemm(xs, ws, sizes, world, library=lib)
        for r in range(w):
            want = ops.reference(s, [[xs[r], ws[r], sizes[r]]])[0]
            assert got[r].shape == (37, 24)
            torch.testing.assert_close(got[r].float(), want, rtol=2 ** -6, atol=2 ** -6 * float(want.abs().max()))
    assert fake.executor(world).epoch == 3
    lib.close()


# ------------------------------------------------------------------------------------- ExpertParallelMoE

H, I_, E, TOKENS = 32, 48, 24, 13   # E divides over 1, 2, 3, 4, 8 ranks; 13 tokens a rank (uneven)


def mixtral_block(top_k: int = 2, experts: int = E, seed: int = 0, dtype=torch.float32):
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    config = MixtralConfig(hidden_size=H, intermediate_size=I_, num_local_experts=experts,
                           num_experts_per_tok=top_k, router_jitter_noise=0.0)
    torch.manual_seed(seed)
    block = MixtralSparseMoeBlock(config)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, p.shape[-1] ** -0.5)
    return block.to(dtype).eval()


def skew(block, experts=(0,)):
    """Route every token to ``experts`` (top-k of them, in that order): the router sees feature 0, set to 1 in
    every token by ``tokens(..., skewed=True)``, with weights that put these experts first."""
    with torch.no_grad():
        block.gate.weight.zero_()
        for i, e in enumerate(experts):
            block.gate.weight[e, 0] = 20.0 - 5 * i
    return block


def tokens(w: int, t: int = TOKENS, seed: int = 1, skewed: bool = False, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(t, H, generator=g).to(dtype) for _ in range(w)]
    if skewed:
        for x in xs:
            x[:, 0] = 1.0
    return xs


class Fakes:
    """The ditron ops of the module replaced by their references (virtual worlds, CPU), counting calls."""

    def __init__(self, monkeypatch):
        self.calls = {"dispatch": [], "exchange": 0, "grouped_gemm": []}
        monkeypatch.setattr(moe, "call_dispatch", self.dispatch)
        monkeypatch.setattr(moe, "call_exchange", self.exchange)
        monkeypatch.setattr(moe, "call_grouped_gemm", self.grouped_gemm)

    def dispatch(self, xs, splits, world, capacity, library, check):
        assert world.is_virtual and len(xs) == world.world_size
        self.calls["dispatch"].append((tuple(xs[0].shape), capacity, check))
        outs, recvs = all_to_all_sized(xs, splits, capacity)
        over = [int(r.sum()) - capacity for r in recvs]
        if check and max(over) > 0:
            raise CapacityOverflowError(f"capacity {capacity} overflowed")
        return ([torch.tensor(o).to(xs[0].dtype) for o in outs],
                [torch.tensor(r, dtype=torch.int32) for r in recvs])

    def exchange(self, xs, world, library):
        self.calls["exchange"] += 1
        w = world.world_size
        assert all(x.shape[0] == w and x.dtype == torch.float32 and x.shape[1] % moe.COUNT_COLS == 0 for x in xs)
        return [torch.cat([xs[s][r:r + 1] for s in range(w)]) for r in range(w)]

    def grouped_gemm(self, xs, ws, sizes, world, library, gated=None):
        self.calls["grouped_gemm"].append(tuple(xs[0].shape))
        self.calls.setdefault("gated", []).append(gated)
        assert all(s.dtype == torch.int32 and w.is_contiguous() and s.shape[0] == world.world_size * w.shape[0]
                   for s, w in zip(sizes, ws))
        return [grouped_gemm_reference(x, w, s, gated).to(x.dtype) for x, w, s in zip(xs, ws, sizes)]


def test_route_sorts_pairs_by_expert_stably():
    index = torch.tensor([[3, 0], [0, 2], [3, 1], [2, 0]])
    order, token, counts = moe.route(index, 5)
    pairs = [(int(index.reshape(-1)[o]), int(t)) for o, t in zip(order, token)]
    assert pairs == [(0, 0), (0, 1), (0, 3), (1, 2), (2, 1), (2, 3), (3, 0), (3, 2)]
    assert counts.tolist() == [3, 1, 2, 2, 0]


@pytest.mark.parametrize("w", [2, 3])
def test_an_activation_the_gemm_does_not_fuse_runs_in_torch(monkeypatch, w):
    """A block whose act_fn is not SiLU: the first GEMM unfused ([rows, 2I]), act(gate) * up in torch."""
    fakes = Fakes(monkeypatch)
    block = mixtral_block()
    block.experts.act_fn = torch.nn.GELU()
    layer = ExpertParallelMoE(block, World.virtual(w, device="cpu"))
    assert layer.gated is None and moe.fused_act(torch.nn.SiLU()) == "silu"
    xs = tokens(w, seed=3)
    for x, y in zip(xs, layer(xs)):
        with torch.no_grad():
            torch.testing.assert_close(y, block(x[None])[0], rtol=1e-5, atol=1e-5)
    assert fakes.calls["gated"] == [None, None]


@pytest.mark.parametrize("w", [1, 2, 3, 4, 8])
def test_moe_equals_the_block_in_virtual_worlds(monkeypatch, w):
    fakes = Fakes(monkeypatch)
    block = mixtral_block()
    layer = ExpertParallelMoE(block, World.virtual(w, device="cpu"))
    xs = tokens(w)
    got = layer([x.view(1, TOKENS, H) for x in xs])
    with torch.no_grad():
        for x, y in zip(xs, got):
            assert y.shape == (1, TOKENS, H)
            torch.testing.assert_close(y, block(x.view(1, TOKENS, H)), rtol=1e-5, atol=1e-5)
    pairs = TOKENS * 2
    assert fakes.calls["dispatch"] == [((pairs, H), w * pairs, False), ((w * pairs, H), pairs, False)]
    assert fakes.calls["grouped_gemm"] == [(w * pairs, H), (w * pairs, I_)] and fakes.calls["exchange"] == 1
    assert fakes.calls["gated"] == ["silu", None]  # Mixtral's SiLU fused into the gate+up GEMM
    assert layer.gate_up.shape == (E, H, 2 * I_) and layer.down.shape == (E, I_, H)


@pytest.mark.parametrize("w,top_k,experts", [(2, 1, (0,)), (3, 2, (1, 0)), (8, 2, (23, 5))])
def test_skewed_routing_with_empty_experts_and_ranks(monkeypatch, w, top_k, experts):
    """Every token to one expert (top-1), or to two experts of one rank (ranks whose experts get no token)."""
    Fakes(monkeypatch)
    block = skew(mixtral_block(top_k=top_k), experts)
    layer = ExpertParallelMoE(block, World.virtual(w, device="cpu"))
    xs = tokens(w, skewed=True)
    with torch.no_grad():
        _, _, index = block.gate(xs[0])
    assert set(index.reshape(-1).tolist()) == set(experts[:top_k])
    for x, y in zip(xs, layer(xs)):
        with torch.no_grad():
            torch.testing.assert_close(y, block(x[None])[0], rtol=1e-5, atol=1e-5)


def test_a_small_capacity_that_overflows_raises(monkeypatch):
    fakes = Fakes(monkeypatch)
    block = skew(mixtral_block(), (0, 1))            # every pair to rank 0: it receives W*T*k rows
    layer = ExpertParallelMoE(block, World.virtual(2, device="cpu"), capacity=2 * TOKENS)
    with pytest.raises(CapacityOverflowError):
        layer(tokens(2, skewed=True))
    # an even routing fits a capacity of the rows a rank sends
    fine = ExpertParallelMoE(skew(mixtral_block(), (0, 12)), World.virtual(2, device="cpu"), capacity=2 * TOKENS)
    xs = tokens(2, skewed=True)
    for x, y in zip(xs, fine(xs)):
        with torch.no_grad():
            torch.testing.assert_close(y, fine_block_out(fine, x), rtol=1e-5, atol=1e-5)
    assert fakes.calls["dispatch"][-2][1:] == (2 * TOKENS, True)


def fine_block_out(layer, x):
    """The block's output computed by plain torch from the layer's own (full) weights: the HF loop."""
    _, weights, index = layer.gate(x)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(index.shape[1]):
            e = int(index[t, j])
            g, u = (x[t] @ layer.gate_up[e]).chunk(2)
            out[t] += (layer.act(g) * u) @ layer.down[e] * weights[t, j]
    return out


def test_errors_name_the_fix():
    block = mixtral_block(experts=6)
    with pytest.raises(ParallelError, match="6 experts, which do not split over 4 ranks"):
        ExpertParallelMoE(block, World.virtual(4, device="cpu"))
    with pytest.raises(ParallelError, match="must be a ditron.World"):
        ExpertParallelMoE(block, object())
    with pytest.raises(ParallelError, match="capacity"):
        ExpertParallelMoE(block, World.virtual(2, device="cpu"), capacity=0)
    with pytest.raises(ParallelError, match="not a sparse MoE block"):
        ExpertParallelMoE(torch.nn.Linear(4, 4), World.virtual(2, device="cpu"))
    layer = ExpertParallelMoE(block, World.virtual(2, device="cpu"))
    with pytest.raises(ParallelError, match="list of one tensor per rank"):
        layer(torch.zeros(3, H))
    with pytest.raises(ParallelError, match="same"):
        layer([torch.zeros(3, H), torch.zeros(4, H)])
    block.experts.down_proj = torch.nn.Parameter(torch.zeros(6, H, I_ + 1))
    with pytest.raises(ParallelError, match="do not fit"):
        ExpertParallelMoE(block, World.virtual(2, device="cpu"))


def test_a_real_world_rank_holds_its_experts_only():
    class RealWorld:  # the attributes ExpertParallelMoE reads of a World.from_torch() world
        world_size, is_virtual, rank = 4, False, 2
    block = mixtral_block(experts=8)
    layer = ExpertParallelMoE(block, RealWorld())
    gate_up = block.experts.gate_up_proj.detach().transpose(1, 2)
    assert layer.gate_up.shape == (2, H, 2 * I_) and torch.equal(layer.gate_up, gate_up[4:6])
    assert layer.down.is_contiguous() and torch.equal(layer.down, block.experts.down_proj.detach()[4:6].transpose(1, 2))


def test_programs_lists_what_a_call_runs():
    sigs, sized = moe.programs(2, True, 64, H, I_, 8, 2)
    assert [s.op for s in sigs] == ["all_to_all", "grouped_gemm", "grouped_gemm"]
    assert sigs[0].shapes == ((2, 4),) and sigs[0].dtype == "f32"
    assert sigs[1].shapes == ((256, H), (4, H, 2 * I_), (8,)) and sigs[2].shapes == ((256, I_), (4, I_, H), (8,))
    assert sigs[1].param["gated"] == "silu" and sigs[2].param["gated"] is None
    assert moe.programs(2, True, 64, H, I_, 8, 2, gated=None)[0][1].param["gated"] is None
    assert sized == [(2, (128, H), "bf16", 256), (2, (256, H), "bf16", 128)]
    with pytest.raises(ParallelError):
        moe.programs(3, True, 64, H, I_, 8, 2)
    assert issubclass(ParallelError, DitronError)


@pytest.mark.parametrize("w,norm", [(3, False), (4, True)])
def test_qwen3_moe_block_too(monkeypatch, w, norm):
    """transformers' Qwen3MoeSparseMoeBlock (top-4, its router's norm_topk_prob off and on: the router is the
    block's own, run as it is)."""
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock
    Fakes(monkeypatch)
    torch.manual_seed(2)
    block = Qwen3MoeSparseMoeBlock(Qwen3MoeConfig(hidden_size=H, moe_intermediate_size=I_, num_experts=E,
                                                  num_experts_per_tok=4, norm_topk_prob=norm))
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, p.shape[-1] ** -0.5)
    layer = ExpertParallelMoE(block.eval(), World.virtual(w, device="cpu"))
    assert layer.top_k == 4 and layer.local_experts == E // w
    xs = tokens(w, seed=w)
    for x, y in zip(xs, layer([x[None] for x in xs])):
        with torch.no_grad():
            torch.testing.assert_close(y, block(x[None]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("w", [2, 3, 4])
def test_moe_real_worlds_of_threads(monkeypatch, w):
    """Real worlds (each rank its own module with its experts only, one tensor a rank) as W threads
    (test_nn.ThreadWorld): the ops' references with the ranks' tensors exchanged through a barrier."""
    from test_nn import ThreadWorld
    tw = ThreadWorld(w)

    def dispatch(x, splits, world, capacity, library, check):
        everyone = tw._exchange(world.rank, (x, splits))
        outs, recvs = all_to_all_sized([a for a, _ in everyone], [s for _, s in everyone], capacity)
        assert not check
        return torch.tensor(outs[world.rank]).to(x.dtype), torch.tensor(recvs[world.rank], dtype=torch.int32)

    def exchange(x, world, library):
        everyone = tw._exchange(world.rank, x)
        return torch.cat([part[world.rank:world.rank + 1] for part in everyone])

    monkeypatch.setattr(moe, "call_dispatch", dispatch)
    monkeypatch.setattr(moe, "call_exchange", exchange)
    monkeypatch.setattr(moe, "call_grouped_gemm",
                        lambda x, wt, s, world, library, gated=None: grouped_gemm_reference(x, wt, s, gated))
    block = mixtral_block()
    xs = tokens(w, seed=5)

    def rank(r, world):
        layer = ExpertParallelMoE(block, world)
        assert layer.gate_up.shape[0] == E // w
        with torch.no_grad():
            return layer(xs[r][None])
    for x, y in zip(xs, tw.run(rank)):
        with torch.no_grad():
            torch.testing.assert_close(y, block(x[None]), rtol=1e-5, atol=1e-5)
