#!/usr/bin/env python3
"""Host cost of launching a CUDA graph, by kind of node: the measurement behind the executor's graph mode using
kernels (not driver memops) for the waits and signals of stream 0 (ditron.runtime.graphs).

    python benchmarks/bench_graph_nodes.py            (one GPU; torch + ditron's runtime, no MLIR needed)

Each row captures a graph of 20 nodes of one kind (or 1, or none) and replays it 2000 times: "host" is the time
per replay the Python thread spends (graph launch), "wall" includes draining the GPU. Results are printed and
written to benchmarks/results/graph_nodes.txt.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "graph_nodes.txt"


def main() -> int:
    import torch

    from ditron.runtime.memops import DriverMemops
    if not torch.cuda.is_available():
        sys.exit("bench_graph_nodes needs a CUDA GPU")
    drv = DriverMemops.load()
    if drv is None:
        sys.exit("bench_graph_nodes needs the CUDA driver's stream memory operations")
    x = torch.zeros(1024, device="cuda")
    word = torch.zeros(64, dtype=torch.int32, device="cuda")

    def capture(body, nstreams=1):
        graph = torch.cuda.CUDAGraph()
        cap = torch.cuda.Stream()
        side = [torch.cuda.Stream() for _ in range(nstreams - 1)]
        with torch.cuda.stream(cap):
            graph.capture_begin(capture_error_mode="thread_local")
            fork = torch.cuda.Event()
            fork.record(cap)
            for s in side:
                s.wait_event(fork)
            body([cap] + side)
            torch.cuda.set_stream(cap)
            for s in side:
                join = torch.cuda.Event()
                join.record(s)
                cap.wait_event(join)
            graph.capture_end()
        return graph

    def kernels(streams, k=20):
        for i in range(k):
            with torch.cuda.stream(streams[i % len(streams)]):
                x.add_(1)

    def writes(streams, k=20):
        for i in range(k):
            drv.write(streams[i % len(streams)].cuda_stream, word.data_ptr() + 4 * (i % 64), i)

    def waits(streams, k=20):
        drv.write(streams[0].cuda_stream, word.data_ptr(), 5)
        for _ in range(k):
            drv.wait_geq(streams[0].cuda_stream, word.data_ptr(), 1)

    def copies(streams, k=20):
        y = torch.empty_like(x)
        for i in range(k):
            with torch.cuda.stream(streams[i % len(streams)]):
                y.copy_(x)

    cases = [("20 kernels, 1 stream", kernels, 1), ("20 kernels, 4 streams", kernels, 4),
             ("20 write memops, 1 stream", writes, 1), ("20 write memops, 4 streams", writes, 4),
             ("20 wait memops, 1 stream", waits, 1), ("20 D2D copies, 1 stream", copies, 1),
             ("1 kernel", lambda s: x.add_(1), 1), ("1 write memop", lambda s: drv.write(s[0].cuda_stream,
                                                                                         word.data_ptr(), 1), 1)]
    lines = [f"# {torch.cuda.get_device_name()}, torch {torch.__version__}: us per replay of a captured graph"]
    for label, body, nstreams in cases:
        graph = capture(body, nstreams)
        for _ in range(20):
            graph.replay()
        torch.cuda.synchronize()
        n = 2000
        start = time.perf_counter()
        for _ in range(n):
            graph.replay()
        host = (time.perf_counter() - start) / n * 1e6
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / n * 1e6
        lines.append(f"{label:32s} host {host:7.1f}  wall {wall:7.1f}")
        print(lines[-1], flush=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
