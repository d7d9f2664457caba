"""Call plans: an op call enqueued inside the caller's own CUDA-graph capture (ditron.torch_ops), so that every
replay of the caller's graph is a correct call.

Why a plan. An eager call (``Executor.run``) derives its signal values from the call's epoch (1, 2, 3, ...): captured
as it runs, it would bake one epoch in, and the second replay of the caller's graph would find the pads holding the
first replay's values (a wait satisfied before its peer signalled). Graph mode (``graphs``) solves this with two
parities of pads alternating between calls, which a single capture cannot alternate. So a captured call is two
steps, each a graph-mode call traced once with epoch 1 (see ``graphs`` for the proof of each zeroing):

* **A**, parity 0: the own pads of parity 1 zeroed first (or by the final barrier kernel), then the program's trace.
* **B**, parity 1, one of:
  - ``barrier`` (a program whose last action on stream 0 is a barrier, after its side streams joined): only that
    barrier again, on parity 1's pads, zeroing the own pads of parity 0 before it arrives. Safe: every write into
    this rank's parity-0 pads came from A and was made before its writer arrived at A's final barrier, which this
    rank passed; a peer writes them again only in the next replay's A, after passing B's barrier, which needs this
    rank's arrival, enqueued after the zeroing. Symmetrically for A's zeroing of parity 1 (written only by B's
    arrivals, all seen before this rank passed B). The rotating buffers of parity 0 are reused by the next A only
    after B's barrier, that is after every rank finished A. One barrier more per call.
  - ``handshake`` (a program with pads but no final barrier on stream 0: it fences by its waits, as a push
    all-reduce or ditron's one-launch AG+GEMM / GEMM+RS / GEMM+AR do, and has no runtime barrier kernel): on stream
    0, the own pads of parity 0 zeroed, then a barrier by driver memops (write-value with a system fence, wait-value)
    on the parity-1 copy of one of its pads. Safe as above: every write into this rank's parity-0 pads came from a
    peer's A and this rank's A waited for each of them (the program fences by its waits), and a peer writes them
    again only in the next A, after the handshake, which needs this rank's arrival after the zeroing; the
    handshake's pad (parity 1) is written only by handshakes, and zeroed by the next A before this rank's next
    arrival. 2W memop nodes (a few microseconds of host time at each launch of the caller's graph).
  - ``twice`` (no final barrier and no driver memops): the whole call again on parity 1, so that the replays run
    parities 0, 1, 0, 1, ... as graph mode does. It computes the same outputs again (the inputs are unchanged):
    correct, at twice the cost.
  - ``once``: a program without signal pads needs no B.

The plan owns its graph-mode executor (its own symmetric heap: never shared with ``ditron.ops``' graph-mode calls,
whose parities alternate by epoch). It is made by ``prepare`` outside any capture, on the op's first eager call
(ditron.torch_ops does it), since making an executor allocates and synchronises, which no capture allows; a capture
that finds no plan is refused with an error that says to run the step eagerly once before capturing. Nothing of a
captured call is watched by the executor's watchdog (a graph replay is the caller's); errors recorded by the wait
kernels surface at the next ``Executor.synchronize`` of the plan's executor (``synchronize_plans``). A plan's heap
must outlive every graph that captured it: close the plans (``close_plans``, ditron.torch_ops.close) only after the
caller's graphs are released.
Imports torch only (never mlir).
"""
from __future__ import annotations

import copy
import dataclasses
import gc
from typing import Any

from ..errors import DitronError, DitronRuntimeError
from .program import BarrierAction


class CaptureNotPreparedError(DitronRuntimeError):
    """A ditron op captured into a CUDA graph before its capture plan was made by an eager call."""


class CapturePlan:
    """One executable in one world, enqueued inside the caller's CUDA-graph capture (see the module doc)."""

    def __init__(self, exe: Any, world: Any):
        from .executor import Executor
        self.ex = Executor(exe, world, graph=True)
        traces = self.ex._graph_traces
        self.closing: dict[int, BarrierAction] = {}
        for r in self.ex.ranks:
            last = next((a for a in reversed(traces[r]) if a.stream == 0), None)
            if isinstance(last, BarrierAction):
                self.closing[r] = last
        ex = self.ex
        W = ex.W
        # the handshake's pad: the first pad with a slot per rank (its parity-1 copy; step B binds nothing else)
        self.handshake_pad = next((j for j in ex._pads if ex.program.allocs[j].shape[0] >= W), None)
        if not ex._pads:
            self.mode = "once"
        elif len(self.closing) == len(ex.ranks):
            self.mode = "barrier"
        elif self.handshake_pad is not None and ex._signal_drv is not None and ex._memops is not None:
            self.mode = "handshake"
        else:
            self.mode = "twice"
        self.captures = 0

    def enqueue(self, inputs, outputs) -> None:
        """Enqueue one call on the current stream, which is capturing (inputs / outputs as for Executor.run; the
        outputs are given)."""
        import torch
        ex = self.ex
        ex._check_usable()
        with torch.cuda.device(ex.device):
            cap = torch.cuda.current_stream(ex.device)
            tensors, _ = ex._bind_io(inputs, outputs)
            collecting = gc.isenabled()
            gc.disable()  # a finalizer run inside the capture may call CUDA as no capture allows (graphs.TorchGraphs)
            try:
                ex._capturing = True
                self._step(cap, tensors, 0, whole=True)
                if self.mode == "barrier":
                    self._step(cap, tensors, 1, whole=False)
                elif self.mode == "handshake":
                    self._handshake(cap)
                elif self.mode == "twice":
                    self._step(cap, tensors, 1, whole=True)
                self.captures += 1
            finally:
                ex._capturing = False
                ex._barriers = {}
                ex._final_clear = {}
                ex._use_parity(0)
                torch.cuda.set_stream(cap)
                if collecting:
                    gc.enable()

    def _step(self, cap, tensors, parity: int, *, whole: bool) -> None:
        """One graph-mode call on ``parity`` (``whole``: the program's trace, else its closing barrier alone),
        zeroing the own pads of the other parity first (or in the final barrier kernel), forked from and joined into
        the capture stream ``cap``."""
        import torch
        ex, runner = self.ex, self.ex._graphs
        ex._use_parity(parity)
        ex._barriers = {}
        work = []
        for r in ex.ranks:
            actions = ex._graph_traces[r] if whole else [self.closing[r]]
            for a in actions:
                if (r, a.site) not in ex._checked_sites:
                    ex._check_action(r, a)
                work.append(ex._prepare(r, a, tensors[r]))
        zero = {r: runner.span(1 - parity, r) for r in ex.ranks} if ex._pads else {}
        ex._final_clear = {}
        if zero:
            for r in ex.ranks:
                b = runner._clearing_barrier(r)
                if b is not None and (whole or b is self.closing[r]):
                    ex._final_clear[r] = (b, zero[r].view(torch.int32))
        start = torch.cuda.Event()
        start.record(cap)
        for s in ex.streams.values():
            s.wait_event(start)
        for r in ex.ranks:
            if zero and r not in ex._final_clear:  # (harmless where every pad is consumed: they are zero)
                ex._zero(ex.streams[(r, 0)], zero[r])
        for enqueue in work:
            enqueue()
        torch.cuda.set_stream(cap)
        for s in ex.streams.values():
            end = torch.cuda.Event()
            end.record(s)
            cap.wait_event(end)

    def _handshake(self, cap) -> None:
        """Step B of a program without a final barrier: on each local rank's stream 0, zero the own pads of parity 0,
        then a barrier by driver memops on the parity-1 copy of one pad (slot <rank> := 1 on every rank, a system
        fence before each write; then wait for slots 0..W-1 >= 1), forked from and joined into ``cap``."""
        import torch
        ex, runner = self.ex, self.ex._graphs
        base = ex._parity_ptr[1]
        start = torch.cuda.Event()
        start.record(cap)
        for r in ex.ranks:
            stream = ex.streams[(r, 0)]
            stream.wait_event(start)
            ex._zero(stream, runner.span(0, r))
            handle = stream.cuda_stream
            for q in range(ex.W):
                ex._signal_drv.write(handle, base[(self.handshake_pad, q)] + 4 * r, 1)
            for q in range(ex.W):
                ex._memops.wait_geq(handle, base[(self.handshake_pad, r)] + 4 * q, 1)
            end = torch.cuda.Event()
            end.record(stream)
            cap.wait_event(end)
        torch.cuda.set_stream(cap)

    def close(self) -> None:
        self.ex.close()


# plans by (executable, world): identity-checked, since ids can be reused; a program graph mode refuses keeps its
# refusal (a GraphModeError) in place of a plan
_PLANS: dict[tuple[int, int], tuple[Any, Any, Any]] = {}


def plan_for(exe: Any, world: Any, *, make: bool) -> CapturePlan | None:
    """The capture plan of ``exe`` in ``world``; made (outside any capture) when ``make``, else None if missing.
    None too where graph mode refuses the program (``refusal`` says why): its eager calls are unaffected."""
    from .graphs import GraphModeError
    key = (id(exe), id(world))
    found = _PLANS.get(key)
    if found is not None and found[0] is exe and found[1] is world:
        if isinstance(found[2], GraphModeError):
            return None
        if not found[2].ex._closed:
            return found[2]
    if not make:
        return None
    try:
        plan = CapturePlan(exe, world)
    except GraphModeError as err:  # refused before anything was allocated (check_graph_program)
        _PLANS[key] = (exe, world, err)
        return None
    _PLANS[key] = (exe, world, plan)
    return plan


def refusal(exe: Any, world: Any) -> str | None:
    """Why ``exe`` cannot be captured in ``world`` (graph mode's refusal of its program), or None."""
    found = _PLANS.get((id(exe), id(world)))
    if found is not None and found[0] is exe and found[1] is world and not isinstance(found[2], CapturePlan):
        return str(found[2])
    return None


def synchronize_plans(world: Any) -> None:
    """Wait for the plans' executors in ``world`` and check their error records (the wait kernels of captured
    calls record a timed-out wait there)."""
    for _, w, plan in list(_PLANS.values()):
        if w is world and isinstance(plan, CapturePlan) and not plan.ex._closed:
            plan.ex.synchronize()


def close_plans(world: Any = None) -> None:
    """Close the plans' executors (of ``world``, else all): in a real world collectively, on every rank."""
    for key, (_, w, plan) in list(_PLANS.items()):
        if world is None or w is world:
            del _PLANS[key]
            if isinstance(plan, CapturePlan):
                plan.close()



# ------------------------------------------------------------------------------------- eager traces per epoch

# The epochs an EpochTraces probes: both parities, small and large values (a value affine in the epoch at all of
# them is taken as affine; one that is not, such as a parity or a clamp, sends the program back to tracing per call)
PROBE_EPOCHS = (1, 2, 3, 4, 7, 12, 1001, 65537)


class _Affine:
    """An int field of an action: base + slope * (epoch - 1)."""

    __slots__ = ("base", "slope")

    def __init__(self, base: int, slope: int):
        self.base, self.slope = base, slope


def _template(values: list[Any]):
    """The template of one field across the probe traces: the value itself when constant, an _Affine, a tuple of
    templates, or None when it is neither constant nor affine in the epoch."""
    first = values[0]
    if all(v == first and type(v) is type(first) for v in values):
        return ("const", first)
    if all(type(v) is int for v in values):
        slope = values[1] - values[0]
        if all(v == values[0] + slope * (e - 1) for v, e in zip(values, PROBE_EPOCHS)):
            return ("affine", _Affine(values[0], slope))
        return None
    if all(type(v) is tuple and len(v) == len(first) for v in values):
        parts = [_template([v[i] for v in values]) for i in range(len(first))]
        return None if any(p is None for p in parts) else ("tuple", parts)
    return None


def _instantiate(t, epoch: int):
    kind, v = t
    if kind == "const":
        return v
    if kind == "affine":
        return v.base + v.slope * (epoch - 1)
    return tuple(_instantiate(p, epoch) for p in v)


class EpochTraces:
    """One rank's eager trace of a host program for any epoch, traced once. ``HostProgram.trace`` interprets the
    program in Python on every call (tens of microseconds for a one-launch program, hundreds for an all-gather by
    pull); but in ditron's programs the epoch enters only through signal and wait values, affinely. So the trace is
    made at the PROBE_EPOCHS; where every probe has the same actions and every field that differs is an int affine in
    the epoch (tuples elementwise), the trace of epoch e is the probe trace with those fields recomputed: the actions
    without an epoch-dependent field are the same objects every call, the others are copied with their values set.
    A program whose trace is not of that form (``affine`` False) is traced per call as before. The result is
    ``without_entry_fork`` of the trace (what ``Executor.run`` enqueues)."""

    def __init__(self, program: Any, rank: int, world_size: int):
        from .program import without_entry_fork
        self.program, self.rank, self.world_size = program, rank, world_size
        self.affine = False
        self._fixed: list[Any] = []
        self._varying: list[tuple[int, Any, tuple]] = []  # (index, probe action, ((field, template), ...))
        try:
            probes = [without_entry_fork(program.trace(rank, world_size, e), rank) for e in PROBE_EPOCHS]
        except DitronError:  # a probe epoch the program refuses: traced per call, its error raised by that call
            return
        if any(len(p) != len(probes[0]) or any(type(a) is not type(b) for a, b in zip(p, probes[0]))
               for p in probes):
            return
        fixed, varying = list(probes[0]), []
        for i, a in enumerate(probes[0]):
            changes = {}
            for f in dataclasses.fields(a):
                values = [getattr(p[i], f.name) for p in probes]
                t = _template(values)
                if t is None:
                    return
                if t[0] != "const":
                    changes[f.name] = t[1] if t[0] == "affine" else t
            if changes:
                varying.append((i, a, tuple(changes.items())))
        self._fixed, self._varying, self.affine = fixed, varying, True

    def action(self, index: int, epoch: int) -> Any:
        """Action ``index`` of the trace of call ``epoch`` (an affine trace: what ``trace(epoch)[index]`` is), made
        alone: the eager call plans (runtime/eager.py) name a planned wait this way only when the watchdog or an
        error record asks."""
        for i, a, changes in self._varying:
            if i == index:
                b = copy.copy(a)
                for name, t in changes:
                    setattr(b, name, t.base + t.slope * (epoch - 1) if type(t) is _Affine else _instantiate(t, epoch))
                return b
        return self._fixed[index]

    def templates(self, index: int) -> dict[str, Any]:
        """The fields of action ``index`` that vary with the epoch: name -> an _Affine (an int field) or a
        ("tuple", parts) template whose parts are ("const", v) / ("affine", _Affine) / nested tuples."""
        for i, _, changes in self._varying:
            if i == index:
                return dict(changes)
        return {}

    def trace(self, epoch: int) -> list[Any]:
        from .program import without_entry_fork
        if not self.affine:
            return without_entry_fork(self.program.trace(self.rank, self.world_size, epoch), self.rank)
        out = list(self._fixed)
        for i, a, changes in self._varying:  # a shallow copy with the epoch's values (dataclasses.replace: 3x more)
            b = copy.copy(a)
            for name, t in changes:
                setattr(b, name, t.base + t.slope * (epoch - 1) if type(t) is _Affine else _instantiate(t, epoch))
            out[i] = b
        return out


__all__ = ["PROBE_EPOCHS", "CaptureNotPreparedError", "CapturePlan", "EpochTraces", "close_plans", "plan_for",
           "refusal", "synchronize_plans"]
