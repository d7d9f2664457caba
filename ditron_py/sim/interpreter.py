"""The host side of one rank: runs a Program's ops in program order and yields the device work it enqueues.

Values are Python ints (index and integer values; i1 is 0/1) and buffer keys for memrefs: ``("arg", i)`` for
argument i (a fresh buffer per call), ``("sym", j)`` for the j-th ``alloc_symmetric`` (one per rank, kept across
calls). ``run(call)`` is a generator of ``Item``s; the scheduler takes one item per step and puts it on its stream.
A ``wait {where = "kernel"}`` in the host program (a wait the lowering will move into a kernel) runs as a stream
wait here: it orders the same work.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from ..dialects import device
from .program import Block, Op, Program
from .report import Loc, SimulationError

BufferKey = tuple[str, int]

_MASK64 = (1 << 64) - 1


@dataclass
class Item:
    """Device work enqueued on a stream. ``clock`` is the host's release at enqueue time (set by the scheduler)."""

    kind: str               # "copy" | "signal" | "wait" | "barrier" | "launch"
    loc: Loc
    stream: int
    call: int
    args: dict[str, Any]
    clock: np.ndarray | None = field(default=None, repr=False)


def _signed(x: int) -> int:
    x &= _MASK64
    return x - (1 << 64) if x >> 63 else x


def _unsigned(x: int) -> int:
    return x & _MASK64


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _cmp(pred: int, a: int, b: int) -> bool:
    if pred >= 6:
        a, b = _unsigned(a), _unsigned(b)
    return (a == b, a != b, a < b, a <= b, a > b, a >= b, a < b, a <= b, a > b, a >= b)[pred]


def _binary(name: str, a: int, b: int) -> int:
    if name in ("arith.divsi", "arith.divui", "arith.remsi", "arith.remui", "arith.ceildivsi", "arith.ceildivui",
                "arith.floordivsi") and b == 0:
        raise ZeroDivisionError
    return {
        "arith.addi": lambda: a + b,
        "arith.subi": lambda: a - b,
        "arith.muli": lambda: a * b,
        "arith.divsi": lambda: _trunc_div(a, b),
        "arith.divui": lambda: _unsigned(a) // _unsigned(b),
        "arith.remsi": lambda: a - b * _trunc_div(a, b),
        "arith.remui": lambda: _unsigned(a) % _unsigned(b),
        "arith.ceildivsi": lambda: -((-a) // b),
        "arith.ceildivui": lambda: -((-_unsigned(a)) // _unsigned(b)),
        "arith.floordivsi": lambda: a // b,
        "arith.minsi": lambda: min(a, b),
        "arith.maxsi": lambda: max(a, b),
        "arith.minui": lambda: a if _unsigned(a) <= _unsigned(b) else b,
        "arith.maxui": lambda: a if _unsigned(a) >= _unsigned(b) else b,
        "arith.andi": lambda: a & b,
        "arith.ori": lambda: a | b,
        "arith.xori": lambda: a ^ b,
        "arith.shli": lambda: a << b,
        "arith.shrsi": lambda: a >> b,
        "arith.shrui": lambda: _unsigned(a) >> b,
    }[name]()


class HostInterpreter:
    """Runs the host program of one rank."""

    def __init__(self, program: Program, rank: int, world_size: int):
        self.program = program
        self.rank = rank
        self.world_size = world_size

    def run(self, call: int, epoch: int | None = None) -> Iterator[Item]:
        """Call ``call`` (1, 2, ...) with the epoch argument ``epoch`` (default: the call's number)."""
        env: dict[int, Any] = {}
        for a in self.program.args:
            env[a.value] = (call if epoch is None else epoch) if a.io == "epoch" else ("arg", a.index)
        self._allocs_seen: set[int] = set()
        self._call = call
        yield from self._block(self.program.body, env)

    def _block(self, block: Block, env: dict[int, Any]) -> Iterator[Item]:
        for op in block.ops:
            if op.name == "scf.yield" or op.name == "func.return":
                env["__yield__"] = [env[v] for v in op.operands]
                return
            if op.name.startswith("ditron_device."):
                item = self._device(op, env)
                if item is not None:
                    yield item
            elif op.name == "scf.for":
                yield from self._for(op, env)
            elif op.name == "scf.if":
                yield from self._if(op, env)
            else:
                self._arith(op, env)

    def _arith(self, op: Op, env: dict[int, Any]) -> None:
        name = op.name
        vals = [env[v] for v in op.operands]
        try:
            if name == "arith.constant":
                r = op.attrs["value"]
            elif name == "arith.cmpi":
                r = int(_cmp(op.attrs["predicate"], vals[0], vals[1]))
            elif name == "arith.select":
                r = vals[1] if vals[0] else vals[2]
            elif name in ("arith.index_cast", "arith.extsi", "arith.index_castui", "arith.extui"):
                r = _unsigned(vals[0]) if name in ("arith.extui", "arith.index_castui") and vals[0] < 0 else vals[0]
            elif name == "arith.trunci":
                w = op.attrs["width"]
                r = vals[0] & ((1 << w) - 1)
                if w > 1 and r >> (w - 1):
                    r -= 1 << w
            else:
                r = _signed(_binary(name, vals[0], vals[1]))
        except ZeroDivisionError:
            raise SimulationError.at(op.loc, f"'{name}' divides by zero on rank {self.rank}") from None
        env[op.results[0]] = r

    def _for(self, op: Op, env: dict[int, Any]) -> Iterator[Item]:
        lb, ub, step, *inits = [env[v] for v in op.operands]
        if step <= 0:
            raise SimulationError.at(op.loc, f"scf.for step must be positive, got {step} on rank {self.rank}")
        body = op.regions[0]
        carried = list(inits)
        i = lb
        while i < ub:
            inner = dict(env)
            inner[body.args[0]] = i
            for a, v in zip(body.args[1:], carried):
                inner[a] = v
            yield from self._block(body, inner)
            carried = inner.get("__yield__", [])
            i += step
        for r, v in zip(op.results, carried):
            env[r] = v

    def _if(self, op: Op, env: dict[int, Any]) -> Iterator[Item]:
        cond = env[op.operands[0]]
        region = op.regions[0] if cond else (op.regions[1] if len(op.regions) > 1 else None)
        if region is None:
            return
        inner = dict(env)
        yield from self._block(region, inner)
        for r, v in zip(op.results, inner.get("__yield__", [])):
            env[r] = v

    def _device(self, op: Op, env: dict[int, Any]) -> Item | None:
        name, a, loc = op.name, op.attrs, op.loc
        vals = [env[v] for v in op.operands]
        if name == device.Rank.op_name():
            env[op.results[0]] = self.rank
            return None
        if name == device.NumRanks.op_name():
            env[op.results[0]] = self.world_size
            return None
        if name == device.AllocSymmetric.op_name():
            if a["alloc"] in self._allocs_seen:
                raise SimulationError.at(
                    loc, f"alloc_symmetric {a['label']} runs more than once in one call (inside a loop?); every "
                    f"symmetric buffer is allocated once, before the first launch")
            self._allocs_seen.add(a["alloc"])
            env[op.results[0]] = ("sym", a["alloc"])
            return None
        stream = a["stream"]
        if name == device.Copy.op_name():
            n = a["ndim"]
            src, dst, src_rank, dst_rank, *coords = vals
            return Item("copy", loc, stream, self._call, {
                "src": src, "dst": dst, "src_rank": src_rank, "dst_rank": dst_rank,
                "src_off": tuple(coords[:n]), "dst_off": tuple(coords[n:2 * n]), "sizes": tuple(coords[2 * n:]),
                "engine": a["engine"]})
        if name == device.Signal.op_name():
            pad, target, slot, value = vals
            return Item("signal", loc, stream, self._call, {"pad": pad, "target": target, "slot": slot,
                                                           "value": value, "op": a["op"], "scope": a["scope"]})
        if name == device.Wait.op_name():
            pad, value, *slots = vals
            return Item("wait", loc, stream, self._call, {"pad": pad, "value": value, "slots": tuple(slots),
                                                         "where": a["where"]})
        if name == device.Barrier.op_name():
            return Item("barrier", loc, stream, self._call, {"pad": vals[0]})
        if name == device.Launch.op_name():
            return Item("launch", loc, stream, self._call, {
                "kernel": a["kernel"], "operands": vals, "grid": a["grid"], "sm_budget": a["sm_budget"],
                "tile_order": a["tile_order"]})
        raise SimulationError.at(loc, f"'{name}' cannot be simulated")
