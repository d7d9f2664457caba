"""Typed builders and accessors of ditron_task (the Task level). Declared in task.irdl.mlir."""
from __future__ import annotations

from typing import Sequence

from mlir import ir

from .opbase import Attr, BoolAttr, DictAttr, IntAttr, Operand, OpWrapper, Result, StrAttr
from .sharding import Sharding
from ..schema import GATED_ACTS  # noqa: F401 - grouped_matmul's gated activations, checked by verify.py

REDUCTIONS = ("sum", "max", "min", "prod")

# fn name -> arity (None: any number >= 1) of ditron_task.elementwise
ELEMENTWISE_FNS: dict[str, int | None] = {
    "add": 2, "sub": 2, "mul": 2, "div": 2, "max": 2, "min": 2,
    "neg": 1, "relu": 1, "silu": 1, "gelu": 1, "exp": 1, "sigmoid": 1, "tanh": 1, "copy": 1,
    "silu_mul": 2,  # silu(a) * b, the gated MLP's activation
    "cast": 1,  # the operand in the result's element type (the one fn whose types differ)
}
# A binary fn's second operand may be a rank-1 [N] tensor against a rank-2 [M, N] result: broadcast over the rows
# (a per-column bias, numpy's trailing-dim rule).


def tensor_type(shape: Sequence[int], element_type: ir.Type) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(list(shape), element_type)


def with_dim(t: ir.RankedTensorType, dim: int, size: int) -> ir.RankedTensorType:
    shape = list(t.shape)
    shape[dim] = size
    return ir.RankedTensorType.get(shape, t.element_type)


class TaskOp(OpWrapper):
    DIALECT = "ditron_task"


class Shard(TaskOp):
    NAME = "shard"
    input = Operand(0)
    output = Result(0)
    sharding_attr = DictAttr("sharding")

    @property
    def sharding(self) -> Sharding:
        return Sharding.from_attr(self.op.attributes["sharding"])

    @classmethod
    def build(cls, x: ir.Value, sharding: Sharding, *, loc=None, ip=None) -> "Shard":
        return cls.create(operands=[x], results=[x.type], sharding=sharding.to_attr(), loc=loc, ip=ip)


# matmul's optional transpose_b and fast_accum: not IRDL-declared attributes (IRDL's attributes are required), read
# by Matmul.transpose_b / fast_accum and checked by the verifier (dialects/verify.py)
_TRANSPOSE_B = BoolAttr("transpose_b")
_FAST_ACCUM = BoolAttr("fast_accum")
# grouped_matmul's optional gated activation, likewise
_GATED = StrAttr("gated")


class Matmul(TaskOp):
    """C[M, N] = A[M, K] @ B[K, N]; with ``transpose_b``, B is given as [N, K] (nn.Linear's weight layout), which
    the GEMM template reads in place (no transposed copy). ``fast_accum`` (fp8 operands only; torch._scaled_mm's
    use_fast_accum): the tensor cores accumulate all of K in their reduced precision (default: each K step's sum
    is added into fp32, kernels/gemm's fast_accum)."""
    NAME = "matmul"
    lhs = Operand(0)
    rhs = Operand(1)
    result = Result(0)
    @property
    def transpose_b(self) -> bool:
        """Raises ValueError when the attribute is there but not a boolean."""
        attrs = self.op.attributes
        return "transpose_b" in attrs and _TRANSPOSE_B.to_py(attrs["transpose_b"])

    @property
    def fast_accum(self) -> bool:
        """Raises ValueError when the attribute is there but not a boolean."""
        attrs = self.op.attributes
        return "fast_accum" in attrs and _FAST_ACCUM.to_py(attrs["fast_accum"])

    @property
    def b_dims(self) -> tuple[int, int]:
        """(K dim, N dim) of the rhs: (0, 1), or (1, 0) with transpose_b."""
        return (1, 0) if self.transpose_b else (0, 1)

    @classmethod
    def build(cls, a: ir.Value, b: ir.Value, *, result_type: ir.Type | None = None, transpose_b: bool = False,
              fast_accum: bool = False, loc=None, ip=None) -> "Matmul":
        if result_type is None:
            at, bt = ir.RankedTensorType(a.type), ir.RankedTensorType(b.type)
            result_type = tensor_type([at.shape[0], bt.shape[0 if transpose_b else 1]], at.element_type)
        mm = cls.create(operands=[a, b], results=[result_type], loc=loc, ip=ip)
        if transpose_b:
            mm.op.attributes["transpose_b"] = ir.BoolAttr.get(True)
        if fast_accum:
            mm.op.attributes["fast_accum"] = ir.BoolAttr.get(True)
        return mm


class GroupedMatmul(TaskOp):
    """result[rows of group g] = lhs[rows of group g] @ rhs[g % E]: G group sizes (G a multiple of rhs's E
    experts; G = E: one group an expert). ``gated`` (an activation of GATED_ACTS): rhs is [E, K, 2N], the gate's
    N columns then the up's, and the result [T, N] is act(lhs @ gate) * (lhs @ up)."""
    NAME = "grouped_matmul"
    lhs = Operand(0)
    rhs = Operand(1)
    group_sizes = Operand(2)
    result = Result(0)

    @property
    def gated(self) -> str | None:
        """Raises ValueError when the attribute is there but not a string."""
        attrs = self.op.attributes
        return _GATED.to_py(attrs["gated"]) if "gated" in attrs else None

    @classmethod
    def build(cls, a: ir.Value, b: ir.Value, group_sizes: ir.Value, *, result_type: ir.Type | None = None,
              gated: str | None = None, loc=None, ip=None) -> "GroupedMatmul":
        if result_type is None:
            at, bt = ir.RankedTensorType(a.type), ir.RankedTensorType(b.type)
            result_type = tensor_type([at.shape[0], bt.shape[2] // (2 if gated else 1)], at.element_type)
        gm = cls.create(operands=[a, b, group_sizes], results=[result_type], loc=loc, ip=ip)
        if gated:
            gm.op.attributes["gated"] = _GATED.to_attr(gated)
        return gm


class Elementwise(TaskOp):
    NAME = "elementwise"
    input = Operand(0)
    more = Operand(1, variadic=True)  # its own IRDL variable: a bias' type differs from the input's
    result = Result(0)
    fn = StrAttr("fn")

    @property
    def inputs(self) -> list[ir.Value]:
        """Every operand, in order."""
        return [self.input, *self.more]

    @classmethod
    def build(cls, fn: str, *inputs: ir.Value, result_type: ir.Type | None = None, loc=None,
              ip=None) -> "Elementwise":
        return cls.create(operands=list(inputs), results=[result_type or inputs[0].type], fn=fn, loc=loc, ip=ip)


class AllGather(TaskOp):
    NAME = "all_gather"
    input = Operand(0)
    output = Result(0)
    dim = IntAttr("dim")
    axis = StrAttr("axis")

    @classmethod
    def build(cls, x: ir.Value, *, dim: int, axis: str, axis_size: int, loc=None, ip=None) -> "AllGather":
        t = ir.RankedTensorType(x.type)
        size = t.shape[dim] * axis_size if t.shape[dim] >= 0 else t.shape[dim]
        return cls.create(operands=[x], results=[with_dim(t, dim, size)], dim=dim, axis=axis, loc=loc, ip=ip)


class ReduceScatter(TaskOp):
    NAME = "reduce_scatter"
    input = Operand(0)
    output = Result(0)
    dim = IntAttr("dim")
    axis = StrAttr("axis")
    reduce = StrAttr("reduce")

    @classmethod
    def build(cls, x: ir.Value, *, dim: int, axis: str, axis_size: int, reduce: str = "sum", loc=None,
              ip=None) -> "ReduceScatter":
        t = ir.RankedTensorType(x.type)
        size = t.shape[dim] // axis_size if t.shape[dim] >= 0 else t.shape[dim]
        return cls.create(operands=[x], results=[with_dim(t, dim, size)], dim=dim, axis=axis, reduce=reduce,
                          loc=loc, ip=ip)


class AllReduce(TaskOp):
    NAME = "all_reduce"
    input = Operand(0)
    output = Result(0)
    axis = StrAttr("axis")
    reduce = StrAttr("reduce")

    @classmethod
    def build(cls, x: ir.Value, *, axis: str, reduce: str = "sum", loc=None, ip=None) -> "AllReduce":
        return cls.create(operands=[x], results=[x.type], axis=axis, reduce=reduce, loc=loc, ip=ip)


class AllToAll(TaskOp):
    NAME = "all_to_all"
    input = Operand(0)
    split_sizes = Operand(1, optional=True)
    output = Result(0)
    recv_counts = Result(1, optional=True)  # the bounded form: rows received from each rank (tensor<W x i32>)
    split_dim = IntAttr("split_dim")
    concat_dim = IntAttr("concat_dim")
    axis = StrAttr("axis")

    @classmethod
    def build(cls, x: ir.Value, *, split_dim: int, concat_dim: int, axis: str, axis_size: int,
              split_sizes: ir.Value | None = None, capacity: int | None = None, loc=None,
              ip=None) -> "AllToAll":
        """Static (equal parts) without split_sizes; with them, ``capacity`` None: one result whose dim is
        dynamic (unbounded), else the bounded form: (output with ``capacity`` rows along the dim, recv_counts)."""
        t = ir.RankedTensorType(x.type)
        shape = list(t.shape)
        results = []
        if split_sizes is not None:
            shape[concat_dim] = ir.ShapedType.get_dynamic_size() if capacity is None else capacity
        elif capacity is not None:
            raise ValueError("all_to_all: capacity bounds parts of run-time sizes; it needs split_sizes")
        else:
            shape[split_dim] //= axis_size
            shape[concat_dim] *= axis_size
        results.append(tensor_type(shape, t.element_type))
        if capacity is not None:
            results.append(tensor_type([axis_size], ir.IntegerType.get_signless(32)))
        operands = [x] + ([split_sizes] if split_sizes is not None else [])
        return cls.create(operands=operands, results=results, split_dim=split_dim,
                          concat_dim=concat_dim, axis=axis, loc=loc, ip=ip)

    @property
    def bounded(self) -> bool:
        """Parts of run-time sizes into an output of bounded capacity, with the received counts."""
        return self.split_sizes is not None and self.recv_counts is not None

    @property
    def capacity(self) -> int:
        """The bounded form's capacity: the output's rows along the dim."""
        return int(ir.RankedTensorType(self.output.type).shape[self.concat_dim])


MAX_CUSTOM_INPUTS, MAX_CUSTOM_OUTPUTS = 8, 4  # task.irdl.mlir's optional groups of ditron_task.custom


class Custom(TaskOp):
    """A user's kernel program (``ditron.register_op``) called as an op, with its sharding rule."""

    NAME = "custom"
    inputs = Operand(0, variadic=True)
    kernel = StrAttr("kernel")
    axis = StrAttr("axis")
    in_shardings_attr = Attr("in_shardings")
    out_shardings_attr = Attr("out_shardings")
    params_attr = DictAttr("params")

    @property
    def outputs(self) -> list[ir.Value]:
        return list(self.op.results)

    @property
    def in_shardings(self) -> list[Sharding]:
        return [Sharding.from_attr(a) for a in ir.ArrayAttr(self.op.attributes["in_shardings"])]

    @property
    def out_shardings(self) -> list[Sharding]:
        return [Sharding.from_attr(a) for a in ir.ArrayAttr(self.op.attributes["out_shardings"])]

    @property
    def params(self) -> dict:
        from .opbase import attr_to_py
        return attr_to_py(self.op.attributes["params"])

    @classmethod
    def build(cls, kernel: str, inputs: Sequence[ir.Value], result_types: Sequence[ir.Type], *, axis: str,
              in_shardings: Sequence[Sharding], out_shardings: Sequence[Sharding], params: ir.Attribute | None = None,
              loc=None, ip=None) -> "Custom":
        if len(inputs) > MAX_CUSTOM_INPUTS or len(result_types) > MAX_CUSTOM_OUTPUTS:
            raise ValueError(f"a custom op takes at most {MAX_CUSTOM_INPUTS} inputs and {MAX_CUSTOM_OUTPUTS} "
                             f"outputs, got {len(inputs)} and {len(result_types)}")
        op = cls.create(operands=list(inputs), results=list(result_types), kernel=kernel, axis=axis,
                        in_shardings=ir.ArrayAttr.get([s.to_attr() for s in in_shardings]),
                        out_shardings=ir.ArrayAttr.get([s.to_attr() for s in out_shardings]),
                        params=params if params is not None else ir.DictAttr.get({}), loc=loc, ip=ip)
        op.op.attributes["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get(
            [1] * len(inputs) + [0] * (MAX_CUSTOM_INPUTS - len(inputs)))
        op.op.attributes["resultSegmentSizes"] = ir.DenseI32ArrayAttr.get(
            [1] * len(result_types) + [0] * (MAX_CUSTOM_OUTPUTS - len(result_types)))
        return op


OPS: tuple[type[TaskOp], ...] = (Shard, Matmul, GroupedMatmul, Elementwise, AllGather, ReduceScatter, AllReduce,
                                  AllToAll, Custom)
COLLECTIVES: tuple[type[TaskOp], ...] = (AllGather, ReduceScatter, AllReduce, AllToAll)
