"""Building device-level programs (docs/device_ir.md): a small builder used by ditron-lower-task-to-device and
ditron-schedule-overlap, in the style of JAX Mosaic GPU's utils — each helper builds ops at the current insertion
point and returns values, so lowering code reads like the IR it emits.

    b = DeviceBuilder(func_op, epoch)             # allocs go first, then rank/num_ranks, then the program
    pad = b.pad(8, "ag_ready")                    # memref<8xi32>, zero at allocation
    with b.loop(0, 4) as c:                       # scf.for over index values
        b.copy(x, g, src_rank=b.rank, dst_rank=b.rank, src=[b.mul(c, 128), 0], dst=[...], sizes=[...],
               lane="comm", role="ag.stage")
        b.signal(pad, target=b.rank, slot=c, lane="comm", role="ag.ready")

Every enqueued op gets ``ditron.lane`` (which logical lane it belongs to: "compute", "comm", "reduce") and,
where ditron-schedule-overlap rewrites it, ``ditron.role``; ditron-schedule-overlap turns lanes into streams.
Kernels are declared once per distinct record (``KernelTable``) as private ``func.func`` declarations carrying the
``ditron.kernel`` record; ditron-lower-device-to-core replaces each with the template's ``tt.func``.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

from mlir import ir
from mlir.dialects import arith, func, scf

from ..dialects import device
from ..dialects.opbase import OpWrapper

LANE_ATTR = "ditron.lane"
ROLE_ATTR = "ditron.role"
GROUP_ATTR = "ditron.group"
GATHER_ATTR = "ditron.gather"   # which all-gather pattern of the function an op belongs to (ring rewrite)
KERNEL_ATTR = "ditron.kernel"
LANES = ("compute", "comm", "reduce")
# stream waits on slots that peers set (or count up to) in the current call only
CROSS_RANK_WAITS = ("ag.await", "rs.await", "a2a.await")

Index = ir.Value | int


def index_type() -> ir.Type:
    return ir.IndexType.get()


def tag(op, *, lane: str | None = None, role: str | None = None, group: int | None = None,
        gather: int | None = None) -> None:
    op = op.op if isinstance(op, OpWrapper) else (op.operation if hasattr(op, "operation") else op)
    if lane is not None:
        op.attributes[LANE_ATTR] = ir.StringAttr.get(lane)
    if role is not None:
        op.attributes[ROLE_ATTR] = ir.StringAttr.get(role)
    if group is not None:
        op.attributes[GROUP_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), group)
    if gather is not None:
        op.attributes[GATHER_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), gather)


def str_attr(op: ir.Operation, name: str) -> str | None:
    return ir.StringAttr(op.attributes[name]).value if name in op.attributes else None


def int_attr(op: ir.Operation, name: str) -> int | None:
    return ir.IntegerAttr(op.attributes[name]).value if name in op.attributes else None


class DeviceBuilder:
    """Builds the body of one device function. Layout of the entry block: every alloc_symmetric, then rank,
    constants, num_ranks, then the program (appended)."""

    def __init__(self, func_op: ir.Operation, epoch: ir.Value, loc: ir.Location):
        self.func = func_op
        self.epoch = epoch
        self.loc = loc
        self.block = func_op.regions[0].blocks[0]
        self.ip = ir.InsertionPoint(self.block)
        with loc:
            self.rank_op = device.Rank.build(ip=self.ip)
            self.num_ranks_op = device.NumRanks.build(ip=self.ip)
        self.rank = self.rank_op.rank
        self.num_ranks = self.num_ranks_op.num_ranks
        self._alloc_ip = ir.InsertionPoint(self.rank_op.op)
        self._const_ip = ir.InsertionPoint(self.num_ranks_op.op)
        self._consts: dict[int, ir.Value] = {}
        self._names: set[str] = set()
        self._sync_pad: ir.Value | None = None
        self._sync_slots = 0
        self._sync_op: ir.Operation | None = None

    # ---- insertion

    @contextlib.contextmanager
    def at(self, ip: ir.InsertionPoint, loc: ir.Location | None = None) -> Iterator[None]:
        saved = (self.ip, self.loc)
        self.ip, self.loc = ip, loc or self.loc
        try:
            yield
        finally:
            self.ip, self.loc = saved

    @contextlib.contextmanager
    def located(self, loc: ir.Location) -> Iterator[None]:
        saved = self.loc
        self.loc = loc
        try:
            yield
        finally:
            self.loc = saved

    # ---- values

    def c(self, value: int) -> ir.Value:
        if value not in self._consts:
            with self.loc:
                self._consts[value] = arith.ConstantOp(index_type(), value, ip=self._const_ip).result
        return self._consts[value]

    def v(self, x: Index) -> ir.Value:
        return self.c(x) if isinstance(x, int) else x

    def _bin(self, fn, a: Index, b: Index) -> ir.Value:
        with self.loc, self.ip:
            return fn(self.v(a), self.v(b))

    def add(self, a: Index, b: Index) -> ir.Value:
        if isinstance(a, int) and isinstance(b, int):
            return self.c(a + b)
        if b == 0:
            return self.v(a)
        if a == 0:
            return self.v(b)
        return self._bin(arith.addi, a, b)

    def sub(self, a: Index, b: Index) -> ir.Value:
        if isinstance(a, int) and isinstance(b, int):
            return self.c(a - b)
        return self.v(a) if b == 0 else self._bin(arith.subi, a, b)

    def mul(self, a: Index, b: Index) -> ir.Value:
        if isinstance(a, int) and isinstance(b, int):
            return self.c(a * b)
        if b == 1:
            return self.v(a)
        if a == 1:
            return self.v(b)
        if a == 0 or b == 0:
            return self.c(0)
        return self._bin(arith.muli, a, b)

    def rem(self, a: Index, b: Index) -> ir.Value:
        return self._bin(arith.remui, a, b)

    def min(self, a: Index, b: Index) -> ir.Value:
        if isinstance(a, int) and isinstance(b, int):
            return self.c(min(a, b))
        return self._bin(arith.minsi, a, b)

    def max(self, a: Index, b: Index) -> ir.Value:
        if isinstance(a, int) and isinstance(b, int):
            return self.c(max(a, b))
        return self._bin(arith.maxsi, a, b)

    def peer(self, distance: Index) -> ir.Value:
        """(rank + distance) mod num_ranks."""
        return self.rem(self.add(self.rank, distance), self.num_ranks)

    def lt(self, a: Index, b: Index) -> ir.Value:
        with self.loc, self.ip:
            return arith.cmpi(arith.CmpIPredicate.ult, self.v(a), self.v(b))

    @contextlib.contextmanager
    def loop(self, lo: Index, hi: Index, step: Index = 1, *, role: str | None = None,
             group: int | None = None) -> Iterator[ir.Value]:
        with self.loc:
            op = scf.ForOp(self.v(lo), self.v(hi), self.v(step), ip=self.ip)
        tag(op, role=role, group=group)
        with self.at(ir.InsertionPoint(op.body)):
            yield op.induction_variable
            with self.loc:
                scf.YieldOp([], ip=self.ip)

    @contextlib.contextmanager
    def if_(self, cond: ir.Value, *, role: str | None = None, group: int | None = None) -> Iterator[None]:
        with self.loc:
            op = scf.IfOp(cond, ip=self.ip)
        tag(op, role=role, group=group)
        with self.at(ir.InsertionPoint(op.then_block)):
            yield
            with self.loc:
                scf.YieldOp([], ip=self.ip)

    # ---- buffers

    def unique(self, name: str) -> str:
        base, n = name, 1
        while name in self._names:
            name, n = f"{base}_{n}", n + 1
        self._names.add(name)
        return name

    def alloc(self, shape: Sequence[int], element_type: ir.Type, name: str) -> ir.Value:
        with self.loc:
            return device.AllocSymmetric.build(shape, element_type, self.unique(name), ip=self._alloc_ip).buffer

    @staticmethod
    def rotate(buffer: ir.Value) -> None:
        """Hold a symmetric buffer twice, call e using copy e % 2 (``device.ROTATE_ATTR``)."""
        buffer.owner.attributes[device.ROTATE_ATTR] = ir.UnitAttr.get()

    def pad(self, slots: int, name: str, *, consumed: bool = False) -> ir.Value:
        """A signal pad of ``slots`` i32 slots; ``consumed``: its waiters clear its slots (device.CONSUMED_ATTR)."""
        pad = self.alloc([max(slots, 1)], ir.IntegerType.get_signless(32), name)
        if consumed:
            pad.owner.attributes[device.CONSUMED_ATTR] = ir.UnitAttr.get()
        return pad

    # ---- device ops

    def copy(self, src: ir.Value, dst: ir.Value, *, src_rank: Index, dst_rank: Index, src_offsets: Sequence[Index],
             dst_offsets: Sequence[Index], sizes: Sequence[Index], engine: str, lane: str, role: str | None = None,
             group: int | None = None) -> device.Copy:
        with self.loc:
            op = device.Copy.build(src, dst, src_rank=self.v(src_rank), dst_rank=self.v(dst_rank),
                                   src_offsets=[self.v(o) for o in src_offsets],
                                   dst_offsets=[self.v(o) for o in dst_offsets], sizes=[self.v(s) for s in sizes],
                                   engine=engine, ip=self.ip)
        tag(op, lane=lane, role=role, group=group)
        return op

    def signal(self, pad: ir.Value, *, target: Index, slot: Index, value: ir.Value | None = None, op: str = "set",
               scope: str = "sys", lane: str, role: str | None = None, group: int | None = None) -> device.Signal:
        with self.loc:
            s = device.Signal.build(pad, target_rank=self.v(target), slot=self.v(slot),
                                    value=self.epoch if value is None else value, op=op, scope=scope, ip=self.ip)
        tag(s, lane=lane, role=role, group=group)
        return s

    def wait(self, pad: ir.Value, slots: Sequence[Index], *, value: ir.Value | None = None, lane: str,
             role: str | None = None, group: int | None = None) -> device.Wait:
        with self.loc:
            w = device.Wait.build(pad, slots=[self.v(s) for s in slots],
                                  value=self.epoch if value is None else value, where="stream", ip=self.ip)
        tag(w, lane=lane, role=role, group=group)
        return w

    def launch(self, kernel: str, args: Sequence[ir.Value], *, grid: Sequence[int], sm_budget: int,
               tile_order: str, lane: str, role: str | None = None, group: int | None = None) -> device.Launch:
        with self.loc:
            ln = device.Launch.build(kernel, list(args), grid=grid, sm_budget=sm_budget, tile_order=tile_order,
                                     ip=self.ip)
        tag(ln, lane=lane, role=role, group=group)
        return ln

    def barrier(self, pad: ir.Value) -> device.Barrier:
        with self.loc:
            b = device.Barrier.build(pad, ip=self.ip)
        tag(b, lane="compute", role="end_barrier")
        return b

    # ---- ordering between lanes

    def sync(self, from_lane: str, to_lane: str, role: str = "sync") -> None:
        """Order everything enqueued so far on from_lane before what follows on to_lane: a local signal on
        from_lane and a stream wait on to_lane, through one slot of the function's sync pad. (On one stream this
        is a no-op; ditron-schedule-overlap maps lanes to streams.)"""
        if from_lane == to_lane:
            return
        self._sync_pad_value()
        slot = self._sync_slots
        self._sync_slots += 1
        self.signal(self._sync_pad, target=self.rank, slot=slot, scope="gpu", lane=from_lane, role=f"{role}.signal")
        self.wait(self._sync_pad, [slot], lane=to_lane, role=f"{role}.wait")

    def entry_fork(self, lanes: Sequence[str]) -> list[ir.Operation]:
        """At program entry, order every side lane after stream 0: a call's side streams then start after the
        previous call's end-of-program barrier, so no rank reuses its buffers while a peer still reads them."""
        pad = self._sync_pad_value()
        slot = self._sync_slots
        self._sync_slots += 1
        ops = [self.signal(pad, target=self.rank, slot=slot, scope="gpu", lane="compute", role="entry.signal").op]
        ops += [self.wait(pad, [slot], lane=lane, role="entry.wait").op for lane in lanes]
        return ops

    def prune_entry_fork(self, entry: list[ir.Operation]) -> None:
        """Drop the entry wait of a lane the program never uses, or whose first op is already a wait on a
        cross-rank, epoch-gated slot (``CROSS_RANK_WAITS``): a peer can satisfy it in call e only after every rank
        passed call e-1's end barrier. Drop the signal when no entry wait is left."""
        first: dict[str, ir.Operation] = {}

        def visit(o):
            lane = str_attr(o, LANE_ATTR)
            if lane is not None and o not in entry:
                first.setdefault(lane, o)
            return ir.WalkResult.ADVANCE

        for op in self.block.operations:
            op.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
        kept = 0
        for op in entry[1:]:
            head = first.get(str_attr(op, LANE_ATTR))
            if head is None or str_attr(head, ROLE_ATTR) in CROSS_RANK_WAITS:
                op.erase()
            else:
                kept += 1
        if not kept:
            entry[0].erase()

    def _sync_pad_value(self) -> ir.Value:
        if self._sync_pad is None:
            self._sync_pad = self.pad(1, "sync")
            self._sync_op = self._sync_pad.owner
        return self._sync_pad

    def finish(self) -> None:
        """Give the sync pad its final size (or drop it when nothing uses it)."""
        if self._sync_pad is None:
            return
        if next(iter(self._sync_pad.uses), None) is None:
            self._sync_op.erase()
            return
        if self._sync_slots <= 1:
            return
        old = self._sync_op
        with old.location:
            new = device.AllocSymmetric.build([self._sync_slots], ir.IntegerType.get_signless(32),
                                              device.AllocSymmetric(old).name, ip=ir.InsertionPoint(old))
        old.results[0].replace_all_uses_with(new.buffer)
        old.erase()


class KernelTable:
    """The kernels a module launches: one private declaration per distinct record, named ``<name>_<n>``."""

    def __init__(self, module: ir.Module):
        self.module = module
        self.by_record: dict[str, str] = {}
        self.names = {ir.StringAttr(op.operation.attributes["sym_name"]).value for op in module.body.operations
                      if "sym_name" in op.operation.attributes}

    def declare(self, record, arg_types: Sequence[ir.Type], loc: ir.Location) -> str:
        """The symbol of a kernel with this record (a KernelRecord; its 'name' is set to the symbol)."""
        key_record = dict(record)
        key_record.pop("name", None)
        key = repr(sorted(key_record.items(), key=lambda kv: kv[0]))
        if key in self.by_record:
            return self.by_record[key]
        base = record.get("name") or record["template"]
        name, n = base, 0
        while name in self.names:
            n += 1
            name = f"{base}_{n}"
        self.names.add(name)
        record["name"] = name
        with loc:
            decl = func.FuncOp(name, ir.FunctionType.get(list(arg_types), []), visibility="private",
                               ip=ir.InsertionPoint(self.module.body))
            decl.attributes[KERNEL_ATTR] = record.to_attr()
        self.by_record[key] = name
        return name
