"""Sizes at the edges, as a user meets them (issue 25): ``ditron compile`` and ``ditron sim`` refuse a dim the kernels
cannot index, or a zero-size one, at the op (as ``ditron-opt`` does: test/lit/pipeline/sizes_invalid.mlir); the
largest tensors they accept compile to kernels with 64-bit offsets (test/lit/pipeline/sizes.mlir for the IR); and the
compile path's searches are closed forms, checked here against the walks they replace."""
from __future__ import annotations

import gc
import io

import numpy as np
import pytest

import ditron
from ditron.cli import run
from ditron.passes.tile import divisor_at_least

MATMUL = '''module attributes {{ditron.mesh = {{axes = ["tp"], shape = array<i64: 2>}}}} {{
  func.func @mm(%x: tensor<128x{k}xbf16> {{ditron.sharding = {{dims = [[], []]}}}},
                %w: tensor<{k}x64xbf16> {{ditron.sharding = {{dims = [[], []]}}}})
      -> (tensor<128x64xbf16> {{ditron.sharding = {{dims = [[], []]}}}}) {{
    %y = "ditron_task.matmul"(%x, %w) : (tensor<128x{k}xbf16>, tensor<{k}x64xbf16>) -> tensor<128x64xbf16>
    return %y : tensor<128x64xbf16>
  }}
}}
'''


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    gc.collect()
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("k, message", [
    (0, "operand 0 (tensor<128x0xbf16>) has size 0 in dim 1; ditron computes on non-empty tensors only"),
    (1 << 40, "operand 0 (tensor<128x1099511627776xbf16>) has size 1099511627776 in dim 1; ditron's kernels index a "
              "dim in 32 bits: at most 1073741824 (2^30) per dim"),
])
@pytest.mark.parametrize("command", ["compile", "sim"])
def test_commands_refuse_sizes_the_kernels_cannot_take_at_the_op(tmp_path, monkeypatch, command, k, message):
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "mm.mlir"
    src.write_text(MATMUL.format(k=k))
    argv = ["compile", str(src), "--target", "cuda:90", "-o", str(tmp_path / "art")] if command == "compile" else \
        ["sim", str(src), "-W", "2"]
    code, _, err = cli(*argv)
    assert code == 1
    assert err.startswith(f"{src}:5:10: error: 'ditron_task.matmul' op {message}"), err
    assert "internal compiler error" not in err and "Traceback" not in err


LARGE = '''module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 1>}} {
  func.func @mm(%x: tensor<65536x64xbf16> {ditron.sharding = {dims = [[], []]}},
                %w: tensor<64x65536xbf16> {ditron.sharding = {dims = [[], []]}})
      -> (tensor<65536x65536xbf16> {ditron.sharding = {dims = [[], []]}}) {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<65536x64xbf16>, tensor<64x65536xbf16>) -> tensor<65536x65536xbf16>
    %z = "ditron_task.elementwise"(%y, %y) {fn = "mul"} : (tensor<65536x65536xbf16>, tensor<65536x65536xbf16>) -> tensor<65536x65536xbf16>
    return %z : tensor<65536x65536xbf16>
  }
}
'''


def test_an_8_gb_activation_compiles_with_64_bit_offsets():
    """C = A @ B into 65536 x 65536 bf16 (8 GB), then its square (C * C: no GEMM epilogue step, a kernel of its own;
    a relu would join the GEMM, ditron-fuse-epilogue): Triton compiles both kernels for sm_90, and the
    elementwise kernel's offsets (row * 65536 + col) are i64 (the interpreter runs both at the far end of such
    tensors: test_kernels_large.py)."""
    exe = ditron.compile(LARGE, target="cuda:90", cache=False)
    assert set(exe.kernels) == {"gemm", "elementwise"} and exe["gemm"].asm["cubin"]
    assert "xi64>" in exe["elementwise"].asm["ttir"]


def test_divisor_at_least_matches_the_walk_it_replaces():
    rng = np.random.default_rng(25)
    for n in [1, 2, 97, 360] + [int(v) for v in rng.integers(1, 5000, 200)]:
        for want in {1, n, int(rng.integers(1, n + 1))}:
            assert divisor_at_least(n, want) == min(d for d in range(want, n + 1) if n % d == 0)
    assert divisor_at_least(1 << 30, 1000) == 1024
    prime = (1 << 30) - 35  # the walk from 2 to it took minutes
    assert divisor_at_least(prime, 2) == prime
