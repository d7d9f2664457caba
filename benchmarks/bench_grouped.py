#!/usr/bin/env python3
"""Grouped GEMM (MoE experts) benchmark: ditron's grouped_matmul (a task program through ditron-default and
ditron.compile, run as a CUDA-graph replay) against torch on one GPU, same inputs, same run: a loop of torch.matmul,
one per expert (what a model without a grouped kernel runs), and torch._grouped_mm where this torch has it.

    python benchmarks/bench_grouped.py --build [DIR]   # CPU box with ditron + MLIR (default DIR build/grouped_bench)
    python benchmarks/bench_grouped.py --run [DIR]     # GPU box, torch + triton only

Shapes: Mixtral-8x7B's expert GEMMs (w1: K = 4096, N = 14336; w2: K = 14336, N = 4096), 8 experts, T tokens in
{256, 2048, 16384} routed unevenly (each expert's share drawn at random, fixed seed; the sizes sum to T).
Timing: CUDA events around ITERS back-to-back calls after a warm-up, REPS repetitions, the median. Output: a table
and benchmarks/results/grouped_gemm.csv.
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DIR = HERE.parent / "build" / "grouped_bench"
RESULTS = HERE / "results"
EXPERTS = 8
SHAPES = {"w1": (4096, 14336), "w2": (14336, 4096)}
TOKENS = (256, 2048, 16384)
ITERS, REPS = 20, 7


def _name(t: int, k: int, n: int) -> str:
    return f"gmm_t{t}_k{k}_n{n}_e{EXPERTS}"


def _text(t: int, k: int, n: int) -> str:
    x, w, g, y = f"tensor<{t}x{k}xbf16>", f"tensor<{EXPERTS}x{k}x{n}xbf16>", f"tensor<{EXPERTS}xi32>", \
        f"tensor<{t}x{n}xbf16>"
    return (f"module {{\n  func.func @{_name(t, k, n)}(%x: {x}, %w: {w}, %g: {g}) -> {y} {{\n"
            f'    %y = "ditron_task.grouped_matmul"(%x, %w, %g) : ({x}, {w}, {g}) -> {y}\n'
            f"    return %y : {y}\n  }}\n}}\n")


def cases():
    return [(which, t, k, n) for which, (k, n) in SHAPES.items() for t in TOKENS]


def _compile(text: str, out_dir: Path, tile: str) -> None:
    """ditron-default with ditron-tile's options ``tile`` (e.g. 'block-m=128 block-n=256'), then ditron.compile."""
    import ditron
    from ditron.api import TO_CORE_PIPELINE
    from ditron.dialects import ditron_context
    from ditron.dialects.context import parse_module
    from ditron.passes.registry import PIPELINES, parse_pipeline
    pipeline = ",".join(f"{p}{{{tile}}}" if p == "ditron-tile" and tile else p for p in PIPELINES[TO_CORE_PIPELINE])
    with ditron_context():
        module = parse_module(text)
        module.operation.attributes["ditron.target"] = __import__("mlir").ir.StringAttr.get("cuda:90")
        for p in parse_pipeline(pipeline):
            p.run(module)
        ditron.compile(module, target="cuda:90", out_dir=out_dir, cache=False)
        del module


def build(directory: Path, tiles: list[str]) -> None:
    built = []
    for _, t, k, n in cases():
        for tile in tiles:
            _compile(_text(t, k, n), directory / (_name(t, k, n) + _suffix(tile)), tile)
            print(f"built {_name(t, k, n)}{_suffix(tile)}")
        built.append(_name(t, k, n))
    (directory / "cases.json").write_text(json.dumps({"cases": cases(), "tiles": tiles}) + "\n")


def _suffix(tile: str) -> str:
    return "" if not tile else "-" + tile.replace(" ", "_").replace("=", "")


def _median_us(fn) -> float:
    """The median over REPS repetitions of bench_gemm.warm_us (CUDA events around ITERS back-to-back calls)."""
    from bench_gemm import warm_us  # benchmarks/ is on the path
    return statistics.median(warm_us(fn, ITERS, blocks=1) for _ in range(REPS))


def run(directory: Path, out: Path) -> None:
    import torch

    import ditron
    from ditron.runtime.world import World
    world = World.virtual(1)
    rows = []
    spec = json.loads((directory / "cases.json").read_text())
    for (which, t, k, n), tile in [(c, tile) for c in spec["cases"] for tile in spec["tiles"]]:
        gen = torch.Generator(device="cuda").manual_seed(t + k)
        x = torch.randn(t, k, generator=gen, device="cuda").to(torch.bfloat16)
        w = (torch.randn(EXPERTS, k, n, generator=gen, device="cuda") / k ** 0.5).to(torch.bfloat16)
        share = torch.rand(EXPERTS, generator=gen, device="cuda") + 0.25
        sizes = (share / share.sum() * t).floor().to(torch.int32)
        sizes[-1] += t - int(sizes.sum())
        bounds = [0] + torch.cumsum(sizes, 0).tolist()
        y_ditron = torch.empty(t, n, dtype=torch.bfloat16, device="cuda")
        y_loop = torch.empty(t, n, dtype=torch.bfloat16, device="cuda")
        exe = ditron.load(directory / (_name(t, k, n) + _suffix(tile)))
        bound = exe.executor(world, graph=True).bind([[x, w, sizes]], [[y_ditron]])

        def loop():
            for e in range(EXPERTS):
                if bounds[e + 1] > bounds[e]:
                    torch.matmul(x[bounds[e]:bounds[e + 1]], w[e], out=y_loop[bounds[e]:bounds[e + 1]])

        offs = torch.cumsum(sizes, 0).to(torch.int32)
        grouped_mm = getattr(torch, "_grouped_mm", None)
        row = {"expert_gemm": which, "T": t, "K": k, "N": n, "E": EXPERTS, "tile": tile or "model",
               "sizes": " ".join(map(str, sizes.tolist()))}
        row["ditron_us"] = _median_us(lambda: bound(sync=False))
        row["loop_us"] = _median_us(loop)
        loop()
        bound(sync=True)
        ref = y_loop.float()
        row["rel_err"] = float((y_ditron.float() - ref).abs().max() / max(float(ref.abs().max()), 1e-6))
        row["grouped_mm_us"] = ""
        if grouped_mm is not None:
            try:
                y_mm = grouped_mm(x, w, offs=offs)
                row["grouped_mm_us"] = _median_us(lambda: grouped_mm(x, w, offs=offs))
                row["grouped_mm_rel_err"] = float((y_mm.float() - ref).abs().max() / max(float(ref.abs().max()),
                                                                                          1e-6))
            except (RuntimeError, TypeError) as err:
                row["grouped_mm_note"] = f"{type(err).__name__}: {str(err)[:120]}"
        flops = 2.0 * t * k * n
        row["ditron_tflops"] = flops / row["ditron_us"] / 1e6
        row["vs_loop"] = row["loop_us"] / row["ditron_us"]
        if row["grouped_mm_us"]:
            row["vs_grouped_mm"] = row["grouped_mm_us"] / row["ditron_us"]
        rows.append(row)
        print(f"{which} T={t:6d} K={k:5d} N={n:5d} {tile or 'model':<40} ditron {row['ditron_us']:9.1f} us ({row['ditron_tflops']:5.0f} "
              f"TFLOP/s)  loop {row['loop_us']:9.1f}  grouped_mm {row['grouped_mm_us'] or '-':>9}  "
              f"vs loop {row['vs_loop']:.2f}  err {row['rel_err']:.1e}", flush=True)
        exe.close()
    out.mkdir(parents=True, exist_ok=True)
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(out / "grouped_gemm.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out / 'grouped_gemm.csv'}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", nargs="?", const=DEFAULT_DIR, type=Path, help="compile the cases (needs MLIR)")
    p.add_argument("--run", nargs="?", const=DEFAULT_DIR, type=Path, help="time them (needs a GPU)")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--tile", action="append", default=None,
                   help="with --build: ditron-tile options of a variant (repeatable; '' = the model's choice)")
    args = p.parse_args(argv)
    if args.build:
        build(args.build, args.tile or [""])
    if args.run:
        run(args.run, args.out)
    if not args.build and not args.run:
        p.print_help()
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
