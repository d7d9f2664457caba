"""Typed builders and accessors of ditron_task (the Task level). Declared in task.irdl.mlir."""
from __future__ import annotations

from typing import Sequence

from mlir import ir

from .opbase import DictAttr, IntAttr, Operand, OpWrapper, Result, StrAttr
from .sharding import Sharding

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


class Matmul(TaskOp):
    NAME = "matmul"
    lhs = Operand(0)
    rhs = Operand(1)
    result = Result(0)

    @classmethod
    def build(cls, a: ir.Value, b: ir.Value, *, result_type: ir.Type | None = None, loc=None, ip=None) -> "Matmul":
        if result_type is None:
            at, bt = ir.RankedTensorType(a.type), ir.RankedTensorType(b.type)
            result_type = tensor_type([at.shape[0], bt.shape[1]], at.element_type)
        return cls.create(operands=[a, b], results=[result_type], loc=loc, ip=ip)


class GroupedMatmul(TaskOp):
    NAME = "grouped_matmul"
    lhs = Operand(0)
    rhs = Operand(1)
    group_sizes = Operand(2)
    result = Result(0)

    @classmethod
    def build(cls, a: ir.Value, b: ir.Value, group_sizes: ir.Value, *, result_type: ir.Type | None = None,
              loc=None, ip=None) -> "GroupedMatmul":
        if result_type is None:
            at, bt = ir.RankedTensorType(a.type), ir.RankedTensorType(b.type)
            result_type = tensor_type([at.shape[0], bt.shape[2]], at.element_type)
        return cls.create(operands=[a, b, group_sizes], results=[result_type], loc=loc, ip=ip)


class Elementwise(TaskOp):
    NAME = "elementwise"
    inputs = Operand(0, variadic=True)
    result = Result(0)
    fn = StrAttr("fn")

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
    split_dim = IntAttr("split_dim")
    concat_dim = IntAttr("concat_dim")
    axis = StrAttr("axis")

    @classmethod
    def build(cls, x: ir.Value, *, split_dim: int, concat_dim: int, axis: str, axis_size: int,
              split_sizes: ir.Value | None = None, loc=None, ip=None) -> "AllToAll":
        t = ir.RankedTensorType(x.type)
        shape = list(t.shape)
        if split_sizes is not None:
            shape[concat_dim] = ir.ShapedType.get_dynamic_size()
        else:
            shape[split_dim] //= axis_size
            shape[concat_dim] *= axis_size
        operands = [x] + ([split_sizes] if split_sizes is not None else [])
        return cls.create(operands=operands, results=[tensor_type(shape, t.element_type)], split_dim=split_dim,
                          concat_dim=concat_dim, axis=axis, loc=loc, ip=ip)


OPS: tuple[type[TaskOp], ...] = (Shard, Matmul, GroupedMatmul, Elementwise, AllGather, ReduceScatter, AllReduce,
                                  AllToAll)
COLLECTIVES: tuple[type[TaskOp], ...] = (AllGather, ReduceScatter, AllReduce, AllToAll)
