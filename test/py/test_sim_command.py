"""``ditron sim`` / ``python -m ditron.sim``: the command-line face of the simulator."""
from __future__ import annotations

import io

import pytest

import sim_programs as P
from ditron.sim.command import main


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out, err)
    return code, out.getvalue(), err.getvalue()


def test_a_clean_device_program(tmp_path):
    f = tmp_path / "ag.mlir"
    f.write_text(P.all_gather(4, 16, 8))
    code, out, err = _run([str(f), "--seeds", "0,1", "--calls", "3"])
    assert code == 0, out + err
    assert out.count("OK: no deadlock, no race") == 2 and "4 rank(s)" in out and "3 call(s)" in out


def test_a_deadlock_exits_1_with_the_location():
    code, out, _ = _run([P.path("deadlock_ring"), "-W", "2"])
    assert code == 1
    assert "deadlock_ring.mlir:17:5: error: [deadlock] rank 0, call 1" in out


def test_mutation_testing_from_the_command_line(tmp_path):
    f = tmp_path / "ag.mlir"
    f.write_text(P.all_gather(2, 16, 8))
    code, out, err = _run([str(f), "--mutate"])
    assert code == 0, out + err
    assert "10/10 mutants caught" in out and "drop-wait #0" in out


def test_a_task_level_program_is_lowered_and_checked_against_itself(tmp_path):
    from ditron.passes.registry import PIPELINES

    if "ditron-device" not in PIPELINES:
        pytest.skip("ditron-device is not registered yet")
    from test_sim_programs import _task_program

    f = tmp_path / "gemm_rs.mlir"
    f.write_text(_task_program("gemm_rs", 2, 128, 64, 64))
    code, out, err = _run([str(f)])
    assert code == 0, out + err
    assert "outputs equal to the reference" in out


def test_errors_are_one_line_without_a_traceback(tmp_path):
    code, _, err = _run([str(tmp_path / "missing.mlir")])
    assert code == 1 and err.startswith("error: cannot read")
    f = tmp_path / "ag.mlir"
    f.write_text(P.all_gather(2, 16, 8))
    for seeds in ("x", "-1", "", "1,,2"):
        code, _, err = _run([str(f), "--seeds", seeds])
        assert code == 1 and err == f"error: --seeds expects comma-separated non-negative integers, got '{seeds}'\n"
    for flag in ("--num-sms", "--calls", "--world-size"):  # not a deadlock of nobody, or nothing simulated
        code, _, err = _run([str(f), flag, "0"])
        assert code == 1 and err == f"error: {flag} must be >= 1, got 0\n"
    code, _, err = _run(["-"])
    assert code == 1 and err.startswith("error: ditron sim reads a .mlir file; standard input ('-') is not supported")
    (tmp_path / "latin1.mlir").write_bytes(b"module {\xdc}\n")
    code, _, err = _run([str(tmp_path / "latin1.mlir")])
    assert code == 1 and err == f"error: cannot read '{tmp_path / 'latin1.mlir'}': not UTF-8 text (byte 8)\n"
    code, out, err = _run([str(f), "-W", "3"])  # lowered for 2 ranks: not a cascade of out-of-bounds findings
    assert code == 1 and not out and err.startswith("error: --world-size 3: the program is written for the 2 "
                                                    "rank(s) of its ditron.mesh (") and "Traceback" not in err
    f.write_text("module {\n  func.func @f() {\n    \"ditron_device.nope\"() : () -> ()\n    return\n  }\n}\n")
    code, _, err = _run([str(f), "-W", "1"])
    assert code == 1 and "ag.mlir:3:5: error:" in err and "Traceback" not in err


def test_a_bug_is_one_line(tmp_path, monkeypatch):
    """A failure that is not a DitronError (a bug, e.g. a malformed attribute a reader did not expect): one line,
    exit 1, as ditron-opt and the other ditron commands."""
    import ditron.sim as sim
    f = tmp_path / "ag.mlir"
    f.write_text(P.all_gather(2, 16, 8))
    monkeypatch.setattr(sim, "simulate", lambda *a, **k: {}["boom"])
    monkeypatch.delenv("DITRON_TRACEBACK", raising=False)
    code, _, err = _run([str(f)])
    assert code == 1 and err == ("error: internal compiler error: KeyError: 'boom' (set DITRON_TRACEBACK=1 for the "
                                 "Python trace, and please report it)\n")


def test_graph_replays_from_the_command_line(tmp_path):
    """--graph: the push all-reduce (its pad consumed) replays race-free with epoch 1; a program whose pads a graph
    would zero (the gather's) is reported, exit code 1."""
    f = tmp_path / "all_reduce.mlir"
    f.write_text("""module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @all_reduce(%x: tensor<100x32xbf16>) -> tensor<100x32xbf16> attributes {ditron.view = "local"} {
    %y = "ditron_task.all_reduce"(%x) {axis = "tp", reduce = "sum"} : (tensor<100x32xbf16>) -> tensor<100x32xbf16>
    return %y : tensor<100x32xbf16>
  }
}""")
    code, out, err = _run([str(f), "--graph", "--calls", "4", "--pipeline",
                           "ditron-tile{all-reduce=push},ditron-lower-task-to-device"])
    assert code == 0, out + err
    assert "4 call(s)" in out and "outputs equal to the reference" in out
    g = tmp_path / "ag.mlir"
    g.write_text(P.all_gather(2, 16, 8))
    code, out, _ = _run([str(g), "--graph"])
    assert code == 1 and "not consumed (ditron.consumed)" in out
