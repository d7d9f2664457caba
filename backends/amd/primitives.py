"""AMD lowering of the ditron_core primitives: the only place their GCN-level choices live.

Same hooks as backends/nvidia/primitives.py:

* ``acquire_load(ptr, scope=, semantic=)`` -- a system- (or agent-) scope atomic add of 0 with acquire semantics
  (``tt.atomic_rmw add, acquire, sys``): LLVM's AMDGPU memory model turns it into ``global_atomic_add ... sc1``
  followed by ``buffer_inv sc1`` on gfx942, the cache-bypassing read a spin needs on fine-grained memory. A scalar
  pointer is read by one lane and broadcast to the workgroup.
* ``release_rmw(ptr, value, op=, scope=, semantic=)`` -- ``tt.atomic_rmw exch|add, release, sys``: ``buffer_wbl2
  sc0 sc1`` + ``s_waitcnt`` then ``global_atomic_swap|add ... sc1``.
* ``clear_slot(ptr, value, scope=)`` -- ``tt.atomic_cas relaxed`` (value -> 0): ``global_atomic_cmpswap``.
* ``opaque_zero(token)`` -- an i32 zero that depends on token and that no compiler can fold: inline GCN
  ``v_mov_b32 $0, 0`` taking token as an (unused) input.
* ``pause(x)`` -- between two failed polls of a spin: ``s_sleep 1`` (64 clocks), returning x through ``v_mov_b32``.

Triton 3.6 workaround: at gpu (agent) scope Triton turns atomics on tensors of pointers into buffer atomics, whose
lowering swaps the fences (``emitFence`` reads getOrderingFlags' {acquire, release} pair the wrong way round): an
acquire atomic gets only a release fence before it, a release atomic only an acquire fence after it. So every
ordered atomic at gpu scope is emitted as ``acq_rel``, which gets both fences. (System-scope atomics are never
turned into buffer atomics and keep their exact semantics.)
"""
from __future__ import annotations

from mlir import ir

from ...dialects import ttir
from ...dialects.core import NOTIFY_RMW


def _semantic(semantic: str, scope: str) -> str:
    """The semantic to hand Triton (see the module docstring: buffer-atomic fences at gpu scope)."""
    return "acq_rel" if scope == "gpu" and semantic != "relaxed" else semantic


def acquire_load(ptr: ir.Value, *, scope: str, semantic: str) -> ir.Value:
    zero = ttir.c(0, ttir.like(ptr, ttir.i32()))
    mask = ttir.c(True, ttir.like(ptr, ttir.i1()))
    return ttir.atomic_rmw("add", ptr, zero, mask, sem=_semantic(semantic, scope), scope=scope)


def release_rmw(ptr: ir.Value, value: ir.Value, *, op: str, scope: str, semantic: str) -> None:
    mask = ttir.c(True, ttir.like(ptr, ttir.i1()))
    ttir.atomic_rmw(NOTIFY_RMW[op], ptr, ttir.broadcast(value, ttir.shape(ptr)), mask, sem=_semantic(semantic, scope),
                    scope=scope)


def clear_slot(ptr: ir.Value, value: ir.Value, *, scope: str) -> None:
    ttir.atomic_cas(ptr, ttir.broadcast(value, ttir.shape(ptr)), ttir.c(0, ttir.like(ptr, ttir.i32())), sem="relaxed",
                    scope=scope)


def opaque_zero(token: ir.Value) -> ir.Value:
    return ttir.inline_asm("v_mov_b32 $0, 0", "=v,v", [token], ttir.i32(), pure=True)


def pause(x: ir.Value) -> ir.Value:
    return ttir.inline_asm("s_sleep 1\n\tv_mov_b32 $0, $1", "=v,v", [x], ttir.like(x, ttir.i32()), pure=False)
