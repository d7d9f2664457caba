"""The runtime kernels: the small kernels the executor (ditron.runtime.executor) launches for a host program's
own waits, signals and barriers, beside the program's kernels. Built as generic TTIR, compiled with the rest;
``add_runtime_kernels`` appends those a host program needs (the pass ditron-emit-host-program calls it).

* ``ditron_rt_wait(pad, first, count, value, max_iters, err, tag)`` — spin (acquire, system scope, the backend's
  ``acquire_load``) until every slot ``pad[first .. first+count)`` (count <= WAIT_LANES) is >= value, at most
  ``max_iters`` (i64) polls; on giving up it adds 1 to ``err[0]`` and writes ``tag`` to ``err[1]`` (the executor maps
  the tag back to rank, slots and value and raises WaitTimeoutError).
* ``ditron_rt_signal_<set|add>_<scope>(pad, slot, peer, value)`` — ``pad[slot]`` on rank ``peer`` := value /
  += value with release semantics (``ditron_core.notify``); the executor uses it where the stream write-value
  memop is not available, and for "add".
* ``ditron_rt_barrier(pad, value, max_iters, err, tag, clear, clear_words)`` — a whole ``ditron_device.barrier``
  arrival in one launch: ``clear[0 .. clear_words)`` := 0, then ``pad[rank]`` := value on every rank (release,
  after the zeros), then the bounded spin of ``ditron_rt_wait`` on slots 0..num_ranks-1. Where the executor would
  signal and wait with kernels (a CUDA graph's stream 0), this is one kernel instead of W + 1; a graph's final
  barrier also zeroes the rank's pads of the other parity (clear_words 0 otherwise).
"""
from __future__ import annotations

from typing import Any

from mlir import ir

from ..dialects import device
from ..errors import CompileError

WAIT_KERNEL = "ditron_rt_wait"
BARRIER_KERNEL = "ditron_rt_barrier"
WAIT_LANES = 128          # slots one wait kernel checks at once (the executor splits longer runs)


def signal_kernel_name(op: str, scope: str) -> str:
    return f"ditron_rt_signal_{op}_{scope}"


def _sym_name(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def runtime_kernels_needed(program: dict[str, Any]) -> tuple[bool, list[tuple[str, str]], bool]:
    """(whether a wait kernel is needed, the (op, scope) pairs of the signal kernels needed, whether a barrier
    kernel is)."""
    need_wait, signals, need_barrier = False, set(), False

    def visit(ops):
        nonlocal need_wait, need_barrier
        for op in ops:
            name = op["op"]
            if name == device.Wait.op_name():
                need_wait = True
            elif name == device.Barrier.op_name():
                need_wait = need_barrier = True
                signals.add(("set", "sys"))
            elif name == device.Signal.op_name():
                signals.add((op["kind"], op["scope"]))
            for region in op.get("regions", ()):
                visit(region["body"])

    visit(program["body"])
    return need_wait, sorted(signals), need_barrier


def add_runtime_kernels(module: ir.Module, program: dict[str, Any], target: Any) -> None:
    """Append the runtime kernels program needs to module (tt.func, core level) and record their names in
    program["runtime"]. ``target``: a ditron Target (its backend supplies the acquire load)."""
    from ..backends import Target, get_backend

    target = target if isinstance(target, Target) else Target.parse(str(target))
    prims = get_backend(target).primitives
    need_wait, signals, need_barrier = runtime_kernels_needed(program)
    taken = {_sym_name(op.operation) for op in module.body.operations if "sym_name" in op.operation.attributes}
    runtime: dict[str, Any] = {"signal": {}}
    ip = ir.InsertionPoint(module.body)
    with ir.Location.name("ditron.runtime", childLoc=ir.Location.unknown()):
        if need_wait:
            _check_free(WAIT_KERNEL, taken)
            _wait_kernel(prims, ip)
            runtime["wait"] = WAIT_KERNEL
            runtime["wait_lanes"] = WAIT_LANES
        for op, scope in signals:
            name = signal_kernel_name(op, scope)
            _check_free(name, taken)
            _signal_kernel(name, op, scope, ip)
            runtime["signal"][f"{op}:{scope}"] = name
        if need_barrier:
            _check_free(BARRIER_KERNEL, taken)
            _barrier_kernel(prims, ip)
            runtime["barrier"] = BARRIER_KERNEL
    program["runtime"] = runtime


def _check_free(name: str, taken: set[str]) -> None:
    if name in taken:
        raise CompileError(f"the module defines '@{name}', a name ditron reserves for its runtime kernels; "
                           "rename that symbol")


def _wait_kernel(prims, ip: ir.InsertionPoint) -> None:
    from ..dialects import ttir as T

    with ip:
        f, (pad, first, count, value, max_iters, err, tag) = T.func(WAIT_KERNEL, [
            ("pad", T.ptr("i32"), {"tt.divisibility": 4}), ("first", T.i32(), {}), ("count", T.i32(), {}),
            ("value", T.i32(), {}), ("max_iters", T.i64(), {}), ("err", T.ptr("i32"), {"tt.divisibility": 16}),
            ("tag", T.i32(), {})])
    with ir.InsertionPoint(f.regions[0].blocks[0]):
        _spin_on(prims, pad, first, count, value, max_iters, err, tag)
        T.ret()


def _spin_on(prims, pad, first, count, value, max_iters, err, tag) -> None:
    """The bounded spin until slots pad[first .. first+count) (count <= WAIT_LANES) are all >= value."""
    from ..backends.ops import MLIR_OPS
    from ..dialects import ttir as T

    lanes = T.make_range(0, WAIT_LANES)
    idx = T.add(T.min_(lanes, T.sub(count, 1)), first)     # lanes past count re-read the last slot
    ptrs = T.addptr(T.splat(pad, [WAIT_LANES]), idx)
    T.bounded_spin(lambda: T.reduce_min(prims.acquire_load(MLIR_OPS, ptrs, scope="sys", semantic="acquire")), value,
                   bound=max_iters, err=err, tag=tag)


def _barrier_kernel(prims, ip: ir.InsertionPoint) -> None:
    from ..dialects import core
    from ..dialects import ttir as T

    with ip:
        f, (pad, value, max_iters, err, tag, clear, clear_words) = T.func(BARRIER_KERNEL, [
            ("pad", T.ptr("i32"), {"tt.divisibility": 4}), ("value", T.i32(), {}), ("max_iters", T.i64(), {}),
            ("err", T.ptr("i32"), {"tt.divisibility": 16}), ("tag", T.i32(), {}),
            ("clear", T.ptr("i32"), {"tt.divisibility": 4}), ("clear_words", T.i32(), {})])
    with ir.InsertionPoint(f.regions[0].blocks[0]):
        lanes = T.make_range(0, WAIT_LANES)
        with T.For(0, clear_words, WAIT_LANES) as block:
            idx = T.add(lanes, block.iv)
            T.store(T.addptr(T.splat(clear, [WAIT_LANES]), idx), T.zeros([WAIT_LANES], "i32"),
                    T.lt(idx, clear_words))
        T.barrier()  # every lane's zeros before the arrival (release) below
        rank, num_ranks = core.Rank.build().rank, core.NumRanks.build().num_ranks
        with T.For(0, num_ranks, 1) as peers:
            core.Notify.build(T.addptr(pad, rank), peers.iv, value, op="set", scope="sys", semantic="release")
        _spin_on(prims, pad, T.c(0), num_ranks, value, max_iters, err, tag)
        T.ret()


def _signal_kernel(name: str, op: str, scope: str, ip: ir.InsertionPoint) -> None:
    from ..dialects import core
    from ..dialects import ttir as T

    with ip:
        f, (pad, slot, peer, value) = T.func(name, [
            ("pad", T.ptr("i32"), {"tt.divisibility": 4}), ("slot", T.i32(), {}), ("peer", T.i32(), {}),
            ("value", T.i32(), {})])
    with ir.InsertionPoint(f.regions[0].blocks[0]):
        core.Notify.build(T.addptr(pad, slot), peer, value, op=op, scope=scope, semantic="release")
        T.ret()


__all__ = ["BARRIER_KERNEL", "WAIT_KERNEL", "WAIT_LANES", "add_runtime_kernels", "runtime_kernels_needed",
           "signal_kernel_name"]
