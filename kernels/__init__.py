"""ditron.kernels: core kernel templates, generated as IR (never as Python source).

Each template lives in one module here (``copy.py``, ``reduce.py``; ``gemm/``, a package) and gives two views of
the same kernel, side by side so they cannot drift apart:

* ``build(record, *, ip, loc) -> tt.func op`` — the kernel as generic-form TTIR plus ditron_core primitives
  (``ditron_core.wait``/``notify``/``symm_at``/``rank``...), built at ``ip`` (a module body). The op carries the
  attribute ``ditron.kernel`` = ``record.to_attr()``.
* ``tiles(record, *, rank, num_ranks, scalars) -> list[list[TileStep]]`` — what the kernel does, at tile
  granularity: for each program (CTA) in launch order, its tiles in the order it visits them. ``ditron.sim`` runs
  launches from this alone, so it must describe the kernel completely (every wait, read, write and notify).
* ``grid(record) -> (x, 1, 1)`` — the number of programs to launch (``tiles()`` lists one entry per program).
* ``make_record(...)`` — a checked record with defaults filled in (``gemm.choose_config`` picks GEMM tiling).

Records (``KernelRecord``) are plain dictionaries of ints, floats, strings and bools (nested one level for the
optional ``wait`` / ``notify`` parts), stored as an MLIR dictionary attribute; ``KernelRecord.from_attr`` reads one
back. The kernel's arguments are named (``args``, in order); regions, waits and notifies name the argument they
touch. Scalar arguments (offsets, the wait value, ...) are named too and come in ``scalars`` at run time.

Helpers: ``ditron.dialects.ttir`` (builders of generic-form TTIR, shared with the primitive lowering), ``numerics``
(bf16/fp8 rounding for the CPU views), ``interp`` (a numpy interpreter of the emitted IR, used by tests to check
``tiles()`` against ``build()``), ``chunk`` (what copy and reduce share).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

KERNEL_ATTR = "ditron.kernel"

# The largest size of one dim of a tensor the kernels take (the task-level verifier refuses larger ones). Rows,
# columns and K steps are i32 in the kernels, with room for a tile past the end and for sums of two such indices;
# element offsets (a row times a row stride) are i64 where they can pass 2**31 (``offset_type``); counts of tiles,
# slots and blocks are i32, checked by each template (``check_i32``).
MAX_DIM = 1 << 30
I32_LIMIT = 1 << 31  # i32 holds [-I32_LIMIT, I32_LIMIT)


def offset_type(template: str, largest: int, elem_bytes: int) -> str:
    """The integer type of a kernel's element offsets, the largest of which is ``largest``: 'i32' where it fits
    (the fast path of ordinary sizes), else 'i64'. A VerificationError where even the byte offset would not fit
    64 bits."""
    from ..errors import VerificationError
    if largest * elem_bytes >= 1 << 63:
        raise VerificationError(f"{template} template: element offsets up to {largest} ({elem_bytes}-byte "
                                "elements) do not fit a 64-bit address")
    return "i64" if largest >= I32_LIMIT else "i32"


def check_i32(template: str, what: str, value: int) -> None:
    """A VerificationError unless ``value`` -- an index the kernel computes in i32, or a loop's bound plus its step
    (the value its induction variable reaches) -- fits i32."""
    from ..errors import VerificationError
    if value >= I32_LIMIT:
        raise VerificationError(f"{template} template: {what} reach {value}, past the kernel's 32-bit indices "
                                f"(at most {I32_LIMIT - 1})")


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
    release semantics (everything the tile wrote is visible before); or clear it (``op="clear"``, relaxed): 0 if
    it still holds ``value`` (a waiter consuming the signal it waited for); or arrive (``op="arrive"``, relaxed):
    one of ``value`` waiters of a signal counted in ``slot`` has passed its wait, and the last of them sets the
    count back to 0 and takes ``consumes = (signal slot, amount)`` off the signal (``notify_effects``)."""

    arg: str
    slot: int
    value: int
    rank: int | None = None
    op: str = "add"
    consumes: tuple[int, int] | None = None


def notify_effects(n: SlotNotify, held: int) -> list[tuple[int, str, int]]:
    """The plain updates (slot, "add" | "set" | "clear", value) of notify n on its pad, whose slot n.slot holds
    ``held``: n itself, or for an arrival its count (1 added) and, for the last waiter, the count set back to 0
    and the signal's amount added negatively to the signal slot -- in the order a kernel does them."""
    if n.op != "arrive":
        return [(n.slot, n.op, n.value)]
    if held + 1 < n.value:
        return [(n.slot, "add", 1)]
    signal, amount = n.consumes
    return [(n.slot, "add", 1), (n.slot, "set", 0), (signal, "add", -amount)]


def apply_notify(old: int, op: str, value: int) -> int:
    """A slot's value after a plain notify: add, set, or clear (0 where it still holds value)."""
    if op == "add":
        return old + value
    if op == "clear":
        return 0 if old == value else old
    return value


def notify_pad(n: SlotNotify, pad) -> None:
    """Apply notify n to ``pad`` (its slots indexable: a numpy array, a tensor)."""
    for slot, op, value in notify_effects(n, int(pad[n.slot])):
        pad[slot] = apply_notify(int(pad[slot]), op, value)


View = Callable[[Region], np.ndarray]


@dataclass
class TileStep:
    """One tile: wait, then read, compute (``compute(view)``: ``view(region)`` is a writable numpy view of that
    region), write, then notify.

    ``expand``: a data-dependent step (a kernel whose tiles depend on what it reads, as the grouped GEMM's on the
    group sizes): after its waits and reads, ``expand(view)`` gives the steps that take its place, in order."""

    waits: list[SlotWait] = field(default_factory=list)
    reads: list[Region] = field(default_factory=list)
    writes: list[Region] = field(default_factory=list)
    compute: Callable[[View], None] | None = None
    notifies: list[SlotNotify] = field(default_factory=list)
    expand: Callable[[View], list["TileStep"]] | None = None


def expanded(steps, view: View):
    """One program's steps with every data-dependent step replaced by what it expands into (reading through
    ``view``), for consumers that run a program's tiles in order without a simulator."""
    for step in steps:
        if step.expand is not None:
            yield from expanded(step.expand(view), view)
        else:
            yield step


def copies(src: Region, *dsts: Region) -> Callable[[View], None]:
    """A TileStep compute that copies region src into each of dsts."""
    def compute(view: View) -> None:
        for dst in dsts:
            view(dst)[...] = view(src)

    return compute


class Template(Protocol):
    name: str

    def build(self, record, *, ip, loc=None): ...

    def tiles(self, record, *, rank: int, num_ranks: int, scalars: dict[str, int]) -> list[list[TileStep]]: ...

    def grid(self, record) -> tuple[int, int, int]:
        """The launch grid the kernel expects (persistent kernels loop over tiles with exactly this many
        programs)."""
        ...


# ------------------------------------------------------------------------------------------------ records

TEMPLATES = ("gemm", "copy", "reduce", "elementwise", "grouped_gemm")


class KernelRecord(dict):
    """One template instance: ``template`` (its name), ``name`` (the kernel symbol), ``args`` (argument names in
    order) and the template's own fields. Values: int, float, str, bool, lists of those, and dictionaries of those
    (one level: ``wait``, ``notify``). Stored on the tt.func as the dictionary attribute ``ditron.kernel``."""

    @property
    def template(self) -> str:
        return self["template"]

    def to_attr(self):
        """The record as an MLIR DictAttr (needs a current context)."""
        from mlir import ir

        def attr(value, where):
            if isinstance(value, bool):
                return ir.BoolAttr.get(value)
            if isinstance(value, int):
                return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
            if isinstance(value, float):
                return ir.FloatAttr.get_f64(value)
            if isinstance(value, str):
                return ir.StringAttr.get(value)
            if isinstance(value, (list, tuple)):
                return ir.ArrayAttr.get([attr(v, where) for v in value])
            if isinstance(value, dict):
                return ir.DictAttr.get({str(k): attr(v, f"{where}.{k}") for k, v in value.items()})
            raise TypeError(f"kernel record field '{where}' has a value of type {type(value).__name__}; records "
                            "hold ints, floats, strings, bools, lists and dictionaries only")

        return ir.DictAttr.get({str(k): attr(v, str(k)) for k, v in self.items()})

    @classmethod
    def from_attr(cls, attr) -> "KernelRecord":
        """Read a record back from its DictAttr (TypeError for an attribute a record cannot hold)."""
        from mlir import ir

        from ..dialects.opbase import attr_to_py
        try:
            return cls(attr_to_py(ir.DictAttr(attr), strict=True))
        except TypeError as err:
            raise TypeError(f"{err} in a kernel record") from None

    @classmethod
    def of(cls, func_op) -> "KernelRecord":
        """The record carried by a template's tt.func op."""
        op = getattr(func_op, "operation", func_op)
        if KERNEL_ATTR not in op.attributes:
            raise KeyError(f"{op.name} carries no '{KERNEL_ATTR}' record")
        return cls.from_attr(op.attributes[KERNEL_ATTR])


def get_template(name: str):
    """The template module of that name (``ditron.kernels.<name>``, one of ``TEMPLATES``; it has ``name``,
    ``build``, ``tiles`` and ``grid``, and may have ``check``). KeyError naming the known ones for any other name.
    The one template lookup: the passes, the simulator and the tests all come here."""
    import importlib

    if name not in TEMPLATES:
        raise KeyError(f"unknown kernel template '{name}'; known: {', '.join(TEMPLATES)}")
    return importlib.import_module(f"{__name__}.{name}")
