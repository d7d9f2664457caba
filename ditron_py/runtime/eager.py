"""Eager call plans: an eager call (``Executor.run``, ``ditron.ops``, ``torch.ops.ditron``) as a flat list of
prebound steps, made at the first call with a set of shapes, so that a call with fresh tensors costs a few
microseconds of host time instead of the tens an interpreted call costs.

What an interpreted eager call does on the host, per call: check every tensor and allocate the outputs, take the
trace of the epoch (``callplan.EpochTraces``), check every action's regions, slots and values, make a closure per
action, create a torch event per stream to fork from the caller's stream and one per stream to join into it (and
one per blocking action for the watchdog), and launch each kernel through Triton's ``kernel[grid](...)`` (a frame
that builds the launch metadata, then the launcher, which asks the driver about every tensor argument's pointer).
What a plan does instead (``EagerPlan.call``):

* **Built once per shapes** (``Executor._eager_plan``: one per set of argument shapes, since a trace may depend
  on them; the first call of each checks it in full as before). Everything that does not depend on the call's
  tensors or epoch is computed then: the streams' raw handles, the symmetric buffers' addresses (per parity where
  buffers rotate), the signal and wait addresses, each launch's argument list in ABI order with its grid, function
  handle and packed metadata, the regions of every copy between symmetric buffers, the ints every check needs.
* **Per call** only what changes: the data pointers of the call's tensors (``tensor.data_ptr()``, written into the
  launch's argument list), the values affine in the epoch (``base + slope * (epoch - 1)``, from EpochTraces' probe
  templates: signal and wait values, in-kernel wait operands, barrier counts), one fresh tag per launch that
  names it in an error record, and the slices of the call's tensors that copies read or write.
* **The C path** (``C_PATH``, where ``memops.PlanEntries`` has the compiled helper runtime/hotpath.c): each launch
  is packed once per step (``make_launch``: every argument at its ABI width, Triton's two scratch pointers last)
  and a call writes only the call's pointers, the epoch's values and the tag before ``cuLaunchKernel`` -- one C
  call per launch, without Triton's launcher frames or its parsing of every argument. The fork, the join, a
  milestone's record and each signal / wait / barrier's stream memops are one C call each too, and so is each
  copy whose regions are rows of one pitch (``regions.copy_rows``: cuMemcpyDtoDAsync or cuMemcpy2DAsync on the step's
  stream, instead of torch's copy_ after switching torch's current stream; others take copy_). A kernel it does
  not cover (cluster, cooperative or PDL launches, profile scratch, global scratch the executor does not own, an
  argument type it does not pack), a call while a Triton launch hook is registered and one with no current
  context (``launch`` returns -1) go through Triton's launcher as below; without the helper, the ctypes calls.
* **One C call per call** (``NATIVE``, where the helper has programs): the fork, the steps and the join as one
  C program per parity (``_programs``: hotpath.c's make_program / run) -- launches, memops and row copies run in
  C from the descriptors their steps carry (``step.native``; a launch's tag and milestone through its ``pre`` /
  ``post`` callbacks), every other step called back from C as a Python step; the program stops at a refused
  driver call and returns it, and ``step.fail`` makes that step's error. Not built where a step switches torch's
  current stream (the C program cannot restore it); a call with a launch hook registered, or with no current
  context (nothing enqueued), takes the steps one C call each as above.
* **Outputs** are ``torch.empty_like`` of a one-element prototype expanded to the shape (``output_maker``): one
  argument for torch to parse instead of three.
* **Launches** otherwise go to Triton's launcher directly (``CompiledKernel.run`` with the grid, the function handle, the
  packed metadata and pointers as ints: no launch-metadata frame, no pointer query; Triton's launch hooks passed
  only when a hook is registered -- an empty ``HookChain`` is still a Python call per launch, and building the
  launch metadata for it cost ~13 us here), and through ``kernel[grid]`` only for launchers that are not Triton's
  (the CPU tests' stand-ins).
* **Fork and join** through the driver (``cuEventRecord`` / ``cuStreamWaitEvent`` on events created once), where
  it is; else torch events as before. The events that the watchdog's milestones hold come from a ring per
  (rank, stream) and per blocking step (``EVENT_RING``): re-recording one whose earlier milestone is still queued
  only records it later on the same stream, so the watchdog can see that call end later, never earlier. The
  milestone of a blocking step names its action lazily (``Lazy``): the action of that call's epoch is made only
  when the watchdog or an error record asks for it. Completed milestones are pruned every ``PRUNE_AT`` calls.
* **No host synchronisation**: nothing on the call path waits for the GPU or reads device memory.

A program a plan does not cover runs as before (the reason is kept in ``Executor._eager_plans``): a trace that is
not affine in the epoch, or a copy whose region moves with the epoch. ``ENABLED = False`` turns the plans off (the
benchmark measures both; ops.py and torch_ops.py read it too).
The steps themselves (launches, copies, memops, barriers, milestones, and their C descriptors) are made in
runtime/plan_steps.py. Imports torch and triton only (never mlir).
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable

from ..errors import DitronRuntimeError
from .plan_steps import EVENT_RING, Lazy, PlanSteps, Unplanned, _hooked, _knobs_runtime, resolve
from .timeouts import Milestone

ENABLED = True      # eager calls through plans (False: every call interpreted, as before)
NATIVE = True       # a plan's whole call as one C call (hotpath.c's programs) where built (False: a C call per step)
C_PATH = True       # launches, fork and join through hotpath.c where it is built (False: Triton's launcher, ctypes)
PRUNE_AT = 32       # completed milestones are dropped every PRUNE_AT calls (an event query costs ~1 us)


def torch_module():
    """torch (imported once, at the first call: this module is imported where torch may not be wanted yet)."""
    global _TORCH
    if _TORCH is None:
        import torch
        _TORCH = torch
    return _TORCH


_TORCH = None


def current_raw_stream():
    """torch's (device index) -> raw handle of the current stream, or None where torch has no CUDA."""
    import torch
    return getattr(torch._C, "_cuda_getCurrentRawStream", None)


class EagerPlan(PlanSteps):
    """The prebound steps of one executor's eager call for one set of argument shapes (see the module doc; the
    steps are made by runtime/plan_steps.py's PlanSteps)."""

    def __init__(self, ex: Any, tensors: dict[int, list[Any]]):
        import torch

        from . import executor as X
        self.ex = ex
        self._torch = torch
        traces = ex._eager_traces
        for r in ex.ranks:
            if not traces[r].affine:
                raise Unplanned("its trace is not affine in the epoch")
        drv = X.driver_memops()
        self.drv = drv if drv is not None and getattr(drv, "can_fork", lambda: False)() else None
        self.current_raw = current_raw_stream() if self.drv is not None else None
        if self.current_raw is None:
            self.drv = None
        # the C path (hotpath.c through memops.PlanEntries): launches, fork and join in one C call each
        self.entries = self.drv.plan_entries() if C_PATH and self.drv is not None and \
            hasattr(self.drv, "plan_entries") else None
        self.c_launches = 0     # launch steps through the C path (the rest through Triton's launcher)
        self.c_copies = 0       # copy steps through the C path (the rest through torch's copy_)
        self.index = ex.device.index
        self.get_device = getattr(torch._C, "_cuda_getDevice", None) if self.index is not None else None
        self.sets_stream = False
        self.raw_fallback = False
        self.max_epoch = 1 << 62     # the last call a plan serves (values that must fit 32 bits: _limit)
        self.calls = 0
        self.prechecks: dict[int, list[Callable[[list[Any]], None]]] = {}  # per rank: checks of a call's tensors
        self.aligned: dict[int, set[int]] = {}  # per rank: the slots those checks want 16-byte aligned (all they do)
        self.used = sorted({(r, a.stream) for r in ex.ranks for a in traces[r]._fixed})
        self.handles = {k: ex.streams[k].cuda_stream for k in self.used}
        parities = (0, 1) if ex._rotates else (0,)
        self.steps = {p: [(r, self._rank_steps(r, p, tensors[r])) for r in ex.ranks] for p in parities}
        self.queues = {k: ex.watch.queues.setdefault(k, deque()) for k in self.used}
        if self.drv is not None:
            self.start = self._events(1)[0]
            self.ends = {k: self._events(EVENT_RING) for k in self.used}
            self.fork_handles = tuple(self.handles[k] for k in self.used)
            # per ring slot: join's (event, stream) pairs and the milestones' (queue, event, rank, stream)
            self.join_args = [tuple(x for k in self.used for x in (self.ends[k][i][1], self.handles[k]))
                              for i in range(EVENT_RING)]
            self.join_marks = [[(self.queues[k], self.ends[k][i][0], k[0], k[1]) for k in self.used]
                               for i in range(EVENT_RING)]
        self.outputs = [(spec.index, tuple(spec.shape), X.torch_dtype(spec.dtype)) for spec in ex.program.outputs]
        self.dynamic_outputs = any(-1 in shape for _, shape, _ in self.outputs)
        self.output_slots = [index for index, _, _ in self.outputs]
        self.makers = None if self.dynamic_outputs else [output_maker(shape, dtype, ex.device)
                                                         for _, shape, dtype in self.outputs]
        self.inputs = [spec.index for spec in ex.program.inputs]
        self.n_args = len(ex.program.args) - 1
        self.rows = list(enumerate(ex.ranks))
        self.ranks = list(ex.ranks)
        self.hooks = _knobs_runtime() if self.c_launches else None
        self.native = self._programs()

    def _programs(self) -> dict[int, tuple[Any, list, Any]]:
        """Per parity the whole call as one C program (hotpath.c's make_program: the fork, every step, the join):
        its capsule, its steps in order (what names a refused one) and the memops.Program (which keeps the step
        descriptors the capsule borrows alive), where the C path is here and no step switches torch's current stream; else {} (a C
        call per step; also where a step is beyond the program's limits). A step the C program does not run itself
        (a barrier's count, the executor's own actions) is a Python step in it."""
        if not NATIVE or self.entries is None or self.sets_stream or self.entries.run is None:
            return {}
        rows = {r: k for k, r in enumerate(self.ranks)}
        out = {}
        for parity, per_rank in self.steps.items():
            descs, order = [], []
            for r, rank_steps in per_rank:
                for step in rank_steps:
                    d = getattr(step, "native", None)
                    descs.append(("P", rows[r], step) if d is None else d if d[0] == "M" else
                                 (d[0], rows[r], *d[1:]))
                    order.append(step)
            try:
                prog = self.entries.make_program(self.start[1], self.fork_handles, tuple(self.join_args), descs)
            except (ValueError, OverflowError):  # more than 64 streams, pointers, addresses: a C call per step
                return {}
            if prog is None:
                return {}
            out[parity] = (prog.capsule, order, prog)
        return out

    def _native_failure(self, steps: list, res: tuple[int, int], epoch: int) -> Exception:
        """The error of a native program's refused driver call ((index, code), hotpath.c's run)."""
        index, code = res
        if index < 0:
            return self._fork_join_error("start" if index == -1 else "end", code)
        return steps[index].fail(code, epoch)

    def _fork_join_error(self, where: str, code: int) -> DitronRuntimeError:
        """The error of a refused fork or join (hotpath.c's code: a record's CUresult, minus a wait's)."""
        return DitronRuntimeError(f"{'cuEventRecord' if code > 0 else 'cuStreamWaitEvent'} failed at the {where} of "
                                  f"an eager call: CUresult {abs(code)} ({self.drv.error_name(abs(code))})")

    # ------------------------------------------------------------------------------------------ building
    def _events(self, n: int) -> list[tuple[Any, int]]:
        """n torch events, each recorded once now so that it has a raw handle: (event, handle)."""
        torch = self._torch
        cur = torch.cuda.current_stream(self.ex.device)
        out = []
        for _ in range(n):
            ev = torch.cuda.Event()
            ev.record(cur)
            out.append((ev, ev.cuda_event))
        return out

    # ------------------------------------------------------------------------------------------ calls
    def bind(self, inputs: list[list[Any]], outputs: list[list[Any]] | None):
        """The argument slots of each local rank from its input (and given output) tensors, already checked by the
        caller's key; outputs allocated where not given. Returns (tensors per rank, outputs per rank)."""
        if outputs is None and self.dynamic_outputs:
            raise DitronRuntimeError("an output argument has a dynamic shape: pass outputs=")
        tensors, results = {}, []
        n, ins, out_slots = self.n_args, self.inputs, self.output_slots
        for i, r in self.rows:
            slots = [None] * n
            for index, x in zip(ins, inputs[i]):
                slots[index] = x
            outs = self.new_outputs() if outputs is None else outputs[i]
            for index, y in zip(out_slots, outs):
                slots[index] = y
            tensors[r] = slots
            results.append(outs)
        return tensors, results

    def new_outputs(self) -> list[Any]:
        """One call's output tensors (static shapes), allocated on the executor's device."""
        return [make() for make in self.makers]

    def enqueue(self, tensors: dict[int, list[Any]], sync: bool) -> None:
        """One call with the given argument slots per rank (see the module doc), on the caller's current stream."""
        ex = self.ex
        if ex._closed or ex._broken:
            ex._check_usable()
        if self.get_device is not None and self.get_device() != self.index:
            with self._torch.cuda.device(ex.device):
                return self.enqueue(tensors, sync)
        if self.prechecks:  # before anything is enqueued: no rank left half-enqueued
            for r, checks in self.prechecks.items():
                for check in checks:
                    check(tensors[r])
        epoch = ex.epoch + 1
        if epoch > self.max_epoch:  # a value would not fit 32 bits: the interpreted call checks and raises
            return ex._run_interpreted(tensors, sync)
        if ex._rotates:
            steps = self.steps[epoch & 1]
            ex._use_parity(epoch & 1)
        else:
            steps = self.steps[0]
        ex.epoch = epoch
        self.calls += 1
        if self.calls % PRUNE_AT == 0:
            ex.watch.prune()
        torch = self._torch
        drv = self.drv
        current = torch.cuda.current_stream(ex.device) if (self.sets_stream or drv is None) else None
        entries = self.entries
        native = self.native.get(epoch & 1 if ex._rotates else 0) if self.native else None
        if native is not None and (self.hooks is None or not _hooked(self.hooks)):
            cur = self.current_raw(self.index)
            res = entries.run(native[0], epoch, cur, [tensors[r] for r in self.ranks])
            if res == 0:
                i = epoch % EVENT_RING
                for queue, ev, rank, s in self.join_marks[i]:
                    queue.append(Milestone(ev, rank, s, None, epoch))
                if sync:
                    ex._synchronize()
                return
            if res != -1:
                raise self._native_failure(native[1], res, epoch)
            # no current context (nothing enqueued): the steps below, where Triton's launcher makes one current
        if entries is not None:
            cur = self.current_raw(self.index)
            code = entries.fork(self.start[1], cur, *self.fork_handles)
            if code:
                raise self._fork_join_error("start", code)
        elif drv is not None:
            cur = self.current_raw(self.index)
            start = self.start[1]
            if not drv.record(start, cur):
                raise DitronRuntimeError("cuEventRecord failed at the start of an eager call")
            for k in self.used:
                drv.wait_event(self.handles[k], start)
        else:
            start = torch.cuda.Event()
            start.record(current)
            for k in self.used:
                ex.streams[k].wait_event(start)
        try:
            for r, rank_steps in steps:
                t = tensors[r]
                for step in rank_steps:
                    step(epoch, t)
        finally:
            if current is not None:
                torch.cuda.set_stream(current)
        if entries is not None:
            i = epoch % EVENT_RING
            code = entries.join(cur, *self.join_args[i])
            if code:
                raise self._fork_join_error("end", code)
            for queue, ev, rank, s in self.join_marks[i]:
                queue.append(Milestone(ev, rank, s, None, epoch))
        elif drv is not None:
            i = epoch % EVENT_RING
            for k in self.used:
                ev, raw = self.ends[k][i]
                if not drv.record(raw, self.handles[k]):
                    raise DitronRuntimeError("cuEventRecord failed at the end of an eager call")
                drv.wait_event(cur, raw)
                self.queues[k].append(Milestone(ev, k[0], k[1], None, epoch))
        else:
            for k in self.used:
                end = torch.cuda.Event()
                end.record(ex.streams[k])
                current.wait_event(end)
                self.queues[k].append(Milestone(end, k[0], k[1], None, epoch))
        if sync:
            ex._synchronize()

    def call(self, inputs: list[list[Any]], outputs: list[list[Any]] | None, sync: bool) -> list[list[Any]]:
        """``bind`` then ``enqueue``; the outputs per local rank."""
        tensors, results = self.bind(inputs, outputs)
        self.enqueue(tensors, sync)
        return results


def output_maker(shape: tuple[int, ...], dtype, device) -> Callable[[], Any]:
    """What makes a fresh contiguous output tensor each call: ``torch.empty_like(proto)``, which parses one
    argument where ``torch.empty(shape, dtype=, device=)`` parses three (~2 us less per output on a slow host).
    The proto is one element expanded to the shape (no memory held beside it), so empty_like makes a new
    contiguous tensor; checked once here, else (an empty shape, a layout empty_like would not make contiguous)
    torch.empty."""
    import functools
    torch = torch_module()
    plain = functools.partial(torch.empty, shape, dtype=dtype, device=device)
    if 0 in shape:
        return plain
    proto = torch.empty((), dtype=dtype, device=device).expand(shape)
    made, want = torch.empty_like(proto), plain()
    if made.shape != want.shape or made.stride() != want.stride() or made.dtype != dtype or \
            made.device != want.device:
        return plain
    return functools.partial(torch.empty_like, proto)


def shapes_key(tensors: dict[int, list[Any]]) -> tuple:
    """What a plan is built for: every local rank's argument shapes."""
    return tuple(tuple(tuple(x.shape) for x in row) for row in tensors.values())


__all__ = ["C_PATH", "ENABLED", "EVENT_RING", "EagerPlan", "Lazy", "PRUNE_AT", "Unplanned", "output_maker", "resolve",
           "shapes_key",
           "torch_module"]
