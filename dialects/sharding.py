"""Meshes and shardings: the Python values behind the ``ditron.mesh`` module attribute and the
``ditron.sharding`` attribute of function arguments and results (and of ``ditron_task.shard``).

    module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 4>}} { ... }
    func.func @f(%x: tensor<8192x4096xbf16> {ditron.sharding = {dims = [["tp"], []]}}) ->
        (tensor<8192x4096xbf16> {ditron.sharding = {dims = [[], []], partial = ["tp"]}})

``dims[i]`` lists the mesh axes that split tensor dim i (major to minor; empty = replicated along it);
``partial`` lists axes over which the value is an unreduced sum; ``padded`` (optional, bool) allows sharded dims
whose size the axes do not divide (the last shards are padded).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from mlir import ir

from .opbase import attribute

MESH_ATTR = "ditron.mesh"
SHARDING_ATTR = "ditron.sharding"


@dataclass(frozen=True)
class Mesh:
    axes: tuple[str, ...]
    shape: tuple[int, ...]

    def __post_init__(self):
        if len(self.axes) != len(self.shape):
            raise ValueError(f"mesh has {len(self.axes)} axis names but {len(self.shape)} sizes")
        if len(set(self.axes)) != len(self.axes):
            raise ValueError(f"mesh axis names repeat: {list(self.axes)}")
        bad = [s for s in self.shape if s < 1]
        if bad:
            raise ValueError(f"mesh axis sizes must be >= 1, got {list(self.shape)}")

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def axis_size(self, axis: str) -> int:
        try:
            return self.shape[self.axes.index(axis)]
        except ValueError:
            raise KeyError(axis) from None

    def to_attr(self) -> ir.Attribute:
        return ir.DictAttr.get({
            "axes": ir.ArrayAttr.get([ir.StringAttr.get(a) for a in self.axes]),
            "shape": ir.DenseI64ArrayAttr.get(list(self.shape)),
        })

    @staticmethod
    def from_attr(attr: ir.Attribute) -> "Mesh":
        """Raises ValueError with what is wrong if attr is not a well-formed mesh."""
        try:
            d = ir.DictAttr(attr)
        except (ValueError, TypeError):
            raise ValueError(f"'{MESH_ATTR}' must be a dictionary {{axes = [...], shape = array<i64: ...>}}, "
                             f"got {attr}") from None
        if "axes" not in d or "shape" not in d:
            raise ValueError(f"'{MESH_ATTR}' needs both 'axes' and 'shape', got {attr}")
        extra = [n.name for n in d if n.name not in ("axes", "shape")]
        if extra:
            raise ValueError(f"unknown '{MESH_ATTR}' key '{extra[0]}' (known: axes, shape)")
        axes = tuple(_strings(_entry(d, "axes", f"'{MESH_ATTR}'"), f"'{MESH_ATTR}' axes"))
        shape_attr = _entry(d, "shape", f"'{MESH_ATTR}'")
        if not isinstance(shape_attr, ir.DenseI64ArrayAttr):
            raise ValueError(f"'{MESH_ATTR}' shape must be array<i64: ...>, got {shape_attr}")
        shape = tuple(shape_attr)
        return Mesh(axes, shape)

    @staticmethod
    def of_module(module: ir.Module | ir.Operation) -> "Mesh | None":
        op = module.operation
        return Mesh.from_attr(attribute(op.attributes, MESH_ATTR)) if MESH_ATTR in op.attributes else None

    @staticmethod
    def enclosing(op: ir.Operation | ir.OpView) -> "Mesh | None":
        """The mesh of the nearest op around op (op included) that has a ``ditron.mesh`` attribute, usually the
        module; None if there is none. Raises ValueError if that attribute is malformed."""
        holder = mesh_holder(op)
        return None if holder is None else Mesh.from_attr(attribute(holder.attributes, MESH_ATTR))


def mesh_holder(op: ir.Operation | ir.OpView) -> ir.Operation | None:
    """The nearest op around op (op included) that has a ``ditron.mesh`` attribute, or None."""
    cur = op.operation
    while cur is not None:
        if MESH_ATTR in cur.attributes:
            return cur
        cur = cur.parent
        cur = None if cur is None else cur.operation
    return None


@dataclass(frozen=True)
class Sharding:
    dims: tuple[tuple[str, ...], ...]
    partial: tuple[str, ...] = ()
    padded: bool = False

    @staticmethod
    def replicated(rank: int) -> "Sharding":
        return Sharding(tuple(() for _ in range(rank)))

    @staticmethod
    def split(rank: int, dim: int, axis: str) -> "Sharding":
        return Sharding(tuple((axis,) if i == dim else () for i in range(rank)))

    @property
    def is_replicated(self) -> bool:
        return not any(self.dims) and not self.partial

    def axes_used(self) -> list[str]:
        return [a for d in self.dims for a in d] + list(self.partial)

    def shards(self, dim: int, mesh: Mesh) -> int:
        """How many pieces dim is split into."""
        return math.prod(mesh.axis_size(a) for a in self.dims[dim])

    def local_shape(self, shape: tuple[int, ...], mesh: Mesh) -> tuple[int, ...]:
        """The shape of one rank's shard (ceil division when padded)."""
        return tuple(-(-s // self.shards(i, mesh)) if s >= 0 else s for i, s in enumerate(shape))

    def check(self, shape: tuple[int, ...], mesh: Mesh) -> str | None:
        """What is wrong with this sharding for a tensor of shape on mesh, or None."""
        if len(self.dims) != len(shape):
            return f"sharding has {len(self.dims)} dims but the tensor has rank {len(shape)}"
        seen = set()
        for axis in self.axes_used():
            if axis not in mesh.axes:
                return f"mesh axis '{axis}' is not in the mesh (axes: {', '.join(mesh.axes)})"
            if axis in seen:
                return f"mesh axis '{axis}' is used twice in one sharding"
            seen.add(axis)
        for i, size in enumerate(shape):
            n = self.shards(i, mesh)
            if size >= 0 and n > 1 and size % n and not self.padded:
                return (f"dim {i} of size {size} does not divide evenly into {n} shards; "
                        f"pad the tensor or mark the sharding 'padded = true'")
        return None

    def to_attr(self) -> ir.Attribute:
        entries = {"dims": ir.ArrayAttr.get([ir.ArrayAttr.get([ir.StringAttr.get(a) for a in d])
                                             for d in self.dims])}
        if self.partial:
            entries["partial"] = ir.ArrayAttr.get([ir.StringAttr.get(a) for a in self.partial])
        if self.padded:
            entries["padded"] = ir.BoolAttr.get(True)
        return ir.DictAttr.get(entries)

    @staticmethod
    def from_attr(attr: ir.Attribute) -> "Sharding":
        """Raises ValueError with what is wrong if attr is not a well-formed sharding."""
        try:
            d = ir.DictAttr(attr)
        except (ValueError, TypeError):
            raise ValueError(f"a sharding must be a dictionary {{dims = [[axes...], ...]}}, got {attr}") from None
        if "dims" not in d:
            raise ValueError(f"a sharding needs 'dims', got {attr}")
        dims_attr = _entry(d, "dims", "sharding")
        if not isinstance(dims_attr, ir.ArrayAttr):
            raise ValueError(f"sharding 'dims' must be an array of arrays of axis names, got {dims_attr}")
        dims = tuple(tuple(_strings(x, "sharding 'dims' entry")) for x in _elements(dims_attr, "sharding 'dims'"))
        partial = tuple(_strings(_entry(d, "partial", "sharding"), "sharding 'partial'")) if "partial" in d else ()
        padded = False
        if "padded" in d:
            padded_attr = _entry(d, "padded", "sharding")
            if not isinstance(padded_attr, ir.BoolAttr):
                raise ValueError(f"sharding 'padded' must be true or false, got {padded_attr}")
            padded = padded_attr.value
        known = {"dims", "partial", "padded"}
        extra = [n.name for n in d if n.name not in known]
        if extra:
            raise ValueError(f"unknown sharding key '{extra[0]}' (known: dims, partial, padded)")
        return Sharding(dims, partial, padded)


def _entry(d: ir.DictAttr, key: str, what: str) -> ir.Attribute:
    try:
        return attribute(d, key)
    except ValueError as err:
        raise ValueError(f"{what} {err}") from None


def _elements(attr: ir.ArrayAttr, what: str) -> list[ir.Attribute]:
    try:
        return list(attr)
    except TypeError:  # an element the bindings cannot represent
        raise ValueError(f"{what} holds a value of a kind ditron cannot read, in {attr}") from None


def _strings(attr: ir.Attribute, what: str) -> list[str]:
    if not isinstance(attr, ir.ArrayAttr):
        raise ValueError(f"{what} must be an array of strings, got {attr}")
    items = _elements(attr, what)
    if not all(isinstance(a, ir.StringAttr) for a in items):
        raise ValueError(f"{what} must be an array of strings, got {attr}")
    return [a.value for a in items]


def _func_sharding(func_op, key: str, index: int) -> "Sharding | None":
    attrs = func_op.operation.attributes
    if key not in attrs:
        return None
    entries = ir.ArrayAttr(attrs[key])
    if index >= len(entries):
        return None
    d = ir.DictAttr(entries[index])
    return Sharding.from_attr(attribute(d, SHARDING_ATTR)) if SHARDING_ATTR in d else None


def arg_sharding(func_op, index: int) -> "Sharding | None":
    """The sharding of argument index of a func.func, or None."""
    return _func_sharding(func_op, "arg_attrs", index)


def result_sharding(func_op, index: int) -> "Sharding | None":
    """The sharding of result index of a func.func, or None."""
    return _func_sharding(func_op, "res_attrs", index)
