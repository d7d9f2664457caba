"""What several collectives' lowerings share: chunks of a shard, boxes along a dim, the checks of rows and
ranks, symmetric partials and inboxes, a reduce record whose programs are all resident."""
from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir

from ...kernels import KernelRecord
from ..tiling import Tiling, shape_of
from .context import LoweringContext


def box(shape, dim: int, offset, size):
    """(offsets, sizes) of the box of ``shape`` that is [offset, offset + size) along dim and whole elsewhere."""
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


def chunk_extent(lw: LoweringContext, ch: Chunking, c: ir.Value):
    """(offset in the shard, rows) of chunk c."""
    b = lw.b
    off = b.mul(c, ch.rows)
    if ch.uniform:
        return off, ch.rows
    return off, b.min(ch.rows, b.sub(ch.shard, off))


def require_2d(lw: LoweringContext, op: ir.Operation, v: ir.Value) -> None:
    if len(shape_of(v)) != 2:
        raise lw.error(op, f"reduces a rank-{len(shape_of(v))} tensor; the reduce template takes rank-2 tensors "
                           "(reshape to [rows, cols] first)")


def check_rows(lw: LoweringContext, op: ir.Operation, rows: int, world: int, ch: Chunking) -> None:
    if rows % world:
        raise lw.error(op, f"has {rows} rows, which the {world} ranks do not divide")
    if not ch.uniform:
        raise lw.error(op, f"chunk_rows {ch.rows} does not divide the {ch.shard} rows of a shard; run ditron-tile "
                           "(it picks a divisor) or pass chunk-rows that divides them")


def partials(lw: LoweringContext, x: ir.Value) -> tuple[ir.Value, ir.Value | None]:
    """A symmetric buffer holding the partial x, and the buffer to stage it from (None if x is already one)."""
    if lw.is_symmetric(x):
        return x, None
    mt = ir.MemRefType(x.type)
    return lw.alloc_symmetric(list(mt.shape), mt.element_type, "rs_partial"), x


def inbox(lw: LoweringContext, x: ir.Value, slabs: int, name: str = "ar_inbox") -> ir.Value:
    """A symmetric inbox of ``slabs`` slabs of x's shape (an all-reduce by push: slab j - 1 for rank + j's x).
    The push fences itself (``crosses``): peers only store into the inbox and this rank's pads, and every rank
    sums every peer's slab each call, waiting on its slots first."""
    mt = ir.MemRefType(x.type)
    buf = lw.alloc_symmetric([slabs * mt.shape[0], mt.shape[1]], mt.element_type, name)
    lw.crosses(inbox=buf)
    return buf


def resident_reduce_record(rows: int, n: int, programs: int, fields: dict) -> KernelRecord:
    """A reduce record on at most ``programs`` programs and no more than it has tiles (its programs may spin on
    each other: all of them must be resident)."""
    from ...kernels import chunk, reduce
    tiles = chunk.num_tiles(reduce.make_record(rows, n, **fields))
    return reduce.make_record(rows, n, grid=max(1, min(programs, tiles)), **fields)


def epoch_times(lw: LoweringContext, per: int) -> ir.Value:
    """The value a slot that grows by ``per`` each call holds at the end of this call: per * epoch."""
    b = lw.b
    return b.v(b.mul(per, b.epoch) if per != 1 else b.epoch)
