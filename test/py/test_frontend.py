"""ditron.frontend: Python programs build the same IR as the MLIR examples, verify, round-trip through ditron-opt,
and every misuse is a TraceError at the user's line naming the op and the shapes."""
from __future__ import annotations

import gc
import importlib.util
import io
import inspect
from pathlib import Path

import numpy as np
import pytest
from mlir import ir

import ditron.frontend as dt
from ditron.dialects import ditron_context, parse_file, parse_module
from ditron.dialects.opbase import walk_ops
from ditron.dialects.verify import verify
from ditron.passes.partition import PartitionPass
from ditron.reference import evaluate, evaluate_spmd, shard_inputs, unshard_outputs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mlir_of_file(path: Path, pipeline: str = "") -> str:
    from ditron.passes.registry import parse_pipeline
    with ditron_context():
        module = parse_file(str(path))
        for p in parse_pipeline(pipeline):
            p.run(module)
        text = str(module)
        del module
    gc.collect()
    return text


def this_line() -> int:
    return inspect.currentframe().f_back.f_lineno


# ------------------------------------------------------------------------------------------- the examples

@pytest.mark.parametrize("name", ["mlp", "ag_gemm", "gemm_rs", "gemm_ar"])
def test_examples_build_the_example_ir(name):
    # the printed forms (generic ops, %argN names, no locations) are equal exactly when the IR is the same
    assert load_example(name).program().to_mlir() == mlir_of_file(EXAMPLES / f"{name}.mlir")


@pytest.mark.parametrize("name", ["mlp", "ag_gemm", "gemm_rs", "gemm_ar"])
def test_examples_partition_alike(name):
    pipeline = "ditron-partition,ditron-fuse-overlap"
    assert load_example(name).program().to_mlir(pipeline) == mlir_of_file(EXAMPLES / f"{name}.mlir", pipeline)


def test_spmd_mlp_is_the_partitioned_mlp():
    assert load_example("mlp_spmd").program().to_mlir() == mlir_of_file(EXAMPLES / "mlp.mlir", "ditron-partition")


@pytest.mark.parametrize("name", ["mlp", "ag_gemm", "gemm_rs", "gemm_ar", "mlp_spmd"])
def test_round_trip_through_ditron_opt(name, tmp_path):
    from ditron.tools.ditron_opt import run
    text = load_example(name).program(W=2, M=64, **({"H": 16, "F": 32} if "mlp" in name else
                                                     {"K": 32, "N": 16})).to_mlir()
    path = tmp_path / f"{name}.mlir"
    path.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    assert run([str(path), "--pass-pipeline=ditron-verify"], io.StringIO(), out, err) == 0, err.getvalue()
    assert out.getvalue().strip() == text.strip()
    gc.collect()


@pytest.mark.parametrize("w", [1, 2, 4])
def test_mlp_numerics_global_vs_spmd(w):
    m, h, f = 4 * w, 8, 4 * w
    glob, spmd = load_example("mlp").program(w, m, h, f, "f32"), load_example("mlp_spmd").program(w, m, h, f, "f32")
    rng = np.random.default_rng(w)
    xs = [rng.standard_normal(s) for s in ((m, h), (h, f), (f, h))]
    want = glob.evaluate(*xs)[0]
    np.testing.assert_allclose(want, _gelu_ref(xs[0] @ xs[1]) @ xs[2], rtol=1e-5)
    with ditron_context() as ctx:
        module = spmd.build(ctx)
        per_rank = evaluate_spmd(module, shard_inputs(module, xs))
        got = unshard_outputs(module, per_rank, check_replicas=True)[0]
        del module
    gc.collect()
    np.testing.assert_allclose(got, want, rtol=1e-9)


def _gelu_ref(x):
    from math import erf, sqrt
    return 0.5 * x * (1 + np.vectorize(erf)(x / sqrt(2)))


def test_padded_mlp_builds_and_partitions():
    text = load_example("mlp").program(W=4, M=10, H=8, F=16, dtype="f32", padded=True).to_mlir("ditron-partition")
    assert "tensor<3x8xf32>" in text and "padded = true" in text


def test_arguments_are_named_and_ops_located():
    @dt.program(dt.Mesh(tp=2))
    def g(x: dt.Tensor[(4, 8), "f32", dt.shard(0, "tp")], w: dt.Tensor[(8, 2), "f32"]):
        return dt.relu(x @ w)
    line = g.fn.__code__.co_firstlineno + 2  # the decorator line counts as the first

    with ditron_context() as ctx:
        module = g.build(ctx)
        fn = next(op for op in walk_ops(module.operation) if op.name == "func.func")
        args = fn.regions[0].blocks[0].arguments
        assert [a.location.name_str for a in args] == ["x", "w"]
        mm = next(op for op in walk_ops(module.operation) if op.name == "ditron_task.matmul")
        assert mm.location.filename == __file__ and mm.location.start_line == line
        assert mm.location.start_col == 24  # where `x @ w` starts
        # evaluate by argument name
        out = evaluate(module, {"x": np.ones((4, 8)), "w": np.ones((8, 2))})[0]
        assert np.allclose(out, 8.0)
        del module, fn, args, mm
    gc.collect()


def test_error_result_not_a_tensor():
    @dt.program(dt.Mesh(tp=2))
    def f(x: dt.Tensor[(4, 8), "f32"]):
        return x, 3
    with pytest.raises(dt.TraceError, match="result 1 is 3, not a tensor traced by this program"):
        f.to_mlir()


def test_two_dim_mesh_and_several_results():
    mesh = dt.Mesh(dp=2, tp=2)

    @dt.program(mesh)
    def two(x: dt.Tensor[(16, 8), "bf16", dt.shard(0, ("dp", "tp"))],
            w: dt.Tensor[(8, 4), "bf16", dt.shard(1, "tp")],
            b: dt.Tensor[(16, 4), "bf16"]) -> (dt.Sharded[dt.shard(0, "dp")], dt.Sharded[dt.replicated]):
        y = x @ w
        return y, dt.with_sharding(y, dt.replicated) + b

    text = two.to_mlir()
    assert '{dims = [["dp", "tp"], []]}' in text and '"ditron_task.shard"' in text
    local = two.to_mlir("ditron-partition")
    assert "ditron_task.shard" not in local and 'ditron.view = "local"' in local


def test_spec_combinators():
    s = dt.shard(0, "dp") | dt.shard(-1, "tp") | dt.partial("sp")
    sharding = s.resolve(3)
    assert sharding.dims == (("dp",), (), ("tp",)) and sharding.partial == ("sp",)
    assert repr(dt.replicated) == "replicated"


def test_dtype_aliases():
    assert dt.Tensor((2, 2), "bfloat16").dtype == "bf16"
    assert dt.Tensor((2, 2), np.float32).dtype == "f32"
    assert dt.Tensor[(2, 2), "f8E4M3FN"].dtype == "f8E4M3FN"
    assert dt.Tensor[(2, 3)] == dt.Tensor((2, 3), "f32")
    assert dt.Tensor[5, "i32"].shape == (5,)
    assert dt.Tensor[(4, 4), "bf16", dt.shard(0, "tp")].sharding == dt.shard(0, "tp")


# ---------------------------------------------------------------------------------------------- errors

def trace_error(fn) -> dt.TraceError:
    with pytest.raises(dt.TraceError) as info:
        fn.to_mlir()
    gc.collect()
    return info.value


def test_error_matmul_contraction_names_shapes_and_line():
    @dt.program(dt.Mesh(tp=2))
    def bad(x: dt.Tensor[(8, 4), "bf16"], w: dt.Tensor[(8, 4), "bf16"]):
        return x @ w
    err = trace_error(bad)
    assert "matmul: contraction sizes differ: lhs (8, 4) has K = 4 but rhs (8, 4) has K = 8" in str(err)
    (d,) = err.diagnostics
    assert d.file == __file__ and d.line == bad.fn.__code__.co_firstlineno + 2


@pytest.mark.parametrize("body,message", [
    (lambda x, y: x + y, "add: operand shapes differ: (8, 4) and (4, 8)"),
    (lambda x, y: x * 2.0, "mul: operand 1 is a Python scalar"),
    (lambda x, y: 2.0 * x, "mul: operand 0 is a Python scalar"),
    (lambda x, y: np.ones((8, 4)) @ x, "matmul: operand 0 is a ndarray"),
    (lambda x, y: dt.all_gather(x, 0, "tp"), "all_gather is a collective of the local (SPMD) view"),
    (lambda x, y: dt.with_sharding(x, dt.shard(0, "ep")), "mesh axis 'ep' is not in the mesh"),
    (lambda x, y: dt.with_sharding(x, dt.shard(2, "tp")), "dim 2 is out of range for a tensor of rank 2"),
    (lambda x, y: dt.with_sharding(x, dt.shard(1, "tp") | dt.shard(1, "tp")), "dim 1 is split twice"),
    (lambda x, y: dt.elementwise("erf", x), "unknown fn 'erf'"),
    (lambda x, y: dt.silu_mul(x), "silu_mul: takes 2 operand(s), got 1"),
    (lambda x, y: x[0], "no slice op"),
    (lambda x, y: x if x else y, "no truth value"),
    (lambda x, y: x @ dt.relu(y) @ x @ x, "matmul: contraction sizes differ: lhs (8, 4) has K = 4 but rhs (8, 4) has K = 8"),
])
def test_trace_errors(body, message):
    @dt.program(dt.Mesh(tp=2))
    def bad(x: dt.Tensor[(8, 4), "f32"], y: dt.Tensor[(4, 8), "f32"]):
        return body(x, y)
    assert message in str(trace_error(bad))


@pytest.mark.parametrize("make,message", [
    (lambda: dt.Mesh(tp=None), "Mesh: axis sizes are ints from 1 to 2^31 - 1, got tp=None"),
    (lambda: dt.Mesh(dp=2, tp="4"), "Mesh: axis sizes are ints from 1 to 2^31 - 1, got tp='4'"),
    (lambda: dt.Mesh(tp=2 ** 63), "got tp=9223372036854775808"),
    (lambda: dt.shard(0, 4), "shard: mesh axes must be a name or a sequence of names, got 4"),
])
def test_mesh_and_sharding_arguments_are_checked(make, message):
    with pytest.raises(dt.TraceError) as info:
        make()
    assert message in str(info.value)


def test_collective_dims_must_be_ints():
    @dt.program(dt.Mesh(tp=2), view="local")
    def bad(x: dt.Tensor[(8, 4), "f32", dt.shard(0, "tp")]):
        return dt.all_gather(x, "0", "tp")
    assert "all_gather: dim must be an int, got '0'" in str(trace_error(bad))


def test_error_dtype_mismatch():
    @dt.program()
    def bad(x: dt.Tensor[(8, 4), "f32"], y: dt.Tensor[(8, 4), "bf16"]):
        return dt.maximum(x, y)
    assert "max: operand element types differ: f32 and bf16" in str(trace_error(bad))


def test_error_non_dividing_parameter_names_it():
    @dt.program(dt.Mesh(tp=4))
    def bad(x: dt.Tensor[(10, 4), "f32", dt.shard(0, "tp")]):
        return dt.relu(x)
    err = trace_error(bad)
    assert "parameter 'x': dim 0 of size 10 does not divide evenly into 4 shards" in str(err)
    assert err.diagnostics[0].line == bad.fn.__code__.co_firstlineno


def test_error_local_view_collectives():
    mesh = dt.Mesh(tp=4)

    @dt.program(mesh, view="local")
    def bad_rs(x: dt.Tensor[(8, 6), "f32"]):
        return dt.reduce_scatter(x, dim=1, axis="tp")
    assert "reduce_scatter: dim 1 of (8, 6) (size 6) does not divide over axis 'tp' of size 4" in \
        str(trace_error(bad_rs))

    @dt.program(mesh, view="local")
    def bad_axis(x: dt.Tensor[(8, 6), "f32"]):
        return dt.all_reduce(x, axis="dp")
    assert "all_reduce: mesh axis 'dp' is not in the mesh (axes: tp)" in str(trace_error(bad_axis))

    @dt.program(mesh, view="local")
    def bad_shard(x: dt.Tensor[(8, 6), "f32"]):
        return dt.with_sharding(x, dt.replicated)
    assert "with_sharding is a global-view annotation" in str(trace_error(bad_shard))


def test_error_missing_or_bad_annotations():
    @dt.program(dt.Mesh(tp=2))
    def no_type(x):
        return x
    assert "parameter 'x' needs a dt.Tensor[shape, dtype, sharding] annotation" in str(trace_error(no_type))

    @dt.program(dt.Mesh(tp=2))
    def count(x: dt.Tensor[(4, 4), "f32"]) -> (dt.Sharded[dt.replicated], dt.Sharded[dt.replicated]):
        return x
    assert "names 2 result(s) but the function returns 1" in str(trace_error(count))

    with pytest.raises(dt.TraceError, match="unknown element type 'bf17'"):
        dt.Tensor((4, 4), "bf17")
    with pytest.raises(dt.TraceError, match="positive ints"):
        dt.Tensor((4, 0), "f32")
    with pytest.raises(dt.TraceError, match="needs its mesh"):
        dt.program(lambda x: x)


def test_error_values_do_not_outlive_their_trace():
    kept = []

    @dt.program()
    def first(x: dt.Tensor[(4, 4), "f32"]):
        kept.append(x)
        return x

    @dt.program()
    def second(x: dt.Tensor[(4, 4), "f32"]):
        return x + kept[0]

    first.to_mlir()
    assert "belongs to another (or a finished) trace" in str(trace_error(second))


def test_build_needs_a_ditron_context():
    @dt.program()
    def f(x: dt.Tensor[(4, 4), "f32"]):
        return x
    with pytest.raises(dt.TraceError, match="needs an MLIR context"):
        f.build()
    ctx = ir.Context()
    with pytest.raises(dt.TraceError, match="does not have ditron's dialects"):
        f.build(ctx)
    del ctx
    gc.collect()


def test_built_module_verifies_and_partitions_in_place():
    prog = load_example("gemm_rs").program(W=2, M=8, K=8, N=4, dtype="f32")
    with ditron_context() as ctx:
        module = prog.build(ctx)
        verify(module)
        PartitionPass().run(module)
        verify(module)
        assert any(op.name == "ditron_task.reduce_scatter" for op in walk_ops(module.operation))
        reparsed = parse_module(str(module))
        assert str(reparsed) == str(module)
        del module, reparsed
    gc.collect()
