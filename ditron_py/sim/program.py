"""Loading a device-level program out of MLIR into plain Python data.

The simulator touches MLIR only here: ``load(module, function)`` reads the device function (docs/device_ir.md),
its arguments (with their ``ditron.layout``), the module's mesh and the function's axis, its symmetric
allocations, the ``ditron.kernel`` records of the kernels it launches, and turns every op into an ``Op`` (name,
operand and result value ids, attributes as Python values, location). After loading, the MLIR context may die;
running needs none of it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlir import ir

from ..dialects import device
from ..dialects.context import diagnostic_at
from ..dialects.device import AXIS_ATTR, HOST_OPS, IO_ATTR, LAYOUT_ATTR, LEVEL_ATTR, device_functions
from ..dialects.opbase import memref_shape, walk_ops
from ..dialects.sharding import Mesh, Sharding
from ..kernels import KERNEL_ATTR
from ..passes.partition import GLOBAL_SHAPE_ATTR
from ..schema import JIT_ATTR
from .report import Loc, SimulationError

# Host ops the interpreter runs (HOST_OPS), device ops aside.
DEVICE_OPS = device.OP_NAMES


@dataclass
class Block:
    args: tuple[int, ...]
    ops: list["Op"]


@dataclass
class Op:
    name: str
    operands: tuple[int, ...]
    results: tuple[int, ...]
    attrs: dict[str, Any]
    loc: Loc
    regions: tuple[Block, ...] = ()


@dataclass(frozen=True)
class MemrefType:
    shape: tuple[int, ...]      # -1 for a dynamic dim
    elem: str


@dataclass
class ArgSpec:
    index: int
    io: str                     # "in" | "out" | "epoch"
    type: MemrefType | None     # None for the epoch
    value: int
    layout: Sharding | None = None             # ditron.layout: the task-level sharding of the tensor
    global_shape: tuple[int, ...] | None = None  # ditron.global_shape (padded layouts)


@dataclass
class AllocSpec:
    index: int
    name: str
    type: MemrefType
    value: int
    loc: Loc
    rotate: bool = False    # held twice: call e uses copy e % 2 (device.ROTATE_ATTR)
    consumed: bool = False  # a signal pad whose waiters clear its slots each call (device.CONSUMED_ATTR)


@dataclass
class KernelInfo:
    """A launched kernel: its symbol, its record (as ditron.kernels reads it) and where it is defined."""

    name: str
    record: Any
    loc: Loc
    jit: tuple | None = None   # a user @ditron.jit kernel: (its key, its parameters, its source record) (sim.jit)


@dataclass
class Program:
    name: str
    loc: Loc
    args: list[ArgSpec]
    body: Block
    allocs: list[AllocSpec]
    kernels: dict[str, KernelInfo]
    types: dict[int, MemrefType] = field(default_factory=dict)   # memref value id -> type
    late_allocs: list[AllocSpec] = field(default_factory=list)    # allocations after the first enqueued op
    mesh: Mesh | None = None    # the module's ditron.mesh
    axis: str | None = None     # the function's ditron.axis: the mesh axis its collectives run over

    @property
    def allocs_by_index(self) -> dict[int, AllocSpec]:
        return {a.index: a for a in (*self.allocs, *self.late_allocs)}

    @property
    def inputs(self) -> list[ArgSpec]:
        return [a for a in self.args if a.io == "in"]

    @property
    def outputs(self) -> list[ArgSpec]:
        return [a for a in self.args if a.io == "out"]


def loc_of(op: ir.Operation) -> Loc:
    d = diagnostic_at(op.location, "")
    return Loc(d.file, d.line, d.col)


def memref_type(t: ir.Type) -> MemrefType | None:
    shape = memref_shape(t)
    return None if shape is None else MemrefType(shape, str(ir.MemRefType(t).element_type))


def read_record(attr: ir.Attribute) -> Any:
    """A kernel record, as ``ditron.kernels.KernelRecord.from_attr`` reads it."""
    from ..kernels import KernelRecord
    return KernelRecord.from_attr(attr)


def _int_attr(op: ir.Operation, key: str, default: int) -> int:
    if key not in op.attributes:
        return default
    return int(ir.IntegerAttr(op.attributes[key]).value)


class _Loader:
    def __init__(self, module: ir.Module, func: ir.Operation):
        self.module = module
        self.func = func
        self.ids: dict[ir.Value, int] = {}
        self.types: dict[int, MemrefType] = {}
        self.allocs: list[AllocSpec] = []
        self.late_allocs: list[AllocSpec] = []
        self.enqueued = False
        self.kernels: dict[str, KernelInfo] = {}
        try:
            self.mesh = Mesh.of_module(module)
        except ValueError as err:
            raise SimulationError.at(loc_of(module.operation), str(err)) from None
        self.symbols = {ir.StringAttr(op.attributes["sym_name"]).value: op
                        for op in walk_ops(module.operation) if "sym_name" in op.attributes}

    def vid(self, v: ir.Value) -> int:
        i = self.ids.get(v)
        if i is None:
            i = self.ids[v] = len(self.ids)
            mt = memref_type(v.type)
            if mt is not None:
                self.types[i] = mt
        return i

    def block(self, b: ir.Block) -> Block:
        args = tuple(self.vid(a) for a in b.arguments)
        return Block(args, [self.op(op.operation) for op in b.operations])

    def op(self, op: ir.Operation) -> Op:
        name = op.name
        loc = loc_of(op)
        if name not in HOST_OPS and name not in DEVICE_OPS:
            raise SimulationError.at(loc, f"'{name}' is not an op of a device-level program; the simulator runs "
                                          f"ditron_device ops and arith/scf on index values (docs/device_ir.md)")
        attrs = self.attrs(op, name, loc)
        regions = tuple(self.block(r.blocks[0]) for r in op.regions if len(r.blocks))
        return Op(name, tuple(self.vid(v) for v in op.operands), tuple(self.vid(r) for r in op.results), attrs, loc,
                  regions)

    def attrs(self, op: ir.Operation, name: str, loc: Loc) -> dict[str, Any]:
        a: dict[str, Any] = {}
        if name == "arith.constant":
            attr = op.attributes["value"]
            if not isinstance(attr, ir.IntegerAttr):
                raise SimulationError.at(loc, f"arith.constant {attr} is not an integer; host code works on index "
                                              f"and integer values")
            a["value"] = int(ir.IntegerAttr(attr).value)
        elif name == "arith.cmpi":
            a["predicate"] = int(ir.IntegerAttr(op.attributes["predicate"]).value)
        elif name in ("arith.trunci", "arith.extui", "arith.extsi", "arith.index_cast", "arith.index_castui"):
            t = op.results[0].type
            a["width"] = 64 if isinstance(t, ir.IndexType) else ir.IntegerType(t).width
        if name in DEVICE_OPS:
            a["stream"] = _int_attr(op, "stream", 0)
            self.device_attrs(op, name, loc, a)
        return a

    def device_attrs(self, op: ir.Operation, name: str, loc: Loc, a: dict[str, Any]) -> None:
        if (c := device.Copy.match(op)) is not None:
            a["engine"] = c.engine
            a["ndim"] = c.rank
        elif (s := device.Signal.match(op)) is not None:
            a["op"], a["scope"] = s.kind, s.scope
        elif (w := device.Wait.match(op)) is not None:
            a["where"] = w.where
        elif (al := device.AllocSymmetric.match(op)) is not None:
            spec = AllocSpec(len(self.allocs) + len(self.late_allocs), al.name, memref_type(al.buffer.type),
                             self.vid(al.buffer), loc, device.ROTATE_ATTR in op.attributes,
                             device.CONSUMED_ATTR in op.attributes)
            (self.late_allocs if self.enqueued else self.allocs).append(spec)
            a["alloc"] = spec.index
            a["label"] = f"'{al.name}'"
        elif (ln := device.Launch.match(op)) is not None:
            a["kernel"], a["grid"], a["sm_budget"] = ln.kernel, tuple(ln.grid), ln.sm_budget
            a["tile_order"] = ln.tile_order
            self.kernel(ln.kernel, loc)
        if name not in (device.Rank.op_name(), device.NumRanks.op_name(), device.AllocSymmetric.op_name()):
            self.enqueued = True

    def kernel(self, name: str, launch_loc: Loc) -> None:
        if name in self.kernels:
            return
        op = self.symbols.get(name)
        if op is None:
            raise SimulationError.at(launch_loc, f"launch of '@{name}': no such symbol in the module")
        if JIT_ATTR in op.attributes:  # a user @ditron.jit kernel (ditron.device): run by sim.jit
            from ..dialects.opbase import attr_to_py
            d = ir.DictAttr(op.attributes[JIT_ATTR])
            self.kernels[name] = KernelInfo(name, None, loc_of(op), (
                ir.StringAttr(d["key"]).value, [ir.StringAttr(a).value for a in ir.ArrayAttr(d["params"])],
                attr_to_py(d["source"]) if "source" in d else None))
            return
        if KERNEL_ATTR not in op.attributes:
            raise SimulationError.at(
                launch_loc, f"kernel '@{name}' has no '{KERNEL_ATTR}' record; the simulator runs launches from the "
                f"record written by the kernel's template (ditron.kernels)",
                loc_of(op).diagnostic("kernel defined here", "note"))
        try:
            record = read_record(op.attributes[KERNEL_ATTR])
        except (ValueError, KeyError, TypeError) as err:
            raise SimulationError.at(loc_of(op), f"kernel '@{name}': cannot read its '{KERNEL_ATTR}' record: "
                                                 f"{err}") from None
        self.kernels[name] = KernelInfo(name, record, loc_of(op))

    def program(self) -> Program:
        func = self.func
        fname = ir.StringAttr(func.attributes["sym_name"]).value
        floc = loc_of(func)
        entry = func.regions[0].blocks[0]
        args = []
        for i, (v, io) in enumerate(zip(entry.arguments, device.arg_roles(func))):
            mt = memref_type(v.type)
            if io not in ("in", "out", "epoch"):
                raise SimulationError.at(floc, f"argument {i} of @{fname} has no '{IO_ATTR}' attribute (\"in\", "
                                               f"\"out\" or \"epoch\"); device programs are in destination-passing "
                                               f"style")
            if io == "epoch" and not isinstance(v.type, ir.IndexType):
                raise SimulationError.at(floc, f"the epoch argument {i} of @{fname} must be an index, got {v.type}")
            if io != "epoch" and mt is None:
                raise SimulationError.at(floc, f"argument {i} of @{fname} is {io} but of type {v.type}, not a "
                                               f"memref")
            spec = ArgSpec(i, io, mt, self.vid(v))
            if io != "epoch":
                spec.layout, spec.global_shape = self.layout(i, mt, f"argument {i} of @{fname}", floc)
            args.append(spec)
        epochs = [a for a in args if a.io == "epoch"]
        if len(epochs) != 1 or epochs[0].index != len(args) - 1:
            raise SimulationError.at(floc, f"@{fname}: the last argument must be the epoch (index, {IO_ATTR} = "
                                           f"\"epoch\"), and only the last")
        body = self.block(entry)
        axis = None
        if AXIS_ATTR in func.attributes:
            axis = ir.StringAttr(func.attributes[AXIS_ATTR]).value
            if self.mesh is not None and axis not in self.mesh.axes:
                raise SimulationError.at(floc, f"@{fname} runs over mesh axis '{axis}' ({AXIS_ATTR}), which is not "
                                               f"in the module's mesh (axes: {', '.join(self.mesh.axes)})")
        return Program(fname, floc, args, body, self.allocs, self.kernels, self.types, self.late_allocs, self.mesh,
                       axis)

    def layout(self, i: int, mt: MemrefType, what: str, loc: Loc) -> tuple[Sharding | None, tuple[int, ...] | None]:
        """The ditron.layout and ditron.global_shape of argument i, checked against its type and the mesh."""
        attrs = list(ir.ArrayAttr(self.func.attributes["arg_attrs"])) if "arg_attrs" in self.func.attributes else []
        d = ir.DictAttr(attrs[i]) if i < len(attrs) else None
        if d is None or LAYOUT_ATTR not in d:
            return None, None
        try:
            layout = Sharding.from_attr(d[LAYOUT_ATTR])
        except ValueError as err:
            raise SimulationError.at(loc, f"{what}: {LAYOUT_ATTR}: {err}") from None
        problem = layout.check((-1,) * len(mt.shape), self.mesh or Mesh((), ()))
        if problem:
            raise SimulationError.at(loc, f"{what}: {LAYOUT_ATTR} {problem}")
        shape = None
        if GLOBAL_SHAPE_ATTR in d:
            attr = d[GLOBAL_SHAPE_ATTR]
            shape = tuple(ir.DenseI64ArrayAttr(attr)) if isinstance(attr, ir.DenseI64ArrayAttr) else None
            if shape is None or len(shape) != len(mt.shape) or (
                    self.mesh is not None and layout.local_shape(shape, self.mesh) != mt.shape):
                raise SimulationError.at(loc, f"{what}: {GLOBAL_SHAPE_ATTR} {attr} is not a global shape whose "
                                              f"shards by {LAYOUT_ATTR} are {list(mt.shape)}")
        return layout, shape


def load(module: ir.Module, function: str | None = None) -> Program:
    """The device function ``function`` (default: the only one) of module, as a Program."""
    funcs = device_functions(module)
    names = [ir.StringAttr(f.attributes["sym_name"]).value for f in funcs]
    if function is not None:
        if function not in names:
            raise SimulationError(f"no device-level function '@{function}' in the module (device functions: "
                                  f"{', '.join('@' + n for n in names) or 'none'}; a device function has "
                                  f"{LEVEL_ATTR} = \"device\")")
        func = funcs[names.index(function)]
    elif len(funcs) == 1:
        func = funcs[0]
    elif not funcs:
        raise SimulationError(f"the module has no device-level function (a func.func with {LEVEL_ATTR} = "
                              f"\"device\"); lower the task program first (ditron-lower-task-to-device)")
    else:
        raise SimulationError(f"the module has several device functions ({', '.join('@' + n for n in names)}); "
                              f"pass function=<name>")
    return _Loader(module, func).program()
