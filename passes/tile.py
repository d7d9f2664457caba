"""ditron-tile: multi-level tiling. Chooses, for every op of a local-view task program, the device-level chunking
(rows per chunk, chunks per shard, copy engine, SMs given to communication, all-gather / reduce-scatter /
all-reduce algorithm) and the core tile
configuration (BLOCK_M/N/K, warps, stages, grouped order, persistent or not, SM budget), from the cost model of
ditron.cost_model fed by the target's peak numbers. Every choice can be forced by an option.

Input: task level, local view (after ditron-partition / ditron-fuse-overlap). Output: the same ops, each with
``ditron.tiling = {...}``; the two ops of an overlap group carry the same dictionary.

    %g = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64, ditron.overlap = {group = 0 : i64, ...}}
    %h = "ditron_task.matmul"(%g, %w) {ditron.overlap = {group = 0 : i64, kind = "ag_matmul", ...}}
  becomes (ditron-tile{target=cuda:90})
    %g = "ditron_task.all_gather"(%x) {..., ditron.tiling = {kind = "ag_matmul", chunk_rows = 1024 : i64,
          num_chunks = 2 : i64, engine = "copy_engine", block_m = 128 : i64, block_n = 256 : i64, ...}}
    %h = "ditron_task.matmul"(%g, %w) {..., ditron.tiling = {<the same>}}

The module attribute ``ditron.target`` (else the ``target`` option) names the target. The choices are
ditron.passes.planner's; the record is ditron.passes.tiling's.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from .. import env
from ..backends.facts import target_facts
from ..cost_model import TargetPeaks, peaks_for
from ..dialects.opbase import walk_ops
from ..errors import PassError, TargetError
# the record and the choices live in tiling.py and planner.py; their names stay importable from here for the passes
# and callers that import them from ditron.passes.tile
from .planner import (ALL_GATHER_ALGORITHMS, ALL_REDUCE_ALGORITHMS, ENGINES, GEMM_AR_ALGORITHMS,  # noqa: F401
                      GEMM_AR_MODEL_ALGORITHMS, REDUCE_SCATTER_ALGORITHMS, Planner, divisor_at_least)
from .registry import Pass, option
from .tiling import (DEFAULT_TARGET, DEFERRED_KINDS, LEVEL_ATTR, OVERLAP_ATTR, OVERLAP_KINDS,  # noqa: F401
                     TARGET_ATTR, TILING_ATTR, VIEW_ATTR, OverlapGroup, Tiling, axis_size, elem_bytes, functions,
                     op_error, overlap_groups, require_device_level, require_task_level, shape_of, str_attr)


# the element types the GEMM templates take as operands (kernels/gemm's IN_DTYPES, kernels/grouped_gemm's DTYPES)
GEMM_ELEMENT_TYPES = ("bf16", "f16", "f8E4M3FN", "f8E5M2")
GROUPED_GEMM_ELEMENT_TYPES = ("bf16", "f16")  # f32: no grouped tile of the targets fits its stages

# ---------------------------------------------------------------------------------------------- the pass

@dataclass(frozen=True)
class TilePass(Pass):
    name = "ditron-tile"
    summary = "Choose chunk sizes, copy engines, SM split and GEMM tile configs from the cost model"

    target: str = option("", "target whose peak numbers feed the model (default: module's ditron.target, "
                             "else cuda:90)")
    num_sms: int | None = option(None, "SMs (CUs) one rank may use (default: the target's count)")
    block_m: int | None = option(None, "GEMM BLOCK_M")
    block_n: int | None = option(None, "GEMM BLOCK_N")
    block_k: int | None = option(None, "GEMM BLOCK_K")
    num_warps: int | None = option(None, "warps per GEMM program")
    num_stages: int | None = option(None, "software pipeline stages of the GEMM K loop")
    group_m: int | None = option(None, "grouped (L2-friendly) tile order: row tiles per group")
    persistent: bool | None = option(None, "persistent GEMM (one program per SM looping over tiles)")
    stream_k: bool = option(False, "stream-K: share the last partial wave of a matmul's tiles out by K steps over "
                                   "every SM (persistent; not in overlapped groups)")
    loads: str = option("", "how a GEMM loads its operands: tma (tensor descriptors, rows 16-byte aligned) or "
                            "pointer (default: the template's rule for the chosen tile)")
    split_k: int | None = option(None, "K slices of a matmul's tiles (split-K; 1: none; a non-persistent grid whose "
                                       "programs all fit the SMs) (default: the model's rule)")
    chunk_rows: int | None = option(None, "rows per chunk of the data movement")
    num_chunks: int | None = option(None, "chunks per shard (alternative to chunk-rows)")
    engine: str = option("", "copy engine for chunk copies: copy_engine or sm (default: the model's choice)")
    comm_sms: int | None = option(None, "SMs given to communication kernels (copies on SMs, reductions)")
    all_reduce: str = option("", "all-reduce algorithm: one_shot, two_shot or push (one-shot by SM stores into "
                                 "the peers' buffers), or for GEMM+AR also epilogue (default: the model's choice)")
    all_gather: str = option("", "AG+GEMM's all-gather: push (each rank copies its shard into every rank's gather "
                                 "buffer), pull (it offers the shard, the peers pull it) or one_launch (the GEMM's "
                                 "programs push the shard before their tiles) (default: the model's choice)")
    own_first: bool | None = option(None, "AG+GEMM in one launch: the own rows' tiles first, read from the shard "
                                          "while programs without one push it (true), or every program pushes "
                                          "before its tiles (false); implies all-gather=one_launch (default: the "
                                          "model's choice)")
    reduce_scatter: str = option("", "GEMM+RS reduction: epilogue (peer partials pulled by the copy engine and "
                                     "added in the GEMM's epilogue), reduce_kernel (reduction kernels on SMs "
                                     "beside the GEMM), one_launch (the GEMM, then one reduce launch of the own "
                                     "rows), push (the GEMM stores the peers' rows into their inboxes, then one "
                                     "launch sums the own rows) or push_sum (the same push; the own rows' tiles "
                                     "add the inbox in the GEMM's epilogue); a standalone reduce-scatter takes reduce_kernel "
                                     "(staged by the copy engine) or one_launch (default: the model's choice)")
    repack: str = option("", "copy a matmul's A and B to rows that start on TMA's lines before its GEMM where "
                             "their rows start off them: off (never), all (every such operand) (default: the "
                             "model's choice, per operand)")
    elementwise_block: int | None = option(None, "elements per program of elementwise kernels")
    gemm_config: str = option("", "every GEMM's tile config, BMxBNxBK-wW-sS-gG with an optional -p / -np "
                                  "(persistent or not), e.g. 128x256x64-w8-s3-g8 (default: the tuning cache's "
                                  "winner, else the model's choice)")
    tuning_cache: str = option("", "the tuning cache (JSON, written by ditron tune) whose winners are taken over the "
                                   "model's GEMM configs; off: none (default: $DITRON_TUNING_CACHE, else "
                                   "tuning.json in the cache directory, when present)")
    tuning_device: str = option("", "the GPU name whose tuning-cache entries apply, e.g. 'NVIDIA H200' (default: "
                                    "$DITRON_TUNING_DEVICE, else the latest tuned entry of any GPU of the target)")

    def __post_init__(self):
        for key in ("block_m", "block_n", "block_k", "elementwise_block"):
            v = getattr(self, key)
            if v is not None and (v < 16 or v & (v - 1)):
                raise ValueError(f"{key.replace('_', '-')} must be a power of two >= 16, got {v}")
        if self.num_warps is not None and self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num-warps must be 1, 2, 4, 8 or 16, got {self.num_warps}")
        for key in ("num_stages", "group_m", "chunk_rows", "num_chunks", "num_sms"):
            v = getattr(self, key)
            if v is not None and v < 1:
                raise ValueError(f"{key.replace('_', '-')} must be >= 1, got {v}")
        if self.comm_sms is not None and self.comm_sms < 0:
            raise ValueError(f"comm-sms must be >= 0, got {self.comm_sms}")
        if self.loads not in ("", "tma", "pointer"):
            raise ValueError(f"loads must be tma or pointer (default: the template's rule), got '{self.loads}'")
        if self.split_k is not None and self.split_k < 1:
            raise ValueError(f"split-k must be >= 1, got {self.split_k}")
        if self.split_k is not None and self.split_k > 1 and (self.stream_k or self.persistent):
            raise ValueError("split-k > 1 needs a non-persistent grid without stream-k")
        if self.chunk_rows is not None and self.num_chunks is not None:
            raise ValueError("give chunk-rows or num-chunks, not both")
        if self.repack not in ("", "off", "all"):
            raise ValueError(f"repack must be off or all (default: the model's choice), got '{self.repack}'")
        if self.engine and self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got '{self.engine}'")
        if self.all_reduce and self.all_reduce not in GEMM_AR_ALGORITHMS:
            raise ValueError(f"all-reduce must be one of {', '.join(GEMM_AR_ALGORITHMS)}, got '{self.all_reduce}'")
        if self.all_gather and self.all_gather not in ALL_GATHER_ALGORITHMS:
            raise ValueError(f"all-gather must be one of {', '.join(ALL_GATHER_ALGORITHMS)}, got '{self.all_gather}'")
        if self.own_first is not None and self.all_gather not in ("", "one_launch"):
            raise ValueError(f"own-first orders the tiles of all-gather=one_launch; it does not apply to "
                             f"all-gather={self.all_gather}")
        if self.gemm_config:
            from ..tune import GemmPin
            GemmPin.parse(self.gemm_config, "gemm-config")  # raises ValueError saying what is wrong
        if self.reduce_scatter and self.reduce_scatter not in REDUCE_SCATTER_ALGORITHMS:
            raise ValueError(f"reduce-scatter must be one of {', '.join(REDUCE_SCATTER_ALGORITHMS)}, got "
                             f"'{self.reduce_scatter}'")

    def run(self, module: ir.Module) -> None:
        peaks = self._peaks(module)
        if self.comm_sms is not None and self.comm_sms > peaks.num_sms:
            raise PassError(f"pass '{self.name}': comm-sms={self.comm_sms} exceeds the {peaks.num_sms} SMs of "
                            f"{peaks.target}{' (num-sms)' if self.num_sms else ''}")
        mesh = require_task_level(module, self.name)
        tuned = self._tuned(module, peaks)
        for func in functions(module):
            planner = Planner(self, peaks, mesh, tuned)
            grouped = set()
            for g in overlap_groups(self.name, func):
                tiling = planner.group(g)
                for op in (g.producer, g.consumer):
                    op.attributes[TILING_ATTR] = tiling.to_attr()
                    grouped.add(op)
            for op in walk_ops(func):
                self._check_gemm_types(op, peaks)
            for op in walk_ops(func):
                if op in grouped:
                    continue
                tiling = planner.single(op)
                if tiling is not None:
                    op.attributes[TILING_ATTR] = tiling.to_attr()

    def _check_gemm_types(self, op: ir.Operation, peaks: TargetPeaks) -> None:
        """A GEMM's element type must be one its template takes, on a target that runs it: f32 matmuls (and
        fp8 grouped ones) are refused here, where the task program meets the kernels, at the op (the frontend's
        Python line);
        fp8 on a target without fp8 tensor cores (its vendor facts) too, not in the backend's LLVM."""
        if op.name not in ("ditron_task.matmul", "ditron_task.grouped_matmul"):
            return
        t = str(ir.ShapedType(op.operands[0].type).element_type)
        allowed = GEMM_ELEMENT_TYPES if op.name == "ditron_task.matmul" else GROUPED_GEMM_ELEMENT_TYPES
        if t not in allowed:
            hint = "; cast the operands to bf16 or f16 first" if t == "f32" else ""
            raise op_error(self.name, op, f"has {t} operands, which its GEMM template does not take (it takes "
                                          f"{', '.join(allowed)}){hint}")
        if t.startswith("f8") and not target_facts(peaks.target).fp8:
            raise op_error(self.name, op, f"has {t} operands, which need tensor cores that take fp8; {peaks.target} "
                                          "has none (fp8 GEMMs need cuda:90 or hip:gfx950; use bf16 or f16 here)")

    def _tuned(self, module: ir.Module, peaks: TargetPeaks):
        """The tuning cache's lookup for this module's GEMMs (ditron_py/tune.py), or None without a cache. A
        tuning-cache file given by the option that cannot be read is an error located at the module; a default one
        (env var or cache directory) that cannot be read is passed over (the model chooses; ditron tune rebuilds
        it)."""
        from ..errors import DitronError
        from ..tune import TuningCache, cache_path
        path = cache_path(self.tuning_cache)
        if path is None or not path.exists():
            if self.tuning_cache and path is not None:
                raise op_error(self.name, module.operation, f"tuning-cache={self.tuning_cache}: no such file")
            return None
        try:
            cache = TuningCache.load(path)
        except DitronError as err:
            if self.tuning_cache:
                raise op_error(self.name, module.operation, f"tuning-cache={self.tuning_cache}: {err}") from None
            return None
        device = self.tuning_device or env.tuning_device()

        def lookup(kind: str, m: int, n: int, k: int, dtype: str, world: int):
            return cache.pin(peaks.target, device, dtype, world, kind, peaks.num_sms, m, n, k)
        return lookup

    def _peaks(self, module: ir.Module) -> TargetPeaks:
        target = self.target or str_attr(module.operation, TARGET_ATTR) or DEFAULT_TARGET
        try:
            return peaks_for(target, num_sms=self.num_sms)
        except TargetError as err:
            raise PassError(f"{self.name}: {err}") from None
