"""GEMM+AR (overlap kind ``matmul_ar``): the GEMM's partial C all-reduced as it is produced. Algorithms:
one_shot (the GEMM, then one reduce launch of every row reading P where it is), two_shot (GEMM+RS's counted GEMM
and reduce kernels into the gather buffer, then the gather), epilogue (GEMM+RS's epilogue reduction into the
gather buffer, then the gather chunk by chunk), push (the GEMM pushes each tile into the peers' inboxes, then one
launch sums), push_sum (one launch: each tile pushed, then summed with the peers' in its epilogue)."""
from __future__ import annotations

import math

from mlir import ir

from ...dialects import task
from .. import device_kernels as K
from ..tiling import OverlapGroup, Tiling, elem_bytes, shape_of
from .all_gather import gather_offer, gather_pull_chunk, gather_setup
from .all_reduce import all_reduce_from
from .common import Chunking, check_rows, epoch_times, inbox
from .context import LoweringContext
from .gemm_rs import counted_gemm, epilogue_rs, fusable, fused_gemm, pushing_gemm
from .reduce_scatter import one_launch_reduce
from .table import register


def _partial(lw: LoweringContext, g: OverlapGroup, t: Tiling, *, crosses: bool = True) -> tuple[ir.Value, ir.Value]:
    """(P, the output): the GEMM's partial C in a symmetric P."""
    mm, ar = task.Matmul(g.producer), task.AllReduce(g.consumer)
    rows, n = shape_of(mm.result)
    p = lw.alloc_symmetric([rows, n], ir.RankedTensorType(mm.result.type).element_type, "ar_partial")
    lw.bind(mm.result, p)
    out = lw.dest(ar.output, "ar")
    if crosses:  # a push's inbox records its crossing (common.inbox)
        lw.crosses()
    return p, out


def _chunks(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> Chunking:
    rows = shape_of(task.Matmul(g.producer).result)[0]
    ch = Chunking.of(t, rows // t.world)
    check_rows(lw, g.consumer, rows, t.world, ch)
    return ch


@register("matmul_ar", "one_shot")
def gemm_ar_one_shot(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> None:
    """After the GEMM, one reduce launch reading P where it is (the tiling's tile fields are the GEMM's)."""
    from ...kernels.reduce import publish_tile
    p, out = _partial(lw, g, t)
    rows, n = shape_of(task.Matmul(g.producer).result)
    fused_gemm(lw, g, t, p, notify_rows=None, rows_per_rank=0, counts=None)
    one_launch_reduce(lw, t, p, out, tile=publish_tile(rows, n, elem_bytes(p), t.comm_sms or 16))


@register("matmul_ar", "two_shot")
def gemm_ar_two_shot(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> None:
    p, out = _partial(lw, g, t)
    ch = _chunks(lw, g, t)
    red = counted_gemm(lw, g, t, p, ch, lw.b.pad(t.world * ch.count, "ar_count"))
    all_reduce_from(lw, g.consumer, t, p, out, red, lane="compute", stage_from=None, group=g.group)


@register("matmul_ar", "epilogue")
def gemm_ar_epilogue(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> None:
    """GEMM+AR = the epilogue GEMM+RS writing each rank's reduced rows into the symmetric gather buffer G at their
    global rows and counting them (``ar_reduced``), then the gather pattern on the comm lane, chunk by chunk: chunk
    c is offered to the peers as soon as the GEMM counted it, then the peers' chunk c is pulled (every rank reduces
    its chunk c at about the same time), so the gather overlaps the GEMM's remaining own chunks."""
    p, out = _partial(lw, g, t)
    ch = _chunks(lw, g, t)
    if not fusable(t, ch):
        raise lw.error(g.consumer, f"GEMM+AR with the epilogue reduction needs chunks of whole row tiles "
                                   f"(chunk_rows {ch.rows}, BLOCK_M {t.block_m}, shard {ch.shard} rows); run "
                                   "ditron-tile, or use all-reduce=two_shot")
    b = lw.b
    ga = gather_setup(lw, out, t, 0, ch.shard, group=g.group)
    reduced = b.pad(t.world * ch.count, "ar_reduced")
    rec = epilogue_rs(lw, g, t, p, ch, b.pad(t.world * ch.count, "ar_count"), ga.g, done=reduced)
    per = (ch.rows // rec["block_m"]) * math.ceil(rec["n"] / rec["block_n"])  # own tiles per chunk
    lw.grow_slot_step(per)
    expected = epoch_times(lw, per)
    with b.loop(0, ch.count, role="ar.offer_loop", group=g.group) as c:
        b.wait(reduced, [b.add(b.mul(b.rank, ch.count), c)], value=expected, lane="comm", role="ar.reduced",
               group=g.group)
        gather_offer(lw, ga, c, x=None, lane="comm")
        gather_pull_chunk(lw, ga, c)  # the peers reduce their chunk c about now: pull it while c+1 is computed
    b.wait(ga.ready, ga.slots, lane="compute", role="ar.join", group=g.group)


@register("matmul_ar", "push")
def gemm_ar_push(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> None:
    p, out = _partial(lw, g, t, crosses=False)
    pushing_gemm(lw, g, t, p, out)


@register("matmul_ar", "push_sum")
def gemm_ar_push_sum(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> None:
    """GEMM+AR in one launch (gemm template ``push.sum``; a one-wave GEMM): each tile goes into its slab of every
    peer's inbox, whose slot of the tile it sets to the epoch; then it waits for its own slots, adds the peers'
    tiles to its own and stores the sum to the output. The pad has one waiter per slot, which clears it
    (``ditron.consumed``: a CUDA graph zeroes nothing); the inbox rotates (no end barrier)."""
    from ...kernels import gemm
    b, mm = lw.b, task.Matmul(g.producer)
    out = lw.dest(task.AllReduce(g.consumer).output, "ar")
    slabs = t.world - 1
    box = inbox(lw, out, slabs)
    steps, ep_args, c_type = lw.epilogue(g.producer)
    rec = K.gemm_record(shape_of(mm.lhs), shape_of(mm.rhs), mm.lhs.type, c_type, t, b_trans=mm.transpose_b,
                        push={"arg": "inbox", "pad": "pushed", "slabs": slabs, "sum": True, "value_arg": "epoch"},
                        epilogue=steps, fast_accum=mm.fast_accum)
    pad = b.pad(gemm.geometry(rec).tiles * slabs, "ar_pushed", consumed=True)
    lw.launch(rec, [lw.buf(mm.lhs), lw.buf(mm.rhs), out, box, pad, b.v(b.epoch), *ep_args], lane="compute",
              role="ar.gemm_push_sum", group=g.group)
