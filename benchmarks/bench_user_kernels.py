#!/usr/bin/env python3
"""User-written distributed kernels against ditron's built-ins, same shapes, same run: AG+GEMM written with the
device builder (examples/ag_gemm_user.py: copy-engine chunk pushes + a GEMM with per-tile waits: the GEMM template,
column user_us; the user @ditron.jit kernel ag_gemm_tiles, pointer loads, user_jit_us; its TMA twin
ag_gemm_tiles_tma, descriptor loads, user_jit_tma_us) beside the built-in ``ditron.ops.ag_gemm`` (compiled through
ditron-default, its algorithm chosen by the cost model) and ``torch.matmul`` of the gathered rows (the GEMM alone:
the floor of any AG+GEMM).

Two steps, because the GPU box has torch + triton but not the MLIR bindings:

    python benchmarks/bench_user_kernels.py --build DIR --world 1 2 [--mode virtual|real|both] [--quick]
        CPU box with ditron + MLIR: the user programs' artifacts (ditron.device Program.compile) and the built-in
        ops' (ditron.ops.build) into DIR
    python benchmarks/bench_user_kernels.py --run DIR --virtual W [--quick] [--no-graph]
        one GPU: W ranks in this process (ditron.World.virtual)
    torchrun --nproc-per-node W benchmarks/bench_user_kernels.py --run DIR [--quick] [--no-graph]
        one process per GPU (ditron.World.from_torch)

Cases: y[M, N] = x[M, K] @ w[K, N], x's rows and w's columns sharded over W ranks, (N, K) from LLaMA-3-8B (14336,
4096) and LLaMA-3-70B (28672, 8192), M in {1024, 4096, 8192} (--quick: 70B, M in {1024, 8192}); the user program
pushes its shard in the chunks the cost model picks (ditron.tiling.ag_gemm_chunk_rows); its @ditron.jit GEMM takes the tiles ditron-tile's cost model picks for the gathered
GEMM on its SM budget (``ditron.tiling.gemm_config``, column jit_tiles) and is specialised as triton.jit would be
(tt.divisibility = 16 on its aligned pointers and 16-divisible sizes). In a virtual world the user GEMM gets the share of SMs one rank may hold
(World.cta_budget), as ditron.ops gives its own. Timing (bench_dist.timed_interleaved): ROUNDS rounds, each
timing every side once (CUDA events around a fixed number of calls, the max over ranks) in an order rotated every
round, the median of the rounds per side (the *_spread_us columns: max - min over the rounds); both sides in
CUDA-graph mode unless --no-graph. (Timing the sides one after the other let a drift of the GPU's clocks show as a
9 % gap between identical GEMM records at W = 1, M = 8192, within the 10 % spread of two timings of the built-in.)
Output: a table, benchmarks/results/user_kernels_<virtual|real>_w<W>.csv, and the ratio user / built-in per row
(the acceptance goal: within 1.05).
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

import ag_gemm_user  # noqa: E402
import bench_dist  # noqa: E402

ROUNDS = 7  # timing rounds per case (bench_dist.timed_interleaved)

TARGET = "cuda:90"
NUM_SMS = 132
GEMMS = ("template", "jit", "jit_tma")  # the user program's GEMM: the built-in template with per-tile waits, or a
# user kernel (pointer loads, or TMA loads through descriptors made in the kernel)


@dataclass(frozen=True)
class Case:
    M: int
    N: int
    K: int

    @property
    def label(self) -> str:
        return f"ag_gemm M={self.M} N={self.N} K={self.K}"

    def shapes(self, W: int) -> tuple[tuple[int, int], tuple[int, int]]:
        return (self.M // W, self.K), (self.K, self.N // W)

    def user_name(self, W: int, virtual: bool, gemm: str = "template") -> str:
        kind = "" if gemm == "template" else f"_{gemm}"
        return f"user_ag_gemm{kind}_w{W}{'v' if virtual else 'r'}_{self.M}x{self.N}x{self.K}"

    @staticmethod
    def budget(W: int, virtual: bool) -> int:
        if virtual:  # a virtual world keeps a copy reserve of SMs, also of one rank
            from ditron.runtime.world import World
            return World(W, None, None).cta_budget(NUM_SMS)
        return NUM_SMS

    def user_program(self, W: int, virtual: bool, gemm: str = "template"):
        return ag_gemm_user.build(W, self.shapes(W), "bf16", sm_budget=self.budget(W, virtual), target=TARGET,
                                  gemm=gemm)

    def jit_tiles(self, W: int, virtual: bool) -> str:
        """The user GEMM's tiles (gemm="jit"): the cost model's choice for the gathered GEMM on its SM budget
        (ditron.tiling.gemm_config, as examples/jit_kernels.gemm_tiling asks it; no MLIR needed)."""
        import ditron.tiling
        (m, k), (_, n) = self.shapes(W)
        c = ditron.tiling.gemm_config(W * m, n, k, "bf16", TARGET, sms=self.budget(W, virtual))
        return f"{c.block_m}x{c.block_n}x{c.block_k} g{c.group_m} w{c.num_warps} s{c.num_stages}"

    def signature(self, W: int, virtual: bool):
        from ditron import ops
        return ops.signature_for("ag_gemm", self.shapes(W), "bf16", W, virtual, TARGET)


def cases(quick: bool) -> list[Case]:
    shapes = [(28672, 8192)] if quick else [(14336, 4096), (28672, 8192)]
    ms = (1024, 8192) if quick else (1024, 4096, 8192)
    return [Case(M, N, K) for N, K in shapes for M in ms]


def build(directory: Path, worlds: list[int], modes: list[str], quick: bool) -> None:
    from ditron import ops
    directory.mkdir(parents=True, exist_ok=True)
    for W in worlds:
        for mode in modes:
            virtual = mode == "virtual"
            if not virtual and W == 1:
                continue
            for case in cases(quick):
                for gemm in GEMMS:
                    out = directory / case.user_name(W, virtual, gemm)
                    if not out.exists():
                        case.user_program(W, virtual, gemm).compile(TARGET, out_dir=out, cache=False,
                                                                    keep_stages=False)
                ops.build([case.signature(W, virtual)], directory)
                print(f"built {case.label} W={W} {mode}", flush=True)


def run(directory: Path, virtual: int | None, quick: bool, graph: bool, iters: int | None) -> None:
    import torch

    import ditron
    from ditron import ops
    env = bench_dist.make_env(virtual)
    W, v = env.W, env.virtual
    lib = ops.Library(directory, target=TARGET, compile=False)
    rows = []
    for case in cases(quick):
        (m, k), (_, n) = case.shapes(W)
        ranks = range(W) if v else [env.rank]
        xs = [[bench_dist.rand((m, k), 1 + r, 0.5), bench_dist.rand((k, n), 101 + r, 0.05)] for r in ranks]
        exe = ditron.load(directory / case.user_name(W, v))
        ex = exe.executor(env.world, graph=graph)
        jit_exe = ditron.load(directory / case.user_name(W, v, "jit"))
        jit_ex = jit_exe.executor(env.world, graph=graph)
        tma_exe = ditron.load(directory / case.user_name(W, v, "jit_tma"))
        tma_ex = tma_exe.executor(env.world, graph=graph)
        user_in = xs if v else xs[0]
        builtin_a = [x[0] for x in xs] if v else xs[0][0]
        builtin_b = [x[1] for x in xs] if v else xs[0][1]
        got_user = ex.run(user_in)
        got_builtin = ops.ag_gemm(builtin_a, builtin_b, env.world, library=lib, graph=graph)
        mine = got_user[0][0] if v else got_user[0]
        theirs = got_builtin[0] if v else got_builtin
        err = bench_dist.rel_err(mine, theirs)
        got_jit = jit_ex.run(user_in)
        err_jit = bench_dist.rel_err(got_jit[0][0] if v else got_jit[0], theirs)
        got_tma = tma_ex.run(user_in)
        err_tma = bench_dist.rel_err(got_tma[0][0] if v else got_tma[0], theirs)
        gathered = torch.empty(case.M, k, dtype=torch.bfloat16, device="cuda")
        n_iter = iters or max(10, min(300, int(2e-2 / max(2.0 * case.M * case.K * case.N / W / 7e14, 1e-6))))

        def user_call():
            ex.run(user_in, sync=False)

        def jit_call():
            jit_ex.run(user_in, sync=False)

        def tma_call():
            tma_ex.run(user_in, sync=False)

        def builtin_call():
            ops.ag_gemm(builtin_a, builtin_b, env.world, library=lib, graph=graph, sync=False)

        def gemm_call():  # the GEMM of every local rank, no gather: the floor
            for x in xs:
                torch.matmul(gathered, x[1])

        timing = bench_dist.timed_interleaved(env, {"builtin": builtin_call, "user": user_call, "jit": jit_call,
                                                    "jit_tma": tma_call, "gemm": gemm_call}, max(n_iter, 2 * ROUNDS), rounds=ROUNDS)
        t_builtin, t_user, t_jit, t_tma, t_gemm = (timing[k][0] for k in ("builtin", "user", "jit", "jit_tma",
                                                                           "gemm"))
        lib.synchronize(env.world)
        ex.synchronize()
        jit_ex.synchronize()
        tma_ex.synchronize()
        builtin = t_builtin
        row = {"case": case.label, "W": W, "world": "virtual" if v else "real", "graph": graph, "iters": n_iter,
               "user_us": round(t_user, 2), "builtin_us": round(builtin, 2),
               "builtin_spread_us": round(timing["builtin"][2] - timing["builtin"][1], 2),
               "user_spread_us": round(timing["user"][2] - timing["user"][1], 2), "gemm_us": round(t_gemm, 2),
               "user_over_builtin": round(t_user / builtin, 4), "rel_err_vs_builtin": f"{err:.2e}",
               "user_jit_us": round(t_jit, 2), "user_jit_over_builtin": round(t_jit / builtin, 4),
               "jit_rel_err_vs_builtin": f"{err_jit:.2e}", "user_jit_tma_us": round(t_tma, 2),
               "user_jit_tma_over_builtin": round(t_tma / builtin, 4), "jit_tma_rel_err_vs_builtin": f"{err_tma:.2e}",
               "jit_spread_us": round(timing["jit"][2] - timing["jit"][1], 2),
               "jit_tma_spread_us": round(timing["jit_tma"][2] - timing["jit_tma"][1], 2), "jit_tiles": case.jit_tiles(W, v),
               "builtin_choice": bench_dist.summarize_choices(lib.path(case.signature(W, v)))}
        rows.append(row)
        env.log(f"{case.label:36s} W={W} user {t_user:9.1f} us  user-jit {t_jit:9.1f} us  user-jit-tma "
                f"{t_tma:9.1f} us  built-in {builtin:9.1f} us  (x{t_user / builtin:.3f}, jit x{t_jit / builtin:.3f}, "
                f"jit-tma x{t_tma / builtin:.3f})  gemm {t_gemm:9.1f} us  err {err:.1e} / {err_jit:.1e} / "
                f"{err_tma:.1e}")
        exe.close()
        jit_exe.close()
        tma_exe.close()
    lib.close()
    if env.rank == 0 and rows:
        out = HERE / "results" / f"user_kernels_{'virtual' if v else 'real'}_w{W}{'' if graph else '_eager'}.csv"
        out.parent.mkdir(exist_ok=True)
        with open(out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {out}", flush=True)
    if not v:
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", metavar="DIR", type=Path, help="compile the artifacts into DIR (needs ditron + MLIR)")
    p.add_argument("--world", type=int, nargs="+", default=[1, 2], help="with --build: world sizes")
    p.add_argument("--mode", choices=("virtual", "real", "both"), default="both", help="with --build")
    p.add_argument("--run", metavar="DIR", type=Path, help="benchmark with the artifacts in DIR (needs a GPU)")
    p.add_argument("--virtual", type=int, metavar="W", help="with --run: W ranks on this one GPU")
    p.add_argument("--quick", action="store_true", help="the 70B shapes at M = 1024 and 8192 only")
    p.add_argument("--no-graph", action="store_true", help="eager executors on both sides")
    p.add_argument("--iters", type=int, help="calls per timing (default: from the case's size)")
    a = p.parse_args(argv)
    if a.build:
        build(a.build, a.world, ["virtual", "real"] if a.mode == "both" else [a.mode], a.quick)
    elif a.run:
        run(a.run, a.virtual, a.quick, not a.no_graph, a.iters)
    else:
        p.error("give --build DIR or --run DIR")


if __name__ == "__main__":
    main()
