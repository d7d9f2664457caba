"""ditron-partition: the partitioned (SPMD) program computes what the global program computes.

Each case is a global-view program; the test evaluates it with the numpy reference, partitions it, runs the local
program on every rank (ditron.reference.evaluate_spmd: collectives across the ranks' values), reassembles the
results by their shardings and compares. It also checks which collectives were inserted, so a rule that is
numerically right but wasteful (or silently different) is caught too.
"""
from __future__ import annotations

import gc
from collections import Counter

import numpy as np
import pytest
from mlir import ir

from ditron.dialects import ditron_context, parse_module, task
from ditron.dialects.opbase import walk_ops
from ditron.dialects.sharding import Mesh, arg_sharding, result_sharding
from ditron.dialects.verify import verify
from ditron.errors import PassError
from ditron.passes.partition import PartitionPass
from ditron.reference import (EvaluationError, evaluate, evaluate_spmd, shard_array, shard_inputs, unshard_array,
                              unshard_outputs)

ROWS = '{ditron.sharding = {dims = [["tp"], []]}}'
COLS = '{ditron.sharding = {dims = [[], ["tp"]]}}'
REPL = '{ditron.sharding = {dims = [[], []]}}'


def module_text(mesh: str, body: str) -> str:
    return f"module attributes {{ditron.mesh = {mesh}}} {{\n{body}\n}}"


def tp(w: int) -> str:
    return f'{{axes = ["tp"], shape = array<i64: {w}>}}'


def mlp(w, m=16, k=8, n=12, out=ROWS, x=ROWS, w1=COLS, w2=ROWS, act="gelu", mesh=None):
    return module_text(mesh or tp(w), f"""
  func.func @mlp(%x: tensor<{m}x{k}xf32> {x}, %w1: tensor<{k}x{n}xf32> {w1}, %w2: tensor<{n}x{k}xf32> {w2})
      -> (tensor<{m}x{k}xf32> {out}) {{
    %h = "ditron_task.matmul"(%x, %w1) : (tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>
    %a = "ditron_task.elementwise"(%h) {{fn = "{act}"}} : (tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
    %y = "ditron_task.matmul"(%a, %w2) : (tensor<{m}x{n}xf32>, tensor<{n}x{k}xf32>) -> tensor<{m}x{k}xf32>
    return %y : tensor<{m}x{k}xf32>
  }}""")


def gemm(w, m, k, n, x, wt, out, mesh=None):
    return module_text(mesh or tp(w), f"""
  func.func @gemm(%x: tensor<{m}x{k}xf32> {x}, %w: tensor<{k}x{n}xf32> {wt}) -> (tensor<{m}x{n}xf32> {out}) {{
    %y = "ditron_task.matmul"(%x, %w) : (tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>
    return %y : tensor<{m}x{n}xf32>
  }}""")


def func_of(module):
    return next(op.operation for op in module.body.operations if op.operation.name == "func.func")


def collectives(fn) -> Counter:
    names = {c.op_name(): c.NAME for c in task.COLLECTIVES}
    return Counter((names[op.name], dict((n, str(op.attributes[n])) for n in op.attributes).get("dim"))
                   for op in walk_ops(fn) if op.name in names)


def check(text: str, *, seed: int = 0, rtol: float = 1e-9) -> Counter:
    """Partition text, compare the SPMD run with the global run; the inserted collectives (kind, dim)."""
    with ditron_context():
        glob = parse_module(text)
        verify(glob)
        gfn = func_of(glob)
        mesh = Mesh.of_module(glob)
        rng = np.random.default_rng(seed)
        ftype = ir.FunctionType(ir.TypeAttr(gfn.attributes["function_type"]).value)
        xs = [rng.standard_normal(tuple(ir.RankedTensorType(t).shape)) for t in ftype.inputs]
        shapes = [tuple(ir.RankedTensorType(t).shape) for t in ftype.results]
        want = evaluate(gfn, xs)

        local = parse_module(text)
        PartitionPass().run(local)
        verify(local)
        lfn = func_of(local)
        assert "ditron.view" in lfn.attributes
        for i in range(len(ftype.inputs)):  # every argument and result keeps (or gets) its sharding
            assert arg_sharding(lfn, i) is not None or mesh is None
        per_rank = evaluate_spmd(lfn, shard_inputs(lfn, xs, mesh), mesh)
        got = unshard_outputs(lfn, per_rank, mesh, check_replicas=True)  # global shapes from the IR alone
        for g, w_, shape in zip(got, want, shapes):
            assert g.shape == shape
            np.testing.assert_allclose(g, w_, rtol=rtol, atol=1e-9)
        found = collectives(lfn)
        del glob, local, gfn, lfn
    gc.collect()
    return found


def partition_error(text: str) -> str:
    with ditron_context():
        module = parse_module(text)
        with pytest.raises(PassError) as info:
            PartitionPass().run(module)
        del module
    gc.collect()
    return str(info.value)


# ------------------------------------------------------------------------------------------------ positive

@pytest.mark.parametrize("w", [1, 2, 4])
def test_megatron_mlp_ag_gelu_rs(w):
    assert check(mlp(w)) == Counter({("all_gather", "0 : i64"): 1, ("reduce_scatter", "0 : i64"): 1})


@pytest.mark.parametrize("w", [1, 2, 4])
def test_mlp_replicated_output_all_reduces(w):
    assert check(mlp(w, out=REPL)) == Counter({("all_gather", "0 : i64"): 1, ("all_reduce", None): 1})


@pytest.mark.parametrize("w", [1, 2, 4])
def test_mlp_unannotated_output_keeps_partial_resolved(w):
    text = mlp(w, out="").replace("-> (tensor<16x8xf32> )", "-> (tensor<16x8xf32>)")
    assert check(text) == Counter({("all_gather", "0 : i64"): 1, ("all_reduce", None): 1})


@pytest.mark.parametrize("w", [1, 2, 4])
@pytest.mark.parametrize("case,x,wt,out,expect", [
    ("ag_gemm", ROWS, COLS, COLS, {("all_gather", "0 : i64"): 1}),
    ("gemm_rs", COLS, ROWS, ROWS, {("reduce_scatter", "0 : i64"): 1}),
    ("gemm_rs_cols", COLS, ROWS, COLS, {("reduce_scatter", "1 : i64"): 1}),
    ("gemm_ar", COLS, ROWS, REPL, {("all_reduce", None): 1}),
    ("rows_times_replicated", ROWS, REPL, ROWS, {}),
    ("replicated_times_cols", REPL, COLS, COLS, {}),
    ("k_sharded_lhs_only", COLS, REPL, REPL, {("all_gather", "1 : i64"): 1}),
    ("k_sharded_rhs_only", ROWS, ROWS, ROWS, {("all_gather", "0 : i64"): 1}),
    ("split_to_replicated", ROWS, REPL, REPL, {("all_gather", "0 : i64"): 1}),
])
def test_gemm_rules(w, case, x, wt, out, expect):
    assert check(gemm(w, 16, 8, 12, x, wt, out)) == Counter(expect), case


@pytest.mark.parametrize("w", [1, 2, 4])
def test_gemm_at_4091_w_rows(w):
    assert check(gemm(w, 4091 * w, 4, 8, ROWS, COLS, COLS)) == Counter({("all_gather", "0 : i64"): 1})
    assert check(gemm(w, 4091 * w, 8, 4, COLS, ROWS, ROWS)) == Counter({("reduce_scatter", "0 : i64"): 1})


@pytest.mark.parametrize("w", [2, 4])
def test_padded_mlp(w):
    # M = 10 rows over w ranks: shards of ceil(10 / w), zero-padded; the padding flows through AG, gelu, RS.
    pr = '{ditron.sharding = {dims = [["tp"], []], padded = true}}'
    pc = '{ditron.sharding = {dims = [[], ["tp"]], padded = true}}'
    found = check(mlp(w, m=10, n=6, x=pr, w1=pc, w2=pr, out=pr))
    assert found == Counter({("all_gather", "0 : i64"): 1, ("reduce_scatter", "0 : i64"): 1})


def test_padded_replicated_result_is_an_error():
    pr = '{ditron.sharding = {dims = [["tp"], []], padded = true}}'
    msg = partition_error(gemm(4, 10, 8, 12, pr, REPL, REPL))
    assert "result 0" in msg and "needs 10x12" in msg


PADDED_K = """
  func.func @f(%x: tensor<8x6xf32> {PC}, %w: tensor<6x4xf32> {PR}) -> (tensor<8x4xf32> {REPL}) {
    %a = "ditron_task.elementwise"(%x) {fn = "FN"} : (tensor<8x6xf32>) -> tensor<8x6xf32>
    %b = "ditron_task.elementwise"(%w) {fn = "FN"} : (tensor<6x4xf32>) -> tensor<6x4xf32>
    %y = "ditron_task.matmul"(%a, %b) : (tensor<8x6xf32>, tensor<6x4xf32>) -> tensor<8x4xf32>
    return %y : tensor<8x4xf32>
  }"""


def padded_k(fn: str) -> str:
    pc = '{ditron.sharding = {dims = [[], ["tp"]], padded = true}}'
    pr = '{ditron.sharding = {dims = [["tp"], []], padded = true}}'
    return module_text(tp(4), PADDED_K.replace("{PC}", pc).replace("{PR}", pr).replace("{REPL}", REPL)
                       .replace("FN", fn))


def test_padded_contraction_after_exp_is_an_error():
    # K = 6 over 4 ranks: shards of 2, the last two padded. exp(0) = 1 fills both operands' padding.
    assert "padding may be non-zero" in partition_error(padded_k("exp"))
    # with a zero-preserving fn the same program is fine (padding stays zero, the partial sums are exact)
    assert check(padded_k("tanh")) == Counter({("all_reduce", None): 1})


def test_padded_contraction_with_one_zero_padded_operand_is_fine():
    # exp on the lhs only: its padding is 1, but the rhs padding is 0, so the products over the padding vanish
    check(mlp(4, n=6, w1='{ditron.sharding = {dims = [[], ["tp"]], padded = true}}',
              w2='{ditron.sharding = {dims = [["tp"], []], padded = true}}', act="exp"))


ELEMENTWISE_MIX = """
  func.func @mix(%a: tensor<8x12xf32> {A}, %b: tensor<8x12xf32> {B}) -> (tensor<8x12xf32> {OUT}) {
    %s = "ditron_task.elementwise"(%a, %b) {fn = "FN"} : (tensor<8x12xf32>, tensor<8x12xf32>) -> tensor<8x12xf32>
    %t = "ditron_task.elementwise"(%s) {fn = "silu"} : (tensor<8x12xf32>) -> tensor<8x12xf32>
    return %t : tensor<8x12xf32>
  }"""


@pytest.mark.parametrize("w", [1, 2, 4])
@pytest.mark.parametrize("fn", ["add", "mul", "max", "silu_mul"])
@pytest.mark.parametrize("a,b,out,expect", [
    (ROWS, ROWS, ROWS, {}),
    (ROWS, REPL, REPL, {("all_gather", "0 : i64"): 1}),
    (ROWS, COLS, REPL, {("all_gather", "0 : i64"): 1, ("all_gather", "1 : i64"): 1}),
])
def test_elementwise_reconciles(w, fn, a, b, out, expect):
    text = module_text(tp(w), ELEMENTWISE_MIX.replace("{A}", a).replace("{B}", b).replace("{OUT}", out)
                       .replace("FN", fn))
    assert check(text) == Counter(expect)


PARTIAL_CHAIN = """
  func.func @chain(%x: tensor<8x16xf32> {COLS}, %w: tensor<16x12xf32> {ROWS},
                   %y: tensor<8x16xf32> {COLS}, %v: tensor<16x12xf32> {ROWS},
                   %s: tensor<8x12xf32> {REPL}) -> (tensor<8x12xf32> {ROWS}) {
    %p = "ditron_task.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x12xf32>) -> tensor<8x12xf32>
    %q = "ditron_task.matmul"(%y, %v) : (tensor<8x16xf32>, tensor<16x12xf32>) -> tensor<8x12xf32>
    %r = "ditron_task.elementwise"(%p, %q) {fn = "add"} : (tensor<8x12xf32>, tensor<8x12xf32>) -> tensor<8x12xf32>
    %m = "ditron_task.elementwise"(%r, %s) {fn = "mul"} : (tensor<8x12xf32>, tensor<8x12xf32>) -> tensor<8x12xf32>
    %n = "ditron_task.elementwise"(%m) {fn = "neg"} : (tensor<8x12xf32>) -> tensor<8x12xf32>
    return %n : tensor<8x12xf32>
  }"""


@pytest.mark.parametrize("w", [1, 2, 4])
def test_partial_sums_flow_through_linear_fns(w):
    text = module_text(tp(w), PARTIAL_CHAIN.replace("{COLS}", COLS).replace("{ROWS}", ROWS)
                       .replace("{REPL}", REPL))
    # two partial products added, scaled and negated while still partial: one reduce_scatter at the end
    assert check(text) == Counter({("reduce_scatter", "0 : i64"): 1})


@pytest.mark.parametrize("w", [2, 4])
def test_partial_into_nonlinear_fn_is_all_reduced(w):
    assert check(mlp(w, x=COLS, w1=ROWS, w2=REPL, out=REPL)) == \
        Counter({("all_reduce", None): 1})


MESH_2D = '{axes = ["dp", "tp"], shape = array<i64: DP, TP>}'


@pytest.mark.parametrize("dp,tp_", [(1, 2), (2, 2), (2, 1), (2, 4)])
def test_two_dim_mesh(dp, tp_):
    mesh = MESH_2D.replace("DP", str(dp)).replace("TP", str(tp_))
    rows_dp = '{ditron.sharding = {dims = [["dp"], []]}}'
    rows_dp_tp = '{ditron.sharding = {dims = [["dp", "tp"], []]}}'
    text = mlp(1, m=16, x=rows_dp, out=rows_dp_tp, mesh=mesh)
    # x rows over dp only: no gather for tp (the weights' tp does not meet x's dp); RS over tp into the rows
    assert check(text) == Counter({("reduce_scatter", "0 : i64"): 1})
    text = mlp(1, m=16, x=rows_dp_tp, out=rows_dp, mesh=mesh)
    assert check(text) == Counter({("all_gather", "0 : i64"): 1, ("all_reduce", None): 1})


@pytest.mark.parametrize("dp,tp_", [(2, 2), (2, 4)])
def test_two_dim_mesh_both_axes_on_one_dim_gathers_minor_first(dp, tp_):
    mesh = MESH_2D.replace("DP", str(dp)).replace("TP", str(tp_))
    both = '{ditron.sharding = {dims = [["dp", "tp"], []]}}'
    text = gemm(1, 16, 8, 12, both, REPL, REPL, mesh=mesh)
    assert check(text) == Counter({("all_gather", "0 : i64"): 2})


@pytest.mark.parametrize("dp,tp_", [(2, 2), (2, 4)])
def test_two_dim_mesh_elementwise_on_different_axes_gathers_both(dp, tp_):
    mesh = MESH_2D.replace("DP", str(dp)).replace("TP", str(tp_))
    a = '{ditron.sharding = {dims = [["dp"], []]}}'
    b = '{ditron.sharding = {dims = [["tp"], []]}}'
    out = '{ditron.sharding = {dims = [[], ["tp"]]}}'
    text = module_text(mesh, ELEMENTWISE_MIX.replace("{A}", a).replace("{B}", b).replace("{OUT}", out)
                       .replace("FN", "sub"))
    # dim 0 split over dp in one operand and tp in the other: both gathered; the column split of the result
    # is then a move of nothing: a replicated value cannot be split -> the output wants a slice
    with pytest.raises(PassError, match="local slice"):
        check(text)
    text = text.replace(out, REPL)
    assert check(text) == Counter({("all_gather", "0 : i64"): 2})


SHARD_MOVE = """
  func.func @move(%x: tensor<8x12xf32> {ROWS}) -> (tensor<8x12xf32> {COLS}) {
    %y = "ditron_task.shard"(%x) {sharding = {dims = [[], ["tp"]]}} : (tensor<8x12xf32>) -> tensor<8x12xf32>
    %z = "ditron_task.elementwise"(%y) {fn = "relu"} : (tensor<8x12xf32>) -> tensor<8x12xf32>
    return %z : tensor<8x12xf32>
  }"""


@pytest.mark.parametrize("w", [1, 2, 4])
def test_shard_annotation_moving_an_axis_is_an_all_to_all(w):
    text = module_text(tp(w), SHARD_MOVE.replace("{ROWS}", ROWS).replace("{COLS}", COLS))
    assert check(text) == Counter({("all_to_all", None): 1})


def test_replicated_grouped_matmul_is_kept():
    text = module_text(tp(2), """
  func.func @moe(%x: tensor<6x4xf32>, %w: tensor<2x4x3xf32>, %g: tensor<2xi64>) -> tensor<6x3xf32> {
    %y = "ditron_task.grouped_matmul"(%x, %w, %g) : (tensor<6x4xf32>, tensor<2x4x3xf32>, tensor<2xi64>) -> tensor<6x3xf32>
    return %y : tensor<6x3xf32>
  }""")
    with ditron_context():
        module = parse_module(text)
        PartitionPass().run(module)
        verify(module)
        fn = func_of(module)
        xs = [np.ones((6, 4)), np.ones((2, 4, 3)), np.array([2, 4])]
        outs = evaluate_spmd(fn, [xs, xs], Mesh(("tp",), (2,)))
        assert outs[0][0].shape == (6, 3) and np.allclose(outs[0][0], 4.0)
        assert result_sharding(fn, 0).is_replicated
        del module, fn
    gc.collect()


def test_second_run_is_a_no_op():
    with ditron_context():
        module = parse_module(mlp(4))
        PartitionPass().run(module)
        once = str(module)
        PartitionPass().run(module)
        assert str(module) == once
        del module
    gc.collect()


def test_discardable_attributes_and_locations_survive():
    text = mlp(2).replace('{fn = "gelu"}', '{fn = "gelu", my.hint = 3 : i64}')
    with ditron_context():
        module = parse_module(text, "mlp.mlir")
        PartitionPass().run(module)
        ew = next(op for op in walk_ops(module.operation) if op.name == "ditron_task.elementwise")
        assert "my.hint" in ew.attributes
        ag = next(op for op in walk_ops(module.operation) if op.name == "ditron_task.all_gather")
        assert ag.location.is_a_file() and ag.location.filename == "mlp.mlir"
        del module, ew, ag
    gc.collect()


# ------------------------------------------------------------------------------------------------ errors

def test_error_contraction_over_two_different_axes():
    mesh = MESH_2D.replace("DP", "2").replace("TP", "2")
    x = '{ditron.sharding = {dims = [[], ["dp"]]}}'
    msg = partition_error(gemm(1, 8, 8, 8, x, ROWS, REPL, mesh=mesh))
    assert "ditron_task.matmul" in msg and "split over 'dp'" in msg and "split over 'tp'" in msg


def test_error_replicated_to_split_result():
    msg = partition_error(gemm(4, 16, 8, 12, REPL, REPL, ROWS))
    assert "result 0" in msg and "local slice" in msg


def test_error_unsupported_op_with_sharded_operand():
    text = module_text(tp(2), """
  func.func @moe(%x: tensor<6x4xf32> {ditron.sharding = {dims = [[], ["tp"]]}}, %w: tensor<2x4x3xf32>,
                 %g: tensor<2xi64>) -> tensor<6x3xf32> {
    %y = "ditron_task.grouped_matmul"(%x, %w, %g) : (tensor<6x4xf32>, tensor<2x4x3xf32>, tensor<2xi64>) -> tensor<6x3xf32>
    return %y : tensor<6x3xf32>
  }""")
    msg = partition_error(text)
    assert "grouped_matmul" in msg and "no partition rule" in msg


def test_error_non_dividing_dim():
    msg = partition_error(gemm(4, 10, 8, 12, ROWS, REPL, ROWS))
    assert "does not divide evenly" in msg and "padded" in msg


def test_error_collective_in_global_view():
    text = module_text(tp(2), """
  func.func @f(%x: tensor<4x8xf32>) -> tensor<8x8xf32> {
    %y = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<8x8xf32>
    return %y : tensor<8x8xf32>
  }""")
    assert "ditron.view" in partition_error(text)


def test_error_reduce_scatter_needs_divisible_dim():
    # the partial sum's rows (10, replicated) cannot be reduce-scattered into padded shards of 3
    pc = '{ditron.sharding = {dims = [[], ["tp"]]}}'
    pr = '{ditron.sharding = {dims = [["tp"], []], padded = true}}'
    msg = partition_error(gemm(4, 10, 8, 12, pc, ROWS, pr))
    assert "reduce-scattered along dim 0" in msg and "does not divide by 4" in msg


def test_error_call():
    text = module_text(tp(2), """
  func.func private @g(tensor<4x8xf32>) -> tensor<4x8xf32>
  func.func @f(%x: tensor<4x8xf32> {ditron.sharding = {dims = [["tp"], []]}}) -> tensor<4x8xf32> {
    %y = func.call @g(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }""")
    assert "'func.call' op is not supported by ditron-partition" in partition_error(text)


def test_error_without_mesh():
    text = """module {
  func.func @f(%x: tensor<4x8xf32> {ditron.sharding = {dims = [["tp"], []]}}) -> tensor<4x8xf32> {
    return %x : tensor<4x8xf32>
  }
}"""
    assert "no 'ditron.mesh'" in partition_error(text)


# ------------------------------------------------------------------------------------------ reference helpers

@pytest.mark.parametrize("dims,partial,padded,shape", [
    ((("tp",), ()), (), False, (8, 6)),
    (((), ("tp",)), (), False, (8, 6)),
    ((("dp", "tp"), ()), (), False, (8, 6)),
    ((("tp",), ("dp",)), (), False, (8, 6)),
    ((("tp",), ()), ("dp",), False, (8, 6)),
    ((("dp", "tp"), ()), (), True, (7, 6)),
])
def test_shard_unshard_round_trip(dims, partial, padded, shape):
    from ditron.dialects.sharding import Sharding
    mesh = Mesh(("dp", "tp"), (2, 2))
    s = Sharding(dims, partial, padded)
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    with ditron_context():  # Sharding.check needs no context, but keep the usual setting
        parts = shard_array(x, s, mesh)
        assert all(p.shape == s.local_shape(shape, mesh) for p in parts)
        np.testing.assert_array_equal(unshard_array(parts, s, mesh, shape, check_replicas=not partial), x)
    gc.collect()


def test_unshard_detects_diverging_replicas():
    from ditron.dialects.sharding import Sharding
    mesh = Mesh(("tp",), (2,))
    s = Sharding.replicated(1)
    with pytest.raises(EvaluationError, match="same replica"):
        unshard_array([np.zeros(3), np.ones(3)], s, mesh, (3,), check_replicas=True)
