"""Tiled GEMM template: ``C[M,N] = A[M,K] @ B[K,N]`` (or ``A @ B^T`` with B stored ``[N,K]``), fp32 accumulation.

Record fields (``make_record`` fills defaults and checks them; ``choose_config`` picks the tuning fields):

    m, n, k                 problem size (static)
    lda, ldb, ldc           row strides in elements (default: contiguous; ldb is K when b_trans)
    in_dtype, out_dtype     'bf16' | 'fp16' | 'fp8e4m3' inputs; 'bf16' | 'fp16' | 'fp32' output
    b_trans                 B given as [N, K] row-major
    block_m/n/k, group_m    tile shape; GROUP_M swizzle height
    num_warps, num_stages   compile options the config was chosen with
    persistent, num_sms     grid = min(num_sms, tiles) programs looping over tiles (else one program per tile)
    loads                   'tma' (device-side tensor descriptors, sm_90) | 'pointer' (masked tt.load; any GPU)
    store                   'tma' | 'pointer'; notify needs 'pointer' (a TMA store is asynchronous)
    epilogue_split          1 | 2: store the C tile in two column halves (less shared memory, a 4th stage fits)
    flatten                 let Triton flatten the persistent tile loop with the K loop (tt.flatten)
    split_k                 S > 1: S programs per tile over K slices (see below)
    stream_k                T > 0: the last T tiles of the order are shared out by K steps (stream-K, see below);
                            absent or 0: none
    max_imprecise_acc       fp8 only: K elements the tensor cores may accumulate in their reduced precision
                            before adding into the fp32 accumulator (default block_k: fp32 accumulation per K
                            step; 2**30 is Triton's fast default)
    tile_order              'row_major' | 'grouped' | 'rank_rotated' (+ rows_per_rank, rank_shift)
    wait    (optional)      {arg, value_arg, rows_per_slot, scope}: before a tile's A loads, wait until every
                            slot of signal pad ``arg`` covering the tile's rows [m0, m0+BM) is >= the scalar
                            argument ``value_arg`` (ditron_core.wait per slot, then consume_token on A)
    notify  (optional)      {arg, rows_per_slot, peer, value, scope}: after a tile's store, add ``value`` to each
                            slot of ``arg`` covering its rows, on rank ``peer``: 'rank' (own), 'rank+<d>'
                            ((rank+d) mod num_ranks), 'arg:<name>' (an i32 argument) or 'slot_owner'
                            (slot*rows_per_slot // rows_per_rank). Counts per slot: ``notify_count``.
    reduce_own (optional)   {arg, value_arg, rows_per_slot, src, parts, dst, dst_rows, done, from_peers, scope}:
                            the reduce-scatter epilogue. A tile of the launching rank's own rows [rank*R, (rank+1)*R)
                            (R = rows_per_rank) waits until the slots of ``arg`` covering its rows are >=
                            ``value_arg``, adds the ``parts`` partial tiles staged in ``src`` ([parts*R, n]: part j
                            at rows j*R + the row within the shard) -- or, with from_peers, the same tile of ``c``
                            on ranks rank+1, ..., rank+parts (mod parts+1) through symm_at (no staging; ``arg`` is
                            then the pad the peers notify) -- to its accumulator and stores the sum to ``dst``
                            instead of ``c`` — at the row within the shard (dst_rows 'shard', dst [R, n]) or at the
                            tile's own row (dst_rows 'global', dst [m, n]) — then, with ``done`` (a pad argument),
                            adds 1 to its slots of ``done`` on its own rank (release); it does not notify. Other
                            tiles store to ``c`` and notify as usual. The own tiles must come last in every program (else two ranks could
                            each spin on a tile the other has not reached): tile_order 'rank_rotated' with
                            rank_shift 1 and group_m dividing R / block_m.

    push    (optional)      {arg, pad, slabs, scope}: GEMM+AR by push. After a tile's store to ``c`` (split-K: by the
                            last split, with the sum) the tile is
                            also stored into every peer's inbox ``arg`` ([slabs * m, n], slabs = num_ranks - 1),
                            at rows slab * m + its rows, slab = num_ranks - 1 - i on peer rank + i (so slab j - 1
                            of a rank's inbox holds rank + j's tiles), then 1 is added (release) to slot
                            slab * tiles_m + pid_m of that peer's pad ``pad``: a slot counts tiles_n tiles per
                            call. The reduce template's ``publish.pushed`` sums the inbox once they are there.
                            A persistent grid adds a tile's counts after its next tile's K loop (the last tile's
                            after the loop; ``deferred_push``): the release then waits for no store in flight.
                            ``owner`` (GEMM+RS by push): a tile of rank q's rows [q*R, (q+1)*R) (R = rows_per_rank,
                            a multiple of block_m; m = (slabs + 1) * R) goes to q alone, at its row within the
                            shard: into ``c`` ([R, n]) when q is the launching rank, else into slab
                            num_ranks - 1 - ((q - rank) mod num_ranks) of q's inbox ([slabs * R, n]), counted in
                            q's slot slab * (R / block_m) + its row block within the shard.
                            ``sum_own`` (with owner and ``value_arg``; GEMM+RS in one launch): slots per tile
                            instead -- a tile of q's rows sets q's slot slab * (R / block_m) * tiles_n + its tile
                            within the shard (row block * tiles_n + pid_n) to the value (release) -- and an own
                            tile waits for its slot of every slab, adds the slabs' inbox tiles to its accumulator,
                            stores the sum into c and clears its slots (one waiter each: the pad is consumed): no
                            reduce launch. Every tile has a resident program of its own (tiles <= num_sms), or the
                            own tiles come last in every program (rank_rotated, rank_shift 1, group_m dividing
                            R / block_m; a deferred count goes out before the wait): the tiles they wait for never
                            wait.
                            ``sum`` (with ``value_arg``, an i32 argument; GEMM+AR in one launch): each tile's slot
                            t * slabs + slab on a peer (t = pid_m * tiles_n + pid_n) is set to the value (release),
                            then the tile waits for its own slots t * slabs + j, adds the W - 1 inbox tiles to its
                            own (rounded to out_dtype first: every rank sums the same values), stores the sum to
                            ``c`` and clears its slots (one waiter each: the pad is consumed); split-K: the last split
                            does it, with the sum. Every program must be resident (a tile waits for the peers' same
                            tile); no owner. Persistent programs beyond one wave defer each sum (``deferred_sum``):
                            the tile's own part (rounded) goes to c, and its slots are set after the program's next
                            tile's K loop (its stores crossed the link meanwhile: the release stalls on nothing),
                            before that tile's stores; then its sum, reading the own part back (the last tile's
                            slots and sum after the loop).
    gather  (optional)      {arg, block, own_first}: AG+GEMM in one launch. The *copiers* copy this rank's shard
                            ``arg`` ([R, k] contiguous, R = rows_per_rank; ``block`` = [rows, cols] per block,
                            ``gather_blocks`` of them) into rows rank*R + ... of ``a`` on every rank (the peers
                            first, through symm_at; its own last) -- copier c of n takes blocks c, c + n, ... --
                            and add their block count (release) to slot ``rank`` of the ``wait`` pad on every rank:
                            a slot counts gather_blocks(rec) per call, and the tiles' waits (rows_per_slot R) see
                            the whole shard of each rank they cover. With own_first (default), the
                            ``gather_own_tiles`` tiles that lead the order and hold only this rank's rows read them
                            from ``arg`` itself, without a wait (and no rank counts in its own slot: nothing waits
                            on it). When they are fewer than the programs, the programs
                            without one are the copiers and count at once (the others start on their own tiles at
                            once); otherwise every program copies first and counts after its own tiles (its stores
                            are out by then: the release does not stall). Every program must be resident
                            (persistent, or one wave), and A is read through pointers (the peers' stores are
                            generic-proxy writes). The waits consume their signal: the pad has 2 S slots (S = m /
                            R), and a tile that passed its wait on slot s adds 1 (relaxed) to slot S + s; the last
                            of the ``gather_waiters`` tiles that wait on s (the count it found was one short) sets
                            S + s back to 0 and takes the wait value off slot s, after its K loop. Each call so
                            leaves the pad as it found it, but for counts of the peers' next call that landed
                            already, and a CUDA graph need not zero it.

Arguments (``record["args"]``): a, b, c, then the wait pad and value, the gather source, the notify pad (if
another one) and peer argument, the push inbox and pad, then for split-K ``workspace`` (fp32, [(S-1)*M, N]
row-major: slice j holds rows j*M ...) and ``locks`` (i32, one per tile, zero before the first launch; the kernel
leaves them zero); for stream-K the same two, ``workspace`` [grid * BM, BN] and one lock per program
(``scratch`` gives both shapes).

Tile order: tile t -> (pid_m, pid_n). row_major: t // tiles_n, t % tiles_n. grouped: GROUP_M m-blocks share a
column sweep (Triton's swizzle). rank_rotated: grouped, then pid_m shifted by the m-block holding row
``(rank + rank_shift) * rows_per_rank`` (mod tiles_m), so each rank starts on its own rows (rank_shift 0) or on
the next rank's and ends on its own (rank_shift 1). Orders are registered in
``TILE_ORDER_FNS``, each written once for both the IR and tiles(). A persistent program p visits tiles
p, p + grid, p + 2*grid, ...; a non-persistent program p does tile p % tiles (split index p // tiles).

Split-K (non-persistent, grid <= num_sms so all programs are resident): split s < S-1 stores its fp32 partial to
``workspace`` slice s and adds 1 to ``locks[t]`` (release); split S-1 waits until ``locks[t] >= S-1``
(``ditron_core.wait`` at gpu scope, acquire: bounded like every wait, so the lowered kernel takes ``wait_bound``,
``wait_err``, ``wait_tag`` after its own arguments), adds the slices in order to its own partial, stores C and
resets ``locks[t]`` to 0.

Stream-K (persistent, grid = num_sms programs, all resident): the first D = tiles - T tiles go to the programs
data-parallel (program p: tiles p, p + grid, ...; D a multiple of the grid), then the I = T * k_tiles K steps of
the last T tiles are cut into grid equal ranges, program p taking steps [p*I // grid, (p+1)*I // grid) (tile D +
step // k_tiles). A tile's *owner* is the program holding its last K step. A program first runs its trailing
piece of a tile it does not own (if its range ends inside one): stores the fp32 partial to ``workspace`` slot p
([grid * BM, BN], full tiles) and adds 1 to ``locks[p]`` (release); then the tiles it owns, in order: the first
may have begun in lower programs' ranges, whose partials it waits for (``locks[q] >= 1``, acquire, bounded), adds
and clears (``locks[q]`` back to 0) before storing C. Only lower programs' trailing pieces are awaited, which they
run before anything that waits on a lock: no chain, no cycle. ``stream_k_segments`` lists a program's pieces.

Launch: exactly ``grid(record)`` programs, ``num_warps`` warps; pointer arguments 16-byte aligned. TMA variants
create descriptors on the device: the launcher must set Triton's global scratch allocator
(``triton.set_allocator``; the kernel's metadata gives ``global_scratch_size`` per program).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from mlir import ir

from ..dialects import core
from ..dialects import ttir as T
from ..errors import VerificationError
from . import KERNEL_ATTR, KernelRecord, Region, SlotNotify, SlotWait, TileStep, check_i32, copies
from . import offset_type as _offset_type
from .numerics import matmul, round_to

name = "gemm"

IN_DTYPES = ("bf16", "fp16", "fp8e4m3")
OUT_DTYPES = ("bf16", "fp16", "fp32")
SM90_SHARED_BYTES = 232448 - 1024  # H100/H200 shared memory per block, less room for barriers

CONFIG_FIELDS = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages", "persistent", "num_sms",
                 "loads", "store", "epilogue_split", "flatten", "split_k", "stream_k")


def _err(message: str) -> VerificationError:
    return VerificationError(f"gemm template: {message}")


def _pow2(x: int) -> bool:
    return isinstance(x, int) and x > 0 and x & (x - 1) == 0


# ------------------------------------------------------------------------------------------------ the record

def make_record(m: int, n: int, k: int, *, name: str = "gemm", in_dtype: str = "bf16", out_dtype: str | None = None,
                b_trans: bool = False, lda: int | None = None, ldb: int | None = None, ldc: int | None = None,
                tile_order: str = "grouped", rows_per_rank: int = 0, rank_shift: int = 0, wait: dict | None = None,
                notify: dict | None = None, reduce_own: dict | None = None, push: dict | None = None,
                gather: dict | None = None, target: str = "cuda:90", **config) -> KernelRecord:
    """A checked GEMM record. Tuning fields not given come from ``choose_config(m, n, k, in_dtype, target)``."""
    out_dtype = out_dtype or ("bf16" if in_dtype.startswith("fp8") else in_dtype)
    unknown = set(config) - set(CONFIG_FIELDS) - {"max_imprecise_acc"}
    if unknown:
        raise _err(f"unknown field(s) {sorted(unknown)}; known tuning fields: {', '.join(CONFIG_FIELDS)}")
    chosen = choose_config(m, n, k, in_dtype, target, b_trans=b_trans, lda=lda, ldb=ldb, ldc=ldc,
                           out_dtype=out_dtype, fused=bool(wait or notify or reduce_own or push),
                           num_sms=config.get("num_sms"), pushes=bool(push))
    chosen.update(config)
    if gather and "loads" not in config:
        chosen["loads"] = "pointer"  # the gathered rows are SM stores (check_gather)
    rec = KernelRecord(template="gemm", name=name, m=m, n=n, k=k, lda=lda or k, ldb=ldb or (k if b_trans else n),
                       ldc=ldc or n, in_dtype=in_dtype, out_dtype=out_dtype, b_trans=b_trans, tile_order=tile_order,
                       rows_per_rank=rows_per_rank, **chosen)
    if rank_shift:
        rec["rank_shift"] = rank_shift
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


def check(rec) -> None:
    """Raise VerificationError naming the field if the record cannot be built."""
    for key in ("m", "n", "k", "lda", "ldb", "ldc", "block_m", "block_n", "block_k", "group_m", "num_sms",
                "split_k", "epilogue_split"):
        if not isinstance(rec.get(key), int) or rec[key] < 1:
            raise _err(f"field '{key}' must be a positive integer, got {rec.get(key)!r}")
    if rec["in_dtype"] not in IN_DTYPES:
        raise _err(f"in_dtype '{rec['in_dtype']}' is not supported; use one of {', '.join(IN_DTYPES)}")
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


def _rank_shift(peer: str) -> int | None:
    if peer.startswith("rank+") or peer.startswith("rank-"):
        try:
            return int(peer[4:])
        except ValueError:
            return None
    return None


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


# ------------------------------------------------------------------------------------------------ configs

def choose_config(m: int, n: int, k: int, dtype: str = "bf16", target: str = "cuda:90", *, b_trans: bool = False,
                  lda=None, ldb=None, ldc=None, out_dtype: str | None = None, fused: bool = False,
                  num_sms: int | None = None, pushes: bool = False) -> dict:
    """Tuning fields for a problem: the first of ``candidates``."""
    return candidates(m, n, k, dtype, target, b_trans=b_trans, lda=lda, ldb=ldb, ldc=ldc, out_dtype=out_dtype,
                      fused=fused, num_sms=num_sms, pushes=pushes)[0]


def split_for(tiles: int, k_tiles: int, sms: int) -> int:
    """Split-K for a grid of ``tiles`` tiles of ``k_tiles`` K steps on ``sms`` SMs: as many K slices as fill the
    SMs with one wave of tiles * split programs, each slice at least 8 K steps long and none empty (1: no split)."""
    split = max(1, min(sms // max(tiles, 1), k_tiles // 8))
    while split > 1 and (math.ceil(k_tiles / split) * (split - 1) >= k_tiles or tiles * split > sms):
        split -= 1
    return split


def candidates(m: int, n: int, k: int, dtype: str = "bf16", target: str = "cuda:90", *, b_trans: bool = False,
               lda=None, ldb=None, ldc=None, out_dtype: str | None = None, fused: bool = False,
               num_sms: int | None = None, pushes: bool = False) -> list[dict]:
    """Configs worth trying, best guess first. The rule: on sm_90, TMA loads when rows are 16-byte aligned;
    128x256 tiles (4 stages with a split epilogue) in a persistent grid when there are at least as many tiles
    as SMs; below that, smaller tiles through pointers and split-K until about one wave of programs fills the
    SMs. ``fused`` (per-tile wait/notify, or a push) keeps the tile loop unflattened and stores through pointers;
    a GEMM that waits or notifies per tile neither splits K nor leaves TMA loads; ``pushes`` (GEMM+AR's push,
    done by the last split) does both."""
    out_dtype = out_dtype or ("bf16" if dtype.startswith("fp8") else dtype)
    vendor, _, arch = target.partition(":")
    in_bytes, out_bytes = T.DTYPE_BYTES[dtype], T.DTYPE_BYTES[out_dtype]
    lda, ldb, ldc = lda or k, ldb or (k if b_trans else n), ldc or n
    bk = 128 if in_bytes == 1 else 64
    if vendor == "hip":
        sms = num_sms or (304 if arch == "gfx942" else 256)
        base = dict(group_m=8, num_sms=sms, loads="pointer", store="pointer", epilogue_split=1, flatten=False,
                    split_k=1, persistent=False, num_stages=2)
        out = [dict(base, block_m=256, block_n=256, block_k=bk // 2 if in_bytes == 2 else bk, num_warps=8),
               dict(base, block_m=128, block_n=128, block_k=bk, num_warps=4)]
        if m <= 128:
            out.insert(0, dict(base, block_m=64, block_n=128, block_k=bk, num_warps=4))
        return out
    sms = num_sms or (132 if arch == "90" else 108)
    if arch != "90":  # Ampere-class: pointer loads, cp.async pipelining, mma.sync
        base = dict(group_m=8, num_sms=sms, loads="pointer", store="pointer", epilogue_split=1, flatten=False,
                    split_k=1, persistent=False)
        return [dict(base, block_m=128, block_n=256, block_k=bk // 2, num_warps=8, num_stages=3),
                dict(base, block_m=128, block_n=128, block_k=bk // 2, num_warps=4, num_stages=4)]
    tma = lda * in_bytes % 16 == 0 and ldb * in_bytes % 16 == 0
    tma_store = tma and ldc * out_bytes % 16 == 0 and not fused
    loads = "tma" if tma else "pointer"

    def cfg(bm, bn, stages=None, warps=8, persistent=True, split=1, esplit=None, flatten=None, group=8,
            max_stages=4, pointers=False):
        store = "tma" if tma_store and split == 1 and not pointers else "pointer"
        esplit = esplit if esplit is not None else (2 if store == "tma" and bn >= 128 else 1)
        if store != "tma":
            esplit = 1
        if stages is None:  # as many stages as shared memory holds, up to max_stages
            epilogue = bm * bn // esplit * out_bytes if store == "tma" else 0
            stages = min(max_stages, (SM90_SHARED_BYTES - epilogue) // ((bm + bn) * bk * in_bytes))
        flat = (not fused and persistent) if flatten is None else flatten
        return dict(block_m=bm, block_n=bn, block_k=bk, group_m=group, num_warps=warps, num_stages=stages,
                    persistent=persistent, num_sms=sms, loads="pointer" if pointers else loads, store=store,
                    epilogue_split=esplit, flatten=flat and persistent, split_k=split)

    def tiles(bm, bn):
        return math.ceil(m / bm) * math.ceil(n / bn)

    k_tiles = math.ceil(k / bk)
    big = [cfg(128, 256), cfg(256, 128), cfg(128, 256, esplit=1), cfg(128, 256, flatten=False),
           cfg(128, 256, persistent=False), cfg(128, 128, warps=4, group=16)]
    if fused:
        big = [cfg(128, 256), cfg(128, 128, warps=4)]
    if tiles(128, 256) >= sms:
        return big
    # fewer tiles than SMs: memory-bound; smaller tiles, deeper pipelines, then split-K, aiming at one full wave
    small: list[dict] = []
    for bm, bn, warps in ((128, 128, 8), (64, 128, 4), (128, 64, 4), (64, 64, 4), (128, 256, 8), (64, 256, 4)):
        t = tiles(bm, bn)
        if m <= 64 and bm > 64:
            continue
        split = 1 if fused and not pushes else split_for(t, k_tiles, sms)
        small.append(cfg(bm, bn, warps=warps, persistent=split == 1 and t > sms, split=split, max_stages=6,
                         pointers=not fused or pushes))
    # rank: programs close to one wave first. Pointer loads and stores: one wave of short programs pays for
    # creating TMA descriptors at every program's start (H200, warm L2, M = 128: 64x64 s6 25.1 us with pointers
    # against 27.1 with TMA at N, K = 4096, 7168; 64x128 s6 62.4 against 64.1 at 8192, 14336); beside the two
    # best, their twins with the other loads (for the tuner). A GEMM that waits per tile keeps TMA: AG+GEMM 70B
    # M = 128 (128x128 tiles, 128 K steps) ran 91.5-92.7 us with pointers against 90.1-90.9 with TMA.
    small.sort(key=lambda c: abs(1 - tiles(c["block_m"], c["block_n"]) * c["split_k"] / sms))
    twins = [dict(c, loads="tma" if c["loads"] == "pointer" else "pointer", store="pointer", epilogue_split=1)
             for c in small[:2] if tma]
    return small[:2] + twins + small[2:] + big[:2]


# ------------------------------------------------------------------------------------------------ geometry

@dataclass(frozen=True)
class Geometry:
    tiles_m: int
    tiles_n: int
    k_tiles: int
    split_tiles: int  # K tiles per split
    grid: int

    @property
    def tiles(self) -> int:
        return self.tiles_m * self.tiles_n


def geometry(rec) -> Geometry:
    tm, tn = math.ceil(rec["m"] / rec["block_m"]), math.ceil(rec["n"] / rec["block_n"])
    kt = math.ceil(rec["k"] / rec["block_k"])
    s = rec.get("split_k", 1)
    if rec.get("stream_k", 0):
        grid = rec["num_sms"]
    else:
        grid = min(rec["num_sms"], tm * tn) if rec["persistent"] else tm * tn * s
    return Geometry(tm, tn, kt, math.ceil(kt / s), grid)


def grid(rec) -> tuple[int, int, int]:
    """The launch grid the kernel expects."""
    return geometry(rec).grid, 1, 1


class PyOps:
    """Integer arithmetic on Python ints (for tiles()); IrOps does the same on i32 IR values (for build())."""

    add = staticmethod(lambda a, b: a + b)
    sub = staticmethod(lambda a, b: a - b)
    mul = staticmethod(lambda a, b: a * b)
    div = staticmethod(lambda a, b: a // b)
    rem = staticmethod(lambda a, b: a % b)
    min = staticmethod(min)


class IrOps:
    add, sub, mul, div, rem, min = (staticmethod(f) for f in (T.add, T.sub, T.mul, T.div, T.rem, T.min_))


def _row_major(o, t, rec, g, rank):
    return o.div(t, g.tiles_n), o.rem(t, g.tiles_n)


def _grouped(o, t, rec, g, rank):
    """Triton's GROUP_M swizzle: group_m m-blocks share each sweep over the n-blocks (L2 reuse of B)."""
    gm = rec["group_m"]
    per_group = gm * g.tiles_n
    first = o.mul(o.div(t, per_group), gm)
    size = o.min(o.sub(g.tiles_m, first), gm) if g.tiles_m % gm else gm
    return o.add(first, o.rem(t, size)), o.div(o.rem(t, per_group), size)


def _rank_rotated(o, t, rec, g, rank):
    """Grouped, then the m-blocks rotated so that tile 0 is the block holding row rank * rows_per_rank."""
    pid_m, pid_n = _grouped(o, t, rec, g, rank)
    first_rank = o.add(rank, rec["rank_shift"]) if rec.get("rank_shift", 0) else rank
    start = o.div(o.mul(first_rank, rec["rows_per_rank"]), rec["block_m"])
    return o.rem(o.add(pid_m, start), g.tiles_m), pid_n


# The hook for tile orders: name -> fn(ops, t, record, geometry, rank) -> (pid_m, pid_n), written once over an
# arithmetic namespace so that build() (IrOps on IR values) and tiles() (PyOps on ints) share the definition.
# Arguments are non-negative, so Python's // and % agree with arith.divsi/remsi. An order that needs the rank
# gets ditron_core.rank in the IR.
TILE_ORDER_FNS = {"row_major": _row_major, "grouped": _grouped, "rank_rotated": _rank_rotated}
ORDERS_USING_RANK = ("rank_rotated",)


def tile_coords(rec, t: int, rank: int = 0) -> tuple[int, int]:
    """(pid_m, pid_n) of tile t in the record's tile order."""
    return TILE_ORDER_FNS[rec["tile_order"]](PyOps, t, rec, geometry(rec), rank)


def program_tiles(rec, pid: int) -> list[tuple[int, int]]:
    """(tile, split) pairs program pid visits, in order."""
    g = geometry(rec)
    if rec["persistent"]:  # stream-K: the data-parallel tiles (stream_k_segments gives the rest)
        return [(t, 0) for t in range(pid, g.tiles - rec.get("stream_k", 0), g.grid)]
    return [(pid % g.tiles, pid // g.tiles)]


def stream_k_segments(rec, pid: int) -> list[tuple[int, int, int, list[int] | None]]:
    """Program pid's stream-K pieces in the order it runs them: (tile, first K step, end K step, contributors) --
    contributors None for the trailing piece of a tile it does not own (its partial goes to workspace slot pid),
    else the lower programs whose partials of the tile it adds before storing C."""
    g = geometry(rec)
    sk = rec.get("stream_k", 0)
    if not sk:
        return []
    K, G, d = g.k_tiles, g.grid, g.tiles - sk
    total = sk * K
    start, end = pid * total // G, (pid + 1) * total // G
    last = (end - 1) // K
    out: list[tuple[int, int, int, list[int] | None]] = []
    tail = end % K != 0
    if tail:
        out.append((d + last, max(start, last * K) - last * K, end - last * K, None))
    for t in range(start // K, last if tail else last + 1):
        k0 = max(start - t * K, 0)
        first = ((t * K + 1) * G - 1) // total  # the program holding the tile's first K step
        out.append((d + t, k0, K, list(range(first, pid)) if k0 else []))
    return out


def _slots(m0: int, rows: int, spec) -> range:
    rps = spec["rows_per_slot"]
    return range(m0 // rps, (m0 + rows - 1) // rps + 1)


def _peer(spec, slot: int, rank: int, num_ranks: int, rec, scalars) -> int:
    peer = spec["peer"]
    if peer == "rank":
        return rank
    if peer == "slot_owner":
        return slot * spec["rows_per_slot"] // rec["rows_per_rank"]
    if peer.startswith("arg:"):
        return int(scalars[peer[4:]])
    return (rank + _rank_shift(peer)) % num_ranks


def notify_slots(rec) -> range:
    """The slots of the notify pad one launch adds to: those covering rows [0, m) (none without a notify)."""
    return range((rec["m"] - 1) // rec["notify"]["rows_per_slot"] + 1) if "notify" in rec else range(0)


def notify_count(rec, slot: int) -> int:
    """How much notify slot ``slot`` receives from one launch, for the consumer's expected count: ``value`` from
    each tile of every row block meeting the slot's rows (a closed form: no walk over the tiles)."""
    bm, rps = rec["block_m"], rec["notify"]["rows_per_slot"]
    first, last = slot * rps, min(rec["m"], (slot + 1) * rps) - 1
    return (last // bm - first // bm + 1) * geometry(rec).tiles_n * rec["notify"]["value"]


def notify_count_values(rec) -> set[int]:
    """The distinct counts of ``notify_slots``, without visiting them all: a full slot's count depends only on its
    first row modulo block_m, which repeats every block_m / gcd(rows_per_slot, block_m) slots, so one such period
    and the last slot (the one cut at m) give every value."""
    slots = notify_slots(rec)
    if not slots:
        return set()
    period = rec["block_m"] // math.gcd(rec["notify"]["rows_per_slot"], rec["block_m"])
    return {notify_count(rec, s) for s in range(min(period, len(slots)))} | {notify_count(rec, slots[-1])}


# ------------------------------------------------------------------------------------------------ tiles()

def tiles(record, *, rank: int, num_ranks: int, scalars: dict[str, int]) -> list[list[TileStep]]:
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
                steps.append(TileStep(reads=[own_a, b_reg], writes=[c_reg],
                                      compute=_gemm_compute(own_a, b_reg, c_reg, [], rec),
                                      notifies=counts if t + g.grid >= own_n else []))
                continue
            a_reg = Region("a", (m0, k0), (rows, k1 - k0))
            b_reg = _b_region(rec, n0, cols, k0, k1)
            c_reg = Region("c", (m0, n0), (rows, cols))
            step = TileStep(reads=[a_reg, b_reg])
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
                step.compute = _gemm_compute(a_reg, b_reg, dst, parts, rec)
                if ro.get("done"):
                    step.notifies = [SlotNotify(ro["done"], sl, 1, rank, op="add") for sl in _slots(m0, rows, ro)]
                steps.append(step)
                continue
            if S == 1:
                step.writes = [c_reg]
                step.compute = _gemm_compute(a_reg, b_reg, c_reg, [], rec)
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
                step.compute = _gemm_compute(a_reg, b_reg, c_reg, parts, rec)
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
            step.reads += parts
            c_reg = Region("c", (m0, n0), (rows, cols))
            step.writes = [c_reg]
            step.compute = _gemm_compute(a_reg, b_reg, c_reg, [Region("workspace", (q * bm, 0), (rows, cols))
                                                               for q in contributors], rec)
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
        step.compute = _gemm_compute(step.reads[0], step.reads[1], dst, [], rec)
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
    a_reg, b_reg = step.reads
    acc: dict[str, np.ndarray] = {}

    def k_loop(view):
        a, b = np.asarray(view(a_reg), np.float32), np.asarray(view(b_reg), np.float32)
        acc["tile"] = matmul(a, b.T if rec["b_trans"] else b)

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
    return [TileStep(reads=[a_reg, b_reg], compute=k_loop),
            TileStep(waits=[SlotWait(spec["pad"], sl, value) for sl in slots], reads=parts, writes=[c_reg],
                     compute=total, notifies=[SlotNotify(spec["pad"], sl, value, rank, op="clear") for sl in slots])]


def sum_own_slot(o, rec, g, slab, block, pid_n):
    """'push.sum_own': the pad slot, in slab ``slab``, of the own tile at row block ``block`` of the shard and
    column block pid_n (a slab holds one slot per tile of the shard). Written once over an arithmetic namespace
    (PyOps on ints for tiles(), IrOps on IR values for build()), as the tile orders are."""
    return o.add(o.mul(slab, rec["rows_per_rank"] // rec["block_m"] * g.tiles_n), o.add(o.mul(block, g.tiles_n), pid_n))


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


def _gemm_compute(a_reg, b_reg, c_reg, parts, rec, out_dtype=None):
    out_dtype = out_dtype or rec["out_dtype"]

    def compute(view):
        a = np.asarray(view(a_reg), dtype=np.float32)
        b = np.asarray(view(b_reg), dtype=np.float32)
        acc = matmul(a, b.T if rec["b_trans"] else b)
        for p in parts:
            acc = acc + np.asarray(view(p), dtype=np.float32)
        view(c_reg)[...] = round_to(out_dtype, acc)

    return compute


# ------------------------------------------------------------------------------------------------ build()

def build(record, *, ip, loc=None):
    """The GEMM kernel as a tt.func at ip, carrying the record."""
    rec = KernelRecord(record)
    check(rec)
    with (loc or ir.Location.unknown()), ip:
        return _Emitter(rec).emit()


class _Emitter:
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
        return [(a, types[a], {"tt.divisibility": 16} if T.is_ptr(types[a]) else {}) for a in rec["args"]]

    def emit(self):
        rec = self.rec
        f, values = T.func(rec["name"], self._arg_types(), attrs={KERNEL_ATTR: rec.to_attr()})
        self.arg = dict(zip(rec["args"], values))
        with ir.InsertionPoint(f.regions[0].blocks[0]):
            self.rank = None
            if rec["tile_order"] in ORDERS_USING_RANK or "reduce_own" in rec or "push" in rec or \
                    "gather" in rec or ("notify" in rec and rec["notify"]["peer"].startswith("rank")):
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
            self.a_desc = T.make_desc(self.arg["a"], [m, k], [T.c(rec["lda"], T.i64()), one], [self.bm, self.bk])
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
        last = T.and_(mask, T.cmp("eq", found, T.sub(gather_waiters(IrOps, self.rec, self.g, slots), 1)))
        T.atomic_rmw("xchg", counts, T.c(0, T.like(slots, T.i32())), last, sem="relaxed", scope=spec["scope"])
        T.atomic_rmw("add", T.addptr(self.arg[spec["arg"]], slots),
                     T.sub(0, T.splat(self.arg[spec["value_arg"]], [T.shape(slots)[0]])), last, sem="relaxed",
                     scope=spec["scope"])

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
                core.Wait.build(lock, T.c(1), scope="gpu", semantic="acquire")  # bounded, like every wait
                T.barrier()
                part = T.load(self._ws_ptrs(qs.iv), cache="cg")
                T.atomic_rmw("xchg", lock, T.c(0), T.c(True), sem="relaxed", scope="gpu")
                qs.yield_(T.add(qs.args[0], part))
            self.store_c(qs.results[0], m0, n0)

    def _piece(self, t, k0, n_k):
        """K steps [k0, k0 + n_k) of tile t (after its wait): (fp32 accumulator, m0, n0)."""
        pid_m, pid_n = self.coords(t)
        m0, n0 = T.mul(pid_m, self.bm), T.mul(pid_n, self.bn)
        a_base, a_row, _ = self._a_after_wait(m0)
        return self.k_loop(a_base, a_row, n0, k0, n_k), m0, n0

    def _ws_ptrs(self, slot):
        """Pointers to stream-K workspace slot ``slot``: a whole [BM, BN] fp32 tile, rows BN apart."""
        rows = T.add(T.mul(self._wide(slot), self.bm), self._wide(T.make_range(0, self.bm)))
        off = T.add(T.mul(T.expand_dims(rows, 1), self.bn), T.expand_dims(self._wide(T.make_range(0, self.bn)), 0))
        return T.addptr(T.splat(self.arg["workspace"], [self.bm, self.bn]), off)

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
            n_k = self.g.split_tiles if k_start is not None else self.g.k_tiles
        fp8 = rec["in_dtype"].startswith("fp8")
        imprecise = rec.get("max_imprecise_acc", self.bk) if fp8 else None
        if rec["loads"] == "tma":
            with T.For(0, n_k, 1, [acc0]) as loop:
                ki = T.add(loop.iv, k_start) if k_start is not None else loop.iv
                kk = T.mul(ki, self.bk)
                a = T.desc_load(self.a_desc, [a_row, kk])
                if rec["b_trans"]:
                    b = T.trans(T.desc_load(self.b_desc, [n0, kk]), [1, 0])
                else:
                    b = T.desc_load(self.b_desc, [kk, n0])
                loop.yield_(T.dot(a, b, loop.args[0], max_imprecise_acc=imprecise))
            return loop.results[0]
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
            core.Wait.build(lock, T.c(S - 1), scope="gpu", semantic="acquire")  # bounded, like every wait
            T.barrier()
            total = acc
            for j in range(S - 1):
                ptrs, mask = self._tile_ptrs(self.arg["workspace"], m0, n0, self.n, j, self.m)
                total = T.add(total, T.load(ptrs, mask, 0.0 if mask is not None else None, cache="cg"))
            if store:
                self.store_c(total, m0, n0)
            T.atomic_rmw("xchg", lock, T.c(0), T.c(True), sem="relaxed", scope="gpu")
            if then is not None:
                then(total)


def _and(a, b, shape_):
    b = T.broadcast(b, shape_)
    return b if a is None else T.and_(T.broadcast(a, shape_), b)
