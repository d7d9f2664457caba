"""The ``ditron.tiling`` record ditron-tile writes on every op it tiles (``Tiling``), and what the task-level
passes share to read their input: located errors, the level and view checks, shapes, the overlap groups
ditron-fuse-overlap marks. The choices themselves are ditron.passes.planner's; the pass is ditron.passes.tile."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mlir import ir

from ..dialects import device, task
from ..dialects.context import diagnostic_at
from ..dialects.opbase import walk_ops
from ..dialects.sharding import MESH_ATTR, Mesh, arg_sharding, result_sharding
from ..errors import PassError

TILING_ATTR = "ditron.tiling"
OVERLAP_ATTR = "ditron.overlap"
VIEW_ATTR = "ditron.view"
LEVEL_ATTR = "ditron.level"
TARGET_ATTR = "ditron.target"
DEFAULT_TARGET = "cuda:90"

OVERLAP_KINDS = {  # kind -> (producer wrapper, consumer wrapper)
    "ag_matmul": (task.AllGather, task.Matmul),
    "matmul_rs": (task.Matmul, task.ReduceScatter),
    "matmul_ar": (task.Matmul, task.AllReduce),
}
# marked by ditron-fuse-overlap but not fused by the device lowering yet: the two ops are lowered one by one
DEFERRED_KINDS = ("a2a_grouped_matmul",)


# ------------------------------------------------------------------------------------------------ errors

def op_error(pass_name: str, op: ir.Operation, message: str) -> PassError:
    """A PassError located at op: ``file:line:col: error: <pass>: '<op>' op <message>``."""
    text = f"{pass_name}: '{op.name}' op {message}"
    return PassError(text, [diagnostic_at(op.location, text)])


# ----------------------------------------------------------------------------------------- the attribute

@dataclass(frozen=True)
class Tiling:
    """The choices ditron-tile records on an op (``ditron.tiling``). Fields left None do not apply to the op."""

    kind: str
    target: str
    world: int = 1
    # core level: the GEMM (or elementwise) kernel
    block_m: int | None = None
    block_n: int | None = None
    block_k: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    group_m: int | None = None
    persistent: bool | None = None
    stream_k: int | None = None  # tiles shared out by K steps
    split_k: int | None = None  # K slices per tile (None: the template's split_for rule)
    loads: str | None = None  # "tma" | "pointer" (None: the template's rule for the tile)
    sm_budget: int | None = None
    block: int | None = None  # elements per program of an elementwise kernel
    # device level: the data movement
    shard_rows: int | None = None
    chunk_rows: int | None = None
    num_chunks: int | None = None  # per shard
    engine: str | None = None
    comm_sms: int | None = None
    algorithm: str | None = None
    # AG+GEMM in one launch: the own rows' tiles first, from the shard, while the other programs push it
    own_first: bool | None = None
    # where the GEMM config came from when not from the model: "tuning-cache" (ditron tune's winner) or
    # "gemm-config" (the option)
    config_from: str | None = None
    # a matmul's operands copied to rows on TMA lines before its GEMM: "a", "b" or "ab" (cost_model.repack_choice)
    repack: str | None = None
    est_us: float | None = None

    def to_attr(self) -> ir.DictAttr:
        i64 = ir.IntegerType.get_signless(64)
        entries = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if isinstance(v, bool):
                entries[f.name] = ir.BoolAttr.get(v)
            elif isinstance(v, int):
                entries[f.name] = ir.IntegerAttr.get(i64, v)
            elif isinstance(v, float):
                entries[f.name] = ir.FloatAttr.get_f64(round(v, 3))
            else:
                entries[f.name] = ir.StringAttr.get(v)
        return ir.DictAttr.get(entries)

    @staticmethod
    def from_attr(attr: ir.Attribute) -> "Tiling":
        """Raises ValueError saying what is wrong when attr is not a tiling dictionary."""
        if not isinstance(attr, ir.DictAttr):
            raise ValueError(f"'{TILING_ATTR}' must be a dictionary, got {attr}")
        values = {}
        for f in dataclasses.fields(Tiling):
            if f.name not in attr:
                continue
            a = attr[f.name]
            want = str if f.name in ("kind", "target", "engine", "algorithm", "config_from", "repack",
                                      "loads") else \
                float if f.name == "est_us" else bool if f.name in ("persistent", "own_first") else int
            if want is bool and isinstance(a, ir.BoolAttr):
                values[f.name] = a.value
            elif want is int and isinstance(a, ir.IntegerAttr) and not isinstance(a, ir.BoolAttr):
                values[f.name] = a.value
            elif want is float and isinstance(a, (ir.FloatAttr, ir.IntegerAttr)):
                values[f.name] = float(a.value)
            elif want is str and isinstance(a, ir.StringAttr):
                values[f.name] = a.value
            else:
                raise ValueError(f"'{TILING_ATTR}' field '{f.name}' must be a{'n' if want is int else ''} "
                                 f"{want.__name__}, got {a}")
        if "kind" not in values or "target" not in values:
            raise ValueError(f"'{TILING_ATTR}' needs 'kind' and 'target', got {attr}")
        return Tiling(**values)

    @staticmethod
    def of(op: ir.Operation) -> "Tiling | None":
        return Tiling.from_attr(op.attributes[TILING_ATTR]) if TILING_ATTR in op.attributes else None



# ------------------------------------------------------------------------------------------ reading input

def functions(module: ir.Module) -> list[ir.Operation]:
    return [op.operation for op in module.body.operations if op.operation.name == "func.func"]


def str_attr(op: ir.Operation, name: str) -> str | None:
    return ir.StringAttr(op.attributes[name]).value if name in op.attributes else None


def require_task_level(module: ir.Module, pass_name: str) -> Mesh | None:
    """Raise unless module is a local-view task program: no device ops, no device functions, no global-view
    shardings (a function with sharded arguments must be marked ditron.view = "local" by ditron-partition)."""
    for op in walk_ops(module.operation):
        if op.name.startswith(device.DeviceOp.DIALECT + "."):
            raise op_error(pass_name, op, "is device-level IR, but this pass transforms task-level IR in the local "
                                          "view; run it before ditron-lower-task-to-device")
    for func in functions(module):
        if str_attr(func, LEVEL_ATTR) == "device":
            raise op_error(pass_name, func, "is a device-level function (ditron.level = \"device\"); this pass "
                                            "expects task-level IR")
        if str_attr(func, VIEW_ATTR) == "local":
            continue
        ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        sharded = any(s is not None and not s.is_replicated for s in
                      [arg_sharding(func, i) for i in range(len(ftype.inputs))] +
                      [result_sharding(func, i) for i in range(len(ftype.results))])
        if sharded:
            raise op_error(pass_name, func, "is in the global view (sharded arguments, no ditron.view = \"local\"); "
                                            "run ditron-partition first")
    return Mesh.of_module(module)


def require_device_level(module: ir.Module, pass_name: str, task_level_hint: str) -> list[ir.Operation]:
    """The device functions of module (ditron.level = "device"), for a pass that transforms device-level IR; raise
    if the module still holds task-level ops (saying ``task_level_hint``) or has no device function."""
    for op in walk_ops(module.operation):
        if op.name.startswith(task.TaskOp.DIALECT + "."):
            raise op_error(pass_name, op, f"is task-level IR; {task_level_hint}")
    funcs = device.device_functions(module)
    if not funcs and not list(module.body.operations):
        return []  # an empty module: nothing to transform (ditron-default on one is a no-op, as in mlir-opt)
    if not funcs:
        raise PassError(f"{pass_name}: the module has no device function ({LEVEL_ATTR} = \"device\"); run "
                        "ditron-lower-task-to-device first")
    return funcs


def axis_size(pass_name: str, mesh: Mesh | None, op: ir.Operation, axis: str) -> int:
    if mesh is None:
        raise op_error(pass_name, op, f"uses mesh axis '{axis}' but the module has no '{MESH_ATTR}' attribute")
    if axis not in mesh.axes:
        raise op_error(pass_name, op, f"mesh axis '{axis}' is not in the mesh (axes: {', '.join(mesh.axes)})")
    return mesh.axis_size(axis)


def shape_of(v: ir.Value) -> tuple[int, ...]:
    return tuple(ir.RankedTensorType(v.type).shape)


def elem_bytes(v: ir.Value) -> int:
    t = ir.ShapedType(v.type).element_type
    width = t.width if isinstance(t, (ir.IntegerType, ir.FloatType)) else 32
    return max(1, width // 8)


@dataclass
class OverlapGroup:
    """Two ops marked by ditron-fuse-overlap as one overlappable pair."""

    group: int
    kind: str
    producer: ir.Operation
    consumer: ir.Operation

    @property
    def collective(self) -> ir.Operation:
        return self.producer if self.kind == "ag_matmul" else self.consumer

    @property
    def matmul(self) -> ir.Operation:
        return self.consumer if self.kind == "ag_matmul" else self.producer


def _overlap_mark(pass_name: str, op: ir.Operation) -> tuple[int, str, str] | None:
    if OVERLAP_ATTR not in op.attributes:
        return None
    try:
        d = ir.DictAttr(op.attributes[OVERLAP_ATTR])
        group = ir.IntegerAttr(d["group"]).value
        kind, role = ir.StringAttr(d["kind"]).value, ir.StringAttr(d["role"]).value
    except (KeyError, ValueError, TypeError):
        raise op_error(pass_name, op, f"has a malformed '{OVERLAP_ATTR}' {op.attributes[OVERLAP_ATTR]}; expected "
                                      "{group = N : i64, kind = \"ag_matmul\"|\"matmul_rs\"|\"matmul_ar\", "
                                      "role = \"producer\"|\"consumer\"}") from None
    if kind not in OVERLAP_KINDS and kind not in DEFERRED_KINDS:
        raise op_error(pass_name, op, f"has overlap kind '{kind}'; known kinds: "
                                      f"{', '.join((*OVERLAP_KINDS, *DEFERRED_KINDS))}")
    if role not in ("producer", "consumer"):
        raise op_error(pass_name, op, f"has overlap role '{role}'; expected producer or consumer")
    return group, kind, role


def overlap_groups(pass_name: str, func: ir.Operation) -> list[OverlapGroup]:
    """The overlap groups of func, checked: both ops present, of the right kinds, connected producer -> consumer,
    along the dims the fused lowering supports."""
    marks: dict[int, dict[str, ir.Operation]] = {}
    kinds: dict[int, str] = {}
    for op in walk_ops(func):
        mark = _overlap_mark(pass_name, op)
        if mark is None:
            continue
        group, kind, role = mark
        if kinds.setdefault(group, kind) != kind:
            raise op_error(pass_name, op, f"is in overlap group {group} as '{kind}', but the group's other op says "
                                          f"'{kinds[group]}'")
        if role in marks.setdefault(group, {}):
            raise op_error(pass_name, op, f"is a second {role} of overlap group {group}")
        marks[group][role] = op
    out = []
    for group, roles in sorted(marks.items()):
        kind = kinds[group]
        for role in ("producer", "consumer"):
            if role not in roles:
                other = next(iter(roles.values()))
                raise op_error(pass_name, other, f"is in overlap group {group} ('{kind}') but the group has no "
                                                 f"{role}")
        g = OverlapGroup(group, kind, roles["producer"], roles["consumer"])
        if kind in DEFERRED_KINDS:
            continue
        _check_group(pass_name, g)
        if g.kind == "matmul_rs" and task.ReduceScatter(g.consumer).dim != 0:
            continue  # GEMM+RS over columns: lowered as GEMM, then reduce_scatter
        out.append(g)
    return out


def _check_group(pass_name: str, g: OverlapGroup) -> None:
    want_p, want_c = OVERLAP_KINDS[g.kind]
    for op, want, role in ((g.producer, want_p, "producer"), (g.consumer, want_c, "consumer")):
        if want.match(op) is None:
            raise op_error(pass_name, op, f"is the {role} of overlap group {g.group} ('{g.kind}'), which needs a "
                                          f"'{want.op_name()}' there")
    if g.kind == "ag_matmul":
        ag, mm = task.AllGather(g.producer), task.Matmul(g.consumer)
        if mm.lhs != ag.output:
            raise op_error(pass_name, g.consumer, f"is the consumer of overlap group {g.group} but its lhs is not "
                                                  "the all_gather's result; AG+GEMM overlaps the gathered rows of "
                                                  "the lhs only")
        if ag.dim != 0:
            raise op_error(pass_name, g.producer, f"gathers dim {ag.dim}, but AG+GEMM (overlap group {g.group}) "
                                                  "needs the rows (dim 0) of the matmul's lhs gathered")
        return
    mm = task.Matmul(g.producer)
    coll = g.consumer
    if coll.operands[0] != mm.result:
        raise op_error(pass_name, coll, f"is the consumer of overlap group {g.group} but does not take the "
                                        "matmul's result")
