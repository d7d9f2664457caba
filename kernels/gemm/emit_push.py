"""The GEMM emitter's push parts (mixed into ``_Emitter``): a tile stored into the peers' inboxes and counted
there (GEMM+AR by push), to its rows' owner alone (``owner``: GEMM+RS by push), with the sum in the epilogue
(``sum``, ``sum_own``: one launch), and the deferred counts and sums of persistent programs."""
from __future__ import annotations

from ...dialects import core
from ...dialects import ttir as T
from .geometry import IrOps, sum_own_slot


class _PushParts:
    """Needs the emitter's rec, g, arg, rank, bm, bn, m, n, out_t and its _tile_ptrs."""

    def _push(self, acc, m0, n0, pid_m, pid_n):
        """The tile into its slab of every peer's inbox, then 1 added to the peer's slot of its row block."""
        self._push_stores(acc, m0, n0)
        self._push_notifies(pid_m, pid_n)

    def _push_stores(self, acc, m0, n0):
        spec = self.rec["push"]
        num_ranks = core.NumRanks.build().num_ranks
        vals = T.cast(acc, self.out_t)
        with T.For(1, num_ranks, 1) as qs:
            q = T.rem(T.add(self.rank, qs.iv), num_ranks)
            slab = T.sub(T.sub(num_ranks, 1), qs.iv)
            inbox = core.SymmAt.build(self.arg[spec["arg"]], q).result
            ptrs, mask = self._tile_ptrs(inbox, m0, n0, self.n, slab, self.m)
            T.store(ptrs, vals, mask)

    def _push_notifies(self, pid_m, pid_n):
        """1 (release: after the CTA's stores) added to the slots counting the tile (pid_m, pid_n) on the ranks it
        went to: every peer's slot slab * tiles_m + its row block, or with push.owner its owner's (unless that is
        this rank); push.sum_own sets the owner's slot of the tile to the value instead."""
        spec = self.rec["push"]
        num_ranks = core.NumRanks.build().num_ranks
        pad = self.arg[spec["pad"]]
        m0 = T.mul(pid_m, self.bm)
        if spec.get("owner"):
            rpr = self.rec["rows_per_rank"]
            q = T.div(m0, rpr)
            with T.if_(T.cmp("ne", q, self.rank)):
                block = T.div(T.sub(m0, T.mul(q, rpr)), self.bm)
                slab = self._owner_slab(q, num_ranks)
                if spec.get("sum_own"):
                    slot = sum_own_slot(IrOps, self.rec, self.g, slab, block, pid_n)
                    core.Notify.build(T.addptr(pad, slot), q, self.arg[spec["value_arg"]], op="set",
                                      scope=spec["scope"], semantic="release")
                else:
                    slot = T.add(T.mul(slab, rpr // self.bm), block)
                    core.Notify.build(T.addptr(pad, slot), q, T.c(1), op="add", scope=spec["scope"],
                                      semantic="release")
            return
        with T.For(1, num_ranks, 1) as qs:
            q = T.rem(T.add(self.rank, qs.iv), num_ranks)
            slot = T.add(T.mul(T.sub(T.sub(num_ranks, 1), qs.iv), self.g.tiles_m), T.div(m0, self.bm))
            core.Notify.build(T.addptr(pad, slot), q, T.c(1), op="add", scope=spec["scope"], semantic="release")

    def _push_sum(self, acc, m0, n0, t):
        """'push.sum': the tile (rounded) into every peer's inbox slab and the peer's slot t * slabs + slab set
        (release); then, once the own slots t * slabs + j are set, the own tile plus the inbox tiles stored to c,
        and the own slots cleared."""
        self._push_sum_send(acc, m0, n0, t)
        self._push_sum_receive(T.cast(T.cast(acc, self.out_t), "fp32"), m0, n0, t)

    def _push_sum_send(self, acc, m0, n0, t):
        """'push.sum', first half: the tile (rounded) into every peer's inbox slab, the peer's slot t * slabs +
        slab set (release)."""
        self._push_stores(acc, m0, n0)
        self._push_sum_sets(t)

    def _push_sum_sets(self, t):
        """Tile t's slot t * slabs + slab set on every peer (release: after the CTA's stores of it)."""
        spec = self.rec["push"]
        num_ranks = core.NumRanks.build().num_ranks
        slabs = T.sub(num_ranks, 1)
        with T.For(1, num_ranks, 1) as qs:
            slot = T.add(T.mul(t, slabs), T.sub(slabs, qs.iv))
            core.Notify.build(T.addptr(self.arg[spec["pad"]], slot), T.rem(T.add(self.rank, qs.iv), num_ranks),
                              self.arg[spec["value_arg"]], op="set", scope=spec["scope"], semantic="release")

    def _push_sum_sets_after(self, tile):
        """deferred_sum: the slots of tile ``tile`` (-1: none) set on the peers, its stores having crossed."""
        with T.if_(T.cmp("sge", tile, 0)):
            self._push_sum_sets(tile)

    def _push_sum_after(self, tile):
        """deferred_sum: the sum of tile ``tile`` (pid_m * tiles_n + pid_n; -1: none), its own part read back from
        c, where this program stored it."""
        with T.if_(T.cmp("sge", tile, 0)):
            m0, n0 = T.mul(T.div(tile, self.g.tiles_n), self.bm), T.mul(T.rem(tile, self.g.tiles_n), self.bn)
            T.barrier()  # the own part's stores, by other threads of the CTA, before the loads
            ptrs, mask = self._tile_ptrs(self.arg["c"], m0, n0, self.rec["ldc"])
            own = T.load(ptrs, mask, 0.0 if mask is not None else None)
            self._push_sum_receive(T.cast(own, "fp32"), m0, n0, tile)

    def _push_sum_receive(self, own, m0, n0, t):
        """'push.sum', second half: once the own slots t * slabs + j are set, ``own`` (the rounded tile, fp32) plus
        the inbox tiles stored to c, and the own slots cleared."""
        spec = self.rec["push"]
        num_ranks = core.NumRanks.build().num_ranks
        slabs = T.sub(num_ranks, 1)
        value, pad = self.arg[spec["value_arg"]], self.arg[spec["pad"]]
        with T.For(0, slabs, 1, [own]) as js:
            token = core.Wait.build(T.addptr(pad, T.add(T.mul(t, slabs), js.iv)), value, scope=spec["scope"]).token
            inbox = core.ConsumeToken.build(self.arg[spec["arg"]], token).result
            ptrs, mask = self._tile_ptrs(inbox, m0, n0, self.n, js.iv, self.m)
            part = T.load(ptrs, mask, 0.0 if mask is not None else None, cache="cg")
            js.yield_(T.add(js.args[0], T.cast(part, "fp32")))
        ptrs, mask = self._tile_ptrs(self.arg["c"], m0, n0, self.rec["ldc"])
        T.store(ptrs, T.cast(js.results[0], self.out_t), mask)
        with T.For(0, slabs, 1) as js:
            core.Notify.build(T.addptr(pad, T.add(T.mul(t, slabs), js.iv)), self.rank, value, op="clear",
                              scope=spec["scope"], semantic="relaxed")

    def _push_notifies_after(self, tile):
        """The deferred count of tile pid_m * tiles_n + pid_n (-1: no tile)."""
        with T.if_(T.cmp("sge", tile, 0)):
            self._push_notifies(T.div(tile, self.g.tiles_n), T.rem(tile, self.g.tiles_n))

    def _owner_slab(self, q, num_ranks):
        """The slab of rank q's inbox that holds this rank's tiles: num_ranks - 1 - ((q - rank) mod num_ranks)."""
        return T.sub(T.sub(num_ranks, 1), T.rem(T.add(T.sub(q, self.rank), num_ranks), num_ranks))

    def _push_owner_stores(self, acc, m0, n0):
        """'push.owner': the tile to the rank owning its rows alone, at its row within the shard -- into c when
        that is this rank, else into this rank's slab of the owner's inbox."""
        rec, spec, rpr = self.rec, self.rec["push"], self.rec["rows_per_rank"]
        num_ranks = core.NumRanks.build().num_ranks
        q = T.div(m0, rpr)
        row = T.sub(m0, T.mul(q, rpr))
        with T.if_(T.cmp("eq", q, self.rank)):
            block, pid_n = T.div(row, self.bm), T.div(n0, self.bn)
            total = self._push_own_sum(acc, row, n0, block, pid_n) if spec.get("sum_own") else acc
            ptrs, mask = self._tile_ptrs(self.arg["c"], row, n0, rec["ldc"])
            T.store(ptrs, T.cast(total, self.out_t), mask)
            if spec.get("sum_own"):  # the slots consumed: cleared for the next call (after the reads above)
                with T.For(0, spec["slabs"], 1) as js:
                    core.Notify.build(T.addptr(self.arg[spec["pad"]],
                                               sum_own_slot(IrOps, rec, self.g, js.iv, block, pid_n)),
                                      self.rank, self.arg[spec["value_arg"]], op="clear", scope=spec["scope"],
                                      semantic="relaxed")
        with T.if_(T.cmp("ne", q, self.rank)):
            inbox = core.SymmAt.build(self.arg[spec["arg"]], q).result
            ptrs, mask = self._tile_ptrs(inbox, row, n0, self.n, self._owner_slab(q, num_ranks), rpr)
            T.store(ptrs, T.cast(acc, self.out_t), mask)

    def _push_own_sum(self, acc, row, n0, block, pid_n):
        """'push.sum_own': the own tile at ``row`` of the shard plus every slab's inbox tile, each read once the
        tile's slot of the slab (``sum_own_slot``) holds the value."""
        spec, rpr = self.rec["push"], self.rec["rows_per_rank"]
        with T.For(0, spec["slabs"], 1, [acc]) as js:
            slot = sum_own_slot(IrOps, self.rec, self.g, js.iv, block, pid_n)
            token = core.Wait.build(T.addptr(self.arg[spec["pad"]], slot), self.arg[spec["value_arg"]],
                                    scope=spec["scope"]).token
            inbox = core.ConsumeToken.build(self.arg[spec["arg"]], token).result
            ptrs, mask = self._tile_ptrs(inbox, row, n0, self.n, js.iv, rpr)
            part = T.load(ptrs, mask, 0.0 if mask is not None else None, cache="cg")
            js.yield_(T.add(js.args[0], T.cast(part, "fp32")))
        return js.results[0]
