"""ditron.language: distributed primitives for kernels written in Triton's language (docs/language.md).

    import triton.language as tl
    import ditron
    import ditron.language as dl

    @ditron.jit
    def kernel(x_ptr, pad_ptr, n, BLOCK: tl.constexpr):
        me, world = dl.rank(), dl.num_ranks()
        ...
        dl.notify(pad_ptr, me, 1, peer)                     # set slot `me` of peer's pad (release)
        token = dl.wait(pad_ptr, peer, 1)                   # spin until my slot `peer` >= 1 (acquire)
        x = tl.load(dl.symm_at(dl.consume_token(x_ptr, token), peer) + offs)

    kernel.compile(signature=..., constexprs=..., target="cuda:90")    # stock Triton; cuda:80/90, hip:gfx942/950
    dl.simulate(kernel, grid, args_per_rank, world=4, reference=...)   # W ranks on the CPU, bugs found
    dl.run_virtual(kernel, grid, args_per_rank, world=4)               # W ranks on one GPU

Primitives: rank, num_ranks, symm_at, wait, notify, consume_token, barrier_all.
"""
from .core import barrier_all, consume_token, notify, num_ranks, rank, symm_at, wait
from .jit import DitronJITFunction, jit

__all__ = ["rank", "num_ranks", "symm_at", "wait", "notify", "consume_token", "barrier_all", "jit",
           "DitronJITFunction", "simulate", "SimResult", "run_virtual"]


def __getattr__(name: str):
    if name in ("simulate", "SimResult"):
        from . import sim
        return getattr(sim, name)
    if name == "run_virtual":
        from .launch import run_virtual
        return run_virtual
    raise AttributeError(f"module 'ditron.language' has no attribute '{name}'")
