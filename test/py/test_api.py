"""ditron.compile and the `ditron` command (no GPU needed: compiles for cuda:90 / hip:gfx942 on the CPU)."""
from __future__ import annotations

import gc
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

import ditron
import ditron.frontend as dt
from ditron.artifact import MANIFEST, ArtifactError
from ditron.cli import parse_option, run
from ditron.errors import CompileError, DitronError, ParseError, PassError, TargetError
from ditron.tools.build_gpu_test_artifacts import ELEMENTWISE_MLIR, VECTOR_ADD_MLIR

_FRONTEND_K = 128  # set by _frontend_gemm_ar

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DITRON_NO_CACHE", raising=False)


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    gc.collect()
    return code, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------------------------------------- inputs

def test_compile_text(tmp_path):
    exe = ditron.compile(ELEMENTWISE_MLIR, target="cuda:90")
    assert isinstance(exe, ditron.Executable)
    assert set(exe.kernels) == {"add_kernel", "axpy_kernel"}
    assert exe.compile_info["cache"] == "miss" and exe.path.parent.parent == tmp_path / "cache"
    assert [a.name for a in exe["axpy_kernel"].args] == ["alpha", "x_ptr", "y_ptr", "out_ptr", "n"]


def test_compile_path_keeps_file_locations(tmp_path):
    src = tmp_path / "vadd.mlir"
    src.write_text(VECTOR_ADD_MLIR)
    for given in (src, str(src)):
        exe = ditron.compile(given, target="cuda:90", cache=False)
        assert set(exe.kernels) == {"add_kernel"} and exe.path is None
    # the kernel's locations name the input file, so line info in the PTX points at it
    assert "// vadd.mlir:6:" in exe["add_kernel"].asm["ptx"]


def test_compile_module_leaves_it_unchanged():
    from ditron.dialects import ditron_context, parse_module
    with ditron_context():
        module = parse_module(VECTOR_ADD_MLIR, "vadd.mlir")
        before = str(module)
        exe = ditron.compile(module, target="cuda:90")
        assert str(module) == before
        del module
        gc.collect()
    assert set(exe.kernels) == {"add_kernel"}


def test_unreadable_path(tmp_path):
    with pytest.raises(ParseError, match="cannot read '.*missing.mlir': No such file or directory"):
        ditron.compile(tmp_path / "missing.mlir")


def test_not_an_input():
    with pytest.raises(ParseError, match="ditron.compile takes an mlir Module, MLIR text, a .mlir path or a "
                                         "ditron.frontend Program, got int"):
        ditron.compile(42)


def _frontend_gemm_ar(k: int):
    """GEMM+AR on a 2-way mesh, x [64, 128] against w [k, 64] (k != 128: a contraction mismatch). The annotations
    are strings (this file imports annotations from __future__) read in this module's globals: hence dt and
    _FRONTEND_K at module level."""
    global _FRONTEND_K
    _FRONTEND_K = k

    @dt.program(dt.Mesh(tp=2))
    def gemm_ar(x: dt.Tensor[(64, 128), "bf16", dt.shard(1, "tp")],
                w: dt.Tensor[(_FRONTEND_K, 64), "bf16", dt.shard(0, "tp")]) -> dt.Sharded[dt.replicated]:
        return x @ w
    return gemm_ar


def test_compile_frontend_program():
    """A ditron.frontend Program compiles as its task-level MLIR does (traced, then the default pipeline)."""
    prog = _frontend_gemm_ar(128)
    exe = ditron.compile(prog, target="cuda:90", cache=False)
    assert sorted(exe.kernels) == sorted(ditron.compile(prog.to_mlir(), target="cuda:90", cache=False).kernels)
    assert "gemm" in exe.kernels and exe.host_program is not None


def test_compile_frontend_program_error_is_located_in_python():
    with pytest.raises(dt.TraceError, match="contraction sizes differ") as info:
        ditron.compile(_frontend_gemm_ar(256), target="cuda:90", cache=False)
    assert info.value.render().startswith(f"{__file__}:")


def test_bad_mlir_is_located(tmp_path):
    src = tmp_path / "bad.mlir"
    src.write_text('"builtin.module"() ({\n  %x = "arith.constant"() : () -> i32\n}) : () -> ()\n')
    with pytest.raises(ParseError) as info:
        ditron.compile(src, target="cuda:90")
    assert f"{src}:2:" in info.value.render()


def test_no_kernel():
    with pytest.raises(CompileError, match="no kernel"):
        ditron.compile("module {\n}\n", target="cuda:90", cache=False)


TASK_LEVEL = """\
module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @f(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %c = "ditron_task.matmul"(%a, %b) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    return %c : tensor<8x8xf32>
  }
}
"""


def test_task_level_module_without_pipeline(monkeypatch, tmp_path):
    """A task-level module while ditron-default is not registered: the error names the pipeline and the op."""
    from ditron.passes import registry
    monkeypatch.delitem(registry.PIPELINES, "ditron-default", raising=False)
    src = tmp_path / "task.mlir"
    src.write_text(TASK_LEVEL)
    with pytest.raises(PassError, match="the module has task- or device-level ops \\(ditron_task.matmul\\); "
                                        "compiling them needs the pipeline 'ditron-default'") as info:
        ditron.compile(src, target="cuda:90", cache=False)
    assert info.value.render().startswith(f"{src}:3:10: error: the module has task- or device-level ops")


@pytest.mark.parametrize("last", ["ditron-lower-task-to-device", "ditron-schedule-overlap"])
def test_device_level_module_runs_the_rest_of_the_pipeline(last):
    """A device program that ditron-opt stopped midway (kernels not instantiated): compile runs the passes after
    ditron-lower-task-to-device (its scheduling only if no stream is assigned yet), not ditron-tile again."""
    from ditron.dialects import ditron_context
    from ditron.dialects.context import parse_module
    from ditron.passes.registry import PIPELINES, parse_pipeline
    source = (Path(__file__).resolve().parents[2] / "examples" / "gemm_rs.mlir").read_text()
    names = PIPELINES["ditron-default"]
    with ditron_context():
        module = parse_module(source)
        for p in parse_pipeline(",".join(names[:names.index(last) + 1])):
            p.run(module)
        text = str(module)
        del module
    whole = ditron.compile(source, target="cuda:90", cache=False)
    part = ditron.compile(text, target="cuda:90", cache=False)
    assert sorted(part.kernels) == sorted(whole.kernels) and part.host_program is not None


def test_task_level_module_runs_the_pipeline(monkeypatch):
    """When ditron-default is registered, compile runs it first; here it is a stand-in that cannot reach core
    level, which compile reports."""
    from ditron.passes import registry
    monkeypatch.setitem(registry.PIPELINES, "ditron-default", ("ditron-verify",))
    with pytest.raises(PassError, match="pipeline 'ditron-default' left ops above core level: ditron_task.matmul"):
        ditron.compile(TASK_LEVEL, target="cuda:90", cache=False)


def test_task_level_module_naming_another_target():
    """The pipeline tiles for the module's ditron.target: compiling it for another target is an error, not a
    kernel tuned for one GPU and built for another."""
    text = TASK_LEVEL.replace('shape = array<i64: 2>}}', 'shape = array<i64: 2>}, ditron.target = "cuda:80"}')
    assert 'ditron.target = "cuda:80"' in text
    with pytest.raises(TargetError, match="compiling for cuda:90: the module's ditron.target is 'cuda:80'"):
        ditron.compile(text, target="cuda:90", cache=False)


# ------------------------------------------------------------------------------------------- targets and options

def test_unknown_target():
    with pytest.raises(TargetError, match="unsupported target 'cuda:75'; supported targets: cuda:80, cuda:90, "
                                          "hip:gfx942, hip:gfx950"):
        ditron.compile(VECTOR_ADD_MLIR, target="cuda:75")


def test_unknown_option():
    with pytest.raises(TargetError, match="unknown option 'num_wraps' for target cuda:90; known options: num_warps"):
        ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", num_wraps=8)


def test_bad_option_value():
    with pytest.raises(TargetError, match="option num_warps=3: must be a power of two"):
        ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", num_warps=3)


def test_options_reach_the_kernel():
    exe = ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", num_warps=2, num_stages=2)
    assert exe.manifest.options["num_warps"] == 2 and exe["add_kernel"].metadata.num_warps == 2
    assert exe["add_kernel"].metadata.num_stages == 2


# ------------------------------------------------------------------------------------------------------- out_dir

def test_out_dir_written_and_replaced(tmp_path):
    out = tmp_path / "out"
    exe = ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", out_dir=out, num_warps=4)
    assert exe.path == out and (out / MANIFEST).is_file()
    exe = ditron.compile(ELEMENTWISE_MLIR, target="cuda:90", out_dir=out, num_warps=4)
    assert set(exe.kernels) == {"add_kernel", "axpy_kernel"}
    assert set(json.loads((out / MANIFEST).read_text())["kernels"][1].keys()) >= {"name", "args"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no temporary leftovers


def test_failed_compile_keeps_the_previous_artifact(tmp_path):
    out = tmp_path / "out"
    ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", out_dir=out, cache=False)
    before = (out / MANIFEST).read_text()
    with pytest.raises(CompileError):
        ditron.compile("module {\n}\n", target="cuda:90", out_dir=out, cache=False)
    assert (out / MANIFEST).read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary directory left beside it


@pytest.mark.parametrize("kw,message", [({"num_warps": True}, "option num_warps=True: must be an integer"),
                                        ({"cache": "no"}, "cache takes True or False, got 'no'"),
                                        ({"keep_stages": "no"}, "keep_stages takes True or False, got 'no'")])
def test_flags_and_options_of_the_wrong_type(kw, message):
    with pytest.raises(TargetError, match=message):
        ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", **kw)


def test_paths_must_be_paths():
    with pytest.raises(ArtifactError, match="out_dir takes a directory path, got int"):
        ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", out_dir=5)
    for bad in (5, None):
        with pytest.raises(ArtifactError, match=f"load takes an artifact directory \\(a path\\), got "
                                                f"{type(bad).__name__}"):
            ditron.load(bad)


def test_out_dir_refuses_other_directories(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(ArtifactError, match="refusing to write the artifact into .*non-empty directory that holds no "
                                            "ditron artifact"):
        ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", out_dir=tmp_path)
    assert (tmp_path / "precious.txt").read_text() == "keep me"
    (tmp_path / MANIFEST).write_text('{"not": "ditron"}')  # some other tool's manifest: still the user's directory
    with pytest.raises(ArtifactError, match="holds no ditron artifact"):
        ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", out_dir=tmp_path)
    assert (tmp_path / "precious.txt").read_text() == "keep me"


# ----------------------------------------------------------------------------------------------------- the command

def test_cli_usage_errors_point_at_the_subcommand_help():
    code, _, err = cli("compile")
    assert code == 1 and err.endswith("(see ditron compile --help)\n")
    code, _, err = cli("--bogus")
    assert code == 1 and err.endswith("(see ditron --help)\n")


def test_task_program_without_task_ops_is_task_level(tmp_path):
    """`return %x` with x row-sharded and the result replicated is an all-gather: ditron.compile runs the pipeline
    on it (it took the module for core level and found no kernel)."""
    text = """module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @ag(%x: tensor<64x32xbf16> {ditron.sharding = {dims = [["tp"], []]}})
      -> (tensor<64x32xbf16> {ditron.sharding = {dims = [[], []]}}) {
    return %x : tensor<64x32xbf16>
  }
}
"""
    exe = ditron.compile(text, target="cuda:90", cache=False)
    assert exe.host_program["name"] == "ag" and [a["io"] for a in exe.host_program["args"]] == ["in", "out", "epoch"]
    assert {op["op"] for op in _ops(exe.host_program)} >= {"ditron_device.copy", "ditron_device.barrier"}


def _ops(program):
    body = program["body"]
    out = []

    def walk(ops):
        for op in ops:
            out.append(op)
            for region in op.get("regions", ()):
                walk(region["body"])
    walk(body)
    return out


def test_compile_help_names_every_level_it_takes(capsys):
    """ditron compile takes task-, device- and core-level input: its help says so (it said core level only)."""
    code, _, _ = cli("compile", "--help")
    assert code == 0
    text = " ".join(capsys.readouterr().out.split())
    for level in ("task-level program", "device-level program", "core-level kernels"):
        assert level in text, text


def test_compile_of_an_already_lowered_module_says_so():
    from ditron.dialects import ditron_context
    from ditron.dialects.context import parse_module
    from ditron.passes.registry import parse_pipeline
    source = (Path(__file__).resolve().parents[2] / "examples" / "gemm_rs.mlir").read_text()
    with ditron_context():
        module = parse_module(source)
        for p in parse_pipeline("ditron-device,ditron-lower-core-to-triton"):  # a device program, kernels lowered
            p.run(module)
        text = str(module)
        del module
    with pytest.raises(DitronError, match="launch of '@gemm': the kernel was already lowered by "
                                          "ditron-lower-core-to-triton"):
        ditron.compile(text, target="cuda:90", cache=False)


def test_cli_compile_reads_standard_input(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(ELEMENTWISE_MLIR))
    code, stdout, stderr = cli("compile", "-", "--target", "cuda:90", "-o", str(tmp_path / "art"), "--no-cache")
    assert (code, stderr) == (0, "") and f"wrote {tmp_path / 'art'}: 2 kernels" in stdout

def test_cli_compile_and_info(tmp_path):
    src = tmp_path / "k.mlir"
    src.write_text(ELEMENTWISE_MLIR)
    out = tmp_path / "art"
    code, stdout, stderr = cli("compile", str(src), "--target", "cuda:90", "-o", str(out), "--opt", "num_warps=8",
                               "--opt", "num-stages=2")
    assert (code, stderr) == (0, "")
    assert f"wrote {out}: 2 kernels (add_kernel, axpy_kernel) for cuda:90" in stdout
    code, stdout, stderr = cli("info", str(out))
    assert code == 0 and stderr == ""
    assert "target     cuda:90" in stdout and "num_warps=8" in stdout and "num_stages=2" in stdout
    assert "    alpha: fp32 (scalar)" in stdout and "add_kernel: add_kernel.cubin" in stdout
    code, stdout, _ = cli("info", str(out), "--json")
    assert code == 0 and json.loads(stdout)["options"]["num_warps"] == 8


@pytest.mark.parametrize("argv, message", [
    (["compile", "{src}", "--target", "cuda:75", "-o", "{out}"], "error: unsupported target 'cuda:75'"),
    (["compile", "{src}", "-o", "{out}", "--opt", "num_wraps=8"], "error: unknown option 'num_wraps'"),
    (["compile", "{src}", "-o", "{out}", "--opt", "num_warps"], "error: --opt 'num_warps': write NAME=VALUE"),
    (["compile", "{src}", "-o", "{out}", "--opt", "num_warps=3"], "error: option num_warps=3: must be a power"),
    (["compile", "{src}missing", "-o", "{out}"], "error: cannot read '"),
    (["compile", "{src}"], "error: the following arguments are required: -o"),
    (["info", "{out}missing"], "is not an artifact directory (no such directory)"),
    (["frobnicate"], "error: argument COMMAND: invalid choice: 'frobnicate'"),
    ([], "error: give a command: compile, info, tune or sim"),
])
def test_cli_errors(tmp_path, argv, message):
    src = tmp_path / "k.mlir"
    src.write_text(VECTOR_ADD_MLIR)
    argv = [a.format(src=src, out=tmp_path / "art") for a in argv]
    code, stdout, stderr = cli(*argv)
    assert code == 1 and stdout == ""
    assert message in stderr and "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1 or stderr.startswith(str(src))


def test_cli_ir_error_is_located(tmp_path):
    src = tmp_path / "bad.mlir"
    src.write_text('"builtin.module"() ({\n  "tt.func"(\n}) : () -> ()\n')
    code, _, stderr = cli("compile", str(src), "-o", str(tmp_path / "art"))
    assert code == 1 and stderr.startswith(f"{src}:") and ": error: " in stderr


def test_cli_damaged_artifact(tmp_path):
    out = tmp_path / "art"
    ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", out_dir=out)
    (out / MANIFEST).write_text("{")
    code, _, stderr = cli("info", str(out))
    assert code == 1 and stderr.startswith("error: ") and "is not valid JSON" in stderr


def test_console_script(tmp_path):
    """The installed `ditron` script: errors are one line, exit code 1."""
    exe = Path(sys.executable).with_name("ditron")
    if not exe.exists():
        pytest.skip("the ditron console script is not installed in this environment")
    proc = subprocess.run([str(exe), "info", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


def test_parse_option():
    assert parse_option("num_warps=8") == ("num_warps", 8)
    assert parse_option("num-ctas=0x2") == ("num_ctas", 2)
    assert parse_option("debug=true") == ("debug", True)
    assert parse_option("maxnreg=none") == ("maxnreg", None)
    assert parse_option("x=1.5") == ("x", 1.5)
    assert parse_option("arch=sm90") == ("arch", "sm90")
    with pytest.raises(DitronError, match="write NAME=VALUE"):
        parse_option("=3")


# ---------------------------------------------------------------------------------------------------- lazy imports

def test_import_ditron_is_light():
    code = ("import sys, ditron\n"
            "assert 'mlir' not in sys.modules and 'ditron.api' not in sys.modules, sorted(sys.modules)\n"
            "assert callable(ditron.load) and 'mlir' not in sys.modules\n"
            "assert ditron.Executable.__name__ == 'Executable' and 'mlir' not in sys.modules\n"
            "assert callable(ditron.compile)\n"
            "assert 'compile' in dir(ditron)\n"
            "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    with pytest.raises(AttributeError, match="module 'ditron' has no attribute 'nothing_here'"):
        ditron.nothing_here  # noqa: B018
