"""Kernel records for the device-level lowering: from a ``Tiling`` (ditron-tile's choices) and task-level shapes to
the ``KernelRecord`` of a core template (ditron.kernels). The one place where ditron-lower-task-to-device meets
the templates' record fields, so a change of a template's fields is a change here only. A record the template
refuses raises its VerificationError, which ditron-lower-task-to-device reports at the op it was lowering.
"""
from __future__ import annotations

import math
from typing import Sequence

from mlir import ir

from ..errors import PassError, TargetError
from ..kernels import KernelRecord
from .tile import Tiling


def dtype_name(t: ir.Type) -> str:
    """The ditron dtype name of an element type (or of a shaped type's element type)."""
    if isinstance(t, ir.ShapedType):
        t = ir.ShapedType(t).element_type
    if isinstance(t, ir.BF16Type):
        return "bf16"
    if isinstance(t, ir.F16Type):
        return "fp16"
    if isinstance(t, ir.F32Type):
        return "fp32"
    if isinstance(t, ir.Float8E4M3FNType):
        return "fp8e4m3"
    if isinstance(t, ir.Float8E5M2Type):
        return "fp8e5m2"
    if isinstance(t, ir.IntegerType):
        return f"i{ir.IntegerType(t).width}"
    raise PassError(f"element type {t} has no kernel template support (use bf16, fp16, fp32 or fp8)")


# ------------------------------------------------------------------------------------------------------ GEMM

def gemm_record(a_shape: Sequence[int], b_shape: Sequence[int], a_type: ir.Type, c_type: ir.Type, t: Tiling, *,
                b_trans: bool = False, wait: dict | None = None, notify: dict | None = None,
                reduce_own: dict | None = None, push: dict | None = None, gather: dict | None = None,
                rows_per_rank: int = 0, tile_order: str = "grouped", rank_shift: int = 0, epilogue: list | None = None,
                fast_accum: bool = False, lda: int | None = None, ldb: int | None = None) -> KernelRecord:
    from ..kernels import gemm
    m, k = a_shape
    n = b_shape[0] if b_trans else b_shape[1]  # b_trans: B is [N, K] (a matmul's transpose_b), read in place
    config = {key: getattr(t, key) for key in ("block_m", "block_n", "block_k", "group_m", "num_warps",
                                               "num_stages", "persistent") if getattr(t, key) is not None}
    if t.sm_budget is not None:
        config["num_sms"] = t.sm_budget
    if t.stream_k:  # the last tiles by K steps after the persistent loop: no flattened loop
        config.update(stream_k=t.stream_k, flatten=False)
    if t.loads:  # the option's loads (else the template's rule for the tile)
        config["loads"] = t.loads
    if "block_m" in config and "block_n" in config and "block_k" in config:
        fused = bool(wait or notify or reduce_own or (push or {}).get("owner"))
        config["split_k"] = _split_k(m, n, k, a_type, c_type, t, config, fused=fused)
    own_rows_apart = reduce_own is not None or (gather or {}).get("own_first") or (wait is not None and not gather) \
        or ((push or {}).get("sum_own") and _tiles(m, n, config) > _sms(m, n, k, a_type, c_type, t, config))
    if own_rows_apart and config.get("block_m") and rows_per_rank:
        # the own rows' tiles come last (reduce_own; push.sum_own beyond one wave) or first (AG+GEMM: own rows
        # ready at once, the peers' rows later) only if no GROUP_M group straddles two ranks' rows. A one-wave
        # push keeps its GROUP_M: the group's programs share B in L2 (2xH200, GEMM+RS LLaMA-70B M = 128, 64-row
        # tiles: 96-102 us with GROUP_M 1 against 66-70 with 2; results/ablation_rs_push_sum.csv)
        config["group_m"] = math.gcd(config.get("group_m", 8), max(1, rows_per_rank // config["block_m"]))
    return gemm.make_record(m, n, k, in_dtype=dtype_name(a_type), out_dtype=dtype_name(c_type), b_trans=b_trans,
                            tile_order=tile_order, rows_per_rank=rows_per_rank, rank_shift=rank_shift, wait=wait,
                            notify=notify, reduce_own=reduce_own, push=push, gather=gather, epilogue=epilogue,
                            target=t.target, fast_accum=fast_accum, lda=lda, ldb=ldb, **config)


def _split_k(m: int, n: int, k: int, a_type: ir.Type, c_type: ir.Type, t: Tiling, config: dict, *,
             fused: bool) -> int:
    """Split-K for the tiles ditron-tile chose (``gemm.split_for``, which ditron-tile's model assumes too): none for
    persistent kernels or GEMMs that wait or notify per tile (a push is done by the last split, with the sum; a
    push to the rows' owner is not split: its own tiles and pushed tiles go to different buffers)."""
    from ..kernels import gemm
    if config.get("persistent") or fused or config.get("stream_k"):
        return 1
    if t.split_k is not None:  # ditron-tile's split-k option
        return t.split_k
    return gemm.split_for(_tiles(m, n, config), math.ceil(k / config["block_k"]),
                          _sms(m, n, k, a_type, c_type, t, config))


def _sms(m: int, n: int, k: int, a_type: ir.Type, c_type: ir.Type, t: Tiling, config: dict) -> int:
    from ..kernels import gemm
    return config.get("num_sms") or gemm.choose_config(m, n, k, dtype_name(a_type), t.target,
                                                       out_dtype=dtype_name(c_type))["num_sms"]


def _target_sms(t: Tiling) -> int:
    """The SM (CU) count of the tiling's target, from its vendor table (backends/*/facts.py)."""
    from ..backends import target_facts
    try:
        return target_facts(t.target).num_sms
    except TargetError as err:
        raise PassError(f"a '{t.kind}' tiling names {err}") from None


def _tiles(m: int, n: int, config: dict) -> int:
    return math.ceil(m / config["block_m"]) * math.ceil(n / config["block_n"]) if "block_n" in config else 0


# ----------------------------------------------------------------------------------------------- elementwise

def grouped_gemm_record(a_shape: Sequence[int], b_shape: Sequence[int], sizes_type: ir.Type, a_type: ir.Type,
                        c_type: ir.Type, t: Tiling, *, groups: int | None = None,
                        gated: str | None = None) -> KernelRecord:
    """``groups``: the group sizes (a multiple of b's experts; default one an expert); ``gated``: b holds the gate's
    and the up's columns, the result act(gate) * up."""
    from ..kernels import grouped_gemm
    (rows, k), (experts, _, n) = a_shape, b_shape
    return grouped_gemm.make_record(rows, k, n // 2 if gated else n, groups or experts, b_groups=experts,
                                    gated=gated, dtype=dtype_name(a_type), out_dtype=dtype_name(c_type),
                                    sizes_dtype=dtype_name(sizes_type), block_m=t.block_m or 64,
                                    block_n=t.block_n or 128, block_k=t.block_k or 64, num_warps=t.num_warps or 4,
                                    num_stages=t.num_stages or 3, num_sms=t.sm_budget or _target_sms(t))


def elementwise_record(fn: str, arity: int, shape: Sequence[int], t_type: ir.Type, t: Tiling, *,
                       in_type: ir.Type | None = None, broadcast: str | None = None) -> KernelRecord:
    """``t_type``: the result's type; ``in_type``: the operands' (a cast's differs); ``broadcast``: the second
    operand is a [N] vector broadcast over the rows ("bias"), an [M, 1] one over the columns ("row") or [1]
    ("scalar")."""
    from ..kernels import elementwise
    return elementwise.make_record(fn, arity, list(shape), dtype_name(in_type or t_type), block=t.block or 1024,
                                   num_warps=t.num_warps or 4, num_sms=t.sm_budget or _target_sms(t),
                                   out_dtype=dtype_name(t_type), broadcast=broadcast)


# ------------------------------------------------------------------------------------------- launch geometry

def grid_of(rec: KernelRecord) -> list[int]:
    if rec["template"] == "gemm":
        from ..kernels import gemm
        return list(gemm.grid(rec))
    return [rec["grid"], 1, 1]


def sm_budget_of(rec: KernelRecord) -> int:
    if "num_sms" in rec:
        return min(rec["num_sms"], math.prod(grid_of(rec)))
    return max(1, min(math.prod(grid_of(rec)), rec.get("sm_budget", math.prod(grid_of(rec)))))
