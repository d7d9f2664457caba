"""A small toolkit for typed op wrappers: operand, result and attribute descriptors, and a generic builder.

Each dialect module declares one class per op, e.g.

    class AllGather(TaskOp):
        NAME = "all_gather"
        input = Operand(0)
        output = Result(0)
        dim = IntAttr("dim")
        axis = StrAttr("axis")

and passes use ``AllGather.build(...)``, ``AllGather.match(op)`` and ``ag.dim`` — never raw op-name strings.
A test checks every class against the IRDL declaration of its op (names, operands, attributes).
"""
from __future__ import annotations

from typing import Any, ClassVar, Iterator, Sequence, TypeVar

from mlir import ir

W = TypeVar("W", bound="OpWrapper")


class Operand:
    """Operand ``index``; ``variadic=True``: every operand from index on; ``optional=True``: None if absent."""

    def __init__(self, index: int, *, variadic: bool = False, optional: bool = False):
        self.index, self.variadic, self.optional = index, variadic, optional

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        operands = obj.op.operands
        if self.variadic:
            return [operands[i] for i in range(self.index, len(operands))]
        if self.index >= len(operands):
            if self.optional:
                return None
            raise IndexError(f"{obj.op.name} has no operand '{self.name}'")
        return operands[self.index]


class Result:
    """Result ``index``; ``optional=True``: None if absent."""

    def __init__(self, index: int, *, optional: bool = False):
        self.index, self.optional = index, optional

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        results = obj.op.results
        if self.optional and self.index >= len(results):
            return None
        return results[self.index]


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def attribute(holder, name: str) -> ir.Attribute:
    """``holder[name]`` for op.attributes or a DictAttr. The bindings raise TypeError for attributes they cannot
    represent in Python (``array<i128: 1>``, ``array<f16: ...>``, ``dense<(1, 2)> : tensor<complex<i32>>``); this
    raises ValueError instead, which callers report as a malformed attribute."""
    try:
        return holder[name]
    except TypeError:
        raise ValueError(f"'{name}' holds a value of a kind ditron cannot read (e.g. array<i128: ...>)") from None


def int_value(attr: ir.Attribute) -> int:
    """The exact value of an integer attribute (``5 : i64``, ``true``, ``7 : index``, ``2 : ui64``, ``10 : i128``).

    Safer than ``IntegerAttr.value``, which reads signless i1 ``true`` as -1, wraps unsigned 64-bit values and
    *aborts the process* on integers wider than 64 bits. Raises ValueError if attr is not an integer."""
    if isinstance(attr, ir.BoolAttr):
        return int(attr.value)
    if not isinstance(attr, ir.IntegerAttr):
        raise ValueError(f"expected an integer attribute, got {attr}")
    t = attr.type
    if isinstance(t, ir.IntegerType) and (t.width >= 64 or t.is_unsigned):
        return int(str(attr).split(" : ", 1)[0])  # the printer writes integers in decimal
    return attr.value


def attr_to_py(attr: ir.Attribute, *, strict: bool = False) -> Any:
    """A (nested) dictionary / array / scalar attribute as plain JSON-able Python data (kernel records, host
    programs); an attribute of another kind as its text, or TypeError when ``strict``."""
    if isinstance(attr, ir.DictAttr):
        return {a.name: attr_to_py(a.attr, strict=strict) for a in attr}
    if isinstance(attr, ir.ArrayAttr):
        return [attr_to_py(a, strict=strict) for a in attr]
    if isinstance(attr, ir.BoolAttr):
        return bool(attr.value)
    if isinstance(attr, ir.IntegerAttr):
        return int_value(attr)
    if isinstance(attr, ir.FloatAttr):
        return float(attr.value)
    if isinstance(attr, (ir.StringAttr, ir.FlatSymbolRefAttr)):
        return attr.value
    if isinstance(attr, (ir.DenseI64ArrayAttr, ir.DenseI32ArrayAttr)):
        return [int(v) for v in attr]
    if strict:
        raise TypeError(f"unexpected attribute {attr}")
    return str(attr)


def memref_shape(t: ir.Type) -> tuple[int, ...] | None:
    """The shape of a memref type, -1 for each dynamic dim; None when t is not a memref."""
    if not isinstance(t, ir.MemRefType):
        return None
    dyn = ir.ShapedType.get_dynamic_size()
    return tuple(-1 if s == dyn else int(s) for s in ir.MemRefType(t).shape)


class Attr:
    """An attribute, read as a Python value and written from one. Subclasses convert; ``to_py`` raises
    ValueError when the attribute is not of the expected kind (``expects`` says which)."""

    expects: ClassVar[str] = "an attribute"

    def __init__(self, name: str, *, default: Any = None, required: bool = True):
        self.name, self.default, self.required = name, default, required

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        attrs = obj.op.attributes
        if self.name not in attrs:
            return self.default
        return self.to_py(attrs[self.name])

    def __set__(self, obj, value):
        obj.op.attributes[self.name] = self.to_attr(value)

    def to_py(self, attr: ir.Attribute) -> Any:
        return attr

    def to_attr(self, value: Any) -> ir.Attribute:
        return value

    def problem(self, op: ir.Operation) -> str | None:
        """What is wrong with this attribute on op (missing, or not of the expected kind), or None."""
        if self.name not in op.attributes:
            return f"needs attribute '{self.name}' ({self.expects})" if self.required else None
        try:
            attr = attribute(op.attributes, self.name)
        except ValueError:
            return f"attribute '{self.name}' must be {self.expects}, got a value of another kind"
        try:
            self.to_py(attr)
        except (ValueError, TypeError):
            return f"attribute '{self.name}' must be {self.expects}, got {attr}"
        return None


class IntAttr(Attr):
    expects = "a 64-bit integer"

    def to_py(self, attr):
        if isinstance(attr, ir.BoolAttr):
            raise ValueError(f"expected an integer, got the boolean {attr}")
        value = int_value(attr)
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"{value} does not fit in 64 bits")
        return value

    def to_attr(self, value):
        value = int(value)
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"attribute '{self.name}': {value} does not fit in 64 bits")
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)


class BoolAttr(Attr):
    expects = "a boolean (true or false)"

    def to_py(self, attr):
        if not isinstance(attr, ir.BoolAttr):
            raise ValueError(f"expected a boolean, got {attr}")
        return bool(attr.value)

    def to_attr(self, value):
        return ir.BoolAttr.get(bool(value))


class StrAttr(Attr):
    expects = "a string"

    def to_py(self, attr):
        if not isinstance(attr, ir.StringAttr):
            raise ValueError(f"expected a string, got {attr}")
        return attr.value

    def to_attr(self, value):
        return ir.StringAttr.get(str(value))


class I64ArrayAttr(Attr):
    """A ``array<i64: ...>`` attribute, read as a tuple of ints."""

    expects = "array<i64: ...>"

    def to_py(self, attr):
        if not isinstance(attr, ir.DenseI64ArrayAttr):
            raise ValueError(f"expected array<i64: ...>, got {attr}")
        return tuple(attr)

    def to_attr(self, value):
        values = [int(v) for v in value]
        bad = [v for v in values if not INT64_MIN <= v <= INT64_MAX]
        if bad:
            raise ValueError(f"attribute '{self.name}': {bad[0]} does not fit in 64 bits")
        return ir.DenseI64ArrayAttr.get(values)


class SymbolAttr(Attr):
    """A flat symbol reference ``@name``, read as the name."""

    expects = "a flat symbol reference like @name"

    def to_py(self, attr):
        if not isinstance(attr, ir.FlatSymbolRefAttr):
            raise ValueError(f"expected a flat symbol reference, got {attr}")
        return attr.value

    def to_attr(self, value):
        return ir.FlatSymbolRefAttr.get(str(value))


class DictAttr(Attr):
    expects = "a dictionary"

    def to_py(self, attr):
        if not isinstance(attr, ir.DictAttr):
            raise ValueError(f"expected a dictionary, got {attr}")
        return attr

    def to_attr(self, value):
        return value if isinstance(value, ir.Attribute) else ir.DictAttr.get(value)


class OpWrapper:
    """A typed view of one op of a ditron dialect. ``DIALECT`` and ``NAME`` give its full name."""

    DIALECT: ClassVar[str] = ""
    NAME: ClassVar[str] = ""

    def __init__(self, op: ir.Operation | ir.OpView):
        op = op.operation if isinstance(op, ir.OpView) else op
        if op.name != self.op_name():
            raise TypeError(f"expected '{self.op_name()}', got '{op.name}'")
        self.op = op

    @classmethod
    def op_name(cls) -> str:
        return f"{cls.DIALECT}.{cls.NAME}"

    @classmethod
    def match(cls: type[W], op: ir.Operation | ir.OpView) -> W | None:
        """The wrapper if op is this op, else None."""
        op = op.operation if isinstance(op, ir.OpView) else op
        return cls(op) if op.name == cls.op_name() else None

    @classmethod
    def attributes_declared(cls) -> dict[str, Attr]:
        out = {}
        for klass in reversed(cls.__mro__):
            out.update({v.name: v for v in vars(klass).values() if isinstance(v, Attr)})
        return out

    @classmethod
    def operands_declared(cls) -> list[tuple[str, Operand]]:
        found = []
        for klass in reversed(cls.__mro__):
            found.extend((k, v) for k, v in vars(klass).items() if isinstance(v, Operand))
        return sorted(found, key=lambda kv: kv[1].index)

    @classmethod
    def create(cls: type[W], *, operands: Sequence[ir.Value] = (), results: Sequence[ir.Type] = (),
               loc: ir.Location | None = None, ip: ir.InsertionPoint | None = None, **attrs: Any) -> W:
        """Build the op at ip (default: the current insertion point). attrs are Python values, converted by the
        class's attribute descriptors; None values are left out."""
        declared = cls.attributes_declared()
        attributes = {}
        for key, value in attrs.items():
            if value is None:
                continue
            if key not in declared:
                raise TypeError(f"{cls.op_name()} has no attribute '{key}'")
            attributes[key] = declared[key].to_attr(value)
        op = ir.Operation.create(cls.op_name(), results=list(results), operands=list(operands),
                                 attributes=attributes, loc=loc, ip=ip)
        return cls(op)

    def attribute_problems(self) -> list[str]:
        """What is wrong with the declared attributes of this op (missing or of the wrong kind)."""
        found = (a.problem(self.op) for a in self.attributes_declared().values())
        return [p for p in found if p is not None]

    @property
    def location(self) -> ir.Location:
        return self.op.location

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.op}>"


def walk_ops(root: ir.Operation | ir.OpView | ir.Module) -> Iterator[ir.Operation]:
    """Every op nested in root (root excluded), in pre-order. Collects first, so callers may mutate."""
    root = root.operation if isinstance(root, (ir.OpView, ir.Module)) else root
    found: list[ir.Operation] = []

    def visit(op):
        found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    return iter(found[1:])


def find(root, wrapper: type[W]) -> list[W]:
    """Every op of the wrapper's kind nested in root."""
    return [w for w in (wrapper.match(op) for op in walk_ops(root)) if w is not None]
