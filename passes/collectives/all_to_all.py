"""All-to-all (static: equal parts), by pull (docs/device_ir.md, "Patterns")."""
from __future__ import annotations

from mlir import ir

from ...dialects import task
from ..tiling import Tiling
from .context import LoweringContext
from .table import register


@register("all_to_all", "pull")
def all_to_all_pull(lw: LoweringContext, op: ir.Operation, t: Tiling, x: ir.Value, out: ir.Value) -> None:
    """Static all_to_all along (split_dim, concat_dim): this rank's input x splits along split_dim into W parts of
    equal size; part q goes to rank q, which places it as block <this rank> along concat_dim of its output. By
    pull, part by part: on the compute lane, for s = 1..W-1, part q = rank + s is staged into a symmetric send
    buffer (unless x is one already) and offered to rank q alone (``avail[rank]`` there), then the own part is
    copied locally (``ready[rank]``); on the comm lane part <rank> of each peer q = rank - s is pulled once offered
    (the order in which the peers stage it: the first pull waits for one part's staging, and the rest of the
    staging overlaps the pulls), each marked in ``ready[q]``; the compute lane then waits for all W. The comm lane
    starts with a wait that only the peers' offers of this call satisfy (no entry fork). Peers read the send buffer
    until the end barrier (``crosses``). The pulls take ditron-tile's engine; the local copies take the copy engine
    (an SM copy kernel gets the few SMs ditron-tile gives the link)."""
    a2a = task.AllToAll(op)
    if a2a.split_sizes is not None:
        raise lw.error(op, f"of parts of run-time sizes is tiled for algorithm '{t.algorithm or 'pull'}'; the "
                           "bounded form's is pull_sized (run ditron-tile again)")
    b = lw.b
    world = t.world
    shape = list(ir.MemRefType(x.type).shape)
    sd, cd = a2a.split_dim, a2a.concat_dim
    if shape[sd] % world:
        raise lw.error(op, f"splits dim {sd} of size {shape[sd]} over {world} ranks, which do not divide it")
    part = list(shape)
    part[sd] //= world
    zeros = [0] * len(shape)

    def part_of(dim: int, block) -> list:  # the offsets of a part's box: block ``block`` along dim
        offsets = list(zeros)
        offsets[dim] = b.mul(block, part[dim])
        return offsets

    staged = not lw.is_symmetric(x)
    send = lw.alloc_symmetric(shape, ir.MemRefType(x.type).element_type, "a2a_send") if staged else x
    ready, avail = b.pad(world, "a2a_ready"), b.pad(world, "a2a_avail")
    lw.crosses()
    with b.loop(1, world, role="a2a.offer") as s:
        q = b.peer(s)
        if staged:
            box = part_of(sd, q)
            b.copy(x, send, src_rank=b.rank, dst_rank=b.rank, src_offsets=box, dst_offsets=box, sizes=part,
                   engine="copy_engine", lane="compute", role="a2a.stage")
        b.signal(avail, target=q, slot=b.rank, lane="compute", role="a2a.offer_signal")
    b.copy(x, out, src_rank=b.rank, dst_rank=b.rank, src_offsets=part_of(sd, b.rank),
           dst_offsets=part_of(cd, b.rank), sizes=part, engine="copy_engine", lane="compute", role="a2a.own")
    b.signal(ready, target=b.rank, slot=b.rank, lane="compute", role="a2a.arrive")
    with b.loop(1, world, role="a2a.pull_loop") as s:
        q = b.peer(b.sub(world, s))
        b.wait(avail, [q], lane="comm", role="a2a.await")
        b.copy(send, out, src_rank=q, dst_rank=b.rank, src_offsets=part_of(sd, b.rank),
               dst_offsets=part_of(cd, q), sizes=part, engine=t.engine or "copy_engine", lane="comm",
               role="a2a.pull")
        b.signal(ready, target=b.rank, slot=q, lane="comm", role="a2a.arrive")
    b.wait(ready, list(range(world)), lane="compute", role="a2a.join")
