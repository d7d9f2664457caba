"""Launches of user ``@ditron.jit`` kernels in the device-level simulator.

A device program built with ``ditron.device`` may launch a user kernel (a private ``func.func`` carrying
``ditron.jit = {key, params}``, docs/device_ir.md). Such a launch runs here: every program of its grid is a
``JitProgramEntity`` of the World (scheduler.py), beside the host programs, the streams and the template kernels'
programs, under the same seeded interleaving. Its body is the kernel's own Python function run by Triton's
interpreter (as ``ditron.language.simulate`` runs it), on a thread of which exactly one runs at a time: the World
steps the entity, the thread runs to its next memory access, notify or wait, and hands back.

Memory is the World's: a kernel's pointers are addresses in a *virtual* heap per rank (rank r's heap at
``(r + 1) << HEAP_BITS``; every symmetric allocation at the same offset in every heap, the rank's arguments after
them), so ``dl.symm_at`` is the GPU's address arithmetic, and every load and store is translated to a box of a
World Buffer (``World.buffer``: rotating copies, a peer's argument refused) and checked like any other access
(``check_read`` / ``World.write``: happens-before by vector clocks, uninitialised reads). ``dl.wait`` acquires
through ``World.try_acquire`` (blocking the entity until a signal wakes it), ``dl.notify`` releases through
``World.signal``, so a stream's copy and signal order the kernel's loads exactly as they order a template's tiles.

The kernel's checks are those of ``ditron.language.simulate``: a load of data whose write no wait orders before
it (a missing wait: read-before-signal), or that a wait orders only in program order while the pointer does not
depend on the wait's token (a missing ``dl.consume_token``); a wait no notify can satisfy (a deadlock of the
World, at the wait's line); racing stores. Every finding is at the kernel's Python source line. A tensor
descriptor's load / store is the masked access of its block (language/sim.py ``_patch_descriptors``). Limits: user
atomics and descriptor gathers / scatters are refused (located errors), data buffers and signal pads are distinct (a pad is
accessed through the primitives only), element types bf16, f16, f32, f64, i8..i64.
"""
from __future__ import annotations

import bisect
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .memory import check_read, empty_clock, join, record_read
from .report import DEADLOCK, INVALID, OUT_OF_BOUNDS, RACE_READ, Loc, SimulationError, describe_region
from .scheduler import Blocked, Entity

HEAP_BITS = 40            # rank r's virtual heap starts at (r + 1) << HEAP_BITS
ALIGN = 128               # bytes between buffers of a heap
SWITCH_RATE = 0.25        # how often a wait that could go on hands back anyway (the rest of the interleaving)
MAX_STEPS = 2_000_000     # steps of one kernel program after which it is reported as not finishing

ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8,
            "index": 8, "ui8": 1, "ui16": 2, "ui32": 4, "ui64": 8}
TL_NAMES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64", "i8": "int8", "i16": "int16",
            "i32": "int32", "i64": "int64", "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64"}
SCALAR_TYPES = {"i32": "int32", "i64": "int64", "u32": "uint32", "u64": "uint64"}


class _Abort(BaseException):
    """Unwinds a kernel program's thread when the simulation ends before it does."""


class _Stop(BaseException):
    """Ends one kernel program after a finding that leaves it unable to go on (a wild address)."""


# ------------------------------------------------------------------------------------------------ the plan

@dataclass
class JitPlan:
    """What a launch of a @ditron.jit kernel on one rank runs (the Launch of entities.py reads kernel, template,
    grid_size and makes its programs with ``program``)."""

    kernel: str
    jit: Any                     # ditron.device's JitKernel
    grid: tuple[int, int, int]
    args: dict[str, Any]         # the kernel's arguments by name: buffer keys and ints (constexprs by value)
    template: str = "@ditron.jit"
    programs: list = field(default_factory=list)

    @property
    def grid_size(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    def program(self, world, launch, index: int) -> "JitProgramEntity":
        g = self.grid
        pid = (index // (g[1] * g[2]), (index // g[2]) % g[1], index % g[2])
        return JitProgramEntity(world, launch, index, pid, self)


def jit_kernel(info, loc: Loc):
    """The ditron.device JitKernel a launched declaration stands for: this process's, else the one its source
    record names (ditron.device.kernel.resolve)."""
    from ..device.kernel import resolve
    from ..errors import DitronError
    key, params, source = info.jit
    try:
        k = resolve(info.name, key, source)
    except DitronError as err:
        raise SimulationError.at(loc, f"launch of '@{info.name}': {err.diagnostics[0].message}",
                                 info.loc.diagnostic("kernel declared here", "note")) from None
    if k.params != list(params):
        raise SimulationError.at(loc, f"@ditron.jit kernel '@{info.name}' takes {', '.join(k.params)}; its declaration "
                                      f"names {', '.join(params)}")
    return k


def plan_jit_launch(world, info, operands, *, grid, loc: Loc) -> JitPlan:
    k = jit_kernel(info, loc)
    if len(operands) != len(k.params):
        raise SimulationError.at(loc, f"launch of '@{info.name}' passes {len(operands)} operand(s); the kernel takes "
                                      f"{len(k.params)}: {', '.join(k.params)}")
    args = {**{n: v for n, v in k.fn.defaults.items()}, **k.constexprs}
    for name, v in zip(k.params, operands):
        ty = k.signature[name]
        if ty.startswith("*") != isinstance(v, tuple):
            raise SimulationError.at(loc, f"launch of '@{info.name}': argument '{name}' is {ty}, the operand "
                                          f"{'a buffer' if isinstance(v, tuple) else 'an index value'}")
        args[name] = v
    g = tuple(grid) + (1,) * (3 - len(grid))
    session(world).add_kernel(k)
    return JitPlan(info.name, k, g, args)


# --------------------------------------------------------------------------------------------- the session

def session(world) -> "Session":
    s = getattr(world, "_jit_session", None)
    if s is None:
        raise SimulationError("a @ditron.jit launch outside a jit session (run the World through "
                              "ditron.sim.jit.Session)")
    return s


class Session:
    """The part of a World that runs @ditron.jit kernels: the virtual heaps, Triton's interpreter patched for the
    World's memory, the kernel programs' threads. ``with Session(world): world.run()``; a World whose program
    launches no @ditron.jit kernel costs nothing."""

    def __init__(self, world):
        self.world = world
        self.main = threading.Semaphore(0)
        self.stopping = False
        self.codes: set[tuple[str, str]] = set()
        self.kernels: dict[int, Any] = {}
        self.programs: list[JitProgramEntity] = []
        self.scopes: list = []
        self.patched: list[str] = []
        self.ti = self.tl = None
        self._layout()

    # -- the virtual heaps
    def _layout(self) -> None:
        prog = self.world.program
        entries = []
        for spec in sorted(prog.allocs_by_index.values(), key=lambda s: s.index):
            entries.append((("sym", spec.index), spec.type))
        for spec in prog.args:
            if spec.io != "epoch":
                entries.append((("arg", spec.index), spec.type))
        self.keys: list[tuple] = []
        self.starts: list[int] = []
        self.sizes: dict[tuple, tuple[int, int, str]] = {}   # key -> (start, nbytes, elem)
        off = ALIGN
        for key, mt in entries:
            n = 1
            for s in mt.shape:
                n *= max(int(s), 0) if s >= 0 else 0
            nbytes = n * ITEMSIZE.get(mt.elem, 4)
            self.keys.append(key)
            self.starts.append(off)
            self.sizes[key] = (off, nbytes, mt.elem)
            off += -(-max(nbytes, 1) // ALIGN) * ALIGN + ALIGN

    @staticmethod
    def base(rank: int) -> int:
        return (rank + 1) << HEAP_BITS

    def address(self, key: tuple, rank: int) -> int:
        return self.base(rank) + self.sizes[key][0]

    def resolve(self, addrs: np.ndarray):
        """(rank, key index, byte offset in the buffer) of every address; rank -1 where it is in no buffer."""
        a = addrs.astype(np.uint64)
        rank = (a >> np.uint64(HEAP_BITS)).astype(np.int64) - 1
        off = (a & np.uint64((1 << HEAP_BITS) - 1)).astype(np.int64)
        k = np.searchsorted(np.asarray(self.starts, dtype=np.int64), off, side="right") - 1
        start = np.asarray(self.starts, dtype=np.int64)[np.maximum(k, 0)]
        nbytes = np.asarray([self.sizes[key][1] for key in self.keys], dtype=np.int64)[np.maximum(k, 0)]
        inside = (k >= 0) & (off - start < nbytes) & (rank >= 0) & (rank < self.world.W)
        return np.where(inside, rank, -1), k, off - start

    def describe(self, address: int) -> str:
        rank, k, off = (int(x[0]) for x in self.resolve(np.array([address], dtype=np.uint64)))
        if rank < 0:
            return f"address {address:#x}"
        key = self.keys[k]
        return f"{self._label(key)}[{off // ITEMSIZE.get(self.sizes[key][2], 4)}] of rank {rank}"

    def _label(self, key) -> str:
        if key[0] == "sym":
            return f"'{self.world.program.allocs_by_index[key[1]].name}'"
        return f"argument {key[1]}"

    # -- kernels and locations
    def add_kernel(self, k) -> None:
        fn = k.fn.fn
        if id(fn) in self.kernels:
            return
        self.kernels[id(fn)] = fn
        self.codes.add((fn.__code__.co_filename, fn.__name__))
        self._patch(fn)

    def is_kernel_frame(self, frame) -> bool:
        return (frame.f_code.co_filename, frame.f_code.co_name) in self.codes

    def loc(self) -> Loc:
        from ..language.sim import _column
        frame = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if (code.co_filename, code.co_name) in self.codes:
                return Loc(code.co_filename, frame.f_lineno, _column(code, frame.f_lasti))
            frame = frame.f_back
        return Loc(None)

    # -- Triton's interpreter, patched while the World runs
    def _patch(self, fn) -> None:
        from ..language import sim as lsim
        if self.ti is None:
            import triton.language as tl
            from triton.runtime import interpreter as ti
            self.ti, self.tl = ti, tl
            self.scopes.append(lsim._patch_language(self, fn))
            self._patch_builder()
        else:
            self.scopes.append(self.ti._patch_lang(fn))

    def _patch_builder(self) -> None:
        from ..language.core import active
        from ..language.sim import _PROPAGATING, _patch_descriptors, _propagating
        ti = self.ti
        b = ti.interpreter_builder

        def propagate(original):
            return _propagating(ti, original)

        own = ("create_masked_load", "create_masked_store", "create_load", "create_store", "create_atomic_rmw",
               "create_atomic_cas", "create_descriptor_load", "create_descriptor_store", "create_descriptor_gather",
               "create_descriptor_scatter")
        for name in dir(type(b)):
            if name in own or name.startswith("get_"):
                continue
            if name.startswith("create_") or name in _PROPAGATING:
                setattr(b, name, propagate(getattr(b, name)))
                self.patched.append(name)
        originals = {n: getattr(b, n) for n in own if hasattr(b, n)}

        def mine():
            agent = active()
            return agent if isinstance(agent, JitProgramEntity) else None

        def masked_load(ptrs, mask, other, *rest):
            e = mine()
            return originals["create_masked_load"](ptrs, mask, other, *rest) if e is None else \
                e.load(ptrs, mask, other)

        def masked_store(ptrs, value, mask, *rest):
            e = mine()
            return originals["create_masked_store"](ptrs, value, mask, *rest) if e is None else \
                e.store(ptrs, value, mask)

        def refused(name, what):
            def run(*args, **kwargs):
                e = mine()
                if e is None:
                    return originals[name](*args, **kwargs)
                raise SimulationError.at(self.loc(), f"@{e.plan.kernel}: {what} in a kernel the device-level "
                                                     f"simulator runs are not modelled; synchronise with dl.notify / "
                                                     f"dl.wait, address with pointers")
            return run

        b.create_masked_load, b.create_masked_store = masked_load, masked_store
        self.patched += ["create_masked_load", "create_masked_store"]
        self.patched += _patch_descriptors(ti, b)  # a descriptor's block: the masked load / store above
        for name, what in (("create_atomic_rmw", "atomics (tl.atomic_*)"), ("create_atomic_cas", "tl.atomic_cas"),
                           ("create_descriptor_gather", "tensor descriptor gathers"),
                           ("create_descriptor_scatter", "tensor descriptor scatters")):
            if name in originals:
                setattr(b, name, refused(name, what))
                self.patched.append(name)

    # -- switching between the World and the kernel programs' threads
    def __enter__(self) -> "Session":
        self.world._jit_session = self
        # ditron.language.core checks that a primitive is called from the kernel's body through agent.world
        self.world.is_kernel_frame = self.is_kernel_frame
        return self

    def __exit__(self, *exc) -> None:
        self.stopping = True
        for e in self.programs:
            if e.thread is not None and e.thread.is_alive():
                e.sem.release()
                self.main.acquire()
        for e in self.programs:
            if e.thread is not None:
                e.thread.join()
        if self.ti is not None:
            b = self.ti.interpreter_builder
            for name in self.patched:
                if name in vars(b):
                    delattr(b, name)
            for scope in reversed(self.scopes):
                scope.restore()
        self.world._jit_session = None


# ------------------------------------------------------------------------------------------ kernel programs

def _boxes(shape: tuple[int, ...], idx: np.ndarray) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The flat element indices idx of a buffer of ``shape`` as boxes (lo, hi): one box when they fill their
    bounding box, else one per run of consecutive elements of a row."""
    shape = shape or (1,)
    idx = np.unique(idx)
    nd = np.stack(np.unravel_index(idx, shape), axis=1)
    lo, hi = nd.min(axis=0), nd.max(axis=0) + 1
    if int(np.prod(hi - lo)) == len(idx):
        return [(tuple(int(x) for x in lo), tuple(int(x) for x in hi))]
    last = shape[-1]
    cut = np.flatnonzero((np.diff(idx) != 1) | (np.diff(idx // last) != 0)) + 1
    out = []
    for s, t in zip(np.r_[0, cut], np.r_[cut, len(idx)]):
        a, z = nd[s], nd[t - 1]
        out.append((tuple(int(x) for x in a), tuple(int(x) for x in a[:-1] + 1) + (int(z[-1]) + 1,)))
    return out


class JitProgramEntity(Entity):
    """One program of a @ditron.jit launch, resident on an SM: the kernel's Python body on a thread."""

    kind = "program"

    def __init__(self, world, launch, index: int, pid: tuple[int, int, int], plan: JitPlan):
        rank = launch.stream.rank
        axes = max((i + 1 for i, g in enumerate(plan.grid) if g > 1), default=1)
        super().__init__(world, rank, f"rank {rank} @{plan.kernel} program {','.join(map(str, pid[:axes]))}",
                         launch.clock)
        self.launch, self.index, self.pid, self.plan = launch, index, pid, plan
        self.session = session(world)
        self.session.programs.append(self)
        self.call = launch.item.call
        self.loc: Loc = launch.item.loc
        self.group = None
        self.base = self.clock.copy()        # the clock without the waits' acquisitions (program order only)
        self.wait_clocks: list[np.ndarray] = []
        self.sem = threading.Semaphore(0)
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.state = "ready"
        self.steps = 0
        self.last_loc = self.loc

    # -- the World's side
    def step(self) -> None:
        w, s = self.world, self.session
        if self.thread is None:
            self.thread = threading.Thread(target=self._body, daemon=True, name=f"ditron-sim-{self.label}")
            self.thread.start()
        self.steps += 1
        if self.steps > MAX_STEPS:
            w.report(DEADLOCK, f"{self.label} has not finished after {MAX_STEPS} steps: a spin loop that never ends? "
                     f"(spin with dl.wait: the simulator then names the slot)", self.last_loc, self.rank, self.call)
            self.state = "stop"
        else:
            self.sem.release()
            s.main.acquire()
        if self.error is not None:
            raise self._located(self.error)
        if self.state in ("done", "stop"):
            if self.state == "stop" and self.thread.is_alive():   # unwind it now
                s.stopping, was = True, s.stopping
                self.sem.release()
                s.main.acquire()
                s.stopping = was
            w.finish(self)
            self.launch.program_done(self)

    def _located(self, err: BaseException) -> SimulationError:
        if isinstance(err, SimulationError):
            return err
        from ..language.sim import _column
        tb, loc = err.__traceback__, Loc(None)
        while tb is not None:
            code = tb.tb_frame.f_code
            if (code.co_filename, code.co_name) in self.session.codes:
                loc = Loc(code.co_filename, tb.tb_lineno, _column(code, tb.tb_lasti))
            tb = tb.tb_next
        inner = err
        while getattr(inner, "__cause__", None) is not None:
            inner = inner.__cause__
        msg = f"{self.label}: kernel '{self.plan.kernel}' failed in the simulator: {type(inner).__name__}: {inner}"
        return SimulationError.at(loc, msg) if loc.file else SimulationError(msg)

    # -- the thread's side
    def _resume(self) -> None:
        from ..language.core import _ACTIVE
        _ACTIVE.agent = self
        b = self.session.ti.interpreter_builder
        b.set_grid_dim(*self.plan.grid)
        b.set_grid_idx(*self.pid)

    def yield_(self) -> None:
        s = self.session
        s.main.release()
        self.sem.acquire()
        if s.stopping:
            raise _Abort()
        self._resume()

    def _args(self) -> dict[str, Any]:
        s, tl, ti = self.session, self.session.tl, self.session.ti
        out = {}
        for name, v in self.plan.args.items():
            ty = self.plan.jit.signature.get(name)
            if name in self.plan.jit.fn.constexpr_names or ty is None:
                out[name] = v
            elif ty.startswith("*"):
                rank = self.rank
                elem = s.sizes[v][2]
                pty = tl.pointer_type(getattr(tl, TL_NAMES.get(elem, "int32")))
                out[name] = tl.tensor(ti.TensorHandle(np.array([s.address(v, rank)], dtype=np.uint64), pty), pty)
            else:
                sty = getattr(tl, SCALAR_TYPES[ty])
                out[name] = tl.tensor(ti.TensorHandle(np.array([int(v)], dtype=getattr(np, SCALAR_TYPES[ty])), sty),
                                      sty)
        return out

    def _body(self) -> None:
        from ..language.core import _ACTIVE
        s = self.session
        self.sem.acquire()
        try:
            if s.stopping:
                raise _Abort()
            self._resume()
            fn = s.ti.InterpretedFunction(self.plan.jit.fn.fn).rewrite()
            fn(**self._args())
        except (_Abort, _Stop):
            pass
        except BaseException as err:  # noqa: BLE001 - raised, located, by step()
            self.error = err
        finally:
            if self.state != "stop":
                self.state = "done"
            _ACTIVE.agent = None
            s.main.release()

    def stop(self) -> None:
        self.state = "stop"
        raise _Stop()

    # -- memory
    def _where(self, ptrs, mask, what: str, loc: Loc):
        """The accessed elements, per (rank, buffer key): [(rank, key, flat element indices, positions)]."""
        s = self.session
        addrs = np.asarray(ptrs.data, dtype=np.uint64)
        sel = np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape).reshape(-1) if mask is not None \
            else np.ones(addrs.size, dtype=bool)
        pos = np.flatnonzero(sel)
        flat = addrs.reshape(-1)[pos]
        if flat.size == 0:
            return []
        rank, k, off = s.resolve(flat)
        elem_bits = ptrs.get_element_ty().primitive_bitwidth
        out = []
        bad = rank < 0
        for r, ki in set(zip(rank[~bad].tolist(), k[~bad].tolist())):
            key = s.keys[ki]
            size = ITEMSIZE.get(s.sizes[key][2], 4)
            sel_k = (rank == r) & (k == ki)
            o = off[sel_k]
            if size * 8 != elem_bits or (o % size).any() or ((o + size) > s.sizes[key][1]).any():
                bad |= sel_k & ((off % size != 0) | (off + size > s.sizes[key][1]) | (size * 8 != elem_bits))
                continue
            out.append((r, key, o // size, pos[sel_k]))
        if bad.any():
            address = int(flat[np.flatnonzero(bad)[0]])
            self.world.report(OUT_OF_BOUNDS, f"{self.label}: {what} at {self._near(address)}, outside every buffer "
                              f"of the symmetric heaps (or not of its element type)", loc, self.rank, self.call,
                              key=(self.rank, loc, what))
            self.stop()
        return out

    def _near(self, address: int) -> str:
        s = self.session
        rank, k, off = (int(x[0]) for x in s.resolve(np.array([address], dtype=np.uint64)))
        if rank >= 0:
            return s.describe(address)
        r = (address >> HEAP_BITS) - 1
        o = address & ((1 << HEAP_BITS) - 1)
        i = bisect.bisect_right(s.starts, o) - 1
        if 0 <= r < self.world.W and i >= 0:
            key = s.keys[i]
            return f"address {address:#x} (byte {o - s.starts[i]} of {s._label(key)} of rank {r}, whose " \
                   f"{s.sizes[key][1]} bytes end before it)"
        return f"address {address:#x}"

    def _buffer(self, r: int, key, loc: Loc):
        buf = self.world.buffer(key, r, self.call, loc, self)
        if buf is None:
            self.stop()
        return buf

    def _load_clock(self, handle) -> np.ndarray:
        from ..language.sim import _taint_of
        clock = self.base
        for k in _taint_of(handle):
            clock = join(clock, self.wait_clocks[k])
        clock = join(clock, np.zeros(self.id + 1, dtype=clock.dtype))
        clock[self.id] = self.clock[self.id]
        return clock

    def load(self, ptrs, mask, other):
        from triton.runtime.interpreter import _get_np_dtype
        w = self.world
        loc = self.last_loc = self.session.loc()
        what = f"a load of @{self.plan.kernel}"
        dtype_tt = ptrs.get_element_ty()
        dtype_np = _get_np_dtype(dtype_tt)
        shape = np.shape(ptrs.data)
        out = np.zeros(shape, dtype=dtype_np) if other is None else \
            np.array(np.broadcast_to(other.data, shape), dtype=dtype_np)
        flat_out = out.reshape(-1)
        token_clock = self._load_clock(ptrs)
        for r, key, idx, pos in self._where(ptrs, mask, "a load", loc):
            buf = self._buffer(r, key, loc)
            for lo, hi in _boxes(buf.shape, idx):
                self._check_read(buf, lo, hi, token_clock, loc, what)
            flat_out[pos] = _to_interp(buf.elem, buf.data.reshape(-1)[idx], dtype_np)
        handle = self.session.ti.TensorHandle(out, dtype_tt)
        self._switch()
        return handle

    def _check_read(self, buf, lo, hi, token_clock, loc: Loc, what: str) -> None:
        w = self.world
        region = describe_region(buf.name(), lo, hi)
        for clock, missing in ((self.clock, "wait"), (token_clock, "token")):
            races = check_read(buf, np.asarray(lo), np.asarray(hi), clock, self.id)
            if not races:
                continue
            other = races[0].other
            note = other.loc.diagnostic(f"the unordered write: {other.who}, {other.what}", "note")
            if missing == "wait":
                msg = (f"{self.label}: load of {region} before its guarding wait: the write by {other.who} "
                       f"({other.what}, call {other.call}) is not ordered before it by any signal/wait (a missing "
                       f"dl.wait?)")
            else:
                msg = (f"{self.label}: load of {region} is after its guarding dl.wait in program order but does not "
                       f"depend on the wait's token: pass the pointer through dl.consume_token(ptr, token), or a "
                       f"compiler may move the load before the wait")
            w.report(RACE_READ, msg, loc, self.rank, self.call, region=region, notes=[note],
                     key=(self.rank, loc, other.loc, buf.label, missing))
            break
        if buf.unwritten:
            written = buf.written[buf.index(lo, hi)]
            if not written.all():
                from .report import UNINITIALIZED
                w.report(UNINITIALIZED, f"{self.label}: {what} reads {region}, which nothing wrote before "
                         f"({int((~written).sum())} element(s))", loc, self.rank, self.call, region=region,
                         key=(self.rank, loc, buf.label))
        record_read(buf, lo, hi, self.id, self.stamp, self.access(loc, self.call, what))

    def store(self, ptrs, value, mask):
        w = self.world
        loc = self.last_loc = self.session.loc()
        what = f"a store of @{self.plan.kernel}"
        vals = np.broadcast_to(np.asarray(value.data), np.shape(ptrs.data)).reshape(-1)
        for r, key, idx, pos in self._where(ptrs, mask, "a store", loc):
            buf = self._buffer(r, key, loc)
            buf.writable().reshape(-1)[idx] = _from_interp(buf.elem, vals[pos], buf.data.dtype)
            for lo, hi in _boxes(buf.shape, idx):
                w.write(self, buf, (lo, hi), loc, self.call, what)
        self._switch()

    def _switch(self) -> None:
        if self.world.rng.random() < SWITCH_RATE:
            self.yield_()

    # -- the primitives (ditron.language.core calls them on the active agent)
    def rank_value(self):
        return self._scalar(self.world.groups.local(self.rank), "int32")

    def num_ranks(self):
        return self._scalar(self.world.groups.size(self.rank), "int32")

    def _scalar(self, value: int, dtype: str):
        tl, ti = self.session.tl, self.session.ti
        ty = getattr(tl, dtype)
        return tl.tensor(ti.TensorHandle(np.array([value], dtype=getattr(np, dtype)), ty), ty)

    def _peer(self, peer, loc: Loc, what: str) -> int:
        from ..language.sim import _int
        g = self.world.peer(_int(peer), loc, self, self.call, what)
        if g is None:
            self.stop()
        return g

    def symm_at(self, ptr, peer):
        from ..language.sim import _taint, _taint_of
        s = self.session
        loc = s.loc()
        g = self._peer(peer, loc, "dl.symm_at")
        data = np.asarray(ptr.handle.data, dtype=np.uint64)
        mine = (data >> np.uint64(HEAP_BITS)).astype(np.int64) - 1
        if data.size and (mine != self.rank).any():
            bad = int(data.reshape(-1)[np.flatnonzero((mine != self.rank).reshape(-1))[0]])
            self.world.report(OUT_OF_BOUNDS, f"{self.label}: dl.symm_at of {s.describe(bad)}, which is not in this "
                              f"rank's symmetric heap", loc, self.rank, self.call)
            self.stop()
        moved = (data.astype(np.int64) + (s.base(g) - s.base(self.rank))).astype(np.uint64)
        handle = s.ti.TensorHandle(moved, ptr.handle.dtype)
        _taint(handle, _taint_of(ptr.handle))
        return s.tl.tensor(handle, ptr.type)

    def _slots(self, pad, slot, rank: int, what: str, loc: Loc):
        """(Pad on rank, slots) that pad_ptr + slot names; pad_ptr must point into one of this rank's pads."""
        s = self.session
        base = np.asarray(pad.handle.data, dtype=np.uint64).reshape(-1)
        sl = np.asarray(slot.handle.data if hasattr(slot, "handle") else slot, dtype=np.int64).reshape(-1)
        addrs = (base.astype(np.int64) + 4 * sl).astype(np.uint64)
        r, k, off = s.resolve(addrs)
        if (r != self.rank).any() or len(set(k.tolist())) != 1 or (off % 4).any():
            first = int(addrs[np.flatnonzero((r != self.rank) | (off % 4 != 0))[0]]) if \
                ((r != self.rank) | (off % 4 != 0)).any() else int(addrs[0])
            self.world.report(OUT_OF_BOUNDS, f"{self.label}: {what} at {self._near(first)}: not a slot of one of this "
                              f"rank's signal pads", loc, self.rank, self.call, key=(self.rank, loc, what))
            self.stop()
        key = s.keys[int(k[0])]
        p = self.world.pad(key, rank, self.call, loc, self)
        if p is None:
            self.stop()
        return p, (off // 4).tolist()

    def wait(self, pad, slot, value, scope, semantic, *, fence: bool = False, loc: Loc | None = None):
        from ..language.sim import _int, _taint
        w = self.world
        loc = loc or self.session.loc()
        value = _int(value)
        p, slots = self._slots(pad, slot, self.rank, "dl.wait on a slot", loc)
        what = "dl.wait"
        self._switch()
        while True:
            if semantic == "acquire":
                if w.try_acquire(self, [(p, s, value) for s in slots], loc, what):
                    if fence:
                        self.base = join(self.base, self.clock)
                    break
            elif all(p.values[s] >= value for s in slots):
                break
            else:
                s0 = next(s for s in slots if p.values[s] < value)
                p.waiters.setdefault(s0, []).append(self)
                w.block(self, Blocked(loc, lambda: f"{what} (relaxed) waits for {p.name()} slot {s0} >= {value} "
                                      f"(now {p.values[s0]})", on_signal=True, pad=(p.label, p.rank)))
            self.group = (self.rank, id(self.launch), (p.label, p.rank))
            self.yield_()
        self.group = None
        self.wait_clocks.append(self.clock.copy())
        token = self._scalar(min(p.values[s] for s in slots), "int32")
        _taint(token.handle, frozenset([len(self.wait_clocks) - 1]) if semantic == "acquire" else frozenset())
        return token

    def notify(self, pad, slot, value, peer, op, scope, semantic, *, loc: Loc | None = None):
        from ..language.sim import _int
        w = self.world
        loc = loc or self.session.loc()
        value = _int(value)
        g = self._peer(peer, loc, "dl.notify")
        p, slots = self._slots(pad, slot, g, "dl.notify of a slot", loc)
        if scope == "gpu" and g != self.rank:
            w.report(INVALID, f"{self.label}: dl.notify of rank {g} with scope 'gpu'; a notify of another rank needs "
                     f"scope 'sys' to order the writes before it", loc, self.rank, self.call)
        release = op != "clear" and semantic == "release"
        snap = self.release() if release else empty_clock()
        for s in dict.fromkeys(slots):
            if w.valid_slot(p, s, loc, self, self.call):
                w.signal(self, p, s, op, value, snap)
        self._switch()

    def consume_token(self, x, token):
        from ..language.sim import _taint, _taint_of
        ti, tl = self.session.ti, self.session.tl
        handle = ti.TensorHandle(np.array(x.handle.data, copy=True), x.handle.dtype)
        _taint(handle, _taint_of(x.handle) | (_taint_of(token.handle) if hasattr(token, "handle") else frozenset()))
        return tl.tensor(handle, x.type)

    def barrier_all(self, pad, scope):
        w = self.world
        loc = self.session.loc()
        W = w.groups.size(self.rank)
        me = w.groups.local(self.rank)
        p, (gen_slot,) = self._slots(pad, W, self.rank, "dl.barrier_all's generation slot (pad[num_ranks])", loc)
        if not w.valid_slot(p, gen_slot, loc, self, self.call):
            self.stop()
        gen = p.values[gen_slot] + 1
        p.apply(gen_slot, "set", gen, empty_clock(), self.id)
        for q in range(W):
            self.notify(pad, me, gen, q, "set", scope, "release", loc=loc)
        for q in range(W):
            self.wait(pad, q, gen, scope, "acquire", fence=True, loc=loc)



def _to_interp(elem: str, data: np.ndarray, dtype_np: np.dtype) -> np.ndarray:
    """World storage (float32 for bf16 / f16) as the interpreter holds the element type (bf16 as its uint16 bits)."""
    if elem == "bf16":
        return (np.ascontiguousarray(data, dtype=np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    return data.astype(dtype_np)


def _from_interp(elem: str, data: np.ndarray, storage: np.dtype) -> np.ndarray:
    if elem == "bf16":
        return (np.asarray(data, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    if elem == "f16":
        return np.asarray(data, dtype=np.float16).astype(np.float32)
    return np.asarray(data).astype(storage)
