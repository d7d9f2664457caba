"""The simulated world: W ranks of entities (a host program per rank, one entity per stream per rank, one per
resident kernel program), a seeded interleaving of them, and the checks every memory access goes through.

Scheduling: at each step one runnable entity is chosen by a ``random.Random(seed)``; it performs one action (a
host op that enqueues, a stream item, a kernel tile) or blocks (on a signal slot, an empty stream, a running
launch, a free SM). Blocked entities are woken by the event they wait for, so a step costs O(1) beyond its own
work. Each seed also draws how "sticky" the schedule is (the chance to keep running the same entity) and how slow
each rank is, so that seeds explore both fine interleavings and ranks running far ahead of each other. When no
entity can run and some have not finished, that is a deadlock, reported with what each one waits for.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from .memory import (CLOCK, Access, Buffer, Pad, check_and_record_write, check_read, empty_clock, join,
                     record_read)
from ..kernels.numerics import products
from .groups import groups_of
from .products import Products
from .program import Program
from .report import (DEADLOCK, INVALID, OUT_OF_BOUNDS, RACE_READ, RACE_WAR, RACE_WRITE, UNINITIALIZED, Finding,
                     Findings, Loc, SimulationError, describe_region)


@dataclass
class Blocked:
    """Why an entity cannot run: where, and a description computed when reported (values change)."""

    loc: Loc
    describe: Callable[[], str]
    on_signal: bool = False
    pad: tuple | None = None          # (pad label, its rank) for a wait on a signal


class Entity:
    """Something that runs in program order: has a vector clock, blocks and is woken."""

    kind = "entity"

    def __init__(self, world: "World", rank: int, label: str, clock: np.ndarray | None = None):
        self.world = world
        self.id = len(world.entities)
        world.entities.append(self)
        self.rank = rank
        self.label = label
        n = self.id + 1 if clock is None else max(len(clock), self.id + 1)
        self.clock = np.zeros(n, dtype=CLOCK)
        if clock is not None:
            self.clock[: len(clock)] = clock
        self.clock[self.id] = 1
        self.done = False
        self.blocked: Blocked | None = None
        self._rpos: int | None = None

    @property
    def stamp(self) -> int:
        return int(self.clock[self.id])

    def release(self) -> np.ndarray:
        """Publish what this entity has done so far; later accesses get a newer stamp."""
        snap = self.clock.copy()
        self.clock[self.id] += 1
        return snap

    def acquire(self, clock: np.ndarray) -> None:
        if len(clock):
            self.clock = join(self.clock, clock)

    def step(self) -> None:
        raise NotImplementedError

    def access(self, loc: Loc, call: int, what: str) -> Access:
        return Access(self.id, self.label, loc, call, what)


class World:
    def __init__(self, program: Program, *, world_size: int, calls: int, inputs_per_call, seed: int,
                 templates: Mapping[str, Any] | None = None, num_sms: int | None = None,
                 sync_between_calls: bool = False, graph: bool = False, sample=None):
        self.program = program
        self.allocs = program.allocs_by_index
        self.W = world_size
        self.groups = groups_of(program, world_size)
        self.calls = calls
        self.inputs_per_call = inputs_per_call
        self.templates = templates
        self.sync_between_calls = sync_between_calls
        self.graph = graph
        self.rng = random.Random(seed)
        self.stick = self.rng.choice((0.0, 0.5, 0.9))
        self.slow = [self.rng.choice((0.0, 0.0, 0.5, 0.9)) for _ in range(world_size)]
        self.findings = Findings()
        self.entities: list[Entity] = []
        self.runnable: list[Entity] = []
        self.last: Entity | None = None
        self.memory: dict[tuple, Buffer | Pad] = {}
        # the GEMM tiles' products, batched per row block (with sample: at its rows only)
        # (sampled, a block is every row of A: its few sampled rows make a product BLAS runs at speed)
        self.products = Products(self.memory.values(), sample=sample,
                                 **({} if sample is None else {"rows": 1 << 62}))
        self.streams: dict[tuple[int, int], Entity] = {}
        self.sm_free = [num_sms if num_sms is not None else 1 << 62 for _ in range(world_size)]
        self.sm_launches: list[deque] = [deque() for _ in range(world_size)]   # launches with programs to start
        self.sm_waiters: list[list[Entity]] = [[] for _ in range(world_size)]  # streams waiting for an SM
        self.barrier_counts: dict[tuple, int] = {}
        self.steps = 0
        self.schedule: list[int] = []     # the entity run at each step (for schedule_digest)
        self.deadlocked = False
        self.hosts: list[Entity] = []   # one host program per rank: entities.new_world creates them

    # ------------------------------------------------------------------------------------------ scheduling

    def wake(self, e: Entity) -> None:
        if e.done or e._rpos is not None:
            return
        e.blocked = None
        e._rpos = len(self.runnable)
        self.runnable.append(e)

    def _unlist(self, e: Entity) -> None:
        i = e._rpos
        if i is None:
            return
        last = self.runnable.pop()
        if last is not e:
            self.runnable[i] = last
            last._rpos = i
        e._rpos = None

    def block(self, e: Entity, why: Blocked) -> None:
        self._unlist(e)
        e.blocked = why

    def finish(self, e: Entity) -> None:
        self._unlist(e)
        e.done = True
        e.blocked = None

    def pick(self) -> Entity:
        if self.last is not None and self.last._rpos is not None and self.stick and self.rng.random() < self.stick:
            return self.last
        n = len(self.runnable)
        e = self.runnable[self.rng.randrange(n)]
        for _ in range(3):
            if not self.slow[e.rank] or self.rng.random() >= self.slow[e.rank]:
                break
            e = self.runnable[self.rng.randrange(n)]
        return e

    def run(self) -> None:
        with products(self.products):
            self._run()
        self.products.clear()

    def _run(self) -> None:
        while True:
            while self.runnable:
                e = self.pick()
                self.last = e
                self.schedule.append(e.id)
                e.step()
                self.steps += 1
            if all(e.done for e in self.entities):
                return
            if self.sync_between_calls and self._release_call_boundary():
                continue
            self.deadlocked = True
            self._report_deadlock()
            return

    def _release_call_boundary(self) -> bool:
        """With sync_between_calls: once every rank has finished its call and every stream is drained, all
        hosts synchronise with everything (as a device synchronize plus a barrier would) and go on."""
        waiting = [h for h in self.hosts if not h.done and h.at_boundary]
        if not waiting:
            return False
        live = [e for e in self.entities if not e.done]
        if any(e not in waiting and e.kind != "stream" for e in live) or \
                any(e.kind == "stream" and e.queue for e in live):
            return False
        everything = empty_clock()
        for e in self.entities:
            everything = join(everything, e.clock)
        for h in waiting:
            h.acquire(everything)
            h.at_boundary = False
            self.wake(h)
        return True

    # ------------------------------------------------------------------------------------------------ SMs

    def start_programs(self, rank: int) -> None:
        """Give free SMs of rank to launches waiting for them (first launched, first served)."""
        queue = self.sm_launches[rank]
        for launch in list(queue):
            while launch.pending and launch.resident < launch.budget and self.sm_free[rank] > 0:
                self.sm_free[rank] -= 1
                launch.start_next()
            if not launch.pending:
                queue.remove(launch)
        if self.sm_free[rank] > 0 and self.sm_waiters[rank]:
            waiters, self.sm_waiters[rank] = self.sm_waiters[rank], []
            for s in waiters:
                self.wake(s)

    def free_sm(self, rank: int) -> None:
        self.sm_free[rank] += 1
        self.start_programs(rank)

    # ------------------------------------------------------------------------------------------------ memory

    def report(self, kind: str, message: str, loc: Loc, rank: int | None, call: int | None, *,
               region: str | None = None, notes=(), key: tuple | None = None) -> None:
        self.findings.add(Finding(kind, message, loc, rank, call, region, list(notes)), key)

    def peer(self, r: int, loc: Loc, e: Entity, call: int, what: str) -> int | None:
        """The rank that rank r of e's group is (device ops and kernels name ranks within the group of the
        program's axis, sim.groups), or None, with an out-of-bounds finding, if the group has no rank r."""
        g = self.groups.peer(e.rank, r)
        if g is None:
            self.report(OUT_OF_BOUNDS, f"{e.label}: {what} names rank {r}, outside {self.groups.scope()} of "
                        f"{self.groups.size(e.rank)} rank(s)", loc, e.rank, call)
        return g

    def buffer(self, key: tuple, rank: int, call: int, loc: Loc, e: Entity) -> Buffer | None:
        """The data buffer ``key`` on ``rank`` as entity e sees it (None, with a finding, if it cannot)."""
        if key[0] == "arg":
            buf = self.memory.get((key, rank, call))
            if buf is None or rank != e.rank:
                self.report(INVALID, f"{e.label} accesses argument {key[1]} of rank {rank}; function arguments "
                            f"are local to their rank, only symmetric buffers (alloc_symmetric) are reachable "
                            f"from peers", loc, e.rank, call)
                return None
            return buf
        spec = self.allocs[key[1]]
        where = (key, rank, call & 1) if spec.rotate else (key, rank)  # a rotating buffer: one copy per parity
        obj = self.memory.get(where)
        if obj is None:
            label = f"'{spec.name}'" + (f" (copy {call & 1})" if spec.rotate else "")
            obj = self.memory[where] = Buffer(label, rank, spec.type.shape, spec.type.elem, symmetric=True,
                                              kind="symmetric")
        if isinstance(obj, Pad):
            self.report(INVALID, f"{e.label} uses signal pad {obj.name()} as data", loc, e.rank, call)
            return None
        return obj

    def pad(self, key: tuple, rank: int, call: int, loc: Loc, e: Entity) -> Pad | None:
        if key[0] == "arg":
            self.report(INVALID, f"{e.label} uses argument {key[1]} as a signal pad; signal pads are symmetric "
                        f"buffers (alloc_symmetric), so that peers can signal them", loc, e.rank, call)
            return None
        spec = self.allocs[key[1]]
        # graph replays: a pad per parity, as the runtime's CUDA graphs hold them, and nothing zeroes them
        where = (key, rank, call & 1) if self.graph else (key, rank)
        obj = self.memory.get(where)
        if obj is None:
            shape, elem = spec.type.shape, spec.type.elem
            if len(shape) != 1 or not elem.startswith("i"):
                self.report(INVALID, f"{e.label} uses '{spec.name}' ({'x'.join(map(str, shape))}x{elem}) as a "
                            f"signal pad; pads are 1-d i32/i64 buffers", loc, e.rank, call)
                return None
            if self.graph and not spec.consumed:
                self.report(INVALID, f"{e.label} uses signal pad '{spec.name}', which is not consumed "
                            f"(ditron.consumed): CUDA graphs zero such pads between calls, which graph=True does "
                            f"not model", loc, e.rank, call)
                return None
            obj = self.memory[where] = Pad(f"'{spec.name}'" + (f" (copy {call & 1})" if self.graph else ""), rank,
                                           shape[0])
        if isinstance(obj, Buffer):
            self.report(INVALID, f"{e.label} uses data buffer {obj.name()} as a signal pad", loc, e.rank, call)
            return None
        return obj

    def region(self, buf: Buffer, offsets, sizes, loc: Loc, e: Entity, call: int, what: str):
        """(lo, hi) of a region of buf, or None (with an out-of-bounds finding)."""
        box = buf.box(offsets, sizes)
        if box is None:
            self.report(OUT_OF_BOUNDS, f"{e.label}: {what} accesses {buf.name()} at offsets {list(offsets)} "
                        f"sizes {list(sizes)}, outside its shape {list(buf.shape)}", loc, e.rank, call,
                        key=(e.rank, loc, buf.label, tuple(offsets), tuple(sizes)))
        return box

    def read(self, e: Entity, buf: Buffer, box, loc: Loc, call: int, what: str) -> None:
        lo, hi = box
        if any(b <= a for a, b in zip(lo, hi)):
            return
        for race in check_read(buf, lo, hi, e.clock, e.id):
            self._race(RACE_READ, e, buf, race, loc, call, what)
        written = buf.written[buf.index(lo, hi)] if buf.unwritten else None
        if written is not None and not written.all():
            missing = np.argwhere(~written)
            mlo, mhi = np.add(lo, missing.min(axis=0)), np.add(lo, missing.max(axis=0) + 1)
            region = describe_region(buf.name(), mlo, mhi)
            self.report(UNINITIALIZED, f"{e.label}: {what} reads {region}, which nothing wrote before "
                        f"({int((~written).sum())} element(s))", loc, e.rank, call, region=region,
                        key=(e.rank, loc, buf.label))
        record_read(buf, lo, hi, e.id, e.stamp, e.access(loc, call, what))

    def write(self, e: Entity, buf: Buffer, box, loc: Loc, call: int, what: str) -> None:
        lo, hi = box
        if any(b <= a for a, b in zip(lo, hi)):
            return
        buf.changed(lo, hi)
        for race in check_and_record_write(buf, lo, hi, e.clock, e.id, e.stamp, e.access(loc, call, what)):
            kind = RACE_WRITE if race.kind == "write" else RACE_WAR
            self._race(kind, e, buf, race, loc, call, what)

    def _race(self, kind: str, e: Entity, buf: Buffer, race, loc: Loc, call: int, what: str) -> None:
        other = race.other
        region = describe_region(buf.name(), race.lo, race.hi)
        by = f"{other.who} ({other.what}, call {other.call})"
        if kind == RACE_READ:
            msg = (f"{e.label}: {what} reads {region} written by {by} without happens-before: it observed no "
                   f"signal released after that write (missing or too-weak wait)")
            note = "the unordered write"
        elif kind == RACE_WRITE:
            msg = f"{e.label}: {what} writes {region}, also written by {by}, with no order between the two writes"
            note = "the other write"
        else:
            msg = (f"{e.label}: {what} overwrites {region} while {by} may still be reading it: no signal orders "
                   f"that read before this write (buffer reused without waiting?)")
            note = "the unordered read"
        self.report(kind, msg, loc, e.rank, call, region=region,
                    notes=[other.loc.diagnostic(f"{note}: {other.who}, {other.what}", "note")],
                    key=(e.rank, loc, other.loc, buf.label))

    # -------------------------------------------------------------------------------------------- signals

    def signal(self, e: Entity, pad: Pad, slot: int, op: str, value: int, clock: np.ndarray) -> None:
        pad.apply(slot, op, value, clock, e.id)
        waiters = pad.waiters.pop(slot, None)
        if waiters:
            for w in waiters:
                self.wake(w)

    def valid_slot(self, pad: Pad, slot: int, loc: Loc, e: Entity, call: int) -> bool:
        if 0 <= slot < pad.nslots:
            return True
        self.report(OUT_OF_BOUNDS, f"{e.label} uses slot {slot} of signal pad {pad.name()}, which has "
                    f"{pad.nslots} slots", loc, e.rank, call)
        return False

    def try_acquire(self, e: Entity, waits: list[tuple[Pad, int, int]], loc: Loc, what: str) -> bool:
        """Acquire every (pad, slot, value) once all are satisfied; else block e on the first unsatisfied one."""
        clocks = []
        for pad, slot, value in waits:
            c = pad.acquire(slot, value, e.clock)
            if c is None:
                pad.waiters.setdefault(slot, []).append(e)
                self.block(e, Blocked(loc, lambda p=pad, s=slot, v=value: (
                    f"{what} waits for {p.name()} slot {s} >= {v} (now {p.values[s]})"), on_signal=True,
                    pad=(pad.label, pad.rank)))
                return False
            clocks.append(c)
        for c in clocks:
            e.acquire(c)
        return True

    # ------------------------------------------------------------------------------------------- deadlock

    def _report_deadlock(self) -> None:
        stuck = [e for e in self.entities if not e.done and e.blocked is not None]
        if not stuck:
            self.report(DEADLOCK, "nothing can run, yet the program has not finished", self.program.loc, None, None)
            return
        # The earliest call first: the root of a deadlock is usually the oldest wait.
        stuck.sort(key=lambda e: (getattr(e, "call", None) or 0, e.rank, e.kind != "stream", e.id))
        primary = next((e for e in stuck if e.blocked.on_signal), stuck[0])
        # Programs of one launch blocked on the same pad are described once, with a count.
        groups: dict[tuple, list] = {}
        shown = []
        for e in sorted(stuck, key=lambda e: (e.rank, e.id)):
            g = getattr(e, "group", None)
            if g is not None and g in groups:
                groups[g][1] += 1
                continue
            if g is not None:
                groups[g] = [e, 1]
            shown.append(e)
        by_rank: dict[int, list[str]] = {}
        notes = []
        for e in shown:
            text = e.blocked.describe()
            g = getattr(e, "group", None)
            if g is not None and groups[g][1] > 1:
                text += f" (and {groups[g][1] - 1} more program(s) of this launch waiting on that pad)"
            by_rank.setdefault(e.rank, []).append(f"{e.label}: {text}")
            notes.append(e.blocked.loc.diagnostic(f"rank {e.rank}: {e.label}: {text}", "note"))
        per_rank = "; ".join(f"rank {r}: " + ", ".join(texts) for r, texts in sorted(by_rank.items()))
        msg = (f"deadlock: every unfinished entity is blocked. {primary.label}: {primary.blocked.describe()}. "
               f"Blocked: {per_rank}")
        self.report(DEADLOCK, msg, primary.blocked.loc, primary.rank, getattr(primary, "call", None),
                    notes=notes[:64])


def check_call_inputs(program: Program, world_size: int, inputs) -> None:
    """Raise SimulationError unless inputs holds one array per "in" argument per rank, of the right shape."""
    specs = program.inputs
    if len(inputs) != world_size:
        raise SimulationError(f"inputs: expected one entry per rank ({world_size}), got {len(inputs)}")
    for r, per_rank in enumerate(inputs):
        if len(per_rank) != len(specs):
            raise SimulationError(f"inputs of rank {r}: @{program.name} takes {len(specs)} input argument(s) "
                                  f"({', '.join(str(s.index) for s in specs)}), got {len(per_rank)} array(s)")
        for spec, x in zip(specs, per_rank):
            shape = np.shape(x)
            want = spec.type.shape
            if len(shape) != len(want) or any(w not in (-1, s) for w, s in zip(want, shape)):
                want_s = "x".join("?" if w < 0 else str(w) for w in want)
                msg = (f"inputs of rank {r}: argument {spec.index} of @{program.name} is memref<{want_s}x"
                       f"{spec.type.elem}>, got an array of shape {tuple(shape)}")
                raise SimulationError(msg, [program.loc.diagnostic(msg)])
