"""transformers' LlamaForCausalLM made tensor-parallel by ditron.nn.parallelize, on the CPU: the plan read from
the model's base_model_tp_plan, each rank's shards and heads, and the logits of prefill and decode steps with a KV
cache in a world of threads (test_nn.ThreadWorld: ditron's ops replaced by their definition), in float64, against
the unsharded model. The GPU run with ditron's kernels, in bf16 and under torch.compile, is test_llama_gpu.py."""
from __future__ import annotations

import copy
import inspect

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_nn import ThreadWorld  # noqa: E402

from ditron import nn as dnn  # noqa: E402
from ditron.nn import linear as nn_linear  # noqa: E402
from ditron.runtime.world import World  # noqa: E402

CONFIG = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, max_position_embeddings=64, tie_word_embeddings=False)
PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj")


def _model(**overrides):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{**CONFIG, **overrides}, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config).to(torch.float64).eval()
    model.requires_grad_(False)
    return model


def cache_names(model) -> tuple[str, str]:
    """(the forward's KV-cache argument, the output's cache attribute): 'cache' in transformers >= 5.2x,
    'past_key_values' before."""
    name = "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"
    return name, name


def steps(model, ids, tokens, call=None):
    """Logits of the prefill of ids, then of one decode step per column of tokens, through a KV cache."""
    arg, attr = cache_names(model)
    call = model if call is None else call
    with torch.no_grad():
        out = call(input_ids=ids, use_cache=True)
        logits, cache = [out.logits], getattr(out, attr)
        for i in range(tokens.shape[1]):
            out = call(input_ids=tokens[:, i:i + 1], use_cache=True, **{arg: cache})
            logits.append(out.logits)
            cache = getattr(out, attr)
    return logits


def test_plan_comes_from_base_model_tp_plan():
    model = _model()
    plan = dnn.resolve_plan(model)
    assert sorted(plan) == sorted(f"model.layers.{i}.{p}" for i in range(2) for p in PROJECTIONS)
    assert {type(s).__name__ for n, s in plan.items() if n.endswith(("o_proj", "down_proj"))} == {"Rowwise"}
    assert "lm_head" not in plan, "the base model's plan: lm_head and the embeddings stay replicated"


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_holds_its_heads(rank):
    model = _model()
    full = copy.deepcopy(model)
    dnn.parallelize(model, World(2, rank, torch.device("cpu")))
    attn, mlp = model.model.layers[1].self_attn, model.model.layers[1].mlp
    ref_attn, ref_mlp = full.model.layers[1].self_attn, full.model.layers[1].mlp
    hd = CONFIG["head_dim"]
    assert attn.q_proj.weight.shape == (2 * hd, 32) and attn.k_proj.weight.shape == (1 * hd, 32)
    assert torch.equal(attn.q_proj.weight, ref_attn.q_proj.weight[rank * 2 * hd:(rank + 1) * 2 * hd])
    assert torch.equal(attn.v_proj.weight, ref_attn.v_proj.weight[rank * hd:(rank + 1) * hd])
    assert torch.equal(attn.o_proj.weight, ref_attn.o_proj.weight[:, rank * 2 * hd:(rank + 1) * 2 * hd])
    assert torch.equal(mlp.down_proj.weight, ref_mlp.down_proj.weight[:, rank * 32:(rank + 1) * 32])
    assert isinstance(model.lm_head, torch.nn.Linear) and torch.equal(model.lm_head.weight, full.lm_head.weight)


def test_kv_heads_must_divide_over_the_ranks():
    model = _model(num_key_value_heads=1)
    with pytest.raises(dnn.ParallelError, match=r"k_proj: its 8 output features \(1 heads of 8\) do not divide"):
        dnn.parallelize(model, World(2, 0, torch.device("cpu")))


@pytest.mark.parametrize("W", [1, 2])
def test_prefill_and_decode_logits_match_the_unsharded_model(monkeypatch, W):
    model = _model()
    torch.manual_seed(1)
    ids, tokens = torch.randint(0, 64, (2, 5)), torch.randint(0, 64, (2, 3))
    want = steps(model, ids, tokens)
    tw = ThreadWorld(W)
    monkeypatch.setattr(nn_linear, "call_op", tw.call_op)

    def rank(r, world):
        return steps(dnn.parallelize(copy.deepcopy(model), world), ids, tokens)
    for got in tw.run(rank):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)
    # per rank: 2 row-parallel projections per layer per step, M = batch * 5 at prefill, batch at decode
    ms = [c[2][0] for c in tw.calls if c[0] == 0]
    assert ms == [10] * 4 + [2] * 12 and {c[1] for c in tw.calls} == {"gemm_ar"}


def test_under_torch_compile(monkeypatch):
    """torch.compile traces the parallel model (the op is a graph break until it is a torch operator)."""
    model = _model()
    torch.manual_seed(2)
    ids, tokens = torch.randint(0, 64, (1, 4)), torch.randint(0, 64, (1, 2))
    want = steps(model, ids, tokens)
    tw = ThreadWorld(1)
    monkeypatch.setattr(nn_linear, "call_op", torch.compiler.disable(tw.call_op))
    tp = dnn.parallelize(copy.deepcopy(model), tw.worlds[0])
    torch._dynamo.reset()
    got = steps(tp, ids, tokens, call=torch.compile(tp, backend="aot_eager"))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)
    assert len(tw.calls) == 2 * 2 * 3


def test_the_parallel_model_compiles_as_one_graph():
    """torch.compile(fullgraph=True) of the tensor-parallel Llama (ditron's torch operators, no graph break):
    the prefill graph holds one ditron.gemm_ar per row-parallel projection; running it on CPU tensors reaches the
    operator, which refuses them (the GPU run is test_llama_gpu.py)."""
    from ditron import ops
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    model = _model().to(torch.float32)
    tp = dnn.parallelize(model, World(2, 0, torch.device("cpu")))
    torch._dynamo.reset()
    with pytest.raises(ops.OpError, match="ditron's ops run on CUDA tensors"):
        steps(tp, torch.randint(0, 64, (1, 4)), torch.randint(0, 64, (1, 1)),
              call=torch.compile(tp, fullgraph=True, backend=backend))
    (gm,) = graphs
    ar = [n for n in gm.graph.nodes if n.op == "call_function" and "ditron.gemm_ar" in str(n.target)]
    assert len(ar) == 2 * CONFIG["num_hidden_layers"]


def test_the_gpu_test_prebuilds_every_op_its_model_calls():
    """ditron.nn.signatures of the GPU test's model (built on the meta device) at its prefill and decode rows are
    the gemm_ar signatures test_llama_gpu.py lists for tools/build_gpu_test_artifacts.py."""
    import test_llama_gpu as gpu
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**gpu.CONFIG)).to(torch.bfloat16)
    sigs = dnn.signatures(model, gpu.W, [gpu.BATCH * gpu.SEQ, gpu.BATCH], target=gpu.TARGET)
    assert len(sigs) == 4 and {s.op for s in sigs} == {"gemm_ar"} and not any(s.virtual for s in sigs)
    assert set(sigs) == {s for s in gpu.signatures() if s.op == "gemm_ar"}


def test_fullgraph_compile_through_prefill_and_decode(monkeypatch):
    """torch.compile(fullgraph=True) of the parallel model over prefill and decode steps: the decode steps'
    recompile makes the rows symbolic, which ditron's fake implementations take. The operators' GPU implementation
    is replaced by the op's definition at W = 1 (a @ b), so that the compiled graphs run here."""
    from ditron import torch_ops
    rows = []

    def run(op, tensors, handle, params):
        assert op == "gemm_ar" and torch_ops.world_of(handle).world_size == 1
        rows.append(tensors[0].shape[0])
        return tensors[0] @ tensors[1]
    monkeypatch.setattr(torch_ops, "_run", run)
    model = _model().to(torch.float32)
    torch.manual_seed(3)
    ids, tokens = torch.randint(0, 64, (2, 5)), torch.randint(0, 64, (2, 3))
    want = steps(model, ids, tokens)
    tp = dnn.parallelize(copy.deepcopy(model), World.virtual(1, "cpu"))
    torch._dynamo.reset()
    got = steps(tp, ids, tokens, call=torch.compile(tp, fullgraph=True, backend="aot_eager"))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert rows == [10] * 4 + [2] * 12, "every row-parallel projection of every step ran the operator"
