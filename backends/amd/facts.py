"""AMD's vendor facts: the hip:gfx942 and hip:gfx950 tables (see backends/facts.py for who reads them)."""
from __future__ import annotations

from ..facts import GemmConfig, TargetFacts, VendorFacts

# GEMM candidates, best first for large problems (estimates: no AMD GPU has measured them yet).
GEMM_CANDIDATES = (
    GemmConfig(256, 256, 64, 8, 2, 4, 1.00),
    GemmConfig(256, 128, 64, 8, 2, 4, 0.95),
    GemmConfig(128, 128, 64, 4, 2, 4, 0.88),
    GemmConfig(64, 128, 64, 4, 2, 4, 0.75),
    GemmConfig(64, 64, 64, 4, 2, 4, 0.60),
    GemmConfig(32, 64, 64, 4, 2, 1, 0.40),
    GemmConfig(16, 64, 128, 4, 2, 1, 0.28),
)

GFX942 = TargetFacts(
    "hip", "gfx942", warp_size=64, num_sms=304, smem_per_sm=65536, gemm_flops=650e12, link_bw=48e9,
    hbm_copy_bw=4.0e12, sm_copy_bw_per_sm=8e9, gemm_candidates=GEMM_CANDIDATES, link_topology="mesh", links=7,
    copy_latency=4e-6, fp8=False,  # MI300X's fp8 is the FNUZ encoding, not the OCP f8E4M3FN / f8E5M2 ditron emits
    source="MI300X: estimate (1307 TFLOP/s bf16 dense peak, ~50 % reached; 7 xGMI links of 64 GB/s per direction, "
           "~75 % reached; HBM3 5.3 TB/s)")

GFX950 = TargetFacts(
    "hip", "gfx950", warp_size=64, num_sms=256, smem_per_sm=163840, gemm_flops=1150e12, link_bw=58e9,
    hbm_copy_bw=6.0e12, sm_copy_bw_per_sm=10e9, gemm_candidates=GEMM_CANDIDATES, link_topology="mesh", links=7,
    copy_latency=4e-6, fp8=True, source="MI355X: estimate (2.3 PFLOP/s bf16 dense peak, xGMI 76.8 GB/s per link, HBM3E 8 TB/s)")


def parse_arch(text: str) -> str | None:
    """The gfx name, as written ('gfx942')."""
    return text or None


def runs_on(built: str, have: str) -> bool:
    """A code object runs on exactly the gfx arch it was built for."""
    return str(built) == str(have)


VENDOR = VendorFacts("hip", binary_ext="hsaco", asm_ext="amdgcn", targets=(GFX942, GFX950), parse_arch=parse_arch,
                     runs_on=runs_on)
