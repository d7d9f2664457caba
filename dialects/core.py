"""Typed builders and accessors of ditron_core (distributed primitives inside a core kernel).
Declared in core.irdl.mlir; lowered per backend by ditron-lower-core-to-triton."""
from __future__ import annotations

from mlir import ir

from ..schema import NOTIFY_OPS, NOTIFY_RMW, NOTIFY_SEMANTICS, SCOPES, WAIT_SEMANTICS  # noqa: F401 - re-exported
from .opbase import Operand, OpWrapper, Result, StrAttr


def i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


class CoreOp(OpWrapper):
    DIALECT = "ditron_core"


class Rank(CoreOp):
    NAME = "rank"
    rank = Result(0)

    @classmethod
    def build(cls, *, loc=None, ip=None) -> "Rank":
        return cls.create(results=[i32()], loc=loc, ip=ip)


class NumRanks(CoreOp):
    NAME = "num_ranks"
    num_ranks = Result(0)

    @classmethod
    def build(cls, *, loc=None, ip=None) -> "NumRanks":
        return cls.create(results=[i32()], loc=loc, ip=ip)


class SymmAt(CoreOp):
    NAME = "symm_at"
    ptr = Operand(0)
    peer = Operand(1)
    result = Result(0)

    @classmethod
    def build(cls, ptr: ir.Value, peer: ir.Value, *, loc=None, ip=None) -> "SymmAt":
        return cls.create(operands=[ptr, peer], results=[ptr.type], loc=loc, ip=ip)


class Wait(CoreOp):
    NAME = "wait"
    ptr = Operand(0)
    value = Operand(1)
    token = Result(0)
    scope = StrAttr("scope")
    semantic = StrAttr("semantic")

    @classmethod
    def build(cls, ptr: ir.Value, value: ir.Value, *, scope: str = "sys", semantic: str = "acquire", loc=None,
              ip=None) -> "Wait":
        return cls.create(operands=[ptr, value], results=[i32()], scope=scope, semantic=semantic, loc=loc, ip=ip)


class ConsumeToken(CoreOp):
    NAME = "consume_token"
    value = Operand(0)
    token = Operand(1)
    result = Result(0)

    @classmethod
    def build(cls, value: ir.Value, token: ir.Value, *, loc=None, ip=None) -> "ConsumeToken":
        return cls.create(operands=[value, token], results=[value.type], loc=loc, ip=ip)


class Notify(CoreOp):
    NAME = "notify"
    ptr = Operand(0)
    peer = Operand(1)
    value = Operand(2)
    kind = StrAttr("op")
    scope = StrAttr("scope")
    semantic = StrAttr("semantic")

    @classmethod
    def build(cls, ptr: ir.Value, peer: ir.Value, value: ir.Value, *, op: str = "set", scope: str = "sys",
              semantic: str = "release", loc=None, ip=None) -> "Notify":
        return cls.create(operands=[ptr, peer, value], op=op, scope=scope, semantic=semantic, loc=loc, ip=ip)


class BarrierAll(CoreOp):
    NAME = "barrier_all"
    signals = Operand(0)
    scope = StrAttr("scope")

    @classmethod
    def build(cls, signals: ir.Value, *, scope: str = "sys", loc=None, ip=None) -> "BarrierAll":
        return cls.create(operands=[signals], scope=scope, loc=loc, ip=ip)


OPS: tuple[type[CoreOp], ...] = (Rank, NumRanks, SymmAt, Wait, ConsumeToken, Notify, BarrierAll)
