"""Backends: targets, options, the stage driver into Triton, compiled-kernel metadata (CPU only). Loading and
launching compiled kernels is the loader's (test_artifact.py, test_loader_no_mlir.py)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from ditron.backends import CompiledKernel, Target, get_backend, supported_targets, target_facts
from ditron.backends.base import LAUNCH_KEYS
from ditron.errors import CompileError, TargetError

TARGETS = ["cuda:90", "cuda:80", "hip:gfx942"]

# A plain TTIR kernel (generic form): copy 1024 bf16, then a release exchange on a flag.
COPY_TTIR = """
"builtin.module"() ({
  "tt.func"() ({
  ^bb0(%x: !tt.ptr<bf16>, %y: !tt.ptr<bf16>, %flag: !tt.ptr<i32>):
    %c1 = "arith.constant"() <{value = 1 : i32}> : () -> i32
    %true = "arith.constant"() <{value = true}> : () -> i1
    %r = "tt.make_range"() <{end = 1024 : i32, start = 0 : i32}> : () -> tensor<1024xi32>
    %xs = "tt.splat"(%x) : (!tt.ptr<bf16>) -> tensor<1024x!tt.ptr<bf16>>
    %xp = "tt.addptr"(%xs, %r) : (tensor<1024x!tt.ptr<bf16>>, tensor<1024xi32>) -> tensor<1024x!tt.ptr<bf16>>
    %v = "tt.load"(%xp) {cache = 1 : i32, evict = 1 : i32, isVolatile = false, operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1024x!tt.ptr<bf16>>) -> tensor<1024xbf16>
    %ys = "tt.splat"(%y) : (!tt.ptr<bf16>) -> tensor<1024x!tt.ptr<bf16>>
    %yp = "tt.addptr"(%ys, %r) : (tensor<1024x!tt.ptr<bf16>>, tensor<1024xi32>) -> tensor<1024x!tt.ptr<bf16>>
    "tt.store"(%yp, %v) {cache = 1 : i32, evict = 1 : i32} : (tensor<1024x!tt.ptr<bf16>>, tensor<1024xbf16>) -> ()
    %a = "tt.atomic_rmw"(%flag, %c1, %true) {atomic_rmw_op = 10 : i32, scope = 3 : i32, sem = 3 : i32} : (!tt.ptr<i32>, i32, i1) -> i32
    "tt.return"() : () -> ()
  }) {arg_attrs = [{tt.divisibility = 16 : i32}, {tt.divisibility = 16 : i32}, {}], function_type = (!tt.ptr<bf16>, !tt.ptr<bf16>, !tt.ptr<i32>) -> (), sym_name = "copy_flag", sym_visibility = "public"} : () -> ()
}) : () -> ()
"""


@pytest.fixture(scope="module")
def compiled() -> dict[str, CompiledKernel]:
    return {t: get_backend(t).compile(COPY_TTIR) for t in TARGETS}


# ------------------------------------------------------------------------------------------------------ targets

@pytest.mark.parametrize("text,vendor,arch,warp", [
    ("cuda:90", "cuda", 90, 32), ("cuda:80", "cuda", 80, 32), ("hip:gfx942", "hip", "gfx942", 64),
    ("hip:gfx950", "hip", "gfx950", 64), ("cuda:sm_90a", "cuda", 90, 32)])
def test_target_parse(text, vendor, arch, warp):
    t = Target.parse(text)
    assert (t.vendor, t.arch, t.warp_size) == (vendor, arch, warp)
    assert str(t) == f"{vendor}:{arch}"
    assert Target.parse(str(t)) == t and Target.parse(t) is t


@pytest.mark.parametrize("text", ["cuda:70", "hip:gfx90a", "cuda", "rocm:gfx942", "", "cuda:9x"])
def test_target_parse_rejects(text):
    with pytest.raises(TargetError) as err:
        Target.parse(text)
    assert f"unsupported target '{text}'" in str(err.value)
    assert "supported targets: cuda:80, cuda:90, hip:gfx942, hip:gfx950" in str(err.value)


@pytest.mark.parametrize("text,meant", [(" cuda:90", "cuda:90"), ("CUDA:90", "cuda:90"), ("hip:GFX942 ", "hip:gfx942"),
                                        ("CUDA:sm_90a", "cuda:sm_90a")])
def test_target_parse_rejects_spaces_and_capitals(text, meant):
    """A target written with spaces or capitals is refused, naming the one meant (it was accepted silently)."""
    with pytest.raises(TargetError, match=f"did you mean '{meant}'"):
        Target.parse(text)


def test_supported_targets_and_backends():
    assert supported_targets() == ["cuda:80", "cuda:90", "hip:gfx942", "hip:gfx950"]
    for t in supported_targets():
        backend = get_backend(t)
        assert str(backend.target) == t
        assert backend.stage_names[-1] == ("cubin" if t.startswith("cuda") else "hsaco")
        assert set(dir(backend.primitives)) >= {"acquire_load", "release_rmw", "opaque_zero", "pause"}


# ------------------------------------------------------------------------------------------------------ options

def test_options_defaults_and_overrides():
    nv = get_backend("cuda:90").options()
    assert (nv.num_warps, nv.num_stages, nv.num_ctas) == (4, 3, 1)
    amd = get_backend("hip:gfx942").options(num_warps=8, kpack=2)
    assert (amd.num_warps, amd.num_stages, amd.kpack) == (8, 2, 2)
    with pytest.raises(Exception):
        nv.num_warps = 8  # frozen


def test_options_hash_is_deterministic():
    b = get_backend("cuda:90")
    assert b.options().hash() == b.options().hash()
    assert b.options(num_stages=4).hash() != b.options().hash()
    assert len(b.options().hash()) == 64
    assert get_backend("hip:gfx942").options().hash() != b.options().hash()


def test_options_unknown_name_lists_known():
    with pytest.raises(TargetError) as err:
        get_backend("cuda:90").options(num_warp=8)
    assert "unknown option 'num_warp' for target cuda:90" in str(err.value)
    assert "num_warps" in str(err.value) and "maxnreg" in str(err.value)
    with pytest.raises(TargetError, match="known options: .*waves_per_eu"):
        get_backend("hip:gfx942").options(maxnreg=128)


@pytest.mark.parametrize("target,overrides,message", [
    ("cuda:90", {"num_warps": 3}, "num_warps=3: must be a power of two"),
    ("cuda:90", {"num_warps": 64}, "num_warps=64"),
    ("cuda:90", {"num_stages": 0}, "num_stages=0"),
    ("cuda:90", {"maxnreg": 4}, "maxnreg=4"),
    ("cuda:80", {"num_ctas": 2}, "needs thread-block clusters (sm_90+)"),
    ("hip:gfx942", {"num_ctas": 2}, "AMD targets take num_ctas=1"),
    ("hip:gfx942", {"num_warps": 32}, "from 1 to 16"),
    ("hip:gfx942", {"matrix_instr_nonkdim": 8}, "must be 0, 16 or 32"),
    ("hip:gfx950", {"kpack": 2}, "gfx950 takes kpack=1"),
    ("cuda:90", {"debug": "yes"}, "must be true or false"),
])
def test_options_validation(target, overrides, message):
    with pytest.raises(TargetError, match=message.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        get_backend(target).options(**overrides)


def test_cluster_option_on_hopper():
    assert get_backend("cuda:90").options(num_ctas=2).num_ctas == 2


# ------------------------------------------------------------------------------------------------- enum values

def test_ttir_enum_values_match_triton():
    from triton._C.libtriton import ir as tir

    from ditron.dialects import ttir
    for name, value in ttir.RMW.items():
        assert int(getattr(tir.ATOMIC_OP, name.upper())) == value
    for name, value in ttir.SEM.items():
        assert int(getattr(tir.MEM_SEMANTIC, name.upper().replace("ACQ_REL", "ACQUIRE_RELEASE"))) == value
    assert {k: int(v) for k, v in tir.MEM_SYNC_SCOPE.__members__.items()} == {"GPU": 1, "CTA": 2, "SYSTEM": 3}
    assert ttir.SCOPE == {"gpu": 1, "cta": 2, "sys": 3}
    assert {k: int(v) for k, v in tir.CACHE_MODIFIER.__members__.items()} == {
        (name.upper() or "NONE"): value for name, value in ttir.CACHE.items()}
    assert {k: int(v) for k, v in tir.EVICTION_POLICY.__members__.items()} == {
        (name.upper() or "NORMAL"): value for name, value in ttir.EVICT.items()}
    for name, value in ttir.PRECISION.items():
        assert int(getattr(tir.INPUT_PRECISION, name.upper().replace("X3", "x3"))) == value


# ---------------------------------------------------------------------------------------------------- compiling

@pytest.mark.parametrize("target", TARGETS)
def test_compile_plain_kernel(compiled, target):
    k = compiled[target]
    assert k.name == "copy_flag" and k.target == target
    assert k.binary[:4] == b"\x7fELF"
    assert b"copy_flag" in k.binary
    asm_ext = "ptx" if target.startswith("cuda") else "amdgcn"
    assert list(k.asm) == ["ttir", "ttgir", "llir", asm_ext]
    assert "tt.func public @copy_flag" in k.asm["ttir"]
    assert "ttg.num-warps" in k.asm["ttgir"]
    if target.startswith("cuda"):
        assert f".target sm_{target[5:]}{'a' if target == 'cuda:90' else ''}" in k.asm["ptx"]
        assert "ld.global.v4.b32" in k.asm["ptx"]          # tt.divisibility on the arguments vectorizes
        assert "atom.global.sys.release.exch.b32" in k.asm["ptx"]
    else:
        assert ".amdgcn_target \"amdgcn-amd-amdhsa--gfx942" in k.asm["amdgcn"]
        assert "global_atomic_swap" in k.asm["amdgcn"] and "buffer_wbl2" in k.asm["amdgcn"]


@pytest.mark.parametrize("target", TARGETS)
def test_metadata_is_what_triton_launches_with(compiled, target):
    k = compiled[target]
    md = json.loads(json.dumps(k.metadata))
    assert md == k.metadata
    assert set(LAUNCH_KEYS) <= set(md) and set(get_backend(target).LAUNCH_KEYS) <= set(md)
    assert md["signature"] == ["*bf16", "*bf16", "*i32"]
    assert md["num_warps"] == 4 and md["num_ctas"] == 1 and md["triton_version"] == "3.6.0"
    assert md["target"]["backend"] == target.split(":")[0] and md["ditron_target"] == target
    assert md["name"] == "copy_flag" and isinstance(md["shared"], int)


def test_backends_import_no_mlir():
    """Nothing in ditron.backends imports the MLIR bindings (nor triton) until a compile or a primitive lowering."""
    code = ("import sys, ditron.backends; "
            "bad = [m for m in sys.modules if m == 'mlir' or m.startswith('mlir.') or m == 'triton']; "
            "assert not bad, bad; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_dump_dir_has_every_stage(tmp_path):
    k = get_backend("cuda:80").compile(COPY_TTIR, dump_dir=tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(f"copy_flag.{e}" for e in ("source.ttir", "ttir", "ttgir", "llir", "ptx", "cubin",
                                                       "json"))
    assert (tmp_path / "copy_flag.cubin").read_bytes() == k.binary
    assert json.loads((tmp_path / "copy_flag.json").read_text())["name"] == "copy_flag"


def test_emit_runs_only_the_stages_needed():
    b = get_backend("cuda:90")
    start = time.perf_counter()
    ttgir = b.emit(COPY_TTIR, "ttgir")
    assert "#ttg.blocked" in ttgir and time.perf_counter() - start < 5
    with pytest.raises(TargetError, match="stage 'cubin' is not a text stage"):
        b.emit(COPY_TTIR, "cubin")


def test_compile_is_fast():
    start = time.perf_counter()
    get_backend("cuda:90").compile(COPY_TTIR.replace("copy_flag", "copy_fast"))
    assert time.perf_counter() - start < 3.0


def test_options_reach_triton():
    k = get_backend("cuda:90").compile(COPY_TTIR, get_backend("cuda:90").options(num_warps=8, maxnreg=128))
    assert k.metadata["num_warps"] == 8 and k.metadata["maxnreg"] == 128
    assert ".maxnreg 128" in k.asm["ptx"]


# ------------------------------------------------------------------------------------------------------- errors

def test_bad_ir_gives_tritons_diagnostic():
    bad = COPY_TTIR.replace('"tt.make_range"', '"tt.make_rnage"')
    with pytest.raises(CompileError) as err:
        get_backend("cuda:90").compile(bad)
    text = str(err.value)
    assert "Triton cannot parse the TTIR for cuda:90" in text
    assert "tt.make_rnage" in text  # Triton's own message names the unknown op
    assert 'loc("' not in text  # its locations written as file:line:col, as ditron's own


def test_type_error_in_ir_is_reported():
    bad = COPY_TTIR.replace("(tensor<1024x!tt.ptr<bf16>>) -> tensor<1024xbf16>",
                            "(tensor<1024x!tt.ptr<bf16>>) -> tensor<1024xf32>", 1)
    with pytest.raises(CompileError, match="cannot parse") as err:
        get_backend("hip:gfx942").compile(bad)
    assert "error" in str(err.value).lower()


def test_module_without_kernel():
    with pytest.raises(CompileError, match="no kernel"):
        get_backend("cuda:90").compile("module {\n}\n")


def test_options_of_the_wrong_backend():
    with pytest.raises(TargetError, match="must come from get_backend"):
        get_backend("cuda:90").compile(COPY_TTIR, get_backend("hip:gfx942").options())


# -------------------------------------------------------------------------------------------------- vendor facts

def test_every_target_has_one_table():
    """Each supported target has its vendor facts (backends/<vendor>/facts.py), and everything that knew a vendor
    number reads it there: the backend class, the binary extension, the cost model's peaks and GEMM candidates."""
    from ditron.artifact import BINARY_EXT
    from ditron.backends import facts
    from ditron.cost_model import PEAKS, gemm_candidates, peaks_for
    assert [v.vendor for v in facts.vendors()] == ["cuda", "hip"]
    assert BINARY_EXT == {"cuda": "cubin", "hip": "hsaco"}
    for t in supported_targets():
        f = target_facts(t)
        assert f.name == t and f.num_sms > 0 and f.smem_per_sm > 0 and f.source and f.gemm_candidates
        backend = get_backend(t)
        assert type(backend) is facts.backend_class(f.vendor)
        assert backend.BINARY_EXT == facts.vendor_facts(f.vendor).binary_ext
        assert PEAKS[t].num_sms == f.num_sms and PEAKS[t].gemm_flops == f.gemm_flops
        assert set(gemm_candidates(peaks_for(t))) <= set(f.gemm_candidates)
    assert target_facts("cuda:sm_90a") is target_facts("cuda:90") and target_facts("cuda:90").tma
    assert (target_facts("hip:gfx942").num_sms, target_facts("hip:gfx950").num_sms) == (304, 256)


def test_target_facts_reject_unsupported_targets():
    from ditron.backends.facts import lookup
    assert lookup("cuda:75") is None and lookup("rocm:gfx942") is None and lookup("hip:") is None
    with pytest.raises(TargetError, match="unsupported target 'cuda:75'"):
        target_facts("cuda:75")


def test_gemm_template_reads_the_facts():
    """The GEMM template's SM counts and shared memory are the table's (they were literals in kernels/gemm.py)."""
    from ditron.kernels import gemm
    for t in supported_targets():
        assert gemm.choose_config(8192, 8192, 8192, "bf16", t)["num_sms"] == target_facts(t).num_sms
    big = gemm.choose_config(8192, 8192, 8192, "bf16", "cuda:90")
    assert (big["block_m"] + big["block_n"]) * big["block_k"] * 2 * big["num_stages"] <= \
        target_facts("cuda:90").smem_per_sm
    with pytest.raises(TargetError, match="unsupported target"):
        gemm.choose_config(128, 128, 128, "bf16", "cuda:75")


FAKE_VENDOR = '''
from ditron.backends.base import Backend
from ditron.backends.facts import GemmConfig, TargetFacts, VendorFacts

X1 = TargetFacts("{vendor}", "x1", warp_size=16, num_sms=7, smem_per_sm=1 << 16, gemm_flops=1e12, link_bw=1e9,
                 hbm_copy_bw=1e11, sm_copy_bw_per_sm=1e8, gemm_candidates=(GemmConfig(64, 64, 32, 4, 2),),
                 source="a test's")
VENDOR = VendorFacts("{vendor}", binary_ext="bin", asm_ext="s", targets=(X1,), parse_arch=lambda a: a or None,
                     runs_on=lambda built, have: built == have)


class FakeBackend(Backend):
    VENDOR = "{vendor}"
    BINARY_EXT, ASM_EXT = "bin", "s"


BACKEND = FakeBackend
'''


def _with_vendor_folders(monkeypatch, tmp_path, folders: dict[str, str]) -> None:
    from ditron import backends
    from ditron.backends import facts
    for name, vendor in folders.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(FAKE_VENDOR.format(vendor=vendor))
    monkeypatch.setattr(backends, "__path__", [*backends.__path__, str(tmp_path)])
    monkeypatch.setattr(facts, "_VENDORS", None)


def test_a_new_target_is_one_folder(monkeypatch, tmp_path):
    """A folder beside nvidia/ and amd/ with VENDOR and BACKEND is a target: parsed, listed, given its backend and
    its binary format, and matched by its own arch rule."""
    from ditron.backends.facts import binary_extensions
    from ditron.runtime.loader import target_runs_on
    _with_vendor_folders(monkeypatch, tmp_path, {"fakegpu": "fake"})
    t = Target.parse("fake:x1")
    assert (t.vendor, t.arch, t.warp_size) == ("fake", "x1", 16)
    assert "fake:x1" in supported_targets() and "cuda:90" in supported_targets()
    backend = get_backend("fake:x1")
    assert type(backend).__name__ == "FakeBackend" and backend.stage_names[-1] == "bin"
    assert binary_extensions()["fake"] == "bin" and target_facts(t).num_sms == 7
    assert target_runs_on({"vendor": "fake", "arch": "x1"}, "fake:x1")
    assert not target_runs_on({"vendor": "fake", "arch": "x1"}, "fake:x2")
    with pytest.raises(TargetError, match="unsupported target 'fake:x2'"):
        Target.parse("fake:x2")


def test_two_folders_claiming_one_vendor(monkeypatch, tmp_path):
    _with_vendor_folders(monkeypatch, tmp_path, {"fake_a": "cuda"})
    with pytest.raises(TargetError, match="backends 'fake_a' and 'nvidia' both claim vendor 'cuda'"):
        Target.parse("cuda:90")


def test_vendor_facts_import_no_mlir():
    """The runtime reads the facts (binary extensions, arch matching): they import neither MLIR nor triton."""
    code = ("import sys; from ditron.backends.facts import vendors, target_facts; import ditron.artifact, "
            "ditron.cost_model; vendors(); target_facts('hip:gfx942'); "
            "bad = [m for m in sys.modules if m == 'mlir' or m.startswith('mlir.') or m == 'triton']; "
            "assert not bad, bad; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
