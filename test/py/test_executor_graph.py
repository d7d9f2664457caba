"""CUDA-graph mode and driver stream waits of the executor, on the CPU: option checks, the refusal of programs that
do not end with a barrier, the two-parity heap layout, graph keys, and whole runs on test_executor.py's fake GPU
extended with a stand-in for graph capture (``GraphFakeGPU``: captures record the enqueue calls, a replay issues
them again) and for the driver's memops (``FakeDriver``: reads and writes the CPU words at the given addresses).
The real runs are in test_executor_graph_gpu.py."""
from __future__ import annotations

import ctypes

import pytest
import torch

import executor_programs as EP
from ditron.errors import DitronRuntimeError, WaitTimeoutError
from ditron.runtime import executor as X
from ditron.runtime import graphs as G
from ditron.runtime.heap import ALIGN, HeapLayout, parity_name, program_layout
from ditron.runtime.program import BarrierAction, HostProgram
from ditron.runtime.world import World
from test_executor import FakeEvent, FakeGPU, FakeLauncher, FakeStream, compiled, small, tolerance_equal


# ------------------------------------------------------------------------------------------- a test program

def gather_program(W: int, M: int = 8, K: int = 16) -> str:
    """A gather that ends like ditron's lowered programs: stream 0 starts the side stream through a sync slot, stream
    1 stages x, offers it to every peer, pulls the peers' stages as their offers come and joins back through the
    sync pad; stream 0 waits for it and ends with a barrier. Every value is the epoch."""
    xt, ot = EP._mr([M, K], "f32"), EP._mr([W * M, K], "f32")
    st, at = EP._mr([2], "i32"), EP._mr([W], "i32")
    pull = "\n".join([EP._wait("%avail", at, "%epoch", "%p", 1), "%prow = arith.muli %p, %cm : index",
                      EP._copy("%stage", "%out", "%p", "%r", ["%c0", "%c0"], ["%prow", "%c0"], ["%cm", "%ck"], xt, ot,
                               1)])
    return (EP._header(W) + EP._func("gather", [("x", xt, "in"), ("out", ot, "out")]) +
            EP._alloc("sync", "g_sync", st) + EP._alloc("stage", "g_stage", xt) + EP._alloc("avail", "g_avail", at) +
            EP._alloc("bar", "g_bar", at) + EP._PROLOGUE + EP._consts({"cm": M, "ck": K}) +
            "    %row = arith.muli %r, %cm : index\n" +
            "    " + EP._signal("%sync", st, "%r", "%c0", "%epoch") + "\n" +
            "    " + EP._wait("%sync", st, "%epoch", "%c0", 1) + "\n" +
            "    " + EP._copy("%x", "%stage", "%r", "%r", ["%c0", "%c0"], ["%c0", "%c0"], ["%cm", "%ck"], xt, xt, 1) +
            "\n    " + EP._copy("%x", "%out", "%r", "%r", ["%c0", "%c0"], ["%row", "%c0"], ["%cm", "%ck"], xt, ot, 1) +
            "\n" + EP._for_peers("q", EP._signal("%avail", at, "%q", "%r", "%epoch", 1), skip_self=True) +
            EP._for_peers("p", pull, skip_self=True) +
            "    " + EP._signal("%sync", st, "%r", "%c1", "%epoch", 1) + "\n" +
            "    " + EP._wait("%sync", st, "%epoch", "%c1") + "\n" +
            f'    "ditron_device.barrier"(%bar) {{stream = 0 : i64}} : ({at}) -> ()\n' + EP._end())


@pytest.fixture(scope="module")
def gather_artifacts(tmp_path_factory):
    import ditron
    root = tmp_path_factory.mktemp("graph_gather")
    return {W: ditron.compile(gather_program(W), target="cuda:90", out_dir=root / f"w{W}", cache=False)
            for W in (1, 3)}


def gather_inputs(W: int, call: int, M: int = 8, K: int = 16):
    g = torch.Generator().manual_seed(100 * call + W)
    return [[torch.randn(M, K, generator=g)] for _ in range(W)]


# ------------------------------------------------------------------------------------------- the fakes

def _i32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


class FakeDriver:
    """cuStreamWaitValue32 (GEQ, cyclic) / cuStreamWriteValue32 on CPU words, enqueued on the fake streams."""

    wait_name, write_name = "cuStreamWaitValue32_v2", "cuStreamWriteValue32_v2"

    def __init__(self, gpu):
        self.gpu, self.waits, self.writes = gpu, 0, 0

    def wait_geq(self, stream: int, addr: int, value: int) -> None:
        self.waits += 1
        word = ctypes.c_int32.from_address(addr)
        self.gpu.enqueue(self.gpu.handles[stream], lambda: _i32(word.value - value) >= 0)

    def write(self, stream: int, addr: int, value: int) -> None:
        self.writes += 1
        word = ctypes.c_int32.from_address(addr)
        self.gpu.enqueue(self.gpu.handles[stream], lambda: (setattr(word, "value", _i32(value)), True)[1])


class FakeGraphs:
    """Capture: the enqueue calls ``body`` makes are recorded, not run. Replay: after the caller's stream's work,
    issue them again (fresh kernel state every time, as a graph launch has), then join into the caller's stream."""

    def __init__(self, gpu, capture_stream):
        self.gpu, self.capture_stream = gpu, capture_stream

    def capture(self, body):
        gpu = self.gpu
        assert gpu.recording is None, "nested capture"
        gpu.recording = []
        try:
            body(self.capture_stream)
            return list(gpu.recording)
        finally:
            gpu.recording = None

    def executable(self, graph) -> int:
        return id(graph)

    def replay(self, graph) -> None:
        gpu, cap = self.gpu, self.capture_stream
        gpu.replays += 1
        caller = gpu.cur
        start = FakeEvent(gpu)
        start.record(caller)
        cap.wait_event(start)
        for call in graph:
            call()
        end = FakeEvent(gpu)
        end.record(cap)
        caller.wait_event(end)

    def launch(self, graph, event) -> None:
        self.replay(graph)
        event.record()

    @staticmethod
    def device():
        return None  # the fake device is the CPU: index None

    def current(self, device) -> int:
        return id(self.gpu.cur)


class GraphFakeGPU(FakeGPU):
    """FakeGPU whose enqueue calls can be recorded into a fake graph, with an optional fake driver."""

    def __init__(self, monkeypatch, records=(), driver=False, **kw):
        super().__init__(monkeypatch, records, **kw)
        self.recording, self.replays = None, 0
        self.driver = FakeDriver(self) if driver else None
        mp = monkeypatch
        mp.setattr(X, "driver_memops", lambda: self.driver)
        mp.setattr(G, "TorchGraphs", lambda stream: FakeGraphs(self, stream))
        for cls, name in ((FakeEvent, "record"), (FakeStream, "wait_event"), (FakeLauncher, "launch")):
            mp.setattr(cls, name, self._recordable(getattr(cls, name)))
        mp.setattr(X.Executor, "_copy", staticmethod(self._recordable(
            lambda stream, src, dst: stream.push(lambda: (dst.copy_(src), True)[1]))))
        mp.setattr(X.Executor, "_zero", lambda ex, stream, t: self.enqueue(stream, lambda: (t.zero_(), True)[1]))

    def _recordable(self, fn):
        def call(*args, **kw):
            if self.recording is not None:
                self.recording.append(lambda: fn(*args, **kw))
                return None
            return fn(*args, **kw)
        return call

    def enqueue(self, stream, item) -> None:
        """Push a stateless item onto stream now, or record pushing it."""
        if self.recording is not None:
            self.recording.append(lambda: stream.push(item))
        else:
            stream.push(item)

    def write_value(self, tensor, slot, value):
        self.memop_calls += 1
        word = tensor.view(torch.int32)
        self.enqueue(self.cur, lambda: (word.__setitem__(slot, _i32(value)), True)[1])

    def peer(self, t, rank):
        if rank is None:
            return t
        for views in self.ex._parity_views:
            for (j, r), v in views.items():
                if v.data_ptr() == t.data_ptr() and v.shape == t.shape:
                    return views[(j, rank)]
        raise AssertionError("a peer access to a buffer that is not symmetric")


def graph_executor(monkeypatch, exe, W, records=(), driver=True, **kw):
    gpu = GraphFakeGPU(monkeypatch, records, driver=driver, **{k: kw.pop(k) for k in ("memop",) if k in kw})
    ex = X.Executor(gpu.executable(exe), World.virtual(W, device="cpu"), **kw)
    gpu.ex = ex
    return gpu, ex


# ------------------------------------------------------------------------------------------- options, layout

def test_options_are_checked(tmp_path_factory):
    exe = compiled(tmp_path_factory, small("all_gather", 1))
    world = World.virtual(1, device="cpu")
    with pytest.raises(DitronRuntimeError, match="wait_via='spin': choose 'auto', 'memop' or 'kernel'"):
        X.Executor(exe, world, wait_via="spin")
    with pytest.raises(DitronRuntimeError, match="graph='yes': pass True"):
        X.Executor(exe, world, graph="yes")
    with pytest.raises(DitronRuntimeError, match="graph=1: pass True"):
        exe.executor(world, graph=1)


def test_graph_mode_refuses_a_program_that_does_not_end_with_a_barrier(tmp_path_factory):
    exe = compiled(tmp_path_factory, small("all_gather", 2))
    real = World(2, 1, torch.device("cpu"))  # rank 1 of a real world (refused before the GPU is looked for)
    with pytest.raises(G.GraphModeError, match=r"graph=True: the host program 'all_gather' on rank 1 ends stream 0 "
                                               r"with a signal at all_gather_w2_m40\.mlir:\d+:\d+; CUDA-graph mode "
                                               "in a real world needs every call to end with a barrier on stream 0"):
        X.Executor(exe, real, graph=True)
    program = HostProgram(exe.host_program)
    assert set(G.check_graph_program(program, [0, 1], 2, real=False)) == {0, 1}  # one graph: calls are ordered
    assert set(G.check_graph_program(program, [0], 1, real=True)) == {0}  # one rank: no peer


def test_a_virtual_world_replays_a_program_without_barrier(monkeypatch, tmp_path_factory):
    case = small("all_reduce2", 3)
    gpu, ex = graph_executor(monkeypatch, compiled(tmp_path_factory, case), 3, EP.program(case)[1], graph=True)
    zeroed = []
    real_zero = ex._zero
    monkeypatch.setattr(ex, "_zero", lambda stream, t: zeroed.append(t) or real_zero(stream, t))
    xs = EP.make_inputs(case, 1, device="cpu")
    for call in range(1, 4):
        for row, new in zip(xs, EP.make_inputs(case, call, device="cpu")):
            row[0].copy_(new[0])
        outs = ex.run(xs)
        want = EP.reference(case, xs)
        assert all(tolerance_equal(outs[r][0], want[r][0]) for r in range(3)), call
    assert ex._graphs.captures == 2 and len(zeroed) == 2 * 3  # no final barrier: each capture zeroes every rank's
    ex.close()


def test_a_push_all_reduce_replays_without_a_barrier_on_alternating_inboxes(monkeypatch, tmp_path):
    """ditron's push all-reduce ends without a barrier (fence "waits"), its inbox rotating: graph mode accepts it in
    a real world too, the replays of calls 1, 2, 3, 4 alternate between the inbox's two copies (parity 1, 0, 1, 0)
    while every output matches the reference. Its one pad is consumed (each slot cleared by its waiter): no capture
    zeroes anything, and every call leaves its parity's pad zero."""
    import ditron
    from ditron import ops
    from test_ops import _kernel_records
    W = 2
    s = ops.signature_for("all_reduce", [(20, 24)], "bf16", W, True, algorithm="push")
    exe = ditron.load(ops.build_one(s, tmp_path))
    program = HostProgram(exe.host_program)
    inbox, pad = program.alloc_index("ar_inbox"), program.alloc_index("ar_published")
    assert program.fence == "waits" and program.allocs[inbox].rotate and program.allocs[pad].consumed
    assert set(G.check_graph_program(program, [1], W, real=True)) == {1}  # accepted: the waits fence it
    gpu, ex = graph_executor(monkeypatch, exe, W, _kernel_records(ops.lower(s)[0]), graph=True)
    zeroed = []
    real_zero = ex._zero
    monkeypatch.setattr(ex, "_zero", lambda stream, t: zeroed.append(t) or real_zero(stream, t))
    xs = [[torch.zeros(20, 24, dtype=torch.bfloat16)] for _ in range(W)]  # one tensor set: one graph per parity
    for call in range(1, 5):
        g = torch.Generator().manual_seed(call)
        for row in xs:
            row[0].copy_(torch.randn(20, 24, generator=g))
        outs = ex.run(xs)
        want = ops.reference(s, xs)
        assert all(torch.allclose(outs[r][0].float(), want[r], rtol=2 ** -6, atol=2 ** -5) for r in range(W)), call
        for r in range(W):  # rank r's inbox copy of this call's parity holds the peer's x; its pads are zero
            copy = ex._parity_views[call & 1][(inbox, r)]
            assert torch.equal(copy, xs[1 - r][0]), (call, r)
            assert not any(ex._parity_views[p][(pad, r)].abs().sum() for p in (0, 1)), (call, r)
    assert ex._graphs.captures == 2 and not zeroed and ex._final_clear == {} and ex._graphs.self_clearing
    ex.close()


def test_the_final_barrier_kernel_zeroes_the_other_parity(monkeypatch, gather_artifacts):
    """A call that ends with the runtime barrier kernel on stream 0 zeroes the rank's pads of the other parity in
    that kernel, before arriving: no zeroing node."""
    W = 3
    gpu, ex = graph_executor(monkeypatch, gather_artifacts[W], W, graph=True)
    zeroed, clears = [], []
    monkeypatch.setattr(ex, "_zero", lambda stream, t: zeroed.append(t))
    real_barrier = ex._barrier
    monkeypatch.setattr(ex, "_barrier", lambda rank, stream, a: clears.append(dict(ex._final_clear)) or
                        real_barrier(rank, stream, a))
    xs = gather_inputs(W, 1)
    for _ in range(3):
        ex.run(xs)
    assert not zeroed and ex._graphs.captures == 2 and ex._final_clear == {}
    assert all(set(c) == set(range(W)) for c in clears) and len(clears) == 2 * W  # one final barrier per rank
    bar = ex.program.alloc_index("g_bar")
    for r in range(W):  # call 3 (parity 1) cleared parity 0, which call 2 had used
        assert ex._parity_views[0][(bar, r)].abs().sum() == 0 and ex._parity_views[1][(bar, r)].tolist() == [1] * W
    ex.close()


def test_the_gather_program_ends_with_a_barrier(gather_artifacts):
    program = HostProgram(gather_artifacts[3].host_program)
    traces = G.check_graph_program(program, [0, 1, 2], 3, real=True)
    assert all(isinstance([a for a in t if a.stream == 0][-1], BarrierAction) for t in traces.values())


def test_two_parity_layout():
    buffers = [("sync", (2,), torch.int32), ("stage", (8, 16), torch.float32), ("avail", (3,), torch.int32),
               ("bar", (3,), torch.int32)]
    layout, names = program_layout(buffers, [0, 2, 3], 2)
    assert names == [["sync", "stage", "avail", "bar"], ["sync@1", "stage", "avail@1", "bar@1"]]
    order = sorted(layout.buffers.values(), key=lambda b: b.offset)
    assert [b.name for b in order] == ["stage", "sync", "avail", "bar", "sync@1", "avail@1", "bar@1"]
    assert all(b.offset % ALIGN == 0 for b in order)
    start0, n0 = layout.span(names[0][j] for j in (0, 2, 3))
    start1, n1 = layout.span(names[1][j] for j in (0, 2, 3))
    assert start0 == layout.buffers["sync"].offset and start0 + n0 == layout.buffers["bar"].offset + 12
    assert start1 == layout.buffers["sync@1"].offset and start1 >= start0 + n0 and n1 == n0
    assert layout.span(["stage"]) == (0, 8 * 16 * 4)
    eager, eager_names = program_layout(buffers, [0, 2, 3], 1)
    assert list(eager.buffers) == ["sync", "stage", "avail", "bar"] and eager_names == [["sync", "stage", "avail",
                                                                                          "bar"]]
    assert parity_name("p", 0) == "p" and parity_name("p", 1) == "p@1"
    with pytest.raises(DitronRuntimeError, match="1 or 2 parities"):
        program_layout(buffers, [0], 3)
    assert HeapLayout().span([]) == (0, 0)


def test_rotating_buffers_have_a_copy_per_parity_in_either_mode():
    buffers = [("inbox", (4, 8), torch.bfloat16), ("pad", (3,), torch.int32), ("x", (2,), torch.float32)]
    eager, names = program_layout(buffers, [1], 1, [0])
    assert names == [["inbox", "pad", "x"], ["inbox@1", "pad", "x"]]  # eager: the pad once, the inbox twice
    assert list(eager.buffers) == ["inbox", "inbox@1", "pad", "x"]
    graph, names = program_layout(buffers, [1], 2, [0])
    assert names == [["inbox", "pad", "x"], ["inbox@1", "pad@1", "x"]]
    assert list(graph.buffers) == ["inbox", "inbox@1", "x", "pad", "pad@1"]
    with pytest.raises(DitronRuntimeError, match="a signal pad cannot rotate"):
        program_layout(buffers, [1], 2, [1])


def test_host_program_fence_and_rotate_are_checked(gather_artifacts):
    data = dict(gather_artifacts[3].host_program)
    assert HostProgram(data).fence == "barrier" and not any(a.rotate for a in HostProgram(data).allocs)
    with pytest.raises(DitronRuntimeError, match="fence 'never' is not one of barrier, waits"):
        HostProgram({**data, "fence": "never"})
    allocs = [dict(a) for a in data["allocs"]]
    allocs[1]["rotate"] = "yes"
    with pytest.raises(DitronRuntimeError, match=r"symmetric buffer 1: 'rotate' must be true or false"):
        HostProgram({**data, "allocs": allocs})
    allocs[1]["rotate"] = False
    allocs[1]["consumed"] = 1
    with pytest.raises(DitronRuntimeError, match=r"symmetric buffer 1: 'consumed' must be true or false"):
        HostProgram({**data, "allocs": allocs})
    stage = next(j for j, a in enumerate(allocs) if len(a["shape"]) > 1)
    allocs[1]["consumed"], allocs[stage]["consumed"] = False, True
    with pytest.raises(DitronRuntimeError, match=r"is consumed: only a signal pad \(1-d i32, not rotating\)"):
        HostProgram({**data, "allocs": allocs})


def test_tensor_keys():
    x = torch.zeros(4, 6)
    assert G.tensor_key(x) == G.tensor_key(x.view(4, 6)) != G.tensor_key(x.t())
    assert G.tensor_key(x) != G.tensor_key(x.clone()) and G.tensor_key(x) != G.tensor_key(x.view(torch.int32))
    assert G.tensor_key([1])[0] == "?"


# ------------------------------------------------------------------------------------------- runs on the fake GPU

@pytest.mark.parametrize("wait_via", ["memop", "kernel"])
@pytest.mark.parametrize("W", [1, 3])
def test_graph_calls_alternate_parities_and_reset_pads(monkeypatch, gather_artifacts, W, wait_via):
    gpu, ex = graph_executor(monkeypatch, gather_artifacts[W], W, graph=True, wait_via=wait_via)
    assert ex.graph and ex.wait_memop == (wait_via == "memop")
    pads = [ex.program.alloc_index(n) for n in ("g_sync", "g_avail", "g_bar")]
    sets = [gather_inputs(W, k) for k in range(2)]
    results = []
    for call in range(1, 7):
        xs = sets[(call - 1) // 2 % 2]  # calls 1, 2 and 5, 6 on one set of tensors; 3, 4 on another
        for row in xs:
            row[0].add_(1.0)  # new values in the same tensors: a replay must read them
        outs = ex.run(xs)
        results.append(outs)
        for r in range(W):
            assert torch.equal(outs[r][0], torch.cat([x[0] for x in xs])), (call, r)
        parity = call % 2
        for r in range(W):
            for j in pads:  # this call's parity holds one fresh epoch-1 call; the other parity was zeroed
                assert ex._parity_views[1 - parity][(j, r)].abs().sum() == 0, (call, r, j)
            assert ex._parity_views[parity][(ex.program.alloc_index("g_bar"), r)].tolist() == [1] * W
    assert ex.epoch == 6 and ex._graphs.captures == 4 and gpu.replays == 6 + 1  # + the memop capture probe
    assert results[0] is results[1] is results[4]  # executor-owned outputs, one set per key
    assert results[2] is results[3] and results[2] is not results[0]
    if wait_via == "memop":
        assert gpu.driver.waits > 0
    assert ex.watch.done
    ex.close()


def test_given_outputs_and_pipelined_graph_calls(monkeypatch, gather_artifacts):
    W = 3
    gpu, ex = graph_executor(monkeypatch, gather_artifacts[W], W, graph=True)
    xs = gather_inputs(W, 1)
    outs = [[torch.zeros(W * 8, 16)] for _ in range(W)]
    got = [ex.run(xs, outputs=outs, sync=False) for _ in range(3)]
    ex.synchronize()
    assert got[0][0][0] is outs[0][0] and torch.equal(outs[2][0], torch.cat([x[0] for x in xs]))
    assert ex._graphs.captures == 2 and len(ex._graphs.entries) == 1
    ex.close()


def test_graph_calls_are_pruned_with_one_query_per_stream(monkeypatch, gather_artifacts):
    """Completed graph calls leave the watch every PRUNE_AT calls: after one event query when they all ran on one
    stream, else one query per call."""
    from test_executor import FakeEvent, FakeStream
    W = 3
    monkeypatch.setattr(G, "PRUNE_AT", 4)
    gpu, ex = graph_executor(monkeypatch, gather_artifacts[W], W, graph=True)
    queries, prunes = [], []
    real = FakeEvent.query
    monkeypatch.setattr(FakeEvent, "query", lambda self: queries.append(self) or real(self))
    real_prune = G.GraphRunner._prune
    monkeypatch.setattr(G.GraphRunner, "_prune",
                        lambda self: prunes.append(self.ex.watch.pending(G.GRAPH_KEY)) or real_prune(self))
    xs, outs = gather_inputs(W, 1), [[torch.zeros(W * 8, 16)] for _ in range(W)]
    for _ in range(2):  # both parities captured
        ex.run(xs, outputs=outs)
    queries.clear()
    for _ in range(9):
        ex.run(xs, outputs=outs, sync=False)
        assert ex.watch.pending(G.GRAPH_KEY) <= 4
    assert prunes == [4, 4] and len(queries) == 2  # one query per prune: every call ran on the caller's stream
    user, other = gpu.cur, FakeStream(gpu, "other")
    queries.clear()
    for k in range(4):  # the next calls alternate between two streams: each call is queried
        gpu.cur = other if k % 2 else user
        ex.run(xs, outputs=outs, sync=False)
    gpu.cur = user
    assert prunes == [4, 4, 4] and len(queries) == 4
    ex.synchronize()
    ex.close()


@pytest.mark.parametrize("n", [1, 2])
def test_bound_call_again_checks_the_call_then_enqueues(n):
    """BoundCall.again (ditron.ops' repeated call): the same world, tensor objects and out, unchanged, equal
    parameters and a live call enqueue it (replay() when the entry cannot: a parity still to capture); anything
    else returns False having done nothing -- another object, an in-place resize or transpose, other parameters,
    an evicted set, a closed or broken executor, something that is not a tensor."""
    from types import SimpleNamespace
    log, ready = [], [True]
    ex = SimpleNamespace(_closed=False, _broken=None)
    entry = SimpleNamespace(live=True, enqueue=lambda sync: log.append(("enqueue", sync)) or ready[0])
    runner = SimpleNamespace(ex=ex, replay=lambda e, outs, sync: log.append(("replay", sync, e is entry)))
    xs = tuple(torch.zeros(4, 4) for _ in range(n))
    out, world, params = torch.zeros(4, 4), object(), {"algorithm": "auto"}
    again = G.BoundCall(runner, entry, list(xs), [out]).again(world, xs, out, params)
    assert again(world, xs, out, {"algorithm": "auto"}, False) and log == [("enqueue", False)]
    ready[0] = False
    assert again(world, tuple(xs), out, params, True) and log[1:] == [("enqueue", True), ("replay", True, True)]
    log.clear()
    other = torch.zeros(4, 4)
    assert not again(world, (other,) + xs[1:], out, params, False)
    assert not again(world, xs, other, params, False)
    assert not again(object(), xs, out, params, False)
    assert not again(world, xs, out, {"algorithm": "push"}, False)
    assert not again(world, xs + xs[:1], out, params, False)
    assert not again(world, ("not a tensor",) * n, out, params, False)
    xs[-1].t_()  # same object, same shape, other strides
    assert not again(world, xs, out, params, False)
    xs[-1].t_()
    out.resize_(2, 8)
    assert not again(world, xs, out, params, False)
    out.resize_(4, 4)
    for obj, name, value in ((entry, "live", False), (ex, "_closed", True), (ex, "_broken", "a wait timed out")):
        old = getattr(obj, name)
        setattr(obj, name, value)
        assert not again(world, xs, out, params, False)
        setattr(obj, name, old)
    assert not log
    assert again(world, xs, out, params, False) and again.bound.entry is entry


def test_graph_call_milestones_each_name_their_own_call(monkeypatch, gather_artifacts):
    """A call's milestone comes from a ring of EVENT_RING, refilled, while the watch holds fewer calls (so never one
    still queued), else it is made new: however far the host runs ahead, each queued milestone names its call."""
    W = 3
    monkeypatch.setattr(G, "EVENT_RING", 4)
    monkeypatch.setattr(G, "PRUNE_AT", 100)
    gpu, ex = graph_executor(monkeypatch, gather_artifacts[W], W, graph=True)
    xs, outs = gather_inputs(W, 1), [[torch.zeros(W * 8, 16)] for _ in range(W)]
    for _ in range(2):  # both parities captured; synchronised: nothing queued
        ex.run(xs, outputs=outs)
    assert ex.watch.pending(G.GRAPH_KEY) == 0
    for _ in range(10):
        ex.run(xs, outputs=outs, sync=False)
    queued = list(ex.watch.queues[G.GRAPH_KEY])
    assert [m.epoch for m in queued] == list(range(3, 13))
    assert [m.action.parity for m in queued] == [e % 2 for e in range(3, 13)]
    ring = ex._graphs._milestones
    assert len({id(m) for m in queued}) == 10 and all(m is ring[e % 4] for m, e in zip(queued, range(3, 7)))
    ex.synchronize()
    ex.close()


@pytest.mark.parametrize("done", [0, 1, 9, 15, 16])
def test_pruning_bisects_for_the_newest_completed_call(done):
    """Graph calls on one stream complete in order: with the newest not done yet, a bisection finds the newest done
    call in a few queries and drops it and every earlier one."""
    from collections import deque
    from types import SimpleNamespace

    from ditron.runtime.timeouts import Milestone, Watch
    queries = []

    class Ev:
        def __init__(self, k):
            self.k = k

        def query(self):
            queries.append(self.k)
            return self.k < done
    watch = Watch()
    watch.queues[G.GRAPH_KEY] = deque(Milestone(Ev(k), -1, -1, None, k) for k in range(16))
    runner = SimpleNamespace(ex=SimpleNamespace(watch=watch), _streams={7}, _queue=watch.queues[G.GRAPH_KEY])
    G.GraphRunner._prune(runner)
    assert [m.epoch for m in watch.queues[G.GRAPH_KEY]] == list(range(done, 16))
    assert len(queries) <= 1 + 4


def test_graph_lru_and_input_checks(monkeypatch, gather_artifacts):
    W = 3
    monkeypatch.setattr(G, "GRAPH_CACHE", 2)
    gpu, ex = graph_executor(monkeypatch, gather_artifacts[W], W, graph=True)
    for k in range(3):
        ex.run(gather_inputs(W, k))
    assert len(ex._graphs.entries) == 2
    xs = gather_inputs(W, 9, K=32)
    with pytest.raises(G.GraphModeError, match="input argument 0 of rank 0 is not contiguous"):
        ex.run([[x[0][:, :16]] for x in xs])
    bad = gather_inputs(W, 1)
    bad[2][0] = bad[2][0].double()
    with pytest.raises(DitronRuntimeError, match="input argument 0 of rank 2: the program takes a 8x16 f32 tensor"):
        ex.run(bad)
    with pytest.raises(DitronRuntimeError, match="a virtual world of 3 rank\\(s\\) takes one list of tensors per rank"):
        ex.run(bad[:2])
    ex.close()


def test_bound_calls_replay_and_rebind_after_eviction(monkeypatch, gather_artifacts):
    W = 3
    monkeypatch.setattr(G, "GRAPH_CACHE", 2)
    gpu, ex = graph_executor(monkeypatch, gather_artifacts[W], W, graph=True)
    xs = gather_inputs(W, 1)
    outs = [[torch.zeros(W * 8, 16)] for _ in range(W)]
    bound = ex.bind(xs, outs)
    assert bound.live and ex._graphs.captures == 0  # bound and checked, nothing captured or run yet
    got = bound(sync=False)
    assert got[1][0] is outs[1][0] and ex.epoch == 1
    bound()
    assert torch.equal(outs[2][0], torch.cat([x[0] for x in xs])) and ex._graphs.captures == 2 and ex.epoch == 2
    for k in (2, 3):  # two other tensor sets evict the bound one from the LRU of 2
        ex.run(gather_inputs(W, k))
    assert not bound.live
    outs[0][0].zero_()
    bound()  # binds again (a new entry, captured again) and runs
    assert bound.live and torch.equal(outs[0][0], torch.cat([x[0] for x in xs])) and ex._graphs.captures == 5  # one parity each
    with pytest.raises(DitronRuntimeError, match="input argument 0 of rank 0 is not contiguous"):
        ex.bind([[x[0].t()] for x in gather_inputs(W, 4, K=8)])
    ex.close()
    assert not bound.live
    with pytest.raises(DitronRuntimeError, match="this executor is closed"):
        bound()
    gpu, eager = graph_executor(monkeypatch, gather_artifacts[W], W)
    with pytest.raises(DitronRuntimeError, match=r"bind\(\) replays CUDA graphs: make the executor with graph=True"):
        eager.bind(xs)
    eager.close()


def test_memops_fall_back_when_capture_fails(monkeypatch, gather_artifacts):
    W = 3
    real = FakeGraphs.capture

    def capture(self, body):
        if not self.gpu.replays:  # the probe: refuse it as a driver without capturable memops would
            raise RuntimeError("operation not permitted when stream is capturing")
        return real(self, body)
    monkeypatch.setattr(FakeGraphs, "capture", capture)
    with pytest.warns(RuntimeWarning, match="cannot be captured into a CUDA graph here .* uses the wait and signal "
                                            "kernels"):
        gpu, ex = graph_executor(monkeypatch, gather_artifacts[W], W, graph=True)
    assert not ex.wait_memop and not ex.signal_memop
    gpu.replays = 1
    xs = gather_inputs(W, 1)
    assert torch.equal(ex.run(xs)[1][0], torch.cat([x[0] for x in xs])) and gpu.driver.waits == 1  # the eager probe
    ex.close()
    with pytest.raises(G.GraphModeError, match="stream memory operations cannot be captured"):
        monkeypatch.setattr(FakeGraphs, "capture", lambda self, body: (_ for _ in ()).throw(RuntimeError("no")))
        graph_executor(monkeypatch, gather_artifacts[W], W, graph=True, wait_via="memop")


def test_graphs_wait_with_kernels_on_stream0_and_memops_on_side_streams(monkeypatch, gather_artifacts):
    """Kernel nodes are cheaper to launch than memop nodes, but a side stream's kernel may not run beside a kernel
    that spins for it: stream 0's waits and signals are kernels, side streams' are memops."""
    W = 3
    gpu, ex = graph_executor(monkeypatch, gather_artifacts[W], W, graph=True)
    kernel_waits = []
    real = ex._kernel

    def spy(name):
        k = real(name)
        if name in (ex.program.wait_kernel, ex.program.barrier_kernel):
            kernel_waits.append(name)
        return k
    monkeypatch.setattr(ex, "_kernel", spy)
    side = sum(isinstance(a, G.WaitAction) and a.stream != 0 for r in ex.ranks for a in ex._graph_traces[r])
    stream0 = sum(isinstance(a, (G.WaitAction, G.BarrierAction)) and a.stream == 0
                  for r in ex.ranks for a in ex._graph_traces[r])
    assert side and stream0
    before = gpu.driver.waits
    xs = gather_inputs(W, 1)
    assert torch.equal(ex.run(xs)[0][0], torch.cat([x[0] for x in xs]))
    assert kernel_waits and gpu.driver.waits - before >= side
    # a barrier on stream 0 is one runtime barrier kernel (not W signal kernels and a wait kernel)
    barriers = any(isinstance(a, G.BarrierAction) and a.stream == 0 for a in ex._graph_traces[ex.ranks[0]])
    assert barriers and ex.program.barrier_kernel in kernel_waits
    ex.close()


def test_eager_memop_waits(monkeypatch, tmp_path_factory):
    case = small("all_reduce2", 2)
    exe = compiled(tmp_path_factory, case)
    gpu, ex = graph_executor(monkeypatch, exe, 2, EP.program(case)[1])
    assert ex.wait_memop and not ex.graph
    launched = []
    real = FakeLauncher.launch
    monkeypatch.setattr(FakeLauncher, "launch", lambda self, *a: (launched.append(self.name), real(self, *a))[1])
    for call in (1, 2, 3):
        xs = EP.make_inputs(case, call, device="cpu")
        outs = ex.run(xs)
        want = EP.reference(case, xs)
        assert all(tolerance_equal(outs[r][0], want[r][0]) for r in range(2))
    assert "ditron_rt_wait" not in launched and gpu.driver.waits > 0 and gpu.driver.writes > 0
    ex.close()


def test_wait_via_memop_needs_the_driver(monkeypatch, tmp_path_factory):
    exe = compiled(tmp_path_factory, small("all_gather", 2))
    with pytest.raises(DitronRuntimeError, match="wait_via='memop' needs the CUDA driver's cuStreamWaitValue32"):
        graph_executor(monkeypatch, exe, 2, driver=False, wait_via="memop")


# ------------------------------------------------------------------------------------------- timeouts

def test_a_stuck_memop_wait_raises_naming_rank_slot_and_value(monkeypatch, tmp_path_factory):
    case = EP.CASES["stuck_w2_m16"]
    exe = compiled(tmp_path_factory, case)
    gpu, ex = graph_executor(monkeypatch, exe, 2, timeout_s=0.2, wait_via="memop")
    with pytest.raises(WaitTimeoutError) as err:
        ex.run(EP.make_inputs(case, 1, device="cpu"))
    message = str(err.value)
    assert "wait timed out after 0.2 s: rank 0 waits for signal pad 'stuck_sig' slot 0 >= 1 (observed 0)" in message
    assert "rank 1, stream 0: wait for signal pad 'stuck_sig' slot 0 >= 1 (now 0), call 1" in message
    assert ex.watch.done  # INT32_MAX released the driver waits
    with pytest.raises(DitronRuntimeError, match="cannot run again"):
        ex.run(EP.make_inputs(case, 2, device="cpu"))
    ex.close()


@pytest.mark.parametrize("wait_via", ["memop", "kernel"])
def test_a_stuck_graph_call_names_the_first_blocked_wait_of_each_stream(monkeypatch, gather_artifacts, wait_via):
    W = 3
    exe = gather_artifacts[W]
    gpu = GraphFakeGPU(monkeypatch, driver=True)
    fake = gpu.executable(exe)
    fake.host_program = EP.without_signals_to(exe.host_program, "g_avail")
    ex = X.Executor(fake, World.virtual(W, device="cpu"), graph=True, timeout_s=0.2, wait_via=wait_via)
    gpu.ex = ex
    ex.run(gather_inputs(W, 1), sync=False)  # call 1 (parity 1) hangs; the host finds out when it synchronizes
    with pytest.raises(WaitTimeoutError) as err:
        ex.synchronize()
    message = str(err.value)
    for r in range(W):
        assert f"rank {r}, stream 1: wait for signal pad 'g_avail' slot {(r + 1) % W} >= 1 (now 0), call 1" \
            in message, message
        assert f"rank {r}, stream 0: wait for signal pad 'g_sync' slot 1 >= 1 (now 0), call 1" in message, message
    assert "released the blocked waits" in message and ex.watch.done
    ex.close()


def test_the_watchdog_names_a_silent_graph_stall():
    from ditron.runtime.timeouts import Milestone, raise_silent_stall
    head = Milestone(None, -1, -1, G.GraphCall(1, {}), 7)
    with pytest.raises(DitronRuntimeError, match=r"the CUDA graph of call 7 \(parity 1\)"):
        raise_silent_stall([head], 31.0)


@pytest.mark.parametrize("compiled", [True, False])
def test_graph_launcher_calls_both_entry_points_in_one_call(compiled, monkeypatch):
    """DriverMemops.graph_launcher: cuGraphLaunch then cuEventRecord (skipped for event 0) in one call returning 0,
    the launch's CUresult, or minus the record's; the compiled helper (hotpath.c, through real C function pointers
    here) and the ctypes fallback alike; fail() names the call that failed."""
    import functools

    from ditron.runtime import memops
    if compiled and memops.hotpath() is None:
        pytest.skip("no C compiler or Python headers here: the helper cannot be built")
    if not compiled:
        monkeypatch.setattr(memops, "hotpath", lambda: None)
    fn_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    calls, codes = [], {"cuGraphLaunch": 0, "cuEventRecord": 0}

    class Lib:
        cuStreamWaitValue32_v2 = cuStreamWriteValue32_v2 = staticmethod(lambda *a: 0)
    lib = Lib()
    for name in codes:  # C function pointers that call back here
        setattr(lib, name, fn_type(lambda a, b, name=name: calls.append((name, a, b)) or codes[name]))
    drv = memops.DriverMemops(lib)
    launch = drv.graph_launcher()
    assert isinstance(launch, functools.partial) == compiled
    assert launch(0xabc, 0x10, 0xdef) == 0
    assert calls == [("cuGraphLaunch", 0xabc, 0x10), ("cuEventRecord", 0xdef, 0x10)]
    assert launch(0xabc, 0x20, 0) == 0 and calls[2:] == [("cuGraphLaunch", 0xabc, 0x20)]
    codes["cuEventRecord"] = 700
    assert launch(1, 2, 3) == -700
    with pytest.raises(DitronRuntimeError, match=r"cuEventRecord failed: CUresult 700"):
        drv.launch_graph(1, 2, 3)
    codes["cuGraphLaunch"] = 400
    del calls[:]
    assert launch(1, 2, 3) == 400 and calls == [("cuGraphLaunch", 1, 2)]  # no record after a refused launch
    assert "cuGraphLaunch failed: CUresult 400" in str(drv.fail(400))


def test_driver_graph_launch_and_record_through_ctypes_entry_points():
    """DriverMemops binds cuGraphLaunch and cuEventRecord where the driver has them: a launch (with its completion
    event, in one call) returns True, a missing entry point or handle False having done nothing (torch replays and
    records then), a refused launch or record raises naming the CUresult."""
    from ditron.runtime.memops import DriverMemops

    class Lib:
        def __init__(self, **fns):
            self.calls = []
            for name in ("cuStreamWaitValue32_v2", "cuStreamWriteValue32_v2"):
                setattr(self, name, lambda *a: 0)
            for name, code in fns.items():
                setattr(self, name, lambda *a, name=name, code=code: self.calls.append((name, a)) or code)
    lib = Lib(cuGraphLaunch=0, cuEventRecord=0)
    drv = DriverMemops(lib)
    assert drv.launch_graph(0xabc, 0x10) and drv.record(0xdef, 0x10) and not drv.launch_graph(0, 0x10)
    assert lib.calls == [("cuGraphLaunch", (0xabc, 0x10)), ("cuEventRecord", (0xdef, 0x10))]
    assert drv.launch_graph(0xabc, 0x20, 0xdef)  # a graph call's launch and its event in one call
    assert lib.calls[2:] == [("cuGraphLaunch", (0xabc, 0x20)), ("cuEventRecord", (0xdef, 0x20))]
    assert not DriverMemops(Lib()).launch_graph(0xabc, 0x10) and not DriverMemops(Lib()).record(0xdef, 0x10)
    no_record = Lib(cuGraphLaunch=0)
    assert not DriverMemops(no_record).launch_graph(0xabc, 0x10, 0xdef) and not no_record.calls  # nothing done
    with pytest.raises(DitronRuntimeError, match=r"cuGraphLaunch failed: CUresult 400 \(CUDA_ERROR_\?\)"):
        DriverMemops(Lib(cuGraphLaunch=400)).launch_graph(0xabc, 0x10)
    with pytest.raises(DitronRuntimeError, match=r"cuEventRecord failed: CUresult 700 \(CUDA_ERROR_\?\)"):
        DriverMemops(Lib(cuGraphLaunch=0, cuEventRecord=700)).launch_graph(0xabc, 0x10, 0xdef)


class _FakeCapture:
    """torch.cuda.CUDAGraph's capture calls, recording whether the cyclic garbage collector could run."""

    def __init__(self, log):
        self.log = log

    def capture_begin(self, capture_error_mode):
        import gc
        self.log.append(("begin", capture_error_mode, gc.isenabled()))

    def capture_end(self):
        import gc
        self.log.append(("end", gc.isenabled()))


@pytest.mark.parametrize("fails", [False, True])
@pytest.mark.parametrize("enabled", [True, False])
def test_capture_keeps_the_garbage_collector_off(monkeypatch, fails, enabled):
    """A finalizer run by a collection inside a capture may call CUDA in a way the capture refuses (a torch
    symmetric-memory tensor's free aborted a process so): no collection while TorchGraphs captures, and the
    collector's state restored after -- on success, on an error in the body, and left off if it was off."""
    import contextlib
    import gc
    log = []
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: _FakeCapture(log))
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "set_stream", lambda s: log.append(("set_stream", s)))
    graphs = object.__new__(G.TorchGraphs)
    graphs.capture_stream = "cap"

    def body(stream):
        log.append(("body", stream, gc.isenabled()))
        if fails:
            raise RuntimeError("a launch failed")

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        if fails:
            with pytest.raises(RuntimeError, match="a launch failed"):
                graphs.capture(body)
        else:
            assert isinstance(graphs.capture(body), _FakeCapture)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert log == [("begin", "thread_local", False), ("body", "cap", False), ("set_stream", "cap"), ("end", False)]
