"""The communication patterns of ditron-lower-task-to-device (docs/device_ir.md, "Patterns"):

* gather by push (AG+GEMM, the model's choice where it saves the offer hop): each rank copies its chunks into every
  rank's gather buffer and sets ``ready`` there.
* gather (all-gather by pull): each rank stages its shard into a symmetric gather buffer chunk by chunk, signals
  ``ready[q*C + c]`` (chunk c of rank q's shard is in this rank's destination) and offers the chunk to the peers
  (``avail``); every rank then pulls each peer's chunks once they are offered. ditron-schedule-overlap may turn the
  direct pull into a ring (pull from rank+1, forward to rank-1).
* all-to-all (static, by pull): part q of this rank's input is staged into a symmetric send buffer and offered to
  rank q alone; each rank copies its own part and pulls its part of every peer's buffer once offered
  (``all_to_all``).
* reduce by owner (reduce-scatter): partial rows live in a symmetric buffer on every rank; for each chunk of the
  rows it owns, a rank waits on its own pad until all W ranks counted the chunk complete, then launches the reduce
  template (reads the chunk from every rank through symm_at, sums in fp32). A fused GEMM counts its tiles into
  the owner's pad (notify ``slot_owner``); otherwise host signals count whole chunks.
* all-reduce: one_shot (every rank reduces every chunk) or two_shot (reduce by owner into a symmetric gather
  buffer, then the gather pattern distributes the reduced shards). One-shot on SMs (engine sm; GEMM+AR's one_shot
  always) is one reduce launch: each program publishes its tiles (copied into the symmetric buffer if x is not
  one) by setting their slots, then sums every rank's tiles once their slots are set. push (engine sm, standalone
  or after GEMM+AR's GEMM) is one-shot by stores: each program stores its tiles into its slab of every peer's
  inbox and sets the peer's slots, then sums its own tiles with its inbox once its own slots are set. GEMM+AR's
  push has the GEMM store each tile into the peers' inboxes as it completes (and count it there), then sums.

Slots count up across calls: a chunk of call e is ready when its slot reaches e * expected (set-signals write the
epoch itself). The end-of-program barrier keeps a rank from starting call e+1 while peers still read its buffers;
a push needs none (peers only store into its inbox, which rotates: ``_FunctionLowering._end``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlir import ir

from ..dialects import device, task
from ..kernels import KernelRecord
from . import device_kernels as K
from .tile import OverlapGroup, Tiling, elem_bytes, shape_of

if TYPE_CHECKING:
    from .lower_task_to_device import _FunctionLowering


def _box(shape, dim: int, offset, size):
    offsets = [0] * len(shape)
    sizes = list(shape)
    offsets[dim], sizes[dim] = offset, size
    return offsets, sizes


@dataclass
class Chunking:
    """Chunks of one shard along its dim: chunk c covers [c * rows, c * rows + size(c)) of the shard."""

    shard: int
    rows: int
    count: int

    @staticmethod
    def of(t: Tiling, shard: int) -> "Chunking":
        rows = max(1, min(t.chunk_rows or shard, shard)) if shard > 0 else 1
        return Chunking(shard, rows, max(1, math.ceil(shard / rows)))

    @property
    def uniform(self) -> bool:
        return self.shard % self.rows == 0


# ------------------------------------------------------------------------------------------------- gather

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
        from .device_builder import tag
        tag(op, gather=self.id)
        if isinstance(op, device.Copy) and op.engine == "sm" and self.sms > 0:
            op.op.attributes["ditron.sms"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), self.sms)

    @property
    def slots(self) -> list[int]:
        return list(range(self.world * self.ch.count))


def gather_setup(lw: "_FunctionLowering", dst: ir.Value, t: Tiling, dim: int, shard: int, *,
                 group: int | None, gather_buf: ir.Value | None = None) -> Gather:
    b = lw.b
    g = gather_buf if gather_buf is not None else (dst if lw.is_symmetric(dst) else None)
    if g is None:
        mt = ir.MemRefType(dst.type)
        g = b.alloc(list(mt.shape), mt.element_type, "ag_gather")
        lw.symmetric.add(g)
    ch = Chunking.of(t, shard)
    lw.crosses()
    lw.gathers += 1
    return Gather(g, dst, dim, ch, t.world, b.pad(t.world * ch.count, "ag_ready"),
                  b.pad(t.world * ch.count, "ag_avail"), t.engine or "copy_engine", group, lw.gathers - 1,
                  t.comm_sms or 0)


def chunk_extent(lw: "_FunctionLowering", ch: Chunking, c: ir.Value):
    b = lw.b
    off = b.mul(c, ch.rows)
    if ch.uniform:
        return off, ch.rows
    return off, b.min(ch.rows, b.sub(ch.shard, off))


def gather_offer(lw: "_FunctionLowering", ga: Gather, c: ir.Value, *, x: ir.Value | None, lane: str) -> None:
    """Chunk c of this rank's shard: copy it from x into G (and dst) unless it is already in G, mark it ready
    here and offer it to the peers."""
    b = lw.b
    full = list(ir.MemRefType(ga.dst.type).shape)
    off, size = chunk_extent(lw, ga.ch, c)
    row = b.add(b.mul(b.rank, ga.ch.shard), off)
    dst_o, sizes = _box(full, ga.dim, row, size)
    if x is not None:
        src_o, _ = _box(list(ir.MemRefType(x.type).shape), ga.dim, off, size)
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


def gather_pull(lw: "_FunctionLowering", ga: Gather) -> None:
    """Pull every peer's chunks (direct: from their owner) once offered; signal ready per chunk."""
    b = lw.b
    with b.loop(1, ga.world, role="ag.pull_loop", group=ga.group) as s:
        q = b.peer(s)
        with b.loop(0, ga.ch.count, role="ag.chunk_loop", group=ga.group) as c:
            _pull_chunk(lw, ga, q, c)
        ga.tag(c.owner.owner)
    ga.tag(s.owner.owner)


def gather_pull_chunk(lw: "_FunctionLowering", ga: Gather, c: ir.Value) -> None:
    """Pull chunk c of every peer's shard once offered (for a pattern that offers its own chunks one by one as
    they are produced: the pulls of chunk c then overlap the production of chunk c+1)."""
    with lw.b.loop(1, ga.world, role="ag.pull_loop", group=ga.group) as s:
        _pull_chunk(lw, ga, lw.b.peer(s), c)
    ga.tag(s.owner.owner)


def _pull_chunk(lw: "_FunctionLowering", ga: Gather, q: ir.Value, c: ir.Value) -> None:
    b = lw.b
    full = list(ir.MemRefType(ga.dst.type).shape)
    off, size = chunk_extent(lw, ga.ch, c)
    slot = b.add(b.mul(q, ga.ch.count), c)
    box_o, sizes = _box(full, ga.dim, b.add(b.mul(q, ga.ch.shard), off), size)
    ga.tag(b.wait(ga.avail, [slot], lane="comm", role="ag.await", group=ga.group))
    ga.tag(b.copy(ga.g, ga.g, src_rank=q, dst_rank=b.rank, src_offsets=box_o, dst_offsets=box_o,
                  sizes=sizes, engine=ga.engine, lane="comm", role="ag.pull", group=ga.group))
    if ga.g != ga.dst:
        ga.tag(b.copy(ga.g, ga.dst, src_rank=b.rank, dst_rank=b.rank, src_offsets=box_o, dst_offsets=box_o,
                      sizes=sizes, engine=ga.engine, lane="comm", role="ag.local", group=ga.group))
    ga.tag(b.signal(ga.ready, target=b.rank, slot=slot, lane="comm", role="ag.arrive", group=ga.group))


def gather(lw: "_FunctionLowering", x: ir.Value, dst: ir.Value, t: Tiling, dim: int, *, group: int | None,
           gather_buf: ir.Value | None = None) -> Gather:
    """All-gather x (this rank's shard) along dim into dst."""
    b = lw.b
    shard = ir.MemRefType(x.type).shape[dim]
    ga = gather_setup(lw, dst, t, dim, shard, group=group, gather_buf=gather_buf)
    if x not in lw.inputs:
        b.sync("compute", "comm", "ag.fork")
    with b.loop(0, ga.ch.count, role="ag.stage_loop", group=group) as c:
        gather_offer(lw, ga, c, x=x, lane="comm")
    gather_pull(lw, ga)
    return ga


def gather_push(lw: "_FunctionLowering", x: ir.Value, g: ir.Value, t: Tiling, dim: int, *,
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
    if x not in lw.inputs:
        b.sync("compute", "comm", "ag.fork")
    full = list(ir.MemRefType(g.type).shape)
    with b.loop(0, ga.ch.count, role="ag.push_loop", group=group) as c:
        off, size = chunk_extent(lw, ga.ch, c)
        dst_o, sizes = _box(full, dim, b.add(b.mul(b.rank, ga.ch.shard), off), size)
        src_o, _ = _box(list(ir.MemRefType(x.type).shape), dim, off, size)
        slot = b.add(b.mul(b.rank, ga.ch.count), c)
        with b.loop(0, ga.world, role="ag.push_peers", group=group) as d:
            q = b.peer(b.add(d, first))
            ga.tag(b.copy(x, g, src_rank=b.rank, dst_rank=q, src_offsets=src_o, dst_offsets=dst_o, sizes=sizes,
                          engine=ga.engine, lane="comm", role="ag.push", group=group))
            ga.tag(b.signal(ga.ready, target=q, slot=slot, lane="comm", role="ag.arrive", group=group))
        ga.tag(d.owner.owner)
    ga.tag(c.owner.owner)
    return ga


# ------------------------------------------------------------------------------------------ all-to-all

def all_to_all(lw: "_FunctionLowering", op: ir.Operation, t: Tiling) -> None:
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
    b = lw.b
    x = lw.buf(a2a.input)
    out = lw.dest(a2a.output, "a2a")
    world = t.world or 1
    if world == 1:
        lw._local_copy(x, out, lane="compute")
        return
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
    send = b.alloc(shape, ir.MemRefType(x.type).element_type, "a2a_send") if staged else x
    lw.symmetric.add(send)
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


# --------------------------------------------------------------------------------------- reduce by owner

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


def _require_2d(lw: "_FunctionLowering", op: ir.Operation, v: ir.Value) -> None:
    if len(shape_of(v)) != 2:
        raise lw.error(op, f"reduces a rank-{len(shape_of(v))} tensor; the reduce template takes rank-2 tensors "
                           "(reshape to [rows, cols] first)")


def reduce_chunks(lw: "_FunctionLowering", red: Reduction, dst: ir.Value, *, owner_rows: bool, dst_row0=0,
                  t: Tiling, after=None) -> None:
    """For each chunk c this rank reduces: wait until every rank counted it, then launch the reduce template on it.
    owner_rows: the chunk is one of this rank's shard's (reduce-scatter), else chunk c of all rows (one-shot).
    ``after(c)`` emits follow-up work for chunk c on the reduce lane (e.g. offering it for a gather)."""
    b, n = lw.b, ir.MemRefType(red.p.type).shape[1]
    lw.slot_step = max(lw.slot_step, red.world * red.per_chunk)
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
    from ..kernels import reduce
    dtype = K.dtype_name(red.p.type)
    grid = max(1, min(t.comm_sms or 16, math.ceil(red.ch.rows / 8) * math.ceil(n / 256)))
    return reduce.make_record(red.ch.rows, n, dtype=dtype, out_dtype=K.dtype_name(dst.type), src_ld=n,
                              dst_ld=ir.MemRefType(dst.type).shape[1], src_row="arg:src_row",
                              dst_row="arg:dst_row", grid=grid)


def count_chunks(lw: "_FunctionLowering", red: Reduction, *, lane: str, stage_from=None) -> None:
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


def _partials(lw: "_FunctionLowering", x: ir.Value, op: ir.Operation) -> tuple[ir.Value, ir.Value | None]:
    """A symmetric buffer holding the partial x, and the buffer to stage it from (None if x is already one)."""
    if lw.is_symmetric(x):
        return x, None
    mt = ir.MemRefType(x.type)
    p = lw.b.alloc(list(mt.shape), mt.element_type, "rs_partial")
    lw.symmetric.add(p)
    return p, x


def _one_shot_count(lw, red: Reduction, *, lane: str, stage_from) -> None:
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


def _check_rows(lw, op: ir.Operation, rows: int, world: int, ch: Chunking) -> None:
    if rows % world:
        raise lw.error(op, f"has {rows} rows, which the {world} ranks do not divide")
    if not ch.uniform:
        raise lw.error(op, f"chunk_rows {ch.rows} does not divide the {ch.shard} rows of a shard; run ditron-tile "
                           "(it picks a divisor) or pass chunk-rows that divides them")


# ------------------------------------------------------------------------------------------ entry points

def reduce_scatter(lw: "_FunctionLowering", op: ir.Operation, t: Tiling) -> None:
    rs = task.ReduceScatter(op)
    out = lw.dest(rs.output, "rs")
    x = lw.buf(rs.input)
    if (t.world or 1) == 1:
        lw._local_copy(x, out, lane="compute")
        return
    if rs.dim != 0:
        raise lw.error(op, f"scatters dim {rs.dim}; the device lowering scatters rows (dim 0) only")
    if rs.reduce != "sum":
        raise lw.error(op, f"reduces with '{rs.reduce}'; the reduce template sums")
    _require_2d(lw, op, rs.input)
    rows = shape_of(rs.input)[0]
    ch = Chunking.of(t, rows // t.world)
    _check_rows(lw, op, rows, t.world, ch)
    if t.algorithm == "one_launch":  # one reduce launch of the own rows; it copies x into P tile by tile
        _one_launch_reduce(lw, t, x, out, owner_rows=ch.shard)
        return
    p, stage = _partials(lw, x, op)
    red = Reduction(p, lw.b.pad(t.world * ch.count, "rs_count"), ch, t.world, 1, None)
    lw.crosses()
    if stage is not None and x not in lw.inputs:
        lw.b.sync("compute", "comm", "rs.fork")
    count_chunks(lw, red, lane="comm" if stage is not None else "compute", stage_from=stage)
    reduce_chunks(lw, red, out, owner_rows=True, t=t)
    lw.b.sync("reduce", "compute", "rs.join")


def all_reduce(lw: "_FunctionLowering", op: ir.Operation, t: Tiling) -> None:
    ar = task.AllReduce(op)
    out = lw.dest(ar.output, "ar")
    x = lw.buf(ar.input)
    if (t.world or 1) == 1:
        lw._local_copy(x, out, lane="compute")
        return
    if ar.reduce != "sum":
        raise lw.error(op, f"reduces with '{ar.reduce}'; the reduce template sums")
    _require_2d(lw, op, ar.input)
    if t.algorithm == "push" and t.engine != "sm":
        raise lw.error(op, "all-reduce=push stores with SMs; it needs engine sm (run ditron-tile, or use one_shot "
                           "with the copy engine)")
    if t.algorithm in ("one_shot", "two_shot", "push") and t.engine == "sm":
        _one_launch_reduce(lw, t, x, out, two_shot=t.algorithm == "two_shot", push=t.algorithm == "push")
        return
    p, stage = _partials(lw, x, op)
    lw.crosses()
    if stage is not None and x not in lw.inputs:
        lw.b.sync("compute", "comm", "ar.fork")
    lane = "comm" if stage is not None else "compute"
    _all_reduce_from(lw, op, t, p, out, None, lane=lane, stage_from=stage, group=None)


def _one_launch_reduce(lw, t: Tiling, x: ir.Value, out: ir.Value, *, tile: dict[str, int] | None = None,
                       owner_rows: int | None = None, two_shot: bool = False, push: bool = False) -> None:
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
    from ..kernels import chunk
    b = lw.b
    if push:
        p, stage = _inbox(lw, x, t.world - 1), x
        rows, n = ir.MemRefType(x.type).shape
    else:
        p, stage = _partials(lw, x, None)
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
    rec = _resident_reduce_record(rows, n, t.comm_sms or 16, fields)
    pad = b.pad(chunk.num_tiles(rec) * (t.world - 1 if push else 1),
                "ar_published" if owner_rows is None else "rs_published", consumed=push)
    args = [p, out] + ([x] if stage is not None else []) + [pad, b.v(b.epoch)]
    if two_shot:
        args.append(b.pad(chunk.num_tiles(rec), "ar_reduced"))
    if owner_rows is not None:
        args.append(b.mul(b.rank, owner_rows))
    lw.launch(rec, args, lane="compute", role="ar.one_launch" if owner_rows is None else "rs.one_launch")


def _all_reduce_from(lw, op, t: Tiling, p: ir.Value, out: ir.Value, gemm_counted: Reduction | None, *, lane: str,
                     stage_from, group: int | None) -> None:
    rows = ir.MemRefType(p.type).shape[0]
    if t.algorithm == "two_shot":
        if gemm_counted is not None:
            red = gemm_counted
        else:
            ch = Chunking.of(t, rows // t.world)
            _check_rows(lw, op, rows, t.world, ch)
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


def _fused_gemm(lw, g: OverlapGroup, t: Tiling, p: ir.Value, *, notify_rows: int | None, rows_per_rank: int,
                counts: ir.Value | None) -> int:
    """The GEMM of a matmul_rs / matmul_ar pair into P; with notify_rows, every tile adds 1 to the slots of its
    rows on their owner's pad. Returns how many adds one rank makes to each slot (0 if no notify)."""
    from ..kernels import gemm
    mm = task.Matmul(g.producer)
    notify = None
    if notify_rows is not None:
        notify = {"arg": "counts", "rows_per_slot": notify_rows, "peer": "slot_owner"}
    rec = K.gemm_record(shape_of(mm.lhs), shape_of(mm.rhs), mm.lhs.type, mm.result.type, t, notify=notify,
                        rows_per_rank=rows_per_rank)
    args = [lw.buf(mm.lhs), lw.buf(mm.rhs), p] + ([counts] if notify is not None else [])
    lw.launch(rec, args, lane="compute", role="rs.gemm", group=g.group)
    if notify is None:
        return 0
    per_slot = gemm.notify_count_values(rec)
    return per_slot.pop() if len(per_slot) == 1 else -1


def _fusable(t: Tiling, ch: Chunking) -> bool:
    """The GEMM can count its tiles into the owner's slots when every slot gets the same count: whole row
    tiles per chunk, chunks dividing the shard."""
    return ch.uniform and t.block_m is not None and ch.rows % t.block_m == 0


def matmul_rs(lw: "_FunctionLowering", g: OverlapGroup, t: Tiling) -> None:
    mm, rs = task.Matmul(g.producer), task.ReduceScatter(g.consumer)
    if rs.dim != 0:
        raise lw.error(g.consumer, f"scatters dim {rs.dim}; GEMM+RS scatters the rows (dim 0) of the matmul")
    rows, n = shape_of(mm.result)
    ch = Chunking.of(t, rows // t.world)
    _check_rows(lw, g.consumer, rows, t.world, ch)
    element = ir.RankedTensorType(mm.result.type).element_type
    if t.algorithm in ("push", "push_sum") and t.world > 1:  # the peers' rows go to their inboxes
        if t.engine != "sm":
            raise lw.error(g.consumer, f"reduce-scatter={t.algorithm} stores into the peers' inboxes with SMs; it "
                                       "needs engine sm")
        out = lw.dest(rs.output, "rs")
        if t.algorithm == "push_sum":  # the own tiles sum into the output: the whole reduce-scatter in the GEMM
            _pushing_gemm(lw, g, t, out, None, owner_rows=ch.shard)
            return
        own = lw.b.alloc([ch.shard, n], element, "rs_own")  # the own rows' partial, summed by a reduce launch
        _pushing_gemm(lw, g, t, own, out, owner_rows=ch.shard)
        return
    p = lw.b.alloc([rows, n], element, "rs_partial")
    lw.symmetric.add(p)
    lw.buffers[mm.result] = p
    out = lw.dest(rs.output, "rs")
    counts = lw.b.pad(t.world * ch.count, "rs_count")
    lw.crosses()
    if t.algorithm == "one_launch":  # the GEMM, then one reduce launch of the own rows reading P where it is
        from ..kernels.reduce import publish_tile
        _fused_gemm(lw, g, t, p, notify_rows=None, rows_per_rank=0, counts=None)
        _one_launch_reduce(lw, t, p, out, owner_rows=ch.shard,
                           tile=publish_tile(ch.shard, n, elem_bytes(p), t.comm_sms or 16))
        return
    if t.algorithm == "epilogue":
        if not _fusable(t, ch):
            raise lw.error(g.consumer, f"GEMM+RS with the epilogue reduction needs chunks of whole row tiles "
                                       f"(chunk_rows {ch.rows}, BLOCK_M {t.block_m}, shard {ch.shard} rows); run "
                                       "ditron-tile, or use the reduce_kernel algorithm")
        _epilogue_rs(lw, g, t, p, ch, counts, out)
        return
    red = _counted_gemm(lw, g, t, p, ch, counts)
    reduce_chunks(lw, red, out, owner_rows=True, t=t)
    lw.b.sync("reduce", "compute", "rs.join")


def _epilogue_ar(lw, g: OverlapGroup, t: Tiling, p: ir.Value, ch: Chunking, out: ir.Value) -> None:
    """GEMM+AR = the epilogue GEMM+RS writing each rank's reduced rows into the symmetric gather buffer G at their
    global rows and counting them (``ar_reduced``), then the gather pattern on the comm lane, chunk by chunk: chunk
    c is offered to the peers as soon as the GEMM counted it, then the peers' chunk c is pulled (every rank reduces
    its chunk c at about the same time), so the gather overlaps the GEMM's remaining own chunks."""
    b = lw.b
    ga = gather_setup(lw, out, t, 0, ch.shard, group=g.group)
    reduced = b.pad(t.world * ch.count, "ar_reduced")
    rec = _epilogue_rs(lw, g, t, p, ch, b.pad(t.world * ch.count, "ar_count"), ga.g, done=reduced)
    per = (ch.rows // rec["block_m"]) * math.ceil(rec["n"] / rec["block_n"])  # own tiles per chunk
    lw.slot_step = max(lw.slot_step, per)
    expected = b.v(b.mul(per, b.epoch) if per != 1 else b.epoch)
    with b.loop(0, ch.count, role="ar.offer_loop", group=g.group) as c:
        b.wait(reduced, [b.add(b.mul(b.rank, ch.count), c)], value=expected, lane="comm", role="ar.reduced",
               group=g.group)
        gather_offer(lw, ga, c, x=None, lane="comm")
        gather_pull_chunk(lw, ga, c)  # the peers reduce their chunk c about now: pull it while c+1 is computed
    b.wait(ga.ready, ga.slots, lane="compute", role="ar.join", group=g.group)


def _epilogue_rs(lw, g: OverlapGroup, t: Tiling, p: ir.Value, ch: Chunking, counts: ir.Value,
                 out: ir.Value, *, done: ir.Value | None = None) -> KernelRecord:
    """GEMM+RS with the reduction in the GEMM's epilogue. Each rank's GEMM visits the next ranks' rows first
    (writing P, adding per tile to the owner's ``counts``) and its own rows last. How the peers' partials of an own
    chunk reach the own tiles (ditron-tile's ``engine``):

    * copy_engine: the comm lane waits until the peers counted the chunk, pulls their partials into the staging
      buffer with the copy engine and sets ``staged``; the own tiles wait on ``staged`` and add the staged tiles.
      No SM works for communication: for large chunks.
    * sm: the own tiles wait on ``counts`` themselves and read the peers' partial tiles from their P (symm_at):
      no staging hop, the lowest latency: for small chunks."""
    from ..kernels import gemm
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
    rec = K.gemm_record(shape_of(mm.lhs), shape_of(mm.rhs), mm.lhs.type, mm.result.type, t,
                        notify={"arg": "counts", "rows_per_slot": ch.rows, "peer": "slot_owner"},
                        reduce_own=reduce_own, rows_per_rank=ch.shard, tile_order="rank_rotated", rank_shift=1)
    per_slot = gemm.notify_count_values(rec)
    if len(per_slot) != 1:
        raise lw.error(g.consumer, "the GEMM's tiles do not count every chunk the same; use chunk rows that are a "
                                   "multiple of BLOCK_M")
    per = per_slot.pop() * (w - 1)  # every peer's tiles of a chunk add to its slot; the owner's own do not
    lw.slot_step = max(lw.slot_step, per)
    expected = b.v(b.mul(per, b.epoch) if per != 1 else b.epoch)
    tail = [out] + ([done] if done is not None else [])
    if from_peers:
        lw.launch(rec, [lw.buf(mm.lhs), lw.buf(mm.rhs), p, counts, expected] + tail, lane="compute",
                  role="rs.gemm", group=g.group)
        return rec
    stage = b.alloc([(w - 1) * ch.shard, n], ir.MemRefType(p.type).element_type, "rs_stage")
    lw.symmetric.add(stage)
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


def _counted_gemm(lw, g: OverlapGroup, t: Tiling, p: ir.Value, ch: Chunking, counts: ir.Value) -> Reduction:
    """The fused GEMM into P with its chunks counted on their owners' pads (by the GEMM's per-tile notify when
    the counts come out uniform, else by host signals after it)."""
    if _fusable(t, ch):
        per = _fused_gemm(lw, g, t, p, notify_rows=ch.rows, rows_per_rank=ch.shard, counts=counts)
        if per > 0:
            return Reduction(p, counts, ch, t.world, per, g.group)
    _fused_gemm(lw, g, t, p, notify_rows=None, rows_per_rank=ch.shard, counts=None)
    red = Reduction(p, counts, ch, t.world, 1, g.group)
    count_chunks(lw, red, lane="compute")
    return red


def matmul_ar(lw: "_FunctionLowering", g: OverlapGroup, t: Tiling) -> None:
    mm, ar = task.Matmul(g.producer), task.AllReduce(g.consumer)
    rows, n = shape_of(mm.result)
    if t.algorithm == "push_sum" and t.world > 1:
        _summing_gemm(lw, g, t, lw.dest(ar.output, "ar"))
        return
    mt = ir.MemRefType.get([rows, n], ir.RankedTensorType(mm.result.type).element_type)
    p = lw.b.alloc(list(mt.shape), mt.element_type, "ar_partial")
    lw.symmetric.add(p)
    lw.buffers[mm.result] = p
    out = lw.dest(ar.output, "ar")
    if t.algorithm != "push":  # the push's inbox records its crossing (_inbox)
        lw.crosses()
    if t.algorithm == "epilogue":
        ch = Chunking.of(t, rows // t.world)
        _check_rows(lw, g.consumer, rows, t.world, ch)
        if not _fusable(t, ch):
            raise lw.error(g.consumer, f"GEMM+AR with the epilogue reduction needs chunks of whole row tiles "
                                       f"(chunk_rows {ch.rows}, BLOCK_M {t.block_m}, shard {ch.shard} rows); run "
                                       "ditron-tile, or use all-reduce=two_shot")
        _epilogue_ar(lw, g, t, p, ch, out)
        return
    if t.algorithm == "two_shot":
        ch = Chunking.of(t, rows // t.world)
        _check_rows(lw, g.consumer, rows, t.world, ch)
        red = _counted_gemm(lw, g, t, p, ch, lw.b.pad(t.world * ch.count, "ar_count"))
        _all_reduce_from(lw, g.consumer, t, p, out, red, lane="compute", stage_from=None, group=g.group)
        return
    if t.algorithm == "push":
        _pushing_gemm(lw, g, t, p, out)
        return
    _fused_gemm(lw, g, t, p, notify_rows=None, rows_per_rank=0, counts=None)
    # one-shot: after the GEMM, one reduce launch reading P where it is (the tiling's tile fields are the GEMM's)
    from ..kernels.reduce import publish_tile
    _one_launch_reduce(lw, t, p, out, tile=publish_tile(rows, n, elem_bytes(p), t.comm_sms or 16))


def _pushing_gemm(lw, g: OverlapGroup, t: Tiling, p: ir.Value, out: ir.Value | None, *,
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
    from ..kernels import reduce
    b, mm = lw.b, task.Matmul(g.producer)
    rows, n = ir.MemRefType(p.type).shape
    slabs = t.world - 1
    prefix = "ar" if owner_rows is None else "rs"
    inbox = _inbox(lw, p, slabs, f"{prefix}_inbox")
    push = {"arg": "inbox", "pad": "pushed", "slabs": slabs}
    order = {}
    if owner_rows is not None:
        push["owner"] = True
        order = dict(rows_per_rank=owner_rows, tile_order="rank_rotated", rank_shift=1)
    if out is None:
        push.update(sum_own=True, value_arg="expect")
    rec = K.gemm_record(shape_of(mm.lhs), shape_of(mm.rhs), mm.lhs.type, mm.result.type, t, push=push, **order)
    tiles_m, tiles_n = math.ceil(rows / rec["block_m"]), math.ceil(n / rec["block_n"])
    if out is None:  # a slot per own tile and slab, set to the epoch by its pusher, cleared by its one waiter
        pad = b.pad(slabs * tiles_m * tiles_n, f"{prefix}_pushed", consumed=True)
        lw.launch(rec, [lw.buf(mm.lhs), lw.buf(mm.rhs), p, inbox, pad, b.v(b.epoch)], lane="compute",
                  role=f"{prefix}.gemm_push_sum", group=g.group)
        return
    pad = b.pad(slabs * tiles_m, f"{prefix}_pushed")
    lw.launch(rec, [lw.buf(mm.lhs), lw.buf(mm.rhs), p, inbox, pad], lane="compute", role=f"{prefix}.gemm_push",
              group=g.group)
    lw.slot_step = max(lw.slot_step, tiles_n)
    tile = reduce.publish_tile(rows, n, elem_bytes(p), t.comm_sms or 16)
    fields = dict(dtype=K.dtype_name(p.type), out_dtype=K.dtype_name(out.type), dst_ld=ir.MemRefType(out.type).shape[1],
                  publish={"arg": "pushed", "value_arg": "expect", "copy_from": "x", "push": slabs,
                           "pushed": rec["block_m"]}, **tile)
    red = _resident_reduce_record(rows, n, t.comm_sms or 16, fields)
    lw.launch(red, [inbox, out, p, pad, b.mul(b.epoch, tiles_n)], lane="compute", role=f"{prefix}.sum_pushed",
              group=g.group)


def _summing_gemm(lw, g: OverlapGroup, t: Tiling, out: ir.Value) -> None:
    """GEMM+AR in one launch (gemm template ``push.sum``; a one-wave GEMM): each tile goes into its slab of every
    peer's inbox, whose slot of the tile it sets to the epoch; then it waits for its own slots, adds the peers'
    tiles to its own and stores the sum to the output. The pad has one waiter per slot, which clears it
    (``ditron.consumed``: a CUDA graph zeroes nothing); the inbox rotates (no end barrier)."""
    from ..kernels import gemm
    b, mm = lw.b, task.Matmul(g.producer)
    slabs = t.world - 1
    inbox = _inbox(lw, out, slabs)
    rec = K.gemm_record(shape_of(mm.lhs), shape_of(mm.rhs), mm.lhs.type, mm.result.type, t,
                        push={"arg": "inbox", "pad": "pushed", "slabs": slabs, "sum": True, "value_arg": "epoch"})
    pad = b.pad(gemm.geometry(rec).tiles * slabs, "ar_pushed", consumed=True)
    lw.launch(rec, [lw.buf(mm.lhs), lw.buf(mm.rhs), out, inbox, pad, b.v(b.epoch)], lane="compute",
              role="ar.gemm_push_sum", group=g.group)


def _inbox(lw, x: ir.Value, slabs: int, name: str = "ar_inbox") -> ir.Value:
    """A symmetric inbox of ``slabs`` slabs of x's shape (an all-reduce by push: slab j - 1 for rank + j's x).
    The push fences itself (``crosses``): peers only store into the inbox and this rank's pads, and every rank
    sums every peer's slab each call, waiting on its slots first."""
    mt = ir.MemRefType(x.type)
    inbox = lw.b.alloc([slabs * mt.shape[0], mt.shape[1]], mt.element_type, name)
    lw.symmetric.add(inbox)
    lw.crosses(inbox=inbox)
    return inbox


def _resident_reduce_record(rows: int, n: int, programs: int, fields: dict) -> KernelRecord:
    """A reduce record on at most ``programs`` programs and no more than it has tiles (its programs may spin on
    each other: all of them must be resident)."""
    from ..kernels import chunk, reduce
    tiles = chunk.num_tiles(reduce.make_record(rows, n, **fields))
    return reduce.make_record(rows, n, grid=max(1, min(programs, tiles)), **fields)
