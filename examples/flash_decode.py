"""Distributed flash-decode written only with the public API: one ditron.language kernel per rank, the KV cache
sharded by sequence over the ranks.

Decode attention: one new query token per sequence (batch B), HQ query heads sharing HKV key/value heads (GQA,
G = HQ / HKV query heads per KV head), head dim D. The cache of L positions is cut into W contiguous shards, rank r
holding ``shard_lengths(L, W)[r]`` positions (L need not divide by W) in a buffer of capacity S = ceil(L / W).

One launch of ``flash_decode_kernel`` per rank, persistent over its programs (all resident at once), in two phases:

1. **split-KV attention** over this rank's shard: the tiles are (sequence b, KV head h, split s) -- B x HKV x
   ``splits`` of them, the splits cutting the shard's blocks of ``BLOCK_N`` positions into even ranges -- visited
   round-robin by the programs. A tile computes, for the G query heads of KV head h, the softmax-weighted sum of its
   V rows (online softmax over blocks of BLOCK_N keys, two ``tl.dot`` per block) and the log-sum-exp of its
   scores: a partial (o_j, lse_j), j = rank * splits + s. It stores the partial into the symmetric buffers
   ``part_o`` / ``part_lse`` of *every* rank (``dl.symm_at``) and sets slot (b * HKV + h) * W * splits + j of every
   rank's pad to the epoch (``dl.notify``, release: the partial is visible to whoever sees the epoch);
2. **combine**: the programs take tiles of HEADS query heads of one sequence round-robin; for each, one ``dl.wait``
   on the tensor of the W x splits slots (it ends when the least holds the epoch), then ``dl.consume_token`` on the
   partials' pointers (so no compiler hoists the loads above the spin) and every partial at once, rescaled:
   o = sum_j exp(lse_j - m) o_j / sum_j exp(lse_j - m), m the max; the result o [B, HQ, D] (and its log-sum-exp)
   on every rank. ``combine_tile`` sizes the tile (all partials, as many heads as keep it in registers).

Phase 1 never waits, so the persistent programs cannot deadlock each other; every rank's programs must be resident
at once because phase 2 spins (``plan`` keeps the grid within the SMs a rank may hold). Calls need no barrier
between them: in the device program the partial buffers rotate (``rotate=True``: call e uses copy e % 2), and rank
p can only write call e + 2's partials into my copy e % 2 after finishing its call e + 1 combine, which waited for
my call e + 1 partials, which I pushed after my call e had finished reading; the slots hold the epoch (eager) or
are zeroed per parity by the executor (CUDA-graph mode), and every slot written into my pad in a call is waited for
by my combine in that call. (The executor's graph mode in a *real* world wants a program that ends with a barrier:
``barrier=True``.)

Three ways to run it:

    python examples/flash_decode.py [W ...]      # the CPU simulator at W ranks (default 1 2 3 4 8), against torch
    dl.run_virtual(flash_decode_kernel, grid, make_args(...)[0], world=W)        # one GPU, one launch
    flash_decode(q, k_shard, v_shard, kv_len=L, world=World.virtual(2))         # torch tensors: a device program
                                                                                # (ditron.device) through the
                                                                                # executor, virtual or real worlds
"""
from __future__ import annotations

import math
import sys
from typing import Any, Sequence

import numpy as np
import triton.language as tl

import ditron
import ditron.language as dl

BLOCK_N = 64          # keys per inner block (tl.dot's N, then K); a split is a range of whole blocks
NUM_WARPS = 4
NUM_STAGES = 4
COMBINE_ELEMENTS = 8192   # fp32 partial-output values a combine tile loads at once (64 registers a thread at 4 warps)


@ditron.jit
def flash_decode_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, part_o_ptr, part_lse_ptr, pad_ptr, B, kv_len, S,
                        splits, epoch, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                        BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr,
                        HEADS: tl.constexpr, SCALE: tl.constexpr):
    """q [B, HQ, D], k / v [B, HKV, S, D] (this rank's shard: positions 0 .. kv_len - 1 valid) -> o [B, HQ, D],
    lse [B, HQ] (natural log) on every rank. part_o [W * splits, B, HQ, D] / part_lse [W * splits, B, HQ] (fp32,
    symmetric) hold the partials; pad_ptr has B * HKV * W * splits slots. BLOCK_P >= W * splits (the partials a
    combine tile takes at once), HEADS: the query heads of a combine tile (a power of two dividing HQ / HKV)."""
    me = dl.rank()
    world = dl.num_ranks()
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    G = HQ // HKV
    parts = world * splits
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    gmask = offs_g < G
    qk_scale = SCALE * 1.4426950408889634            # scores in base 2: exp(x) = exp2(x * log2(e))
    blocks = tl.cdiv(kv_len, BLOCK_N)                # split s takes blocks [s * blocks // splits, ...)

    # ---- phase 1: split-KV attention over this rank's shard, each partial pushed to every rank
    for tile in range(pid, B * HKV * splits, programs):
        s = tile % splits
        bh = tile // splits                          # = b * HKV + h
        b = bh // HKV
        h = bh % HKV
        heads = b * HQ + h * G + offs_g              # the G query heads of KV head h
        q = tl.load(tl.multiple_of(q_ptr + heads[:, None] * D + offs_d[None, :], [1, 16]), mask=gmask[:, None],
                    other=0.0)
        row0 = bh.to(tl.int64) * S                   # first row of (b, h) in k / v (int64: caches pass 2**31)
        lo = (s * blocks // splits) * BLOCK_N
        hi = tl.minimum(((s + 1) * blocks // splits) * BLOCK_N, kv_len)
        m_i = tl.full((BLOCK_G,), float("-inf"), tl.float32)
        l_i = tl.zeros((BLOCK_G,), tl.float32)
        acc = tl.zeros((BLOCK_G, D), tl.float32)
        for start in range(lo, hi, BLOCK_N):
            pos = start + offs_n
            nmask = pos < hi
            rows = (row0 + pos) * D
            # rows of D elements from 16-byte aligned arrays (the heap's, checked by flash_decode): vector loads,
            # and Triton's pipeliner turns them into asynchronous copies num_stages deep
            k = tl.load(tl.multiple_of(k_ptr + rows[:, None] + offs_d[None, :], [1, 16]), mask=nmask[:, None],
                        other=0.0)
            scores = tl.dot(q, tl.trans(k)) * qk_scale
            scores = tl.where(nmask[None, :], scores, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(scores, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(scores - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(tl.multiple_of(v_ptr + rows[:, None] + offs_d[None, :], [1, 16]), mask=nmask[:, None],
                        other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        filled = l_i > 0.0                           # an empty split (a short shard) contributes weight 0
        o_part = acc / tl.where(filled, l_i, 1.0)[:, None]
        lse_part = tl.where(filled, (m_i + tl.log2(tl.where(filled, l_i, 1.0))) * 0.6931471805599453,
                            float("-inf"))
        j = me * splits + s
        at_o = (j * B * HQ + heads)[:, None] * D + offs_d[None, :]
        at_lse = j * B * HQ + heads
        for i in range(0, world):
            peer = (me + i) % world
            tl.store(dl.symm_at(part_o_ptr, peer) + at_o, o_part, mask=gmask[:, None])
            tl.store(dl.symm_at(part_lse_ptr, peer) + at_lse, lse_part, mask=gmask)
            dl.notify(pad_ptr, bh * parts + j, epoch, peer)

    # ---- phase 2: combine, on every rank; a tile is HEADS query heads of one sequence, all partials at once
    offs_p = tl.arange(0, BLOCK_P)
    offs_h = tl.arange(0, HEADS)
    pmask = offs_p < parts
    for tile in range(pid, B * HQ // HEADS, programs):
        head0 = tile * HEADS                         # = b * HQ + first head; the tile's heads share a KV head
        bh = head0 // G                              # = b * HKV + h, as head0 // HQ == b and head0 % HQ // G == h
        token = dl.wait(pad_ptr, bh * parts + tl.minimum(offs_p, parts - 1), epoch)    # every partial is there
        at_lse = offs_p[:, None] * B * HQ + head0 + offs_h[None, :]                    # [BLOCK_P, HEADS]
        lse_j = tl.load(dl.consume_token(part_lse_ptr, token) + at_lse, mask=pmask[:, None], other=float("-inf"))
        at_o = at_lse[:, :, None] * D + offs_d[None, None, :]                          # [BLOCK_P, HEADS, D]
        o_j = tl.load(dl.consume_token(part_o_ptr, token) + at_o, mask=pmask[:, None, None], other=0.0)
        m = tl.max(lse_j, 0)
        ref = tl.where(m == float("-inf"), 0.0, m)
        w = tl.exp(lse_j - ref[None, :])             # exp(lse_j - max): 0 for empty splits and padding parts
        den = tl.sum(w, 0)
        ok = den > 0.0
        out = tl.sum(w[:, :, None] * o_j, 0) / tl.where(ok, den, 1.0)[:, None]
        at_out = (head0 + offs_h)[:, None] * D + offs_d[None, :]
        tl.store(o_ptr + at_out, out.to(o_ptr.dtype.element_ty))
        tl.store(lse_ptr + head0 + offs_h, ref + tl.log(tl.where(ok, den, 1.0)))


# ------------------------------------------------------------------------------------------------ the plan

def shard_lengths(L: int, W: int) -> list[int]:
    """Positions per rank: contiguous shards, as even as can be (the first L % W ranks one more)."""
    return [(L + W - 1 - r) // W for r in range(W)]


def shard_starts(L: int, W: int) -> list[int]:
    lengths = shard_lengths(L, W)
    return [sum(lengths[:r]) for r in range(W)]


def capacity(L: int, W: int) -> int:
    """S: the positions every rank's (symmetric, same-shape) shard buffer holds."""
    return max(1, -(-L // W))


def block_g(HQ: int, HKV: int) -> int:
    """Query-head rows of a tile: G padded to a power of two >= 16 (tl.dot's smallest M)."""
    return max(16, 1 << (HQ // HKV - 1).bit_length())


def plan(B: int, HKV: int, L: int, W: int, budget: int, block_n: int = BLOCK_N) -> tuple[int, int]:
    """(splits per rank, programs per rank): enough splits that the B x HKV x splits tiles fill the ``budget``
    programs a rank may keep resident (never more splits than the shard has blocks), then the fewest programs
    doing the same number of waves (every program gets ceil or floor of the same share of tiles)."""
    if budget < 1:
        raise ValueError(f"flash_decode: the SM budget must be positive, got {budget}")
    pairs = B * HKV
    blocks = max(1, -(-capacity(L, W) // block_n))
    splits = max(1, min(budget // pairs, blocks))
    tiles = pairs * splits
    waves = -(-tiles // budget)
    return splits, -(-tiles // waves)


def check_shapes(B: int, HQ: int, HKV: int, D: int, L: int, W: int) -> None:
    if min(B, HQ, HKV, D, L, W) < 1:
        raise ValueError(f"flash_decode: B, HQ, HKV, D, L and W must be positive (B={B} HQ={HQ} HKV={HKV} D={D} "
                         f"L={L} W={W})")
    if HQ % HKV:
        raise ValueError(f"flash_decode: {HQ} query heads do not group over {HKV} KV heads")
    if D < 16 or D & (D - 1):
        raise ValueError(f"flash_decode: head dim {D} must be a power of two >= 16 (a tl.dot operand)")


def combine_tile(HQ: int, HKV: int, D: int, parts: int) -> tuple[int, int]:
    """(BLOCK_P, HEADS) of a combine tile: every one of the ``parts`` partials at once (BLOCK_P, a power of two),
    for as many query heads of one KV head as keep the tile's partial outputs within COMBINE_ELEMENTS values
    (HEADS: a power of two dividing G)."""
    block_p = 1 << (parts - 1).bit_length()
    G = HQ // HKV
    heads = 1
    while G % (2 * heads) == 0 and block_p * 2 * heads * D <= COMBINE_ELEMENTS:
        heads *= 2
    return block_p, heads


def constexprs(HQ: int, HKV: int, D: int, parts: int, scale: float | None = None,
               block_n: int = BLOCK_N) -> dict[str, Any]:
    """The kernel's constexprs for a world whose ranks push ``parts`` = W x splits partials."""
    block_p, heads = combine_tile(HQ, HKV, D, parts)
    return {"HQ": HQ, "HKV": HKV, "D": D, "BLOCK_G": block_g(HQ, HKV), "BLOCK_N": block_n, "BLOCK_P": block_p,
            "HEADS": heads, "SCALE": float(scale if scale is not None else 1.0 / math.sqrt(D))}


# ------------------------------------------------------------------------- numpy arguments (simulate, run_virtual)

def shard_kv(k, v, W: int):
    """The whole cache k, v [B, HKV, L, D] (numpy or torch) as W shards, each padded to the capacity S (zeros
    past its length): ([k_0, ...], [v_0, ...])."""
    L = k.shape[2]
    S = capacity(L, W)
    ks, vs = [], []
    for start, n in zip(shard_starts(L, W), shard_lengths(L, W)):
        for whole, out in ((k, ks), (v, vs)):
            part = whole[:, :, start:start + n]
            if isinstance(part, np.ndarray):
                pad = np.zeros(part.shape[:2] + (S - n,) + part.shape[3:], part.dtype)
                out.append(np.ascontiguousarray(np.concatenate([part, pad], axis=2)))
            else:
                import torch
                pad = part.new_zeros(part.shape[:2] + (S - n,) + part.shape[3:])
                out.append(torch.cat([part, pad], dim=2).contiguous())
    return ks, vs


def make_inputs(B: int, HQ: int, HKV: int, D: int, L: int, seed: int = 0, dtype=np.float32):
    """q [B, HQ, D], k, v [B, HKV, L, D]: the whole problem (numpy, standard normal)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, HQ, D)).astype(dtype)
    k = rng.standard_normal((B, HKV, L, D)).astype(dtype)
    v = rng.standard_normal((B, HKV, L, D)).astype(dtype)
    return q, k, v


def make_args(world: int, q, k, v, *, budget: int, scale: float | None = None, block_n: int = BLOCK_N,
              epoch: int = 1):
    """(per-rank arguments of flash_decode_kernel for simulate / run_virtual, grid) for the whole problem q, k, v
    (numpy) sharded over ``world`` ranks, with at most ``budget`` programs per rank."""
    B, HQ, D = q.shape
    HKV, L = k.shape[1], k.shape[2]
    check_shapes(B, HQ, HKV, D, L, world)
    splits, programs = plan(B, HKV, L, world, budget, block_n)
    ks, vs = shard_kv(k, v, world)
    parts = world * splits
    args = [dict(q_ptr=q, k_ptr=ks[r], v_ptr=vs[r], o_ptr=np.zeros((B, HQ, D), q.dtype),
                 lse_ptr=np.zeros((B, HQ), np.float32), part_o_ptr=np.zeros((parts, B, HQ, D), np.float32),
                 part_lse_ptr=np.zeros((parts, B, HQ), np.float32),
                 pad_ptr=np.zeros(B * HKV * world * splits, np.int32), B=B, kv_len=shard_lengths(L, world)[r],
                 S=capacity(L, world), splits=splits, epoch=epoch,
                 **constexprs(HQ, HKV, D, world * splits, scale, block_n))
            for r in range(world)]
    return args, (programs,)


# --------------------------------------------------------------------------------------------- references

def reference(q, k, v, scale: float | None = None):
    """torch's scaled_dot_product_attention on the whole cache, in float32 (CPU or GPU, numpy or torch in):
    (o [B, HQ, D], lse [B, HQ]) as float32 torch tensors."""
    import torch
    q, k, v = (torch.as_tensor(x).float() for x in (q, k, v))
    B, HQ, D = q.shape
    HKV = k.shape[1]
    scale = scale if scale is not None else 1.0 / math.sqrt(D)
    o = torch.nn.functional.scaled_dot_product_attention(q[:, :, None, :], k, v, scale=scale,
                                                         enable_gqa=HKV != HQ)[:, :, 0, :]
    scores = torch.einsum("bhgd,bhld->bhgl", q.view(B, HKV, HQ // HKV, D), k) * scale   # query head h*G+g: KV h
    return o, torch.logsumexp(scores, dim=-1).reshape(B, HQ)


def expected_outputs(world: int, q, k, v, scale: float | None = None):
    """simulate's reference: every rank holds o and lse of the whole cache."""
    o, lse = reference(q, k, v, scale)
    return [{"o_ptr": o.numpy(), "lse_ptr": lse.numpy()} for _ in range(world)]


# ---------------------------------------------------------------------- the device program (torch tensors)

def program(W: int, B: int, HQ: int, HKV: int, D: int, L: int, *, dtype: str = "bf16", sm_budget: int = 132,
            target: str = "cuda:90", scale: float | None = None, block_n: int = BLOCK_N, num_warps: int = NUM_WARPS,
            num_stages: int = NUM_STAGES, barrier: bool = False):
    """The flash-decode device program (ditron.device) for W ranks: inputs q [B, HQ, D], k, v [B * HKV, S, D] (S =
    capacity(L, W); this rank's shard, rank r's first shard_lengths(L, W)[r] positions valid); outputs o
    [B, HQ, D] (dtype) and lse [B, HQ] (f32). One launch; ``barrier``: end with a barrier of every rank (not
    needed between calls: the partials rotate, see the module doc; CUDA-graph mode in a real world wants it)."""
    import ditron.device as dd
    check_shapes(B, HQ, HKV, D, L, W)
    S = capacity(L, W)
    splits, programs = plan(B, HKV, L, W, sm_budget, block_n)
    ptr = "*" + {"bf16": "bf16", "f16": "fp16", "f32": "fp32"}[dtype]
    p = dd.Program("flash_decode", W, target=target)
    q = p.input("q", (B, HQ, D), dtype)
    k = p.input("k", (B * HKV, S, D), dtype)         # buffers have rank <= 3: (b, h) flattened, as the kernel
    v = p.input("v", (B * HKV, S, D), dtype)         # indexes them
    o = p.output("o", (B, HQ, D), dtype)
    lse = p.output("lse", (B, HQ), "f32")
    part_o = p.symmetric("part_o", (W * splits, B * HQ, D), "f32", rotate=True)
    part_lse = p.symmetric("part_lse", (W * splits, B * HQ), "f32", rotate=True)
    ready = p.signal_pad("ready", B * HKV * W * splits)
    kernel = p.jit(flash_decode_kernel,
                   signature={"q_ptr": ptr, "k_ptr": ptr, "v_ptr": ptr, "o_ptr": ptr, "lse_ptr": "*fp32",
                              "part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "pad_ptr": "*i32", "B": "i32",
                              "kv_len": "i32", "S": "i32", "splits": "i32", "epoch": "i32"},
                   constexprs=constexprs(HQ, HKV, D, W * splits, scale, block_n),
                   wait={"arg": "pad_ptr", "value_arg": "epoch"},
                   num_warps=num_warps, num_stages=num_stages)
    kv_len = (L + W - 1 - p.rank) // W               # shard_lengths(L, W)[rank]
    p.launch(kernel, [q, k, v, o, lse, part_o, part_lse, ready, B, kv_len, S, splits, p.epoch], grid=programs)
    if barrier:
        p.barrier()
    return p


def build(W: int, shapes, dtype: str, *, sm_budget: int, target: str, kv_len: int, **options: Any):
    """The program for a call on tensors q [B, HQ, D], k, v [B * HKV, S, D] (the builder of ``op``)."""
    (B, HQ, D), (BH, S, _), _ = shapes
    HKV = BH // B
    if S != capacity(kv_len, W):
        raise ValueError(f"flash_decode: the shards hold {S} positions; a cache of {kv_len} over {W} ranks needs "
                         f"{capacity(kv_len, W)} (shard_kv pads them)")
    return program(W, B, HQ, HKV, D, kv_len, dtype=dtype, sm_budget=sm_budget, target=target, **options)


def op(directory=None, target=None):
    """Flash-decode as an op on torch tensors (ditron.user_ops.UserOp), k and v as [B * HKV, S, D]: ``op()(qs, ks,
    vs, world=World.virtual(W), kv_len=L)`` -> [[o, lse] per rank] (virtual), ``op()(q, k, v,
    world=World.from_torch(), kv_len=L)`` -> [o, lse] (real)."""
    from ditron.user_ops import UserOp
    return UserOp("flash_decode", build, arity=3, directory=directory, target=target)


_OP = None


def flash_decode(q, k_shard, v_shard, *, kv_len: int, world, graph: bool = False, user_op=None, **options: Any):
    """Decode attention of q over a KV cache of kv_len positions sharded by sequence over the ranks of ``world``
    (a ditron.World): q [B, HQ, D], k_shard / v_shard [B, HKV, S, D] this rank's shard (``shard_kv``); in a virtual
    world lists of one tensor per rank. Returns (o, lse): o [B, HQ, D] in q's dtype, lse [B, HQ] float32 (lists
    per rank in a virtual world). ``options``: program()'s (scale, block_n, num_warps, num_stages, barrier)."""
    global _OP
    if user_op is None:
        _OP = _OP or op()
        user_op = _OP
    def aligned(x):       # the kernel's loads assume 16-byte aligned rows: a misaligned view is copied
        return x if x.data_ptr() % 16 == 0 else x.clone()

    def flat(t):
        if world.is_virtual:
            return [aligned(x.contiguous()).reshape(-1, *x.shape[2:]) for x in t]
        return aligned(t.contiguous()).reshape(-1, *t.shape[2:])
    q = [aligned(x.contiguous()) for x in q] if world.is_virtual else aligned(q.contiguous())
    result = user_op(q, flat(k_shard), flat(v_shard), world=world, graph=graph, kv_len=kv_len, **options)
    if world.is_virtual:
        return [r[0] for r in result], [r[1] for r in result]
    return result[0], result[1]


# ---------------------------------------------------------------------------------------------------- main

def simulate(world: int, B: int = 2, HQ: int = 8, HKV: int = 2, D: int = 16, L: int = 37, *, budget: int = 3,
             block_n: int = 16, seed: int = 0, dtype=np.float32, rtol: float = 1e-4, atol: float = 1e-4):
    """The kernel on the CPU simulator at ``world`` ranks against torch's SDPA on the whole cache."""
    q, k, v = make_inputs(B, HQ, HKV, D, L, seed=seed, dtype=dtype)
    args, grid = make_args(world, q, k, v, budget=budget, block_n=block_n)
    return dl.simulate(flash_decode_kernel, grid, args, world=world, seed=seed,
                       reference=expected_outputs(world, q, k, v), rtol=rtol, atol=atol)


def main(worlds: Sequence[int]) -> int:
    for world in worlds:
        result = simulate(world)
        print(result.summary())
        if not result.ok:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main([int(a) for a in sys.argv[1:]] or [1, 2, 3, 4, 8]))
