"""ditron-schedule-overlap: overlap scheduling of device programs (ditron-lower-task-to-device's output).

* streams: every enqueued op gets ``stream = i``: the compute lane runs on stream 0, the comm lane (chunk copies)
  on stream 1 (direct pulls may spread over ``copy-streams`` streams, one per peer distance), the reduce lane
  (reduction kernels) on the next stream; the sync signal/wait pairs the lowering placed between lanes become
  cross-stream dependencies.
* tile order: GEMMs that wait for gathered rows or count their rows for a reduction visit their tiles
  ``rank_rotated`` (own shard first, then peers in arrival order = ring distance); the kernel record and the
  launch change together.
* copy order: ``pull=direct`` (each rank pulls every chunk from its owner, all peers at once) or ``pull=ring``
  (pull from rank+1, which forwards to rank-1 what it received: one link per step).
* engines: ``engine=copy_engine|sm`` puts every chunk copy on one engine (default: ditron-tile's choice).
* SM partition: ``comm-sms=N`` gives reduction kernels and SM copies N SMs and the GEMMs running beside them the
  rest; by default ditron-tile's split is kept.
* a device function whose ops name their streams and carry no ``ditron.lane`` (scheduled by hand) is left as it
  is: lanes are what this pass maps onto streams.

    "ditron_device.copy"(%g, %g, %q, %r, ...) {ditron.lane = "comm", ditron.role = "ag.pull", engine = "copy_engine"}
    "ditron_device.launch"(%g, %w, %c, %ready, %epoch) {ditron.lane = "compute", kernel = @gemm, tile_order = "grouped"}
  becomes
    "ditron_device.copy"(%g, %g, %q, %r, ...) {..., stream = 1 : i64}
    "ditron_device.launch"(%g, %w, %c, %ready, %epoch) {..., kernel = @gemm_1, stream = 0 : i64,
        tile_order = "rank_rotated"}
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, scf

from ..cost_model import peaks_for
from ..dialects import device
from ..dialects.opbase import walk_ops
from ..schema import JIT_ATTR
from ..errors import PassError, TargetError
from ..kernels import KernelRecord
from . import device_kernels as K
from .device_builder import (GATHER_ATTR, KERNEL_ATTR, LANE_ATTR, ROLE_ATTR, KernelTable, int_attr, str_attr, tag)
from .registry import Pass, option
from .rewrite import constant_int
from .tile import TARGET_ATTR, op_error, require_device_level

STREAM_ATTR = "stream"
PULL_ATTR = "ditron.pull"
ENQUEUED = tuple(w.op_name() for w in (device.Copy, device.Signal, device.Wait, device.Barrier, device.Launch))
ROTATED_ROLES = ("ag.gemm", "rs.gemm")
TILE_ORDERS = ("auto",) + device.TILE_ORDERS


def _i64(v: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


def _index_const(value: int, before: ir.Operation) -> ir.Value:
    with before.location:
        return arith.ConstantOp(ir.IndexType.get(), value, ip=ir.InsertionPoint(before)).result


def _enclosing(op: ir.Operation, role: str) -> ir.Operation | None:
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        if str_attr(parent, ROLE_ATTR) == role:
            return parent
        parent = parent.parent
    return None


class _Scheduler:
    def __init__(self, opts: "ScheduleOverlapPass", module: ir.Module, fn: ir.Operation, kernels: KernelTable):
        self.o, self.module, self.fn, self.kernels = opts, module, fn, kernels
        ops = list(walk_ops(fn))
        self.ops = ops
        ranks = [op for op in ops if device.Rank.match(op)]
        worlds = [op for op in ops if device.NumRanks.match(op)]
        if not ranks or not worlds:
            raise op_error(opts.name, fn, "has no ditron_device.rank / num_ranks; is it ditron-lower-task-to-device's "
                                          "output?")
        self.rank, self.num_ranks = ranks[0].results[0], worlds[0].results[0]
        self.symbols = {ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation
                        for op in module.body.operations if "sym_name" in op.operation.attributes}

    def error(self, op: ir.Operation, message: str) -> PassError:
        return op_error(self.o.name, op, message)

    # ---- copy order

    def gathers(self) -> dict[int, list[ir.Operation]]:
        out: dict[int, list[ir.Operation]] = {}
        for op in self.ops:
            g = int_attr(op, GATHER_ATTR)
            if g is not None:
                out.setdefault(g, []).append(op)
        return out

    def ring(self, ops: list[ir.Operation]) -> None:
        """Direct pull -> ring: offer to rank-1 only, pull from rank+1, forward to rank-1 what arrived."""
        pull_loops = [op for op in ops if str_attr(op, ROLE_ATTR) == "ag.pull_loop"]
        pushes = [op for op in ops if str_attr(op, ROLE_ATTR) == "ag.push"]
        if pushes and not pull_loops:
            raise self.error(pushes[0], "belongs to an all-gather by push (each rank copies its shard into every "
                                        "rank's buffer): there are no pulls to chain into a ring; use "
                                        "ditron-tile{all-gather=pull}")
        if any(str_attr(op, PULL_ATTR) == "ring" for op in pull_loops):
            return
        if len(pull_loops) != 1:
            raise self.error(pull_loops[0] if pull_loops else self.fn,
                             "belongs to an all-gather whose pulls are already split over streams; it cannot "
                             "become a ring")
        for loop in pull_loops:
            world = constant_int(loop.operands[1])
            if world is None:
                raise self.error(loop, "is an all-gather pull loop whose trip count is not a constant")
            loop.attributes[PULL_ATTR] = ir.StringAttr.get("ring")
        for op in ops:
            role = str_attr(op, ROLE_ATTR)
            if role == "ag.offer":
                world = constant_int(op.operands[1])
                op.operands[0] = _index_const(world - 1, op)
            elif role == "ag.pull":
                op.operands[2] = self.peer(1, op)
            elif role == "ag.arrive":
                self.forward(op)

    def peer(self, distance: int, before: ir.Operation) -> ir.Value:
        with before.location, ir.InsertionPoint(before):
            d = _index_const(distance, before)
            return arith.remui(arith.addi(self.rank, d), self.num_ranks)

    def forward(self, arrive: ir.Operation) -> None:
        loop = _enclosing(arrive, "ag.pull_loop")
        chunk_loop = arrive.parent
        awaits = [op for op in chunk_loop.regions[0].blocks[0].operations
                  if str_attr(op.operation, ROLE_ATTR) == "ag.await"]
        if loop is None or not awaits:
            raise self.error(arrive, "is not inside an all-gather pull loop with an await; cannot make it a ring")
        world = constant_int(loop.operands[1])
        s = loop.regions[0].blocks[0].arguments[0]
        avail = awaits[0].operation.operands[0]
        sig = device.Signal(arrive)
        anchor = _next_op(arrive)
        with arrive.location:
            ip = ir.InsertionPoint(anchor.operation)
            last = arith.ConstantOp(ir.IndexType.get(), world - 1, ip=ip).result
            cond = arith.CmpIOp(arith.CmpIPredicate.ult, s, last, ip=ip).result
            if_op = scf.IfOp(cond, ip=ip)
            with ir.InsertionPoint(if_op.then_block):
                prev = arith.remui(arith.addi(self.rank, arith.ConstantOp(ir.IndexType.get(), world - 1).result),
                                   self.num_ranks)
                fwd = device.Signal.build(avail, target_rank=prev, slot=sig.slot, value=sig.value, op="set",
                                          scope=sig.scope)
                scf.YieldOp([])
        tag(fwd, lane=str_attr(arrive, LANE_ATTR), role="ag.forward", gather=int_attr(arrive, GATHER_ATTR))

    def pull_into_destinations(self, ops: list[ir.Operation]) -> None:
        """Direct pulls into a destination that is not the gather buffer (a function output): nobody reads this
        rank's gather-buffer copy of a peer's chunk (peers pull from the chunk's owner), so the chunk is pulled
        straight into the destination instead of into the buffer and then copied locally (one local copy of the
        whole gathered tensor saved). A ring forwards from the buffer and keeps both."""
        for op in ops:
            if str_attr(op, ROLE_ATTR) != "ag.pull":
                continue
            loop = _enclosing(op, "ag.pull_loop")
            after = _next_op(op)
            if loop is None or str_attr(loop, PULL_ATTR) != "direct" or after is None or \
                    str_attr(after.operation, ROLE_ATTR) != "ag.local":
                continue
            pull, local = device.Copy(op), device.Copy(after.operation)
            same = local.src == pull.dst and local.src_rank == pull.dst_rank and local.dst.type == pull.dst.type \
                and list(local.src_offsets) == list(pull.dst_offsets) == list(local.dst_offsets) \
                and list(local.sizes) == list(pull.sizes)
            if not same:
                continue
            op.operands[1] = local.dst
            after.operation.erase()

    def split_pulls(self, ops: list[ir.Operation]) -> None:
        """One pull loop per peer distance, so the pulls from different peers can go to different streams."""
        for loop in [op for op in ops if str_attr(op, ROLE_ATTR) == "ag.pull_loop"]:
            lo, hi = constant_int(loop.operands[0]), constant_int(loop.operands[1])
            if lo is None or hi is None or hi - lo <= 1 or str_attr(loop, PULL_ATTR) == "ring":
                continue
            anchor = _next_op(loop)
            for s in range(lo + 1, hi):
                clone = loop.clone(ip=ir.InsertionPoint(anchor.operation) if anchor is not None else None)
                clone.operands[0] = _index_const(s, clone)
                clone.operands[1] = _index_const(s + 1, clone)
                clone.attributes[PULL_ATTR] = ir.StringAttr.get("direct")
            loop.operands[1] = _index_const(lo + 1, loop)
            loop.attributes[PULL_ATTR] = ir.StringAttr.get("direct")

    # ---- streams

    def assign_streams(self, copy_streams: int) -> None:
        comm_streams = max(1, copy_streams)
        lanes = {"compute": 0, "comm": 1, "reduce": 1 + comm_streams}
        for op in walk_ops(self.fn):
            if op.name not in ENQUEUED:
                continue
            lane = str_attr(op, LANE_ATTR) or "compute"
            if not self.o.streams:
                stream = 0
            elif lane == "comm":
                loop = _enclosing(op, "ag.pull_loop")
                first = constant_int(loop.operands[0]) if loop is not None else None
                stream = 1 + ((first - 1) % comm_streams if first is not None else 0)
            else:
                stream = lanes.get(lane, 0)
            op.attributes[STREAM_ATTR] = _i64(stream)

    # ---- kernels

    def relaunch(self, launch: ir.Operation, change: dict) -> None:
        """Give launch a kernel whose record differs by change (a new declaration unless one exists)."""
        ln = device.Launch(launch)
        decl = self.symbols.get(ln.kernel)
        if decl is None or KERNEL_ATTR not in decl.attributes:
            raise self.error(launch, f"launches '@{ln.kernel}', which has no '{KERNEL_ATTR}' record")
        rec = KernelRecord.from_attr(decl.attributes[KERNEL_ATTR])
        if all(rec.get(k) == v for k, v in change.items()):
            return
        rec.update(change)
        rec.pop("name", None)
        rec["name"] = rec["template"]
        check = _template_check(rec)
        if check is not None:
            check(rec)
        name = self.kernels.declare(rec, [a.type for a in ln.args], launch.location)
        self.symbols.setdefault(name, next(op.operation for op in self.module.body.operations
                                           if "sym_name" in op.operation.attributes and
                                           ir.StringAttr(op.operation.attributes["sym_name"]).value == name))
        ln.kernel = name
        ln.grid = K.grid_of(rec)
        ln.sm_budget = K.sm_budget_of(rec)
        if "tile_order" in rec:
            ln.tile_order = rec["tile_order"]

    def tile_orders(self) -> None:
        for op in walk_ops(self.fn):
            ln = device.Launch.match(op)
            if ln is None:
                continue
            rec = self.record(op)
            if rec.get("template") != "gemm":
                continue
            want = self.o.tile_order
            if "reduce_own" in rec:
                self.check_epilogue_reduction(op, rec)
                continue
            if want == "auto":
                rotated = str_attr(op, ROLE_ATTR) in ROTATED_ROLES and rec.get("rows_per_rank", 0) > 0
                want = "rank_rotated" if rotated else rec.get("tile_order", "grouped")
            if want == "rank_rotated" and rec.get("rows_per_rank", 0) < 1:
                raise self.error(op, "cannot visit its tiles rank_rotated: the GEMM's rows are not split over the "
                                     "ranks (use tile-order=grouped or row_major)")
            self.relaunch(op, {"tile_order": want})

    def check_epilogue_reduction(self, op: ir.Operation, rec: KernelRecord) -> None:
        """A GEMM that reduces its own rows in the epilogue is deadlock-free only in the tile order it was built
        with (own rows last) and beside the comm lane that stages the peers' partials."""
        if not self.o.streams:
            raise self.error(op, "reduces its own rows in the epilogue from partials the comm lane stages while it "
                                 "runs; streams=false would queue that staging behind the GEMM (deadlock). Tile it "
                                 "with reduce-scatter=reduce_kernel for a serial schedule")
        want = self.o.tile_order
        if want not in ("auto", rec["tile_order"]):
            raise self.error(op, f"reduces its own rows in the epilogue, which needs them visited last (tile_order "
                                 f"'{rec['tile_order']}'); tile-order={want} would deadlock")

    def partition(self, comm_sms: int) -> None:
        """comm_sms SMs for reduction kernels and SM copies, the rest for GEMMs that run beside them."""
        total = self._num_sms()
        if not 0 < comm_sms < total:
            raise self.error(self.fn, f"comm-sms={comm_sms} must leave SMs to both sides (1 .. {total - 1})")
        groups_with_comm = set()
        for op in walk_ops(self.fn):
            lane, group = str_attr(op, LANE_ATTR), int_attr(op, "ditron.group")
            if device.Launch.match(op) and lane == "reduce":
                self.relaunch(op, {"grid": comm_sms})
                groups_with_comm.add(group)
            elif device.Copy.match(op) and device.Copy(op).engine == "sm":
                op.attributes["ditron.sms"] = _i64(comm_sms)
                groups_with_comm.add(group)
        for op in walk_ops(self.fn):
            if device.Launch.match(op) and str_attr(op, LANE_ATTR) == "compute" and \
                    int_attr(op, "ditron.group") in groups_with_comm and self.record(op).get("template") == "gemm":
                self.relaunch(op, {"num_sms": total - comm_sms})

    def engines(self, engine: str) -> None:
        """Every chunk copy on one engine; SM copies get a share of SMs (ditron-tile's, else 16)."""
        for op in walk_ops(self.fn):
            cp = device.Copy.match(op)
            if cp is None:
                continue
            cp.engine = engine
            if engine == "sm" and "ditron.sms" not in op.attributes:
                op.attributes["ditron.sms"] = _i64(min(16, self._num_sms() - 1))
            elif engine != "sm" and "ditron.sms" in op.attributes:
                del op.attributes["ditron.sms"]

    def record(self, launch: ir.Operation) -> KernelRecord:
        decl = self.symbols.get(device.Launch(launch).kernel)
        if decl is not None and JIT_ATTR in decl.attributes:  # a user @ditron.jit kernel: nothing to re-tile
            return KernelRecord({"template": "jit"})
        if decl is None or KERNEL_ATTR not in decl.attributes:
            raise self.error(launch, f"launches '@{device.Launch(launch).kernel}', which has no '{KERNEL_ATTR}' "
                                     "record")
        return KernelRecord.from_attr(decl.attributes[KERNEL_ATTR])

    def _num_sms(self) -> int:
        target = str_attr(self.fn, TARGET_ATTR) or str_attr(self.module.operation, TARGET_ATTR) or "cuda:90"
        try:
            return peaks_for(target).num_sms
        except TargetError as err:
            raise self.error(self.fn, str(err)) from None

    def _topology(self) -> str:
        target = str_attr(self.fn, TARGET_ATTR) or str_attr(self.module.operation, TARGET_ATTR) or "cuda:90"
        try:
            return peaks_for(target).link_topology
        except TargetError:
            return "switch"

    # ---- driver

    def run(self) -> None:
        gathers = self.gathers()
        peers = max([(constant_int(op.operands[1]) or 2) - 1 for ops in gathers.values() for op in ops
                     if str_attr(op, ROLE_ATTR) == "ag.pull_loop"] + [1])
        if self.o.pull == "ring" or not self.o.streams:
            pull_streams = 1
        elif self.o.copy_streams is not None:
            pull_streams = min(self.o.copy_streams, peers)
        else:  # point-to-point links: one stream per peer, so every link moves data at once
            pull_streams = peers if self._topology() == "mesh" else 1
        for ops in gathers.values():
            for loop in ops:
                if str_attr(loop, ROLE_ATTR) == "ag.pull_loop" and PULL_ATTR not in loop.attributes:
                    loop.attributes[PULL_ATTR] = ir.StringAttr.get("direct")
            if self.o.pull == "ring":
                self.ring(ops)
            else:
                self.pull_into_destinations(ops)
                if pull_streams > 1:
                    self.split_pulls(ops)
        self.tile_orders()
        if self.o.engine:
            self.engines(self.o.engine)
        if self.o.comm_sms is not None:
            self.partition(self.o.comm_sms)
        self.assign_streams(pull_streams)


def _next_op(op: ir.Operation) -> ir.OpView | None:
    """The op after op in its block, or None."""
    found = False
    for sibling in op.block.operations:
        if found:
            return sibling
        if sibling.operation == op:
            found = True
    return None


def _template_check(rec):
    from ..kernels import get_template
    return getattr(get_template(rec["template"]), "check", None)


def _remove_unused_declarations(module: ir.Module) -> None:
    used = set()
    for op in walk_ops(module.operation):
        ln = device.Launch.match(op)
        if ln is not None:
            used.add(ln.kernel)
        if "ditron.copy_kernel" in op.attributes:
            used.add(ir.FlatSymbolRefAttr(op.attributes["ditron.copy_kernel"]).value)
    for op in list(module.body.operations):
        op = op.operation
        if op.name == "func.func" and KERNEL_ATTR in op.attributes and len(op.regions[0].blocks) == 0:
            if ir.StringAttr(op.attributes["sym_name"]).value not in used:
                op.erase()


@dataclass(frozen=True)
class ScheduleOverlapPass(Pass):
    name = "ditron-schedule-overlap"
    summary = "Streams per lane, rank-rotated tile order, ring or direct pull, SM split of device programs"

    pull: str = option("direct", "copy order of all-gathers: direct (from each owner) or ring (from rank+1)")
    copy_streams: int | None = option(None, "streams for direct pulls, one per peer distance up to this many "
                                            "(default: 1 on switched links, one per peer on point-to-point links)")
    tile_order: str = option("auto", "GEMM tile order: auto (rank_rotated where data arrives by rank), "
                                     "row_major, grouped or rank_rotated")
    comm_sms: int | None = option(None, "SMs for reduction kernels and SM copies beside a GEMM (default: keep "
                                        "ditron-tile's split)")
    streams: bool = option(True, "map lanes to streams (false: everything on stream 0, a serial schedule)")
    engine: str = option("", "engine of every chunk copy: copy_engine or sm (default: keep ditron-tile's choice)")

    def __post_init__(self):
        if self.pull not in ("direct", "ring"):
            raise ValueError(f"pull must be direct or ring, got '{self.pull}'")
        if self.tile_order not in TILE_ORDERS:
            raise ValueError(f"tile-order must be one of {', '.join(TILE_ORDERS)}, got '{self.tile_order}'")
        if self.copy_streams is not None and self.copy_streams < 1:
            raise ValueError(f"copy-streams must be >= 1, got {self.copy_streams}")
        if self.engine and self.engine not in ("copy_engine", "sm"):
            raise ValueError(f"engine must be copy_engine or sm, got '{self.engine}'")

    def run(self, module: ir.Module) -> None:
        device_funcs = require_device_level(module, self.name, "run ditron-lower-task-to-device before "
                                                               "ditron-schedule-overlap")
        kernels = KernelTable(module)
        for fn in device_funcs:
            ops = list(walk_ops(fn))
            if any("stream" in op.attributes for op in ops) and not any(LANE_ATTR in op.attributes for op in ops):
                continue  # streams written by hand and no lane to map onto them: nothing to schedule
            _Scheduler(self, module, fn, kernels).run()
        _remove_unused_declarations(module)
