"""Time ``ditron sim`` on every example program, on the CPU (the simulator needs no GPU).

    python benchmarks/bench_sim.py [--full NAME,...] [--worlds 1,2,4,8] [--seeds 0] [--out benchmarks/results]

Two kinds of rows, each one ``ditron sim FILE [-W W] --seeds S`` in a fresh process (its wall and CPU seconds, CPU
counting every BLAS thread, and its peak memory):

* ``scaled``: every ``examples/*.mlir`` at the shapes test_sim_programs.py simulates them (8192, 4096, 14336 ->
  512, 64, 128) with its mesh set to each W of ``--worlds``;
* ``full``: the examples named by ``--full`` (default: every one) at their own shapes and mesh (W = 4) -- what a
  user checks before deploying. ``--full none`` skips them.

Output: a table on stdout, benchmarks/results/sim.csv and sim.png (if matplotlib is importable). The numbers
depend on the machine and on its load: the README of results/ names both.
"""
from __future__ import annotations

import argparse
import csv
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SCALE = {"8192": "512", "4096": "64", "14336": "128"}  # as test_sim_programs._scaled_example
MESH = re.compile(r"shape = array<i64: (\d+)>")


def scaled(text: str, world: int) -> str:
    text = re.sub(r"(?<=[<x])(8192|4096|14336)(?=x)", lambda m: SCALE[m.group(1)], text)
    return MESH.sub(f"shape = array<i64: {world}>", text, count=1)


# `ditron ARGS` in a child that prints its own peak memory last (RUSAGE_CHILDREN keeps the largest child's)
CHILD = ("import resource, sys\n"
         "from ditron.cli import run\n"
         "code = run(sys.argv[1:], sys.stdout, sys.stderr)\n"
         "print('maxrss_kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
         "sys.exit(code)\n")


def time_sim(path: Path, seeds: str, timeout: float) -> dict:
    """Run ``ditron sim path --seeds seeds`` once; its times, peak memory and verdict."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, "sim", str(path), "--seeds", seeds],
                              capture_output=True, text=True, timeout=timeout)
        rc, out = proc.returncode, proc.stdout + proc.stderr
        rss = re.findall(r"maxrss_kb (\d+)", proc.stderr)
    except subprocess.TimeoutExpired:
        rc, out, rss = "timeout", "", []
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [line for line in out.splitlines() if line.strip() and not line.startswith("maxrss_kb")]
    verdict = "OK" if rc == 0 else (lines[0] if lines else str(rc))[:120]
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "max_rss_gb": round(int(rss[-1]) / 2 ** 20, 2) if rss else "",
            "rc": rc, "verdict": verdict}


def write_row(path: Path, rows: list[dict]) -> None:
    """Print the newest row and rewrite the CSV with every row so far (a stopped run keeps its rows)."""
    print(rows[-1], flush=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def plot(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not importable: no PNG")
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name in sorted({r["example"] for r in rows if r["kind"] == "scaled"}):
        pts = sorted((r["world"], r["wall_s"]) for r in rows if r["kind"] == "scaled" and r["example"] == name)
        ax1.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax1.set(xlabel="W (ranks)", ylabel="wall s per seed", title="scaled shapes (the tests')")
    ax1.legend()
    full = [r for r in rows if r["kind"] == "full"]
    ax2.bar([r["example"] for r in full], [r["wall_s"] for r in full], label="wall")
    ax2.bar([r["example"] for r in full], [r["cpu_s"] for r in full], alpha=0.4, label="CPU (all threads)")
    ax2.axhline(30, color="red", linestyle="--", label="30 s")
    ax2.set(ylabel="s per seed", title="own shapes, W = 4")
    ax2.legend()
    fig.suptitle("ditron sim on the CPU")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="1,2,4,8", help="W of the scaled rows (default 1,2,4,8)")
    ap.add_argument("--full", default="all", help="examples to time at their own shapes: all, none or names")
    ap.add_argument("--seeds", default="0", help="the seeds of each run (default 0)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds before a run is abandoned")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    names = sorted(p.stem for p in EXAMPLES.glob("*.mlir"))
    full = names if args.full == "all" else [] if args.full == "none" else args.full.split(",")
    rows = []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            text = (EXAMPLES / f"{name}.mlir").read_text()
            for world in (int(w) for w in args.worlds.split(",")):
                path = Path(tmp) / f"{name}_w{world}.mlir"
                path.write_text(scaled(text, world))
                rows.append({"example": name, "kind": "scaled", "world": world, **time_sim(path, args.seeds,
                                                                                            args.timeout)})
                write_row(out / "sim.csv", rows)
        for name in full:
            rows.append({"example": name, "kind": "full", "world": int(MESH.search(
                (EXAMPLES / f"{name}.mlir").read_text()).group(1)), **time_sim(EXAMPLES / f"{name}.mlir",
                                                                              args.seeds, args.timeout)})
            write_row(out / "sim.csv", rows)
    plot(rows, out / "sim.png")
    print(f"{'example':10} {'kind':7} {'W':>2} {'wall s':>8} {'CPU s':>8} {'GB':>6}  verdict")
    for r in rows:
        print(f"{r['example']:10} {r['kind']:7} {r['world']:>2} {r['wall_s']:8.1f} {r['cpu_s']:8.1f} "
              f"{r['max_rss_gb']:6.2f}  {r['verdict']}")
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
