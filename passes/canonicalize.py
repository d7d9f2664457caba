"""ditron-canonicalize: sound ditron-specific simplifications, then MLIR's canonicalizer for arith/scf.

IRDL ops have no traits, so MLIR's canonicalizer never folds or deletes them; these rules do:

* a collective over a mesh axis of size 1 is the identity:
      %y = "ditron_task.all_gather"(%x) {axis = "dp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
      return %y        // becomes: return %x   (when dp has size 1)
  (an all_to_all with split_sizes, whose result dim is dynamic, becomes a ``tensor.cast`` of its input; the
  bounded one, with recv_counts, is kept: it clips to its capacity and counts the rows);
* a shard of a shard keeps only the outer annotation;
* an op without side effects whose results are unused is erased: every Task-level op (they have value
  semantics), ``ditron_device.rank``/``num_ranks`` and ``ditron_core.rank``/``num_ranks``/``symm_at``/
  ``consume_token``;
* a Device-level copy of a region with a constant size 0 in some dim is erased.

Collectives over axes of size > 1, waits, signals, barriers, launches and copies of non-empty or unknown size are
never touched.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import tensor as tensor_d
from mlir.passmanager import PassManager

from ..dialects import core, device, task
from ..dialects.context import diagnostic_at, diagnostics_of
from ..dialects.opbase import attribute, walk_ops
from ..dialects.sharding import MESH_ATTR, Mesh
from ..errors import PassError
from .registry import Pass, option
from .rewrite import apply_to_fixpoint, constant_int, erase_op, has_uses, replace_op

# Ops without side effects: erased when their results are unused.
PURE_OPS = (*task.OPS, device.Rank, device.NumRanks, core.Rank, core.NumRanks, core.SymmAt, core.ConsumeToken)


def _cast_compatible(a: ir.Type, b: ir.Type) -> bool:
    if not (isinstance(a, ir.RankedTensorType) and isinstance(b, ir.RankedTensorType)):
        return False
    dyn = ir.ShapedType.get_dynamic_size()
    return a.element_type == b.element_type and a.rank == b.rank and \
        all(x == y or dyn in (x, y) for x, y in zip(a.shape, b.shape))


def _fold_trivial_collective(op: ir.Operation) -> bool:
    axis = ir.StringAttr(op.attributes["axis"]).value
    mesh = Mesh.enclosing(op)
    if mesh is None or axis not in mesh.axes or mesh.axis_size(axis) != 1:
        return False
    if len(op.results) != 1:  # the bounded all_to_all: even one rank clips to its capacity and counts the rows
        return False
    x, y = op.operands[0], op.results[0]
    if x.type == y.type:
        replace_op(op, [x])
        return True
    if _cast_compatible(x.type, y.type):
        cast = tensor_d.CastOp(y.type, x, loc=op.location, ip=ir.InsertionPoint(op))
        replace_op(op, [cast.result])
        return True
    return False


def _fold_shard_of_shard(op: ir.Operation) -> bool:
    inner = op.operands[0].owner
    if not isinstance(inner, (ir.Operation, ir.OpView)) or task.Shard.match(inner) is None:
        return False
    op.operands[0] = inner.operation.operands[0]
    return True


def _erase_empty_copy(op: ir.Operation) -> bool:
    if any(constant_int(s) == 0 for s in device.Copy(op).sizes):
        erase_op(op)
        return True
    return False


def erase_dead(root: ir.Operation, op_names: set[str]) -> int:
    """Erase every op named in op_names (ops without side effects or regions) whose results are unused, in one
    sweep from the end: users go before their producers, so whole dead chains disappear. Returns the count."""
    erased = 0
    for op in reversed(list(walk_ops(root))):
        if op.name in op_names and len(op.regions) == 0 and not any(has_uses(r) for r in op.results):
            erase_op(op)
            erased += 1
    return erased


@dataclass(frozen=True)
class CanonicalizePass(Pass):
    name = "ditron-canonicalize"
    summary = "Fold collectives over size-1 axes, nested shards, dead Task ops, empty copies; canonicalize arith"

    upstream: bool = option(True, "also run MLIR's canonicalizer (arith/scf folding, dead constants)")

    def run(self, module: ir.Module) -> None:
        _check_meshes(module.operation, self.name)
        patterns = {c.op_name(): _fold_trivial_collective for c in task.COLLECTIVES}
        patterns[task.Shard.op_name()] = _fold_shard_of_shard
        patterns[device.Copy.op_name()] = _erase_empty_copy
        apply_to_fixpoint(module.operation, patterns)
        erase_dead(module.operation, {w.op_name() for w in PURE_OPS})
        if self.upstream:
            try:
                PassManager.parse("builtin.module(canonicalize)").run(module.operation)
            except ir.MLIRError as err:
                raise PassError(f"{self.name}: MLIR's canonicalizer failed", diagnostics_of(err)) from None


def _check_meshes(root: ir.Operation, pass_name: str) -> None:
    """Raise PassError at the first malformed ditron.mesh (the pass may run without the verifier before it)."""
    for op in (root, *walk_ops(root)):
        if MESH_ATTR in op.attributes:
            try:
                Mesh.from_attr(attribute(op.attributes, MESH_ATTR))
            except ValueError as err:
                raise PassError(f"{pass_name}: bad '{MESH_ATTR}': {err}",
                                [diagnostic_at(op.location, f"{pass_name}: bad '{MESH_ATTR}': {err}")]) from None
