"""The GEMM template's tile model: ``tiles()``, what each program reads, writes, waits for and notifies, tile by
tile, with numpy computes -- the simulator's and the tests' reference for what build() emits."""
from __future__ import annotations

import math

import numpy as np

from .. import Region, SlotNotify, SlotWait, TileStep, copies
from ..numerics import matmul, round_to
from . import epilogue as _epilogue
from .geometry import PyOps, _peer, _slots, geometry, program_tiles, stream_k_segments, sum_own_slot, tile_coords
from .record import _err, deferred_push, deferred_sum, gather_blocks, gather_copiers, gather_own_tiles


def tiles(record, *, rank: int, num_ranks: int, scalars: dict[str, int]) -> list[list[TileStep]]:
    # gemm.gather_waiters, looked up on the package per call as when gemm was one module: a replacement
    # of it (test_device_passes) reaches build() and tiles() alike
    from . import gather_waiters
    rec = record
    g = geometry(rec)
    bm, bn, m, n, k = rec["block_m"], rec["block_n"], rec["m"], rec["n"], rec["k"]
    S = rec["split_k"]
    out = []
    own_n = gather_own_tiles(rec) if "gather" in rec else 0
    for pid in range(g.grid):
        steps, counts = _gather_steps(rec, g, pid, rank, num_ranks) if "gather" in rec else ([], [])
        if counts and pid >= own_n:  # no own tile: the copies are counted at once
            steps[-1].notifies = counts
        for t, s in program_tiles(rec, pid):
            pid_m, pid_n = tile_coords(rec, t, rank)
            m0, n0 = pid_m * bm, pid_n * bn
            rows, cols = min(bm, m - m0), min(bn, n - n0)
            k0 = s * g.split_tiles * rec["block_k"]
            k1 = min(k, (s + 1) * g.split_tiles * rec["block_k"]) if S > 1 else k
            if t < own_n:  # gather: an own tile reads the shard itself and waits for nothing
                own_a = Region(rec["gather"]["arg"], (m0 - rank * rec["rows_per_rank"], k0), (rows, k1 - k0))
                b_reg = _b_region(rec, n0, cols, k0, k1)
                c_reg = Region("c", (m0, n0), (rows, cols))
                steps.append(TileStep(reads=[own_a, b_reg] + _epilogue.regions(rec, m0, n0, rows, cols, rank),
                                      writes=[c_reg],
                                      compute=_gemm_compute(own_a, b_reg, c_reg, [], rec, at=(m0, n0, rank)),
                                      notifies=counts if t + g.grid >= own_n else []))
                continue
            a_reg = Region("a", (m0, k0), (rows, k1 - k0))
            b_reg = _b_region(rec, n0, cols, k0, k1)
            c_reg = Region("c", (m0, n0), (rows, cols))
            at = (m0, n0, rank)  # the fused epilogue: on the tile's full K sum (the last split's)
            step = TileStep(reads=[a_reg, b_reg] + (_epilogue.regions(rec, m0, n0, rows, cols, rank)
                                                    if s == S - 1 else []))
            if "wait" in rec:
                w = rec["wait"]
                step.waits = [SlotWait(w["arg"], sl, int(scalars[w["value_arg"]])) for sl in _slots(m0, rows, w)]
                if "gather" in rec:  # each wait's signal consumed by the last of its waiters
                    step.notifies = [SlotNotify(w["arg"], rec["m"] // w["rows_per_slot"] + sl,
                                                gather_waiters(PyOps, rec, g, sl), op="arrive",
                                                consumes=(sl, int(scalars[w["value_arg"]])))
                                     for sl in _slots(m0, rows, w)]
            own = _own_rows(rec, m0, rank)
            if own is not None:
                ro = rec["reduce_own"]
                step.waits = [SlotWait(ro["arg"], sl, int(scalars[ro["value_arg"]])) for sl in _slots(m0, rows, ro)]
                if ro.get("from_peers"):
                    parts = [Region("c", (m0, n0), (rows, cols), (rank + j) % (ro["parts"] + 1))
                             for j in range(1, ro["parts"] + 1)]
                else:
                    parts = [Region(ro["src"], (j * rec["rows_per_rank"] + own, n0), (rows, cols))
                             for j in range(ro["parts"])]
                step.reads += parts
                dst = Region(ro["dst"], (m0 if ro["dst_rows"] == "global" else own, n0), (rows, cols))
                step.writes = [dst]
                step.compute = _gemm_compute(a_reg, b_reg, dst, parts, rec, at=at)
                if ro.get("done"):
                    step.notifies = [SlotNotify(ro["done"], sl, 1, rank, op="add") for sl in _slots(m0, rows, ro)]
                steps.append(step)
                continue
            if S == 1:
                step.writes = [c_reg]
                step.compute = _gemm_compute(a_reg, b_reg, c_reg, [], rec, at=at)
            elif s < S - 1:
                ws = Region("workspace", (s * m + m0, n0), (rows, cols))
                step.writes = [ws]
                step.compute = _gemm_compute(a_reg, b_reg, ws, [], rec, out_dtype="fp32")
                step.notifies = [SlotNotify("locks", t, 1, op="add")]
            else:
                parts = [Region("workspace", (j * m + m0, n0), (rows, cols)) for j in range(S - 1)]
                step.waits = [SlotWait("locks", t, S - 1)]
                step.reads += parts
                step.writes = [c_reg]
                step.compute = _gemm_compute(a_reg, b_reg, c_reg, parts, rec, at=at, after_parts=True)
                step.notifies = [SlotNotify("locks", t, 0, op="set")]
            if "push" in rec and s == S - 1:  # the tile's sum (split-K: the last split's) is pushed
                if rec["push"].get("sum"):
                    steps += _push_sum_steps(step, rec, pid_m * g.tiles_n + pid_n, m0, n0, rank, num_ranks, scalars)
                    continue
                if rec["push"].get("sum_own") and m0 // rec["rows_per_rank"] == rank:
                    steps += _push_own_sum_steps(step, rec, m0, n0, rows, cols, rank, num_ranks, scalars)
                    continue
                _push_model(step, rec, g, m0, n0, rows, cols, rank, num_ranks, scalars)
            if "notify" in rec:
                nt = rec["notify"]
                step.notifies = [SlotNotify(nt["arg"], sl, nt["value"], _peer(nt, sl, rank, num_ranks, rec, scalars),
                                            op="add") for sl in _slots(m0, rows, nt)]
            steps.append(step)
        steps += _stream_k_steps(rec, g, pid, rank, scalars)
        if deferred_push(rec) and steps:  # each tile's counts go out with the next tile (the last with its own);
            # an own tile's clears (push.sum_own) stay with it
            counts = [[nt for nt in st.notifies if nt.op != "clear"] for st in steps]
            for j, st in enumerate(steps):
                st.notifies = (counts[j - 1] if j else []) + [nt for nt in st.notifies if nt.op == "clear"] + \
                    (counts[j] if j == len(steps) - 1 else [])
        if rec.get("push", {}).get("sum_own"):
            steps = _join_quiet_k_loops(steps)
        if deferred_sum(rec):  # push 1, push 2 (with 1's sets), sum 1, push 3 (with 2's sets), sum 2, ..., after
            # the loop the last's sets (the IR's trace joins them to the step before), sum of the last
            pushes, sums = steps[0::2], steps[1::2]
            sets = [push.notifies for push in pushes]
            for j, push in enumerate(pushes):
                push.notifies = sets[j - 1] if j else []
            (sums[-2] if len(sums) > 1 else pushes[0]).notifies += sets[-1]
            steps = [st for j, push in enumerate(pushes) for st in ([push] + ([sums[j - 1]] if j else []))]
            steps += sums[-1:]
        out.append(steps)
    return out


def _b_region(rec, n0: int, cols: int, k0: int, k1: int) -> Region:
    """B's part for columns [n0, n0 + cols) and K elements [k0, k1) (B stored [N, K] when b_trans)."""
    return Region("b", (n0, k0), (cols, k1 - k0)) if rec["b_trans"] else Region("b", (k0, n0), (k1 - k0, cols))


def _stream_k_steps(rec, g, pid: int, rank: int, scalars) -> list[TileStep]:
    """Program pid's stream-K pieces (``stream_k_segments``): a trailing piece stores its fp32 partial to workspace
    slot pid and counts it in locks[pid]; an owned piece waits for its contributors' partials, adds them, stores C
    and clears their locks."""
    bm, bn, bk = rec["block_m"], rec["block_n"], rec["block_k"]
    steps = []
    for t, k0, k1, contributors in stream_k_segments(rec, pid):
        pid_m, pid_n = tile_coords(rec, t, rank)
        m0, n0 = pid_m * bm, pid_n * bn
        rows, cols = min(bm, rec["m"] - m0), min(bn, rec["n"] - n0)
        lo, hi = k0 * bk, min(rec["k"], k1 * bk)
        a_reg = Region("a", (m0, lo), (rows, hi - lo))
        b_reg = _b_region(rec, n0, cols, lo, hi)
        step = TileStep(reads=[a_reg, b_reg])
        if "wait" in rec:
            w = rec["wait"]
            step.waits = [SlotWait(w["arg"], sl, int(scalars[w["value_arg"]])) for sl in _slots(m0, rows, w)]
        if contributors is None:
            ws = Region("workspace", (pid * bm, 0), (bm, bn))
            step.writes = [ws]
            step.compute = _gemm_compute(a_reg, b_reg, Region("workspace", (pid * bm, 0), (rows, cols)), [], rec,
                                         out_dtype="fp32")
            step.notifies = [SlotNotify("locks", pid, 1, op="add")]
        else:
            parts = [Region("workspace", (q * bm, 0), (bm, bn)) for q in contributors]
            step.waits += [SlotWait("locks", q, 1) for q in contributors]
            step.reads += parts + _epilogue.regions(rec, m0, n0, rows, cols, rank)
            c_reg = Region("c", (m0, n0), (rows, cols))
            step.writes = [c_reg]
            step.compute = _gemm_compute(a_reg, b_reg, c_reg, [Region("workspace", (q * bm, 0), (rows, cols))
                                                               for q in contributors], rec, at=(m0, n0, rank),
                                         after_parts=True)
            step.notifies = [SlotNotify("locks", q, 0, op="set") for q in contributors]
        steps.append(step)
    return steps


def _gather_steps(rec, g, pid: int, rank: int, num_ranks: int) -> tuple[list[TileStep], list[SlotNotify]]:
    """Program pid's share of the gather: each of its blocks copied into A on every rank (peers first); and the
    count of them for slot ``rank`` of each rank's wait pad (none if it copies nothing; not the own rank's where
    the own tiles read the shard), which goes out after the copies or after the program's own tiles (``tiles``)."""
    (gm, gk), rpr, pad = rec["gather"]["block"], rec["rows_per_rank"], rec["wait"]["arg"]
    if (rank + 1) * rpr > rec["m"]:
        raise _err(f"'gather': rank {rank}'s rows [{rank * rpr}, {(rank + 1) * rpr}) are outside A's {rec['m']} "
                   f"rows ({num_ranks} ranks of {rpr})")
    order = [(rank + d) % num_ranks for d in range(1, num_ranks + 1)]
    kb = math.ceil(rec["k"] / gk)
    first = gather_copiers(rec)
    steps = []
    if pid >= first:
        for blk in range(pid - first, gather_blocks(rec), g.grid - first):
            r0, c0 = blk // kb * gm, blk % kb * gk
            size = (min(gm, rpr - r0), min(gk, rec["k"] - c0))
            src = Region(rec["gather"]["arg"], (r0, c0), size)
            dsts = [Region("a", (rank * rpr + r0, c0), size, rank=q) for q in order]
            steps.append(TileStep(reads=[src], writes=dsts, compute=copies(src, *dsts)))
    counted = order[:-1] if gather_own_tiles(rec) else order  # nothing waits on the own rows then
    return steps, [SlotNotify(pad, rank, len(steps), q, op="add") for q in counted] if steps else []


def _push_model(step: TileStep, rec, g, m0: int, n0: int, rows: int, cols: int, rank: int, num_ranks: int,
                scalars) -> None:
    """The push epilogue of a tile (record field ``push``): its C tile also written into each peer's inbox slab,
    then the peers' slots of its row block counted."""
    spec = rec["push"]
    if spec["slabs"] != num_ranks - 1:
        raise _err(f"'push' has {spec['slabs']} inbox slabs; a world of {num_ranks} ranks needs {num_ranks - 1}")
    if spec.get("owner"):
        rpr = rec["rows_per_rank"]
        q, row = divmod(m0, rpr)
        if q == rank:
            dst = Region("c", (row, n0), (rows, cols))
        else:
            slab = num_ranks - 1 - (q - rank) % num_ranks
            dst = Region(spec["arg"], (slab * rpr + row, n0), (rows, cols), q)
            if spec.get("sum_own"):
                slot = sum_own_slot(PyOps, rec, g, slab, row // rec["block_m"], n0 // rec["block_n"])
                step.notifies = [SlotNotify(spec["pad"], slot, int(scalars[spec["value_arg"]]), q, op="set")]
            else:
                step.notifies = [SlotNotify(spec["pad"], slab * (rpr // rec["block_m"]) + row // rec["block_m"], 1,
                                            q, op="add")]
        step.writes = [dst]
        step.compute = _gemm_compute(step.reads[0], step.reads[1], dst, [], rec, at=(m0, n0, rank))
        return
    peers = [((rank + i) % num_ranks, num_ranks - 1 - i) for i in range(1, num_ranks)]
    boxes = [Region(spec["arg"], (slab * rec["m"] + m0, n0), (rows, cols), q) for q, slab in peers]
    c_reg, compute, to_boxes = step.writes[0], step.compute, copies(step.writes[0], *boxes)

    def with_copies(view):
        compute(view)
        to_boxes(view)

    step.writes = [c_reg] + boxes
    step.compute = with_copies
    step.notifies = list(step.notifies) + [SlotNotify(spec["pad"], slab * g.tiles_m + m0 // rec["block_m"], 1, q,
                                                      op="add") for q, slab in peers]


def _push_sum_steps(step: TileStep, rec, t: int, m0: int, n0: int, rank: int, num_ranks: int,
                    scalars) -> list[TileStep]:
    """'push.sum' for tile t (``step``: the tile as a plain GEMM computes and stores it, split-K's last split
    included), as the IR runs it: (1) the tile (rounded) stored into every peer's inbox slab instead of c and the
    peer's slot t * slabs + slab set; (2) after waiting for the own slots, the own tile plus the inbox tiles stored
    to c and the slots cleared."""
    spec = rec["push"]
    slabs, value = spec["slabs"], int(scalars[spec["value_arg"]])
    if slabs != num_ranks - 1:
        raise _err(f"'push' has {slabs} inbox slabs; a world of {num_ranks} ranks needs {num_ranks - 1}")
    c_reg, gemm = step.writes[0], step.compute
    rows, cols = c_reg.sizes
    peers = [((rank + i) % num_ranks, num_ranks - 1 - i) for i in range(1, num_ranks)]
    boxes = [Region(spec["arg"], (slab * rec["m"] + m0, n0), (rows, cols), q) for q, slab in peers]
    inbox = [Region(spec["arg"], (j * rec["m"] + m0, n0), (rows, cols)) for j in range(slabs)]
    own: dict[str, np.ndarray] = {}
    deferred = deferred_sum(rec)  # the own part waits in c (rounded) for the sum after the next tile

    def push(view):
        own["tile"] = np.zeros((rows, cols), np.float32)
        gemm(lambda region: own["tile"] if region == c_reg else view(region))  # the tile, not into c
        for box in boxes:
            view(box)[...] = own["tile"]
        if deferred:
            view(c_reg)[...] = round_to(rec["out_dtype"], own["tile"])

    def total(view):
        acc = np.asarray(view(c_reg) if deferred else own["tile"], np.float32)
        for box in inbox:
            acc = acc + np.asarray(view(box), np.float32)
        view(c_reg)[...] = round_to(rec["out_dtype"], acc)

    return [TileStep(waits=step.waits, reads=step.reads, writes=boxes + ([c_reg] if deferred else []), compute=push,
                     notifies=step.notifies + [SlotNotify(spec["pad"], t * slabs + slab, value, q, op="set")
                                               for q, slab in peers]),
            TileStep(waits=[SlotWait(spec["pad"], t * slabs + j, value) for j in range(slabs)],
                     reads=inbox + ([c_reg] if deferred else []), writes=[c_reg], compute=total,
                     notifies=[SlotNotify(spec["pad"], t * slabs + j, value, rank, op="clear") for j in range(slabs)])]


def _push_own_sum_steps(step: TileStep, rec, m0: int, n0: int, rows: int, cols: int, rank: int, num_ranks: int,
                        scalars) -> list[TileStep]:
    """'push.sum_own' for an own tile (``step``: its A and B reads), as the IR runs it: (1) the K loop (a deferred
    count of the program's previous tile goes out after it); (2) once the tile's slot of every slab holds the
    value, the accumulator plus the slabs' inbox tiles stored into c at the row within the shard, and the slots
    cleared."""
    spec, rpr = rec["push"], rec["rows_per_rank"]
    if spec["slabs"] != num_ranks - 1:
        raise _err(f"'push' has {spec['slabs']} inbox slabs; a world of {num_ranks} ranks needs {num_ranks - 1}")
    row = m0 - rank * rpr
    a_reg, b_reg = step.reads[:2]
    acc: dict[str, np.ndarray] = {}

    def k_loop(view):
        a, b = np.asarray(view(a_reg), np.float32), np.asarray(view(b_reg), np.float32)
        acc["tile"] = _epilogue.apply(rec, matmul(a, b.T if rec["b_trans"] else b), view, m0, n0, rank)

    parts = [Region(spec["arg"], (j * rpr + row, n0), (rows, cols)) for j in range(spec["slabs"])]
    c_reg = Region("c", (row, n0), (rows, cols))

    def total(view):
        t = acc["tile"]
        for p in parts:  # in slab order, as the IR adds them
            t = t + np.asarray(view(p), np.float32)
        view(c_reg)[...] = round_to(rec["out_dtype"], t)

    g = geometry(rec)
    value = int(scalars[spec["value_arg"]])
    slots = [sum_own_slot(PyOps, rec, g, j, row // rec["block_m"], n0 // rec["block_n"]) for j in range(spec["slabs"])]
    return [TileStep(reads=step.reads, compute=k_loop),
            TileStep(waits=[SlotWait(spec["pad"], sl, value) for sl in slots], reads=parts, writes=[c_reg],
                     compute=total, notifies=[SlotNotify(spec["pad"], sl, value, rank, op="clear") for sl in slots])]


def _join_quiet_k_loops(steps: list[TileStep]) -> list[TileStep]:
    """An own tile of 'push.sum_own' is one step, as the IR's trace shows it, unless a count went out between its K
    loop and its wait (a deferred count of the program's previous tile)."""
    out: list[TileStep] = []
    for st in steps:
        prev = out[-1] if out else None
        if prev is not None and st.waits and not (prev.writes or prev.waits or prev.notifies):
            loop, total = prev.compute, st.compute

            def both(view, loop=loop, total=total):
                loop(view)
                total(view)

            out[-1] = TileStep(waits=st.waits, reads=prev.reads + st.reads, writes=st.writes, compute=both,
                               notifies=st.notifies)
        else:
            out.append(st)
    return out


def _own_rows(rec, m0: int, rank: int) -> int | None:
    """With reduce_own: the row within the rank's shard where a tile at row m0 starts, if the rank owns it."""
    if "reduce_own" not in rec:
        return None
    own = m0 - rank * rec["rows_per_rank"]
    return own if 0 <= own < rec["rows_per_rank"] else None


def _gemm_compute(a_reg, b_reg, c_reg, parts, rec, out_dtype=None, at=None, after_parts=False):
    """The tile's product (plus ``parts``) into c_reg. ``at`` = (m0, n0, rank): the tile's fused epilogue on it,
    before the parts are added (the peers' partials) or, ``after_parts``, after (split-K's, stream-K's)."""
    out_dtype = out_dtype or rec["out_dtype"]

    def compute(view):
        a = np.asarray(view(a_reg), dtype=np.float32)
        b = np.asarray(view(b_reg), dtype=np.float32)
        acc = matmul(a, b.T if rec["b_trans"] else b)
        if at is not None and not after_parts:
            acc = _epilogue.apply(rec, acc, view, *at)
        for p in parts:
            acc = acc + np.asarray(view(p), dtype=np.float32)
        if at is not None and after_parts:
            acc = _epilogue.apply(rec, acc, view, *at)
        view(c_reg)[...] = round_to(out_dtype, acc)

    return compute

