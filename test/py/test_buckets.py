"""ditron.buckets on the CPU: the buckets and layouts of every op, the compile count of a process meeting 50 batch
sizes, the padding and slicing of every op against its reference (stale rows in the staging tensors included),
the bucket programs simulated at W = 1, 2, 3, 4, 8 with row counts that fill no bucket, the torch operators'
max_rows and ditron.nn's. The GPU run is test_buckets_gpu.py."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ditron import buckets, ops, torch_ops
from ditron.runtime.world import World
from ditron.sim import simulate

BF16 = torch.bfloat16


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DITRON_OPS_DIR", raising=False)


def sig(op, shapes, W, virtual=True, **params) -> ops.Signature:
    return ops.signature_for(op, shapes, "bf16", W, virtual, "cuda:90", **params)


# ------------------------------------------------------------------------------------------ buckets

def test_buckets_are_powers_of_two_then_the_maximum():
    assert buckets.bucket_sizes(1) == (1,)
    assert buckets.bucket_sizes(8) == (1, 2, 4, 8)
    assert buckets.bucket_sizes(100) == (1, 2, 4, 8, 16, 32, 64, 100)
    assert [buckets.bucket_for(u, 100) for u in (1, 2, 3, 4, 5, 33, 64, 65, 100)] == [1, 2, 4, 4, 8, 64, 64, 100, 100]
    with pytest.raises(ops.OpError, match="outside the 1..100"):
        buckets.bucket_for(101, 100)
    with pytest.raises(ops.OpError, match="at least one row"):
        buckets.bucket_sizes(0)


def test_layouts_follow_where_each_op_keeps_its_rows():
    L = buckets.layout
    assert L("ag_gemm", 3) == buckets.Layout(1, False, True, 3)            # rows gathered: W blocks out
    assert L("gemm_rs", 3) == buckets.Layout(3, True, False, 3)            # rows split over the ranks
    assert L("gemm_ar", 3) == buckets.Layout(1, False, False, 3)
    assert L("all_gather", 3, {"dim": 0}).cat_out and not L("all_gather", 3, {"dim": 1}).cat_out
    assert L("reduce_scatter", 3, {"dim": 0}).unit == 3 and L("reduce_scatter", 3, {"dim": 1}).unit == 1
    assert L("all_reduce", 3) == buckets.Layout(1, False, False, 3)
    # two_shot reduce-scatters the rows: whole units of W, padded at the end
    assert L("all_reduce", 3, {"algorithm": "two_shot"}) == buckets.Layout(3, False, False, 3)
    assert L("gemm_ar", 3, {"algorithm": "two_shot"}).unit == 3
    a2a = L("all_to_all", 3, {"split_dim": 0, "concat_dim": 0})
    assert a2a.split_in and a2a.cat_out and a2a.unit == 3
    reshard = L("all_to_all", 3, {"split_dim": 1, "concat_dim": 0})
    assert not reshard.split_in and reshard.cat_out and reshard.unit == 1


def test_bucket_rows_keep_the_ops_own_errors():
    assert buckets.bucket_rows("gemm_rs", 9, 3, 96) == 12          # 3 units of 3 rows -> 4 units
    assert buckets.bucket_rows("ag_gemm", 5, 3, 96) == 8
    assert buckets.bucket_rows("ag_gemm", 96, 3, 96) == 96
    with pytest.raises(ops.OpError, match="do not split over 3 ranks"):
        buckets.bucket_rows("gemm_rs", 10, 3, 96)
    with pytest.raises(ops.OpError, match="97 rows exceed max_rows=96"):
        buckets.bucket_rows("ag_gemm", 97, 3, 96)
    with pytest.raises(ops.OpError, match="under the 4 rows of one call"):
        buckets.bucket_rows("reduce_scatter", 4, 4, 3)


def test_signatures_list_every_bucket_and_the_plans_are_ditron_tiles_per_bucket():
    sigs = buckets.signatures("ag_gemm", [(0, 4096), (4096, 1792)], "bf16", 2, False, max_rows=4096)
    assert [s.shapes[0][0] for s in sigs] == [2 ** i for i in range(13)]
    assert all(s.shapes[0][1:] == (4096,) and s.shapes[1] == (4096, 1792) for s in sigs)
    rs = buckets.signatures("gemm_rs", [(0, 512), (512, 4096)], "bf16", 3, True, max_rows=100)
    assert [s.shapes[0][0] for s in rs] == [3, 6, 12, 24, 48, 96, 99]
    # the tile plan is what ditron-tile (the cost model) picks at each bucket's rows: a decode bucket and a prefill
    # bucket get other GEMM tiles
    small, large = (ops.lower(s)[1] for s in (sigs[0], sigs[-1]))
    gemm = lambda choices: next(c for c in choices if "block_m" in c)  # noqa: E731
    assert (gemm(small)["block_m"], gemm(small).get("block_n")) != (gemm(large)["block_m"], gemm(large).get("block_n"))


# ------------------------------------------------------------------------------------- calls (CPU fake)

class FakeExecutable:
    """Stands in for a loaded op program on this CPU box: runs the op's reference at the program's own shapes,
    checking that every rank's tensors have them."""

    def __init__(self, sig):
        self.sig = sig
        self._executors = []
        self.runs = []

    def run(self, world, inputs, outputs=None, sync=True, **_):
        for row in inputs:
            assert [tuple(t.shape) for t in row] == [tuple(s) for s in self.sig.shapes]
        self.runs.append(inputs)
        ys = [y.to(inputs[0][0].dtype) for y in ops.reference(self.sig, inputs)]
        if outputs is not None:
            for o, y in zip(outputs, ys):
                o[0].copy_(y)
            return outputs
        return [[y] for y in ys]

    def close(self):
        pass


@pytest.fixture
def fake_library(tmp_path, monkeypatch):
    lib = ops.Library(tmp_path / "ops", target="cuda:90")
    loads = []

    def load(s):
        loads.append(s)
        return FakeExecutable(s)
    monkeypatch.setattr(lib, "_load", load)
    lib.loads = loads
    return lib


def _data(shape, gen):
    return torch.randn(shape, generator=gen).to(BF16)


def _check_call(op, W, shapes, lib, params, max_rows, gen, out=False):
    world = World(W, None, torch.device("cpu"))
    per = [[_data(s, gen) for s in shapes] for _ in range(W)]
    args = [[row[i] for row in per] for i in range(len(shapes))]
    s = sig(op, shapes, W, **params)
    want = ops.reference(s, per)
    outs = [torch.empty(s.output_shape(), dtype=BF16) for _ in range(W)] if out else None
    got = buckets.padded_call(op, args, world, params, max_rows=max_rows, library=lib, out=outs)
    assert len(got) == W
    for g, w in zip(got, want):
        assert tuple(g.shape) == s.output_shape()
        torch.testing.assert_close(g.float(), w.to(BF16).float(), rtol=0, atol=0)
    if out:
        assert all(g is o for g, o in zip(got, outs))
    return world


def test_fifty_batch_sizes_compile_a_handful_of_programs(fake_library):
    """A serving process meeting 50 batch sizes in 1..1000: each op compiles at most log2(1000) + 1 programs, and
    every call's rows equal the op's reference at its own rows."""
    gen = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    sizes = sorted(set(int(m) for m in rng.choice(np.arange(1, 1001), 50, replace=False)))
    assert len(sizes) == 50
    max_rows = 1000
    for op, shape_of in (("ag_gemm", lambda m: [(m, 16), (16, 8)]), ("gemm_ar", lambda m: [(m, 16), (16, 8)]),
                         ("all_reduce", lambda m: [(m, 8)])):
        before = len(fake_library.loads)
        world = World(2, None, torch.device("cpu"))
        for m in sizes:
            per = [[_data(s, gen) for s in shape_of(m)] for _ in range(2)]
            args = [[row[i] for row in per] for i in range(len(per[0]))]
            got = getattr(buckets, op)(*args, world, max_rows=max_rows, library=fake_library)
            want = ops.reference(sig(op, shape_of(m), 2), per)
            for g, w in zip(got, want):
                torch.testing.assert_close(g.float(), w.to(BF16).float(), rtol=0, atol=0)
        compiled = fake_library.loads[before:]
        assert len(compiled) == len(set(compiled)) <= math.floor(math.log2(max_rows)) + 2
        assert {s.shapes[0][0] for s in compiled} <= set(buckets.bucket_sizes(max_rows))


# (op, per-rank shapes at M rows, params): M = 7 (or 7 units) fills no bucket
CASES = [
    ("ag_gemm", lambda W: [(7, 16), (16, 8)], {}),
    ("gemm_rs", lambda W: [(7 * W, 16), (16, 8)], {}),
    ("gemm_ar", lambda W: [(7, 16), (16, 8)], {"algorithm": "one_shot"}),
    ("all_gather", lambda W: [(7, 8)], {"dim": 0}),
    ("all_gather", lambda W: [(7, 8)], {"dim": 1}),
    ("reduce_scatter", lambda W: [(7 * W, 8)], {"dim": 0}),
    ("reduce_scatter", lambda W: [(7, 4 * W)], {"dim": 1}),
    ("all_reduce", lambda W: [(7, 8)], {}),
    ("all_reduce", lambda W: [(7 * W, 8)], {"algorithm": "two_shot"}),
    ("gemm_ar", lambda W: [(7 * W, 16), (16, 8)], {"algorithm": "two_shot"}),
    ("all_to_all", lambda W: [(7 * W, 8)], {"split_dim": 0, "concat_dim": 0}),
    ("all_to_all", lambda W: [(7, 4 * W)], {"split_dim": 1, "concat_dim": 0}),
    ("all_to_all", lambda W: [(7 * W, 8)], {"split_dim": 0, "concat_dim": 1}),
]


@pytest.mark.parametrize("W", [1, 3, 4])
@pytest.mark.parametrize("op,shapes,params", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_every_op_returns_its_real_rows_past_stale_staging(op, shapes, params, W, fake_library):
    """A call of 8 units fills the bucket's staging tensor; the next, of 7 units, leaves a stale row in it, which
    reaches no real row; out= gets the real rows; a call of a bucket's own rows passes its tensors through."""
    gen = torch.Generator().manual_seed(W)
    unit = buckets.layout(op, W, params).unit
    big = [(s[0] * 8 // 7, *s[1:]) if i == 0 else s for i, s in enumerate(shapes(W))]
    world = _check_call(op, W, big, fake_library, params, 16 * unit, gen)
    exe = fake_library._executables[fake_library.loads[-1]]
    assert exe.runs[-1][0][0].shape[0] == 8 * unit
    _check_call(op, W, shapes(W), fake_library, params, 16 * unit, gen)
    _check_call(op, W, shapes(W), fake_library, params, 16 * unit, gen, out=True)
    assert len(fake_library.loads) == 1, "8 and 7 units share one bucket program"
    # rows of a bucket's size: the caller's tensors go to the program as they are (no staging, no copy)
    per = [[_data(s, gen) for s in big] for _ in range(W)]
    args = [[row[i] for row in per] for i in range(len(big))]
    buckets.padded_call(op, args, world, params, max_rows=16 * unit, library=fake_library)
    assert exe.runs[-1][0][0] is per[0][0]


def test_prebuild_loads_every_bucket_with_a_progress_line(fake_library, capsys, monkeypatch):
    monkeypatch.setattr(buckets, "_progress", lambda total: buckets._Lines(total))  # tqdm's bar is not captured
    sigs = buckets.signatures("gemm_ar", [(0, 16), (16, 8)], "bf16", 2, True, max_rows=50)
    exes = buckets.prebuild(sigs, library=fake_library)
    assert [e.sig for e in exes] == sigs == fake_library.loads and len(sigs) == 7
    err = capsys.readouterr().err
    assert "ditron prebuild [7/7] gemm_ar 50x16" in err and err.count("ditron prebuild [") == 7
    built = []
    monkeypatch.setattr(ops, "build_one", lambda s, d: built.append((s, d)) or d)
    buckets.prebuild(sigs, "DIR", progress=False)
    assert built == [(s, "DIR") for s in sigs] and not capsys.readouterr().err


def test_padding_overhead_is_the_cost_models():
    decode = sig("gemm_ar", [(33, 8192), (8192, 8192)], 2)
    prefill = sig("gemm_ar", [(4097, 8192), (8192, 8192)], 2)
    assert buckets.padding_overhead(sig("gemm_ar", [(64, 8192), (8192, 8192)], 2), 8192) == 0.0
    assert buckets.padding_overhead(decode, 8192) < 0.1          # 33 -> 64 rows: one row block of tiles either way
    assert 0.5 < buckets.padding_overhead(prefill, 8192) < 1.1   # 4097 -> 8192 rows: about twice the tiles
    with pytest.raises(ops.OpError, match="GEMM ops"):
        buckets.padding_overhead(sig("all_reduce", [(8, 8)], 2), 64)


# -------------------------------------------------------------------------------------------- simulator

def _simulate_bucket(op, shapes, W, max_rows, params, seed=0):
    """The bucket program of a call of ``shapes`` rows, simulated for W ranks over two calls whose padding rows
    hold large garbage; the real rows of its outputs against the op's reference at the call's own rows."""
    s = sig(op, shapes, W, **params)
    p = buckets.bucket_signature(s, max_rows)
    lay = buckets.layout(op, W, s.param)
    text, _ = ops.lower(p)
    rng = np.random.default_rng(seed)

    def inputs(call):
        return [[buckets.pad(rng.standard_normal(s.shapes[0]).astype(np.float32), p.shapes[0][0], lay,
                             fill=1e3 * rng.standard_normal(p.shapes[0]).astype(np.float32)),
                 *[rng.standard_normal(x).astype(np.float32) for x in s.shapes[1:]]] for _ in range(W)]
    result = simulate(text, world_size=W, inputs=inputs, seed=seed, calls=2, num_sms=p.cta_budget())
    assert result.ok, result.summary()
    # the real input rows (as the program read them, rounded) and the real output rows
    in_rows = buckets.Layout(lay.unit, lay.split_in, lay.split_in, W)
    for xs, ys in zip(result.inputs_per_call, result.outputs_per_call):
        real = [[buckets.real_rows(row[0], s.shapes[0][0], in_rows), *row[1:]] for row in xs]
        for want, got in zip(ops.reference(s, real), ys):
            got = buckets.real_rows(got[0], s.output_shape()[0], lay)
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=2 ** -6, atol=2 ** -6 * np.abs(want).max())


SIM_CASES = [
    ("ag_gemm", lambda W: [(5, 32), (32, 16)], {}),
    ("gemm_rs", lambda W: [(5 * W, 32), (32, 16)], {}),
    ("gemm_ar", lambda W: [(5, 32), (32, 16)], {}),
    ("all_gather", lambda W: [(5, 16)], {}),
    ("reduce_scatter", lambda W: [(5 * W, 16)], {}),
    ("all_reduce", lambda W: [(5, 16)], {}),
    ("all_reduce", lambda W: [(5 * W, 16)], {"algorithm": "two_shot"}),
    ("all_to_all", lambda W: [(5 * W, 16)], {}),
]


@pytest.mark.parametrize("W", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("op,shapes,params", SIM_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(SIM_CASES)])
def test_bucket_programs_simulate_to_the_real_rows(op, shapes, params, W):
    """5 rows (or units) per call run the 8-row bucket program: M = 5 W divides into no power of two, and W = 3
    divides no bucket of rows."""
    unit = buckets.layout(op, W, params).unit
    _simulate_bucket(op, shapes(W), W, 64 * unit, params)


@pytest.mark.parametrize("op,W", [("ag_gemm", 3), ("gemm_rs", 3), ("all_reduce", 2)])
def test_every_bucket_of_a_range_simulates(op, W):
    """Every bucket serving 1..20 rows (units), each at the fewest rows it serves (one more than the bucket below)."""
    unit = buckets.layout(op, W).unit
    sizes = buckets.bucket_sizes(20)
    for lower, size in zip((0, *sizes), sizes):
        m = unit * (lower + 1)
        shapes = [(m, 32), (32, 16)] if op != "all_reduce" else [(m, 16)]
        assert buckets.bucket_rows(op, m, W, 20 * unit) == unit * size
        _simulate_bucket(op, shapes, W, 20 * unit, {})


def test_a_large_odd_call_simulates_in_its_bucket():
    """4091 rows per rank (AG+GEMM at W = 3) in the 4096 bucket; the RS of 3 x 1365 rows in 3 x 2048."""
    _simulate_bucket("ag_gemm", [(4091, 32), (32, 16)], 3, 8192, {})
    _simulate_bucket("gemm_rs", [(3 * 1365, 32), (32, 16)], 3, 3 * 4096, {})


# ------------------------------------------------------------------------------------ torch operators

def _meta(*shape):
    return torch.empty(shape, device="meta", dtype=BF16)


def test_operators_take_max_rows():
    h = torch_ops.register_world(World(4, 0, torch.device("cpu")))
    assert torch.ops.ditron.ag_gemm(_meta(5, 16), _meta(16, 32), h, max_rows=64).shape == (20, 32)
    assert torch_ops.gemm_rs(_meta(8, 16), _meta(16, 32), h, max_rows=64).shape == (2, 32)
    assert torch_ops.all_to_all(_meta(8, 16), h, 1, 0, max_rows=64).shape == (32, 4)
    with pytest.raises(ops.OpError, match="8 rows exceed max_rows=4"):
        torch.ops.ditron.gemm_rs(_meta(8, 16), _meta(16, 32), h, max_rows=4)
    with pytest.raises(ops.OpError, match="the 6 rows of a @ b do not split over 4 ranks"):
        torch.ops.ditron.gemm_rs(_meta(6, 16), _meta(16, 32), h, max_rows=40)
    with pytest.raises(ops.OpError, match="max_rows is a row count"):
        torch.ops.ditron.gemm_ar(_meta(6, 16), _meta(16, 32), h, "one_shot", -1)


def test_operators_trace_with_symbolic_rows_under_max_rows():
    h = torch_ops.register_world(World(2, 0, torch.device("cpu")))

    def f(a, b):
        return torch.ops.ditron.gemm_ar(a, b, h, max_rows=256) * 2

    gm = torch.compile(f, fullgraph=True, dynamic=True, backend="eager")
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        for m in (3, 17):
            assert gm(torch.empty(m, 16, dtype=BF16), torch.empty(16, 8, dtype=BF16)).shape == (m, 8)


def test_operator_staging_pads_once_per_bucket_and_capture_needs_it():
    world = World(2, 1, torch.device("cpu"))
    lib = ops.Library(None, target="cuda:90")
    gen = torch.Generator().manual_seed(3)
    x8 = _data((8, 4), gen)
    args, finish = buckets.operator_staging("gemm_rs", (x8, x8), world, lib, {}, 64)
    assert finish is None and args[0] is x8, "8 rows: a bucket's own, nothing staged"
    x6 = _data((6, 4), gen)
    args, finish = buckets.operator_staging("gemm_rs", (x6, x8), world, lib, {}, 64)
    staged = args[0]
    assert staged.shape == (8, 4) and args[1] is x8
    assert torch.equal(staged[:3], x6[:3]) and torch.equal(staged[4:7], x6[3:])   # each rank's part padded
    again, _ = buckets.operator_staging("gemm_rs", (x6, x8), world, lib, {}, 64)
    assert again[0] is staged, "one staging tensor per bucket shape"
    assert finish(torch.arange(4.0)[:, None]).flatten().tolist() == [0.0, 1.0, 2.0]  # the 3 real rows of 4
    shared, _ = buckets.operator_staging("gemm_ar", (_data((5, 4), gen), x8), world, lib, {}, 64, make=False)
    assert shared[0] is staged, "ops whose bucket programs take the same first argument share its staging"
    buckets.release_staging(lib)
    fresh, _ = buckets.operator_staging("gemm_rs", (x6, x8), world, lib, {}, 64)
    assert fresh[0] is not staged and torch.equal(fresh[0][3], torch.zeros(4, dtype=BF16)), "made again, zeros"
    with pytest.raises(buckets.StagingMissingError, match="run the step once eagerly"):
        buckets.operator_staging("gemm_ar", (_data((5, 6), gen), _data((6, 4), gen)), world, lib, {}, 64,
                                 make=False)


# ------------------------------------------------------------------------------------------------ ditron.nn

class BucketThreadWorld:
    """test_nn's world of threads, its calls going through the torch operators' bucketing (ditron.buckets'
    operator_staging and the real rows of the bucket program's output) when a layer passes max_rows."""

    def __init__(self, world_size):
        from test_nn import ThreadWorld
        self.inner = ThreadWorld(world_size)
        self.library = ops.Library(None, target="cuda:90")

    def call_op(self, op, a, b, handle, params):
        params = dict(params)
        max_rows = params.pop("max_rows", 0)
        if not max_rows:
            return self.inner.call_op(op, a, b, handle, params)
        world = torch_ops.world_of(handle)
        (pa, pb), finish = buckets.operator_staging(op, (a, b), world, self.library, params, max_rows)
        y = self.inner.call_op(op, pa, pb, handle, params)
        return y if finish is None else finish(y)


@pytest.mark.parametrize("W", [2, 3])
def test_layers_serve_any_rows_from_their_buckets(monkeypatch, W):
    """A sequence-parallel MLP (ag_gemm then gemm_rs) and a replicated one (gemm_ar) at many token counts: every
    result is the unsharded MLP's, and the ops only ever see a bucket's rows."""
    from test_nn import _linear

    from ditron import nn as dnn
    from ditron.nn import linear as nn_linear
    tw = BucketThreadWorld(W)
    monkeypatch.setattr(nn_linear, "call_op", tw.call_op)
    up, down = _linear(16, 24 * W // 2, seed=5), _linear(24 * W // 2, 16, seed=6)
    tokens = [W * t for t in (1, 3, 5, 6, 11, 16, 2, 7)]

    def rank(r, w):
        col = dnn.ColumnParallelLinear(up, w, input="sequence", max_rows=16)
        row = dnn.RowParallelLinear(down, w, output="sequence", max_rows=16 * W)
        col_r, row_r = dnn.ColumnParallelLinear(up, w, max_rows=16 * W), dnn.RowParallelLinear(down, w, max_rows=16 * W)
        outs = []
        for t in tokens:
            x = torch.randn(t, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(t))
            want = down(torch.relu(up(x)))
            per = t // W
            got = row(torch.relu(col(x[r * per:(r + 1) * per])))
            outs.append((got, want[r * per:(r + 1) * per]))
            outs.append((row_r(torch.relu(col_r(x))), want))
        return outs
    for outs in tw.inner.run(rank):
        for got, want in outs:
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    seen = {(c[1], c[2][0]) for c in tw.inner.calls}
    assert {m for op, m in seen if op == "ag_gemm"} == {1, 2, 4, 8, 16}
    assert {m for op, m in seen if op == "gemm_rs"} == {W * b for b in (1, 2, 4, 8, 16)}
    assert {m for op, m in seen if op == "gemm_ar"} <= set(buckets.bucket_sizes(16 * W))


def test_parallelize_and_signatures_take_max_rows():
    from test_nn import Net

    from ditron import nn as dnn
    plan = {"layers.*.attn.q_proj": dnn.Colwise(input="sequence"), "layers.*.attn.o_proj": dnn.Rowwise(output="sequence")}
    net = dnn.parallelize(Net(), World(2, 0, torch.device("cpu")), plan, max_rows=512)
    assert net.layers[0].attn.q_proj.max_rows == 256, "a sequence-parallel input holds 1/W of the tokens"
    assert net.layers[0].attn.o_proj.max_rows == 512
    assert "max_rows=256" in repr(net.layers[0].attn.q_proj)
    net = Net().to(torch.bfloat16)
    sigs = dnn.signatures(net, 2, range(2, 513, 2), plan, max_rows=512)
    ag = sorted(s.shapes[0][0] for s in sigs if s.op == "ag_gemm")
    rs = sorted(s.shapes[0][0] for s in sigs if s.op == "gemm_rs")
    assert ag == [1, 2, 4, 8, 16, 32, 64, 128, 256] and rs == [2 * b for b in ag]
    with pytest.raises(dnn.ParallelError, match="600 rows exceed max_rows=512"):
        dnn.signatures(net, 2, [600], plan, max_rows=512)
    with pytest.raises(dnn.ParallelError, match="max_rows is the most tokens"):
        dnn.parallelize(Net(), World(2, 0, torch.device("cpu")), plan, max_rows=-3)
    local = dnn.ColumnParallelLinear(torch.nn.Linear(4, 4), World(2, 0, torch.device("cpu")), max_rows=8)
    assert local(torch.zeros(2, 4, 4)).shape == (2, 4, 2)
    with pytest.raises(dnn.ParallelError, match="12 rows exceed max_rows=8"):
        local(torch.zeros(3, 4, 4))
    with pytest.raises(dnn.ParallelError, match="ColumnParallelLinear: max_rows is the most rows"):
        dnn.ColumnParallelLinear(torch.nn.Linear(4, 4), World(2, 0, torch.device("cpu")), max_rows="8")


def test_operator_runs_the_bucket_program_and_returns_the_real_rows(monkeypatch):
    """torch.ops.ditron.<op>(..., max_rows) through its implementation, on rank 0 of a real world of 2 whose ranks
    hold the same tensors (the GPU's ops._call replaced by the op's reference at the program's shapes, the CUDA
    check lifted): the bucket program gets the staged rows, the caller the real ones, for a split-row op (gemm_rs),
    a blocked output (ag_gemm) and an end-sliced one (gemm_ar)."""
    world = World(2, 0, torch.device("cpu"))
    lib = ops.Library(None, target="cuda:90")
    h = torch_ops.register_world(world, lib, capturable=False)
    seen = []

    def fake_call(op, tensors, world_, params, out, sync, library, passes, graph=False):
        s = sig(op, [tuple(t.shape) for t in tensors], 2, virtual=False, **params)
        seen.append((op, s.shapes[0][0]))
        out.copy_(ops.reference(s, [list(tensors)] * 2)[0].to(out.dtype))
        return out
    monkeypatch.setattr(torch_ops, "_check_device", lambda op, tensors: None)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(ops, "_call", fake_call)
    gen = torch.Generator().manual_seed(11)
    b = _data((16, 8), gen)
    for m in (6, 10, 8):
        a = _data((m, 16), gen)
        for op in ("gemm_rs", "ag_gemm", "gemm_ar"):
            y = getattr(torch.ops.ditron, op)(a, b, h, max_rows=32)
            want = ops.reference(sig(op, [(m, 16), (16, 8)], 2, virtual=False), [[a, b]] * 2)[0].to(BF16)
            assert y.shape == want.shape and torch.equal(y, want), (op, m)
    assert {rows for _, rows in seen} == {8, 16}


def test_repeated_calls_skip_the_signatures(fake_library, monkeypatch):
    """A call like an earlier one (op, world, shapes, parameters) finds its bucket plan without building a
    Signature, padded or exact."""
    world = World(2, None, torch.device("cpu"))
    gen = torch.Generator().manual_seed(5)
    built, watching = [], []
    real = ops.Signature.__post_init__
    monkeypatch.setattr(ops.Signature, "__post_init__",
                        lambda self: (built.append(self) if watching else None) or real(self))
    for m in (5, 8):
        args = [[_data((m, 16), gen) for _ in range(2)], [_data((16, 8), gen) for _ in range(2)]]
        buckets.ag_gemm(*args, world, max_rows=64, library=fake_library)
        watching.append(m)
        buckets.ag_gemm(*args, world, max_rows=64, library=fake_library)
        watching.clear()
        assert not built, f"{m} rows"
    assert [s.shapes[0][0] for s in fake_library.loads] == [8]
