"""ditron-lower-task-to-device: a tiled local-view task program -> one rank-generic device program
(docs/device_ir.md): memref arguments in destination-passing style, symmetric buffers and signal pads, chunk
copies, signals, waits and kernel launches. Every kernel is declared once, as a private ``func.func`` carrying its
``ditron.kernel`` record (ditron.kernels); ditron-lower-device-to-core instantiates it.

The program it emits is correct on a single stream: each enqueued op names the logical lane it belongs to
(``ditron.lane`` = compute | comm | reduce), lanes are ordered by explicit sync signal/wait pairs, and
ditron-schedule-overlap later maps lanes to streams, picks the tile order and the ring or direct pull.

    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0, ditron.overlap = {...}, ditron.tiling = {...}}
    %h = "ditron_task.matmul"(%g, %w) {ditron.overlap = {...}, ditron.tiling = {...}}
    return %h
  becomes
    func.func @f(%x: memref<128x64xbf16> {ditron.io = "in"}, %w: memref<64x32xbf16> {ditron.io = "in"},
                 %out: memref<512x32xbf16> {ditron.io = "out"}, %epoch: index {ditron.io = "epoch"})
        attributes {ditron.level = "device", ditron.axis = "tp"} {
      %g = "ditron_device.alloc_symmetric"() {name = "ag_gather"} : () -> memref<512x64xbf16>
      %ready = "ditron_device.alloc_symmetric"() {name = "ag_ready"} : () -> memref<4xi32>
      ...  // stage own shard, offer it to peers, pull each peer's chunks, signal ready[slot] per chunk
      "ditron_device.launch"(%g, %w, %out, %ready, %epoch) {kernel = @gemm, ...}  // waits per tile on ready
      "ditron_device.barrier"(%bar)
    }
    func.func private @gemm() attributes {ditron.kernel = {template = "gemm", wait = {...}, ...}}
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mlir import ir
from mlir.dialects import func

from ..cost_model import REPACKS, padded_ld, peaks_for
from ..dialects import device, task
from ..dialects.opbase import walk_ops
from ..dialects.sharding import Mesh, arg_sharding, result_sharding
from ..errors import PassError, VerificationError
from ..kernels import KernelRecord
from . import device_kernels as K
from .collectives import COLLECTIVES, LoweringContext, lower_collective, lower_fused
from .device_builder import LANE_ATTR, DeviceBuilder, KernelTable, str_attr
from .fuse_epilogue import Chain, epilogue_chains
from .partition import GLOBAL_SHAPE_ATTR
from .registry import Pass, option
from .tiling import (LEVEL_ATTR, OVERLAP_KINDS, TILING_ATTR, OverlapGroup, Tiling, functions, op_error,
                     overlap_groups, require_task_level, shape_of)

IO_ATTR = device.IO_ATTR
AXIS_ATTR = device.AXIS_ATTR
TARGET_ATTR = "ditron.target"
EPOCH_LIMIT_ATTR = "ditron.epoch_limit"  # the last epoch whose signal values fit the i32 pads
I32_MAX = 2 ** 31 - 1
LAYOUT_ATTR = device.LAYOUT_ATTR
END_BARRIERS = ("auto", "always")


LOWERED = (task.Matmul, task.GroupedMatmul, task.Elementwise, task.AllGather, task.ReduceScatter, task.AllReduce,
           task.AllToAll, task.Custom)
# element types of a user kernel program's tensors (ditron_task.custom) -> ditron.device's names
CUSTOM_ELEMENTS = {"bf16": "bf16", "f16": "f16", "f32": "f32", "i32": "i32"}


def _global_shape(fn: ir.Operation, key: str, index: int) -> ir.Attribute | None:
    """The ditron.global_shape of a task function's argument or result (ditron-partition writes it for padded
    shardings), kept on the device argument so that the simulator and readers know where the padding is."""
    if key not in fn.attributes:
        return None
    entries = ir.ArrayAttr(fn.attributes[key])
    d = ir.DictAttr(entries[index]) if index < len(entries) else None
    return d[GLOBAL_SHAPE_ATTR] if d is not None and GLOBAL_SHAPE_ATTR in d else None


def _memref_of(t: ir.Type) -> ir.MemRefType:
    rt = ir.RankedTensorType(t)
    return ir.MemRefType.get(list(rt.shape), rt.element_type)


class _FunctionLowering(LoweringContext):
    """Lowers one task function. Values map to memrefs: arguments to "in" arguments, returned values to "out"
    arguments, everything else to symmetric buffers. The compute ops are lowered here, the collectives by the
    lowerings registered in passes/collectives, which see it as a LoweringContext."""

    def __init__(self, pass_name: str, module: ir.Module, fn: ir.Operation, mesh: Mesh | None,
                 kernels: KernelTable, end_barrier: str = "auto"):
        self.pass_name, self.module, self.old, self.mesh, self.kernels = pass_name, module, fn, mesh, kernels
        self.end_barrier = end_barrier
        self.groups = {}
        self.buffers: dict[ir.Value, ir.Value] = {}
        self.symmetric: set[ir.Value] = set()
        self.inputs: set[ir.Value] = set()
        self.cross_rank = False
        self.unfenced = False  # a cross-rank collective that needs the end-of-program barrier
        self.rotating: list[ir.Value] = []  # the peer-written buffers of the collectives that fence themselves
        self.gathers = 0
        self.slot_step = 1  # the most any signal slot grows per call (set-slots: 1, counted slots: W * count)
        self.axis: str | None = None
        self.chains: dict[ir.Operation, Chain] = {}  # matmul -> its fused epilogue (ditron-fuse-epilogue)
        self.chain_of: dict[ir.Value, Chain] = {}  # a chain's start -> the chain
        self.fused: set[ir.Operation] = set()  # the elementwise ops a GEMM epilogue computes

    def error(self, op: ir.Operation, message: str) -> PassError:
        return op_error(self.pass_name, op, message)

    def crosses(self, *, inbox: ir.Value | None = None) -> None:
        self.cross_rank = True
        if inbox is None:
            self.unfenced = True
        else:
            self.rotating.append(inbox)

    def grow_slot_step(self, step: int) -> None:
        self.slot_step = max(self.slot_step, step)

    def next_gather_id(self) -> int:
        self.gathers += 1
        return self.gathers - 1

    # ---- set-up

    def run(self) -> None:
        fn = self.old
        for g in overlap_groups(self.pass_name, fn):
            if g.kind in OVERLAP_KINDS:
                self.groups[g.producer] = g
                self.groups[g.consumer] = g
        self.chains = epilogue_chains(fn, self.pass_name)
        for chain in self.chains.values():
            self.chain_of[chain.start] = chain
            self.fused.update(chain.ops)
        ops = [op for op in fn.regions[0].blocks[0].operations]
        self._check_input(ops)
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        ret = ops[-1].operation
        outs = [v for v in ret.operands]
        arg_types = [_memref_of(t) for t in ftype.inputs] + [_memref_of(t) for t in ftype.results]
        new = func.FuncOp(ir.StringAttr(fn.attributes["sym_name"]).value,
                          ir.FunctionType.get(arg_types + [ir.IndexType.get()], []),
                          ip=ir.InsertionPoint(fn), loc=fn.location)
        self.new = new.operation
        self._set_attributes(ftype)
        entry = new.add_entry_block()
        self.b = DeviceBuilder(self.new, entry.arguments[len(arg_types)], fn.location)
        old_args = fn.regions[0].blocks[0].arguments
        for i, a in enumerate(old_args):
            self.buffers[a] = entry.arguments[i]
            self.inputs.add(entry.arguments[i])
        self.out_args = [entry.arguments[len(old_args) + j] for j in range(len(outs))]
        self.dests: dict[ir.Value, ir.Value] = {}
        for j, v in enumerate(outs):
            if v not in self.dests and not isinstance(v, ir.BlockArgument):
                self.dests[v] = self.out_args[j]
        fork = self.b.entry_fork(("comm", "reduce"))
        for op in ops[:-1]:
            self._lower(op.operation)
        self._write_outputs(outs)
        self.b.prune_entry_fork(fork)
        self._end(ret.location)
        self.b.finish()
        self.new.attributes[EPOCH_LIMIT_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                                   I32_MAX // self.slot_step)
        with ret.location:
            func.ReturnOp([], ip=ir.InsertionPoint(entry))
        name = ir.StringAttr(fn.attributes["sym_name"]).value
        fn.erase()
        self.new.attributes["sym_name"] = ir.StringAttr.get(name)

    def _end(self, loc: ir.Location) -> None:
        """End a cross-rank program with a barrier, so that no rank starts call e + 1 while a peer still reads
        its buffers -- unless every collective fences itself and the program runs on one lane: then each rank's
        waits of call e + 1 already follow every peer's call e (a peer stores into this rank's inbox in call e + 1
        only after its own call e, which waited on this rank's stores of call e, i.e. after this rank's call
        e - 1), and the inboxes rotate, so the stores of call e + 1 land in the copy that call e - 1 read. The
        program is marked ``ditron.fence = "waits"`` (the runtime's CUDA graphs then zero the other parity's pads
        at the start of a call instead of in the barrier)."""
        if not self.cross_rank:
            return
        lanes = set()
        for op in self.b.block.operations:
            op.operation.walk(lambda o: lanes.add(str_attr(o, LANE_ATTR)) or ir.WalkResult.ADVANCE,
                              ir.WalkOrder.PRE_ORDER)
        if self.end_barrier == "auto" and not self.unfenced and lanes <= {None, "compute"}:
            for buf in self.rotating:
                self.b.rotate(buf)
            self.new.attributes[device.FENCE_ATTR] = ir.StringAttr.get("waits")
            return
        # one slot per rank: the simulator's barrier counts in slot 0, the GPU executor's sets slot <rank>
        world = self.mesh.axis_size(self.axis) if self.mesh is not None and self.axis in self.mesh.axes else 1
        with self.b.located(loc):
            self.b.barrier(self.b.pad(world, "barrier"))

    def _check_input(self, ops) -> None:
        axes = set()
        for op in ops[:-1]:
            op = op.operation
            if not op.name.startswith(task.TaskOp.DIALECT + "."):
                raise self.error(op, "cannot be lowered to the device level (task programs hold ditron_task ops "
                                     "only)")
            if task.Shard.match(op):
                raise self.error(op, "is a sharding annotation of the global view; run ditron-partition first")
            if not any(w.match(op) for w in LOWERED):
                raise self.error(op, "has no device-level lowering yet (supported: matmul, grouped_matmul, "
                                     "elementwise, all_gather, reduce_scatter, all_reduce, all_to_all, custom)")
            if task.AllToAll.match(op) and task.AllToAll(op).split_sizes is not None and \
                    not task.AllToAll(op).bounded:
                raise self.error(op, "with split_sizes and one result of a dynamic dim is unbounded, which has no "
                                     "device-level lowering: give the output a capacity (the bounded form: results "
                                     "tensor<capacity x ...> and recv_counts tensor<W x i32>)")
            if TILING_ATTR not in op.attributes:
                raise self.error(op, "has no 'ditron.tiling'; run ditron-tile before ditron-lower-task-to-device")
            try:
                tiling = Tiling.from_attr(op.attributes[TILING_ATTR])
            except ValueError as err:
                raise self.error(op, f"{err}; run ditron-tile to write it") from None
            if "axis" in op.attributes:
                axis = ir.StringAttr(op.attributes["axis"]).value
                axes.add(axis)
                size = self.mesh.axis_size(axis) if self.mesh is not None and axis in self.mesh.axes else None
                if size is not None and tiling.world != size:
                    raise self.error(op, f"was tiled for {tiling.world} rank(s) but mesh axis '{axis}' has {size}; "
                                         "run ditron-tile again")
        if len(axes) > 1:
            raise self.error(self.old, f"communicates over several mesh axes ({', '.join(sorted(axes))}); a device "
                                       "program runs over one axis for now")
        self.axis = next(iter(axes), None)
        if self.axis is None and self.mesh is not None:
            self.axis = self.mesh.axes[0]

    def _set_attributes(self, ftype: ir.FunctionType) -> None:
        new, old = self.new, self.old
        new.attributes[LEVEL_ATTR] = ir.StringAttr.get("device")
        targets = {Tiling.of(op).target for op in walk_ops(old) if TILING_ATTR in op.attributes}
        if targets:
            new.attributes[TARGET_ATTR] = ir.StringAttr.get(sorted(targets)[0])
        if self.axis is not None:
            new.attributes[AXIS_ATTR] = ir.StringAttr.get(self.axis)
        entries = []
        for i in range(len(ftype.inputs)):
            entries.append(self._io_attr("in", arg_sharding(old, i), _global_shape(old, "arg_attrs", i)))
        for j in range(len(ftype.results)):
            entries.append(self._io_attr("out", result_sharding(old, j), _global_shape(old, "res_attrs", j)))
        entries.append(ir.DictAttr.get({IO_ATTR: ir.StringAttr.get("epoch")}))
        new.attributes["arg_attrs"] = ir.ArrayAttr.get(entries)

    @staticmethod
    def _io_attr(io: str, sharding, global_shape: ir.Attribute | None) -> ir.Attribute:
        d = {IO_ATTR: ir.StringAttr.get(io)}
        if sharding is not None:
            d[LAYOUT_ATTR] = sharding.to_attr()
        if global_shape is not None:
            d[GLOBAL_SHAPE_ATTR] = global_shape
        return ir.DictAttr.get(d)

    # ---- buffers

    def buf(self, v: ir.Value) -> ir.Value:
        return self.buffers[v]

    def dest(self, v: ir.Value, name: str) -> ir.Value:
        """The memref that will hold task value v: its "out" argument if v is returned, else a new buffer. The
        start of a fused epilogue chain lives in its last value's memref (the GEMM stores the chain's result)."""
        chain = self.chain_of.get(v)
        target = chain.final if chain is not None else v
        if target in self.dests:
            m = self.dests[target]
        else:
            rt = ir.RankedTensorType(target.type)
            m = self.alloc_symmetric(list(rt.shape), rt.element_type, name)
        self.buffers[v] = m
        if chain is not None:
            for op in chain.ops:
                self.buffers[op.results[0]] = m
        return m

    def epilogue(self, mm: ir.Operation) -> tuple[list | None, list[ir.Value], ir.Type]:
        """The fused epilogue of matmul mm: (the GEMM record's steps or None, the memrefs of their operands, the
        type the GEMM stores: the chain's last value's when the chain starts at the matmul's result)."""
        chain = self.chains.get(mm)
        if chain is None:
            return None, [], mm.results[0].type
        args = [self.buf(x) for x in chain.operands if x is not None]
        return chain.steps, args, (mm.results[0].type if chain.reduced else chain.final.type)

    def bind(self, v: ir.Value, m: ir.Value) -> None:
        self.buffers[v] = m

    def alloc_symmetric(self, shape: Sequence[int], element_type: ir.Type, name: str) -> ir.Value:
        m = self.b.alloc(list(shape), element_type, name)
        self.symmetric.add(m)
        return m

    def is_symmetric(self, m: ir.Value) -> bool:
        return m in self.symmetric

    def is_input(self, m: ir.Value) -> bool:
        return m in self.inputs

    # ---- dispatch

    def _lower(self, op: ir.Operation) -> None:
        try:
            self._dispatch(op)
        except VerificationError as err:  # a kernel template refused its record: say where
            raise self.error(op, f"cannot be lowered: {err}") from None

    def _dispatch(self, op: ir.Operation) -> None:
        g = self.groups.get(op)
        if op in self.fused:  # computed by its matmul's GEMM epilogue
            return
        with self.b.located(op.location):
            if g is not None:
                if op == g.consumer:
                    self._lower_group(g)
                return
            t = Tiling.of(op)
            if task.Matmul.match(op):
                self.matmul(op, t)
            elif task.GroupedMatmul.match(op):
                self.grouped_matmul(op, t)
            elif task.Elementwise.match(op):
                self.elementwise(op, t)
            elif task.Custom.match(op):
                self.custom(op, t)
            elif op.name.split(".", 1)[1] in COLLECTIVES:
                lower_collective(self, op, t)
            else:
                raise AssertionError(f"{op.name} passed _check_input but has no lowering")

    def _lower_group(self, g: OverlapGroup) -> None:
        t = Tiling.of(g.consumer)
        if Tiling.of(g.producer) != t:
            raise self.error(g.consumer, f"and its producer in overlap group {g.group} carry different "
                                         "'ditron.tiling'; run ditron-tile again")
        if (t.world or 1) == 1:  # one rank: the collective is the identity, the GEMM runs alone
            if g.kind == "ag_matmul":
                self.buffers[g.producer.results[0]] = self.buf(g.producer.operands[0])
                self.matmul(g.consumer, t)
            else:
                out = self.dest(g.consumer.results[0], "mm")
                self.buffers[g.producer.results[0]] = out
                self.matmul(g.producer, t, dst=out)
            return
        lower_fused(self, g, t)

    def _write_outputs(self, outs: Sequence[ir.Value]) -> None:
        """Returned values not written in place (arguments, or a value returned twice): local copies."""
        for j, v in enumerate(outs):
            src = self.buffers[v]
            dst = self.out_args[j]
            if src == dst:
                continue
            shape = list(ir.MemRefType(dst.type).shape)
            self.b.copy(src, dst, src_rank=self.b.rank, dst_rank=self.b.rank, src_offsets=[0] * len(shape),
                        dst_offsets=[0] * len(shape), sizes=shape, engine="copy_engine", lane="compute",
                        role="output")

    # ---- kernels

    def launch(self, record: KernelRecord, args: Sequence[ir.Value], *, lane: str, role: str,
               group: int | None = None) -> device.Launch:
        """Launch the record's kernel (its tile order on the launch op), with a GEMM's split-K / stream-K buffers."""
        if record["template"] == "gemm":
            args = [*args, *self._gemm_scratch(record)]
        name = self.kernels.declare(record, [a.type for a in args], self.b.loc)
        return self.b.launch(name, args, grid=K.grid_of(record), sm_budget=K.sm_budget_of(record),
                             tile_order=record.get("tile_order", "grouped"), lane=lane, role=role, group=group)

    def _gemm_scratch(self, record: KernelRecord) -> list[ir.Value]:
        """A split-K or stream-K GEMM's fp32 workspace and its locks (``gemm.scratch``: zero at allocation, and
        every launch leaves them zero); none for other GEMMs."""
        from ..kernels import gemm
        shapes = gemm.scratch(record)
        if not shapes:
            return []
        (ws_shape, _), ((locks,), _) = shapes["workspace"], shapes["locks"]
        return [self.b.alloc(ws_shape, ir.F32Type.get(), "gemm_workspace"), self.b.pad(locks, "gemm_locks")]

    # ---- compute ops

    def matmul(self, op: ir.Operation, t: Tiling, *, dst: ir.Value | None = None) -> None:
        mm = task.Matmul(op)
        c = dst if dst is not None else self.dest(mm.result, "mm")
        steps, ep_args, c_type = self.epilogue(op)
        a, b, lds = self.buf(mm.lhs), self.buf(mm.rhs), {}
        if t.repack is not None:
            if t.repack not in REPACKS:
                raise self.error(op, f"ditron.tiling repack '{t.repack}' is not one of {', '.join(REPACKS)}")
            if "a" in t.repack:
                a, lds["lda"] = self.repacked(a, "repack_a", t.target)
            if "b" in t.repack:
                b, lds["ldb"] = self.repacked(b, "repack_b", t.target)
        rec = K.gemm_record(shape_of(mm.lhs), shape_of(mm.rhs), mm.lhs.type, c_type, t, b_trans=mm.transpose_b,
                            epilogue=steps, fast_accum=mm.fast_accum, **lds)
        self.launch(rec, [a, b, c, *ep_args], lane="compute", role="gemm")

    def repacked(self, m: ir.Value, name: str, target: str) -> tuple[ir.Value, int]:
        """A copy of the operand m in a buffer whose rows start on the target's TMA lines (ditron-tile's repack:
        the GEMM's loads of rows off them are slower than the copy), and its row stride; the copy runs on the
        GEMM's lane, before it."""
        mt = ir.MemRefType(m.type)
        rows, cols = mt.shape
        ld = padded_ld(cols, max(1, mt.element_type.width // 8), peaks_for(target))
        dst = self.alloc_symmetric([rows, ld], mt.element_type, name)
        self.b.copy(m, dst, src_rank=self.b.rank, dst_rank=self.b.rank, src_offsets=[0, 0], dst_offsets=[0, 0],
                    sizes=[rows, cols], engine="copy_engine", lane="compute", role="repack")
        return dst, ld

    def grouped_matmul(self, op: ir.Operation, t: Tiling) -> None:
        g = task.GroupedMatmul(op)
        c = self.dest(g.result, "gmm")
        rec = K.grouped_gemm_record(shape_of(g.lhs), shape_of(g.rhs), g.group_sizes.type, g.lhs.type, g.result.type, t,
                                    groups=shape_of(g.group_sizes)[0], gated=g.gated)
        self.launch(rec, [self.buf(g.lhs), self.buf(g.rhs), self.buf(g.group_sizes), c], lane="compute",
                    role="grouped_gemm")

    def elementwise(self, op: ir.Operation, t: Tiling) -> None:
        e = task.Elementwise(op)
        out = self.dest(e.result, "ew")
        rs, xs = shape_of(e.result), (shape_of(e.inputs[1]) if len(e.inputs) == 2 else None)
        broadcast = None if xs is None or list(xs) == list(rs) else "scalar" if list(xs) == [1] else \
            "row" if len(xs) == 2 else "bias"
        rec = K.elementwise_record(e.fn, len(e.inputs), rs, e.result.type, t, in_type=e.inputs[0].type,
                                   broadcast=broadcast)
        self.launch(rec, [self.buf(x) for x in e.inputs] + [out], lane="compute", role="elementwise")

    def custom(self, op: ir.Operation, t: Tiling) -> None:
        """A user's kernel program (ditron.register_op): built for this world, the local shapes, the element
        type, the target and the SMs, checked against the op's types, and inlined (ditron.device's emitter) with
        its inputs and outputs bound to the op's buffers."""
        from ..custom_ops import registered
        from ..device.emit import _Emitter, _epoch_limit
        from ..errors import DitronError
        k = task.Custom(op)
        try:
            c = registered(k.kernel)
        except KeyError as err:
            raise self.error(op, f"{err.args[0]}: register it before lowering (import the module that does)") \
                from None
        elems = {str(ir.RankedTensorType(v.type).element_type) for v in k.inputs}
        dtype = CUSTOM_ELEMENTS.get(next(iter(elems))) if len(elems) == 1 else None
        if dtype is None:
            raise self.error(op, f"takes tensors of element type(s) {', '.join(sorted(elems)) or 'none'}; a kernel "
                                 f"program takes tensors of one of {', '.join(CUSTOM_ELEMENTS)}")
        shapes = [shape_of(v) for v in k.inputs]
        try:
            p = c.program(t.world, shapes, dtype, target=t.target, sm_budget=t.sm_budget or 1, **k.params)
        except DitronError as err:
            raise self.error(op, f"kernel program '{k.kernel}': {err.diagnostics[0].message}") from None
        except TypeError as err:  # a parameter its builder does not take
            raise self.error(op, f"kernel program '{k.kernel}': its builder: {err}") from None
        for j, (r, b) in enumerate(zip(op.results, p.outputs)):
            rt = ir.RankedTensorType(r.type)
            if tuple(rt.shape) != tuple(b.shape) or CUSTOM_ELEMENTS.get(str(rt.element_type)) != b.dtype:
                raise self.error(op, f"result {j} is {rt}, but the kernel program '{k.kernel}' built for it gives "
                                     f"{list(b.shape)} {b.dtype} (its output '{b.name}')")
        bind = {id(b): self.buf(v) for b, v in zip(p.inputs, k.inputs)}
        bind.update({id(b): self.dest(r, f"{k.kernel}_{b.name}") for b, r in zip(p.outputs, op.results)})
        _Emitter(p).inline(self.b, self.kernels, bind)
        if (t.world or 1) > 1:
            self.crosses()
        limit = _epoch_limit(p)
        if limit is not None:
            self.grow_slot_step(I32_MAX // limit)

    def local_copy(self, src: ir.Value, dst: ir.Value, *, lane: str) -> None:
        shape = list(ir.MemRefType(src.type).shape)
        self.b.copy(src, dst, src_rank=self.b.rank, dst_rank=self.b.rank, src_offsets=[0] * len(shape),
                    dst_offsets=[0] * len(shape), sizes=shape, engine="copy_engine", lane=lane, role="local")


@dataclass(frozen=True)
class LowerTaskToDevicePass(Pass):
    name = "ditron-lower-task-to-device"
    summary = "Tiled local-view task IR -> rank-generic device programs (buffers, copies, signals, launches)"

    end_barrier: str = option("auto", "auto: end a cross-rank program with a barrier unless every collective "
                                      "fences itself (push: rotating inboxes, every rank waits on every peer's "
                                      "stores each call); always: end every cross-rank program with one")

    def __post_init__(self):
        if self.end_barrier not in END_BARRIERS:
            raise ValueError(f"end-barrier must be one of {', '.join(END_BARRIERS)}, got '{self.end_barrier}'")

    def run(self, module: ir.Module) -> None:
        mesh = require_task_level(module, self.name)
        kernels = KernelTable(module)
        for fn in functions(module):
            _FunctionLowering(self.name, module, fn, mesh, kernels, self.end_barrier).run()
