"""A ring all-gather written as one ditron.language kernel: in W - 1 steps every rank forwards the chunk it holds
to the next rank of the ring (a store into the next rank's out through dl.symm_at, then a notify), and waits for
the chunk the previous rank forwards to it.

    python examples/ring_all_gather.py [W ...]          # simulate on the CPU at W ranks (default 1 2 3 4 8)

out[c * n : (c + 1) * n] holds rank c's x on every rank. Slot (c * programs + pid) of a rank's pad holds the epoch
once block pid of chunk c has arrived in its out.
"""
import sys

import numpy as np
import triton.language as tl

import ditron
import ditron.language as dl


@ditron.jit
def ring_all_gather(x_ptr, out_ptr, pad_ptr, n, epoch, BLOCK: tl.constexpr):
    me = dl.rank()
    world = dl.num_ranks()
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    nxt = (me + 1) % world
    data = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + me * n + offs, data, mask=mask)
    chunk = me
    for step in range(0, world - 1):
        tl.store(dl.symm_at(out_ptr, nxt) + chunk * n + offs, data, mask=mask)
        dl.notify(pad_ptr, chunk * programs + pid, epoch, nxt)
        chunk = (chunk + world - 1) % world           # the chunk the previous rank forwards in this step
        token = dl.wait(pad_ptr, chunk * programs + pid, epoch)
        data = tl.load(dl.consume_token(out_ptr, token) + chunk * n + offs, mask=mask)


def grid(n: int, block: int) -> tuple[int]:
    return (-(-n // block),)


def make_args(world: int, n: int, block: int, seed: int = 0, dtype=np.float32):
    """(per-rank arguments for simulate / run_virtual, the inputs x per rank)."""
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(n).astype(dtype) for _ in range(world)]
    programs = grid(n, block)[0]
    args = [dict(x_ptr=xs[r], out_ptr=np.zeros(world * n, dtype), pad_ptr=np.zeros(world * programs, np.int32),
                 n=n, epoch=1, BLOCK=block) for r in range(world)]
    return args, xs


def reference(inputs):
    gathered = np.concatenate([row["x_ptr"] for row in inputs])
    return [{"out_ptr": gathered} for _ in inputs]


def main(worlds):
    n, block = 300, 64              # 300 = 4 full blocks and a partial one
    for world in worlds:
        args, _ = make_args(world, n, block)
        result = dl.simulate(ring_all_gather, grid(n, block), args, world=world, reference=reference)
        print(result.summary())
        if not result.ok:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main([int(a) for a in sys.argv[1:]] or [1, 2, 3, 4, 8]))
