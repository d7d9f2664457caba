"""How the ditron.language primitives become Triton IR while stock Triton traces a ``@ditron.jit`` kernel.

* ``TritonOps``: the PrimitiveOps of backends/ops.py over Triton's builder (a builtin's ``_semantic``), so that the
  vendor's primitives module (backends/<vendor>/primitives.py) builds the same assembly it builds for
  ditron-lower-core-to-triton.
* ``kernel_entry``: a builtin the ``@ditron.jit`` wrapper plants as the first statement of the kernel: it appends
  the hidden arguments (``ditron.schema.APPENDED_ARGS``: rank, num_ranks, heap_bases, wait_bound, wait_err,
  wait_tag, in that order, always all six) to the kernel's entry block and function type, with the alignment hints
  ditron-lower-core-to-triton gives them.
* The rank-generic structure -- peer addresses, the bounded spin, the generation barrier -- as ``@triton.jit``
  helpers that Triton inlines, written with the same meaning as ditron-lower-core-to-triton's (see its docstring).
"""
from __future__ import annotations

import contextvars
from typing import Any

import triton
import triton.language as tl
from triton.language.core import TRITON_BUILTIN

from ..backends import Target, get_backend
from ..schema import APPENDED_ARGS

HEAP_BASE_ALIGN = 16
WAIT_ERR_ALIGN = 16
OPAQUE_ZERO_DIVISIBILITY = 1 << 30
HIDDEN_ATTR = "_ditron_hidden"        # on Triton's CodeGenerator: {name: tl.tensor} of the hidden arguments
KERNEL_MARK = "_ditron_kernel"        # on the JITFunction of a @ditron.jit kernel

# the target being traced (set by ditron.language.jit around Triton's frontend)
current_target: contextvars.ContextVar[Target | None] = contextvars.ContextVar("ditron_language_target",
                                                                               default=None)


def builtin(fn):
    """Mark fn as a Triton builtin: inside a kernel Triton calls it with ``_semantic`` (and ``_generator``)."""
    setattr(fn, TRITON_BUILTIN, True)
    return fn


def unwrap(x: Any) -> Any:
    return x.value if isinstance(x, tl.constexpr) else x


class TritonOps:
    """PrimitiveOps (backends/ops.py) over Triton's semantic layer."""

    def __init__(self, semantic):
        self.semantic = semantic

    def inline_asm(self, asm, constraints, operands, *, pure, like=None):
        # the result takes the operands' (broadcast) shape: ``like`` is always one of them here
        return tl.inline_asm_elementwise(asm, constraints, list(operands), tl.int32, is_pure=pure, pack=1,
                                         _semantic=self.semantic)

    def atomic_rmw(self, kind, ptr, value, *, sem, scope):
        fn = {"add": tl.atomic_add, "xchg": tl.atomic_xchg, "max": tl.atomic_max, "min": tl.atomic_min,
              "and": tl.atomic_and, "or": tl.atomic_or, "xor": tl.atomic_xor}[kind]
        return fn(ptr, value, sem=sem, scope=scope, _semantic=self.semantic)

    def atomic_cas(self, ptr, cmp, value, *, sem, scope):
        cmp = self.semantic.to_tensor(cmp) if isinstance(cmp, int) else cmp
        value = self.semantic.to_tensor(value) if isinstance(value, int) else value
        if ptr.type.is_block():
            cmp = tl.broadcast_to(cmp, ptr.shape, _semantic=self.semantic)
            value = tl.broadcast_to(value, ptr.shape, _semantic=self.semantic)
        return tl.atomic_cas(ptr, cmp, value, sem=sem, scope=scope, _semantic=self.semantic)


def _target(semantic) -> Target:
    target = current_target.get()
    if target is not None:
        return target
    options = semantic.builder.options   # a kernel traced by Triton's own launcher: its target from the options
    arch = str(getattr(options, "arch", "") or "")
    if getattr(options, "backend_name", "") == "hip":
        return Target.parse(f"hip:{arch}")
    return Target.parse(f"cuda:{arch[2:] if arch.startswith('sm') else arch}")


def primitives(semantic):
    """(the vendor's primitives module for the target being traced, its TritonOps)."""
    return get_backend(_target(semantic)).primitives, TritonOps(semantic)


@builtin
def kernel_entry(_semantic=None, _generator=None):
    """Planted as a @ditron.jit kernel's first statement: append the hidden arguments (APPENDED_ARGS)."""
    b = _semantic.builder
    block = b.get_insertion_block()
    first = block.get_num_arguments()
    types = [block.arg(i).get_type() for i in range(first)]
    kinds = {"rank": (b.get_int32_ty(), tl.int32), "num_ranks": (b.get_int32_ty(), tl.int32),
             "heap_bases": (b.get_ptr_ty(b.get_int64_ty(), 1), tl.pointer_type(tl.int64)),
             "wait_bound": (b.get_int64_ty(), tl.int64),
             "wait_err": (b.get_ptr_ty(b.get_int32_ty(), 1), tl.pointer_type(tl.int32)),
             "wait_tag": (b.get_int32_ty(), tl.int32)}
    for name in APPENDED_ARGS:
        block.add_argument(kinds[name][0])
    _generator.fn.reset_type(b.get_function_ty(types + [kinds[n][0] for n in APPENDED_ARGS], []))
    hidden = {}
    for i, name in enumerate(APPENDED_ARGS):
        index = first + i
        if name == "heap_bases":
            _generator.fn.set_arg_attr(index, "tt.divisibility", HEAP_BASE_ALIGN)
        elif name == "wait_err":
            _generator.fn.set_arg_attr(index, "tt.divisibility", WAIT_ERR_ALIGN)
        hidden[name] = tl.tensor(block.arg(index), kinds[name][1])
    setattr(_generator, HIDDEN_ATTR, hidden)


def hidden(generator, what: str) -> dict[str, Any]:
    """The hidden arguments of the kernel being traced; a clear error where there are none."""
    values = getattr(generator, HIDDEN_ATTR, None) if generator is not None else None
    if values is not None:
        return values
    jit_fn = getattr(generator, "jit_fn", None)
    if jit_fn is not None and getattr(jit_fn, KERNEL_MARK, False) or (generator is not None
                                                                     and not generator.is_kernel):
        raise TypeError(in_helper_message(what))
    raise TypeError(f"{what} needs a @ditron.jit kernel (this one is a plain @triton.jit kernel)")


def in_helper_message(what: str) -> str:
    return (f"{what} must be called in the body of the @ditron.jit kernel itself, not in a @triton.jit helper it "
            "calls (pass the value to the helper as an argument)")


# ----------------------------------------------------------------------------------- vendor hooks as builtins

@builtin
def _acquire_load(ptr, scope, semantic, _semantic=None):
    prims, ops = primitives(_semantic)
    return prims.acquire_load(ops, ptr, scope=unwrap(scope), semantic=unwrap(semantic))


@builtin
def _release_rmw(ptr, value, op, scope, semantic, _semantic=None):
    prims, ops = primitives(_semantic)
    prims.release_rmw(ops, ptr, value, op=unwrap(op), scope=unwrap(scope), semantic=unwrap(semantic))


@builtin
def _clear_slot(ptr, value, scope, _semantic=None):
    prims, ops = primitives(_semantic)
    prims.clear_slot(ops, ptr, value, scope=unwrap(scope))


@builtin
def _pause(x, _semantic=None):
    prims, ops = primitives(_semantic)
    return prims.pause(ops, x)


@builtin
def _opaque_zero(token, _semantic=None):
    prims, ops = primitives(_semantic)
    zero = prims.opaque_zero(ops, token)
    return tl.multiple_of(zero, tl.constexpr(OPAQUE_ZERO_DIVISIBILITY), _semantic=_semantic)


@builtin
def _min_all(x, _semantic=None, _generator=None):
    """The minimum of every element (a scalar stays as it is)."""
    if not x.type.is_block():
        return x
    flat = tl.reshape(x, [x.numel.value], _semantic=_semantic)
    return _generator.call_JitFunction(tl.min, [flat], {"axis": tl.constexpr(0)})


@builtin
def _elem_bytes(ptr, _semantic=None):
    return tl.constexpr(max(1, ptr.dtype.element_ty.primitive_bitwidth // 8))


@builtin
def _delta_divisibility(ptr, _semantic=None):
    """The element delta between two heap bases is a multiple of HEAP_BASE_ALIGN / sizeof(T)."""
    return tl.constexpr(max(1, HEAP_BASE_ALIGN // max(1, ptr.dtype.element_ty.primitive_bitwidth // 8)))


# ------------------------------------------------------------------------------------ rank-generic structure

@triton.jit
def peer_pointer(ptr, peer, rank, heap_bases):
    """ptr moved to rank peer's copy of the symmetric heap: ptr + (base[peer] - base[rank]) / sizeof(T)."""
    SIZE: tl.constexpr = _elem_bytes(ptr)
    delta = tl.load(heap_bases + peer) - tl.load(heap_bases + rank)
    if SIZE > 1:
        delta = delta // SIZE
    delta = tl.multiple_of(delta, _delta_divisibility(ptr))
    return ptr + delta


@triton.jit
def bounded_spin(ptr, value, bound, err, tag, SCOPE: tl.constexpr, SEMANTIC: tl.constexpr):
    """Spin until min(*ptr) >= value or bound polls have failed; the minimum seen. A give-up is recorded in err
    ([count, tag, seen]) as ditron.dialects.ttir.bounded_spin records it."""
    seen = _min_all(_acquire_load(ptr, SCOPE, SEMANTIC))
    polls = tl.full((), 1, tl.int64)
    while (seen < value) & (polls < bound):
        seen = _pause(seen)
        seen = _min_all(_acquire_load(ptr, SCOPE, SEMANTIC))
        polls += 1
    if seen < value:
        tl.atomic_add(err, 1, sem="relaxed", scope="gpu")
        tl.atomic_xchg(err + 1, tag, sem="relaxed", scope="gpu")
        tl.atomic_xchg(err + 2, seen, sem="relaxed", scope="gpu")
    return seen


@triton.jit
def notify_peer(ptr, value, peer, rank, heap_bases, OP: tl.constexpr, SCOPE: tl.constexpr,
                SEMANTIC: tl.constexpr):
    # set / add: every thread's earlier writes happen before the release; clear: every thread left its spin
    tl.debug_barrier()
    target = peer_pointer(ptr, peer, rank, heap_bases)
    if OP == "clear":
        _clear_slot(target, value, SCOPE)
    else:
        _release_rmw(target, value, OP, SCOPE, SEMANTIC)


@triton.jit
def barrier_all_ranks(pad, rank, num_ranks, heap_bases, bound, err, tag, SCOPE: tl.constexpr):
    """The generation barrier of ditron-lower-core-to-triton (pad: num_ranks + 1 slots, zeroed once)."""
    tl.debug_barrier()
    gen = tl.load(pad + num_ranks, volatile=True) + 1
    tl.debug_barrier()
    tl.store(pad + num_ranks, gen)
    for peer in range(0, num_ranks):
        _release_rmw(peer_pointer(pad + rank, peer, rank, heap_bases), gen, "set", SCOPE, "release")
    for peer in range(0, num_ranks):
        bounded_spin(pad + peer, gen, bound, err, tag, SCOPE, "acquire")
    tl.debug_barrier()
