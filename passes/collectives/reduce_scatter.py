"""Reduce-scatter, and the reduction patterns the all-reduces and the fused GEMM+RS / GEMM+AR share
(docs/device_ir.md, "Patterns"):

* reduce by owner: partial rows live in a symmetric buffer on every rank; for each chunk of the rows it owns, a
  rank waits on its own pad until all W ranks counted the chunk complete, then launches the reduce template (reads
  the chunk from every rank through symm_at, sums in fp32). A fused GEMM counts its tiles into the owner's pad
  (notify ``slot_owner``); otherwise host signals count whole chunks.
* one launch (engine sm): one reduce kernel whose programs publish their tiles (copied into the symmetric buffer
  if x is not one) by setting their slots, then sum every rank's tiles once their slots are set.

Slots count up across calls: a chunk of call e is ready when its slot reaches e * expected (set-signals write the
epoch itself).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir

from ...dialects import task
from ...kernels import KernelRecord
from .. import device_kernels as K
from ..tiling import Tiling, shape_of
from .common import Chunking, check_rows, inbox, partials, require_2d, resident_reduce_record
from .context import LoweringContext
from .table import register


@dataclass
class Reduction:
    """Reduce partial rows (symmetric P, [M, N]) by owner: chunk c of owner q's rows is complete on a rank when
    its slot q*C + c on the owner's pad ``counts`` reached epoch * per_chunk from each of the W ranks."""

    p: ir.Value
    counts: ir.Value
    ch: Chunking
    world: int
    per_chunk: int
    group: int | None


def reduce_chunks(lw: LoweringContext, red: Reduction, dst: ir.Value, *, owner_rows: bool, dst_row0=0,
                  t: Tiling, after=None) -> None:
    """For each chunk c this rank reduces: wait until every rank counted it, then launch the reduce template on it.
    owner_rows: the chunk is one of this rank's shard's (reduce-scatter), else chunk c of all rows (one-shot).
    ``after(c)`` emits follow-up work for chunk c on the reduce lane (e.g. offering it for a gather)."""
    b, n = lw.b, ir.MemRefType(red.p.type).shape[1]
    lw.grow_slot_step(red.world * red.per_chunk)
    expected = b.mul(red.world * red.per_chunk, b.epoch) if red.world * red.per_chunk != 1 else b.epoch
    if not isinstance(expected, ir.Value):
        expected = b.v(expected)
    rec = _reduce_record(red, n, dst, t)
    with b.loop(0, red.ch.count, role="rs.reduce_loop", group=red.group) as c:
        base = b.mul(b.rank, red.ch.count) if owner_rows else 0
        slot = b.add(base, c)
        off = b.mul(c, red.ch.rows)
        src_row = b.add(b.mul(b.rank, red.ch.shard), off) if owner_rows else off
        b.wait(red.counts, [slot], value=expected, lane="reduce", role="rs.await", group=red.group)
        lw.launch(rec, [red.p, dst, src_row, b.add(dst_row0, off)], lane="reduce", role="rs.reduce",
                  group=red.group)
        if after is not None:
            after(c)


def _reduce_record(red: Reduction, n: int, dst: ir.Value, t: Tiling) -> KernelRecord:
    from ...kernels import reduce
    dtype = K.dtype_name(red.p.type)
    grid = max(1, min(t.comm_sms or 16, math.ceil(red.ch.rows / 8) * math.ceil(n / 256)))
    return reduce.make_record(red.ch.rows, n, dtype=dtype, out_dtype=K.dtype_name(dst.type), src_ld=n,
                              dst_ld=ir.MemRefType(dst.type).shape[1], src_row="arg:src_row",
                              dst_row="arg:dst_row", grid=grid)


def count_chunks(lw: LoweringContext, red: Reduction, *, lane: str, stage_from=None) -> None:
    """Host-side counting (no fused GEMM notify): for every owner q (own rows last) and chunk c of q's rows,
    optionally stage the chunk from ``stage_from`` into P, then add 1 to slot q*C + c on q."""
    b = lw.b
    n = ir.MemRefType(red.p.type).shape[1]
    with b.loop(1, red.world + 1, role="rs.count_loop", group=red.group) as d:
        q = b.peer(d)
        with b.loop(0, red.ch.count, role="rs.chunk_loop", group=red.group) as c:
            row = b.add(b.mul(q, red.ch.shard), b.mul(c, red.ch.rows))
            if stage_from is not None:
                b.copy(stage_from, red.p, src_rank=b.rank, dst_rank=b.rank, src_offsets=[row, 0],
                       dst_offsets=[row, 0], sizes=[red.ch.rows, n], engine="copy_engine", lane=lane,
                       role="rs.stage", group=red.group)
            b.signal(red.counts, target=q, slot=b.add(b.mul(q, red.ch.count), c), value=b.c(1), op="add",
                     lane=lane, role="rs.count", group=red.group)


def one_launch_reduce(lw: LoweringContext, t: Tiling, x: ir.Value, out: ir.Value, *,
                      tile: dict[str, int] | None = None, owner_rows: int | None = None, two_shot: bool = False,
                      push: bool = False) -> None:
    """One-shot all-reduce in one kernel (engine sm): each program copies a tile of x into the symmetric P, sets
    its slot on its own pad and sums that tile from every rank, waiting on each rank's slot first, tile after tile
    (reduce template, ``publish``). No copy engine, no stream hand-offs. ``owner_rows``: reduce only this rank's
    rows [rank * owner_rows, +owner_rows) into out (a reduce-scatter): a tile's copy covers its place in every
    rank's rows, or, when x is already symmetric and complete (a GEMM's output before this launch on the same
    stream), nothing is copied and every slot is set first. ``two_shot``: each tile is summed on one rank only,
    which writes the sum into every peer's P and sets the tile's slot of ``ar_reduced`` there; the others copy it
    from their P (``publish.scatter``): half the bytes each way of a link at W = 2, against all of them one way.
    ``push``: one-shot by stores (``publish.push``): P is an inbox of W - 1 slabs of x's shape; each rank stores
    its x into its slab of every peer's inbox and sets the peer's slots, then sums x and its own inbox, clearing
    its slots after (``publish.consume``: the pad is ``ditron.consumed``)."""
    from ...kernels import chunk
    b = lw.b
    if push:
        p, stage = inbox(lw, x, t.world - 1), x
        rows, n = ir.MemRefType(x.type).shape
    else:
        p, stage = partials(lw, x)
        rows, n = ir.MemRefType(p.type).shape
        lw.crosses()
    publish = {"arg": "published", "value_arg": "epoch", **({"copy_from": "x"} if stage is not None else {}),
               **({"scatter": "reduced"} if two_shot else {}),
               **({"push": t.world - 1, "consume": True} if push else {})}
    if tile is None:  # ditron-tile's (standalone all-reduce or reduce-scatter), else the template's choice
        tile = {"block_m": t.block_m, "block_n": t.block_n, "num_warps": t.num_warps or 4}
    region = {} if owner_rows is None else {"src_row": "arg:src_row"}
    fields = dict(dtype=K.dtype_name(p.type), out_dtype=K.dtype_name(out.type), src_ld=n,
                  dst_ld=ir.MemRefType(out.type).shape[1], publish=publish, **region, **tile)
    rows = rows if owner_rows is None else owner_rows
    rec = resident_reduce_record(rows, n, t.comm_sms or 16, fields)
    pad = b.pad(chunk.num_tiles(rec) * (t.world - 1 if push else 1),
                "ar_published" if owner_rows is None else "rs_published", consumed=push)
    args = [p, out] + ([x] if stage is not None else []) + [pad, b.v(b.epoch)]
    if two_shot:
        args.append(b.pad(chunk.num_tiles(rec), "ar_reduced"))
    if owner_rows is not None:
        args.append(b.mul(b.rank, owner_rows))
    lw.launch(rec, args, lane="compute", role="ar.one_launch" if owner_rows is None else "rs.one_launch")


def _checked(lw: LoweringContext, op: ir.Operation, t: Tiling) -> Chunking:
    """The chunks of a standalone reduce-scatter's shard, once the op is one the device lowering takes."""
    rs = task.ReduceScatter(op)
    if rs.dim != 0:
        raise lw.error(op, f"scatters dim {rs.dim}; the device lowering scatters rows (dim 0) only")
    if rs.reduce != "sum":
        raise lw.error(op, f"reduces with '{rs.reduce}'; the reduce template sums")
    require_2d(lw, op, rs.input)
    rows = shape_of(rs.input)[0]
    ch = Chunking.of(t, rows // t.world)
    check_rows(lw, op, rows, t.world, ch)
    return ch


@register("reduce_scatter", "one_launch")
def reduce_scatter_one_launch(lw: LoweringContext, op: ir.Operation, t: Tiling, x: ir.Value, out: ir.Value) -> None:
    """One reduce launch of the own rows; it copies x into P tile by tile."""
    ch = _checked(lw, op, t)
    one_launch_reduce(lw, t, x, out, owner_rows=ch.shard)


@register("reduce_scatter", "reduce_kernel")
def reduce_scatter_reduce_kernel(lw: LoweringContext, op: ir.Operation, t: Tiling, x: ir.Value,
                                 out: ir.Value) -> None:
    """Reduce by owner: x staged into a symmetric P (unless it is one) chunk by chunk, counted on the chunk's
    owner, reduced there by reduce kernels on the reduce lane."""
    ch = _checked(lw, op, t)
    p, stage = partials(lw, x)
    red = Reduction(p, lw.b.pad(t.world * ch.count, "rs_count"), ch, t.world, 1, None)
    lw.crosses()
    if stage is not None and not lw.is_input(x):
        lw.b.sync("compute", "comm", "rs.fork")
    count_chunks(lw, red, lane="comm" if stage is not None else "compute", stage_from=stage)
    reduce_chunks(lw, red, out, owner_rows=True, t=t)
    lw.b.sync("reduce", "compute", "rs.join")
