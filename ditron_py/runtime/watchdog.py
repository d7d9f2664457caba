"""The executor's watchdog (a part of ``executor.Executor``, kept apart by concern): waiting on the host for what was
enqueued, and when nothing progresses for the timeout, naming the waits whose condition is false (from the signal
pads, read on the copy engine), releasing the spinners (every local slot raised to INT32_MAX) and raising
``WaitTimeoutError``; and reading the error records in which the wait kernel and spinning kernels note a wait they
gave up on.

``Watchdog`` is a mixin of ``Executor``: its methods read the executor's state (``watch``, ``_parity_views``,
``_pads``, ``_err``, the tags of ``Actions._new_tag``, ``_graphs``, ...) and mark it broken after a timeout.
"""
from __future__ import annotations

from ..errors import WaitTimeoutError
from .eager import resolve
from .graphs import GraphCall
from .program import Buf, LaunchAction, WaitAction
from .timeouts import DRAIN_S, SILENT_STALL_FACTOR, Blocked, Milestone, raise_silent_stall, timeout_message


class Watchdog:
    """Host-side waiting, stall diagnosis and error records of an ``Executor`` (see the module doc)."""

    def _synchronize(self) -> None:
        self.watch.wait(self.timeout_s, self._on_stall)
        self._check_errors()

    def _read_pads(self) -> dict[tuple[int, int, int], list[int]]:
        """Every local rank's signal pads of every parity, {(parity, pad, rank): values}, read on the side (the
        copy engine needs no SM)."""
        import torch
        views, offset = [], 0
        with torch.cuda.stream(self._diag):
            for p, parity_views in enumerate(self._parity_views):
                for r in self.ranks:
                    for j in self._pads:
                        n = self.program.allocs[j].shape[0]
                        self._pads_host[offset: offset + n].copy_(parity_views[(j, r)], non_blocking=True)
                        views.append(((p, j, r), offset, n))
                        offset += n
        self._diag.synchronize()
        host = self._pads_host.tolist()
        return {key: host[o: o + n] for key, o, n in views}

    def _on_stall(self, heads: list[Milestone], stalled_s: float) -> None:
        """Nothing progressed for the timeout: name the waits whose condition is false, release the spinners and
        raise; with no such wait, keep waiting, and give up after SILENT_STALL_FACTOR timeouts."""
        for m in heads:  # a call plan's milestone names its action lazily (runtime/eager.py)
            m.action = resolve(m.action)
        pads = self._read_pads()
        blocked = []
        for m in heads:
            if isinstance(m.action, GraphCall):
                blocked += self._graphs.blocked(m, pads)
            else:
                b = self._blocked(m, pads)
                if b is not None:
                    blocked.append(b)
        if not blocked:
            if stalled_s >= SILENT_STALL_FACTOR * self.timeout_s:
                self._broken = "the GPU made no progress"
                raise_silent_stall(heads, stalled_s)
            return
        self._release_spinners()
        self._broken = f"a wait timed out ({blocked[0].describe()})"
        raise WaitTimeoutError(timeout_message(blocked, self.timeout_s, released=True))

    def _blocked(self, m: Milestone, pads, parity: int = 0) -> Blocked | None:
        a = m.action
        if isinstance(a, WaitAction):
            what = "barrier" if a.where == "barrier" else "wait"
            return self._unsatisfied(m, what, a.pad, a.slots, a.value, pads, a.loc, parity)
        if isinstance(a, LaunchAction):
            info = self.program.kernels[a.kernel]
            spec = info.wait or {}
            args = list(info.args or [])
            pad_arg, value_arg = spec.get("arg"), spec.get("value_arg")
            if pad_arg in args and value_arg in args:
                pad, value = a.operands[args.index(pad_arg)], a.operands[args.index(value_arg)]
                if isinstance(pad, Buf) and isinstance(value, int) and pad.index in self._pads:
                    slots = tuple(range(self.program.allocs[pad.index].shape[0]))
                    return self._unsatisfied(m, f"kernel @{a.kernel} waits in-kernel", pad, slots, value, pads,
                                             a.loc, parity)
            return Blocked(m.rank, m.stream, f"kernel @{a.kernel} spin-waits in-kernel (no wait record to name "
                           "its slot)", "?", (-1,), -1, (-1,), a.loc, m.epoch)
        return None

    def _kernel_wait(self, a: LaunchAction) -> tuple[str, int, tuple[int, ...]]:
        """(pad name, expected value, slots) of a launch's in-kernel wait, from its kernel record where it has one."""
        info = self.program.kernels[a.kernel]
        spec, args = info.wait or {}, list(info.args or [])
        if spec.get("arg") in args and spec.get("value_arg") in args:
            pad, value = a.operands[args.index(spec["arg"])], a.operands[args.index(spec["value_arg"])]
            if isinstance(pad, Buf) and pad.kind == "sym" and isinstance(value, int):
                return self.program.allocs[pad.index].name, value, (-1,)
        return "?", -1, (-1,)

    def _unsatisfied(self, m: Milestone, what: str, pad: Buf, slots, value: int, pads, loc,
                     parity: int = 0) -> Blocked | None:
        values = pads.get((parity, pad.index, m.rank))
        if values is None:
            return None
        bad = tuple(s for s in slots if values[s] < value)
        if not bad:
            return None
        return Blocked(m.rank, m.stream, what, self.program.allocs[pad.index].name, bad, value,
                       tuple(values[s] for s in bad), loc, m.epoch)

    def _release_spinners(self) -> bool:
        """Raise every local signal slot to INT32_MAX (copy engine, no SM needed), again and again (a later "set"
        may lower a slot), until every stream has drained or DRAIN_S passed; whether they drained."""
        import time

        import torch
        deadline = time.monotonic() + DRAIN_S
        while True:
            with torch.cuda.stream(self._diag):
                for parity_views in self._parity_views:
                    for r in self.ranks:
                        for j in self._pads:
                            v = parity_views[(j, r)]
                            v.copy_(self._release[: v.numel()], non_blocking=True)
            self._diag.synchronize()
            time.sleep(0.02)
            self.watch.prune()
            if self.watch.done:
                return True
            if time.monotonic() > deadline:
                return False

    def _check_errors(self) -> None:
        import torch
        with torch.cuda.stream(self._diag):
            self._err_host.copy_(self._err, non_blocking=True)
        self._diag.synchronize()
        rows = self._err_host.tolist()
        failed = [(self.ranks[i], row) for i, row in enumerate(rows) if row[0] > 0]
        if not failed:
            return
        self._err.zero_()
        blocked = []
        for rank, (count, tag, seen, _) in failed:
            entry = self._tags.get(tag) or self._pinned_tags.get(tag)
            if entry is None:
                blocked.append(Blocked(rank, -1, "wait", "?", (-1,), -1, (seen,), None, -1))
                continue
            _, action, slots, value, epoch = entry
            action = resolve(action)
            epoch = self.epoch if epoch < 0 else epoch
            gave_up = f"gave up in-kernel; {count} wait(s) of this rank did"
            if isinstance(action, LaunchAction):
                pad, value, slots = self._kernel_wait(action)
                blocked.append(Blocked(rank, action.stream, f"kernel @{action.kernel} waits in-kernel ({gave_up})",
                                       pad, slots, value, (seen,) * len(slots), action.loc, epoch))
                continue
            pad = self.program.allocs[action.pad.index].name
            blocked.append(Blocked(rank, action.stream, f"wait ({gave_up})", pad, slots, value,
                                   (seen,) * len(slots), action.loc, epoch))
        self._broken = f"a wait timed out ({blocked[0].describe()})"
        raise WaitTimeoutError(timeout_message(blocked, self.timeout_s, released=False))
