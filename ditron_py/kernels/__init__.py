"""ditron.kernels: core kernel templates, generated as IR (never as Python source).

Each template lives in one module here (``gemm.py``, ``copy.py``, ``reduce.py``) and gives two views of the same
kernel, side by side so they cannot drift apart:

* ``build(record, *, ip, loc) -> tt.func op`` — the kernel as generic-form TTIR plus ditron_core primitives
  (``ditron_core.wait``/``notify``/``symm_at``/``rank``...), built at ``ip`` (a module body). The op carries the
  attribute ``ditron.kernel`` = ``record.to_attr()``.
* ``tiles(record, *, rank, num_ranks, scalars) -> list[list[TileStep]]`` — what the kernel does, at tile
  granularity: for each program (CTA) in launch order, its tiles in the order it visits them. ``ditron.sim`` runs
  launches from this alone, so it must describe the kernel completely (every wait, read, write and notify).

Records (``KernelRecord``) are plain dictionaries of ints, floats, strings and bools (nested one level for the
optional ``wait`` / ``notify`` parts), stored as an MLIR dictionary attribute; ``KernelRecord.from_attr`` reads one
back. The kernel's arguments are named (``args``, in order); regions, waits and notifies name the argument they
touch. Scalar arguments (offsets, the wait value, ...) are named too and come in ``scalars`` at run time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

KERNEL_ATTR = "ditron.kernel"


@dataclass(frozen=True)
class Region:
    """A box of buffer argument ``arg`` on rank ``rank`` (None: the launching rank's own buffer)."""

    arg: str
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    rank: int | None = None


@dataclass(frozen=True)
class SlotWait:
    """Spin until signal-pad argument ``arg`` on ``rank`` (None: own) has slot ``slot`` >= ``value``."""

    arg: str
    slot: int
    value: int
    rank: int | None = None


@dataclass(frozen=True)
class SlotNotify:
    """Set (``op="set"``) or add to (``op="add"``) slot ``slot`` of signal-pad argument ``arg`` on ``rank``, with
    release semantics (everything the tile wrote is visible before)."""

    arg: str
    slot: int
    value: int
    rank: int | None = None
    op: str = "add"


View = Callable[[Region], np.ndarray]


@dataclass
class TileStep:
    """One tile: wait, then read, compute (``compute(view)``: ``view(region)`` is a writable numpy view of that
    region), write, then notify."""

    waits: list[SlotWait] = field(default_factory=list)
    reads: list[Region] = field(default_factory=list)
    writes: list[Region] = field(default_factory=list)
    compute: Callable[[View], None] | None = None
    notifies: list[SlotNotify] = field(default_factory=list)


class Template(Protocol):
    name: str

    def build(self, record, *, ip, loc=None): ...

    def tiles(self, record, *, rank: int, num_ranks: int, scalars: dict[str, int]) -> list[list[TileStep]]: ...
