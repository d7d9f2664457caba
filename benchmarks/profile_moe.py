"""Profile of one ExpertParallelMoE call against bench_moe.TorchExpertParallel in a virtual world of 2 on one GPU
(torch.profiler, kernels by self CUDA time), from artifacts built by ``bench_moe.py --build build/moebench/arts
--world 2 --mode virtual``; run from the repository root: ``python benchmarks/profile_moe.py``."""
import sys
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch
import bench_moe as B
from ditron import ops
from ditron.nn import ExpertParallelMoE
from torch.profiler import profile, ProfilerActivity



def main():
    env = B.make_env(2)
    d = Path("build/moebench/arts")
    lib = ops.Library(d, target="cuda:90", compile=False)
    dev = torch.device("cuda", 0)
    block = B.make_block(4096, 14336, 8, 2, dev)
    layer = ExpertParallelMoE(block, env.world, library=lib)
    base = B.TorchExpertParallel(block, 2, [0, 1], virtual=True)
    for t in (128, 4096):
        xs = [B.make_tokens(r, t, 4096, dev) for r in range(2)]
        for name, fn in (("ditron", lambda: layer(xs)), ("torch", lambda: base(xs))):
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter(); n = 5
            for _ in range(n):
                fn()
            host = (time.perf_counter() - t0) / n
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) / n
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
            print(f"==== {name} T={t}: host {host*1e6:.0f} us/call, wall {wall*1e6:.0f} us/call")
            print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=22, max_name_column_width=60))


if __name__ == "__main__":
    main()
