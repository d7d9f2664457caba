"""The performance model of docs/design.md §7, over the vendor facts of each target.

Used by ``ditron-tile`` to pick chunk sizes, copy engines, SM splits and GEMM tile configurations, and by the
benchmarks to report achieved time as a fraction of the ideal overlapped time. Pure Python, no MLIR, no torch.

Times are seconds, sizes bytes, rates per second. The numbers -- peaks, latencies, shared memory, SM counts, GEMM
tile candidates -- are the vendor facts of backends/*/facts.py, each saying where it comes from (``source``);
this module holds only the formulas. The model is deliberately simple — a roofline per GEMM tile with wave
quantization, a latency + bandwidth model per chunk copy — and its job is to rank choices, not to predict to the
microsecond.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .backends.facts import GemmConfig, TargetFacts, all_targets, lookup
from .errors import TargetError


@dataclass(frozen=True)
class TargetPeaks:
    """What one GPU of a target can do, as the model reads it (``from_facts``: the target's vendor facts; a
    virtual world overrides ``num_sms``). ``link_topology``: "switch" (NVSwitch: one GPU's peer traffic shares
    ``link_bw`` however many peers it talks to) or "mesh" (fully connected point-to-point links: ``link_bw`` per
    peer, up to ``links`` peers at once)."""

    target: str
    gemm_flops: float          # dense bf16 GEMM FLOP/s a good kernel reaches
    link_bw: float             # one-direction peer bandwidth of a copy-engine pull (per link on a mesh)
    hbm_copy_bw: float         # device-to-device copy bandwidth
    num_sms: int
    smem_per_sm: int           # shared memory (LDS) per SM/CU usable by one CTA, bytes
    sm_copy_bw_per_sm: float   # bytes/s one SM moves over the link in a copy/reduce kernel
    link_topology: str = "switch"
    links: int = 1
    copy_latency: float = 3e-6     # per chunk copy enqueued on a stream
    signal_latency: float = 1e-6   # a stream signal/wait pair
    hop_latency: float = 10e-6     # one chunk handed between GPUs by streams: a wait, a copy and a signal
    launch_latency: float = 4e-6   # a kernel launch
    fp8_gemm_flops: float = 0.0    # dense fp8 GEMM FLOP/s (0: no fp8 tensor cores; the model uses gemm_flops)
    tma_line: int = 0              # bytes a TMA-loaded operand row should start on (0: no TMA loads)
    tma_off_line: tuple[float, float, float] = (0.0, 0.0, 0.0)  # extra GEMM time, A / B / both rows off lines
    source: str = ""

    @classmethod
    def from_facts(cls, f: TargetFacts) -> "TargetPeaks":
        return cls(f.name, gemm_flops=f.gemm_flops, link_bw=f.link_bw, hbm_copy_bw=f.hbm_copy_bw, num_sms=f.num_sms,
                   smem_per_sm=f.smem_per_sm, sm_copy_bw_per_sm=f.sm_copy_bw_per_sm, link_topology=f.link_topology,
                   links=f.links, copy_latency=f.copy_latency, signal_latency=f.signal_latency,
                   hop_latency=f.hop_latency, launch_latency=f.launch_latency, fp8_gemm_flops=f.fp8_gemm_flops,
                   tma_line=f.tma_line if f.tma else 0, tma_off_line=f.tma_off_line, source=f.source)

    def gemm_rate(self, elem_bytes: int) -> float:
        """The dense GEMM FLOP/s of operands of elem_bytes bytes: fp8's own rate for 1-byte ones where the target
        has fp8 tensor cores, else the bf16 rate."""
        return self.fp8_gemm_flops if elem_bytes == 1 and self.fp8_gemm_flops else self.gemm_flops

    def peer_bw(self, peers: int) -> float:
        """Aggregate one-direction bandwidth when pulling from ``peers`` ranks at once."""
        if peers <= 0:
            return self.link_bw
        if self.link_topology == "mesh":
            return self.link_bw * min(peers, self.links)
        return self.link_bw

    def sm_link_bw(self, sms: int, peers: int) -> float:
        """Bandwidth of a copy/reduce kernel on ``sms`` SMs reading ``peers`` ranks: SM-limited, link-limited."""
        return min(sms * self.sm_copy_bw_per_sm, self.peer_bw(peers))


# The peaks of every target of the vendor tables.
PEAKS: dict[str, TargetPeaks] = {f.name: TargetPeaks.from_facts(f) for f in all_targets()}


def peaks_for(target: str, *, num_sms: int | None = None) -> TargetPeaks:
    """The peak numbers of target ('cuda:90', 'hip:gfx942', also 'CUDA:sm_90a': case and the vendor's arch
    spellings are forgiven here); num_sms overrides the SM count (a virtual world gives each rank a share of one
    GPU)."""
    facts = lookup(target.strip().lower())
    if facts is None or facts.name not in PEAKS:
        raise TargetError(f"no performance numbers for target '{target}'; known: {', '.join(PEAKS)}")
    peaks = PEAKS[facts.name]
    if num_sms is not None:
        if num_sms < 1:
            raise TargetError(f"num_sms must be >= 1, got {num_sms}")
        peaks = replace(peaks, num_sms=num_sms)
    return peaks


# ----------------------------------------------------------------------------------------------------- GEMM

# How much of the HBM rate one SM's operand loads see, thanks to L2 reuse under grouped tile order.
_L2_REUSE = 6.0


def gemm_candidates(peaks: TargetPeaks, elem_bytes: int = 2, fast_accum: bool = False) -> list[GemmConfig]:
    """The target's GEMM candidates (its vendor facts) whose stages fit its shared memory: for 1-byte (fp8)
    operands its fp8 candidates where it lists them (``fast_accum``: those of fast accumulation)."""
    facts = lookup(peaks.target)
    if facts is None:
        raise TargetError(f"no GEMM candidates for target '{peaks.target}'")
    pool = facts.gemm_candidates
    if elem_bytes == 1:
        pool = (fast_accum and facts.fp8_fast_gemm_candidates) or facts.fp8_gemm_candidates or pool
    return [c for c in pool if c.smem_bytes(elem_bytes, facts.vendor) <= peaks.smem_per_sm]


def gemm_tiles(m: int, n: int, cfg: GemmConfig) -> int:
    return math.ceil(m / cfg.block_m) * math.ceil(n / cfg.block_n)


# What stream-K's pieces cost beyond their share of the K steps, in waves of whole tiles: the partials' fp32
# round trip, a third K loop's pipeline fill, the owners' waits. H200, L2 warm (benchmarks/bench_gemm.py
# --stream-k, results/gemm_stream_k.csv): 0.41 of a wave at 1024x14336x8192 (128x256, 52 tiles: 349 us against 367
# whole), 0.5 at 1024x7168x4096 (96.7 against 88.0 whole, where a whole second wave cost only 0.3)
STREAM_K_OVERHEAD_WAVES = 0.45


def stream_k_tiles(tiles: int, k_tiles: int, sms: int) -> int:
    """The tiles a stream-K GEMM shares out by K steps: the partial wave's (all of them below a wave), or 0 where
    the waves are whole or the steps too few for every SM to get one."""
    sk = tiles % sms if tiles > sms else tiles
    return sk if sk and sk * k_tiles >= sms else 0


def gemm_time(m: int, n: int, k: int, cfg: GemmConfig, peaks: TargetPeaks, *, sms: int | None = None,
              elem_bytes: int = 2, split: int = 1, stream_k: bool = False) -> float:
    """Time of an m x n x k GEMM with tile config cfg on sms SMs (default: all): waves of tiles, each tile bound by
    its math or by its operand loads, plus a launch. ``split``: split-K, tiles * split programs each over k / split,
    the last of a tile adding the others' fp32 partials (written and read back)."""
    sms = sms or peaks.num_sms
    if m <= 0 or n <= 0 or k <= 0:
        return peaks.launch_latency
    tiles = gemm_tiles(m, n, cfg)
    waves = math.ceil(tiles * split / sms)
    if stream_k and stream_k_tiles(tiles, math.ceil(k / cfg.block_k), sms):
        waves = tiles / sms + STREAM_K_OVERHEAD_WAVES
    k_part = math.ceil(k / split)
    load_bw_per_sm = peaks.hbm_copy_bw * _L2_REUSE / peaks.num_sms
    t_math = _tile_math_time(cfg, k_part, peaks, elem_bytes)
    t_load = (cfg.block_m + cfg.block_n) * k_part * elem_bytes / load_bw_per_sm
    # split-K: every split but the last writes its fp32 partial tile and the last reads them all back before its
    # store, at one SM's share of HBM (no L2 reuse: each partial is read once, by one program), plus the lock the
    # last split waits on. H200, warm L2 (benchmarks/results/tune_candidates.csv): 128x256 tiles split in 5 at
    # 257x2048x7168 57.3 us against 30.3 for 64x128 tiles whole (the partials' 640 KB per tile at ~36 GB/s is
    # the difference); 128x128 split in 2 at 256x4096x4096 21.5 against 17.0 for 64x128 whole
    t_split = split * cfg.block_m * cfg.block_n * 4 / (peaks.hbm_copy_bw / peaks.num_sms) + peaks.signal_latency \
        if split > 1 else 0.0
    # every operand byte crosses HBM once at least: what bounds a skinny GEMM (M = 128: B is read once, whatever
    # the tile; H200 warm L2, 128 x 8192 x 14336: 64x128 tiles 62.4 us, 128x128 split in two 65.7)
    floor = (m * k + k * n + m * n) * elem_bytes / peaks.hbm_copy_bw
    return max(waves * max(t_math, t_load), floor) + t_split + peaks.launch_latency


# A program of a one-wave grid (one tile each, no persistent loop) loads its operands by TMA only where its K loop
# runs at least this long (the model's math time of its K slice) and the GEMM is bound by math, not by the bytes
# every operand must cross HBM once: creating the tensor descriptors at each program's start costs a fixed ~2 us,
# and a memory-bound grid streams as fast through pointers. H200, bf16, warm L2, TMA against pointer loads of the
# same tiles in one device call (results/tune_smallm_diag.csv; the model's math time of a program in brackets):
# 257x2048x7168 64x128x64 s8 25.6 against 29.8 us (24 us), 64x128x128 28.9 against 31.4 (26), 333x3584x18944
# 128x128 one program per tile 91.8 against 112.5 (103), 128x256 split in 3 90.0 against 92.0 (69), 256x4096x4096
# 64x128x64 s8 15.9 against 17.0 (14); but 200x7168x2048 128x128 17.6 against 15.7 (12), 256x4096x4096 64x128x128
# 17.1 against 15.4 (13, at its former efficiency 0.85), and memory-bound 100x28672x8192 (128x256 tiles, B 470 MB)
# 118.6 against 114.0
TMA_MIN_PROGRAM_S = 13.5e-6


def one_wave_loads(m: int, n: int, k: int, cfg: GemmConfig, peaks: TargetPeaks, *, split: int = 1,
                   elem_bytes: int = 2) -> str:
    """'tma' or 'pointer': how the programs of a non-persistent GEMM grid (one tile, or one K slice of ``split``,
    each) load A and B on a target with TMA -- by TMA where each program's K loop is long (TMA_MIN_PROGRAM_S) and
    the GEMM compute-bound, else through pointers. Whether the rows allow TMA at all is the caller's test."""
    t_math = _tile_math_time(cfg, math.ceil(k / split), peaks, elem_bytes)
    waves = math.ceil(gemm_tiles(m, n, cfg) * split / peaks.num_sms)
    floor = (m * k + k * n + m * n) * elem_bytes / peaks.hbm_copy_bw
    return "tma" if t_math >= TMA_MIN_PROGRAM_S and waves * t_math >= floor else "pointer"


# The stages a one-wave TMA grid's programs take at most when C goes out through pointers (no staging of C in shared
# memory): the table's 128x256x64 keeps 3 for the TMA store's staging of a persistent grid; without it a 4th fits.
# H200, 333x3584x18944 (128x256, split in 3, TMA loads; results/tune_smallm_diag.csv): 4 stages 87.5 us against
# 90.0-92.4 with 3 in the two device calls (tune.csv's tuner: 91.1 against 94.2 through pointers)
ONE_WAVE_MAX_STAGES = 4


def one_wave_stages(cfg: GemmConfig, elem_bytes: int, smem_bytes: int) -> int:
    """The stages of a one-wave TMA grid storing C through pointers: the table's, raised to as many as ``smem_bytes``
    of shared memory hold up to ONE_WAVE_MAX_STAGES (never lowered)."""
    per_stage = (cfg.block_m + cfg.block_n) * cfg.block_k * elem_bytes
    return max(cfg.num_stages, min(ONE_WAVE_MAX_STAGES, smem_bytes // per_stage))


def _tile_math_time(cfg: GemmConfig, k: int, peaks: TargetPeaks, elem_bytes: int) -> float:
    """The model's math time of one tile over k of K on one SM."""
    return 2.0 * cfg.block_m * cfg.block_n * k / (peaks.gemm_rate(elem_bytes) / peaks.num_sms * cfg.efficiency)


# ------------------------------------------------------------------------------------- operand repack

REPACKS = ("a", "b", "ab")  # the operands ditron-tile may copy to rows on TMA lines before a GEMM


def off_line(lda: int, ldb: int, elem_bytes: int, peaks: TargetPeaks) -> tuple[bool, bool]:
    """Whether a TMA GEMM's A and B rows (lda / ldb elements apart) start off the target's TMA lines (False, False
    where the target has no TMA loads or the rows are not 16-byte aligned: the template loads them through
    pointers, kernels.gemm.tma_loads)."""
    line = peaks.tma_line
    if not line or lda * elem_bytes % 16 or ldb * elem_bytes % 16:
        return False, False
    return lda * elem_bytes % line != 0, ldb * elem_bytes % line != 0


def off_line_factor(a_off: bool, b_off: bool, peaks: TargetPeaks) -> float:
    """How much longer a GEMM takes with its A rows, B rows or both off TMA lines (the target's measured shares)."""
    pa, pb, pab = peaks.tma_off_line
    return 1.0 + (pab if a_off and b_off else pa if a_off else pb if b_off else 0.0)


def padded_ld(ld: int, elem_bytes: int, peaks: TargetPeaks) -> int:
    """The row stride (elements) of a repacked operand: ld rounded up to whole TMA lines."""
    q = max(1, peaks.tma_line // elem_bytes)
    return -(-ld // q) * q


def repack_choice(t_gemm: float, a_rows: tuple[int, int], b_rows: tuple[int, int], elem_bytes: int,
                  peaks: TargetPeaks, *, allowed: tuple[str, ...] = ("", *REPACKS)) -> tuple[str, float]:
    """Which operands to copy to rows on TMA lines before a GEMM of modelled time ``t_gemm`` (its time with rows on
    lines), and the GEMM's time with that choice: ("", t) for none, else "a", "b" or "ab". ``a_rows`` / ``b_rows``:
    the operands as stored (rows, row length in elements; their row strides). A copy costs its bytes at the
    device's copy rate plus a launch; the GEMM keeps the off-line factor of the operands left as they are.
    ``allowed``: the choices to rank (ditron-tile's repack option)."""
    a_off, b_off = off_line(a_rows[1], b_rows[1], elem_bytes, peaks)
    best = None
    for choice in allowed:
        if ("a" in choice and not a_off) or ("b" in choice and not b_off):
            continue
        t = t_gemm * off_line_factor(a_off and "a" not in choice, b_off and "b" not in choice, peaks)
        for op, (rows, cols) in (("a", a_rows), ("b", b_rows)):
            if op in choice:
                t += local_copy_time(rows * cols * elem_bytes, peaks)
        if best is None or t < best[1]:
            best = (choice, t)
    return best if best is not None else ("", t_gemm * off_line_factor(a_off, b_off, peaks))


def gemm_split(m: int, n: int, k: int, cfg: GemmConfig, sms: int) -> int:
    """The split-K the GEMM template uses for cfg's tiles on sms SMs when its tiles neither wait nor notify
    (kernels.gemm.split_for: one wave of programs, K slices of at least 8 steps)."""
    from .kernels.gemm import split_for
    return split_for(gemm_tiles(m, n, cfg), math.ceil(k / cfg.block_k), sms)


def best_gemm_config(m: int, n: int, k: int, peaks: TargetPeaks, *, sms: int | None = None,
                     elem_bytes: int = 2) -> tuple[GemmConfig, float]:
    """The candidate with the least modelled time (ties: the earlier, larger tile)."""
    best = None
    for cfg in gemm_candidates(peaks, elem_bytes):
        t = gemm_time(m, n, k, cfg, peaks, sms=sms, elem_bytes=elem_bytes)
        if best is None or t < best[1] * 0.999:
            best = (cfg, t)
    if best is None:
        raise TargetError(f"no GEMM tile configuration fits the shared memory of {peaks.target}")
    return best


def grouped_gemm_candidates(peaks: TargetPeaks, elem_bytes: int = 2) -> list[GemmConfig]:
    """The target's grouped-GEMM tiles (its vendor facts; its GEMM candidates where it names none) whose stages fit
    its shared memory."""
    facts = lookup(peaks.target)
    if facts is None:
        raise TargetError(f"no GEMM candidates for target '{peaks.target}'")
    pool = facts.grouped_gemm_candidates or facts.gemm_candidates
    return [c for c in pool if c.smem_bytes(elem_bytes, facts.vendor) <= peaks.smem_per_sm]


def grouped_gemm_time(t: int, k: int, n: int, e: int, cfg: GemmConfig, peaks: TargetPeaks, *,
                      elem_bytes: int = 2) -> tuple[float, int]:
    """(time, rows computed) of a grouped GEMM of t rows over e groups of k x n weights with tile config cfg
    (kernels.grouped_gemm: tiles never straddle groups), the routing taken as even: min(e, t) groups get rows, each
    its rows rounded up to whole row tiles; waves of tiles bound by math or loads, and every weight byte of those
    groups crossing HBM once at least."""
    hit = max(1, min(e, t))
    slots = hit * math.ceil(t / hit / cfg.block_m)
    tiles = slots * math.ceil(n / cfg.block_n)
    waves = math.ceil(tiles / peaks.num_sms)
    flops_per_sm = peaks.gemm_rate(elem_bytes) / peaks.num_sms * cfg.efficiency
    load_bw_per_sm = peaks.hbm_copy_bw * _L2_REUSE / peaks.num_sms
    t_math = 2.0 * cfg.block_m * cfg.block_n * k / flops_per_sm
    t_load = (cfg.block_m + cfg.block_n) * k * elem_bytes / load_bw_per_sm
    floor = (hit * k * n + t * k + t * n) * elem_bytes / peaks.hbm_copy_bw
    return max(waves * max(t_math, t_load), floor) + peaks.launch_latency, slots * cfg.block_m


def best_grouped_gemm_config(t: int, k: int, n: int, e: int, peaks: TargetPeaks, *,
                             elem_bytes: int = 2) -> tuple[GemmConfig, float]:
    """The grouped-GEMM tile of least modelled time; among those within 0.1 %, the one computing the fewest padding
    rows (a memory-bound grouped GEMM is as fast with small tiles, which waste less), then the earlier."""
    best = None
    for cfg in grouped_gemm_candidates(peaks, elem_bytes):
        tm, rows = grouped_gemm_time(t, k, n, e, cfg, peaks, elem_bytes=elem_bytes)
        if best is None or tm < best[1] * 0.999 or (tm <= best[1] * 1.001 and rows < best[2]):
            best = (cfg, tm, rows)
    if best is None:
        raise TargetError(f"no grouped GEMM tile configuration fits the shared memory of {peaks.target}")
    return best[0], best[1]


# ------------------------------------------------------------------------------------------- communication

def copy_time(nbytes: float, peaks: TargetPeaks, *, engine: str, peers: int, chunks: int, sms: int = 0) -> float:
    """Time to pull nbytes in total from ``peers`` ranks as ``chunks`` chunk copies (per-chunk latency paid once
    per chunk; direct pulls from several peers overlap their latencies across streams)."""
    if nbytes <= 0 or chunks <= 0:
        return 0.0
    if engine == "sm":
        bw = peaks.sm_link_bw(max(sms, 1), peers)
        latency = peaks.signal_latency * chunks
    else:
        bw = peaks.peer_bw(peers)
        latency = (peaks.copy_latency + peaks.signal_latency) * chunks
    return nbytes / bw + latency


def local_copy_time(nbytes: float, peaks: TargetPeaks) -> float:
    return nbytes / peaks.hbm_copy_bw + peaks.copy_latency


def reduce_time(rows: int, cols: int, world: int, peaks: TargetPeaks, *, sms: int, elem_bytes: int = 2) -> float:
    """A W-way reduction of rows x cols read from every rank (W-1 remote, one local) on sms SMs."""
    remote = (world - 1) * rows * cols * elem_bytes
    local = rows * cols * elem_bytes * 2
    t = local / peaks.hbm_copy_bw
    if world > 1:
        t += remote / peaks.sm_link_bw(sms, world - 1)
    return t + peaks.launch_latency


# -------------------------------------------------------------------------------- docs/design.md §7 ideal times

def ag_gemm_ideal(m: int, n: int, k: int, world: int, peaks: TargetPeaks, elem_bytes: int = 2) -> float:
    """AG+GEMM, per rank: M rows gathered, N/W columns of the weight. ideal = max(Tcomp, Tcomm + Tcomp/W)."""
    t_comp = 2.0 * m * k * (n / world) / peaks.gemm_flops
    t_comm = (world - 1) / world * m * k * elem_bytes / peaks.link_bw
    return max(t_comp, t_comm + t_comp / world)


def gemm_rs_ideal(m: int, n: int, k: int, world: int, peaks: TargetPeaks, elem_bytes: int = 2) -> float:
    """GEMM+RS, per rank: K/W of the contraction. ideal = max(Tcomp, Tcomm) + min(Tcomp, Tcomm)/W."""
    t_comp = 2.0 * m * (k / world) * n / peaks.gemm_flops
    t_comm = (world - 1) / world * m * n * elem_bytes / peaks.link_bw
    return max(t_comp, t_comm) + min(t_comp, t_comm) / world


# ------------------------------------------------------------------------------------ overlapped estimates

def gated_gemm_time(t_gemm: float, tiles: int, sms: int, *, own: int, first: float, last: float,
                    start: float = 0.0, own_ready: float = 0.0) -> float:
    """A persistent GEMM whose peer-row tiles wait for their rows: ``tiles`` tiles in rank-rotated order (the
    ``own`` tiles of this rank's rows first, then the peers'), program p of min(sms, tiles) running tiles p, p +
    grid, ... one after another from ``start``, each taking t_gemm / waves; the i-th of the n peer tiles may start
    once its rows landed, between ``first`` and ``last`` in proportion (i + 1) / n, an own tile at ``own_ready``.
    When it ends. Unlike a tail model (the last chunk's share of the work after it lands), it sees that a tile
    started late holds its SM a whole tile longer: with one or two waves, a late peer tile is the GEMM's end
    (2xH200, AG+GEMM 8B M = 1024 by pull, 224 tiles of 128x256 on 132 SMs: 140 us against cuBLAS's 89)."""
    grid = max(1, min(sms, tiles))
    d = t_gemm / max(1, math.ceil(tiles / grid))
    peers = tiles - own
    finish = start
    # Program p runs n tiles; t_k = max(t_{k-1}, ready_k) + d unrolls to max(start + n d, max_k ready_k + (n - k) d).
    # ready_k is constant over the own tiles (the first one counts) and linear over the peers' (an end counts): O(1)
    # per program, whatever the tile count.
    for p in range(grid):
        n = len(range(p, tiles, grid))
        n_own = len(range(p, min(own, tiles), grid))
        t = start + n * d
        if n_own:
            t = max(t, own_ready + n * d)
        for k in {n_own, n - 1} if n > n_own else ():
            t = max(t, first + (last - first) * (p + k * grid - own + 1) / peers + (n - k) * d)
        finish = max(finish, t)
    return finish


MAX_CHUNKS_PER_SHARD = 16  # the most chunks ditron-tile cuts a shard into


def divisors(n: int) -> list[int]:
    """n's divisors, ascending (sqrt(n) trial divisions)."""
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def chunk_rows_options(shard_rows: int, block_m: int) -> list[int]:
    """The rows per chunk ditron-tile tries for a shard of ``shard_rows`` (fewest chunks first): its divisors (a
    GEMM's per-tile waits map rows to slots uniformly) of at least one row tile, at most MAX_CHUNKS_PER_SHARD
    chunks, whole row tiles where any is."""
    shard_rows = max(shard_rows, 1)
    found = [d for d in divisors(shard_rows)
             if shard_rows // d <= MAX_CHUNKS_PER_SHARD and d >= min(block_m, shard_rows)]
    aligned = [d for d in found if d % block_m == 0]
    return sorted(aligned or found or [shard_rows], reverse=True)


def ag_gemm_estimate(t_gemm: float, shard_bytes: float, world: int, chunks_per_shard: int, peaks: TargetPeaks, *,
                     engine: str, tiles: int, sms: int, comm_sms: int = 0, ring: bool = False, push: bool = False,
                     tiles_span_ranks: bool = False) -> float:
    """AG+GEMM by streams beside the GEMM (``gated_gemm_time``: the GEMM takes its own rows first, the peers' chunks
    as they land). By pull, a chunk is staged, offered, and pulled by the peer's stream once it saw the offer (one
    hop more); by push, the owner copies it straight into every rank's gather buffer; either way the comm stream
    starts behind a stream hand-off (hop_latency: 2xH200 graph-mode profile, 70B M = 128, the push's peer copy
    began 8 us after the GEMM and the GEMM, waiting for it, ran 82-87 us against cuBLAS's 60). tiles_span_ranks: a
    GEMM row tile holds rows of several ranks (BLOCK_M > a shard), so no tile can start before the gather ends."""
    if world == 1:
        return t_gemm
    peers = 1 if ring or push else world - 1  # pushes go one after another on one stream (pulls may spread)
    chunks = (world - 1) * chunks_per_shard
    t_comm = copy_time((world - 1) * shard_bytes, peaks, engine=engine, peers=peers, chunks=chunks, sms=comm_sms)
    t_stage = peaks.hop_latency + (0.0 if push else local_copy_time(shard_bytes, peaks))
    own = 0 if tiles_span_ranks else tiles // world
    # the own rows too come through the comm stream (its staging copy, or the push's own copy), after the hand-off;
    # the GEMM is modelled to start on them once the whole shard is staged (2xH200, 70B M = 1024 by pull: 4
    # chunks, which a per-chunk staging time made the model prefer, ran 571-574 us against 403-407 with one)
    own_ready = peaks.hop_latency + local_copy_time(shard_bytes, peaks)
    return gated_gemm_time(t_gemm, tiles, sms, own=own, first=t_stage + t_comm / chunks, last=t_stage + t_comm,
                           own_ready=own_ready)


def ag_gemm_one_launch_estimate(t_gemm: float, shard_bytes: float, world: int, peaks: TargetPeaks, *, tiles: int,
                                sms: int, tiles_span_ranks: bool, own_first: bool = True,
                                b_bytes: float = 0.0) -> float:
    """AG+GEMM in one launch (gemm template ``gather``): the shard is stored into every peer's gather buffer (W - 1
    copies over the links at the SMs' store rate) and counted there, and the tiles run (``gated_gemm_time``), the
    peers' rows once landed. The own rows' tiles (tiles // world of them, unless tiles span two ranks' rows) read
    the shard at once when they are fewer than the programs (``own_first``): the programs without one push the
    shard meanwhile. Otherwise every program pushes before its tiles, and as its stores only issue as fast as the
    links drain them, nothing hides the push. No stream, no copy engine, no hand-off between launches.

    Own rows first split each column of B (``b_bytes``) between tiles that run apart in time: a skinny GEMM reads
    it from HBM once per rank instead of once (2xH200, AG+GEMM 8B M = 128, 64x128 tiles: 33.9-34.8 us own rows
    first against 27.9 all together; M = 1024: 94.5-94.7 against 116.5, benchmarks/results/
    ablation_ag_own_first.csv)."""
    if world == 1:
        return t_gemm
    own, grid = 0 if tiles_span_ranks or not own_first else tiles // world, max(1, min(sms, tiles))
    if own:
        t_gemm = max(t_gemm, world * b_bytes / peaks.hbm_copy_bw)
    copiers = grid - own if 0 < own < grid else peaks.num_sms
    push = (world - 1) * shard_bytes / (peaks.sm_link_bw(copiers, world - 1) * SM_STORE_LINK_GAIN)
    landed = push + peaks.signal_latency
    return gated_gemm_time(t_gemm, tiles, sms, own=own, first=landed, last=landed,
                           start=0.0 if 0 < own < grid else push)


def gemm_rs_estimate(t_gemm: float, shard_bytes: float, world: int, chunks_per_shard: int, peaks: TargetPeaks, *,
                     reduce_sms: int, rows: int, cols: int, elem_bytes: int = 2) -> float:
    """GEMM+RS: the reduction of a chunk starts once every rank computed it; the last chunk's reduction is the
    exposed tail."""
    if world == 1:
        return t_gemm
    t_red = reduce_time(rows, cols, world, peaks, sms=reduce_sms, elem_bytes=elem_bytes)
    # per chunk: the counts arrive from every rank, then the reduce lane's stream wait and launch (a hop)
    t_sync = (peaks.signal_latency * world + peaks.hop_latency) * chunks_per_shard
    tail = t_red / chunks_per_shard
    return max(t_gemm + tail, t_gemm / (world * chunks_per_shard) + t_red) + t_sync


# GEMM+AR in the epilogue: the gather of the reduced rows and the copy of the output take this many times their
# modelled time, fully exposed. Modelled as overlapping the own rows' last tiles they were under-estimated by 1.7-2.5x
# (2xH200 ablation, bench_dist --passes ditron-tile:all-reduce=one_shot against the model's epilogue: GEMM+AR
# LLaMA-8B M=8192 864 us for the GEMM then the one-launch all-reduce, 922 in the epilogue; 70B M=1024 386 against
# 481; 70B M=8192 2961 against 3149; the epilogue's GEMM+RS part alone was modelled within 6 %).
EPILOGUE_GATHER_SLOWDOWN = 2.0


def gemm_rs_epilogue_estimate(t_gemm: float, shard_bytes: float, world: int, chunks_per_shard: int,
                              peaks: TargetPeaks, *, engine: str = "copy_engine", one_wave: bool = False) -> float:
    """GEMM+RS with the reduction in the GEMM's epilogue: every rank computes the other ranks' rows first (peer
    r-d computes this rank's rows during [(d-1)/W, d/W] of its GEMM) and its own rows last. copy_engine: the copy
    engine pulls the W-1 partials of each chunk as they complete (a stream wait, the copy and a signal per chunk)
    and an own tile reads W-1 staged tiles; sm: an own tile waits for the peers' counts itself and reads their
    partial tiles over the link (no hop, but the SMs stall on the remote reads). ``one_wave``: every tile runs at
    once (no more tiles than SMs), so the peers' partials are ready only when the GEMM's own work is: nothing
    overlaps, and what moves them is all exposed (measured: a 4-chunk staging added ~50 us to a 90 us GEMM)."""
    if world == 1:
        return t_gemm
    per_chunk = t_gemm / (world * chunks_per_shard)
    if engine == "sm":
        remote = (world - 1) * shard_bytes / peaks.sm_link_bw(peaks.num_sms, world - 1)
        start = t_gemm if one_wave else max(t_gemm, (world - 1) / world * t_gemm + per_chunk)
        return start + remote + peaks.signal_latency
    t_pull = copy_time((world - 1) * shard_bytes, peaks, engine="copy_engine", peers=world - 1,
                       chunks=(world - 1) * chunks_per_shard) + peaks.hop_latency * chunks_per_shard
    extra = (world - 1) * shard_bytes / peaks.hbm_copy_bw + peaks.signal_latency * chunks_per_shard
    if one_wave:
        return t_gemm + t_pull + extra
    staged_last = max((world - 1) / world * t_gemm + t_pull / ((world - 1) * chunks_per_shard), per_chunk + t_pull)
    return max(t_gemm, staged_last + per_chunk) + extra


def all_reduce_estimates(rows: int, cols: int, world: int, peaks: TargetPeaks, *, elem_bytes: int = 2,
                         sms: int | None = None) -> dict[str, float]:
    """Modelled time of each all-reduce algorithm: one_shot (every rank reduces everything: W-1 full reads),
    two_shot (reduce a 1/W shard, then all-gather it)."""
    sms = sms or peaks.num_sms
    if world == 1:
        return {"one_shot": 0.0, "two_shot": 0.0}
    one = reduce_time(rows, cols, world, peaks, sms=sms, elem_bytes=elem_bytes) + \
        local_copy_time(rows * cols * elem_bytes, peaks)
    shard = math.ceil(rows / world)
    two = reduce_time(shard, cols, world, peaks, sms=sms, elem_bytes=elem_bytes) + \
        local_copy_time(rows * cols * elem_bytes, peaks) + \
        copy_time((world - 1) * shard * cols * elem_bytes, peaks, engine="copy_engine", peers=world - 1,
                  chunks=world - 1) + peaks.signal_latency * world
    return {"one_shot": one, "two_shot": two}


def reduce_scatter_estimates(rows: int, cols: int, world: int, peaks: TargetPeaks, *, elem_bytes: int = 2,
                             sms: int | None = None, chunks: int = 4) -> dict[str, float]:
    """Modelled time of each standalone reduce-scatter (rows/W of the sum per rank): reduce_kernel (the copy engine
    pulls the peers' partials of the own rows in ``chunks`` chunks, each handed over by a wait and a signal, and a
    kernel sums the staged copies: the three in sequence -- measured, they do not overlap: 2xH200, 128 MB, 397 us
    against 288 modelled so and 181 for the pulls alone) and one_launch (one kernel copies x into the symmetric
    buffer tile by tile and sums the own rows, reading the peers' partials over the link once a flag says they are
    there; modelled with the copy exposed, which it mostly is not: 268 us measured against 252 modelled)."""
    sms = sms or peaks.num_sms
    shard = math.ceil(rows / world)
    shard_bytes = shard * cols * elem_bytes
    if world == 1:
        t = local_copy_time(shard_bytes, peaks)
        return {"reduce_kernel": t, "one_launch": t}
    staged = copy_time((world - 1) * shard_bytes, peaks, engine="copy_engine", peers=world - 1,
                       chunks=(world - 1) * chunks) + peaks.hop_latency * chunks + \
        (world + 1) * shard_bytes / peaks.hbm_copy_bw + peaks.launch_latency
    one = local_copy_time(rows * cols * elem_bytes, peaks) + \
        reduce_time(shard, cols, world, peaks, sms=sms, elem_bytes=elem_bytes) + peaks.signal_latency
    return {"reduce_kernel": staged, "one_launch": one}


# The two-shot launch measured 3 % slower than the one-shot launch at 16 MB on 2xH200 where this model (without the
# factor) put it 2 % faster: at W = 2 both move the same bytes and the model cannot tell them apart, so the two-shot
# launch carries this factor (its scatter phase: a second release and flag per tile); from W = 4 on it moves far
# fewer bytes and still wins.
TWO_SHOT_LAUNCH_SLOWDOWN = 1.1


def all_reduce_two_shot_launch_time(rows: int, cols: int, world: int, peaks: TargetPeaks, *, elem_bytes: int = 2,
                                    sms: int | None = None) -> float:
    """Two-shot all-reduce as one kernel (reduce template, publish.scatter): the copy into the symmetric buffer,
    the reduction of 1/W of the tiles (reading them from every peer), the sums written back into the peers'
    buffers, a second flag, and the copy of the other tiles out of the own buffer. The writes back are charged
    after the reads: on 2xH200 the two-shot launch measured no faster than the one-shot one (16 MB: 78.6 us
    against 76.0; results/ablation_ar_two_shot.csv), so they do not ride the idle direction of the link for free.
    Fewer bytes cross the links than one-shot's W-1 full reads once W > 2."""
    sms = sms or peaks.num_sms
    nbytes = rows * cols * elem_bytes
    shard = math.ceil(rows / world)
    writes = (world - 1) * shard * cols * elem_bytes / peaks.sm_link_bw(sms, world - 1) if world > 1 else 0.0
    return TWO_SHOT_LAUNCH_SLOWDOWN * (reduce_time(shard, cols, world, peaks, sms=sms, elem_bytes=elem_bytes) + writes +
                                       nbytes * (2 * world - 1) / world / peaks.hbm_copy_bw + 2 * peaks.signal_latency)


# SM stores into peer memory against SM loads of it: 2xH200, 16 MB each way at once (build/linkbw-style sweep
# of a plain Triton copy, grid 66-264): stores 343 GB/s, loads 312, loads summed with a local tile 307
SM_STORE_LINK_GAIN = 1.1


def all_reduce_push_launch_time(rows: int, cols: int, world: int, peaks: TargetPeaks, *, elem_bytes: int = 2,
                                sms: int | None = None) -> float:
    """One-shot all-reduce by stores, as one kernel (reduce template, publish.push): each rank stores its x into
    every peer's inbox (W-1 full writes over the links, at the store rate) and sets a flag per tile there, then
    sums x and its W-1 inbox slabs from local memory. Against the one-launch pull: no copy into the symmetric
    buffer, stores instead of loads over the link, and a flag that arrives with the data (no read round trip)."""
    link, local = _push_parts(rows * cols * elem_bytes, world, peaks, sms or peaks.num_sms)
    return link + local


def _push_parts(nbytes: int, world: int, peaks: TargetPeaks, sms: int) -> tuple[float, float]:
    """(W-1 copies of nbytes stored over the links, the rest: the launch, the local sum of x and W-1 inbox
    slabs, a flag) of a push all-reduce."""
    link = (world - 1) * nbytes / (peaks.sm_link_bw(sms, world - 1) * SM_STORE_LINK_GAIN) if world > 1 else 0.0
    return link, peaks.launch_latency + nbytes * (world + 1) / 2 / peaks.hbm_copy_bw + peaks.signal_latency


def gemm_push_estimate(t_gemm: float, rows: int, cols: int, world: int, peaks: TargetPeaks, *,
                       elem_bytes: int = 2) -> float:
    """GEMM+AR by push (gemm template ``push``, then reduce ``publish.pushed``): each C tile is stored into the
    peers' inboxes as the GEMM completes it; then the local sum of x and the W-1 inbox slabs. GEMM+RS by push
    (``push.owner``) is the same with ``rows`` = a shard's rows: each rank stores W-1 shards. The link time adds to
    the GEMM's: the SMs' stores into peer memory hold them (2xH200, GEMM+AR by push, 64 MB per rank: 8B
    M = 8192 811-819 us against a 680 us GEMM; GEMM+RS by push, 32 / 64 MB: 783 / 2809 us against 700 / 2690 for
    the epilogue's copy-engine pulls, which do overlap), even with each tile counted after the next one's K loop."""
    if world == 1:
        return t_gemm
    link, local = _push_parts(rows * cols * elem_bytes, world, peaks, peaks.num_sms)
    return t_gemm + link + local


def gemm_push_sum_estimate(t_gemm: float, rows: int, cols: int, world: int, peaks: TargetPeaks, *,
                           elem_bytes: int = 2) -> float:
    """GEMM+AR in one launch (gemm template ``push.sum``) or GEMM+RS in one launch (``push.sum_own``, rows = a
    shard's): the push of gemm_push_estimate with the sum in the GEMM's epilogue, so without the reduce launch
    (2xH200, GEMM+RS: 8B M = 128 / 1024 25.8-26.2 / 92.0-92.2 us against 28.0-28.4 / 98.3-98.5 by push and a
    reduce launch, LLaMA-70B M = 128 65.7-66.3 against 69.6-69.9; results/ablation_rs_push_sum.csv)."""
    return gemm_push_estimate(t_gemm, rows, cols, world, peaks, elem_bytes=elem_bytes) - \
        (peaks.launch_latency if world > 1 else 0.0)


def all_reduce_one_launch_time(rows: int, cols: int, world: int, peaks: TargetPeaks, *, elem_bytes: int = 2,
                               sms: int | None = None) -> float:
    """One-shot all-reduce as one kernel: each program copies its tiles into the symmetric buffer, sets their
    flags, and reduces them once every rank's flags are set (a flag crossing the link: signal_latency). Against
    all_reduce_estimates' one_shot it saves the staging copy's latency (and, unmodelled there, a stream
    hand-off)."""
    sms = sms or peaks.num_sms
    return reduce_time(rows, cols, world, peaks, sms=sms, elem_bytes=elem_bytes) + \
        rows * cols * elem_bytes / peaks.hbm_copy_bw + peaks.signal_latency
