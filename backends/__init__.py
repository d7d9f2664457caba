"""ditron.backends: one package per GPU vendor, answering the same hooks.

Contract (implemented by backends/nvidia and backends/amd; everything else in ditron goes through it):

    Target.parse("cuda:90") / Target.parse("hip:gfx942")  -> Target(vendor, arch, warp_size)
    get_backend(target)                                    -> Backend
    Backend.options(**overrides)                           -> frozen, hashable options (num_warps, num_stages, ...)
    Backend.lower_primitive(op, kernel)                    -> the TTIR for one ditron_core primitive (kernel: the
                                                              lowering pass's per-kernel context)
    Backend.primitives                                     -> the vendor hooks it uses (acquire_load, release_rmw,
                                                              opaque_zero, pause): the only place their asm/atomics
                                                              live
    Backend.stages(options)                                -> (triton backend, triton options, ordered
                                                              {"ttir": fn, "ttgir": fn, "llir": fn, ...})
    Backend.compile(ttir_text, options, dump_dir=None)     -> CompiledKernel
    target_facts(target)                                   -> TargetFacts: the target's vendor facts (SM count,
                                                              shared memory, peaks, GEMM candidates; facts.py)

``CompiledKernel`` is plain data (name, binary bytes, asm per stage, JSON-able metadata) so that artifacts can be
written (``ditron.artifact``) and later loaded with torch + triton alone (``ditron.runtime.loader``).

Supported targets: cuda:80, cuda:90 (sm_90a), hip:gfx942, hip:gfx950 -- the tables of backends/*/facts.py, one
vendor folder each. Nothing here imports triton until a compile (nor MLIR: the runtime reads the facts).
"""
from __future__ import annotations

from .base import Backend, BackendOptions, CompiledKernel
from .facts import GemmConfig, TargetFacts, VendorFacts, target_facts
from .target import Target, supported_targets


def get_backend(target: "Target | str") -> Backend:
    """The backend of target (a Target or text like 'cuda:90'): its vendor's ``BACKEND`` in the vendor table
    (backends/facts.py). Raises TargetError for unsupported targets."""
    from .facts import backend_class
    target = Target.parse(target)
    return backend_class(target.vendor)(target)


__all__ = ["Backend", "BackendOptions", "CompiledKernel", "GemmConfig", "Target", "TargetFacts", "VendorFacts",
           "get_backend", "supported_targets", "target_facts"]
