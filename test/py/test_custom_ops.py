"""ditron.register_op: a user's kernel program (a ditron.device builder launching a @ditron.jit kernel) called as
an op of task programs, with its sharding rule -- traced by the frontend, verified, partitioned (resharding its
operands to the rule), tiled, lowered (the program inlined), simulated against the user's reference at
W = 1, 2, 3, 4, 8 and uneven sizes -- and on torch tensors (a UserOp)."""


import os
import sys
from pathlib import Path

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")  # the GPU tests' virtual worlds (before CUDA starts)

import numpy as np
import pytest

import ditron
import ditron.frontend as dt
from ditron.custom_ops import REGISTRY, CustomOpError, register_op
from ditron.dialects import ditron_context
from ditron.sim import simulate, task_reference

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from test_sim_jit import _line, gather_program  # noqa: E402


@pytest.fixture(scope="module")
def gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch


def build_gather(W, shapes, dtype, *, sm_budget, target, block=16, plant="none"):
    (n,), = shapes
    p = gather_program(W, n, block=block, plant=plant, dtype=dtype)
    p.target = target
    return p


GATHER = register_op("user_gather", build_gather, inputs=[dt.shard(0, "tp")], outputs=[dt.replicated],
                     reference=lambda x, **params: x)


def mlp_like(W: int, n: int, **params):
    @dt.program(dt.Mesh(tp=W))
    def f(x: dt.Tensor[(W * n,), "f32", dt.shard(0, "tp")]) -> dt.Sharded[dt.replicated]:
        return dt.relu(GATHER(x, **params))
    return f


def lowered(text: str, pipeline: str = "ditron-device") -> str:
    from ditron.passes.registry import parse_pipeline, run_passes
    from ditron.dialects.context import parse_module
    with ditron_context():
        m = parse_module(text, "<t>")
        run_passes(m, parse_pipeline(pipeline))
        return m.operation.get_asm(enable_debug_info=True)


def test_the_frontend_traces_a_custom_op_with_its_sharding_rule():
    text = mlp_like(4, 37).to_mlir()
    assert '"ditron_task.custom"(%arg0) {axis = "tp", in_shardings = [{dims = [["tp"]]}], kernel = "user_gather", ' \
           'operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, out_shardings = [{dims = [[]]}], params = {}, ' \
           'resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (tensor<148xf32>) -> tensor<148xf32>' in text, text
    part = mlp_like(4, 37).to_mlir("ditron-partition")
    assert "(tensor<37xf32>) -> tensor<148xf32>" in part, part


@pytest.mark.parametrize("W", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("n", [37, 16])
def test_a_task_program_calling_a_user_kernel_program_simulates_against_the_users_reference(W, n):
    text = mlp_like(W, n).to_mlir()
    device = lowered(text)
    assert "@gather" in device and "ditron.jit" in device, device
    r = simulate(device, W, reference=task_reference(text), calls=2)
    assert r.ok, r.summary()


def test_the_reference_is_the_users():
    """A reference that disagrees with the kernel program is a mismatch: the comparison is against the user's."""
    wrong = register_op("user_gather_wrong", build_gather, inputs=[dt.shard(0, "tp")], outputs=[dt.replicated],
                        reference=lambda x: 2 * x)

    @dt.program(dt.Mesh(tp=2))
    def f(x: dt.Tensor[(32,), "f32", dt.shard(0, "tp")]) -> dt.Sharded[dt.replicated]:
        return wrong(x)
    try:
        text = f.to_mlir()
        r = simulate(lowered(text), 2, reference=task_reference(text), calls=1)
        assert r.of_kind("mismatch"), r.summary()
    finally:
        REGISTRY.pop("user_gather_wrong")


def test_partition_reshards_an_operand_to_the_rule():
    """x arrives replicated; the rule takes it split by rows, which needs a slice the task level lacks: a
    located error. x split over rows but the rule wanting it replicated: an all_gather before the op."""
    rep = register_op("user_rep", build_gather_replicated, inputs=[dt.replicated], outputs=[dt.replicated],
                      reference=lambda x: np.concatenate([x] * 2), axis="tp")
    try:
        @dt.program(dt.Mesh(tp=2))
        def f(x: dt.Tensor[(32,), "f32", dt.shard(0, "tp")]) -> dt.Sharded[dt.replicated]:
            return rep(x)
        part = f.to_mlir("ditron-partition")
        assert '"ditron_task.all_gather"' in part and "(tensor<32xf32>) -> tensor<64xf32>" in part, part
        text = f.to_mlir()
        r = simulate(lowered(text), 2, reference=task_reference(text), calls=1)
        assert r.ok, r.summary()
    finally:
        REGISTRY.pop("user_rep")


def build_gather_replicated(W, shapes, dtype, *, sm_budget, target):
    (n,), = shapes
    return gather_program(W, n, dtype=dtype)


def test_findings_of_the_lowered_program_are_at_the_kernels_line():
    text = mlp_like(3, 37, plant="missing_notify").to_mlir()
    r = simulate(lowered(text), 3, reference=task_reference(text), calls=1)
    dead = r.of_kind("deadlock")
    assert dead and dead[0].loc.file.endswith("test_sim_jit.py"), r.summary()
    assert dead[0].loc.line == _line("# THE-WAIT")


def test_trace_errors_are_located_at_the_users_line():
    with pytest.raises(dt.TraceError, match=r"test_custom_ops.py:\d+:\d+: error: user_gather: takes 1 tensor"):
        @dt.program(dt.Mesh(tp=2))
        def f(x: dt.Tensor[(32,), "f32", dt.shard(0, "tp")]):
            return GATHER(x, x)
        f.to_mlir()
    with pytest.raises(dt.TraceError, match="input 0: dim 0 of size 33 does not divide evenly into 2 shards"):
        @dt.program(dt.Mesh(tp=2))
        def g(x: dt.Tensor[(33,), "f32"]):
            return GATHER(x)
        g.to_mlir()
    with pytest.raises(dt.TraceError, match="unexpected keyword argument 'blok'"):
        @dt.program(dt.Mesh(tp=2))
        def h(x: dt.Tensor[(32,), "f32", dt.shard(0, "tp")]):
            return GATHER(x, blok=3)
        h.to_mlir()


def test_register_op_errors():
    with pytest.raises(CustomOpError, match="name must be letters"):
        register_op("a b", build_gather, inputs=[], outputs=[dt.replicated], reference=lambda: 0)
    with pytest.raises(CustomOpError, match="inputs\\[0\\] is 3, not a sharding"):
        register_op("a", build_gather, inputs=[3], outputs=[dt.replicated], reference=lambda: 0)
    with pytest.raises(CustomOpError, match="runs over one axis"):
        register_op("a", build_gather, inputs=[dt.shard(0, "dp")], outputs=[dt.shard(0, "tp")], reference=id)
    with pytest.raises(CustomOpError, match="padded"):
        register_op("a", build_gather, inputs=[dt.shard(0, "tp", padded=True)], outputs=[dt.replicated],
                    reference=id)
    assert "a" not in REGISTRY


def test_lowering_a_kernel_program_nobody_registered_is_a_located_error():
    text = mlp_like(2, 16).to_mlir().replace('kernel = "user_gather"', 'kernel = "nobody"')
    with pytest.raises(ditron.PassError, match="no kernel program 'nobody' is registered in this process"):
        lowered(text)


def test_a_program_that_does_not_take_the_ops_shards_is_a_located_error():
    """A builder whose program takes another shape than the op's shard (here: even sizes only) is refused where
    the op is, at trace time and when lowering IR that names it."""
    even = register_op("user_gather_even", lambda W, shapes, dtype, *, sm_budget, target:
                       gather_program(W, shapes[0][0] // 2 * 2, dtype=dtype), inputs=[dt.shard(0, "tp")],
                       outputs=[dt.replicated], reference=lambda x: x)
    try:
        with pytest.raises(dt.TraceError, match=r"test_custom_ops.py:\d+:\d+: error: user_gather_even: custom op "
                                                r"'user_gather_even': its program takes \[\[14\]\] \(f32\); the "
                                                r"op passes \[\[15\]\] f32"):
            @dt.program(dt.Mesh(tp=2))
            def f(x: dt.Tensor[(30,), "f32", dt.shard(0, "tp")]):
                return even(x)
            f.to_mlir()
        text = mlp_like(2, 16).to_mlir().replace('kernel = "user_gather"', 'kernel = "user_gather_even"')
        lowered(text)  # even shards: fine
        odd = text.replace("tensor<32xf32>", "tensor<30xf32>").replace("tensor<16xf32>", "tensor<15xf32>")
        with pytest.raises(ditron.PassError, match=r"<t>:\d+:\d+: error: ditron-lower-task-to-device: "
                                                   r"'ditron_task.custom' op kernel program 'user_gather_even': .*"
                                                   r"its program takes \[\[14\]\]"):
            lowered(odd)
    finally:
        REGISTRY.pop("user_gather_even")


def test_the_op_on_torch_tensors_is_a_user_op():
    from ditron.user_ops import UserOp
    assert isinstance(GATHER.user_op, UserOp) and GATHER.user_op.arity == 1
    import torch
    with pytest.raises(ditron.DitronError, match="a list of one tensor per rank"):
        GATHER(torch.zeros(4), world=ditron.World.virtual(2))


@pytest.mark.gpu
def test_the_op_on_torch_tensors_in_a_virtual_world(gpu):
    import torch
    W, n = 2, 37
    xs = [torch.randn(n, device="cuda") for _ in range(W)]
    ys = GATHER(xs, world=ditron.World.virtual(W))
    for y in ys:
        torch.testing.assert_close(y, torch.cat(xs))


sys.path.insert(0, str(HERE.parents[2] / "examples"))
import ag_gemm_user  # noqa: E402

AG_GEMM = register_op("ag_gemm_user", ag_gemm_user.build, inputs=[dt.shard(0, "tp"), dt.shard(1, "tp")],
                      outputs=[dt.shard(1, "tp")], reference=lambda x, w, **params: x @ w)


@pytest.mark.parametrize("W,gemm", [(1, "template"), (3, "template"), (2, "jit")])
def test_the_user_ag_gemm_as_a_task_op_then_a_builtin_op(W, gemm):
    """examples/ag_gemm_user.py (copy-engine chunks, a GEMM with per-tile waits: the template's or the user's
    @ditron.jit one) as a task op on operands of different shapes, followed by a built-in elementwise op; the
    rows per rank (20) divide no GEMM tile."""
    m, K, n = 20, 48, 24
    dtype = "bf16" if gemm == "template" else "f32"  # the GEMM template takes 16-bit floats

    @dt.program(dt.Mesh(tp=W))
    def f(x: dt.Tensor[(W * m, K), dtype, dt.shard(0, "tp")],
          w: dt.Tensor[(K, W * n), dtype, dt.shard(1, "tp")]) -> dt.Sharded[dt.shard(1, "tp")]:
        return dt.relu(AG_GEMM(x, w, chunks=2, gemm=gemm))
    text = f.to_mlir()
    assert '"ditron_task.custom"(%arg0, %arg1)' in text and "params = {chunks = 2 : i64" in text, text
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == "f32" else {}
    r = simulate(lowered(text), W, reference=task_reference(text), calls=2, **tol)
    assert r.ok, r.summary()


def test_a_builder_error_is_a_trace_error_at_the_ops_call():
    with pytest.raises(dt.TraceError, match=r"test_custom_ops.py:\d+:\d+: error: ag_gemm_user: gemm kernel: gemm "
                                            r"template: in_dtype 'fp32' .* \(in its builder, .*ag_gemm_user.py:\d+:\d+\)"):
        @dt.program(dt.Mesh(tp=2))
        def f(x: dt.Tensor[(40, 48), "f32", dt.shard(0, "tp")], w: dt.Tensor[(48, 48), "f32", dt.shard(1, "tp")]):
            return AG_GEMM(x, w, chunks=2)
        f.to_mlir()


@pytest.mark.slow
def test_a_task_program_with_a_custom_op_compiles_to_an_artifact(tmp_path):
    """ditron.compile of the task program: the kernel program's @ditron.jit kernel is compiled from its Python
    function into the artifact, launched by the host program with its parameters."""
    exe = ditron.compile(mlp_like(2, 37).to_mlir(), "cuda:90", out_dir=tmp_path / "a", cache=False)
    assert "gather" in exe.kernels
    assert exe.host_program["kernels"]["gather"]["args"] == ["x_ptr", "g_ptr", "y_ptr", "pad_ptr", "n", "epoch"]


@pytest.mark.gpu
def test_a_task_program_with_a_custom_op_on_a_virtual_world(gpu):
    """The same artifact run by the executor in a virtual world of 2 ranks on one GPU, against the reference."""
    import torch
    W, n = 2, 37
    exe = ditron.compile(mlp_like(W, n).to_mlir(), cache=False)
    xs = [torch.randn(n, device="cuda") for _ in range(W)]
    ys = exe.run(ditron.World.virtual(W), [[x] for x in xs])
    want = torch.relu(torch.cat(xs))
    for y in ys:
        torch.testing.assert_close(y[0], want)


def test_a_registered_op_as_a_torch_operator_traces_with_its_output_shapes():
    """torch_ops.register_custom_op: ditron::user_gather(Tensor x0, str world) -> Tensor, whose fake builds the
    program for the handle's world (no GPU, no MLIR) -- FakeTensor and make_fx see [W * n] from this rank's [n]."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from ditron import torch_ops
    from ditron.runtime.world import World
    oper = torch_ops.register_custom_op(GATHER)
    assert torch_ops.register_custom_op(GATHER) is oper   # once per op and parameters
    assert "user_gather(Tensor x0, str world) -> Tensor" in str(oper.default._schema)
    h = torch_ops.register_world(World(3, 0, torch.device("cpu")))
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        y = oper(mode.from_tensor(torch.empty(37)), h)
        assert tuple(y.shape) == (111,) and y.dtype == torch.float32
    gm = make_fx(lambda x: torch.relu(torch.ops.ditron.user_gather(x, h)), tracing_mode="fake")(torch.empty(16))
    assert "ditron.user_gather" in gm.code
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode, \
            pytest.raises(ditron.DitronError, match="the tensors must share one of"):
        oper(mode.from_tensor(torch.empty(16, dtype=torch.float64)), h)
    with pytest.raises(ditron.DitronError, match="cannot name a torch operator"):
        torch_ops.register_custom_op(register_op("all_gather", build_gather, inputs=[dt.shard(0, "tp")],
                                                 outputs=[dt.replicated], reference=lambda x: x))
    REGISTRY.pop("all_gather")


@pytest.mark.gpu
def test_a_registered_op_as_a_torch_operator_on_the_gpu(gpu):
    import torch
    from ditron import torch_ops
    oper = torch_ops.register_custom_op(GATHER)
    h = torch_ops.register_world(ditron.World.virtual(1))
    x = torch.randn(37, device="cuda")
    torch.testing.assert_close(oper(x, h), x)
