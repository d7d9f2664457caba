"""All-reduce (docs/device_ir.md, "Patterns"): one_shot (every rank reduces every chunk) or two_shot (reduce by
owner into a symmetric gather buffer, then the gather pattern distributes the reduced shards), each staged by the
copy engine and reduced by reduce kernels, or, with engine sm, as one reduce launch (reduce_scatter.
one_launch_reduce). push (engine sm) is one-shot by stores: each program stores its tiles into its slab of every
peer's inbox and sets the peer's slots, then sums its own tiles with its inbox once its own slots are set (no end
barrier: the push fences itself, its inbox rotates)."""
from __future__ import annotations

from mlir import ir

from ...dialects import task
from ..tiling import Tiling
from .all_gather import gather_offer, gather_pull, gather_setup
from .common import Chunking, check_rows, partials, require_2d
from .context import LoweringContext
from .reduce_scatter import Reduction, count_chunks, one_launch_reduce, reduce_chunks
from .table import register


def _one_shot_count(lw: LoweringContext, red: Reduction, *, lane: str, stage_from) -> None:
    """One-shot: stage (optionally) every chunk, then count it on every rank (each rank reduces all rows)."""
    b = lw.b
    n = ir.MemRefType(red.p.type).shape[1]
    with b.loop(0, red.ch.count, role="rs.chunk_loop", group=red.group) as c:
        off = b.mul(c, red.ch.rows)
        if stage_from is not None:
            b.copy(stage_from, red.p, src_rank=b.rank, dst_rank=b.rank, src_offsets=[off, 0], dst_offsets=[off, 0],
                   sizes=[red.ch.rows, n], engine="copy_engine", lane=lane, role="rs.stage", group=red.group)
        with b.loop(1, red.world + 1, role="rs.count_loop", group=red.group) as d:
            b.signal(red.counts, target=b.peer(d), slot=c, value=b.c(1), op="add", lane=lane, role="rs.count",
                     group=red.group)


def all_reduce_from(lw: LoweringContext, op: ir.Operation, t: Tiling, p: ir.Value, out: ir.Value,
                    gemm_counted: Reduction | None, *, lane: str, stage_from, group: int | None) -> None:
    """The all-reduce of the partials in the symmetric P into out by reduce kernels: two_shot (reduce by owner
    into the gather buffer, then the gather) or else one_shot. ``gemm_counted``: a fused GEMM already counts P's
    chunks (two_shot); else they are counted (and staged from ``stage_from``) on ``lane``."""
    rows = ir.MemRefType(p.type).shape[0]
    if t.algorithm == "two_shot":
        if gemm_counted is not None:
            red = gemm_counted
        else:
            ch = Chunking.of(t, rows // t.world)
            check_rows(lw, op, rows, t.world, ch)
            red = Reduction(p, lw.b.pad(t.world * ch.count, "ar_count"), ch, t.world, 1, group)
            count_chunks(lw, red, lane=lane, stage_from=stage_from)
        ga = gather_setup(lw, out, t, 0, red.ch.shard, group=group)
        row0 = lw.b.mul(lw.b.rank, red.ch.shard)
        reduce_chunks(lw, red, ga.g, owner_rows=True, dst_row0=row0, t=t,
                      after=lambda c: gather_offer(lw, ga, c, x=None, lane="reduce"))
        gather_pull(lw, ga)
        lw.b.wait(ga.ready, ga.slots, lane="compute", role="ar.join", group=group)
        return
    ch = Chunking.of(t, rows)
    if not ch.uniform:
        raise lw.error(op, f"chunk_rows {ch.rows} does not divide the {rows} rows; run ditron-tile or pass "
                           "chunk-rows that divides them")
    red = Reduction(p, lw.b.pad(ch.count, "ar_count"), ch, t.world, 1, group)
    _one_shot_count(lw, red, lane=lane, stage_from=stage_from)
    reduce_chunks(lw, red, out, owner_rows=False, t=t)
    lw.b.sync("reduce", "compute", "ar.join")


def _checked(lw: LoweringContext, op: ir.Operation) -> None:
    ar = task.AllReduce(op)
    if ar.reduce != "sum":
        raise lw.error(op, f"reduces with '{ar.reduce}'; the reduce template sums")
    require_2d(lw, op, ar.input)


def _staged_or_one_launch(lw: LoweringContext, op: ir.Operation, t: Tiling, x: ir.Value, out: ir.Value) -> None:
    """one_shot / two_shot: one reduce launch on SMs (engine sm), else staged by the copy engine and reduced by
    reduce kernels."""
    _checked(lw, op)
    if t.engine == "sm":
        one_launch_reduce(lw, t, x, out, two_shot=t.algorithm == "two_shot")
        return
    p, stage = partials(lw, x)
    lw.crosses()
    if stage is not None and not lw.is_input(x):
        lw.b.sync("compute", "comm", "ar.fork")
    lane = "comm" if stage is not None else "compute"
    all_reduce_from(lw, op, t, p, out, None, lane=lane, stage_from=stage, group=None)


register("all_reduce", "one_shot")(_staged_or_one_launch)
register("all_reduce", "two_shot")(_staged_or_one_launch)


@register("all_reduce", "push")
def all_reduce_push(lw: LoweringContext, op: ir.Operation, t: Tiling, x: ir.Value, out: ir.Value) -> None:
    """One-shot by SM stores into the peers' inboxes, in one reduce launch."""
    _checked(lw, op)
    if t.engine != "sm":
        raise lw.error(op, "all-reduce=push stores with SMs; it needs engine sm (run ditron-tile, or use one_shot "
                           "with the copy engine)")
    one_launch_reduce(lw, t, x, out, push=True)
