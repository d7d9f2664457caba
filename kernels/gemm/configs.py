"""The GEMM template's tuning fields for a problem (``choose_config``, ``candidates``) and its split-K rule
(``split_for``, which ditron-tile's cost model assumes too). The target's numbers -- SM count, shared memory, TMA --
are its vendor facts (backends/*/facts.py)."""
from __future__ import annotations

import math

from ...backends.facts import target_facts
from ...dialects import ttir as T


def choose_config(m: int, n: int, k: int, dtype: str = "bf16", target: str = "cuda:90", *, b_trans: bool = False,
                  lda=None, ldb=None, ldc=None, out_dtype: str | None = None, fused: bool = False,
                  num_sms: int | None = None, pushes: bool = False, epilogue_bytes: int = 0,
                  fast_accum: bool = False) -> dict:
    """Tuning fields for a problem: the first of ``candidates``."""
    return candidates(m, n, k, dtype, target, b_trans=b_trans, lda=lda, ldb=ldb, ldc=ldc, out_dtype=out_dtype,
                      fused=fused, num_sms=num_sms, pushes=pushes, epilogue_bytes=epilogue_bytes,
                      fast_accum=fast_accum)[0]


def tma_loads(lda: int, ldb: int, elem_bytes: int) -> bool:
    """Whether A and B (rows lda / ldb elements apart) can be loaded by TMA: their rows 16-byte aligned."""
    return lda * elem_bytes % 16 == 0 and ldb * elem_bytes % 16 == 0


# The fp32 accumulator registers a thread may hold and still leave room for addresses, indices and the epilogue
# (a 128x256 tile on 8 warps: 128 a thread, 255 registers in all and no spill; twice that, precise fp8, spilled).
ACC_REGS = 128


def fp8_tile_fits(bm: int, bn: int, warps: int, fast_accum: bool, m_split: int = 1) -> bool:
    """Whether an fp8 tile on ``warps`` warps (sm_90 wgmma: a warpgroup of 4 warps per 64-row instruction) compiles
    without register spills or serialized wgmmas. Its accumulator takes bm * bn / (32 * warps) registers a thread;
    precise accumulation (not ``fast_accum``) adds a partial one for each 64-row wgmma block of a dot, read by the
    fp32 add while the dot's next block's wgmmas would run: so one 64-row block per warpgroup in each of the
    ``m_split`` dots (bm / m_split = 16 * warps), its partial (bn / 2 registers) and the accumulators within
    ACC_REGS + 64. Triton 3.6 / ptxas for sm_90a, 4096^3 e4m3 (test_fp8_speed.py checks the choices): precise
    128x256 w8 and 64x256 w4 spill 192 bytes; 256x128 w8 and 128x128 w4 in one dot compile to 252 registers but
    ptxas serializes every wgmma (C7514); 128x128 w8 142 registers, 64x128 w4 148, 256x128 w8 as two dots
    (m_split 2) 252 without serializing; fast 128x256 w8 255, no spill."""
    acc = bm * bn // (32 * warps)
    if fast_accum:
        return acc <= ACC_REGS
    return bm == 16 * warps * m_split and acc + bn // 2 <= ACC_REGS + 64


def fp8_dots(bm: int, warps: int) -> int:
    """The dots a precise fp8 tile of bm rows on ``warps`` warps runs as (its ``m_split``): one 64-row wgmma
    block per warpgroup in each (``fp8_tile_fits``)."""
    return max(1, bm // (16 * warps))


# The most registers ptxas gives a thread (sm_90): what a program of num_warps warps may hold
MAX_THREAD_REGS = 255


def programs_per_sm(bm: int, bn: int, bk: int, warps: int, stages: int, dtype: str, out_dtype: str, store: str,
                    esplit: int, fast_accum: bool, target: str = "cuda:90") -> int:
    """Programs of a persistent GEMM that share one SM (its ``programs_per_sm``): 2 for a precise fp8 tile of two
    64-row dots on one warp group (``fp8_dots`` 2 on 4 warps: 128x128) whose two programs' shared memory (the
    stages, C's TMA staging, the barriers) and registers (MAX_THREAD_REGS a thread) fit the SM, else 1. Precise
    accumulation adds each dot's partial accumulator into the fp32 one right after its wgmmas, and ptxas waits for
    them first: one warp group's tensor-core work stalls at every K step, and a second program's wgmmas fill the
    gaps. H200, e4m3 precise, per-tensor scales (results/fp8.csv, the e4m3v rows of bench_fp8 --variants):
    128x128 on 4 warps, 3 stages, 264 programs 0.877x torch._scaled_mm geomean (6 % to 14 % faster per shape
    than 256x128 on 8 warps as two dots, 0.798x; 128x128 on 8 warps 0.752x); 2 stages (0.658x), 64x128 on 4 warps
    two (0.687-0.701x) or three a SM (0.595x) and an unflattened tile loop (0.833x) lost."""
    facts = target_facts(target)
    if not dtype.startswith("fp8") or fast_accum or warps != 4 or fp8_dots(bm, warps) != 2 or not facts.tma:
        return 1
    smem = stages * (bm + bn) * bk * T.DTYPE_BYTES[dtype] + facts.barrier_smem
    if store == "tma":
        smem += bm * bn // esplit * T.DTYPE_BYTES[out_dtype]
    regs = warps * facts.warp_size * MAX_THREAD_REGS
    return 2 if 2 * smem <= facts.smem_per_sm and 2 * regs <= facts.regs_per_sm else 1


def split_for(tiles: int, k_tiles: int, sms: int) -> int:
    """Split-K for a grid of ``tiles`` tiles of ``k_tiles`` K steps on ``sms`` SMs: as many K slices as fill the
    SMs with one wave of tiles * split programs, each slice at least 8 K steps long and none empty (1: no split)."""
    split = max(1, min(sms // max(tiles, 1), k_tiles // 8))
    while split > 1 and (math.ceil(k_tiles / split) * (split - 1) >= k_tiles or tiles * split > sms):
        split -= 1
    return split


def candidates(m: int, n: int, k: int, dtype: str = "bf16", target: str = "cuda:90", *, b_trans: bool = False,
               lda=None, ldb=None, ldc=None, out_dtype: str | None = None, fused: bool = False,
               num_sms: int | None = None, pushes: bool = False, epilogue_bytes: int = 0,
               fast_accum: bool = False) -> list[dict]:
    """Configs worth trying, best guess first. The rule: on a target with TMA (sm_90), TMA loads when rows are
    16-byte aligned (TMA stores when C's rows are 128-byte aligned); 128x256 tiles (4 stages with a split
    epilogue) in a persistent grid when there are at least as many tiles as SMs; below that, smaller tiles through pointers and split-K until about one wave of programs
    fills the SMs. ``fused`` (per-tile wait/notify, or a push) keeps the tile loop unflattened and stores through pointers;
    a GEMM that waits or notifies per tile neither splits K nor leaves TMA loads; ``pushes`` (GEMM+AR's push,
    done by the last split) does both. ``epilogue_bytes``: bytes per C element of a fused epilogue's widest [m, n]
    operand, which Triton stages through shared memory to the accumulator's layout (the stages get what is left:
    a residual add beside 4 stages of 128x256 tiles asked for 262 KB on an H200). fp8 (BLOCK_K 128) takes only
    the tiles ``fp8_tile_fits`` passes for its accumulation (``fast_accum``): precise accumulation with TMA leads
    with 128x128 on one warp group as two 64-row dots, 3 stages, two programs an SM (``programs_per_sm``), then
    256x128 as two dots and 128x128 on 8 warps; its lead tile (not 128x256) sets the one-wave threshold: at
    1000x4096x4096 there are 128 tiles of 128x256 (fewer than the SMs: the small-tile rule ran pointer loads at
    0.45x torch._scaled_mm) but 256 of 128x128 (a compute-bound GEMM, persistent with TMA)."""
    out_dtype = out_dtype or ("bf16" if dtype.startswith("fp8") else dtype)
    facts = target_facts(target)
    sms = num_sms or facts.num_sms
    in_bytes, out_bytes = T.DTYPE_BYTES[dtype], T.DTYPE_BYTES[out_dtype]
    lda, ldb, ldc = lda or k, ldb or (k if b_trans else n), ldc or n
    bk = 128 if in_bytes == 1 else 64
    if facts.vendor == "hip":  # AMD's stream pipeliner: two stages, one of them in registers
        base = dict(group_m=8, num_sms=sms, loads="pointer", store="pointer", epilogue_split=1, flatten=False,
                    split_k=1, persistent=False, num_stages=2)
        out = [dict(base, block_m=256, block_n=256, block_k=bk // 2 if in_bytes == 2 else bk, num_warps=8),
               dict(base, block_m=128, block_n=128, block_k=bk, num_warps=4)]
        if m <= 128:
            out.insert(0, dict(base, block_m=64, block_n=128, block_k=bk, num_warps=4))
        return out
    if not facts.tma:  # Ampere-class: pointer loads, cp.async pipelining, mma.sync
        base = dict(group_m=8, num_sms=sms, loads="pointer", store="pointer", epilogue_split=1, flatten=False,
                    split_k=1, persistent=False)
        return [dict(base, block_m=128, block_n=256, block_k=bk // 2, num_warps=8, num_stages=3),
                dict(base, block_m=128, block_n=128, block_k=bk // 2, num_warps=4, num_stages=4)]
    smem = facts.smem_per_sm - facts.barrier_smem  # shared memory per block, less room for barriers
    tma = tma_loads(lda, ldb, in_bytes)
    # C through TMA only where its rows start on 128-byte lines: a TMA store of rows off them ran 3-5 % slower than
    # pointer stores (H200, 3072x5000x3072 155.7 against 147.9 us, 3000x5000x3000 179.7 / 171.4, 12345x1000x3000
    # 147.0 / 142.4; results/README.md, tune_candidates.csv)
    tma_store = tma and ldc * out_bytes % 128 == 0 and not fused
    loads = "tma" if tma else "pointer"

    def cfg(bm, bn, stages=None, warps=8, persistent=True, split=1, esplit=None, flatten=None, group=8,
            max_stages=4, pointers=False, m_split=1, shared=False):
        store = "tma" if tma_store and split == 1 and not pointers else "pointer"
        esplit = esplit if esplit is not None else (2 if store == "tma" and bn >= 128 else 1)
        if store != "tma":
            esplit = 1
        if stages is None:  # as many stages as shared memory holds, up to max_stages
            epilogue = (bm * bn // esplit * out_bytes if store == "tma" else 0) + bm * bn // esplit * epilogue_bytes
            stages = min(max_stages, (smem - epilogue) // ((bm + bn) * bk * in_bytes))
        flat = (not fused and persistent) if flatten is None else flatten
        out = dict(block_m=bm, block_n=bn, block_k=bk, group_m=group, num_warps=warps, num_stages=stages,
                   persistent=persistent, num_sms=sms, loads="pointer" if pointers else loads, store=store,
                   epilogue_split=esplit, flatten=flat and persistent, split_k=split)
        if m_split > 1:
            out["m_split"] = m_split
        pps = programs_per_sm(bm, bn, bk, warps, stages, dtype, out_dtype, store, esplit, fast_accum, target) \
            if shared and persistent and split == 1 and not fused else 1
        if pps > 1:
            out["programs_per_sm"] = pps
        return out

    def tiles(bm, bn):
        return math.ceil(m / bm) * math.ceil(n / bn)

    k_tiles = math.ceil(k / bk)
    fp8 = dtype.startswith("fp8")
    if fp8 and not fast_accum:  # one 64-row wgmma block per warpgroup (fp8_tile_fits)
        big = [cfg(128, 128, warps=4, max_stages=3, m_split=2, shared=True), cfg(256, 128, m_split=2),
               cfg(128, 128), cfg(128, 128, max_stages=6), cfg(128, 128, flatten=False), cfg(128, 128, esplit=1),
               cfg(128, 128, persistent=False), cfg(64, 128, warps=4)]
        if not tma:
            big = [c for c in big if c.get("m_split", 1) == 1]
        if fused:
            big = [cfg(128, 128), cfg(64, 128, warps=4)]
    else:
        big = [cfg(128, 256), cfg(256, 128), cfg(128, 256, esplit=1), cfg(128, 256, flatten=False),
               cfg(128, 256, persistent=False), cfg(128, 128, warps=4, group=16)]
        if fused:
            big = [cfg(128, 256), cfg(128, 128, warps=4)]
    if fp8:
        big = [c for c in big if fp8_tile_fits(c["block_m"], c["block_n"], c["num_warps"], fast_accum,
                                               c.get("m_split", 1))]
    if tiles(big[0]["block_m"], big[0]["block_n"]) >= sms:
        return big
    # fewer tiles than SMs: memory-bound; smaller tiles, deeper pipelines, then split-K, aiming at one full wave
    small: list[dict] = []
    for bm, bn, warps in ((128, 128, 8), (64, 128, 4), (128, 64, 4), (64, 64, 4), (128, 256, 8), (64, 256, 4)):
        if fp8 and not fast_accum:
            warps = bm // 16  # one 64-row wgmma block per warpgroup
        if fp8 and not fp8_tile_fits(bm, bn, warps, fast_accum):
            continue
        t = tiles(bm, bn)
        if m <= 64 and bm > 64:
            continue
        split = 1 if fused and not pushes else split_for(t, k_tiles, sms)
        small.append(cfg(bm, bn, warps=warps, persistent=split == 1 and t > sms, split=split, max_stages=6,
                         pointers=pushes or not (fused or fp8)))
    # rank: programs close to one wave first. Pointer loads and stores: one wave of short programs pays for
    # creating TMA descriptors at every program's start (H200, warm L2, M = 128: 64x64 s6 25.1 us with pointers
    # against 27.1 with TMA at N, K = 4096, 7168; 64x128 s6 62.4 against 64.1 at 8192, 14336); beside the two
    # best, their twins with the other loads (for the tuner). A GEMM that waits per tile keeps TMA: AG+GEMM 70B
    # M = 128 (128x128 tiles, 128 K steps) ran 91.5-92.7 us with pointers against 90.1-90.9 with TMA. fp8 keeps
    # TMA first too: its one pointer-load grid (1000x4096x4096, 128x256 tiles) ran 0.45x torch._scaled_mm where
    # the TMA kernels of the same tiles ran 0.69-0.71x (H200, results/fp8.csv before fp8_tile_fits).
    small.sort(key=lambda c: abs(1 - tiles(c["block_m"], c["block_n"]) * c["split_k"] / sms))
    twins = [dict(c, loads="tma" if c["loads"] == "pointer" else "pointer", store="pointer", epilogue_split=1)
             for c in small[:2] if tma]
    return small[:2] + twins + small[2:] + big[:2]
