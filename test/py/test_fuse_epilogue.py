"""ditron-fuse-epilogue end to end: the elementwise ops after a matmul (bias, activations, residual, gated
silu_mul, casts) become its GEMM's epilogue -- plain, AG+GEMM, and the adds after GEMM+RS / GEMM+AR under every
algorithm -- and the device program, simulated, computes the task program's result with no elementwise kernel
for the fused ops. The frontend reaches it with ordinary Python (``dt.silu(x @ w + b)``)."""

import pytest

import ditron.frontend as dt
from ditron.passes.registry import PIPELINES
from ditron.sim import simulate, task_reference
from test_collectives import lower


def _t(*shape, dtype="bf16") -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>"


def _launches(device_text: str, template: str) -> int:
    return device_text.count(f'template = "{template}"')


def _check(text: str, W: int, *, tile: str = "", fused_steps: int, left: int = 0, calls: int = 2, seed: int = 0):
    """Lower ``text`` (local view) with the fusion, check what was fused and that it simulates to the reference."""
    marked = lower(text, "ditron-fuse-overlap,ditron-fuse-epilogue")
    assert marked.count("step = ") == fused_steps, marked
    device = lower(marked, f"ditron-tile{{{tile}}},ditron-lower-task-to-device,ditron-schedule-overlap")
    assert _launches(device, "elementwise") == left, device
    result = simulate(device, world_size=W, seed=seed, calls=calls, reference=task_reference(text))
    assert result.ok, result.summary()
    return device


def _module(W: int, args: str, res: str, body: str) -> str:
    return (f'module attributes {{ditron.mesh = {{axes = ["tp"], shape = array<i64: {W}>}}}} {{\n'
            f'  func.func @f({args}) -> {res} attributes {{ditron.view = "local"}} {{\n'
            f'{body}\n  }}\n}}\n')


# --------------------------------------------------------------------------------- one rank, plain GEMMs

def test_bias_gelu_cast_fuse_into_one_gemm():
    M, K, N = 72, 48, 40
    text = _module(1, f"%x: {_t(M, K)}, %w: {_t(K, N)}, %b: {_t(N)}", _t(M, N, dtype="f32"), f'''
    %h = "ditron_task.matmul"(%x, %w) : ({_t(M, K)}, {_t(K, N)}) -> {_t(M, N)}
    %a = "ditron_task.elementwise"(%h, %b) {{fn = "add"}} : ({_t(M, N)}, {_t(N)}) -> {_t(M, N)}
    %g = "ditron_task.elementwise"(%a) {{fn = "gelu"}} : ({_t(M, N)}) -> {_t(M, N)}
    %y = "ditron_task.elementwise"(%g) {{fn = "cast"}} : ({_t(M, N)}) -> {_t(M, N, dtype="f32")}
    return %y : {_t(M, N, dtype="f32")}''')
    device = _check(text, 1, fused_steps=3)
    assert 'out_dtype = "fp32"' in device and 'fn = "gelu"' in device


def test_gated_mlp_silu_mul_fuses_into_the_later_matmul_and_residual_into_the_down_projection():
    M, K, F = 64, 32, 48
    text = _module(1, f"%x: {_t(M, K)}, %wg: {_t(K, F)}, %wu: {_t(K, F)}, %wd: {_t(F, K)}", _t(M, K), f'''
    %g = "ditron_task.matmul"(%x, %wg) : ({_t(M, K)}, {_t(K, F)}) -> {_t(M, F)}
    %u = "ditron_task.matmul"(%x, %wu) : ({_t(M, K)}, {_t(K, F)}) -> {_t(M, F)}
    %h = "ditron_task.elementwise"(%g, %u) {{fn = "silu_mul"}} : ({_t(M, F)}, {_t(M, F)}) -> {_t(M, F)}
    %d = "ditron_task.matmul"(%h, %wd) : ({_t(M, F)}, {_t(F, K)}) -> {_t(M, K)}
    %y = "ditron_task.elementwise"(%x, %d) {{fn = "add"}} : ({_t(M, K)}, {_t(M, K)}) -> {_t(M, K)}
    return %y : {_t(M, K)}''')
    device = _check(text, 1, fused_steps=2)
    assert device.count('"acc" = 1') == 0  # attribute form: acc = 1 : i64
    assert device.count("acc = 1 : i64") == 2  # silu_mul(gate, acc) and add(x, acc): the GEMM result second


def test_multi_use_result_is_not_fused():
    M, K, N = 64, 32, 32
    text = _module(1, f"%x: {_t(M, K)}, %w: {_t(K, N)}", f"({_t(M, N)}, {_t(M, N)})", f'''
    %h = "ditron_task.matmul"(%x, %w) : ({_t(M, K)}, {_t(K, N)}) -> {_t(M, N)}
    %y = "ditron_task.elementwise"(%h) {{fn = "gelu"}} : ({_t(M, N)}) -> {_t(M, N)}
    return %h, %y : {_t(M, N)}, {_t(M, N)}''')
    _check(text, 1, fused_steps=0, left=1)


# ----------------------------------------------------------------------------- GEMM+RS / GEMM+AR, W = 2

W, R, K, N = 2, 64, 32, 48  # R rows per rank


def _reduced(coll: str, *, replicated: bool = True, tail: str = "gelu") -> str:
    big = W * R
    out = _t(R, N) if coll == "reduce_scatter" else _t(big, N)
    res = _t(R, N) if coll == "reduce_scatter" else _t(big, N)
    dim = "dim = 0 : i64, " if coll == "reduce_scatter" else ""
    rep = " {ditron.sharding = {dims = [[]]}}" if replicated else ""
    rrep = " {ditron.sharding = {dims = [[], []]}}" if replicated else ""
    return _module(W, f"%x: {_t(big, K)}, %w: {_t(K, N)}, %b: {_t(N)}{rep}, %r: {res}{rrep}", out, f'''
    %p = "ditron_task.matmul"(%x, %w) : ({_t(big, K)}, {_t(K, N)}) -> {_t(big, N)}
    %y = "ditron_task.{coll}"(%p) {{axis = "tp", {dim}reduce = "sum"}} : ({_t(big, N)}) -> {out}
    %z = "ditron_task.elementwise"(%y, %b) {{fn = "add"}} : ({out}, {_t(N)}) -> {out}
    %s = "ditron_task.elementwise"(%r, %z) {{fn = "add"}} : ({res}, {out}) -> {out}
    %t = "ditron_task.elementwise"(%s) {{fn = "{tail}"}} : ({out}) -> {out}
    return %t : {out}''')


@pytest.mark.parametrize("tile", ["reduce-scatter=epilogue engine=sm", "reduce-scatter=epilogue engine=copy_engine",
                                  "reduce-scatter=reduce_kernel", "reduce-scatter=one_launch",
                                  "reduce-scatter=push engine=sm", "reduce-scatter=push_sum engine=sm"])
def test_adds_after_gemm_rs_move_before_the_sum_on_the_owned_rows(tile):
    # bias and residual fused (each rank adds its own to the rows it owns); the gelu after the sum is a kernel
    device = _check(_reduced("reduce_scatter"), W, tile=tile, fused_steps=2, left=1)
    assert device.count("own_rows = 64 : i64") == 2


@pytest.mark.parametrize("tile", ["all-reduce=one_shot", "all-reduce=two_shot", "all-reduce=epilogue engine=sm",
                                  "all-reduce=push engine=sm", "all-reduce=push_sum engine=sm"])
def test_adds_of_replicated_operands_after_gemm_ar_are_added_by_one_rank(tile):
    device = _check(_reduced("all_reduce"), W, tile=tile, fused_steps=2, left=1)
    assert device.count("first_rank = true") == 2


def test_per_rank_operands_after_gemm_ar_are_not_fused():
    # without a replicated sharding each rank's bias may differ: rank 0 cannot add the others' before the sum
    _check(_reduced("all_reduce", replicated=False), W, fused_steps=0, left=3)


# ----------------------------------------------------- AG+GEMM + bias + silu in the global view, uneven shapes

def _ag_bias_silu(Wn: int, M: int, K: int, N: int) -> dt.Program:
    @dt.program(dt.Mesh(tp=Wn))
    def mlp_up(x: dt.Tensor[(M, K), "bf16", dt.shard(0, "tp")],
               w: dt.Tensor[(K, N), "bf16", dt.shard(1, "tp", padded=True)],
               b: dt.Tensor[(N,), "bf16", dt.shard(0, "tp", padded=True)]) -> dt.Sharded[dt.shard(1, "tp",
                                                                                              padded=True)]:
        return dt.silu(x @ w + b)
    return mlp_up


@pytest.mark.parametrize("Wn", [1, 2, 3, 4, 8])
def test_ag_gemm_bias_silu_fused_and_simulated_at_uneven_shapes(Wn):
    # 13 rows per rank (ragged row tiles, chunks of odd size), N padded: the mesh does not divide it
    M, K, N = 13 * Wn, 40, 6 * Wn + 3
    text = _ag_bias_silu(Wn, M, K, N).to_mlir()
    assert "ditron-fuse-epilogue" in PIPELINES["ditron-device"]
    device = lower(text, "ditron-device")
    assert _launches(device, "elementwise") == 0 and 'fn = "silu"' in device
    if Wn > 1:
        assert "wait = {" in device  # the AG+GEMM's waiting GEMM carries the epilogue
    result = simulate(device, world_size=Wn, seed=1, calls=2, reference=task_reference(text))
    assert result.ok, result.summary()


def test_frontend_elementwise_after_matmul_is_fused_by_the_default_pipeline():
    @dt.program(dt.Mesh(tp=1))
    def layer(x: dt.Tensor[(48, 32), "bf16"], w: dt.Tensor[(32, 40), "bf16"], b: dt.Tensor[(40,), "bf16"],
              r: dt.Tensor[(48, 40), "bf16"]):
        return dt.cast(r + dt.gelu(x @ w + b), "f32")
    text = layer.to_mlir()
    marked = layer.to_mlir("ditron-fuse-epilogue")
    assert marked.count("ditron.epilogue") == 5  # the matmul and its four steps
    device = lower(text, "ditron-device")
    assert _launches(device, "elementwise") == 0
    result = simulate(device, world_size=1, seed=0, calls=1, reference=task_reference(text))
    assert result.ok, result.summary()


def test_frontend_bias_of_the_wrong_length_is_a_located_trace_error():
    with pytest.raises(dt.TraceError, match=r"operand shapes differ: \(48, 40\) and \(32,\)") as err:
        @dt.program(dt.Mesh(tp=1))
        def bad(x: dt.Tensor[(48, 32), "bf16"], w: dt.Tensor[(32, 40), "bf16"], b: dt.Tensor[(32,), "bf16"]):
            return x @ w + b
        bad.to_mlir()
    assert "test_fuse_epilogue.py:" in str(err.value)
