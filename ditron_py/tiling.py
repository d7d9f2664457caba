"""ditron.tiling: the tile configurations ditron-tile's cost model picks, for user kernels to use the same.

    cfg = ditron.tiling.gemm_config(4096, 3584, 4096, "bf16", "cuda:90")           # or sms=66 (an SM budget)
    cfg.block_m, cfg.block_n, cfg.block_k, cfg.group_m, cfg.num_warps, cfg.num_stages

``gemm_config`` ranks the target's GEMM candidates (its vendor facts, those whose stages fit shared memory) by the
cost model's time (``cost_model.gemm_time``: waves of tiles on ``sms`` SMs, each bound by its math or its loads) --
the ranking ditron-tile's planner (passes/planner.py, ``PlannerBase.gemm_config``) makes for a GEMM without split-K,
such as the GEMM of a fused AG+GEMM with its per-tile waits. No MLIR: a GPU box without the compiler can call it.
"""
from __future__ import annotations

from .backends.facts import GemmConfig
from .cost_model import best_gemm_config, peaks_for
from .errors import TargetError

# element sizes of the dtypes a GEMM's operands may have (ditron's and Triton's spellings)
_ELEM_BYTES = {"bf16": 2, "f16": 2, "fp16": 2, "float16": 2, "bfloat16": 2, "f32": 4, "fp32": 4, "float32": 4,
               "fp8e4m3": 1, "f8E4M3FN": 1, "fp8e4nv": 1, "fp8e5m2": 1, "f8E5M2": 1, "fp8e5": 1,
               "int8": 1, "i8": 1}


def gemm_config(m: int, n: int, k: int, dtype: str = "bf16", target: str = "cuda:90", *,
                sms: int | None = None) -> GemmConfig:
    """The cost model's tile configuration for an m x n x k GEMM of ``dtype`` operands on ``target``, run on
    ``sms`` SMs (default: all of the target's; a rank of a virtual world gets its share). A ``GemmConfig``:
    block_m, block_n, block_k, group_m, num_warps, num_stages."""
    for name, v in (("m", m), ("n", n), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"gemm_config: {name} must be a positive int, got {v!r}")
    if sms is not None and (isinstance(sms, bool) or not isinstance(sms, int) or sms < 1):
        raise ValueError(f"gemm_config: sms must be a positive int, got {sms!r}")
    eb = _ELEM_BYTES.get(str(dtype))
    if eb is None:
        raise TargetError(f"gemm_config: dtype {dtype!r} is not a GEMM operand type; use one of "
                          f"{', '.join(sorted(_ELEM_BYTES))}")
    peaks = peaks_for(target)
    cfg, _ = best_gemm_config(m, n, k, peaks, sms=sms, elem_bytes=eb)
    return cfg


__all__ = ["GemmConfig", "gemm_config"]
