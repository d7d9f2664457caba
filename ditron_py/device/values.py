"""ditron.device's values: the builder's constants and errors (located at the user's call), index values (``Index``,
``minimum``, ``maximum``), buffers and signal pads, and the recorded ops of a Program."""
from __future__ import annotations

import contextlib
import inspect
import operator
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..errors import Diagnostic, DitronError

if TYPE_CHECKING:
    from .program import Program

ENGINES = ("copy_engine", "sm")           # dialects.device.ENGINES (not imported: this module loads without MLIR)
SIGNAL_OPS = ("set", "add")
SCOPES = ("gpu", "sys")
TILE_ORDERS = ("row_major", "grouped", "rank_rotated")
# element types of buffers: name -> (MLIR type name, template dtype name)
DTYPES = {"bf16": ("bf16", "bf16"), "f16": ("f16", "fp16"), "fp16": ("f16", "fp16"), "f32": ("f32", "fp32"),
          "fp32": ("f32", "fp32"), "i32": ("i32", "i32")}
AXIS = "tp"


class DeviceBuildError(DitronError):
    """A device program built wrongly: located at the line of the user's code that made the call."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))  # frames in this package are the builder's, not the user's


def _skipped(filename: str) -> bool:
    """A frame that is not the user's: one of this package's modules, or the `with` machinery."""
    return filename == contextlib.__file__ or os.path.dirname(os.path.abspath(filename)) == _PACKAGE_DIR


def _call_site() -> tuple[str, int, int]:
    """(file, line, column) of the innermost frame outside this package: the user's call."""
    frame = inspect.currentframe()
    while frame is not None and _skipped(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "<unknown>", 0, 0
    positions = inspect.getframeinfo(frame, context=0).positions
    col = positions.col_offset if positions is not None and positions.col_offset is not None else 0
    return frame.f_code.co_filename, frame.f_lineno, col + 1


def _error(message: str, where: tuple[str, int, int] | None = None) -> DeviceBuildError:
    file, line, col = where or _call_site()
    return DeviceBuildError(message, [Diagnostic(message, file, line, col)])


# ------------------------------------------------------------------------------------------------ index values

class Index:
    """An index value of the host program: a constant, the rank, the world size, the epoch, a loop variable, or
    arithmetic on those. Built by the operators; evaluated on every rank at run time (or folded when constant)."""

    __slots__ = ("kind", "args", "program")

    def __init__(self, kind: str, args: tuple = (), program: "Program | None" = None):
        self.kind, self.args, self.program = kind, args, program

    # arithmetic
    def _bin(self, kind: str, other: Any, swap: bool = False) -> "Index":
        other = _as_index(other, self.program, f"the right operand of '{_SYMBOL[kind]}'")
        a, b = (other, self) if swap else (self, other)
        if a.kind == "const" and b.kind == "const":
            folded = _FOLD[kind](a.args[0], b.args[0])
            if folded is not None:
                return Index("const", (folded,), a.program or b.program)
        return Index(kind, (a, b), a.program or b.program)

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __floordiv__(self, o): return self._bin("div", o)
    def __rfloordiv__(self, o): return self._bin("div", o, True)
    def __mod__(self, o): return self._bin("rem", o)
    def __rmod__(self, o): return self._bin("rem", o, True)
    # comparisons (conditions of Program.if_)
    def __lt__(self, o): return self._bin("lt", o)
    def __le__(self, o): return self._bin("le", o)
    def __gt__(self, o): return self._bin("gt", o)
    def __ge__(self, o): return self._bin("ge", o)
    def eq(self, o) -> "Index": return self._bin("eq", o)
    def ne(self, o) -> "Index": return self._bin("ne", o)

    def __bool__(self):
        raise _error("an index value of a device program has no truth value while the program is built (it is "
                     "known per rank at run time): use Program.if_(cond) for a condition")

    __hash__ = object.__hash__

    @property
    def constant(self) -> int | None:
        return self.args[0] if self.kind == "const" else None

    def __repr__(self) -> str:
        if self.kind == "const":
            return str(self.args[0])
        if self.kind in _SYMBOL:
            return f"({self.args[0]!r} {_SYMBOL[self.kind]} {self.args[1]!r})"
        return self.kind if not self.args else f"{self.kind}{self.args[0]}"


def _nonneg(f):
    return lambda a, b: f(a, b) if a >= 0 and b > 0 else None


_FOLD: dict[str, Callable[[int, int], int | None]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": _nonneg(operator.floordiv),
    "rem": _nonneg(operator.mod), "min": min, "max": max, "lt": lambda a, b: int(a < b),
    "le": lambda a, b: int(a <= b), "gt": lambda a, b: int(a > b), "ge": lambda a, b: int(a >= b),
    "eq": lambda a, b: int(a == b), "ne": lambda a, b: int(a != b)}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "//", "rem": "%", "min": "min", "max": "max", "lt": "<",
           "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")


def _loop_vars(x: Index) -> Iterator[int]:
    if x.kind == "loop":
        yield x.args[0]
    elif x.kind in _SYMBOL:
        for a in x.args:
            yield from _loop_vars(a)


def _as_index(x: Any, program: "Program | None", what: str) -> Index:
    if isinstance(x, Index):
        if program is not None and x.program is not None and x.program is not program:
            raise _error(f"{what} is an index value of another program")
        if program is not None and any(v not in program._live_vars for v in _loop_vars(x)):
            raise _error(f"{what} uses the variable of a loop that has ended (a loop variable lives inside its "
                         "`with p.loop(...)` block)")
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        raise _error(f"{what} must be an int or an index value of the program (rank, num_ranks, epoch, a loop "
                     f"variable, arithmetic on them), got {type(x).__name__} {x!r}")
    return Index("const", (int(x),), program)


def minimum(a: Any, b: Any) -> Index:
    """The smaller of two index values."""
    a = _as_index(a, None, "minimum's first operand")
    return a._bin("min", b)


def maximum(a: Any, b: Any) -> Index:
    """The larger of two index values."""
    a = _as_index(a, None, "maximum's first operand")
    return a._bin("max", b)


# ------------------------------------------------------------------------------------------------ buffers

@dataclass(eq=False)
class Buffer:
    """A memref of the program: an "in" / "out" argument (this rank's tensor) or a symmetric buffer (the same
    buffer on every rank: peers may read and write it). ``kind``: "in", "out", "symmetric"."""

    program: "Program"
    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: str
    rotate: bool = False
    where: tuple[str, int, int] = ("<unknown>", 0, 0)
    index: int = -1           # argument position ("in" / "out")

    @property
    def symmetric(self) -> bool:
        return self.kind == "symmetric"

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name} {list(self.shape)} {self.dtype}>"


@dataclass(eq=False)
class Pad(Buffer):
    """A signal pad: a symmetric buffer of i32 slots, zero at allocation. ``consumed``: every slot is cleared by
    its one waiter each call (a kernel's wait that clears; then a CUDA graph needs not zero it)."""

    consumed: bool = False

    @property
    def slots(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<signal pad {self.name} [{self.slots}]>"


# ------------------------------------------------------------------------------------------------ the recorded ops

@dataclass
class _Op:
    kind: str                          # copy, signal, wait, barrier, launch, loop, if
    where: tuple[str, int, int]
    fields: dict[str, Any]
    body: list["_Op"] = field(default_factory=list)

