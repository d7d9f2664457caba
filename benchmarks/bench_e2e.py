#!/usr/bin/env python3
"""End-to-end tensor parallelism at TP = 2: a LLaMA-3-70B-shaped stack of a few decoder layers (transformers'
LlamaForCausalLM, random weights, nothing downloaded) made tensor-parallel by ditron.nn.parallelize, against the
same model with torch + NCCL tensor parallelism, prefill and decode, in one run.

Two steps, because the GPU box has torch + triton (and transformers) but not the MLIR bindings:

    python benchmarks/bench_e2e.py --build DIR [--quick] [--layers N]          CPU box with ditron + MLIR
    torchrun --nproc-per-node 2 benchmarks/bench_e2e.py --run DIR [--quick] [--compile] [--out OUT]

The two models (both from base_model_tp_plan: q/k/v/gate/up column-parallel, o/down row-parallel; attention over
each rank's heads is torch's, the same in both):
* ditron: ditron.nn — the column-parallel projections a local GEMM, the row-parallel ones ``ops.gemm_ar`` (the
  GEMM and the all-reduce fused and overlapped, through the torch operator torch.ops.ditron.gemm_ar);
* torch + NCCL: the same layers, whose row-parallel projections are torch.matmul then NCCL's all-reduce
  (torch.distributed's functional all_reduce: NCCL's ring = reduce-scatter + all-gather), not overlapped. The
  column-parallel layers are the same module in both (ditron.nn.ColumnParallelLinear: torch.matmul), so the rows
  compare the row-parallel step and nothing else.

Phases: prefill of S tokens (batch 1; M = S, S in 1K..16K) and decode steps at batch B (M = B, B in 1..512) over a
KV cache prefilled with CONTEXT tokens (by the torch model, copied for both; growing by one per timed step, the same
steps for both models). ``--quick``:
S in {1K, 4K}, B in {1, 128, 512}. ``--compile``: both models under torch.compile(fullgraph=True) (ditron's op is
a torch operator: no graph break). A row: the median over repetitions of CUDA-event times (bench_dist.timed: the
same fixed count of calls on every rank, each repetition the max over ranks), ms per forward; the host time per
forward beside it; rel_err: ditron's logits against torch+NCCL's (bf16, the same weights), at the first call;
<model>_kept_mib: the device memory the model's first call at the row's shape left held, after empty_cache (ditron:
the symmetric heaps, signal pads and capture plans of the ops it loaded; torch: NCCL's buffers at its first call),
the max over ranks; the log's first line gives the weights each rank holds beside it.

Output: a table on stdout, benchmarks/results/e2e_tp2[_compiled].csv and .png (matplotlib, if importable).
Not here yet: PyTorch's async-TP (symmetric-memory fused ops) as a third model, the sequence-parallel variant
(ops.ag_gemm / ops.gemm_rs around the norms) and CUDA-graph capture of the decode step.
"""
from __future__ import annotations

import argparse
import copy
import csv
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
RESULTS = HERE / "results"
TARGET = "cuda:90"
W = 2
# LLaMA-3-70B's decoder layer; a small vocabulary (the embeddings and lm_head are not tensor-parallel here)
CONFIG = dict(vocab_size=1024, hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
              num_key_value_heads=8, head_dim=128, max_position_embeddings=32768, rms_norm_eps=1e-5,
              rope_theta=500000.0, tie_word_embeddings=False)
PREFILL = (1024, 2048, 4096, 8192, 16384)
DECODE = (1, 8, 32, 128, 256, 512)
QUICK_PREFILL, QUICK_DECODE = (1024, 4096), (1, 128, 512)
CONTEXT = 512


def config(layers: int):
    from transformers import LlamaConfig
    return LlamaConfig(**CONFIG, num_hidden_layers=layers, attn_implementation="sdpa")


def sizes(quick: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return (QUICK_PREFILL, QUICK_DECODE) if quick else (PREFILL, DECODE)


def build(directory: str, quick: bool, layers: int) -> None:
    """Every ditron op the run calls (ditron.nn.signatures of the model on the meta device, at every M)."""
    import torch
    from transformers import LlamaForCausalLM

    import ditron.nn as dnn
    from ditron import ops
    prefill, decode = sizes(quick)
    with torch.device("meta"):
        model = LlamaForCausalLM(config(layers)).to(torch.bfloat16)
    sigs = dnn.signatures(model, W, sorted({*prefill, *decode}), target=TARGET)
    t0 = time.perf_counter()
    ops.build(sigs, directory, log=print)
    print(f"built {len(sigs)} artifacts into {directory} in {time.perf_counter() - t0:.0f} s")


# ---------------------------------------------------------------------------------------- the torch model

def nccl_plan(model) -> dict:
    """The model's base_model_tp_plan with the row-parallel layers' collective done by NCCL (torch)."""
    import ditron.nn as dnn
    from ditron.nn.linear import RowParallelLinear

    class NcclRowParallelLinear(RowParallelLinear):
        """RowParallelLinear's shard and layout; torch.matmul, then NCCL's all-reduce (not overlapped)."""

        def __init__(self, linear, world, name):
            super().__init__(linear, world, name=name)
            self.group = world.group

        def forward(self, x):
            import torch
            import torch.distributed._functional_collectives as funcol
            y = torch.matmul(self._flat(x, self.local_in_features, "NcclRowParallelLinear").contiguous(), self._b())
            y = funcol.all_reduce(y, "sum", self.group)
            if self.bias is not None:
                y = y + self.bias
            return y.reshape(*x.shape[:-1], self.out_features)

    class NcclRowwise(dnn.Rowwise):
        def build(self, linear, world, library, name, head_dim):
            return NcclRowParallelLinear(linear, world, name)

    prefix, plan = dnn.model_plan(model)
    return {f"{prefix}.{k}" if prefix else k: (NcclRowwise() if v == "rowwise" else v) for k, v in plan.items()}


# ---------------------------------------------------------------------------------------------- the run

def cache_kw(model) -> str:
    import inspect
    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


def run(directory: str, quick: bool, layers: int, compiled: bool, out_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    from transformers import LlamaForCausalLM

    import ditron.nn as dnn
    from bench_dist import make_env, rel_err, timed
    from ditron import ops, torch_ops
    if not torch.cuda.is_available():
        sys.exit("bench_e2e --run needs CUDA GPUs")
    env = make_env(None)
    if env.W != W or not env.nccl:
        sys.exit(f"bench_e2e --run runs under torchrun --nproc-per-node {W} on {W} GPUs (NCCL for the baseline); "
                 f"got {env.W} rank(s), NCCL {'on' if env.nccl else 'off'}")
    library = ops.Library(directory, target=TARGET, compile=False)
    torch.manual_seed(0)  # the same weights on both ranks
    with torch.device("cuda"):
        torch.set_default_dtype(torch.bfloat16)
        model = LlamaForCausalLM(config(layers)).eval()
        torch.set_default_dtype(torch.float32)
    model.requires_grad_(False)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    models = {"torch_nccl": dnn.parallelize(copy.deepcopy(model), env.world, nccl_plan(model)),
              "ditron": dnn.parallelize(model, env.world, library=library)}
    del model
    torch.cuda.empty_cache()
    held = {name: sum(p.numel() * p.element_size() for p in m.parameters()) for name, m in models.items()}
    env.log(f"{layers} LLaMA-3-70B layers at TP = {W}: {weights / 2**30:.1f} GiB of weights, "
            f"{held['ditron'] / 2**30:.2f} GiB per rank per model; {'torch.compile' if compiled else 'eager'}")
    if compiled:
        torch._dynamo.config.cache_size_limit = 64
    calls = {name: torch.compile(m, fullgraph=True) if compiled else m for name, m in models.items()}
    kw = cache_kw(models["ditron"])
    prefill, decode = sizes(quick)
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(1)
    with torch.no_grad():
        for S in prefill:
            ids = torch.randint(0, CONFIG["vocab_size"], (1, S), device="cuda", generator=gen)
            rows.append(measure(env, "prefill", 1, S, {n: (lambda c=c: c(input_ids=ids, use_cache=False))
                                                       for n, c in calls.items()}, iters=10, timed=timed,
                                rel_err=rel_err))
        for B in decode:
            ctx = torch.randint(0, CONFIG["vocab_size"], (B, CONTEXT), device="cuda", generator=gen)
            tok = torch.randint(0, CONFIG["vocab_size"], (B, 1), device="cuda", generator=gen)
            # the context's KV cache, filled once by the torch model (M = B * CONTEXT rows: a shape ditron has no
            # artifact for) and copied for each model: both hold the same shards of the same heads
            context = getattr(models["torch_nccl"](input_ids=ctx, use_cache=True), kw)
            steps = {}
            for name, c in calls.items():
                cache = copy.deepcopy(context)

                def step(c=c, cache=cache):
                    return c(input_ids=tok, use_cache=True, **{kw: cache})
                steps[name] = step
            rows.append(measure(env, "decode", B, 1, steps, iters=40, timed=timed, rel_err=rel_err))
            del steps, context
            torch.cuda.empty_cache()
    torch.cuda.synchronize()
    torch_ops.synchronize(env.world)
    if env.rank == 0:
        kept = {n: sum(r[f"{n}_kept_mib"] for r in rows) for n in ("ditron", "torch_nccl")}
        print(f"device memory kept by the first calls, over the run (max over ranks): ditron {kept['ditron']:.0f} "
              f"MiB, torch+NCCL {kept['torch_nccl']:.0f} MiB; weights per rank per model "
              f"{held['ditron'] / 2**20:.0f} MiB")
        report(rows, out_dir, compiled, layers)
    torch_ops.close(env.world)
    library.close()
    dist.barrier()
    dist.destroy_process_group()


def measure(env, phase: str, batch: int, seq: int, fns: dict, iters: int, timed, rel_err) -> dict:
    """One row: each model's ms and host ms per forward, and ditron's logits against torch+NCCL's."""
    import torch
    first, kept = {}, {}
    for name, fn in fns.items():  # the device memory a model's first call at this shape keeps (after empty_cache)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        free = torch.cuda.mem_get_info()[0]
        first[name] = fn().logits
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        kept[name] = free - torch.cuda.mem_get_info()[0] - first[name].numel() * first[name].element_size()
    row = {"phase": phase, "batch": batch, "seq": seq, "M": batch * seq,
           "rel_err": rel_err(first["ditron"], first["torch_nccl"])}
    row.update({f"{name}_kept_mib": env.max_over_ranks(float(v)) / 2**20 for name, v in kept.items()})
    del first
    for name, fn in fns.items():
        row[f"{name}_ms"] = timed(env, fn, iters) / 1e3
        row[f"{name}_host_ms"] = env.host_us / 1e3
    row["speedup"] = row["torch_nccl_ms"] / row["ditron_ms"]
    env.log(f"  {phase:<7} batch {batch:4d} seq {seq:6d}: ditron {row['ditron_ms']:8.3f} ms (host "
            f"{row['ditron_host_ms']:.3f}), torch+NCCL {row['torch_nccl_ms']:8.3f} ms (host "
            f"{row['torch_nccl_host_ms']:.3f}): {row['speedup']:.3f}x, rel_err {row['rel_err']:.2e}")
    return row


def report(rows: list[dict], out_dir: Path, compiled: bool, layers: int) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"e2e_tp{W}{'_compiled' if compiled else ''}"
    keys = ["phase", "batch", "seq", "M", "ditron_ms", "torch_nccl_ms", "speedup", "ditron_host_ms",
            "torch_nccl_host_ms", "rel_err", "ditron_kept_mib", "torch_nccl_kept_mib"]
    with open(f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{r[k]:.4g}" if isinstance(r[k], float) else r[k]) for k in keys})
    print(f"wrote {stem}.csv")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not importable: no PNG")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, phase, what in ((axes[0], "prefill", "seq"), (axes[1], "decode", "batch")):
        sel = [r for r in rows if r["phase"] == phase]
        ax.bar(range(len(sel)), [r["speedup"] for r in sel])
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xticks(range(len(sel)))
        ax.set_xticklabels([str(r[what]) for r in sel])
        ax.set_xlabel(what)
        ax.set_ylabel("torch+NCCL time / ditron time")
        ax.set_title(f"{phase}: {layers} LLaMA-3-70B layers, TP = {W}{', compiled' if compiled else ''}")
    fig.tight_layout()
    fig.savefig(f"{stem}.png", dpi=120)
    plt.close(fig)
    print(f"wrote {stem}.png")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", metavar="DIR", help="compile every op the run calls into DIR (needs ditron + MLIR)")
    p.add_argument("--run", metavar="DIR", help="benchmark with the artifacts in DIR (torchrun, 2 GPUs)")
    p.add_argument("--quick", action="store_true", help="fewer prefill lengths and decode batches")
    p.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    p.add_argument("--compile", action="store_true", help="both models under torch.compile(fullgraph=True)")
    p.add_argument("--out", default=str(RESULTS), help="where the CSV and PNG go")
    args = p.parse_args(argv)
    if args.layers < 1:
        p.error("--layers takes a positive count")
    if bool(args.build) == bool(args.run):
        p.error("give one of --build DIR or --run DIR")
    if args.build:
        build(args.build, args.quick, args.layers)
    else:
        run(args.run, args.quick, args.layers, args.compile, Path(args.out))


if __name__ == "__main__":
    main()
