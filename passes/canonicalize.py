"""ditron-canonicalize: sound ditron-specific simplifications, then MLIR's canonicalizer for arith/scf.

IRDL ops have no traits, so MLIR's canonicalizer never folds or deletes them; these rules do:

* a collective over a mesh axis of size 1 is the identity:
      %y = "ditron_task.all_gather"(%x) {axis = "dp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
      return %y        // becomes: return %x   (when dp has size 1)
* a shard of a shard keeps only the outer annotation;
* a Task-level op whose result is unused is erased (Task ops have value semantics);
* a Device-level copy of a region of constant size 0 is erased.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.passmanager import PassManager

from ..dialects import device, task
from ..dialects.sharding import Mesh
from .registry import Pass, option
from .rewrite import apply_to_fixpoint, constant_int, erase_op, has_uses, replace_op


def _fold_trivial_collective(mesh: Mesh | None):
    def fold(op: ir.Operation) -> bool:
        axis = ir.StringAttr(op.attributes["axis"]).value
        if mesh is None or axis not in mesh.axes or mesh.axis_size(axis) != 1:
            return False
        x, y = op.operands[0], op.results[0]
        if x.type != y.type:
            return False
        replace_op(op, [x])
        return True
    return fold


def _fold_shard_of_shard(op: ir.Operation) -> bool:
    inner = op.operands[0].owner
    if not isinstance(inner, (ir.Operation, ir.OpView)) or task.Shard.match(inner) is None:
        return False
    op.operands[0] = inner.operation.operands[0]
    return True


def _erase_if_unused(op: ir.Operation) -> bool:
    if all(not has_uses(r) for r in op.results):
        erase_op(op)
        return True
    return False


def _erase_empty_copy(op: ir.Operation) -> bool:
    if any(constant_int(s) == 0 for s in device.Copy(op).sizes):
        erase_op(op)
        return True
    return False


@dataclass(frozen=True)
class CanonicalizePass(Pass):
    name = "ditron-canonicalize"
    summary = "Fold collectives over size-1 axes, nested shards, dead Task ops, empty copies; canonicalize arith"

    upstream: bool = option(True, "also run MLIR's canonicalizer (arith/scf folding, dead constants)")

    def run(self, module: ir.Module) -> None:
        mesh = Mesh.of_module(module)
        patterns = {c.op_name(): _fold_trivial_collective(mesh) for c in task.COLLECTIVES}
        patterns[task.Shard.op_name()] = _fold_shard_of_shard
        patterns[device.Copy.op_name()] = _erase_empty_copy
        apply_to_fixpoint(module.operation, patterns)
        apply_to_fixpoint(module.operation, {c.op_name(): _erase_if_unused for c in task.OPS})
        if self.upstream:
            PassManager.parse("builtin.module(canonicalize)").run(module.operation)
