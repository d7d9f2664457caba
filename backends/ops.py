"""The small "ops" interface the vendors' primitives modules (backends/<vendor>/primitives.py) are written against.

A primitive's assembly is written once, in its vendor's primitives module, as calls on an ``ops`` object; two
implementations build it:

* ``MlirOps`` (here): generic-form TTIR in ditron's MLIR context (ditron.dialects.ttir), used by
  ditron-lower-core-to-triton on core-level kernels (the templates);
* ``ditron.language.tracing.TritonOps``: Triton's own builder (a builtin's ``_semantic``), used while stock Triton
  traces a ``@ditron.jit`` kernel.

Values are whatever the implementation builds (``ir.Value`` or ``triton.language.tensor``). Every method works on a
scalar or a tensor (of pointers); integers given where a value is expected are i32 constants, broadcast to the
pointer's shape.

    inline_asm(asm, constraints, operands, *, pure, like=None) -> i32 value, shaped like ``like`` (else scalar):
        tt.elementwise_inline_asm with one i32 result.
    atomic_rmw(kind, ptr, value, *, sem, scope) -> the old values: tt.atomic_rmw (kind: Triton's rmw names, "add",
        "xchg", ...; sem: relaxed | acquire | release | acq_rel; scope: gpu | sys), every lane enabled.
    atomic_cas(ptr, cmp, value, *, sem, scope) -> the old values: tt.atomic_cas.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

from ..schema import NOTIFY_RMW  # noqa: F401 - the notify ops' rmw kinds, for the primitives modules


class PrimitiveOps(Protocol):
    def inline_asm(self, asm: str, constraints: str, operands: Sequence[Any], *, pure: bool,
                   like: Any = None) -> Any: ...

    def atomic_rmw(self, kind: str, ptr: Any, value: Any, *, sem: str, scope: str) -> Any: ...

    def atomic_cas(self, ptr: Any, cmp: Any, value: Any, *, sem: str, scope: str) -> Any: ...


class MlirOps:
    """PrimitiveOps over ditron.dialects.ttir: builds at the current MLIR insertion point and location."""

    @staticmethod
    def _i32_like(ptr, value):
        from ..dialects import ttir
        if isinstance(value, int):
            return ttir.c(value, ttir.like(ptr, ttir.i32()))
        return ttir.broadcast(value, ttir.shape(ptr))

    def inline_asm(self, asm, constraints, operands, *, pure, like=None):
        from ..dialects import ttir
        result = ttir.like(like, ttir.i32()) if like is not None else ttir.i32()
        return ttir.inline_asm(asm, constraints, list(operands), result, pure=pure)

    def atomic_rmw(self, kind, ptr, value, *, sem, scope):
        from ..dialects import ttir
        # a constant operand is built before the mask, a value's broadcast after it (the order the lit tests see)
        operand = self._i32_like(ptr, value) if isinstance(value, int) else None
        mask = ttir.c(True, ttir.like(ptr, ttir.i1()))
        operand = self._i32_like(ptr, value) if operand is None else operand
        return ttir.atomic_rmw(kind, ptr, operand, mask, sem=sem, scope=scope)

    def atomic_cas(self, ptr, cmp, value, *, sem, scope):
        from ..dialects import ttir
        return ttir.atomic_cas(ptr, self._i32_like(ptr, cmp), self._i32_like(ptr, value), sem=sem, scope=scope)


MLIR_OPS = MlirOps()
