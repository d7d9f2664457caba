"""ditron.device: the Python builder of device programs. Its IR (printable, read back by ditron-opt and ditron sim),
the simulator running builder programs at W = 1, 2, 3, 4, 8 (examples/ag_gemm_user.py with rows that do not divide
the GEMM's tiles; planted bugs found), the located errors of wrong calls, and compilation to an artifact."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest

import ditron.device as dd
from ditron.sim import DEADLOCK, RACE_READ, RACE_WAR, RACE_WRITE

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2] / "examples"))
import ag_gemm_user as example  # noqa: E402
import jit_kernels  # noqa: E402

SMALL = dict(block_m=32, block_n=32, block_k=32)


# ------------------------------------------------------------------------------------------- AG+GEMM example

@pytest.mark.parametrize("W", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("m,chunk", [(40, 20), (23, 23)])
def test_ag_gemm_user_simulates_clean_and_matches(W, m, chunk):
    """Rows per rank (40, 23) are no multiple of the 32-row tiles: tiles straddle two ranks' rows and wait for the
    chunks of both; two calls in a row reuse the pads (epoch-valued slots) and the gathered buffer."""
    p = example.program(W, m, 64, 48, chunk=chunk, **SMALL)
    result = p.simulate(reference=example.reference, seed=W + m)
    assert result.ok, result.summary()
    assert result.compared
    assert len(result.outputs) == W and result.outputs[0][0].shape == (W * m, 48)


def test_ag_gemm_user_simulates_under_several_interleavings():
    p = example.program(3, 40, 64, 48, chunk=20, **SMALL)
    for seed in range(4):
        result = p.simulate(reference=example.reference, seed=seed, calls=3)
        assert result.ok, result.summary()


def test_the_simulators_graph_mode_says_it_does_not_model_pads_that_are_not_consumed():
    """The example's pads hold the epoch and are not consumed by their waiters: the runtime's CUDA graphs zero them
    at each call (after the end barrier), which the simulator's graph mode does not model -- and says so, at the
    pads' users' lines, rather than passing the program."""
    from ditron.sim import INVALID
    p = example.program(2, 40, 64, 48, chunk=20, **SMALL)
    result = p.simulate(reference=example.reference, graph=True)
    invalid = [f for f in result.findings if f.kind == INVALID]
    assert invalid and "which is not consumed" in invalid[0].message, result.summary()
    assert "ag_gemm_user.py" in str(invalid[0].loc)


def test_ir_is_printable_and_read_back_by_ditron_opt_and_ditron_sim(tmp_path):
    from ditron.sim.command import main as sim_main
    from ditron.tools.ditron_opt import run as opt_run

    text = example.program(3, 40, 64, 48, chunk=20, **SMALL).to_mlir()
    assert '"ditron_device.copy"' in text and 'engine = "copy_engine"' in text
    assert "ditron.kernel = {args = [\"a\", \"b\", \"c\", \"ready\", \"wait_value\"]" in text
    assert "ag_gemm_user.py" in text  # the ops are located at the example's lines
    path = tmp_path / "ag.mlir"
    path.write_text(text)
    stdout, stderr = io.StringIO(), io.StringIO()
    assert opt_run([str(path)], io.StringIO(), stdout, stderr) == 0, stderr.getvalue()
    assert '"ditron_device.launch"' in stdout.getvalue()
    stdout, stderr = io.StringIO(), io.StringIO()
    assert sim_main([str(path), "--seeds", "0,1"], stdout, stderr) == 0, stderr.getvalue()
    assert "3 rank(s)" in stdout.getvalue() and "OK" in stdout.getvalue()


def test_lowered_to_core_the_gemm_is_a_tt_func():
    text = example.program(2, 40, 64, 48, chunk=20, **SMALL).to_mlir("ditron-lower-device-to-core")
    assert '"tt.func"' in text and "ditron_core.wait" in text


@pytest.mark.slow
def test_compiles_to_an_artifact_with_a_host_program(tmp_path):
    import ditron
    p = example.program(2, 40, 64, 48, chunk=20, num_sms=4, **SMALL)
    exe = ditron.compile(p, "cuda:90", out_dir=tmp_path / "art", cache=False)
    assert "gemm" in exe.kernels and "ditron_rt_barrier" in exe.kernels
    host = exe.host_program
    assert host["name"] == "ag_gemm_user" and len(host["args"]) == 4
    loaded = ditron.load(tmp_path / "art")
    assert loaded.host_program["name"] == "ag_gemm_user"


# ------------------------------------------------------------------------------------- planted bugs (simulator)

def push_gather(W: int, m: int = 6, k: int = 8, *, wait: bool = True, skip_signal_to: int | None = None,
                barrier: bool = True, engine: str = "copy_engine", dtype: str = "f32") -> dd.Program:
    """Each rank pushes its x into rows rank*m of every rank's g and sets ready[rank] there; stream 0 waits for
    every slot, then copies g into y. Planted bugs: no wait, a signal left out, no end barrier."""
    p = dd.Program("push_gather", W)
    x = p.input("x", (m, k), dtype)
    y = p.output("y", (W * m, k), dtype)
    g = p.symmetric("g", (W * m, k), dtype)
    ready = p.signal_pad("ready", W)
    with p.loop(0, p.num_ranks) as d:
        q = (p.rank + d) % p.num_ranks
        p.copy(x, g, dst_rank=q, dst_offsets=(p.rank * m, 0), engine=engine)
        if skip_signal_to is None:
            p.signal(ready, rank=q, slot=p.rank)
        else:
            with p.if_(q.ne(skip_signal_to)):
                p.signal(ready, rank=q, slot=p.rank)
    if wait:
        with p.loop(0, p.num_ranks) as r:
            p.wait(ready, r)
    p.copy(g, y)
    if barrier:
        p.barrier()
    return p


def gathered(per_rank):
    whole = np.concatenate([xs[0] for xs in per_rank], axis=0)
    return [[whole] for _ in per_rank]


@pytest.mark.parametrize("W", [1, 2, 3, 4, 8])
def test_push_gather_is_clean(W):
    result = push_gather(W).simulate(reference=gathered, seed=W)
    assert result.ok, result.summary()


@pytest.mark.parametrize("W", [2, 3, 8])
def test_a_missing_wait_is_a_race_at_the_reading_copy(W):
    result = push_gather(W, wait=False).simulate(reference=gathered)
    kinds = {f.kind for f in result.findings}
    assert RACE_READ in kinds, result.summary()
    race = next(f for f in result.findings if f.kind == RACE_READ)
    assert race.loc.file == str(HERE) or "test_device_builder.py" in str(race.loc), race


@pytest.mark.parametrize("W", [2, 3, 4])
def test_a_missing_signal_is_a_deadlock_at_the_wait(W):
    result = push_gather(W, skip_signal_to=W - 1).simulate(reference=gathered)
    assert any(f.kind == DEADLOCK for f in result.findings), result.summary()
    assert "test_device_builder.py" in result.summary()


def test_no_end_barrier_lets_the_next_call_overwrite_what_a_peer_reads():
    result = push_gather(3, barrier=False).simulate(reference=gathered, calls=2)
    kinds = {f.kind for f in result.findings}
    assert kinds & {RACE_WAR, RACE_WRITE, RACE_READ}, result.summary()


# ------------------------------------------------------------------------------------------- located errors

def _raises_here(fn, match: str):
    """fn() raises DeviceBuildError located at the line of this file that made the call."""
    with pytest.raises(dd.DeviceBuildError, match=match) as err:
        fn()
    d = err.value.diagnostics[0]
    assert d.file == str(HERE) or d.file.endswith("test_device_builder.py"), d
    assert str(err.value).startswith(f"{d.file}:{d.line}:{d.col}: error:"), str(err.value)
    return d


def _small():
    p = dd.Program("t", 2)
    x = p.input("x", (64, 32), "bf16")
    w = p.input("w", (32, 64), "bf16")
    y = p.output("y", (64, 64), "bf16")
    pad = p.signal_pad("ready", 2)
    return p, x, w, y, pad


def test_error_unknown_engine():
    p, x, w, y, pad = _small()
    g = None
    d = _raises_here(lambda: p.copy(x, y, sizes=(64, 32), engine="dma"), "there is no engine 'dma'")
    assert d.line > 0 and g is None


def test_error_wait_on_a_pad_that_does_not_exist():
    p, x, w, y, pad = _small()
    _raises_here(lambda: p.wait("readyy", 0), "no signal pad 'readyy' in program 't' \\(its pads: ready\\)")
    _raises_here(lambda: p.wait(x, 0), "is not a signal pad")
    other = dd.Program("other", 2)
    foreign = other.signal_pad("ready", 2)
    _raises_here(lambda: p.wait(foreign, 0), "belongs to program 'other'")
    _raises_here(lambda: p.signal(pad, slot=5), "slot 5 is outside signal pad 'ready'")


def test_error_launch_with_the_wrong_number_of_args():
    p, x, w, y, pad = _small()
    k = p.gemm(64, 64, 32, wait={"arg": "ready", "rows_per_slot": 32}, **SMALL)
    _raises_here(lambda: p.launch(k, [x, w, y]), "3 argument\\(s\\) given, it takes 5: a, b, c, ready, wait_value")


def test_error_gemm_operand_of_the_wrong_dtype_or_shape():
    p, x, w, y, pad = _small()
    wf = p.symmetric("wf", (32, 64), "f32")
    wt = p.symmetric("wt", (64, 32), "bf16")
    k = p.gemm(64, 64, 32, **SMALL)
    _raises_here(lambda: p.launch(k, [x, wf, y]), "argument 'b' of the gemm kernel must be \\[32, 64\\] bf16, got "
                                                 "'wf' \\[32, 64\\] f32")
    _raises_here(lambda: p.launch(k, [x, wt, y]), "must be \\[32, 64\\] bf16, got 'wt' \\[64, 32\\]")
    kw = p.gemm(64, 64, 32, wait={"arg": "ready", "rows_per_slot": 32}, **SMALL)
    _raises_here(lambda: p.launch(kw, [x, w, y, x, p.epoch]), "argument 'ready' of the gemm kernel is a signal pad")
    _raises_here(lambda: p.launch(kw, [x, w, y, pad, pad]), "is an index value, got buffer 'ready'")


def test_error_copy_dtype_shape_and_region():
    p, x, w, y, pad = _small()
    _raises_here(lambda: p.copy(x, p.symmetric("z", (64, 32), "f32")), "holds bf16 and 'z' f32")


def test_error_copy_region_and_ranks():
    p, x, w, y, pad = _small()
    _raises_here(lambda: p.copy(x, y, dst_offsets=(40, 0), sizes=(32, 32)), "dim 0 covers \\[40, 72\\) of 'y'")
    _raises_here(lambda: p.copy(x, y, dst_rank=(p.rank + 1) % p.num_ranks, sizes=(64, 32)),
                 "'y' is an out argument, which only this rank can address")
    _raises_here(lambda: p.copy(y, x, sizes=(64, 32)), "'x' is an input of the program")


def test_error_template_fields_and_grid():
    p, x, w, y, pad = _small()
    bad = p.gemm(64, 64, 32, block_q=3)
    _raises_here(lambda: p.launch(bad, [x, w, y]), "gemm kernel: gemm template: unknown field")
    k = p.gemm(64, 64, 32, **SMALL)
    _raises_here(lambda: p.launch(k, [x, w, y], grid=7), "launches exactly grid \\[4, 1, 1\\]")
    _raises_here(lambda: p.launch(k, [x, w, y], tile_order="spiral"), "tile_order must be one of")
    _raises_here(lambda: p.launch(k, [x, w, y], stream=-1), "stream must be an int >= 0")
    _raises_here(lambda: p.template("conv", 3), "there is no kernel template 'conv'")


def test_error_declarations():
    p, x, w, y, pad = _small()
    _raises_here(lambda: p.input("x", (4,), "bf16"), "input 'x' is declared after an output")
    _raises_here(lambda: p.symmetric("x", (4,), "bf16"), "'x' is already declared")
    _raises_here(lambda: p.symmetric("q", (4,), "f64"), "element type 'f64' is not supported")
    p.copy(x, y, sizes=(64, 32))
    _raises_here(lambda: p.symmetric("late", (4,), "bf16"), "declare every argument and buffer first")


def test_error_index_values():
    p, x, w, y, pad = _small()
    with p.loop(0, 2) as i:
        p.signal(pad, slot=i)
    _raises_here(lambda: p.signal(pad, slot=i), "uses the variable of a loop that has ended")
    _raises_here(lambda: bool(p.rank < 1), "has no truth value")
    _raises_here(lambda: p.signal(pad, slot=1.5), "signal slot must be an int or an index value")
    _raises_here(lambda: p.signal(pad, slot=0, rank=p.rank + 1, scope="gpu"), "needs scope='sys'")


def test_index_arithmetic_folds_constants_and_runs_per_rank():
    """(rank + 1) % W and friends evaluated per rank by the simulator: rank r writes its row into y's row
    (r + 1) % W of rank (r + 1) % W... checked through a reference."""
    W, k = 3, 4
    assert (dd.Index("const", (6,)) // 4).constant == 1 and dd.minimum(3, 5).constant == 3
    p = dd.Program("rotate", W)
    x = p.input("x", (1, k), "f32")
    y = p.output("y", (1, k), "f32")
    g = p.symmetric("g", (W, k), "f32")
    ready = p.signal_pad("ready", 1)
    nxt = (p.rank + 1) % p.num_ranks
    p.copy(x, g, dst_rank=nxt, dst_offsets=(dd.maximum(p.rank, 0) * 0 + nxt, 0))
    p.signal(ready, rank=nxt, slot=0, value=p.epoch * 2)
    p.wait(ready, 0, value=p.epoch * 2)
    p.copy(g, y, src_offsets=(p.rank, 0), sizes=(1, k))
    p.barrier()

    def reference(per_rank):
        return [[per_rank[(r - 1) % W][0]] for r in range(W)]

    result = p.simulate(reference=reference)
    assert result.ok, result.summary()
    assert "ditron.epoch_limit = 715827882" in p.to_mlir()


# ------------------------------------------------------------------------------------- as an op on tensors

def test_user_op_builds_the_program_of_a_call_and_checks_its_tensors(tmp_path):
    import torch

    import ditron
    from ditron.user_ops import UserOpError
    op = example.op(directory=tmp_path, target="cuda:90")
    p = op.program(3, True, [(40, 64), (64, 48)], "bf16", "cuda:90")
    assert [b.shape for b in p.inputs] == [(40, 64), (64, 48)] and p.world_size == 3
    assert op.key(3, True, [(40, 64), (64, 48)], "bf16", "cuda:90", {}) != \
        op.key(3, False, [(40, 64), (64, 48)], "bf16", "cuda:90", {})
    world = ditron.World(2, None, torch.device("cpu"))  # virtual: one tensor per rank
    a = [torch.zeros(8, 16, dtype=torch.bfloat16) for _ in range(2)]
    b = [torch.zeros(16, 8, dtype=torch.bfloat16) for _ in range(2)]
    with pytest.raises(UserOpError, match="takes 2 tensor"):
        op(a, world=world)
    with pytest.raises(UserOpError, match="argument 0 is a list of one tensor per rank"):
        op(a[0], b, world=world)
    with pytest.raises(UserOpError, match="argument 1 of rank 1 is \\(8, 16\\)"):
        op(a, [b[0], a[1]], world=world)
    with pytest.raises(UserOpError, match="must share one of"):
        op(a, [x.float() for x in b], world=world)
    bad = dd.Program("bad", 2)
    with pytest.raises(UserOpError, match="its program takes"):
        ditron.user_ops.UserOp("bad", lambda *a, **k: bad, target="cuda:90").program(2, True, [(8, 16)], "bf16",
                                                                                     "cuda:90")


def test_user_op_budget_is_the_executors_in_every_virtual_world():
    """The executor refuses a spinning launch of more programs than World.cta_budget in any virtual world, one rank
    included (the copy reserve): the builder gets that budget, not the whole GPU's SMs."""
    from ditron.runtime.world import World
    from ditron.user_ops import NUM_SMS, UserOp
    seen = {}

    def build(W, shapes, dtype, *, sm_budget, target):
        seen[W] = sm_budget
        p = dd.Program("probe", W)
        p.input("x", shapes[0], dtype)
        return p
    op = UserOp("probe", build, target="cuda:90")
    for W in (1, 2, 4):
        op.program(W, True, [(8, 16)], "bf16", "cuda:90")
        assert seen[W] == World(W, None, None).cta_budget(NUM_SMS), (W, seen[W])
    op.program(1, False, [(8, 16)], "bf16", "cuda:90")
    assert seen[1] == NUM_SMS


@pytest.mark.slow
def test_user_op_prebuilds_its_artifact(tmp_path):
    import ditron
    op = example.op(directory=tmp_path)
    path = op.prebuild(2, True, [(40, 64), (64, 48)], "bf16", "cuda:90")
    assert path.parent == tmp_path and (path / "manifest.json").exists()
    assert "gemm" in ditron.load(path).kernels
    assert op.prebuild(2, True, [(40, 64), (64, 48)], "bf16", "cuda:90") == path  # kept


# ------------------------------------------------------------------------------- user @ditron.jit kernels

def jit_program(W: int = 2, n: int = 1000):
    return jit_kernels.scale_program(W, n)


@pytest.mark.slow
def test_a_jit_kernel_launch_compiles_into_the_artifact(tmp_path):
    import ditron
    p = jit_program()
    text = p.to_mlir()
    assert "ditron.jit = {key = " in text and "@scale_after_wait" in text
    exe = ditron.compile(p, "cuda:90", out_dir=tmp_path / "art", cache=False)
    kinds = [a.kind for a in exe.kernels["scale_after_wait"].entry.args]
    assert kinds == ["pointer", "pointer", "pointer", "scalar", "scalar", "rank", "num_ranks", "heap_bases",
                     "wait_bound", "wait_err", "wait_tag"]
    info = exe.host_program["kernels"]["scale_after_wait"]
    assert info["args"] == ["x_ptr", "y_ptr", "pad_ptr", "n", "epoch"] and info["spins"]
    assert info["wait"] == {"arg": "pad_ptr", "value_arg": "epoch"}  # the watchdog names this pad's slots


def test_a_jit_kernel_from_ir_alone_is_a_clear_compile_error():
    """The IR names the kernel by key and by its source record (module, qualname, file, specialisation); a kernel
    the record no longer finds (here: another BLOCK than the one the key was made with) is a clear error."""
    import ditron
    from ditron.device import JIT_KERNELS
    text = jit_program().to_mlir()
    JIT_KERNELS.clear()
    assert "BLOCK = 256 : i64" in text
    with pytest.raises(ditron.CompileError, match="is no longer the kernel the IR was built with"):
        ditron.compile(text.replace("BLOCK = 256 : i64", "BLOCK = 128 : i64"), "cuda:90", cache=False)
    with pytest.raises(ditron.CompileError, match="cannot be imported and its file /nowhere/k.py does not exist"):
        ditron.compile(text.replace('module = "jit_kernels"', 'module = "no_such_module"').replace(
            f'file = "{jit_kernels.__file__}"', 'file = "/nowhere/k.py"'), "cuda:90", cache=False)


def test_jit_launch_errors():
    p = dd.Program("t", 2)
    x = p.input("x", (64,), "f32")
    xb = p.input("xb", (64,), "bf16")
    pad = p.signal_pad("ready", 1)
    sig = jit_kernels.SIGNATURE
    k = p.jit(jit_kernels.scale_after_wait, signature=sig, constexprs={"BLOCK": 64})
    _raises_here(lambda: p.launch(k, [x, x, pad, 64], grid=1), "4 argument\\(s\\) given, it takes 5: x_ptr, y_ptr, pad_ptr, "
                                                      "n, epoch")
    _raises_here(lambda: p.launch(k, [x, x, pad, 64, p.epoch]), "give its grid")
    _raises_here(lambda: p.launch(k, [xb, x, pad, 64, p.epoch], grid=1), "'x_ptr' of kernel 'scale_after_wait' is "
                                                                       "\\*fp32, got 'xb' of bf16")
    _raises_here(lambda: p.launch(k, [x, x, pad, x, p.epoch], grid=1), "'n' of kernel 'scale_after_wait' is i32")
    _raises_here(lambda: p.launch(k, [x, x, pad, 64, p.epoch], grid=1, tile_order="grouped"), "templates only")
    _raises_here(lambda: p.jit(jit_kernels.scale_after_wait, signature=sig), "give the type of 'BLOCK'")
    _raises_here(lambda: p.jit(jit_kernels.scale_after_wait, signature={**sig, "n": "fp32"},
                               constexprs={"BLOCK": 64}), "parameter 'n' has type 'fp32'")
    _raises_here(lambda: p.jit(len, signature={}), "jit takes a @ditron.jit kernel")
    _raises_here(lambda: p.jit(jit_kernels.scale_after_wait, signature=sig, constexprs={"BLOCK": 64},
                               wait={"arg": "x_ptr", "value_arg": "epoch"}), "'x_ptr' is not an i32 pad parameter")
    p.launch(k, [x, x, pad, 64, p.epoch], grid=1)
    other = p.jit(jit_kernels.scale_after_wait, signature=sig, constexprs={"BLOCK": 32})
    _raises_here(lambda: p.launch(other, [x, x, pad, 64, p.epoch], grid=1), "two specialisations")
    # the device-level simulator runs the kernel's Python body (sim/jit.py): nobody sets slot 0 of 'ready'
    dead = p.simulate(calls=1).of_kind(DEADLOCK)
    assert dead and dead[0].loc.file.endswith("jit_kernels.py") and "'ready'" in dead[0].message, dead


def _tiles_args(W: int, m: int, K: int, n: int, chunk: int, ready: int = 1, tma: bool = False):
    """The arguments of jit_kernels.ag_gemm_tiles (or, ``tma``, of ag_gemm_tiles_tma, which has no EVEN_K)."""
    rng = np.random.default_rng(W)
    xs = [rng.standard_normal((m, K)).astype(np.float32) for _ in range(W)]
    ws = [rng.standard_normal((K, n)).astype(np.float32) for _ in range(W)]
    g = np.concatenate(xs, 0)
    args = [dict(a_ptr=g.copy(), b_ptr=ws[r], c_ptr=np.zeros((W * m, n), np.float32),
                 ready_ptr=np.full(W * (m // chunk), ready, np.int32), M=W * m, N=n, K=K, m=m, epoch=1, CHUNK=chunk,
                 BLOCK_M=32, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, **({} if tma else {"EVEN_K": K % 16 == 0}))
            for r in range(W)]
    return args, [{"c_ptr": g @ ws[r]} for r in range(W)]


@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize("W,m,K,chunk", [(1, 40, 48, 20), (3, 40, 48, 20), (2, 40, 40, 20)])
def test_the_user_gemm_kernel_is_right_on_the_cpu(W, m, K, chunk, tma):
    """examples/jit_kernels.ag_gemm_tiles (ag_gemm_user's gemm="jit"; K = 40: its masked K loop) and
    ag_gemm_tiles_tma (gemm="jit_tma") through ditron.language.simulate, their chunks already there: the persistent
    grouped, rank-rotated tile loop with 32-row tiles over 40-row shards."""
    import ditron.language as dl
    args, want = _tiles_args(W, m, K, 40, chunk, tma=tma)
    kernel = jit_kernels.ag_gemm_tiles_tma if tma else jit_kernels.ag_gemm_tiles
    result = dl.simulate(kernel, (3,), args, world=W, reference=want, rtol=1e-4, atol=1e-4)
    assert result.ok, result.summary()


def test_the_user_gemm_kernel_waits_for_a_chunk_that_never_comes():
    import ditron.language as dl
    args, want = _tiles_args(2, 40, 48, 40, 20)
    args[1]["ready_ptr"][2] = 0  # rank 1: rows 40..59 (rank 1's first chunk) never arrive
    result = dl.simulate(jit_kernels.ag_gemm_tiles, (2,), args, world=2, reference=want, rtol=1e-4, atol=1e-4)
    assert not result.ok and "deadlock" in result.summary().lower(), result.summary()
    assert "jit_kernels.py" in result.summary()


@pytest.mark.slow
def test_ag_gemm_user_with_the_user_gemm_compiles(tmp_path):
    import ditron
    p = example.program(2, 40, 64, 48, chunk=20, num_sms=4, gemm="jit")
    exe = ditron.compile(p, "cuda:90", cache=False)
    assert "ag_gemm_tiles" in exe.kernels
    launch = exe.host_program["kernels"]["ag_gemm_tiles"]
    assert launch["args"] == ["a_ptr", "b_ptr", "c_ptr", "ready_ptr", "M", "N", "K", "m", "epoch"]


def test_host_program_checks_a_jit_launch_against_its_parameters():
    """Hand-written IR: a launch of a ditron.jit declaration with too few operands is a located error."""
    import ditron
    text = (HERE.parents[1] / "lit" / "lower-device-to-core" / "jit_kernels.mlir").read_text()
    bad = text.replace('"ditron_device.launch"(%x, %t, %n)', '"ditron_device.launch"(%x, %t)').replace(
        "operandSegmentSizes = array<i32: 1, 1, 1, 0,", "operandSegmentSizes = array<i32: 1, 1, 0, 0,").replace(
        "(memref<64x32xbf16>, memref<64x32xbf16>, index) -> ()", "(memref<64x32xbf16>, memref<64x32xbf16>) -> ()")
    with pytest.raises(ditron.PassError, match="launch of '@scale' passes 2 operand\\(s\\); the kernel takes 3: "
                                                "x_ptr, y_ptr, n"):
        ditron.compile(bad, "cuda:90", cache=False)


@pytest.mark.slow
def test_a_program_of_sm_copies_and_no_launch_gets_its_copy_kernels():
    """No template launch, one SM copy: ditron.compile still runs ditron-lower-device-to-core for its kernel."""
    import ditron
    p = push_gather(2, 64, 32, engine="sm", dtype="bf16")
    assert p.simulate(reference=gathered).ok
    exe = ditron.compile(p, "cuda:90", cache=False)
    assert any(k.startswith("copy") for k in exe.kernels), list(exe.kernels)


def test_build_into_a_given_context():
    from ditron.dialects import ditron_context
    p = push_gather(2)
    with ditron_context() as ctx:
        module = p.build(ctx)
        assert '"ditron_device.barrier"' in module.operation.get_asm()
        del module


def _gemm_record(program_target: str, m: int, n: int, k: int, **fields):
    p = dd.Program("g", 1, target=program_target)
    a, b = p.input("a", (m, k), "bf16"), p.input("b", (k, n), "bf16")
    c = p.output("c", (m, n), "bf16")
    budget = fields.pop("sm_budget", None)
    p.launch(p.gemm(m, n, k, **fields), [a, b, c], sm_budget=budget)
    return p._scope[-1].fields["record"]


@pytest.mark.parametrize("target", ["cuda:90", "hip:gfx942"])
@pytest.mark.parametrize("m,n,k,sms", [(1024, 3584, 4096, 64), (4096, 4096, 4096, None), (200, 7168, 2048, None)])
def test_a_gemm_without_tile_fields_takes_the_cost_models_tile_for_its_target_and_sm_budget(target, m, n, k, sms):
    from ditron.tiling import gemm_config
    from ditron.cost_model import peaks_for
    rec = _gemm_record(target, m, n, k, **({"sm_budget": sms} if sms else {}))
    budget = sms or peaks_for(target).num_sms
    cfg = gemm_config(m, n, k, "bf16", target, sms=budget)
    assert (rec["block_m"], rec["block_n"], rec["block_k"], rec["num_warps"], rec["num_stages"], rec["group_m"]) == \
        (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps, cfg.num_stages, cfg.group_m)
    assert rec["num_sms"] == budget
    if target.startswith("hip"):  # tiled for the program's target, not for cuda:90
        assert rec["loads"] == "pointer" and (sms or rec["num_sms"] == 304)


def test_a_gemm_given_a_tile_field_keeps_the_users_tile():
    rec = _gemm_record("cuda:90", 1024, 3584, 4096, block_m=64, block_n=128, num_warps=4)
    assert (rec["block_m"], rec["block_n"], rec["num_warps"]) == (64, 128, 4)


def test_error_gemm_given_another_target_than_its_program():
    with pytest.raises(dd.DeviceBuildError, match="given target 'cuda:80' in a program for 'cuda:90'"):
        _gemm_record("cuda:90", 256, 256, 256, target="cuda:80")


@pytest.mark.parametrize("W,m,n,k,virtual", [(2, 1024, 3584, 4096, True), (3, 1000, 5000, 3000, True),
                                             (2, 8192, 1024, 8192, False), (4, 2048, 2048, 16384, False)])
def test_ag_gemm_chunk_rows_is_ditron_tiles_chunking(W, m, n, k, virtual):
    """ditron.tiling.ag_gemm_chunk_rows ranks the chunkings as ditron-tile's planner does for the built-in AG+GEMM
    (same cost model, same candidates): where the planner streams the shards by copy-engine pulls, the rows agree."""
    from ditron import ops
    from ditron.tiling import ag_gemm_chunk_rows
    sig = ops.signature_for("ag_gemm", [(m, k), (k, n)], "bf16", W, virtual)
    _, choices = ops.lower(sig)
    (ag,) = [c for c in choices if c["op"] == "ditron_task.all_gather"]
    rows = ag_gemm_chunk_rows(W, m, n, k, sms=ag["sm_budget"], push=ag["algorithm"] == "push")
    assert m % rows == 0
    assert ag["algorithm"] in ("pull", "push") and ag["engine"] == "copy_engine" and not ag["comm_sms"], ag
    assert rows == ag["chunk_rows"], ag  # (the real-world cases: 2 and 4 chunks a shard)


def test_ag_gemm_chunk_rows_errors_and_one_rank():
    from ditron.tiling import ag_gemm_chunk_rows
    assert ag_gemm_chunk_rows(1, 300, 512, 512) == 300  # nothing to copy: one chunk
    with pytest.raises(ValueError, match="m must be a positive int"):
        ag_gemm_chunk_rows(2, 0, 512, 512)
    with pytest.raises(ValueError, match="engine must be copy_engine or sm"):
        ag_gemm_chunk_rows(2, 64, 512, 512, engine="tma")
