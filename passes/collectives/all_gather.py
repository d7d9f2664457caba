"""All-gather (docs/device_ir.md, "Patterns").

* gather (all-gather by pull): each rank stages its shard into a symmetric gather buffer chunk by chunk, signals
  ``ready[q*C + c]`` (chunk c of rank q's shard is in this rank's destination) and offers the chunk to the peers
  (``avail``); every rank then pulls each peer's chunks once they are offered. ditron-schedule-overlap may turn the
  direct pull into a ring (pull from rank+1, forward to rank-1).
* gather by push (AG+GEMM, the model's choice where it saves the offer hop): each rank copies its chunks into every
  rank's gather buffer and sets ``ready`` there.

The gather patterns are also the second half of a two-shot all-reduce and of GEMM+AR's epilogue algorithm.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from ...dialects import device, task
from ..device_builder import tag
from ..tiling import Tiling
from .common import Chunking, box, chunk_extent
from .context import LoweringContext
from .table import register


@dataclass
class Gather:
    """One all-gather along dim: G (symmetric, where peers pull from), dst (where this rank wants the data),
    pads ready/avail of W * chunks slots."""

    g: ir.Value
    dst: ir.Value
    dim: int
    ch: Chunking
    world: int
    ready: ir.Value
    avail: ir.Value
    engine: str
    group: int | None
    id: int = 0
    sms: int = 0

    def tag(self, op) -> None:
        """Mark op as part of this gather (ditron-schedule-overlap rewrites the pattern as a whole); copies on SMs
        get the SM count ditron-tile gave the communication."""
        tag(op, gather=self.id)
        if isinstance(op, device.Copy) and op.engine == "sm" and self.sms > 0:
            op.op.attributes["ditron.sms"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), self.sms)

    @property
    def slots(self) -> list[int]:
        return list(range(self.world * self.ch.count))


def gather_setup(lw: LoweringContext, dst: ir.Value, t: Tiling, dim: int, shard: int, *,
                 group: int | None, gather_buf: ir.Value | None = None) -> Gather:
    b = lw.b
    g = gather_buf if gather_buf is not None else (dst if lw.is_symmetric(dst) else None)
    if g is None:
        mt = ir.MemRefType(dst.type)
        g = lw.alloc_symmetric(list(mt.shape), mt.element_type, "ag_gather")
    ch = Chunking.of(t, shard)
    lw.crosses()
    gather_id = lw.next_gather_id()
    return Gather(g, dst, dim, ch, t.world, b.pad(t.world * ch.count, "ag_ready"),
                  b.pad(t.world * ch.count, "ag_avail"), t.engine or "copy_engine", group, gather_id,
                  t.comm_sms or 0)


def gather_offer(lw: LoweringContext, ga: Gather, c: ir.Value, *, x: ir.Value | None, lane: str) -> None:
    """Chunk c of this rank's shard: copy it from x into G (and dst) unless it is already in G, mark it ready
    here and offer it to the peers."""
    b = lw.b
    full = list(ir.MemRefType(ga.dst.type).shape)
    off, size = chunk_extent(lw, ga.ch, c)
    row = b.add(b.mul(b.rank, ga.ch.shard), off)
    dst_o, sizes = box(full, ga.dim, row, size)
    if x is not None:
        src_o, _ = box(list(ir.MemRefType(x.type).shape), ga.dim, off, size)
        ga.tag(b.copy(x, ga.g, src_rank=b.rank, dst_rank=b.rank, src_offsets=src_o, dst_offsets=dst_o,
                      sizes=sizes, engine=ga.engine, lane=lane, role="ag.stage", group=ga.group))
        if ga.g != ga.dst:
            ga.tag(b.copy(x, ga.dst, src_rank=b.rank, dst_rank=b.rank, src_offsets=src_o, dst_offsets=dst_o,
                          sizes=sizes, engine=ga.engine, lane=lane, role="ag.local", group=ga.group))
    elif ga.g != ga.dst:
        ga.tag(b.copy(ga.g, ga.dst, src_rank=b.rank, dst_rank=b.rank, src_offsets=dst_o, dst_offsets=dst_o,
                      sizes=sizes, engine=ga.engine, lane=lane, role="ag.local", group=ga.group))
    slot = b.add(b.mul(b.rank, ga.ch.count), c)
    ga.tag(b.signal(ga.ready, target=b.rank, slot=slot, lane=lane, role="ag.ready", group=ga.group))
    with b.loop(1, ga.world, role="ag.offer", group=ga.group) as d:
        ga.tag(b.signal(ga.avail, target=b.peer(d), slot=slot, lane=lane, role="ag.offer_signal", group=ga.group))
    ga.tag(d.owner.owner)


def gather_pull(lw: LoweringContext, ga: Gather) -> None:
    """Pull every peer's chunks (direct: from their owner) once offered; signal ready per chunk."""
    b = lw.b
    with b.loop(1, ga.world, role="ag.pull_loop", group=ga.group) as s:
        q = b.peer(s)
        with b.loop(0, ga.ch.count, role="ag.chunk_loop", group=ga.group) as c:
            _pull_chunk(lw, ga, q, c)
        ga.tag(c.owner.owner)
    ga.tag(s.owner.owner)


def gather_pull_chunk(lw: LoweringContext, ga: Gather, c: ir.Value) -> None:
    """Pull chunk c of every peer's shard once offered (for a pattern that offers its own chunks one by one as
    they are produced: the pulls of chunk c then overlap the production of chunk c+1)."""
    with lw.b.loop(1, ga.world, role="ag.pull_loop", group=ga.group) as s:
        _pull_chunk(lw, ga, lw.b.peer(s), c)
    ga.tag(s.owner.owner)


def _pull_chunk(lw: LoweringContext, ga: Gather, q: ir.Value, c: ir.Value) -> None:
    b = lw.b
    full = list(ir.MemRefType(ga.dst.type).shape)
    off, size = chunk_extent(lw, ga.ch, c)
    slot = b.add(b.mul(q, ga.ch.count), c)
    box_o, sizes = box(full, ga.dim, b.add(b.mul(q, ga.ch.shard), off), size)
    ga.tag(b.wait(ga.avail, [slot], lane="comm", role="ag.await", group=ga.group))
    ga.tag(b.copy(ga.g, ga.g, src_rank=q, dst_rank=b.rank, src_offsets=box_o, dst_offsets=box_o,
                  sizes=sizes, engine=ga.engine, lane="comm", role="ag.pull", group=ga.group))
    if ga.g != ga.dst:
        ga.tag(b.copy(ga.g, ga.dst, src_rank=b.rank, dst_rank=b.rank, src_offsets=box_o, dst_offsets=box_o,
                      sizes=sizes, engine=ga.engine, lane="comm", role="ag.local", group=ga.group))
    ga.tag(b.signal(ga.ready, target=b.rank, slot=slot, lane="comm", role="ag.arrive", group=ga.group))


def gather(lw: LoweringContext, x: ir.Value, dst: ir.Value, t: Tiling, dim: int, *, group: int | None,
           gather_buf: ir.Value | None = None) -> Gather:
    """All-gather x (this rank's shard) along dim into dst."""
    b = lw.b
    shard = ir.MemRefType(x.type).shape[dim]
    ga = gather_setup(lw, dst, t, dim, shard, group=group, gather_buf=gather_buf)
    if not lw.is_input(x):
        b.sync("compute", "comm", "ag.fork")
    with b.loop(0, ga.ch.count, role="ag.stage_loop", group=group) as c:
        gather_offer(lw, ga, c, x=x, lane="comm")
    gather_pull(lw, ga)
    return ga


def gather_push(lw: LoweringContext, x: ir.Value, g: ir.Value, t: Tiling, dim: int, *,
                group: int | None) -> Gather:
    """All-gather x into the symmetric buffer g by push: chunk by chunk, this rank copies its chunk into g on every
    rank and sets ``ready`` there. No offer and no pull: a peer's buffer is free to write because the previous call
    ended with a barrier, after which nobody reads it until this call's ``ready``. Order: its own rank first (the
    GEMM starts on its own rows), unless a GEMM tile is taller than a shard: then no tile can start before the
    peers' rows land, so the peers come first and the quick local copy last (2xH200, 70B M = 128: the push to the
    peer started ~10 us later behind the local copy and its signal)."""
    b = lw.b
    shard = ir.MemRefType(x.type).shape[dim]
    first = 1 if t.block_m and 0 < shard < t.block_m else 0
    ga = gather_setup(lw, g, t, dim, shard, group=group, gather_buf=g)
    if not lw.is_input(x):
        b.sync("compute", "comm", "ag.fork")
    full = list(ir.MemRefType(g.type).shape)
    with b.loop(0, ga.ch.count, role="ag.push_loop", group=group) as c:
        off, size = chunk_extent(lw, ga.ch, c)
        dst_o, sizes = box(full, dim, b.add(b.mul(b.rank, ga.ch.shard), off), size)
        src_o, _ = box(list(ir.MemRefType(x.type).shape), dim, off, size)
        slot = b.add(b.mul(b.rank, ga.ch.count), c)
        with b.loop(0, ga.world, role="ag.push_peers", group=group) as d:
            q = b.peer(b.add(d, first))
            ga.tag(b.copy(x, g, src_rank=b.rank, dst_rank=q, src_offsets=src_o, dst_offsets=dst_o, sizes=sizes,
                          engine=ga.engine, lane="comm", role="ag.push", group=group))
            ga.tag(b.signal(ga.ready, target=q, slot=slot, lane="comm", role="ag.arrive", group=group))
        ga.tag(d.owner.owner)
    ga.tag(c.owner.owner)
    return ga


@register("all_gather", "pull")
def all_gather_pull(lw: LoweringContext, op: ir.Operation, t: Tiling, x: ir.Value, out: ir.Value) -> None:
    """A standalone all-gather: the gather pattern, then the compute lane waits for every chunk."""
    ga = gather(lw, x, out, t, task.AllGather(op).dim, group=None)
    lw.b.wait(ga.ready, ga.slots, lane="compute", role="ag.join")
