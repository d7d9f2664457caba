"""NVIDIA lowering of the ditron_core primitives: the only place their PTX-level choices live.

Hooks (every vendor's primitives module has the same five; ditron-lower-core-to-triton builds the rest -- spin loops,
peer addresses, barriers -- from them):

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

from mlir import ir

from ...dialects import ttir
from ...dialects.core import NOTIFY_RMW

PTX_SCOPES = {"gpu": "gpu", "sys": "sys"}
PTX_LOAD_SEMANTICS = {"acquire": "acquire", "relaxed": "relaxed"}
SPIN_PAUSE_NS = 64


def acquire_load(ptr: ir.Value, *, scope: str, semantic: str) -> ir.Value:
    asm = f"ld.{PTX_LOAD_SEMANTICS[semantic]}.{PTX_SCOPES[scope]}.global.b32 $0, [$1];"
    return ttir.inline_asm(asm, "=r,l", [ptr], ttir.like(ptr, ttir.i32()), pure=False)


def release_rmw(ptr: ir.Value, value: ir.Value, *, op: str, scope: str, semantic: str) -> None:
    mask = ttir.c(True, ttir.like(ptr, ttir.i1()))
    ttir.atomic_rmw(NOTIFY_RMW[op], ptr, ttir.broadcast(value, ttir.shape(ptr)), mask, sem=semantic, scope=scope)


def clear_slot(ptr: ir.Value, value: ir.Value, *, scope: str) -> None:
    ttir.atomic_cas(ptr, ttir.broadcast(value, ttir.shape(ptr)), ttir.c(0, ttir.like(ptr, ttir.i32())), sem="relaxed",
                    scope=scope)


def opaque_zero(token: ir.Value) -> ir.Value:
    return ttir.inline_asm("mov.b32 $0, 0;", "=r,r", [token], ttir.i32(), pure=True)


def pause(x: ir.Value) -> ir.Value:
    return ttir.inline_asm(f"nanosleep.u32 {SPIN_PAUSE_NS};\n\tmov.b32 $0, $1;", "=r,r", [x], ttir.like(x, ttir.i32()),
                           pure=False)
