"""The vendor facts of every target, one table per target, each vendor's in its own folder.

A vendor folder (``backends/nvidia``, ``backends/amd``) holds a ``facts.py`` whose ``VENDOR`` (a ``VendorFacts``)
lists its targets (``TargetFacts``: SM count, shared memory, peak FLOP/s and bandwidths, latencies, GEMM tile
candidates) and its binary formats and arch rules, and an ``__init__.py`` that exports ``VENDOR`` and ``BACKEND``
(its ``Backend`` subclass). The folders are found here by looking (``vendors()``): a new vendor is one new folder
(and its line in pyproject.toml's package list), a new arch of a known vendor one more ``TargetFacts`` in its table.

Who reads the facts: ``Target.parse`` (which targets exist, their warp size), ``get_backend`` (the backend class),
``ditron.cost_model`` (the peaks and GEMM candidates, through ``TargetPeaks``), the GEMM template's defaults (SM
count, shared memory, TMA), ``ditron.artifact`` (binary extensions) and ``ditron.runtime.loader`` (which GPU runs
what was built). Plain data: no MLIR, no Triton, no torch is imported here, so the loader may read it.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable

from ..errors import TargetError


@dataclass(frozen=True)
class GemmConfig:
    """A core tile configuration of the GEMM template. ``efficiency``: the fraction of the target's GEMM rate a
    full wave of such tiles reaches (bigger tiles amortize loads better)."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = 8
    efficiency: float = 1.0

    def smem_bytes(self, elem_bytes: int, vendor: str) -> int:
        per_stage = (self.block_m + self.block_n) * self.block_k * elem_bytes
        # AMD's stream pipeliner keeps one stage in registers; NVIDIA keeps every stage in shared memory.
        stages = max(1, self.num_stages - 1) if vendor == "hip" else self.num_stages
        return per_stage * stages


@dataclass(frozen=True)
class TargetFacts:
    """What one GPU of a target is and can do. Rates per second, sizes bytes, times seconds. ``source`` says where
    the numbers come from: measured (on the reference machine, see /work/shared/MLIR_NOTES.md) or estimated
    (datasheet-derived; replace them when someone measures).

    ``link_topology``: "switch" (NVSwitch: one GPU's peer traffic shares ``link_bw`` however many peers it talks
    to) or "mesh" (fully connected point-to-point links: ``link_bw`` per peer, up to ``links`` peers at once).
    ``gemm_candidates``: the GEMM tile configurations ditron-tile ranks, best first for large problems (those whose
    stages do not fit ``smem_per_sm`` are dropped). ``tma``: device-side tensor descriptors (the GEMM template's
    TMA rule, kernels.gemm.candidates); ``barrier_smem``: shared memory a TMA GEMM keeps for its barriers.
    ``tma_line`` / ``tma_off_line``: a TMA GEMM whose A rows, B rows or both start off ``tma_line``-byte lines
    (row strides that are multiples of 16 bytes but not of the line) takes that much longer (A only, B only, both:
    the share added to its time), which ditron-tile weighs against copying the operand to aligned rows first
    (cost_model.repack_choice)."""

    vendor: str
    arch: int | str
    warp_size: int
    num_sms: int
    smem_per_sm: int           # shared memory (LDS) per SM/CU usable by one CTA
    gemm_flops: float          # dense bf16 GEMM FLOP/s a good kernel reaches
    link_bw: float             # one-direction peer bandwidth of a copy-engine pull (per link on a mesh)
    hbm_copy_bw: float         # device-to-device copy bandwidth
    sm_copy_bw_per_sm: float   # bytes/s one SM moves over the link in a copy/reduce kernel
    gemm_candidates: tuple[GemmConfig, ...]
    link_topology: str = "switch"
    links: int = 1
    copy_latency: float = 3e-6     # per chunk copy enqueued on a stream (DMA setup + completion; H200: a 512 KB
                                   # peer pull took 4.5 us in a CUDA graph, 1.4 us of it at the link's rate)
    signal_latency: float = 1e-6   # a stream signal/wait pair
    hop_latency: float = 10e-6     # one chunk handed between GPUs by streams: a wait, a copy and a signal (H200,
                                   # in a CUDA graph: 10-30 us per chunk, measured on GEMM+AR's gather)
    launch_latency: float = 4e-6   # a kernel launch
    tma: bool = False
    barrier_smem: int = 0
    regs_per_sm: int = 65536      # 32-bit registers an SM shares among its resident programs (255 at most a thread)
    tma_line: int = 0
    tma_off_line: tuple[float, float, float] = (0.0, 0.0, 0.0)
    fp8: bool = False             # fp8 (f8E4M3FN / f8E5M2) tensor-core GEMMs: the GEMM template's fp8 inputs
    fp8_gemm_flops: float = 0.0   # dense fp8 GEMM FLOP/s a good kernel reaches (precise accumulation)
    fp8_gemm_candidates: tuple[GemmConfig, ...] = ()  # the fp8 GEMM's tiles (BLOCK_K 128; empty: gemm_candidates)
    fp8_fast_gemm_candidates: tuple[GemmConfig, ...] = ()  # those of an fp8 GEMM with fast_accum (empty: the above)
    grouped_gemm_candidates: tuple[GemmConfig, ...] = ()  # the grouped GEMM's tiles (empty: gemm_candidates)
    source: str = ""

    @property
    def name(self) -> str:
        return f"{self.vendor}:{self.arch}"


@dataclass(frozen=True)
class VendorFacts:
    """One vendor: its target tables (in order), the files Triton's stages give (``binary_ext``, ``asm_ext``),
    ``parse_arch`` (the arch key of an arch as written after 'vendor:', or None) and ``runs_on`` (whether code
    built for arch ``built`` runs on a GPU of arch ``have``, both as the artifact and the driver write them)."""

    vendor: str
    binary_ext: str
    asm_ext: str
    targets: tuple[TargetFacts, ...]
    parse_arch: Callable[[str], "int | str | None"]
    runs_on: Callable[[str, str], bool]

    def target(self, arch: "int | str") -> TargetFacts | None:
        return next((t for t in self.targets if t.arch == arch), None)


def _package_names() -> list[str]:
    from .. import backends
    return sorted(m.name for m in pkgutil.iter_modules(backends.__path__) if m.ispkg)


_VENDORS: dict[str, tuple[VendorFacts, str]] | None = None


def _registry() -> dict[str, tuple[VendorFacts, str]]:
    """vendor name -> (its facts, its package), sorted by vendor name; built on first use."""
    global _VENDORS
    if _VENDORS is None:
        found: dict[str, tuple[VendorFacts, str]] = {}
        for pkg in _package_names():
            module = importlib.import_module(f"{__package__}.{pkg}")
            facts = getattr(module, "VENDOR", None)
            if isinstance(facts, VendorFacts):
                if facts.vendor in found:
                    raise TargetError(f"backends '{found[facts.vendor][1]}' and '{pkg}' both claim vendor "
                                      f"'{facts.vendor}'")
                found[facts.vendor] = (facts, pkg)
        _VENDORS = dict(sorted(found.items()))
    return _VENDORS


def vendors() -> list[VendorFacts]:
    """Every vendor's facts, sorted by vendor name."""
    return [facts for facts, _ in _registry().values()]


def vendor_facts(vendor: str) -> VendorFacts | None:
    entry = _registry().get(vendor)
    return entry[0] if entry else None


def backend_class(vendor: str):
    """The Backend subclass of a vendor (``BACKEND`` of its package)."""
    entry = _registry().get(vendor)
    if entry is None:
        raise TargetError(f"no backend for vendor '{vendor}'; known: {', '.join(_registry())}")
    return importlib.import_module(f"{__package__}.{entry[1]}").BACKEND


def all_targets() -> list[TargetFacts]:
    return [t for v in vendors() for t in v.targets]


def lookup(text: str) -> TargetFacts | None:
    """The facts of a target written 'vendor:arch' in its vendor's spelling (e.g. 'cuda:sm_90a'), or None."""
    vendor, sep, arch_text = text.partition(":")
    facts = vendor_facts(vendor) if sep else None
    if facts is None:
        return None
    arch = facts.parse_arch(arch_text)
    return facts.target(arch) if arch is not None else None


def target_facts(target) -> TargetFacts:
    """The facts of a supported target (a Target or its text); TargetError for any other."""
    from .target import Target
    t = Target.parse(target)
    found = lookup(str(t))
    assert found is not None  # Target.parse accepts only targets of the tables
    return found


def binary_extensions() -> dict[str, str]:
    """vendor -> the extension of its kernel binaries ('cuda' -> 'cubin')."""
    return {v.vendor: v.binary_ext for v in vendors()}
