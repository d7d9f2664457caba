"""W-way reduction: ``dst[region] = sum over ranks r of src@r[region]``, read through ``ditron_core.symm_at``,
accumulated in fp32 in the order r = rank, rank+1, ... (mod num_ranks), so each rank reads its own copy first and
the ranks start on different peers.

Record fields (``make_record``): rows, cols, dtype (of src), out_dtype, src_ld, dst_ld, src_row/src_col/dst_row/
dst_col (int or 'arg:<name>'), block_m, block_n, grid, num_warps, and optionally

    wait   = {arg, rows_per_slot, value_arg, scope}: before reading a tile from rank r, wait until every slot of
             r's signal pad ``arg`` covering the tile's src rows is >= the i32 argument ``value_arg``
             (ditron_core.wait on symm_at(pad + slot, r), then consume_token on r's src pointer). Matches a GEMM
             whose notify = {peer: 'rank', rows_per_slot} marks its own partial rows ready.
    notify = {arg, slot, peer, value, scope}: end-of-program notify, as in copy (peer default 'rank').
    publish = {arg, value_arg, scope, copy_from}: the whole all-reduce in one launch. Each program publishes its
             tiles -- sets slot t (the tile's index) of its own signal pad ``arg`` to the i32 argument
             ``value_arg`` (release) -- and reduces them: before reading tile t from a rank it waits on that rank's
             slot t (acquire; the own slot was set by the same program, so that wait passes at once). Without
             ``copy_from`` src is complete before the launch (a GEMM's output on the same stream) and every slot
             is set first. With ``copy_from`` (a buffer of the same shape and ld as src) each tile is copied into
             the own src before its slot is set: with a constant region (an all-reduce), tile t itself, every
             tile of the program first (2xH200, 16 MB: 76-78 us, 81 with the copies interleaved); with a run-time
             src_row (a reduce-scatter, rank q's rows starting at q * rows), the tile at t's place in every rank's
             rows, which the peers read, right before t is reduced, so the copies overlap the reads over the link
             (128 MB: 268 us, 316 with a whole copy before the launch). Every program publishes a tile before it
             waits for it, so the kernel cannot deadlock as long as all its programs are resident (grid <= SMs).
             Exclusive with ``wait``. With ``scatter`` (an i32 pad argument, one slot per tile; a constant region)
             the all-reduce is two-shot: tile t is reduced only on its owner (``scatter_owner``: a program's
             k-th tile on rank k mod num_ranks), which stores the sum into its dst and into every peer's src at
             the tile's place (over the link, the peers' copies already read) and sets slot t of ``scatter`` on
             that peer (release); another rank waits on its own slot t and copies its src tile into dst. A
             program sums its owned tiles first, then copies the others. Each rank reads 1/W of the tiles from every peer and writes
             them back: both directions of each link carry (W-1)/W of the data, against all of it inbound
             one-shot.
             With ``push`` (an int: num_ranks - 1, the slabs of src; needs ``copy_from`` and src_row 0) the
             one-shot all-reduce moves the data by writes: src is an inbox of ``push`` slabs of rows x cols, slab
             j - 1 holding rank (rank + j) mod num_ranks's tiles. Each program stores each of its tiles of
             ``copy_from`` into every peer's inbox (the slab the peer keeps for this rank) and sets that peer's
             slot t * push + slab (release); between a tile's stores and its release it sums its previous
             tile: waits on its own slots (local spins), adds its own tile and its inbox slabs, stores dst; the
             last tile's sum ends the program. Every byte crosses the link as a store (2xH200:
             343 GB/s against 312 for SM loads of peer memory) and nothing is copied into a local symmetric
             buffer first. Excludes ``scatter``. With ``pushed`` (an int, rows per slot) the peers' tiles were
             stored by a producer before or while this launch runs (a GEMM's push epilogue: kernels.gemm
             ``push``), which adds to slot slab * ceil(rows / pushed) + row // pushed of the owner's pad per
             tile: the launch only sums, each tile once its slots of every slab are >= ``value_arg``.
             With ``consume`` (true; a push without ``pushed``) each slot has one waiter per call, the sum of
             its tile, which clears it after the sum (notify ``clear``: 0 if it still holds ``value_arg``, so a
             newer signal stays): the pad is back to zero for the next call that uses it, and a CUDA graph
             replaying the launch with a fixed value needs not zero it (device ``ditron.consumed``).

Arguments: src (symmetric), dst, the wait pad and value, the notify pad, the publish buffer, pad and value, the
scatter pad, then the i32 arguments that 'arg:<name>' fields name.
"""
from __future__ import annotations

import numpy as np

from ..dialects import core
from ..dialects import ttir as T
from . import KernelRecord, Region, SlotNotify, SlotWait, TileStep, check_i32, copies
from . import chunk
from .numerics import round_to

name = "reduce"
_TEMPLATE = "reduce"
DTYPES = ("bf16", "fp16", "fp32")


def make_record(rows: int, cols: int, *, name: str = "reduce", dtype: str = "bf16", out_dtype: str | None = None,
                src_ld: int | None = None, dst_ld: int | None = None, src_row=0, src_col=0, dst_row=0, dst_col=0,
                block_m: int | None = None, block_n: int | None = None, grid: int = 32, num_warps: int = 4,
                wait: dict | None = None, notify: dict | None = None, publish: dict | None = None) -> KernelRecord:
    elem = T.DTYPE_BYTES.get(dtype, 2)
    block_n = block_n or _default_block_n(cols, elem)
    block_m = block_m or _default_block_m(rows, block_n, elem)
    rec = KernelRecord(template="reduce", name=name, rows=rows, cols=cols, dtype=dtype,
                       out_dtype=out_dtype or dtype, src_ld=src_ld or cols, dst_ld=dst_ld or cols, src_row=src_row,
                       src_col=src_col, dst_row=dst_row, dst_col=dst_col, block_m=block_m, block_n=block_n,
                       grid=grid, num_warps=num_warps)
    if wait:
        rec["wait"] = {"value_arg": "wait_value", "scope": "sys", **wait}
    if notify:
        rec["notify"] = {"peer": "rank", "value": 1, "scope": "sys", **notify}
    if publish:
        rec["publish"] = {"value_arg": "publish_value", "scope": "sys", **publish}
        if isinstance(publish.get("push"), int):
            rec["src_extent"] = publish["push"] * rows  # the inbox's rows (chunk.needs_i64)
    rec["args"] = _arg_names(rec)
    check(rec)
    return rec


def _default_block_n(cols: int, elem_bytes: int) -> int:
    """Rows of up to 512 bytes (at least 16 elements), no wider than the region."""
    return min(1 << max(0, (cols - 1).bit_length()), max(16, 512 // elem_bytes))


def _default_block_m(rows: int, block_n: int, elem_bytes: int) -> int:
    """Tiles of up to 8 KB, no taller than the region."""
    return min(1 << max(0, (rows - 1).bit_length()), max(1, 8192 // elem_bytes // block_n))


def publish_tile(rows: int, cols: int, elem_bytes: int, programs: int, *, block_m: int | None = None,
                 block_n: int | None = None, push: bool = False) -> dict[str, int]:
    """A tile for the one-launch all-reduce ('publish'): rows of up to 512 bytes, and the tallest block_m up to
    32 KB per tile that still gives each of ``programs`` programs a tile (a program reads one tile from each rank
    at a time: the bigger the tile, the more bytes in flight over the link); 8 warps above 16 KB. ``push`` (stores,
    which need no round trip to keep bytes in flight): the smallest block_m up to 32 KB per tile that leaves no
    program a second tile (each tile a program pushes before it sums the last costs a signal's latency: H200 x2,
    2 MB bf16, 256 tiles of 16 rows 14.3 us a kernel, 128 of 32 rows 11.0, 64 of 64 rows 10.9)."""
    block_n = block_n or _default_block_n(cols, elem_bytes)
    if block_m is None:
        block_m = _default_block_m(rows, block_n, elem_bytes)

        def tiles(bm):
            return -(-rows // bm) * -(-cols // block_n)
        while block_m * 2 * block_n * elem_bytes <= 32768 and block_m < rows and \
                (tiles(block_m) > programs if push else tiles(block_m * 2) >= programs):
            block_m *= 2
    return {"block_m": block_m, "block_n": block_n, "num_warps": 8 if block_m * block_n * elem_bytes > 16384 else 4}


def _arg_names(rec) -> list[str]:
    args = ["src", "dst"]
    if "wait" in rec:
        args += [rec["wait"]["arg"], rec["wait"]["value_arg"]]
    if "notify" in rec and rec["notify"]["arg"] not in args:
        args.append(rec["notify"]["arg"])
    if "publish" in rec:
        p = rec["publish"]
        args += [a for a in (p.get("copy_from"), p["arg"], p["value_arg"], p.get("scatter")) if a and a not in args]
    fields = [rec[f"{s}_{f}"] for s in ("src", "dst") for f in ("row", "col")]
    if "notify" in rec:
        fields += [rec["notify"]["slot"], rec["notify"]["peer"]]
    return args + [a for a in chunk.scalar_args(rec, fields) if a not in args]


def check(rec) -> None:
    chunk.check_region(_TEMPLATE, rec)
    for key in ("dtype", "out_dtype"):
        if rec[key] not in DTYPES:
            raise chunk.err(_TEMPLATE, f"{key} '{rec[key]}' is not supported; use one of {', '.join(DTYPES)}")
    if "wait" in rec:
        w = rec["wait"]
        if not isinstance(w.get("arg"), str) or not isinstance(w.get("rows_per_slot"), int) or w["rows_per_slot"] < 1:
            raise chunk.err(_TEMPLATE, "'wait' needs 'arg' (the signal pad) and 'rows_per_slot' >= 1")
        if not isinstance(rec["src_row"], int):
            raise chunk.err(_TEMPLATE, "a per-tile wait needs a constant src_row (slots are computed from it)")
    if "notify" in rec:
        chunk.check_peer(_TEMPLATE, "notify.peer", rec["notify"]["peer"])
    if "publish" in rec:
        p = rec["publish"]
        if not isinstance(p.get("arg"), str) or not isinstance(p.get("value_arg"), str):
            raise chunk.err(_TEMPLATE, "'publish' needs 'arg' (the signal pad) and 'value_arg'")
        if "wait" in rec:
            raise chunk.err(_TEMPLATE, "'publish' and 'wait' exclude each other (publish waits per tile itself)")
        if p.get("copy_from") and not isinstance(rec["src_col"], int):
            raise chunk.err(_TEMPLATE, "'publish' with 'copy_from' needs a constant src_col (each rank copies "
                                       "the tiles its peers read)")
        if p.get("scatter") is not None and (not isinstance(p["scatter"], str) or any(
                not isinstance(rec[f"{a}_{b}"], int) for a in ("src", "dst") for b in ("row", "col"))):
            raise chunk.err(_TEMPLATE, "'publish.scatter' (two-shot) needs the name of its signal pad and a "
                                       "constant region (an all-reduce: every rank holds every tile)")
        if p.get("push") is not None:
            if not isinstance(p["push"], int) or isinstance(p["push"], bool) or p["push"] < 1:
                raise chunk.err(_TEMPLATE, "'publish.push' is the number of inbox slabs (num_ranks - 1 >= 1)")
            if p.get("pushed") is not None and (not isinstance(p["pushed"], int) or p["pushed"] < 1):
                raise chunk.err(_TEMPLATE, "'publish.pushed' is the rows per slot of the producer's counts (>= 1)")
            if not p.get("copy_from") or p.get("scatter") is not None:
                raise chunk.err(_TEMPLATE, "'publish.push' pushes 'copy_from' into the peers' inboxes: it needs "
                                           "'copy_from' and excludes 'scatter'")
            if rec["src_row"] != 0 or any(not isinstance(rec[f"{a}_{b}"], int) for a in ("src", "dst")
                                           for b in ("row", "col")):
                raise chunk.err(_TEMPLATE, "'publish.push' needs a constant region with src_row 0 (the inbox "
                                           "slabs start at row 0)")
        if p.get("consume") is not None:
            if not isinstance(p["consume"], bool):
                raise chunk.err(_TEMPLATE, "'publish.consume' is true or false")
            if p["consume"] and (p.get("push") is None or p.get("pushed") is not None):
                raise chunk.err(_TEMPLATE, "'publish.consume' clears each slot after its one wait: only a push "
                                           "without 'pushed' waits once per slot (a producer's row-block counts "
                                           "are awaited by every tile of the row block)")
    if "publish" in rec:  # slot indices are i32: a tile's per slab, or a producer's row blocks per slab
        p, tiles = rec["publish"], chunk.num_tiles(rec)
        slabs = p.get("push") or 1
        per_slab = -(-rec["rows"] // p["pushed"]) if p.get("pushed") else tiles
        check_i32(_TEMPLATE, f"publish slots ({slabs} slabs x {per_slab})", slabs * per_slab)
    if len(set(rec["args"])) != len(rec["args"]):
        raise chunk.err(_TEMPLATE, f"argument names collide: {rec['args']}")


def grid(rec) -> tuple[int, int, int]:
    return rec["grid"], 1, 1


def _row_slots(first_row: int, rows: int, rps: int, base: int = 0) -> range:
    """The slots (rows_per_slot rps, from slot base) covering rows first_row .. first_row + rows."""
    return range(base + first_row // rps, base + (first_row + rows - 1) // rps + 1)


# ------------------------------------------------------------------------------------------------ tiles()

def tiles(record, *, rank: int, num_ranks: int, scalars: dict[str, int]) -> list[list[TileStep]]:
    rec = record
    order = [(rank + i) % num_ranks for i in range(num_ranks)]
    pub = rec.get("publish")
    if pub and pub.get("push") is not None:
        return [_push_steps(rec, pid, rank, num_ranks, scalars) for pid in range(rec["grid"])]
    out = []
    for pid in range(rec["grid"]):
        steps = []
        if pub and not _interleaved(rec):
            steps += _publish_steps(rec, pid, num_ranks, scalars)
        tn_count = chunk.tiles_n(rec)
        owned, others = [], []  # two-shot (publish.scatter): the owned tiles first, then the copies of the others
        for tm, tn in chunk.program_tiles(rec, pid):
            if pub and _interleaved(rec):
                steps += _publish_copy_steps(rec, tm, tn, num_ranks, scalars)
            (r0, c0), size = chunk.tile_box(rec, "src", tm, tn, scalars)
            srcs = [Region("src", (r0, c0), size, rank=None if r == rank else r) for r in order]
            dst = Region("dst", *chunk.tile_box(rec, "dst", tm, tn, scalars))
            if pub and pub.get("scatter"):
                t = tm * tn_count + tn
                (owned if scatter_owner(rec, t, num_ranks) == rank else others).append(
                    _scatter_step(rec, t, srcs, dst, order, rank, num_ranks, scalars))
                continue
            step = TileStep(reads=srcs, writes=[dst], compute=_sum(srcs, dst, rec["out_dtype"]))
            if pub:
                value = int(scalars[pub["value_arg"]])
                step.waits = [SlotWait(pub["arg"], tm * tn_count + tn, value, rank=None if r == rank else r)
                              for r in order]
            if "wait" in rec:
                w = rec["wait"]
                step.waits = [SlotWait(w["arg"], s, int(scalars[w["value_arg"]]), rank=None if r == rank else r)
                              for r in order for s in _row_slots(r0, size[0], w["rows_per_slot"])]
            steps.append(step)
        steps += owned + others
        notifies = chunk.program_notifies(rec, rank, num_ranks, scalars, None)
        if notifies:
            if not steps:
                steps.append(TileStep())
            steps[-1].notifies = notifies
        out.append(steps)
    return out


def _scatter_step(rec, t: int, srcs, dst, order, rank: int, num_ranks: int, scalars) -> TileStep:
    """Tile t of a two-shot all-reduce (publish.scatter): on its owner, the sum of every rank's src tile into dst
    and into each peer's src, then the peer's scatter slot t; elsewhere, the wait on the own slot t and the copy
    of the own src tile (the owner's sum by then) into dst. A program reduces its owned tiles first, then copies
    the others: a reduction waits only on the copies into src, so no rank waits for another's copy phase."""
    pub = rec["publish"]
    value = int(scalars[pub["value_arg"]])
    own = srcs[0]
    if scatter_owner(rec, t, num_ranks) != rank:
        step = TileStep(reads=[own], writes=[dst], compute=copies(own, dst))
        step.waits = [SlotWait(pub["scatter"], t, value, rank=None)]
        return step
    peers = [Region("src", own.offsets, own.sizes, rank=q) for q in order[1:]]
    step = TileStep(reads=srcs, writes=[dst] + peers, compute=_sum(srcs, dst, rec["out_dtype"], also=peers,
                                                                         also_dtype=rec["dtype"]))
    step.waits = [SlotWait(pub["arg"], t, value, rank=None if r == rank else r) for r in order]
    step.notifies = [SlotNotify(pub["scatter"], t, value, q, op="set") for q in order[1:]]
    return step


def _push_steps(rec, pid: int, rank: int, num_ranks: int, scalars) -> list[TileStep]:
    """Program pid of a one-shot all-reduce by push: each tile of copy_from stored into every peer's inbox slab
    for this rank, the previous tile summed from copy_from and the own inbox slabs (slab j - 1: rank (rank + j)
    mod num_ranks) once their slots are set, then the tile's slots set on the peers; the last tile's sum last."""
    pub = rec["publish"]
    slabs, value, rows = pub["push"], int(scalars[pub["value_arg"]]), rec["rows"]
    if slabs != num_ranks - 1:
        raise chunk.err(_TEMPLATE, f"'publish.push' has {slabs} inbox slabs; a world of {num_ranks} ranks needs "
                                   f"{num_ranks - 1}")
    tn_count = chunk.tiles_n(rec)
    pushes, sums = [], []
    for tm, tn in chunk.program_tiles(rec, pid):
        t = tm * tn_count + tn
        (r0, c0), size = chunk.tile_box(rec, "src", tm, tn, scalars)
        mine = Region(pub["copy_from"], (r0, c0), size)
        peers = [((rank + i) % num_ranks, num_ranks - 1 - i) for i in range(1, num_ranks)]  # (peer, its slab)
        boxes = [Region("src", (slab * rows + r0, c0), size, rank=q) for q, slab in peers]
        pushes.append((TileStep(reads=[mine], writes=boxes, compute=copies(mine, *boxes)),
                       [SlotNotify(pub["arg"], t * slabs + slab, value, q, op="set") for q, slab in peers]))
        inbox = [Region("src", (j * rows + r0, c0), size) for j in range(slabs)]
        dst = Region("dst", *chunk.tile_box(rec, "dst", tm, tn, scalars))
        step = TileStep(reads=[mine] + inbox, writes=[dst], compute=_sum([mine] + inbox, dst, rec["out_dtype"]))
        step.waits = [SlotWait(pub["arg"], slot, value, rank=None) for j in range(slabs)
                      for slot in _push_slots(rec, t, r0, size[0], j)]
        if pub.get("consume"):
            step.notifies = [SlotNotify(w.arg, w.slot, value, rank, op="clear") for w in step.waits]
        sums.append(step)
    if pub.get("pushed") is not None:  # the producer pushed: only the sums
        return sums
    # each tile's stores, the sum of the program's previous tile (and its clears), the tile's slots (with the step
    # before them: nothing is read in between); the last tile's sum (_emit_push)
    steps = []
    for i, (store, flags) in enumerate(pushes):
        steps += [store] + ([sums[i - 1]] if i else [])
        steps[-1].notifies = steps[-1].notifies + flags
    return steps + sums[-1:]


def _push_slots(rec, t: int, r0: int, rows: int, slab: int) -> range:
    """The own pad's slots a push sum of tile t (rows r0 .. r0 + rows) waits on for inbox slab ``slab``: slot
    t * slabs + slab, or with ``pushed`` (a producer's counts per row block) those of the row blocks it covers."""
    pub = rec["publish"]
    rps = pub.get("pushed")
    if rps is None:
        return range(t * pub["push"] + slab, t * pub["push"] + slab + 1)
    return _row_slots(r0, rows, rps, base=slab * -(-rec["rows"] // rps))


def scatter_owner(rec, t: int, num_ranks: int) -> int:
    """The rank that reduces tile t of a two-shot all-reduce: every num_ranks-th tile of each program (its k-th
    tile, t = pid + k * grid, on rank k mod num_ranks), so that every program reduces its share."""
    return t // rec["grid"] % num_ranks


def _interleaved(rec) -> bool:
    """Whether 'publish' copies a tile right before reducing it (a reduce-scatter's copy_from), else every tile
    of the program first."""
    return bool(rec["publish"].get("copy_from")) and chunk.arg_of(rec["src_row"]) is not None


def _publish_steps(rec, pid: int, num_ranks: int, scalars) -> list[TileStep]:
    """Program pid's first phase under 'publish': every tile copied (copy_from) and its slot set; without a copy,
    one step of notifies (nothing between them to order)."""
    pub = rec["publish"]
    if pub.get("copy_from"):
        return [st for tm, tn in chunk.program_tiles(rec, pid)
                for st in _publish_copy_steps(rec, tm, tn, num_ranks, scalars)]
    value = int(scalars[pub["value_arg"]])
    notifies = [SlotNotify(pub["arg"], tm * chunk.tiles_n(rec) + tn, value, None, op="set")
                for tm, tn in chunk.program_tiles(rec, pid)]
    return [TileStep(notifies=notifies)] if notifies else []


def _publish_copy_steps(rec, tm: int, tn: int, num_ranks: int, scalars) -> list[TileStep]:
    """Tile (tm, tn) under 'publish' with copy_from: the tile(s) the peers read copied into the own src (with a
    run-time src_row, the tile at its place in every rank's rows: one step each), then its slot set."""
    pub = rec["publish"]
    (r0, c0), size = chunk.tile_box(rec, "src", tm, tn, scalars)
    if chunk.arg_of(rec["src_row"]):
        boxes = [((q * rec["rows"] + tm * rec["block_m"], c0), size) for q in range(num_ranks)]
    else:
        boxes = [((r0, c0), size)]
    steps = []
    for box in boxes:
        a, s = Region(pub["copy_from"], *box), Region("src", *box)
        steps.append(TileStep(reads=[a], writes=[s], compute=copies(a, s)))
    steps[-1].notifies = [SlotNotify(pub["arg"], tm * chunk.tiles_n(rec) + tn, int(scalars[pub["value_arg"]]), None,
                                     op="set")]
    return steps


def _sum(srcs, dst, out_dtype, also=(), also_dtype=None):
    """dst := the fp32 sum of srcs, rounded to out_dtype; ``also``: regions that get it too, rounded to
    ``also_dtype``."""
    def compute(view):
        acc = np.zeros(dst.sizes, np.float32)
        for s in srcs:
            acc = acc + np.asarray(view(s), dtype=np.float32)
        view(dst)[...] = round_to(out_dtype, acc)
        for a in also:
            view(a)[...] = round_to(also_dtype, acc)

    return compute


# ------------------------------------------------------------------------------------------------ build()

def build(record, *, ip, loc=None):
    rec = KernelRecord(record)
    check(rec)
    def pointers():
        types = {"src": T.ptr(rec["dtype"]), "dst": T.ptr(rec["out_dtype"])}
        if "publish" in rec:
            types[rec["publish"]["arg"]] = T.ptr("i32")
            if rec["publish"].get("scatter"):
                types[rec["publish"]["scatter"]] = T.ptr("i32")
            if rec["publish"].get("copy_from"):
                types[rec["publish"]["copy_from"]] = T.ptr(rec["dtype"])
        return types

    return chunk.build_kernel(rec, pointers, _emit, ip=ip, loc=loc)


def _emit(rec, args):
    e = chunk.RegionEmitter(rec, args)
    bm, bn = rec["block_m"], rec["block_n"]
    e.rank(), e.num_ranks()  # defined here, at the top: every later use is dominated
    pub = rec.get("publish")
    if pub and pub.get("push") is not None:
        _emit_push(rec, args, e)
        return
    if pub and not _interleaved(rec):
        _emit_publish(rec, args, e)
    if pub and pub.get("scatter"):
        for owned in (True, False):
            with e.for_tiles() as loop:
                _emit_scatter_tile(rec, args, e, loop.iv, owned)
        e.notify()
        return
    with e.for_tiles() as loop:
        tm, tn = e.tile_coords(loop.iv)
        if pub and _interleaved(rec):
            _emit_publish_copy(rec, args, e, loop.iv, tm, tn)
        src_off, mask = e.tile_offsets("src", tm, tn)
        dst_off, _ = e.tile_offsets("dst", tm, tn)
        acc = _emit_sum(rec, args, e, loop.iv, tm, src_off, mask)
        T.store(T.addptr(T.splat(args["dst"], [bm, bn]), dst_off), T.cast(acc, rec["out_dtype"]), mask)
    e.notify()


def _emit_sum(rec, args, e, t, tm, src_off, mask):
    """The fp32 sum of the tile over every rank's src, this rank's first (after each rank's wait, if any)."""
    bm, bn, pub = rec["block_m"], rec["block_n"], rec.get("publish")
    rank, num_ranks = e.rank(), e.num_ranks()
    with T.For(0, num_ranks, 1, [T.zeros([bm, bn], "fp32")]) as peers:
        r = T.rem(T.add(rank, peers.iv), num_ranks)
        src = core.SymmAt.build(args["src"], r).result
        if "wait" in rec:
            src = core.ConsumeToken.build(src, _wait(rec, args, tm, r)).result
        if pub:
            src = _published(pub, args, t, r, src)
        vals = T.load(T.addptr(T.splat(src, [bm, bn]), src_off), mask, 0.0 if mask is not None else None)
        peers.yield_(T.add(peers.args[0], T.cast(vals, "fp32")))
    return peers.results[0]


def _emit_scatter_tile(rec, args, e, t, owned: bool):
    """Tile t of the two-shot all-reduce, in the loop over the owned tiles (``owned``) or over the others. Its
    owner (``scatter_owner``) sums it, stores the sum into dst and into every peer's src, then sets the peer's
    scatter slot t (the release follows a CTA barrier: every thread's stores first); any other rank waits on its
    own slot t and copies its src tile into dst."""
    pub, bm, bn = rec["publish"], rec["block_m"], rec["block_n"]
    rank, num_ranks = e.rank(), e.num_ranks()
    tm, tn = e.tile_coords(t)
    src_off, mask = e.tile_offsets("src", tm, tn)
    dst_off, _ = e.tile_offsets("dst", tm, tn)
    owner = T.rem(T.div(t, rec["grid"]), num_ranks)
    dst = T.addptr(T.splat(args["dst"], [bm, bn]), dst_off)
    with T.if_(T.cmp("eq" if owned else "ne", owner, rank)):
        if owned:
            acc = _emit_sum(rec, args, e, t, tm, src_off, mask)
            T.store(dst, T.cast(acc, rec["out_dtype"]), mask)
            total = T.cast(acc, rec["dtype"])
            with T.For(1, num_ranks, 1) as qs:
                q = T.rem(T.add(rank, qs.iv), num_ranks)
                T.store(T.addptr(T.splat(core.SymmAt.build(args["src"], q).result, [bm, bn]), src_off), total,
                        mask)
            with T.For(1, num_ranks, 1) as qs:
                core.Notify.build(T.addptr(args[pub["scatter"]], t), T.rem(T.add(rank, qs.iv), num_ranks),
                                  args[pub["value_arg"]], op="set", scope=pub["scope"], semantic="release")
        else:
            slot = core.SymmAt.build(T.addptr(args[pub["scatter"]], t), rank).result
            token = core.Wait.build(slot, args[pub["value_arg"]], scope=pub["scope"]).token
            src = core.ConsumeToken.build(args["src"], token).result
            vals = T.load(T.addptr(T.splat(src, [bm, bn]), src_off), mask, 0.0 if mask is not None else None)
            T.store(dst, T.cast(vals, rec["out_dtype"]), mask)


def _emit_push(rec, args, e):
    """The one-shot all-reduce by push (publish.push), per tile of the program: its stores into every peer's
    inbox slab for this rank, the sum of the program's previous tile (``_emit_push_sum``) while those stores are
    in flight, then the tile's slots set on the peers (a release: it waits for the stores, after a CTA barrier);
    the last tile's sum ends the program. A tile is summed one tile after its own push, by when the peers' copies
    of it, pushed at the same pace, have landed; no release stalls a program with nothing else to do."""
    pub, bm, bn, rows, grid = rec["publish"], rec["block_m"], rec["block_n"], rec["rows"], rec["grid"]
    rank, num_ranks = e.rank(), e.num_ranks()
    slabs = T.sub(num_ranks, 1)
    if pub.get("pushed") is not None:  # a producer pushed (and counted) the peers' tiles: only the sums
        with e.for_tiles() as loop:
            _emit_push_sum(rec, args, e, loop.iv, slabs)
        return
    with e.for_tiles() as loop:
        tm, tn = e.tile_coords(loop.iv)
        off, mask = e.tile_offsets("src", tm, tn)
        vals = T.load(T.addptr(T.splat(args[pub["copy_from"]], [bm, bn]), off), mask, _other(mask))
        with T.For(1, num_ranks, 1) as qs:
            slab = T.sub(slabs, qs.iv)
            inbox, _ = e.tile_offsets("src", tm, tn, slab, rows)
            peer = core.SymmAt.build(args["src"], T.rem(T.add(rank, qs.iv), num_ranks)).result
            T.store(T.addptr(T.splat(peer, [bm, bn]), inbox), vals, mask)
        with T.if_(T.ge(loop.iv, T.add(T.program_id(0), grid))):
            _emit_push_sum(rec, args, e, T.sub(loop.iv, grid), slabs)
        with T.For(1, num_ranks, 1) as qs:
            core.Notify.build(T.addptr(args[pub["arg"]], T.add(T.mul(loop.iv, slabs), T.sub(slabs, qs.iv))),
                              T.rem(T.add(rank, qs.iv), num_ranks), args[pub["value_arg"]], op="set",
                              scope=pub["scope"], semantic="release")
    pid, tiles = T.program_id(0), chunk.num_tiles(rec)
    with T.if_(T.lt(pid, tiles)):  # a program without tiles has no last one
        _emit_push_sum(rec, args, e, T.add(pid, T.mul(T.div(T.sub(tiles - 1, pid), grid), grid)), slabs)


def _emit_push_sum(rec, args, e, t, slabs):
    """Tile t of a push all-reduce: wait on the own slots, sum copy_from's tile and the inbox slabs (rank order
    from this rank on) in fp32, store dst."""
    pub, bm, bn, rows = rec["publish"], rec["block_m"], rec["block_n"], rec["rows"]
    tm, tn = e.tile_coords(t)
    off, mask = e.tile_offsets("src", tm, tn)
    own = T.load(T.addptr(T.splat(args[pub["copy_from"]], [bm, bn]), off), mask, _other(mask))
    with T.For(0, slabs, 1, [T.cast(own, "fp32")]) as js:
        token = _emit_push_wait(rec, args, e, t, tm, js.iv, slabs)
        inbox, _ = e.tile_offsets("src", tm, tn, js.iv, rows)
        src = core.ConsumeToken.build(args["src"], token).result
        part = T.load(T.addptr(T.splat(src, [bm, bn]), inbox), mask, _other(mask))
        js.yield_(T.add(js.args[0], T.cast(part, "fp32")))
    dst_off, _ = e.tile_offsets("dst", tm, tn)
    T.store(T.addptr(T.splat(args["dst"], [bm, bn]), dst_off), T.cast(js.results[0], rec["out_dtype"]), mask)
    if pub.get("consume"):  # the tile's one waiter: its slots back to zero (a newer signal stays)
        with T.For(0, slabs, 1) as js:
            lo = T.add(T.mul(t, slabs), js.iv)
            core.Notify.build(T.addptr(args[pub["arg"]], lo), e.rank(), args[pub["value_arg"]], op="clear",
                              scope=pub["scope"], semantic="relaxed")


def _emit_push_wait(rec, args, e, t, tm, slab, slabs):
    """Wait on the own pad's slots of inbox slab ``slab`` for tile t (``_push_slots``); the token."""
    pub = rec["publish"]
    rps = pub.get("pushed")
    if rps is None:
        lo = T.add(T.mul(t, slabs), slab)
        return _wait_slots(args, pub["arg"], pub["value_arg"], pub["scope"], lo, T.add(lo, 1), e.rank())
    return _wait_rows(rec, args, pub["arg"], pub["value_arg"], pub["scope"], tm, e.rank(), rps, 0,
                      base=T.mul(slab, -(-rec["rows"] // rps)))


def _other(mask):
    return 0.0 if mask is not None else None


def _emit_publish(rec, args, e):
    """Phase one: every tile of this program copied (copy_from) and its slot set before anything is read."""
    with e.for_tiles() as loop:
        if rec["publish"].get("copy_from"):
            tm, tn = e.tile_coords(loop.iv)
            _emit_publish_copy(rec, args, e, loop.iv, tm, tn)
        else:
            _emit_set_slot(rec, args, e, loop.iv)


def _emit_publish_copy(rec, args, e, t, tm, tn):
    """Tile t with copy_from: the tile(s) the peers read copied into the own src, then slot t set (its lowering
    puts a CTA barrier before the release: every thread's copies are ordered before it)."""
    pub, bm, bn = rec["publish"], rec["block_m"], rec["block_n"]

    def copy(slab):
        off, mask = e.tile_offsets("src", tm, tn, slab, rec["rows"])
        vals = T.load(T.addptr(T.splat(args[pub["copy_from"]], [bm, bn]), off), mask,
                      0.0 if mask is not None else None)
        T.store(T.addptr(T.splat(args["src"], [bm, bn]), off), vals, mask)
    if chunk.arg_of(rec["src_row"]):  # every rank's rows: q * rows + the tile's
        with T.For(0, e.num_ranks(), 1) as regions:
            copy(regions.iv)
    else:
        copy(None)
    _emit_set_slot(rec, args, e, t)


def _emit_set_slot(rec, args, e, t):
    pub = rec["publish"]
    core.Notify.build(T.addptr(args[pub["arg"]], t), e.rank(), args[pub["value_arg"]], op="set",
                      scope=pub["scope"], semantic="release")


def _published(pub, args, t, r, src):
    """src of rank r once r's slot t is set (acquire). The own slot too: this program set it in phase one, so that
    wait passes at once and orders the reads after the copy."""
    slot = core.SymmAt.build(T.addptr(args[pub["arg"]], t), r).result
    return core.ConsumeToken.build(src, core.Wait.build(slot, args[pub["value_arg"]], scope=pub["scope"]).token).result


def _wait(rec, args, tm, r):
    """Wait on rank r's slots for the tile's src rows; returns the token."""
    w = rec["wait"]
    return _wait_rows(rec, args, w["arg"], w["value_arg"], w["scope"], tm, r, w["rows_per_slot"], rec["src_row"])


def _wait_rows(rec, args, pad, value_arg, scope, tm, r, rps, row0, base=None):
    """Wait on rank r's slots of ``pad`` (rps rows per slot, from slot ``base``) covering the rows of tile row tm
    (offset by row0); returns the token."""
    bm = rec["block_m"]
    first = T.add(T.mul(tm, bm), row0)
    last = T.add(T.min_(T.add(T.mul(tm, bm), bm), rec["rows"]), row0 - 1)
    lo, hi = T.div(first, rps), T.add(T.div(last, rps), 1)
    if base is not None:
        lo, hi = T.add(base, lo), T.add(base, hi)
    return _wait_slots(args, pad, value_arg, scope, lo, hi, r)


def _wait_slots(args, pad, value_arg, scope, lo, hi, r):
    """Wait until rank r's slots lo .. hi of ``pad`` are >= the argument value_arg; returns the token."""
    with T.For(lo, hi, 1, [T.c(0)]) as loop:
        slot = core.SymmAt.build(T.addptr(args[pad], loop.iv), r).result
        loop.yield_(core.Wait.build(slot, args[value_arg], scope=scope).token)
    return loop.results[0]
