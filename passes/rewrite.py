"""Small helpers shared by passes: replacing and erasing ops safely, reading constants, running patterns to a
fixed point. (Erasing an op that still has uses aborts the process: always go through replace_op/erase_op.)"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

from mlir import ir

from ..dialects.opbase import attribute, int_value, walk_ops


def has_uses(v: ir.Value) -> bool:
    return next(iter(v.uses), None) is not None


def erase_op(op: ir.Operation) -> None:
    """Erase op; its results must have no uses left (checked here rather than aborting inside MLIR)."""
    for r in op.results:
        if has_uses(r):
            raise AssertionError(f"erasing {op.name} whose result still has uses")
    op.erase()


def replace_op(op: ir.Operation, values: Sequence[ir.Value]) -> None:
    """Replace every use of op's results with values, then erase op."""
    assert len(values) == len(op.results), f"{op.name}: {len(values)} replacements for {len(op.results)} results"
    for old, new in zip(op.results, values):
        old.replace_all_uses_with(new)
    erase_op(op)


def constant_int(v: ir.Value) -> int | None:
    """The value of an integer or index arith.constant, or None if v is not one."""
    owner = v.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)):
        return None
    owner = owner.operation
    if owner.name != "arith.constant":
        return None
    try:
        attr = attribute(owner.attributes, "value") if "value" in owner.attributes else None
    except ValueError:
        return None
    return int_value(attr) if isinstance(attr, (ir.IntegerAttr, ir.BoolAttr)) else None


Pattern = Callable[[ir.Operation], bool]


def apply_to_fixpoint(root: ir.Operation, patterns: dict[str, Pattern] | Iterable[tuple[str, Pattern]],
                      max_rounds: int = 64) -> int:
    """Apply patterns (op name -> fn(op) returning True when it rewrote op) over root until none applies.
    Returns how many rewrites happened. After each rewrite the walk starts again on a fresh list of ops, so a
    rewrite may erase any op. Every op may be rewritten a few times; more than ``max_rounds`` rewrites beyond
    4 per op means the patterns loop, which raises."""
    table = dict(patterns)
    total = 0
    limit = max_rounds + 4 * sum(1 for _ in walk_ops(root))
    while True:
        for op in walk_ops(root):
            fn = table.get(op.name)
            if fn is not None and fn(op):
                total += 1
                break  # the op list may now hold erased ops: walk again
        else:
            return total
        if total > limit:
            raise AssertionError(f"patterns did not converge after {total} rewrites")
