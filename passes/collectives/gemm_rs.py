"""GEMM+RS (overlap kind ``matmul_rs``) and the fused GEMMs GEMM+AR shares with it: the GEMM writes its partial
rows into a symmetric P and the reduce-scatter overlaps it. Algorithms: epilogue (the own tiles add the peers'
partials in the GEMM's epilogue), reduce_kernel (the GEMM counts its tiles on the owners' pads, reduce kernels on a
few SMs reduce each chunk once counted), one_launch (the GEMM, then one reduce launch of the own rows), push (the
GEMM stores each tile of a peer's rows into that peer's inbox, then one launch sums the own rows), push_sum (the
same push; the own rows' tiles, last, add the inbox in the GEMM's epilogue)."""
from __future__ import annotations

import math

from mlir import ir

from ...dialects import task
from ...kernels import KernelRecord
from .. import device_kernels as K
from ..tiling import OverlapGroup, Tiling, elem_bytes, shape_of
from .common import Chunking, check_rows, epoch_times, inbox, resident_reduce_record
from .context import LoweringContext
from .reduce_scatter import Reduction, count_chunks, one_launch_reduce, reduce_chunks
from .table import register


def fused_gemm(lw: LoweringContext, g: OverlapGroup, t: Tiling, p: ir.Value, *, notify_rows: int | None,
               rows_per_rank: int, counts: ir.Value | None) -> int:
    """The GEMM of a matmul_rs / matmul_ar pair into P; with notify_rows, every tile adds 1 to the slots of its
    rows on their owner's pad. Returns how many adds one rank makes to each slot (0 if no notify)."""
    from ...kernels import gemm
    mm = task.Matmul(g.producer)
    notify = None
    if notify_rows is not None:
        notify = {"arg": "counts", "rows_per_slot": notify_rows, "peer": "slot_owner"}
    steps, ep_args, c_type = lw.epilogue(g.producer)
    rec = K.gemm_record(shape_of(mm.lhs), shape_of(mm.rhs), mm.lhs.type, c_type, t, b_trans=mm.transpose_b,
                        notify=notify, rows_per_rank=rows_per_rank, epilogue=steps, fast_accum=mm.fast_accum)
    args = [lw.buf(mm.lhs), lw.buf(mm.rhs), p] + ([counts] if notify is not None else []) + ep_args
    lw.launch(rec, args, lane="compute", role="rs.gemm", group=g.group)
    if notify is None:
        return 0
    per_slot = gemm.notify_count_values(rec)
    return per_slot.pop() if len(per_slot) == 1 else -1


def fusable(t: Tiling, ch: Chunking) -> bool:
    """The GEMM can count its tiles into the owner's slots when every slot gets the same count: whole row
    tiles per chunk, chunks dividing the shard."""
    return ch.uniform and t.block_m is not None and ch.rows % t.block_m == 0


def counted_gemm(lw: LoweringContext, g: OverlapGroup, t: Tiling, p: ir.Value, ch: Chunking,
                 counts: ir.Value) -> Reduction:
    """The fused GEMM into P with its chunks counted on their owners' pads (by the GEMM's per-tile notify when
    the counts come out uniform, else by host signals after it)."""
    if fusable(t, ch):
        per = fused_gemm(lw, g, t, p, notify_rows=ch.rows, rows_per_rank=ch.shard, counts=counts)
        if per > 0:
            return Reduction(p, counts, ch, t.world, per, g.group)
    fused_gemm(lw, g, t, p, notify_rows=None, rows_per_rank=ch.shard, counts=None)
    red = Reduction(p, counts, ch, t.world, 1, g.group)
    count_chunks(lw, red, lane="compute")
    return red


def epilogue_rs(lw: LoweringContext, g: OverlapGroup, t: Tiling, p: ir.Value, ch: Chunking, counts: ir.Value,
                out: ir.Value, *, done: ir.Value | None = None) -> KernelRecord:
    """GEMM+RS with the reduction in the GEMM's epilogue. Each rank's GEMM visits the next ranks' rows first
    (writing P, adding per tile to the owner's ``counts``) and its own rows last. How the peers' partials of an own
    chunk reach the own tiles (ditron-tile's ``engine``):

    * copy_engine: the comm lane waits until the peers counted the chunk, pulls their partials into the staging
      buffer with the copy engine and sets ``staged``; the own tiles wait on ``staged`` and add the staged tiles.
      No SM works for communication: for large chunks.
    * sm: the own tiles wait on ``counts`` themselves and read the peers' partial tiles from their P (symm_at):
      no staging hop, the lowest latency: for small chunks."""
    from ...kernels import gemm
    b, w = lw.b, t.world
    mm = task.Matmul(g.producer)
    n = shape_of(mm.result)[1]
    from_peers = t.engine == "sm"
    if from_peers:
        reduce_own = {"arg": "counts", "rows_per_slot": ch.rows, "parts": w - 1, "from_peers": True}
    else:
        reduce_own = {"arg": "staged", "rows_per_slot": ch.rows, "parts": w - 1}
    if done is not None:  # GEMM+AR: the sums go to the gather buffer's global rows, counted for the gather
        reduce_own.update(dst_rows="global", done="done")
    steps, ep_args, c_type = lw.epilogue(g.producer)
    rec = K.gemm_record(shape_of(mm.lhs), shape_of(mm.rhs), mm.lhs.type, c_type, t, b_trans=mm.transpose_b,
                        notify={"arg": "counts", "rows_per_slot": ch.rows, "peer": "slot_owner"},
                        reduce_own=reduce_own, rows_per_rank=ch.shard, tile_order="rank_rotated", rank_shift=1,
                        epilogue=steps, fast_accum=mm.fast_accum)
    per_slot = gemm.notify_count_values(rec)
    if len(per_slot) != 1:
        raise lw.error(g.consumer, "the GEMM's tiles do not count every chunk the same; use chunk rows that are a "
                                   "multiple of BLOCK_M")
    per = per_slot.pop() * (w - 1)  # every peer's tiles of a chunk add to its slot; the owner's own do not
    lw.grow_slot_step(per)
    expected = epoch_times(lw, per)
    tail = [out] + ([done] if done is not None else []) + ep_args
    if from_peers:
        lw.launch(rec, [lw.buf(mm.lhs), lw.buf(mm.rhs), p, counts, expected] + tail, lane="compute",
                  role="rs.gemm", group=g.group)
        return rec
    stage = lw.alloc_symmetric([(w - 1) * ch.shard, n], ir.MemRefType(p.type).element_type, "rs_stage")
    staged = b.pad(w * ch.count, "rs_staged")
    lw.launch(rec, [lw.buf(mm.lhs), lw.buf(mm.rhs), p, counts, staged, b.epoch, stage] + tail, lane="compute",
              role="rs.gemm", group=g.group)
    with b.loop(0, ch.count, role="rs.stage_loop", group=g.group) as c:
        slot = b.add(b.mul(b.rank, ch.count), c)
        off = b.mul(c, ch.rows)
        b.wait(counts, [slot], value=expected, lane="comm", role="rs.await", group=g.group)
        with b.loop(1, w, role="rs.pull_loop", group=g.group) as d:
            q = b.peer(b.sub(w, d))
            b.copy(p, stage, src_rank=q, dst_rank=b.rank, src_offsets=[b.add(b.mul(b.rank, ch.shard), off), 0],
                   dst_offsets=[b.add(b.mul(b.sub(d, 1), ch.shard), off), 0], sizes=[ch.rows, n],
                   engine="copy_engine", lane="comm", role="rs.pull", group=g.group)
        b.signal(staged, target=b.rank, slot=slot, lane="comm", role="rs.staged", group=g.group)
    if done is None:
        b.sync("comm", "compute", "rs.join")
    return rec


def pushing_gemm(lw: LoweringContext, g: OverlapGroup, t: Tiling, p: ir.Value, out: ir.Value | None, *,
                 owner_rows: int | None = None) -> None:
    """GEMM+AR by push: the GEMM stores each C tile into P and into its slab of every peer's inbox, counting the
    tile in the peer's ``ar_pushed`` slot of its row block (gemm template ``push``), so the link carries the
    partials while the GEMM runs; then one reduce launch (``publish.pushed``) sums P and the inbox, each tile
    once its slots count every column tile of the call (epoch * tiles_n). ``owner_rows`` (GEMM+RS by push, R
    rows per rank): P holds the own rows only ([R, n]), the GEMM stores a tile of rank q's rows into q's inbox
    alone (``push.owner``; the peers' rows first: rank-rotated, own rows last) and the sum covers the R own rows;
    without ``out`` (reduce-scatter=push_sum) P is the output and the GEMM's own tiles add the inbox themselves
    (``push.sum_own``), each once the peers set its slots to the epoch, and clear them (``ditron.consumed``: a CUDA
    graph zeroes nothing): no reduce launch. Either way the push fences itself: no end barrier, the inbox
    rotates."""
    from ...kernels import reduce
    b, mm = lw.b, task.Matmul(g.producer)
    rows, n = ir.MemRefType(p.type).shape
    slabs = t.world - 1
    prefix = "ar" if owner_rows is None else "rs"
    box = inbox(lw, p, slabs, f"{prefix}_inbox")
    push = {"arg": "inbox", "pad": "pushed", "slabs": slabs}
    order = {}
    if owner_rows is not None:
        push["owner"] = True
        order = dict(rows_per_rank=owner_rows, tile_order="rank_rotated", rank_shift=1)
    if out is None:
        push.update(sum_own=True, value_arg="expect")
    steps, ep_args, c_type = lw.epilogue(g.producer)
    rec = K.gemm_record(shape_of(mm.lhs), shape_of(mm.rhs), mm.lhs.type, c_type, t, b_trans=mm.transpose_b,
                        push=push, epilogue=steps, **order, fast_accum=mm.fast_accum)
    tiles_m, tiles_n = math.ceil(rows / rec["block_m"]), math.ceil(n / rec["block_n"])
    if out is None:  # a slot per own tile and slab, set to the epoch by its pusher, cleared by its one waiter
        pad = b.pad(slabs * tiles_m * tiles_n, f"{prefix}_pushed", consumed=True)
        lw.launch(rec, [lw.buf(mm.lhs), lw.buf(mm.rhs), p, box, pad, b.v(b.epoch), *ep_args], lane="compute",
                  role=f"{prefix}.gemm_push_sum", group=g.group)
        return
    pad = b.pad(slabs * tiles_m, f"{prefix}_pushed")
    lw.launch(rec, [lw.buf(mm.lhs), lw.buf(mm.rhs), p, box, pad, *ep_args], lane="compute",
              role=f"{prefix}.gemm_push", group=g.group)
    lw.grow_slot_step(tiles_n)
    tile = reduce.publish_tile(rows, n, elem_bytes(p), t.comm_sms or 16)
    fields = dict(dtype=K.dtype_name(p.type), out_dtype=K.dtype_name(out.type), dst_ld=ir.MemRefType(out.type).shape[1],
                  publish={"arg": "pushed", "value_arg": "expect", "copy_from": "x", "push": slabs,
                           "pushed": rec["block_m"]}, **tile)
    red = resident_reduce_record(rows, n, t.comm_sms or 16, fields)
    lw.launch(red, [box, out, p, pad, b.mul(b.epoch, tiles_n)], lane="compute", role=f"{prefix}.sum_pushed",
              group=g.group)


# ------------------------------------------------------------------------------------------ the algorithms

def _shard(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> tuple[int, int, Chunking]:
    """(rows, columns, the chunks of a rank's rows) of the GEMM, once GEMM+RS can scatter them."""
    mm, rs = task.Matmul(g.producer), task.ReduceScatter(g.consumer)
    if rs.dim != 0:
        raise lw.error(g.consumer, f"scatters dim {rs.dim}; GEMM+RS scatters the rows (dim 0) of the matmul")
    rows, n = shape_of(mm.result)
    ch = Chunking.of(t, rows // t.world)
    check_rows(lw, g.consumer, rows, t.world, ch)
    return rows, n, ch


def _pushed(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> tuple[ir.Value, Chunking]:
    """(the output, the chunks) of GEMM+RS by push, which needs SMs."""
    _, _, ch = _shard(lw, g, t)
    if t.engine != "sm":
        raise lw.error(g.consumer, f"reduce-scatter={t.algorithm} stores into the peers' inboxes with SMs; it "
                                   "needs engine sm")
    return lw.dest(task.ReduceScatter(g.consumer).output, "rs"), ch


@register("matmul_rs", "push")
def gemm_rs_push(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> None:
    """The peers' rows go to their inboxes; the own rows' partial is summed with the inbox by a reduce launch."""
    out, ch = _pushed(lw, g, t)
    n = shape_of(task.Matmul(g.producer).result)[1]
    element = ir.RankedTensorType(task.Matmul(g.producer).result.type).element_type
    own = lw.b.alloc([ch.shard, n], element, "rs_own")
    pushing_gemm(lw, g, t, own, out, owner_rows=ch.shard)


@register("matmul_rs", "push_sum")
def gemm_rs_push_sum(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> None:
    """The own tiles sum the inbox into the output: the whole reduce-scatter in the GEMM."""
    out, ch = _pushed(lw, g, t)
    pushing_gemm(lw, g, t, out, None, owner_rows=ch.shard)


def _partial(lw: LoweringContext, g: OverlapGroup, t: Tiling):
    """(P, the output, the owners' count pad, the chunks, columns): the GEMM's partial rows in a symmetric P."""
    mm = task.Matmul(g.producer)
    rows, n, ch = _shard(lw, g, t)
    p = lw.alloc_symmetric([rows, n], ir.RankedTensorType(mm.result.type).element_type, "rs_partial")
    lw.bind(mm.result, p)
    out = lw.dest(task.ReduceScatter(g.consumer).output, "rs")
    counts = lw.b.pad(t.world * ch.count, "rs_count")
    lw.crosses()
    return p, out, counts, ch, n


@register("matmul_rs", "one_launch")
def gemm_rs_one_launch(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> None:
    """The GEMM, then one reduce launch of the own rows reading P where it is."""
    from ...kernels.reduce import publish_tile
    p, out, _, ch, n = _partial(lw, g, t)
    fused_gemm(lw, g, t, p, notify_rows=None, rows_per_rank=0, counts=None)
    one_launch_reduce(lw, t, p, out, owner_rows=ch.shard,
                      tile=publish_tile(ch.shard, n, elem_bytes(p), t.comm_sms or 16))


@register("matmul_rs", "epilogue")
def gemm_rs_epilogue(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> None:
    p, out, counts, ch, _ = _partial(lw, g, t)
    if not fusable(t, ch):
        raise lw.error(g.consumer, f"GEMM+RS with the epilogue reduction needs chunks of whole row tiles "
                                   f"(chunk_rows {ch.rows}, BLOCK_M {t.block_m}, shard {ch.shard} rows); run "
                                   "ditron-tile, or use the reduce_kernel algorithm")
    epilogue_rs(lw, g, t, p, ch, counts, out)


@register("matmul_rs", "reduce_kernel")
def gemm_rs_reduce_kernel(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> None:
    p, out, counts, ch, _ = _partial(lw, g, t)
    red = counted_gemm(lw, g, t, p, ch, counts)
    reduce_chunks(lw, red, out, owner_rows=True, t=t)
    lw.b.sync("reduce", "compute", "rs.join")
