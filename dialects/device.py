"""Typed builders and accessors of ditron_device (the Device level). Declared in device.irdl.mlir."""
from __future__ import annotations

from typing import Sequence

from mlir import ir

from .opbase import I64ArrayAttr, IntAttr, Operand, OpWrapper, Result, StrAttr, SymbolAttr

ENGINES = ("copy_engine", "sm")  # the engines the executor implements: DMA copies, copy kernels on SMs
SIGNAL_OPS = ("set", "add")
SCOPES = ("gpu", "sys")
WAIT_PLACES = ("stream", "kernel")
# How a launch visits its tiles. "row_major" and "grouped" (L2-friendly swizzle) ignore data arrival;
# "rank_rotated" starts with the tiles of the rank's own shard, then peers in arrival order (ring distance).
TILE_ORDERS = ("row_major", "grouped", "rank_rotated")


class DeviceOp(OpWrapper):
    DIALECT = "ditron_device"


class Rank(DeviceOp):
    NAME = "rank"
    rank = Result(0)

    @classmethod
    def build(cls, *, loc=None, ip=None) -> "Rank":
        return cls.create(results=[ir.IndexType.get()], loc=loc, ip=ip)


class NumRanks(DeviceOp):
    NAME = "num_ranks"
    num_ranks = Result(0)

    @classmethod
    def build(cls, *, loc=None, ip=None) -> "NumRanks":
        return cls.create(results=[ir.IndexType.get()], loc=loc, ip=ip)


class AllocSymmetric(DeviceOp):
    NAME = "alloc_symmetric"
    buffer = Result(0)
    name = StrAttr("name")

    @classmethod
    def build(cls, shape: Sequence[int], element_type: ir.Type, name: str, *, loc=None,
              ip=None) -> "AllocSymmetric":
        return cls.create(results=[ir.MemRefType.get(list(shape), element_type)], name=name, loc=loc, ip=ip)


class Copy(DeviceOp):
    """Region copy. coords = src offsets ++ dst offsets ++ sizes, one index value per memref dim each."""

    NAME = "copy"
    src = Operand(0)
    dst = Operand(1)
    src_rank = Operand(2)
    dst_rank = Operand(3)
    coords = Operand(4, variadic=True)
    engine = StrAttr("engine")

    @property
    def rank(self) -> int:
        return ir.MemRefType(self.src.type).rank

    @property
    def src_offsets(self) -> list[ir.Value]:
        return self.coords[: self.rank]

    @property
    def dst_offsets(self) -> list[ir.Value]:
        return self.coords[self.rank: 2 * self.rank]

    @property
    def sizes(self) -> list[ir.Value]:
        return self.coords[2 * self.rank:]

    @classmethod
    def build(cls, src: ir.Value, dst: ir.Value, *, src_rank: ir.Value, dst_rank: ir.Value,
              src_offsets: Sequence[ir.Value], dst_offsets: Sequence[ir.Value], sizes: Sequence[ir.Value],
              engine: str = "copy_engine", loc=None, ip=None) -> "Copy":
        operands = [src, dst, src_rank, dst_rank, *src_offsets, *dst_offsets, *sizes]
        return cls.create(operands=operands, engine=engine, loc=loc, ip=ip)


class Signal(DeviceOp):
    NAME = "signal"
    signals = Operand(0)
    target_rank = Operand(1)
    slot = Operand(2)
    value = Operand(3)
    kind = StrAttr("op")
    scope = StrAttr("scope")

    @classmethod
    def build(cls, signals: ir.Value, *, target_rank: ir.Value, slot: ir.Value, value: ir.Value, op: str = "set",
              scope: str = "sys", loc=None, ip=None) -> "Signal":
        return cls.create(operands=[signals, target_rank, slot, value], op=op, scope=scope, loc=loc, ip=ip)


class Wait(DeviceOp):
    NAME = "wait"
    signals = Operand(0)
    value = Operand(1)
    slots = Operand(2, variadic=True)
    where = StrAttr("where")

    @classmethod
    def build(cls, signals: ir.Value, *, slots: Sequence[ir.Value], value: ir.Value, where: str = "stream",
              loc=None, ip=None) -> "Wait":
        return cls.create(operands=[signals, value, *slots], where=where, loc=loc, ip=ip)


class Barrier(DeviceOp):
    NAME = "barrier"
    signals = Operand(0)

    @classmethod
    def build(cls, signals: ir.Value, *, loc=None, ip=None) -> "Barrier":
        return cls.create(operands=[signals], loc=loc, ip=ip)


MAX_LAUNCH_ARGS = 16  # the launch op's optional argument operands (device.irdl.mlir says why)


class Launch(DeviceOp):
    NAME = "launch"
    args = Operand(0, variadic=True)
    kernel = SymbolAttr("kernel")
    grid = I64ArrayAttr("grid")
    sm_budget = IntAttr("sm_budget")
    tile_order = StrAttr("tile_order")

    @classmethod
    def build(cls, kernel: str, args: Sequence[ir.Value], *, grid: Sequence[int], sm_budget: int,
              tile_order: str = "row_major", loc=None, ip=None) -> "Launch":
        if len(args) > MAX_LAUNCH_ARGS:
            raise ValueError(f"a launch takes at most {MAX_LAUNCH_ARGS} arguments, got {len(args)}")
        launch = cls.create(operands=list(args), kernel=kernel, grid=grid, sm_budget=sm_budget,
                            tile_order=tile_order, loc=loc, ip=ip)
        launch.op.attributes["operandSegmentSizes"] = launch_segments(len(args))
        return launch


def launch_segments(n: int) -> ir.Attribute:
    """The operandSegmentSizes of a launch with n arguments."""
    return ir.DenseI32ArrayAttr.get([1] * n + [0] * (MAX_LAUNCH_ARGS - n))


OPS: tuple[type[DeviceOp], ...] = (Rank, NumRanks, AllocSymmetric, Copy, Signal, Wait, Barrier, Launch)

# ------------------------------------------------------------------------- device-level programs (docs/device_ir.md)

LEVEL_ATTR = "ditron.level"    # = "device" on a device-level func.func
IO_ATTR = "ditron.io"          # per argument: "in", "out" or "epoch"
# per in/out argument: the task-level sharding of the tensor it holds a shard of (a ditron.sharding dictionary);
# padded ones also keep the task argument's ditron.global_shape (passes/partition.py)
LAYOUT_ATTR = "ditron.layout"
AXIS_ATTR = "ditron.axis"      # on the function: the mesh axis whose groups its collectives run within
# unit, on an alloc_symmetric: the buffer is held twice and call e uses copy e % 2 on every rank (a graph replay:
# its parity's copy), so that a call's stores into a peer's copy never meet the peer's reads of the previous call
ROTATE_ATTR = "ditron.rotate"
# unit, on a signal pad (alloc_symmetric of i32 slots): every slot is cleared by its one waiter each call (a
# kernel's notify "clear" after its wait), so the pad is zero again for the next call that uses it: a CUDA graph,
# which replays every call with the same signal values, needs not zero it
CONSUMED_ATTR = "ditron.consumed"
# "waits", on a device function: the program ends without a barrier; each call's own waits order every rank after
# every peer's previous call (each rank waits, every call, on stores of every peer into its rotating buffers)
FENCE_ATTR = "ditron.fence"
# the arith/scf ops a device-level program may use beside ditron_device ops (on index and integer values)
HOST_ARITH_BINARY = ("arith.addi", "arith.subi", "arith.muli", "arith.divsi", "arith.divui", "arith.remsi",
                     "arith.remui", "arith.ceildivsi", "arith.ceildivui", "arith.floordivsi", "arith.minsi",
                     "arith.minui", "arith.maxsi", "arith.maxui", "arith.andi", "arith.ori", "arith.xori",
                     "arith.shli", "arith.shrsi", "arith.shrui")
HOST_ARITH_CASTS = ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui", "arith.trunci")
HOST_OPS = frozenset(HOST_ARITH_BINARY + HOST_ARITH_CASTS + ("arith.constant", "arith.cmpi", "arith.select",
                                                             "scf.for", "scf.if", "scf.yield", "func.return"))
OP_NAMES = frozenset(w.op_name() for w in OPS)


def arg_roles(func: ir.Operation) -> list[str | None]:
    """The ``ditron.io`` role of each argument of a device function ("in", "out", "epoch"; None where absent)."""
    arg_attrs = list(ir.ArrayAttr(func.attributes["arg_attrs"])) if "arg_attrs" in func.attributes else []
    roles: list[str | None] = []
    for i in range(len(func.regions[0].blocks[0].arguments)):
        d = ir.DictAttr(arg_attrs[i]) if i < len(arg_attrs) else None
        roles.append(ir.StringAttr(d[IO_ATTR]).value if d is not None and IO_ATTR in d else None)
    return roles


def device_functions(module: ir.Module) -> list[ir.Operation]:
    """The device-level functions (func.func with ditron.level = "device") at the top of module, in order."""
    out = []
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and LEVEL_ATTR in op.attributes and \
                ir.StringAttr(op.attributes[LEVEL_ATTR]).value == "device":
            out.append(op)
    return out
