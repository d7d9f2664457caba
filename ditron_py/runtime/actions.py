"""How the executor enqueues a host program's actions (a part of ``executor.Executor``, kept apart by concern): the
checks made the first time a site runs on a rank, the checks of every call's values (regions, slots, values that
must fit 32 bits), and the enqueueing of each action on its stream -- copies, signals (driver write-value memop,
torch's write-value, or the runtime signal kernel), waits (driver stream waits or the runtime wait kernel, with the
tags that name them in an error record), barriers and kernel launches bound to their ABI by kind.

``Actions`` is a mixin of ``Executor``: its methods read the executor's state (``program``, ``streams``, ``_views``,
``_plans``, the memop bindings ``_memops`` / ``_signal_drv`` / ``_write_value``, ``_err``, ``max_iters``, ...).
"""
from __future__ import annotations

import math
from typing import Any, Callable

from ..errors import DitronRuntimeError
from ..schema import DIVISIBILITY, DIVISIBLE_META, USER_ARG_KINDS
from .program import (BarrierAction, Buf, CopyAction, HostProgramError, LaunchAction, SignalAction, WaitAction,
                      slot_runs)
from .timeouts import Milestone

INT32_MAX = (1 << 31) - 1
TAGS_KEPT = 4096          # error-record tags remembered (Executor._tags): those of the last TAGS_KEPT launches
TRITON_POINTEE = {"bf16": "bf16", "fp16": "f16", "fp32": "f32", "fp64": "f64", "i1": "i1", "i8": "i8",
                  "i16": "i16", "i32": "i32", "i64": "i64", "fp8e4nv": "f8E4M3FN", "fp8e5": "f8E5M2",
                  "u8": "i8", "u32": "i32", "u64": "i64"}


class Actions:
    """The checks and the enqueueing of host-program actions of an ``Executor`` (see the module doc)."""

    def _where(self, rank: int, a) -> str:
        return f"{a.loc + ': ' if a.loc else ''}rank {rank}: "

    def _check_action(self, rank: int, a) -> None:
        """Checks made the first time a site runs on a rank (values that change per call are checked always)."""
        if isinstance(a, LaunchAction):
            info = self.program.kernels[a.kernel]
            grid = math.prod(a.grid)
            if info.spins and grid > self.cta_budget:
                where = (f"a virtual world of {self.W} ranks on one GPU ({self.num_sms} SMs) leaves each rank "
                         f"{self.cta_budget}" if self.world.is_virtual else f"this GPU has {self.num_sms} SMs, so")
                raise DitronRuntimeError(
                    f"{self._where(rank, a)}launch of @{a.kernel} has {grid} programs and spin-waits, so all of "
                    f"them must be resident at once, but {where} CTAs; it would deadlock. Compile it with an SM "
                    f"budget of at most {self.cta_budget} (persistent kernels: num_sms / sm_budget)")
            plan = self._plans[a.kernel]
            user = [p for p in plan if p[0] in USER_ARG_KINDS]
            if len(user) != len(a.operands):
                raise DitronRuntimeError(f"{self._where(rank, a)}launch of @{a.kernel} passes {len(a.operands)} "
                                         f"operand(s); the compiled kernel takes {len(user)} "
                                         f"({', '.join(p[2] for p in user)})")
            for (kind, ty, name), v in zip(user, a.operands):
                if kind == "pointer":
                    if not isinstance(v, Buf):
                        raise DitronRuntimeError(f"{self._where(rank, a)}@{a.kernel} argument '{name}' ({ty}) needs "
                                                 "a buffer, got an index value")
                    dtype = self._buf_dtype(v)
                    want = TRITON_POINTEE.get(ty[1:])
                    if want is not None and dtype != want:
                        raise DitronRuntimeError(f"{self._where(rank, a)}@{a.kernel} argument '{name}' is {ty}, "
                                                 f"but the buffer passed holds {dtype}")
                elif isinstance(v, Buf):
                    raise DitronRuntimeError(f"{self._where(rank, a)}@{a.kernel} argument '{name}' ({ty}) is a "
                                             "scalar, but a buffer is passed")
        elif isinstance(a, (SignalAction, WaitAction, BarrierAction)):
            if a.pad.kind != "sym" or a.pad.index not in self._pads:
                raise DitronRuntimeError(f"{self._where(rank, a)}signal pads are 1-d i32 symmetric buffers "
                                         "(alloc_symmetric), so that peers can reach them")
            if isinstance(a, BarrierAction) and self.program.allocs[a.pad.index].shape[0] < self.W:
                raise DitronRuntimeError(f"{self._where(rank, a)}a barrier needs one slot per rank ({self.W}) in "
                                         f"'{self.program.allocs[a.pad.index].name}'")
        self._checked_sites.add((rank, a.site))

    def _buf_dtype(self, b: Buf) -> str:
        return self.program.allocs[b.index].dtype if b.kind == "sym" else self.program.args[b.index].dtype

    def _tensor(self, b: Buf, owner: int, rank: int, tensors: list[Any], a):
        if b.kind == "arg":
            if owner != rank:
                raise HostProgramError(f"{self._where(rank, a)}argument {b.index} of rank {owner} is not reachable: "
                                       "function arguments are local to their rank; only symmetric buffers "
                                       "(alloc_symmetric) are reachable from peers")
            return tensors[b.index]
        return self._views[(b.index, owner)]

    def _region(self, t, off: tuple[int, ...], sizes: tuple[int, ...], rank: int, a, what: str):
        if len(off) != t.dim() or len(sizes) != t.dim() or any(o < 0 or s < 0 or o + s > n
                                                                for o, s, n in zip(off, sizes, t.shape)):
            raise HostProgramError(f"{self._where(rank, a)}copy {what} region at offsets {list(off)} sizes "
                                   f"{list(sizes)} is outside its buffer of shape {list(t.shape)}")
        return t[tuple(slice(o, o + s) for o, s in zip(off, sizes))]

    def _value(self, v: int, rank: int, a, what: str, into: str = "a 32-bit signal slot") -> int:
        if not -(1 << 31) <= v < (1 << 31):
            raise HostProgramError(f"{self._where(rank, a)}{what} {v} does not fit in {into}")
        return v

    def _slot(self, pad: Buf, slot: int, rank: int, a) -> int:
        n = self.program.allocs[pad.index].shape[0]
        if not 0 <= slot < n:
            raise HostProgramError(f"{self._where(rank, a)}slot {slot} of signal pad "
                                   f"'{self.program.allocs[pad.index].name}', which has {n} slots")
        return slot

    def _prepare(self, rank: int, a, tensors: list[Any]) -> Callable[[], None]:
        """Check one action of this call and return what enqueues it."""
        stream = self.streams[(rank, a.stream)]
        if isinstance(a, CopyAction):
            src = self._region(self._tensor(a.src, a.src_rank, rank, tensors, a), a.src_off, a.sizes, rank, a,
                               "source")
            dst = self._region(self._tensor(a.dst, a.dst_rank, rank, tensors, a), a.dst_off, a.sizes, rank, a,
                               "destination")
            return lambda: self._copy(stream, src, dst)
        if isinstance(a, SignalAction):
            slot = self._slot(a.pad, a.slot, rank, a)
            value = self._value(a.value, rank, a, "signal value")
            return lambda: self._signal(rank, stream, a.pad, a.target, slot, value, a.op, a.scope)
        if isinstance(a, WaitAction):
            for s in a.slots:
                self._slot(a.pad, s, rank, a)
            self._value(a.value, rank, a, "wait value")
            return lambda: self._wait(rank, stream, a)
        if isinstance(a, BarrierAction):
            return lambda: self._barrier(rank, stream, a)
        values = self._launch_values(rank, a, tensors)
        return lambda: self._launch(rank, stream, a, values)

    @staticmethod
    def _copy(stream, src, dst) -> None:
        import torch
        if dst.numel():
            torch.cuda.set_stream(stream)
            dst.copy_(src)

    def _barrier(self, rank: int, stream, a: BarrierAction) -> None:
        """Arrival n on this pad: slot <rank> := n on every rank, then wait until slots 0..W-1 >= n. Where both
        would be kernels (a graph's stream 0), the runtime barrier kernel does it in one launch."""
        key = (a.pad.index, rank)
        n = self._barriers[key] = self._barriers.get(key, 0) + 1
        wait = WaitAction(a.stream, a.loc, a.site, a.pad, n, tuple(range(self.W)), "barrier")
        if self.program.barrier_kernel and self._signals_by_kernel(rank, stream) and self._waits_by_kernel(rank, stream):
            clear = self._final_clear.get(rank)  # graph mode: the call's final barrier zeroes the other parity
            span = clear[1] if clear is not None and clear[0] is a else None
            own = {"pad": self._views[(a.pad.index, rank)], "value": n, "max_iters": self.max_iters,
                   "err": self._err[self.ranks.index(rank)], "tag": self._new_tag(rank, wait, wait.slots, n),
                   "clear": self._views[(a.pad.index, rank)] if span is None else span,
                   "clear_words": 0 if span is None else span.numel()}
            name = self.program.barrier_kernel
            self._kernel(name).triton_kernel[(1, 1, 1)](*self._runtime_values(name, rank, own),
                                                        stream=stream.cuda_stream)
            self._milestone(rank, wait, stream)
            return
        for q in range(self.W):
            self._signal(rank, stream, a.pad, q, rank, n, "set", "sys")
        self._wait(rank, stream, wait)

    def _on_stream0(self, rank: int, stream) -> bool:
        return self.streams.get((rank, 0)) is stream

    def _signals_by_kernel(self, rank: int, stream) -> bool:
        """Whether a "set" signal on this stream is the runtime kernel (else a driver / torch write-value memop)."""
        return (self._stream0_kernels[0] and self._on_stream0(rank, stream)) or \
            (self._signal_drv is None and self._write_value is None)

    def _waits_by_kernel(self, rank: int, stream) -> bool:
        """Whether a wait on this stream is the runtime kernel (else driver stream waits)."""
        return (self._stream0_kernels[1] and self._on_stream0(rank, stream)) or self._memops is None

    def _signal(self, rank: int, stream, pad: Buf, target: int, slot: int, value: int, op: str, scope: str) -> None:
        import torch
        kernel_here = self._signals_by_kernel(rank, stream)
        if op == "set" and self._signal_drv is not None and not kernel_here:
            self._signal_drv.write(stream.cuda_stream, self._pad_ptr[(pad.index, target)] + 4 * slot, value)
            return
        if op == "set" and self._write_value is not None and not kernel_here:
            torch.cuda.set_stream(stream)
            self._write_value(self._pad_u32[(pad.index, target)], slot, value & 0xFFFFFFFF)
            return
        name = self.program.signal_kernels.get(f"{op}:{scope}")
        if name is None:
            raise DitronRuntimeError(f"the artifact has no runtime kernel for signal '{op}' at scope '{scope}'; "
                                     "recompile it with this ditron")
        own = {"pad": self._views[(pad.index, rank)], "slot": slot, "peer": target, "value": value}
        self._kernel(name).triton_kernel[(1, 1, 1)](*self._runtime_values(name, rank, own), stream=stream.cuda_stream)

    def _runtime_values(self, name: str, rank: int, own: dict[str, Any]) -> list[Any]:
        """A runtime kernel's arguments in ABI order: its own by name, then rank / num_ranks / heap_bases."""
        values = []
        for kind, _, arg in self._plans_for(name):
            if kind in USER_ARG_KINDS:
                values.append(own[arg])
            elif kind == "rank":
                values.append(rank)
            elif kind == "num_ranks":
                values.append(self.W)
            else:
                values.append(self.heap.bases())
        return values

    def _plans_for(self, name: str) -> list[tuple[str, str, str]]:
        plan = self._plans.get(name)
        if plan is None:
            plan = self._plans[name] = self._abi_plan(name)
        return plan

    def _wait(self, rank: int, stream, a: WaitAction) -> None:
        """One driver stream wait per slot, else the runtime wait kernel per run of consecutive slots; then a
        milestone for the watchdog."""
        if not self._waits_by_kernel(rank, stream):
            base, handle = self._pad_ptr[(a.pad.index, rank)], stream.cuda_stream
            for s in sorted(set(a.slots)):
                self._memops.wait_geq(handle, base + 4 * s, a.value)
            self._milestone(rank, a, stream)
            return
        kernel = self._kernel(self.program.wait_kernel).triton_kernel
        tag = self._new_tag(rank, a, a.slots, a.value)
        err = self._err[self.ranks.index(rank)]
        base = self._views[(a.pad.index, rank)]
        for first, count in slot_runs(a.slots, self.program.wait_lanes):
            kernel[(1, 1, 1)](base, first, count, a.value, self.max_iters, err, tag, stream=stream.cuda_stream)
        self._milestone(rank, a, stream)

    def _new_tag(self, rank: int, a, slots: tuple[int, ...], value: int) -> int:
        """A number that names (rank, action, call) in an error record; those of the last TAGS_KEPT issued are
        remembered."""
        tag = self._next_tag
        self._next_tag = self._next_tag % INT32_MAX + 1
        # the tag issued TAGS_KEPT before this one is forgotten (tags count up, wrapping at INT32_MAX); popping the
        # dict's first key instead costs ~2 us per call once deletions pile up at its front
        old = tag - TAGS_KEPT
        self._tags.pop(old if old > 0 else old + INT32_MAX, None)
        if self._capturing:  # baked into a CUDA graph: kept while the executor lives; the call is the latest one
            self._pinned_tags[tag] = (rank, a, slots, value, -1)
            return tag
        self._tags[tag] = (rank, a, slots, value, self.epoch)
        return tag

    def _milestone(self, rank: int, a, stream) -> None:
        import torch
        if self._capturing:  # a graph call has one milestone, after its replay (graphs.GraphRunner)
            return
        ev = torch.cuda.Event()
        ev.record(stream)
        self.watch.add((rank, a.stream), Milestone(ev, rank, a.stream, a, self.epoch))

    def _launch_values(self, rank: int, a: LaunchAction, tensors: list[Any]) -> list[Any]:
        """The kernel's arguments in ABI order: operands (buffers as tensors, index values checked to fit i32),
        then rank / num_ranks / heap_bases."""
        values, k = [], 0
        for kind, ty, _ in self._plans[a.kernel]:
            if kind in USER_ARG_KINDS:
                v = a.operands[k]
                k += 1
                if isinstance(v, Buf):
                    values.append(self._tensor(v, rank, rank, tensors, a))
                elif ty == "i32":
                    values.append(self._value(v, rank, a, f"@{a.kernel} argument {k - 1} =",
                                              "the kernel's i32 argument"))
                else:
                    values.append(v)
            elif kind == "rank":
                values.append(rank)
            elif kind == "num_ranks":
                values.append(self.W)
            elif kind == "heap_bases":
                values.append(self.heap.bases())
            elif kind == "wait_bound":
                values.append(self.max_iters)
            elif kind == "wait_err":
                values.append(self._err[self.ranks.index(rank)])
            elif kind == "wait_tag":
                values.append(None)  # a fresh tag per launch, at enqueue time
            else:
                raise DitronRuntimeError(f"kernel '{a.kernel}': the executor cannot bind an argument of kind "
                                         f"'{kind}'; update ditron")
        if self._scratch.get((rank, a.site)) is None and getattr(self._kernel(a.kernel).metadata,
                                                                 "global_scratch_size", 0):
            raise DitronRuntimeError(f"{self._where(rank, a)}@{a.kernel} needs global scratch that was not reserved "
                                     "at warm-up (this launch did not run in the first call)")
        claims = self._divisible_args(a.kernel)
        if claims:
            self._check_divisible(rank, a, values, claims)
        return values

    def _divisible_args(self, name: str) -> tuple[tuple[int, str], ...]:
        """(ABI position, name) of the arguments kernel ``name`` was compiled assuming multiples of 16
        (a @ditron.jit kernel's specialization, recorded in its launch metadata)."""
        cache = self.__dict__.setdefault("_divisible_cache", {})
        if name not in cache:
            names = set(getattr(self._kernel(name).metadata, DIVISIBLE_META, None) or ())
            cache[name] = tuple((i, n) for i, (_, _, n) in enumerate(self._plans[name]) if n in names)
        return cache[name]

    def _check_divisible(self, rank: int, a: LaunchAction, values: list[Any], claims) -> None:
        """The specialization's assumptions hold for this launch's values, else a DitronRuntimeError: the kernel
        was compiled for 16-byte aligned pointers / 16-divisible integers, and would be wrong code otherwise."""
        bad = []
        for i, name in claims:
            v = values[i]
            ptr = getattr(v, "data_ptr", None)
            if ptr is not None:
                if ptr() % DIVISIBILITY:
                    bad.append(f"'{name}' at address {ptr():#x}")
            elif isinstance(v, int) and v % DIVISIBILITY:
                bad.append(f"'{name}' = {v}")
        if bad:
            raise DitronRuntimeError(
                f"{self._where(rank, a)}@{a.kernel} was compiled assuming {', '.join(n for _, n in claims)} "
                f"multiples of {DIVISIBILITY} (tt.divisibility, stock Triton's specialization), but "
                f"{'; '.join(bad)} is not: pass tensors whose data_ptr() is {DIVISIBILITY}-byte aligned (a fresh "
                "tensor or .clone() of a view), or list the parameter in @ditron.jit(do_not_specialize_on_alignment"
                "=[...]) and recompile")

    def _launch(self, rank: int, stream, a: LaunchAction, values: list[Any]) -> None:
        from triton.runtime import _allocation
        if any(v is None for v in values):  # not `None in values`: that compares each tensor == None (~100 us)
            values = [self._new_tag(rank, a, (), -1) if v is None else v for v in values]
        grid = tuple(a.grid) + (1,) * (3 - len(a.grid))
        scratch = self._scratch.get((rank, a.site))
        token = None
        if scratch is not None:
            token = _allocation._allocator.set(lambda size, align, s, buf=scratch: buf)
        try:
            self._kernel(a.kernel).triton_kernel[grid](*values, stream=stream.cuda_stream)
        finally:
            if token is not None:
                _allocation._allocator.reset(token)
        if self.program.kernels[a.kernel].spins:
            self._milestone(rank, a, stream)
