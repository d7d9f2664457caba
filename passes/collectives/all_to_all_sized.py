"""All-to-all of run-time split sizes into an output of bounded capacity (docs/device_ir.md, "Patterns")."""
from __future__ import annotations

import math

from mlir import ir

from ...dialects import task
from ...kernels import a2a_sized
from ..device_kernels import dtype_name
from ..tiling import Tiling
from .context import LoweringContext
from .table import register

ALGORITHM = "pull_sized"


@register("all_to_all", ALGORITHM)
def all_to_all_pull_sized(lw: LoweringContext, op: ir.Operation, t: Tiling, x: ir.Value, out: ir.Value) -> None:
    """The bounded all_to_all (split_sizes computed on the device, an output of ``capacity`` rows, recv_counts).
    No host synchronisation: the sizes never leave the device, so the whole call is one fixed sequence of
    enqueued work (a CUDA graph captures it).

    On the compute lane: x is staged into a symmetric send buffer (unless it is one already); then for each rank q
    (this one included) the W sizes are copied into row <rank> of q's ``a2a_counts`` (W x W, i32; a static copy of
    W elements: the copy engine) and ``a2a_counted[rank] := epoch`` is set there (release: q sees the sizes and,
    having waited for them, the staged rows); every rank waits for all W slots, then launches the ``a2a_sized``
    kernel, which reads the counts matrix, pulls from each rank q the rows q sends here (at the prefix-sum
    offsets, computed on the device, clipped to the capacity), zeroes the rows past the received ones and stores
    recv_counts. The sizes are data-dependent, so the data moves on SMs (a copy engine's size is the host's: a
    host sync). Peers read the send buffer and write the counts until the end barrier (``crosses``)."""
    a2a = task.AllToAll(op)
    if not a2a.bounded:
        raise lw.error(op, f"is tiled for algorithm '{ALGORITHM}', which moves parts of run-time sizes into an "
                           "output of bounded capacity with recv_counts; this all_to_all has equal parts (run "
                           "ditron-tile again)")
    b = lw.b
    world = t.world or 1
    if a2a.split_dim != 0 or a2a.concat_dim != 0:
        raise lw.error(op, f"with split_sizes is lowered along dim 0 only (split_dim = concat_dim = 0), got "
                           f"{a2a.split_dim}")
    splits = lw.buf(a2a.split_sizes)
    i32 = ir.IntegerType.get_signless(32)
    if ir.MemRefType(splits.type).element_type != i32:
        raise lw.error(op, f"split_sizes of type {a2a.split_sizes.type} are lowered as i32 only (convert them on "
                           "the device first: ditron.ops.all_to_all does)")
    recv = lw.dest(a2a.recv_counts, "a2a_recv")
    shape = list(ir.MemRefType(x.type).shape)
    xt = ir.MemRefType(x.type)
    rows, cols = shape[0], math.prod(shape[1:])
    capacity = list(ir.MemRefType(out.type).shape)[0]
    rec = a2a_sized.make_record(rows, cols, capacity, world, name="a2a_sized", dtype=dtype_name(xt),
                                block_m=t.block_m, block_n=t.block_n, grid=t.comm_sms or 16,
                                num_warps=t.num_warps or 4)
    staged = not lw.is_symmetric(x)
    send = lw.alloc_symmetric(shape, xt.element_type, "a2a_send") if staged else x
    counts = lw.alloc_symmetric([world * world], i32, "a2a_counts")
    counted = b.pad(world, "a2a_counted")
    lw.crosses()
    if staged:
        lw.local_copy(x, send, lane="compute")
    with b.loop(0, world, role="a2a.counts_loop") as s:
        q = b.peer(s)
        b.copy(splits, counts, src_rank=b.rank, dst_rank=q, src_offsets=[0], dst_offsets=[b.mul(b.rank, world)],
               sizes=[world], engine="copy_engine", lane="compute", role="a2a.counts")
        b.signal(counted, target=q, slot=b.rank, lane="compute", role="a2a.counted")
    b.wait(counted, list(range(world)), lane="compute", role="a2a.await_counts")
    lw.launch(rec, [send, out, counts, recv], lane="compute", role="a2a.pull_sized")
