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

``CompiledKernel`` is plain data (name, binary bytes, asm per stage, JSON-able metadata) so that artifacts can be
written (``ditron.artifact``) and later loaded with torch + triton alone (``ditron.runtime.loader``).

Supported targets: cuda:80, cuda:90 (sm_90a), hip:gfx942, hip:gfx950. Nothing here imports triton until a compile.
"""
from __future__ import annotations

from .base import Backend, BackendOptions, CompiledKernel
from .target import Target, supported_targets


def get_backend(target: "Target | str") -> Backend:
    """The backend of target (a Target or text like 'cuda:90'). Raises TargetError for unsupported targets."""
    target = Target.parse(target)
    if target.vendor == "cuda":
        from .nvidia import NvidiaBackend
        return NvidiaBackend(target)
    from .amd import AmdBackend
    return AmdBackend(target)


__all__ = ["Backend", "BackendOptions", "CompiledKernel", "Target", "get_backend", "supported_targets"]
