#!/usr/bin/env python3
"""Grouped GEMM (MoE experts) benchmark: ditron's grouped_matmul (a task program through ditron-default and
ditron.compile, run as a CUDA-graph replay) against torch on one GPU, same inputs, same run: a loop of torch.matmul,
one per expert (what a model without a grouped kernel runs), and torch._grouped_mm where this torch has it.

    python benchmarks/bench_grouped.py --build [DIR]   # CPU box with ditron + MLIR (default DIR build/grouped_bench)
    python benchmarks/bench_grouped.py --run [DIR]     # GPU box, torch + triton only

Shapes: the expert GEMMs of Mixtral-8x7B (8 experts; w1 = gate and up: K = 4096, N = 14336; w2: K = 14336,
N = 4096), Qwen3-235B-A22B (128 experts, w1: 4096 -> 3072, w2: 1536 -> 4096) and DeepSeek-V3 (the 32 experts of
one rank at EP = 8, w1: 7168 -> 4096, w2: 2048 -> 7168); T tokens in {256, 2048, 16384, 32768} (``--quick``:
256 and 16384); two routings of the same compiled kernel (groups are data): uneven (each expert's share drawn at
random, fixed seed) and skewed (one expert takes ten times the share of the others, half the experts get none).
Timing: CUDA events around ITERS back-to-back calls after a warm-up, REPS repetitions, the median. Output: a table,
benchmarks/results/grouped_gemm.csv and grouped_gemm.png (if matplotlib is importable).
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
SHAPES = {"mixtral_w1": (8, 4096, 14336), "mixtral_w2": (8, 14336, 4096), "qwen3_w1": (128, 4096, 3072),
          "qwen3_w2": (128, 1536, 4096), "dsv3_w1": (32, 7168, 4096), "dsv3_w2": (32, 2048, 7168)}
TOKENS = (256, 2048, 16384, 32768)
QUICK_TOKENS = (256, 16384)
ROUTINGS = ("uneven", "skewed")
ITERS, REPS = 10, 5


def _name(t: int, e: int, k: int, n: int) -> str:
    return f"gmm_t{t}_k{k}_n{n}_e{e}"


def _text(t: int, e: int, k: int, n: int) -> str:
    x, w, g, y = f"tensor<{t}x{k}xbf16>", f"tensor<{e}x{k}x{n}xbf16>", f"tensor<{e}xi32>", f"tensor<{t}x{n}xbf16>"
    return (f"module {{\n  func.func @{_name(t, e, k, n)}(%x: {x}, %w: {w}, %g: {g}) -> {y} {{\n"
            f'    %y = "ditron_task.grouped_matmul"(%x, %w, %g) : ({x}, {w}, {g}) -> {y}\n'
            f"    return %y : {y}\n  }}\n}}\n")


def cases(tokens=TOKENS):
    return [(which, t, e, k, n) for which, (e, k, n) in SHAPES.items() for t in tokens]


def routing(kind: str, e: int, t: int, gen):
    """Group sizes summing to t: 'uneven' shares drawn at random, 'skewed' one expert ten times the others' share
    and half the experts empty."""
    import torch
    if kind == "uneven":
        share = torch.rand(e, generator=gen, device="cuda") + 0.25
    else:
        share = torch.zeros(e, device="cuda")
        share[: max(1, e // 2)] = 1.0
        share[0] = 10.0
    sizes = (share / share.sum() * t).floor().to(torch.int32)
    sizes[0] += t - int(sizes.sum())
    return sizes


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


def build(directory: Path, tiles: list[str], tokens=TOKENS) -> None:
    for _, t, e, k, n in cases(tokens):
        for tile in tiles:
            _compile(_text(t, e, k, n), directory / (_name(t, e, k, n) + _suffix(tile)), tile)
            print(f"built {_name(t, e, k, n)}{_suffix(tile)}", flush=True)
    (directory / "cases.json").write_text(json.dumps({"cases": cases(tokens), "tiles": tiles}) + "\n")


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
    for (which, t, e, k, n), tile in [(c, tile) for c in spec["cases"] for tile in spec["tiles"]]:
        gen = torch.Generator(device="cuda").manual_seed(t + k)
        x = torch.randn(t, k, generator=gen, device="cuda").to(torch.bfloat16)
        w = (torch.randn(e, k, n, generator=gen, device="cuda") / k ** 0.5).to(torch.bfloat16)
        exe = ditron.load(directory / (_name(t, e, k, n) + _suffix(tile)))
        for kind in ROUTINGS:
            sizes = routing(kind, e, t, gen)
            rows.append(_time_case(exe, world, which, kind, tile, x, w, sizes))
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
    _plot(rows, out / "grouped_gemm.png")


def _time_case(exe, world, which, kind, tile, x, w, sizes) -> dict:
    import torch
    (t, k), (e, _, n) = x.shape, w.shape
    bounds = [0] + torch.cumsum(sizes, 0).tolist()
    y_ditron = torch.empty(t, n, dtype=torch.bfloat16, device="cuda")
    y_loop = torch.empty(t, n, dtype=torch.bfloat16, device="cuda")
    bound = exe.executor(world, graph=True).bind([[x, w, sizes]], [[y_ditron]])

    def loop():
        for g in range(e):
            if bounds[g + 1] > bounds[g]:
                torch.matmul(x[bounds[g]:bounds[g + 1]], w[g], out=y_loop[bounds[g]:bounds[g + 1]])

    offs = torch.cumsum(sizes, 0).to(torch.int32)
    grouped_mm = getattr(torch, "_grouped_mm", None)
    row = {"expert_gemm": which, "T": t, "K": k, "N": n, "E": e, "routing": kind, "tile": tile or "model",
           "empty_experts": int((sizes == 0).sum())}
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
            row["grouped_mm_rel_err"] = float((y_mm.float() - ref).abs().max() / max(float(ref.abs().max()), 1e-6))
        except (RuntimeError, TypeError) as err:
            row["grouped_mm_note"] = f"{type(err).__name__}: {str(err)[:120]}"
    row["ditron_tflops"] = 2.0 * t * k * n / row["ditron_us"] / 1e6
    row["vs_loop"] = row["loop_us"] / row["ditron_us"]
    if row["grouped_mm_us"]:
        row["vs_grouped_mm"] = row["grouped_mm_us"] / row["ditron_us"]
    print(f"{which:<10} T={t:6d} {kind:<6} {tile or 'model':<10} ditron {row['ditron_us']:9.1f} us "
          f"({row['ditron_tflops']:5.0f} TFLOP/s)  loop {row['loop_us']:9.1f}  grouped_mm "
          f"{row['grouped_mm_us'] if row['grouped_mm_us'] == '' else round(row['grouped_mm_us'], 1)!s:>9}  "
          f"vs loop {row['vs_loop']:.2f}  vs grouped_mm {row.get('vs_grouped_mm', float('nan')):.2f}  "
          f"err {row['rel_err']:.1e}", flush=True)
    return row


def _plot(rows, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = [r for r in rows if r["tile"] == "model"]
    labels = [f"{r['expert_gemm']}\nT={r['T']} {r['routing'][0]}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.45), 4.5))
    xs = range(len(rows))
    ax.bar([i - 0.2 for i in xs], [r["vs_loop"] for r in rows], 0.4, label="vs loop of torch.matmul")
    ax.bar([i + 0.2 for i in xs], [r.get("vs_grouped_mm", 0) for r in rows], 0.4, label="vs torch._grouped_mm")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(list(xs), labels, rotation=90, fontsize=6)
    ax.set_ylabel("speed-up of ditron (x)")
    ax.set_title("ditron grouped GEMM, 1x H200, bf16 (u = uneven, s = skewed routing)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    print(f"wrote {path}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", nargs="?", const=DEFAULT_DIR, type=Path, help="compile the cases (needs MLIR)")
    p.add_argument("--run", nargs="?", const=DEFAULT_DIR, type=Path, help="time them (needs a GPU)")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--quick", action="store_true", help="with --build: T in %s only" % (QUICK_TOKENS,))
    p.add_argument("--tile", action="append", default=None,
                   help="with --build: ditron-tile options of a variant (repeatable; '' = the model's choice)")
    args = p.parse_args(argv)
    if args.build:
        build(args.build, args.tile or [""], QUICK_TOKENS if args.quick else TOKENS)
    if args.run:
        run(args.run, args.out)
    if not args.build and not args.run:
        p.print_help()
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
