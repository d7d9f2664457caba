"""ditron.nn on the CPU: which shard each rank holds, in which layout, the plan resolution, the errors, and the
layers' numerics in a world of W ranks simulated by W threads (``ThreadWorld``: ditron's three fused ops replaced
by their definition, the ranks exchanging tensors through a barrier). The GPU run, with ditron's kernels, is
test_llama_gpu.py."""
from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from ditron import nn as dnn  # noqa: E402
from ditron import ops, torch_ops  # noqa: E402
from ditron.nn import linear as nn_linear  # noqa: E402
from ditron.runtime.world import World  # noqa: E402


# ------------------------------------------------------------------------------ a world of threads (CPU)

class ThreadWorld:
    """W ranks as W threads of this process. ``worlds[r]`` is rank r's ditron World (real: rank r of W, no process
    group); ``call_op`` stands in for ditron.nn.linear.call_op: each op's definition (ops.reference's), the ranks'
    tensors exchanged through a barrier. ``calls`` records (rank, op, a's shape, b's shape, b's data pointer)."""

    def __init__(self, world_size: int, timeout_s: float = 60.0):
        self.world_size = world_size
        self.worlds = [World(world_size, r, torch.device("cpu")) for r in range(world_size)]
        self.barrier = threading.Barrier(world_size, timeout=timeout_s)
        self.slots: list = [None] * world_size
        self.calls: list[tuple] = []
        self._lock = threading.Lock()

    def _exchange(self, rank: int, value):
        self.slots[rank] = value
        self.barrier.wait()
        everyone = list(self.slots)
        self.barrier.wait()  # every rank has read the slots before any rank writes its next value
        return everyone

    def call_op(self, op, a, b, handle, params):
        world = torch_ops.world_of(handle)
        rank = world.rank
        assert world is self.worlds[rank]
        assert a.is_contiguous() and b.is_contiguous(), "the ops read contiguous operands"
        with self._lock:
            self.calls.append((rank, op, tuple(a.shape), tuple(b.shape), b.data_ptr(), dict(params)))
        W = self.world_size
        if op == "ag_gemm":
            return torch.cat(self._exchange(rank, a), 0) @ b
        total = sum(self._exchange(rank, a @ b))
        if op == "gemm_ar":
            return total
        assert op == "gemm_rs"
        part = total.shape[0] // W
        return total[rank * part:(rank + 1) * part]

    def run(self, fn):
        """fn(rank, world) on every rank, in threads; the results in rank order (an error in any rank is raised)."""
        results: list = [None] * self.world_size
        errors: list = []

        def body(r):
            try:
                results[r] = fn(r, self.worlds[r])
            except BaseException as err:  # noqa: BLE001 - re-raised below, in the test's thread
                errors.append(err)
                self.barrier.abort()

        threads = [threading.Thread(target=body, args=(r,)) for r in range(self.world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0])
        return results


@pytest.fixture
def tw(monkeypatch):
    def make(world_size: int) -> ThreadWorld:
        world = ThreadWorld(world_size)
        monkeypatch.setattr(nn_linear, "call_op", world.call_op)
        return world
    return make


def _linear(i: int, o: int, bias: bool = True, seed: int = 0, dtype=torch.float64):
    torch.manual_seed(seed)
    return torch.nn.Linear(i, o, bias=bias, dtype=dtype)


# ------------------------------------------------------------------------------------------ sharding

@pytest.mark.parametrize("W", [1, 2, 4])
def test_column_parallel_holds_its_rows_of_the_weight(W):
    lin = _linear(8, 12)
    for r in range(W):
        layer = dnn.ColumnParallelLinear(lin, World(W, r, torch.device("cpu")))
        n = 12 // W
        assert layer.weight.shape == (n, 8) and layer.local_out_features == n
        assert torch.equal(layer.weight, lin.weight[r * n:(r + 1) * n])
        assert torch.equal(layer.bias, lin.bias[r * n:(r + 1) * n])
        # stored transposed, once: weight.t() is the ops' contiguous [K, N] operand
        assert layer.weight.t().is_contiguous() and layer.weight.untyped_storage().nbytes() == n * 8 * 8
        assert layer.weight.untyped_storage().data_ptr() != lin.weight.untyped_storage().data_ptr()


@pytest.mark.parametrize("W", [1, 2, 4])
def test_row_parallel_holds_its_columns_of_the_weight(W):
    lin = _linear(8, 6)
    for r in range(W):
        layer = dnn.RowParallelLinear(lin, World(W, r, torch.device("cpu")))
        k = 8 // W
        assert layer.weight.shape == (6, k) and layer.local_in_features == k
        assert torch.equal(layer.weight, lin.weight[:, r * k:(r + 1) * k])
        assert torch.equal(layer.bias, lin.bias), "the whole bias, added once after the sum"
        assert layer.weight.t().is_contiguous()


def test_state_dict_keeps_nn_linear_names_and_layout():
    lin = _linear(8, 12)
    layer = dnn.ColumnParallelLinear(lin, World(2, 1, torch.device("cpu")))
    sd = layer.state_dict()
    assert set(sd) == {"weight", "bias"} and sd["weight"].shape == (6, 8)
    assert torch.equal(sd["weight"], lin.weight[6:])


def test_moving_a_layer_keeps_the_transposed_storage():
    import copy
    layer = dnn.RowParallelLinear(_linear(8, 6), World(2, 0, torch.device("cpu")))
    for moved in (layer.to(torch.float32), copy.deepcopy(layer)):
        assert moved.weight.shape == (6, 4) and moved.weight.t().is_contiguous()
    fresh = dnn.RowParallelLinear(_linear(8, 6, seed=9, dtype=torch.float32), World(2, 0, torch.device("cpu")))
    fresh.load_state_dict(layer.state_dict())
    assert torch.equal(fresh.weight, layer.weight) and fresh.weight.t().is_contiguous()


def test_no_bias():
    lin = _linear(8, 12, bias=False)
    assert dnn.ColumnParallelLinear(lin, World(2, 0, torch.device("cpu"))).bias is None
    assert dnn.RowParallelLinear(lin, World(2, 0, torch.device("cpu"))).bias is None


# ------------------------------------------------------------------------------------------ numerics

@pytest.mark.parametrize("W", [1, 2, 4])
@pytest.mark.parametrize("bias", [True, False])
def test_megatron_mlp_replicated_in_replicated_out(tw, W, bias):
    """colwise (local GEMM) then rowwise (gemm_ar): the unsharded MLP's result on every rank."""
    up, down = _linear(16, 32, bias, seed=1), _linear(32, 16, bias, seed=2)
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    want = down(torch.relu(up(x)))
    world = tw(W)

    def rank(r, w):
        col, row = dnn.ColumnParallelLinear(up, w), dnn.RowParallelLinear(down, w)
        return row(torch.relu(col(x)))
    for got in world.run(rank):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert {c[1] for c in world.calls} == {"gemm_ar"}, "the column layer on a replicated input communicates nothing"
    assert all(c[2] == (15, 32 // W) and c[3] == (32 // W, 16) for c in world.calls)


@pytest.mark.parametrize("W", [2, 4])
def test_sequence_parallel_ag_gemm_then_gemm_rs(tw, W):
    """colwise on this rank's rows (ag_gemm gathers them) then rowwise to this rank's rows (gemm_rs)."""
    up, down = _linear(16, 32, seed=3), _linear(32, 16, seed=4)
    x = torch.randn(4 * W, 2, 16, dtype=torch.float64)
    want = down(torch.relu(up(x)))
    world = tw(W)

    def rank(r, w):
        col = dnn.ColumnParallelLinear(up, w, input="sequence")
        row = dnn.RowParallelLinear(down, w, output="sequence")
        mine = x[r * 4:(r + 1) * 4]
        h = col(mine)
        assert h.shape == (4 * W, 2, 32 // W)
        return row(torch.relu(h))
    for r, got in enumerate(world.run(rank)):
        torch.testing.assert_close(got, want[r * 4:(r + 1) * 4], rtol=1e-12, atol=1e-12)
    assert sorted({c[1] for c in world.calls}) == ["ag_gemm", "gemm_rs"]


def test_the_ops_get_the_stored_weight_without_a_copy(tw):
    world = tw(2)
    lin = _linear(8, 6)

    def rank(r, w):
        layer = dnn.RowParallelLinear(lin, w, algorithm="one_shot")
        layer(torch.randn(2, 4, dtype=torch.float64))
        layer(torch.randn(2, 4, dtype=torch.float64))
        return layer.weight.data_ptr()
    ptrs = world.run(rank)
    for rank_, _, _, _, b_ptr, params in world.calls:
        assert b_ptr == ptrs[rank_] and params == {"algorithm": "one_shot"}


def test_layers_call_the_torch_operators_without_a_graph_break():
    """torch.compile(fullgraph=True) of a column + row parallel pair traces torch.ops.ditron.gemm_ar (its fake
    implementation gives the shapes); running the graph on CPU tensors reaches the operator, which refuses them."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    world = World(2, 0, torch.device("cpu"))
    dt = torch.bfloat16  # the GEMM ops take bf16 / f16 (an f32 one is refused at its signature)
    col = dnn.ColumnParallelLinear(_linear(8, 12, dtype=dt), world)
    row = dnn.RowParallelLinear(_linear(12, 8, dtype=dt), world)
    torch._dynamo.reset()
    step = torch.compile(lambda x: row(col(x)), fullgraph=True, backend=backend)
    with pytest.raises(ops.OpError, match="ditron's ops run on CUDA tensors"), torch.no_grad():
        step(torch.randn(3, 8, dtype=dt))
    (gm,) = graphs
    called = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.ops.ditron.gemm_ar.default in called or torch.ops.ditron.gemm_ar in called
    assert row.handle == col.handle == torch_ops.register_world(world), "one handle per world and library"


def test_the_layer_registers_its_library():
    lib = ops.Library("/nonexistent-ditron-ops", target="cuda:90", compile=False)
    layer = dnn.RowParallelLinear(_linear(8, 8), World(2, 1, torch.device("cpu")), library=lib)
    assert torch_ops._entry(layer.handle)[1] is lib
    with pytest.raises(dnn.ParallelError, match="library= takes a ditron.ops.Library, got str"):
        dnn.RowParallelLinear(_linear(8, 8), World(2, 1, torch.device("cpu")), library="/tmp")


# ------------------------------------------------------------------------------------------- errors

def test_out_features_not_divisible_is_an_error_that_says_nothing_is_padded():
    with pytest.raises(dnn.ParallelError, match=r"out_features 10 does not split over 4 ranks .*pads nothing"):
        dnn.ColumnParallelLinear(_linear(8, 10), World(4, 0, torch.device("cpu")))
    with pytest.raises(dnn.ParallelError, match=r"in_features 6 does not split over 4 ranks"):
        dnn.RowParallelLinear(_linear(6, 8), World(4, 0, torch.device("cpu")))


def test_heads_are_never_split():
    with pytest.raises(dnn.ParallelError, match=r"2 heads of 4\) do not divide into whole heads over 4 ranks"):
        dnn.ColumnParallelLinear(_linear(8, 8), World(4, 0, torch.device("cpu")), head_dim=4, name="q")


def test_unsupported_module_and_wrong_world():
    cpu = torch.device("cpu")
    with pytest.raises(dnn.ParallelError, match="built from a torch.nn.Linear, got Conv1d"):
        dnn.ColumnParallelLinear(torch.nn.Conv1d(2, 2, 1), World(2, 0, cpu))
    with pytest.raises(dnn.ParallelError, match="virtual world of 2 ranks"):
        dnn.RowParallelLinear(_linear(8, 8), World.virtual(2, "cpu"))
    with pytest.raises(dnn.ParallelError, match="world must be a ditron.World"):
        dnn.RowParallelLinear(_linear(8, 8), 2)
    with pytest.raises(dnn.ParallelError, match="input must be one of replicated, sequence"):
        dnn.ColumnParallelLinear(_linear(8, 8), World(2, 0, cpu), input="rows")
    with pytest.raises(dnn.ParallelError, match="algorithm must be one of"):
        dnn.RowParallelLinear(_linear(8, 8), World(2, 0, cpu), algorithm="fast")
    with pytest.raises(dnn.ParallelError, match="output='sequence'"):
        dnn.RowParallelLinear(_linear(8, 8), World(2, 0, cpu), output="sequence", algorithm="one_shot")


def test_wrong_input_shapes(tw):
    world = tw(2)
    lin = _linear(8, 8)
    with pytest.raises(dnn.ParallelError, match=r"has 8 features, the layer takes 4"):
        dnn.RowParallelLinear(lin, world.worlds[0])(torch.randn(2, 8, dtype=torch.float64))
    with pytest.raises(dnn.ParallelError, match=r"dim 0 of the input \(3, 4\) does not split over 2 ranks"):
        dnn.RowParallelLinear(lin, world.worlds[0], output="sequence")(torch.randn(3, 4, dtype=torch.float64))


# --------------------------------------------------------------------------------------- parallelize

class Attention(torch.nn.Module):
    def __init__(self, hidden=16, heads=4, head_dim=4, num_heads_attr=False):
        super().__init__()
        self.head_dim = head_dim
        if num_heads_attr:
            self.num_heads = heads
        self.q_proj = torch.nn.Linear(hidden, heads * head_dim, dtype=torch.float64)
        self.o_proj = torch.nn.Linear(heads * head_dim, hidden, dtype=torch.float64)

    def forward(self, x):
        return self.o_proj(self.q_proj(x))


class Block(torch.nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.attn = Attention(**kw)
        self.norm = torch.nn.LayerNorm(16, dtype=torch.float64)

    def forward(self, x):
        return x + self.attn(self.norm(x))


class Net(torch.nn.Module):
    def __init__(self, n=2, **kw):
        super().__init__()
        torch.manual_seed(5)
        self.layers = torch.nn.ModuleList(Block(**kw) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


PLAN = {"layers.*.attn.q_proj": "colwise", "layers.*.attn.o_proj": dnn.Rowwise(algorithm="one_shot")}


def test_resolve_plan_expands_wildcards():
    plan = dnn.resolve_plan(Net(3), PLAN)
    assert sorted(plan) == sorted(f"layers.{i}.attn.{p}" for i in range(3) for p in ("q_proj", "o_proj"))
    assert plan["layers.2.attn.q_proj"] == dnn.Colwise() and plan["layers.0.attn.o_proj"].algorithm == "one_shot"


def test_parallelize_numerics_and_heads(tw):
    x = torch.randn(2, 3, 16, dtype=torch.float64)
    want = Net(num_heads_attr=True)(x)
    world = tw(2)
    nets = [Net(num_heads_attr=True) for _ in range(2)]  # here: the ranks' threads share torch's generator

    def rank(r, w):
        net = dnn.parallelize(nets[r], w, PLAN)
        attn = net.layers[1].attn
        assert isinstance(attn.q_proj, dnn.ColumnParallelLinear) and isinstance(attn.o_proj, dnn.RowParallelLinear)
        assert attn.num_heads == 2, "an attention module's num_heads becomes this rank's"
        assert isinstance(net.layers[0].norm, torch.nn.LayerNorm)
        return net(x)
    for got in world.run(rank):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_plan_errors():
    w = World(2, 0, torch.device("cpu"))
    with pytest.raises(dnn.ParallelError, match="'layers.*.attn.k_proj' matches no module of Net"):
        dnn.parallelize(Net(), w, {"layers.*.attn.k_proj": "colwise"})
    with pytest.raises(dnn.ParallelError, match="module 'layers.0.norm' is a LayerNorm; ditron.nn makes nn.Linear"):
        dnn.parallelize(Net(), w, {"layers.*.norm": "colwise"})
    with pytest.raises(dnn.ParallelError, match="style 'gather' is not one ditron.nn applies"):
        dnn.parallelize(Net(), w, {"layers.*.attn.q_proj": "gather"})
    with pytest.raises(dnn.ParallelError, match="matches two plan entries"):
        dnn.parallelize(Net(), w, {"layers.*.attn.q_proj": "colwise", "layers.0.attn.q_proj": "colwise"})
    with pytest.raises(dnn.ParallelError, match="not a dotted module name"):
        dnn.parallelize(Net(), w, {"layers..q_proj": "colwise"})
    with pytest.raises(dnn.ParallelError, match="has no tensor-parallel plan of its own"):
        dnn.parallelize(Net(), w)
    with pytest.raises(dnn.ParallelError, match="Colwise: input must be one of"):
        dnn.Colwise(input="columns")


def test_parallelize_leaves_the_model_alone_on_error():
    net = Net(heads=3, head_dim=4)  # 3 heads do not split over 2 ranks (12 features would)
    with pytest.raises(dnn.ParallelError, match=r"3 heads of 4\) do not divide into whole heads over 2 ranks"):
        dnn.parallelize(net, World(2, 0, torch.device("cpu")), PLAN)
    assert all(type(b.attn.q_proj) is torch.nn.Linear and type(b.attn.o_proj) is torch.nn.Linear for b in net.layers)


def test_signatures_list_the_ops_a_plan_calls():
    net = Net().to(torch.bfloat16)
    plan = {"layers.*.attn.q_proj": dnn.Colwise(input="sequence"), "layers.*.attn.o_proj": dnn.Rowwise(output="sequence")}
    sigs = dnn.signatures(net, 2, [8, 4], plan)
    assert [(s.op, s.shapes) for s in sigs] == [("ag_gemm", ((4, 16), (16, 8))), ("gemm_rs", ((8, 8), (8, 16))),
                                                ("ag_gemm", ((2, 16), (16, 8))), ("gemm_rs", ((4, 8), (8, 16)))]
    assert all(s.dtype == "bf16" and s.world_size == 2 and not s.virtual for s in sigs)
    (ar,) = dnn.signatures(net, 2, [3], {"layers.0.attn.o_proj": dnn.Rowwise(algorithm="one_shot")})
    assert ar.op == "gemm_ar" and ar.param["algorithm"] == "one_shot" and ar.shapes == ((3, 8), (8, 16))
    assert dnn.signatures(net, 2, [3], {"layers.*.attn.q_proj": "colwise"}) == [], "a local GEMM needs no artifact"
    with pytest.raises(dnn.ParallelError, match="5 rows do not split over 2 ranks"):
        dnn.signatures(net, 2, [5], plan)
    with pytest.raises(dnn.ParallelError, match="holds torch.float64 weights"):
        dnn.signatures(Net(), 2, [4], plan)


def test_call_op_passes_the_parameters_positionally_in_the_schemas_order(monkeypatch):
    """ditron.nn's call_op: the operator's parameters after the handle, in its schema's order with the defaults
    between (the form an eager call's C call matches, fastcall.op_front), none where none are given."""
    from ditron import torch_ops
    from ditron.nn import linear
    seen = []
    monkeypatch.setattr(torch_ops, "call", lambda op, *args: seen.append((op, args[2:])))
    linear.call_op("ag_gemm", "a", "b", "h", {})
    linear.call_op("gemm_ar", "a", "b", "h", {"algorithm": "one_shot"})
    linear.call_op("gemm_ar", "a", "b", "h", {"max_rows": 64})
    linear.call_op("gemm_rs", "a", "b", "h", {"max_rows": 8})
    assert seen == [("ag_gemm", ("h",)), ("gemm_ar", ("h", "one_shot")), ("gemm_ar", ("h", "auto", 64)),
                    ("gemm_rs", ("h", 8))]
