"""The GEMM emitter's gather and reduce-scatter parts (mixed into ``_Emitter``): AG+GEMM in one launch (the
copiers' stores of the shard into every rank's A, their counts, the waiters' arrivals and the consumption of
the signal) and the reduce_own epilogue (an own tile adds the peers' partials before its store)."""
from __future__ import annotations

import math

from ...dialects import core
from ...dialects import ttir as T
from .geometry import IrOps, _and
from .record import gather_blocks, gather_copiers, gather_own_tiles


class _GatherParts:
    """Needs the emitter's rec, g, arg, rank, bm, m, k and its tile, _wait, _row_slots, _notify, _tile_ptrs,
    store_c, _wide and _stream_k."""

    def _arrive(self, m0, token):
        """'gather': the tile has passed its wait (``token``: the counts' addresses depend on it, so nothing hoists
        them above it), so 1 is added (relaxed: it publishes nothing) to the arrival count, slot S + s of the wait
        pad, of every signal slot s it waited on -- a tensor of the at most ``span`` slots a tile covers, masked.
        Returns (the count pointers, the counts found, the signal slots, the mask); the counts found are only
        needed by ``_consume`` after the K loop."""
        spec = self.rec["wait"]
        lo, hi = self._row_slots(m0, spec)
        span = 1 << (math.ceil(self.bm / spec["rows_per_slot"])).bit_length()  # a power of two > the slots covered
        slots = T.add(T.make_range(0, span), lo)
        mask = T.lt(slots, hi)
        pad = core.ConsumeToken.build(self.arg[spec["arg"]], token).result
        counts = T.addptr(pad, T.add(slots, self.m // spec["rows_per_slot"]))
        found = T.atomic_rmw("add", counts, T.c(1, T.like(slots, T.i32())), mask, sem="relaxed",
                             scope=spec["scope"])
        return counts, found, slots, mask

    def _consume(self, counts, found, slots, mask):
        """'gather': where this tile was the last waiter of a slot (the count it found was one short of
        ``gather_waiters``), the count back to 0 and the wait value taken off the signal slot (relaxed: the next
        call's writers of this pad come after this launch)."""
        spec = self.rec["wait"]
        # gemm.gather_waiters, looked up on the package per call as when gemm was one module: a replacement
        # of it (test_device_passes) reaches build() and tiles() alike
        from . import gather_waiters
        last = T.and_(mask, T.cmp("eq", found, T.sub(gather_waiters(IrOps, self.rec, self.g, slots), 1)))
        T.atomic_rmw("xchg", counts, T.c(0, T.like(slots, T.i32())), last, sem="relaxed", scope=spec["scope"])
        T.atomic_rmw("add", T.addptr(self.arg[spec["arg"]], slots),
                     T.sub(0, T.splat(self.arg[spec["value_arg"]], [T.shape(slots)[0]])), last, sem="relaxed",
                     scope=spec["scope"])

    def _gathering_tiles(self, pid):
        """'gather' (module docstring): the copiers' stores, the own tiles from the shard, the copies' count (after
        the copies, or after the own tiles where every program has one), then the other tiles, waiting for their
        rows (then stream-K's)."""
        rec, g = self.rec, self.g
        own, first = gather_own_tiles(rec), gather_copiers(rec)
        with T.if_(T.ge(pid, first)):
            self._gather_copies(T.sub(pid, first), g.grid - first, count=own < g.grid)
        with T.For(pid, own, g.grid) as loop:
            self.tile(loop.iv, None, None, own=True)
        if own >= g.grid:
            self._gather_count(pid, g.grid)
        rest = T.add(pid, T.mul(T.cdiv(T.max_(T.sub(own, pid), 0), g.grid), g.grid))
        with T.For(rest, g.tiles - rec.get("stream_k", 0), g.grid) as loop:
            self.tile(loop.iv, None, None)
        if rec.get("stream_k", 0):
            self._stream_k(pid)

    def _gather_count(self, copier, copiers):
        """Copier ``copier`` of ``copiers`` adds its block count to slot rank of every rank's wait pad (release:
        after the CTA's stores), the own rank last (unless own tiles read the shard); nothing if it copied
        nothing."""
        rec = self.rec
        blocks = T.cdiv(T.max_(T.sub(gather_blocks(rec), copier), 0), copiers)
        num_ranks = core.NumRanks.build().num_ranks
        slot = T.addptr(self.arg[rec["wait"]["arg"]], self.rank)
        counted = num_ranks if gather_own_tiles(rec) else T.add(num_ranks, 1)  # not the own rank: nothing waits
        with T.if_(T.cmp("sgt", blocks, 0)):
            with T.For(1, counted, 1) as qs:
                core.Notify.build(slot, T.rem(T.add(self.rank, qs.iv), num_ranks), blocks, op="add",
                                  scope=rec["wait"]["scope"], semantic="release")

    def _gather_copies(self, copier, copiers, *, count):
        """Blocks copier, copier + copiers, ... of the shard into A on every rank (the peers first); with
        ``count``, their count follows at once."""
        rec = self.rec
        (gm, gk), rpr = rec["gather"]["block"], rec["rows_per_rank"]
        kb = -(-self.k // gk)
        num_ranks = core.NumRanks.build().num_ranks
        with T.For(copier, gather_blocks(rec), copiers) as blk:
            rows = T.add(T.mul(T.div(blk.iv, kb), gm), T.make_range(0, gm))
            cols = T.add(T.mul(T.rem(blk.iv, kb), gk), T.make_range(0, gk))
            mask = None
            if rpr % gm:
                mask = _and(mask, T.expand_dims(T.lt(rows, rpr), 1), [gm, gk])
            if self.k % gk:
                mask = _and(mask, T.expand_dims(T.lt(cols, self.k), 0), [gm, gk])
            wide_rows, wide_cols = T.expand_dims(self._wide(rows), 1), T.expand_dims(self._wide(cols), 0)
            src = T.addptr(T.splat(self.arg[rec["gather"]["arg"]], [gm, gk]), T.add(T.mul(wide_rows, self.k),
                                                                                       wide_cols))
            vals = T.load(src, mask, 0.0 if mask is not None else None)
            dst_rows = T.add(wide_rows, self._wide(T.mul(self.rank, rpr)))
            dst_off = T.add(T.mul(dst_rows, rec["lda"]), wide_cols)
            with T.For(1, T.add(num_ranks, 1), 1) as qs:  # the peers first, the own rank last
                q = T.rem(T.add(self.rank, qs.iv), num_ranks)
                a_q = core.SymmAt.build(self.arg["a"], q).result
                T.store(T.addptr(T.splat(a_q, [gm, gk]), dst_off), vals, mask)
        if count:
            self._gather_count(copier, copiers)

    def _reduce_own_epilogue(self, acc, m0, n0):
        """Own rows: wait for the staged peer partials, add them, store to dst. Others: store to c, notify."""
        rec, spec = self.rec, self.rec["reduce_own"]
        rpr = rec["rows_per_rank"]
        lo = T.mul(self.rank, rpr)
        hi = T.add(lo, rpr)
        with T.if_(T.and_(T.ge(m0, lo), T.lt(m0, hi))):
            token = self._wait(m0, spec)
            own = T.sub(m0, lo)
            total = acc
            if spec.get("from_peers"):  # the peers' partial tiles, read where they wrote them
                c = core.ConsumeToken.build(self.arg["c"], token).result
                parts = [(core.SymmAt.build(c, T.rem(T.add(self.rank, j), spec["parts"] + 1)).result, m0, None,
                          rec["ldc"]) for j in range(1, spec["parts"] + 1)]
            else:  # staged part j at rows j * R + the row within the shard
                src = core.ConsumeToken.build(self.arg[spec["src"]], token).result
                parts = [(src, own, j, self.n) for j in range(spec["parts"])]
            for base, row, slab, ld in parts:
                ptrs, mask = self._tile_ptrs(base, row, n0, ld, slab, rpr)
                part = T.load(ptrs, mask, 0.0 if mask is not None else None, cache="cg")
                total = T.add(total, T.cast(part, "fp32"))
            ptrs, mask = self._tile_ptrs(self.arg[spec["dst"]], m0 if spec["dst_rows"] == "global" else own, n0,
                                         self.n)
            T.store(ptrs, T.cast(total, self.out_t), mask)
            if spec.get("done"):
                slo, shi = self._row_slots(m0, spec)
                with T.For(slo, shi, 1) as loop:
                    core.Notify.build(T.addptr(self.arg[spec["done"]], loop.iv), self.rank, T.c(1), op="add",
                                      scope=spec["scope"], semantic="release")
        with T.if_(T.or_(T.lt(m0, lo), T.ge(m0, hi))):
            self.store_c(acc, m0, n0)
            if "notify" in rec:
                self._notify(m0)
