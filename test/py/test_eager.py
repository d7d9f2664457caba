"""Eager call plans (runtime/eager.py) and the ops' fast path (ditron.fastcall) on test_executor.py's fake GPU: a
plan is made for ditron's programs, its calls give what interpreted calls give (fresh tensors every call, given
outputs, pipelined without host sync, driver memops through the fake driver), the interpreted path's checks do not
run on a planned call, a call with other shapes or a non-contiguous tensor is checked again, and errors still name
the planned actions. The GPU runs are in test_eager_gpu.py."""
from __future__ import annotations

import pytest
import torch

import executor_programs as EP
from ditron.runtime import eager
from ditron.runtime import executor as X
from ditron.runtime.eager import EagerPlan, Lazy, resolve
from ditron.runtime.program import LaunchAction, WaitAction
from ditron.runtime.world import World
from test_executor import compiled, fake_executor, small, tolerance_equal


@pytest.mark.parametrize("op, W", [("all_gather", 3), ("reduce_scatter", 2), ("all_reduce", 3), ("all_reduce2", 2),
                                   ("ag_gemm", 2), ("gemm_rs", 3)])
def test_planned_calls_equal_interpreted_calls(monkeypatch, tmp_path_factory, op, W):
    case = small(op, W)
    gpu, ex = fake_executor(monkeypatch, tmp_path_factory, case)
    inputs = [EP.make_inputs(case, call, device="cpu") for call in range(1, 6)]
    got = [ex.run(xs, sync=call % 2 == 0) for call, xs in enumerate(inputs)]
    ex.synchronize()
    assert [type(p) for p in ex._eager_plans.values()] == [EagerPlan]
    interpreted = []
    monkeypatch.setattr(eager, "ENABLED", False)
    interpreted = [ex.run(xs) for xs in inputs]
    for xs, a, b in zip(inputs, got, interpreted):
        want = EP.reference(case, xs)
        for r in range(W):
            assert tolerance_equal(a[r][0], want[r][0], exact=op == "all_gather")
            assert torch.equal(a[r][0], b[r][0])
    assert ex.epoch == 10 and ex.watch.done
    ex.close()


def test_a_planned_call_runs_no_interpreted_step(monkeypatch, tmp_path_factory):
    case = small("ag_gemm", 2)
    gpu, ex = fake_executor(monkeypatch, tmp_path_factory, case)
    ex.run(EP.make_inputs(case, 1, device="cpu"))
    for name in ("_run_interpreted", "_prepare", "_check_action", "_launch_values"):
        monkeypatch.setattr(X.Executor, name, lambda *a, name=name: pytest.fail(f"{name} ran on a planned call"))
    xs = EP.make_inputs(case, 2, device="cpu")
    outs = ex.run(xs)
    assert all(tolerance_equal(outs[r][0], EP.reference(case, xs)[r][0]) for r in range(2))


def test_a_program_the_plans_do_not_cover_is_interpreted(monkeypatch, tmp_path_factory):
    case = small("all_gather", 2)
    gpu, ex = fake_executor(monkeypatch, tmp_path_factory, case)
    for r in ex.ranks:
        monkeypatch.setattr(ex._eager_traces[r], "affine", False)
    xs = EP.make_inputs(case, 1, device="cpu")
    outs = ex.run(xs)
    assert torch.equal(outs[1][0], torch.cat([xs[0][0], xs[1][0]]))
    (why,) = ex._eager_plans.values()
    assert isinstance(why, eager.Unplanned) and "not affine in the epoch" in str(why)


def test_a_plan_stops_where_an_epoch_value_would_not_fit_32_bits(monkeypatch, tmp_path_factory):
    case = small("all_reduce2", 2)
    gpu, ex = fake_executor(monkeypatch, tmp_path_factory, case)
    ex.run(EP.make_inputs(case, 1, device="cpu"))
    (plan,) = ex._eager_plans.values()
    assert plan.max_epoch < 1 << 31  # its signal values grow with the epoch
    ex.epoch = plan.max_epoch
    with pytest.raises(X.DitronRuntimeError, match="does not fit in a 32-bit signal slot"):
        ex.run(EP.make_inputs(case, 2, device="cpu"))


def test_the_watchdog_names_a_planned_wait(monkeypatch, tmp_path_factory):
    """A planned call's milestones name their actions lazily; a stall resolves them to the epoch's action."""
    case = small("all_gather", 2)
    gpu, ex = fake_executor(monkeypatch, tmp_path_factory, case, timeout_s=0.2)
    ex.run(EP.make_inputs(case, 1, device="cpu"))
    lazies = [m.action for q in ex.watch.queues.values() for m in q if type(m.action) is Lazy]
    assert all(isinstance(resolve(a), (WaitAction, LaunchAction)) for a in lazies)


def test_ops_fast_path_binds_fresh_tensors_without_the_checks(monkeypatch, tmp_path):
    """ditron.ops: the second call with the same shapes, fresh tensors, takes the call plan (no argument checks, no
    Signature, no executor binding); other shapes and a non-contiguous input take the checked path."""
    from test_ops import _FakeExecutable, sig

    from ditron import ops
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    W = 2
    s = sig("ag_gemm", [(40, 32), (32, 16)], W)
    lib = ops.Library(tmp_path / "lib", target="cuda:90")
    fake = _FakeExecutable(monkeypatch, s, ops.build_one(s, tmp_path / "lib"))
    monkeypatch.setattr(lib, "_load", lambda got: fake if got == s else pytest.fail(got.key))
    world = World.virtual(W, device="cpu")

    def inputs(call):
        g = torch.Generator().manual_seed(call)
        return [[torch.randn(shape, generator=g).to(torch.bfloat16) for shape in s.shapes] for _ in range(W)]

    def args(xs):
        return [list(col) for col in zip(*xs)]
    ops.ag_gemm(*args(inputs(1)), world, library=lib)
    assert len(lib._eager) == 1
    checked = []
    real_per_rank, real_bind = ops._per_rank, X.Executor._bind_io
    monkeypatch.setattr(ops, "_per_rank", lambda *a: checked.append("ops") or real_per_rank(*a))
    monkeypatch.setattr(X.Executor, "_bind_io", lambda *a: checked.append("executor") or real_bind(*a))
    for call in (2, 3):
        xs = inputs(call)
        got = ops.ag_gemm(*args(xs), world, library=lib, sync=call == 3)
        lib.synchronize(world)
        for g, w in zip(got, ops.reference(s, xs)):
            assert torch.allclose(g.float(), w, rtol=2 ** -6, atol=2 ** -6 * float(w.abs().max()))
    assert checked == []
    xs = inputs(4)
    a = [x[0].t().contiguous().t() for x in xs]  # the same shape, not contiguous: checked (and copied)
    assert not a[0].is_contiguous()
    ops.ag_gemm(a, [x[1] for x in xs], world, library=lib)
    assert checked == ["executor"]  # (ops finds the executable by its shapes: the executor checks)
    with pytest.raises(ops.OpError, match="argument 0 of rank 1 is \\(6, 32\\)"):
        ops.ag_gemm([torch.zeros(8, 32, dtype=torch.bfloat16), torch.zeros(6, 32, dtype=torch.bfloat16)],
                    [x[1] for x in xs], world, library=lib)
    lib.release(s)
    assert not lib._eager


@pytest.mark.parametrize("W", [1, 3])
def test_graph_copy_in_replays_one_capture_for_fresh_tensors(monkeypatch, gather_artifacts, W):
    """graph="copy" (GraphRunner.copy_in): fresh inputs each call are copied into one captured set (one capture
    per parity for every call), the results are fresh tensors, and given outputs are written."""
    from test_executor_graph import gather_inputs, graph_executor
    gpu, ex = graph_executor(monkeypatch, gather_artifacts[W], W, graph=True)
    results = []
    for call in range(1, 7):
        xs = gather_inputs(W, call)
        outs = ex._graphs.copy_in(xs, None, True)
        results.append((xs, outs))
    assert ex._graphs.captures == 2 and len(ex._graphs._copied) == 1
    for xs, outs in results:  # every call's results kept their values: fresh tensors
        for r in range(W):
            assert torch.equal(outs[r][0], torch.cat([x[0] for x in xs]))
    xs = gather_inputs(W, 9)
    given = [[torch.zeros(W * 8, 16)] for _ in range(W)]
    got = ex._graphs.copy_in(xs, given, True)
    assert got[0][0] is given[0][0] and torch.equal(given[W - 1][0], torch.cat([x[0] for x in xs]))
    assert ex._graphs.captures == 2


@pytest.fixture(scope="module")
def gather_artifacts(tmp_path_factory):
    import ditron
    from test_executor_graph import gather_program
    root = tmp_path_factory.mktemp("eager_gather")
    return {W: ditron.compile(gather_program(W), target="cuda:90", out_dir=root / f"w{W}", cache=False)
            for W in (1, 3)}


def test_torch_operator_fast_path(monkeypatch, tmp_path):
    """torch.ops.ditron.<op>: the second eager call with the same shapes (fresh tensors) skips the operator's checks,
    its output-shape computation and the capture-plan lookup, and gives the op's result (the tensors live on the
    CPU here, as on bench_host's dry run)."""
    from test_ops import _FakeExecutable, sig

    from ditron import fastcall, ops, torch_ops
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    s = sig("gemm_ar", [(20, 32), (32, 16)], 1)
    lib = ops.Library(tmp_path / "lib", target="cuda:90")
    fake = _FakeExecutable(monkeypatch, s, ops.build_one(s, tmp_path / "lib"))

    def load(got):
        if got != s:
            raise ops.ArtifactMissingError(got.key)
        return fake
    monkeypatch.setattr(lib, "_load", load)
    monkeypatch.setattr(torch_ops, "DEVICE_TYPE", "cpu")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    world = World.virtual(1, device="cpu")
    handle = torch_ops.register_world(world, lib, capturable=False)

    def inputs(call):
        g = torch.Generator().manual_seed(call)
        return [torch.randn(shape, generator=g).to(torch.bfloat16) for shape in s.shapes]
    torch.ops.ditron.gemm_ar(*inputs(1), handle)
    checked = []
    real = torch_ops._check
    monkeypatch.setattr(torch_ops, "_check", lambda *a: checked.append(a) or real(*a))
    for call in (2, 3):
        xs = inputs(call)
        got = torch.ops.ditron.gemm_ar(*xs, handle)
        lib.synchronize(world)
        want = ops.reference(s, [xs])[0]
        assert torch.allclose(got.float(), want, rtol=2 ** -6, atol=2 ** -6 * float(want.abs().max()))
    assert checked == [] and len(fastcall._ops) >= 1
    x = inputs(5)
    with pytest.raises(ops.ArtifactMissingError):  # another shape: checked again (no such artifact here)
        torch.ops.ditron.gemm_ar(x[0][:, :16].contiguous(), x[1][:16].contiguous(), handle)
    assert checked
    torch_ops.close(world)
    torch_ops.unregister_world(handle)
    lib.close()


def test_bench_host_cpu_dry_run(monkeypatch, tmp_path):
    """bench_host --cpu-dry: the eager calls with every device call a no-op, planned and interpreted (a registered
    kernel program's operator through its C call and the Python way), then every patch undone."""
    from test_ops import _bench

    from triton.compiler.compiler import CompiledKernel
    bench = _bench("bench_host")
    monkeypatch.setattr(bench, "DRY_CASES", [("ag_gemm", [(64, 32), (32, 16)], {}, 1)])
    monkeypatch.setattr(bench, "DRY_CALLS", 20)
    monkeypatch.setattr(bench, "REPEATS", 1)
    monkeypatch.setattr(bench, "FRESH", 4)
    init = CompiledKernel._init_handles
    rows = bench.dry_rows(tmp_path / "lib")
    assert {(r["call"].split(",")[0], r["plans"]) for r in rows if r["W"]} == {
        ("ops.ag_gemm eager", False), ("ops.ag_gemm eager", True),
        ("torch.ops.ditron.ag_gemm", False), ("torch.ops.ditron.ag_gemm", True),
        ("torch.ops.ditron.<registered program>", "C call"), ("torch.ops.ditron.<registered program>", "Python")}
    assert all(r["host_us"] > 0 for r in rows)
    assert CompiledKernel._init_handles is init and torch.cuda.Event is not bench._DryEvent and eager.ENABLED


def test_a_planned_call_checks_the_divisibility_a_kernel_was_specialized_on(monkeypatch, tmp_path_factory):
    """A kernel compiled assuming 16-byte aligned pointers (a @ditron.jit kernel's tt.divisibility): a planned call
    whose fresh input tensor is misaligned raises the executor's error before anything of the call is enqueued (the
    next aligned call runs and is right)."""
    case = small("ag_gemm", 2)
    gpu, ex = fake_executor(monkeypatch, tmp_path_factory, case)
    monkeypatch.setattr(X.Executor, "_divisible_args", lambda self, name: tuple(
        (i, n) for i, (kind, _, n) in enumerate(self._plans[name]) if kind == "pointer"))
    ex.run(EP.make_inputs(case, 1, device="cpu"))
    ex.run(EP.make_inputs(case, 2, device="cpu"))
    assert [type(p) for p in ex._eager_plans.values()] == [EagerPlan]
    xs = EP.make_inputs(case, 3, device="cpu")
    b = xs[1][1]
    storage = torch.empty(b.numel() + 1, dtype=b.dtype)
    storage[1:] = b.reshape(-1)
    xs[1][1] = storage[1:].view(b.shape)  # contiguous, one element past a 16-byte boundary
    epoch = ex.epoch
    with pytest.raises(X.DitronRuntimeError, match="was compiled assuming .*multiples of 16"):
        ex.run(xs)
    assert ex.epoch == epoch, "the refused call enqueued nothing"
    xs = EP.make_inputs(case, 4, device="cpu")
    outs = ex.run(xs)
    assert all(tolerance_equal(outs[r][0], EP.reference(case, xs)[r][0]) for r in range(2))
