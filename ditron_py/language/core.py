"""The ditron.language primitives: Triton builtins usable inside a ``@ditron.jit`` kernel.

Each primitive checks its arguments (a clear error naming the kernel's source line), then either builds Triton IR
(while stock Triton traces the kernel: ``tracing``; the vendor assembly comes from backends/<vendor>/primitives.py)
or, inside ``ditron.language.simulate``, acts on the simulated world of W ranks (``sim``). Semantics:
docs/language.md.
"""
from __future__ import annotations

import sys
import threading
from typing import Any

import triton.language as tl

from ..schema import NOTIFY_OPS, NOTIFY_SEMANTICS, SCOPES, WAIT_SEMANTICS
from . import tracing
from .tracing import builtin, unwrap


# ----------------------------------------------------------------------------------------------------- checks

def _describe(x: Any) -> str:
    x = unwrap(x)
    if isinstance(x, tl.tensor):
        return f"a {x.type}" if x.type.is_block() else f"a {x.dtype} scalar"
    return f"{type(x).__name__} {x!r}"


def _check_pointer(what: str, x: Any, *, i32: bool = False) -> None:
    x = unwrap(x)
    ok = isinstance(x, tl.tensor) and x.dtype.is_ptr()
    if ok and i32:
        ok = x.dtype.element_ty == tl.int32
    if not ok:
        need = "a pointer to int32 signal slots (or a tensor of them)" if i32 else "a pointer (or a tensor of them)"
        raise TypeError(f"{what} must be {need}, got {_describe(x)}")


def _check_int(what: str, x: Any, *, scalar: bool = False) -> None:
    x = unwrap(x)
    if isinstance(x, bool) or not (isinstance(x, int) or (isinstance(x, tl.tensor) and x.dtype.is_int()
                                                          and not x.dtype.is_bool())):
        raise TypeError(f"{what} must be an integer, got {_describe(x)}")
    if scalar and isinstance(x, tl.tensor) and x.type.is_block():
        raise TypeError(f"{what} must be a scalar integer, got {_describe(x)}")


def _check_choice(what: str, x: Any, choices) -> str:
    x = unwrap(x)
    if not isinstance(x, str) or x not in choices:
        raise ValueError(f"{what}={x!r}: must be one of {', '.join(map(repr, choices))}")
    return x


def _i32(x: Any, semantic) -> Any:
    x = unwrap(x)
    if isinstance(x, int):
        return semantic.to_tensor(x) if semantic is not None else x
    return x


_ACTIVE = threading.local()   # .agent: the simulated program running on this thread (set by ditron.language.sim)


def active():
    """The agent running on this thread inside ``simulate`` (None outside a simulation)."""
    return getattr(_ACTIVE, "agent", None)


def _sim(what: str):
    """The simulated agent running this primitive (None while Triton traces); inside the simulator, the primitive
    must be called from the kernel's own body, as when compiling."""
    agent = active()
    if agent is not None and not agent.world.is_kernel_frame(sys._getframe(2)):
        raise TypeError(tracing.in_helper_message(what))
    return agent


# -------------------------------------------------------------------------------------------------- primitives

@builtin
def rank(_semantic=None, _generator=None):
    """This rank's index in the world, an int32 scalar (0 <= rank < num_ranks)."""
    world = _sim("dl.rank()")
    if world is not None:
        return world.rank_value()
    return tracing.hidden(_generator, "dl.rank()")["rank"]


@builtin
def num_ranks(_semantic=None, _generator=None):
    """The number of ranks W of the world, an int32 scalar."""
    world = _sim("dl.num_ranks()")
    if world is not None:
        return world.num_ranks()
    return tracing.hidden(_generator, "dl.num_ranks()")["num_ranks"]


@builtin
def symm_at(ptr, peer, _semantic=None, _generator=None):
    """The address on rank ``peer`` of what ``ptr`` points at in this rank's symmetric heap (a pointer of the same
    type and shape). Loads and stores through it reach the peer's memory."""
    _check_pointer("dl.symm_at: ptr", ptr)
    _check_int("dl.symm_at: peer", peer, scalar=True)
    world = _sim("dl.symm_at()")
    if world is not None:
        return world.symm_at(ptr, unwrap(peer))
    h = tracing.hidden(_generator, "dl.symm_at()")
    return _generator.call_JitFunction(tracing.peer_pointer, [ptr, _i32(peer, _semantic), h["rank"],
                                                              h["heap_bases"]], {})


@builtin
def wait(pad_ptr, slot, value, scope="sys", semantic="acquire", _semantic=None, _generator=None):
    """Spin until every slot ``pad_ptr + slot`` holds at least ``value`` (signed int32); return a token (the
    minimum seen, int32) for ``consume_token``. ``semantic="acquire"`` orders the writes released by the
    notifies it saw before this program's later accesses; ``scope``: "sys" (peers on other GPUs) or "gpu"."""
    _check_pointer("dl.wait: pad_ptr", pad_ptr, i32=True)
    _check_int("dl.wait: slot", slot)
    _check_int("dl.wait: value", value, scalar=True)
    scope = _check_choice("dl.wait: scope", scope, SCOPES)
    semantic = _check_choice("dl.wait: semantic", semantic, WAIT_SEMANTICS)
    world = _sim("dl.wait()")
    if world is not None:
        return world.wait(pad_ptr, unwrap(slot), unwrap(value), scope, semantic)
    h = tracing.hidden(_generator, "dl.wait()")
    ptr = pad_ptr.__add__(_i32(slot, _semantic), _semantic=_semantic)
    return _generator.call_JitFunction(tracing.bounded_spin, [ptr, _i32(value, _semantic), h["wait_bound"],
                                                              h["wait_err"], h["wait_tag"], tl.constexpr(scope),
                                                              tl.constexpr(semantic)], {})


@builtin
def notify(pad_ptr, slot, value, peer, op="set", scope="sys", semantic="release", _semantic=None,
           _generator=None):
    """On rank ``peer``, set (``op="set"``) or add to (``op="add"``) the slots ``pad_ptr + slot`` with
    ``value``; ``op="clear"`` turns a slot that still holds value into 0. ``semantic="release"`` (set / add):
    every write of this program before the notify is visible to a waiter that sees the new value."""
    _check_pointer("dl.notify: pad_ptr", pad_ptr, i32=True)
    _check_int("dl.notify: slot", slot)
    _check_int("dl.notify: value", value, scalar=True)
    _check_int("dl.notify: peer", peer, scalar=True)
    op = _check_choice("dl.notify: op", op, NOTIFY_OPS)
    scope = _check_choice("dl.notify: scope", scope, SCOPES)
    semantic = _check_choice("dl.notify: semantic", semantic, NOTIFY_SEMANTICS)
    world = _sim("dl.notify()")
    if world is not None:
        return world.notify(pad_ptr, unwrap(slot), unwrap(value), unwrap(peer), op, scope, semantic)
    h = tracing.hidden(_generator, "dl.notify()")
    ptr = pad_ptr.__add__(_i32(slot, _semantic), _semantic=_semantic)
    _generator.call_JitFunction(tracing.notify_peer, [ptr, _i32(value, _semantic), _i32(peer, _semantic),
                                                      h["rank"], h["heap_bases"], tl.constexpr(op),
                                                      tl.constexpr(scope), tl.constexpr(semantic)], {})


@builtin
def consume_token(x, token, _semantic=None, _generator=None):
    """x (a pointer or an integer, scalar or tensor), made data-dependent on ``token`` (from ``wait``): loads
    through the result cannot be moved before the wait by any compiler."""
    x_ = unwrap(x)
    if not (isinstance(x_, tl.tensor) and (x_.dtype.is_ptr() or (x_.dtype.is_int() and not x_.dtype.is_bool()))):
        raise TypeError(f"dl.consume_token: x must be a pointer or an integer (scalar or tensor), got "
                        f"{_describe(x)}")
    _check_int("dl.consume_token: token", token, scalar=True)
    world = _sim("dl.consume_token()")
    if world is not None:
        return world.consume_token(x_, unwrap(token))
    tracing.hidden(_generator, "dl.consume_token()")
    zero = tracing._opaque_zero(_i32(token, _semantic), _semantic=_semantic)
    if not x_.dtype.is_ptr():
        zero = zero.to(x_.dtype, _semantic=_semantic)
    return x_.__add__(zero, _semantic=_semantic)


@builtin
def barrier_all(pad_ptr, scope="sys", _semantic=None, _generator=None):
    """Every rank's program reaches this barrier before any leaves it (one program per rank; ``pad_ptr``: a
    symmetric int32 pad of num_ranks + 1 slots, zeroed once, used by nothing else). A full fence: writes before
    it are visible to every rank's accesses after it."""
    _check_pointer("dl.barrier_all: pad_ptr", pad_ptr, i32=True)
    if unwrap(pad_ptr).type.is_block():
        raise TypeError(f"dl.barrier_all: pad_ptr must be a scalar pointer, got {_describe(pad_ptr)}")
    scope = _check_choice("dl.barrier_all: scope", scope, SCOPES)
    world = _sim("dl.barrier_all()")
    if world is not None:
        return world.barrier_all(pad_ptr, scope)
    h = tracing.hidden(_generator, "dl.barrier_all()")
    _generator.call_JitFunction(tracing.barrier_all_ranks, [pad_ptr, h["rank"], h["num_ranks"], h["heap_bases"],
                                                            h["wait_bound"], h["wait_err"], h["wait_tag"],
                                                            tl.constexpr(scope)], {})
