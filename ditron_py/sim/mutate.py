"""Mutation testing of device programs: break one synchronisation or one region at a time and check that the
simulator reports it.

A ``Mutation`` names one op (by kind and index in pre-order within the device function, plus its location) and
what to do to it:

* ``drop-wait`` / ``drop-signal`` / ``drop-barrier``: erase that ``ditron_device.wait`` / ``signal`` / ``barrier``;
* ``shift-src`` / ``shift-dst``: add ``amount`` to a copy's source / destination offset in ``dim`` (``amount`` =
  ``None`` shifts by the copy's own size in that dim: the neighbouring chunk);
* ``shift-launch``: add ``amount`` (default 1) to one index operand of a launch (a chunk's row offset, a wait
  value ...), one mutation per launch and index operand;
* ``drop-kernel-wait`` / ``drop-kernel-notify``: remove the ``wait`` / ``notify`` part of a kernel's
  ``ditron.kernel`` record, so its template generates tiles without them.

``mutations(module)`` lists every applicable mutation; ``apply(module, m)`` applies one in place with the MLIR
bindings; ``run_mutants(text, world_size, ...)`` parses a fresh module per mutation, applies it, simulates and
returns each mutation with its result (a mutation is *caught* when the result has a finding).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from mlir import ir

from ..dialects import device
from ..dialects.context import ditron_context, parse_module
from ..dialects.device import device_functions
from ..dialects.opbase import walk_ops
from ..kernels import KERNEL_ATTR
from .program import loc_of
from .report import Loc, SimResult, SimulationError

OP_KINDS = ("drop-wait", "drop-signal", "drop-barrier", "shift-src", "shift-dst", "shift-launch")
RECORD_KINDS = ("drop-kernel-wait", "drop-kernel-notify")
KINDS = OP_KINDS + RECORD_KINDS

_TARGET = {"drop-wait": device.Wait, "drop-signal": device.Signal, "drop-barrier": device.Barrier,
           "shift-src": device.Copy, "shift-dst": device.Copy, "shift-launch": device.Launch}
_RECORD_KEY = {"drop-kernel-wait": "wait", "drop-kernel-notify": "notify"}


@dataclass(frozen=True)
class Mutation:
    kind: str
    index: int          # index among the targets of this kind (ops in pre-order, or kernels in module order)
    loc: Loc
    target: str         # a short description of the op or kernel
    dim: int = 0
    amount: int | None = None

    def __str__(self) -> str:
        extra = ""
        if self.kind == "shift-launch":
            extra = f" by {self.amount}"
        elif self.kind.startswith("shift"):
            extra = f" by {'its size' if self.amount is None else self.amount} in dim {self.dim}"
        return f"{self.kind} #{self.index} ({self.target} at {self.loc}){extra}"


def _device_ops(module: ir.Module, wrapper) -> list[ir.Operation]:
    out = []
    for func in device_functions(module):
        out.extend(op for op in walk_ops(func) if wrapper.match(op) is not None)
    return out


def _launch_scalars(module: ir.Module) -> list[tuple[ir.Operation, int]]:
    """(launch, operand position) of every index operand of every launch, in pre-order."""
    out = []
    for op in _device_ops(module, device.Launch):
        out.extend((op, i) for i, v in enumerate(op.operands) if isinstance(v.type, ir.IndexType))
    return out


def _kernels_with(module: ir.Module, key: str) -> list[ir.Operation]:
    """The kernels whose record has part ``key`` and stays a record their template accepts without it (a one-launch
    gather needs its wait: dropping it describes no kernel the compiler could emit, so it is no mutant)."""
    out = []
    for op in walk_ops(module.operation):
        if KERNEL_ATTR in op.attributes:
            rec = op.attributes[KERNEL_ATTR]
            if isinstance(rec, ir.DictAttr) and key in rec and _valid_without(rec, key):
                out.append(op)
    return out


def _valid_without(attr: ir.DictAttr, key: str) -> bool:
    from ..errors import DitronError
    from ..kernels import KernelRecord, get_template
    try:
        rec = KernelRecord.from_attr(attr)
        del rec[key]
        check = getattr(get_template(rec.template), "check", None)
        if check is not None:
            check(rec)
    except (DitronError, KeyError, TypeError, ValueError):
        return False
    return True


def _sym(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value if "sym_name" in op.attributes else op.name


def mutations(module: ir.Module, kinds: Iterable[str] = KINDS, *, dim: int = 0,
              amount: int | None = None) -> list[Mutation]:
    """Every mutation of the given kinds that applies to module's device function(s) and kernels."""
    out = []
    for kind in kinds:
        if kind not in KINDS:
            raise SimulationError(f"unknown mutation kind '{kind}' (kinds: {', '.join(KINDS)})")
        if kind == "shift-launch":
            for i, (op, pos) in enumerate(_launch_scalars(module)):
                out.append(Mutation(kind, i, loc_of(op), f"launch of @{device.Launch(op).kernel}, operand {pos}",
                                    pos, 1 if amount is None else amount))
        elif kind in _TARGET:
            for i, op in enumerate(_device_ops(module, _TARGET[kind])):
                out.append(Mutation(kind, i, loc_of(op), op.name.split(".")[-1], dim, amount))
        else:
            for i, op in enumerate(_kernels_with(module, _RECORD_KEY[kind])):
                out.append(Mutation(kind, i, loc_of(op), f"kernel @{_sym(op)}"))
    return out


def apply(module: ir.Module, m: Mutation) -> None:
    """Apply mutation m to module, in place."""
    if m.kind in _RECORD_KEY:
        op = _kernels_with(module, _RECORD_KEY[m.kind])[m.index]
        rec = ir.DictAttr(op.attributes[KERNEL_ATTR])
        kept = {a.name: a.attr for a in rec if a.name != _RECORD_KEY[m.kind]}
        op.attributes[KERNEL_ATTR] = ir.DictAttr.get(kept)
        return
    if m.kind == "shift-launch":
        op, position = _launch_scalars(module)[m.index]
        _shift_operand(op, position, m.amount if m.amount is not None else 1)
        return
    op = _device_ops(module, _TARGET[m.kind])[m.index]
    if m.kind.startswith("drop"):
        op.erase()
        return
    copy = device.Copy(op)
    n = copy.rank
    if not 0 <= m.dim < n:
        raise SimulationError(f"mutation {m}: the copy has {n} dim(s)")
    which = 0 if m.kind == "shift-src" else n
    _shift_operand(op, 4 + which + m.dim, copy.sizes[m.dim] if m.amount is None else m.amount)


def _shift_operand(op: ir.Operation, position: int, delta: ir.Value | int) -> None:
    """Replace operand ``position`` of op (an index) by itself + delta, computed just before op."""
    index = ir.IndexType.get()
    with ir.InsertionPoint(op), op.location:
        if isinstance(delta, int):
            delta = ir.Operation.create("arith.constant", results=[index],
                                        attributes={"value": ir.IntegerAttr.get(index, delta)}).results[0]
        shifted = ir.Operation.create("arith.addi", results=[index],
                                      operands=[op.operands[position], delta]).results[0]
    op.operands[position] = shifted


@dataclass
class MutantResult:
    mutation: Mutation
    result: SimResult

    @property
    def caught(self) -> bool:
        return bool(self.result.findings)


def run_mutants(source: str | Callable[[], ir.Module], world_size: int, *, kinds: Iterable[str] = KINDS,
                filename: str = "<mutant>", dim: int = 0, amount: int | None = None,
                **simulate_kwargs: Any) -> list[MutantResult]:
    """Apply each mutation of ``kinds`` to a fresh module, simulate it, and return the results. ``source`` is MLIR
    text (parsed with ``filename`` in its locations) or a function that builds the module in the current context."""
    from . import simulate

    def fresh() -> ir.Module:
        return parse_module(source, filename) if isinstance(source, str) else source()

    with ditron_context():
        found = mutations(fresh(), kinds, dim=dim, amount=amount)
    out = []
    for m in found:
        with ditron_context():
            module = fresh()
            apply(module, m)
            result = simulate(module, world_size, **simulate_kwargs)
            del module
        out.append(MutantResult(m, result))
    return out
