#!/usr/bin/env python3
"""Expert-parallel MoE benchmark (issue 29 item 5): Hugging Face transformers' MixtralSparseMoeBlock (from a
MixtralConfig, random weights, nothing downloaded) with its experts sharded over the ranks through
``ditron.nn.ExpertParallelMoE``, against the torch expert-parallel block a user would write, in the same run, on
the same tokens, both checked against the single-GPU block.

Two steps, because the GPU box has torch + triton but not the MLIR bindings:

    python benchmarks/bench_moe.py --build DIR [--world 2] [--mode virtual|real|both] [--quick]
        CPU box with ditron + MLIR: every case's programs (ditron.nn.moe.build) into DIR, and DIR/moe_cases.json
    python benchmarks/bench_moe.py --run DIR --virtual W [--quick]
        one GPU: W ranks in this process (ditron.World.virtual)
    torchrun --nproc-per-node W benchmarks/bench_moe.py --run DIR [--quick]
        one process per GPU (ditron.World.from_torch; NCCL for the torch baseline)

Cases: T tokens a rank in {128, 1024, 4096} (``--quick``: 128 and 4096), top-2 of 8 experts, hidden 4096,
intermediate 14336 (Mixtral-8x7B; ``--intermediate`` for a smaller one), bf16, E/W experts a rank. ``--run``
measures the cases DIR's manifest holds for this world (its size and mode), ``--tokens`` a subset of them.

What each side includes, per call (every rank; a virtual world runs every rank's work on the one GPU):

* **ditron** (``ExpertParallelMoE(block, world)(x)``, module ditron.nn.moe): the block's torch router (logits,
  softmax, top-2, renormalisation) and the sort of the (token, expert) pairs by expert; the dispatch
  ``ops.all_to_all(rows, splits=..., capacity=W*T*k)`` (split sizes exchanged on the device, no host sync) and the
  static all_to_all of the per-expert counts; ``ops.grouped_gemm(gated='silu')`` (gate+up and SiLU(gate) * up in
  one kernel) and ``ops.grouped_gemm`` (down) on the rows as received (W * E/W groups, source-major, cycling over
  the rank's experts: no regroup, no unsort); the sized all_to_all combine; the weighted ``index_add_``.
* **torch** (``TorchExpertParallel``): the same router and sort; the split sizes exchanged by
  ``all_to_all_single`` of the per-expert counts and read back to the host (the sync every torch EP
  implementation has: ``all_to_all_single`` takes its split sizes as host lists); the dispatch by
  ``all_to_all_single`` with those sizes (exactly the rows received, no capacity); the regroup to expert-major
  rows (``repeat_interleave`` + a stable argsort on the device); ``torch._grouped_mm`` with the offsets from the
  received counts and the block's own weight layout (``gate_up_proj`` [E, 2I, H] passed transposed, as
  transformers' ``grouped_mm`` experts do), SiLU(gate) * up, ``torch._grouped_mm`` (down) -- a loop of
  ``torch.matmul`` per expert where this torch has no ``_grouped_mm`` (the row says which); the combine by
  ``all_to_all_single`` back; the same weighted ``index_add_``.
  In a real world the all_to_all_single calls are NCCL's (one process per GPU). In a virtual world (one GPU,
  where NCCL cannot run W ranks) each is the same data movement done by ``copy_`` between the virtual ranks'
  buffers (part d of rank s's send buffer into rank d's receive buffer at rank s's offset: W*W copies), as
  bench_dist.py's virtual baselines do, and the host read of the split sizes is one read for all ranks. The
  ranks' work runs one rank after the other on the caller's stream (ditron's virtual ranks run on their own
  streams, concurrently): a virtual world measures the single GPU doing every rank's work, not a link.
* **router** (``router_us``): the router and the sort alone, one rank's worth per rank (included in both sides).
* **block** (``block_us``): the single-GPU MixtralSparseMoeBlock (transformers' eager experts: a loop over the
  experts hit) on every rank's tokens (all W ranks' in a virtual world, this rank's in a real one): no
  parallelism, for scale.

Numerics: before timing, each side's output on every rank is compared with the single-GPU block's output on that
rank's tokens (test_moe_gpu.py's tolerance: every element within 2^-6 of the largest output plus 2^-6 relative,
the RMS error within 2^-8 of the output's RMS); a mismatch is written to the row (``ok`` false) and makes the run
exit non-zero after the results are written.

Timing: eager calls only. CUDA events around a fixed number of calls (the same on every rank: from a probe of
one call, ~0.15 s of calls a measurement, at least 2 a repetition), after a warm-up of half a repetition's calls
(at least 3), in 5 repetitions; each repetition the max over ranks, a row the median repetition (bench_dist.py's
``timed``). No CUDA-graph replay: ExpertParallelMoE cannot be captured -- its sized all_to_all has a capture
path (ditron.ops_sized), but ``ops.grouped_gemm`` and the static all_to_all of the counts it calls go through
``ops._call``, which has none (a capture would bake one call's signal epochs into the graph) -- and the torch
baseline cannot either (its host read of the split sizes). Output: a table on stdout and
benchmarks/results/moe_<virtual|real>_w<W>[_i<I>].csv and .png (matplotlib, if importable).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")  # before CUDA starts: a virtual world has many streams

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # bench_dist: the worlds and the timing loop
from bench_dist import fmt, make_env, pyplot, timed, write_csv  # noqa: E402 - worlds, timing, output

RESULTS = HERE / "results"
TARGET = "cuda:90"
TOKENS = (128, 1024, 4096)
QUICK_TOKENS = (128, 4096)
EXPERTS, TOP_K, HIDDEN, INTERMEDIATE = 8, 2, 4096, 14336   # Mixtral-8x7B
MANIFEST = "moe_cases.json"
REPS = 5
TARGET_S = 0.15   # seconds of calls a measurement (all repetitions)


def transformers_block_class():
    """(MixtralConfig, MixtralSparseMoeBlock), or a clear exit where transformers is missing."""
    try:
        from transformers import MixtralConfig
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    except ImportError as err:
        sys.exit(f"bench_moe --run needs Hugging Face transformers (>= 5, whose experts hold fused gate_up_proj / "
                 f"down_proj weights) for MixtralSparseMoeBlock: pip install transformers ({err})")
    return MixtralConfig, MixtralSparseMoeBlock


# ================================================================================ build (CPU box, needs MLIR)

def case_key(c: dict) -> tuple:
    return (c["world"], c["virtual"], c["tokens"], c["hidden"], c["intermediate"], c["experts"], c["top_k"])


def build(directory: Path, worlds: list[int], modes: list[str], tokens, hidden: int, intermediate: int,
          experts: int, top_k: int, target: str) -> None:
    from ditron.nn import moe
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / MANIFEST
    known = json.loads(path.read_text())["cases"] if path.is_file() else []
    start = time.perf_counter()
    for w in worlds:
        for mode in modes:
            for t in tokens:
                c = {"world": w, "virtual": mode == "virtual", "tokens": t, "hidden": hidden,
                     "intermediate": intermediate, "experts": experts, "top_k": top_k, "target": target}
                t0 = time.perf_counter()
                moe.build(directory, w, c["virtual"], t, hidden, intermediate, experts, top_k, target=target)
                known = [k for k in known if case_key(k) != case_key(c)] + [c]
                print(f"built W={w} {mode} T={t} H={hidden} I={intermediate} E={experts} top-{top_k} "
                      f"({time.perf_counter() - t0:.1f} s)", flush=True)
    path.write_text(json.dumps({"cases": known}, indent=1) + "\n")
    print(f"{len(known)} case(s) in {path}; {time.perf_counter() - start:.0f} s")


# ================================================================================ the block and the baseline

def make_block(hidden: int, intermediate: int, experts: int, top_k: int, device, seed: int = 0):
    """The bf16 Mixtral block on ``device`` (transformers' eager experts: the single-GPU reference), every parameter
    N(0, 1/fan_in) from a seeded generator on the device (the same on every rank)."""
    import torch
    MixtralConfig, MixtralSparseMoeBlock = transformers_block_class()
    config = MixtralConfig(hidden_size=hidden, intermediate_size=intermediate, num_local_experts=experts,
                           num_experts_per_tok=top_k, router_jitter_noise=0.0, experts_implementation="eager")
    with torch.device(device):
        block = MixtralSparseMoeBlock(config)
    block = block.to(torch.bfloat16)
    g = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, p.shape[-1] ** -0.5, generator=g)
    return block.eval().requires_grad_(False)


def make_tokens(rank: int, tokens: int, hidden: int, device):
    """Rank ``rank``'s [1, T, H] bf16 tokens (seeded by rank)."""
    import torch
    g = torch.Generator(device=device).manual_seed(100 + rank)
    return torch.randn(1, tokens, hidden, generator=g, device=device).to(torch.bfloat16)


class TorchExpertParallel:
    """The torch expert-parallel block (the module doc's baseline): router, split sizes exchanged and read back,
    all_to_all_single dispatch, torch._grouped_mm experts (or a loop of torch.matmul), all_to_all_single combine.
    ``world_size``, ``ranks``: the ranks this process computes (all of them in a virtual world, whose
    all_to_all_single is copies between the ranks' buffers; its own rank in a real one, where ``group`` is the
    torch.distributed group of the collectives, None: the default one). ``grouped_mm``: use torch._grouped_mm
    where it exists."""

    def __init__(self, block, world_size: int, ranks, *, virtual: bool, group=None, grouped_mm: bool = True):
        import torch

        from ditron.nn import moe
        gate_up, down, act = moe.expert_weights(block.experts)   # [E, H, 2I], [E, I, H]: views of the block's own
        e = gate_up.shape[0]
        if e % world_size:
            raise ValueError(f"{e} experts do not split over {world_size} ranks")
        self.gate, self.act, self.top_k = block.gate, act, block.top_k
        self.W, self.E, self.E_l, self.virtual, self.group = world_size, e, e // world_size, virtual, group
        self.hidden = gate_up.shape[1]
        self.weights = {r: (gate_up[r * self.E_l:(r + 1) * self.E_l], down[r * self.E_l:(r + 1) * self.E_l])
                        for r in ranks}
        self.ranks = list(ranks)
        self.mm = getattr(torch, "_grouped_mm", None) if grouped_mm else None
        self.how = "torch._grouped_mm" if self.mm is not None else "loop of torch.matmul"

    def route(self, x):
        """(rows sorted by expert, their tokens, their router weights, counts per expert [E] int64)."""
        import torch
        _, weights, index = self.gate(x)
        flat = index.reshape(-1)
        order = torch.argsort(flat, stable=True)
        token = order // self.top_k
        counts = torch.bincount(flat, minlength=self.E)
        return x[token], token, weights.reshape(-1)[order], counts

    def experts(self, received, counts_from, host_counts, rank: int):
        """The received rows (source-major, expert-minor; ``counts_from`` [W, E_l] on the device, ``host_counts``
        the same on the host) through this rank's experts, in the order received."""
        import torch
        w1, w2 = self.weights[rank]
        n = received.shape[0]
        expert = torch.repeat_interleave(torch.arange(self.E_l, device=received.device).repeat(self.W),
                                         counts_from.reshape(-1), output_size=n)
        perm = torch.argsort(expert, stable=True)
        grouped = received[perm]
        if self.mm is not None:
            offs = torch.cumsum(counts_from.sum(0), 0).to(torch.int32)
            g, u = self.mm(grouped, w1, offs=offs).chunk(2, dim=-1)
            y = self.mm(self.act(g) * u, w2, offs=offs)
        else:
            sizes = [sum(host_counts[s][e] for s in range(self.W)) for e in range(self.E_l)]
            y = torch.empty(n, w2.shape[-1], dtype=received.dtype, device=received.device)
            lo = 0
            for e, size in enumerate(sizes):
                if size:
                    g, u = torch.matmul(grouped[lo:lo + size], w1[e]).chunk(2, dim=-1)
                    torch.matmul(self.act(g) * u, w2[e], out=y[lo:lo + size])
                lo += size
        out = torch.empty_like(y)
        out[perm] = y
        return out

    def __call__(self, xs: list) -> list:
        xs2 = [x.reshape(-1, self.hidden) for x in xs]
        outs = self._virtual(xs2) if self.virtual else [self._real(xs2[0])]
        return [o.reshape(x.shape) for o, x in zip(outs, xs)]

    def _real(self, x):
        import torch
        import torch.distributed as dist
        W, E_l = self.W, self.E_l
        rows, token, wt, counts = self.route(x)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=self.group)   # counts of my experts from every rank
        host = torch.cat([counts.view(W, E_l).sum(1), recv_counts]).cpu().tolist()   # the split sizes' host sync
        send, host_from = host[:W], [host[W + s * E_l:W + (s + 1) * E_l] for s in range(W)]
        recv = [sum(h) for h in host_from]
        received = rows.new_empty(sum(recv), self.hidden)
        dist.all_to_all_single(received, rows, recv, send, group=self.group)
        y = self.experts(received, recv_counts.view(W, E_l), host_from, self.ranks[0])
        back = rows.new_empty(rows.shape)
        dist.all_to_all_single(back, y, send, recv, group=self.group)
        out = torch.zeros_like(x)
        out.index_add_(0, token, (back * wt[:, None]).to(x.dtype))
        return out

    def _virtual(self, xs: list) -> list:
        import torch
        W, E_l = self.W, self.E_l
        routed = [self.route(x) for x in xs]
        # all_to_all_single of the counts: rank s's counts of rank d's experts -> row s of rank d's counts_from
        counts_from = [torch.empty(W, E_l, dtype=torch.int64, device=xs[0].device) for _ in range(W)]
        for d in range(W):
            for s in range(W):
                counts_from[d][s].copy_(routed[s][3][d * E_l:(d + 1) * E_l])
        host = torch.stack(counts_from).cpu().tolist()   # [d][s][e]: the split sizes' host sync, one for all ranks
        sent = [[sum(host[d][s]) for d in range(W)] for s in range(W)]   # sent[s][d] rows s -> d
        # dispatch: part d of rank s's rows -> rank d's buffer, source-major
        received = []
        for d in range(W):
            buf = routed[0][0].new_empty(sum(sent[s][d] for s in range(W)), self.hidden)
            at = 0
            for s in range(W):
                lo = sum(sent[s][:d])
                buf[at:at + sent[s][d]].copy_(routed[s][0][lo:lo + sent[s][d]])
                at += sent[s][d]
            received.append(buf)
        ys = [self.experts(received[d], counts_from[d], host[d], d) for d in range(W)]
        # combine: rank d's results for rank s back into rank s's buffer, at the offsets it sent them from
        outs = []
        for s in range(W):
            rows, token, wt, _ = routed[s]
            back = rows.new_empty(rows.shape)
            lo = 0
            for d in range(W):
                at = sum(sent[q][d] for q in range(s))
                back[lo:lo + sent[s][d]].copy_(ys[d][at:at + sent[s][d]])
                lo += sent[s][d]
            out = torch.zeros_like(xs[s])
            out.index_add_(0, token, (back * wt[:, None]).to(xs[s].dtype))
            outs.append(out)
        return outs


def compare(got, want) -> dict:
    """test_moe_gpu.py's tolerance (the module doc): {'ok', 'max_err', 'rms_err', 'want_max', 'want_rms'}."""
    if tuple(got.shape) != tuple(want.shape):
        return {"ok": False, "max_err": float("inf"), "rms_err": float("inf"), "want_max": 0.0, "want_rms": 0.0}
    err = got.float() - want.float()
    scale, rms = float(want.float().abs().max()), float(want.float().pow(2).mean().sqrt())
    e_max, e_rms = float(err.abs().max()), float(err.pow(2).mean().sqrt())
    ok = bool((err.abs() <= 2 ** -6 * scale + 2 ** -6 * want.float().abs()).all()) and e_rms <= 2 ** -8 * rms
    return {"ok": ok, "max_err": e_max, "rms_err": e_rms, "want_max": scale, "want_rms": rms}


# ================================================================================ run (GPU box: torch + triton)

def iterations(env, fn) -> int:
    """Calls a measurement (all repetitions; the same on every rank): ~TARGET_S seconds by a probe of one call,
    at least 2 a repetition, at most 100."""
    import torch
    fn()
    env.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    per_call = env.max_over_ranks(start.elapsed_time(end) * 1e-3)
    return int(min(100, max(2, TARGET_S / REPS / max(per_call, 1e-6)))) * REPS


def run(directory: Path, virtual: int | None, only_tokens, out_dir: Path, quick: bool) -> int:
    import torch

    from ditron import ops
    from ditron.nn import ExpertParallelMoE
    if not torch.cuda.is_available():
        sys.exit("bench_moe --run needs a CUDA GPU")
    transformers_block_class()  # a clear exit before anything starts where transformers is missing
    env = make_env(virtual)
    path = directory / MANIFEST
    if not path.is_file():
        sys.exit(f"{path} is missing: build the cases first (python benchmarks/bench_moe.py --build {directory})")
    wanted = only_tokens or (QUICK_TOKENS if quick else None)
    cases = [c for c in json.loads(path.read_text())["cases"] if c["world"] == env.W and
             c["virtual"] == env.virtual and (wanted is None or c["tokens"] in wanted)]
    if not cases:
        sys.exit(f"{path} holds no case for a {'virtual' if env.virtual else 'real'} world of {env.W} ranks"
                 + (f" with T in {tuple(wanted)}" if wanted else ""))
    if not env.virtual and not env.nccl:
        env.notes.append("fewer GPUs than ranks: no NCCL, so no torch baseline (ditron and the block only)")
    lib = ops.Library(directory, target=cases[0].get("target", TARGET), compile=False)
    device = torch.device("cuda", torch.cuda.current_device())
    ranks = list(range(env.W)) if env.virtual else [env.rank]
    rows, failed, start = [], [], time.perf_counter()
    models = sorted({(c["hidden"], c["intermediate"], c["experts"], c["top_k"]) for c in cases})
    for hidden, inter, experts, top_k in models:
        block = make_block(hidden, inter, experts, top_k, device)
        layer = ExpertParallelMoE(block, env.world, library=lib)
        base = TorchExpertParallel(block, env.W, ranks, virtual=env.virtual) if env.virtual or env.nccl else None
        for c in sorted((c for c in cases if (c["hidden"], c["intermediate"], c["experts"], c["top_k"]) ==
                         (hidden, inter, experts, top_k)), key=lambda c: c["tokens"]):
            t0 = time.perf_counter()
            row = run_case(env, c, block, layer, base, ranks, device)
            rows.append(row)
            if not row["ok"]:
                failed.append(row)
            env.log(f"  T={c['tokens']:5d} I={inter}: ditron {row['ditron_us']:9.1f} us  torch "
                    f"{row.get('torch_us', float('nan')):9.1f} us  ({time.perf_counter() - t0:.1f} s)")
        del layer, base, block
        torch.cuda.empty_cache()
    lib.close()
    if env.rank == 0:
        report(env, rows, out_dir)
        print(f"total {time.perf_counter() - start:.0f} s")
    if not env.virtual:
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()
    if failed:
        print("MISMATCH against the single-GPU block: " + "; ".join(f"T={r['tokens']}: {r['mismatch']}"
                                                                     for r in failed), file=sys.stderr)
        return 1
    return 0


def run_case(env, c: dict, block, layer, base, ranks, device) -> dict:
    import torch
    t, W = c["tokens"], env.W
    xs = [make_tokens(r, t, c["hidden"], device) for r in ranks]
    row = {"mode": "virtual" if env.virtual else "real", "world": W, "tokens": t, "hidden": c["hidden"],
           "intermediate": c["intermediate"], "experts": c["experts"], "top_k": c["top_k"],
           "baseline": base.how if base is not None else ""}

    def ditron_call():
        return layer(xs) if env.virtual else [layer(xs[0])]
    # numerics first (the first call also loads the programs and makes the call plans)
    want = [block(x) for x in xs]
    sides = {"ditron": ditron_call}
    if base is not None:
        sides["torch"] = lambda: base(xs)
    bad = []
    for name, fn in sides.items():
        got = fn()
        torch.cuda.synchronize()
        checks = [compare(g, w) for g, w in zip(got, want)]
        worst = max(checks, key=lambda k: k["max_err"] / max(k["want_max"], 1e-30))
        ok = env.max_over_ranks(0.0 if all(k["ok"] for k in checks) else 1.0) == 0.0
        row[f"{name}_max_err"] = env.max_over_ranks(worst["max_err"])
        row[f"{name}_rms_err"] = env.max_over_ranks(max(k["rms_err"] for k in checks))
        if not ok:
            bad.append(name)
        del got
    row["want_max"] = max(compare(w, w)["want_max"] for w in want)
    row["ok"] = not bad
    row["mismatch"] = ", ".join(bad)
    # timing: the same count of calls on both sides
    iters = iterations(env, ditron_call)
    row["iters"] = iters
    row["ditron_us"] = timed(env, ditron_call, iters, reps=REPS)
    if base is not None:
        row["torch_us"] = timed(env, lambda: base(xs), iters, reps=REPS)
        row["vs_torch"] = row["torch_us"] / row["ditron_us"]
    router = base or TorchExpertParallel(block, W, ranks, virtual=env.virtual)
    row["router_us"] = timed(env, lambda: [router.route(x.reshape(-1, c["hidden"])) for x in xs], iters, reps=REPS)
    row["block_us"] = timed(env, lambda: [block(x) for x in xs], iters, reps=REPS)
    return row


FIELDS = ["mode", "world", "tokens", "hidden", "intermediate", "experts", "top_k", "iters", "ditron_us", "torch_us",
          "vs_torch", "router_us", "block_us", "baseline", "ok", "ditron_max_err", "ditron_rms_err", "torch_max_err",
          "torch_rms_err", "want_max", "mismatch"]


def report(env, rows: list[dict], out_dir: Path) -> None:
    import torch
    mode = "virtual" if env.virtual else "real"
    inters = sorted({r["intermediate"] for r in rows})
    stem = f"moe_{mode}_w{env.W}" + ("" if inters == [INTERMEDIATE] else "_i" + "_".join(map(str, inters)))
    gpu = torch.cuda.get_device_name()
    print(f"\n{mode} world, W = {env.W}, {gpu}; top-{rows[0]['top_k']} of {rows[0]['experts']} experts, hidden "
          f"{rows[0]['hidden']}; us per call (max over ranks, median of {REPS}); eager calls")
    print(f"{'T/rank':>6} {'I':>6} {'ditron':>9} {'torch':>9} {'vs torch':>8} {'router':>8} {'block':>9} "
          f"{'ditron err':>10} {'torch err':>10}  baseline")
    for r in rows:
        print(f"{r['tokens']:>6} {r['intermediate']:>6} {fmt(r.get('ditron_us')):>9} {fmt(r.get('torch_us')):>9} "
              f"{fmt(r.get('vs_torch'), '.2f'):>8} {fmt(r.get('router_us')):>8} {fmt(r.get('block_us')):>9} "
              f"{fmt(r.get('ditron_max_err'), '.2e'):>10} {fmt(r.get('torch_max_err'), '.2e'):>10}  "
              f"{r['baseline']}{'' if r['ok'] else '  MISMATCH: ' + r['mismatch']}")
    for note in env.notes:
        print(f"note: {note}")
    write_csv(out_dir / f"{stem}.csv", rows, FIELDS, f"{mode} world W={env.W} on {gpu}, torch {torch.__version__}; "
              "eager calls", env.notes)
    print(f"wrote {out_dir / (stem + '.csv')}")
    plot(rows, out_dir / f"{stem}.png", f"{mode} world, W = {env.W} ({gpu})")


def plot(rows: list[dict], path: Path, title: str) -> None:
    plt = pyplot(path)
    if plt is None:
        return
    labels = [f"T={r['tokens']}\nI={r['intermediate']}" for r in rows]
    series = [(n, k) for n, k in (("ditron ExpertParallelMoE", "ditron_us"), ("torch EP (a2a_single + "
              "grouped_mm)", "torch_us"), ("single-GPU block", "block_us")) if any(r.get(k) for r in rows)]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 1.6), 4.5))
    for i, (name, key) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(rows))]
        ax.bar(xs, [r.get(key) or 0 for r in rows], width, label=name)
    for j, r in enumerate(rows):
        if r.get("vs_torch"):
            ax.annotate(f"{r['vs_torch']:.2f}x", (j, max(r["ditron_us"], r["torch_us"])), ha="center",
                        va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("us per call (log)")
    ax.set_title(f"Mixtral MoE block, expert parallel: {title}\n(labels: torch / ditron)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", metavar="DIR", type=Path, help="compile the cases' programs into DIR (needs MLIR)")
    p.add_argument("--world", type=int, nargs="+", default=[2], help="with --build: world sizes")
    p.add_argument("--mode", choices=("virtual", "real", "both"), default="both",
                   help="with --build: programs for virtual worlds (one GPU), real ones (torchrun), or both")
    p.add_argument("--intermediate", type=int, nargs="+", default=[INTERMEDIATE],
                   help="with --build: the experts' intermediate sizes (default Mixtral's 14336)")
    p.add_argument("--target", default=TARGET, help="with --build: the GPU target")
    p.add_argument("--run", metavar="DIR", type=Path, help="benchmark the cases built into DIR (needs a GPU)")
    p.add_argument("--virtual", type=int, metavar="W", help="with --run: W ranks on this one GPU (else torchrun's)")
    p.add_argument("--quick", action="store_true", help=f"T in {QUICK_TOKENS} only")
    p.add_argument("--tokens", type=int, nargs="+", help="tokens a rank (at --build: instead of the default set; "
                   "at --run: the built cases with these)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where the CSV and PNG go")
    args = p.parse_args(argv)
    if not args.build and not args.run:
        p.error("give --build DIR (CPU box) or --run DIR (GPU box)")
    if args.build:
        modes = ["virtual", "real"] if args.mode == "both" else [args.mode]
        tokens = args.tokens or (QUICK_TOKENS if args.quick else TOKENS)
        for inter in args.intermediate:
            build(args.build, args.world, modes, tokens, HIDDEN, inter, EXPERTS, TOP_K, args.target)
    if args.run:
        return run(args.run, args.virtual, args.tokens, args.out, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
