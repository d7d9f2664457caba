"""ditron.tiling: the tile configurations ditron-tile's cost model picks, for user kernels to use the same.

    cfg = ditron.tiling.gemm_config(4096, 3584, 4096, "bf16", "cuda:90")           # or sms=66 (an SM budget)
    cfg.block_m, cfg.block_n, cfg.block_k, cfg.group_m, cfg.num_warps, cfg.num_stages
    rows = ditron.tiling.ag_gemm_chunk_rows(2, 512, 3584, 4096, "bf16", "cuda:90", sms=66)  # rows per copied chunk

``gemm_config`` ranks the target's GEMM candidates (its vendor facts, those whose stages fit shared memory) by the
cost model's time (``cost_model.gemm_time``: waves of tiles on ``sms`` SMs, each bound by its math or its loads) --
the ranking ditron-tile's planner (passes/planner.py, ``PlannerBase.gemm_config``) makes for a GEMM without split-K,
such as the GEMM of a fused AG+GEMM with its per-tile waits. ``ag_gemm_chunk_rows`` is the chunking the planner picks
for an AG+GEMM whose shards stream in by copies (``cost_model.ag_gemm_estimate`` over ``chunk_rows_options``). No
MLIR: a GPU box without the compiler can call them.
"""
from __future__ import annotations

from .backends.facts import GemmConfig
from .cost_model import ag_gemm_estimate, best_gemm_config, chunk_rows_options, gemm_tiles, peaks_for
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


def ag_gemm_chunk_rows(world: int, m: int, n: int, k: int, dtype: str = "bf16", target: str = "cuda:90", *,
                       sms: int | None = None, engine: str = "copy_engine", push: bool = True) -> int:
    """Rows per chunk of an AG+GEMM whose ``world`` shards of ``m`` rows ([m, k] each) are copied into every
    rank's gather buffer chunk by chunk (by ``push`` from the owner, else pulled; by the ``engine``, copy_engine
    or sm) while a GEMM of the gathered [world * m, k] x [k, n] on ``sms`` SMs waits per tile: the chunking
    ditron-tile's planner ranks by the cost model (a divisor of m; m itself -- one chunk -- where nothing is
    copied, world 1)."""
    for name, v in (("world", world), ("m", m), ("n", n), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"ag_gemm_chunk_rows: {name} must be a positive int, got {v!r}")
    if engine not in ("copy_engine", "sm"):
        raise ValueError(f"ag_gemm_chunk_rows: engine must be copy_engine or sm, got {engine!r}")
    peaks = peaks_for(target)
    sms = sms or peaks.num_sms
    cfg = gemm_config(world * m, n, k, dtype, target, sms=sms)
    if world == 1:
        return m
    _, t_gemm = best_gemm_config(world * m, n, k, peaks, sms=sms, elem_bytes=_ELEM_BYTES[str(dtype)])
    best = None
    for rows in chunk_rows_options(m, cfg.block_m):
        t = ag_gemm_estimate(t_gemm, m * k * _ELEM_BYTES[str(dtype)], world, -(-m // rows), peaks, engine=engine,
                             tiles=gemm_tiles(world * m, n, cfg), sms=sms, push=push,
                             tiles_span_ranks=cfg.block_m > m)
        if best is None or t < best[1] * 0.999:  # fewest chunks first: a tie keeps fewer
            best = (rows, t)
    return best[0]


__all__ = ["GemmConfig", "ag_gemm_chunk_rows", "gemm_config"]
