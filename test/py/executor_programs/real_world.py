"""One rank of a real (multi-process) world, for test_executor_gpu.py: runs artifacts through the executor with
the symmetric heap on PyTorch symmetric memory, and checks the outputs against torch.

    RANK=r WORLD_SIZE=W MASTER_ADDR=127.0.0.1 MASTER_PORT=p TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1 \\
        python real_world.py ARTIFACTS_DIR CASE [CASE ...]

Every process uses GPU 0 (several ranks on one GPU); the process group is gloo (NCCL refuses two ranks on one
GPU), which symmetric memory only needs for its rendezvous. Prints "rank r: CASE ok" per case; exits 1 on a
mismatch."""
from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

CALLS = 3


def main(argv: list[str]) -> int:
    import torch
    import torch.distributed as dist

    import ditron
    import executor_programs as EP
    from ditron.runtime.world import World

    root, names = Path(argv[0]), argv[1:]
    torch.cuda.set_device(int(os.environ.get("DITRON_TEST_DEVICE", "0")))
    dist.init_process_group("gloo")
    world = World.from_torch()
    failed = 0
    for name in names:
        case = EP.CASES[name]
        assert case.W == world.world_size, (name, world.world_size)
        exe = ditron.load(root / name)
        for call in range(1, CALLS + 1):
            xs = EP.make_inputs(case, call)           # every rank builds every rank's inputs (seeded alike)
            want = EP.reference(case, xs)[world.rank]
            got = exe.run(world, xs[world.rank])
            ok = all(torch.allclose(g.float(), w.float(), rtol=2 ** -6,
                                    atol=2 ** -6 * max(float(w.float().abs().max()), 1.0)) for g, w in zip(got, want))
            if not ok:
                print(f"rank {world.rank}: {name} call {call} MISMATCH", flush=True)
                failed += 1
        exe.close()
        print(f"rank {world.rank}: {name} ok", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
