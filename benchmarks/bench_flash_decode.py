#!/usr/bin/env python3
"""Distributed flash-decode (examples/flash_decode.py: one ditron.language kernel per rank, the KV cache sharded by
sequence) beside what a torch user does without it: all_gather the KV shards, then attention on the whole cache.

Two steps, because the GPU box has torch + triton but not the MLIR bindings:

    python benchmarks/bench_flash_decode.py --build DIR --world 1 2 [--mode virtual|real|both] [--quick]
        CPU box with ditron + MLIR: the flash-decode device programs (ditron.user_ops prebuild) into DIR
    python benchmarks/bench_flash_decode.py --run DIR --virtual W [--quick] [--no-graph]
        one GPU: W ranks in this process (ditron.World.virtual)
    torchrun --nproc-per-node W benchmarks/bench_flash_decode.py --run DIR [--quick] [--no-graph]
        one process per GPU (ditron.World.from_torch); the all-gather baseline needs NCCL (one GPU per rank)

Cases: decode attention of one new token per sequence, GQA with 64 query heads over 8 KV heads, head dim 128, bf16,
batch B in {1, 4, 16, 64}, KV length L in {4K, 16K, 64K, 128K} (+ 1: it never divides by W; --quick: B in {1, 16,
64} x L in {4K, 128K}, and B = 16 at 32K). Columns (microseconds per call, every rank's output, CUDA events around
a fixed number of calls, the median of repetitions, each the max over ranks: bench_dist.timed):

* ``ditron_us``: flash_decode (the user op) in CUDA-graph mode (eager with --no-graph); in a real world the program
  ends with a barrier (``barrier=True``: the executor's graph mode wants one there), in a virtual world it has none;
* ``allgather_sdpa_us``: every rank gathers the W shards into a whole cache (W = 1: nothing to gather; in a
  virtual world: copies on the one GPU, one rank after the other through one buffer; in a real world:
  dist.all_gather_into_tensor + a cat of the valid positions) and runs torch's scaled_dot_product_attention
  (enable_gqa, its fused backends) on it;
* ``sdpa_whole_us`` / ``flash_whole_us``: torch SDPA / flash-attn's flash_attn_with_kvcache (when importable) on
  the whole cache on one GPU, once: the floor of any method that reads the cache on one GPU;
* ``kv_GBps``: KV bytes read per rank / ditron_us (in a virtual world: every rank's, all on one GPU).

A case whose tensors would not fit in the GPU's free memory is skipped (said in the log). Output: a table,
benchmarks/results/flash_decode_<virtual|real>_w<W>[_quick].csv and a PNG of the same name (ditron's time against
the baseline's, per case).

``--sweep`` (with --build and with --run): the kernel's tuning instead -- BLOCK_N x num_stages x num_warps, the
variants whose pipeline fits the target's shared memory (cost_model.peaks_for) -- at B = 1 and 64, L = 32K + 1,
ditron_us per variant into benchmarks/results/flash_decode_sweep_<virtual|real>_w<W>.csv: the evidence for the
example's defaults (BLOCK_N, NUM_STAGES, NUM_WARPS).
"""
from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))

import bench_dist  # noqa: E402
import flash_decode as fd  # noqa: E402

TARGET = "cuda:90"
HQ, HKV, D = 64, 8, 128
DTYPE = "bf16"
EB = 2  # bytes per element


@dataclass(frozen=True)
class Case:
    B: int
    L: int

    @property
    def label(self) -> str:
        return f"B={self.B} L={self.L}"

    def shapes(self, W: int):
        S = fd.capacity(self.L, W)
        return [(self.B, HQ, D), (self.B * HKV, S, D), (self.B * HKV, S, D)]

    def cache_bytes(self) -> int:
        """K and V of the whole cache."""
        return 2 * self.B * HKV * self.L * D * EB


def cases(quick: bool) -> list[Case]:
    if quick:
        return [Case(B, L + 1) for B in (1, 16, 64) for L in (4096, 131072)] + [Case(16, 32768 + 1)]
    return [Case(B, L + 1) for B in (1, 4, 16, 64) for L in (4096, 16384, 65536, 131072)]


SWEEP = {"block_n": (32, 64, 128), "num_stages": (2, 3, 4, 5), "num_warps": (4, 8)}


def sweep_cases() -> list[Case]:
    return [Case(1, 32768 + 1), Case(64, 32768 + 1)]


def sweep_variants() -> list[dict]:
    """Every tuning of SWEEP whose K / V pipeline ((stages - 1) blocks of K and V in flight, as Triton allocates
    it, plus q) fits one SM's shared memory."""
    import itertools

    from ditron.cost_model import peaks_for
    smem = peaks_for(TARGET).smem_per_sm
    out = []
    for block_n, stages, warps in itertools.product(*SWEEP.values()):
        need = (stages - 1) * 2 * block_n * D * EB + fd.block_g(HQ, HKV) * D * EB
        if need <= smem:
            out.append({"block_n": block_n, "num_stages": stages, "num_warps": warps})
    return out


def build(directory: Path, worlds: list[int], modes: list[str], quick: bool, sweep: bool = False) -> None:
    op = fd.op(directory=directory, target=TARGET)
    directory.mkdir(parents=True, exist_ok=True)
    for W in worlds:
        for mode in modes:
            virtual = mode == "virtual"
            if not virtual and W == 1:
                continue
            for case in sweep_cases() if sweep else cases(quick):
                for variant in sweep_variants() if sweep else [{}]:
                    op.prebuild(W, virtual, case.shapes(W), DTYPE, TARGET, kv_len=case.L, **params(virtual),
                                **variant)
                print(f"built flash_decode {case.label} W={W} {mode}{' (sweep)' if sweep else ''}", flush=True)


def params(virtual: bool) -> dict:
    """The program's options: a real world's ends with a barrier (for CUDA-graph mode)."""
    return {} if virtual else {"barrier": True}


def sdpa(q, k, v):
    """torch's scaled_dot_product_attention of q [B, HQ, D] over k, v [B, HKV, L, D] (enable_gqa), held to its
    fused backends: the math backend would expand K and V to every query head (8x the cache)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        return F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)[:, :, 0]


def randn(shape, seed: int, scale: float = 1.0):
    """bf16 normal values made in place (no float32 copy of a many-GB cache)."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    t = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
    return t.normal_(0.0, scale, generator=g)


def footprint(case: Case, W: int, virtual: bool, flash: bool) -> int:
    """Bytes this process allocates for a case: the shards (every rank's in a virtual world), the baseline's whole
    cache (+ its gathered shards in a real world), flash-attn's copy in its layout."""
    shards = case.cache_bytes() * (1 if virtual else 1.0 / W) * fd.capacity(case.L, W) * W / case.L
    gathered = case.cache_bytes() * (1 if virtual or W == 1 else 2)
    return int(shards + gathered + (case.cache_bytes() if flash else 0))


def tensors(case: Case, W: int, ranks):
    """q (the same on every rank) and the shards of ``ranks`` (rank r's positions first, zeros after): q, {r: k},
    {r: v}, {r: (k, v) as the op takes them, [B * HKV, S, D]}."""
    B, L = case.B, case.L
    S = fd.capacity(L, W)
    lengths = fd.shard_lengths(L, W)
    q = randn((B, HQ, D), 7, 2.0)
    ks = {r: randn((B, HKV, S, D), 100 + r) for r in ranks}
    vs = {r: randn((B, HKV, S, D), 200 + r) for r in ranks}
    for r in ranks:
        ks[r][:, :, lengths[r]:].zero_()
        vs[r][:, :, lengths[r]:].zero_()
    return q, ks, vs, {r: (ks[r].view(B * HKV, S, D), vs[r].view(B * HKV, S, D)) for r in ranks}


def artifact(directory: Path, op, case: Case, W: int, v: bool, extra: dict, quick: bool = False) -> Path:
    path = directory / op.key(W, v, case.shapes(W), DTYPE, TARGET, {"kv_len": case.L, **extra})
    if not path.exists():
        raise SystemExit(f"no artifact for {case.label} W={W} {extra or ''} at {path}: build it with "
                         f"`python benchmarks/bench_flash_decode.py --build {directory} --world {W} "
                         f"--mode {'virtual' if v else 'real'}{' --quick' if quick else ''}`")
    return path


def call_op(op, env, q, flat, L: int, graph: bool, sync: bool, **extra):
    """One flash_decode call of every local rank; its outputs ([o, lse] per rank)."""
    if env.virtual:
        ranks = range(env.W)
        return op([q] * env.W, [flat[r][0] for r in ranks], [flat[r][1] for r in ranks], world=env.world, kv_len=L,
                  graph=graph, sync=sync, **extra)
    return [op(q, flat[env.rank][0], flat[env.rank][1], world=env.world, kv_len=L, graph=graph, sync=sync,
               **extra)]


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}", flush=True)


def finish(env) -> None:
    if not env.virtual:
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()


def run_sweep(directory: Path, virtual: int | None, graph: bool, iters: int | None) -> None:
    """--sweep --run: ditron_us of every tuning in sweep_variants() at sweep_cases()."""
    import torch
    env = bench_dist.make_env(virtual)
    W, v = env.W, env.virtual
    rows = []
    for case in sweep_cases():
        q, ks, vs, flat = tensors(case, W, range(W) if v else [env.rank])
        n_iter = iters or int(min(300, max(10, 30e-3 / max(case.cache_bytes() / W * (W if v else 1) / 4e12,
                                                            1e-6))))
        for variant in sweep_variants():
            extra = {**params(v), **variant}
            op = fd.op(directory=directory, target=TARGET)
            artifact(directory, op, case, W, v, extra)
            try:
                t, status = bench_dist.timed(env, lambda: call_op(op, env, q, flat, case.L, graph, False, **extra),
                                             n_iter), "ok"
            except Exception as err:  # noqa: BLE001 - a tuning the GPU cannot launch is a row, not the end
                t, status = None, f"{type(err).__name__}: {str(err).splitlines()[0][:80]}"
            op.close()
            rows.append({"case": case.label, "B": case.B, "L": case.L, "W": W, "world": "virtual" if v else "real",
                         **variant, "ditron_us": None if t is None else round(t, 2),
                         "kv_GBps": None if t is None else round(case.cache_bytes() * (1 if v else 1 / W)
                                                                 / (t * 1e-6) / 1e9, 1), "status": status})
            env.log(f"{case.label:18s} W={W} {variant}: {bench_dist.fmt(t, '9.1f')} us {status}")
        del q, ks, vs, flat
        torch.cuda.empty_cache()
    if env.rank == 0 and rows:
        write_csv(rows, HERE / "results" / f"flash_decode_sweep_{'virtual' if v else 'real'}_w{W}.csv")
    finish(env)


def run(directory: Path, virtual: int | None, quick: bool, graph: bool, iters: int | None) -> None:
    import torch
    try:
        from flash_attn import flash_attn_with_kvcache
    except ImportError:
        flash_attn_with_kvcache = None
    env = bench_dist.make_env(virtual)
    W, v = env.W, env.virtual
    op = fd.op(directory=directory, target=TARGET)
    rows = []
    for case in cases(quick):
        B, L = case.B, case.L
        extra = params(v)
        artifact(directory, op, case, W, v, extra, quick)
        free = torch.cuda.mem_get_info()[0]
        need = footprint(case, W, v, flash_attn_with_kvcache is not None)
        if env.max_over_ranks(need / free) > 0.9:     # the same decision on every rank
            env.log(f"{case.label:18s} W={W} skipped: needs ~{need / 2**30:.0f} GiB, {free / 2**30:.0f} GiB free")
            continue
        S = fd.capacity(L, W)
        lengths, starts = fd.shard_lengths(L, W), fd.shard_starts(L, W)
        ranks = range(W) if v else [env.rank]
        q, ks, vs, flat = tensors(case, W, ranks)
        whole_k = torch.empty(B, HKV, L, D, dtype=torch.bfloat16, device="cuda")
        whole_v = torch.empty_like(whole_k)
        gathered = None
        if not v and W > 1 and env.nccl:
            gathered = (torch.empty(W, B, HKV, S, D, dtype=torch.bfloat16, device="cuda"),
                        torch.empty(W, B, HKV, S, D, dtype=torch.bfloat16, device="cuda"))

        def ditron_call():
            call_op(op, env, q, flat, L, graph, False, **extra)

        def gather_into(whole, parts):
            for p, start, n in zip(parts, starts, lengths):
                whole[:, :, start:start + n].copy_(p[:, :, :n])

        def baseline_call():
            if W == 1:   # nothing to gather: the shard is the whole cache
                sdpa(q, ks[0], vs[0])
            elif v:      # every rank gathers all the shards, then attends: one after the other on the one GPU
                for _ in ranks:
                    gather_into(whole_k, [ks[p] for p in range(W)])
                    gather_into(whole_v, [vs[p] for p in range(W)])
                    sdpa(q, whole_k, whole_v)
            else:
                import torch.distributed as dist
                dist.all_gather_into_tensor(gathered[0], ks[env.rank])
                dist.all_gather_into_tensor(gathered[1], vs[env.rank])
                gather_into(whole_k, list(gathered[0]))
                gather_into(whole_v, list(gathered[1]))
                sdpa(q, whole_k, whole_v)

        # the whole cache, as the gather leaves it (each rank's shards are the same seeds on every rank)
        if v:
            gather_into(whole_k, [ks[p] for p in range(W)])
            gather_into(whole_v, [vs[p] for p in range(W)])
        else:
            for p, start, n in zip(range(W), starts, lengths):
                whole_k[:, :, start:start + n] = randn((B, HKV, S, D), 100 + p)[:, :, :n]
                whole_v[:, :, start:start + n] = randn((B, HKV, S, D), 200 + p)[:, :, :n]
        got = call_op(op, env, q, flat, L, False, True, **extra)
        want = sdpa(q, whole_k, whole_v)             # bf16 (a float32 reference of 128K keys would not fit)
        err = max(bench_dist.rel_err(g[0], want) for g in got)
        # about 30 ms of ditron calls at ~4 TB/s of KV reads per GPU (a virtual world reads every rank's)
        n_iter = iters or int(min(300, max(10, 30e-3 / max(case.cache_bytes() / W * (W if v else 1) / 4e12, 1e-6))))

        def sdpa_whole():
            sdpa(q, whole_k, whole_v)

        t_ditron = bench_dist.timed(env, ditron_call, n_iter)
        t_base = bench_dist.timed(env, baseline_call, n_iter) if (v or W == 1 or env.nccl) else None
        t_sdpa = bench_dist.timed(env, sdpa_whole, n_iter)
        t_flash = None
        if flash_attn_with_kvcache is not None:
            kc, vc = whole_k.transpose(1, 2).contiguous(), whole_v.transpose(1, 2).contiguous()   # [B, L, HKV, D]
            q4 = q[:, None]

            def flash_whole():
                flash_attn_with_kvcache(q4, kc, vc)

            t_flash = bench_dist.timed(env, flash_whole, n_iter)
            del kc, vc
        splits, programs = fd.plan(B, HKV, L, W, env.world.cta_budget(132) if v else 132)   # as UserOp plans
        read = case.cache_bytes() * (1 if v else lengths[env.rank] / L)     # the valid positions this GPU reads
        row = {"case": case.label, "B": B, "L": L, "W": W, "world": "virtual" if v else "real", "graph": graph,
               "iters": n_iter, "ditron_us": round(t_ditron, 2),
               "allgather_sdpa_us": None if t_base is None else round(t_base, 2),
               "sdpa_whole_us": round(t_sdpa, 2), "flash_whole_us": None if t_flash is None else round(t_flash, 2),
               "baseline_over_ditron": None if t_base is None else round(t_base / t_ditron, 3),
               "kv_GBps": round(read / (t_ditron * 1e-6) / 1e9, 1), "splits": splits, "programs": programs,
               "rel_err_vs_sdpa_bf16": f"{err:.2e}"}
        rows.append(row)
        env.log(f"{case.label:18s} W={W} ditron {t_ditron:9.1f} us ({row['kv_GBps']:7.1f} GB/s)  all_gather+SDPA "
                f"{bench_dist.fmt(t_base, '9.1f')} us  SDPA whole {t_sdpa:9.1f} us  flash whole "
                f"{bench_dist.fmt(t_flash, '9.1f')} us  splits {splits} programs {programs}  err {err:.1e}")
        op.close()                                   # its executors and graphs hold this case's tensors
        del ks, vs, flat, whole_k, whole_v, gathered, got
        torch.cuda.empty_cache()
    if env.rank == 0 and rows:
        out = HERE / "results" / f"flash_decode_{'virtual' if v else 'real'}_w{W}{'_quick' if quick else ''}"
        write_csv(rows, out.with_suffix(".csv"))
        plot(rows, out.with_suffix(".png"), f"{'virtual' if v else 'real'} world of {W}")
    finish(env)


def plot(rows: list[dict], path: Path, title: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not importable: skipped {path}")
        return
    series = [("ditron flash_decode", "ditron_us"), ("all_gather + SDPA", "allgather_sdpa_us"),
              ("SDPA, whole cache, one GPU", "sdpa_whole_us"), ("flash-attn, whole cache", "flash_whole_us")]
    series = [(n, k) for n, k in series if any(r.get(k) for r in rows)]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.8), 4.8))
    for i, (name, key) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(rows))]
        ax.bar(xs, [r[key] or 0 for r in rows], width, label=name)
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["case"] for r in rows], rotation=35, ha="right", fontsize=7)
    ax.set_ylabel("us per call (log)")
    ax.set_title(f"flash-decode, GQA 64/8 heads, head dim 128, bf16: {title}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", metavar="DIR", type=Path, help="compile the artifacts into DIR (needs ditron + MLIR)")
    p.add_argument("--world", type=int, nargs="+", default=[1, 2], help="with --build: world sizes")
    p.add_argument("--mode", choices=("virtual", "real", "both"), default="both", help="with --build")
    p.add_argument("--run", metavar="DIR", type=Path, help="benchmark with the artifacts in DIR (needs a GPU)")
    p.add_argument("--virtual", type=int, metavar="W", help="with --run: W ranks on this one GPU")
    p.add_argument("--quick", action="store_true", help="7 cases instead of 16")
    p.add_argument("--no-graph", action="store_true", help="the ditron op in eager mode")
    p.add_argument("--iters", type=int, help="calls per timing (default: from the case's size)")
    p.add_argument("--sweep", action="store_true", help="the kernel's tunings instead of the comparison")
    a = p.parse_args(argv)
    if a.build:
        build(a.build, a.world, ["virtual", "real"] if a.mode == "both" else [a.mode], a.quick, a.sweep)
    elif a.run and a.sweep:
        run_sweep(a.run, a.virtual, not a.no_graph, a.iters)
    elif a.run:
        run(a.run, a.virtual, a.quick, not a.no_graph, a.iters)
    else:
        p.error("give --build DIR or --run DIR")


if __name__ == "__main__":
    main()
