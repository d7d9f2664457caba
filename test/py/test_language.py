"""ditron.language at the core level: @ditron.jit kernels compiled by stock Triton for every target, their errors,
and the simulator checking them (examples at W = 1, 2, 3, 4, 8 with sizes that do not divide evenly; mutants of
the examples: a removed notify, wait or consume_token, a wrong index)."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import triton
import triton.language as tl

import ditron
import ditron.language as dl
from ditron.errors import CompileError, DitronRuntimeError
from ditron.schema import APPENDED_ARGS
from ditron.sim.report import SimulationError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TARGETS = ("cuda:80", "cuda:90", "hip:gfx942", "hip:gfx950")


def _line(fn, text: str) -> int:
    """The file line of the first source line of fn containing text."""
    import inspect
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


@ditron.jit
def every_primitive(x_ptr, out_ptr, pad_ptr, bar_ptr, n, BLOCK: tl.constexpr):
    me = dl.rank()
    world = dl.num_ranks()
    offs = tl.arange(0, BLOCK)
    for peer in range(0, world):
        dl.notify(pad_ptr, me, 1, peer)
    token = dl.wait(pad_ptr, tl.arange(0, 4), 1, scope="sys", semantic="acquire")
    x = tl.load(dl.symm_at(dl.consume_token(x_ptr, token), (me + 1) % world) + offs, mask=offs < n)
    tl.store(out_ptr + offs, x, mask=offs < n)
    dl.notify(pad_ptr, me, 1, 0, op="add", scope="gpu")
    dl.notify(pad_ptr, me, 1, 0, op="clear")
    dl.barrier_all(bar_ptr)


SIG = {"x_ptr": "*fp16", "out_ptr": "*fp16", "pad_ptr": "*i32", "bar_ptr": "*i32", "n": "i32"}
# what each target's primitives module must have put into the assembly
ASM_MARKS = {"cuda": ("ld.acquire.sys.global.b32", "nanosleep.u32", "atom.global.sys.release.exch.b32",
                      "atom.global.gpu.release.add", "cas.b32", "mov.b32"),
             "hip": ("global_atomic_add", "global_atomic_swap", "global_atomic_cmpswap", "s_sleep", "buffer_wbl2")}


# ---------------------------------------------------------------------------------------------- compiling

@pytest.mark.parametrize("target", TARGETS)
def test_every_primitive_compiles_for_every_target(target):
    kernel = every_primitive.compile(signature=SIG, constexprs={"BLOCK": 64}, target=target)
    vendor = target.split(":")[0]
    asm_stage = "ptx" if vendor == "cuda" else "amdgcn"
    assert list(kernel.asm) == ["ttir", "ttgir", "llir", asm_stage]
    assert kernel.binary, "no cubin / hsaco"
    assert kernel.metadata["abi"] == [[n, k] for n, k in zip(APPENDED_ARGS, ("i32", "i32", "*i64", "i64", "*i32",
                                                                             "i32"))]
    # the user's non-constexpr parameters, then the six hidden ones
    assert kernel.metadata["signature"] == ["*f16", "*f16", "*i32", "*i32", "i32", "i32", "i32", "*i64", "i64",
                                            "*i32", "i32"]
    for mark in ASM_MARKS[vendor]:
        assert mark in kernel.asm[asm_stage], f"{mark!r} missing from the {asm_stage} for {target}"
    assert "tt.divisibility = 16" in kernel.asm["ttir"]       # heap_bases / wait_err alignment hints
    # the TTIR keeps the kernel's Python source lines as locations
    assert f"test_language.py\":{_line(every_primitive.fn, 'dl.barrier_all')}" in kernel.asm["ttir"]


def test_ttir_and_emit_stages():
    text = every_primitive.ttir(signature=SIG, constexprs={"BLOCK": 32}, target="cuda:90")
    assert "tt.func public @every_primitive" in text and "scf.while" in text
    assert "ld.acquire.sys.global.b32" in every_primitive.emit("ptx", signature=SIG, constexprs={"BLOCK": 32})
    assert '"ttg.num-warps" = 8' in every_primitive.emit("ttgir", signature=SIG, constexprs={"BLOCK": 32},
                                                         num_warps=8)


def test_ttir_text_compiles_with_triton_compile(tmp_path):
    """run_virtual hands the TTIR after Triton's ttir passes to triton.compile as a .ttir file."""
    from triton.backends.compiler import GPUTarget
    path = tmp_path / "k.ttir"
    path.write_text(every_primitive.emit("ttir", signature=SIG, constexprs={"BLOCK": 32}, target="cuda:90"))
    compiled = triton.compile(str(path), target=GPUTarget("cuda", 90, 32))
    assert "ld.acquire.sys.global.b32" in compiled.asm["ptx"]


def test_template_lowering_still_uses_the_primitives_modules():
    """ditron-lower-core-to-triton builds the same vendor pieces through MlirOps."""
    from ditron.backends import get_backend
    from ditron.backends.ops import MLIR_OPS, MlirOps
    assert isinstance(MLIR_OPS, MlirOps)
    for target in ("cuda:90", "hip:gfx942"):
        prims = get_backend(target).primitives
        assert {"acquire_load", "release_rmw", "clear_slot", "opaque_zero", "pause"} <= set(dir(prims))
        assert "mlir" not in prims.__dict__, "primitives modules build through the ops object only"


# ------------------------------------------------------------------------------------------------- errors

@ditron.jit
def bad_pad_type(x_ptr, pad_ptr):
    t = dl.wait(x_ptr, 0, 1)
    tl.store(pad_ptr, t)


@ditron.jit
def bad_scope(x_ptr, pad_ptr):
    dl.notify(pad_ptr, 0, 1, 0, scope="cluster")


@ditron.jit
def bad_peer(x_ptr, pad_ptr):
    p = dl.symm_at(x_ptr, 1.5)
    tl.store(p, 1.0)


@ditron.jit
def bad_token(x_ptr, pad_ptr):
    p = dl.consume_token(x_ptr, x_ptr)
    tl.store(p, 1.0)


@ditron.jit
def bad_barrier(x_ptr, pad_ptr):
    dl.barrier_all(pad_ptr + tl.arange(0, 4))


@triton.jit
def _helper_with_rank(x_ptr):
    tl.store(x_ptr, dl.rank())


@ditron.jit
def rank_in_helper(x_ptr, pad_ptr):
    _helper_with_rank(pad_ptr)


@triton.jit
def plain_triton_kernel(x_ptr, pad_ptr):
    tl.store(pad_ptr, dl.rank())


BAD = [(bad_pad_type, "dl.wait(", r"dl\.wait: pad_ptr must be a pointer to int32 signal slots .*got .*fp32"),
       (bad_scope, "dl.notify(", r"dl\.notify: scope='cluster': must be one of 'gpu', 'sys'"),
       (bad_peer, "dl.symm_at(", r"dl\.symm_at: peer must be an integer, got float 1\.5"),
       (bad_token, "dl.consume_token(", r"dl\.consume_token: token must be an integer"),
       (bad_barrier, "dl.barrier_all(", r"dl\.barrier_all: pad_ptr must be a scalar pointer"),
       (rank_in_helper, "_helper_with_rank(", r"must be called in the body of the @ditron\.jit kernel itself")]


@pytest.mark.parametrize("kernel,text,message", BAD, ids=[b[0].__name__ for b in BAD])
def test_bad_kernels_give_located_errors(kernel, text, message):
    with pytest.raises(CompileError) as info:
        kernel.ttir(signature={"x_ptr": "*fp32", "pad_ptr": "*i32"}, target="cuda:90")
    line = _line(kernel.fn, text)
    assert re.search(rf"test_language\.py:{line}:\d+: error: ", str(info.value)), str(info.value)
    assert re.search(message, str(info.value)), str(info.value)


def test_plain_triton_kernel_using_dl_is_refused():
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource
    with pytest.raises(Exception, match=r"needs a @ditron\.jit kernel"):
        triton.compile(ASTSource(plain_triton_kernel, signature={"x_ptr": "*fp32", "pad_ptr": "*i32"}),
                       target=GPUTarget("cuda", 90, 32))


def test_signature_errors():
    with pytest.raises(CompileError, match=r"give the type of 'n'"):
        every_primitive.ttir(signature={k: v for k, v in SIG.items() if k != "n"}, constexprs={"BLOCK": 8})
    with pytest.raises(CompileError, match=r"has no parameter 'm'"):
        every_primitive.ttir(signature={**SIG, "m": "i32"}, constexprs={"BLOCK": 8})
    with pytest.raises(CompileError, match=r"'n' is not tl.constexpr"):
        every_primitive.ttir(signature=SIG, constexprs={"BLOCK": 8, "n": 3})
    with pytest.raises(ditron.TargetError, match="unsupported target"):
        every_primitive.ttir(signature=SIG, constexprs={"BLOCK": 8}, target="cuda:75")


def test_launch_without_a_world_is_a_clear_error():
    with pytest.raises(DitronRuntimeError, match=r"@ditron\.jit kernel: it runs in a world of ranks"):
        every_primitive[(1,)](1, 2, 3)
    with pytest.raises(TypeError, match="cannot be called as a Python function"):
        every_primitive(1)


def test_run_virtual_without_a_gpu_is_a_clear_error():
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(DitronRuntimeError, match=r"run_virtual: no GPU .* ditron\.language\.simulate"):
        dl.run_virtual(every_primitive, 1, [dict(x_ptr=np.zeros(4, np.float16), out_ptr=np.zeros(4, np.float16),
                                                 pad_ptr=np.zeros(4, np.int32), bar_ptr=np.zeros(2, np.int32),
                                                 n=4, BLOCK=4)], world=1)


# --------------------------------------------------------------------------------------------- simulating

def _load_example(name: str, source: str | None = None, tmp_path: Path | None = None):
    """The example module; with source, a mutated copy written under tmp_path (the simulator reads its lines)."""
    path = EXAMPLES / f"{name}.py"
    if source is not None:
        path = tmp_path / f"{name}_mutant.py"
        path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def _mutant(name: str, old: str, new: str, tmp_path: Path):
    source = (EXAMPLES / f"{name}.py").read_text()
    assert source.count(old) == 1, f"the mutation site {old!r} is not unique in {name}.py"
    module = _load_example(name, source.replace(old, new), tmp_path)
    line = 1 + source[:source.index(old)].count("\n")
    return module, module.__file__, line


def _simulate(module, kernel, world, n, block, seed=0):
    args, _ = module.make_args(world, n, block)
    return dl.simulate(kernel, module.grid(n, block), args, world=world, reference=module.reference, seed=seed,
                       rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_all_reduce_one_shot_simulated(world):
    ex = _load_example("all_reduce_one_shot")
    result = _simulate(ex, ex.all_reduce_one_shot, world, n=157, block=32)    # 4 full blocks + 29
    assert result.ok, result.summary()
    assert result.compared
    expected = sum(a["x_ptr"].astype(np.float64) for a in ex.make_args(world, 157, 32)[0])
    for r in range(world):
        np.testing.assert_allclose(result.outputs[r]["out_ptr"], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_ring_all_gather_simulated(world):
    ex = _load_example("ring_all_gather")
    result = _simulate(ex, ex.ring_all_gather, world, n=45, block=16, seed=world)    # 2 full blocks + 13
    assert result.ok, result.summary()
    xs = ex.make_args(world, 45, 16)[1]
    for r in range(world):
        np.testing.assert_array_equal(result.outputs[r]["out_ptr"], np.concatenate(xs))


MUTANTS = [
    # (example, kernel, old, new, kind, what the message says, the line the finding is at: the mutated line + dy)
    ("all_reduce_one_shot", "all_reduce_one_shot", "        dl.notify(pad_ptr, me * programs + pid, epoch, peer)\n",
     "        pass\n", "deadlock", r"waits forever for pad_ptr\[\d+\] of rank \d \(holds 0\) to reach 1", "wait"),
    ("all_reduce_one_shot", "all_reduce_one_shot", "token = dl.wait(pad_ptr, peer * programs + pid, epoch)",
     "token = 0", "read-before-signal", r"before its guarding wait", "tl.load"),
    ("all_reduce_one_shot", "all_reduce_one_shot", "dl.consume_token(x_ptr, token)", "x_ptr",
     "read-before-signal", r"does not depend on the wait's token: pass the pointer through dl.consume_token",
     "tl.load"),
    ("all_reduce_one_shot", "all_reduce_one_shot", "peer = (me + i) % world", "peer = (me + 1) % world",
     "mismatch", r"'out_ptr' differs from the reference .* \(last stored at line \d+\)", "tl.store(out_ptr"),
    ("ring_all_gather", "ring_all_gather", "        dl.notify(pad_ptr, chunk * programs + pid, epoch, nxt)\n",
     "", "deadlock", r"waits forever", "dl.wait"),
    ("ring_all_gather", "ring_all_gather", "tl.store(dl.symm_at(out_ptr, nxt) + chunk * n + offs",
     "tl.store(dl.symm_at(out_ptr, nxt) + me * n + offs", "mismatch", r"'out_ptr' differs from the reference",
     None),    # (at W = 2 the one step forwards chunk me: the same program; the test runs it at W + 1)
    ("all_reduce_one_shot", "all_reduce_one_shot", "tl.store(out_ptr + offs, acc",
     "tl.store(dl.symm_at(out_ptr, 0) + offs, acc", "write-write", r"racing writes to out_ptr\[\d+\] of rank 0",
     "tl.store("),
]


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("mutant", MUTANTS, ids=[f"{m[0]}:{m[4]}:{i}" for i, m in enumerate(MUTANTS)])
def test_mutants_are_caught_at_their_line(mutant, world, tmp_path):
    name, kernel_name, old, new, kind, message, at = mutant
    if at is None:
        world += 1
    module, path, _ = _mutant(name, old, new, tmp_path)
    kernel = getattr(module, kernel_name)
    result = _simulate(module, kernel, world, n=70, block=32)
    found = result.of_kind(kind)
    assert found, result.summary()
    if at is None:      # an element no one stores: no line to name
        located = found
    else:
        line = _line(kernel.fn, at)
        located = [f for f in found if f.loc.file == path and f.loc.line == line]
        assert located, f"no {kind} at {path}:{line}:\n{result.summary()}"
    assert re.search(message, str(located[0])), str(located[0])


def test_sim_bad_primitive_arguments_are_located():
    args = [dict(x_ptr=np.zeros(4, np.float32), pad_ptr=np.zeros(4, np.int32))]
    with pytest.raises(SimulationError) as info:
        dl.simulate(bad_scope, 1, args, world=1)
    assert f"test_language.py:{_line(bad_scope.fn, 'dl.notify(')}:" in str(info.value)
    assert "scope='cluster'" in str(info.value)


@ditron.jit
def out_of_bounds(x_ptr, pad_ptr, n):
    offs = tl.arange(0, 8)
    tl.store(dl.symm_at(x_ptr, dl.rank()) + offs, offs.to(tl.float32))


@ditron.jit
def peer_outside(x_ptr, pad_ptr, n):
    dl.notify(pad_ptr, 0, 1, dl.num_ranks())


def test_sim_out_of_bounds_and_bad_peer():
    args = [dict(x_ptr=np.zeros(5, np.float32), pad_ptr=np.zeros(2, np.int32), n=5) for _ in range(2)]
    result = dl.simulate(out_of_bounds, 1, args, world=2)
    assert result.of_kind("out-of-bounds"), result.summary()
    assert result.of_kind("out-of-bounds")[0].loc.line == _line(out_of_bounds.fn, "tl.store")
    result = dl.simulate(peer_outside, 1, args, world=2)
    assert "dl.notify to peer 2, outside the world of 2 ranks" in result.summary()


def test_sim_argument_errors():
    ex = _load_example("ring_all_gather")
    args, _ = ex.make_args(2, 10, 8)
    with pytest.raises(SimulationError, match="args_per_rank has 2 entries for a world of 3"):
        dl.simulate(ex.ring_all_gather, 2, args, world=3)
    args[1]["out_ptr"] = np.zeros(3, np.float32)
    with pytest.raises(SimulationError, match="symmetric array: every rank needs the same dtype and shape"):
        dl.simulate(ex.ring_all_gather, 2, args, world=2)
    with pytest.raises(SimulationError, match="missing argument"):
        dl.simulate(ex.ring_all_gather, 2, [{"x_ptr": np.zeros(2, np.float32)}], world=1)
    with pytest.raises(SimulationError, match="@ditron.jit kernel"):
        dl.simulate(plain_triton_kernel, 1, [{}], world=1)


def test_compiling_after_simulating_is_unaffected():
    """The simulator's patches of triton.language are undone."""
    ex = _load_example("ring_all_gather")
    args, _ = ex.make_args(2, 10, 8)
    assert dl.simulate(ex.ring_all_gather, ex.grid(10, 8), args, world=2).ok
    text = ex.ring_all_gather.ttir(signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "pad_ptr": "*i32", "n": "i32",
                                              "epoch": "i32"}, constexprs={"BLOCK": 8})
    assert "scf.while" in text


def test_same_seed_same_result_and_seeds_vary():
    ex = _load_example("all_reduce_one_shot")
    a = _simulate(ex, ex.all_reduce_one_shot, 3, n=40, block=16, seed=5)
    b = _simulate(ex, ex.all_reduce_one_shot, 3, n=40, block=16, seed=5)
    assert a.ok and b.ok
    for r in range(3):
        np.testing.assert_array_equal(a.outputs[r]["out_ptr"], b.outputs[r]["out_ptr"])


@ditron.jit
def exchange_after_barrier(x_ptr, bar_ptr, FENCE: tl.constexpr):
    me = dl.rank()
    tl.store(x_ptr + me, me.to(tl.float32) + 1.0)
    if FENCE:
        dl.barrier_all(bar_ptr)
    y = tl.load(dl.symm_at(x_ptr, (me + 1) % dl.num_ranks()) + (me + 1) % dl.num_ranks())
    tl.store(x_ptr + dl.num_ranks() + me, y)


@pytest.mark.parametrize("world", [2, 3])
def test_sim_barrier_all_orders_everything(world):
    def args():
        return [dict(x_ptr=np.zeros(2 * world, np.float32), bar_ptr=np.zeros(world + 1, np.int32), FENCE=True)
                for _ in range(world)]
    expected = []
    for r in range(world):
        x = np.zeros(2 * world, np.float32)
        x[r], x[world + r] = r + 1, (r + 1) % world + 1      # my store, then the next rank's, read after the barrier
        expected.append({"x_ptr": x})
    result = dl.simulate(exchange_after_barrier, 1, args(), world=world, reference=expected)
    assert result.ok, result.summary()
    assert all(int(result.outputs[r]["bar_ptr"][world]) == 1 for r in range(world))   # one generation
    racy = args()
    for row in racy:
        row["FENCE"] = False
    result = dl.simulate(exchange_after_barrier, 1, racy, world=world)
    race = result.of_kind("read-before-signal")
    assert race and race[0].loc.line == _line(exchange_after_barrier.fn, "y = tl.load"), result.summary()


@triton.jit
def _helper_notifies(pad_ptr):
    dl.notify(pad_ptr, 0, 1, 0)


@ditron.jit
def helper_kernel(x_ptr, pad_ptr):
    _helper_notifies(pad_ptr)


def test_sim_refuses_primitives_in_helpers_like_the_compiler():
    with pytest.raises(SimulationError, match=r"dl\.notify\(\) must be called in the body of the @ditron\.jit"):
        dl.simulate(helper_kernel, 1, [dict(x_ptr=np.zeros(1, np.float32), pad_ptr=np.zeros(1, np.int32))],
                    world=1)


@ditron.jit
def relaxed_wait(x_ptr, pad_ptr, SEMANTIC: tl.constexpr):
    me = dl.rank()
    if me == 0:
        tl.store(dl.symm_at(x_ptr, 1), 5.0)
        dl.notify(pad_ptr, 0, 1, 1)
    else:
        token = dl.wait(pad_ptr, 0, 1, semantic=SEMANTIC)
        tl.store(x_ptr + 1, tl.load(dl.consume_token(x_ptr, token)))


def test_sim_relaxed_wait_orders_nothing():
    def args(semantic):
        return [dict(x_ptr=np.zeros(2, np.float32), pad_ptr=np.zeros(1, np.int32), SEMANTIC=semantic)
                for _ in range(2)]
    good = dl.simulate(relaxed_wait, 1, args("acquire"), world=2)
    assert good.ok and good.outputs[1]["x_ptr"].tolist() == [5.0, 5.0], good.summary()
    bad = dl.simulate(relaxed_wait, 1, args("relaxed"), world=2)
    assert [f.loc.line for f in bad.of_kind("read-before-signal")] == [_line(relaxed_wait.fn, "tl.load(")]


@ditron.jit
def spins_on_a_plain_load(x_ptr, flag_ptr):
    if dl.rank() == 0:
        while tl.load(flag_ptr) == 0:
            pass
    tl.store(x_ptr, 1.0)


def test_sim_a_spin_that_never_ends_is_reported():
    args = [dict(x_ptr=np.zeros(1, np.float32), flag_ptr=np.zeros(1, np.int32)) for _ in range(2)]
    result = dl.simulate(spins_on_a_plain_load, 1, args, world=2, max_switches=50)
    found = result.of_kind("deadlock")
    assert found and "has not finished after 50 switches" in found[0].message, result.summary()
    assert found[0].rank == 0 and found[0].loc.line == _line(spins_on_a_plain_load.fn, "while tl.load")


def test_compiling_and_launching_need_no_mlir_bindings():
    """@ditron.jit kernels compile with stock Triton alone: a machine with torch + triton (the GPU machine) compiles
    and launches them with the MLIR bindings unimportable."""
    import subprocess
    import textwrap
    code = textwrap.dedent(f"""
        import sys
        class _NoMLIR:
            def find_spec(self, name, path=None, target=None):
                if name == "mlir" or name.startswith(("mlir.", "ditron.dialects", "ditron.passes", "ditron.sim")):
                    raise ImportError("test: " + name + " must not be imported")
        sys.meta_path.insert(0, _NoMLIR())
        sys.path.insert(0, {str(EXAMPLES)!r})
        import ring_all_gather as ex
        import ditron.language as dl
        ck = ex.ring_all_gather.compile(signature={{"x_ptr": "*fp32", "out_ptr": "*fp32", "pad_ptr": "*i32",
                                                   "n": "i32", "epoch": "i32"}}, constexprs={{"BLOCK": 32}},
                                        target="cuda:90")
        assert ck.binary and ck.metadata["abi"]
        dl.run_virtual   # importable
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


@ditron.jit
def with_default(x_ptr, pad_ptr, BLOCK: tl.constexpr = 8):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, offs.to(tl.float32) + dl.rank().to(tl.float32))


def test_constexpr_defaults_are_used():
    text = with_default.ttir(signature={"x_ptr": "*fp32", "pad_ptr": "*i32"}, target="hip:gfx950")
    assert "tt.make_range" in text and "end = 8" in text
    result = dl.simulate(with_default, 1, [(np.zeros(8, np.float32), np.zeros(1, np.int32)) for _ in range(2)],
                         world=2, reference=[{"x_ptr": np.arange(8) + r} for r in range(2)])
    assert result.ok and result.compared, result.summary()


def test_compiled_kernel_fits_an_artifact(tmp_path):
    """What the device-level builder does with a @ditron.jit kernel: its ABI as ditron.compile's kernels have it,
    written into an artifact."""
    from ditron import __version__
    from ditron.api import kernel_abi, kernel_signature
    from ditron.artifact import read_manifest, write_artifact
    ck = every_primitive.compile(signature=SIG, constexprs={"BLOCK": 16}, target="cuda:90")
    args = kernel_abi(ck, user_names=every_primitive.runtime_arg_names)
    assert [a.name for a in args] == ["x_ptr", "out_ptr", "pad_ptr", "bar_ptr", "n", *APPENDED_ARGS]
    assert [a.kind for a in args][-6:] == list(APPENDED_ARGS)
    from ditron.backends import Target
    write_artifact(tmp_path / "art", target=Target.parse("cuda:90"), options={}, options_hash="0",
                   kernels=[(ck, kernel_signature(ck), args)], ditron_version=__version__,
                   triton_version=triton.__version__)
    assert read_manifest(tmp_path / "art").kernels[0].args == args
