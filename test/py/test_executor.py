"""The executor's CPU-testable parts: host programs at run time (checking, interpretation of index arithmetic and
scf, traces equal to the simulator's), the heap layout a program implies, error messages, and the whole executor
run against a stand-in for the GPU (``FakeGPU`` below: streams as queues, events, the runtime kernels and the
kernel templates' tile semantics), which exercises binding, ordering, signals, waits, barriers, the watchdog and
both timeout paths without a GPU. The real runs are in test_executor_gpu.py."""
from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import textwrap
from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import executor_programs as EP
from test_hostprog import serialize as host_program
from ditron.errors import DitronRuntimeError, WaitTimeoutError
from ditron.kernels import notify_pad
from ditron.runtime import executor as X
from ditron.runtime.eager import resolve
from ditron.runtime.eager import resolve
from ditron.runtime.heap import ALIGN, HeapLayout
from ditron.runtime.program import (BarrierAction, Buf, CopyAction, HostProgram, HostProgramError, LaunchAction,
                                    SignalAction, WaitAction, slot_runs)
from ditron.runtime.world import World


def small(op: str, W: int, **kw) -> EP.Case:
    return EP.Case(op, W, kw.pop("M", 40), K=kw.pop("K", 64), N=kw.pop("N", 48), **kw)




# ------------------------------------------------------------------------------------------- checking JSON

def minimal(body: list, **extra) -> dict:
    return {"name": "p", "args": [{"index": 0, "io": "in", "shape": [4], "dtype": "f32", "value": 0},
                                  {"index": 1, "io": "epoch", "value": 1}],
            "allocs": [{"name": "pad", "shape": [4], "dtype": "i32"}], "streams": [0], "kernels": {},
            "runtime": {}, "body": body, **extra}


ALLOC = {"op": "ditron_device.alloc_symmetric", "in": [], "out": [2], "alloc": 0, "loc": "p.mlir:2:3"}


def sig(pad, target, slot, value, loc="p.mlir:9:1", **kw):
    return {"op": "ditron_device.signal", "in": [pad, target, slot, value], "out": [], "stream": 0, "kind": "set",
            "scope": "sys", "loc": loc, **kw}


def const(v, out):
    return {"op": "arith.constant", "in": [], "out": [out], "value": v}


@pytest.mark.parametrize("mutate, message", [
    (lambda p: p.pop("args"), "missing field 'args'"),
    (lambda p: p["args"].reverse(), "the last argument, and only it, must be the epoch"),
    (lambda p: p["args"][0].update(dtype="c64"), "element type 'c64' is not supported"),
    (lambda p: p["allocs"][0].update(shape=[-1]), "'pad' needs a static shape"),
    (lambda p: p["body"].append({"op": "arith.addf", "in": [], "out": [9]}), "'arith.addf': not an op a host "
                                                                              "program can run"),
    (lambda p: p["body"].append({"op": "arith.addi", "in": [7, 8], "out": [9], "loc": "p.mlir:4:5"}),
     "p.mlir:4:5: 'arith.addi': operand %7 is used before it is defined"),
    (lambda p: p["body"].append({"op": "arith.addi", "in": [1], "out": [9]}), "takes 2 operand"),
    (lambda p: p["body"].append(sig(2, 1, 1, 1, stream=3)), "stream 3 is not among the program's streams"),
    (lambda p: p["body"].append(sig(2, 1, 1, 1, kind="xor")), "signal op 'xor' is not set or add"),
    (lambda p: p["body"].append({"op": "ditron_device.launch", "in": [], "out": [], "stream": 0, "kernel": "k",
                                 "grid": [1], "sm_budget": 1}), "launches '@k', which the program's kernel table"),
    (lambda p: p["body"].append({"op": "ditron_device.alloc_symmetric", "in": [], "out": [5], "alloc": 4}),
     "names symmetric buffer 4, which does not exist"),
    (lambda p: p["body"].append({"op": "scf.for", "in": [1, 1, 1], "out": [], "regions": []}), "malformed scf.for"),
    (lambda p: p.update(mesh={"axes": ["dp", "tp"], "shape": [2, 0]}), "needs one size >= 1 per axis"),
    (lambda p: p.update(mesh={"axes": ["tp"], "shape": [2]}, axis="dp"), "axis 'dp' is not an axis of its mesh (tp)"),
])
def test_malformed_programs_are_refused(mutate, message):
    program = minimal([ALLOC])
    mutate(program)
    with pytest.raises(HostProgramError, match=message.replace("(", "\\(").replace(")", "\\)")):
        HostProgram(program)


def test_the_world_a_program_is_written_for():
    """The size of its mesh axis: on a dp x tp mesh, one group of ranks along the axis (docs/device_ir.md)."""
    assert HostProgram(minimal([ALLOC])).world_size is None
    assert HostProgram(minimal([ALLOC], mesh={"axes": ["dp", "tp"], "shape": [2, 4]}, axis="tp")).world_size == 4
    assert HostProgram(minimal([ALLOC], mesh={"axes": ["dp", "tp"], "shape": [2, 4]}, axis="dp")).world_size == 2


def test_a_copy_names_its_operand_count():
    program = minimal([ALLOC, {"op": "ditron_device.copy", "in": [2, 2, 1, 1, 1], "out": [], "stream": 0,
                               "engine": "copy_engine", "ndim": 1, "loc": "p.mlir:3:3"}])
    with pytest.raises(HostProgramError, match="p.mlir:3:3: 'ditron_device.copy': a copy of 1-d regions takes 7"):
        HostProgram(program)


# ----------------------------------------------------------------------------------------------- arithmetic

ARITH = [("arith.addi", 7, -3, 4), ("arith.subi", 7, 9, -2), ("arith.muli", -4, 5, -20),
         ("arith.divsi", -7, 2, -3), ("arith.remsi", -7, 2, -1), ("arith.divui", 7, 2, 3),
         ("arith.remui", 7, 4, 3), ("arith.ceildivsi", 7, 2, 4), ("arith.ceildivsi", -7, 2, -3),
         ("arith.floordivsi", -7, 2, -4), ("arith.minsi", -1, 3, -1), ("arith.maxsi", -1, 3, 3),
         ("arith.minui", -1, 3, 3), ("arith.maxui", -1, 3, -1), ("arith.andi", 6, 3, 2), ("arith.ori", 6, 3, 7),
         ("arith.xori", 6, 3, 5), ("arith.shli", 3, 4, 48), ("arith.shrsi", -16, 2, -4),
         ("arith.shrui", -1, 60, 15), ("arith.addi", (1 << 63) - 1, 1, -(1 << 63))]


def run_ops(ops: list, result: int, epoch: int = 1, rank: int = 0, W: int = 2) -> int:
    """Run ops after the pad allocation; the value of id ``result`` comes back as a signal's value."""
    program = HostProgram(minimal([ALLOC, const(0, 3), *ops, sig(2, 3, 3, result)]))
    (action,) = program.trace(rank, W, epoch)
    return action.value


@pytest.mark.parametrize("name, a, b, want", ARITH)
def test_integer_arithmetic(name, a, b, want):
    assert run_ops([const(a, 10), const(b, 11), {"op": name, "in": [10, 11], "out": [12]}], 12) == want


@pytest.mark.parametrize("pred, a, b, want", [(0, 2, 2, 1), (1, 2, 2, 0), (2, -1, 0, 1), (5, 3, 3, 1),
                                              (6, -1, 0, 0), (9, -1, 0, 1)])
def test_cmpi_and_select(pred, a, b, want):
    ops = [const(a, 10), const(b, 11), {"op": "arith.cmpi", "in": [10, 11], "out": [12], "predicate": pred},
           const(100, 13), const(200, 14), {"op": "arith.select", "in": [12, 13, 14], "out": [15]}]
    assert run_ops(ops, 15) == (100 if want else 200)


@pytest.mark.parametrize("name, width, src, x, want", [
    ("arith.trunci", 8, 64, 300, 44), ("arith.trunci", 8, 64, 200, -56), ("arith.extui", 64, 8, -56, 200),
    ("arith.extsi", 64, 8, -56, -56), ("arith.extsi", 64, 1, 1, -1), ("arith.extui", 64, 1, 1, 1),
    ("arith.index_cast", 32, 64, (1 << 32) + 5, 5), ("arith.index_castui", 64, 32, -1, (1 << 32) - 1)])
def test_casts(name, width, src, x, want):
    ops = [const(x, 10), {"op": name, "in": [10], "out": [11], "width": width, "src_width": src}]
    assert run_ops(ops, 11) == want


def test_division_by_zero_names_the_rank():
    ops = [const(1, 10), {"op": "arith.divsi", "in": [10, 3], "out": [11], "loc": "p.mlir:5:7"}]
    with pytest.raises(HostProgramError, match="p.mlir:5:7: 'arith.divsi' divides by zero on rank 1"):
        run_ops(ops, 11, rank=1)


def test_scf_for_with_iter_args_and_if():
    # sum = 0; for i in [rank, 10) step 3: sum += i; if sum > 10 then sum * 2 else sum
    loop = {"op": "scf.for", "in": [20, 21, 22, 3], "out": [30], "regions": [
        {"args": [23, 24], "body": [{"op": "arith.addi", "in": [24, 23], "out": [25]},
                                    {"op": "scf.yield", "in": [25], "out": []}]}]}
    branch = {"op": "scf.if", "in": [31], "out": [32], "regions": [
        {"args": [], "body": [{"op": "arith.muli", "in": [30, 33], "out": [34]},
                              {"op": "scf.yield", "in": [34], "out": []}]},
        {"args": [], "body": [{"op": "scf.yield", "in": [30], "out": []}]}]}
    ops = [{"op": "ditron_device.rank", "in": [], "out": [20]}, const(10, 21), const(3, 22), const(2, 33), loop,
           const(10, 35), {"op": "arith.cmpi", "in": [30, 35], "out": [31], "predicate": 4}, branch]
    assert run_ops(ops, 32, rank=0) == 2 * (0 + 3 + 6 + 9)
    assert run_ops(ops, 32, rank=2, W=8) == 2 * (2 + 5 + 8)
    assert run_ops(ops, 32, rank=7, W=8) == 7  # the else branch


def test_epoch_rank_and_world_size_reach_the_program():
    ops = [{"op": "ditron_device.num_ranks", "in": [], "out": [10]}, {"op": "arith.muli", "in": [10, 1],
                                                                      "out": [11]}]
    assert run_ops(ops, 11, epoch=5, W=3) == 15


def test_bad_operands_are_named():
    program = HostProgram(minimal([ALLOC, const(7, 3), sig(2, 3, 3, 3, loc="p.mlir:6:2")]))
    with pytest.raises(HostProgramError, match="p.mlir:6:2: 'ditron_device.signal' on rank 0 names target rank 7, "
                                               "outside the world of 2 rank"):
        program.trace(0, 2, 1)
    program = HostProgram(minimal([ALLOC, const(0, 3), sig(3, 3, 3, 3)]))
    with pytest.raises(HostProgramError, match="the signal pad must be a buffer"):
        program.trace(0, 2, 1)


def test_slot_runs():
    assert slot_runs((3, 1, 2, 2, 7), 128) == [(1, 3), (7, 1)]
    assert slot_runs(tuple(range(10)), 4) == [(0, 4), (4, 4), (8, 2)]
    assert slot_runs((5,), 1) == [(5, 1)]


# -------------------------------------------------------------------------------- traces against the simulator

def sim_items(text: str, records, W: int, rank: int, epoch: int):
    from mlir import ir

    from ditron.dialects.context import ditron_context, parse_module
    from ditron.sim.interpreter import HostInterpreter
    from ditron.sim.program import load
    with ditron_context():
        module = parse_module(text, "t.mlir")
        for rec in records:
            EP_stub(rec, ir.InsertionPoint(module.body))
        program = load(module)
        del module
    return list(HostInterpreter(program, rank, W).run(epoch))


def EP_stub(rec, ip):
    from mlir import ir

    from ditron.kernels import KERNEL_ATTR
    f = ir.Operation.create("tt.func", attributes={
        "sym_name": ir.StringAttr.get(rec["name"]), "sym_visibility": ir.StringAttr.get("public"),
        "function_type": ir.TypeAttr.get(ir.FunctionType.get([], [])), KERNEL_ATTR: rec.to_attr()},
        regions=1, ip=ip)
    ir.Operation.create("tt.return", ip=ir.InsertionPoint(f.regions[0].blocks.append()))


def as_sim(action) -> tuple:
    """An executor action in the simulator's Item terms."""
    key = (lambda b: (b.kind, b.index))
    if isinstance(action, CopyAction):
        return ("copy", action.stream, {"src": key(action.src), "dst": key(action.dst), "src_rank": action.src_rank,
                                        "dst_rank": action.dst_rank, "src_off": action.src_off,
                                        "dst_off": action.dst_off, "sizes": action.sizes, "engine": action.engine})
    if isinstance(action, SignalAction):
        return ("signal", action.stream, {"pad": key(action.pad), "target": action.target, "slot": action.slot,
                                          "value": action.value, "op": action.op, "scope": action.scope})
    if isinstance(action, WaitAction):
        return ("wait", action.stream, {"pad": key(action.pad), "value": action.value, "slots": action.slots,
                                        "where": action.where})
    if isinstance(action, BarrierAction):
        return ("barrier", action.stream, {"pad": key(action.pad)})
    assert isinstance(action, LaunchAction)
    return ("launch", action.stream, {"kernel": action.kernel, "operands": [key(o) if isinstance(o, Buf) else o
                                                                            for o in action.operands],
                                      "grid": action.grid, "sm_budget": action.sm_budget,
                                      "tile_order": action.tile_order})


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_reduce2", "ag_gemm", "gemm_rs"])
def test_trace_equals_the_simulators_interpretation(op):
    W = 3
    case = small(op, W)
    text = EP.module_text(case)
    _, records = EP.program(case)
    program = HostProgram(json.loads(json.dumps(host_program(text))))
    for rank in range(W):
        for epoch in (1, 2):
            ours = [as_sim(a) for a in program.trace(rank, W, epoch)]
            theirs = [(i.kind, i.stream, {k: (tuple(v) if isinstance(v, list) else v) for k, v in i.args.items()})
                      for i in sim_items(EP.program(case)[0], records, W, rank, epoch)]
            theirs = [(k, s, {**a, "operands": list(a["operands"])} if k == "launch" else a) for k, s, a in theirs]
            assert ours == theirs


# ---------------------------------------------------------------------------------------------- heap layout

def test_heap_layout_follows_the_program():
    program = HostProgram(host_program(EP.module_text(small("all_reduce2", 4))))
    layout = HeapLayout()
    for a in program.allocs:
        layout.add(a.name, a.shape, X.torch_dtype(a.dtype))
    specs = list(layout.buffers.values())
    assert [s.name for s in specs] == ["ar_stage", "ar_mid", "ar_sig"]
    assert [s.dtype for s in specs] == [torch.bfloat16, torch.bfloat16, torch.int32]
    assert all(s.offset % ALIGN == 0 for s in specs)
    assert specs[1].offset >= specs[0].offset + specs[0].nbytes and specs[2].nbytes == 16 * 4
    assert program.allocs[2].nbytes == 64 and program.alloc_index("ar_mid") == 1


# ------------------------------------------------------------------------------------------- the fake GPU

class FakeEvent:
    cuda_event = 0  # no raw handle: the executor records through record()

    def __init__(self, gpu, **kw):
        self.gpu, self.done = gpu, True

    def record(self, stream=None):  # torch: None records on the current stream
        self.done = False
        (stream if stream is not None else self.gpu.cur).push(self._mark)

    def _mark(self):
        self.done = True
        return True

    def query(self):
        self.gpu.run()
        return self.done

    def synchronize(self):
        self.gpu.run()
        assert self.done, "the fake GPU deadlocked"


class FakeStream:
    """An in-order queue of items; an item is a callable that returns True when done (it may block)."""

    def __init__(self, gpu, label="stream"):
        self.gpu, self.q, self.label = gpu, deque(), label
        self.cuda_stream = id(self)
        gpu.entities.append(self)
        gpu.handles[self.cuda_stream] = self

    def push(self, item):
        self.q.append(item)

    def wait_event(self, ev):
        self.push(lambda: ev.done)

    def synchronize(self):
        self.gpu.run()

    def step(self) -> bool:
        progressed = False
        while self.q and self.q[0]():
            self.q.popleft()
            progressed = True
        return progressed


class View:
    """What a template's compute sees of a region: readable as numpy, writable with [...] = ..."""

    def __init__(self, t):
        self.t = t

    def __array__(self, dtype=None, copy=None):
        a = self.t.float().numpy()
        return a.astype(dtype) if dtype is not None else a

    def __setitem__(self, key, value):
        self.t[key] = torch.as_tensor(np.asarray(value, dtype=np.float32)).to(self.t.dtype)


class FakeProgram:
    """One program (CTA) of a template kernel, running its TileSteps; blocks on waits. ``bound``: (wait_bound,
    wait_err, wait_tag) of a kernel whose waits are bounded: a wait still false after wait_bound polls (scheduler
    passes) gives up as the lowered kernel does -- err[0] += 1, err[1] = tag, err[2] = the value seen -- and the
    program goes on."""

    def __init__(self, gpu, steps, resolve, bound=None):
        self.steps, self.resolve, self.i = steps, resolve, 0
        self.bound, self.polls = bound, 0
        gpu.entities.append(self)

    @property
    def done(self):
        return self.i >= len(self.steps)

    def step(self) -> bool:
        progressed = False
        while not self.done:
            st = self.steps[self.i]
            if not all(self.resolve(w.arg, w.rank)[w.slot] >= w.value for w in st.waits):
                self.polls += 1
                if self.bound is None or self.polls <= self.bound[0]:
                    return progressed
                _, err, tag = self.bound
                err[0] += 1
                err[1] = tag
                err[2] = min(int(self.resolve(w.arg, w.rank)[w.slot]) for w in st.waits)
            self.polls = 0
            view = lambda region: View(self.resolve(region.arg, region.rank)[  # noqa: E731
                tuple(slice(o, o + s) for o, s in zip(region.offsets, region.sizes))])
            if st.expand is not None:  # data-dependent tiles (the grouped GEMM's): replaced by what they expand into
                self.steps = self.steps[:self.i] + list(st.expand(view)) + self.steps[self.i + 1:]
                progressed = True
                continue
            if st.compute is not None:
                st.compute(view)
            for n in st.notifies:
                notify_pad(n, self.resolve(n.arg, n.rank))
            self.i += 1
            progressed = True
        return progressed


class FakeGPU:
    """Stands in for torch.cuda, the driver's streams and Triton's launchers, so that the executor runs on the CPU.
    Kernels run from their semantics: the runtime wait (bounded by max_iters, counted in scheduler passes) and
    signal kernels, and template kernels from the records' tiles()."""

    def __init__(self, monkeypatch, records=(), num_sms=132, memop=True):
        self.entities, self.handles = [], {}
        self.records = {r["name"]: r for r in records}
        self.user = FakeStream(self, "user")
        self.cur = self.user
        self.ex = None
        self.memop_calls = 0
        mp = monkeypatch
        mp.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
        mp.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        mp.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(multi_processor_count=num_sms))
        mp.setattr(torch.cuda, "current_stream", lambda device=None: self.cur)
        mp.setattr(torch.cuda, "current_device", lambda: None)  # the fake device is the CPU: index None
        mp.setattr(torch.cuda, "set_stream", self.set_stream)
        mp.setattr(torch.cuda, "Event", lambda **kw: FakeEvent(self, **kw))
        mp.setattr(torch.cuda, "synchronize", lambda *a: self.run())
        mp.setattr(X, "_device_of", lambda world: torch.device("cpu"))
        mp.setattr(X, "_new_stream", lambda device: (FakeStream(self), None))
        mp.setattr(X, "stream_write_value32", lambda: self.write_value if memop else None)
        mp.setattr(X.Executor, "_calibrate", lambda ex: 10 ** 9)
        mp.setattr(X.Executor, "_copy", staticmethod(
            lambda stream, src, dst: stream.push(lambda: (dst.copy_(src), True)[1])))

    def set_stream(self, s):
        self.cur = s

    def write_value(self, tensor, slot, value):
        self.memop_calls += 1
        assert tensor.dtype == torch.uint32 and tensor.dim() == 1 and 0 <= value < 1 << 32
        self.cur.push(lambda: (tensor.view(torch.int32).__setitem__(slot, value - (1 << 32) if value >> 31 else value),
                               True)[1])

    def run(self):
        while any([e.step() for e in list(self.entities)]):
            pass

    def executable(self, exe):
        """exe (a loaded artifact) with launchers that run the kernels' semantics here."""
        kernels = {name: SimpleNamespace(name=name, args=k.args, metadata=SimpleNamespace(global_scratch_size=0),
                                         triton_kernel=FakeLauncher(self, name, k.args))
                   for name, k in exe.kernels.items()}
        return SimpleNamespace(host_program=exe.host_program, kernels=kernels, path=exe.path,
                               warmup=lambda: None)

    # -- helpers for the kernels
    def rank_of(self, handle) -> int:
        for (r, s), stream in self.ex.streams.items():
            if stream.cuda_stream == handle:
                return r
        raise AssertionError("launch on a stream the executor does not own")

    def peer(self, t, rank):
        """The tensor of rank ``rank`` at the place of own-rank tensor t (a symmetric buffer), or t itself."""
        if rank is None:
            return t
        for views in self.ex._parity_views:  # the call's parity (pads, rotating buffers), not the bound one
            for (j, r), v in views.items():
                if v.data_ptr() == t.data_ptr() and v.shape == t.shape:
                    return views[(j, rank)]
        raise AssertionError("a peer access to a buffer that is not symmetric")


class FakeLauncher:
    def __init__(self, gpu, name, args):
        self.gpu, self.name, self.names = gpu, name, [a.name for a in args]

    def __getitem__(self, grid):
        assert len(grid) == 3 and all(isinstance(g, int) for g in grid)
        return lambda *values, stream: self.launch(grid, values, stream)

    def launch(self, grid, values, handle):
        gpu = self.gpu
        stream = gpu.handles[handle]
        v = dict(zip(self.names, values))
        assert len(values) == len(self.names)
        if self.name == "ditron_rt_wait":
            polls = [0]
            pad, first, count, value, max_iters, err, tag = values

            def wait():
                seen = int(pad[first: first + count].min())
                if seen >= value:
                    return True
                polls[0] += 1
                if polls[0] > max_iters:
                    err[0] += 1
                    err[1] = tag
                    err[2] = seen
                    return True
                return False
            stream.push(wait)
        elif self.name == "ditron_rt_barrier":
            arrived = [False]

            def barrier():  # zero clear[:clear_words], set this rank's slot everywhere once, then spin like the wait kernel
                if not arrived[0]:
                    v["clear"][:v["clear_words"]] = 0
                    for q in range(gpu.ex.W):
                        gpu.peer(v["pad"], q)[v["rank"]] = v["value"]
                    arrived[0] = True
                if int(v["pad"][:gpu.ex.W].min()) >= v["value"]:
                    return True
                polls[0] += 1
                if polls[0] > v["max_iters"]:
                    v["err"][0] += 1
                    v["err"][1] = v["tag"]
                    v["err"][2] = int(v["pad"][:gpu.ex.W].min())
                    return True
                return False
            polls = [0]
            stream.push(barrier)
        elif self.name.startswith("ditron_rt_signal_"):
            op = self.name.split("_")[3]
            target = gpu.peer(v["pad"], v["peer"])

            def signal():
                target[v["slot"]] = v["value"] if op == "set" else target[v["slot"]] + v["value"]
                return True
            stream.push(signal)
        else:
            from ditron.kernels import get_template
            rec = gpu.records[self.name]
            rank = v.get("rank", gpu.rank_of(handle))
            assert grid[0] == EP._gemm_grid(rec) if rec["template"] == "gemm" else grid[0] == rec["grid"]
            scalars = {n: int(x) for n, x in v.items() if not isinstance(x, torch.Tensor)}
            state = {}

            def launch():
                if "programs" not in state:
                    tiles = get_template(rec["template"]).tiles(rec, rank=rank, num_ranks=gpu.ex.W, scalars=scalars)
                    bound = (v["wait_bound"], v["wait_err"], v["wait_tag"]) if "wait_bound" in v else None
                    state["programs"] = [FakeProgram(gpu, steps, lambda arg, r: gpu.peer(v[arg], r), bound)
                                         for steps in tiles]
                return all(p.done for p in state["programs"])
            stream.push(launch)


def compiled(tmp_path_factory, case: EP.Case):
    import ditron
    cache = tmp_path_factory.getbasetemp() / "executor_artifacts"
    path = cache / case.name
    if not (path / "manifest.json").exists():
        ditron.compile(EP.module_text(case), target="cuda:90", out_dir=path, cache=False)
    return ditron.load(path)


def tolerance_equal(got, want, exact=False):
    if exact:
        return torch.equal(got, want)
    scale = float(want.float().abs().max()) or 1.0
    return torch.allclose(got.float(), want.float(), rtol=2 ** -6, atol=2 ** -6 * scale)


def fake_executor(monkeypatch, tmp_path_factory, case, **kw):
    exe = compiled(tmp_path_factory, case)
    gpu = FakeGPU(monkeypatch, EP.program(case)[1], **{k: kw.pop(k) for k in ("num_sms", "memop") if k in kw})
    ex = X.Executor(gpu.executable(exe), World.virtual(case.W, device="cpu"), **kw)
    gpu.ex = ex
    return gpu, ex


@pytest.mark.parametrize("op, W", [("all_gather", 1), ("all_gather", 3), ("reduce_scatter", 2), ("all_reduce", 3),
                                   ("all_reduce2", 2), ("all_reduce2", 3), ("ag_gemm", 2), ("ag_gemm", 3),
                                   ("gemm_rs", 1), ("gemm_rs", 3)])
def test_programs_run_correctly_on_the_fake_gpu(monkeypatch, tmp_path_factory, op, W):
    case = small(op, W)
    gpu, ex = fake_executor(monkeypatch, tmp_path_factory, case)
    for call in (1, 2, 3):
        xs = EP.make_inputs(case, call, device="cpu")
        outs = ex.run(xs)
        want = EP.reference(case, xs)
        for r in range(W):
            assert tolerance_equal(outs[r][0], want[r][0], exact=op == "all_gather"), (call, r)
    assert ex.epoch == 3 and (gpu.memop_calls > 0 or W == 1)
    assert ex.watch.done
    ex.close()


def test_pipelined_calls_without_host_sync(monkeypatch, tmp_path_factory):
    case = small("all_reduce2", 2)
    gpu, ex = fake_executor(monkeypatch, tmp_path_factory, case, signal_via="kernel")
    assert not ex.signal_memop
    inputs = [EP.make_inputs(case, call, device="cpu") for call in (1, 2, 3)]
    outputs = [ex.run(xs, sync=False) for xs in inputs]
    ex.synchronize()
    for xs, outs in zip(inputs, outputs):
        want = EP.reference(case, xs)
        assert all(tolerance_equal(outs[r][0], want[r][0]) for r in range(2))
    assert gpu.memop_calls == 0
    ex.close()


def test_given_outputs_are_written(monkeypatch, tmp_path_factory):
    case = small("all_gather", 2)
    gpu, ex = fake_executor(monkeypatch, tmp_path_factory, case)
    xs = EP.make_inputs(case, 1, device="cpu")
    outs = [[torch.zeros(2 * case.M, case.K, dtype=torch.bfloat16)] for _ in range(2)]
    got = ex.run(xs, outputs=outs)
    assert got[0][0] is outs[0][0] and torch.equal(outs[1][0], torch.cat([xs[0][0], xs[1][0]]))


def test_barrier_runs_and_counts_arrivals(monkeypatch, tmp_path_factory):
    """A program with a barrier: every rank sets its slot on every rank to its arrival count, then waits."""
    text = EP._header(3) + EP._func("bar", [("x", "memref<4xf32>", "in"), ("y", "memref<4xf32>", "out")]) + \
        EP._alloc("pad", "bar_pad", "memref<3xi32>") + EP._PROLOGUE + \
        '    %c4 = arith.constant 4 : index\n' \
        '    "ditron_device.barrier"(%pad) : (memref<3xi32>) -> ()\n' \
        '    "ditron_device.barrier"(%pad) {stream = 0 : i64} : (memref<3xi32>) -> ()\n    ' + \
        EP._copy("%x", "%y", "%r", "%r", ["%c0"], ["%c0"], ["%c4"], "memref<4xf32>", "memref<4xf32>") + "\n" + \
        EP._end()
    import ditron
    path = tmp_path_factory.mktemp("barrier") / "bar"
    exe = ditron.compile(text, target="cuda:90", out_dir=path, cache=False)
    gpu = FakeGPU(monkeypatch)
    ex = X.Executor(gpu.executable(exe), World.virtual(3, device="cpu"))
    gpu.ex = ex
    for call in (1, 2):
        xs = [[torch.full((4,), float(r + call))] for r in range(3)]
        outs = ex.run(xs)
        assert all(torch.equal(outs[r][0], xs[r][0]) for r in range(3))
    pad = ex.program.alloc_index("bar_pad")
    assert all(ex._views[(pad, r)].tolist() == [4, 4, 4] for r in range(3))  # two barriers per call, two calls


# -------------------------------------------------------------------------------------------- timeouts

def test_a_stuck_wait_raises_naming_rank_slot_and_value(monkeypatch, tmp_path_factory):
    case = EP.CASES["stuck_w2_m16"]
    gpu, ex = fake_executor(monkeypatch, tmp_path_factory, case, timeout_s=0.2)
    xs = EP.make_inputs(case, 1, device="cpu")
    with pytest.raises(WaitTimeoutError) as err:
        ex.run(xs)
    message = str(err.value)
    assert "wait timed out after 0.2 s: rank 0 waits for signal pad 'stuck_sig' slot 0 >= 1 (observed 0)" in message
    assert "rank 1, stream 0: wait for signal pad 'stuck_sig' slot 0 >= 1 (now 0), call 1 at stuck_w2_m16.mlir:" \
        in message
    assert "released the blocked waits" in message
    assert ex.watch.done  # the spinners were released: the GPU drained
    with pytest.raises(DitronRuntimeError, match="cannot run again: a wait timed out \\(rank 0"):
        ex.run(xs)
    ex.close()


def test_the_in_kernel_bound_is_reported(monkeypatch, tmp_path_factory):
    """The wait kernel gives up after max_iters polls and records its tag; the host names the wait."""
    case = EP.CASES["stuck_w2_m16"]
    gpu, ex = fake_executor(monkeypatch, tmp_path_factory, case, timeout_s=30)
    ex.max_iters = 3
    with pytest.raises(WaitTimeoutError) as err:
        ex.run(EP.make_inputs(case, 1, device="cpu"))
    message = str(err.value)
    assert "gave up in-kernel" in message and "slot 0 >= 1" in message and "rank 0" in message
    assert "released" not in message


def test_a_spinning_kernel_over_the_cta_budget_is_refused(monkeypatch, tmp_path_factory):
    case = small("ag_gemm", 2, M=256, K=64, N=256)
    gpu, ex = fake_executor(monkeypatch, tmp_path_factory, case, num_sms=12)  # budget (12 - 4) // 2 = 4 CTAs
    grid = EP._gemm_grid(EP.program(case)[1][0])
    assert grid > 4
    with pytest.raises(DitronRuntimeError) as err:
        ex.run(EP.make_inputs(case, 1, device="cpu"))
    assert f"launch of @ag_gemm_kernel has {grid} programs and spin-waits" in str(err.value)
    assert "a virtual world of 2 ranks on one GPU (12 SMs) leaves each rank 4 CTAs" in str(err.value)
    assert ex.epoch == 0 and not any(s.q for s in gpu.entities)  # nothing was enqueued


# ---------------------------------------------------------------------------------------------- errors

def test_input_errors(monkeypatch, tmp_path_factory):
    case = small("all_gather", 2)
    gpu, ex = fake_executor(monkeypatch, tmp_path_factory, case)
    xs = EP.make_inputs(case, 1, device="cpu")
    with pytest.raises(DitronRuntimeError, match="a virtual world of 2 rank\\(s\\) takes one list of tensors per "
                                                 "rank, got 1"):
        ex.run([xs[0]])
    with pytest.raises(DitronRuntimeError, match="inputs of rank 1: the program takes 1, got 2"):
        ex.run([xs[0], xs[1] * 2])
    bad = [xs[0], [xs[1][0].float()]]
    with pytest.raises(DitronRuntimeError, match="input argument 0 of rank 1: the program takes a 40x64 bf16 tensor "
                                                 "on cpu, got \\(40, 64\\) torch.float32"):
        ex.run(bad)
    with pytest.raises(DitronRuntimeError, match="expected a tensor, got list"):
        ex.run([xs[0], [[1, 2]]])
    assert ex.epoch == 0


def test_region_errors_are_raised_before_anything_is_enqueued(monkeypatch, tmp_path_factory):
    case = small("all_gather", 2)
    exe = compiled(tmp_path_factory, case)
    program = json.loads(json.dumps(exe.host_program))

    def grow(ops):  # every constant 40 (M) becomes 41: the copies run past their buffers
        for op in ops:
            if op["op"] == "arith.constant" and op.get("value") == 40:
                op["value"] = 41
            for region in op.get("regions", ()):
                grow(region["body"])

    grow(program["body"])
    gpu = FakeGPU(monkeypatch)
    fake = gpu.executable(exe)
    fake.host_program = program
    ex = X.Executor(fake, World.virtual(2, device="cpu"))
    gpu.ex = ex
    with pytest.raises(HostProgramError, match="rank 0: copy source region at offsets \\[0, 0\\] sizes \\[41, 64\\] "
                                               "is outside its buffer of shape \\[40, 64\\]"):
        ex.run(EP.make_inputs(case, 1, device="cpu"))
    assert ex.epoch == 0 and not any(s.q for s in gpu.entities)


def test_a_kernel_argument_past_i32_is_refused_before_anything_is_enqueued(monkeypatch, tmp_path_factory):
    """Index operands reach kernels as i32 arguments: one that does not fit (the reduce's first row, rank * 40 with
    the 40 made 2^31) is refused, not truncated."""
    case = small("reduce_scatter", 2)
    exe = compiled(tmp_path_factory, case)
    program = json.loads(json.dumps(exe.host_program))
    (launch,) = [op for op in program["body"] if op["op"] == "ditron_device.launch"]
    (row,) = [op for op in program["body"] if op["out"] == [launch["in"][2]]]  # arith.muli rank, 40
    (rows,) = [op for op in program["body"] if op["out"] == [row["in"][1]]]
    assert (row["op"], rows["value"]) == ("arith.muli", 40)
    rows["value"] = 1 << 31
    gpu = FakeGPU(monkeypatch)
    fake = gpu.executable(exe)
    fake.host_program = program
    ex = X.Executor(fake, World.virtual(2, device="cpu"))
    gpu.ex = ex
    with pytest.raises(HostProgramError, match="rank 1: .*@reduce_scatter_kernel argument 2 = 2147483648 does not "
                                               "fit in the kernel's i32 argument"):
        ex.run(EP.make_inputs(case, 1, device="cpu"))
    assert ex.epoch == 0 and not any(s.q for s in gpu.entities)


def test_an_executable_without_host_program_is_refused():
    exe = SimpleNamespace(host_program=None, path="some/artifact")
    with pytest.raises(DitronRuntimeError, match="some/artifact has no host program"):
        X.Executor(exe, World.virtual(1, device="cpu"))


def test_a_cpu_world_is_refused(tmp_path_factory):
    exe = compiled(tmp_path_factory, small("all_gather", 1))
    with pytest.raises(DitronRuntimeError, match="needs a GPU; the world's device is cpu"):
        exe.run(World.virtual(1, device="cpu"), [[torch.zeros(40, 64, dtype=torch.bfloat16)]])


GATHER_2D = """module attributes {ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 2>}} {
  func.func @gather(%x: tensor<8x4xf32> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<8x4xf32> {ditron.sharding = {dims = [[], []]}}) {
    %y = "ditron_task.elementwise"(%x) {fn = "relu"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %y : tensor<8x4xf32>
  }
}
"""


def test_a_world_of_another_size_is_refused(tmp_path_factory):
    """A program over tp on a dp=2 x tp=2 mesh runs in a world of one tp group (2 ranks): a world of the whole
    mesh would give it num_ranks = 4 and peers outside its group. Refused before anything is allocated."""
    import ditron
    exe = ditron.compile(GATHER_2D, target="cuda:90", out_dir=tmp_path_factory.mktemp("gather_2d") / "a", cache=False)
    with pytest.raises(DitronRuntimeError, match=re.escape(
            "a world of 4 rank(s) cannot run @gather: it is written for 2 rank(s), the size of mesh axis 'tp' (mesh "
            "dp=2 x tp=2: it runs within one group of ranks along 'tp'; give each group its own world")):
        X.Executor(exe, World.virtual(4, device="cpu"))
    with pytest.raises(DitronRuntimeError, match="needs a GPU"):  # the right size: refused only for the CPU
        X.Executor(exe, World.virtual(2, device="cpu"))
    one_axis = compiled(tmp_path_factory, small("all_gather", 3))
    with pytest.raises(DitronRuntimeError, match=re.escape("a world of 2 rank(s) cannot run @all_gather: it is "
                                                           "written for 3 rank(s), the size of mesh axis 'tp' (mesh "
                                                           "tp=3)")):
        X.Executor(one_axis, World.virtual(2, device="cpu"))


def test_missing_kernels_are_named(monkeypatch, tmp_path_factory):
    case = small("reduce_scatter", 2)
    exe = compiled(tmp_path_factory, case)
    gpu = FakeGPU(monkeypatch)
    fake = gpu.executable(exe)
    del fake.kernels["reduce_scatter_kernel"]
    with pytest.raises(DitronRuntimeError, match="launches 'reduce_scatter_kernel', which the artifact does not "
                                                 "hold"):
        X.Executor(fake, World.virtual(2, device="cpu"))


def test_runtime_modules_import_no_mlir(tmp_path):
    code = textwrap.dedent("""
        import sys, builtins
        real = builtins.__import__
        def guard(name, *a, **k):
            if name == "mlir" or name.startswith("mlir."):
                raise ImportError("mlir is blocked in this test")
            return real(name, *a, **k)
        builtins.__import__ = guard
        import ditron.runtime.executor, ditron.runtime.program, ditron.runtime.timeouts, ditron.runtime.loader
        assert not any(m == "mlir" or m.startswith("mlir.") for m in sys.modules), "mlir was imported"
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_bounded_in_kernel_waits_get_their_bound_record_and_tag(monkeypatch, tmp_path_factory):
    """Kernels whose lowering bounds ditron_core.wait take wait_bound / wait_err / wait_tag (appended ABI kinds);
    the executor binds them, and a give-up recorded by such a kernel is reported with the kernel's wait."""
    case = small("ag_gemm", 2)
    exe = compiled(tmp_path_factory, case)
    assert [(a.name, a.kind, a.type) for a in exe.kernels["ag_gemm_kernel"].args][-3:] == [
        ("wait_bound", "wait_bound", "i64"), ("wait_err", "wait_err", "*i32"), ("wait_tag", "wait_tag", "i32")]
    gpu = FakeGPU(monkeypatch, EP.program(case)[1])
    fake = gpu.executable(exe)
    gemm = fake.kernels["ag_gemm_kernel"]
    seen = []
    launcher = FakeLauncher(gpu, "ag_gemm_kernel", gemm.args)
    real_launch = launcher.launch

    def spy(grid, values, handle):
        seen.append(dict(zip(launcher.names, values)))
        return real_launch(grid, values, handle)

    launcher.launch = spy
    gemm.triton_kernel = launcher
    ex = X.Executor(fake, World.virtual(2, device="cpu"))
    gpu.ex = ex
    xs = EP.make_inputs(case, 1, device="cpu")
    outs = ex.run(xs)
    assert all(tolerance_equal(outs[r][0], EP.reference(case, xs)[r][0]) for r in range(2))
    assert [v["wait_bound"] for v in seen] == [ex.max_iters] * 2
    assert seen[1]["wait_err"].data_ptr() == ex._err[1].data_ptr()
    tag = seen[1]["wait_tag"]
    rank, action, *_ = ex._tags[tag]
    action = resolve(action)  # a call plan names a launch whose operands vary when asked (runtime/eager.py)
    assert rank == 1 and isinstance(action, LaunchAction) and action.kernel == "ag_gemm_kernel"
    ex._err[1] = torch.tensor([1, tag, 0, 0], dtype=torch.int32)  # as the kernel records a give-up
    with pytest.raises(WaitTimeoutError) as err:
        ex.synchronize()
    assert ("rank 1, stream 0: kernel @ag_gemm_kernel waits in-kernel (gave up in-kernel; 1 wait(s) of this rank "
            "did) for signal pad 'ag_arrived'") in str(err.value)
    assert "'ag_arrived' a slot >= 1 (now 0), call 1" in str(err.value)


def test_a_stuck_in_kernel_wait_gives_up_and_names_the_kernel(monkeypatch, tmp_path_factory):
    """AG+GEMM whose rows never arrive (its signals of 'ag_arrived' dropped): the GEMM's bounded waits give up after
    max_iters polls and record it; the executor raises naming the kernel's wait, before its watchdog would."""
    case = small("ag_gemm", 2)
    exe = compiled(tmp_path_factory, case)
    gpu = FakeGPU(monkeypatch, EP.program(case)[1])
    fake = gpu.executable(exe)
    fake.host_program = EP.without_signals_to(exe.host_program, "ag_arrived")
    ex = X.Executor(fake, World.virtual(2, device="cpu"), timeout_s=60)
    gpu.ex = ex
    ex.max_iters = 20
    with pytest.raises(WaitTimeoutError) as err:
        ex.run(EP.make_inputs(case, 1, device="cpu"))
    message = str(err.value)
    assert message.startswith("wait timed out after 60 s: rank 0 waits for signal pad 'ag_arrived' a slot >= 1 "
                              "(observed 0)"), message
    for rank in (0, 1):
        assert re.search(rf"rank {rank}, stream 0: kernel @ag_gemm_kernel waits in-kernel \(gave up in-kernel; "
                         r"\d+ wait\(s\) of this rank did\) for signal pad 'ag_arrived' a slot >= 1 \(now 0\), call 1 "
                         r"at ag_gemm_w2_m40\.mlir:", message), message
    with pytest.raises(DitronRuntimeError, match="cannot run again"):
        ex.run(EP.make_inputs(case, 2, device="cpu"))


def _np_reference(case, xs):
    W, M = case.W, case.M
    if case.op == "all_gather":
        return [[np.concatenate([x[0] for x in xs])] for _ in xs]
    if case.op == "reduce_scatter":
        total = sum(x[0] for x in xs)
        return [[total[r * M:(r + 1) * M]] for r in range(W)]
    if case.op in ("all_reduce", "all_reduce2"):
        return [[sum(x[0] for x in xs)] for _ in xs]
    if case.op == "ag_gemm":
        a = np.concatenate([x[0] for x in xs])
        return [[a @ x[1]] for x in xs]
    total = sum(x[0] @ x[1] for x in xs)  # gemm_rs
    return [[total[r * M:(r + 1) * M]] for r in range(W)]


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_reduce", "all_reduce2", "ag_gemm", "gemm_rs"])
@pytest.mark.parametrize("W", [1, 2, 3])
def test_the_gpu_test_programs_pass_the_simulator(op, W):
    """The programs test_executor_gpu.py runs are race- and deadlock-free under the simulator's interleavings,
    over several calls (buffer and pad reuse), with correct results."""
    from mlir import ir

    from ditron.dialects.context import ditron_context, parse_module
    from ditron.sim import simulate
    case = small(op, W)
    text, records = EP.program(case)
    with ditron_context():
        module = parse_module(text, f"{op}.mlir")
        for rec in records:
            EP_stub(rec, ir.InsertionPoint(module.body))
        for seed in range(3):
            result = simulate(module, W, seed=seed, calls=3, reference=lambda xs: _np_reference(case, xs))
            assert result.ok, result.summary()
        del module
