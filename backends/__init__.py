"""ditron.backends: one package per GPU vendor, answering the same hooks.

Contract (implemented by backends/nvidia and backends/amd; everything else in ditron goes through it):

    Target.parse("cuda:90") / Target.parse("hip:gfx942")  -> Target(vendor, arch, warp_size)
    get_backend(target)                                    -> Backend
    Backend.options(**overrides)                           -> frozen, hashable options (num_warps, num_stages, ...)
    Backend.lower_primitive(op, rewriter-ish context)      -> the TTIR for one ditron_core primitive
    Backend.stages(options)                                -> ordered {"ttgir": fn, "llir": fn, ...} after TTIR
    Backend.compile(ttir_text, options, dump=None)         -> CompiledKernel

``CompiledKernel`` is plain data (name, binary bytes, asm per stage, JSON-able metadata) so that artifacts can be
written and later loaded with torch + triton alone.
"""
