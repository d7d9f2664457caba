"""The bounded all_to_all of run-time split sizes (issue 29 item 1): the task-level form (recv_counts result), its
reference semantics, the a2a_sized kernel template (IR interpreted against tiles() and numpy), ditron-tile's
choice, the device lowering (pull_sized) and the simulator at W = 1..8 (uneven, skewed, empty ranks, sizes past
the rows, overflow of a small capacity)."""
from __future__ import annotations

import ditron.frontend as dt
import numpy as np
import pytest
from mlir import ir

from ditron.dialects import ditron_context, parse_module
from ditron.dialects.verify import verify
from ditron.errors import PassError
from ditron.kernels import a2a_sized, interp
from ditron.op_reference import all_to_all_sized
from ditron.passes.registry import parse_pipeline
from ditron.sim import simulate, task_reference

DEVICE = "ditron-tile,ditron-lower-task-to-device,ditron-schedule-overlap"


def program(w: int, n: int, h: int, capacity: int, dtype: str = "bf16", sizes: str = "i32") -> str:
    t, o, s, c = f"tensor<{n}x{h}x{dtype}>", f"tensor<{capacity}x{h}x{dtype}>", f"tensor<{w}x{sizes}>", \
        f"tensor<{w}xi32>"
    return (f'module attributes {{ditron.mesh = {{axes = ["tp"], shape = array<i64: {w}>}}}} {{\n'
            f'  func.func @a2a(%x: {t}, %s: {s}) -> ({o}, {c}) attributes {{ditron.view = "local"}} {{\n'
            f'    %y, %c = "ditron_task.all_to_all"(%x, %s) {{axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64}}'
            f' : ({t}, {s}) -> ({o}, {c})\n'
            f'    return %y, %c : {o}, {c}\n  }}\n}}\n')


def lower(text: str, pipeline: str = DEVICE) -> str:
    with ditron_context():
        module = parse_module(text)
        for p in parse_pipeline(pipeline):
            p.run(module)
            verify(module)
        return str(module)


# ------------------------------------------------------------------------------------------------ semantics

def test_reference_semantics_by_hand():
    """Rank 2 sends more than its rows (cut at its end), rank 1 a negative size (0); capacity 6 < 8 received."""
    xs = [np.arange(4)[:, None] + 10 * p + np.zeros((4, 2)) for p in range(3)]
    splits = [np.array([1, 2, 1]), np.array([-3, 4, 0]), np.array([2, 1, 5])]
    outs, recvs = all_to_all_sized(xs, splits, capacity=6)
    np.testing.assert_array_equal(recvs[0], [1, 0, 2])
    np.testing.assert_array_equal(recvs[1], [2, 4, 1])   # 7 rows sent to rank 1: one past the capacity
    np.testing.assert_array_equal(recvs[2], [1, 0, 1])   # rank 2's third part is cut at its 4 rows
    np.testing.assert_array_equal(outs[0][:, 0], [0, 20, 21, 0, 0, 0])
    np.testing.assert_array_equal(outs[1][:, 0], [1, 2, 10, 11, 12, 13])  # rank 2's row 2 did not fit
    np.testing.assert_array_equal(outs[2][:, 0], [3, 23, 0, 0, 0, 0])


# ------------------------------------------------------------------------------------------------ the kernel

BIG = 2 ** 31 - 1


@pytest.mark.parametrize("capacity,splits", [
    (30, [[5, 0, 8], [13, 0, 0], [2, 9, 4]]), (7, [[5, 0, 8], [13, 0, 0], [2, 9, 4]]),
    (30, [[BIG, BIG, BIG], [-BIG - 1, BIG, 3], [1, -5, BIG]])], ids=["sizes", "overflow", "i32-extremes"])
def test_kernel_ir_matches_tiles_and_reference(capacity, splits):
    """Three ranks, ragged tiles, sizes past the rows and a skewed rank; a small capacity overflows; sizes at the
    ends of i32 wrap no sum (the interpreter wraps i32 as the GPU does)."""
    from ditron.dialects.context import ditron_context as ctx
    w, n, h = 3, 13, 20
    rec = a2a_sized.make_record(n, h, capacity, w, dtype="fp32", block_m=4, block_n=16, grid=3)
    rng = np.random.default_rng(0)
    splits = np.array(splits, np.int32)
    mem = {}
    for r in range(w):
        mem[("send", r)] = rng.standard_normal(n * h).astype(np.float32)
        mem[("out", r)] = np.full(capacity * h, 7.0, np.float32)
        mem[("counts", r)] = splits.ravel().copy()
        mem[("recv", r)] = np.zeros(w, np.int32)
    lds = {"send": h, "out": h, "counts": None, "recv": None}
    mem_ir = {k: v.copy() for k, v in mem.items()}
    mem_tiles = {k: v.copy() for k, v in mem.items()}
    with ctx():
        module = ir.Module.create()
        func = a2a_sized.build(rec, ip=ir.InsertionPoint(module.body))
        for r in range(w):
            events = interp.run(func, mem_ir, grid=a2a_sized.grid(rec)[0], rank=r, num_ranks=w)
            ran = interp.apply_tiles(a2a_sized.tiles(rec, rank=r, num_ranks=w, scalars={}), mem_tiles, rank=r,
                                     lds=lds)
            interp.compare_trace(ran, events, rank=r, lds=lds)
    outs, recvs = all_to_all_sized([mem[("send", p)].reshape(n, h) for p in range(w)], list(splits), capacity)
    for r in range(w):
        np.testing.assert_array_equal(mem_ir[("out", r)], mem_tiles[("out", r)])
        np.testing.assert_array_equal(mem_ir[("out", r)].reshape(capacity, h), outs[r])
        np.testing.assert_array_equal(mem_ir[("recv", r)], recvs[r])
    assert all(r.sum() <= w * n for r in recvs)


def test_kernel_record_is_checked():
    from ditron.errors import VerificationError
    with pytest.raises(VerificationError, match="block_m=3 must be a power of two"):
        a2a_sized.make_record(8, 8, 16, 2, block_m=3)
    with pytest.raises(VerificationError, match="field 'capacity' must be a positive integer"):
        a2a_sized.make_record(8, 8, 0, 2)
    rec = a2a_sized.make_record(8, 8, 16, 2)
    with pytest.raises(VerificationError, match="launched in a world of 3"):
        a2a_sized.tiles(rec, rank=0, num_ranks=3, scalars={})


# ------------------------------------------------------------------------------------------------ simulator

def _routing(kind: str, w: int, n: int, rng, call: int) -> list[np.ndarray]:
    """Per rank, its split sizes: uneven (random cuts), skewed (every row to one rank), empty (ranks with no
    rows to send and ranks nobody sends to), past (sizes past the rows, negative sizes)."""
    out = []
    for r in range(w):
        if kind == "uneven":
            cut = np.sort(rng.integers(0, n + 1, w - 1))
            s = np.diff(np.concatenate([[0], cut, [n]]))
        elif kind == "skewed":
            s = np.zeros(w, np.int64)
            s[(call + 1) % w] = n
        elif kind == "empty":
            s = np.zeros(w, np.int64)
            if r % 2 == 0:
                s[0] = n // 2
                s[w // 2] = n - n // 2
        else:
            s = rng.integers(-2, n, w)
        out.append(s.astype(np.int32))
    return out


@pytest.mark.parametrize("w,kind", [*((w, k) for w in range(1, 9) for k in ("uneven", "skewed")),
                                    *((w, k) for w in (1, 2, 3, 4, 8) for k in ("empty", "past"))])
def test_simulator_runs_the_lowered_program_race_free(w, kind):
    n, h = 6, 16
    text = program(w, n, h, capacity=w * n)
    rng = np.random.default_rng(w)

    def inputs(call):
        splits = _routing(kind, w, n, rng, call)
        return [[rng.standard_normal((n, h)).astype(np.float32), splits[r]] for r in range(w)]
    result = simulate(lower(text), world_size=w, inputs=inputs, seed=w, calls=2, reference=task_reference(text))
    assert result.ok, result.summary()


@pytest.mark.parametrize("w", [2, 3])
def test_small_capacity_overflows_into_the_counts_never_past_the_buffer(w):
    """Every row to rank 0 with a capacity of 5 rows: rank 0 keeps the first 5 (source order), recv_counts says
    w x 4 were sent (the overflow the caller checks), nothing is written past the output."""
    n, h, capacity = 4, 16, 5
    text = program(w, n, h, capacity=capacity)
    rng = np.random.default_rng(0)
    seen = []

    def inputs(call):
        return [[rng.standard_normal((n, h)).astype(np.float32), np.array([n] + [0] * (w - 1), np.int32)]
                for _ in range(w)]

    def reference(per_rank):
        outs = task_reference(text)(per_rank)
        seen.append(outs)
        return outs
    result = simulate(lower(text), world_size=w, inputs=inputs, seed=1, calls=2, reference=reference)
    assert result.ok, result.summary()
    recv0 = seen[0][0][1]
    assert recv0.tolist() == [n] * w and recv0.sum() - capacity == w * n - capacity > 0


def test_removing_the_counts_wait_is_caught():
    """The launch reads the peers' counts: without the wait for them the simulator reports the race."""
    w, n, h = 2, 4, 16
    text = program(w, n, h, capacity=w * n)
    dev = lower(text)
    lines = [ln for ln in dev.splitlines() if "a2a.await_counts" not in ln]
    rng = np.random.default_rng(0)

    def inputs(call):
        return [[rng.standard_normal((n, h)).astype(np.float32), np.array([1, 3], np.int32)] for _ in range(w)]
    result = simulate("\n".join(lines), world_size=w, inputs=inputs, seed=0, calls=2,
                      reference=task_reference(text))
    assert not result.ok
    assert "a2a_counts" in result.summary()


def test_every_mutant_is_caught():
    """sim.mutate: dropping any wait, signal or the barrier, or shifting either copy (the staging, the counts), is
    a finding of the simulator (W = 3, uneven sizes)."""
    from ditron.sim.mutate import run_mutants
    w, n = 3, 6
    text = program(w, n, 16, w * n)

    def inputs(call):
        rng = np.random.default_rng(call)
        splits = _routing("uneven", w, n, rng, call)
        return [[rng.standard_normal((n, 16)).astype(np.float32), splits[r]] for r in range(w)]
    results = run_mutants(lower(text), w, inputs=inputs, calls=2, reference=task_reference(text))
    kinds = {r.mutation.kind for r in results}
    assert {"drop-wait", "drop-signal", "drop-barrier", "shift-src", "shift-dst"} <= kinds
    missed = [str(r.mutation) for r in results if not r.caught]
    assert not missed, missed


# ------------------------------------------------------------------------------------------------ passes

def test_ditron_tile_chooses_pull_sized_on_sms():
    tiled = lower(program(4, 8, 16, 32), "ditron-tile")
    assert 'algorithm = "pull_sized"' in tiled and 'engine = "sm"' in tiled
    with pytest.raises(PassError, match="engine=copy_engine cannot move parts of run-time sizes"):
        lower(program(4, 8, 16, 32), "ditron-tile{engine=copy_engine}")


def test_i64_sizes_are_a_located_error():
    with pytest.raises(PassError, match=r"<stdin>:\d+:\d+: error: .*split_sizes of type tensor<2xi64> are lowered "
                                        r"as i32 only"):
        lower(program(2, 8, 16, 16, sizes="i64"))


def test_bounded_form_builder_and_accessors():
    with ditron_context():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body), ir.Location.unknown():
            from ditron.dialects import task
            f32 = ir.F32Type.get()
            x = ir.RankedTensorType.get([8, 4], f32)
            s = ir.RankedTensorType.get([2], ir.IntegerType.get_signless(32))
            from mlir.dialects import func
            fn = func.FuncOp("f", ir.FunctionType.get([x, s], []))
            with ir.InsertionPoint(fn.add_entry_block()):
                a, b = fn.entry_block.arguments
                op = task.AllToAll.build(a, split_dim=0, concat_dim=0, axis="tp", axis_size=2, split_sizes=b,
                                         capacity=16)
                assert op.bounded and op.capacity == 16 and str(op.recv_counts.type) == "tensor<2xi32>"
                assert str(op.output.type) == "tensor<16x4xf32>"
                free = task.AllToAll.build(a, split_dim=0, concat_dim=0, axis="tp", axis_size=2, split_sizes=b)
                assert not free.bounded and free.recv_counts is None
                with pytest.raises(ValueError, match="capacity bounds parts of run-time sizes"):
                    task.AllToAll.build(a, split_dim=0, concat_dim=0, axis="tp", axis_size=2, capacity=16)
                func.ReturnOp([])


def test_kernel_parses_and_compiles_for_both_vendors():
    """Lowered by ditron-lower-core-to-triton, Triton's parser takes it and its stages build a binary (no GPU)."""
    from kernel_checks import compile_text, emit, triton_parse
    rec = a2a_sized.make_record(100, 96, 400, 4, dtype="bf16", grid=8)
    for target, triple in (("cuda:90", ("cuda", 90, 32)), ("hip:gfx942", ("hip", "gfx942", 64))):
        text = emit(rec, lower=target)
        triton_parse(text, triple)
        asm, binary = compile_text(text, target, rec["num_warps"], 2)
        assert binary


# ------------------------------------------------------------------------------------------------ ditron.ops

def test_ops_program_text_compiles_on_the_cpu():
    """The op's task program goes through ditron.compile to an artifact (kernels built; no GPU needed)."""
    from ditron import ops_sized
    text = ops_sized.program_text(2, (8, 4, 4), "bf16", 12)
    assert "tensor<12x4x4xbf16>" in text and "tensor<2xi32>" in text
    exe = ops_sized._executable(2, (8, 4, 4), "bf16", 12, "cuda:90")
    assert "a2a_sized" in exe.kernels


def test_ops_refuses_bad_arguments_before_any_gpu_work():
    import torch
    from ditron import ops
    from ditron.errors import DitronError
    from ditron.runtime.world import World
    world = World(2, None, None)  # virtual, no device needed for the checks
    x = [torch.zeros(8, 4), torch.zeros(8, 4)]
    s = [torch.tensor([4, 4]), torch.tensor([8, 0])]
    with pytest.raises(DitronError, match="capacity= bounds parts of run-time sizes; it needs splits="):
        ops.all_to_all(x, world, capacity=4)
    with pytest.raises(DitronError, match="splits= splits and concatenates dim 0, got split_dim=1"):
        ops.all_to_all(x, world, split_dim=1, splits=s)
    with pytest.raises(DitronError, match="out= is not taken"):
        ops.all_to_all(x, world, splits=s, out=x)
    with pytest.raises(DitronError, match=r"splits of rank 1 must be an integer tensor of shape \(2,\)"):
        ops.all_to_all(x, world, splits=[s[0], torch.tensor([1.0, 2.0])])
    with pytest.raises(DitronError, match="capacity must be a positive int"):
        ops.all_to_all(x, world, splits=s, capacity=0)
    with pytest.raises(DitronError, match="x of rank 1 is"):
        ops.all_to_all([x[0], torch.zeros(4, 4)], world, splits=s)


def test_overflow_is_computed_without_reading_back():
    import torch
    from ditron.ops_sized import overflow
    assert int(overflow(torch.tensor([3, 4], dtype=torch.int32), 5)) == 2
    assert int(overflow(torch.tensor([1, 1], dtype=torch.int32), 5)) == 0
    assert [int(v) for v in overflow([torch.tensor([9]), torch.tensor([2])], 4)] == [5, 0]


def test_ops_artifacts_built_here_load_without_compiling(tmp_path, monkeypatch):
    """``build`` on the CPU side, then the op finds its artifact in the library directory (a GPU box with torch +
    triton only): loaded, not compiled."""
    from ditron import ops_sized
    (path,) = ops_sized.build(tmp_path, [(2, (8, 16), "bf16", 16)])
    assert path.name == ops_sized.artifact_name(2, (8, 16), "bf16", 16, "cuda:90")
    import ditron.api
    monkeypatch.setattr(ditron.api, "compile", lambda *a, **k: pytest.fail("compiled instead of loading"))
    exe = ops_sized._executable(2, (8, 16), "bf16", 16, "cuda:90", tmp_path)
    assert "a2a_sized" in exe.kernels


def moe_program(w: int, n: int, k: int, f: int) -> str:
    """Dispatch, experts, combine: the rows go out by their sizes, each source's rows meet their own weights (the
    recv counts as the group sizes of a grouped GEMM), and the results go back to where they came from (the recv
    counts as the combine's sizes), into n rows."""
    c = w * n
    t, y, hs, z = (f"tensor<{n}x{k}xbf16>", f"tensor<{c}x{k}xbf16>", f"tensor<{c}x{f}xbf16>",
                   f"tensor<{n}x{f}xbf16>")
    s, wt = f"tensor<{w}xi32>", f"tensor<{w}x{k}x{f}xbf16>"
    a2a = '{axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64}'
    return (f'module attributes {{ditron.mesh = {{axes = ["tp"], shape = array<i64: {w}>}}}} {{\n'
            f'  func.func @moe(%x: {t}, %s: {s}, %w: {wt}) -> ({z}, {s}) attributes {{ditron.view = "local"}} {{\n'
            f'    %y, %c = "ditron_task.all_to_all"(%x, %s) {a2a} : ({t}, {s}) -> ({y}, {s})\n'
            f'    %h = "ditron_task.grouped_matmul"(%y, %w, %c) : ({y}, {wt}, {s}) -> {hs}\n'
            f'    %z, %back = "ditron_task.all_to_all"(%h, %c) {a2a} : ({hs}, {s}) -> ({z}, {s})\n'
            f'    return %z, %back : {z}, {s}\n  }}\n}}\n')


@pytest.mark.parametrize("w,kind", [(2, "uneven"), (3, "skewed"), (4, "empty")])
def test_dispatch_experts_combine_in_the_simulator(w, kind):
    """Two bounded all_to_alls around a grouped GEMM in one program: the combine's sizes are the dispatch's recv
    counts (a buffer the program computed), its input the GEMM's symmetric output (no staging); every row comes
    back to its rank, and back[q] = the rows this rank sent q."""
    n, k, f = 8, 16, 16
    text = moe_program(w, n, k, f)
    dev = lower(text, "ditron-fuse-overlap," + DEVICE)
    assert dev.count("kernel = @a2a_sized") == 2 and dev.count('"ditron_device.barrier"') == 1
    rng = np.random.default_rng(w)

    def inputs(call):
        splits = _routing(kind, w, n, rng, call)
        wts = rng.standard_normal((w, k, f)).astype(np.float32) / 4
        return [[rng.standard_normal((n, k)).astype(np.float32), splits[r], wts] for r in range(w)]
    result = simulate(dev, world_size=w, inputs=inputs, seed=w, calls=2, reference=task_reference(text))
    assert result.ok, result.summary()


def test_frontend_builds_the_bounded_form_and_the_simulator_runs_it():
    """ditron.frontend: all_to_all(..., split_sizes=s, capacity=C) -> (output, recv_counts), through ditron-device
    to the simulator; a capacity without sizes is a trace error."""
    from ditron.frontend import TraceError

    @dt.program(dt.Mesh(tp=3), view="local")
    def dispatch(x: dt.Tensor[(6, 16), "bf16"], s: dt.Tensor[(3,), "i32"]):
        return dt.all_to_all(x, 0, 0, "tp", split_sizes=s, capacity=10)
    with ditron_context() as ctx:
        text = str(dispatch.build(ctx))
    assert "-> (tensor<10x16xbf16>, tensor<3xi32>)" in text
    rng = np.random.default_rng(3)

    def inputs(call):
        splits = _routing("skewed", 3, 6, rng, call)
        return [[rng.standard_normal((6, 16)).astype(np.float32), splits[r]] for r in range(3)]
    result = simulate(lower(text), world_size=3, inputs=inputs, seed=3, calls=2, reference=task_reference(text))
    assert result.ok, result.summary()

    @dt.program(dt.Mesh(tp=2), view="local")
    def bad(x: dt.Tensor[(6, 16), "bf16"]):
        return dt.all_to_all(x, 0, 0, "tp", capacity=10)
    with pytest.raises(TraceError, match="capacity .* needs split_sizes; got capacity=10 without split_sizes"):
        with ditron_context() as ctx:
            bad.build(ctx)
