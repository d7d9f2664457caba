"""ditron.torch_ops on the CPU: the operators' schemas, world handles, the fake implementations (shapes and dtypes
for the world, the same errors as ditron.ops, symbolic sizes), torch.library.opcheck, tracing by make_fx and
torch.compile(fullgraph=True) with no graph break; and the capture plans (ditron.runtime.callplan) replayed on the
fake GPU of test_executor.py: every replay of one capture is a correct call with the pads as the capture found
them. The GPU runs are in test_torch_ops_gpu.py."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from test_executor_graph import gather_artifacts  # noqa: F401 - a fixture

from ditron import ops, torch_ops
from ditron.runtime.world import World

SCHEMAS = {
    "ag_gemm": "ditron::ag_gemm(Tensor a, Tensor b, str world, int max_rows=0) -> Tensor",
    "gemm_rs": "ditron::gemm_rs(Tensor a, Tensor b, str world, int max_rows=0) -> Tensor",
    "gemm_ar": 'ditron::gemm_ar(Tensor a, Tensor b, str world, str algorithm="auto", int max_rows=0) -> Tensor',
    "all_gather": "ditron::all_gather(Tensor x, str world, SymInt dim=0, int max_rows=0) -> Tensor",
    "reduce_scatter": "ditron::reduce_scatter(Tensor x, str world, SymInt dim=0, int max_rows=0) -> Tensor",
    "all_reduce": 'ditron::all_reduce(Tensor x, str world, str algorithm="auto", int max_rows=0) -> Tensor',
    "all_to_all": ("ditron::all_to_all(Tensor x, str world, SymInt split_dim=0, SymInt concat_dim=0, int max_rows=0) "
                   "-> Tensor"),
    "grouped_gemm": "ditron::grouped_gemm(Tensor x, Tensor w, Tensor group_sizes, str world, str? gated=None, "
                    "int max_rows=0) -> Tensor",
}
BF16 = torch.bfloat16


def real_world(W: int, rank: int = 0) -> World:
    """A real world's description without torch.distributed (enough for handles and fake implementations)."""
    return World(W, rank, torch.device("cpu"))


def meta(*shape, dtype=BF16):
    return torch.empty(shape, device="meta", dtype=dtype)


# every op: (args before the world, keyword parameters, output shape at W = 4) with this rank's shapes
CASES = [
    ("ag_gemm", (meta(8, 16), meta(16, 32)), {}, (32, 32)),
    ("gemm_rs", (meta(8, 16), meta(16, 32)), {}, (2, 32)),
    ("gemm_ar", (meta(8, 16), meta(16, 32)), {"algorithm": "one_shot"}, (8, 32)),
    ("all_gather", (meta(8, 16),), {"dim": 1}, (8, 64)),
    ("all_gather", (meta(8, 16),), {"dim": -2}, (32, 16)),
    ("reduce_scatter", (meta(8, 16),), {"dim": 0}, (2, 16)),
    ("all_reduce", (meta(8, 16),), {"algorithm": "two_shot"}, (8, 16)),
    ("all_to_all", (meta(8, 16),), {"split_dim": 1, "concat_dim": 0}, (32, 4)),
    ("grouped_gemm", (meta(10, 16), meta(4, 16, 32), meta(4, dtype=torch.int32)), {}, (10, 32)),
    ("grouped_gemm", (meta(10, 16), meta(4, 16, 32), meta(8, dtype=torch.int32)), {"gated": "silu"}, (10, 16)),
]


def test_every_op_of_ditron_ops_has_its_schema():
    assert set(torch_ops.OPERATORS) == set(ops.OPS) == set(SCHEMAS)
    for name, schema in SCHEMAS.items():
        assert str(getattr(torch.ops.ditron, name).default._schema) == schema


def test_world_handles():
    w = real_world(4)
    h = torch_ops.register_world(w)
    assert isinstance(h, str) and h.startswith(torch_ops.PREFIX) and h.endswith("-w4r")
    assert torch_ops.register_world(w) == h and torch_ops.world_of(h) is w
    other = torch_ops.register_world(w, capturable=False)
    assert other != h and torch_ops.register_world(World.virtual(1, device="cpu")).endswith("-w1v")
    with pytest.raises(torch_ops.WorldHandleError, match="a virtual world of 4 ranks takes one list of tensors"):
        torch_ops.register_world(World.virtual(4, device="cpu"))
    with pytest.raises(torch_ops.WorldHandleError, match="register_world takes a ditron.World"):
        torch_ops.register_world("tp")
    with pytest.raises(torch_ops.WorldHandleError, match="library= takes an ops.Library"):
        torch_ops.register_world(w, library="dir")
    torch_ops.unregister_world(other)
    with pytest.raises(torch_ops.WorldHandleError, match=r"'nope' is not the handle of a world registered"):
        torch.ops.ditron.all_reduce(meta(4, 4), "nope")
    with pytest.raises(torch_ops.WorldHandleError, match="is not the handle"):
        torch.ops.ditron.all_reduce(meta(4, 4), other)


@pytest.mark.parametrize("op, args, params, want", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_fake_implementations_give_the_output_of_the_world(op, args, params, want):
    h = torch_ops.register_world(real_world(4))
    y = getattr(torch.ops.ditron, op)(*args, h, **params)
    assert tuple(y.shape) == want and y.dtype == BF16 and y.device.type == "meta"
    sig = ops.signature_for(op, [a.shape for a in args], "bf16", 4, False, **params)
    assert sig.output_shape() == want  # the same arithmetic as ops.Signature
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        fakes = [mode.from_tensor(torch.empty(a.shape, dtype=torch.float16 if a.dtype.is_floating_point else a.dtype))
                 for a in args]
        y = getattr(torch.ops.ditron, op)(*fakes, h, **params)
        assert tuple(y.shape) == want and y.dtype == torch.float16
    one = torch_ops.register_world(World.virtual(1, device="cpu"))
    assert tuple(getattr(torch.ops.ditron, op)(*args, one, **params).shape) == \
        ops.signature_for(op, [a.shape for a in args], "bf16", 1, True, **params).output_shape()


@pytest.mark.parametrize("op, args, params, want", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_opcheck(op, args, params, want):
    h = torch_ops.register_world(real_world(4))
    torch.library.opcheck(getattr(torch.ops.ditron, op).default, (*args, h), params)


@pytest.mark.parametrize("call, message", [
    (lambda h: torch.ops.ditron.ag_gemm(meta(8, 16), meta(15, 32), h), "needs a \\[M, K\\] and b \\[K, N\\] with the "
                                                                       "same K, got \\[8, 16\\] and \\[15, 32\\]"),
    (lambda h: torch.ops.ditron.gemm_rs(meta(6, 16), meta(16, 32), h), "the 6 rows of a @ b do not split over 4"),
    (lambda h: torch.ops.ditron.gemm_ar(meta(8, 16), meta(16, 32), h, "ring"), "algorithm must be one of"),
    (lambda h: torch.ops.ditron.all_gather(meta(8, 16), h, 2), "dim 2 is out of range for a tensor of shape"),
    (lambda h: torch.ops.ditron.reduce_scatter(meta(6, 16), h), "dim 0 of \\[6, 16\\] \\(size 6\\) does not split"),
    (lambda h: torch.ops.ditron.all_to_all(meta(8, 6), h, 1, 0), "split_dim 1 of \\[8, 6\\] \\(size 6\\) does not"),
    (lambda h: torch.ops.ditron.all_reduce(meta(8, 6, dtype=torch.int32), h), "tensors of torch.int32 are not"),
    (lambda h: torch.ops.ditron.grouped_gemm(meta(10, 16), meta(4, 16, 33), meta(4, dtype=torch.int32), h, "silu"),
     "gated='silu' needs one of"),
    (lambda h: torch.ops.ditron.grouped_gemm(meta(10, 16), meta(4, 16, 32), meta(4, dtype=torch.int32), h, "gelu"),
     "gated='gelu' needs one of"),
    (lambda h: torch.ops.ditron.ag_gemm(meta(8, 16), meta(16, 32, dtype=torch.float16), h), "different element "
                                                                                             "types"),
])
def test_fake_implementations_refuse_what_ditron_ops_refuses(call, message):
    with pytest.raises(ops.OpError, match=message):
        call(torch_ops.register_world(real_world(4)))


def test_a_call_on_cpu_tensors_is_refused():
    h = torch_ops.register_world(World.virtual(1, device="cpu"))
    with pytest.raises(ops.OpError, match="argument 0 is on cpu; ditron's ops run on CUDA tensors"):
        torch.ops.ditron.all_reduce(torch.zeros(4, 4, dtype=BF16), h)


def block(x, w1, w2, h):
    """A tensor-parallel MLP: column-parallel by AG+GEMM, row-parallel by GEMM+RS, then the collectives."""
    y = torch.ops.ditron.ag_gemm(x, w1, h).relu()
    z = torch.ops.ditron.gemm_rs(y, w2, h)
    z = torch_ops.all_reduce(z, h, "one_shot") + torch_ops.reduce_scatter(torch_ops.all_gather(z, h), h)
    return torch_ops.all_to_all(torch_ops.gemm_ar(z, w2.t().contiguous(), h), h, 1, 1)


def test_make_fx_traces_the_operators():
    h = torch_ops.register_world(real_world(2))
    x, w1, w2 = meta(8, 16), meta(16, 32), meta(32, 16)
    gm = make_fx(lambda x, w1, w2: block(x, w1, w2, h), tracing_mode="fake")(x, w1, w2)
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function" and "ditron" in str(n.target)]
    assert targets == ["ditron.ag_gemm.default", "ditron.gemm_rs.default", "ditron.all_reduce.default",
                       "ditron.all_gather.default", "ditron.reduce_scatter.default", "ditron.gemm_ar.default",
                       "ditron.all_to_all.default"]
    assert h in [a for n in gm.graph.nodes for a in n.args]  # the handle is a constant of the graph


@pytest.mark.parametrize("backend", ["aot_eager", "aot_eager_decomp_partition"])
def test_aot_autograd_traces_the_operators(backend):
    """Through AOTAutograd (functionalisation, decompositions) the operators stay whole and the results keep
    their shapes."""
    torch._dynamo.reset()
    h = torch_ops.register_world(real_world(2))
    f = torch.compile(lambda x, w1, w2: block(x, w1, w2, h), fullgraph=True, backend=backend)
    y = f(meta(8, 16), meta(16, 32), meta(32, 16))
    assert tuple(y.shape) == (8, 32) and y.dtype == BF16
    torch._dynamo.reset()


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph_has_no_graph_break(dynamic):
    """One graph for the whole block (fullgraph=True raises at a break); with dynamic=True one graph serves two
    batch sizes (the fakes take symbolic sizes)."""
    torch._dynamo.reset()
    h = torch_ops.register_world(real_world(2))
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    f = torch.compile(lambda x, w1, w2: block(x, w1, w2, h), fullgraph=True, backend=backend, dynamic=dynamic)
    w1, w2 = meta(16, 32), meta(32, 16)
    for m in (8, 4):
        y = f(meta(m, 16), w1, w2)
        assert tuple(y.shape) == (m, 32) and y.dtype == BF16  # AG+GEMM [2m, 32], GEMM+RS back to [m, 16]
    assert len(graphs) == (1 if dynamic else 2)
    ditron_nodes = [n for n in graphs[0].graph.nodes if "ditron" in str(n.target)]
    assert len(ditron_nodes) == 7
    torch._dynamo.reset()


def test_calling_ditron_ops_directly_is_what_breaks_the_graph():
    """The reason for the operators: ditron.ops' Python call path is not traceable (a world object, Triton's
    launcher); a torch.compile(fullgraph=True) of it fails where the operator compiles."""
    torch._dynamo.reset()
    world = real_world(2)
    f = torch.compile(lambda x: ops.all_reduce(x, world, sync=False), fullgraph=True, backend="eager")
    with pytest.raises(Exception):  # noqa: B017 - dynamo's own error types vary between releases
        f(meta(4, 4))
    torch._dynamo.reset()


# ------------------------------------------------------------------------------- capture plans (fake GPU)

def _capture(gpu, body):
    """What the caller's torch.cuda.graph would hold: the enqueue calls of body, recorded on the fake GPU."""
    from test_executor_graph import FakeGraphs
    graphs = FakeGraphs(gpu, gpu.cur)
    return graphs, graphs.capture(lambda cap: body())


@pytest.mark.parametrize("W", [1, 3])
def test_a_captured_call_replays_correctly_with_a_closing_barrier(monkeypatch, gather_artifacts, W):
    """The gather program ends with a barrier on stream 0: the plan captures one graph-mode call on parity 0 and
    the closing barrier on parity 1. Replayed five times with new values in the same tensors, every replay gathers
    the new values, and after each the pads are as the capture found them: parity 0 zero, parity 1 holding only
    the closing barrier's arrivals (zeroed again by the next replay's first step)."""
    from test_executor_graph import GraphFakeGPU, gather_inputs

    from ditron.runtime.callplan import CapturePlan
    gpu = GraphFakeGPU(monkeypatch, driver=True)
    world = World.virtual(W, device="cpu")
    plan = CapturePlan(gpu.executable(gather_artifacts[W]), world)
    gpu.ex = ex = plan.ex
    assert plan.mode == "barrier"
    xs = gather_inputs(W, 1)
    outs = [[torch.zeros(W * 8, 16)] for _ in range(W)]
    graphs, graph = _capture(gpu, lambda: plan.enqueue(xs, outs))
    assert plan.captures == 1 and not ex._capturing and ex._final_clear == {} and ex._barriers == {}
    bar = ex.program.alloc_index("g_bar")
    pads = [ex.program.alloc_index(n) for n in ("g_sync", "g_avail", "g_bar")]
    for replay in range(5):
        for row in xs:
            row[0].add_(1.0)
        graphs.replay(graph)
        gpu.run()
        for r in range(W):
            assert torch.equal(outs[r][0], torch.cat([x[0] for x in xs])), (replay, r)
            for j in pads:
                assert ex._parity_views[0][(j, r)].abs().sum() == 0, (replay, r, j)
                if j != bar:
                    assert ex._parity_views[1][(j, r)].abs().sum() == 0, (replay, r, j)
            assert ex._parity_views[1][(bar, r)].tolist() == [1] * W
    plan.close()


@pytest.mark.parametrize("mode", ["handshake", "twice"])
def test_a_program_without_a_final_barrier(monkeypatch, tmp_path, mode):
    """ditron's push all-reduce fences by its waits (no final barrier, no barrier kernel): with the driver's memops
    the plan captures the call on parity 0 then a memop handshake on parity 1 (zeroing parity 0 first); without
    them ("twice") the call again on parity 1, the replays alternating the pads and inboxes as graph mode does.
    Every replay's output matches the reference and leaves parity 0's pads zero."""
    import ditron
    from test_executor_graph import GraphFakeGPU
    from test_ops import _kernel_records

    from ditron.runtime.callplan import CapturePlan
    W = 2
    s = ops.signature_for("all_reduce", [(128, 64)], "bf16", W, True, algorithm="push")  # a pad of 2 slots
    exe = ditron.load(ops.build_one(s, tmp_path))
    gpu = GraphFakeGPU(monkeypatch, _kernel_records(ops.lower(s)[0]), driver=True)
    plan = CapturePlan(gpu.executable(exe), World.virtual(W, device="cpu"))
    gpu.ex = ex = plan.ex
    assert plan.mode == "handshake" and plan.handshake_pad == ex.program.alloc_index("ar_published")
    plan.mode = mode
    writes = gpu.driver.writes
    xs = [[torch.zeros(128, 64, dtype=BF16)] for _ in range(W)]
    outs = [[torch.zeros(128, 64, dtype=BF16)] for _ in range(W)]
    graphs, graph = _capture(gpu, lambda: plan.enqueue(xs, outs))
    for replay in range(4):
        g = torch.Generator().manual_seed(replay)
        for row in xs:
            row[0].copy_(torch.randn(128, 64, generator=g))
        graphs.replay(graph)
        gpu.run()
        want = ops.reference(s, xs)
        assert all(torch.allclose(outs[r][0].float(), want[r], rtol=2 ** -6, atol=2 ** -5) for r in range(W)), replay
        for r in range(W):
            assert all(ex._parity_views[0][(j, r)].abs().sum() == 0 for j in ex._pads), (replay, r)
            if mode == "handshake":  # only the handshake's arrivals on parity 1
                assert ex._parity_views[1][(plan.handshake_pad, r)][:W].tolist() == [1] * W
    if mode == "handshake":
        assert gpu.driver.writes - writes == W * W  # captured once: W arrivals per rank
    plan.close()


def test_capture_needs_a_prepared_plan():
    """A capture that finds no plan (no eager call before it) or a world registered capturable=False is refused
    with what to do; nothing is enqueued."""
    from ditron.runtime.callplan import CaptureNotPreparedError
    x = torch.zeros(8, 16, dtype=BF16)
    p = {"algorithm": "auto"}
    world = real_world(2)
    with pytest.raises(CaptureNotPreparedError, match=r"ditron::all_reduce \(8x16 torch.bfloat16, world of 2\) is "
                                                      "being captured into a CUDA graph before any eager call"):
        torch_ops._capture("all_reduce", (x,), world, None, True, p, [x], [x.clone()])
    with pytest.raises(CaptureNotPreparedError, match="registered with capturable=False"):
        torch_ops._capture("all_reduce", (x,), world, None, False, p, [x], [x.clone()])


def test_without_its_second_step_a_replay_meets_the_last_replays_pads(monkeypatch, gather_artifacts):
    """What the second step is for: the same capture without it (mode "once") leaves parity 0's pads holding the
    replay's signals, so the next replay's waits would be satisfied before their peers signal."""
    from test_executor_graph import GraphFakeGPU, gather_inputs

    from ditron.runtime.callplan import CapturePlan
    W = 3
    gpu = GraphFakeGPU(monkeypatch, driver=True)
    plan = CapturePlan(gpu.executable(gather_artifacts[W]), World.virtual(W, device="cpu"))
    gpu.ex = ex = plan.ex
    plan.mode = "once"
    xs = gather_inputs(W, 1)
    outs = [[torch.zeros(W * 8, 16)] for _ in range(W)]
    graphs, graph = _capture(gpu, lambda: plan.enqueue(xs, outs))
    graphs.replay(graph)
    gpu.run()
    avail = ex.program.alloc_index("g_avail")
    assert all(ex._parity_views[0][(avail, r)].abs().sum() > 0 for r in range(W))
    plan.close()


# ------------------------------------------------------------------------------- eager traces per epoch

@pytest.mark.parametrize("op, W", [("all_gather", 3), ("reduce_scatter", 2), ("all_reduce2", 3), ("ag_gemm", 2),
                                   ("gemm_rs", 4), ("stuck", 2)])
def test_epoch_traces_equal_the_traces_of_every_epoch(tmp_path_factory, op, W):
    """EpochTraces (traced once, the epoch's values recomputed) gives what HostProgram.trace gives, at every epoch
    and rank, for the executor's test programs; actions without an epoch-dependent field are shared."""
    from test_executor import compiled, small

    from ditron.runtime.callplan import EpochTraces
    from ditron.runtime.program import HostProgram, without_entry_fork
    program = HostProgram(compiled(tmp_path_factory, small(op, W)).host_program)
    for r in range(W):
        traces = EpochTraces(program, r, W)
        assert traces.affine
        for e in (*range(1, 20), 4096, 99991, 2 ** 30):
            assert traces.trace(e) == without_entry_fork(program.trace(r, W, e), r), (r, e)
        a, b = traces.trace(5), traces.trace(6)
        shared = [x is y for x, y in zip(a, b)]
        assert shared.count(False) == len(traces._varying) and all(x == y for x, y, s in zip(a, b, shared) if s)


def test_epoch_traces_equal_the_traces_of_the_lowered_ops(gather_artifacts, tmp_path):
    """The same for programs ditron-default lowers: a push all-reduce and an AG+GEMM (and the gather program)."""
    import ditron

    from ditron.runtime.callplan import EpochTraces
    from ditron.runtime.program import HostProgram, without_entry_fork
    programs = [(HostProgram(gather_artifacts[3].host_program), 3)]
    for s in (ops.signature_for("all_reduce", [(128, 64)], "bf16", 2, False, algorithm="push"),
              ops.signature_for("all_gather", [(40, 24)], "bf16", 2, False)):
        programs.append((HostProgram(ditron.load(ops.build_one(s, tmp_path)).host_program), 2))
    for program, W in programs:
        for r in range(W):
            traces = EpochTraces(program, r, W)
            assert traces.affine
            for e in (1, 2, 3, 10, 11, 777):
                assert traces.trace(e) == without_entry_fork(program.trace(r, W, e), r), (r, e)


class _ParityProgram:
    """A stand-in host program whose one signal value is the epoch's parity (not affine), or that refuses large
    epochs."""

    def __init__(self, refuse_above: int | None = None):
        self.refuse_above, self.traced = refuse_above, 0

    def trace(self, rank, world_size, epoch):
        from ditron.runtime.program import Buf, HostProgramError, SignalAction
        self.traced += 1
        if self.refuse_above is not None and epoch > self.refuse_above:
            raise HostProgramError(f"epoch {epoch} is too large")
        return [SignalAction(1, None, 0, Buf("sym", 0), 0, 0, epoch % 2 if self.refuse_above is None else epoch,
                             "set", "gpu")]


@pytest.mark.parametrize("refuse_above", [None, 100])
def test_epoch_traces_fall_back_to_tracing_each_call(refuse_above):
    from ditron.errors import DitronError
    from ditron.runtime.callplan import EpochTraces
    program = _ParityProgram(refuse_above)
    traces = EpochTraces(program, 0, 2)
    assert not traces.affine
    before = program.traced
    for e in (1, 2, 3, 8):
        (a,) = traces.trace(e)
        assert a.value == (e % 2 if refuse_above is None else e)
    assert program.traced == before + 4  # traced per call
    if refuse_above is not None:
        with pytest.raises(DitronError, match="epoch 101 is too large"):
            traces.trace(101)


def test_a_program_graph_mode_refuses_keeps_its_eager_calls(tmp_path_factory):
    """A real-world program that does not end with a barrier on stream 0 (and does not fence by its waits) has no
    capture plan: plan_for returns None and keeps the refusal, which a capture then reports."""
    from test_executor import compiled, small

    from ditron.runtime import callplan
    exe = compiled(tmp_path_factory, small("all_gather", 2))
    world = World(2, 1, torch.device("cpu"))
    assert callplan.plan_for(exe, world, make=True) is None
    assert callplan.plan_for(exe, world, make=False) is None
    assert "CUDA-graph mode in a real world needs every call to end with a barrier" in callplan.refusal(exe, world)
    callplan.close_plans(world)
    assert callplan.refusal(exe, world) is None
