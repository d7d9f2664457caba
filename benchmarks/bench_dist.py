#!/usr/bin/env python3
"""Distributed ops benchmark: ditron's AG+GEMM, GEMM+RS, GEMM+AR and collectives (``ditron.ops``, compiled through
ditron-default) against the baselines a user would pick, all measured in the same run.

Two steps, because the GPU box has torch + triton but not the MLIR bindings:

    python benchmarks/bench_dist.py --build DIR --world 1 2 4 8 [--mode virtual|real|both] [--quick|--full]
        CPU box with ditron + MLIR: compile every case's artifact into DIR (ditron.ops.build)
    python benchmarks/bench_dist.py --run DIR --virtual W [--quick|--full] [--no-graph] [--only OP[,OP]]
        one GPU: W ranks in this process (ditron.World.virtual)
    torchrun --nproc-per-node W benchmarks/bench_dist.py --run DIR [--quick|--full]
        one process per GPU (ditron.World.from_torch)

Cases (docs/design.md §7; M, N, K are the whole problem, each rank holds 1/W of the sharded operand):
AG+GEMM y[M, N] = x[M, K] @ w[K, N], x's rows and w's columns sharded, (N, K) from LLaMA-3-8B (14336, 4096) and
LLaMA-3-70B (28672, 8192) [--full: also Qwen2-72B (29568, 8192), GPT-3 (49152, 12288)]; GEMM+RS and GEMM+AR
with K sharded, (N, K) = (4096, 14336), (8192, 28672) [--full: (8192, 29568), (12288, 49152)]; M in {128, 1024,
8192}; all-reduce of 8 KB, 128 KB, 2 MB, 16 MB (bf16); all-gather and reduce-scatter of 128 MB, all-to-all of 64
MB per rank. ``--quick``:
M in {128, 8192}, the 70B shapes, all-reduce of 8 KB and 2 MB. W = 1 runs the GEMMs only: ditron's overhead
against the plain GEMM (target <= 3 %).

Baselines, same run, same inputs: torch.matmul alone (cuBLAS; also gives F, the GEMM rate); a real world: NCCL
collective + cuBLAS (all_gather_into_tensor / reduce_scatter_tensor / all_reduce / all_to_all_single, not
overlapped) and PyTorch's symmetric-memory ops (fused_all_gather_matmul, fused_matmul_reduce_scatter, two_shot_all_reduce_ in place, and
for GEMM+AR: matmul into a symmetric buffer + two_shot_all_reduce_); a virtual world (one GPU, NCCL cannot run):
the same data movement (copy_) done first and the GEMM (torch.matmul) after it, not overlapped.

Ideal (docs/design.md §7), per rank, b = 2 bytes, F = measured GEMM FLOP/s of the rank's GEMM, B = link bandwidth
measured in this run (real: copy-engine pull from a peer's symmetric buffer, every rank at once; virtual: the
same-GPU copy bandwidth):
  AG+GEMM  T_comp = 2·M·K·(N/W)/F, T_comm = (W−1)/W·M·K·b/B, ideal = max(T_comp, T_comm + T_comp/W)
  GEMM+RS  T_comp = 2·M·(K/W)·N/F, T_comm = (W−1)/W·M·N·b/B, ideal = max(T_comp, T_comm) + min(T_comp, T_comm)/W
  GEMM+AR  as GEMM+RS with T_comm = 2·(W−1)/W·M·N·b/B (reduce-scatter + all-gather of the sums)
  all-gather / reduce-scatter / all-reduce / all-to-all: (W−1)/W · bytes · (1 | 1 | 2 | 1) / B, bytes = the whole
  tensor (all-to-all: one rank's input)
In a virtual world the W ranks share one GPU: each gets F/W and B/W (so T_comp is the whole GEMM's time on the GPU
and T_comm all ranks' traffic over the copy bandwidth). W = 1: ideal = T_comp.

ditron runs in CUDA-graph mode (``graph=True``: one graph replay per call, see ditron.runtime.graphs) unless
``--no-graph``; ditron_host_us is the host's time per call in that loop (enqueueing only: a call is host-bound
when it is close to ditron_us); the column ditron_eager_us times the same op in eager mode (the executor
interpreting the host program every call) in the same run. ``--passes PASS:OPTION=VALUE`` (repeatable, at --build
and --run alike) sets a pass option for every case: an ablation of one of the model's choices. ``--only OP[,OP]``
runs the rows of those ops (or whose label contains a given text, e.g. ``--only 8.0KB``).

Timing: CUDA events around a FIXED number of iterations (the same on every rank, derived from the case's size;
``--iters`` forces one), after warm-up, in REPS repetitions; each repetition takes the max over ranks (real worlds),
a row the median repetition. Output: a table on stdout,
benchmarks/results/dist_<virtual|real>_w<W>.csv and .png (matplotlib, if importable).
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")  # before CUDA starts: a virtual world has many streams

HERE = Path(__file__).resolve().parent
PASSES: dict[str, dict[str, str]] = {}  # --passes: pass options for every case (an ablation; same at build and run)
RESULTS = HERE / "results"
TARGET = "cuda:90"
EB = 2  # bf16

AG_SHAPES = {"llama3-8b": (14336, 4096), "llama3-70b": (28672, 8192)}
AG_FULL = {"qwen2-72b": (29568, 8192), "gpt3": (49152, 12288)}
RS_SHAPES = {"llama3-8b": (4096, 14336), "llama3-70b": (8192, 28672)}
RS_FULL = {"qwen2-72b": (8192, 29568), "gpt3": (12288, 49152)}
MS = (128, 1024, 8192)
AR_BYTES = (8 << 10, 128 << 10, 2 << 20, 16 << 20)
AR_COLS = 512
REPS = 5  # timed repetitions of every measurement; rows report the median
COLLECTIVE_ROWS, COLLECTIVE_COLS = 8192, 8192  # 128 MB all-gather / reduce-scatter


@dataclass(frozen=True)
class Case:
    """One benchmark row. M, N, K: the whole problem; model: where the shape comes from."""

    op: str
    M: int
    N: int
    K: int
    model: str = ""
    params: tuple = ()

    @property
    def label(self) -> str:
        if self.op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
            return f"{self.op} {human_bytes(self.M * self.N * EB)}"
        return f"{self.op} M={self.M} {self.model}"

    def shapes(self, W: int) -> list[tuple[int, int]]:
        """Each rank's input shapes."""
        M, N, K = self.M, self.N, self.K
        if self.op == "ag_gemm":
            return [(M // W, K), (K, N // W)]
        if self.op in ("gemm_rs", "gemm_ar"):
            return [(M, K // W), (K // W, N)]
        if self.op == "all_gather":
            return [(M // W, N)]
        return [(M, N)]

    def gemm_shape(self, W: int) -> tuple[int, int, int] | None:
        """(m, n, k) of one rank's GEMM."""
        if self.op == "ag_gemm":
            return self.M, self.N // W, self.K
        if self.op in ("gemm_rs", "gemm_ar"):
            return self.M, self.N, self.K // W
        return None

    def signature(self, W: int, virtual: bool, target: str = TARGET):
        from ditron import ops
        return ops.signature_for(self.op, self.shapes(W), "bf16", W, virtual, target, passes=PASSES or None,
                                 **dict(self.params))


def human_bytes(n: int) -> str:
    for unit, size in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def cases(W: int, size: str = "default") -> list[Case]:
    """The benchmark's cases for world size W; size: quick, default or full. Deterministic: build and run agree."""
    ms = (128, 8192) if size == "quick" else MS
    ag = {"llama3-70b": AG_SHAPES["llama3-70b"]} if size == "quick" else dict(AG_SHAPES, **(AG_FULL if size == "full"
                                                                                            else {}))
    rs = {"llama3-70b": RS_SHAPES["llama3-70b"]} if size == "quick" else dict(RS_SHAPES, **(RS_FULL if size == "full"
                                                                                            else {}))
    out = []
    for model, (n, k) in ag.items():
        out += [Case("ag_gemm", m, n, k, model) for m in ms]
    for model, (n, k) in rs.items():
        out += [Case("gemm_rs", m, n, k, model) for m in ms]
    if W == 1:  # one rank: the GEMMs alone (ditron's overhead against the plain GEMM); collectives are copies
        return out
    for model, (n, k) in rs.items():
        out += [Case("gemm_ar", m, n, k, model) for m in ms]
    sizes = (AR_BYTES[0], AR_BYTES[2]) if size == "quick" else AR_BYTES
    out += [Case("all_reduce", b // (AR_COLS * EB), AR_COLS, 0) for b in sizes]
    if size != "quick":
        out += [Case("all_gather", COLLECTIVE_ROWS, COLLECTIVE_COLS, 0), Case("reduce_scatter", COLLECTIVE_ROWS,
                                                                               COLLECTIVE_COLS, 0)]
        # MoE's token exchange: every rank sends 1/W of its rows to each rank (W x 16 MB at 8192 rows of 4096)
        out += [Case("all_to_all", COLLECTIVE_ROWS, COLLECTIVE_COLS // 2, 0)]
    return [c for c in out if all(s[0] >= 1 for s in c.shapes(W)) and c.M % W == 0]


# ================================================================================ build (CPU box, needs MLIR)

def build(directory: Path, worlds: list[int], modes: list[str], size: str, target: str,
          only: list[str] | None = None) -> None:
    from ditron import ops
    sigs = []
    for W in worlds:
        for mode in modes:
            sigs += [c.signature(W, mode == "virtual", target) for c in cases(W, size) if selected(c, only)]
    sigs = list(dict.fromkeys(sigs))
    start = time.perf_counter()
    failed = []
    for i, s in enumerate(sigs, 1):
        try:
            ops.build_one(s, directory)
            print(f"[{i}/{len(sigs)}] {s.key}", flush=True)
        except Exception as err:  # noqa: BLE001 - report every case that cannot be built, build the others
            failed.append(s.key)
            print(f"[{i}/{len(sigs)}] {s.key}: FAILED {type(err).__name__}: {str(err)[:400]}", flush=True)
    print(f"built {len(sigs) - len(failed)}/{len(sigs)} artifacts into {directory} in "
          f"{time.perf_counter() - start:.0f} s")
    if failed:
        sys.exit(1)


# ================================================================================ run (GPU box: torch + triton)

@dataclass
class Env:
    """The world this run measures in and how to reach the other ranks."""

    world: object
    virtual: bool
    W: int
    rank: int
    device: object
    nccl: bool = False            # a real world whose group is NCCL (one GPU per rank)
    graph: bool = True            # ditron in CUDA-graph mode (ditron_eager_us: eager, measured too)
    group_name: str | None = None
    notes: list = field(default_factory=list)
    host_us: float = 0.0          # host time per call of the last timed() loop (enqueue only): median repetition
    profile: int = 0              # --profile N: N calls of each case traced (kernels and copies per stream)
    out_dir: Path | None = None

    def barrier(self) -> None:
        import torch
        torch.cuda.synchronize()
        if not self.virtual:
            import torch.distributed as dist
            dist.barrier()

    def max_over_ranks(self, value: float) -> float:
        if self.virtual:
            return value
        import torch
        import torch.distributed as dist
        t = torch.tensor([value], dtype=torch.float64, device=self.device if self.nccl else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def log(self, text: str) -> None:
        if self.rank == 0:
            print(text, flush=True)


def make_env(virtual: int | None) -> Env:
    import torch

    from ditron.runtime.world import World
    if virtual is not None:
        world = World.virtual(virtual)
        return Env(world, True, virtual, 0, world.device)
    import torch.distributed as dist
    W = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    nccl = torch.cuda.device_count() >= W
    torch.cuda.set_device(local % torch.cuda.device_count())
    # NCCL refuses two ranks on one GPU: on a single GPU (TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1) use gloo,
    # which symmetric memory needs only for its rendezvous; the NCCL baseline is then not available
    dist.init_process_group("nccl" if nccl else "gloo", device_id=torch.device("cuda", torch.cuda.current_device())
                            if nccl else None)
    world = World.from_torch()
    env = Env(world, False, world.world_size, world.rank, world.device, nccl, group_name=dist.group.WORLD.group_name)
    if not nccl:
        env.notes.append(f"{W} ranks on {torch.cuda.device_count()} GPU(s): gloo group, no NCCL baseline")
    return env


def timed(env: Env, fn, iters: int, warmup: int = 3, reps: int = REPS) -> float:
    """Microseconds per call of fn: the median over ``reps`` repetitions of CUDA events around iters / reps calls
    (the same count on every rank), each the max over ranks. A mean over one loop let one rare stall of a rank
    (1-2 ms, seen on both ditron and torch in a profile of 300 calls) move a row by several microseconds. The
    warm-up runs half a repetition's calls (at least ``warmup``): the side timed first in a case, on a GPU and a
    host just back from other work, otherwise ran its small rows slower than the side timed after it."""
    import torch
    n = max(1, iters // reps)
    for _ in range(max(warmup, n // 2)):
        fn()
    times, hosts = [], []
    for _ in range(reps):
        env.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        host = time.perf_counter()
        for _ in range(n):
            fn()
        host = (time.perf_counter() - host) * 1e6 / n
        end.record()  # before the collectives below: they are not the calls' time
        end.synchronize()
        hosts.append(env.max_over_ranks(host))
        times.append(env.max_over_ranks(start.elapsed_time(end) * 1e3 / n))
    env.host_us = statistics.median(hosts)
    return statistics.median(times)


def timed_interleaved(env: Env, fns: dict, iters: int, rounds: int = 7, warmup: int = 3) -> dict:
    """Microseconds per call of each fn in ``fns`` (name -> fn), measured in ``rounds`` rounds that each time every
    fn once (CUDA events around iters / rounds calls, the max over ranks), the order rotated every round: a drift
    of the GPU's clocks during the run (seen as a 10 % spread between two timings of the same op a few hundred ms
    apart) then falls on every side alike. Returns name -> (median, min, max) over the rounds."""
    import torch
    n = max(1, iters // rounds)
    names = list(fns)
    for name in names:
        for _ in range(max(warmup, n // 2)):
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            env.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                fns[name]()
            end.record()
            end.synchronize()
            times[name].append(env.max_over_ranks(start.elapsed_time(end) * 1e3 / n))
    return {name: (statistics.median(t), min(t), max(t)) for name, t in times.items()}


def iterations(case: Case, W: int, virtual: bool, forced: int | None) -> int:
    """A fixed count from the case's size (so that every rank derives the same): about 50 ms of work by the
    model's peak numbers (a virtual world does every rank's work), 10..500."""
    if forced:
        return forced
    from ditron.cost_model import peaks_for
    p = peaks_for(TARGET)
    g = case.gemm_shape(W)
    est = 2.0 * g[0] * g[1] * g[2] / p.gemm_flops if g else case.M * case.N * EB / p.link_bw
    est = max(est * (W if virtual else 1), 10e-6)
    return int(min(500, max(10, 50e-3 / est)))


def rand(shape, seed: int, scale: float = 1.0):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=g, device="cuda") * scale).to(torch.bfloat16)


def rel_err(got, want) -> float:
    import torch
    return float(torch.linalg.norm(got.float() - want.float()) / max(float(torch.linalg.norm(want.float())), 1e-30))


def measure_link(env: Env, nbytes: int = 256 << 20) -> tuple[float, str]:
    """B, bytes/s: real: every rank pulls a peer's symmetric buffer (copy engine); virtual: same-GPU copy."""
    import torch
    if env.virtual or env.W == 1:
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        t = timed(env, lambda: dst.copy_(src), 20)
        return nbytes / (t * 1e-6), "same-GPU copy_"
    try:
        import torch.distributed._symmetric_memory as symm_mem
        buf = symm_mem.empty(nbytes, dtype=torch.uint8, device=env.device)
        handle = symm_mem.rendezvous(buf, env.group_name)
        peer = handle.get_buffer((env.rank + 1) % env.W, (nbytes,), torch.uint8)
        dst = torch.empty(nbytes, dtype=torch.uint8, device=env.device)
        t = timed(env, lambda: dst.copy_(peer), 20)
        handle.barrier()
        return nbytes / (t * 1e-6), "copy-engine pull from a peer's symmetric buffer"
    except Exception as err:  # noqa: BLE001 - fall back to the model's number, and say so
        from ditron.cost_model import peaks_for
        env.notes.append(f"link bandwidth not measured ({type(err).__name__}: {err}); the model's value is used")
        return peaks_for(TARGET).link_bw, "cost model (not measured)"


def ideal_us(case: Case, W: int, F: float, B: float, virtual: bool) -> float:
    """docs/design.md §7 (see the module doc), microseconds."""
    if virtual:
        F, B = F / W, B / W
    g = case.gemm_shape(W)
    t_comp = 2.0 * g[0] * g[1] * g[2] / F if g else 0.0
    if W == 1:
        return t_comp * 1e6
    f = (W - 1) / W
    if case.op == "ag_gemm":
        t_comm = f * case.M * case.K * EB / B
        return max(t_comp, t_comm + t_comp / W) * 1e6
    if case.op in ("gemm_rs", "gemm_ar"):
        t_comm = f * case.M * case.N * EB / B * (2 if case.op == "gemm_ar" else 1)
        return (max(t_comp, t_comm) + min(t_comp, t_comm) / W) * 1e6
    return f * case.M * case.N * EB * (2 if case.op == "all_reduce" else 1) / B * 1e6


class Inputs:
    """This rank's (real) or every rank's (virtual) inputs of a case, seeded by rank."""

    def __init__(self, env: Env, case: Case):
        self.per_rank = self.make(env, case, range(env.W) if env.virtual else [env.rank])

    @staticmethod
    def make(env: Env, case: Case, ranks) -> list[list]:
        shapes = case.shapes(env.W)
        k = case.gemm_shape(env.W)[2] if case.gemm_shape(env.W) else 1
        scale = 1.0 / math.sqrt(math.sqrt(k))
        return [[rand(s, 1000 * r + i, scale) for i, s in enumerate(shapes)] for r in ranks]

    def args(self, env: Env) -> list:
        """Positional tensor arguments for a ditron.ops call."""
        if env.virtual:
            return [list(col) for col in zip(*self.per_rank)]
        return list(self.per_rank[0])


# ---------------------------------------------------------------------------------------------- baselines

def virtual_baseline(env: Env, case: Case, xs: Inputs):
    """The same data movement (copy_) for every rank first, then every rank's GEMM: (fn, outputs)."""
    import torch
    W, per = env.W, xs.per_rank
    op = case.op
    if op == "ag_gemm":
        m = per[0][0].shape[0]
        gathered = [torch.empty(W * m, case.K, dtype=torch.bfloat16, device="cuda") for _ in range(W)]
        outs = [torch.empty(W * m, case.N // W, dtype=torch.bfloat16, device="cuda") for _ in range(W)]

        def fn():
            for r in range(W):
                for q in range(W):
                    gathered[r][q * m:(q + 1) * m].copy_(per[q][0])
            for r in range(W):
                torch.matmul(gathered[r], per[r][1], out=outs[r])
        return fn, outs
    if op == "all_to_all":  # part r of every rank's rows -> rank r, in rank order
        part = case.M // W
        outs = [torch.empty(case.M, case.N, dtype=torch.bfloat16, device="cuda") for _ in range(W)]

        def fn():
            for r in range(W):
                for q in range(W):
                    outs[r][q * part:(q + 1) * part].copy_(per[q][0][r * part:(r + 1) * part])
        return fn, outs
    if op == "all_gather":
        m = per[0][0].shape[0]
        outs = [torch.empty(W * m, case.N, dtype=torch.bfloat16, device="cuda") for _ in range(W)]

        def fn():
            for r in range(W):
                for q in range(W):
                    outs[r][q * m:(q + 1) * m].copy_(per[q][0])
        return fn, outs
    # reductions: (GEMM partials,) then each rank copies its rows of every rank's partial and sums them
    gemm = op in ("gemm_rs", "gemm_ar")
    rows = case.M if op in ("gemm_ar", "all_reduce") else case.M // W
    partials = [torch.empty(case.M, case.N, dtype=torch.bfloat16, device="cuda") for _ in range(W)] if gemm else \
        [p[0] for p in per]
    stage = torch.empty(W, rows, case.N, dtype=torch.bfloat16, device="cuda")
    outs = [torch.empty(rows, case.N, dtype=torch.bfloat16, device="cuda") for _ in range(W)]

    def fn():
        if gemm:
            for r in range(W):
                torch.matmul(per[r][0], per[r][1], out=partials[r])
        for r in range(W):
            lo = 0 if rows == case.M else r * rows
            for q in range(W):
                stage[q].copy_(partials[q][lo:lo + rows])
            torch.sum(stage, 0, out=outs[r])
    return fn, outs


def real_baselines(env: Env, case: Case, xs: Inputs) -> dict[str, tuple]:
    """{name: (fn, output)}: NCCL + cuBLAS (when the group is NCCL) and PyTorch's symmetric-memory ops."""
    import torch
    import torch.distributed as dist
    W, args = env.W, xs.per_rank[0]
    op, out = case.op, {}
    if env.nccl:
        if op == "ag_gemm":
            a, b = args
            g = torch.empty(case.M, case.K, dtype=torch.bfloat16, device="cuda")
            y = torch.empty(case.M, case.N // W, dtype=torch.bfloat16, device="cuda")

            def nccl_ag():
                dist.all_gather_into_tensor(g, a)
                torch.matmul(g, b, out=y)
            out["nccl+cublas"] = (nccl_ag, y)
        elif op in ("gemm_rs", "gemm_ar"):
            a, b = args
            p = torch.empty(case.M, case.N, dtype=torch.bfloat16, device="cuda")
            y = torch.empty(case.M // W, case.N, dtype=torch.bfloat16, device="cuda") if op == "gemm_rs" else p

            def nccl_reduce():
                torch.matmul(a, b, out=p)
                if op == "gemm_rs":
                    dist.reduce_scatter_tensor(y, p)
                else:
                    dist.all_reduce(p)
            out["nccl+cublas"] = (nccl_reduce, y)
        elif op == "all_reduce":
            x, y = args[0].clone(), args[0].clone()
            dist.all_reduce(y)  # the result to check; the timed calls reduce x in place, again and again
            out["nccl"] = (lambda: dist.all_reduce(x), y)
        elif op == "all_gather":
            y = torch.empty(case.M, case.N, dtype=torch.bfloat16, device="cuda")
            out["nccl"] = (lambda: dist.all_gather_into_tensor(y, args[0]), y)
        elif op == "reduce_scatter":
            y = torch.empty(case.M // W, case.N, dtype=torch.bfloat16, device="cuda")
            out["nccl"] = (lambda: dist.reduce_scatter_tensor(y, args[0]), y)
        elif op == "all_to_all":
            y = torch.empty(case.M, case.N, dtype=torch.bfloat16, device="cuda")
            out["nccl"] = (lambda: dist.all_to_all_single(y, args[0]), y)
    try:
        import torch.distributed._symmetric_memory as symm_mem
        name = env.group_name
        if op == "ag_gemm":
            a, b = args
            out["torch fused_all_gather_matmul"] = (
                lambda: torch.ops.symm_mem.fused_all_gather_matmul(a, [b], 0, name, return_A=False), None)
        elif op == "gemm_rs":
            a, b = args
            out["torch fused_matmul_reduce_scatter"] = (
                lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b, "sum", 0, name), None)
        elif op in ("gemm_ar", "all_reduce"):
            shape = (case.M, case.N)
            buf = symm_mem.empty(shape, dtype=torch.bfloat16, device=env.device)
            symm_mem.rendezvous(buf, name)
            if op == "gemm_ar":
                a, b = args

                def symm_ar():
                    torch.matmul(a, b, out=buf)
                    torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", name)
                out["matmul+torch two_shot_all_reduce_"] = (symm_ar, None)
            else:
                buf.copy_(args[0])
                out["torch two_shot_all_reduce_ (in place)"] = (
                    lambda: torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", name), None)
    except Exception as err:  # noqa: BLE001 - a torch without these ops: report the baseline as missing
        env.notes.append(f"{case.label}: PyTorch symmetric-memory baseline unavailable ({type(err).__name__}: "
                         f"{str(err)[:160]})")
    return out


# ---------------------------------------------------------------------------------------------- one case

def summarize_choices(path) -> str:
    from ditron import ops
    try:
        chosen = ops.choices(path)
    except Exception:  # noqa: BLE001 - an artifact built in the compile cache has no op.json nearby
        return ""
    out = []
    for c in chosen:
        if c["op"].endswith("matmul") and c.get("block_m"):
            sk = f" stream_k={c['stream_k']}" if c.get("stream_k") else ""
            out.append(f"gemm {c['block_m']}x{c['block_n']}x{c['block_k']} w{c['num_warps']} s{c['num_stages']} "
                       f"sms={c.get('sm_budget')}{sk}")
        elif not c["op"].endswith("matmul"):
            own = " own_first" if c.get("own_first") else ""
            out.append(f"{c['op'].split('.')[-1]} {c.get('algorithm') or ''}{own} engine={c.get('engine')} "
                       f"chunks={c.get('num_chunks')} comm_sms={c.get('comm_sms')}".replace("  ", " "))
    return "; ".join(out)


def run_case(env: Env, lib, case: Case, F_cache: dict, B: float, forced_iters: int | None) -> dict | None:
    import torch

    from ditron import ops
    W = env.W
    sig = case.signature(W, env.virtual, lib.default_target())
    iters = iterations(case, W, env.virtual, forced_iters)
    row = {"mode": "virtual" if env.virtual else "real", "world": W, "op": case.op, "model": case.model,
           "M": case.M, "N": case.N, "K": case.K, "bytes": case.M * case.N * EB if not case.K else "",
           "iters": iters}
    xs = Inputs(env, case)
    args = xs.args(env)
    fn = getattr(ops, case.op)
    kw = dict(case.params, **({"passes": PASSES} if PASSES else {}))
    try:
        lib.executable(sig)
    except ops.ArtifactMissingError as err:
        env.log(f"{case.label}: skipped, {str(err).split('. Build')[0]}")
        return None
    # correctness once, then the timed loop into fixed outputs (graph mode: one graph per tensor set, captured in
    # the warm-up calls of both pad parities)
    first = [t.clone() for t in fn(*args, env.world, library=lib, graph=env.graph, **kw)] if env.virtual else \
        fn(*args, env.world, library=lib, graph=env.graph, **kw).clone()
    outs = [t.clone() for t in first] if env.virtual else first.clone()

    def ditron_call():
        fn(*args, env.world, out=outs, sync=False, library=lib, graph=env.graph, **kw)
    row["graph"] = env.graph
    row["ditron_us"] = timed(env, ditron_call, iters)
    row["ditron_host_us"] = env.host_us
    lib.synchronize(env.world)
    if env.graph:
        def eager_call():
            fn(*args, env.world, out=outs, sync=False, library=lib, **kw)
        row["ditron_eager_us"] = timed(env, eager_call, iters)
        lib.synchronize(env.world)
    row["choices"] = summarize_choices(lib.path(sig)) if lib.path(sig) else ""
    if env.profile:
        profile_calls(env, case, ditron_call, env.profile)
        lib.synchronize(env.world)
    # cuBLAS alone: the rank's GEMM; F
    g = case.gemm_shape(W)
    if g:
        if g not in F_cache:
            a, b = rand((g[0], g[2]), 7), rand((g[2], g[1]), 8)
            c = torch.empty(g[0], g[1], dtype=torch.bfloat16, device="cuda")
            t = timed(env, lambda: torch.matmul(a, b, out=c), iters)
            F_cache[g] = (t, 2.0 * g[0] * g[1] * g[2] / (t * 1e-6))
            del a, b, c
        row["cublas_us"], F = F_cache[g]
        row["gemm_tflops"] = F / 1e12
    else:
        F = 1.0
    row["link_gbs"] = B / 1e9
    row["ideal_us"] = ideal_us(case, W, F, B, env.virtual) if (g or W > 1) else ""
    # baselines
    mine = first if env.virtual else [first]
    if env.virtual:
        bfn, bouts = virtual_baseline(env, case, xs)
        bfn()
        row["baseline"] = "copy_ then matmul (serial)" if g else \
            "copy_ + sum" if case.op in ("reduce_scatter", "all_reduce") else "copy_"
        row["baseline_us"] = timed(env, bfn, iters)
        row["rel_err"] = max(rel_err(m, w) for m, w in zip(mine, bouts))
    else:
        for name, (bfn, bout) in real_baselines(env, case, xs).items():
            try:
                bfn()
                torch.cuda.synchronize()
                if bout is not None and "nccl" in name:
                    row["rel_err"] = rel_err(first, bout)
                t = timed(env, bfn, iters)
            except Exception as err:  # noqa: BLE001 - a baseline that fails here fails on every rank alike
                env.notes.append(f"{case.label}: {name} failed ({type(err).__name__}: {str(err)[:160]})")
                continue
            key = "baseline" if "nccl" in name else "fused"
            row[key], row[f"{key}_us"] = name, t
        if "rel_err" not in row:  # no NCCL here: this rank's expected output from every rank's inputs
            everyone = Inputs.make(env, case, range(W))
            row["rel_err"] = rel_err(first, ops.reference(sig, everyone)[env.rank])
            del everyone
    if row.get("ideal_us"):
        row["frac_of_ideal"] = row["ideal_us"] / row["ditron_us"]
    for key in ("baseline", "fused"):
        if row.get(f"{key}_us"):
            row[f"vs_{key}"] = row[f"{key}_us"] / row["ditron_us"]
    if W == 1 and row.get("cublas_us"):
        row["overhead_vs_cublas"] = row["ditron_us"] / row["cublas_us"] - 1.0
    lib.release(sig)  # frees the executor's symmetric heap: the next case allocates its own
    return row


def profile_calls(env: Env, case: Case, call, n: int) -> None:
    """Trace n calls (each alone: a marker kernel before it, a synchronize after) with the CUDA profiler and write
    every kernel and copy of each call -- stream, name, start after the call's marker, duration, microseconds -- to
    profile_<case>_rank<r>.csv in the output folder; rank 0 prints the last call's."""
    import json
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile
    marker = torch.zeros(1, dtype=torch.float64, device="cuda")  # its fill kernel: FillFunctor<double>
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            marker.fill_(1.0)
            call()
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        prof.export_chrome_trace(f"{tmp}/trace.json")
        trace = json.load(open(f"{tmp}/trace.json"))
    events = sorted((e for e in trace.get("traceEvents", []) if e.get("ph") == "X"
                     and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
    rows, call_no, start = [], -1, 0.0
    for e in events:
        if "FillFunctor<double>" in e["name"]:
            call_no, start = call_no + 1, e["ts"] + e["dur"]
            continue
        if call_no >= 0:
            rows.append((call_no, e.get("args", {}).get("stream", ""), e["name"][:90], e["ts"] - start, e["dur"]))
    name = re.sub(r"[^A-Za-z0-9]+", "_", case.label).strip("_")
    env.out_dir.mkdir(parents=True, exist_ok=True)
    with open(env.out_dir / f"profile_{name}_rank{env.rank}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["call", "stream", "name", "start_us", "dur_us"])
        w.writerows((c, st, nm, f"{t0:.1f}", f"{d:.1f}") for c, st, nm, t0, d in rows)
    last = [r for r in rows if r[0] == call_no]
    env.log(f"  profile of {case.label}, rank 0, call {call_no} (us after its marker):")
    for _, st, nm, t0, d in last:
        env.log(f"    stream {st:>4} {t0:9.1f} {d:9.1f}  {nm}")


FIELDS = ["mode", "world", "op", "model", "M", "N", "K", "bytes", "iters", "graph", "ditron_us", "ditron_host_us",
          "ditron_eager_us",
          "cublas_us", "baseline",
          "baseline_us", "fused", "fused_us", "ideal_us", "frac_of_ideal", "vs_baseline", "vs_fused",
          "overhead_vs_cublas", "gemm_tflops", "link_gbs", "rel_err", "choices"]


def fmt(v, spec: str = ".1f") -> str:
    return format(v, spec) if isinstance(v, (int, float)) and v != "" else "-"


def report(env: Env, rows: list[dict], link_how: str, out_dir: Path, size: str) -> None:
    mode = "virtual" if env.virtual else "real"
    stem = f"dist_{mode}_w{env.W}" + ("_quick" if size == "quick" else "_full" if size == "full" else "")
    print(f"\n{mode} world, W = {env.W}; B = {rows[0]['link_gbs'] if rows else 0:.0f} GB/s ({link_how})")
    print(f"{'case':<34} {'ditron':>9} {'eager':>9} {'cuBLAS':>9} {'baseline':>9} {'fused':>9} {'ideal':>9} "
          f"{'of ideal':>8} {'vs base':>8} {'vs fused':>8} {'err':>8}   (µs per call, per rank; ditron "
          f"{'graph' if env.graph else 'eager'} mode)")
    for r in rows:
        label = Case(r["op"], r["M"], r["N"], r["K"], r["model"]).label
        print(f"{label:<34} {fmt(r.get('ditron_us')):>9} {fmt(r.get('ditron_eager_us')):>9} "
              f"{fmt(r.get('cublas_us')):>9} {fmt(r.get('baseline_us')):>9} "
              f"{fmt(r.get('fused_us')):>9} {fmt(r.get('ideal_us')):>9} {fmt(r.get('frac_of_ideal'), '.3f'):>8} "
              f"{fmt(r.get('vs_baseline'), '.2f'):>8} {fmt(r.get('vs_fused'), '.2f'):>8} "
              f"{fmt(r.get('rel_err'), '.1e'):>8}   {r.get('choices', '')}")
    over = [r for r in rows if "overhead_vs_cublas" in r]
    for r in over:
        print(f"W=1 overhead vs cuBLAS, {r['op']} M={r['M']} N={r['N']} K={r['K']}: "
              f"{100 * r['overhead_vs_cublas']:+.1f} % (target <= 3 %)")
    for note in env.notes:
        print(f"note: {note}")
    write_csv(out_dir / f"{stem}.csv", rows, FIELDS, f"{mode} world W={env.W}; B measured by {link_how}", env.notes)
    plot(rows, out_dir / f"{stem}.png", f"{mode} world, W = {env.W}")
    print(f"wrote {out_dir / (stem + '.csv')}")


def write_csv(path: Path, rows: list[dict], fields: list[str], what: str, notes: list[str]) -> None:
    """rows as CSV (the columns ``fields``), then a comment line: what was measured, and the run's notes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
        f.write(f"# {what}; {'; '.join(notes) if notes else 'no notes'}\n")


def pyplot(path: Path):
    """matplotlib's pyplot on the Agg backend, or None (said on stdout: ``path`` is skipped) where it is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not importable: skipped {path}")
        return None
    return plt


def plot(rows: list[dict], path: Path, title: str) -> None:
    plt = pyplot(path)
    if plt is None:
        return
    rows = [r for r in rows if r.get("ideal_us")]
    if not rows:
        return
    labels = [Case(r["op"], r["M"], r["N"], r["K"], r["model"]).label for r in rows]
    series = [("ditron", "ditron_us"), ("cuBLAS GEMM alone", "cublas_us"), ("baseline", "baseline_us"),
              ("PyTorch symm-mem", "fused_us")]
    series = [(n, k) for n, k in series if any(r.get(k) for r in rows)]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(9, len(rows) * 0.9), 4.8))
    for i, (name, key) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(rows))]
        ax.bar(xs, [r["ideal_us"] / r[key] if r.get(key) else 0 for r in rows], width, label=name)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=7)
    ax.set_ylabel("ideal time / measured time")
    ax.set_title(f"ditron.ops vs baselines, {title} (1.0 = docs/design.md §7 ideal)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def selected(case: Case, only: list[str] | None) -> bool:
    """Whether --ops/--only keep a case: its op is named, or its label contains one of the texts given."""
    return not only or case.op in only or any(t not in OPS_NAMES and t in case.label for t in only)


OPS_NAMES = ("ag_gemm", "gemm_rs", "gemm_ar", "all_gather", "reduce_scatter", "all_reduce", "all_to_all")


def run(directory: Path, virtual: int | None, size: str, out_dir: Path, forced_iters: int | None,
        only: list[str] | None, graph: bool = True, profile: int = 0) -> None:
    import torch

    from ditron import ops
    if not torch.cuda.is_available():
        sys.exit("bench_dist --run needs a CUDA GPU")
    env = make_env(virtual)
    env.graph, env.profile, env.out_dir = graph, profile, out_dir
    lib = ops.Library(directory)
    start = time.perf_counter()
    B, link_how = measure_link(env)
    env.log(f"{'virtual' if env.virtual else 'real'} world of {env.W} rank(s); link {B / 1e9:.0f} GB/s ({link_how})")
    rows, F_cache = [], {}
    for case in cases(env.W, size):
        if not selected(case, only):
            continue
        t0 = time.perf_counter()
        row = run_case(env, lib, case, F_cache, B, forced_iters)
        torch.cuda.empty_cache()  # the case's tensors are gone: give their memory back before the next one
        if row is not None:
            rows.append(row)
            eager = f" (eager {row['ditron_eager_us']:9.1f} µs)" if "ditron_eager_us" in row else ""
            env.log(f"  {case.label:<34} ditron {row['ditron_us']:9.1f} µs{eager}   "
                    f"({time.perf_counter() - t0:.1f} s)")
    lib.close()
    if env.rank == 0:
        report(env, rows, link_how, out_dir, size)
        print(f"total {time.perf_counter() - start:.0f} s")
    if not env.virtual:
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", metavar="DIR", help="compile the cases' artifacts into DIR (needs ditron + MLIR)")
    p.add_argument("--world", type=int, nargs="+", default=[1, 2, 4, 8], help="with --build: world sizes")
    p.add_argument("--mode", choices=("virtual", "real", "both"), default="both",
                   help="with --build: artifacts for virtual worlds (one GPU), real ones (torchrun), or both")
    p.add_argument("--target", default=TARGET, help="with --build: the GPU target")
    p.add_argument("--run", metavar="DIR", help="benchmark with the artifacts in DIR (needs a GPU)")
    p.add_argument("--virtual", type=int, metavar="W", help="with --run: W ranks on this one GPU (else torchrun's "
                   "world)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_const", dest="size", const="quick", help="a subset of the cases")
    size.add_argument("--full", action="store_const", dest="size", const="full", help="also Qwen2-72B and GPT-3")
    p.add_argument("--ops", nargs="+", help="only these ops")
    p.add_argument("--only", metavar="OP[,OP]", help="only these rows (at --build too): op names, or texts that the case "
                   "labels contain (comma-separated)")
    p.add_argument("--graph", action=argparse.BooleanOptionalAction, default=True,
                   help="with --run: ditron in CUDA-graph mode (default; --no-graph: eager only)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="with --run: trace N calls of each case (CUDA profiler): every kernel and copy per stream, "
                        "to profile_<case>_rank<r>.csv in --out; rank 0 prints the last call")
    p.add_argument("--iters", type=int, help="with --run: iterations per measurement (default: from the size)")
    p.add_argument("--out", default=str(RESULTS), help="where the CSV and PNG go")
    p.add_argument("--passes", action="append", default=[], metavar="PASS:OPTION=VALUE",
                   help="a pass option for every case, at --build and --run alike (e.g. "
                        "ditron-tile:reduce-scatter=one_launch): ablations of the model's choices")
    args = p.parse_args(argv)
    for item in args.passes:
        name, _, setting = item.partition(":")
        option, eq, value = setting.partition("=")
        if not (name and option and eq):
            p.error(f"--passes {item!r}: expected PASS:OPTION=VALUE")
        PASSES.setdefault(name, {})[option] = value
    size_name = args.size or "default"
    if not args.build and not args.run:
        p.error("give --build DIR (CPU box) or --run DIR (GPU box)")
    only = (args.ops or []) + [t.strip() for t in (args.only or "").split(",") if t.strip()]
    if args.build:
        modes = ["virtual", "real"] if args.mode == "both" else [args.mode]
        build(Path(args.build), args.world, modes, size_name, args.target, only or None)
    if args.run:
        run(Path(args.run), args.virtual, size_name, Path(args.out), args.iters, only or None, args.graph,
            args.profile)


if __name__ == "__main__":
    main()
