#!/usr/bin/env python3
"""Host cost of one ditron op call in CUDA-graph mode, layer by layer: what a call costs the Python thread when the
GPU keeps up (a small all-reduce is host-bound when this is larger than its GPU time).

    python benchmarks/bench_host.py --build DIR     (where the compiler is: the all-reduce artifact)
    python benchmarks/bench_host.py --run DIR       (one GPU; torch + triton only)

Rows (µs per call, the median of 5 repetitions of 3000 calls each, ``sync=False`` into fixed outputs; a virtual
world of one rank, the same host path as a real rank's): ``ops.all_reduce`` (the public call), ``Executable.run``,
``Executor.run`` (the graph key and its lookup), ``BoundCall`` (``Executor.bind``: no key), the graph launch alone
through torch (``CUDAGraph.replay``) and through the graph runner's backend, and, for scale, one torch
elementwise op.

Then the calls a model makes, with a fresh input tensor each call (cycling through FRESH tensors at distinct
addresses, as a model's activations come) and no given output (the median of 5 repetitions of 300 calls): the eager
``ops.all_reduce``, ``ops.all_reduce(graph=True)`` (a capture per new tensor set), the torch operator
``torch.ops.ditron.all_reduce`` eagerly and through ``torch.compile(fullgraph=True)``, and the replay of the
caller's own ``torch.cuda.graph`` holding the operator (ditron.runtime.callplan). Printed and written to
benchmarks/results/host_w1.csv (``--out DIR``: there).
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
FRESH_CALLS = 300      # per repetition, for the rows with a fresh tensor per call (some capture a graph per call)
FRESH = 64             # distinct input tensors the fresh rows cycle through (more than the graph cache holds)


def signature():
    from ditron import ops
    return ops.signature_for("all_reduce", [SHAPE], "bf16", 1, True, algorithm="one_shot")


def build(directory: Path) -> None:
    from ditron import ops
    ops.build([signature()], directory)
    print(f"built {signature().key} into {directory}")


def timed(fn, calls: int = CALLS) -> float:
    import torch
    for _ in range(min(200, calls)):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) * 1e6 / calls)
        torch.cuda.synchronize()
    return statistics.median(runs)


def fresh_rows(x0, world, lib) -> list[tuple[str, object]]:
    """The rows with a fresh input tensor per call: (name, fn)."""
    import itertools

    import torch

    from ditron import ops, torch_ops
    pool = [x0.clone() for _ in range(FRESH)]
    nxt = itertools.cycle(pool).__next__
    handle = torch_ops.register_world(world, lib)
    op = torch.ops.ditron.all_reduce
    compiled = torch.compile(lambda x: op(x, handle, "one_shot"), fullgraph=True)
    static = x0.clone()
    op(static, handle, "one_shot")  # the warm-up that makes the capture plan
    compiled(static)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = op(static, handle, "one_shot")
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, static)  # W = 1: the all-reduce is the identity
    return [
        ("ops.all_reduce eager, fresh x", lambda: ops.all_reduce([nxt()], world, "one_shot", sync=False, library=lib)),
        ("ops.all_reduce(graph=True), fresh x", lambda: ops.all_reduce([nxt()], world, "one_shot", sync=False,
                                                                       library=lib, graph=True)),
        ("torch.ops.ditron.all_reduce, fresh x", lambda: op(nxt(), handle, "one_shot")),
        ("torch.compile(fullgraph) of it, fresh x", lambda: compiled(nxt())),
        ("user torch.cuda.graph holding it", graph.replay),
    ]


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
    graph = entry.graphs[parity]
    y = torch.empty_like(x[0])
    rows = [
        ("ops.all_reduce(graph=True)", lambda: ops.all_reduce(x, world, **call)),
        ("Executable.run(graph=True)", lambda: exe.run(world, inputs, outputs, sync=False, graph=True)),
        ("Executor.run", lambda: ex.run(inputs, outputs, sync=False)),
        ("BoundCall", lambda: bound(False)),
        ("CUDAGraph.replay", graph.replay),
        ("graph backend replay", lambda: runner.backend.replay(graph)),
        ("torch y.add_(x) (one kernel)", lambda: y.add_(x[0])),
    ]
    results = []
    for name, fn in rows:
        us = timed(fn)
        results.append({"call": name, "host_us": round(us, 2)})
        print(f"  {name:40s} {us:7.2f} us")
    torch.testing.assert_close(out[0], x[0])  # W = 1: the all-reduce is the identity
    for name, fn in fresh_rows(x[0], world, lib):
        us = timed(fn, FRESH_CALLS)
        results.append({"call": name, "host_us": round(us, 2)})
        print(f"  {name:40s} {us:7.2f} us")
    from ditron import torch_ops
    torch_ops.close(world)
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
