#!/usr/bin/env python3
"""Host cost of one ditron op call in CUDA-graph mode, layer by layer: what a call costs the Python thread when the
GPU keeps up (a small all-reduce is host-bound when this is larger than its GPU time).

    python benchmarks/bench_host.py --build DIR     (where the compiler is: the all-reduce artifact)
    python benchmarks/bench_host.py --run DIR       (one GPU; torch + triton only)

Rows (µs per call, the median of 5 repetitions of 3000 calls each, ``sync=False`` into fixed outputs; a virtual
world of one rank, the same host path as a real rank's): ``ops.all_reduce`` (the public call), ``Executable.run``,
``Executor.run`` (the graph key and its lookup), ``BoundCall`` (``Executor.bind``: no key), the graph launch alone
through torch (``CUDAGraph.replay``) and through the driver (``cuGraphLaunch``), the completion event, and, for
scale, one torch elementwise op. Printed and written to benchmarks/results/host_w1.csv (``--out DIR``: there).
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SHAPE = (128, 256)     # 64 KB of bf16: the kernel is short, the call is host-bound
CALLS, REPEATS = 3000, 5


def signature():
    from ditron import ops
    return ops.signature_for("all_reduce", [SHAPE], "bf16", 1, True, algorithm="one_shot")


def build(directory: Path) -> None:
    from ditron import ops
    ops.build([signature()], directory)
    print(f"built {signature().key} into {directory}")


def timed(fn) -> float:
    import torch
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        runs.append((time.perf_counter() - start) * 1e6 / CALLS)
        torch.cuda.synchronize()
    return statistics.median(runs)


def run(directory: Path, out_dir: Path = RESULTS) -> int:
    import torch

    from ditron import ops
    from ditron.runtime.world import World
    if not torch.cuda.is_available():
        sys.exit("bench_host --run needs a CUDA GPU")
    world = World.virtual(1)
    lib = ops.Library(directory, compile=False)
    x = [(torch.randn(*SHAPE, device="cuda") * 0.1).to(torch.bfloat16)]
    out = [torch.empty_like(x[0])]
    call = {"algorithm": "one_shot", "out": out, "sync": False, "library": lib, "graph": True}
    ops.all_reduce(x, world, **call)
    exe = lib.executable(signature())
    ex = exe.executor(world, graph=True)
    inputs, outputs = [[x[0]]], [[out[0]]]
    bound = ex.bind(inputs, outputs)
    runner = ex._graphs
    entry = runner.entry(inputs, outputs)
    parity = next(p for p in (0, 1) if entry.graphs[p] is not None)
    graph, graph_exec = entry.graphs[parity], entry.execs[parity]
    device = ex.device.index
    event = runner._events[0]
    y = torch.empty_like(x[0])
    rows = [
        ("ops.all_reduce(graph=True)", lambda: ops.all_reduce(x, world, **call)),
        ("Executable.run(graph=True)", lambda: exe.run(world, inputs, outputs, sync=False, graph=True)),
        ("Executor.run", lambda: ex.run(inputs, outputs, sync=False)),
        ("BoundCall", lambda: bound(False)),
        ("CUDAGraph.replay", graph.replay),
        ("cuGraphLaunch", lambda: runner.backend.replay(graph, graph_exec, runner.backend.current(device),
                                                        runner._driver)),
        ("completion event", lambda: runner.backend.record(event, runner.backend.current(device),
                                                           runner._driver)),
        ("torch y.add_(x) (one kernel)", lambda: y.add_(x[0])),
    ]
    results = []
    for name, fn in rows:
        us = timed(fn)
        results.append({"call": name, "host_us": round(us, 2)})
        print(f"  {name:32s} {us:7.2f} us")
    torch.testing.assert_close(out[0], x[0])  # W = 1: the all-reduce is the identity
    lib.close()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "host_w1.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["call", "host_us"])
        w.writeheader()
        w.writerows(results)
    print(f"wrote {path} ({torch.cuda.get_device_name()})")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--build", type=Path, metavar="DIR", help="compile the all-reduce artifact into DIR")
    g.add_argument("--run", type=Path, metavar="DIR", help="time the calls with the artifact in DIR")
    p.add_argument("--out", type=Path, default=RESULTS, help="where host_w1.csv goes (default: benchmarks/results)")
    args = p.parse_args()
    if args.build:
        build(args.build)
        return 0
    return run(args.run, args.out)


if __name__ == "__main__":
    sys.exit(main())
