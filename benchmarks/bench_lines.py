#!/usr/bin/env python3
"""Operand rows off TMA's 128-byte lines: the evidence for ditron-tile's operand repack (cost_model.repack_choice,
backends/nvidia/facts.py TMA_OFF_LINE).

For GEMM shapes whose A rows (K elements) or B rows (N elements) are 16-byte aligned -- so the template loads them
by TMA -- but not 128-byte aligned, the same tile config (128x256x64, 8 warps, 3 stages, persistent: ditron-tile's
choice at these sizes) is timed with A and B as given and with A's rows, B's rows, C's rows or all of them padded
to whole 128-byte lines (the operand in a wider buffer, row stride rounded up to 64 bf16), beside torch.matmul on
the same operands, plus two other tilings of the unpadded problem (256x128; pointer loads).

    python benchmarks/bench_lines.py --build [DIR]   # CPU box with ditron + MLIR (default DIR build/lines_kernels)
    python benchmarks/bench_lines.py --run [DIR]     # GPU box, torch + triton only -> results/gemm_lines.csv

Timing: triton.testing.do_bench medians (L2 flushed before every repetition), the better of two runs each.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_gemm as bg  # noqa: E402  (the GEMM benchmark's build / compile / launch helpers)

SHAPES = [(5000, 3000, 5000), (3000, 5000, 3000), (12345, 1000, 3000), (3072, 5000, 3072), (3072, 5120, 3072)]
BASE = dict(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, group_m=8, persistent=True,
            split_k=1, flatten=True, epilogue_split=1, loads="tma", store="pointer")
DEFAULT_DIR = HERE.parent / "build" / "lines_kernels"


def up(x: int, q: int = 64) -> int:
    return -(-x // q) * q


def variants(m: int, n: int, k: int) -> list[tuple[str, dict]]:
    out = []
    for tag, lda, ldb, ldc, extra in [
            ("as_given", k, n, n, {}), ("a_padded", up(k), n, n, {}), ("b_padded", k, up(n), n, {}),
            ("c_padded", k, n, up(n), {}), ("all_padded", up(k), up(n), up(n), {}),
            ("all_padded_tma_store", up(k), up(n), up(n), {"store": "tma", "epilogue_split": 2}),
            ("as_given_256x128", k, n, n, {"block_m": 256, "block_n": 128}),
            ("as_given_pointer_loads", k, n, n, {"loads": "pointer"})]:
        out.append((tag, dict(BASE, lda=lda, ldb=ldb, ldc=ldc, **extra)))
    return out


def build(out_dir: Path) -> None:
    kernels = [{"name": f"g{m}x{n}x{k}_{tag}", "group": f"{m}x{n}x{k}_{tag}", "m": m, "n": n, "k": k, "fields": f}
               for m, n, k in SHAPES for tag, f in variants(m, n, k)]
    bg.build_kernels(out_dir, kernels)


def run(kernel_dir: Path, out: Path) -> None:
    import torch
    entries = bg.load_manifest(kernel_dir)["kernels"]
    errors = bg.precompile(kernel_dir, entries)
    bg.set_scratch_allocator()
    rows = []
    for e in entries:
        if e["name"] in errors:
            print(f"{e['name']}: {errors[e['name']]}")
            continue
        rec = e["record"]
        m, n, k = rec["m"], rec["n"], rec["k"]
        a, b, c = bg.gemm_inputs(rec)
        ref = bg.reference(rec, a, b)
        launch = bg.GemmLaunch(bg.compile_entry(kernel_dir, e), e, a, b, c)
        launch()
        torch.cuda.synchronize()
        err = bg.rel_error(c[:, :n], ref)
        av, bv = a[:, :k], b[:, :n]
        c_ref = torch.empty(m, n, device="cuda", dtype=a.dtype)
        t = min(bg.bench_ms(launch, 100), bg.bench_ms(launch, 100)) * 1e3
        tt = min(bg.bench_ms(lambda: torch.matmul(av, bv, out=c_ref), 100),
                 bg.bench_ms(lambda: torch.matmul(av, bv, out=c_ref), 100)) * 1e3
        rows.append({"m": m, "n": n, "k": k, "variant": e["group"].split("_", 1)[1], "lda": rec["lda"],
                     "ldb": rec["ldb"], "ldc": rec["ldc"], "config": bg.describe(rec), "ditron_us": round(t, 1),
                     "torch_us": round(tt, 1), "vs_torch": round(tt / t, 3), "rel_err": f"{err:.1e}",
                     "device": torch.cuda.get_device_name()})
        print(" ".join(str(v) for v in rows[-1].values()), flush=True)
        del a, b, c, ref, launch
        torch.cuda.empty_cache()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "gemm_lines.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--build", nargs="?", const=DEFAULT_DIR, type=Path, metavar="DIR")
    where.add_argument("--run", nargs="?", const=DEFAULT_DIR, type=Path, metavar="DIR")
    p.add_argument("--out", type=Path, default=HERE / "results", help="where gemm_lines.csv goes")
    args = p.parse_args(argv)
    if args.build:
        build(args.build)
    else:
        run(args.run, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
