"""A one-shot all-reduce written as one ditron.language kernel: every program announces its block of x to every
peer, waits for the peers' announcements, then reads the W blocks straight from the peers' symmetric heaps
(dl.symm_at) and sums them. One launch, no copies.

    python examples/all_reduce_one_shot.py [W ...]      # simulate on the CPU at W ranks (default 1 2 3 4 8)

``epoch`` (1, 2, ...) numbers the calls: a slot holding the epoch of this call means "my x is ready", so the pad
is never reset between calls. x must not be rewritten on any rank until every rank's call has finished reading it
(the caller's barrier between calls).
"""
import sys

import numpy as np
import triton.language as tl

import ditron
import ditron.language as dl


@ditron.jit
def all_reduce_one_shot(x_ptr, out_ptr, pad_ptr, n, epoch, BLOCK: tl.constexpr):
    me = dl.rank()
    world = dl.num_ranks()
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    # slot (r * programs + pid) of rank p's pad: "rank r's block pid of x is ready" (x was written before launch)
    for peer in range(0, world):
        dl.notify(pad_ptr, me * programs + pid, epoch, peer)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, world):
        peer = (me + i) % world                       # start at a different peer on every rank
        token = dl.wait(pad_ptr, peer * programs + pid, epoch)
        x = tl.load(dl.symm_at(dl.consume_token(x_ptr, token), peer) + offs, mask=mask, other=0.0)
        acc += x.to(tl.float32)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def grid(n: int, block: int) -> tuple[int]:
    return (-(-n // block),)


def make_args(world: int, n: int, block: int, seed: int = 0, dtype=np.float32):
    """(per-rank arguments for simulate / run_virtual, the inputs x per rank)."""
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(n).astype(dtype) for _ in range(world)]
    programs = grid(n, block)[0]
    args = [dict(x_ptr=xs[r], out_ptr=np.zeros(n, dtype), pad_ptr=np.zeros(world * programs, np.int32), n=n,
                 epoch=1, BLOCK=block) for r in range(world)]
    return args, xs


def reference(inputs):
    total = sum(row["x_ptr"].astype(np.float64) for row in inputs)
    return [{"out_ptr": total} for _ in inputs]


def main(worlds):
    n, block = 1000, 128            # 1000 = 7 full blocks and a partial one
    for world in worlds:
        args, _ = make_args(world, n, block)
        result = dl.simulate(all_reduce_one_shot, grid(n, block), args, world=world, reference=reference,
                             rtol=1e-5, atol=1e-5)
        print(result.summary())
        if not result.ok:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main([int(a) for a in sys.argv[1:]] or [1, 2, 3, 4, 8]))
