"""Chunk copy driven by SMs: copy a rows x cols region between a peer's symmetric buffer and a local buffer,
in BLOCK_M x BLOCK_N tiles spread over ``grid`` programs, then notify.

Record fields (``make_record``): rows, cols, dtype, direction ('pull': src lives on ``peer``, dst is local;
'push': src is local, dst lives on ``peer``), peer ('rank+<d>' | 'arg:<name>' | 'rank'), src_ld, dst_ld,
src_row/src_col/dst_row/dst_col (int or 'arg:<name>'), block_m, block_n, grid, num_warps, and optionally
notify = {arg, slot, peer, value, scope}: once all of a program's tiles are stored, the program adds ``value``
(default 1) to ``slot`` of signal pad ``arg`` on ``peer`` ('dst' by default: the rank the data landed on), with
release semantics (a CTA barrier first). Count-based: the consumer waits for ``slot >= grid * value``
(``chunk.notify_count``); for repeated calls, ``epoch * grid * value``.

Arguments: src, dst, then the notify pad, then the i32 arguments the 'arg:<name>' fields name, in field order.
The peer's address comes from ``ditron_core.symm_at`` of the symmetric argument (src for pull, dst for push).
"""
from __future__ import annotations

from ..dialects import core
from ..dialects import ttir as T
from . import KernelRecord, Region, TileStep, copies
from . import chunk

name = "copy"
_TEMPLATE = "copy"


def sm_copy_refusal(rank: int, sizes: list, buffer_dims: list[int]) -> str | None:
    """Why a copy of a ``rank``-dim region of ``sizes`` (None: a run-time size) between buffers with dims
    ``buffer_dims`` cannot run on SMs with this template, or None when it can. The one place that says which copies
    have an SM kernel: ditron-tile offers engine "sm" only for these, ditron-lower-device-to-core refuses the rest."""
    from . import I32_LIMIT
    if rank not in (1, 2) or any(s is None for s in sizes):
        return (f"copies a {'dynamic-size ' if rank in (1, 2) else ''}rank-{rank} region with engine = \"sm\", which "
                "has no SM copy kernel (static rank-1 and rank-2 regions only)")
    if buffer_dims and max(buffer_dims) >= I32_LIMIT:
        return (f"copies with engine = \"sm\" a region of a buffer with a dim of {max(buffer_dims)}, past the i32 "
                "offsets of the SM copy kernel")
    return None


def make_record(rows: int, cols: int, *, name: str = "copy", dtype: str = "bf16", direction: str = "pull",
                peer: str = "arg:peer", src_ld: int | None = None, dst_ld: int | None = None, src_row=0, src_col=0,
                dst_row=0, dst_col=0, block_m: int | None = None, block_n: int | None = None, grid: int = 16,
                num_warps: int = 4, notify: dict | None = None) -> KernelRecord:
    """A checked copy record. Default tiles: 16 KB per tile (e.g. 32 x 256 bf16), at most the region's size."""
    elem = T.DTYPE_BYTES.get(dtype, 0)
    if block_n is None:
        block_n = min(_pow2_ceil(cols), max(16, 512 // max(elem, 1)))
    if block_m is None:
        block_m = min(_pow2_ceil(rows), max(1, 16384 // max(elem, 1) // block_n))
    rec = KernelRecord(template="copy", name=name, rows=rows, cols=cols, dtype=dtype, direction=direction, peer=peer,
                       src_ld=src_ld or cols, dst_ld=dst_ld or cols, src_row=src_row, src_col=src_col,
                       dst_row=dst_row, dst_col=dst_col, block_m=block_m, block_n=block_n, grid=grid,
                       num_warps=num_warps)
    if notify:
        rec["notify"] = {"peer": "dst", "value": 1, "scope": "sys", **notify}
    rec["args"] = _arg_names(rec)
    check(rec)
    return rec


def _pow2_ceil(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _arg_names(rec) -> list[str]:
    args = ["src", "dst"]
    if "notify" in rec:
        args.append(rec["notify"]["arg"])
    fields = [rec["peer"]] + [rec[f"{s}_{f}"] for s in ("src", "dst") for f in ("row", "col")]
    if "notify" in rec:
        fields += [rec["notify"]["slot"], rec["notify"]["peer"]]
    return args + [a for a in chunk.scalar_args(rec, fields) if a not in args]


def check(rec) -> None:
    chunk.check_region(_TEMPLATE, rec)
    if rec["dtype"] not in T.DTYPES or rec["dtype"] == "i1":
        raise chunk.err(_TEMPLATE, f"dtype '{rec['dtype']}' is not supported")
    if rec["direction"] not in ("pull", "push"):
        raise chunk.err(_TEMPLATE, f"direction '{rec['direction']}' must be 'pull' or 'push'")
    chunk.check_peer(_TEMPLATE, "peer", rec["peer"])
    if "notify" in rec:
        chunk.check_peer(_TEMPLATE, "notify.peer", rec["notify"]["peer"], extra=("dst",))
    if len(set(rec["args"])) != len(rec["args"]):
        raise chunk.err(_TEMPLATE, f"argument names collide: {rec['args']}")


def grid(rec) -> tuple[int, int, int]:
    return rec["grid"], 1, 1


# ------------------------------------------------------------------------------------------------ tiles()

def tiles(record, *, rank: int, num_ranks: int, scalars: dict[str, int]) -> list[list[TileStep]]:
    rec = record
    peer = chunk.peer_py(rec["peer"], rank, num_ranks, scalars)
    peer_or_none = None if peer == rank else peer
    src_rank, dst_rank = (peer_or_none, None) if rec["direction"] == "pull" else (None, peer_or_none)
    out = []
    for pid in range(rec["grid"]):
        steps = []
        for tm, tn in chunk.program_tiles(rec, pid):
            src = Region("src", *chunk.tile_box(rec, "src", tm, tn, scalars), rank=src_rank)
            dst = Region("dst", *chunk.tile_box(rec, "dst", tm, tn, scalars), rank=dst_rank)
            steps.append(TileStep(reads=[src], writes=[dst], compute=copies(src, dst)))
        notifies = chunk.program_notifies(rec, rank, num_ranks, scalars, peer if dst_rank is not None else rank)
        if notifies:
            if not steps:
                steps.append(TileStep())
            steps[-1].notifies = notifies
        out.append(steps)
    return out


# ------------------------------------------------------------------------------------------------ build()

def build(record, *, ip, loc=None):
    rec = KernelRecord(record)
    check(rec)
    return chunk.build_kernel(rec, lambda: {"src": T.ptr(rec["dtype"]), "dst": T.ptr(rec["dtype"])}, _emit, ip=ip,
                              loc=loc)


def _emit(rec, args):
    e = chunk.RegionEmitter(rec, args)
    peer = e.peer(rec["peer"])
    src, dst = args["src"], args["dst"]
    if rec["direction"] == "pull":
        src = core.SymmAt.build(src, peer).result
    else:
        dst = core.SymmAt.build(dst, peer).result
    bm, bn = rec["block_m"], rec["block_n"]
    with e.for_tiles() as loop:
        tm, tn = e.tile_coords(loop.iv)
        src_off, mask = e.tile_offsets("src", tm, tn)
        dst_off, _ = e.tile_offsets("dst", tm, tn)
        vals = T.load(T.addptr(T.splat(src, [bm, bn]), src_off), mask)
        T.store(T.addptr(T.splat(dst, [bm, bn]), dst_off), vals, mask)
    e.notify(dst_peer=peer if rec["direction"] == "push" else e.rank())

