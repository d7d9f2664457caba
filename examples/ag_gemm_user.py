"""AG + GEMM written with the device builder (``ditron.device``), using only the public API.

Each rank holds m rows of x ([m, K]) and n columns of W ([K, n]); it computes y = all_gather(x) @ W ([W*m, n]).
The schedule, per rank:

* stream 1 (the copy engine): the shard is cut into chunks of ``chunk`` rows; chunk c goes to every rank q
  (its own first, then the next ranks), into rows rank*m + c*chunk of q's symmetric ``gathered`` buffer, and
  slot rank*C + c of q's ``ready`` pad is set to the epoch (release: the copy is visible to whoever sees it);
* stream 0: one launch of a GEMM with per-tile waits: a tile of rows [r0, r0 + BM) waits until the slots of the
  chunks covering them hold the epoch (acquire), then runs its K loop; tiles are visited in rank-rotated order
  (this rank's rows first: they arrive first). Either the built-in GEMM template (``gemm="template"``) or the user
  kernel ``ag_gemm_tiles`` of examples/jit_kernels.py, written in Triton's language with ditron.language's wait
  (``gemm="jit"``: pointer loads), or its twin ``ag_gemm_tiles_tma`` (``gemm="jit_tma"``: TMA loads through tensor
  descriptors made in the kernel; rows of 16-byte multiples);
* stream 1 joins stream 0 (a local signal and wait), then every rank meets at a barrier: no rank pushes the next
  call's chunks into a peer's ``gathered`` while the peer's GEMM still reads it.

Rows per rank need not be a multiple of the GEMM's tile: a tile may straddle two ranks' rows and wait for both.
At W = 1 there is nothing to gather: the GEMM reads x itself (the template without waits; the user kernel with its
chunks marked ready on stream 0), and no copy, stream hand-off or barrier is issued. ``op()`` cuts the shard into the chunks ditron-tile's cost model
picks (``ditron.tiling.ag_gemm_chunk_rows``).

It is also an op on torch tensors (``op()``, a ``ditron.user_ops.UserOp``): ``op()([x0, x1], [w0, w1],
world=ditron.World.virtual(2))`` builds the program for the call's shapes and world, compiles it once and runs it.

    python examples/ag_gemm_user.py [W] [m] [K] [n]      # prints the device IR
"""
from __future__ import annotations

import sys

import ditron.device as dd
from ditron.user_ops import UserOp

def _jit_gemm(tma: bool = False):
    """examples/jit_kernels.py's GEMM: its tiling and ``ag_gemm_tiles`` (pointer loads) or ``ag_gemm_tiles_tma``
    (imported when used: ditron.language needs the compiler's MLIR bindings, which a GPU box running prebuilt
    artifacts does not have)."""
    try:
        import jit_kernels
    except ImportError:
        from pathlib import Path
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import jit_kernels
    return jit_kernels.gemm_tiling, jit_kernels.ag_gemm_tiles_tma if tma else jit_kernels.ag_gemm_tiles


def program(W: int = 4, m: int = 512, K: int = 4096, n: int = 3584, *, dtype: str = "bf16",
            chunk: int | None = None, num_sms: int | None = None, target: str = "cuda:90", gemm: str = "template",
            **gemm_fields) -> dd.Program:
    """The AG+GEMM device program for W ranks: inputs x [m, K], w [K, n]; output y [W*m, n]. ``chunk``: rows per
    copy (a divisor of m; default: m, one chunk per rank); ``num_sms``: the GEMM's SM budget (in a virtual world
    of W ranks on one GPU, at most its share: ``World.cta_budget``); ``gemm``: "template" (the built-in GEMM with
    per-tile waits; ``gemm_fields``: its tuning, block_m, ...), "jit" (the user kernel ``jit_kernels.ag_gemm_tiles``,
    persistent on ``num_sms`` programs, tiled as ditron-tile's cost model tiles this GEMM on those SMs
    (``ditron.tiling.gemm_config``); ``gemm_fields``: its constexprs, BLOCK_M, ..., or num_warps / num_stages) or
    "jit_tma" (``jit_kernels.ag_gemm_tiles_tma``, the same with TMA loads)."""
    chunk = chunk or m
    if m % chunk:
        raise ValueError(f"chunk {chunk} must divide the {m} rows of a shard (the GEMM's waits count whole chunks)")
    count = m // chunk
    p = dd.Program("ag_gemm_user", W, target=target)
    x = p.input("x", (m, K), dtype)
    w = p.input("w", (K, n), dtype)
    y = p.output("y", (W * m, n), dtype)
    ready = p.signal_pad("ready", W * count)

    if W == 1:  # the shard is the whole gathered input: read in place (a user GEMM: its chunks ready at once)
        gathered = x
        if gemm in ("jit", "jit_tma"):
            with p.loop(0, count) as c:
                p.signal(ready, slot=c, scope="gpu", stream=0)
    else:
        gathered = p.symmetric("gathered", (W * m, K), dtype)
        sync = p.signal_pad("sync", 2)
        # stream 1 starts after stream 0 reached this call (so after the previous call's barrier)
        p.signal(sync, slot=0, scope="gpu", stream=0)
        p.wait(sync, 0, stream=1)
        with p.loop(0, count) as c:
            with p.loop(0, p.num_ranks) as d:
                q = (p.rank + d) % p.num_ranks
                p.copy(x, gathered, dst_rank=q, src_offsets=(c * chunk, 0),
                       dst_offsets=(p.rank * m + c * chunk, 0), sizes=(chunk, K), engine="copy_engine", stream=1)
                p.signal(ready, rank=q, slot=p.rank * count + c, stream=1)
    if gemm in ("jit", "jit_tma"):
        tma = gemm == "jit_tma"
        esize = {"bf16": 2, "f16": 2, "f32": 4}[dtype]
        if tma and (K * esize % 16 or n * esize % 16):
            raise ValueError(f"gemm='jit_tma' reads A and B through TMA descriptors, whose rows must be multiples of "
                             f"16 bytes (K = {K}, n = {n} of {dtype}); use gemm='jit' (pointer loads)")
        gemm_tiling, ag_gemm_tiles = _jit_gemm(tma)
        ptr = "*" + {"bf16": "bf16", "f16": "fp16", "f32": "fp32"}[dtype]
        # the tiles and stages ditron-tile's cost model picks for this GEMM on these SMs (like-for-like with
        # the built-in ag_gemm); gemm_fields override them (BLOCK_M, ..., num_warps, num_stages)
        tiles, options = gemm_tiling(W * m, n, K, dtype, target, num_sms)
        options = {**options, **{f: gemm_fields.pop(f) for f in ("num_warps", "num_stages") if f in gemm_fields}}
        tiles = {**tiles, **gemm_fields}
        if not tma:  # the K loop without masks where the K tile divides K
            tiles["EVEN_K"] = K % tiles["BLOCK_K"] == 0
        kernel = p.jit(ag_gemm_tiles, signature={"a_ptr": ptr, "b_ptr": ptr, "c_ptr": ptr, "ready_ptr": "*i32",
                                                 "M": "i32", "N": "i32", "K": "i32", "m": "i32", "epoch": "i32"},
                       constexprs={"CHUNK": chunk, **tiles}, wait={"arg": "ready_ptr", "value_arg": "epoch"},
                       **options)
        count_tiles = -(-W * m // tiles["BLOCK_M"]) * -(-n // tiles["BLOCK_N"])
        programs = min(num_sms or 132, count_tiles)
        p.launch(kernel, [gathered, w, y, ready, W * m, n, K, m, p.epoch], grid=programs, stream=0)
    elif gemm == "template" and W == 1:  # nothing arrives: the GEMM alone, in the grouped order of its tiles
        p.launch(p.gemm(m, n, K, in_dtype=dtype, **gemm_fields), [x, w, y], sm_budget=num_sms, stream=0)
    elif gemm == "template":
        tmpl = p.gemm(W * m, n, K, in_dtype=dtype, wait={"arg": "ready", "rows_per_slot": chunk}, rows_per_rank=m,
                      **gemm_fields)
        p.launch(tmpl, [gathered, w, y, ready, p.epoch], sm_budget=num_sms, tile_order="rank_rotated", stream=0)
    else:
        raise ValueError(f"gemm must be 'template', 'jit' or 'jit_tma', got {gemm!r}")
    if W > 1:  # join stream 1 into stream 0, then the end barrier
        p.signal(sync, slot=1, scope="gpu", stream=1)
        p.wait(sync, 1, stream=0)
        p.barrier()
    return p


def build(W: int, shapes, dtype: str, *, sm_budget: int, target: str, chunks: int | None = None,
          gemm: str = "template") -> dd.Program:
    """The program for a call on tensors x [m, K], w [K, n] of ``dtype`` (the builder of ``op``): ``chunks`` per
    shard (default: the cost model's, ditron.tiling.ag_gemm_chunk_rows; a count that does not divide m: one)."""
    (m, K), (_, n) = shapes
    if chunks is None:
        from ditron.tiling import ag_gemm_chunk_rows
        chunk = ag_gemm_chunk_rows(W, m, n, K, dtype, target, sms=sm_budget)
    else:
        chunk = m // chunks if m % chunks == 0 else m
    return program(W, m, K, n, dtype=dtype, chunk=chunk, num_sms=sm_budget, target=target, gemm=gemm)


def op(directory=None, target=None) -> UserOp:
    """AG+GEMM as an op on torch tensors, like ``ditron.ops.ag_gemm``: ``op()(xs, ws, world=world)``."""
    return UserOp("ag_gemm_user", build, arity=2, directory=directory, target=target)


def reference(per_rank_inputs):
    """y on every rank: the gathered x (rank order) times its own w (numpy, float64)."""
    import numpy as np
    gathered = np.concatenate([np.asarray(xs[0], dtype=np.float64) for xs in per_rank_inputs], axis=0)
    return [[gathered @ np.asarray(xs[1], dtype=np.float64)] for xs in per_rank_inputs]


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:5]]
    print(program(*args).to_mlir())
