"""NVIDIA's vendor facts: the cuda:80 and cuda:90 tables (see backends/facts.py for who reads them)."""
from __future__ import annotations

from ..facts import GemmConfig, TargetFacts, VendorFacts

# GEMM candidates, best first for large problems. Efficiencies follow the H200 measurements of MLIR_NOTES.md
# (persistent 128x256x64 ~0.95 of cuBLAS, naive tiles ~0.89) and shrink with the tile. The small tiles serve
# skinny, memory-bound GEMMs, which need the bytes in flight: their stages fill shared memory
# (benchmarks/results/gemm_skinny_warm.csv, H200, M = 128, L2 warm, pointer loads: 64x128 with 8 stages 19.3 /
# 60.8 us against 20.1 / 62.3 with 6 at N, K = 7168, 4096 / 8192, 14336; 64x64 with BK = 128 20.1 us against 25.4
# with BK = 64 at 4096, 7168 -- twice the bytes per stage; 128x128 with 5 stages 62.7 us against 65.0 with 6 at
# 14336, 8192; 64x128 with BK = 128 and 4 stages 15.7 us against 17.0 for BK = 64 at 256 x 4096 x 4096, 111.8
# against 119.1 at 512 x 18944 x 3584, results/tune_candidates.csv). Where a target's shared memory is smaller,
# the shallower twins below them remain. 64x128x128's efficiency is what its one warpgroup reaches where math
# binds (H200, results/tune_smallm_diag.csv: 512x18944x3584, 9 waves, 124-129 us = 0.70 of the rate, where
# 128x128 on 8 warps ran 105-106; 257x2048x7168 one wave, TMA loads, 28.9 us = 0.78, 64x128x64 with 8 stages
# 26.5 = 0.87): memory-bound skinny GEMMs, which it serves, are bound by their bytes, not by it.
GEMM_CANDIDATES = (
    GemmConfig(128, 256, 64, 8, 3, 8, 1.00),
    GemmConfig(128, 128, 64, 8, 5, 8, 0.93),
    GemmConfig(128, 128, 64, 4, 6, 8, 0.90),
    GemmConfig(64, 128, 128, 4, 4, 8, 0.75),
    GemmConfig(64, 128, 64, 4, 8, 8, 0.80),
    GemmConfig(64, 128, 64, 4, 6, 8, 0.80),
    GemmConfig(64, 64, 128, 4, 6, 8, 0.65),
    GemmConfig(64, 64, 64, 4, 6, 8, 0.65),
    GemmConfig(32, 64, 64, 4, 6, 8, 0.45),
    GemmConfig(16, 64, 128, 4, 6, 1, 0.30),
)

# The grouped GEMM's (MoE experts') tiles: a persistent grid whose tiles never straddle groups. H200, bf16, Mixtral
# / Qwen3-MoE / DeepSeek-V3 expert shapes, T = 256..16384, uneven and skewed routing (a Triton-Python twin of the
# template, timed against torch._grouped_mm and a loop of torch.matmul per expert in one device call): 128x256 w8 s3
# led from about 64 rows an expert, 64x256 w4 s4 below (32 rows: 232 us against 255 on Mixtral's w1), 128x128 and
# 64x128 with BK = 128 within 2-8 % of them in between.
GROUPED_GEMM_CANDIDATES = (
    GemmConfig(128, 256, 64, 8, 3, 8, 1.00),
    GemmConfig(64, 256, 64, 4, 4, 8, 0.85),
    GemmConfig(128, 128, 64, 4, 4, 8, 0.90),
    GemmConfig(64, 128, 128, 4, 4, 8, 0.80),
)

# fp8 GEMM candidates (BLOCK_K 128, twice bf16's bytes per K element), precise accumulation (torch._scaled_mm's
# default): one 64-row wgmma block per warpgroup and block_n <= 128 (kernels/gemm/configs.py fp8_tile_fits: a
# second, partial accumulator per wgmma block; 128x256 spills), or two such blocks as two dots (m_split, implied by
# the tile: 128x128 on 4 warps, 256x128 on 8). 128x128 on one warp group shares its SM with a second program
# (configs.programs_per_sm, implied too). H200, e4m3 precise, per-tensor scales (results/fp8.csv, bench_fp8
# --variants): 128x128 w4 s3 two a SM 0.877x torch._scaled_mm geomean, 256x128 w8 as two dots 0.798x, 128x128 w8
# 0.752x (the efficiencies below are their ratios); the smaller tiles' efficiencies are estimates.
FP8_GEMM_CANDIDATES = (
    GemmConfig(128, 128, 128, 4, 3, 8, 1.00),  # two 64-row dots, two programs an SM
    GemmConfig(256, 128, 128, 8, 4, 8, 0.91),  # as two 128-row dots sharing B (m_split, kernels/gemm/record.py)
    GemmConfig(128, 128, 128, 8, 4, 8, 0.86),
    GemmConfig(64, 128, 128, 4, 6, 8, 0.80),
    GemmConfig(128, 64, 128, 8, 6, 8, 0.75),
    GemmConfig(64, 64, 128, 4, 6, 8, 0.60),
)
# fast accumulation (fast_accum: no partial accumulator) also fits the bf16 rule's 128x256 on 8 warps (255 registers,
# no spill): it leads, loading a third fewer operand bytes per FLOP than 128x128 (estimate, not measured per tile);
# precise accumulation's lead, whose second program per SM covers the partial accumulator's adds, is not its
FP8_FAST_GEMM_CANDIDATES = (GemmConfig(128, 256, 128, 8, 4, 8, 1.00),) + FP8_GEMM_CANDIDATES[1:]

# TMA loads of rows that start off 128-byte lines: H200, 128x256x64 w8 tiles, L2 flushed (benchmarks/bench_lines.py,
# results/gemm_lines.csv): 5000x3000x5000 303 us with A and B as given (rows of 10000 / 6000 bytes), 244 with B's
# rows padded to 128-byte lines, 250 with A's, 230 with both; 3000x5000x3000 181 / 147 / 155 / 141; 12345x1000x3000
# 145 / 117 / 125 / 112; 3072x5000x3072 (B off lines only) 156 against 145. C's rows made no difference;
# host-made descriptors and BLOCK_K 128 did not help.
TMA_OFF_LINE = (0.05, 0.10, 0.30)  # A only, B only, both

CUDA_90 = TargetFacts(
    "cuda", 90, warp_size=32, num_sms=132, smem_per_sm=232448, gemm_flops=790e12, link_bw=371e9,
    hbm_copy_bw=4.25e12, sm_copy_bw_per_sm=24e9, gemm_candidates=GEMM_CANDIDATES, link_topology="switch", links=18,
    tma=True, barrier_smem=1024, tma_line=128, tma_off_line=TMA_OFF_LINE, fp8=True,
    grouped_gemm_candidates=GROUPED_GEMM_CANDIDATES,
    fp8_gemm_flops=1.22e15, fp8_gemm_candidates=FP8_GEMM_CANDIDATES, fp8_fast_gemm_candidates=FP8_FAST_GEMM_CANDIDATES,
    source="H200: GEMM 790 TFLOP/s bf16, 1.22 PFLOP/s fp8 (torch._scaled_mm precise, results/fp8.csv: 1.21-1.24), "
           "copy-engine peer pull 371 GB/s, D2D copy 4.25 TB/s measured; per-SM copy rate estimate")

CUDA_80 = TargetFacts(
    "cuda", 80, warp_size=32, num_sms=108, smem_per_sm=166912, gemm_flops=280e12, link_bw=230e9, hbm_copy_bw=1.6e12,
    sm_copy_bw_per_sm=16e9, gemm_candidates=GEMM_CANDIDATES, link_topology="switch",
    links=12, fp8=False, source="A100: estimate (312 TFLOP/s bf16 peak, NVLink3 300 GB/s per direction, HBM2e 2 TB/s)")


def parse_arch(text: str) -> int | str | None:
    """'90', 'sm_90', 'sm_90a' -> 90 (the compute capability); anything else -> None."""
    digits = text[3:] if text.startswith("sm_") else text
    digits = digits[:-1] if digits.endswith("a") else digits
    return int(digits) if digits.isdigit() else None


def runs_on(built: str, have: str) -> bool:
    """A cubin built for sm_90 and later is built as sm_90a (architecture-specific features): exactly that GPU;
    an older one runs on the same major with a newer minor."""
    built_cc, have_cc = int(built), int(have)
    if built_cc >= 90:
        return built_cc == have_cc
    return built_cc // 10 == have_cc // 10 and have_cc >= built_cc


VENDOR = VendorFacts("cuda", binary_ext="cubin", asm_ext="ptx", targets=(CUDA_90, CUDA_80), parse_arch=parse_arch,
                     runs_on=runs_on)
