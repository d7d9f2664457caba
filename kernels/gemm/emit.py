"""The GEMM template's emitter: ``build()`` writes the kernel as a tt.func (TTIR plus ditron_core primitives)
carrying its record. ``_Emitter`` holds the arguments, the persistent / split-K / stream-K program structure, one
tile, the K loop and the plain epilogues; the fused parts are its mixins: emit_gather.py (AG+GEMM's gather, the
reduce-scatter epilogue) and emit_push.py (the pushes of GEMM+AR and GEMM+RS)."""
from __future__ import annotations

from mlir import ir

from ...dialects import core
from ...dialects import ttir as T
from .. import KERNEL_ATTR, KernelRecord
from . import epilogue as _epilogue
from .emit_gather import _GatherParts
from .emit_push import _PushParts
from .geometry import ORDERS_USING_RANK, TILE_ORDER_FNS, IrOps, _and, _rank_shift, geometry
from .record import check, deferred_push, deferred_sum, imprecise_acc, offset_type


def build(record, *, ip, loc=None):
    """The GEMM kernel as a tt.func at ip, carrying the record."""
    rec = KernelRecord(record)
    check(rec)
    with (loc or ir.Location.unknown()), ip:
        return _Emitter(rec).emit()


class _Emitter(_GatherParts, _PushParts):
    """One GEMM kernel's IR, built at the current insertion point (``emit``)."""

    def __init__(self, rec):
        self.rec = rec
        self.g = geometry(rec)
        self.bm, self.bn, self.bk = rec["block_m"], rec["block_n"], rec["block_k"]
        self.m, self.n, self.k = rec["m"], rec["n"], rec["k"]
        self.in_t, self.out_t = T.dtype(rec["in_dtype"]), T.dtype(rec["out_dtype"])
        self.idx_t = T.dtype(offset_type(rec))

    # -- arguments
    def _arg_types(self):
        rec = self.rec
        types = {"a": T.ptr(self.in_t), "b": T.ptr(self.in_t), "c": T.ptr(self.out_t),
                 "workspace": T.ptr("fp32"), "locks": T.ptr("i32")}
        for part in ("wait", "notify", "reduce_own"):
            if part in rec:
                types[rec[part]["arg"]] = T.ptr("i32")
        for part in ("wait", "reduce_own"):
            if part in rec:
                types[rec[part]["value_arg"]] = T.i32()
        if "reduce_own" in rec:
            types[rec["reduce_own"]["dst"]] = T.ptr(self.out_t)
            if not rec["reduce_own"].get("from_peers"):
                types[rec["reduce_own"]["src"]] = T.ptr(self.out_t)
            if rec["reduce_own"].get("done"):
                types[rec["reduce_own"]["done"]] = T.ptr("i32")
        if "notify" in rec and rec["notify"]["peer"].startswith("arg:"):
            types[rec["notify"]["peer"][4:]] = T.i32()
        if "push" in rec:
            types[rec["push"]["arg"]], types[rec["push"]["pad"]] = T.ptr(self.out_t), T.ptr("i32")
            if rec["push"].get("value_arg"):
                types[rec["push"]["value_arg"]] = T.i32()
        if "gather" in rec:
            types[rec["gather"]["arg"]] = T.ptr(self.in_t)
        types.update(_epilogue.arg_types(rec))
        return [(a, types[a], {"tt.divisibility": 16} if T.is_ptr(types[a]) else {}) for a in rec["args"]]

    def emit(self):
        rec = self.rec
        f, values = T.func(rec["name"], self._arg_types(), attrs={KERNEL_ATTR: rec.to_attr()})
        self.arg = dict(zip(rec["args"], values))
        with ir.InsertionPoint(f.regions[0].blocks[0]):
            self.rank = None
            if rec["tile_order"] in ORDERS_USING_RANK or "reduce_own" in rec or "push" in rec or \
                    "gather" in rec or ("notify" in rec and rec["notify"]["peer"].startswith("rank")) or \
                    _epilogue.uses_rank(rec):
                self.rank = core.Rank.build().rank
            if rec["loads"] == "tma" or rec["store"] == "tma":
                self._make_descs()
            pid = T.program_id(0)
            if "gather" in rec:
                self._gathering_tiles(pid)
            elif rec["persistent"]:
                flatten, defer = rec["flatten"], deferred_push(rec) or deferred_sum(rec)
                init = ([T.sub(pid, self.g.grid)] if flatten else []) + ([T.c(-1)] if defer else [])
                dp_tiles = self.g.tiles - rec.get("stream_k", 0)
                with T.For(pid, dp_tiles, self.g.grid, init, attrs={"tt.flatten": flatten}) as loop:
                    tile_c = T.add(loop.args[0], self.g.grid) if flatten else None
                    prev = self.tile(loop.iv, None, tile_c, loop.args[-1] if defer else None)
                    if init:
                        loop.yield_(*([tile_c] if flatten else []), *([prev] if defer else []))
                if defer:  # the last tile's count (and sum) once its stores are out
                    last = loop.results[-1]
                    if deferred_sum(rec):
                        self._push_sum_sets_after(last)
                        self._push_sum_after(last)
                    else:
                        self._push_notifies_after(last)
                if rec.get("stream_k", 0):
                    self._stream_k(pid)
            elif rec["split_k"] > 1:
                self.tile(T.rem(pid, self.g.tiles), T.div(pid, self.g.tiles), None)
            else:
                self.tile(pid, None, None)
            T.ret()
        return f

    def _make_descs(self):
        rec = self.rec
        m, n, k = (T.c(v) for v in (self.m, self.n, self.k))
        one = T.c(1, T.i64())
        if rec["loads"] == "tma":
            self.a_desc = T.make_desc(self.arg["a"], [m, k], [T.c(rec["lda"], T.i64()), one],
                                      [self.bm // rec.get("m_split", 1), self.bk])
            if rec["b_trans"]:
                self.b_desc = T.make_desc(self.arg["b"], [n, k], [T.c(rec["ldb"], T.i64()), one],
                                          [self.bn, self.bk])
            else:
                self.b_desc = T.make_desc(self.arg["b"], [k, n], [T.c(rec["ldb"], T.i64()), one],
                                          [self.bk, self.bn])
        if rec["store"] == "tma":
            self.c_desc = T.make_desc(self.arg["c"], [m, n], [T.c(rec["ldc"], T.i64()), one],
                                      [self.bm, self.bn // rec["epilogue_split"]])

    # -- tile order (the same definition as tile_coords, on IR values)
    def coords(self, t):
        return TILE_ORDER_FNS[self.rec["tile_order"]](IrOps, t, self.rec, self.g, self.rank)

    # -- one tile
    def tile(self, t, split, tile_c, prev=None, own=False):
        """One tile. ``prev`` (a deferred push): the program's previous tile, pid_m * tiles_n + pid_n (-1: none),
        whose peers' slots are counted after this tile's K loop; returns this tile's. ``own`` (gather): rows of this
        rank's shard, read from the shard without a wait."""
        rec = self.rec
        pid_m, pid_n = self.coords(t)
        m0, n0 = T.mul(pid_m, self.bm), T.mul(pid_n, self.bn)
        k_start = T.mul(split, self.g.split_tiles) if split is not None else None
        if own:
            acc = self.k_loop(self.arg[rec["gather"]["arg"]], T.sub(m0, T.mul(self.rank, rec["rows_per_rank"])), n0,
                              k_start, lda=self.k)
        else:
            a_base, a_row, token = self._a_after_wait(m0)
            arrival = self._arrive(m0, token) if "gather" in rec else None
            acc = self.k_loop(a_base, a_row, n0, k_start)
        if tile_c is not None:  # flattened loop: recompute the epilogue's coordinates from their own counter
            pid_m, pid_n = self.coords(tile_c)
            m0, n0 = T.mul(pid_m, self.bm), T.mul(pid_n, self.bn)
        if split is None:  # the fused epilogue on the full K sum (split-K: in _split_epilogue)
            acc = _epilogue.emit(self, acc, m0, n0)
        if split is not None:  # the last split stores the sum (and pushes it)
            if rec.get("push", {}).get("sum"):
                t_id = T.add(T.mul(pid_m, self.g.tiles_n), pid_n)
                self._split_epilogue(acc, t, split, m0, n0, lambda total: self._push_sum(total, m0, n0, t_id),
                                     store=False)
                return
            push = (lambda total: self._push(total, m0, n0, pid_m, pid_n)) if "push" in rec else None
            self._split_epilogue(acc, t, split, m0, n0, push)
            return
        if "reduce_own" in rec:
            self._reduce_own_epilogue(acc, m0, n0)
            return
        t_id = T.add(T.mul(pid_m, self.g.tiles_n), pid_n)
        if rec.get("push", {}).get("sum"):
            if prev is None:
                self._push_sum(acc, m0, n0, t_id)
                return t_id
            # deferred_sum: the previous tile's slots set on the peers (its stores crossed during this K loop),
            # this tile's stores, its own part into c, then the previous tile's sum
            self._push_sum_sets_after(prev)
            self._push_stores(acc, m0, n0)
            ptrs, mask = self._tile_ptrs(self.arg["c"], m0, n0, rec["ldc"])
            T.store(ptrs, T.cast(acc, self.out_t), mask)
            self._push_sum_after(prev)
            return t_id
        if prev is not None:
            self._push_notifies_after(prev)
        if rec.get("push", {}).get("owner"):
            self._push_owner_stores(acc, m0, n0)
        else:
            self.store_c(acc, m0, n0)
        if not own and "gather" in rec:
            self._consume(*arrival)
        if "notify" in rec:
            self._notify(m0)
        if "push" in rec and not rec["push"].get("owner"):
            self._push_stores(acc, m0, n0)
        if "push" in rec and prev is None:
            self._push_notifies(pid_m, pid_n)
        return t_id

    def _a_after_wait(self, m0):
        """A's base pointer and the tile's first row, after the 'wait' on the slots of rows [m0, m0 + BM), and the
        wait's token (None without a wait)."""
        a_base, a_row, token = self.arg["a"], m0, None
        if "wait" in self.rec:
            token = self._wait(m0, self.rec["wait"])
            if self.rec["loads"] == "tma":
                a_row = core.ConsumeToken.build(m0, token).result
            else:
                a_base = core.ConsumeToken.build(a_base, token).result
        return a_base, a_row, token

    def _row_slots(self, m0, spec):
        rps = spec["rows_per_slot"]
        last_row = T.sub(T.min_(T.add(m0, self.bm), self.m), 1) if self.m % self.bm else T.add(m0, self.bm - 1)
        return T.div(m0, rps), T.add(T.div(last_row, rps), 1)

    def _wait(self, m0, spec):
        lo, hi = self._row_slots(m0, spec)
        with T.For(lo, hi, 1, [T.c(0)]) as loop:
            slot = T.addptr(self.arg[spec["arg"]], loop.iv)
            loop.yield_(core.Wait.build(slot, self.arg[spec["value_arg"]], scope=spec["scope"]).token)
        return loop.results[0]

    def _notify(self, m0):
        rec, spec = self.rec, self.rec["notify"]
        lo, hi = self._row_slots(m0, spec)
        with T.For(lo, hi, 1) as loop:
            peer = spec["peer"]
            if peer == "rank":
                p = self.rank
            elif peer == "slot_owner":
                p = T.div(T.mul(loop.iv, spec["rows_per_slot"]), rec["rows_per_rank"])
            elif peer.startswith("arg:"):
                p = self.arg[peer[4:]]
            else:
                nr = core.NumRanks.build().num_ranks
                p = T.rem(T.add(T.rem(T.add(self.rank, _rank_shift(peer)), nr), nr), nr)
            core.Notify.build(T.addptr(self.arg[spec["arg"]], loop.iv), p, T.c(spec["value"]), op="add",
                              scope=spec["scope"], semantic="release")

    # -- the K loop
    def k_loop(self, a_base, a_row, n0, k_start, n_k=None, lda=None):
        """The tile's accumulator over K steps [k_start, k_start + n_k) (default: its split's, or all of K); A's
        rows lda elements apart (default: the record's)."""
        rec = self.rec
        lda = lda or rec["lda"]
        acc0 = T.zeros([self.bm, self.bn], "fp32")
        if n_k is None:
            g = self.g
            n_k = g.k_tiles
            if k_start is not None:  # a split's K tiles: the last split has fewer where they do not divide K's
                n_k = g.split_tiles if g.split_tiles * rec["split_k"] == g.k_tiles else \
                    T.min_(T.sub(T.c(g.k_tiles), k_start), g.split_tiles)
        imprecise = imprecise_acc(rec)
        if rec["loads"] == "tma":
            parts = rec.get("m_split", 1)  # the tile's rows as `parts` dots sharing B's tile
            rows = self.bm // parts
            with T.For(0, n_k, 1, [T.zeros([rows, self.bn], "fp32") for _ in range(parts)],
                       attrs={"tt.warp_specialize": bool(rec.get("warp_specialize"))}) as loop:
                ki = T.add(loop.iv, k_start) if k_start is not None else loop.iv
                kk = T.mul(ki, self.bk)
                if rec["b_trans"]:
                    b = T.trans(T.desc_load(self.b_desc, [n0, kk]), [1, 0])
                else:
                    b = T.desc_load(self.b_desc, [kk, n0])
                loop.yield_(*[T.dot(T.desc_load(self.a_desc, [T.add(a_row, i * rows) if i else a_row, kk]), b,
                                    loop.args[i], max_imprecise_acc=imprecise) for i in range(parts)])
            return loop.results[0] if parts == 1 else self._stack_rows(*loop.results)
        # pointer loads: a_ptrs[BM, BK], b_ptrs[BK, BN], advanced by BK each step
        rm = T.add(a_row, T.make_range(0, self.bm))
        rn = T.add(n0, T.make_range(0, self.bn))
        rk = T.make_range(0, self.bk)
        idx = self.idx_t
        k_off = T.mul(k_start, self.bk) if k_start is not None else None
        rk_a = T.add(rk, k_off) if k_off is not None else rk
        a_off = T.add(T.mul(T.expand_dims(self._wide(rm), 1), lda), T.expand_dims(self._wide(rk_a), 0))
        if rec["b_trans"]:
            b_off = T.add(T.expand_dims(self._wide(rk_a), 1), T.mul(T.expand_dims(self._wide(rn), 0), rec["ldb"]))
            b_step = self.bk
        else:
            b_off = T.add(T.mul(T.expand_dims(self._wide(rk_a), 1), rec["ldb"]), T.expand_dims(self._wide(rn), 0))
            b_step = self.bk * rec["ldb"]
        a_ptrs = T.addptr(T.splat(a_base, [self.bm, self.bk]), a_off)
        b_ptrs = T.addptr(T.splat(self.arg["b"], [self.bk, self.bn]), b_off)
        m_mask = T.expand_dims(T.lt(rm, self.m), 1) if self.m % self.bm else None
        n_mask = T.expand_dims(T.lt(rn, self.n), 0) if self.n % self.bn else None
        with T.For(0, n_k, 1, [a_ptrs, b_ptrs, acc0]) as loop:
            ap, bp, acc = loop.args
            a_mask, b_mask = m_mask, n_mask
            if self.k % self.bk:
                kk = T.mul(T.add(loop.iv, k_start) if k_start is not None else loop.iv, self.bk)
                k_ok = T.lt(T.add(rk, kk), self.k)
                a_mask = _and(a_mask, T.expand_dims(k_ok, 0), [self.bm, self.bk])
                b_mask = _and(b_mask, T.expand_dims(k_ok, 1), [self.bk, self.bn])
            a = T.load(ap, a_mask, 0.0 if a_mask is not None else None)
            b = T.load(bp, b_mask, 0.0 if b_mask is not None else None)
            acc = T.dot(a, b, acc, max_imprecise_acc=imprecise)
            loop.yield_(T.addptr(ap, T.c(self.bk, T.tensor([self.bm, self.bk], idx))),
                        T.addptr(bp, T.c(b_step, T.tensor([self.bk, self.bn], idx))), acc)
        return loop.results[2]

    def _stack_rows(self, top, bottom):
        """[BM, BN] from two [BM / 2, BN] accumulators, top's rows first (tt.join, then rows outermost)."""
        pair = T.op("tt.join", [top, bottom], [T.tensor([self.bm // 2, self.bn, 2], T.elem(top))]).results[0]
        return T.reshape(T.trans(pair, [2, 0, 1]), [self.bm, self.bn])

    def _wide(self, x):
        return T.int_cast(x, self.idx_t)

    # -- epilogues
    def _tile_ptrs(self, base, m0, n0, ld, slab=None, slab_rows: int = 0):
        """Pointers [BM, BN] to rows m0 + i (+ slab * slab_rows, after masking: slab ``slab`` of a buffer of
        slabs of slab_rows rows, the product in the offsets' width), columns n0 + j, and the mask of the
        rows/columns inside M x N (None when the tiles divide evenly)."""
        shift = None if slab is None else slab * slab_rows if isinstance(slab, int) else \
            T.mul(self._wide(slab), slab_rows)
        rm = T.add(m0, T.make_range(0, self.bm))
        rn = T.add(n0, T.make_range(0, self.bn))
        rows = self._wide(rm)
        if shift is not None:
            rows = T.add(rows, shift)
        off = T.add(T.mul(T.expand_dims(rows, 1), ld), T.expand_dims(self._wide(rn), 0))
        ptrs = T.addptr(T.splat(base, [self.bm, self.bn]), off)
        mask = None
        if self.m % self.bm:
            mask = _and(mask, T.expand_dims(T.lt(rm, self.m), 1), [self.bm, self.bn])
        if self.n % self.bn:
            mask = _and(mask, T.expand_dims(T.lt(rn, self.n), 0), [self.bm, self.bn])
        return ptrs, mask

    def store_c(self, acc, m0, n0):
        rec = self.rec
        if rec["store"] == "tma":
            if rec["epilogue_split"] == 2:
                half = self.bn // 2
                parts = T.split(T.trans(T.reshape(acc, [self.bm, 2, half]), [0, 2, 1]))
                T.desc_store(self.c_desc, T.cast(parts[0], self.out_t), [m0, n0])
                T.desc_store(self.c_desc, T.cast(parts[1], self.out_t), [m0, T.add(n0, half)])
            else:
                T.desc_store(self.c_desc, T.cast(acc, self.out_t), [m0, n0])
            return
        ptrs, mask = self._tile_ptrs(self.arg["c"], m0, n0, rec["ldc"])
        T.store(ptrs, T.cast(acc, self.out_t), mask)

    def _split_epilogue(self, acc, t, split, m0, n0, then=None, store=True):
        """Splits but the last store their fp32 partial and count it; the last waits for them, adds them, stores
        C (unless not ``store``), resets the lock and calls ``then(total)`` (the push)."""
        S = self.rec["split_k"]
        lock = T.addptr(self.arg["locks"], t)
        last = T.cmp("eq", split, S - 1)
        with T.if_(T.cmp("ne", split, S - 1)):
            ws = self.arg["workspace"]
            ptrs, mask = self._tile_ptrs(ws, m0, n0, self.n, split, self.m)
            T.store(ptrs, acc, mask)
            T.barrier()
            T.atomic_rmw("add", lock, T.c(1), T.c(True), sem="release", scope="gpu")
        with T.if_(last):
            # bounded, like every wait; its token keeps the partials' loads after it (else they may be issued
            # before the spin and read the workspace before the other splits wrote it: wrong sums on the GPU)
            token = core.Wait.build(lock, T.c(S - 1), scope="gpu", semantic="acquire").token
            T.barrier()
            workspace = core.ConsumeToken.build(self.arg["workspace"], token).result
            total = acc
            for j in range(S - 1):
                ptrs, mask = self._tile_ptrs(workspace, m0, n0, self.n, j, self.m)
                total = T.add(total, T.load(ptrs, mask, 0.0 if mask is not None else None, cache="cg"))
            total = _epilogue.emit(self, total, m0, n0)
            if store:
                self.store_c(total, m0, n0)
            T.atomic_rmw("xchg", lock, T.c(0), T.c(True), sem="relaxed", scope="gpu")
            if then is not None:
                then(total)

    def _stream_k(self, pid):
        """The stream-K pieces of program pid (module docstring; stream_k_segments is the same walk on ints)."""
        g = self.g
        K, G, d = g.k_tiles, g.grid, g.tiles - self.rec["stream_k"]
        total = self.rec["stream_k"] * K
        start, end = T.div(T.mul(pid, total), G), T.div(T.mul(T.add(pid, 1), total), G)
        last = T.div(T.sub(end, 1), K)
        tail = T.cmp("ne", T.rem(end, K), 0)
        locks = self.arg["locks"]
        with T.if_(tail):  # the trailing piece of a tile owned by a higher program: partial to slot pid
            k0 = T.sub(T.max_(start, T.mul(last, K)), T.mul(last, K))
            acc, _, _ = self._piece(T.add(d, last), k0, T.sub(T.sub(end, T.mul(last, K)), k0))
            T.store(self._ws_ptrs(pid), acc)
            T.barrier()
            T.atomic_rmw("add", T.addptr(locks, pid), T.c(1), T.c(True), sem="release", scope="gpu")
        with T.For(T.div(start, K), T.select(tail, last, T.add(last, 1)), 1) as tiles_:
            t = tiles_.iv
            k0 = T.max_(T.sub(start, T.mul(t, K)), 0)
            acc, m0, n0 = self._piece(T.add(d, t), k0, T.sub(K, k0))
            first = T.div(T.sub(T.mul(T.add(T.mul(t, K), 1), G), 1), total)  # holds the tile's first K step
            with T.For(T.select(T.cmp("sgt", k0, 0), first, pid), pid, 1, [acc]) as qs:
                lock = T.addptr(locks, qs.iv)
                token = core.Wait.build(lock, T.c(1), scope="gpu", semantic="acquire").token  # bounded
                T.barrier()
                part = T.load(self._ws_ptrs(qs.iv, core.ConsumeToken.build(self.arg["workspace"], token).result),
                              cache="cg")  # the token keeps the load after the wait
                T.atomic_rmw("xchg", lock, T.c(0), T.c(True), sem="relaxed", scope="gpu")
                qs.yield_(T.add(qs.args[0], part))
            self.store_c(_epilogue.emit(self, qs.results[0], m0, n0), m0, n0)

    def _piece(self, t, k0, n_k):
        """K steps [k0, k0 + n_k) of tile t (after its wait): (fp32 accumulator, m0, n0)."""
        pid_m, pid_n = self.coords(t)
        m0, n0 = T.mul(pid_m, self.bm), T.mul(pid_n, self.bn)
        a_base, a_row, _ = self._a_after_wait(m0)
        return self.k_loop(a_base, a_row, n0, k0, n_k), m0, n0

    def _ws_ptrs(self, slot, workspace=None):
        """Pointers to stream-K workspace slot ``slot``: a whole [BM, BN] fp32 tile, rows BN apart (of
        ``workspace``: the argument, or the argument after a wait's consume_token)."""
        rows = T.add(T.mul(self._wide(slot), self.bm), self._wide(T.make_range(0, self.bm)))
        off = T.add(T.mul(T.expand_dims(rows, 1), self.bn), T.expand_dims(self._wide(T.make_range(0, self.bn)), 0))
        return T.addptr(T.splat(self.arg["workspace"] if workspace is None else workspace, [self.bm, self.bn]), off)
