"""@ditron.jit kernels specialised as stock triton.jit specialises its kernels: tt.divisibility = 16 on the pointers
whose address and the integers whose value is a multiple of 16 (a key: a misaligned tensor gets the unspecialised
variant, never wrong code), do_not_specialize / do_not_specialize_on_alignment respected, the assumptions recorded
in a compiled kernel's metadata and checked by the executor before a launch; ditron.tiling.gemm_config, the cost
model's GEMM tiles for user kernels (docs/language.md §3)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import triton.language as tl

import ditron
import ditron.language as dl
from ditron.errors import CompileError, DitronRuntimeError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@ditron.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, x * 2, mask=offs < n)


@ditron.jit(do_not_specialize=["n"], do_not_specialize_on_alignment=[1])
def scale_dns(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, x * 2, mask=offs < n)


SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}


def _divisible_args(ttir: str, kernel: str) -> list[str]:
    """The user parameters (by name location) that carry tt.divisibility = 16 in the tt.func's signature."""
    head = next(line for line in ttir.splitlines() if f"tt.func public @{kernel}" in line)
    params = re.findall(r"%\w+: [^{,]*(\{[^}]*\})? loc\(\"(\w+)\"", head)
    return [name for attrs, name in params if "tt.divisibility = 16" in attrs]


def _aligned_and_not():
    base = torch.zeros(64, dtype=torch.float32)
    assert base.data_ptr() % 16 == 0
    return base, base[1:]            # 4 bytes past a 16-byte boundary


# --------------------------------------------------------------------------------------------- the key

def test_specialization_is_triton_s_rule():
    good, bad = _aligned_and_not()
    assert scale.specialization({"x_ptr": good, "y_ptr": good, "n": 64}) == {"x_ptr", "y_ptr", "n"}
    assert scale.specialization({"x_ptr": bad, "y_ptr": good, "n": 63}) == {"y_ptr"}
    assert scale.specialization({"x_ptr": good, "y_ptr": good, "n": True}) == {"x_ptr", "y_ptr"}  # bools never


def test_ttir_has_divisibility_on_aligned_pointers_and_ints():
    good, _ = _aligned_and_not()
    spec = scale.specialization({"x_ptr": good, "y_ptr": good, "n": 1024})
    text = scale.ttir(signature=SIG, constexprs={"BLOCK": 128}, divisible=spec)
    assert _divisible_args(text, "scale") == ["x_ptr", "y_ptr", "n"]
    # the hidden heap_bases / wait_err keep their own hints; no specialization: no user parameter has one
    plain = scale.ttir(signature=SIG, constexprs={"BLOCK": 128})
    assert _divisible_args(plain, "scale") == []
    assert plain.count("tt.divisibility = 16") == 2


def test_a_misaligned_pointer_gets_the_unspecialised_variant():
    good, bad = _aligned_and_not()
    spec = scale.specialization({"x_ptr": bad, "y_ptr": good, "n": 1024})
    text = scale.ttir(signature=SIG, constexprs={"BLOCK": 128}, divisible=spec)
    assert _divisible_args(text, "scale") == ["y_ptr", "n"]


def test_specialization_changes_the_code_triton_emits():
    """What it is for: with the hints Triton vectorises the loads (128-bit accesses), without them it cannot."""
    good, _ = _aligned_and_not()
    spec = scale.specialization({"x_ptr": good, "y_ptr": good, "n": 1024})
    fast = scale.emit("ptx", signature=SIG, constexprs={"BLOCK": 512}, divisible=spec, num_warps=4)
    slow = scale.emit("ptx", signature=SIG, constexprs={"BLOCK": 512}, num_warps=4)
    assert "ld.global.v4.b32" in fast and "ld.global.v4.b32" not in slow


def test_do_not_specialize_is_respected():
    good, _ = _aligned_and_not()
    assert scale_dns.do_not_specialize == ("n",) and scale_dns.do_not_specialize_on_alignment == ("y_ptr",)
    assert scale_dns.specialization({"x_ptr": good, "y_ptr": good, "n": 1024}) == {"x_ptr"}
    with pytest.raises(CompileError, match="'n', which the kernel lists in @ditron.jit\\(do_not_specialize="):
        scale_dns.ttir(signature=SIG, constexprs={"BLOCK": 128}, divisible={"n"})
    with pytest.raises(CompileError, match="do_not_specialize_on_alignment"):
        scale_dns.ttir(signature=SIG, constexprs={"BLOCK": 128}, divisible={"y_ptr"})


def test_specialization_errors():
    with pytest.raises(TypeError, match="has no parameter 'm'"):
        ditron.jit(do_not_specialize=["m"])(scale.fn)
    with pytest.raises(TypeError, match="index 9 is out of range"):
        ditron.jit(do_not_specialize=[9])(scale.fn)
    with pytest.raises(TypeError, match="'BLOCK' is a tl.constexpr"):
        ditron.jit(do_not_specialize_on_alignment=["BLOCK"])(scale.fn)
    with pytest.raises(TypeError, match="takes only do_not_specialize"):
        ditron.jit(num_warps=4)
    with pytest.raises(CompileError, match="'BLOCK', a tl.constexpr"):
        scale.ttir(signature=SIG, constexprs={"BLOCK": 128}, divisible={"BLOCK"})
    with pytest.raises(CompileError, match="of type 'fp32'"):
        scale.ttir(signature={**SIG, "n": "fp32"}, constexprs={"BLOCK": 128}, divisible={"n"})
    with pytest.raises(CompileError, match="a list"):
        scale.ttir(signature=SIG, constexprs={"BLOCK": 128}, divisible="n")


def test_the_simulator_still_checks_a_specialised_kernel():
    """dl.simulate runs the kernel's Python body: do_not_specialize changes nothing there, the checks all run."""
    n = 50
    args = [{"x_ptr": np.arange(n, dtype=np.float32) + r, "y_ptr": np.zeros(n, np.float32), "n": n, "BLOCK": 32}
            for r in range(2)]
    want = [{"y_ptr": 2 * (np.arange(n, dtype=np.float32) + r)} for r in range(2)]
    assert dl.simulate(scale_dns, (2,), args, world=2, reference=want).ok
    wrong = [{"y_ptr": w["y_ptr"] + 1} for w in want]
    result = dl.simulate(scale_dns, (2,), args, world=2, reference=wrong)
    assert not result.ok and "y_ptr" in result.summary()


# ------------------------------------------------------------------------------- recorded, then checked

def test_compiled_kernel_records_its_specialization():
    from ditron.schema import DIVISIBLE_META
    ck = scale.compile(signature=SIG, constexprs={"BLOCK": 128}, target="cuda:90", divisible={"x_ptr", "n"})
    assert ck.metadata[DIVISIBLE_META] == ["n", "x_ptr"]
    assert _divisible_args(ck.asm["ttir"] if "ttir" in ck.asm else scale.ttir(
        signature=SIG, constexprs={"BLOCK": 128}, divisible={"x_ptr", "n"}), "scale") == ["x_ptr", "n"]


class _Meta:
    ditron_divisible = ["x_ptr", "n"]


class _FakeExecutor:
    """The parts of an Executor that the launch check reads."""
    from ditron.runtime.actions import Actions
    _divisible_args = Actions._divisible_args
    _check_divisible = Actions._check_divisible
    _where = Actions._where

    def __init__(self):
        self._plans = {"scale": [("pointer", "*fp32", "x_ptr"), ("pointer", "*fp32", "y_ptr"),
                                 ("scalar", "i32", "n"), ("rank", "i32", "rank")]}

    def _kernel(self, name):
        return type("K", (), {"metadata": _Meta})()


def test_the_executor_refuses_a_launch_that_breaks_the_assumption():
    from ditron.runtime.program import LaunchAction
    good, bad = _aligned_and_not()
    ex = _FakeExecutor()
    a = LaunchAction.__new__(LaunchAction)
    object.__setattr__(a, "loc", "k.py:3:1")
    object.__setattr__(a, "kernel", "scale")
    claims = ex._divisible_args("scale")
    assert claims == ((0, "x_ptr"), (2, "n"))
    ex._check_divisible(0, a, [good, bad, 64, 0], claims)        # y_ptr is not assumed: fine
    with pytest.raises(DitronRuntimeError, match=r"k.py:3:1: rank 1: @scale was compiled assuming x_ptr, n "
                                                 r"multiples of 16 .*'x_ptr' at address 0x[0-9a-f]+"):
        ex._check_divisible(1, a, [bad, good, 64, 1], claims)
    with pytest.raises(DitronRuntimeError, match="'n' = 63"):
        ex._check_divisible(0, a, [good, good, 63, 0], claims)


# ------------------------------------------------------------------------------------- device programs

def _example(name):
    sys.path.insert(0, str(EXAMPLES))
    import importlib
    return importlib.import_module(name)


def test_a_device_program_specialises_its_jit_kernels():
    """Buffers are assumed aligned (the heap's are; the executor checks inputs / outputs), constant index values
    that are multiples of 16 divisible, run-time ones (the epoch) and odd ones not."""
    from ditron.device.kernel import JIT_KERNELS
    example = _example("ag_gemm_user")
    p = example.program(2, 64, 64, 48, chunk=32, num_sms=4, gemm="jit")
    p.to_mlir()
    (k,) = [k for k in JIT_KERNELS.values() if k.name == "ag_gemm_tiles" and k.constexprs["CHUNK"] == 32
            and k.signature["a_ptr"] == "*bf16" and "K" in k.divisible]
    assert k.divisible == {"a_ptr", "b_ptr", "c_ptr", "ready_ptr", "M", "N", "K", "m"}   # 128, 48, 64, 64; no epoch
    q = example.program(2, 36, 64, 48, chunk=18, num_sms=4, gemm="jit")
    q.to_mlir()
    assert any(k.name == "ag_gemm_tiles" and k.divisible == {"a_ptr", "b_ptr", "c_ptr", "ready_ptr", "N", "K"}
               for k in JIT_KERNELS.values())    # M = 72, m = 36: not multiples of 16


# ------------------------------------------------------------------------------------------ ditron.tiling

def test_gemm_config_is_the_cost_model_s_choice():
    from ditron.cost_model import best_gemm_config, gemm_candidates, peaks_for
    cfg = ditron.tiling.gemm_config(8192, 3584, 4096, "bf16", "cuda:90", sms=62)
    peaks = peaks_for("cuda:90")
    assert cfg in gemm_candidates(peaks, 2)
    assert cfg == best_gemm_config(8192, 3584, 4096, peaks, sms=62)[0]
    with pytest.raises(ValueError, match="m must be a positive int"):
        ditron.tiling.gemm_config(0, 1, 1)
    with pytest.raises(ditron.TargetError, match="dtype 'f64'"):
        ditron.tiling.gemm_config(64, 64, 64, "f64")


def test_the_user_gemm_uses_the_cost_model_s_tiles():
    from ditron.device.kernel import JIT_KERNELS
    example = _example("ag_gemm_user")
    W, m, K, n, sms = 2, 512, 1024, 768, 60
    example.program(W, m, K, n, chunk=128, num_sms=sms, gemm="jit").to_mlir()
    cfg = ditron.tiling.gemm_config(W * m, n, K, "bf16", "cuda:90", sms=sms)
    assert any(k.name == "ag_gemm_tiles" and k.constexprs["CHUNK"] == 128 and k.constexprs["BLOCK_M"] == cfg.block_m
               and k.constexprs["BLOCK_N"] == cfg.block_n and k.constexprs["BLOCK_K"] == cfg.block_k
               and k.options == {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
               for k in JIT_KERNELS.values())


@pytest.mark.slow
def test_the_artifact_records_the_specialization(tmp_path):
    """The AOT path: what a device program's jit kernel assumes is in its launch metadata in the artifact, where
    the executor on a GPU box (no MLIR) reads it before each launch."""
    import json
    example = _example("ag_gemm_user")
    p = example.program(2, 64, 64, 48, chunk=32, num_sms=4, gemm="jit")
    p.compile("cuda:90", out_dir=tmp_path / "art", cache=False, keep_stages=False)
    meta = json.loads((tmp_path / "art" / "ag_gemm_tiles.json").read_text())
    assert meta["ditron_divisible"] == ["K", "M", "N", "a_ptr", "b_ptr", "c_ptr", "m", "ready_ptr"]
    exe = ditron.load(tmp_path / "art")
    assert list(exe.kernels["ag_gemm_tiles"].metadata.ditron_divisible) == meta["ditron_divisible"]


@pytest.mark.gpu
def test_run_virtual_compiles_one_variant_per_key():
    """On the GPU: the heap's arrays are aligned, so the pointers are specialised; n = 1024 and n = 1000 are two
    keys (two variants), both right."""
    from ditron.language import launch
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    before = len(launch._VARIANTS)
    for n in (1024, 1000):
        args = [{"x_ptr": np.arange(n, dtype=np.float32) + r, "y_ptr": np.zeros(n, np.float32), "n": n,
                 "BLOCK": 256} for r in range(2)]
        out = dl.run_virtual(scale, (-(-n // 256),), args, world=2)
        for r in range(2):
            np.testing.assert_array_equal(out[r]["y_ptr"], 2 * (np.arange(n, dtype=np.float32) + r))
    keys = list(launch._VARIANTS)[before:]
    assert [k[4] for k in keys] == [("n", "x_ptr", "y_ptr"), ("x_ptr", "y_ptr")]


@pytest.mark.parametrize("gemm", ["jit", "jit_tma"])
def test_the_user_gemm_compiles_to_the_fast_loads(gemm):
    """ag_gemm_user's user GEMM at the benchmark's 70B shape (bench_user_kernels --quick, W = 2), as ptxas builds it
    for sm_90a on this CPU box: the pointer kernel specialised EVEN_K (no mask in its K loop) and every cp.async 16
    bytes; the TMA kernel's operands through cp.async.bulk.tensor only; neither spills (H200: 1.03-1.08x and
    0.99-1.04x the built-in's time, benchmarks/results/README.md)."""
    from ditron.backends.nvidia.ptxas import ptxas_info
    from ditron.device.kernel import JIT_KERNELS
    example = _example("ag_gemm_user")
    W, m, K, n = 2, 512, 8192, 14336
    example.program(W, m, K, n, num_sms=64, gemm=gemm).to_mlir()
    name = "ag_gemm_tiles_tma" if gemm == "jit_tma" else "ag_gemm_tiles"
    (k,) = {id(k): k for k in JIT_KERNELS.values() if k.name == name and k.constexprs["CHUNK"] == m
            and k.signature["a_ptr"] == "*bf16" and k.divisible and k.options["num_warps"] == 8}.values()
    ptx = k.fn.emit("ptx", signature=k.signature, constexprs=k.constexprs, divisible=k.divisible, target="cuda:90",
                    **k.options)
    copies = re.findall(r"cp\.async\.cg\.shared\.global \[[^]]*\], \[[^]]*\], (0x[0-9a-f]+)", ptx)
    if gemm == "jit":
        assert k.constexprs["EVEN_K"] is True
        assert copies and set(copies) == {"0x10"}, sorted(set(copies))
    else:
        assert not copies and "cp.async.bulk.tensor" in ptx
    info = ptxas_info(ptx, 90)
    assert info.spill_stores == 0 and info.spill_loads == 0 and not info.serialized_wgmma, info.log
