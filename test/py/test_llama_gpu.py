"""transformers' LlamaForCausalLM made tensor-parallel over 2 ranks with ditron.nn, on one GPU, in a two-process
world (torch symmetric memory, test/py/two_ranks.py), against the single-GPU model: prefill and decode steps with a
KV cache, eager and under torch.compile(fullgraph=True); the prefill captured into our own torch.cuda.graph and
replayed on new ids (a second two-process run); the sequence-parallel layers (ops.ag_gemm, ops.gemm_rs) alone.

The model is built from a small LlamaConfig with seeded random weights (nothing downloaded). ditron.nn.parallelize
reads its base_model_tp_plan: q/k/v/gate/up column-parallel (a local GEMM of this rank's heads / features), o and
down row-parallel (ops.gemm_ar); attention stays torch's, over this rank's heads.

The GPU machine has no MLIR: every op shape called here is built beforehand (``signatures()``), by
tools/build_gpu_test_artifacts.py into OUTDIR/nn, or by ``python test/py/test_llama_gpu.py build DIR``:

    python tools/build_gpu_test_artifacts.py OUTDIR                                     # CPU machine
    DITRON_TEST_ARTIFACTS=OUTDIR python -m pytest -q -m gpu test/py/test_llama_gpu.py   # GPU machine

Tolerance. Both models compute in bf16 from the same bf16 weights; they round differently (the TP model rounds each
rank's partial sum of o_proj and down_proj to bf16 before the all-reduce adds them, and adds in another order).
The measure of what bf16 rounding does to this network is the single-GPU model's own distance to the same model
computed in float32 (``ref32``). The TP model must be as close to ref32 as that, within a factor: its RMS error at
most RMS_FACTOR times the single-GPU model's, its largest error at most MAX_FACTOR times the single-GPU model's
largest, plus half an ulp of bf16 at the logits' scale. A missing or doubled rank's share, a wrong shard or a
stale cache changes the logits by their own size, orders of magnitude outside.
"""
from __future__ import annotations

import os

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")  # effective only if CUDA has not started yet

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from two_ranks import run_two_ranks  # noqa: E402

HERE = Path(__file__).resolve()
TARGET = "cuda:90"
W = 2
# the model: 4 heads of 64 (2 KV heads), so that each rank holds 2 heads (1 KV head)
CONFIG = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=64, max_position_embeddings=256, rms_norm_eps=1e-5,
              tie_word_embeddings=False)
BATCH, SEQ, STEPS = 2, 16, 3
# the sequence-parallel layer check: rows per rank, in/out features
SP_ROWS, SP_IN, SP_OUT = 16, 256, 512
RMS_FACTOR, MAX_FACTOR = 2.0, 4.0
CHECKS = ["llama_eager", "llama_compiled", "sequence_parallel_layers"]
GRAPH_CHECKS = ["llama_cuda_graph"]
REPLAYS = 3


def signatures():
    """Every ditron op the GPU run calls, as ops.Signatures (real world of 2 ranks, bf16, sm_90)."""
    from ditron import ops
    hidden, inter = CONFIG["hidden_size"], CONFIG["intermediate_size"]
    attn = CONFIG["num_attention_heads"] * CONFIG["head_dim"]
    out = []
    for m in (BATCH * SEQ, BATCH):  # prefill: M = batch * sequence; a decode step: M = batch
        for k in (attn // W, inter // W):  # o_proj, down_proj: this rank's input features
            out.append(ops.signature_for("gemm_ar", [(m, k), (k, hidden)], "bf16", W, False, TARGET))
    out.append(ops.signature_for("ag_gemm", [(SP_ROWS, SP_IN), (SP_IN, SP_OUT // W)], "bf16", W, False, TARGET))
    out.append(ops.signature_for("gemm_rs", [(W * SP_ROWS, SP_OUT // W), (SP_OUT // W, SP_IN)], "bf16", W, False,
                                 TARGET))
    return out


def build(directory: str) -> None:
    from ditron import ops
    ops.build(signatures(), directory, log=print)


@pytest.fixture(scope="module")
def library_dir(tmp_path_factory):
    from ditron import ops
    given = os.environ.get("DITRON_TEST_ARTIFACTS")
    if given:
        directory = Path(given) / "nn"
        missing = [s.key for s in signatures() if not (directory / s.key / "op.json").exists()]
        if missing:
            pytest.fail(f"{directory} lacks the artifacts {missing[:3]} ({len(missing)} in all); build them with "
                        f"python tools/build_gpu_test_artifacts.py {given}")
        return directory
    if not ops.compiler_available():
        pytest.skip("no MLIR bindings here to build the artifacts: set DITRON_TEST_ARTIFACTS to a directory built "
                    "by tools/build_gpu_test_artifacts.py")
    root = tmp_path_factory.mktemp("nn_arts")
    build(str(root))
    return root


pytestmark = pytest.mark.gpu


def test_llama_tensor_parallel_matches_single_gpu(library_dir):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"the artifacts are built for {TARGET}")
    pytest.importorskip("transformers")
    run_two_ranks([str(HERE), "worker", str(library_dir)], CHECKS, timeout_s=540)


def test_llama_prefill_captured_in_the_callers_cuda_graph(library_dir):
    """The tensor-parallel model's prefill captured into our own torch.cuda.graph (ditron's ops inside it, after an
    eager warm-up), replayed on new token ids: each replay's logits against the single-GPU model's on those ids."""
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"the artifacts are built for {TARGET}")
    pytest.importorskip("transformers")
    run_two_ranks([str(HERE), "worker", str(library_dir), "graph"], GRAPH_CHECKS, timeout_s=540)


# ------------------------------------------------------------------------------------------ the worker

def _steps(model, ids, tokens, compiled: bool = False):
    """Logits (as float32) of the prefill of ids, then of one decode step per column of tokens, through a KV cache
    (test_llama.steps), eager or through torch.compile(model, fullgraph=True): ditron's ops are torch operators, so
    the model compiles with no graph break."""
    import torch
    from test_llama import steps
    logits = steps(model, ids, tokens, call=torch.compile(model, fullgraph=True) if compiled else None)
    torch.cuda.synchronize()
    return [x.float() for x in logits]


def _rms(x) -> float:
    return float(x.double().pow(2).mean().sqrt())


def compare(rank: int, name: str, got, single, ref32) -> bool:
    """Whether every step's TP logits are as close to the float32 model's as the single-GPU bf16 model's are."""
    ok = True
    for step, (g, s, r) in enumerate(zip(got, single, ref32)):
        err, base = g - r, s - r
        scale = float(r.abs().max())
        rms_ok = _rms(err) <= RMS_FACTOR * _rms(base) + 2.0 ** -9 * _rms(r)
        max_ok = float(err.abs().max()) <= MAX_FACTOR * float(base.abs().max()) + 2.0 ** -9 * scale
        what = "prefill" if step == 0 else f"decode {step}"
        print(f"rank {rank}: {name} {what}: |tp - f32| rms {_rms(err):.3g} max {float(err.abs().max()):.3g}; "
              f"|single - f32| rms {_rms(base):.3g} max {float(base.abs().max()):.3g}; |logits| max {scale:.3g}",
              flush=True)
        if g.shape != r.shape or not (rms_ok and max_ok):
            print(f"rank {rank}: {name} {what} MISMATCH", flush=True)
            ok = False
    return ok


def setup(directory: str):
    """This rank's world and library, the model (bf16, seeded: the same on both ranks), its float32 copy, and its
    tensor-parallel copy."""
    import copy

    import torch
    import torch.distributed as dist
    from transformers import LlamaConfig, LlamaForCausalLM

    import ditron.nn as dnn
    from ditron import ops
    from ditron.runtime.world import World
    torch.cuda.set_device(0)
    dist.init_process_group("gloo")  # NCCL refuses two ranks on one GPU; symmetric memory needs only the store
    world = World.from_torch()
    library = ops.Library(directory, target=TARGET, compile=False)
    torch.manual_seed(0)  # the same weights and tokens on both ranks
    model = LlamaForCausalLM(LlamaConfig(**CONFIG, attn_implementation="sdpa")).to(torch.bfloat16).eval()
    model.requires_grad_(False)
    ref32 = copy.deepcopy(model).float().cuda()
    single = model.cuda()
    tp = dnn.parallelize(copy.deepcopy(single), world, library=library)
    attn = tp.model.layers[0].self_attn
    assert isinstance(attn.q_proj, dnn.ColumnParallelLinear) and isinstance(attn.o_proj, dnn.RowParallelLinear)
    assert attn.q_proj.weight.shape == (CONFIG["hidden_size"] // W, CONFIG["hidden_size"])
    return world, library, single, ref32, tp


def report_check(rank: int, name: str, ok: bool) -> int:
    if ok:
        print(f"rank {rank}: {name} ok", flush=True)
    return 0 if ok else 1


def worker(directory: str, mode: str = "steps") -> int:
    import torch
    import torch.distributed as dist

    from ditron import torch_ops
    world, library, single, ref32, tp = setup(directory)
    rank = world.rank
    failed = 0
    if mode == "graph":
        failed += report_check(rank, "llama_cuda_graph", captured_prefill(rank, single, ref32, tp))
    else:
        ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ)).cuda()
        tokens = torch.randint(0, CONFIG["vocab_size"], (BATCH, STEPS)).cuda()
        want32, want = _steps(ref32, ids, tokens), _steps(single, ids, tokens)
        failed += report_check(rank, "llama_eager", compare(rank, "llama_eager", _steps(tp, ids, tokens), want,
                                                            want32))
        failed += report_check(rank, "llama_compiled", compare(rank, "llama_compiled",
                                                               _steps(tp, ids, tokens, compiled=True), want, want32))
        failed += not sequence_parallel_layers(world, library)
    torch.cuda.synchronize()
    torch_ops.synchronize(world)
    torch_ops.close(world)
    library.close()
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failed else 0


def captured_prefill(rank: int, single, ref32, tp) -> bool:
    """Warm up (eagerly, on a side stream, as torch.cuda.graph's docs advise: it loads the ops and makes their
    capture plans), capture one prefill, then replay it on new ids copied into its input."""
    import torch
    static_ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ)).cuda()
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                tp(input_ids=static_ids, use_cache=False)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_logits = tp(input_ids=static_ids, use_cache=False).logits
        ok = True
        for _ in range(REPLAYS):
            ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ)).cuda()
            static_ids.copy_(ids)
            graph.replay()
            torch.cuda.synchronize()
            got = static_logits.float().clone()
            want, want32 = (m(input_ids=ids, use_cache=False).logits.float() for m in (single, ref32))
            ok &= compare(rank, "llama_cuda_graph", [got], [want], [want32])
    return ok


def sequence_parallel_layers(world, library) -> bool:
    """ColumnParallelLinear(input="sequence") (ops.ag_gemm) then RowParallelLinear(output="sequence")
    (ops.gemm_rs): this rank's rows of the unsharded layers' result, within the rounding of bf16 GEMMs."""
    import torch

    import ditron.nn as dnn
    from tolerances import assert_sum_close
    torch.manual_seed(1)
    up = torch.nn.Linear(SP_IN, SP_OUT, bias=True).to(torch.bfloat16).cuda()
    down = torch.nn.Linear(SP_OUT, SP_IN, bias=True).to(torch.bfloat16).cuda()
    x = torch.randn(W * SP_ROWS, SP_IN).to(torch.bfloat16).cuda()
    r = world.rank
    col = dnn.ColumnParallelLinear(up, world, input="sequence", library=library)
    row = dnn.RowParallelLinear(down, world, output="sequence", library=library)
    with torch.no_grad():
        h = col(x[r * SP_ROWS:(r + 1) * SP_ROWS])
        y = row(h)
    torch.cuda.synchronize()
    n = SP_OUT // W
    xs, w_up = x.double().cpu(), up.weight.detach().double().cpu()
    # h: all rows, this rank's columns: an SP_IN-term sum plus the bias, rounded to bf16
    h_exact = xs @ w_up[r * n:(r + 1) * n].T + up.bias.detach().double().cpu()[r * n:(r + 1) * n]
    h_terms = xs.abs() @ w_up[r * n:(r + 1) * n].abs().T + up.bias.detach().double().cpu()[r * n:(r + 1) * n].abs()
    # roundings to bf16 on the way, each at most u * (the sum of |terms|): h = round(round(x @ w) + bias) has 2;
    # y = round(round(sum over ranks of round(partial)) + bias) has 3; assert_sum_close allows one per |terms|,
    # so |terms| is counted once per rounding
    try:
        assert_sum_close(h.double().cpu().numpy(), h_exact.numpy(), 2 * h_terms.numpy(), SP_IN + 1, "bf16")
        # y: this rank's rows of (every rank's h) @ down.T + bias, from the h the ranks actually computed
        hs = [None] * W
        torch.distributed.all_gather_object(hs, h.cpu())
        h_all, w_down = torch.cat([t.double() for t in hs], 1), down.weight.detach().double().cpu()
        rows = slice(r * SP_ROWS, (r + 1) * SP_ROWS)
        y_exact = h_all[rows] @ w_down.T + down.bias.detach().double().cpu()
        y_terms = h_all[rows].abs() @ w_down.abs().T + down.bias.detach().double().cpu().abs()
        assert_sum_close(y.double().cpu().numpy(), y_exact.numpy(), 3 * y_terms.numpy(),
                         SP_OUT + W + 1, "bf16")
    except AssertionError as err:
        print(f"rank {r}: sequence_parallel_layers MISMATCH {err}", flush=True)
        return False
    print(f"rank {r}: sequence_parallel_layers ok", flush=True)
    return True


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "build":
        build(argv[1])
        return 0
    if len(argv) >= 2 and argv[0] == "worker":
        return worker(*argv[1:3])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    sys.exit(main(sys.argv[1:]))
