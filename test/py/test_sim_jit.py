"""ditron.sim running device programs whose launches are user @ditron.jit kernels (ditron_py/sim/jit.py): the
kernel's Python body under the World's interleaving, beside the program's copies, signals and template kernels;
findings at the kernel's source line. W = 1, 2, 3, 4, 8, sizes that do not divide the kernel's blocks."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import triton.language as tl

import ditron
import ditron.device as dd
import ditron.language as dl
from ditron.sim import DEADLOCK, INVALID, OUT_OF_BOUNDS, RACE_READ, UNINITIALIZED

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2] / "examples"))
import ag_gemm_user as example  # noqa: E402

PLANTS = {"none": 0, "missing_notify": 1, "load_before_wait": 2, "no_consume_token": 3, "wild_peer": 4}


@ditron.jit
def gather(x_ptr, g_ptr, y_ptr, pad_ptr, n, epoch, BLOCK: tl.constexpr, PLANT: tl.constexpr,
           DESC: tl.constexpr = False):
    """y = every rank's x, in rank order: each program pushes its block of x into every rank's g (symm_at) and
    notifies it, then waits for every rank's block and copies it from g into y. ``DESC``: g read through a tensor
    descriptor ([num_ranks, n], blocks of [1, BLOCK]; the wait's token reaches the load through the block's
    offset)."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    me = dl.rank()
    world = dl.num_ranks()
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    for i in range(0, world):
        peer = (me + i) % world
        if PLANT == 4:
            peer = peer + 1
        tl.store(dl.symm_at(g_ptr, peer) + me * n + offs, x, mask=mask)
        if PLANT != 1:
            dl.notify(pad_ptr, me * programs + pid, epoch, peer)
    if DESC:
        g = tl.make_tensor_descriptor(g_ptr, shape=[world, n], strides=[n, 1], block_shape=[1, BLOCK])
    for i in range(0, world):
        src = (me + world - i) % world
        if PLANT == 2:
            if DESC:
                v = tl.reshape(g.load([src, pid * BLOCK]), [BLOCK])                           # DESC-BEFORE-WAIT
            else:
                v = tl.load(g_ptr + src * n + offs, mask=mask)                                # LOAD-BEFORE-WAIT
            token = dl.wait(pad_ptr, src * programs + pid, epoch)
        elif PLANT == 3:
            token = dl.wait(pad_ptr, src * programs + pid, epoch)
            if DESC:
                v = tl.reshape(g.load([src, pid * BLOCK]), [BLOCK])                           # DESC-NO-TOKEN
            else:
                v = tl.load(g_ptr + src * n + offs, mask=mask)                                # NO-TOKEN
        else:
            token = dl.wait(pad_ptr, src * programs + pid, epoch)                             # THE-WAIT
            if DESC:
                v = tl.reshape(g.load([dl.consume_token(src, token), pid * BLOCK]), [BLOCK])
            else:
                v = tl.load(dl.consume_token(g_ptr, token) + src * n + offs, mask=mask)
        tl.store(y_ptr + src * n + offs, v, mask=mask)


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(HERE.read_text().splitlines(), 1) if text.rstrip().endswith(marker))


def gather_program(W: int, n: int, *, block: int = 16, plant: str = "none", dtype: str = "f32",
                   desc: bool = False) -> dd.Program:
    programs = -(-n // block)
    ptr = {"f32": "*fp32", "bf16": "*bf16", "f16": "*fp16"}[dtype]
    p = dd.Program("gather_user", W)
    x = p.input("x", (n,), dtype)
    y = p.output("y", (W * n,), dtype)
    g = p.symmetric("g", (W * n,), dtype)
    pad = p.signal_pad("pad", W * programs)
    k = p.jit(gather, signature={"x_ptr": ptr, "g_ptr": ptr, "y_ptr": ptr, "pad_ptr": "*i32", "n": "i32",
                                 "epoch": "i32"},
              constexprs={"BLOCK": block, "PLANT": PLANTS[plant], "DESC": desc},
              wait={"arg": "pad_ptr", "value_arg": "epoch"})
    p.launch(k, [x, g, y, pad, n, p.epoch], grid=programs)
    p.barrier()  # no rank pushes call e + 1's blocks into a peer's g while the peer still reads call e's
    return p


def gather_reference(per_rank_inputs):
    y = np.concatenate([np.asarray(xs[0], dtype=np.float64) for xs in per_rank_inputs])
    return [[y] for _ in per_rank_inputs]


@pytest.mark.parametrize("W", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("n", [37, 16])
def test_a_user_kernel_program_is_simulated_clean_and_matches(W, n):
    r = gather_program(W, n).simulate(reference=gather_reference, calls=2)
    assert r.ok, r.summary()
    assert r.compared


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_under_several_interleavings(seed):
    r = gather_program(3, 37).simulate(reference=gather_reference, calls=2, seed=seed)
    assert r.ok, r.summary()


def test_bf16_through_the_kernel():
    r = gather_program(2, 21, dtype="bf16").simulate(reference=gather_reference, calls=1)
    assert r.ok, r.summary()


@pytest.mark.parametrize("W", [2, 3, 4, 8])
def test_a_missing_notify_is_a_deadlock_at_the_kernels_wait(W):
    r = gather_program(W, 37, plant="missing_notify").simulate(reference=gather_reference, calls=1)
    dead = r.of_kind(DEADLOCK)
    assert dead, r.summary()
    f = dead[0]
    assert f.loc.file == str(HERE) and f.loc.line == _line("# THE-WAIT"), r.summary()
    assert "@gather program" in f.message and "'pad'" in f.message and ">= 1" in f.message, f.message
    assert f"{HERE.name}:{_line('# THE-WAIT')}:" in r.summary()


@pytest.mark.parametrize("W", [2, 3, 4, 8])
def test_a_load_before_its_wait_is_a_race_at_the_load(W):
    r = gather_program(W, 37, plant="load_before_wait").simulate(calls=1, seed=W)
    races = r.of_kind(RACE_READ)
    assert races, r.summary()
    assert {f.loc.line for f in races} == {_line("# LOAD-BEFORE-WAIT")}, r.summary()
    assert all(f.loc.file == str(HERE) for f in races)
    assert "before its guarding wait" in races[0].message
    assert any("store of @gather" in n.message for n in races[0].notes), races[0].notes


def test_a_load_that_does_not_depend_on_the_token_is_reported():
    r = gather_program(3, 37, plant="no_consume_token").simulate(reference=gather_reference, calls=1)
    races = r.of_kind(RACE_READ)
    assert races and {f.loc.line for f in races} == {_line("# NO-TOKEN")}, r.summary()
    assert "dl.consume_token" in races[0].message


def test_a_peer_outside_the_world_is_out_of_bounds_at_the_kernel_line():
    r = gather_program(2, 16, plant="wild_peer").simulate(calls=1)
    oob = r.of_kind(OUT_OF_BOUNDS)
    assert oob and oob[0].loc.file == str(HERE), r.summary()
    assert "names rank 2" in oob[0].message, oob[0].message


def test_without_the_end_barrier_the_next_call_races_a_peers_read():
    p = gather_program(3, 37)
    p._ops.pop()  # the barrier
    found = set()
    for seed in range(6):
        r = p.simulate(calls=2, seed=seed)
        found |= {f.kind for f in r.findings}
    assert found & {"write-after-read", "write-write", "read-before-signal"}, found


@pytest.mark.parametrize("gemm", ["jit", "jit_tma"])
@pytest.mark.parametrize("W, K", [(1, 48), (2, 40), (3, 48), (4, 40), (8, 48)])
def test_ag_gemm_user_with_the_user_gemm_simulates_clean(W, K, gemm):
    """examples/ag_gemm_user.py with gemm="jit" (pointer loads; K = 40: the masked K loop, 48: EVEN_K) and
    "jit_tma" (descriptor loads): copy-engine chunks, per-tile dl.waits in the user GEMM; 40 rows per rank and 40
    columns against 32 x 16 tiles (clamped rows, wrapped columns)."""
    p = example.program(W, 40, K, 40, dtype="f32", chunk=20, num_sms=3, gemm=gemm, BLOCK_M=32, BLOCK_N=16,
                        BLOCK_K=16, GROUP_M=2)
    r = p.simulate(reference=example.reference, calls=2, rtol=1e-4, atol=1e-4)
    assert r.ok, r.summary()
    assert r.compared


def test_ag_gemm_user_tma_needs_16_byte_rows():
    with pytest.raises(ValueError, match="multiples of 16 bytes .* use gemm='jit'"):
        example.program(2, 40, 42, 40, dtype="bf16", chunk=20, num_sms=3, gemm="jit_tma")


def test_ag_gemm_user_jit_missing_signal_deadlocks_in_the_kernel():
    p = example.program(2, 40, 48, 40, dtype="f32", chunk=20, num_sms=2, gemm="jit", BLOCK_M=32, BLOCK_N=16,
                        BLOCK_K=16, GROUP_M=2)
    ops = p._ops
    loop = next(op for op in ops if op.kind == "loop")
    inner = loop.body[0]
    inner.body[:] = [op for op in inner.body if op.kind != "signal"]   # the copies' signals
    r = p.simulate(calls=1)
    dead = r.of_kind(DEADLOCK)
    assert dead and dead[0].loc.file.endswith("jit_kernels.py"), r.summary()


def test_ditron_sim_of_the_printed_ir_in_another_process(tmp_path):
    """The printed IR names the kernel by key and by its source record: ``ditron sim`` in a process that never built
    the program loads the kernel's module from its file and runs it; the planted missing notify is found there too,
    at the kernel's line. A kernel whose source no longer matches the key is a located error at the launch."""
    import subprocess
    good, bad, stale = tmp_path / "good.mlir", tmp_path / "bad.mlir", tmp_path / "stale.mlir"
    good.write_text(gather_program(3, 37).to_mlir())
    bad.write_text(gather_program(3, 37, plant="missing_notify").to_mlir())
    stale.write_text(gather_program(3, 37).to_mlir().replace("BLOCK = 16 : i64", "BLOCK = 8 : i64"))

    def sim(path):
        return subprocess.run([sys.executable, "-W", "ignore", "-m", "ditron.sim", str(path)], capture_output=True,
                              text=True, cwd=tmp_path)
    out = sim(good)
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout + out.stderr
    out = sim(bad)
    assert out.returncode == 1 and f"{HERE.name}:{_line('# THE-WAIT')}:" in out.stdout and "[deadlock]" in out.stdout, \
        out.stdout + out.stderr
    out = sim(stale)
    assert out.returncode == 1 and "is no longer the kernel the IR was built with" in out.stdout + out.stderr
    assert "error:" in out.stdout + out.stderr and "Traceback" not in out.stderr, out.stderr


@pytest.mark.parametrize("W", [1, 2, 3, 4, 8])
def test_a_copy_on_another_stream_and_a_wait_in_the_kernel(W):
    """examples/jit_kernels.scale_program: rank r's stream pushes x into g on rank r + 1 and signals it; the
    kernel waits in-kernel for that signal, then scales g. Without the signal: a deadlock at the kernel's wait."""
    import jit_kernels
    n = 1000 - 3 * W
    ok = jit_kernels.scale_program(W, n, grid=3, block=128, copy_stream=1)

    def ref(per_rank):
        return [[2 * np.asarray(per_rank[(r - 1) % W][0], dtype=np.float64)] for r in range(W)]
    r = ok.simulate(reference=ref, calls=2)
    assert r.ok, r.summary()
    bad = jit_kernels.scale_program(W, n, grid=3, block=128, signal=False).simulate(calls=1)
    dead = bad.of_kind(DEADLOCK)
    assert dead and dead[0].loc.file.endswith("jit_kernels.py"), bad.summary()
    lines = Path(jit_kernels.__file__).read_text().splitlines()
    assert lines[dead[0].loc.line - 1].strip() == "token = dl.wait(pad_ptr, 0, epoch)", bad.summary()


def test_a_copy_stream_not_ordered_after_the_previous_calls_barrier_races_the_kernel():
    """Without the sync of scale_program (copy_stream=1), call 2's copy may overwrite g while call 1's kernel on
    stream 0 still reads it: the end barrier orders stream 0 only."""
    import jit_kernels
    p = jit_kernels.scale_program(2, 300, grid=2, block=128, copy_stream=1)
    p._ops[:] = [op for op in p._ops if not (op.kind in ("signal", "wait") and op.fields["pad"].name == "sync")]
    kinds = set()
    for seed in range(4):
        kinds |= {f.kind for f in p.simulate(calls=2, seed=seed).findings}
    assert kinds & {"write-after-read", "read-before-signal"}, kinds


# ------------------------------------------------------------------------- tensor descriptors (TMA loads)

@pytest.mark.parametrize("W", [1, 2, 3, 4, 8])
def test_descriptor_loads_are_checked_like_pointer_loads(W):
    """n = 36 against blocks of 16: the descriptor's bounds mask the last block (its zero padding)."""
    r = gather_program(W, 36, desc=True).simulate(reference=gather_reference, calls=2)
    assert r.ok, r.summary()
    assert r.compared


def test_a_descriptor_load_before_its_wait_is_a_race_at_the_load():
    r = gather_program(3, 36, plant="load_before_wait", desc=True).simulate(calls=1, seed=3)
    races = r.of_kind(RACE_READ)
    assert races and {f.loc.line for f in races} == {_line("# DESC-BEFORE-WAIT")}, r.summary()
    assert "before its guarding wait" in races[0].message


def test_a_descriptor_load_whose_offsets_do_not_depend_on_the_token_is_reported():
    r = gather_program(3, 36, plant="no_consume_token", desc=True).simulate(calls=1)
    races = r.of_kind(RACE_READ)
    assert races and {f.loc.line for f in races} == {_line("# DESC-NO-TOKEN")}, r.summary()
    assert "dl.consume_token" in races[0].message


@pytest.mark.parametrize("plant, marker", [("none", None), ("no_consume_token", "# DESC-NO-TOKEN")])
def test_descriptor_loads_under_ditron_language_simulate(plant, marker):
    """The kernel alone (ditron.language.simulate): the same tracking of descriptor loads."""
    W, n, block = 3, 36, 16
    programs = -(-n // block)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(W)]
    args = [dict(x_ptr=xs[r], g_ptr=np.zeros(W * n, np.float32), y_ptr=np.zeros(W * n, np.float32),
                 pad_ptr=np.zeros(W * programs, np.int32), n=n, epoch=1, BLOCK=block, PLANT=PLANTS[plant],
                 DESC=True)
            for r in range(W)]
    ref = [{"y_ptr": np.concatenate(xs)} for _ in range(W)]
    r = dl.simulate(gather, programs, args, world=W, reference=ref)
    if marker is None:
        assert r.ok and r.compared, r.summary()
    else:
        races = r.of_kind(RACE_READ)
        assert races and {f.loc.line for f in races} == {_line(marker)}, r.summary()
