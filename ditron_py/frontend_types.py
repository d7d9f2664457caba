"""The declarations a frontend program is written with, no tracing: the mesh, shardings (``Spec``: shard, partial,
replicated), element type names, the ``Tensor`` / ``Sharded`` annotations, and ``TraceError`` located at the
user's line. ditron.frontend re-exports them (import them from there)."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .dialects.sharding import Mesh as _Mesh, Sharding
from .errors import Diagnostic, DitronError


class TraceError(DitronError):
    """A program cannot be traced: a shape, dtype, sharding or mesh axis that does not fit. Located at the line
    of the user's code that did it."""


# frames of ditron's own that trace on the user's behalf (the frontend, a registered op's call): errors name the
# user's line
_OWN_FILES = frozenset(__file__.rsplit("/", 1)[0] + f"/{name}.py" for name in ("frontend", "frontend_types",
                                                                               "custom_ops"))


def _user_frame():
    frame = inspect.currentframe()
    while frame is not None and frame.f_code.co_filename in _OWN_FILES:
        frame = frame.f_back
    return frame


def _user_position() -> tuple[str, int, int]:
    frame = _user_frame()
    if frame is None:
        return "<unknown>", 0, 0
    col = 0
    positions = inspect.getframeinfo(frame, context=0).positions
    if positions is not None and positions.col_offset is not None:
        col = positions.col_offset
    return frame.f_code.co_filename, frame.f_lineno, col + 1


def _trace_error(message: str, where: tuple[str, int, int] | None = None) -> TraceError:
    file, line, col = where or _user_position()
    return TraceError(message, [Diagnostic(message, file, line, col)])


# --------------------------------------------------------------------------------------------- mesh, specs

def Mesh(**axes: int) -> _Mesh:  # noqa: N802 - reads as the constructor it is
    """A device mesh from axis names and sizes, in order: ``Mesh(tp=8)``, ``Mesh(dp=2, tp=4)``."""
    if not axes:
        raise TraceError("Mesh() needs at least one axis, e.g. Mesh(tp=4)")
    bad = {k: v for k, v in axes.items() if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v < 2 ** 31}
    if bad:
        raise TraceError(f"Mesh: axis sizes are ints from 1 to 2^31 - 1, got "
                         f"{', '.join(f'{k}={v!r}' for k, v in bad.items())}")
    try:
        return _Mesh(tuple(axes), tuple(axes.values()))
    except ValueError as err:
        raise TraceError(f"Mesh({', '.join(f'{k}={v}' for k, v in axes.items())}): {err}") from None


@dataclass(frozen=True)
class Spec:
    """A rank-independent sharding: which dims are split over which mesh axes, which axes are partial sums.
    Negative dims count from the end. ``resolve(rank)`` turns it into a ``Sharding``."""

    splits: tuple[tuple[int, tuple[str, ...]], ...] = ()
    partial: tuple[str, ...] = ()
    padded: bool = False

    def __or__(self, other: "Spec") -> "Spec":
        if not isinstance(other, Spec):
            return NotImplemented
        return Spec(self.splits + other.splits, self.partial + other.partial, self.padded or other.padded)

    def resolve(self, rank: int, what: str = "sharding") -> Sharding:
        dims: list[tuple[str, ...]] = [() for _ in range(rank)]
        for dim, axes in self.splits:
            d = dim + rank if dim < 0 else dim
            if not 0 <= d < rank:
                raise _trace_error(f"{what}: dim {dim} is out of range for a tensor of rank {rank}")
            if dims[d]:
                raise _trace_error(f"{what}: dim {dim} is split twice; give all its axes at once, "
                                   f"e.g. shard({dim}, ({', '.join(repr(a) for a in dims[d] + axes)}))")
            dims[d] = axes
        return Sharding(tuple(dims), self.partial, self.padded)

    def __repr__(self) -> str:
        parts = [f"shard({d}, {a[0]!r})" if len(a) == 1 else f"shard({d}, {a!r})" for d, a in self.splits]
        if self.partial:
            parts.append(f"partial({', '.join(repr(a) for a in self.partial)})")
        text = " | ".join(parts) or "replicated"
        return text + (" (padded)" if self.padded else "")


def _axes(axis: str | Sequence[str], what: str) -> tuple[str, ...]:
    try:
        axes = (axis,) if isinstance(axis, str) else tuple(axis)
    except TypeError:
        axes = ()
    if not axes or not all(isinstance(a, str) for a in axes):
        raise _trace_error(f"{what}: mesh axes must be a name or a sequence of names, got {axis!r}")
    return axes


def shard(dim: int, axis: str | Sequence[str], *, padded: bool = False) -> Spec:
    """Split tensor dim over mesh axis (or axes, major to minor). padded: allow sizes the axes do not divide."""
    if not isinstance(dim, int):
        raise _trace_error(f"shard: dim must be an int, got {dim!r}")
    return Spec(((dim, _axes(axis, "shard")),), (), padded)


def partial(*axes: str) -> Spec:
    """The value is an unreduced sum over these mesh axes."""
    return Spec((), _axes(axes, "partial"), False)


replicated = Spec()


def _to_sharding(spec, rank: int, what: str) -> Sharding | None:
    if spec is None:
        return None
    if isinstance(spec, Sharding):
        return spec
    if isinstance(spec, Spec):
        return spec.resolve(rank, what)
    raise _trace_error(f"{what}: expected a sharding (dt.shard(...), dt.partial(...), dt.replicated), got {spec!r}")


# ------------------------------------------------------------------------------------------------ dtypes

_DTYPE_ALIASES = {
    "bfloat16": "bf16", "float16": "f16", "half": "f16", "float32": "f32", "float": "f32", "float64": "f64",
    "double": "f64", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "bool": "i1",
    "float8_e4m3fn": "f8E4M3FN", "float8_e5m2": "f8E5M2", "fp8e4m3": "f8E4M3FN", "fp8e5m2": "f8E5M2",
}
_DTYPES = ("bf16", "f16", "f32", "f64", "f8E4M3FN", "f8E5M2", "i1", "i8", "i16", "i32", "i64")


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, str):
        name = _DTYPE_ALIASES.get(dtype, dtype)
    else:
        try:
            name = _DTYPE_ALIASES.get(np.dtype(dtype).name, "")
        except TypeError:
            name = ""
    if name not in _DTYPES:
        raise _trace_error(f"unknown element type {dtype!r}; use one of {', '.join(_DTYPES)}")
    return name


# ---------------------------------------------------------------------------------------------- annotations

@dataclass(frozen=True)
class Tensor:
    """A parameter's type: global shape, element type and sharding. ``Tensor[(M, K), "bf16", shard(0, "tp")]``
    or ``Tensor((M, K), "bf16", shard(0, "tp"))``."""

    shape: tuple[int, ...]
    dtype: str = "f32"
    sharding: Spec | Sharding | None = None

    def __post_init__(self):
        shape = (self.shape,) if isinstance(self.shape, int) else tuple(self.shape)
        if not shape or not all(isinstance(s, (int, np.integer)) and s > 0 for s in shape):
            raise _trace_error(f"Tensor shape must be a tuple of positive ints, got {self.shape!r}")
        object.__setattr__(self, "shape", tuple(int(s) for s in shape))
        object.__setattr__(self, "dtype", _dtype_name(self.dtype))

    def __class_getitem__(cls, params):
        # Tensor[(M, K), "bf16", spec] / Tensor[(M, K), "bf16"] / Tensor[(M, K)] (f32) / Tensor[M, "bf16"]
        if isinstance(params, tuple) and len(params) >= 2 and not isinstance(params[1], (int, np.integer)):
            return cls(*params)
        return cls(params)


@dataclass(frozen=True)
class Sharded:
    """A result annotation: ``-> Sharded[shard(0, "tp")]``; several results: ``-> (Sharded[a], Sharded[b])``."""

    sharding: Spec | Sharding | None

    def __class_getitem__(cls, spec):
        return cls(spec)
