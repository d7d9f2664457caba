"""Never a silent hang: how the executor notices a wait that does not complete, and what it says.

Two guards, both bounded by ``ditron.env.wait_timeout_s()``:

* **Host watchdog** (``Watch``). After each action that can block (a stream wait, a barrier, a launch of a kernel
  that spin-waits) the executor records a *milestone* event on that stream; in CUDA-graph mode one milestone
  follows each replay, and it knows every wait of the captured program (``graphs.GraphCall``). Synchronising polls the oldest
  milestone of each stream; any milestone completing is progress. When nothing progresses for the timeout, the
  executor reads the signal pads and names every blocked wait whose condition is still false — rank, stream, pad,
  slots, expected and observed values, source location — then releases the spinners (so that the GPU drains and
  the process stays usable) and raises ``WaitTimeoutError``.
* **In-kernel bound.** The runtime wait kernel (``ditron_rt_wait``) polls at most ``max_iters`` times, calibrated at
  warm-up from the measured poll rate to last about the timeout; giving up, it counts the failure and writes its tag
  to the rank's error record, which the executor checks after synchronising. This bounds stream waits even when no
  host is watching (``sync=False``). Driver stream waits (``cuStreamWaitValue32``, ``wait_via="memop"``) have no
  such bound: only the watchdog (at the next synchronize) releases them, by writing INT32_MAX into every local pad,
  which satisfies a GEQ wait too.

Kernels that spin in-kernel (``ditron_core.wait``, ``barrier_all``, split-K's lock wait) are bounded the same way:
ditron-lower-core-to-triton appends ``wait_bound`` (i64), ``wait_err`` (the rank's error record) and ``wait_tag``
(i32) to them, every spin stops after ``wait_bound`` polls and records its give-up there, and the executor binds
max_iters, the record and a fresh tag per launch (a tag names the launch).
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..errors import DitronRuntimeError, WaitTimeoutError

# poll the GPU without sleeping for this long, then sleep between polls (growing to POLL_MAX_SLEEP_S)
POLL_SPIN_S = 0.002
POLL_MAX_SLEEP_S = 0.002
# a stall with no blocked wait to name (copies or kernels that never finish) is reported after this many timeouts
SILENT_STALL_FACTOR = 3
# after releasing the spinners, how long to let the GPU drain
DRAIN_S = 5.0


@dataclass(slots=True)
class Milestone:
    event: Any                # torch.cuda.Event recorded after the action
    rank: int
    stream: int
    action: Any               # the blocking Action, or None for the end of a call on that stream
    epoch: int


@dataclass(frozen=True)
class Blocked:
    """A wait whose condition was false when the watchdog looked."""

    rank: int
    stream: int
    what: str                 # "wait", "barrier", "kernel @name waits in-kernel"
    pad: str
    slots: tuple[int, ...]
    expected: int
    observed: tuple[int, ...]
    loc: str | None
    epoch: int

    @property
    def slot_text(self) -> str:
        """'slot 3', 'slots 1, 2', or 'a slot' when the kernel that gave up did not say which."""
        if any(s < 0 for s in self.slots):
            return "a slot"
        return f"slot{'s' if len(self.slots) > 1 else ''} {', '.join(str(s) for s in self.slots)}"

    def describe(self) -> str:
        where = f" at {self.loc}" if self.loc else ""
        now = ", ".join(str(v) for v in self.observed)
        return (f"rank {self.rank}, stream {self.stream}: {self.what} for signal pad '{self.pad}' {self.slot_text} "
                f">= {self.expected} (now {now}), call {self.epoch}{where}")


def timeout_message(blocked: list[Blocked], timeout_s: float, *, released: bool, limit: int = 8) -> str:
    head = blocked[0]
    slot = "a slot" if head.slots[0] < 0 else f"slot {head.slots[0]}"
    lines = [f"wait timed out after {timeout_s:g} s: rank {head.rank} waits for signal pad '{head.pad}' {slot} "
             f">= {head.expected} (observed {head.observed[0]})"]
    lines += [f"  {b.describe()}" for b in blocked[:limit]]
    if len(blocked) > limit:
        lines.append(f"  ... and {len(blocked) - limit} more")
    lines.append("a signal the program waits for was never written (a missing or misordered signal, a peer that "
                 "stopped, or a kernel that never got an SM); raise $DITRON_WAIT_TIMEOUT_S if the work is just slow")
    if released:
        lines.append("the executor released the blocked waits so the GPU could drain; its outputs are invalid and "
                     "it cannot be used again: create a new one")
    return "\n".join(lines)


class Watch:
    """In-flight milestones per stream (key: (rank, stream index)), oldest first."""

    def __init__(self):
        self.queues: dict[tuple[int, int], deque[Milestone]] = {}

    def add(self, key: tuple[int, int], milestone: Milestone) -> None:
        self.queues.setdefault(key, deque()).append(milestone)

    def pending(self, key: tuple[int, int]) -> int:
        """How many milestones of that queue are kept (completed ones until the next prune)."""
        q = self.queues.get(key)
        return len(q) if q else 0

    def prune(self) -> bool:
        """Drop completed milestones; whether any completed."""
        progressed = False
        for q in self.queues.values():
            while q and q[0].event.query():
                q.popleft()
                progressed = True
        return progressed

    @property
    def done(self) -> bool:
        return all(not q for q in self.queues.values())

    def heads(self) -> list[Milestone]:
        return [q[0] for q in self.queues.values() if q]

    def clear(self) -> None:
        for q in self.queues.values():  # in place: a queue may be held (graphs.GraphRunner keeps its own)
            q.clear()

    def wait(self, timeout_s: float, on_stall: Callable[[list[Milestone], float], None]) -> None:
        """Poll until every milestone completed. Each time nothing has completed for timeout_s (and again every
        timeout_s after that), call on_stall(oldest milestone per stream, seconds without progress): it raises,
        or returns to keep waiting."""
        start = last_progress = time.monotonic()
        next_check = start + timeout_s
        sleep = 0.0
        while True:
            if self.prune():
                last_progress = time.monotonic()
                next_check = last_progress + timeout_s
                sleep = 0.0
            if self.done:
                return
            now = time.monotonic()
            if now >= next_check:
                on_stall(self.heads(), now - last_progress)
                next_check = time.monotonic() + timeout_s
                continue
            if now - start > POLL_SPIN_S:
                sleep = min(POLL_MAX_SLEEP_S, sleep * 2 or 0.00005)
                time.sleep(sleep)


def raise_silent_stall(heads: Iterable[Milestone], stalled_s: float) -> None:
    parts = []
    for m in heads:
        if m.rank < 0:  # a CUDA-graph call: one milestone after the replay of every rank's streams
            parts.append(f"the CUDA graph of call {m.epoch} (parity {getattr(m.action, 'parity', '?')})")
            continue
        what = "the end of its call" if m.action is None else type(m.action).__name__
        parts.append(f"rank {m.rank}, stream {m.stream}: {what} (call {m.epoch})")
    raise DitronRuntimeError(f"no progress for {stalled_s:.1f} s and no unsatisfied wait to blame; streams stuck "
                             f"at: {'; '.join(parts)}. A copy or kernel may lack SMs (in a virtual world, "
                             "spinning CTAs may hold every SM)")


__all__ = ["Blocked", "Milestone", "Watch", "WaitTimeoutError", "raise_silent_stall", "timeout_message"]
