"""B in nn.Linear's [N, K] layout (``transpose_b`` on ditron_task.matmul): the global-view task program through
ditron-device, simulated for W = 1, 2, 3 ranks (3 with uneven, padded shards) against the task-level reference, for
a matmul alone (column-parallel), AG+GEMM, GEMM+RS and GEMM+AR; the GEMM kernels read B^T in place (b_trans, no
transposed copy); the frontend's dt.matmul(..., transpose_b=True). (No ``from __future__ import annotations``: the
frontend evaluates the programs' annotations, which name local variables.)"""
import numpy as np
import pytest

from ditron.sim import simulate, task_reference

REP = "{ditron.sharding = {dims = [[], []]}}"


def sharding(dims: str, padded: bool) -> str:
    return f"{{ditron.sharding = {{dims = {dims}{', padded = true' if padded else ''}}}}}"


def program(kind: str, W: int, M: int, N: int, K: int) -> str:
    """y = x @ w.T with w [N, K]: column-parallel (w's rows = y's columns sharded), AG+GEMM (x's rows too), or
    K sharded with the sum reduce-scattered (rows) or all-reduced."""
    pad = kind in ("column", "ag_gemm") and N % W != 0
    if kind == "column":
        sx, sw, sy = REP, sharding('[["tp"], []]', pad), sharding('[[], ["tp"]]', pad)
    elif kind == "ag_gemm":
        sx, sw, sy = sharding('[["tp"], []]', False), sharding('[["tp"], []]', pad), sharding('[[], ["tp"]]', pad)
    else:
        sx, sw = sharding('[[], ["tp"]]', False), sharding('[[], ["tp"]]', False)
        sy = sharding('[["tp"], []]', False) if kind == "gemm_rs" else REP
    return f"""module attributes {{ditron.mesh = {{axes = ["tp"], shape = array<i64: {W}>}}}} {{
  func.func @{kind}(%x: tensor<{M}x{K}xbf16> {sx}, %w: tensor<{N}x{K}xbf16> {sw}) -> (tensor<{M}x{N}xbf16> {sy}) {{
    %y = "ditron_task.matmul"(%x, %w) {{transpose_b = true}} : (tensor<{M}x{K}xbf16>, tensor<{N}x{K}xbf16>) -> tensor<{M}x{N}xbf16>
    return %y : tensor<{M}x{N}xbf16>
  }}
}}"""


def lower(text: str, name: str):
    """ditron-device on the program: (the module, the GEMM kernel records' b_trans, the launched kernels)."""
    from ditron.dialects.context import parse_module
    from ditron.passes.manager import PassManager
    module = parse_module(text, f"{name}.mlir")
    PassManager("ditron-device").run(module)
    return module


@pytest.mark.parametrize("W", [1, 2, 3])
@pytest.mark.parametrize("kind", ["column", "ag_gemm", "gemm_rs", "gemm_ar"])
def test_nk_layout_simulates_to_the_reference(kind, W):
    from ditron.dialects.context import ditron_context
    M, N, K = 48 * W, (100 if W == 3 else 32 * W), 32 * W
    text = program(kind, W, M, N, K)
    with ditron_context():
        module = lower(text, kind)
        asm = module.operation.get_asm()
        # the GEMM reads B [N, K] in place: its record says so, and no copy kernel transposes B
        assert "b_trans = true" in asm and "transpose" not in asm.replace("transpose_b", "")
        for seed in (0, 1):
            result = simulate(module, W, seed=seed, calls=2, reference=task_reference(text))
            assert result.ok, result.summary()
        del module


def test_nk_layout_through_the_reference_equals_numpy():
    text = program("column", 1, 8, 6, 4)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)
    ((y,),) = task_reference(text)([[x, w]])
    np.testing.assert_allclose(np.asarray(y, dtype=np.float32), x @ w.T, rtol=1e-5)


def test_frontend_transpose_b():
    import ditron.frontend as dt
    mesh = dt.Mesh(tp=2)

    def body(x, w):
        return dt.matmul(x, w, transpose_b=True)
    prog = dt.program(mesh, name="linear")(_annotated(body, 2))
    text = prog.to_mlir()
    assert "transpose_b = true" in text and "tensor<64x32xbf16>" in text
    with pytest.raises(dt.TraceError, match=r"rhs is \[N, K\]"):
        dt.program(mesh, name="bad")(_annotated(body, 2, k_w=16)).to_mlir()


def _annotated(body, W, k_w=32):
    import ditron.frontend as dt

    def linear(x: dt.Tensor[(16, 32), "bf16", dt.replicated],
               w: dt.Tensor[(64, k_w), "bf16", dt.shard(0, "tp")]) -> dt.Sharded[dt.shard(1, "tp")]:
        return body(x, w)
    return linear
