"""Artifact directories: what ditron.compile writes, what the loader accepts and what it refuses (no GPU needed)."""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

import ditron
from ditron.api import kernel_abi
from ditron.artifact import (FORMAT_VERSION, HOST_PROGRAM_VERSION, MANIFEST, ArgSpec, ArtifactError,
                             ArtifactVersionError, parse_manifest, read_manifest, triton_type, write_artifact)
from ditron.errors import DitronRuntimeError
from ditron.runtime.loader import TritonVersionWarning, load_artifact
from ditron.tools.build_gpu_test_artifacts import ELEMENTWISE_MLIR, RANK_MLIR


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """One real artifact (two kernels, cuda:90), compiled once; tests copy it before damaging it."""
    out = tmp_path_factory.mktemp("artifact") / "elementwise"
    ditron.compile(ELEMENTWISE_MLIR, target="cuda:90", out_dir=out, cache=False, num_warps=8)
    return out


@pytest.fixture
def artifact(built, tmp_path) -> Path:
    copy = tmp_path / "art"
    shutil.copytree(built, copy)
    return copy


def edit_manifest(path: Path, edit) -> None:
    data = json.loads((path / MANIFEST).read_text())
    edit(data)
    (path / MANIFEST).write_text(json.dumps(data))


# ------------------------------------------------------------------------------------------------- what is written

def test_layout_and_manifest(built):
    files = sorted(p.name for p in built.iterdir())
    for k in ("add_kernel", "axpy_kernel"):
        for ext in ("cubin", "json", "ttir", "ttgir", "llir", "ptx"):
            assert f"{k}.{ext}" in files
    assert MANIFEST in files
    m = read_manifest(built)
    assert m.format_version == FORMAT_VERSION and m.ditron_version == ditron.__version__
    import triton
    assert m.triton_version == triton.__version__
    assert dict(m.target) == {"name": "cuda:90", "vendor": "cuda", "arch": 90, "warp_size": 32}
    assert m.options["num_warps"] == 8 and m.options_hash
    assert m.host_program is None
    assert [k.name for k in m.kernels] == ["add_kernel", "axpy_kernel"]
    axpy = m.kernel("axpy_kernel")
    assert axpy.signature == ("fp32", "*fp32", "*fp32", "*fp32", "i32")
    assert [(a.name, a.kind) for a in axpy.args] == [("alpha", "scalar"), ("x_ptr", "pointer"), ("y_ptr", "pointer"),
                                                     ("out_ptr", "pointer"), ("n", "scalar")]
    # the binary is a CUDA ELF that defines the kernel symbol; the launch metadata is Triton's
    cubin = (built / "add_kernel.cubin").read_bytes()
    assert cubin[:4] == b"\x7fELF" and b"add_kernel" in cubin
    md = json.loads((built / "add_kernel.json").read_text())
    assert md["name"] == "add_kernel" and md["num_warps"] == 8 and md["target"]["arch"] == 90
    assert ".visible .entry add_kernel(" in (built / "add_kernel.ptx").read_text()


def test_loads_without_gpu_as_triton_kernels(built):
    exe = load_artifact(built)
    assert exe.target == "cuda:90" and set(exe.kernels) == {"add_kernel", "axpy_kernel"}
    k = exe["add_kernel"]
    from triton.compiler.compiler import CompiledKernel
    assert isinstance(k.triton_kernel, CompiledKernel)
    assert k.metadata.num_warps == 8 and k.metadata.name == "add_kernel"
    assert k.binary == (built / "add_kernel.cubin").read_bytes()
    assert "tt.func" in k.asm["ttir"] and "add_kernel" in k.asm["ptx"]
    assert not k.loaded  # handles are created at the first launch, not at load
    with pytest.raises(DitronRuntimeError, match="no kernel 'nope' in this executable"):
        exe["nope"]


def test_without_stage_texts(tmp_path):
    out = tmp_path / "bare"
    ditron.compile(ELEMENTWISE_MLIR, target="cuda:90", out_dir=out, cache=False, keep_stages=False)
    assert sorted(p.name for p in out.iterdir()) == ["add_kernel.cubin", "add_kernel.json", "axpy_kernel.cubin",
                                                      "axpy_kernel.json", MANIFEST]
    exe = ditron.load(out)
    assert set(exe["add_kernel"].asm) == {"cubin"}


def test_amd_artifact_has_hsaco(tmp_path):
    out = tmp_path / "amd"
    exe = ditron.compile(ELEMENTWISE_MLIR, target="hip:gfx942", out_dir=out, cache=False)
    hsaco = (out / "add_kernel.hsaco").read_bytes()
    assert hsaco[:4] == b"\x7fELF" and b"add_kernel" in hsaco
    assert exe.manifest.target["warp_size"] == 64 and "amdgcn" in exe.manifest.kernel("add_kernel").stages
    assert exe["add_kernel"].metadata.target.backend == "hip"


def test_triton_type_spelling():
    assert triton_type("!tt.ptr<f32>") == "*fp32"
    assert triton_type("!tt.ptr<bf16, 1>") == "*bf16"
    assert triton_type("*f16") == "*fp16"
    assert triton_type("f16") == "fp16" and triton_type("f32") == "fp32"
    assert triton_type("i64") == "i64" and triton_type("i1") == "i1"


def test_abi_lists_the_arguments_the_lowering_appends(tmp_path):
    """A kernel using ditron_core.rank / num_ranks: the lowering appends them, the manifest names them."""
    out = tmp_path / "rank"
    exe = ditron.compile(RANK_MLIR, target="cuda:90", out_dir=out, cache=False)
    entry = read_manifest(out).kernel("rank_kernel")
    assert entry.args == (ArgSpec("out_ptr", "pointer", "*i32"), ArgSpec("rank", "rank", "i32"),
                          ArgSpec("num_ranks", "num_ranks", "i32"))
    assert entry.signature == ("*i32", "i32", "i32")
    assert exe["rank_kernel"].bind((1,), {"rank": 3, "num_ranks": 8}) == [1, 3, 8]


def test_abi_of_appended_arguments():
    """The primitive lowering appends rank / num_ranks / heap_bases and lists them in metadata['abi']."""
    kernel = SimpleNamespace(name="k", metadata={
        "signature": ["*bf16", "i32", "i32", "i32", "*i64"],
        "abi": [["rank", "i32"], ["num_ranks", "i32"], ["heap_bases", "!tt.ptr<i64>"]]})
    args = kernel_abi(kernel, ["x", "n"])
    assert args == (ArgSpec("x", "pointer", "*bf16"), ArgSpec("n", "scalar", "i32"), ArgSpec("rank", "rank", "i32"),
                    ArgSpec("num_ranks", "num_ranks", "i32"), ArgSpec("heap_bases", "heap_bases", "*i64"))
    with pytest.raises(ditron.CompileError, match=r"takes 5 arguments, but it had 3 before lowering and the "
                                                  r"lowering appended 3 \(rank, num_ranks, heap_bases\)"):
        kernel_abi(kernel, ["x", "n", "m"])
    bad = SimpleNamespace(name="k", metadata={"signature": ["i32"], "abi": [{"name": "rank", "kind": "teapot"}]})
    with pytest.raises(ditron.CompileError, match="ABI entry 'rank' has unknown kind 'teapot'"):
        kernel_abi(bad, [])


# ------------------------------------------------------------------------------------------------ what is refused

def test_not_a_directory(tmp_path):
    with pytest.raises(ArtifactError, match="is not an artifact directory \\(no such directory\\)"):
        ditron.load(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ArtifactError, match="is not an artifact directory \\(a file; an artifact is the directory"):
        ditron.load(tmp_path / "file")


def test_no_manifest(tmp_path):
    with pytest.raises(ArtifactError, match=f"is not an artifact directory: it has no {MANIFEST}"):
        ditron.load(tmp_path)


def test_manifest_not_json(artifact):
    (artifact / MANIFEST).write_text('{"format": "ditron-artifact", ')
    with pytest.raises(ArtifactError, match="is not valid JSON \\(line 1, column .*the artifact is damaged"):
        ditron.load(artifact)


def test_manifest_of_something_else(artifact):
    (artifact / MANIFEST).write_text('{"name": "some other tool"}')
    with pytest.raises(ArtifactError, match='is not a ditron artifact manifest \\(no "format": "ditron-artifact"\\)'):
        ditron.load(artifact)


def test_format_version_mismatch(artifact):
    edit_manifest(artifact, lambda d: d.update(format_version=FORMAT_VERSION + 1))
    with pytest.raises(ArtifactVersionError, match=f"artifact format version {FORMAT_VERSION + 1}, but this ditron "
                                                   f"reads version {FORMAT_VERSION}; recompile it"):
        ditron.load(artifact)


def test_host_program_version_mismatch(artifact):
    edit_manifest(artifact, lambda d: d.update(host_program={"format_version": 99, "program": {}}))
    with pytest.raises(ArtifactVersionError, match=f"host program format version 99, but this ditron reads version "
                                                   f"{HOST_PROGRAM_VERSION}"):
        ditron.load(artifact)


def test_host_program_round_trip(artifact):
    program = {"steps": [{"launch": "add_kernel", "grid": [4, 1, 1]}]}
    edit_manifest(artifact, lambda d: d.update(host_program={"format_version": HOST_PROGRAM_VERSION,
                                                             "program": program}))
    assert ditron.load(artifact).host_program == program


def test_missing_binary(artifact):
    (artifact / "axpy_kernel.cubin").unlink()
    with pytest.raises(ArtifactError, match="kernel 'axpy_kernel' needs 'axpy_kernel.cubin', which is missing"):
        ditron.load(artifact)


def test_damaged_binary(artifact):
    path = artifact / "add_kernel.cubin"
    path.write_bytes(path.read_bytes()[:-16])
    with pytest.raises(ArtifactError, match="'add_kernel.cubin' does not match the checksum in manifest.json"):
        ditron.load(artifact)


def test_launch_metadata_of_another_kernel(artifact):
    shutil.copy(artifact / "axpy_kernel.json", artifact / "add_kernel.json")
    with pytest.raises(ArtifactError, match="'add_kernel.json' describes kernel 'axpy_kernel', not 'add_kernel'"):
        ditron.load(artifact)


def test_file_names_stay_inside(artifact):
    edit_manifest(artifact, lambda d: d["kernels"][0].update(binary="../../etc/passwd"))
    with pytest.raises(ArtifactError, match="file '../../etc/passwd' is not a plain file name inside the artifact"):
        ditron.load(artifact)


def test_unknown_arg_kind(artifact):
    edit_manifest(artifact, lambda d: d["kernels"][0]["args"][0].update(kind="magic"))
    with pytest.raises(ArtifactError, match="argument 'x_ptr' has unknown kind 'magic'"):
        ditron.load(artifact)


def test_signature_length_mismatch(artifact):
    edit_manifest(artifact, lambda d: d["kernels"][0]["signature"].pop())
    with pytest.raises(ArtifactError, match="'signature' must list one type string per argument"):
        ditron.load(artifact)


def test_missing_field():
    with pytest.raises(ArtifactError, match="missing field 'kernels'"):
        parse_manifest({"format": "ditron-artifact", "format_version": FORMAT_VERSION,
                        "target": {"name": "cuda:90", "vendor": "cuda", "arch": 90, "warp_size": 32}})


def test_triton_minor_version_mismatch(artifact):
    import triton
    major, minor = triton.__version__.split(".")[:2]
    other = f"{major}.{int(minor) + 1}.0"
    edit_manifest(artifact, lambda d: d.update(triton_version=other))
    with pytest.raises(ArtifactVersionError, match=f"was built with triton {other}, but this process runs triton "
                                                   f"{triton.__version__}; recompile it"):
        ditron.load(artifact)


def test_triton_patch_version_warns(artifact):
    import triton
    major, minor = triton.__version__.split(".")[:2]
    other = f"{major}.{minor}.99"
    edit_manifest(artifact, lambda d: d.update(triton_version=other))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exe = ditron.load(artifact)
    assert set(exe.kernels) == {"add_kernel", "axpy_kernel"}
    assert any(issubclass(w.category, TritonVersionWarning) and other in str(w.message) for w in caught)


# ------------------------------------------------------------------------------------------------- write_artifact

def _fake_compiled(name="k", **metadata):
    md = {"name": name, "target": {"backend": "cuda", "arch": 90, "warp_size": 32}, "num_warps": 4,
          "num_ctas": 1, "shared": 0}
    md.update(metadata)
    return SimpleNamespace(name=name, binary=b"\x7fELF", asm={"ttir": "module {}"}, metadata=md)


def _write(directory, kernels):
    target = SimpleNamespace(vendor="cuda", arch=90, warp_size=32)
    return write_artifact(directory, target=target, options={"num_warps": 4}, options_hash="h", kernels=kernels,
                          ditron_version="0", triton_version="0")


def test_write_refuses_non_empty_directory(tmp_path):
    (tmp_path / "junk").write_text("x")
    with pytest.raises(ArtifactError, match="the directory is not empty"):
        _write(tmp_path, [(_fake_compiled(), ("i32",), (ArgSpec("n", "scalar", "i32"),))])


def test_write_checks_metadata_and_abi(tmp_path):
    k = _fake_compiled()
    del k.metadata["shared"]
    with pytest.raises(ArtifactError, match="kernel 'k': launch metadata lacks shared"):
        _write(tmp_path / "a", [(k, ("i32",), (ArgSpec("n", "scalar", "i32"),))])
    with pytest.raises(ArtifactError, match="kernel 'k': the ABI lists 0 arguments, the kernel takes 1"):
        _write(tmp_path / "b", [(_fake_compiled(), ("i32",), ())])
    with pytest.raises(ArtifactError, match="two kernels named 'k'"):
        _write(tmp_path / "c", [(_fake_compiled(), (), ()), (_fake_compiled(), (), ())])
    with pytest.raises(ArtifactError, match="kernel name '../k' cannot name artifact files"):
        _write(tmp_path / "d", [(_fake_compiled("../k"), (), ())])


@pytest.mark.parametrize("call", [lambda exe: exe.run(None, []), lambda exe: exe.executor("gpu"),
                                  lambda exe: exe(4, [])])
def test_run_and_executor_need_a_world(artifact, call):
    """A world that is not a ditron.World is refused by name, not with an AttributeError from inside."""
    exe = ditron.load(artifact)
    with pytest.raises(DitronRuntimeError, match=r"world must be a ditron.World \(ditron.World.virtual\(W\)"):
        call(exe)
