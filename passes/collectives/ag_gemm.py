"""AG+GEMM (overlap kind ``ag_matmul``): the all-gather of the GEMM's lhs rows beside the GEMM, whose tiles wait
per chunk on ``ready`` (gemm template ``wait``): pull (the gather pattern), push (each rank copies its chunks into
every rank's gathered A), or one_launch (the GEMM's own programs store the shard into every rank's gathered A)."""
from __future__ import annotations

from mlir import ir

from ...dialects import task
from .. import device_kernels as K
from ..tiling import OverlapGroup, Tiling, shape_of
from .all_gather import Gather, gather, gather_push
from .common import Chunking
from .context import LoweringContext
from .table import register


def _operands(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> tuple[ir.Value, ir.Value, Chunking]:
    """(this rank's shard x, the gathered A, the shard's chunks), checked uniform."""
    ag = task.AllGather(g.producer)
    x = lw.buf(ag.input)
    gathered = lw.dest(ag.output, "ag_gather")
    ch = Chunking.of(t, shape_of(ag.input)[0])
    if not ch.uniform:
        raise lw.error(g.producer, f"chunk_rows {ch.rows} does not divide the shard's {ch.shard} rows; the "
                                   "GEMM's per-tile waits need uniform chunks (run ditron-tile, which picks "
                                   "a divisor)")
    return x, gathered, ch


def _waiting_gemm(lw: LoweringContext, g: OverlapGroup, t: Tiling, gathered: ir.Value, ch: Chunking,
                  ga: Gather) -> None:
    """The GEMM on the gathered A, each tile waiting until its rows' chunks are ready."""
    mm = task.Matmul(g.consumer)
    c = lw.dest(mm.result, "mm")
    steps, ep_args, c_type = lw.epilogue(g.consumer)
    rec = K.gemm_record(shape_of(mm.lhs), shape_of(mm.rhs), mm.lhs.type, c_type, t, b_trans=mm.transpose_b,
                        wait={"arg": "ready", "rows_per_slot": ch.rows}, rows_per_rank=ch.shard, epilogue=steps,
                        fast_accum=mm.fast_accum)
    lw.launch(rec, [gathered, lw.buf(mm.rhs), c, ga.ready, lw.b.epoch, *ep_args], lane="compute", role="ag.gemm",
              group=g.group)


@register("ag_matmul", "pull")
def ag_gemm_pull(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> None:
    x, gathered, ch = _operands(lw, g, t)
    _waiting_gemm(lw, g, t, gathered, ch, gather(lw, x, gathered, t, 0, group=g.group, gather_buf=gathered))


@register("ag_matmul", "push")
def ag_gemm_push(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> None:
    x, gathered, ch = _operands(lw, g, t)
    _waiting_gemm(lw, g, t, gathered, ch, gather_push(lw, x, gathered, t, 0, group=g.group))


@register("ag_matmul", "one_launch")
def ag_gemm_one_launch(lw: LoweringContext, g: OverlapGroup, t: Tiling) -> None:
    """AG+GEMM in one launch: the GEMM's programs store this rank's shard into the gathered A of every rank and
    count it in slot rank of ``ag_ready`` there (gemm template ``gather``), and each tile waits until the slots of
    its rows count every block of this call. It fences itself (``crosses``): peers only store into the gathered A
    and count in this rank's pad, and every rank's tiles together wait on every peer's stores each call; so with
    one lane there is no end barrier, and the gathered A rotates. The waits consume the counts (the last waiter of
    a slot takes them off, slots W.. count the waiters): the pad is ``ditron.consumed``, and a CUDA graph zeroes
    nothing before the launch."""
    x, gathered, ch = _operands(lw, g, t)
    mm = task.Matmul(g.consumer)
    if not lw.is_symmetric(gathered):
        raise lw.error(g.producer, "all-gather=one_launch stores into the peers' gathered rows, which must be "
                                   "a symmetric buffer (not a function result); use pull")
    from ...kernels import gemm
    b = lw.b
    ready = b.pad(2 * t.world, "ag_ready", consumed=True)
    c = lw.dest(mm.result, "mm")
    steps, ep_args, c_type = lw.epilogue(g.consumer)
    rec = K.gemm_record(shape_of(mm.lhs), shape_of(mm.rhs), mm.lhs.type, c_type, t, b_trans=mm.transpose_b,
                        wait={"arg": "ready", "rows_per_slot": ch.shard},
                        gather={"arg": "x", "own_first": t.own_first is not False}, rows_per_rank=ch.shard,
                        tile_order="rank_rotated", epilogue=steps, fast_accum=mm.fast_accum)
    lw.crosses(inbox=gathered)
    lw.launch(rec, [gathered, lw.buf(mm.rhs), c, ready, b.c(gemm.gather_blocks(rec)), x, *ep_args],
              lane="compute", role="ag.gemm", group=g.group)
