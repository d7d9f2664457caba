"""The entities of the simulated world: the host program of a rank, a stream, a resident kernel program (CTA).

* ``HostEntity`` runs the rank's host program call after call (epoch 1, 2, ...); each step runs host ops up to
  the next device op and enqueues it (a release: the stream that runs the item acquires the host's clock).
* ``StreamEntity`` runs its queue in order: copies, signals (release), waits (acquire), barriers, launches (the
  stream waits for every program of the launch, then acquires all of them).
* ``ProgramEntity`` is one resident program of a launch: tile after tile, it waits (acquire), reads, computes,
  writes and notifies (release), as the kernel template's ``tiles()`` described.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ..kernels import Region, notify_effects
from .interpreter import HostInterpreter, Item
from .kernels import LaunchPlan, plan_launch
from .memory import Buffer, empty_clock, join, round_to
from .report import INVALID, Loc, SimulationError
from .scheduler import Blocked, Entity, World


def new_world(program, **options) -> World:
    """A World (scheduler.World's options) with one host entity per rank, each runnable."""
    world = World(program, **options)
    world.hosts = [HostEntity(world, r) for r in range(world.W)]
    for h in world.hosts:
        world.wake(h)
    return world


def stream_of(world: World, rank: int, index: int) -> "StreamEntity":
    """Stream ``index`` of ``rank`` (created at its first use)."""
    s = world.streams.get((rank, index))
    if s is None:
        s = world.streams[(rank, index)] = StreamEntity(world, rank, index)
    return s


class HostEntity(Entity):
    kind = "host"

    def __init__(self, world: World, rank: int):
        super().__init__(world, rank, f"rank {rank} host")
        self.interp = HostInterpreter(world.program, world.groups.local(rank), world.groups.size(rank))
        self.call = 0
        self.gen = None
        self.at_boundary = False
        self.streams_used: set[int] = set()

    def start_call(self) -> None:
        w, prog = self.world, self.world.program
        inputs = w.inputs_per_call[self.call - 1][self.rank]
        k = 0
        for spec in prog.args:
            if spec.io == "epoch":
                continue
            if spec.io == "in":
                x = inputs[k]
                k += 1
                buf = Buffer(f"input argument {spec.index}", self.rank, np.shape(x), spec.type.elem,
                             symmetric=False, kind="in", init=x)  # rounded to the element type already (_prepare)
                box = ((0,) * max(buf.data.ndim, 1), buf.shape or (1,))
                w.write(self, buf, box, prog.loc, self.call, f"the inputs of call {self.call}")
            else:
                if any(s < 0 for s in spec.type.shape):
                    raise SimulationError.at(prog.loc, f"output argument {spec.index} of @{prog.name} has a dynamic "
                                                       f"shape ({spec.type}); the simulator needs static output shapes")
                buf = Buffer(f"output argument {spec.index}", self.rank, spec.type.shape, spec.type.elem,
                             symmetric=False, kind="out")
            w.memory[(("arg", spec.index), self.rank, self.call)] = buf

    def step(self) -> None:
        w = self.world
        if self.gen is None:
            self.call += 1
            if self.call > w.calls:
                w.finish(self)
                for s in self.streams_used:
                    stream = stream_of(w, self.rank, s)
                    if stream.waiting_for == "work":
                        w.wake(stream)
                return
            self.start_call()
            self.gen = self.interp.run(self.call, 1 if w.graph else None)
        try:
            item = next(self.gen)
        except StopIteration:
            self.gen = None
            if w.sync_between_calls and self.call < w.calls:
                self.at_boundary = True
                w.block(self, Blocked(w.program.loc, lambda: f"waits at the end of call {self.call} for every "
                                      f"rank to finish it (sync_between_calls)"))
            return
        item.clock = self.release()
        self.streams_used.add(item.stream)
        stream = stream_of(w, self.rank, item.stream)
        stream.queue.append(item)
        if stream.blocked is None or stream.waiting_for == "work":
            w.wake(stream)


class StreamEntity(Entity):
    kind = "stream"

    def __init__(self, world: World, rank: int, index: int):
        super().__init__(world, rank, f"rank {rank} stream {index}")
        self.index = index
        self.queue: deque[Item] = deque()
        self.waiting_for = ""

    @property
    def call(self) -> int | None:
        return self.queue[0].call if self.queue else None

    def step(self) -> None:
        w = self.world
        if not self.queue:
            if w.hosts[self.rank].done:
                w.finish(self)
            else:
                self.waiting_for = "work"
                w.block(self, Blocked(w.program.loc, lambda: "is idle, waiting for work"))
            return
        item = self.queue[0]
        if item.clock is not None:
            self.acquire(item.clock)
            item.clock = None
        self.waiting_for = ""
        done = getattr(self, f"_{item.kind}")(item)
        if done:
            self.queue.popleft()

    # Each handler returns True when the item is complete (False: it blocked, or must run again).

    def _copy(self, item: Item) -> bool:
        w, a, loc, call = self.world, item.args, item.loc, item.call
        if a["engine"] == "sm" and w.sm_free[self.rank] <= 0:
            w.sm_waiters[self.rank].append(self)
            self.waiting_for = "sm"
            w.block(self, Blocked(loc, lambda: "waits for a free SM to run an SM copy (every SM is taken)"))
            return False
        what = f"copy ({a['engine']})"
        src_rank, dst_rank = w.peer(a["src_rank"], loc, self, call, what), w.peer(a["dst_rank"], loc, self, call, what)
        if src_rank is None or dst_rank is None:
            return True
        src = w.buffer(a["src"], src_rank, call, loc, self)
        dst = w.buffer(a["dst"], dst_rank, call, loc, self)
        if src is None or dst is None:
            return True
        sbox = w.region(src, a["src_off"], a["sizes"], loc, self, call, f"{what} source")
        dbox = w.region(dst, a["dst_off"], a["sizes"], loc, self, call, f"{what} destination")
        if sbox is None or dbox is None:
            return True
        w.read(self, src, sbox, loc, call, what)
        dst.writable()[dst.index(*dbox)] = src.data[src.index(*sbox)]
        w.write(self, dst, dbox, loc, call, what)
        return True

    def _signal(self, item: Item) -> bool:
        w, a, loc, call = self.world, item.args, item.loc, item.call
        target = w.peer(a["target"], loc, self, call, "signal")
        if target is None:
            return True
        pad = w.pad(a["pad"], target, call, loc, self)
        if pad is None or not w.valid_slot(pad, a["slot"], loc, self, call):
            return True
        if a["scope"] == "gpu" and target != self.rank:
            w.report(INVALID, f"{self.label} signals rank {target} with scope 'gpu'; a signal to another "
                     f"rank needs scope 'sys' to order the writes before it", loc, self.rank, call)
        w.signal(self, pad, a["slot"], a["op"], a["value"], self.release())
        return True

    def _wait(self, item: Item) -> bool:
        w, a, loc, call = self.world, item.args, item.loc, item.call
        pad = w.pad(a["pad"], self.rank, call, loc, self)
        if pad is None:
            return True
        slots = [s for s in a["slots"] if w.valid_slot(pad, s, loc, self, call)]
        return w.try_acquire(self, [(pad, s, a["value"]) for s in slots], loc, f"wait (call {call})")

    def _barrier(self, item: Item) -> bool:
        """Every rank of the group arrives and waits for all others, through slot 0 of the pad: arriving adds 1 to
        slot 0 on every member (release); the rank then waits until its own slot 0 >= W x (the number of barriers
        it has passed on this pad, this one included) (acquire), W the group's size. Counts accumulate across
        calls: no reset is needed."""
        w, a, loc, call = self.world, item.args, item.loc, item.call
        pad = w.pad(a["pad"], self.rank, call, loc, self)
        if pad is None or not w.valid_slot(pad, 0, loc, self, call):
            return True
        if "_arrival" not in a:
            key = (a["pad"], self.rank)
            a["_arrival"] = w.barrier_counts[key] = w.barrier_counts.get(key, 0) + 1
            snap = self.release()
            for q in w.groups.members[self.rank]:
                peer = w.pad(a["pad"], q, call, loc, self)
                if peer is not None:
                    w.signal(self, peer, 0, "add", 1, snap)
        n = a["_arrival"]
        return w.try_acquire(self, [(pad, 0, n * w.groups.size(self.rank))], loc, f"barrier #{n} (call {call})")

    def _launch(self, item: Item) -> bool:
        w, a, loc = self.world, item.args, item.loc
        launch = a.get("_launch")
        if launch is None:
            kinfo = w.program.kernels[a["kernel"]]
            if kinfo.jit is not None:  # a user @ditron.jit kernel: its Python body runs (sim.jit)
                from .jit import plan_jit_launch
                plan = plan_jit_launch(w, kinfo, a["operands"], grid=a["grid"], loc=loc)
            else:
                plan = plan_launch(kinfo, a["operands"], grid=a["grid"], rank=w.groups.local(self.rank),
                                   num_ranks=w.groups.size(self.rank), loc=loc,
                                   templates=w.templates)
            if kinfo.jit is None and len(plan.programs) != plan.grid_size:
                w.report(INVALID, f"launch of @{plan.kernel} has a grid of {plan.grid_size} program(s) but its "
                         f"template '{plan.template}' describes {len(plan.programs)}", loc, self.rank, item.call)
            launch = a["_launch"] = Launch(self, item, plan, self.release())
            w.sm_launches[self.rank].append(launch)
            w.start_programs(self.rank)
        if launch.finished < launch.total:
            self.waiting_for = "launch"
            w.block(self, Blocked(loc, launch.describe))
            return False
        self.acquire(launch.end_clock)
        return True


class Launch:
    """One launch on one rank: programs not yet started, resident ones, and the clocks of finished ones."""

    def __init__(self, stream: StreamEntity, item: Item, plan: LaunchPlan, clock: np.ndarray):
        self.stream = stream
        self.item = item
        self.plan = plan
        self.clock = clock
        self.budget = item.args["sm_budget"]
        self.total = plan.grid_size
        self.next = 0
        self.resident = 0
        self.finished = 0
        self.end_clock = empty_clock()   # the join of the finished programs' clocks
        self.blocked_programs: list["ProgramEntity"] = []

    @property
    def pending(self) -> bool:
        return self.next < self.total

    def start_next(self) -> None:
        world = self.stream.world
        p = self.next
        self.next += 1
        self.resident += 1
        make = getattr(self.plan, "program", None)  # a @ditron.jit launch makes its own programs (sim.jit)
        if make is not None:
            world.wake(make(world, self, p))
            return
        tiles = self.plan.programs[p] if p < len(self.plan.programs) else []
        world.wake(ProgramEntity(world, self, p, tiles))

    def program_done(self, entity: "ProgramEntity") -> None:
        world = self.stream.world
        self.resident -= 1
        self.finished += 1
        self.end_clock = join(self.end_clock, entity.clock)
        entity.clock = empty_clock()  # a finished program's clock lives on in end_clock (memory: O(entities^2))
        if self.finished == self.total:
            world.wake(self.stream)
        world.free_sm(self.stream.rank)

    def describe(self) -> str:
        running = self.resident
        waiting = self.total - self.next
        text = (f"waits for the launch of @{self.plan.kernel} to finish ({self.finished}/{self.total} programs "
                f"done, {running} running")
        if waiting:
            rank = self.stream.rank
            why = f"sm_budget {self.budget} reached" if running >= self.budget else \
                f"every SM of rank {rank} is held by running programs"
            text += f", {waiting} waiting for an SM: {why}"
        return text + ")"


class ProgramEntity(Entity):
    """One program (CTA) of a launch, resident on an SM."""

    kind = "program"

    def __init__(self, world: World, launch: Launch, index: int, tiles):
        rank = launch.stream.rank
        super().__init__(world, rank, f"rank {rank} @{launch.plan.kernel} program {index}", launch.clock)
        self.launch = launch
        self.index = index
        self.tiles = list(tiles)  # a step with expand is replaced in place
        self.t = 0
        self.call = launch.item.call
        self.loc: Loc = launch.item.loc
        self.group = None

    def step(self) -> None:
        w, launch = self.world, self.launch
        if self.t >= len(self.tiles):
            w.finish(self)
            launch.program_done(self)
            return
        tile = self.tiles[self.t]
        what = f"tile {self.t} of @{launch.plan.kernel} program {self.index} ({launch.plan.template})"
        waits = []
        for sw in tile.waits:
            pad = self._pad(sw.arg, sw.rank)
            if pad is not None and w.valid_slot(pad, sw.slot, self.loc, self, self.call):
                waits.append((pad, sw.slot, sw.value))
        if not w.try_acquire(self, waits, self.loc, what):
            self.group = (self.rank, id(launch), self.blocked.pad if self.blocked else None)
            return
        self.group = None
        regions = []
        ok = True
        for kind, regs in (("read", tile.reads), ("write", tile.writes)):
            for reg in regs:
                buf = self._buffer(reg)
                box = None if buf is None else w.region(buf, reg.offsets, reg.sizes, self.loc, self, self.call,
                                                        f"{what} {kind} of '{reg.arg}'")
                if box is None:
                    ok = False
                    continue
                regions.append((kind, reg, buf, box))
        for kind, reg, buf, box in regions:
            if kind == "read":
                w.read(self, buf, box, self.loc, self.call, what)
        if tile.expand is not None:  # data-dependent tiles: the values just read say what the program does next
            if ok:
                self.tiles[self.t:self.t + 1] = self._run(tile.expand, regions, what)
            else:
                self.t += 1
            return
        if ok and tile.compute is not None:
            self._compute(tile, regions, what)
        for kind, reg, buf, box in regions:
            if kind == "write":
                round_to(buf.elem, buf.writable()[buf.index(*box)])
                w.write(self, buf, box, self.loc, self.call, what)
        if tile.notifies:
            snap = self.release()
            for n in tile.notifies:
                pad = self._pad(n.arg, n.rank)
                if pad is not None and w.valid_slot(pad, n.slot, self.loc, self, self.call):
                    for slot, op, value in notify_effects(n, pad.values[n.slot]):
                        if slot == n.slot or w.valid_slot(pad, slot, self.loc, self, self.call):
                            w.signal(self, pad, slot, op, value, snap)
        self.t += 1

    def _key(self, arg: str):
        key = self.launch.plan.buffers.get(arg)
        if key is None:
            raise SimulationError.at(
                self.loc, f"template '{self.launch.plan.template}' of @{self.launch.plan.kernel} names argument "
                f"'{arg}', which is not a buffer argument of the launch "
                f"({', '.join(self.launch.plan.buffers) or 'none'})")
        return key

    def _target(self, rank: int | None) -> int | None:
        """The rank a region or slot of the template lives on (None: this one; else a member of the group)."""
        return self.rank if rank is None else self.world.peer(rank, self.loc, self, self.call,
                                                              f"@{self.launch.plan.kernel}")

    def _pad(self, arg: str, rank: int | None):
        r = self._target(rank)
        return None if r is None else self.world.pad(self._key(arg), r, self.call, self.loc, self)

    def _buffer(self, reg: Region) -> Buffer | None:
        r = self._target(reg.rank)
        return None if r is None else self.world.buffer(self._key(reg.arg), r, self.call, self.loc, self)

    def _compute(self, tile, regions, what: str) -> None:
        """Run the tile's compute on views of its declared regions: written regions are writable, regions it only
        reads are read-only (a template writing where it did not declare a write is a template bug)."""
        self._run(tile.compute, regions, what)

    def _run(self, fn, regions, what: str):
        """fn(view) on views of the declared regions (see _compute); returns what fn returns."""
        declared: dict[tuple[str, int], list] = {}
        me = self.world.groups.local(self.rank)  # regions name ranks of the group
        for kind, reg, buf, box in sorted(regions, key=lambda x: x[0] != "write"):
            declared.setdefault((reg.arg, me if reg.rank is None else reg.rank), []).append((kind, buf, box))
        # the declared regions themselves (the usual case) resolve at once to what the search below finds for
        # them: a written region's view, or a read-only view where no write of that argument and rank is declared
        direct: dict[int, tuple] = {}
        for kind, reg, buf, box in regions:
            found = declared[(reg.arg, me if reg.rank is None else reg.rank)]
            if (kind == "write" or found[0][0] == "read") and id(reg) not in direct:
                direct[id(reg)] = (reg, kind, buf, box)
        template = self.launch.plan.template

        def view(region: Region) -> np.ndarray:
            hit = direct.get(id(region))
            if hit is not None and hit[0] is region:
                _, kind, buf, (lo, hi) = hit
                v = (buf.data if kind == "read" else buf.writable())[buf.index(lo, hi)]
                if kind == "read":
                    v = v.view()
                    v.flags.writeable = False
                return v
            rank = me if region.rank is None else region.rank
            off = tuple(int(o) for o in region.offsets)
            end = tuple(o + int(z) for o, z in zip(off, region.sizes))
            for kind, buf, (lo, hi) in declared.get((region.arg, rank), ()):
                if len(off) == len(lo) and all(a >= b for a, b in zip(off, lo)) and \
                        all(a <= b for a, b in zip(end, hi)):
                    v = (buf.data if kind == "read" else buf.writable())[buf.index(off, end)]
                    if kind == "read":
                        v = v.view()
                        v.flags.writeable = False
                    return v
            raise SimulationError.at(
                self.loc, f"template '{template}': {what} computes on '{region.arg}' at offsets "
                f"{list(region.offsets)} sizes {list(region.sizes)}, a region its reads and writes do not declare")

        try:
            return fn(view)
        except ValueError as err:
            if "read-only" not in str(err):
                raise
            raise SimulationError.at(self.loc, f"template '{template}': {what} writes into a region it declares "
                                               f"only as a read") from None
