"""Check a ``@ditron.jit`` kernel on the CPU: W ranks, every program of the grid, Triton's own interpreter.

    result = ditron.language.simulate(kernel, grid, args_per_rank, world=4, reference=ref, seed=0)
    result.ok, result.findings, result.outputs[rank]["out_ptr"], print(result.summary())

How it runs: Triton's interpreter executes the kernel's Python body (numpy); each (rank, program) is an agent, a
thread of which exactly one runs at a time; the scheduler switches agents at every wait that cannot complete yet,
at a seeded share of the others, and at every user atomic, choosing the next agent from ``seed``. Every array argument lives in its rank's *symmetric heap* (one
numpy buffer per rank, each array at the same offset on every rank), so ``dl.symm_at`` is the GPU's address
arithmetic. The primitives act on that memory: ``wait`` blocks its agent until the slots reach the value,
``notify`` writes the peer's slots and wakes its waiters, ``barrier_all`` is the generation barrier of the GPU
lowering.

What it checks (each finding names the rank, the program and the kernel's Python source line):

* deadlock -- no agent can run and some wait can never complete: which rank waits on which slot of which pad, for
  which value, having seen what (a missing notify);
* read-before-signal -- a load of data another agent wrote that no wait orders before it (a missing wait), or that
  a wait orders only in program order while the pointer does not depend on its token (a missing
  ``dl.consume_token``: a compiler may hoist such a load above the spin);
* write-write / write-after-read -- racing stores, or a store racing an earlier load of another agent;
* out-of-bounds -- a load, store or signal outside every array of the heap, a peer outside the world;
* mismatch -- an array differs from the reference the user gave (with the line of the last store to it).

A tensor descriptor's load or store (``tl.make_tensor_descriptor(...).load([...])``) is checked as the masked
access of its block (the descriptor's bounds are the mask); a wait's token orders it when it flows into the
descriptor's base or the block's offsets (``desc.load([dl.consume_token(row0, token), k])``).

Happens-before is tracked with vector clocks: a notify (release) publishes its agent's clock in the slot, a wait
(acquire) takes the clocks of the slots it saw; ``barrier_all`` is a full fence. So a race is reported even when
the interleaving happened to deliver the data in time.
"""
from __future__ import annotations

import bisect
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import Diagnostic
from ..sim.report import (DEADLOCK, MISMATCH, OUT_OF_BOUNDS, RACE_READ, RACE_WAR, RACE_WRITE, Finding, Findings,
                          Loc, SimulationError)
from .args import HEAP_ALIGN, NP_TO_TL, grid3, heap_layout, per_rank_args
from .core import _ACTIVE, active

__all__ = ["simulate", "SimResult", "Finding", "SimulationError", "KINDS"]

KINDS = (DEADLOCK, RACE_READ, RACE_WRITE, RACE_WAR, OUT_OF_BOUNDS, MISMATCH)
MAX_AGENTS = 4096
LOADS_PER_SWITCH = 1024  # a program switches after this many plain loads (a user's spin on tl.load progresses)
MAX_SWITCHES = 100_000   # more switches than this: reported as no progress (a spin that never ends)
SWITCH_RATE = 0.25        # how often a wait that could go on switches agents anyway (the rest of the interleaving)



class _Abort(BaseException):
    """Unwinds an agent's thread when the simulation stops (deadlock, a finding that stops it, an error)."""


# ---------------------------------------------------------------------------------------------------- memory

@dataclass
class _Array:
    rank: int
    name: str
    start: int            # absolute address
    nbytes: int
    dtype: np.dtype
    view: np.ndarray      # the array inside the heap


@dataclass
class _Slot:
    clock: np.ndarray | None = None


@dataclass
class _Shadow:
    writer: int = -1
    epoch: int = 0
    line: Loc | None = None
    reads: dict = field(default_factory=dict)   # agent -> (epoch, loc)


# ---------------------------------------------------------------------------------------------------- result

@dataclass
class SimResult:
    """What ``simulate`` returns. ``outputs[rank][name]``: every array argument after the run."""

    world: int
    grid: tuple[int, int, int]
    seed: int
    findings: list[Finding]
    outputs: list[dict[str, np.ndarray]]
    compared: bool = False

    @property
    def ok(self) -> bool:
        return not self.findings

    def of_kind(self, *kinds: str) -> list[Finding]:
        return [f for f in self.findings if f.kind in kinds]

    def summary(self) -> str:
        head = (f"ditron.language.simulate: W={self.world}, grid={self.grid}, seed={self.seed}: "
                + ("no findings" + (", outputs equal the reference" if self.compared else "") if self.ok else
                   f"{len(self.findings)} finding(s)"))
        return "\n".join([head, *(str(f) for f in self.findings)])


# ------------------------------------------------------------------------------------------------ the world

class _Agent:
    def __init__(self, world: "_World", index: int, rank: int, pid: tuple[int, int, int]):
        self.world, self.index, self.rank, self.pid = world, index, rank, pid
        self.full = np.zeros(world.n_clocks, dtype=np.int64)    # with every acquire
        self.base = np.zeros(world.n_clocks, dtype=np.int64)    # without the waits' (only barriers, own releases)
        self.full[index] = self.base[index] = 1
        # the rank's host wrote its arrays before launching: ordered before this rank's programs only
        self.full[world.host(rank)] = self.base[world.host(rank)] = 1
        self.sem = threading.Semaphore(0)
        self.state = "ready"           # ready | blocked | done
        self.blocked_on: tuple | None = None   # (addresses, value, loc, pad description)
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.loads = 0                 # plain loads since the last switch (a spin on plain loads must yield)
        self.last_loc: Loc | None = None

    @property
    def prog(self) -> str:
        """'program 3' (its program id, as many axes as the grid has)."""
        axes = max(1, max((i + 1 for i, g in enumerate(self.world.grid) if g > 1), default=1))
        return f"program {','.join(map(str, self.pid[:axes]))}"

    @property
    def who(self) -> str:
        return f"rank {self.rank}, {self.prog}"

    # -- switching
    def yield_(self) -> None:
        w = self.world
        w.main.release()
        self.sem.acquire()
        if w.stopping:
            raise _Abort()
        w.resume(self)

    # -- the primitives (called by ditron.language.core on this agent's thread)
    def rank_value(self):
        return self.world.scalar(self.rank, "int32")

    def num_ranks(self):
        return self.world.scalar(self.world.size, "int32")

    def symm_at(self, ptr, peer):
        return self.world.symm_at(self, ptr, peer)

    def wait(self, pad, slot, value, scope, semantic):
        return self.world.wait(self, pad, slot, value, semantic)

    def notify(self, pad, slot, value, peer, op, scope, semantic):
        return self.world.notify(self, pad, slot, value, peer, op, semantic)

    def consume_token(self, x, token):
        return self.world.consume_token(x, token)

    def barrier_all(self, pad, scope):
        return self.world.barrier_all(self, pad)


@dataclass
class _Named:
    who: str


class _World:
    def __init__(self, kernel, grid, args_per_rank, size: int, seed: int, max_switches: int = MAX_SWITCHES):
        import triton.language as tl
        from triton.runtime import interpreter as ti
        self.tl, self.ti = tl, ti
        self.kernel, self.size, self.grid = kernel, size, grid
        self.max_switches = max_switches
        self.rng = np.random.default_rng(seed)
        self.findings = Findings()
        self.main = threading.Semaphore(0)
        self.stopping = False
        self.n_agents = size * grid[0] * grid[1] * grid[2]
        self.n_clocks = self.n_agents + size        # every program, then every rank's host (the inputs' writer)
        if self.n_agents > MAX_AGENTS:
            raise SimulationError(f"simulate: {self.n_agents} programs (world {size} x grid {grid}) is more than "
                                  f"{MAX_AGENTS}; simulate a smaller problem")
        self.slots: dict[int, _Slot] = {}
        self.shadow: dict[int, _Shadow] = {}
        self.wait_clocks: list[np.ndarray] = []
        self.code_file = kernel.fn.__code__.co_filename
        self.code_name = kernel.fn.__name__
        self._build_heaps(args_per_rank)
        self.agents = [_Agent(self, i, r, (x, y, z)) for i, (r, x, y, z) in enumerate(
            (r, x, y, z) for r in range(size) for x in range(grid[0]) for y in range(grid[1]) for z in range(grid[2]))]

    def host(self, rank: int) -> int:
        """The clock index of rank's host, the writer of its arrays' initial contents."""
        return self.n_agents + rank

    def writer_name(self, index: int) -> str:
        return self.agents[index].who if index < self.n_agents else f"rank {index - self.n_agents}'s host"

    # -- heaps
    def _build_heaps(self, args_per_rank) -> None:
        names = self.kernel.arg_names
        self.args: list[dict[str, Any]] = []
        layout, self.heap_bytes = heap_layout(self.kernel, args_per_rank, SimulationError)
        self.heaps = []
        self.arrays: list[_Array] = []
        for r, args in enumerate(args_per_rank):
            raw = np.zeros(self.heap_bytes + HEAP_ALIGN, dtype=np.uint8)
            shift = (-raw.ctypes.data) % HEAP_ALIGN
            heap = raw[shift:shift + self.heap_bytes]
            self.heaps.append((raw, heap))
            row = {}
            for name in names:
                a = args[name]
                if isinstance(a, np.ndarray):
                    off, dtype, shape = layout[name]
                    view = heap[off:off + a.nbytes].view(dtype).reshape(shape)
                    view[...] = a
                    self.arrays.append(_Array(r, name, heap.ctypes.data + off, a.nbytes, dtype, view))
                    row[name] = self._pointer(heap.ctypes.data + off, dtype)
                elif name in self.kernel.constexpr_names:
                    row[name] = a
                else:
                    row[name] = self.ti._implicit_cvt(a)
            self.args.append(row)
        self.arrays.sort(key=lambda x: x.start)
        self.starts = [x.start for x in self.arrays]
        self.bases = [h.ctypes.data for _, h in self.heaps]

    def _pointer(self, address: int, dtype: np.dtype):
        tl = self.tl
        ty = tl.pointer_type(getattr(tl, NP_TO_TL[str(dtype)]))
        return tl.tensor(self.ti.TensorHandle(np.array([address], dtype=np.uint64), ty), ty)

    def scalar(self, value: int, dtype: str):
        tl = self.tl
        ty = getattr(tl, dtype)
        return tl.tensor(self.ti.TensorHandle(np.array([value], dtype=getattr(np, dtype)), ty), ty)

    def array_at(self, address: int) -> _Array | None:
        i = bisect.bisect_right(self.starts, address) - 1
        if i >= 0 and address < self.arrays[i].start + self.arrays[i].nbytes:
            return self.arrays[i]
        return None

    def describe(self, address: int) -> str:
        a = self.array_at(address)
        if a is None:
            return f"address {address:#x}"
        return f"{a.name}[{(address - a.start) // a.dtype.itemsize}] of rank {a.rank}"

    # -- locations
    def is_kernel_frame(self, frame) -> bool:
        return frame.f_code.co_filename == self.code_file and frame.f_code.co_name == self.code_name

    def loc(self) -> Loc:
        frame = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if code.co_filename == self.code_file and code.co_name == self.code_name:
                return Loc(code.co_filename, frame.f_lineno, _column(code, frame.f_lasti))
            frame = frame.f_back
        return Loc(None)

    def report(self, kind: str, agent: _Agent | None, message: str, loc: Loc, notes=(), key=None) -> None:
        self.findings.add(Finding(kind, message, loc, agent.rank if agent is not None else None, None, None,
                                  list(notes)), key)

    def stop(self) -> None:
        """A finding that leaves the kernel unable to go on (a wild address): end the run."""
        self.stopping = True
        raise _Abort()

    # -- addresses
    def addresses(self, handle, mask=None) -> np.ndarray:
        data = np.asarray(handle.data, dtype=np.uint64).reshape(-1)
        if mask is not None:
            data = data[np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(handle.data)).reshape(-1)]
        return data

    def check_bounds(self, agent: _Agent, addrs: np.ndarray, itemsize: int, what: str, loc: Loc) -> None:
        for address in np.unique(addrs).tolist():
            a = self.array_at(address)
            if a is None or address + itemsize > a.start + a.nbytes:
                near = self.array_at(address - itemsize) or self.array_at(address + itemsize)
                hint = f" (next to {self.describe(address - itemsize if near else address)})" if near else ""
                self.report(OUT_OF_BOUNDS, agent, f"{agent.prog}: {what} at address {address:#x} outside every "
                            f"array of the symmetric heaps{hint}", loc, key=(loc, what))
                self.stop()

    def slot_addresses(self, agent: _Agent, pad, slot, what: str, loc: Loc) -> np.ndarray:
        base = np.asarray(pad.handle.data, dtype=np.uint64).reshape(-1)
        s = np.asarray(slot.handle.data if hasattr(slot, "handle") else slot, dtype=np.int64).reshape(-1)
        addrs = (base.astype(np.int64) + 4 * s).astype(np.uint64)
        self.check_bounds(agent, addrs, 4, what, loc)
        return addrs

    def read_i32(self, addrs: np.ndarray) -> np.ndarray:
        out = np.empty(len(addrs), dtype=np.int32)
        for i, address in enumerate(addrs.tolist()):
            a = self.array_at(address)
            out[i] = a.view.reshape(-1).view(np.uint8)[address - a.start:address - a.start + 4].view(np.int32)[0]
        return out

    def write_i32(self, address: int, value: int) -> None:
        a = self.array_at(address)
        a.view.reshape(-1).view(np.uint8)[address - a.start:address - a.start + 4].view(np.int32)[0] = value

    # -- primitives
    def symm_at(self, agent: _Agent, ptr, peer):
        loc = self.loc()
        peer = _int(peer)
        if not 0 <= peer < self.size:
            self.report(OUT_OF_BOUNDS, agent, f"{agent.prog}: dl.symm_at to peer {peer}, outside the world of "
                        f"{self.size} ranks", loc)
            self.stop()
        data = np.asarray(ptr.handle.data, dtype=np.uint64)
        mine_lo, mine_hi = self.bases[agent.rank], self.bases[agent.rank] + self.heap_bytes
        if data.size and (int(data.min()) < mine_lo or int(data.max()) >= mine_hi):
            bad = int(data.reshape(-1)[0])
            self.report(OUT_OF_BOUNDS, agent, f"{agent.prog}: dl.symm_at of {self.describe(bad)}, which is not in "
                        f"this rank's symmetric heap", loc)
            self.stop()
        delta = self.bases[peer] - self.bases[agent.rank]
        moved = (data.astype(np.int64) + delta).astype(np.uint64)
        handle = self.ti.TensorHandle(moved, ptr.handle.dtype)
        _taint(handle, _taint_of(ptr.handle))
        return self.tl.tensor(handle, ptr.type)

    def wait(self, agent: _Agent, pad, slot, value, semantic, *, fence: bool = False, loc: Loc | None = None):
        loc = loc or self.loc()
        value = _int(value)
        addrs = self.slot_addresses(agent, pad, slot, "dl.wait on a slot", loc)
        if self.rng.random() < SWITCH_RATE:
            agent.yield_()
        while True:
            seen = self.read_i32(addrs)
            if seen.min() >= value:
                break
            agent.state = "blocked"
            agent.blocked_on = (addrs, value, loc)
            agent.yield_()
        if semantic == "acquire":
            for address in addrs.tolist():
                clock = self.slots.get(address, _Slot()).clock
                if clock is not None:
                    np.maximum(agent.full, clock, out=agent.full)
                    if fence:
                        np.maximum(agent.base, clock, out=agent.base)
        self.wait_clocks.append(agent.full.copy())
        token = self.scalar(int(seen.min()), "int32")
        _taint(token.handle, frozenset([len(self.wait_clocks) - 1]) if semantic == "acquire" else frozenset())
        return token

    def notify(self, agent: _Agent, pad, slot, value, peer, op, semantic, *, loc: Loc | None = None):
        loc = loc or self.loc()
        peer, value = _int(peer), _int(value)
        if not 0 <= peer < self.size:
            self.report(OUT_OF_BOUNDS, agent, f"{agent.prog}: dl.notify to peer {peer}, outside the world of "
                        f"{self.size} ranks", loc)
            self.stop()
        mine = self.slot_addresses(agent, pad, slot, "dl.notify of a slot", loc)
        delta = self.bases[peer] - self.bases[agent.rank]
        addrs = (mine.astype(np.int64) + delta).astype(np.uint64)
        self.check_bounds(agent, addrs, 4, "dl.notify of a peer's slot", loc)
        for address in np.unique(addrs).tolist():
            if op != "clear" and semantic == "release":
                slot_state = self.slots.setdefault(address, _Slot())
                slot_state.clock = (agent.full.copy() if slot_state.clock is None
                                    else np.maximum(slot_state.clock, agent.full))
            old = int(self.read_i32(np.array([address], dtype=np.uint64))[0])
            new = value if op == "set" else (old + value if op == "add" else (0 if old == value else old))
            self.write_i32(address, int(np.array(new, dtype=np.int64).astype(np.int32)))
        if op != "clear":
            agent.full[agent.index] += 1
            agent.base[agent.index] += 1
        self.wake(addrs)

    def wake(self, addrs: np.ndarray) -> None:
        """Programs blocked in a wait on any of these addresses may go on (they read their slots again)."""
        touched = set(addrs.tolist())
        for other in self.agents:
            if other.state == "blocked" and touched.intersection(other.blocked_on[0].tolist()):
                other.state = "ready"

    def consume_token(self, x, token):
        handle = self.ti.TensorHandle(np.array(x.handle.data, copy=True), x.handle.dtype)
        _taint(handle, _taint_of(x.handle) | (_taint_of(token.handle) if hasattr(token, "handle") else frozenset()))
        return self.tl.tensor(handle, x.type)

    def barrier_all(self, agent: _Agent, pad):
        loc = self.loc()
        W = self.size
        gen_addr = self.slot_addresses(agent, pad, W, "dl.barrier_all's generation slot (pad[num_ranks])", loc)
        gen = int(self.read_i32(gen_addr)[0]) + 1
        self.write_i32(int(gen_addr[0]), gen)
        for peer in range(W):
            self.notify(agent, pad, agent.rank, gen, peer, "set", "release", loc=loc)
        for peer in range(W):
            self.wait(agent, pad, peer, gen, "acquire", fence=True, loc=loc)

    # -- memory accesses (the interpreter's loads and stores)
    def load_clock(self, agent: _Agent, handle) -> np.ndarray:
        taint = _taint_of(handle)
        if not taint:
            return agent.base
        clock = agent.base.copy()
        for k in taint:
            np.maximum(clock, self.wait_clocks[k], out=clock)
        return clock

    def access(self, agent: _Agent, ptrs, mask, write: bool) -> None:
        loc = agent.last_loc = self.loc()
        if not write:
            agent.loads += 1
            if agent.loads >= LOADS_PER_SWITCH:
                agent.loads = 0
                agent.yield_()
        itemsize = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        addrs = self.addresses(ptrs, mask)
        if addrs.size == 0:
            return
        self.check_bounds(agent, addrs, itemsize, "a store" if write else "a load", loc)
        me = agent.index
        if write:
            self.wake(addrs)      # a slot written by a plain store (not a notify) also ends a wait on it
        clock = agent.full if write else self.load_clock(agent, ptrs)
        for address in np.unique(addrs).tolist():
            sh = self.shadow.get(address)
            if sh is None:   # never stored by a program: the initial contents, from the rank's host
                sh = self.shadow[address] = _Shadow(self.host(self.array_at(address).rank), 1, None)
            if sh.writer >= 0 and sh.writer != me and clock[sh.writer] < sh.epoch and (
                    sh.writer < self.n_agents or not write):
                other = _Named(self.writer_name(sh.writer))
                note = (Diagnostic(f"the unordered store by {other.who}", sh.line.file, sh.line.line, sh.line.col,
                                   "note") if sh.line is not None else
                        Diagnostic(f"{other.who} wrote it before launching; no dl.wait orders that before this "
                                   f"load (a peer's data is ready once the peer says so with dl.notify)",
                                   severity="note"))
                where = self.describe(address)
                if write:
                    self.report(RACE_WRITE, agent, f"{agent.prog}: racing writes to {where}: no notify/wait "
                                f"orders this store with the store by {other.who}", loc, [note],
                                key=(loc, sh.line, agent.rank))
                elif agent.full[sh.writer] >= sh.epoch:
                    self.report(RACE_READ, agent, f"{agent.prog}: load of {where} is after its guarding dl.wait in "
                                f"program order but does not depend on the wait's token: pass the pointer through "
                                f"dl.consume_token(ptr, token), or a compiler may move the load before the wait",
                                loc, [note], key=(loc, sh.line, agent.rank, "token"))
                else:
                    self.report(RACE_READ, agent, f"{agent.prog}: load of {where} before its guarding wait: the "
                                f"store by {other.who} is not ordered before it by any notify/wait (a missing "
                                f"dl.wait?)", loc, [note], key=(loc, sh.line, agent.rank))
            if write:
                for reader, (epoch, rloc) in sh.reads.items():
                    if reader != me and clock[reader] < epoch:
                        other = self.agents[reader]
                        note = Diagnostic(f"the unordered load by {other.who}", rloc.file, rloc.line, rloc.col,
                                          "note")
                        self.report(RACE_WAR, agent, f"{agent.prog}: store to {self.describe(address)} races an "
                                    f"earlier load by {other.who} (no notify/wait orders them)", loc, [note],
                                    key=(loc, rloc, agent.rank))
                sh.writer, sh.epoch, sh.line, sh.reads = me, int(agent.full[me]), loc, {}
            else:
                sh.reads[me] = (int(agent.full[me]), loc)

    # -- running
    def resume(self, agent: _Agent) -> None:
        _ACTIVE.agent = agent
        self.ti.interpreter_builder.set_grid_idx(*agent.pid)

    def _body(self, agent: _Agent, fn) -> None:
        agent.sem.acquire()
        try:
            if self.stopping:
                raise _Abort()
            self.resume(agent)
            fn(**self.args[agent.rank])
        except _Abort:
            pass
        except BaseException as err:  # noqa: BLE001 - reported by simulate, located
            agent.error = err
            self.stopping = True
        finally:
            agent.state = "done"
            _ACTIVE.agent = None
            self.main.release()

    def run(self, fn) -> None:
        self.ti.interpreter_builder.set_grid_dim(*self.grid)
        for agent in self.agents:
            agent.thread = threading.Thread(target=self._body, args=(agent, fn), daemon=True,
                                            name=f"ditron-sim-{agent.rank}-{agent.pid}")
            agent.thread.start()
        switches = 0
        while True:
            if self.stopping:
                break
            ready = [a for a in self.agents if a.state == "ready"]
            if not ready:
                blocked = [a for a in self.agents if a.state == "blocked"]
                if blocked:
                    self._deadlock(blocked)
                break
            switches += 1
            if switches > self.max_switches:
                self._no_progress()
                break
            agent = ready[int(self.rng.integers(len(ready)))]
            agent.sem.release()
            self.main.acquire()
        self.stopping = True
        for agent in self.agents:
            if agent.state != "done":
                agent.sem.release()
                self.main.acquire()
        for agent in self.agents:
            agent.thread.join()

    def _no_progress(self) -> None:
        for agent in self.agents:
            if agent.state != "done":
                self.report(DEADLOCK, agent, f"{agent.prog} has not finished after {self.max_switches} switches "
                            f"between programs: a spin loop that never ends? (spin with dl.wait: the simulator "
                            f"then names the slot)", agent.last_loc or Loc(None))

    def _deadlock(self, blocked: list[_Agent]) -> None:
        for agent in blocked:
            addrs, value, loc = agent.blocked_on
            seen = self.read_i32(addrs)
            low = [(address, int(s)) for address, s in zip(addrs.tolist(), seen.tolist()) if s < value]
            slots = ", ".join(f"{self.describe(a)} (holds {s})" for a, s in low[:4])
            more = f" and {len(low) - 4} more" if len(low) > 4 else ""
            self.report(DEADLOCK, agent, f"{agent.prog} waits forever for {slots}{more} to reach {value}: no "
                        f"notify left can set it (a missing dl.notify?)", loc)


def _column(code, lasti: int) -> int:
    """The 1-based column of the expression a frame is executing (Python 3.11+ positions), else 1."""
    positions = getattr(code, "co_positions", None)
    if positions is None or lasti < 0:
        return 1
    for i, (_, _, col, _) in enumerate(positions()):
        if i == lasti // 2:
            return (col or 0) + 1
    return 1


def _int(x) -> int:
    """A scalar of the interpreter (a tl.tensor of one element) or a Python int, as an int."""
    return int(np.asarray(x.handle.data).reshape(-1)[0]) if hasattr(x, "handle") else int(x)


# ------------------------------------------------------------------------------------------- taint (tokens)

_TAINT = "_ditron_tokens"


def _propagating(ti, original):
    """``original`` (an interpreter-builder method) wrapped to carry its operands' token taint to its result."""
    def run(*args, **kwargs):
        out = original(*args, **kwargs)
        taint = frozenset().union(*(_taint_of(a) for a in args if isinstance(a, ti.TensorHandle)))
        if taint and isinstance(out, ti.TensorHandle):
            _taint(out, taint)
        return out
    return run


def _taint_of(handle) -> frozenset:
    return getattr(handle, _TAINT, frozenset())


def _taint(handle, taint: frozenset) -> None:
    if taint:
        setattr(handle, _TAINT, taint)


_PROPAGATING = ("binary_op", "unary_op", "ternary_op", "cast_impl", "create_fma")
_DESCRIPTOR_ACCESSES = ("create_descriptor_load", "create_descriptor_store")


def _descriptor_block(ti, desc, indices):
    """The block of tensor descriptor ``desc`` at ``indices``, addressed as Triton's interpreter addresses it:
    (pointers, in-bounds mask, padding value) -- the pointers carrying the token taint of the descriptor's base and
    of the offsets, so that a wait's token consumed into an offset (``dl.consume_token(row0, token)``) orders the
    load as it orders a pointer load."""
    ptrs, mask = desc.materialize_pointers(indices)
    _taint(ptrs, _taint_of(desc.base).union(*(_taint_of(i) for i in indices)))
    elem, fill = ptrs.get_element_ty(), 0 if desc.padding == ti._ir.PADDING_OPTION.PAD_ZERO else float("nan")
    other = ti.TensorHandle(np.full(np.shape(ptrs.data), fill, dtype=ti._get_np_dtype(elem)), elem)
    return ptrs, ti.TensorHandle(np.asarray(mask, dtype=bool), ti.tl.int1), other


def _patch_descriptors(ti, b) -> list[str]:
    """Tensor-descriptor loads and stores (``tl.make_tensor_descriptor(...).load / .store``) as the masked pointer
    loads and stores of their blocks, through the builder's (patched) ``create_masked_load`` / ``_store``: checked
    like any other access."""
    def descriptor_load(desc, indices, *rest):
        ptrs, mask, other = _descriptor_block(ti, desc, indices)
        return b.create_masked_load(ptrs, mask, other, None, None, False)

    def descriptor_store(desc, value, indices, *rest):
        ptrs, mask, _ = _descriptor_block(ti, desc, indices)
        return b.create_masked_store(ptrs, value, mask, None, None)

    b.create_descriptor_load, b.create_descriptor_store = descriptor_load, descriptor_store
    return list(_DESCRIPTOR_ACCESSES)


def _patch_builder(world: _World) -> list[str]:
    """Wrap the interpreter builder's methods: loads/stores are checked, atomics switch agents, every other op
    carries its operands' token taint to its result (consume_token's data dependency)."""
    ti = world.ti
    b = ti.interpreter_builder
    patched = []

    def propagate(name, original):
        return _propagating(ti, original)

    for name in dir(type(b)):
        if name in ("create_masked_load", "create_masked_store", "create_load", "create_store",
                    "create_atomic_rmw", "create_atomic_cas", *_DESCRIPTOR_ACCESSES) or name.startswith("get_"):
            continue
        if name.startswith("create_") or name in _PROPAGATING:
            setattr(b, name, propagate(name, getattr(b, name)))
            patched.append(name)

    original_load, original_store = b.create_masked_load, b.create_masked_store
    original_rmw, original_cas = b.create_atomic_rmw, b.create_atomic_cas

    def masked_load(ptrs, mask, other, *rest):
        agent = active()
        if agent is not None:
            world.access(agent, ptrs, mask, write=False)
        return original_load(ptrs, mask, other, *rest)

    def masked_store(ptrs, value, mask, *rest):
        agent = active()
        if agent is not None:
            world.access(agent, ptrs, mask, write=True)
        return original_store(ptrs, value, mask, *rest)

    def atomic(original, mask_index):
        def run(*args):
            agent = active()
            if agent is not None:
                ptr = args[1] if original is original_rmw else args[0]
                mask = args[mask_index] if mask_index is not None else None
                itemsize = max(1, ptr.get_element_ty().primitive_bitwidth // 8)
                addrs = world.addresses(ptr, mask)
                world.check_bounds(agent, addrs, itemsize, "an atomic", world.loc())
                out = original(*args)
                world.wake(addrs)
                agent.yield_()
                return out
            return original(*args)
        return run

    b.create_masked_load, b.create_masked_store = masked_load, masked_store
    b.create_atomic_rmw = atomic(original_rmw, 3)
    b.create_atomic_cas = atomic(original_cas, None)
    patched += ["create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas"]
    patched += _patch_descriptors(ti, b)
    return patched


def _patch_language(world: _World, kernel_fn):
    """Triton's interpreter patches (undone by the returned scope's restore()): triton.language and its core
    module as the interpreter runs them, and @triton.jit functions the kernel calls (Triton's standard library:
    tl.zeros, tl.sum, ...; the user's helpers) run interpreted while an agent runs."""
    import types

    import triton.language as tl
    from triton.runtime.jit import JITFunction
    ti = world.ti
    scope = ti._patch_lang(kernel_fn)
    both = types.FunctionType((lambda: None).__code__, {"tl": tl, "core": tl.core})
    for change in ti._patch_lang(both)._changes:
        scope._changes.append(change)
    original = JITFunction.__call__

    def call(self, *args, **kwargs):
        if active() is None:
            return original(self, *args, **kwargs)
        return ti.InterpretedFunction(self.fn).rewrite()(*args, **kwargs)

    scope.set_attr(JITFunction, "__call__", call)
    return scope


# ------------------------------------------------------------------------------------------------ the API

def _located_error(err: BaseException, world: _World) -> SimulationError:
    tb = err.__traceback__
    loc = Loc(None)
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == world.code_file and code.co_name == world.code_name:
            loc = Loc(code.co_filename, tb.tb_lineno, _column(code, tb.tb_lasti))
        tb = tb.tb_next
    inner = err
    while getattr(inner, "__cause__", None) is not None:
        inner = inner.__cause__
    message = f"kernel '{world.code_name}' failed in the simulator: {type(inner).__name__}: {inner}"
    return SimulationError.at(loc, message) if loc.file else SimulationError(message)


def simulate(kernel, grid, args_per_rank, *, world: int, reference: Callable | Sequence | None = None,
             seed: int = 0, rtol: float = 1e-5, atol: float = 1e-6, max_switches: int = MAX_SWITCHES) -> SimResult:
    """Run ``kernel`` (a ``@ditron.jit`` kernel) on ``world`` ranks with grid ``grid`` on the CPU and check it.

    ``args_per_rank``: per rank, the kernel's arguments (a dict by name, or a sequence in parameter order; a
    callable ``rank -> arguments`` also works): numpy arrays (or CPU torch tensors) become that rank's arrays of the
    symmetric heap -- the same dtype and shape on every rank --, ints/floats scalars, and the ``tl.constexpr``
    parameters their values. Signal pads are int32 arrays, zeroed by the caller.

    ``reference``: the expected arrays, ``[{name: array}, ...]`` per rank, or a callable taking the inputs (per
    rank, a dict of copies of every array argument) and returning that; arrays not named are not compared.

    Returns a SimResult: ``findings`` (deadlock, read-before-signal, write-write, write-after-read,
    out-of-bounds, mismatch, each with the kernel's source line), ``outputs[rank][name]``. Raises
    SimulationError (located at the kernel line) when the kernel itself fails, e.g. a dl.* call with wrong
    arguments. ``max_switches``: switches between programs after which a run that has not finished is reported
    (a spin loop that never ends)."""
    from .jit import DitronJITFunction
    if not isinstance(kernel, DitronJITFunction):
        raise SimulationError(f"simulate: kernel must be a @ditron.jit kernel, got {type(kernel).__name__}")
    if not isinstance(world, int) or world < 1:
        raise SimulationError(f"simulate: world must be a positive number of ranks, got {world!r}")
    g = grid3(grid, SimulationError)
    rows = per_rank_args(kernel, args_per_rank, world, SimulationError)
    inputs = [{n: v.copy() for n, v in row.items() if isinstance(v, np.ndarray)} for row in rows]
    w = _World(kernel, g, rows, world, seed, max_switches)
    fn = w.ti.InterpretedFunction(kernel.fn).rewrite()
    scope = _patch_language(w, kernel.fn)
    patched = _patch_builder(w)
    try:
        w.run(fn)
    finally:
        b = w.ti.interpreter_builder
        for name in patched:
            if name in vars(b):
                delattr(b, name)
        scope.restore()
    errors = [a.error for a in w.agents if a.error is not None]
    if errors:
        raise _located_error(errors[0], w) from None
    outputs = [{} for _ in range(world)]
    for a in w.arrays:
        outputs[a.rank][a.name] = a.view.copy()
    compared = False
    stopped = any(f.kind in (DEADLOCK, OUT_OF_BOUNDS) for f in w.findings.items)
    if reference is not None and not stopped:
        expected = reference(inputs) if callable(reference) else reference
        _compare(w, expected, outputs, rtol, atol)
        compared = True
    return SimResult(world, g, seed, list(w.findings.items), outputs, compared)


def _compare(w: _World, expected, outputs, rtol: float, atol: float) -> None:
    if len(expected) != w.size:
        raise SimulationError(f"simulate: the reference gives {len(expected)} ranks for a world of {w.size}")
    for r, want in enumerate(expected):
        for name, value in want.items():
            if name not in outputs[r]:
                raise SimulationError(f"simulate: the reference names '{name}', which is not an array argument "
                                      f"of rank {r}")
            got = outputs[r][name]
            value = np.asarray(value)
            if value.shape != got.shape:
                raise SimulationError(f"simulate: the reference's '{name}' of rank {r} has shape {value.shape}, "
                                      f"the argument {got.shape}")
            bad = ~np.isclose(got.astype(np.float64), value.astype(np.float64), rtol=rtol, atol=atol)
            if not bad.any():
                continue
            flat = int(np.flatnonzero(bad.reshape(-1))[0])
            arr = next(a for a in w.arrays if a.rank == r and a.name == name)
            sh = w.shadow.get(arr.start + flat * arr.dtype.itemsize)
            loc = sh.line if sh is not None and sh.line is not None else Loc(None)
            wrote = f"last stored at line {loc.line}" if loc.file else "never stored by the kernel"
            index = np.unravel_index(flat, got.shape)
            w.report(MISMATCH, None, f"rank {r}: '{name}' differs from the reference at {int(bad.sum())} of "
                     f"{bad.size} elements; first at index {tuple(int(i) for i in index)}: got "
                     f"{got.reshape(-1)[flat]!r}, expected {value.reshape(-1)[flat]!r} ({wrote})", loc,
                     key=(r, name))
            w.findings.items[-1].rank = r
