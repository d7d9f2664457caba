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
    def __init__(self, index: int):
        self.index = index

    def __get__(self, obj, owner=None):
        return self if obj is None else obj.op.results[self.index]


class Attr:
    """An attribute, read as a Python value and written from one. Subclasses convert."""

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


class IntAttr(Attr):
    def to_py(self, attr):
        return ir.IntegerAttr(attr).value

    def to_attr(self, value):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))


class StrAttr(Attr):
    def to_py(self, attr):
        return ir.StringAttr(attr).value

    def to_attr(self, value):
        return ir.StringAttr.get(str(value))


class I64ArrayAttr(Attr):
    """A ``array<i64: ...>`` attribute, read as a tuple of ints."""

    def to_py(self, attr):
        return tuple(ir.DenseI64ArrayAttr(attr))

    def to_attr(self, value):
        return ir.DenseI64ArrayAttr.get([int(v) for v in value])


class SymbolAttr(Attr):
    """A flat symbol reference ``@name``, read as the name."""

    def to_py(self, attr):
        return ir.FlatSymbolRefAttr(attr).value

    def to_attr(self, value):
        return ir.FlatSymbolRefAttr.get(str(value))


class DictAttr(Attr):
    def to_py(self, attr):
        return ir.DictAttr(attr)

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

    @property
    def location(self) -> ir.Location:
        return self.op.location

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.op}>"


def walk_ops(root: ir.Operation | ir.OpView) -> Iterator[ir.Operation]:
    """Every op nested in root (root excluded), in pre-order. Collects first, so callers may mutate."""
    root = root.operation if isinstance(root, ir.OpView) else root
    found: list[ir.Operation] = []

    def visit(op):
        found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    return iter(found[1:])


def find(root, wrapper: type[W]) -> list[W]:
    """Every op of the wrapper's kind nested in root."""
    return [w for w in (wrapper.match(op) for op in walk_ops(root)) if w is not None]
