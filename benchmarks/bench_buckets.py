#!/usr/bin/env python3
"""What serving any row count from power-of-two bucket programs (ditron.buckets) costs against a program compiled
for the exact rows: the padded rows' work plus the staging copy and the slicing of the output.

    python benchmarks/bench_buckets.py --build DIR     (where the compiler is: the exact and the bucket programs)
    python benchmarks/bench_buckets.py --run DIR       (one GPU; torch + triton only)

Rows: AG+GEMM and GEMM+AR in virtual worlds of 1 and 2 ranks on one GPU, a LLaMA-70B-like layer at TP = 2
(K = 8192, N = 3584 per rank for AG+GEMM; K = 3584 per rank, N = 8192 for GEMM+AR), at row counts from decode
(1..65) to prefill (1025..8193), each just above a power of two (the worst case of a bucket) and at a power of two
(no padding). Columns: the exact program's µs per call, the bucket path's (``buckets.<op>(..., max_rows)``:
staging, the bucket's program, the real rows), the measured overhead, and the cost model's estimate of the GEMM's
(``buckets.padding_overhead``). µs are the median of 5 repetitions of 20 calls, ``sync=False``, CUDA events around
them. Printed and written to benchmarks/results/buckets.csv (``--out DIR``: there).
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
MAX_ROWS = 8192
ROWS = (1, 17, 65, 128, 1025, 2049, 4096, 4097)
REPEATS, CALLS = 5, 20


def shapes(op: str, m: int) -> list[tuple[int, int]]:
    return [(m, 8192), (8192, 3584)] if op == "ag_gemm" else [(m, 3584), (3584, 8192)]


def cases():
    from ditron import ops
    for W in (1, 2):
        for op in ("ag_gemm", "gemm_ar"):
            for m in ROWS:
                yield ops.signature_for(op, shapes(op, m), "bf16", W, True, "cuda:90")


def build(directory: Path) -> None:
    from ditron import buckets
    sigs = []
    for s in cases():
        sigs += [s, buckets.bucket_signature(s, MAX_ROWS)]
    buckets.prebuild(sigs, directory)


def _time(fn) -> float:
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    reps = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(CALLS):
            fn()
        end.record()
        end.synchronize()
        reps.append(start.elapsed_time(end) * 1e3 / CALLS)
    return statistics.median(reps)


def run(directory: Path, out_dir: Path = RESULTS) -> int:
    import torch

    from ditron import buckets, ops
    from ditron.runtime.world import World
    lib = ops.Library(directory, target="cuda:90", compile=False)
    worlds = {W: World.virtual(W) for W in (1, 2)}
    rows = []
    for s in cases():
        world = worlds[s.world_size]
        xs = [[torch.randn(shape, device="cuda").to(torch.bfloat16) for shape in s.shapes]
              for _ in range(s.world_size)]
        args = [list(c) for c in zip(*xs)]
        exact = _time(lambda: getattr(ops, s.op)(*args, world, library=lib, sync=False))
        bucket = _time(lambda: getattr(buckets, s.op)(*args, world, max_rows=MAX_ROWS, library=lib, sync=False))
        lib.synchronize(world)
        padded = buckets.bucket_signature(s, MAX_ROWS)
        row = {"op": s.op, "world": s.world_size, "rows": s.shapes[0][0], "bucket_rows": padded.shapes[0][0],
               "exact_us": round(exact, 2), "bucket_us": round(bucket, 2),
               "overhead": round(bucket / exact - 1.0, 4),
               "model_overhead": round(buckets.padding_overhead(s, MAX_ROWS), 4)}
        rows.append(row)
        print(row, flush=True)
        lib.release(s)
        lib.release(padded)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "buckets.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {out_dir / 'buckets.csv'}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--build", type=Path, metavar="DIR", help="compile the exact and the bucket programs into DIR")
    g.add_argument("--run", type=Path, metavar="DIR", help="time them with the programs in DIR")
    p.add_argument("--out", type=Path, default=RESULTS, help="where buckets.csv goes (default: benchmarks/results)")
    a = p.parse_args()
    if a.build:
        build(a.build)
        return 0
    return run(a.run, a.out)


if __name__ == "__main__":
    sys.exit(main())
