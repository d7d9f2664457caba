"""CUDA-graph mode of the executor: a call is one graph replay, so its host cost is a few microseconds.

    ex = exe.executor(world, graph=True)         # decided at creation: graph and eager calls never share pads
    ys = ex.run(xs)                              # first call with these tensors: capture, then replay
    ys = ex.run(xs)                              # same tensors: replay only (the outputs are the same tensors)

Why it needs more than capturing ``run``. The host program derives its signal values from the epoch (1, 2, 3, ...),
so a captured call would bake in its epoch. Instead every call runs the program traced once with **epoch 1**, as if
on freshly zeroed pads, and the pads are made fresh cheaply:

* **Two parities of pads.** The heap holds every signal pad (1-d i32 symmetric buffer) twice, parity 0 under its
  name and parity 1 as ``name@1`` (``heap.program_layout``; each parity's pads side by side). Call e uses parity
  p = e % 2; barrier counts start again at 1 every call.
* **Zeroing.** The first thing call e enqueues on each local rank's stream 0 zeroes that rank's OWN pads of parity
  1 - p, the set call e + 1 uses. This is safe because (1) every write into those pads came from call e - 1, and
  each writer made it before arriving at call e - 1's final barrier, which this rank passed before call e began on
  its stream 0 (the program ends with a barrier on stream 0 after joining its side streams: ``check_graph_program``
  refuses, in a real world, programs whose last action on stream 0 is not a barrier); and (2) a peer writes parity
  1 - p again only in call e + 1, after passing call e's barrier, which needs this rank's arrival, enqueued on stream
  0 after the zeroing. Side streams of call e touch only parity p. Both parities are zero before the first call (the
  heap is zeroed). Where call e ends with the runtime barrier kernel on stream 0 (every real-world program does,
  and graph mode runs stream 0's barriers with it), that kernel does the zeroing instead of a node at the start:
  it zeroes parity 1 - p, then arrives (release, after a CTA barrier). Still safe: (1) holds as before, call e - 1
  having ended on this rank's stream 0 before call e began, and (2) a peer writes parity 1 - p again only after
  passing call e's barrier, that is after this arrival. One node less per call (~1.3 us on an H200). In a virtual
  world all ranks are in one graph whose replays run one after another on the caller's stream (every stream joins
  back into it), so call e has ended everywhere before call e + 1 starts. A program that fences itself
  (``HostProgram.fence == "waits"``: a push all-reduce, which has no end barrier) zeroes with the node at the start:
  every write into this rank's pads of parity 1 - p came from a peer's call e - 1 and this rank's call e - 1 waited
  for each of them, and a peer writes them again in call e + 1 only after its call e waited for this rank's
  signals of call e, enqueued after the zeroing. Its rotating buffers (the inboxes) have a copy per parity too.
  A program whose every pad is consumed (``ditron.consumed``: each slot is cleared by its one waiter in the call
  that waited, a compare-and-swap of the value it waited for back to 0, or -- a count with many waiters, AG+GEMM
  in one launch -- the last of its waiters takes the call's count off) zeroes nothing: call e leaves its parity's
  pads zero, and a peer signals them again only in call e + 2, after waiting (call e + 1) on this rank's signals
  of call e + 1, enqueued after call e ended (a push all-reduce: one node less, ~1.3 us per call on an H200;
  AG+GEMM 8B M = 128: 1.2-1.7 us, benchmarks/results/ablation_ag_consumed.csv).
* **Capture.** One ``torch.cuda.CUDAGraph`` per (parity, key); key = address, dtype, shape, strides and device of
  every input and output tensor, so calls with the same tensors replay. All local ranks' streams are captured into
  one graph: they fork from the capture stream through an event and join back into it at the end. Copies and
  kernel launches (the TMA scratch of each launch site is the arena reserved at warm-up) are captured as they are
  enqueued eagerly; nothing allocates during capture. Waits and signals: a memop node costs ~2.5 us of host time
  at every launch of the graph, a kernel node ~0.4 us (measured on an H200: 20 write memops 50 us, 20 wait memops
  33 us, 20 kernels 9 us per replay), but a graph need not run a side stream's kernel beside a kernel that spins
  waiting for it (a GEMM+RS whose comm lane waited and signalled with kernels deadlocked), and a memop needs no SM.
  So stream 0, where nothing spins beside its waits and signals, uses the runtime kernels, and side streams use
  memops (after a probe that the driver captures them). In-kernel waits get their epoch-derived value (epoch 1) as a plain operand: constant, as it must be.
  The LRU keeps ``GRAPH_CACHE`` keys; before a capture the executor waits for outstanding calls.
* **Replay.** ``cuGraphLaunch`` of the graph's instantiation on the caller's stream and ``cuEventRecord`` of one
  event for the watchdog after it, in one call from Python (``DriverMemops.graph_launcher``: the compiled
  ``hotpath.c`` where it builds; torch's ``graph.replay()`` and ``record()`` where the driver entry points are
  missing); the event's milestone (a ``GraphCall`` that knows every wait of the captured program,
  so a stall names the first unsatisfied wait of each rank and stream); with ``sync=True`` the host wait and error
  check as in eager mode. Completed calls leave the watch every ``PRUNE_AT`` calls: after one event query when
  they all ran on one stream and the newest is done, else a bisection for the newest done. Events and milestones
  come from a ring of ``EVENT_RING``. All of it is one closure per tensor set (``GraphEntry.enqueue``), every
  lookup bound once.
* **Bound calls.** ``Executor.bind(inputs, outputs)`` checks and keys a tensor set once and returns a
  ``BoundCall``: calling it replays straight away (no key, no lookup). ``ditron.ops`` keeps one per set of tensors
  it was called with, so a repeated op call costs its key (address, dtype, shape, strides of each tensor) and one
  replay; and per op its last call in a real world as ``BoundCall.again``, a closure that checks the same tensor
  objects are unchanged and enqueues, in one frame. On a small all-reduce the host path is the call's cost: a
  2xH200 host, 8 KB, the ops call 7.0-7.5 us per call against 9.2-9.5 for the layered path of session 9 (same
  process, interleaved; torch's two-shot 8.1-8.6), on a slower host 10.9-11.6 against 12.2-13.9 (torch 10.3-11.9):
  benchmarks/results/ablation_host_path.csv.
* **Outputs.** Given outputs are written in place. Without them, the executor allocates outputs once per key and
  returns those same tensors on every call with the same inputs: the next such call overwrites them (as with
  torch's CUDA graphs). Inputs must be contiguous (a graph reads fixed addresses).

Real worlds: every rank must create its executor with the same ``graph`` setting (the heap layout differs).
"""
from __future__ import annotations

import warnings
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import DitronRuntimeError
from .memops import DriverMemops, MemopError
from .program import BarrierAction, Buf, HostProgram, LaunchAction, WaitAction, without_entry_fork
from .timeouts import Blocked, Milestone

GRAPH_CACHE = 8            # keys (tensor sets) whose graphs are kept
EVENT_RING = 64            # completion events reused by graph calls
PRUNE_AT = 16              # completed graph calls are dropped from the watch once this many are queued
GRAPH_KEY = (-1, -1)       # the watch queue of graph calls


class GraphModeError(DitronRuntimeError):
    """graph=True asked of a program or call that a CUDA graph cannot replay."""


def check_graph_program(program: HostProgram, ranks, world_size: int, real: bool) -> dict[int, list]:
    """Each local rank's trace at epoch 1. In a real world of several ranks (each process replays its own graph),
    after checking that the last action on stream 0 is a barrier, or that the program fences itself by its waits:
    what makes the parity reset safe (module doc). In a
    virtual world every rank is in the one graph, whose replays run one after the other on the caller's stream, and
    a world of one rank has no peer: there the calls are ordered without a barrier (W = 1 programs have none)."""
    traces = {}
    for r in ranks:
        trace = without_entry_fork(program.trace(r, world_size, 1), r)
        last = next((a for a in reversed(trace) if a.stream == 0), None)
        if real and world_size > 1 and program.fence != "waits" and not isinstance(last, BarrierAction):
            what = "does nothing on stream 0" if last is None else \
                f"ends stream 0 with a {type(last).__name__.removesuffix('Action').lower()}" + \
                (f" at {last.loc}" if last.loc else "")
            raise GraphModeError(f"graph=True: the host program '{program.name}' on rank {r} {what}; CUDA-graph mode "
                                 "in a real world needs every call to end with a barrier on stream 0 after joining "
                                 "its side streams (so that the next call may reset the signal pads). Run it with "
                                 "graph=False")
        traces[r] = trace
    return traces


@dataclass
class GraphCall:
    """The watchdog's view of one captured program: its parity and, per (rank, stream), its waits in order
    (stream waits, barrier waits as WaitAction(where="barrier"), launches that wait in-kernel on a pad)."""

    parity: int
    waits: dict[tuple[int, int], list[Any]]


@dataclass
class GraphEntry:
    tensors: dict[int, list[Any]]        # per local rank: the program's argument tensors
    result: Any                          # executor-owned outputs (None when the caller gives outputs)
    graphs: list[Any]                    # per parity: the captured graph, or None
    execs: list[int] = field(default_factory=lambda: [0, 0])  # per parity: its instantiation's raw handle
    live: bool = True                    # False once evicted from the LRU (or the executor cleared it)
    enqueue: Any = None                  # GraphRunner._enqueuer(this entry): a call's launch, bound once


class BoundCall:
    """One set of tensors bound to a graph-mode executor (``Executor.bind``): calling it replays that set's graph
    with no key to build and nothing to look up -- the cheapest host path to a call. The tensors must keep their
    storage (a graph reads fixed addresses). If the LRU evicted the set meanwhile, the call binds it again."""

    __slots__ = ("runner", "entry", "inputs", "outputs")

    def __init__(self, runner: "GraphRunner", entry: GraphEntry, inputs, outputs):
        self.runner, self.entry, self.inputs, self.outputs = runner, entry, inputs, outputs

    @property
    def live(self) -> bool:
        """Whether a call replays at once (the executor usable and the set still cached)."""
        ex = self.runner.ex
        return self.entry.live and not ex._closed and ex._broken is None

    def __call__(self, sync: bool = True):
        """One call, as ``Executor.run(inputs, outputs, sync=sync)`` with the bound tensors."""
        runner = self.runner
        ex = runner.ex
        if ex._closed or ex._broken:
            ex._check_usable()
        entry = self.entry
        if not entry.live:
            entry = self.entry = runner.entry(self.inputs, self.outputs)
        if not entry.enqueue(sync):  # a graph to capture first, or another current device
            return runner.replay(entry, self.outputs, sync)
        return _results(entry, self.outputs, ex.world.is_virtual)

    def again(self, world, tensors, out, params) -> Callable[..., bool]:
        """The cheapest host path to this call again, for ditron.ops (one per op: its last call in a real world):
        a closure ``again(world, tensors, out, params, sync) -> bool`` that enqueues a call and returns True when it
        is given the same world, tensor objects and out as now, unchanged (address, element type, shape, still
        contiguous: what the graph bakes in), parameters equal to ``params``, and the call still replays at once
        (the set cached, the executor usable); else it returns False, having done nothing. One expression and one
        frame where the layered path took eight: the host path of a small all-reduce is the call's cost."""
        runner, entry = self.runner, self.entry
        ex, enqueue, outputs, params = runner.ex, entry.enqueue, self.outputs, dict(params)
        if len(tensors) == 1:
            (x,) = tensors
            px, dx, sx = x.data_ptr(), x.dtype, x.shape
            po, do, so = out.data_ptr(), out.dtype, out.shape

            def again(w, given, o, ps, sync: bool) -> bool:
                try:  # identity first (== on tensors would compare their elements)
                    same = (w is world and o is out and len(given) == 1 and given[0] is x and ps == params and
                            x.data_ptr() == px and o.data_ptr() == po and x.dtype is dx and o.dtype is do and
                            x.shape == sx and o.shape == so and x.is_contiguous() and o.is_contiguous() and
                            entry.live and not ex._closed and ex._broken is None)
                except (TypeError, AttributeError, RuntimeError):
                    return False  # not tensors: the full path refuses them
                if not same:
                    return False
                if not enqueue(sync):
                    runner.replay(entry, outputs, sync)
                return True
        else:
            mine = tuple(tensors)
            snapshot = tuple((t, t.data_ptr(), t.dtype, t.shape) for t in (*tensors, out))

            def again(w, given, o, ps, sync: bool) -> bool:
                try:
                    if w is not world or o is not out or len(given) != len(mine) or ps != params:
                        return False
                    for t, m in zip(given, mine):
                        if t is not m:
                            return False
                    for t, ptr, dtype, shape in snapshot:
                        if t.data_ptr() != ptr or t.dtype is not dtype or t.shape != shape or not t.is_contiguous():
                            return False
                except (TypeError, AttributeError, RuntimeError):
                    return False
                if not (entry.live and not ex._closed and ex._broken is None):
                    return False
                if not enqueue(sync):
                    runner.replay(entry, outputs, sync)
                return True
        again.bound = self
        return again


def _results(entry: GraphEntry, outputs, virtual: bool):
    """What a graph call returns: the given outputs (fresh lists), else the entry's own."""
    if outputs is None:
        return entry.result
    return [list(row) for row in outputs] if virtual else list(outputs)


class TorchGraphs:
    """Capture and replay through ``torch.cuda.CUDAGraph`` (the CPU tests substitute a stand-in)."""

    def __init__(self, capture_stream):
        import torch
        self.capture_stream = capture_stream
        # bound once: these run on every replay (torch's Python wrapper of the first costs as much again)
        self.device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device  # current index
        self.current = torch._C._cuda_getCurrentRawStream  # (device index) -> raw handle of its current stream

    def capture(self, body) -> Any:
        """A graph of what ``body(capture_stream)`` enqueues (it may fork to other streams and must join back).

        Python's cyclic garbage collector is off while it captures: whatever it would free then runs its finalizer
        on this thread, inside the capture, and a finalizer that calls CUDA in a way no capture allows either
        invalidates the capture or, in C++, aborts the process (a torch symmetric-memory tensor's free does: one
        2xH200 benchmark run in about eight died so, in a capture of the case after the one whose baseline left
        such a tensor in a reference cycle). torch's own ``torch.cuda.graph`` collects before it captures for the
        same reason; the garbage here waits for the next collection instead."""
        import gc

        import torch
        graph = torch.cuda.CUDAGraph()
        cap = self.capture_stream
        collecting = gc.isenabled()
        gc.disable()
        try:
            with torch.cuda.stream(cap):
                graph.capture_begin(capture_error_mode="thread_local")
                try:
                    body(cap)
                except BaseException:
                    torch.cuda.set_stream(cap)
                    try:
                        graph.capture_end()
                    except RuntimeError:
                        pass  # the capture was invalidated by the error being raised
                    raise
                torch.cuda.set_stream(cap)
                graph.capture_end()
        finally:
            if collecting:
                gc.enable()
        return graph

    def executable(self, graph) -> int:
        """The raw handle of the graph's instantiation (0 where torch does not expose it)."""
        raw = getattr(graph, "raw_cuda_graph_exec", None)
        return raw() if raw is not None else 0

    def replay(self, graph) -> None:
        """Launch the graph on the current stream through torch (a call's hot path launches through the driver:
        ``GraphRunner._enqueuer``)."""
        graph.replay()

    def launch(self, graph, event) -> None:
        """``replay``, then ``event`` recorded on the same stream, through torch: where the driver's launcher is
        missing."""
        graph.replay()
        event.record()


def tensor_key(x) -> tuple:
    """What a graph bakes in about a tensor: its address (unique across devices: unified addressing), element type,
    shape and strides."""
    try:
        return (x.data_ptr(), x.dtype, x.shape, x.stride())
    except (AttributeError, TypeError, RuntimeError):
        return ("?", id(x))  # never equal to a tensor's key: the call is checked in full (and refused)


def tensors_key(tensors, virtual: bool) -> tuple:
    """What a graph bakes in about a call's tensors (virtual world: one list per rank), as a key (ditron.ops)."""
    if virtual:
        return tuple(tuple(map(tensor_key, per_rank)) for per_rank in tensors)
    return tuple(map(tensor_key, tensors))


class GraphRunner:
    """The graph side of one Executor (graph=True): keys, captures, replays, and what the watchdog needs."""

    def __init__(self, ex, signal_via: str, wait_via: str):
        import torch
        self._torch = torch
        self.ex = ex
        self.traces: dict[int, list] = ex._graph_traces
        self.backend = TorchGraphs(ex._stream())
        self._index = ex.device.index
        self.entries: OrderedDict[tuple, GraphEntry] = OrderedDict()
        self._copied: dict[tuple, tuple[BoundCall, list]] = {}  # copy_in: per shapes, (bound call, its inputs)
        self.calls = [self._graph_call(p) for p in (0, 1)]
        # every pad consumed (each slot cleared by its waiter, device.CONSUMED_ATTR): a call leaves its parity's
        # pads zero, and nothing zeroes them
        self.self_clearing = all(ex.program.allocs[j].consumed for j in ex._pads)
        self.captures = 0
        self._streams: set[int] = set()   # the streams the watched graph calls were enqueued on
        # One event per call in flight, reused round-robin (creating one costs as much as a small replay). Reusing
        # an event whose milestone is still queued only records it later on the same stream: the watchdog then
        # sees that call complete a little later, never earlier.
        self._events = [torch.cuda.Event() for _ in range(EVENT_RING)]
        self._driver = DriverMemops.load()  # for cheap event records (None: torch records them)
        current = torch.cuda.current_stream(ex.device)
        for ev in self._events:  # created now (torch makes an event at its first record): raw handles from here on
            ev.record(current)
        self._raw_events = [ev.cuda_event for ev in self._events]  # read once: torch's property costs a call
        # and a milestone per event, refilled at each use: the watch queue holds the latest calls (it is pruned from
        # the front), so while it holds fewer than EVENT_RING, slot epoch % EVENT_RING is not among them
        self._milestones = [Milestone(ev, -1, -1, None, 0) for ev in self._events]
        # what a call's hot path (_enqueuer) reads, bound once
        self._queue = ex.watch.queues.setdefault(GRAPH_KEY, deque())
        self._device, self._current = self.backend.device, self.backend.current
        try:
            for p in (0, 1):  # both parities zero now, and the zeroing kernel loaded before anything can spin
                for r in ex.ranks:
                    ex._zero(ex._diag, self.span(p, r))
        finally:
            torch.cuda.set_stream(current)
        torch.cuda.synchronize(ex.device)
        if ex._memops is not None or ex._signal_drv is not None:
            self._probe_capture(signal_via, wait_via)

    def span(self, parity: int, rank: int):
        offset, nbytes = self.ex._pad_spans[parity]
        return self.ex.heap.raw(rank, offset, nbytes)

    # ---------------------------------------------------------------------------------------- set-up
    def _graph_call(self, parity: int) -> GraphCall:
        ex = self.ex
        waits: dict[tuple[int, int], list[Any]] = {}
        for r in ex.ranks:
            counts: dict[int, int] = {}
            for a in self.traces[r]:
                if isinstance(a, BarrierAction):
                    n = counts[a.pad.index] = counts.get(a.pad.index, 0) + 1
                    a = WaitAction(a.stream, a.loc, a.site, a.pad, n, tuple(range(ex.W)), "barrier")
                elif not (isinstance(a, WaitAction) or (isinstance(a, LaunchAction) and self._names_its_wait(a))):
                    continue
                waits.setdefault((r, a.stream), []).append(a)
        return GraphCall(parity, waits)

    def _names_its_wait(self, a: LaunchAction) -> bool:
        """Whether a launch waits in-kernel on a pad the watchdog can read (its record names the pad and value)."""
        info = self.ex.program.kernels[a.kernel]
        spec, args = info.wait or {}, list(info.args or [])
        if not info.spins or spec.get("arg") not in args or spec.get("value_arg") not in args:
            return False
        pad, value = a.operands[args.index(spec["arg"])], a.operands[args.index(spec["value_arg"])]
        return isinstance(pad, Buf) and pad.kind == "sym" and pad.index in self.ex._pads and isinstance(value, int)

    def _probe_capture(self, signal_via: str, wait_via: str) -> None:
        """Capture and replay a graph of a driver write, wait and write on a scratch word; if the driver cannot
        capture memops, fall back to the kernels (or refuse, when memops were asked for)."""
        import torch
        ex = self.ex
        drv = ex._memops or ex._signal_drv
        word = torch.zeros(2, dtype=torch.int32, device=ex.device)
        torch.cuda.synchronize(ex.device)

        def body(cap):
            h = cap.cuda_stream
            drv.write(h, word.data_ptr(), 1)
            drv.wait_geq(h, word.data_ptr(), 1)
            drv.write(h, word.data_ptr() + 4, 2)
        try:
            graph = self.backend.capture(body)
            self.backend.replay(graph)  # the probe is run once
            torch.cuda.synchronize(ex.device)
            got = word.tolist()
            problem = None if got == [1, 2] else f"a replayed probe wrote [1, 2] and read back {got}"
        except (RuntimeError, MemopError) as err:
            problem = f"{type(err).__name__}: {err}"
        if problem is None:
            return
        if "memop" in (signal_via, wait_via):
            raise GraphModeError(f"graph=True: stream memory operations cannot be captured into a CUDA graph here "
                                 f"({problem}); use signal_via='kernel' and wait_via='kernel'")
        warnings.warn(f"stream memory operations cannot be captured into a CUDA graph here ({problem}): graph mode "
                      "uses the wait and signal kernels on every stream", RuntimeWarning, stacklevel=6)
        ex._memops = ex._signal_drv = ex._write_value = None
        ex.wait_memop = ex.signal_memop = False

    # ---------------------------------------------------------------------------------------- calls
    def key(self, inputs, outputs) -> tuple:
        """The call's tensors as a key, cheaply (no checks: a key never seen is checked in full by _new_entry, and
        the structure -- how many rows, how many tensors per row -- is part of the key)."""
        parts: list[Any] = []
        for group in (inputs, outputs):
            if group is None:
                parts.append(None)
                continue
            parts.append(len(group))
            if self.ex.world.is_virtual:
                for row in group:
                    if isinstance(row, (list, tuple)):
                        parts.append(len(row))
                        parts += [tensor_key(x) for x in row]
                    else:
                        parts.append(("?", id(row)))
            else:
                parts += [tensor_key(x) for x in group]
        return tuple(parts)

    def entry(self, inputs, outputs) -> GraphEntry:
        """The cached entry of this set of tensors (made, and checked in full, the first time)."""
        key = self.key(inputs, outputs)
        entry = self.entries.get(key)
        if entry is None:
            return self._new_entry(key, inputs, outputs)
        self.entries.move_to_end(key)
        return entry

    def run(self, inputs, outputs, sync: bool):
        return self.replay(self.entry(inputs, outputs), outputs, sync)

    def copy_in(self, inputs, outputs, sync: bool, fresh: tuple[int, ...] = (0,)):
        """A graph call with fresh tensors at the input positions ``fresh`` (a model's activations): they are copied
        into inputs of the executor's own, captured once per set of shapes (the other inputs, the weights, are bound
        by address as in ``run``), and the graph replays -- one copy per fresh input instead of a capture per new
        tensor set. The results are fresh tensors (a copy of the graph's outputs; ``outputs``: copied into those).
        Calls must come on one stream (the next call's copy overwrites the inputs the previous replay read)."""
        ex = self.ex
        torch = self._torch
        rows = ex._per_rank(inputs, "inputs", len(ex.program.inputs))
        key = tuple(tuple((x.shape, x.dtype, x.device) if k in fresh else tensor_key(x) for k, x in enumerate(row))
                    for row in rows)
        found = self._copied.get(key)
        if found is None or not found[0].live:
            static = [[torch.empty(x.shape, dtype=x.dtype, device=ex.device) if k in fresh else x
                       for k, x in enumerate(row)] for row in rows]
            bound = ex.bind(static if ex.world.is_virtual else static[0], None)
            found = self._copied[key] = (bound, static)
            while len(self._copied) > GRAPH_CACHE:
                self._copied.pop(next(iter(self._copied)))
        bound, static = found
        current = torch.cuda.current_stream(ex.device)
        for srow, row in zip(static, rows):  # (the executor's copy: on the current stream, before the replay)
            for k in fresh:
                if k < len(row):
                    ex._copy(current, row[k], srow[k])
        result = bound(False)
        current = torch.cuda.current_stream(ex.device)  # (the replay's stream: the same one)
        per_rank = result if ex.world.is_virtual else [result]
        out = [[torch.empty_like(y) for y in ys] for ys in per_rank] if outputs is None else \
            ex._per_rank(outputs, "outputs", len(ex.program.outputs))
        for given, ys in zip(out, per_rank):
            for o, y in zip(given, ys):
                ex._copy(current, y, o)
        if sync:
            ex._synchronize()
            torch.cuda.current_stream(ex.device).synchronize()
        return out if ex.world.is_virtual else out[0]

    def replay(self, entry: GraphEntry, outputs, sync: bool):
        """One call of ``entry``'s tensors: on the executor's device, the next epoch's parity graph captured the
        first time, then ``entry.enqueue``."""
        ex = self.ex
        if self._device() != self._index:  # the context manager costs more than a replay
            with self._torch.cuda.device(ex.device):
                return self.replay(entry, outputs, sync)
        parity = (ex.epoch + 1) & 1
        if entry.graphs[parity] is None:
            graph = entry.graphs[parity] = self._capture(entry, parity)
            entry.execs[parity] = self.backend.executable(graph)
        if not entry.enqueue(sync):
            raise DitronRuntimeError("a graph call could not be enqueued after its capture")  # not reached
        return _results(entry, outputs, ex.world.is_virtual)

    def _enqueuer(self, entry: GraphEntry):
        """One call of ``entry``'s graphs on the caller's stream, as a closure with every lookup bound once (each
        saves a fraction of a microsecond, and a small op's call is its host path): the next epoch's parity graph,
        its completion event and milestone for the watchdog, with ``sync`` the host wait. Returns False, having
        done nothing, where ``replay`` must prepare the call: another current device, or that parity's graph not
        captured yet."""
        ex, index, get_device, current = self.ex, self._index, self._device, self._current
        graphs, execs, calls = entry.graphs, entry.execs, self.calls
        queue, streams, prune = self._queue, self._streams, self._prune
        events, raw_events, milestones = self._events, self._raw_events, self._milestones
        driver, launch = self._driver, self.backend.launch  # launch: torch's, where the driver cannot
        driver_launch = None if driver is None else driver.graph_launcher()  # both driver calls in one

        def enqueue(sync: bool) -> bool:
            epoch = ex.epoch + 1
            parity = epoch & 1
            graph = graphs[parity]
            if graph is None or get_device() != index:
                return False
            ex.epoch = epoch
            stream = current(index)
            if len(queue) >= PRUNE_AT:  # querying events costs ~2 us each: not on every call
                prune()
            i = epoch % EVENT_RING
            graph_exec, event = execs[parity], raw_events[i]
            if driver_launch is not None and graph_exec and event:  # the graph, then its event on the same stream
                code = driver_launch(graph_exec, stream, event)
                if code:
                    raise driver.fail(code)
            else:  # torch's replay and record
                launch(graph, events[i])
            streams.add(stream)
            if len(queue) < EVENT_RING:  # the calls queued are the latest: slot i is not among them
                m = milestones[i]
                m.action, m.epoch = calls[parity], epoch
            else:
                m = Milestone(events[i], -1, -1, calls[parity], epoch)
            queue.append(m)
            if sync:
                ex._synchronize()
            return True
        return enqueue

    def _prune(self) -> None:
        """Drop the completed calls from the watch. When they were all enqueued on one stream, a call done means
        every earlier one is: one query when the newest is done, else a bisection for the newest done (a few
        queries drop most of the queue, where querying from the oldest costs one per call: ~2 us each); calls on
        several streams are queried one by one."""
        queue = self._queue
        if len(self._streams) != 1:
            self.ex.watch.prune()
        elif queue[-1].event.query():
            queue.clear()
        else:
            lo, hi = 0, len(queue) - 1  # the newest done is below hi; queue[:lo] are done
            while lo < hi:
                mid = (lo + hi) // 2
                if queue[mid].event.query():
                    lo = mid + 1
                else:
                    hi = mid
            for _ in range(lo):
                queue.popleft()
        if not queue:
            self._streams.clear()

    def _new_entry(self, key: tuple, inputs, outputs) -> GraphEntry:
        import torch
        ex = self.ex
        for r, row in zip(ex.ranks, ex._per_rank(inputs, "inputs", len(ex.program.inputs))):
            for spec, x in zip(ex.program.inputs, row):
                if isinstance(x, torch.Tensor) and not x.is_contiguous():
                    raise GraphModeError(f"graph=True: input argument {spec.index} of rank {r} is not contiguous; a "
                                         "CUDA graph reads fixed addresses, so pass x.contiguous() (and keep it for "
                                         "the next calls)")
        ex._synchronize()  # nothing in flight from here: evicted graphs are idle, nothing spins while we allocate
        tensors, result = ex._bind_io(inputs, outputs)
        while len(self.entries) >= GRAPH_CACHE:
            self.entries.popitem(last=False)[1].live = False
        entry = self.entries[key] = GraphEntry(tensors, result if outputs is None else None, [None, None])
        entry.enqueue = self._enqueuer(entry)
        return entry

    def _capture(self, entry: GraphEntry, parity: int):
        """The graph of one call on parity ``parity``: zero the other parity's own pads on each rank's stream 0,
        then the epoch-1 trace of every local rank, forked from and joined into the capture stream."""
        import torch
        ex = self.ex
        ex._synchronize()
        ex._use_parity(parity)
        ex._barriers = {}
        try:
            work = []
            for r in ex.ranks:
                for a in self.traces[r]:
                    if (r, a.site) not in ex._checked_sites:
                        ex._check_action(r, a)
                    work.append(ex._prepare(r, a, entry.tensors[r]))
            spans = {r: self.span(1 - parity, r) for r in ex.ranks}
            ex._final_clear = {r: (b, spans[r].view(torch.int32)) for r in ex.ranks
                               if (b := self._clearing_barrier(r)) is not None}

            def body(cap):
                start = torch.cuda.Event()
                start.record(cap)
                for s in ex.streams.values():
                    s.wait_event(start)
                for r in ex.ranks:
                    if r not in ex._final_clear and not self.self_clearing:
                        ex._zero(ex.streams[(r, 0)], spans[r])
                for enqueue in work:
                    enqueue()
                torch.cuda.set_stream(cap)
                for s in ex.streams.values():
                    end = torch.cuda.Event()
                    end.record(s)
                    cap.wait_event(end)
            ex._capturing = True
            graph = self.backend.capture(body)
            self.captures += 1
            return graph
        finally:
            ex._capturing = False
            ex._barriers = {}
            ex._final_clear = {}
            ex._use_parity(0)

    def _clearing_barrier(self, rank: int):
        """The barrier that ends ``rank``'s call on stream 0, where the runtime barrier kernel runs it and can zero
        the rank's pads of the other parity before arriving (else None: the call starts with a zeroing node)."""
        ex = self.ex
        last = next((a for a in reversed(self.traces[rank]) if a.stream == 0), None)
        kernel = ex.program.barrier_kernel
        stream = ex.streams[(rank, 0)]
        if not isinstance(last, BarrierAction) or not kernel or \
                "clear_words" not in {a.name for a in ex._kernel(kernel).args} or \
                not (ex._signals_by_kernel(rank, stream) and ex._waits_by_kernel(rank, stream)):
            return None
        return last

    # ---------------------------------------------------------------------------------------- watchdog
    def blocked(self, m: Milestone, pads) -> list[Blocked]:
        """The first unsatisfied wait of each (rank, stream) of the stalled graph call."""
        call: GraphCall = m.action
        out = []
        for (rank, stream), actions in call.waits.items():
            for a in actions:
                b = self.ex._blocked(Milestone(None, rank, stream, a, m.epoch), pads, call.parity)
                if b is not None:
                    out.append(b)
                    break
        return out

    def clear(self) -> None:
        self._copied.clear()
        for entry in self.entries.values():
            entry.live = False
        self.entries.clear()


__all__ = ["GRAPH_CACHE", "BoundCall", "GraphCall", "GraphModeError", "GraphRunner", "TorchGraphs", "check_graph_program",
           "tensor_key", "tensors_key"]
