"""ditron.nn: tensor-parallel layers over ditron's fused ops, and ``parallelize`` to make a model tensor-parallel.

    import ditron, ditron.nn
    world = ditron.World.from_torch()                  # under torchrun: one process per rank
    model = ditron.nn.parallelize(model, world)        # transformers' base_model_tp_plan, or plan={...}

ColumnParallelLinear (a local GEMM on a replicated input, or ops.ag_gemm on a sequence-sharded one) and
RowParallelLinear (ops.gemm_ar, or ops.gemm_rs for a sequence-sharded output) are built from an nn.Linear, whose
weight is sharded once; see linear.py and parallelize.py. ``signatures(model, W, rows)`` lists the op artifacts a
parallelized model needs for the given tokens per call, to build them ahead where the compiler is. Any batch size:
``parallelize(model, world, max_rows=N)`` makes every layer serve any tokens per call up to N from its op's
power-of-two bucket programs (ditron.buckets), about log2(N) + 1 per op, which
``ditron.buckets.prebuild(signatures(model, W, range(1, N + 1), max_rows=N), DIR)`` builds ahead. Needs torch (not the MLIR bindings: the ops run from
prebuilt artifacts where there is no compiler).
"""
from . import moe
from .linear import ColumnParallelLinear, ParallelError, RowParallelLinear
from .moe import ExpertParallelMoE
from .parallelize import Colwise, Rowwise, model_plan, parallelize, resolve_plan, signatures

__all__ = ["ColumnParallelLinear", "Colwise", "ExpertParallelMoE", "ParallelError", "RowParallelLinear", "Rowwise", "model_plan",
           "moe", "parallelize", "resolve_plan", "signatures"]
