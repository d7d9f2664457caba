"""The steps of an eager call plan (runtime/eager.py's EagerPlan builds them through ``PlanSteps``): per action of
the epoch's trace, a prebound callable ``step(epoch, the rank's tensors)`` -- a launch through hotpath.c's packed
launch or Triton's launcher, a signal / wait / barrier through the driver's stream memops, a copy through the driver
or torch's copy_, a milestone for the watchdog -- and, where hotpath.c runs it itself in a plan's C program, its
descriptor (``step.native``) and the error of a refused driver call (``step.fail(code, epoch)``). eager.py's module
doc says what a plan does; this module is how each kind of step is made. Imports torch and triton only."""
from __future__ import annotations

import struct
from collections import deque
from typing import Any, Callable

from ..errors import DitronRuntimeError
from ..schema import USER_ARG_KINDS
from .program import BarrierAction, Buf, CopyAction, LaunchAction, SignalAction, WaitAction
from .regions import copy_rows
from .timeouts import Milestone

EVENT_RING = 64     # events per (rank, stream) end and per blocking step, reused round-robin
_I32 = (-(1 << 31), 1 << 31)


class Unplanned(Exception):
    """The program is not of a form a plan covers (the call is interpreted); the message says why."""


class Lazy:
    """A milestone's or error record's action, made when asked (``resolve``): the planned action at its epoch."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable[..., Any], *args: Any):
        self.fn, self.args = fn, args

    def resolve(self) -> Any:
        return self.fn(*self.args)


def resolve(action: Any) -> Any:
    """``action`` itself, or what a Lazy stands for."""
    return action.resolve() if type(action) is Lazy else action


def _knobs_runtime():
    from triton import knobs
    return knobs.runtime


def _hooked(hooks) -> bool:
    """Whether a Triton launch hook is registered (a HookChain with calls, or a function): launches then go
    through Triton's launcher, which calls it."""
    enter, leave = hooks.launch_enter_hook, hooks.launch_exit_hook
    return (enter is not None and getattr(enter, "calls", True)) or (leave is not None and getattr(leave, "calls", True))


def _f16(v):
    return "H", struct.unpack("<H", struct.pack("<e", float(v)))[0]


def _bf16(v):
    return "H", struct.unpack("<I", struct.pack("<f", float(v)))[0] >> 16


# Triton's argument types -> hotpath.c's type codes (the C path packs these, and pointers ("*bf16", ...) as "Q";
# floats only as constants, packed here)
_C_TYPES = {"i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "q", "u1": "B", "u8": "B", "u16": "H", "u32": "I",
            "u64": "Q"}
_C_FLOATS = {"fp16": _f16, "bf16": _bf16,
             "fp32": lambda v: ("I", struct.unpack("<I", struct.pack("<f", float(v)))[0]),
             "f32": lambda v: ("I", struct.unpack("<I", struct.pack("<f", float(v)))[0]),
             "fp64": lambda v: ("Q", struct.unpack("<Q", struct.pack("<d", float(v)))[0])}


def _raw_launch(ck) -> bool:
    """Whether ``ck`` is Triton's CompiledKernel (its launcher called directly), not a stand-in."""
    try:
        from triton.compiler.compiler import CompiledKernel
    except ImportError:
        return False
    return isinstance(ck, CompiledKernel)


def _affine(t) -> tuple[int, int] | None:
    """(base, slope) of an _Affine template; None for anything else."""
    return (t.base, t.slope) if hasattr(t, "base") and hasattr(t, "slope") else None


def _operand_templates(changes: dict[str, Any], n: int) -> list[tuple[int, int] | None]:
    """Per operand of a launch: (base, slope) where it is affine in the epoch, else None (constant)."""
    t = changes.get("operands")
    if t is None:
        return [None] * n
    kind, parts = t
    out = []
    for part in parts:
        if part[0] == "const":
            out.append(None)
        elif part[0] == "affine":
            out.append((part[1].base, part[1].slope))
        else:
            raise Unplanned("a launch operand that is a tuple varying with the epoch")
    return out


class PlanSteps:
    """EagerPlan's step builders (a mixin: the plan's ``ex``, ``drv``, ``entries``, ``_events``, ``prechecks``,
    ``aligned``, ``max_epoch``, ``sets_stream`` and launch / copy counters are EagerPlan's)."""

    def _rank_steps(self, rank: int, parity: int, tensors: list[Any]) -> list[Callable[[int, list[Any]], None]]:
        ex = self.ex
        et = ex._eager_traces[rank]
        steps = []
        for i, a in enumerate(et._fixed):
            if (rank, a.site) not in ex._checked_sites:
                ex._check_action(rank, a)
            changes = et.templates(i)
            step = self._step(rank, parity, i, a, changes, tensors)
            if step is not None:
                steps.append(step)
        return steps

    def _step(self, rank, parity, i, a, changes, tensors):
        ex = self.ex
        stream = ex.streams[(rank, a.stream)]
        handle = stream.cuda_stream
        et = ex._eager_traces[rank]
        if isinstance(a, LaunchAction):
            if set(changes) - {"operands"}:
                raise Unplanned(f"launch of @{a.kernel} whose {', '.join(sorted(changes))} vary with the epoch")
            return self._launch(rank, parity, i, a, changes, tensors, stream)
        if isinstance(a, CopyAction):
            if changes:
                raise Unplanned("a copy whose region varies with the epoch")
            return self._copy(rank, parity, a, tensors, stream)
        if isinstance(a, SignalAction):
            if set(changes) - {"value"}:
                raise Unplanned("a signal whose pad, target or slot varies with the epoch")
            slot = ex._slot(a.pad, a.slot, rank, a)
            base, slope = _affine(changes["value"]) if "value" in changes else (ex._value(a.value, rank, a,
                                                                                          "signal value"), 0)
            self._limit(base, slope)
            kernel_here = ex._signals_by_kernel(rank, stream)
            if a.op == "set" and ex._signal_drv is not None and not kernel_here:
                addr = ex._parity_ptr[parity][(a.pad.index, a.target)] + 4 * slot
                if self.entries is not None:
                    return self._memops(handle, 1, (addr,), base, slope, None)
                write = ex._signal_drv.write
                return lambda epoch, t: write(handle, addr, base + slope * (epoch - 1))
            self.sets_stream = True
            pad, target, op, scope = a.pad, a.target, a.op, a.scope
            return lambda epoch, t: ex._signal(rank, stream, pad, target, slot, base + slope * (epoch - 1), op, scope)
        if isinstance(a, WaitAction):
            if set(changes) - {"value"}:
                raise Unplanned("a wait whose pad or slots vary with the epoch")
            for s in a.slots:
                ex._slot(a.pad, s, rank, a)
            base, slope = _affine(changes["value"]) if "value" in changes else (ex._value(a.value, rank, a,
                                                                                          "wait value"), 0)
            self._limit(base, slope)
            if not ex._waits_by_kernel(rank, stream):
                wait_geq, pad_base = ex._memops.wait_geq, ex._parity_ptr[parity][(a.pad.index, rank)]
                addrs = [pad_base + 4 * s for s in sorted(set(a.slots))]
                milestone = self._milestone(rank, a.stream, stream)
                if self.entries is not None:
                    return self._memops(handle, 0, tuple(addrs), base, slope,
                                        lambda epoch: milestone(epoch, Lazy(et.action, i, epoch)))

                def wait(epoch, t):
                    v = base + slope * (epoch - 1)
                    for addr in addrs:
                        wait_geq(handle, addr, v)
                    milestone(epoch, Lazy(et.action, i, epoch))
                return wait
            self.sets_stream = True
            return lambda epoch, t: ex._wait(rank, stream, et.action(i, epoch))
        if isinstance(a, BarrierAction):
            return self._barrier(rank, parity, a, stream)
        raise Unplanned(f"an action of kind {type(a).__name__}")

    def _milestone(self, rank: int, s: int, stream) -> Callable[[int, Any], None]:
        """What records a blocking step's milestone for the watchdog: a ring event through the driver, else a
        fresh torch event (the executor's own way)."""
        queue = self.ex.watch.queues.setdefault((rank, s), deque())
        if self.drv is None:
            torch = self._torch

            def fresh(epoch, action):
                ev = torch.cuda.Event()
                ev.record(stream)
                queue.append(Milestone(ev, rank, s, action, epoch))
            return fresh
        ring, record, handle = self._events(EVENT_RING), self.drv.record, stream.cuda_stream
        if self.entries is not None:
            c_record, name = self.entries.record, self.drv.error_name

            def c_ringed(epoch, action):
                ev, raw = ring[epoch % EVENT_RING]
                code = c_record(raw, handle)
                if code:
                    raise DitronRuntimeError(f"cuEventRecord failed for a milestone of an eager call: CUresult "
                                             f"{code} ({name(code)})")
                queue.append(Milestone(ev, rank, s, action, epoch))
            return c_ringed

        def ringed(epoch, action):
            ev, raw = ring[epoch % EVENT_RING]
            if not record(raw, handle):
                raise DitronRuntimeError("cuEventRecord failed for a milestone of an eager call")
            queue.append(Milestone(ev, rank, s, action, epoch))
        return ringed

    def _buf(self, parity: int, rank: int, b: Buf, raw: bool):
        """('arg', index) for an argument (the call's tensor), ('fixed', value) for a symmetric buffer (its address
        where the launcher is Triton's, else its view)."""
        if b.kind == "arg":
            return ("arg", b.index)
        view = self.ex._parity_views[parity][(b.index, rank)]
        return ("fixed", view.data_ptr() if raw else view)

    def _limit(self, base: int, slope: int) -> None:
        """Lower the last epoch this plan serves so that base + slope * (epoch - 1) stays a signed 32-bit value
        (later calls are interpreted, and the executor's checks raise)."""
        if slope > 0:
            self.max_epoch = min(self.max_epoch, (_I32[1] - 1 - base) // slope + 1)
        elif slope < 0:
            self.max_epoch = min(self.max_epoch, (base - _I32[0]) // -slope + 1)

    def _launch(self, rank, parity, i, a, changes, tensors, stream):
        ex = self.ex
        kernel = ex._kernel(a.kernel)
        ck = kernel.triton_kernel
        raw = _raw_launch(ck)
        templates = _operand_templates(changes, len(a.operands))
        ex._launch_values(rank, a, tensors)  # the executor's own checks of this launch (scratch, i32 operands)
        values: list[Any] = []
        arg_slots: list[tuple[int, int]] = []
        varying: list[tuple[int, int, int, bool]] = []
        tag_pos = None
        k = 0
        row = ex.ranks.index(rank)
        for pos, (kind, ty, _) in enumerate(ex._plans[a.kernel]):
            if kind in USER_ARG_KINDS:
                v, t = a.operands[k], templates[k]
                k += 1
                if isinstance(v, Buf):
                    where, value = self._buf(parity, rank, v, raw)
                    if where == "arg":
                        arg_slots.append((pos, value))
                        value = None
                    values.append(value)
                elif t is not None:
                    varying.append((pos, t[0], t[1]))
                    if ty == "i32":
                        self._limit(t[0], t[1])
                    values.append(v)
                else:
                    values.append(v)
            elif kind == "rank":
                values.append(rank)
            elif kind == "num_ranks":
                values.append(ex.W)
            elif kind == "heap_bases":
                values.append(ex.heap.bases().data_ptr() if raw else ex.heap.bases())
            elif kind == "wait_bound":
                values.append(ex.max_iters)
            elif kind == "wait_err":
                values.append(ex._err[row].data_ptr() if raw else ex._err[row])
            elif kind == "wait_tag":
                tag_pos = pos
                values.append(0)
            else:
                raise DitronRuntimeError(f"kernel '{a.kernel}': the executor cannot bind an argument of kind "
                                         f"'{kind}'; update ditron")
        claims = ex._divisible_args(a.kernel) if hasattr(ex, "_divisible_args") else ()
        if claims:  # a @ditron.jit kernel specialized on 16-divisibility: each call's tensors checked up front
            self._divisibility_check(rank, a, values, arg_slots, claims)
        grid = tuple(a.grid) + (1,) * (3 - len(a.grid))
        gx, gy, gz = grid
        scratch = ex._scratch.get((rank, a.site))
        spins = ex.program.kernels[a.kernel].spins
        milestone = self._milestone(rank, a.stream, stream) if spins else None
        et = ex._eager_traces[rank]
        new_tag = ex._new_tag
        handle = stream.cuda_stream
        if raw:
            from triton import knobs
            from triton.runtime import _allocation
            ck._init_handles()
            run, function, packed, hooks = ck.run, ck.function, ck.packed_metadata, knobs.runtime
            allocator = _allocation._allocator

            def launch(epoch, t):  # through Triton's launcher
                for pos, index in arg_slots:
                    values[pos] = t[index].data_ptr()
                for pos, base, slope in varying:
                    values[pos] = base + slope * (epoch - 1)
                lazy = Lazy(et.action, i, epoch) if varying else a
                if tag_pos is not None:
                    values[tag_pos] = new_tag(rank, lazy, (), -1)
                enter, leave = hooks.launch_enter_hook, hooks.launch_exit_hook
                if not getattr(enter, "calls", True):  # an empty HookChain: nothing for the launcher to call
                    enter = None
                if not getattr(leave, "calls", True):
                    leave = None
                meta = None if enter is None else ck.launch_metadata(grid, handle, *values)
                if scratch is None:
                    run(gx, gy, gz, handle, function, packed, meta, enter, leave, *values)
                else:
                    token = allocator.set(lambda size, align, s, buf=scratch: buf)
                    try:
                        run(gx, gy, gz, handle, function, packed, meta, enter, leave, *values)
                    finally:
                        allocator.reset(token)
                if milestone is not None:
                    milestone(epoch, lazy)
            fast = self._c_launch(ck, a, grid, handle, values, arg_slots, varying, tag_pos, scratch, rank, et, i,
                                  milestone, launch)
            return launch if fast is None else fast
        self.raw_fallback = True
        launcher = ck[grid]

        def launch_generic(epoch, t):  # a stand-in launcher: tensors as tensors (scratch: none on stand-ins)
            for pos, index in arg_slots:
                values[pos] = t[index]
            for pos, base, slope in varying:
                values[pos] = base + slope * (epoch - 1)
            lazy = Lazy(et.action, i, epoch) if varying else a
            if tag_pos is not None:
                values[tag_pos] = new_tag(rank, lazy, (), -1)
            launcher(*values, stream=handle)
            if milestone is not None:
                milestone(epoch, lazy)
        return launch_generic

    def _c_launch(self, ck, a, grid, handle, values, arg_slots, varying, tag_pos, scratch, rank, et, i, milestone,
                  triton_launch):
        """The launch step through the C path (one ``PlanEntries.launch`` call: the arguments packed now, the
        call's pointers, epoch values and tag written per call), or None where it does not cover the kernel (no
        helper, a launch attribute cuLaunchKernel cannot set, an argument type it does not pack, scratch it does
        not own): then Triton's launcher. A call while a Triton launch hook is registered, or with no current
        context, goes through Triton's launcher (``triton_launch``)."""
        entries = self.entries
        md = ck.metadata
        if entries is None or not ck.function or getattr(md, "num_ctas", 1) != 1 or \
                getattr(md, "launch_pdl", False) or getattr(md, "launch_cooperative_grid", False) or \
                getattr(md, "profile_scratch_size", 0):
            return None
        sig = list(getattr(ck.src, "signature", {}).values())
        if len(sig) != len(values) or getattr(ck.src, "constants", None):
            return None
        types, init = [], []
        var_pos = {pos for pos, _, _ in varying} | {pos for pos, _ in arg_slots} | {tag_pos}
        for pos, (ty, v) in enumerate(zip(sig, values)):
            code = None if not isinstance(ty, str) else "Q" if ty.startswith("*") else _C_TYPES.get(ty)
            if code is None and isinstance(ty, str) and ty in _C_FLOATS and pos not in var_pos:
                code, v = _C_FLOATS[ty](v)
            if code is None:
                return None
            types.append(code)
            init.append(0 if v is None else int(v))
        if getattr(md, "global_scratch_size", 0):
            if scratch is None:
                return None
            scratch_ptr = scratch.data_ptr() if hasattr(scratch, "data_ptr") else int(scratch)
        else:
            scratch_ptr = 0
        types += ["Q", "Q"]                 # Triton's ABI: the global and profile scratch pointers come last
        init += [scratch_ptr, 0]
        order = [pos for pos, _ in arg_slots] + [pos for pos, _, _ in varying] + \
            ([tag_pos] if tag_pos is not None else [])
        gx, gy, gz = grid
        cap = entries.make_launch(ck.function, (gx, gy, gz), 32 * md.num_warps, md.shared, handle, "".join(types),
                                  tuple(init), tuple(order))
        c_launch, hooks, new_tag, drv = entries.launch, _knobs_runtime(), self.ex._new_tag, self.drv
        ptrs = [index for _, index in arg_slots]
        affine = [(base, slope) for _, base, slope in varying]
        kernel = a.kernel
        self.c_launches += 1

        def launch(epoch, t):
            if _hooked(hooks):
                return triton_launch(epoch, t)  # a hook (a HookChain with calls, or a function): Triton's launcher
            vals = [t[index].data_ptr() for index in ptrs]
            if affine:
                vals += [base + slope * (epoch - 1) for base, slope in affine]
            lazy = Lazy(et.action, i, epoch) if affine else a
            if tag_pos is not None:
                vals.append(new_tag(rank, lazy, (), -1))
            code = c_launch(cap, *vals)
            if code:
                if code != -1:
                    raise DitronRuntimeError(f"cuLaunchKernel of @{kernel} failed: CUresult {code} "
                                             f"({drv.error_name(code)})")
                return triton_launch(epoch, t)  # no current context: Triton's launcher makes the primary one current
            if milestone is not None:
                milestone(epoch, lazy)

        pre = None
        if tag_pos is not None or milestone is not None:
            def pre(epoch):  # the native program's: (the tag, what the milestone and the error record name)
                lazy = Lazy(et.action, i, epoch) if affine else a
                return (new_tag(rank, lazy, (), -1) if tag_pos is not None else 0), lazy
        launch.native = ("L", cap, tuple(arg_slots), tuple(varying), -1 if tag_pos is None else tag_pos, pre,
                         milestone)
        launch.fail = lambda code, epoch: DitronRuntimeError(f"cuLaunchKernel of @{kernel} failed: CUresult {code} "
                                                             f"({drv.error_name(code)})")
        return launch

    def _divisibility_check(self, rank, a, values, arg_slots, claims) -> None:
        """A precheck (run before anything of the call is enqueued): the call's tensors at the claimed positions are
        16-byte aligned, else the executor's own check raises its error (ex._check_divisible)."""
        ex = self.ex
        from ..schema import DIVISIBILITY
        slots = [(pos, index) for pos, index in arg_slots if any(pos == i for i, _ in claims)]
        if not slots:
            return

        def check(t):
            for pos, index in slots:
                if t[index].data_ptr() % DIVISIBILITY:
                    vals = list(values)
                    for p, k in arg_slots:
                        vals[p] = t[k]
                    ex._check_divisible(rank, a, vals, claims)
        self.prechecks.setdefault(rank, []).append(check)
        self.aligned.setdefault(rank, set()).update(index for _, index in slots)

    def _copy(self, rank, parity, a: CopyAction, tensors, stream):
        ex = self.ex
        if not all(a.sizes):
            ex._region(ex._tensor(a.src, a.src_rank, rank, tensors, a), a.src_off, a.sizes, rank, a, "source")
            ex._region(ex._tensor(a.dst, a.dst_rank, rank, tensors, a), a.dst_off, a.sizes, rank, a, "destination")
            return None  # nothing to copy
        ends = []
        for b, owner, off, what in ((a.src, a.src_rank, a.src_off, "source"), (a.dst, a.dst_rank, a.dst_off,
                                                                             "destination")):
            if b.kind == "arg":
                ex._tensor(b, owner, rank, tensors, a)  # an argument of another rank is refused here
                t = tensors[b.index]
                ex._region(t, off, a.sizes, rank, a, what)
                whole = tuple(off) == (0,) * t.dim() and tuple(a.sizes) == tuple(t.shape)
                ends.append(("arg", b.index, None if whole else tuple(slice(o, o + s) for o, s in zip(off, a.sizes))))
            else:
                view = ex._parity_views[parity][(b.index, owner)]
                ends.append(("fixed", ex._region(view, off, a.sizes, rank, a, what), None))
        c_step = self._c_copy(a, ends, tensors, stream)
        if c_step is not None:
            return c_step
        self.sets_stream = True
        copy = ex._copy
        (sk, sv, ss), (dk, dv, ds) = ends

        def run(epoch, t):
            src = sv if sk == "fixed" else (t[sv] if ss is None else t[sv][ss])
            dst = dv if dk == "fixed" else (t[dv] if ds is None else t[dv][ds])
            copy(stream, src, dst)
        return run

    def _c_copy(self, a: CopyAction, ends, tensors, stream):
        """The copy step through the C path (one ``PlanEntries.copy`` call: cuMemcpyDtoDAsync, or cuMemcpy2DAsync
        for rows apart), or None where there is no helper or a region is not rows of one pitch (``copy_rows``):
        then torch's copy_ on the step's stream. An argument's rows are at fixed offsets from the call's tensor's
        data pointer (the plan's tensors are contiguous: the call's key says so); a fixed buffer's at fixed
        addresses."""
        if self.entries is None:
            return None
        sides = []
        for (kind, v, _), off in zip(ends, (a.src_off, a.dst_off)):
            t = tensors[v] if kind == "arg" else v
            if t is None or (kind == "arg" and not t.is_contiguous()):
                return None
            base = sum(o * st for o, st in zip(off, t.stride())) if kind == "arg" else 0  # a view: at its region
            sides.append((kind, v, t.stride(), base * t.element_size(), t.element_size()))
        if sides[0][4] != sides[1][4]:
            return None
        rows = copy_rows(tuple(a.sizes), [s[2] for s in sides], sides[0][4])
        if rows is None:
            return None
        width, height, (src_pitch, dst_pitch) = rows
        (sk, sv, _, s_off, _), (dk, dv, _, d_off, _) = sides
        s_ptr = None if sk == "arg" else sv.data_ptr()
        d_ptr = None if dk == "arg" else dv.data_ptr()
        self.c_copies += 1
        c_copy, handle, name, where = self.entries.copy, stream.cuda_stream, self.drv.error_name, a.loc or f"#{a.site}"

        def fail(code, epoch):
            return DitronRuntimeError(f"{'cuMemcpy2DAsync' if height > 1 else 'cuMemcpyDtoDAsync'} of the copy at "
                                      f"{where} failed: CUresult {code} ({name(code)})")

        def run(epoch, t):
            src = s_ptr if s_ptr is not None else t[sv].data_ptr() + s_off
            dst = d_ptr if d_ptr is not None else t[dv].data_ptr() + d_off
            code = c_copy(handle, dst, src, width, height, dst_pitch, src_pitch)
            if code:
                raise fail(code, epoch)
        run.native = ("C", handle, -1 if s_ptr is not None else sv, s_ptr if s_ptr is not None else s_off,
                      -1 if d_ptr is not None else dv, d_ptr if d_ptr is not None else d_off, width, height, dst_pitch,
                      src_pitch)
        run.fail = fail
        return run

    def _memops(self, handle, n_writes, addrs, base, slope, after):
        """A signal (n_writes 1) or wait (0) step through the C path: one ``PlanEntries.memops`` call writing or
        waiting for base + slope * (epoch - 1), then ``after(epoch)`` (the wait's milestone) where given."""
        memops, error, name = self.entries.memops, self.entries.memop_error, self.drv.error_name

        def run(epoch, t):
            v = base + slope * (epoch - 1)
            code = memops(handle, v, n_writes, *addrs)
            if code:
                raise error(code, n_writes, addrs, v, name)
            if after is not None:
                after(epoch)
        run.native = ("M", handle, base, slope, n_writes, tuple(addrs), after)
        run.fail = lambda code, epoch: error(code, n_writes, addrs, base + slope * (epoch - 1), name)
        return run

    def _barrier(self, rank, parity, a: BarrierAction, stream):
        ex = self.ex
        key = (a.pad.index, rank)
        by_kernel = ex.program.barrier_kernel and ex._signals_by_kernel(rank, stream) and \
            ex._waits_by_kernel(rank, stream)
        if by_kernel or ex._signal_drv is None or ex._signals_by_kernel(rank, stream) or \
                ex._waits_by_kernel(rank, stream):
            self.sets_stream = True
            return lambda epoch, t: ex._barrier(rank, stream, a)
        barriers, write, wait_geq = ex._barriers, ex._signal_drv.write, ex._memops.wait_geq
        ptrs = ex._parity_ptr[parity]
        peers = [ptrs[(a.pad.index, q)] + 4 * rank for q in range(ex.W)]
        own = [ptrs[(a.pad.index, rank)] + 4 * q for q in range(ex.W)]
        handle = stream.cuda_stream
        milestone = self._milestone(rank, a.stream, stream)
        slots = tuple(range(ex.W))
        if self.entries is not None:
            memops, addrs, error, name = self.entries.memops, (*peers, *own), self.entries.memop_error, \
                self.drv.error_name
            n_peers = len(peers)

            def c_barrier(epoch, t):
                n = barriers[key] = barriers.get(key, 0) + 1
                code = memops(handle, n, n_peers, *addrs)
                if code:
                    raise error(code, n_peers, addrs, n, name)
                milestone(epoch, Lazy(WaitAction, a.stream, a.loc, a.site, a.pad, n, slots, "barrier"))
            return c_barrier

        def barrier(epoch, t):
            n = barriers[key] = barriers.get(key, 0) + 1
            for addr in peers:
                write(handle, addr, n)
            for addr in own:
                wait_geq(handle, addr, n)
            milestone(epoch, Lazy(WaitAction, a.stream, a.loc, a.site, a.pad, n, slots, "barrier"))
        return barrier


__all__ = ["EVENT_RING", "Lazy", "PlanSteps", "Unplanned", "resolve"]
