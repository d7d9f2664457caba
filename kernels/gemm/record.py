"""The GEMM template's record: ``make_record`` (defaults, then ``check``), its argument names, its scratch
buffers, and the predicates the tile model and the emitter share (deferred pushes and sums, the gather's own tiles
and copiers, the offsets' width)."""
from __future__ import annotations

import math

from ...backends.facts import target_facts
from ...dialects import ttir as T
from ...errors import VerificationError
from .. import KernelRecord, check_i32
from .. import offset_type as _offset_type
from . import epilogue as _epilogue
from .configs import choose_config, fp8_dots, programs_per_sm
from .geometry import TILE_ORDER_FNS, _rank_shift, geometry

name = "gemm"

IN_DTYPES = ("bf16", "fp16", "fp8e4m3", "fp8e5m2")
OUT_DTYPES = ("bf16", "fp16", "fp32")

CONFIG_FIELDS = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages", "persistent", "num_sms",
                 "loads", "store", "epilogue_split", "flatten", "split_k", "stream_k", "m_split", "warp_specialize",
                 "programs_per_sm")


def _err(message: str) -> VerificationError:
    return VerificationError(f"gemm template: {message}")


def _pow2(x: int) -> bool:
    return isinstance(x, int) and x > 0 and x & (x - 1) == 0


# ------------------------------------------------------------------------------------------------ the record

def make_record(m: int, n: int, k: int, *, name: str = "gemm", in_dtype: str = "bf16", out_dtype: str | None = None,
                b_trans: bool = False, lda: int | None = None, ldb: int | None = None, ldc: int | None = None,
                tile_order: str = "grouped", rows_per_rank: int = 0, rank_shift: int = 0, wait: dict | None = None,
                notify: dict | None = None, reduce_own: dict | None = None, push: dict | None = None,
                gather: dict | None = None, epilogue: list | None = None, target: str = "cuda:90",
                fast_accum: bool = False, **config) -> KernelRecord:
    """A checked GEMM record. Tuning fields not given come from ``choose_config(m, n, k, in_dtype, target)``;
    ``epilogue``: the fused pointwise steps (kernels/gemm/epilogue.py); ``fast_accum`` (fp8 only):
    torch._scaled_mm's use_fast_accum (see the package docstring)."""
    out_dtype = out_dtype or ("bf16" if in_dtype.startswith("fp8") else in_dtype)
    unknown = set(config) - set(CONFIG_FIELDS)
    if unknown:
        raise _err(f"unknown field(s) {sorted(unknown)}; known tuning fields: {', '.join(CONFIG_FIELDS)}")
    if in_dtype.startswith("fp8") and not target_facts(target).fp8:
        raise _err(f"in_dtype '{in_dtype}' needs tensor cores that take fp8 operands, which {target} does not have "
                   "(fp8 GEMMs need cuda:90 or hip:gfx950; use bf16 or fp16 here)")
    chosen = choose_config(m, n, k, in_dtype, target, b_trans=b_trans, lda=lda, ldb=ldb, ldc=ldc,
                           out_dtype=out_dtype, fused=bool(wait or notify or reduce_own or push),
                           num_sms=config.get("num_sms"), pushes=bool(push), fast_accum=fast_accum,
                           epilogue_bytes=max([T.DTYPE_BYTES[s["dtype"]] for s in epilogue or ()
                                               if s.get("operand") == "full"], default=0))
    if any(f in config for f in ("block_m", "block_n", "num_warps", "num_stages")):
        for f in ("m_split", "programs_per_sm"):  # the default's belong to the default's tile, not to the one given
            if f not in config:
                chosen.pop(f, None)
    chosen.update(config)
    if "m_split" not in config and in_dtype.startswith("fp8") and not fast_accum and chosen.get("loads") == "tma" \
            and fp8_dots(chosen["block_m"], chosen["num_warps"]) == 2:
        # a precise fp8 tile of two 64-row wgmma blocks per warpgroup (ditron-tile's 256x128 on 8 warps) runs as
        # two dots sharing B's tile, or its accumulators spill (configs.fp8_tile_fits)
        chosen["m_split"] = 2
    fused = bool(wait or notify or reduce_own or push or gather)
    if "programs_per_sm" not in config and "programs_per_sm" not in chosen and chosen["persistent"] and not fused \
            and chosen.get("split_k", 1) == 1 and not chosen.get("stream_k") and chosen["loads"] == "tma":
        # a precise fp8 tile on one warp group shares its SM with a second program (configs.programs_per_sm)
        pps = programs_per_sm(chosen["block_m"], chosen["block_n"], chosen["block_k"], chosen["num_warps"],
                              chosen["num_stages"], in_dtype, out_dtype, chosen["store"],
                              chosen["epilogue_split"], fast_accum, target)
        if pps > 1:
            chosen["programs_per_sm"] = pps
    if fused and "programs_per_sm" not in config:
        chosen.pop("programs_per_sm", None)  # a program that waits or pushes per tile keeps its SM (check)
    if gather and "loads" not in config:
        chosen["loads"] = "pointer"  # the gathered rows are SM stores (check_gather)
    rec = KernelRecord(template="gemm", name=name, m=m, n=n, k=k, lda=lda or k, ldb=ldb or (k if b_trans else n),
                       ldc=ldc or n, in_dtype=in_dtype, out_dtype=out_dtype, b_trans=b_trans, tile_order=tile_order,
                       rows_per_rank=rows_per_rank, **chosen)
    if rank_shift:
        rec["rank_shift"] = rank_shift
    if fast_accum:
        rec["fast_accum"] = True
    if wait:
        rec["wait"] = {"value_arg": "wait_value", "scope": "sys", **wait}
    if notify:
        rec["notify"] = {"peer": "rank", "value": 1, "scope": "sys", **notify}
    if reduce_own:
        rec["reduce_own"] = {"value_arg": "own_value", "src": "stage", "dst": "out", "dst_rows": "shard",
                             "scope": "sys", **reduce_own}
        if rec["reduce_own"].get("from_peers"):
            rec["reduce_own"].pop("src")
    if push:
        rec["push"] = {"scope": "sys", **push}
    if gather:
        rec["gather"] = {"block": [16, 256], "own_first": True, **gather}
    if epilogue:
        rec["epilogue"] = [dict(step) for step in epilogue]
    rec["args"] = _arg_names(rec)
    check(rec)
    return rec


def _arg_names(rec) -> list[str]:
    args = ["a", "b", "c"]
    if "wait" in rec:
        args += [rec["wait"]["arg"], rec["wait"]["value_arg"]]
    if "gather" in rec:
        args.append(rec["gather"]["arg"])
    if "notify" in rec:
        if rec["notify"]["arg"] not in args:
            args.append(rec["notify"]["arg"])
        peer = rec["notify"]["peer"]
        if peer.startswith("arg:") and peer[4:] not in args:
            args.append(peer[4:])
    if "reduce_own" in rec:
        spec = rec["reduce_own"]
        args += [a for a in (spec["arg"], spec["value_arg"], spec.get("src"), spec["dst"], spec.get("done"))
                 if a is not None and a not in args]
    if "push" in rec:
        args += [a for a in (rec["push"].get("arg"), rec["push"].get("pad"), rec["push"].get("value_arg"))
                 if a is not None and a not in args]
    args += _epilogue.arg_names(rec)
    if rec.get("split_k", 1) > 1 or rec.get("stream_k", 0):
        args += ["workspace", "locks"]
    return args


def scratch(rec) -> dict[str, tuple[list[int], str]] | None:
    """The kernel-private buffers of a split-K or stream-K GEMM: name -> (shape, dtype), or None. ``locks`` must be
    zero before the first launch (every launch leaves them zero)."""
    if rec.get("stream_k", 0):
        grid_ = geometry(rec).grid
        return {"workspace": ([grid_ * rec["block_m"], rec["block_n"]], "fp32"), "locks": ([grid_], "i32")}
    if rec.get("split_k", 1) > 1:
        return {"workspace": ([(rec["split_k"] - 1) * rec["m"], rec["n"]], "fp32"),
                "locks": ([geometry(rec).tiles], "i32")}
    return None


# Triton's "no promotion" value of maxNumImpreciseAcc (its own default for fp8 dots on sm_90)
FAST_ACCUM_K = 1 << 30


def imprecise_acc(rec) -> int | None:
    """The K elements an fp8 GEMM's tensor cores accumulate in their reduced precision before each add into the
    fp32 accumulator (tt.dot's maxNumImpreciseAcc): one K step (BLOCK_K: 128, cuBLAS's promotion interval of four
    k32 wgmmas) unless ``fast_accum``; None for 16-bit inputs (always fp32)."""
    if not rec["in_dtype"].startswith("fp8"):
        return None
    return FAST_ACCUM_K if rec.get("fast_accum") else rec["block_k"]


def check(rec) -> None:
    """Raise VerificationError naming the field if the record cannot be built."""
    for key in ("m", "n", "k", "lda", "ldb", "ldc", "block_m", "block_n", "block_k", "group_m", "num_sms",
                "split_k", "epilogue_split"):
        if not isinstance(rec.get(key), int) or rec[key] < 1:
            raise _err(f"field '{key}' must be a positive integer, got {rec.get(key)!r}")
    if rec["in_dtype"] not in IN_DTYPES:
        raise _err(f"in_dtype '{rec['in_dtype']}' is not supported; use one of {', '.join(IN_DTYPES)}")
    if rec.get("fast_accum") and not rec["in_dtype"].startswith("fp8"):
        raise _err(f"fast_accum is an fp8 accumulation mode; in_dtype '{rec['in_dtype']}' accumulates in fp32")
    if rec["out_dtype"] not in OUT_DTYPES:
        raise _err(f"out_dtype '{rec['out_dtype']}' is not supported; use one of {', '.join(OUT_DTYPES)}")
    for key in ("block_m", "block_n", "block_k"):
        if not _pow2(rec[key]) or rec[key] < 16:
            raise _err(f"{key}={rec[key]} must be a power of two >= 16")
    if rec["lda"] < rec["k"] or rec["ldc"] < rec["n"] or rec["ldb"] < (rec["k"] if rec["b_trans"] else rec["n"]):
        raise _err("a leading dimension (lda/ldb/ldc) is smaller than the row it strides over")
    if rec["tile_order"] not in TILE_ORDER_FNS:
        raise _err(f"tile_order '{rec['tile_order']}' is unknown; use one of {', '.join(TILE_ORDER_FNS)}")
    if rec["tile_order"] == "rank_rotated" and rec.get("rows_per_rank", 0) < 1:
        raise _err("tile_order 'rank_rotated' needs rows_per_rank >= 1 (the rows each rank owns)")
    if rec["loads"] not in ("tma", "pointer") or rec["store"] not in ("tma", "pointer"):
        raise _err("loads and store must each be 'tma' or 'pointer'")
    if rec["store"] == "tma" and "notify" in rec:
        raise _err("store='tma' cannot be followed by a notify (TMA stores complete asynchronously); use "
                   "store='pointer'")
    if rec["epilogue_split"] not in (1, 2) or (rec["epilogue_split"] == 2 and rec["store"] != "tma"):
        raise _err("epilogue_split must be 1, or 2 with store='tma'")
    if rec.get("m_split", 1) not in (1, 2) or (rec.get("m_split", 1) == 2 and rec["loads"] != "tma"):
        raise _err(f"m_split must be 1, or 2 with loads='tma' (got {rec.get('m_split')!r}, loads={rec['loads']!r})")
    pps = rec.get("programs_per_sm", 1)
    if pps not in (1, 2) or pps == 2 and (not rec["persistent"] or rec["split_k"] > 1 or rec.get("stream_k", 0)
                                          or any(p in rec for p in ("wait", "notify", "reduce_own", "push",
                                                                    "gather"))):
        raise _err(f"programs_per_sm must be 1, or 2 (a persistent grid of 2 x num_sms programs) without split-K, "
                   f"stream-K, wait, notify, reduce_own, push or gather (got {pps!r})")
    if rec.get("warp_specialize") and (rec["num_warps"] != 4 or rec["loads"] != "tma" or rec["flatten"]
                                       or rec["split_k"] > 1):
        raise _err("warp_specialize (Triton's Hopper producer / consumer warp groups on the K loop) needs num_warps=4 "
                   f"(the consumer group's; Triton adds a producer and a second consumer), loads='tma', an "
                   f"unflattened tile loop and no split-K (num_warps={rec['num_warps']}, loads={rec['loads']!r}, "
                   f"flatten={rec['flatten']}, split_k={rec['split_k']})")
    in_bytes = T.DTYPE_BYTES[rec["in_dtype"]]
    if rec["loads"] == "tma" and (rec["lda"] * in_bytes % 16 or rec["ldb"] * in_bytes % 16):
        raise _err(f"loads='tma' needs 16-byte aligned rows (lda={rec['lda']}, ldb={rec['ldb']} of "
                   f"{rec['in_dtype']}); use loads='pointer'")
    if rec["store"] == "tma" and rec["ldc"] * T.DTYPE_BYTES[rec["out_dtype"]] % 16:
        raise _err(f"store='tma' needs 16-byte aligned rows of C (ldc={rec['ldc']}); use store='pointer'")
    for part in ("wait", "notify", "reduce_own"):
        if part in rec:
            spec = rec[part]
            if not isinstance(spec.get("arg"), str) or not isinstance(spec.get("rows_per_slot"), int) \
                    or spec["rows_per_slot"] < 1:
                raise _err(f"'{part}' needs 'arg' (the signal pad argument) and 'rows_per_slot' >= 1")
            if spec.get("scope", "sys") not in ("gpu", "sys"):
                raise _err(f"{part}.scope must be 'gpu' or 'sys'")
    if "notify" in rec:
        peer = rec["notify"]["peer"]
        if not (peer == "rank" or peer == "slot_owner" or peer.startswith("arg:") or _rank_shift(peer) is not None):
            raise _err(f"notify.peer '{peer}' is not one of 'rank', 'rank+<d>', 'arg:<name>', 'slot_owner'")
        if peer == "slot_owner" and (rec.get("rows_per_rank", 0) < 1
                                     or rec["rows_per_rank"] % rec["notify"]["rows_per_slot"]):
            raise _err("notify.peer 'slot_owner' needs rows_per_rank, a multiple of notify.rows_per_slot")
    if "reduce_own" in rec:
        _check_reduce_own(rec)
    if "push" in rec:
        spec = rec["push"]
        if not isinstance(spec.get("arg"), str) or not isinstance(spec.get("pad"), str) or \
                not isinstance(spec.get("slabs"), int) or isinstance(spec["slabs"], bool) or spec["slabs"] < 1:
            raise _err("'push' needs 'arg' (the inbox), 'pad' and 'slabs' (num_ranks - 1 >= 1)")
        if "notify" in rec or "reduce_own" in rec or rec["store"] != "pointer":
            raise _err("'push' works without notify and reduce_own, with store='pointer' (its release follows the "
                       "tile's stores)")
        if spec.get("sum") and (spec.get("owner") or not isinstance(spec.get("value_arg"), str)):
            raise _err("'push.sum' needs 'value_arg' (the value its slots are set to) and no owner")
        if spec.get("sum_own") and (not spec.get("owner") or not isinstance(spec.get("value_arg"), str)):
            raise _err("'push.sum_own' needs 'owner' and 'value_arg' (the count its slots reach)")
        if spec.get("owner"):
            rpr = rec.get("rows_per_rank", 0)
            if rpr < 1 or rpr % rec["block_m"] or rec["m"] != (spec["slabs"] + 1) * rpr or rec["split_k"] > 1:
                raise _err(f"'push.owner' needs m = (slabs + 1) * rows_per_rank with block_m dividing rows_per_rank, "
                           f"and no split-K (m={rec['m']}, slabs={spec['slabs']}, rows_per_rank={rpr}, block_m="
                           f"{rec['block_m']}, split_k={rec['split_k']})")
    g = geometry(rec)
    if rec.get("push", {}).get("sum_own") and not push_sum_own_resident(rec):
        rpr, bm = rec["rows_per_rank"], rec["block_m"]
        if rec["tile_order"] != "rank_rotated" or rec.get("rank_shift", 0) != 1 or (rpr // bm) % rec["group_m"]:
            raise _err(f"'push.sum_own' with {g.tiles} tiles > num_sms={rec['num_sms']} needs the own rows' tiles "
                       f"last: tile_order 'rank_rotated', rank_shift 1 and group_m dividing rows_per_rank / block_m "
                       f"= {rpr // bm}")
    if "gather" in rec:
        _check_gather(rec, g)
    if rec.get("push", {}).get("sum") and g.grid > rec["num_sms"]:
        raise _err(f"'push.sum' needs every program resident (a tile waits for the peers' same tile): {g.grid} "
                   f"programs > num_sms={rec['num_sms']}; use persistent")
    if rec["split_k"] > 1:
        if rec["persistent"] or "wait" in rec or "notify" in rec or "reduce_own" in rec:
            raise _err("split_k > 1 works with non-persistent kernels without wait/notify only")
        if g.grid > rec["num_sms"]:
            raise _err(f"split_k={rec['split_k']} gives {g.grid} programs > num_sms={rec['num_sms']}: the last "
                       "split spins on the others, so every program must be resident; lower split_k or use "
                       "larger tiles")
        if g.split_tiles * (rec["split_k"] - 1) >= g.k_tiles:
            raise _err(f"split_k={rec['split_k']} leaves an empty K slice ({g.k_tiles} K tiles of "
                       f"{rec['block_k']}); lower split_k")
    if rec.get("stream_k", 0):
        _check_stream_k(rec, g)
    _check_counts(rec, g)
    _epilogue.check(rec)
    if len(set(rec["args"])) != len(rec["args"]):
        raise _err(f"argument names collide: {rec['args']}")


def _check_stream_k(rec, g) -> None:
    sk = rec["stream_k"]
    if not isinstance(sk, int) or isinstance(sk, bool) or sk < 0 or sk > g.tiles:
        raise _err(f"stream_k={sk!r} must be a number of tiles in [0, {g.tiles}]")
    if not rec["persistent"] or rec["split_k"] > 1 or rec["flatten"] or "notify" in rec or "reduce_own" in rec \
            or "push" in rec:
        raise _err("stream_k works with persistent, unflattened kernels without split-K, notify, reduce_own and push")
    if (g.tiles - sk) % g.grid:
        raise _err(f"stream_k={sk} leaves {g.tiles - sk} data-parallel tiles, not a multiple of the {g.grid} programs")
    if sk * g.k_tiles < g.grid:
        raise _err(f"stream_k={sk} tiles of {g.k_tiles} K steps give fewer K steps than the {g.grid} programs")
    if g.grid * sk * g.k_tiles >= 2 ** 31:
        raise _err(f"stream_k={sk}: {g.grid} programs x {sk * g.k_tiles} K steps overflow the kernel's i32 ranges")


def _check_gather(rec, g) -> None:
    spec, rpr = rec["gather"], rec.get("rows_per_rank", 0)
    block = spec.get("block")
    if not isinstance(spec.get("arg"), str) or not isinstance(block, list) or len(block) != 2 or \
            not all(_pow2(b) for b in block):
        raise _err("'gather' needs 'arg' (this rank's shard) and 'block' ([rows, cols], powers of two)")
    if "wait" not in rec or rpr < 1 or rec["wait"]["rows_per_slot"] != rpr or rec["m"] % rpr:
        raise _err("'gather' counts each rank's shard in one slot of the 'wait' pad: it needs wait.rows_per_slot "
                   "= rows_per_rank, a divisor of m")
    if "notify" in rec or "reduce_own" in rec or "push" in rec or rec["split_k"] > 1 or rec.get("stream_k", 0):
        raise _err("'gather' works without notify, reduce_own, push, split-K and stream-K")
    if rec["loads"] != "pointer":
        raise _err("'gather' needs loads='pointer' (a TMA load of rows that SMs stored needs a proxy fence)")
    if g.grid > rec["num_sms"]:
        raise _err(f"'gather' needs every program resident (the tiles wait on every program's copies): "
                   f"{g.grid} programs > num_sms={rec['num_sms']}; use persistent")


def push_sum_own_resident(rec) -> bool:
    """'push.sum_own': every tile has a resident program of its own, so an own tile's wait holds up no other tile
    and the tiles may come in any order; else the own tiles must come last in every program."""
    return geometry(rec).tiles <= rec["num_sms"]


def deferred_push(rec) -> bool:
    """A persistent GEMM that pushes counts each tile after the next tile's K loop (the last after its loop): the
    release then finds the tile's stores long out instead of stalling the SM on them while they cross the link."""
    return "push" in rec and rec["persistent"] and not rec["push"].get("sum")


def deferred_sum(rec) -> bool:
    """'push.sum' on persistent programs beyond one wave: each tile's slots are set on the peers after the next
    tile's K loop, and its sum follows that tile's push (the last tile's both after the loop) -- the tile's own
    part, rounded, waits in c -- so a program never stalls between two K loops, neither on the release of its
    tile's stores nor on the peers' copies of it, which cross the link meanwhile."""
    if not rec.get("push", {}).get("sum") or not rec["persistent"]:
        return False
    g = geometry(rec)
    return g.tiles > g.grid


def gather_own_tiles(rec) -> int:
    """'gather': how many tiles lead the order with rows of the launching rank's shard alone (read from the shard,
    no wait): every tile of its rows when the order is rank_rotated (rank_shift 0), block_m divides rows_per_rank
    and group_m divides rows_per_rank / block_m (and not into stream-K's tiles); else, or without gather.own_first,
    0."""
    rpr, bm = rec["rows_per_rank"], rec["block_m"]
    if rec["tile_order"] != "rank_rotated" or rec.get("rank_shift", 0) or rpr % bm or (rpr // bm) % rec["group_m"] \
            or not rec["gather"].get("own_first", True):
        return 0
    g = geometry(rec)
    return min(rpr // bm * g.tiles_n, g.tiles - rec.get("stream_k", 0))


def gather_copiers(rec) -> int:
    """'gather': the first copier program (programs first..grid-1 copy): the first program without an own tile when
    some program has none, else 0."""
    own, grid_ = gather_own_tiles(rec), geometry(rec).grid
    return own if 0 < own < grid_ else 0


def gather_waiters(o, rec, g, slot):
    """'gather': how many tiles of a launch wait on slot ``slot`` of the wait pad (rows [slot * R, (slot + 1) * R),
    R = rows_per_rank): the row blocks covering those rows, tiles_n tiles each (on ints or IR values, ``o``)."""
    rpr, bm = rec["rows_per_rank"], rec["block_m"]
    first = o.div(o.mul(slot, rpr), bm)
    last = o.div(o.sub(o.mul(o.add(slot, 1), rpr), 1), bm)
    return o.mul(o.add(o.sub(last, first), 1), g.tiles_n)


def gather_blocks(rec) -> int:
    """The blocks of a shard that a 'gather' copies (and counts in its slot) per call."""
    (bm, bk), rpr = rec["gather"]["block"], rec["rows_per_rank"]
    return math.ceil(rpr / bm) * math.ceil(rec["k"] / bk)


def _check_reduce_own(rec) -> None:
    spec, rpr, bm = rec["reduce_own"], rec.get("rows_per_rank", 0), rec["block_m"]
    parts = spec.get("parts")
    if not isinstance(parts, int) or parts < 1:
        raise _err("reduce_own.parts must be the number of peers (>= 1)")
    if rpr < 1 or rpr % bm or rec["m"] != (parts + 1) * rpr:
        raise _err(f"reduce_own needs m = (parts + 1) * rows_per_rank with block_m dividing rows_per_rank (m="
                   f"{rec['m']}, parts={parts}, rows_per_rank={rpr}, block_m={bm})")
    if rpr % spec["rows_per_slot"]:
        raise _err("reduce_own.rows_per_slot must divide rows_per_rank")
    if spec.get("dst_rows", "shard") not in ("shard", "global"):
        raise _err(f"reduce_own.dst_rows '{spec.get('dst_rows')}' is not 'shard' or 'global'")
    if "wait" in rec or rec["store"] != "pointer" or rec["b_trans"]:
        raise _err("reduce_own works without 'wait', with store='pointer' and B not transposed")
    if rec["tile_order"] != "rank_rotated" or rec.get("rank_shift", 0) != 1 or (rpr // bm) % rec["group_m"]:
        raise _err("reduce_own needs the own rows' tiles last: tile_order 'rank_rotated', rank_shift 1 and group_m "
                   f"dividing rows_per_rank / block_m = {rpr // bm}")


def offset_type(rec) -> str:
    """The width of the kernel's element offsets: i64 where one can pass 2**31 -- A's, B's (and B's K step) and
    C's, split-K's and stream-K's workspace, a push inbox of slabs of m rows -- else i32 (ordinary sizes)."""
    m, n, k, g = rec["m"], rec["n"], rec["k"], geometry(rec)
    largest = max(m * rec["lda"], (n if rec["b_trans"] else max(k, rec["block_k"])) * rec["ldb"], m * rec["ldc"],
                  rec["split_k"] * m * n, g.grid * rec["block_m"] * rec["block_n"],
                  rec["push"]["slabs"] * m * n if "push" in rec else 0)
    return _offset_type(name, largest, max(T.DTYPE_BYTES[rec["in_dtype"]], T.DTYPE_BYTES[rec["out_dtype"]], 4))


def _check_counts(rec, g) -> None:
    """The kernel's tile, slot and block indices are i32; a loop's induction variable reaches its bound plus a
    step (the grid)."""
    check_i32(name, f"tiles ({g.tiles} of {rec['block_m']}x{rec['block_n']}, x {rec['split_k']} K splits, plus a "
                    "grid)", g.tiles * rec["split_k"] + g.grid)
    if "push" in rec:
        check_i32(name, f"push slots ({rec['push']['slabs']} slabs x {g.tiles} tiles)", rec["push"]["slabs"] * g.tiles)
    if "gather" in rec:
        check_i32(name, f"gather counts (two calls' {gather_blocks(rec)} blocks in a slot, plus a grid)",
                  2 * gather_blocks(rec) + g.grid)
    offset_type(rec)
