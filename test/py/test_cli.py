"""ditron-opt as a user runs it (a subprocess): every error path prints one clear message and exits 1, with no
Python traceback and no abort; the ordinary paths (stdin, -o, --list-passes) work."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from ditron.passes.registry import PASSES, PIPELINES

REPO = pathlib.Path(__file__).resolve().parents[2]
MLP = REPO / "examples" / "mlp.mlir"
OPT = [sys.executable, "-m", "ditron.tools.ditron_opt"]

VALID = '''module attributes {ditron.mesh = {axes = ["dp"], shape = array<i64: 1>}} {
  func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
    %0 = "ditron_task.all_reduce"(%x) {axis = "dp", reduce = "sum"} : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
'''

BAD_SHAPE = '''module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}} {
  func.func @f(%x: tensor<4x8xf32>) -> tensor<8x8xf32> {
    %0 = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}
'''


def opt(*args, stdin: str | bytes | None = None, env: dict | None = None, timeout: float = 60):
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = subprocess.run([*OPT, *map(str, args)], input=data, capture_output=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=REPO)
    return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")


def assert_clean_failure(rc: int, err: str, message: str) -> None:
    """Exit code 1, the message, and none of the signs of a crash."""
    assert rc == 1, f"exit code {rc}, stderr:\n{err}"
    assert re.search(message, err), f"{message!r} not in stderr:\n{err}"
    for sign in ("Traceback", "Fatal Python error", "internal compiler error", "Assertion", "LLVM ERROR"):
        assert sign not in err, f"{sign!r} in stderr:\n{err}"


def write(tmp_path, text, name="in.mlir") -> pathlib.Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


# ------------------------------------------------------------------------------------------------ error paths

def test_parse_error(tmp_path):
    path = write(tmp_path, "func.func @f() {\n  %0 = \"ditron_task.matmul\"(%x) : (tensor<2xf32>) -> tensor<2xf32>\n}\n")
    rc, out, err = opt(path)
    assert_clean_failure(rc, err, rf"^{re.escape(str(path))}:2:29: error: use of undeclared SSA value name\n$")
    assert out == ""


def test_wrong_operand_count(tmp_path):
    path = write(tmp_path, "func.func @f(%x: tensor<2x2xf32>) {\n"
                           "  %0 = \"ditron_task.matmul\"(%x) : (tensor<2x2xf32>) -> tensor<2x2xf32>\n  return\n}\n")
    rc, _, err = opt(path)
    assert_clean_failure(rc, err, r"in\.mlir:2:8: error: 'ditron_task\.matmul' op expects exactly 2 operands, "
                                  r"but got 1")


def test_unknown_op(tmp_path):
    path = write(tmp_path, "func.func @f() {\n  \"ditron_task.gemm\"() : () -> ()\n  return\n}\n")
    rc, _, err = opt(path)
    assert_clean_failure(rc, err, r"in\.mlir:2:3: error: unregistered operation 'ditron_task\.gemm'")


def test_custom_form_ditron_op(tmp_path):
    path = write(tmp_path, "func.func @f(%x: tensor<2x2xf32>) {\n  ditron_task.matmul %x, %x\n  return\n}\n")
    rc, _, err = opt(path)
    assert_clean_failure(rc, err, r"in\.mlir:2:3: error: custom op 'ditron_task\.matmul' is unknown: ditron ops "
                                  r"have only the generic form")


def test_verifier_error(tmp_path):
    rc, out, err = opt(write(tmp_path, BAD_SHAPE), "--pass-pipeline=ditron-verify,ditron-canonicalize")
    assert_clean_failure(rc, err, r"in\.mlir:3:10: error: 'ditron_task\.all_gather' op output dim 0 is 8; "
                                  r"expected input dim 4 x axis 'tp' size 4 = 16")
    assert out == ""


def test_failing_pass_then_exit(tmp_path):
    """A pass that fails halfway, after IR was built in the context: no exit-time abort."""
    rc, _, err = opt(write(tmp_path, BAD_SHAPE), "--verify-each=false", "--pass-pipeline=ditron-canonicalize,"
                                                                         "ditron-verify")
    assert_clean_failure(rc, err, r"op output dim 0 is 8")


@pytest.mark.parametrize("pipeline, message", [
    ("ditron-canonicalise", r"^error: unknown pass or pipeline 'ditron-canonicalise'; did you mean "
                            r"'ditron-canonicalize'\?\n$"),
    ("ditron-canonicalize{upstream=maybe}", r"^error: pass 'ditron-canonicalize': option 'upstream' expects true or "
                                            r"false, got 'maybe'\n$"),
    ("ditron-canonicalize{nope=1}", r"has no option 'nope'"),
    ("ditron-verify{", r"unbalanced braces"),
])
def test_pipeline_errors(tmp_path, pipeline, message):
    rc, out, err = opt(write(tmp_path, VALID), f"--pass-pipeline={pipeline}")
    assert_clean_failure(rc, err, message)
    assert out == ""


def test_missing_file(tmp_path):
    rc, _, err = opt(tmp_path / "nope.mlir")
    assert_clean_failure(rc, err, rf"^error: cannot open input file '{re.escape(str(tmp_path))}/nope\.mlir': No such "
                                  r"file or directory\n$")


def test_directory_as_input(tmp_path):
    rc, _, err = opt(tmp_path)
    assert_clean_failure(rc, err, r"^error: cannot open input file '.*': Is a directory\n$")


def test_binary_input(tmp_path):
    rc, _, err = opt(write(tmp_path, b"\x89PNG\r\n\x1a\n\x00\xff"))
    assert_clean_failure(rc, err, r"error: cannot read input file '.*in\.mlir': not UTF-8 text \(byte 0 is 0x89\)")


def test_nul_on_stdin():
    rc, _, err = opt(stdin=b"module {\n}\x00")
    assert_clean_failure(rc, err, r"^<stdin>:2:2: error: input contains a NUL character")


def test_not_utf8_on_stdin():
    rc, _, err = opt("-", stdin=b"module {\n}\n\xff\xfe")
    assert_clean_failure(rc, err, r"error: .*not UTF-8 text")


@pytest.mark.parametrize("text", [
    "module attributes {x.a = " + "[" * 100000 + "]" * 100000 + "} {}\n",
    "func.func @f(%x: " + "tensor<" * 50000 + "f32" + ">" * 50000 + ") {\n  return\n}\n",
    "#l0 = loc(\"a\":1:1)\n" + "".join(f"#l{i + 1} = loc(callsite(#l{i} at \"a\":1:1))\n" for i in range(20000))
    + "module {\n} loc(#l20000)\n",
    "module attributes {x.a = array<index: 1, 2>} {}\n",
])
def test_inputs_that_would_crash_mlir(tmp_path, text):
    """Deep nesting overflows MLIR's recursive parser (a segfault) and array<index> trips an assertion (an abort):
    ditron-opt refuses them with an error instead."""
    rc, _, err = opt(write(tmp_path, text))
    assert_clean_failure(rc, err, r"in\.mlir:\d+:\d+: error: (brackets, regions and aliases nest deeper than 256|"
                                  r"dense arrays need an integer or float element type)")


@pytest.mark.parametrize("args, message", [
    (["--bogus"], r"^error: unrecognized arguments: --bogus \(see ditron-opt --help\)\n$"),
    (["a.mlir", "b.mlir"], r"^error: unrecognized arguments: b\.mlir"),
    (["--verify-each=perhaps"], r"^error: argument --verify-each: expects true or false, got 'perhaps'"),
    (["--print-ir-after=ditron-nope"], r"^error: --print-ir-after: unknown pass 'ditron-nope'\n$"),
])
def test_usage_errors(args, message):
    rc, _, err = opt(*args, stdin=VALID)
    assert_clean_failure(rc, err, message)


def test_unwritable_output(tmp_path):
    rc, _, err = opt(write(tmp_path, VALID), "-o", tmp_path / "no" / "such" / "dir.mlir")
    assert_clean_failure(rc, err, r"^error: cannot write output file '.*dir\.mlir': No such file or directory\n$")


def test_internal_error_is_one_line(tmp_path):
    """A bug inside a pass: one line, exit 1, the trace only with DITRON_TRACEBACK=1."""
    path = write(tmp_path, VALID)
    code = ("import sys; import ditron.passes.verify as v; "
            "v.VerifyPass.run = lambda self, module: {}['boom']; "
            "from ditron.tools.ditron_opt import main; main(sys.argv[1:])")
    cmd = [sys.executable, "-c", code, str(path), "--pass-pipeline=ditron-verify"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr == ("error: internal compiler error: KeyError: 'boom' (set DITRON_TRACEBACK=1 for the Python "
                           "trace, and please report it)\n")
    traced = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**os.environ, "DITRON_TRACEBACK": "1"})
    assert traced.returncode == 1 and "Traceback" in traced.stderr and "Fatal Python error" not in traced.stderr


def test_split_input_file_reports_every_chunk(tmp_path):
    text = BAD_SHAPE + "// -----\n" + VALID + "// -----\n" + "func.func @g() {\n  return %x\n}\n"
    rc, out, err = opt(write(tmp_path, text), "--split-input-file")
    assert_clean_failure(rc, err, r"in\.mlir:3:10: error: .*output dim 0 is 8")
    assert re.search(r"in\.mlir:16:12: error: expected ':'\n", err), err
    assert "func.func @f" in out  # the valid chunk still printed


# --------------------------------------------------------------------------------------------- working paths

def test_list_passes():
    rc, out, err = opt("--list-passes")
    assert rc == 0 and err == ""
    for name in PASSES:
        assert re.search(rf"^  {re.escape(name)} +\S", out, re.M), name
    for name, steps in PIPELINES.items():
        assert f"{name}" in out and ",".join(steps) in out


def test_help():
    rc, out, _ = opt("--help")
    assert rc == 0 and "--pass-pipeline" in out and "--split-input-file" in out


def test_example_through_the_check_pipeline():
    rc, out, err = opt(MLP, "--pass-pipeline=ditron-verify,ditron-canonicalize")
    assert rc == 0, err
    assert err == ""
    assert out.count('"ditron_task.matmul"') == 2 and '"ditron_task.elementwise"' in out


@pytest.mark.parametrize("args", [[], ["-"]])
def test_stdin(args):
    rc, out, err = opt(*args, "--pass-pipeline=ditron-canonicalize", stdin=VALID)
    assert rc == 0, err
    assert "return %arg0 : tensor<8xf32>" in out and "all_reduce" not in out


def test_output_file_reparses(tmp_path):
    out_path = tmp_path / "out.mlir"
    rc, out, err = opt(MLP, "-o", out_path, "--pass-pipeline=ditron-check")
    assert rc == 0 and out == "" and err == ""
    first = out_path.read_text()
    rc, again, err = opt(out_path)
    assert rc == 0, err
    assert again == first


def test_stdin_errors_name_stdin():
    rc, _, err = opt(stdin=BAD_SHAPE)
    assert_clean_failure(rc, err, r"^<stdin>:3:10: error: 'ditron_task\.all_gather' op output dim 0 is 8")


def test_console_script_installed():
    script = pathlib.Path(sys.executable).parent / "ditron-opt"
    if not script.exists():
        pytest.skip("ditron-opt console script not installed next to this Python")
    proc = subprocess.run([str(script), str(MLP)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "ditron_task.matmul" in proc.stdout
