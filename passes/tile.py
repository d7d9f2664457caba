"""ditron-tile: multi-level tiling. Chooses, for every op of a local-view task program, the device-level chunking
(rows per chunk, chunks per shard, copy engine, SMs given to communication, all-gather / reduce-scatter /
all-reduce algorithm) and the core tile
configuration (BLOCK_M/N/K, warps, stages, grouped order, persistent or not, SM budget), from the cost model of
ditron.cost_model fed by the target's peak numbers. Every choice can be forced by an option.

Input: task level, local view (after ditron-partition / ditron-fuse-overlap). Output: the same ops, each with
``ditron.tiling = {...}``; the two ops of an overlap group carry the same dictionary.

    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.overlap = {group = 0 : i64, ...}}
    %h = "ditron_task.matmul"(%g, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", ...}}
  becomes (ditron-tile{target=cuda:90})
    %g = "ditron_task.all_gather"(%x) {..., ditron.tiling = {kind = "ag_matmul", chunk_rows = 1024 : i64,
          num_chunks = 2 : i64, engine = "copy_engine", block_m = 128 : i64, block_n = 256 : i64, ...}}
    %h = "ditron_task.matmul"(%g, %w) {..., ditron.tiling = {<the same>}}

The module attribute ``ditron.target`` (else the ``target`` option) names the target.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from mlir import ir

from ..cost_model import (EPILOGUE_GATHER_SLOWDOWN, GemmConfig, TargetPeaks, ag_gemm_estimate,
                          ag_gemm_one_launch_estimate, all_reduce_estimates,
                          all_reduce_one_launch_time, all_reduce_push_launch_time, all_reduce_two_shot_launch_time,
                          copy_time, gemm_candidates, gemm_push_estimate, gemm_push_sum_estimate, gemm_split,
                          gemm_tiles, gemm_rs_epilogue_estimate, gemm_rs_estimate, gemm_time, local_copy_time,
                          peaks_for, reduce_scatter_estimates, stream_k_tiles)
from ..dialects import device, task
from ..kernels.copy import sm_copy_refusal
from ..dialects.context import diagnostic_at
from ..dialects.opbase import walk_ops
from ..dialects.sharding import MESH_ATTR, Mesh, arg_sharding, result_sharding
from ..errors import PassError, TargetError
from .registry import Pass, option

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
ENGINES = ("copy_engine", "sm")
# push: one-shot by SM stores into the peers' inboxes (engine sm only)
ALL_REDUCE_ALGORITHMS = ("one_shot", "two_shot", "push")
# GEMM+AR may also reduce in the GEMM's epilogue (as GEMM+RS does), then all-gather the reduced rows
# or push and sum in one launch (push_sum: each GEMM tile pushed to the peers, then summed with theirs in its epilogue;
# every program resident)
GEMM_AR_ALGORITHMS = ALL_REDUCE_ALGORITHMS + ("epilogue", "push_sum")
# push_sum beyond one wave (persistent programs, each tile waiting for the peers' same tile before the program's
# next one): the model offers it up to this many waves. 2xH200, push_sum forced against the model's push, two runs
# each in one device call (results/ablation_gemm_ar_push_sum_waves.csv): 70B M=1024 (2 waves of 128x256 tiles)
# 364-376 us against 371-387; 8B M=8192 (8 waves) 792-807 against 758-764, 70B M=8192 (16 waves) 2840-2875 against
# 2746-2748: a push overlaps the next tiles, a summing tile stalls its program until the peers' copy lands
PUSH_SUM_MAX_WAVES = 2
# those the model chooses among for GEMM+AR: two_shot (GEMM+RS with reduce kernels on a few SMs, then an all-gather)
# ran 3-9x over its estimate at every measured shape (2xH200 ablation, bench_dist --passes
# ditron-tile:all-reduce=two_shot: LLaMA-8B M=8192 4100 us against 864 for one_shot), so it is only run when asked
GEMM_AR_MODEL_ALGORITHMS = ("one_shot", "epilogue", "push", "push_sum")
# GEMM+RS: the reduction in the GEMM's epilogue (partials pulled by the copy engine), in reduce kernels on SMs, in one
# reduce launch after the GEMM (one_launch), or push: the GEMM stores each tile of a peer's rows into that peer's
# inbox, then one launch sums the own rows (no end barrier: the push fences itself); push_sum: the same push, and
# the own rows' tiles, last, add the inbox in the GEMM's epilogue (no reduce launch)
REDUCE_SCATTER_ALGORITHMS = ("epilogue", "reduce_kernel", "one_launch", "push", "push_sum")
# AG+GEMM's gather: pull (offer, the peers pull), push (copies into every rank's buffer), both by streams beside the
# GEMM; one_launch: the GEMM's programs push the shard themselves before their first tile (gemm template 'gather')
ALL_GATHER_ALGORITHMS = ("pull", "push", "one_launch")
MAX_CHUNKS_PER_SHARD = 16
# What the end barrier adds to a call of a GEMM+RS / GEMM+AR that does not fence itself (every algorithm but push):
# 2xH200, the same programs with and without it: 3.1-3.4 us per call (benchmarks/results/ablation_end_barrier.csv),
# the barrier kernel 4.2-4.6 us in a profile
END_BARRIER_TIME = 3.5e-6


def _better(best: tuple | None, choice: tuple | None) -> tuple | None:
    """The plan to keep of the best so far and a candidate (time first): the candidate only if it is more than
    0.1 % faster, so that ties keep the earlier (simpler) plan."""
    if choice is not None and (best is None or choice[0] < best[0] * 0.999):
        return choice
    return best


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
            want = str if f.name in ("kind", "target", "engine", "algorithm") else \
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


def _str_attr(op: ir.Operation, name: str) -> str | None:
    return ir.StringAttr(op.attributes[name]).value if name in op.attributes else None


def require_task_level(module: ir.Module, pass_name: str) -> Mesh | None:
    """Raise unless module is a local-view task program: no device ops, no device functions, no global-view
    shardings (a function with sharded arguments must be marked ditron.view = "local" by ditron-partition)."""
    for op in walk_ops(module.operation):
        if op.name.startswith(device.DeviceOp.DIALECT + "."):
            raise op_error(pass_name, op, "is device-level IR, but this pass transforms task-level IR in the local "
                                          "view; run it before ditron-lower-task-to-device")
    for func in functions(module):
        if _str_attr(func, LEVEL_ATTR) == "device":
            raise op_error(pass_name, func, "is a device-level function (ditron.level = \"device\"); this pass "
                                            "expects task-level IR")
        if _str_attr(func, VIEW_ATTR) == "local":
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


# ---------------------------------------------------------------------------------------------- the pass

@dataclass(frozen=True)
class TilePass(Pass):
    name = "ditron-tile"
    summary = "Choose chunk sizes, copy engines, SM split and GEMM tile configs from the cost model"

    target: str = option("", "target whose peak numbers feed the model (default: module's ditron.target, "
                             "else cuda:90)")
    num_sms: int | None = option(None, "SMs (CUs) one rank may use (default: the target's count)")
    block_m: int | None = option(None, "GEMM BLOCK_M")
    block_n: int | None = option(None, "GEMM BLOCK_N")
    block_k: int | None = option(None, "GEMM BLOCK_K")
    num_warps: int | None = option(None, "warps per GEMM program")
    num_stages: int | None = option(None, "software pipeline stages of the GEMM K loop")
    group_m: int | None = option(None, "grouped (L2-friendly) tile order: row tiles per group")
    persistent: bool | None = option(None, "persistent GEMM (one program per SM looping over tiles)")
    stream_k: bool = option(False, "stream-K: share the last partial wave of a matmul's tiles out by K steps over "
                                   "every SM (persistent; not in overlapped groups)")
    chunk_rows: int | None = option(None, "rows per chunk of the data movement")
    num_chunks: int | None = option(None, "chunks per shard (alternative to chunk-rows)")
    engine: str = option("", "copy engine for chunk copies: copy_engine or sm (default: the model's choice)")
    comm_sms: int | None = option(None, "SMs given to communication kernels (copies on SMs, reductions)")
    all_reduce: str = option("", "all-reduce algorithm: one_shot, two_shot or push (one-shot by SM stores into "
                                 "the peers' buffers), or for GEMM+AR also epilogue (default: the model's choice)")
    all_gather: str = option("", "AG+GEMM's all-gather: push (each rank copies its shard into every rank's gather "
                                 "buffer), pull (it offers the shard, the peers pull it) or one_launch (the GEMM's "
                                 "programs push the shard before their tiles) (default: the model's choice)")
    own_first: bool | None = option(None, "AG+GEMM in one launch: the own rows' tiles first, read from the shard "
                                          "while programs without one push it (true), or every program pushes "
                                          "before its tiles (false); implies all-gather=one_launch (default: the "
                                          "model's choice)")
    reduce_scatter: str = option("", "GEMM+RS reduction: epilogue (peer partials pulled by the copy engine and "
                                     "added in the GEMM's epilogue), reduce_kernel (reduction kernels on SMs "
                                     "beside the GEMM), one_launch (the GEMM, then one reduce launch of the own "
                                     "rows), push (the GEMM stores the peers' rows into their inboxes, then one "
                                     "launch sums the own rows) or push_sum (the same push; the own rows' tiles "
                                     "add the inbox in the GEMM's epilogue); a standalone reduce-scatter takes reduce_kernel "
                                     "(staged by the copy engine) or one_launch (default: the model's choice)")
    elementwise_block: int | None = option(None, "elements per program of elementwise kernels")

    def __post_init__(self):
        for key in ("block_m", "block_n", "block_k", "elementwise_block"):
            v = getattr(self, key)
            if v is not None and (v < 16 or v & (v - 1)):
                raise ValueError(f"{key.replace('_', '-')} must be a power of two >= 16, got {v}")
        if self.num_warps is not None and self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num-warps must be 1, 2, 4, 8 or 16, got {self.num_warps}")
        for key in ("num_stages", "group_m", "chunk_rows", "num_chunks", "num_sms"):
            v = getattr(self, key)
            if v is not None and v < 1:
                raise ValueError(f"{key.replace('_', '-')} must be >= 1, got {v}")
        if self.comm_sms is not None and self.comm_sms < 0:
            raise ValueError(f"comm-sms must be >= 0, got {self.comm_sms}")
        if self.chunk_rows is not None and self.num_chunks is not None:
            raise ValueError("give chunk-rows or num-chunks, not both")
        if self.engine and self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got '{self.engine}'")
        if self.all_reduce and self.all_reduce not in GEMM_AR_ALGORITHMS:
            raise ValueError(f"all-reduce must be one of {', '.join(GEMM_AR_ALGORITHMS)}, got '{self.all_reduce}'")
        if self.all_gather and self.all_gather not in ALL_GATHER_ALGORITHMS:
            raise ValueError(f"all-gather must be one of {', '.join(ALL_GATHER_ALGORITHMS)}, got '{self.all_gather}'")
        if self.own_first is not None and self.all_gather not in ("", "one_launch"):
            raise ValueError(f"own-first orders the tiles of all-gather=one_launch; it does not apply to "
                             f"all-gather={self.all_gather}")
        if self.reduce_scatter and self.reduce_scatter not in REDUCE_SCATTER_ALGORITHMS:
            raise ValueError(f"reduce-scatter must be one of {', '.join(REDUCE_SCATTER_ALGORITHMS)}, got "
                             f"'{self.reduce_scatter}'")

    def run(self, module: ir.Module) -> None:
        peaks = self._peaks(module)
        if self.comm_sms is not None and self.comm_sms > peaks.num_sms:
            raise PassError(f"pass '{self.name}': comm-sms={self.comm_sms} exceeds the {peaks.num_sms} SMs of "
                            f"{peaks.target}{' (num-sms)' if self.num_sms else ''}")
        mesh = require_task_level(module, self.name)
        for func in functions(module):
            planner = _Planner(self, peaks, mesh)
            grouped = set()
            for g in overlap_groups(self.name, func):
                tiling = planner.group(g)
                for op in (g.producer, g.consumer):
                    op.attributes[TILING_ATTR] = tiling.to_attr()
                    grouped.add(op)
            for op in walk_ops(func):
                if op in grouped:
                    continue
                tiling = planner.single(op)
                if tiling is not None:
                    op.attributes[TILING_ATTR] = tiling.to_attr()

    def _peaks(self, module: ir.Module) -> TargetPeaks:
        target = self.target or _str_attr(module.operation, TARGET_ATTR) or DEFAULT_TARGET
        try:
            return peaks_for(target, num_sms=self.num_sms)
        except TargetError as err:
            raise PassError(f"{self.name}: {err}") from None


class _Planner:
    """Cost-model decisions for one function, with the pass's overrides applied."""

    def __init__(self, opts: TilePass, peaks: TargetPeaks, mesh: Mesh | None):
        self.o, self.peaks, self.mesh = opts, peaks, mesh
        self.vendor = peaks.target.split(":")[0]

    # ---- core-level GEMM configuration

    def gemm_config(self, op: ir.Operation, m: int, n: int, k: int, sms: int, eb: int,
                    split: bool = False, rows_per_tile_of: int = 0) -> GemmConfig | None:
        """The candidate tile with the least modelled time; ``rows_per_tile_of``: only tiles whose BLOCK_M divides
        it (None if none does)."""
        o = self.o
        forced = {f: getattr(o, f) for f in ("block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m")
                  if getattr(o, f) is not None}
        candidates = [dataclasses.replace(c, **forced) for c in gemm_candidates(self.peaks, eb)] if forced else \
            gemm_candidates(self.peaks, eb)
        if forced and not candidates:
            candidates = [dataclasses.replace(gemm_candidates(self.peaks, 2)[0], **forced)]
        fits = [c for c in candidates if c.smem_bytes(eb, self.vendor) <= self.peaks.smem_per_sm]
        if not fits:
            c = candidates[0]
            raise op_error(o.name, op, f"tile {c.block_m}x{c.block_n}x{c.block_k} with {c.num_stages} stages needs "
                                       f"{c.smem_bytes(eb, self.vendor)} bytes of shared memory; "
                                       f"{self.peaks.target} has {self.peaks.smem_per_sm}: lower num-stages or the "
                                       "block sizes")
        ranked = [c for c in fits if not rows_per_tile_of or rows_per_tile_of % c.block_m == 0]
        if not ranked:
            return None
        return min(ranked, key=lambda c: (self.gemm_seconds(m, n, k, c, sms, eb, split), fits.index(c)))

    def gemm_seconds(self, m: int, n: int, k: int, cfg: GemmConfig, sms: int, eb: int, split: bool) -> float:
        """The model's time of cfg, split-K included where the GEMM may split (``split``: its tiles neither wait
        nor notify, and the grid is not persistent)."""
        s = gemm_split(m, n, k, cfg, sms) if split and self.o.persistent is not True and not self.o.stream_k else 1
        return gemm_time(m, n, k, cfg, self.peaks, sms=sms, elem_bytes=eb, split=s, stream_k=self.o.stream_k)

    def gemm_fields(self, cfg: GemmConfig, m: int, n: int, sms: int, waits: bool, k: int = 0) -> dict:
        """The Tiling's GEMM fields; ``k`` where the GEMM may take stream-K (a matmul alone)."""
        tiles = gemm_tiles(m, n, cfg)
        persistent = self.o.persistent if self.o.persistent is not None else (waits or tiles > sms)
        sk = stream_k_tiles(tiles, math.ceil(k / cfg.block_k), sms) if self.o.stream_k and k else 0
        return dict(block_m=cfg.block_m, block_n=cfg.block_n, block_k=cfg.block_k, num_warps=cfg.num_warps,
                    num_stages=cfg.num_stages, group_m=cfg.group_m, persistent=persistent or bool(sk),
                    sm_budget=sms, stream_k=sk or None)

    # ---- device-level choices

    def chunk_options(self, op: ir.Operation, shard_rows: int, block_m: int, *, divisor: bool = True) -> list[int]:
        """Rows per chunk worth trying, fewest chunks first. With divisor, only divisors of shard_rows (the GEMM's
        per-tile waits and notifies and the reduction map rows to slots uniformly)."""
        shard_rows = max(shard_rows, 1)
        if self.o.chunk_rows is not None or self.o.num_chunks is not None:
            want = self.o.chunk_rows if self.o.chunk_rows is not None else math.ceil(shard_rows / self.o.num_chunks)
            want = max(1, min(want, shard_rows))
            if divisor and shard_rows % want:
                if self.o.chunk_rows is not None:
                    raise op_error(self.o.name, op, f"chunk-rows={self.o.chunk_rows} does not divide the "
                                                    f"{shard_rows} rows of a shard; choose a divisor of "
                                                    f"{shard_rows}")
                want = divisor_at_least(shard_rows, want)
            return [want]
        if divisor:
            found = [d for d in _divisors(shard_rows)
                     if shard_rows // d <= MAX_CHUNKS_PER_SHARD and (d >= min(block_m, shard_rows))]
            aligned = [d for d in found if d % block_m == 0]
            return sorted(aligned or found or [shard_rows], reverse=True)
        out, rows = [], max(block_m, 1)
        while rows < shard_rows:
            if math.ceil(shard_rows / rows) <= MAX_CHUNKS_PER_SHARD:
                out.append(rows)
            rows *= 2
        out.append(shard_rows)
        return out[::-1]  # fewest chunks first: on a tie the model keeps the cheaper schedule

    def engines(self, region: list[int] | None = None, buffers: list[int] | None = None) -> list[str]:
        """The engines to model: the one asked for, else every engine that can run the copies -- "sm" only where
        the SM copy kernel takes a ``region`` of that shape over buffers of dims ``buffers`` (kernels.copy)."""
        if self.o.engine:
            return [self.o.engine]
        if region is not None and sm_copy_refusal(len(region), region, buffers or list(region)):
            return ["copy_engine"]
        return list(ENGINES)

    def comm_sm_options(self, engine: str) -> list[int]:
        if self.o.comm_sms is not None:
            return [min(self.o.comm_sms, self.peaks.num_sms - 1)]
        if engine == "copy_engine":
            return [0]
        cap = self.peaks.num_sms // 2
        return sorted({max(1, min(s, cap)) for s in (4, 8, 16, 24, 32, 48, 64)})

    def reduce_sm_options(self) -> list[int]:
        if self.o.comm_sms is not None:
            return [max(1, min(self.o.comm_sms, self.peaks.num_sms - 1))]
        cap = self.peaks.num_sms // 2
        return sorted({max(1, min(s, cap)) for s in (4, 8, 16, 24, 32, 48)})

    def reduce_scatter_algorithms(self, rows: int, w: int) -> list[str]:
        """GEMM+RS: the epilogue reduction needs W > 1 and row tiles that do not straddle two ranks' rows (checked
        per chunking by the caller)."""
        if self.o.reduce_scatter:
            return [self.o.reduce_scatter]
        if self.o.comm_sms:  # SMs set aside for communication: the reduction kernels get them
            return ["reduce_kernel"]
        return list(REDUCE_SCATTER_ALGORITHMS) if w > 1 and rows % w == 0 else ["reduce_kernel"]

    def all_reduce_algorithms(self, op: ir.Operation, rows: int, w: int, *, fused: bool = False) -> list[str]:
        """two_shot (and epilogue) scatter whole rows over the ranks, so they need rows divisible by the world size;
        epilogue (the reduction in the GEMM's epilogue) is for GEMM+AR only."""
        if self.o.all_reduce in ("two_shot", "epilogue") and rows % w:
            raise op_error(self.o.name, op, f"all-reduce={self.o.all_reduce} needs the {rows} rows divisible by the "
                                            f"{w} ranks; use one_shot")
        if self.o.all_reduce in ("epilogue", "push_sum") and not fused:
            what = "reduces" if self.o.all_reduce == "epilogue" else "sums"
            raise op_error(self.o.name, op, f"all-reduce={self.o.all_reduce} {what} in a GEMM's epilogue; this "
                                            "all-reduce does not follow a GEMM (use one_shot or two_shot)")
        if self.o.all_reduce in ("push", "push_sum") and self.o.engine == "copy_engine":
            raise op_error(self.o.name, op, f"all-reduce={self.o.all_reduce} stores into the peers' buffers with "
                                            "SMs; it cannot use engine=copy_engine")
        if self.o.all_reduce:
            return [self.o.all_reduce]
        if rows % w:
            return ["one_shot", "push", "push_sum"] if fused and w > 1 and not self.o.comm_sms else ["one_shot"]
        return list(GEMM_AR_MODEL_ALGORITHMS if fused and w > 1 and not self.o.comm_sms else ALL_REDUCE_ALGORITHMS)

    def world(self, op: ir.Operation) -> int:
        return axis_size(self.o.name, self.mesh, op, ir.StringAttr(op.attributes["axis"]).value)

    # ---- per op

    def group(self, g: OverlapGroup) -> Tiling:
        w = self.world(g.collective)
        if self.o.stream_k:
            # every program must stay resident while owners wait for lower programs' partials, and such a kernel
            # takes the whole register file (255 per thread): an overlapped GEMM that waits for a stream's copy
            # (which may need an SM beside it) deadlocked on 2xH200 (AG+GEMM 70B M = 1024 by pull)
            raise op_error(self.o.name, g.producer, "stream-k applies to a matmul alone: stream-K's programs must "
                                                    "all stay resident, which a GEMM overlapped with communication "
                                                    "cannot promise")
        if g.kind == "ag_matmul":
            return self.ag_matmul(g, w)
        return self.matmul_reduce(g, w)

    def ag_matmul(self, g: OverlapGroup, w: int) -> Tiling:
        ag, mm = task.AllGather(g.producer), task.Matmul(g.consumer)
        shard_rows, k = shape_of(ag.input)[0], shape_of(ag.input)[1]
        n = shape_of(mm.rhs)[1]
        m, eb = shard_rows * w, elem_bytes(ag.input)
        best = None
        # pull first: push must be strictly better to be chosen (where the GEMM hides the gather either way, the
        # measured pattern stays)
        algorithms = [self.o.all_gather] if self.o.all_gather else \
            ["one_launch"] if self.o.own_first is not None else list(ALL_GATHER_ALGORITHMS)
        for algorithm in algorithms:
            if algorithm == "one_launch":
                for choice in self.one_launch_gather(g, m, n, k, eb, shard_rows, w):
                    best = _better(best, choice)
                continue
            # a push is a copy engine's remote write (SMs stay on the GEMM) unless engine=sm is asked for
            engines = ["copy_engine"] if algorithm == "push" and not self.o.engine else self.engines()
            for engine in engines:
                for comm in self.comm_sm_options(engine):
                    sms = self.peaks.num_sms - comm
                    cfg, t_gemm = self.timed_gemm(g.consumer, m, n, k, sms, eb)
                    for rows in self.chunk_options(g.producer, shard_rows, cfg.block_m):
                        chunks = math.ceil(shard_rows / rows)
                        t = ag_gemm_estimate(t_gemm, shard_rows * k * eb, w, chunks, self.peaks, engine=engine,
                                             tiles=gemm_tiles(m, n, cfg), sms=sms, comm_sms=comm,
                                             push=algorithm == "push", tiles_span_ranks=cfg.block_m > shard_rows)
                        best = _better(best, (t, engine, comm, sms, cfg, rows, chunks, algorithm, {}))
        t, engine, comm, sms, cfg, rows, chunks, algorithm, extra = best
        return Tiling(kind=g.kind, target=self.peaks.target, world=w, shard_rows=shard_rows, chunk_rows=rows,
                      num_chunks=chunks, engine=engine, comm_sms=comm, est_us=t * 1e6,
                      algorithm=algorithm if w > 1 else None, **extra,
                      **self.gemm_fields(cfg, m, n, sms, waits=w > 1))

    def one_launch_gather(self, g: OverlapGroup, m: int, n: int, k: int, eb: int, shard_rows: int, w: int):
        """AG+GEMM in one launch: its plans (modelled time, engine, comm SMs, SMs, config, chunk rows, chunks,
        algorithm, {own_first}) -- the own rows' tiles first or not -- or none where the options describe a gather
        beside the GEMM (an engine, its SMs, chunks) and it was not asked for."""
        streams = self.o.engine == "copy_engine" or self.o.comm_sms or self.o.chunk_rows is not None or \
            self.o.num_chunks is not None
        if streams and not self.o.all_gather and self.o.own_first is None:
            return []
        if streams:
            raise op_error(self.o.name, g.producer, "all-gather=one_launch pushes whole shards with the GEMM's own "
                                                    "SMs: it takes no engine=copy_engine, comm-sms, chunk-rows or "
                                                    "num-chunks")
        sms = self.peaks.num_sms
        cfg, t_gemm = self.timed_gemm(g.consumer, m, n, k, sms, eb)
        return [(ag_gemm_one_launch_estimate(t_gemm, shard_rows * k * eb, w, self.peaks, tiles=gemm_tiles(m, n, cfg),
                                             sms=sms, tiles_span_ranks=shard_rows % cfg.block_m != 0,
                                             own_first=own_first, b_bytes=k * n * eb),
                 "sm", 0, sms, cfg, shard_rows, 1, "one_launch", {"own_first": own_first})
                for own_first in ((False, True) if self.o.own_first is None else (self.o.own_first,))]

    def matmul_reduce(self, g: OverlapGroup, w: int) -> Tiling:
        mm = task.Matmul(g.producer)
        m, k = shape_of(mm.lhs)
        n = shape_of(mm.rhs)[1]
        eb = elem_bytes(mm.lhs)
        algorithms = self.reduce_scatter_algorithms(m, w)
        if g.kind == "matmul_ar":
            algorithms = self.all_reduce_algorithms(g.consumer, m, w, fused=True)
        best = None
        for algorithm in algorithms:
            whole = algorithm in ("one_shot", "push", "push_sum") and g.kind == "matmul_ar"
            shard_rows = m if whole else math.ceil(m / w)
            if algorithm == "epilogue":
                for choice in self.epilogue_choices(g, m, n, k, eb, w, shard_rows):
                    best = _better(best, (choice[0] + END_BARRIER_TIME,) + choice[1:])
                continue
            if algorithm in ("push", "push_sum") and g.kind == "matmul_rs":
                best = _better(best, self.push_reduce_scatter(g, m, n, k, eb, shard_rows, w, algorithm))
                continue
            if algorithm == "push_sum":
                best = _better(best, self.push_sum_all_reduce(g, m, n, k, eb, w))
                continue
            if algorithm in ("one_shot", "push") and g.kind == "matmul_ar" or algorithm == "one_launch":
                # the GEMM on every SM, then one reduce launch (of every row for GEMM+AR, of the own rows for RS)
                sms = self.peaks.num_sms
                cfg, t_gemm = self.timed_gemm(g.producer, m, n, k, sms, eb, split=True)
                rows = shard_rows if algorithm == "one_launch" else m
                if algorithm == "push":  # the GEMM pushes its tiles as it goes, then a local sum
                    t = gemm_push_estimate(t_gemm, m, n, w, self.peaks, elem_bytes=eb)
                else:
                    t = t_gemm + all_reduce_one_launch_time(rows, n, w, self.peaks, elem_bytes=eb, sms=sms) + \
                        END_BARRIER_TIME
                best = _better(best, (t, algorithm, "sm", sms, sms, cfg, rows, rows, 1))
                continue
            for comm in self.reduce_sm_options():
                sms = self.peaks.num_sms - comm
                cfg, t_gemm = self.timed_gemm(g.producer, m, n, k, sms, eb)
                for rows in self.chunk_options(g.consumer, shard_rows, cfg.block_m):
                    chunks = math.ceil(shard_rows / rows)
                    t = gemm_rs_estimate(t_gemm, shard_rows * n * eb, w, chunks, self.peaks, reduce_sms=comm,
                                         rows=shard_rows, cols=n, elem_bytes=eb) + END_BARRIER_TIME
                    if algorithm == "two_shot":
                        t += copy_time((w - 1) * shard_rows * n * eb, self.peaks, engine="copy_engine",
                                       peers=w - 1, chunks=(w - 1) * chunks)
                    best = _better(best, (t, algorithm, "sm", comm, sms, cfg, shard_rows, rows, chunks))
        if best is None:
            other = "reduce-scatter=reduce_kernel" if g.kind == "matmul_rs" else "all-reduce=two_shot"
            raise op_error(self.o.name, g.consumer, f"the epilogue reduction needs the {shard_rows} rows of a "
                                                    f"shard to split into chunks of whole GEMM row tiles; use "
                                                    f"{other}")
        t, algorithm, engine, comm, sms, cfg, shard_rows, rows, chunks = best
        return Tiling(kind=g.kind, target=self.peaks.target, world=w, shard_rows=shard_rows, chunk_rows=rows,
                      num_chunks=chunks, engine=engine, comm_sms=comm, est_us=t * 1e6, algorithm=algorithm,
                      **self.gemm_fields(cfg, m, n, sms, waits=False))

    def push_sum_all_reduce(self, g: OverlapGroup, m: int, n: int, k: int, eb: int, w: int):
        """(time, "push_sum", ...) of GEMM+AR in one launch -- every tile pushed to the peers, then summed with
        theirs in its epilogue -- for a GEMM whose tiles are all resident at once (one wave: a tile waits for the
        peers' same tile) or of persistent programs running the same tiles in the same order on every rank (each
        program's j-th tile waits only for the peers' j-th tiles of the same program, pushed before any wait) up to
        PUSH_SUM_MAX_WAVES waves (asked for: any number); None otherwise (asked for with persistent=false beyond
        one wave: an error)."""
        sms = self.peaks.num_sms
        cfg, t_gemm = self.timed_gemm(g.producer, m, n, k, sms, eb, split=True)
        tiles = gemm_tiles(m, n, cfg)
        if tiles > sms and self.o.persistent is False:
            if self.o.all_reduce == "push_sum":
                raise op_error(self.o.name, g.consumer, f"all-reduce=push_sum sums each tile in the GEMM's epilogue "
                                                        f"once the peers' copy of it landed, so every program must "
                                                        f"stay resident: {tiles} tiles of {cfg.block_m}x"
                                                        f"{cfg.block_n} over {sms} SMs need persistent=true")
            return None
        if math.ceil(tiles / sms) > PUSH_SUM_MAX_WAVES and self.o.all_reduce != "push_sum":
            return None
        t = gemm_push_sum_estimate(t_gemm, m, n, w, self.peaks, elem_bytes=eb)
        return t, "push_sum", "sm", sms, sms, cfg, m, m, 1

    def push_reduce_scatter(self, g: OverlapGroup, m: int, n: int, k: int, eb: int, shard_rows: int, w: int,
                            algorithm: str):
        """(time, algorithm, ...) of GEMM+RS by push -- every SM on the GEMM, whose tiles of a peer's rows go to
        that peer's inbox as they complete, then one launch summing the own rows (push) or the own rows' tiles,
        last, adding the inbox in their epilogue (push_sum) -- on the best GEMM tile that does not straddle two
        ranks' rows; None where none fits (reduce-scatter=push / push_sum asked for: an error)."""
        if self.o.engine == "copy_engine":
            if self.o.reduce_scatter == algorithm:
                raise op_error(self.o.name, g.consumer, f"reduce-scatter={algorithm} stores into the peers' inboxes "
                                                        "with SMs; it cannot use engine=copy_engine")
            return None
        sms = self.peaks.num_sms
        cfg = self.gemm_config(g.producer, m, n, k, sms, eb, rows_per_tile_of=shard_rows)
        if cfg is None:
            if self.o.reduce_scatter == algorithm:
                bm = f"BLOCK_M {self.o.block_m}" if self.o.block_m else "no GEMM tile's BLOCK_M"
                raise op_error(self.o.name, g.consumer, f"reduce-scatter={algorithm} needs GEMM row tiles inside one "
                                                        f"rank's rows: {bm} does not divide the {shard_rows} rows of a "
                                                        "shard (pass a block-m that does, or use one_launch)")
            return None
        t_gemm = self.gemm_seconds(m, n, k, cfg, sms, eb, False)
        estimate = gemm_push_sum_estimate if algorithm == "push_sum" else gemm_push_estimate
        t = estimate(t_gemm, shard_rows, n, w, self.peaks, elem_bytes=eb)
        return t, algorithm, "sm", sms, sms, cfg, shard_rows, shard_rows, 1

    def epilogue_choices(self, g: OverlapGroup, m: int, n: int, k: int, eb: int, w: int, shard_rows: int):
        """(time, "epilogue", engine, comm SMs, SMs, config, shard rows, chunk rows, chunks) for each way to reduce
        in the GEMM's epilogue: every SM on the GEMM, chunks of whole row tiles, partials moved by the copy
        engine or read by the SMs; GEMM+AR adds the gather of the reduced rows."""
        sms = self.peaks.num_sms
        cfg, t_gemm = self.timed_gemm(g.producer, m, n, k, sms, eb)
        one_wave = gemm_tiles(m, n, cfg) <= sms
        if one_wave and g.kind == "matmul_rs" and not self.o.reduce_scatter:
            # every tile at once: the own tiles wait for the peers' tiles, which end with them, so nothing
            # overlaps, and the epilogue's constrained tile order only costs (2xH200, LLaMA-70B M=128: 106 us
            # against 84 for the GEMM then one_launch; 8B M = 1024, 128 tiles: 108 us against 103 by push)
            return
        for engine in self.engines():
            for rows in self.chunk_options(g.consumer, shard_rows, cfg.block_m):
                if rows % cfg.block_m or shard_rows % rows:
                    continue
                chunks = shard_rows // rows
                t = gemm_rs_epilogue_estimate(t_gemm, shard_rows * n * eb, w, chunks, self.peaks, engine=engine,
                                              one_wave=one_wave)
                if g.kind == "matmul_ar":  # then the gather of the reduced rows and the copy of the output
                    t += EPILOGUE_GATHER_SLOWDOWN * (
                        copy_time((w - 1) * shard_rows * n * eb, self.peaks, engine="copy_engine", peers=w - 1,
                                  chunks=(w - 1) * chunks) + self.peaks.hop_latency * chunks +
                        local_copy_time(m * n * eb, self.peaks))
                yield t, "epilogue", engine, 0, sms, cfg, shard_rows, rows, chunks

    def timed_gemm(self, op: ir.Operation, m: int, n: int, k: int, sms: int, eb: int,
                   split: bool = False) -> tuple[GemmConfig, float]:
        """The model's GEMM config on sms SMs and its modelled time (``split``: the GEMM may split K)."""
        cfg = self.gemm_config(op, m, n, k, sms, eb, split)
        return cfg, self.gemm_seconds(m, n, k, cfg, sms, eb, split)

    def single(self, op: ir.Operation) -> Tiling | None:
        if task.Matmul.match(op):
            return self.matmul(op)
        if task.AllGather.match(op):
            return self.all_gather(op)
        if task.ReduceScatter.match(op) or task.AllReduce.match(op):
            return self.reduction(op)
        if task.AllToAll.match(op):
            return self.all_to_all(op)
        if task.GroupedMatmul.match(op):
            return self.grouped_matmul(op)
        if task.Elementwise.match(op):
            block = self.o.elementwise_block or 1024
            return Tiling(kind="elementwise", target=self.peaks.target, block=block,
                          num_warps=self.o.num_warps or 4, sm_budget=self.peaks.num_sms)
        return None

    def matmul(self, op: ir.Operation) -> Tiling:
        mm = task.Matmul(op)
        m, k = shape_of(mm.lhs)
        n = shape_of(mm.rhs)[1]
        eb, sms = elem_bytes(mm.lhs), self.peaks.num_sms
        cfg, t = self.timed_gemm(op, m, n, k, sms, eb, split=True)
        return Tiling(kind="matmul", target=self.peaks.target, est_us=t * 1e6,
                      **self.gemm_fields(cfg, m, n, sms, waits=False, k=k))

    def all_gather(self, op: ir.Operation) -> Tiling:
        ag = task.AllGather(op)
        if self.o.all_gather in ("push", "one_launch"):
            raise op_error(self.o.name, op, f"all-gather={self.o.all_gather} copies into the peers' gather buffers, "
                                            "which only AG+GEMM has (this all-gather's output is the function's); "
                                            "use pull")
        w, shape, eb = self.world(op), shape_of(ag.input), elem_bytes(ag.input)
        shard_rows = shape[ag.dim]
        row_bytes = math.prod(shape) // max(shard_rows, 1) * eb
        gathered = [d * w if i == ag.dim else d for i, d in enumerate(shape)]
        best = None
        for engine in self.engines(list(shape), [*shape, *gathered]):
            for comm in self.comm_sm_options(engine):
                for rows in self.chunk_options(op, shard_rows, 64, divisor=False):
                    chunks = math.ceil(shard_rows / rows)
                    t = local_copy_time(shard_rows * row_bytes, self.peaks) + copy_time(
                        (w - 1) * shard_rows * row_bytes, self.peaks, engine=engine, peers=w - 1,
                        chunks=(w - 1) * chunks, sms=comm or self.peaks.num_sms)
                    best = _better(best, (t, engine, comm, rows, chunks))
        t, engine, comm, rows, chunks = best
        if engine == "sm" and not comm:
            comm = self.peaks.num_sms
        return Tiling(kind="all_gather", target=self.peaks.target, world=w, shard_rows=shard_rows,
                      chunk_rows=rows, num_chunks=chunks, engine=engine, comm_sms=comm, est_us=t * 1e6)

    def grouped_matmul(self, op: ir.Operation) -> Tiling:
        """The grouped GEMM's tile (kernels.grouped_gemm), by the rows an expert gets on average: from 128 on,
        128x256 tiles of 8 warps; fewer, 64x128 of 4 (a tile on a group boundary runs once per group). K steps of
        64, 4 stages. 1xH200, Mixtral's expert GEMMs, 8 experts (results/grouped_gemm.csv): 128x256 ran 436-559
        TFLOP/s at 2048 rows an expert against 263-267 for 64x128; at 32 rows an expert 64x128 led on K = 14336
        (306 us against 528-688 for the 128-row tiles) and was within 18 % on K = 4096. Overridable."""
        g = task.GroupedMatmul(op)
        eb = elem_bytes(g.lhs)
        rows, groups = shape_of(g.lhs)[0], max(shape_of(g.rhs)[0], 1)
        big = rows / groups >= 128
        return Tiling(kind="grouped_matmul", target=self.peaks.target, block_m=self.o.block_m or (128 if big else 64),
                      block_n=self.o.block_n or (256 if big else 128), block_k=self.o.block_k or (64 if eb <= 2 else 32),
                      num_warps=self.o.num_warps or (8 if big else 4), num_stages=self.o.num_stages or 4,
                      sm_budget=self.peaks.num_sms)

    def all_to_all(self, op: ir.Operation) -> Tiling | None:
        """Static all_to_all: this rank's input is staged into a symmetric buffer and offered, every rank pulls
        its part of each peer's (one copy per peer) and copies its own part locally. The engine (and its SMs) from
        the model; parts of run-time sizes (split_sizes) are not tiled (no device-level lowering yet)."""
        a2a = task.AllToAll(op)
        if a2a.split_sizes is not None:
            return None
        w, shape, eb = self.world(op), shape_of(a2a.input), elem_bytes(a2a.input)
        nbytes = math.prod(shape) * eb
        part = nbytes // max(w, 1)
        out = shape_of(op.results[0])
        best = None
        for engine in self.engines(list(shape), [*shape, *out]):
            for comm in self.comm_sm_options(engine):
                t = local_copy_time(part, self.peaks) + copy_time(
                    (w - 1) * part, self.peaks, engine=engine, peers=w - 1, chunks=w - 1,
                    sms=comm or self.peaks.num_sms)
                if w > 1:
                    t += local_copy_time(nbytes, self.peaks)  # the staging copy into the symmetric buffer
                best = _better(best, (t, engine, comm))
        t, engine, comm = best
        if engine == "sm" and not comm:
            comm = self.peaks.num_sms
        return Tiling(kind="all_to_all", target=self.peaks.target, world=w,
                      shard_rows=shape[a2a.split_dim] // max(w, 1), num_chunks=1, engine=engine, comm_sms=comm,
                      est_us=t * 1e6)

    def reduction(self, op: ir.Operation) -> Tiling:
        """Standalone reduce_scatter (dim 0) or all_reduce: the reduction kernel reads peers' chunks on SMs."""
        w, eb = self.world(op), elem_bytes(op.operands[0])
        shape = shape_of(op.operands[0])
        rows = shape[0] if shape else 1
        cols = math.prod(shape[1:]) if len(shape) > 1 else 1
        sms = self.peaks.num_sms if self.o.comm_sms is None else max(1, self.o.comm_sms)
        engine = "copy_engine"  # the partials are staged by the copy engine, reduced by a kernel on ``sms`` SMs
        if task.AllReduce.match(op):
            algorithm, engine, t = self.standalone_all_reduce(op, rows, cols, w, eb, sms)
            kind, shard_rows = "all_reduce", math.ceil(rows / w) if algorithm == "two_shot" else rows
        else:
            kind, shard_rows = "reduce_scatter", rows // w
            algorithm = self.standalone_reduce_scatter(op, w)
            estimates = reduce_scatter_estimates(rows, cols, w, self.peaks, elem_bytes=eb, sms=sms)
            if algorithm is None and self.o.engine != "copy_engine" and w > 1:
                algorithm = min(estimates, key=estimates.get) if self.o.engine != "sm" else "one_launch"
            t = estimates[algorithm or "reduce_kernel"]
            if algorithm == "one_launch":  # one kernel reads the peers' partials: the SMs move the data
                engine = "sm"
            else:
                algorithm = None  # the staged reduce kernel: the pattern's default
        best_rows = self.chunk_options(op, shard_rows, 64)
        # more chunks overlap the staging copy with the reduction; the model prefers ~4 when free to choose
        rows_per_chunk = min(best_rows, key=lambda r: abs(math.ceil(shard_rows / r) - 4))
        tile_rows = rows if kind == "all_reduce" else shard_rows
        tile = self.one_launch_tile(tile_rows, cols, eb, sms, push=algorithm == "push") if engine == "sm" else {}
        return Tiling(kind=kind, target=self.peaks.target, world=w, shard_rows=shard_rows,
                      chunk_rows=rows_per_chunk, num_chunks=math.ceil(shard_rows / rows_per_chunk),
                      engine=engine, comm_sms=sms, algorithm=algorithm, est_us=t * 1e6, **tile)

    def standalone_all_reduce(self, op: ir.Operation, rows: int, cols: int, w: int, eb: int,
                              sms: int) -> tuple[str, str, float]:
        """(algorithm, engine, modelled seconds) of a standalone all-reduce: one_shot or two_shot, each staged by
        the copy engine and reduced by a kernel (engine copy_engine; two_shot needs rows divisible by W) or as one
        kernel whose SMs publish, signal and reduce (engine sm); the all-reduce and engine options narrow them."""
        if self.o.all_reduce in ("epilogue", "push_sum"):
            self.all_reduce_algorithms(op, rows, w)  # raises: no GEMM to reduce in
        staged = all_reduce_estimates(rows, cols, w, self.peaks, elem_bytes=eb, sms=sms)
        launch = {"one_shot": all_reduce_one_launch_time, "two_shot": all_reduce_two_shot_launch_time,
                  "push": all_reduce_push_launch_time}
        if self.o.all_reduce == "push":
            self.all_reduce_algorithms(op, rows, w)  # raises where push cannot run
        options = []
        for algorithm in (self.o.all_reduce,) if self.o.all_reduce else ALL_REDUCE_ALGORITHMS:
            if algorithm == "push" and w == 1 and not self.o.all_reduce:
                continue  # one rank: nothing to push
            if self.o.engine != "sm" and algorithm != "push" and (algorithm == "one_shot" or rows % w == 0):
                options.append((staged[algorithm], algorithm, "copy_engine"))
            if self.o.engine != "copy_engine":
                options.append((launch[algorithm](rows, cols, w, self.peaks, elem_bytes=eb, sms=sms), algorithm,
                                "sm"))
        if not options:
            raise op_error(self.o.name, op, f"all-reduce={self.o.all_reduce} with the copy engine needs the {rows} "
                                            f"rows divisible by the {w} ranks; use one_shot or engine=sm")
        t, algorithm, engine = min(options, key=lambda o: o[0])
        return algorithm, engine, t

    def standalone_reduce_scatter(self, op: ir.Operation, w: int) -> str | None:
        """The reduce-scatter option for a standalone reduce-scatter (None: the model's choice)."""
        algorithm = self.o.reduce_scatter or None
        if algorithm not in (None, "reduce_kernel", "one_launch"):
            what = "reduces in a GEMM's epilogue" if algorithm == "epilogue" else "pushes a GEMM's tiles"
            raise op_error(self.o.name, op, f"reduce-scatter={algorithm} {what}; this reduce-scatter does not follow "
                                            "a GEMM (use reduce_kernel or one_launch)")
        if algorithm == "one_launch" and self.o.engine == "copy_engine":
            raise op_error(self.o.name, op, "reduce-scatter=one_launch reads the peers' partials with SMs; it "
                                            "cannot use engine=copy_engine")
        return algorithm if w > 1 else None

    def one_launch_tile(self, rows: int, cols: int, eb: int, sms: int, *, push: bool = False) -> dict[str, int]:
        """The one-launch all-reduce's tile (kernels.reduce.publish_tile); block-m / block-n / num-warps override."""
        from ..kernels.reduce import publish_tile
        tile = publish_tile(rows, cols, eb, sms, block_m=self.o.block_m, block_n=self.o.block_n, push=push)
        if self.o.num_warps:
            tile["num_warps"] = self.o.num_warps
        return tile


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def divisor_at_least(n: int, want: int) -> int:
    """The smallest divisor of n that is >= want (n itself at worst), from n's divisors (sqrt(n) trial divisions,
    not a walk from want to n)."""
    return min(d for d in _divisors(n) if d >= want)
