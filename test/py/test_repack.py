"""Operand repack (issue 30): a matmul whose A or B rows start off TMA's 128-byte lines is slower on the H200 than
the copy of the operand to aligned rows plus the aligned GEMM (backends/nvidia/facts.py TMA_OFF_LINE); ditron-tile
weighs the two (cost_model.repack_choice) and ditron-lower-task-to-device copies the chosen operands before the
GEMM. The simulator checks the repacked programs against the task-level reference at W = 1, 2, 3, 4, 8 with rows
that do not divide evenly, and catches a repack copy that moves too little (the GEMM reads what nothing wrote)."""
from __future__ import annotations

import io

import pytest

from ditron.cost_model import off_line, padded_ld, peaks_for, repack_choice

H200 = peaks_for("cuda:90")


def test_off_line_rows():
    assert off_line(5000, 3000, 2, H200) == (True, True)        # 10000 / 6000-byte rows
    assert off_line(4096, 5000, 2, H200) == (False, True)
    assert off_line(4096, 4096, 2, H200) == (False, False)
    assert off_line(1111, 4096, 2, H200) == (False, False)      # not 16-byte aligned: pointer loads, no TMA rule
    assert off_line(5000, 3000, 2, peaks_for("hip:gfx942")) == (False, False)  # no TMA loads
    assert off_line(5000, 3000, 2, peaks_for("cuda:80")) == (False, False)
    assert padded_ld(5000, 2, H200) == 5056 and padded_ld(5056, 2, H200) == 5056 and padded_ld(3000, 1, H200) == 3072


def test_repack_choice_weighs_the_copy_against_the_slower_gemm():
    t = 230e-6  # 5000 x 3000 x 5000 with rows on lines (H200, measured)
    choice, est = repack_choice(t, (5000, 5000), (5000, 3000), 2, H200)
    assert choice == "b"                 # B is the smaller copy and its rows cost the GEMM more
    assert t < est < t * 1.30             # below the GEMM with both operands off lines
    assert repack_choice(t, (4096, 4096), (4096, 4096), 2, H200) == ("", t)
    # a GEMM too short for a copy to pay: left as it is, its time the off-line one
    choice, est = repack_choice(2e-6, (64, 200), (200, 264), 2, H200)
    assert choice == "" and est == pytest.approx(2e-6 * 1.30)
    assert repack_choice(t, (5000, 5000), (5000, 3000), 2, H200, allowed=("ab",))[0] == "ab"
    assert repack_choice(t, (5000, 5000), (5000, 3000), 2, H200, allowed=("",)) == ("", pytest.approx(t * 1.30))


def _program(m: int, k: int, n: int, w: int = 1, transpose_b: bool = False) -> str:
    b = f"{n}x{k}" if transpose_b else f"{k}x{n}"
    attr = " {transpose_b = true}" if transpose_b else ""
    return f"""module attributes {{ditron.mesh = {{axes = ["tp"], shape = array<i64: {w}>}}}} {{
  func.func @mm(%a: tensor<{m}x{k}xbf16> {{ditron.sharding = {{dims = [["tp"], []], padded = true}}}},
                %b: tensor<{b}xbf16> {{ditron.sharding = {{dims = [[], []]}}}})
      -> (tensor<{m}x{n}xbf16> {{ditron.sharding = {{dims = [["tp"], []], padded = true}}}}) {{
    %c = "ditron_task.matmul"(%a, %b){attr} : (tensor<{m}x{k}xbf16>, tensor<{b}xbf16>) -> tensor<{m}x{n}xbf16>
    return %c : tensor<{m}x{n}xbf16>
  }}
}}"""


def _lower(text: str, tile: str = "ditron-tile") -> str:
    from ditron.dialects import ditron_context
    from ditron.dialects.context import parse_module
    from ditron.passes.manager import run_pipeline
    with ditron_context():
        module = parse_module(text)
        run_pipeline(module, f"ditron-partition,{tile},ditron-lower-task-to-device")
        return str(module)


def test_ditron_tile_repacks_what_the_model_says_and_the_lowering_copies_it():
    out = _lower(_program(3000, 3000, 5000))
    assert 'repack_b' in out and 'ditron.role = "repack"' in out and "ldb = 5056" in out and "lda = 3000" in out
    assert "memref<3000x5056xbf16>" in out and "repack_a" not in out
    assert "repack" not in _lower(_program(3000, 3000, 5000), "ditron-tile{repack=off}")
    assert "repack" not in _lower(_program(4096, 4096, 4096), "ditron-tile{repack=all}")  # rows on lines
    forced = _lower(_program(130, 200, 264), "ditron-tile{repack=all}")
    assert "repack_a" in forced and "repack_b" in forced and "lda = 256" in forced and "ldb = 320" in forced
    tb = _lower(_program(130, 200, 264, transpose_b=True), "ditron-tile{repack=all}")
    assert "memref<264x256xbf16>" in tb and "ldb = 256" in tb and "b_trans = true" in tb


def _sim(argv):
    from ditron.sim.command import main
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out, err)
    return code, out.getvalue() + err.getvalue()


PIPELINE = ("ditron-partition,ditron-canonicalize,ditron-fuse-overlap,ditron-fuse-epilogue,ditron-tile{repack=all},"
            "ditron-lower-task-to-device,ditron-schedule-overlap,ditron-lower-device-to-core")


@pytest.mark.parametrize("w", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_repacked_programs_simulate_equal_to_the_reference(tmp_path, w, transpose_b):
    f = tmp_path / "mm.mlir"
    f.write_text(_program(8 * w + 5, 200, 264, w, transpose_b))  # rows that do not divide by W
    code, out = _sim([str(f), "--pipeline", PIPELINE, "--seeds", "0,1"])
    assert code == 0, out
    assert out.count("outputs equal to the reference") == 2


def test_the_simulator_catches_a_short_repack_copy(tmp_path):
    import re
    text = _lower(_program(21, 200, 264, 2), "ditron-tile{repack=all}")
    f = tmp_path / "mm.mlir"
    f.write_text(text)
    code, out = _sim([str(f), "-W", "2"])
    assert code == 0, out
    # the repack of A copies 64 of its 200 columns: the GEMM reads the rest from a buffer that does not hold them
    short, n = re.subn(r'("ditron_device.copy"\(%arg0, %0, [^)]*, )%c200\)', r"\1%c64)", text)
    assert n == 1, text
    f.write_text(short.replace("%c0 = arith.constant 0 : index",
                               "%c0 = arith.constant 0 : index\n    %c64 = arith.constant 64 : index", 1))
    code, out = _sim([str(f), "-W", "2"])
    assert code == 1 and "[uninitialized-read]" in out and "reads 'repack_a'" in out and "[0:11, 64:200]" in out, out
