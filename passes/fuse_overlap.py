"""ditron-fuse-overlap: mark producer -> consumer pairs of the local view whose communication can overlap with
the computation next to it. It only annotates; ``ditron-lower-task-to-device`` reads the marks.

Recognised pairs (kind; producer -> consumer), each only when the intermediate value has exactly one use (the
fused schedule streams it straight from one op into the other and never materialises it for anyone else):

* ``ag_matmul``: ``all_gather`` over dim 0 -> the lhs of ``matmul`` (the gathered dim is the GEMM's M, so the GEMM
  can start on the rows already present, AG + GEMM);
* ``matmul_rs``: ``matmul`` -> ``reduce_scatter`` with ``reduce = "sum"`` over dim 0 (M) or 1 (N) (GEMM + RS);
* ``matmul_ar``: ``matmul`` -> ``all_reduce`` with ``reduce = "sum"`` (GEMM + AR);
* ``a2a_grouped_matmul``: static or dynamic ``all_to_all`` with split and concat dim 0 -> the lhs of
  ``grouped_matmul`` (MoE dispatch + expert GEMM).

A matmul that could be both a consumer and a producer (AG -> matmul -> RS) joins the first pair in program order
(the AG one); the other collective stays unmarked. Pairs already marked (a second run) are kept and checked.

Both ops of a pair get the discardable attribute ``ditron.overlap = {group = N : i64, kind = "...", role =
"producer" | "consumer"}``, N unique per function (0, 1, ... in program order)::

    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<2048x4096xbf16>) -> tensor<8192x4096xbf16>
    %h = "ditron_task.matmul"(%g, %w) : (tensor<8192x4096xbf16>, tensor<4096x3584xbf16>) -> tensor<8192x3584xbf16>

becomes::

    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64,
           ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "producer"}} : ...
    %h = "ditron_task.matmul"(%g, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", role = "consumer"}} : ...

``overlap_groups(fn)`` reads (and checks) the marks of a function: group -> (kind, producer op, consumer op).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from mlir import ir

from ..dialects import task
from ..dialects.context import diagnostic_at
from ..dialects.opbase import walk_ops
from ..errors import PassError
from .registry import Pass

OVERLAP_ATTR = "ditron.overlap"
KINDS = ("ag_matmul", "matmul_rs", "matmul_ar", "a2a_grouped_matmul")
ROLES = ("producer", "consumer")


@dataclass(frozen=True)
class Overlap:
    """The value of a ``ditron.overlap`` attribute."""

    group: int
    kind: str
    role: str

    def to_attr(self) -> ir.Attribute:
        return ir.DictAttr.get({"group": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), self.group),
                                "kind": ir.StringAttr.get(self.kind), "role": ir.StringAttr.get(self.role)})

    @staticmethod
    def of(op: ir.Operation | ir.OpView) -> "Overlap | None":
        """The mark on op, None if it has none; raises ValueError if the mark is malformed."""
        op = op.operation if isinstance(op, ir.OpView) else op
        if OVERLAP_ATTR not in op.attributes:
            return None
        attr = op.attributes[OVERLAP_ATTR]
        form = '{group = N : i64, kind = "...", role = "producer"|"consumer"}'
        if not isinstance(attr, ir.DictAttr):
            raise ValueError(f"'{OVERLAP_ATTR}' must be a dictionary {form}, got {attr}")
        d = ir.DictAttr(attr)
        if not all(k in d for k in ("group", "kind", "role")):
            raise ValueError(f"'{OVERLAP_ATTR}' needs group, kind and role: {form}, got {attr}")
        if not isinstance(d["group"], ir.IntegerAttr) or not isinstance(d["kind"], ir.StringAttr) or \
                not isinstance(d["role"], ir.StringAttr):
            raise ValueError(f"'{OVERLAP_ATTR}' fields have the wrong types: {form}, got {attr}")
        mark = Overlap(ir.IntegerAttr(d["group"]).value, ir.StringAttr(d["kind"]).value,
                       ir.StringAttr(d["role"]).value)
        if mark.kind not in KINDS:
            raise ValueError(f"'{OVERLAP_ATTR}' kind '{mark.kind}' is unknown (kinds: {', '.join(KINDS)})")
        if mark.role not in ROLES:
            raise ValueError(f"'{OVERLAP_ATTR}' role '{mark.role}' must be producer or consumer")
        return mark


def _error(op: ir.Operation, message: str) -> PassError:
    text = f"ditron-fuse-overlap: '{op.name}' op {message}"
    return PassError(text, [diagnostic_at(op.location, text)])


def _owner(v: ir.Value) -> ir.Operation | None:
    owner = v.owner
    return owner.operation if isinstance(owner, (ir.Operation, ir.OpView)) else None


def _only_use(v: ir.Value) -> tuple[ir.Operation, int] | None:
    """(user, operand index) if v has exactly one use."""
    uses = list(v.uses)
    if len(uses) != 1:
        return None
    return uses[0].owner.operation if isinstance(uses[0].owner, ir.OpView) else uses[0].owner, uses[0].operand_number


def _rank(v: ir.Value) -> int:
    return ir.RankedTensorType(v.type).rank if isinstance(v.type, ir.RankedTensorType) else -1


# Each matcher looks at one candidate consumer or producer and returns (kind, producer, consumer) or None.

def _match_ag_matmul(op: ir.Operation):
    mm = task.Matmul.match(op)
    if mm is None:
        return None
    producer = _owner(mm.lhs)
    ag = task.AllGather.match(producer) if producer is not None else None
    if ag is None or ag.dim != 0 or _only_use(ag.output) != (op, 0):
        return None
    return "ag_matmul", ag.op, op


def _match_matmul_collective(op: ir.Operation):
    mm = task.Matmul.match(op)
    if mm is None or _rank(mm.result) != 2:
        return None
    use = _only_use(mm.result)
    if use is None:
        return None
    rs = task.ReduceScatter.match(use[0])
    if rs is not None and rs.reduce == "sum" and rs.dim in (0, 1):
        return "matmul_rs", op, rs.op
    ar = task.AllReduce.match(use[0])
    if ar is not None and ar.reduce == "sum":
        return "matmul_ar", op, ar.op
    return None


def _match_a2a_grouped_matmul(op: ir.Operation):
    gm = task.GroupedMatmul.match(op)
    if gm is None:
        return None
    producer = _owner(gm.lhs)
    a2a = task.AllToAll.match(producer) if producer is not None else None
    if a2a is None or a2a.split_dim != 0 or a2a.concat_dim != 0 or _only_use(a2a.output) != (op, 0):
        return None
    return "a2a_grouped_matmul", a2a.op, op


_MATCHERS = (_match_ag_matmul, _match_matmul_collective, _match_a2a_grouped_matmul)


def _funcs(module: ir.Module) -> Iterator[ir.Operation]:
    return (op for op in walk_ops(module.operation) if op.name == "func.func")


def overlap_groups(fn: ir.Operation | ir.OpView) -> dict[int, tuple[str, ir.Operation, ir.Operation]]:
    """The overlap pairs marked in a function: group -> (kind, producer, consumer). Raises PassError when a mark
    is malformed or a group is not one producer feeding one consumer of the same kind."""
    fn = fn.operation if isinstance(fn, ir.OpView) else fn
    members: dict[int, dict[str, tuple[Overlap, ir.Operation]]] = {}
    for op in walk_ops(fn):
        try:
            mark = Overlap.of(op)
        except ValueError as err:
            raise _error(op, str(err)) from None
        if mark is None:
            continue
        group = members.setdefault(mark.group, {})
        if mark.role in group:
            raise _error(op, f"is a second {mark.role} of overlap group {mark.group}")
        group[mark.role] = (mark, op)
    out = {}
    for number, group in sorted(members.items()):
        if len(group) != 2:
            (mark, op), = group.values()
            missing = "consumer" if mark.role == "producer" else "producer"
            raise _error(op, f"is the {mark.role} of overlap group {number}, which has no {missing}")
        (pm, producer), (cm, consumer) = group["producer"], group["consumer"]
        if pm.kind != cm.kind:
            raise _error(consumer, f"overlap group {number} mixes kinds '{pm.kind}' and '{cm.kind}'")
        if not any(_owner(v) is not None and _owner(v) == producer for v in consumer.operands):
            raise _error(consumer, f"is the consumer of overlap group {number} but does not use its producer's "
                                   f"result")
        out[number] = (pm.kind, producer, consumer)
    return out


@dataclass(frozen=True)
class FuseOverlapPass(Pass):
    name = "ditron-fuse-overlap"
    summary = "Mark AG->matmul, matmul->RS, matmul->AR (and all_to_all->grouped_matmul) pairs that can overlap"

    def run(self, module: ir.Module) -> None:
        for fn in _funcs(module):
            existing = overlap_groups(fn)
            next_group = max(existing, default=-1) + 1
            for op in walk_ops(fn):
                if OVERLAP_ATTR in op.attributes:
                    continue
                for matcher in _MATCHERS:
                    found = matcher(op)
                    if found is None:
                        continue
                    kind, producer, consumer = found
                    if OVERLAP_ATTR in producer.attributes or OVERLAP_ATTR in consumer.attributes:
                        continue
                    producer.attributes[OVERLAP_ATTR] = Overlap(next_group, kind, "producer").to_attr()
                    consumer.attributes[OVERLAP_ATTR] = Overlap(next_group, kind, "consumer").to_attr()
                    next_group += 1
                    break
