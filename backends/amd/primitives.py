"""AMD lowering of the ditron_core primitives: the only place their GCN-level choices live.

Same hooks as backends/nvidia/primitives.py (each takes the ``ops`` object of backends/ops.py first):

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

from typing import Any

from ..ops import NOTIFY_RMW, PrimitiveOps


def _semantic(semantic: str, scope: str) -> str:
    """The semantic to hand Triton (see the module docstring: buffer-atomic fences at gpu scope)."""
    return "acq_rel" if scope == "gpu" and semantic != "relaxed" else semantic


def acquire_load(ops: PrimitiveOps, ptr: Any, *, scope: str, semantic: str) -> Any:
    return ops.atomic_rmw("add", ptr, 0, sem=_semantic(semantic, scope), scope=scope)


def release_rmw(ops: PrimitiveOps, ptr: Any, value: Any, *, op: str, scope: str, semantic: str) -> None:
    ops.atomic_rmw(NOTIFY_RMW[op], ptr, value, sem=_semantic(semantic, scope), scope=scope)


def clear_slot(ops: PrimitiveOps, ptr: Any, value: Any, *, scope: str) -> None:
    ops.atomic_cas(ptr, value, 0, sem="relaxed", scope=scope)


def opaque_zero(ops: PrimitiveOps, token: Any) -> Any:
    return ops.inline_asm("v_mov_b32 $0, 0", "=v,v", [token], pure=True)


def pause(ops: PrimitiveOps, x: Any) -> Any:
    return ops.inline_asm("s_sleep 1\n\tv_mov_b32 $0, $1", "=v,v", [x], pure=False, like=x)
