"""ditron.reference.evaluate_sharded / unshard_inputs: a global-view program run on the ranks' shards (what
ops.reference is built on), checked against numpy written out by hand, and its errors."""
from __future__ import annotations

import numpy as np
import pytest

from ditron import ops
from ditron import reference as ref
from ditron.dialects.context import ditron_context


def _run(sig, xs, fn):
    """fn(module, xs, mesh) on the op's task program, built in a context of its own."""
    program = ops.task_program(sig)
    with ditron_context() as ctx:
        module = program.build(ctx)
        try:
            out = fn(module, xs, program.mesh)
        finally:
            del module  # before the context goes, also on an error (MLIR_NOTES)
    return out


def test_ag_gemm_shards_gather_rows_and_keep_columns():
    W, m, k, n = 2, 3, 4, 2
    s = ops.signature_for("ag_gemm", [(m, k), (k, n)], "bf16", W, True, "cuda:90")
    rng = np.random.default_rng(1)
    xs = [[rng.standard_normal((m, k)), rng.standard_normal((k, n))] for _ in range(W)]
    whole = _run(s, xs, ref.unshard_inputs)
    assert np.array_equal(whole[0], np.concatenate([x[0] for x in xs], 0))
    assert np.array_equal(whole[1], np.concatenate([x[1] for x in xs], 1))
    got = _run(s, xs, ref.evaluate_sharded)
    a = np.concatenate([x[0] for x in xs], 0)
    for r in range(W):
        assert len(got[r]) == 1 and np.allclose(got[r][0], a @ xs[r][1])


def test_partial_inputs_are_summed_and_results_scattered():
    W = 4
    s = ops.signature_for("reduce_scatter", [(8, 3)], "bf16", W, True, "cuda:90", dim=0)
    rng = np.random.default_rng(2)
    xs = [[rng.standard_normal((8, 3))] for _ in range(W)]
    got = _run(s, xs, ref.evaluate_sharded)
    total = sum(x[0] for x in xs)
    for r in range(W):
        assert np.allclose(got[r][0], total[2 * r:2 * r + 2])


def test_wrong_number_of_ranks_or_shard_shape_is_an_evaluation_error():
    s = ops.signature_for("all_gather", [(4, 3)], "bf16", 2, True, "cuda:90", dim=0)
    x = np.zeros((4, 3))
    with pytest.raises(ref.EvaluationError, match="the mesh has 2 ranks but 3 input sets were given"):
        _run(s, [[x], [x], [x]], ref.evaluate_sharded)
    with pytest.raises(ref.EvaluationError, match=r"rank 1 holds a shard of shape \(5, 3\)"):
        _run(s, [[x], [np.zeros((5, 3))]], ref.evaluate_sharded)
