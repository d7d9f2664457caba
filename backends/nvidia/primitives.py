"""NVIDIA lowering of the ditron_core primitives: the only place their PTX-level choices live.

Hooks (every vendor's primitives module has the same five, each taking first the ``ops`` object that builds the IR
(backends/ops.py: MLIR bindings for ditron-lower-core-to-triton, Triton's builder for ``@ditron.jit`` kernels); the
two callers build the rest -- spin loops, peer addresses, barriers -- from them):

* ``acquire_load(ptr, scope=, semantic=)`` -- each slot ptr points at (scalar or tensor of !tt.ptr<i32>), read with
  acquire (or relaxed) semantics at gpu or sys scope. Here: inline PTX ``ld.acquire.sys.global.b32`` run by every
  thread (no atomics, no shared-memory broadcast and CTA barrier per spin, as Triton's scalar atomic would need).
* ``release_rmw(ptr, value, op=, scope=, semantic=)`` -- set (exchange) or add value at each slot with release
  semantics: Triton's ``tt.atomic_rmw``, which becomes ``atom.global.sys.release.exch.b32`` / ``...add.u32``
  (``red.release`` when the result is unused); a scalar pointer is updated by one thread of the CTA.
* ``clear_slot(ptr, value, scope=)`` -- each slot that still holds value becomes 0 (a waiter consuming the
  signal it waited for; a newer value stays): Triton's ``tt.atomic_cas``, relaxed, which becomes
  ``atom.global.sys.relaxed.cas.b32``.
* ``opaque_zero(token)`` -- an i32 zero that depends on token and that no compiler can fold: inline PTX
  ``mov.b32 $0, 0;`` taking token as an (unused) input. consume_token adds it to pointers.
* ``pause(x)`` -- between two failed polls of a spin: inline PTX ``nanosleep.u32`` (SPIN_PAUSE_NS), returning x
  through ``mov`` so that the loop keeps it. Without it every thread of every spinning program issues system-scope
  loads back to back; on a slot in local memory (an all-reduce by push waits on its own pad while the peers'
  stores stream in) that measured slower and erratic.
"""
from __future__ import annotations

from typing import Any

from ..ops import NOTIFY_RMW, PrimitiveOps

PTX_SCOPES = {"gpu": "gpu", "sys": "sys"}
PTX_LOAD_SEMANTICS = {"acquire": "acquire", "relaxed": "relaxed"}
SPIN_PAUSE_NS = 64


def acquire_load(ops: PrimitiveOps, ptr: Any, *, scope: str, semantic: str) -> Any:
    asm = f"ld.{PTX_LOAD_SEMANTICS[semantic]}.{PTX_SCOPES[scope]}.global.b32 $0, [$1];"
    return ops.inline_asm(asm, "=r,l", [ptr], pure=False, like=ptr)


def release_rmw(ops: PrimitiveOps, ptr: Any, value: Any, *, op: str, scope: str, semantic: str) -> None:
    ops.atomic_rmw(NOTIFY_RMW[op], ptr, value, sem=semantic, scope=scope)


def clear_slot(ops: PrimitiveOps, ptr: Any, value: Any, *, scope: str) -> None:
    ops.atomic_cas(ptr, value, 0, sem="relaxed", scope=scope)


def opaque_zero(ops: PrimitiveOps, token: Any) -> Any:
    return ops.inline_asm("mov.b32 $0, 0;", "=r,r", [token], pure=True)


def pause(ops: PrimitiveOps, x: Any) -> Any:
    return ops.inline_asm(f"nanosleep.u32 {SPIN_PAUSE_NS};\n\tmov.b32 $0, $1;", "=r,r", [x], pure=False, like=x)
