"""Builders of generic-form Triton TTIR, in the style of JAX Mosaic GPU's ``utils``: each helper builds one op (or a
few) at the current insertion point and location and returns its value(s), so code that emits TTIR -- the kernel
templates (ditron.kernels), the primitive lowering (ditron-lower-core-to-triton and the backends' primitives
modules), the runtime kernels (ditron.hostprog) -- reads like the IR it emits.

Triton's ``tt.*`` ops stay unregistered in ditron's context (docs/design.md §1): they are built with
``ir.Operation.create``, printed in generic form, and checked by Triton's parser when the module is compiled (Triton
turns their attribute dictionaries into its properties). ``arith``/``scf`` are upstream dialects and are built
through their Python builders (so MLIR verifies them). Enum-valued Triton attributes are i32 integers; the tables
below name them (a test checks them against ``triton._C.libtriton.ir``).

Arithmetic helpers accept Python numbers (made into constants of the other operand's type) and mix scalars with
tensors (the scalar is splat), so ``add(offs_m, make_range(0, 128))`` is ``tt.splat`` + ``arith.addi``.

    with ir.InsertionPoint(module.body):
        f, (a, n) = func("k", [("a", ptr("f32"), {"tt.divisibility": 16}), ("n", i32(), {})])
        with ir.InsertionPoint(f.regions[0].blocks[0]):
            offs = add(mul(program_id(0), 128), make_range(0, 128))
            x = load(addptr(splat(a, [128]), offs), mask=lt(offs, n))
            ...
            ret()
"""
from __future__ import annotations

import contextlib
import re
from typing import Callable, Iterator, Sequence

from mlir import ir
from mlir.dialects import arith, scf

# Triton 3.6 enum values (triton._C.libtriton.ir.{CACHE_MODIFIER, ATOMIC_OP, ...})
CACHE = {"": 1, "ca": 2, "cg": 3, "wb": 4, "cs": 5, "wt": 6, "cv": 7}
EVICT = {"": 1, "evict_first": 2, "evict_last": 3}
RMW = {"and": 1, "or": 2, "xor": 3, "add": 4, "fadd": 5, "max": 6, "min": 7, "umax": 8, "umin": 9, "xchg": 10}
SEM = {"relaxed": 1, "acquire": 2, "release": 3, "acq_rel": 4}
SCOPE = {"gpu": 1, "cta": 2, "sys": 3}
PRECISION = {"tf32": 0, "tf32x3": 1, "ieee": 2}

DTYPES = ("bf16", "fp16", "fp32", "fp8e4m3", "fp8e5m2", "i1", "i8", "i16", "i32", "i64")
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8e4m3": 1, "fp8e5m2": 1, "i1": 1, "i8": 1, "i16": 2, "i32": 4,
               "i64": 8}

Value = ir.Value
Num = int | float | bool


# ------------------------------------------------------------------------------------------------------ types

def dtype(name: str) -> ir.Type:
    """The MLIR element type of a ditron dtype name ('bf16', 'fp16', 'fp32', 'fp8e4m3', 'fp8e5m2', 'i32', ...)."""
    if name == "bf16":
        return ir.BF16Type.get()
    if name == "fp16":
        return ir.F16Type.get()
    if name == "fp32":
        return ir.F32Type.get()
    if name == "fp8e4m3":
        return ir.Float8E4M3FNType.get()
    if name == "fp8e5m2":
        return ir.Float8E5M2Type.get()
    if name in ("i1", "i8", "i16", "i32", "i64"):
        return ir.IntegerType.get_signless(int(name[1:]))
    raise ValueError(f"unknown dtype '{name}'; known: {', '.join(DTYPES)}")


def i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


def i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


def i1() -> ir.Type:
    return ir.IntegerType.get_signless(1)


def ptr(elem: ir.Type | str) -> ir.Type:
    """``!tt.ptr<elem>`` (global address space)."""
    elem = dtype(elem) if isinstance(elem, str) else elem
    return ir.Type.parse(f"!tt.ptr<{elem}>")


def tensor(shape: Sequence[int], elem: ir.Type | str) -> ir.RankedTensorType:
    elem = dtype(elem) if isinstance(elem, str) else elem
    return ir.RankedTensorType.get(list(shape), elem)


def desc_type(block_shape: Sequence[int], elem: ir.Type | str) -> ir.Type:
    """``!tt.tensordesc<tensor<block_shape x elem>>``: a TMA descriptor for blocks of that shape."""
    return ir.Type.parse(f"!tt.tensordesc<{tensor(block_shape, elem)}>")


_PTR_RE = re.compile(r"^!tt\.ptr<(.+?)(?:,\s*(\d+))?>$")
_DESC_RE = re.compile(r"^!tt\.tensordesc<(.+)>$")
GLOBAL_SPACES = (None, "1")   # address spaces of global memory: unspecified or 1


def is_ptr(t: ir.Type) -> bool:
    return _PTR_RE.match(str(t)) is not None


def is_ptr_like(t: ir.Type) -> bool:
    """A pointer to global memory, or a tensor of them."""
    m = _PTR_RE.match(str(elem(t)))
    return m is not None and m.group(2) in GLOBAL_SPACES


def is_int_like(t: ir.Type) -> bool:
    """An integer, or a tensor of integers."""
    return isinstance(elem(t), ir.IntegerType)


def pointee(t: ir.Type) -> ir.Type:
    """The element type of ``!tt.ptr<T>``."""
    m = _PTR_RE.match(str(t))
    if m is None:
        raise TypeError(f"expected a !tt.ptr type, got {t}")
    return ir.Type.parse(m.group(1))


def pointee_bytes(t: ir.Type) -> int | None:
    """Size in bytes of what a pointer (or tensor of pointers) to global memory points at, as Triton lays it out;
    None if unknown."""
    if not is_ptr_like(t):
        return None
    e = pointee(elem(t))
    if is_ptr(e):
        return 8
    if isinstance(e, ir.IntegerType):
        return max(1, (e.width + 7) // 8)
    if str(e) == "tf32":
        return 4
    if isinstance(e, ir.FloatType):
        return max(1, e.width // 8)
    return None


def triton_type_name(t: ir.Type) -> str:
    """Triton's signature spelling of a scalar type: 'i32', '*bf16', ..."""
    m = _PTR_RE.match(str(t))
    return f"*{m.group(1)}" if m is not None else str(t)


def desc_block(t: ir.Type) -> ir.RankedTensorType:
    """The block tensor type of ``!tt.tensordesc<tensor<...>>``."""
    m = _DESC_RE.match(str(t))
    if m is None:
        raise TypeError(f"expected a !tt.tensordesc type, got {t}")
    return ir.Type.parse(m.group(1))


def shape(v: Value | ir.Type) -> list[int]:
    """The shape of a tensor value or type; [] for scalars."""
    t = v.type if isinstance(v, ir.Value) else v
    return list(t.shape) if isinstance(t, ir.RankedTensorType) else []


def elem(v: Value | ir.Type) -> ir.Type:
    """The element type of a tensor value or type (the type itself for scalars)."""
    t = v.type if isinstance(v, ir.Value) else v
    return t.element_type if isinstance(t, ir.RankedTensorType) else t


def like(v: Value, elem_type: ir.Type) -> ir.Type:
    """v's shape with another element type."""
    s = shape(v)
    return tensor(s, elem_type) if s else elem_type


def is_float(t: ir.Type) -> bool:
    return isinstance(t, ir.FloatType)


# ------------------------------------------------------------------------------------------------- generic ops

def _attr(value) -> ir.Attribute:
    if isinstance(value, ir.Attribute):
        return value
    if isinstance(value, bool):
        return ir.BoolAttr.get(value)
    if isinstance(value, int):
        return ir.IntegerAttr.get(i32(), value)
    if isinstance(value, str):
        return ir.StringAttr.get(value)
    raise TypeError(f"cannot make an attribute of {value!r}")


def op(name: str, operands: Sequence[Value] = (), results: Sequence[ir.Type] = (), attrs: dict | None = None,
       regions: int = 0) -> ir.Operation:
    """A generic op at the current insertion point. Python ints in attrs become i32 attributes (Triton's enums and
    axes are i32), bools BoolAttr, strings StringAttr."""
    attributes = {k: _attr(v) for k, v in (attrs or {}).items()}
    return ir.Operation.create(name, results=list(results), operands=list(operands), attributes=attributes,
                               regions=regions)


def i32_array(values: Sequence[int]) -> ir.Attribute:
    return ir.DenseI32ArrayAttr.get([int(v) for v in values])


# -------------------------------------------------------------------------------------------------- constants

def c(value: Num, type_: ir.Type | str | None = None) -> Value:
    """A constant: scalar, or a splat when type_ is a tensor type. Default type: i32 for ints, f32 for floats."""
    if type_ is None:
        type_ = i1() if isinstance(value, bool) else i32() if isinstance(value, int) else ir.F32Type.get()
    elif isinstance(type_, str):
        type_ = dtype(type_)
    e = elem(type_)
    if is_float(e):
        scalar = ir.FloatAttr.get(e, float(value))
    else:
        if isinstance(e, ir.IntegerType) and ir.IntegerType(e).width > 1 and \
                not fits(int(value), ir.IntegerType(e).width):
            # IntegerAttr would wrap it silently (2**40 as i32 is 0): a kernel's bound or offset gone wrong
            raise OverflowError(f"constant {int(value)} does not fit in {e}")
        scalar = ir.IntegerAttr.get(e, int(value))
    attr = ir.DenseElementsAttr.get_splat(type_, scalar) if isinstance(type_, ir.RankedTensorType) else scalar
    return arith.constant(type_, attr)


def fits(value: int, width: int = 32) -> bool:
    """Whether ``value`` is a signed integer of ``width`` bits (default 32: Triton's index type)."""
    return -(1 << (width - 1)) <= value < (1 << (width - 1))


def zeros(shape_: Sequence[int], elem_type: ir.Type | str) -> Value:
    return c(0, tensor(shape_, elem_type))


# ----------------------------------------------------------------------------------------------- tt: indexing

def program_id(axis: int = 0) -> Value:
    return op("tt.get_program_id", results=[i32()], attrs={"axis": axis}).result


def num_programs(axis: int = 0) -> Value:
    return op("tt.get_num_programs", results=[i32()], attrs={"axis": axis}).result


def make_range(start: int, end: int) -> Value:
    """``[start, end)`` as tensor<(end-start) x i32>; Triton needs end - start a power of two."""
    return op("tt.make_range", results=[tensor([end - start], i32())], attrs={"start": start, "end": end}).result


def splat(x: Value, shape_: Sequence[int]) -> Value:
    return op("tt.splat", [x], [tensor(shape_, x.type)]).result


def broadcast(x: Value, shape_: Sequence[int]) -> Value:
    """Broadcast x to shape_: x itself if its shape is shape_ (a scalar for []), splat for scalars, tt.broadcast
    for tensors with size-1 dims."""
    if shape(x) == list(shape_):
        return x
    if not shape(x):
        return splat(x, shape_)
    return op("tt.broadcast", [x], [tensor(shape_, elem(x))]).result


def expand_dims(x: Value, axis: int) -> Value:
    s = shape(x)
    s.insert(axis, 1)
    return op("tt.expand_dims", [x], [tensor(s, elem(x))], {"axis": axis}).result


def reshape(x: Value, shape_: Sequence[int]) -> Value:
    return op("tt.reshape", [x], [tensor(shape_, elem(x))]).result


def trans(x: Value, order: Sequence[int]) -> Value:
    s = shape(x)
    return op("tt.trans", [x], [tensor([s[i] for i in order], elem(x))], {"order": i32_array(order)}).result


def split(x: Value) -> tuple[Value, Value]:
    """Split the last dimension (of size 2) into two tensors."""
    s = shape(x)
    assert s[-1] == 2, "tt.split needs a last dimension of size 2"
    t = tensor(s[:-1], elem(x))
    o = op("tt.split", [x], [t, t])
    return o.results[0], o.results[1]


def addptr(p: Value, offset: Value | int) -> Value:
    """p + offset elements; a scalar pointer with a tensor offset is splat first."""
    if isinstance(offset, int):
        offset = c(offset, like(p, i32()) if shape(p) else i32())
    if shape(offset) and not shape(p):
        p = splat(p, shape(offset))
    elif shape(p) and not shape(offset):
        offset = splat(offset, shape(p))
    elif shape(p) != shape(offset):
        target = _broadcast_shape(shape(p), shape(offset))
        p, offset = broadcast(p, target), broadcast(offset, target)
    return op("tt.addptr", [p, offset], [p.type]).result


# ------------------------------------------------------------------------------------------- tt: memory

def load(p: Value, mask: Value | None = None, other: Value | Num | None = None, *, cache: str = "",
         evict: str = "", volatile: bool = False) -> Value:
    """tt.load through a pointer or tensor of pointers; masked-off lanes read ``other`` (default: undefined)."""
    elem_t = pointee(elem(p))
    result = like(p, elem_t)
    operands = [p]
    if mask is not None:
        operands.append(broadcast(mask, shape(p)) if shape(p) else mask)
        if other is not None:
            if not isinstance(other, ir.Value):
                other = c(other, result)
            operands.append(other)
    segments = [1, 1 if mask is not None else 0, 1 if mask is not None and other is not None else 0]
    return op("tt.load", operands, [result],
              {"cache": CACHE[cache], "evict": EVICT[evict], "isVolatile": volatile,
               "operandSegmentSizes": i32_array(segments)}).result


def store(p: Value, value: Value, mask: Value | None = None, *, cache: str = "", evict: str = "") -> None:
    operands = [p, value]
    if mask is not None:
        operands.append(broadcast(mask, shape(p)) if shape(p) else mask)
    op("tt.store", operands, [], {"cache": CACHE[cache], "evict": EVICT[evict]})


def atomic_rmw(kind: str, p: Value, value: Value, mask: Value | None = None, *, sem: str = "acq_rel",
               scope: str = "gpu") -> Value:
    """tt.atomic_rmw ``kind`` ('add', 'fadd', 'max', 'xchg', ...) with memory semantic and scope; returns the old
    value(s)."""
    operands = [p, value]
    if mask is not None:
        operands.append(mask)
    return op("tt.atomic_rmw", operands, [value.type],
              {"atomic_rmw_op": RMW[kind], "sem": SEM[sem], "scope": SCOPE[scope]}).result


def atomic_cas(p: Value, cmp: Value, value: Value, *, sem: str = "relaxed", scope: str = "gpu") -> Value:
    """tt.atomic_cas: where *p == cmp, *p := value (one atomic per element); returns the old value(s)."""
    return op("tt.atomic_cas", [p, cmp, value], [value.type], {"sem": SEM[sem], "scope": SCOPE[scope]}).result


def make_desc(base: Value, shape_: Sequence[Value], strides: Sequence[Value], block_shape: Sequence[int]) -> Value:
    """A device-side TMA descriptor (tt.make_tensor_descriptor) over a row-major global tensor: shape_ i32 values,
    strides i64 values (innermost stride 1). The launcher must provide Triton's global scratch allocator
    (``triton.set_allocator``): each program writes its descriptors there."""
    t = desc_type(block_shape, pointee(base.type))
    return op("tt.make_tensor_descriptor", [base, *shape_, *strides], [t]).result


def desc_load(d: Value, indices: Sequence[Value]) -> Value:
    """A block at ``indices`` (element coordinates); out-of-bounds elements read as zero."""
    return op("tt.descriptor_load", [d, *indices], [desc_block(d.type)]).result


def desc_store(d: Value, value: Value, indices: Sequence[Value]) -> None:
    """Store a block at ``indices``; out-of-bounds elements are dropped. Asynchronous (TMA): use pointer stores
    when a signal must follow the store."""
    op("tt.descriptor_store", [d, value, *indices])


def barrier() -> None:
    """A CTA-wide barrier (``gpu.barrier``; Triton 3.6 has no tt.debug_barrier)."""
    op("gpu.barrier")


def inline_asm(asm: str, constraints: str, operands: Sequence[Value], result: ir.Type, *, pure: bool,
               packed_element: int = 1) -> Value:
    """tt.elementwise_inline_asm: asm applied to each element (operands scalar or all of one shape)."""
    return op("tt.elementwise_inline_asm", operands, [result],
              {"asm_string": asm, "constraints": constraints, "packed_element": packed_element, "pure": pure}).result


def hint(value: Value, name: str, amount: int) -> Value:
    """Attach an AxisInfo hint (``tt.divisibility``/``tt.contiguity``/``tt.constancy``, one entry per dim) to the op
    defining value; Triton's axis analysis takes it over what it derives. Returns value."""
    owner = value.owner
    owner = owner.operation if isinstance(owner, ir.OpView) else owner
    rank = max(1, len(shape(value)))
    owner.attributes[f"tt.{name}"] = ir.DenseElementsAttr.get_splat(tensor([rank], i32()),
                                                                    ir.IntegerAttr.get(i32(), amount))
    return value


# ------------------------------------------------------------------------------------------------- tt: math

def _reduce(x: Value, axis: int, combine: Callable) -> Value:
    """One tt.reduce of x along ``axis`` with the integer combiner ``combine`` (arith.addi, arith.minsi, ...)."""
    s, e = shape(x), elem(x)
    rest = s[:axis] + s[axis + 1:]
    r = op("tt.reduce", [x], [tensor(rest, e) if rest else e], {"axis": axis}, regions=1)
    block = r.regions[0].blocks.append(e, e)
    with ir.InsertionPoint(block):
        op("tt.reduce.return", [combine(block.arguments[0], block.arguments[1])])
    return r.result


def reduce_min(x: Value) -> Value:
    """The (signed) minimum of all elements of an integer tensor, one tt.reduce per dimension; a scalar is
    returned unchanged."""
    while shape(x):
        x = _reduce(x, 0, arith.minsi)
    return x


def reduce_sum(x: Value, axis: int | None = None) -> Value:
    """The sum of an integer tensor's elements along ``axis`` (None: all of them, a scalar), wrapping as the
    element type does."""
    if axis is not None:
        return _reduce(x, axis, arith.addi)
    while shape(x):
        x = _reduce(x, 0, arith.addi)
    return x


def cumsum(x: Value) -> Value:
    """Inclusive prefix sums of a 1-D integer tensor (tt.scan with arith.addi)."""
    e = elem(x)
    r = op("tt.scan", [x], [x.type], {"axis": 0, "reverse": False}, regions=1)
    block = r.regions[0].blocks.append(e, e)
    with ir.InsertionPoint(block):
        op("tt.scan.return", [arith.addi(block.arguments[0], block.arguments[1])])
    return r.result


def dot(a: Value, b: Value, acc: Value, *, precision: str = "tf32", max_imprecise_acc: int | None = None) -> Value:
    """acc + a @ b (tt.dot). ``precision`` matters for fp32 inputs only."""
    attrs = {"inputPrecision": PRECISION[precision]}
    if max_imprecise_acc is not None:
        attrs["maxNumImpreciseAcc"] = max_imprecise_acc
    return op("tt.dot", [a, b, acc], [acc.type], attrs).result


# -------------------------------------------------------------------------------------------------- arith

def _broadcast_shape(a: list[int], b: list[int]) -> list[int]:
    if len(a) != len(b):
        raise ValueError(f"cannot broadcast shapes {a} and {b} (ranks differ)")
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ValueError(f"cannot broadcast shapes {a} and {b}")
        out.append(max(x, y))
    return out


def coerce(a: Value | Num, b: Value | Num) -> tuple[Value, Value]:
    """Make a and b the same type: numbers become constants of the other's type, scalars are splat to the
    other's shape, size-1 dims are broadcast."""
    if not isinstance(a, ir.Value) and not isinstance(b, ir.Value):
        raise TypeError("at least one operand must be an IR value")
    if not isinstance(a, ir.Value):
        a = c(a, b.type)
    if not isinstance(b, ir.Value):
        b = c(b, a.type)
    sa, sb = shape(a), shape(b)
    if sa != sb:
        target = sb if not sa else sa if not sb else _broadcast_shape(sa, sb)
        a, b = broadcast(a, target), broadcast(b, target)
    return a, b


def _binary(name: str, int_op: Callable, float_op: Callable | None = None, doc: str = "") -> Callable[..., Value]:
    """The helper ``name(a, b)``: a and b made alike (``coerce``), then int_op, or float_op for float operands."""
    def build(a, b) -> Value:
        a, b = coerce(a, b)
        if not is_float(elem(a)):
            return int_op(a, b)
        if float_op is None:
            raise TypeError(f"ttir.{name} takes integer operands, got {elem(a)}")
        return float_op(a, b)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = doc or f"arith.{int_op.__name__}" + (f" (arith.{float_op.__name__} for floats)" if float_op else "")
    return build


add = _binary("add", arith.addi, arith.addf)
sub = _binary("sub", arith.subi, arith.subf)
mul = _binary("mul", arith.muli, arith.mulf)
div = _binary("div", arith.divsi, arith.divf, "Signed integer division (arith.divsi), or arith.divf.")
rem = _binary("rem", arith.remsi)
min_ = _binary("min_", arith.minsi)
max_ = _binary("max_", arith.maxsi)
and_ = _binary("and_", arith.andi)
or_ = _binary("or_", arith.ori)


_CMP = {"eq": 0, "ne": 1, "slt": 2, "sle": 3, "sgt": 4, "sge": 5}


def cmp(pred: str, a, b) -> Value:
    """arith.cmpi with a signed predicate ('eq', 'ne', 'slt', 'sle', 'sgt', 'sge')."""
    a, b = coerce(a, b)
    return arith.cmpi(_CMP[pred], a, b)


def lt(a, b) -> Value:
    return cmp("slt", a, b)


def ge(a, b) -> Value:
    return cmp("sge", a, b)


def select(cond: Value, a, b) -> Value:
    a, b = coerce(a, b)
    if shape(a) and not shape(cond):
        cond = splat(cond, shape(a))
    return arith.select(cond, a, b)


def cdiv(a, b) -> Value:
    """ceil(a / b) for non-negative a and positive b."""
    return div(add(a, sub(b, 1) if isinstance(b, ir.Value) else b - 1), b)


def int_cast(x: Value, to: ir.Type) -> Value:
    """An integer scalar or tensor as element type ``to``: sign-extended, truncated, or x itself if equal."""
    src, dst = ir.IntegerType(elem(x)).width, ir.IntegerType(to).width
    if src == dst:
        return x
    return arith.extsi(like(x, to), x) if src < dst else arith.trunci(like(x, to), x)


def cast(x: Value, to: ir.Type | str) -> Value:
    """Convert a float tensor/scalar to another float element type (truncf/extf); no-op if equal."""
    to = dtype(to) if isinstance(to, str) else to
    src = elem(x)
    if src == to:
        return x
    if not (is_float(src) and is_float(to)):
        raise TypeError(f"cast supports float types only, got {src} -> {to}")
    if src.width > to.width or (src.width == to.width and to == ir.BF16Type.get()):
        return arith.truncf(like(x, to), x)
    return arith.extf(like(x, to), x)


# ------------------------------------------------------------------------------------------------- control

class For:
    """``scf.for lb to ub step st iter_args(...)`` over i32 (or index) bounds, as a context manager:

        with For(0, k_tiles, 1, [acc]) as loop:
            (acc,) = loop.args
            ...
            loop.yield_(new_acc)
        acc = loop.results[0]

    ``attrs`` become discardable attributes of the loop (e.g. ``{"tt.flatten": True}``: a unit attribute)."""

    def __init__(self, lb, ub, step, iter_args: Sequence[Value] = (), attrs: dict | None = None):
        ref = next((v for v in (lb, ub, step) if isinstance(v, ir.Value)), None)
        t = ref.type if ref is not None else i32()
        lb, ub, step = (v if isinstance(v, ir.Value) else c(v, t) for v in (lb, ub, step))
        self.op = scf.ForOp(lb, ub, step, list(iter_args))
        for key, value in (attrs or {}).items():
            if value is True:
                self.op.operation.attributes[key] = ir.UnitAttr.get()
            elif value not in (None, False):
                self.op.operation.attributes[key] = _attr(value)
        self._yielded = False

    @property
    def iv(self) -> Value:
        return self.op.induction_variable

    @property
    def args(self) -> list[Value]:
        return list(self.op.inner_iter_args)

    @property
    def results(self) -> list[Value]:
        return list(self.op.results)

    def yield_(self, *values: Value) -> None:
        scf.YieldOp(list(values))
        self._yielded = True

    def __enter__(self) -> "For":
        self._ip = ir.InsertionPoint(self.op.body)
        self._ip.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None and not self._yielded:
            scf.YieldOp([])
        self._ip.__exit__(exc_type, exc, tb)
        return False


@contextlib.contextmanager
def if_(cond: Value) -> Iterator[None]:
    """``scf.if cond { ... }`` with no results and no else branch."""
    if_op = scf.IfOp(cond)
    with ir.InsertionPoint(if_op.then_block):
        yield
        scf.YieldOp([])


def bounded_spin(poll: Callable[[], Value], value: Value, *, bound: Value, err: Value, tag: Value,
                 pause: Callable[[Value], Value] | None = None) -> Value:
    """Spin until ``poll()`` (an i32, e.g. the minimum of the slots it read) is >= value (signed), stopping once
    ``bound`` (i64) polls have failed; returns the last value seen. The count is a loop-carried i64, a register:
    a poll costs poll's own memory access(es) and nothing more.

    Giving up (seen < value when the loop ends) is recorded in the error record ``err`` (``!tt.ptr<i32>``,
    16-byte aligned: [count, tag, value seen, unused]) and the kernel goes on: err[0] += 1, err[1] = tag,
    err[2] = seen (relaxed atomics at gpu scope; one thread per program, as Triton does scalar atomics). The
    executor reads the record after the call and raises WaitTimeoutError (ditron.runtime.timeouts). ``pause``: run on
    the value seen after each failed poll (a vendor's back-off), its result carried instead."""
    count_t = i64()
    loop = scf.WhileOp([count_t, value.type], [c(0, count_t)])
    before = loop.before.blocks.append(count_t)
    after = loop.after.blocks.append(count_t, value.type)
    with ir.InsertionPoint(before):
        polls = before.arguments[0]
        seen = poll()
        scf.ConditionOp(and_(lt(seen, value), lt(polls, bound)), [polls, seen])
    with ir.InsertionPoint(after):
        if pause is not None:
            pause(after.arguments[1])
        scf.YieldOp([add(after.arguments[0], 1)])
    seen = loop.results[1]
    with if_(lt(seen, value)):
        atomic_rmw("add", err, c(1), c(True), sem="relaxed", scope="gpu")
        atomic_rmw("xchg", addptr(err, 1), tag, c(True), sem="relaxed", scope="gpu")
        atomic_rmw("xchg", addptr(err, 2), seen, c(True), sem="relaxed", scope="gpu")
    return seen


def func(name: str, args: Sequence[tuple[str, ir.Type, dict]], *, public: bool = True,
         attrs: dict | None = None) -> tuple[ir.Operation, list[Value]]:
    """A ``tt.func`` with named arguments (name, type, {attr: value}) and one entry block; returns (op, block args).
    Argument names become the arguments' locations (as Triton's frontend does)."""
    arg_types = [t for _, t, _ in args]
    fn_type = ir.FunctionType.get(arg_types, [])
    arg_attrs = ir.ArrayAttr.get([ir.DictAttr.get({k: _attr(v) for k, v in a.items()}) for _, _, a in args])
    attributes = {"function_type": ir.TypeAttr.get(fn_type), "sym_name": ir.StringAttr.get(name),
                  "sym_visibility": ir.StringAttr.get("public" if public else "private"), "arg_attrs": arg_attrs}
    attributes.update({k: _attr(v) for k, v in (attrs or {}).items()})
    f = ir.Operation.create("tt.func", attributes=attributes, regions=1)
    loc = ir.Location.current
    block = f.regions[0].blocks.append(*arg_types, arg_locs=[ir.Location.name(n, childLoc=loc) for n, _, _ in args])
    return f, list(block.arguments)


def ret() -> None:
    op("tt.return")


def module_text(module: ir.Module | ir.Operation, *, debug_info: bool = True) -> str:
    """The module in generic form (what Triton's parser reads), with locations unless debug_info is False."""
    operation = module.operation if isinstance(module, (ir.Module, ir.OpView)) else module
    return operation.get_asm(print_generic_op_form=True, enable_debug_info=debug_info)
