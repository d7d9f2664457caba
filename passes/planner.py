"""ditron-tile's choices (the cost model's decisions, with the pass's overrides applied): a planner for the ops of
overlap groups (AG+GEMM, GEMM+RS, GEMM+AR) and one for ops alone, over a base of the choices both make (GEMM tile
configurations, chunkings, engines, SMs, the algorithms an op may take)."""
from __future__ import annotations

import dataclasses
import math

from mlir import ir

from ..cost_model import (EPILOGUE_GATHER_SLOWDOWN, MAX_CHUNKS_PER_SHARD, REPACKS, GemmConfig, TargetPeaks,
                          ag_gemm_estimate, ag_gemm_one_launch_estimate, all_reduce_estimates,
                          all_reduce_one_launch_time, all_reduce_push_launch_time, all_reduce_two_shot_launch_time,
                          best_grouped_gemm_config, chunk_rows_options, copy_time, divisors, gemm_candidates,
                          gemm_push_estimate, gemm_push_sum_estimate, gemm_rs_epilogue_estimate, gemm_rs_estimate,
                          gemm_split, gemm_tiles, gemm_time, local_copy_time, off_line, one_wave_loads, one_wave_stages,
                          reduce_scatter_estimates,
                          repack_choice, stream_k_tiles)
from ..dialects import task
from ..errors import TargetError
from ..dialects.sharding import Mesh
from ..kernels.copy import sm_copy_refusal
from ..kernels.gemm.configs import choose_config, tma_loads
from .tiling import OverlapGroup, Tiling, axis_size, elem_bytes, op_error, shape_of

ENGINES = ("copy_engine", "sm")
# push: one-shot by SM stores into the peers' inboxes (engine sm only)
ALL_REDUCE_ALGORITHMS = ("one_shot", "two_shot", "push")
# GEMM+AR may also reduce in the GEMM's epilogue (as GEMM+RS does), then all-gather the reduced rows
# or push and sum in one launch (push_sum: each GEMM tile pushed to the peers, then summed with theirs in its epilogue;
# every program resident)
GEMM_AR_ALGORITHMS = ALL_REDUCE_ALGORITHMS + ("epilogue", "push_sum")
# push_sum beyond one wave (persistent programs, each tile waiting for the peers' same tile before the program's
# next one): the model offers it up to this many waves. 2xH200, push_sum forced against the model's push, two runs
# each in one device call (results/ablation_gemm_ar_push_sum_waves.csv): 70B M=1024 (2 waves of 128x256 tiles)
# 364-376 us against 371-387; 8B M=8192 (8 waves) 792-807 against 758-764, 70B M=8192 (16 waves) 2840-2875 against
# 2746-2748: a push overlaps the next tiles, a summing tile stalls its program until the peers' copy lands
PUSH_SUM_MAX_WAVES = 2
# those the model chooses among for GEMM+AR: two_shot (GEMM+RS with reduce kernels on a few SMs, then an all-gather)
# ran 3-9x over its estimate at every measured shape (2xH200 ablation, bench_dist --passes
# ditron-tile:all-reduce=two_shot: LLaMA-8B M=8192 4100 us against 864 for one_shot), so it is only run when asked
GEMM_AR_MODEL_ALGORITHMS = ("one_shot", "epilogue", "push", "push_sum")
# GEMM+RS: the reduction in the GEMM's epilogue (partials pulled by the copy engine), in reduce kernels on SMs, in one
# reduce launch after the GEMM (one_launch), or push: the GEMM stores each tile of a peer's rows into that peer's
# inbox, then one launch sums the own rows (no end barrier: the push fences itself); push_sum: the same push, and
# the own rows' tiles, last, add the inbox in the GEMM's epilogue (no reduce launch)
REDUCE_SCATTER_ALGORITHMS = ("epilogue", "reduce_kernel", "one_launch", "push", "push_sum")
# AG+GEMM's gather: pull (offer, the peers pull), push (copies into every rank's buffer), both by streams beside the
# GEMM; one_launch: the GEMM's programs push the shard themselves before their first tile (gemm template 'gather')
ALL_GATHER_ALGORITHMS = ("pull", "push", "one_launch")
# What the end barrier adds to a call of a GEMM+RS / GEMM+AR that does not fence itself (every algorithm but push):
# 2xH200, the same programs with and without it: 3.1-3.4 us per call (benchmarks/results/ablation_end_barrier.csv),
# the barrier kernel 4.2-4.6 us in a profile
END_BARRIER_TIME = 3.5e-6


def _better(best: tuple | None, choice: tuple | None) -> tuple | None:
    """The plan to keep of the best so far and a candidate (time first): the candidate only if it is more than
    0.1 % faster, so that ties keep the earlier (simpler) plan."""
    if choice is not None and (best is None or choice[0] < best[0] * 0.999):
        return choice
    return best


class PlannerBase:
    """Cost-model decisions for one function, with the pass's overrides applied (``opts``: the TilePass, whose
    fields are the options): the choices every op family makes."""

    def __init__(self, opts, peaks: TargetPeaks, mesh: Mesh | None, tuned=None):
        self.o, self.peaks, self.mesh = opts, peaks, mesh
        self.vendor = peaks.target.split(":")[0]
        # ``tuned(kind, m, n, k, dtype, world)``: the tuning cache's GemmPin for a GEMM (ditron_py/tune.py), or None
        self.tuned = tuned
        self.kind, self.kind_world = "matmul", 1  # the op family being planned, and its world (the cache's key)
        self.pin = None  # the GemmPin the last gemm_config took (its persistence, its source for the record)

    def gemm_pin(self, op: ir.Operation, m: int, n: int, k: int, eb: int):
        """The GEMM config pinned for this GEMM: the gemm-config option, else the tuning cache's winner for its
        (kind, shape, dtype, world), else None (the model chooses)."""
        from ..tune import GemmPin
        if self.o.gemm_config:
            try:
                return GemmPin.parse(self.o.gemm_config, "gemm-config")
            except ValueError as err:
                raise op_error(self.o.name, op, f"gemm-config={self.o.gemm_config}: {err}") from None
        if not self.tuned or task.Matmul(op).transpose_b:  # the cache's entries are timed with B [K, N]
            return None
        dtype = str(ir.ShapedType(op.operands[0].type).element_type)  # bf16, f16, f32, f8E4M3FN, ...
        return self.tuned(self.kind, m, n, k, dtype, self.kind_world)

    # ---- core-level GEMM configuration

    def gemm_config(self, op: ir.Operation, m: int, n: int, k: int, sms: int, eb: int,
                    split: bool = False, rows_per_tile_of: int = 0) -> GemmConfig | None:
        """The candidate tile with the least modelled time; ``rows_per_tile_of``: only tiles whose BLOCK_M divides
        it (None if none does)."""
        o = self.o
        forced = {f: getattr(o, f) for f in ("block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m")
                  if getattr(o, f) is not None}
        self.pin = None
        # an fp8 matmul with fast_accum ranks the tiles of fast accumulation (no partial accumulator)
        fast = op.name == task.Matmul.op_name() and task.Matmul(op).fast_accum
        pool = gemm_candidates(self.peaks, eb, fast)
        pin = None if forced else self.gemm_pin(op, m, n, k, eb)
        if pin is not None:
            fits = pin.config.smem_bytes(eb, self.vendor) <= self.peaks.smem_per_sm
            whole = not rows_per_tile_of or rows_per_tile_of % pin.config.block_m == 0
            if fits and whole:
                # the target's own candidate of the same fields (its efficiency feeds the model's estimate)
                same = [c for c in pool if dataclasses.replace(c, efficiency=1.0) ==
                        dataclasses.replace(pin.config, efficiency=1.0)]
                self.pin = dataclasses.replace(pin, config=same[0]) if same else pin
                return self.pin.config
            if pin.source == "gemm-config":
                why = (f"needs {pin.config.smem_bytes(eb, self.vendor)} bytes of shared memory; {self.peaks.target} "
                       f"has {self.peaks.smem_per_sm}") if not fits else \
                    f"BLOCK_M {pin.config.block_m} does not divide the {rows_per_tile_of} rows of a shard"
                raise op_error(o.name, op, f"gemm-config={o.gemm_config} {why}")
            # a tuned winner that does not fit this plan (another chunking of the same GEMM): the model's choice
        candidates = [dataclasses.replace(c, **forced) for c in pool] if forced else pool
        if forced and not candidates:
            candidates = [dataclasses.replace(gemm_candidates(self.peaks, 2)[0], **forced)]
        fits = [c for c in candidates if c.smem_bytes(eb, self.vendor) <= self.peaks.smem_per_sm]
        if not fits:
            c = candidates[0]
            raise op_error(o.name, op, f"tile {c.block_m}x{c.block_n}x{c.block_k} with {c.num_stages} stages needs "
                                       f"{c.smem_bytes(eb, self.vendor)} bytes of shared memory; "
                                       f"{self.peaks.target} has {self.peaks.smem_per_sm}: lower num-stages or the "
                                       "block sizes")
        ranked = [c for c in fits if not rows_per_tile_of or rows_per_tile_of % c.block_m == 0]
        if not ranked:
            return None
        return min(ranked, key=lambda c: (self.gemm_seconds(m, n, k, c, sms, eb, split), fits.index(c)))

    def gemm_seconds(self, m: int, n: int, k: int, cfg: GemmConfig, sms: int, eb: int, split: bool) -> float:
        """The model's time of cfg, split-K included where the GEMM may split (``split``: its tiles neither wait
        nor notify, and the grid is not persistent)."""
        s = 1
        if split and self.o.persistent is not True and not self.o.stream_k:
            s = self.o.split_k if self.o.split_k is not None else gemm_split(m, n, k, cfg, sms)
        return gemm_time(m, n, k, cfg, self.peaks, sms=sms, elem_bytes=eb, split=s, stream_k=self.o.stream_k)

    def gemm_fields(self, cfg: GemmConfig, m: int, n: int, sms: int, waits: bool, k: int = 0,
                    aligned: bool = True) -> dict:
        """The Tiling's GEMM fields; ``k`` where the GEMM may take stream-K (a matmul alone). Persistent beyond one
        wave of tiles, unless the operands' rows are not 16-byte ``aligned``: without TMA loads the persistent
        (flattened) tile loop ran 6.3x slower than one program per tile (H200, 6000x3333x1111: 1428 against
        227 us, results/tune.csv)."""
        tiles = gemm_tiles(m, n, cfg)
        pin = self.pin if self.pin is not None and self.pin.config == cfg else None
        persistent = self.o.persistent if self.o.persistent is not None else \
            pin.persistent if pin is not None and pin.persistent is not None and not waits else \
            (waits or (tiles > sms and aligned))
        sk = stream_k_tiles(tiles, math.ceil(k / cfg.block_k), sms) if self.o.stream_k and k else 0
        return dict(block_m=cfg.block_m, block_n=cfg.block_n, block_k=cfg.block_k, num_warps=cfg.num_warps,
                    num_stages=cfg.num_stages, group_m=cfg.group_m, persistent=persistent or bool(sk),
                    sm_budget=sms, stream_k=sk or None, config_from=pin.source if pin else None,
                    loads=self.o.loads or None, split_k=self.o.split_k if k and not waits else None)

    def timed_gemm(self, op: ir.Operation, m: int, n: int, k: int, sms: int, eb: int,
                   split: bool = False) -> tuple[GemmConfig, float]:
        """The model's GEMM config on sms SMs and its modelled time (``split``: the GEMM may split K)."""
        cfg = self.gemm_config(op, m, n, k, sms, eb, split)
        return cfg, self.gemm_seconds(m, n, k, cfg, sms, eb, split)

    # ---- device-level choices

    def chunk_options(self, op: ir.Operation, shard_rows: int, block_m: int, *, divisor: bool = True) -> list[int]:
        """Rows per chunk worth trying, fewest chunks first. With divisor, only divisors of shard_rows (the GEMM's
        per-tile waits and notifies and the reduction map rows to slots uniformly)."""
        shard_rows = max(shard_rows, 1)
        if self.o.chunk_rows is not None or self.o.num_chunks is not None:
            want = self.o.chunk_rows if self.o.chunk_rows is not None else math.ceil(shard_rows / self.o.num_chunks)
            want = max(1, min(want, shard_rows))
            if divisor and shard_rows % want:
                if self.o.chunk_rows is not None:
                    raise op_error(self.o.name, op, f"chunk-rows={self.o.chunk_rows} does not divide the "
                                                    f"{shard_rows} rows of a shard; choose a divisor of "
                                                    f"{shard_rows}")
                want = divisor_at_least(shard_rows, want)
            return [want]
        if divisor:
            return chunk_rows_options(shard_rows, block_m)
        out, rows = [], max(block_m, 1)
        while rows < shard_rows:
            if math.ceil(shard_rows / rows) <= MAX_CHUNKS_PER_SHARD:
                out.append(rows)
            rows *= 2
        out.append(shard_rows)
        return out[::-1]  # fewest chunks first: on a tie the model keeps the cheaper schedule

    def engines(self, region: list[int] | None = None, buffers: list[int] | None = None) -> list[str]:
        """The engines to model: the one asked for, else every engine that can run the copies -- "sm" only where
        the SM copy kernel takes a ``region`` of that shape over buffers of dims ``buffers`` (kernels.copy)."""
        if self.o.engine:
            return [self.o.engine]
        if region is not None and sm_copy_refusal(len(region), region, buffers or list(region)):
            return ["copy_engine"]
        return list(ENGINES)

    def comm_sm_options(self, engine: str) -> list[int]:
        if self.o.comm_sms is not None:
            return [min(self.o.comm_sms, self.peaks.num_sms - 1)]
        if engine == "copy_engine":
            return [0]
        cap = self.peaks.num_sms // 2
        return sorted({max(1, min(s, cap)) for s in (4, 8, 16, 24, 32, 48, 64)})

    def reduce_sm_options(self) -> list[int]:
        if self.o.comm_sms is not None:
            return [max(1, min(self.o.comm_sms, self.peaks.num_sms - 1))]
        cap = self.peaks.num_sms // 2
        return sorted({max(1, min(s, cap)) for s in (4, 8, 16, 24, 32, 48)})

    def reduce_scatter_algorithms(self, rows: int, w: int) -> list[str]:
        """GEMM+RS: the epilogue reduction needs W > 1 and row tiles that do not straddle two ranks' rows (checked
        per chunking by the caller)."""
        if self.o.reduce_scatter:
            return [self.o.reduce_scatter]
        if self.o.comm_sms:  # SMs set aside for communication: the reduction kernels get them
            return ["reduce_kernel"]
        return list(REDUCE_SCATTER_ALGORITHMS) if w > 1 and rows % w == 0 else ["reduce_kernel"]

    def all_reduce_algorithms(self, op: ir.Operation, rows: int, w: int, *, fused: bool = False) -> list[str]:
        """two_shot (and epilogue) scatter whole rows over the ranks, so they need rows divisible by the world size;
        epilogue (the reduction in the GEMM's epilogue) is for GEMM+AR only."""
        if self.o.all_reduce in ("two_shot", "epilogue") and rows % w:
            raise op_error(self.o.name, op, f"all-reduce={self.o.all_reduce} needs the {rows} rows divisible by the "
                                            f"{w} ranks; use one_shot")
        if self.o.all_reduce in ("epilogue", "push_sum") and not fused:
            what = "reduces" if self.o.all_reduce == "epilogue" else "sums"
            raise op_error(self.o.name, op, f"all-reduce={self.o.all_reduce} {what} in a GEMM's epilogue; this "
                                            "all-reduce does not follow a GEMM (use one_shot or two_shot)")
        if self.o.all_reduce in ("push", "push_sum") and self.o.engine == "copy_engine":
            raise op_error(self.o.name, op, f"all-reduce={self.o.all_reduce} stores into the peers' buffers with "
                                            "SMs; it cannot use engine=copy_engine")
        if self.o.all_reduce:
            return [self.o.all_reduce]
        if rows % w:
            return ["one_shot", "push", "push_sum"] if fused and w > 1 and not self.o.comm_sms else ["one_shot"]
        return list(GEMM_AR_MODEL_ALGORITHMS if fused and w > 1 and not self.o.comm_sms else ALL_REDUCE_ALGORITHMS)

    def world(self, op: ir.Operation) -> int:
        return axis_size(self.o.name, self.mesh, op, ir.StringAttr(op.attributes["axis"]).value)


class GroupPlanner(PlannerBase):
    """The choices of the two ops of an overlap group (AG+GEMM, GEMM+RS, GEMM+AR): one tiling for both."""

    def group(self, g: OverlapGroup) -> Tiling:
        w = self.world(g.collective)
        self.kind, self.kind_world = g.kind, w
        if self.o.stream_k:
            # every program must stay resident while owners wait for lower programs' partials, and such a kernel
            # takes the whole register file (255 per thread): an overlapped GEMM that waits for a stream's copy
            # (which may need an SM beside it) deadlocked on 2xH200 (AG+GEMM 70B M = 1024 by pull)
            raise op_error(self.o.name, g.producer, "stream-k applies to a matmul alone: stream-K's programs must "
                                                    "all stay resident, which a GEMM overlapped with communication "
                                                    "cannot promise")
        if g.kind == "ag_matmul":
            return self.ag_matmul(g, w)
        return self.matmul_reduce(g, w)

    def ag_matmul(self, g: OverlapGroup, w: int) -> Tiling:
        ag, mm = task.AllGather(g.producer), task.Matmul(g.consumer)
        shard_rows, k = shape_of(ag.input)[0], shape_of(ag.input)[1]
        n = shape_of(mm.rhs)[mm.b_dims[1]]
        m, eb = shard_rows * w, elem_bytes(ag.input)
        best = None
        # pull first: push must be strictly better to be chosen (where the GEMM hides the gather either way, the
        # measured pattern stays)
        algorithms = [self.o.all_gather] if self.o.all_gather else \
            ["one_launch"] if self.o.own_first is not None else list(ALL_GATHER_ALGORITHMS)
        for algorithm in algorithms:
            if algorithm == "one_launch":
                for choice in self.one_launch_gather(g, m, n, k, eb, shard_rows, w):
                    best = _better(best, choice)
                continue
            # a push is a copy engine's remote write (SMs stay on the GEMM) unless engine=sm is asked for
            engines = ["copy_engine"] if algorithm == "push" and not self.o.engine else self.engines()
            for engine in engines:
                for comm in self.comm_sm_options(engine):
                    sms = self.peaks.num_sms - comm
                    cfg, t_gemm = self.timed_gemm(g.consumer, m, n, k, sms, eb)
                    for rows in self.chunk_options(g.producer, shard_rows, cfg.block_m):
                        chunks = math.ceil(shard_rows / rows)
                        t = ag_gemm_estimate(t_gemm, shard_rows * k * eb, w, chunks, self.peaks, engine=engine,
                                             tiles=gemm_tiles(m, n, cfg), sms=sms, comm_sms=comm,
                                             push=algorithm == "push", tiles_span_ranks=cfg.block_m > shard_rows)
                        best = _better(best, (t, engine, comm, sms, cfg, rows, chunks, algorithm, {}))
        t, engine, comm, sms, cfg, rows, chunks, algorithm, extra = best
        return Tiling(kind=g.kind, target=self.peaks.target, world=w, shard_rows=shard_rows, chunk_rows=rows,
                      num_chunks=chunks, engine=engine, comm_sms=comm, est_us=t * 1e6,
                      algorithm=algorithm if w > 1 else None, **extra,
                      **self.gemm_fields(cfg, m, n, sms, waits=w > 1))

    def one_launch_gather(self, g: OverlapGroup, m: int, n: int, k: int, eb: int, shard_rows: int, w: int):
        """AG+GEMM in one launch: its plans (modelled time, engine, comm SMs, SMs, config, chunk rows, chunks,
        algorithm, {own_first}) -- the own rows' tiles first or not -- or none where the options describe a gather
        beside the GEMM (an engine, its SMs, chunks) and it was not asked for."""
        streams = self.o.engine == "copy_engine" or self.o.comm_sms or self.o.chunk_rows is not None or \
            self.o.num_chunks is not None
        if streams and not self.o.all_gather and self.o.own_first is None:
            return []
        if streams:
            raise op_error(self.o.name, g.producer, "all-gather=one_launch pushes whole shards with the GEMM's own "
                                                    "SMs: it takes no engine=copy_engine, comm-sms, chunk-rows or "
                                                    "num-chunks")
        sms = self.peaks.num_sms
        cfg, t_gemm = self.timed_gemm(g.consumer, m, n, k, sms, eb)
        return [(ag_gemm_one_launch_estimate(t_gemm, shard_rows * k * eb, w, self.peaks, tiles=gemm_tiles(m, n, cfg),
                                             sms=sms, tiles_span_ranks=shard_rows % cfg.block_m != 0,
                                             own_first=own_first, b_bytes=k * n * eb),
                 "sm", 0, sms, cfg, shard_rows, 1, "one_launch", {"own_first": own_first})
                for own_first in ((False, True) if self.o.own_first is None else (self.o.own_first,))]

    def matmul_reduce(self, g: OverlapGroup, w: int) -> Tiling:
        mm = task.Matmul(g.producer)
        m, k = shape_of(mm.lhs)
        n = shape_of(mm.rhs)[mm.b_dims[1]]
        eb = elem_bytes(mm.lhs)
        algorithms = self.reduce_scatter_algorithms(m, w)
        if g.kind == "matmul_ar":
            algorithms = self.all_reduce_algorithms(g.consumer, m, w, fused=True)
        best = None
        for algorithm in algorithms:
            whole = algorithm in ("one_shot", "push", "push_sum") and g.kind == "matmul_ar"
            shard_rows = m if whole else math.ceil(m / w)
            if algorithm == "epilogue":
                for choice in self.epilogue_choices(g, m, n, k, eb, w, shard_rows):
                    best = _better(best, (choice[0] + END_BARRIER_TIME,) + choice[1:])
                continue
            if algorithm in ("push", "push_sum") and g.kind == "matmul_rs":
                best = _better(best, self.push_reduce_scatter(g, m, n, k, eb, shard_rows, w, algorithm))
                continue
            if algorithm == "push_sum":
                best = _better(best, self.push_sum_all_reduce(g, m, n, k, eb, w))
                continue
            if algorithm in ("one_shot", "push") and g.kind == "matmul_ar" or algorithm == "one_launch":
                # the GEMM on every SM, then one reduce launch (of every row for GEMM+AR, of the own rows for RS)
                sms = self.peaks.num_sms
                cfg, t_gemm = self.timed_gemm(g.producer, m, n, k, sms, eb, split=True)
                rows = shard_rows if algorithm == "one_launch" else m
                if algorithm == "push":  # the GEMM pushes its tiles as it goes, then a local sum
                    t = gemm_push_estimate(t_gemm, m, n, w, self.peaks, elem_bytes=eb)
                else:
                    t = t_gemm + all_reduce_one_launch_time(rows, n, w, self.peaks, elem_bytes=eb, sms=sms) + \
                        END_BARRIER_TIME
                best = _better(best, (t, algorithm, "sm", sms, sms, cfg, rows, rows, 1))
                continue
            for comm in self.reduce_sm_options():
                sms = self.peaks.num_sms - comm
                cfg, t_gemm = self.timed_gemm(g.producer, m, n, k, sms, eb)
                for rows in self.chunk_options(g.consumer, shard_rows, cfg.block_m):
                    chunks = math.ceil(shard_rows / rows)
                    t = gemm_rs_estimate(t_gemm, shard_rows * n * eb, w, chunks, self.peaks, reduce_sms=comm,
                                         rows=shard_rows, cols=n, elem_bytes=eb) + END_BARRIER_TIME
                    if algorithm == "two_shot":
                        t += copy_time((w - 1) * shard_rows * n * eb, self.peaks, engine="copy_engine",
                                       peers=w - 1, chunks=(w - 1) * chunks)
                    best = _better(best, (t, algorithm, "sm", comm, sms, cfg, shard_rows, rows, chunks))
        if best is None:
            other = "reduce-scatter=reduce_kernel" if g.kind == "matmul_rs" else "all-reduce=two_shot"
            raise op_error(self.o.name, g.consumer, f"the epilogue reduction needs the {shard_rows} rows of a "
                                                    f"shard to split into chunks of whole GEMM row tiles; use "
                                                    f"{other}")
        t, algorithm, engine, comm, sms, cfg, shard_rows, rows, chunks = best
        return Tiling(kind=g.kind, target=self.peaks.target, world=w, shard_rows=shard_rows, chunk_rows=rows,
                      num_chunks=chunks, engine=engine, comm_sms=comm, est_us=t * 1e6, algorithm=algorithm,
                      **self.gemm_fields(cfg, m, n, sms, waits=False))

    def push_sum_all_reduce(self, g: OverlapGroup, m: int, n: int, k: int, eb: int, w: int):
        """(time, "push_sum", ...) of GEMM+AR in one launch -- every tile pushed to the peers, then summed with
        theirs in its epilogue -- for a GEMM whose tiles are all resident at once (one wave: a tile waits for the
        peers' same tile) or of persistent programs running the same tiles in the same order on every rank (each
        program's j-th tile waits only for the peers' j-th tiles of the same program, pushed before any wait) up to
        PUSH_SUM_MAX_WAVES waves (asked for: any number); None otherwise (asked for with persistent=false beyond
        one wave: an error)."""
        sms = self.peaks.num_sms
        cfg, t_gemm = self.timed_gemm(g.producer, m, n, k, sms, eb, split=True)
        tiles = gemm_tiles(m, n, cfg)
        if tiles > sms and self.o.persistent is False:
            if self.o.all_reduce == "push_sum":
                raise op_error(self.o.name, g.consumer, f"all-reduce=push_sum sums each tile in the GEMM's epilogue "
                                                        f"once the peers' copy of it landed, so every program must "
                                                        f"stay resident: {tiles} tiles of {cfg.block_m}x"
                                                        f"{cfg.block_n} over {sms} SMs need persistent=true")
            return None
        if math.ceil(tiles / sms) > PUSH_SUM_MAX_WAVES and self.o.all_reduce != "push_sum":
            return None
        t = gemm_push_sum_estimate(t_gemm, m, n, w, self.peaks, elem_bytes=eb)
        return t, "push_sum", "sm", sms, sms, cfg, m, m, 1

    def push_reduce_scatter(self, g: OverlapGroup, m: int, n: int, k: int, eb: int, shard_rows: int, w: int,
                            algorithm: str):
        """(time, algorithm, ...) of GEMM+RS by push -- every SM on the GEMM, whose tiles of a peer's rows go to
        that peer's inbox as they complete, then one launch summing the own rows (push) or the own rows' tiles,
        last, adding the inbox in their epilogue (push_sum) -- on the best GEMM tile that does not straddle two
        ranks' rows; None where none fits (reduce-scatter=push / push_sum asked for: an error)."""
        if self.o.engine == "copy_engine":
            if self.o.reduce_scatter == algorithm:
                raise op_error(self.o.name, g.consumer, f"reduce-scatter={algorithm} stores into the peers' inboxes "
                                                        "with SMs; it cannot use engine=copy_engine")
            return None
        sms = self.peaks.num_sms
        cfg = self.gemm_config(g.producer, m, n, k, sms, eb, rows_per_tile_of=shard_rows)
        if cfg is None:
            if self.o.reduce_scatter == algorithm:
                bm = f"BLOCK_M {self.o.block_m}" if self.o.block_m else "no GEMM tile's BLOCK_M"
                raise op_error(self.o.name, g.consumer, f"reduce-scatter={algorithm} needs GEMM row tiles inside one "
                                                        f"rank's rows: {bm} does not divide the {shard_rows} rows of a "
                                                        "shard (pass a block-m that does, or use one_launch)")
            return None
        t_gemm = self.gemm_seconds(m, n, k, cfg, sms, eb, False)
        estimate = gemm_push_sum_estimate if algorithm == "push_sum" else gemm_push_estimate
        t = estimate(t_gemm, shard_rows, n, w, self.peaks, elem_bytes=eb)
        return t, algorithm, "sm", sms, sms, cfg, shard_rows, shard_rows, 1

    def epilogue_choices(self, g: OverlapGroup, m: int, n: int, k: int, eb: int, w: int, shard_rows: int):
        """(time, "epilogue", engine, comm SMs, SMs, config, shard rows, chunk rows, chunks) for each way to reduce
        in the GEMM's epilogue: every SM on the GEMM, chunks of whole row tiles, partials moved by the copy
        engine or read by the SMs; GEMM+AR adds the gather of the reduced rows."""
        sms = self.peaks.num_sms
        cfg, t_gemm = self.timed_gemm(g.producer, m, n, k, sms, eb)
        one_wave = gemm_tiles(m, n, cfg) <= sms
        if one_wave and g.kind == "matmul_rs" and not self.o.reduce_scatter:
            # every tile at once: the own tiles wait for the peers' tiles, which end with them, so nothing
            # overlaps, and the epilogue's constrained tile order only costs (2xH200, LLaMA-70B M=128: 106 us
            # against 84 for the GEMM then one_launch; 8B M = 1024, 128 tiles: 108 us against 103 by push)
            return
        for engine in self.engines():
            for rows in self.chunk_options(g.consumer, shard_rows, cfg.block_m):
                if rows % cfg.block_m or shard_rows % rows:
                    continue
                chunks = shard_rows // rows
                t = gemm_rs_epilogue_estimate(t_gemm, shard_rows * n * eb, w, chunks, self.peaks, engine=engine,
                                              one_wave=one_wave)
                if g.kind == "matmul_ar":  # then the gather of the reduced rows and the copy of the output
                    t += EPILOGUE_GATHER_SLOWDOWN * (
                        copy_time((w - 1) * shard_rows * n * eb, self.peaks, engine="copy_engine", peers=w - 1,
                                  chunks=(w - 1) * chunks) + self.peaks.hop_latency * chunks +
                        local_copy_time(m * n * eb, self.peaks))
                yield t, "epilogue", engine, 0, sms, cfg, shard_rows, rows, chunks


class OpPlanner(PlannerBase):
    """The choices of an op alone (not in an overlap group)."""

    def single(self, op: ir.Operation) -> Tiling | None:
        self.kind, self.kind_world = "matmul", 1
        if task.Matmul.match(op):
            return self.matmul(op)
        if task.AllGather.match(op):
            return self.all_gather(op)
        if task.ReduceScatter.match(op) or task.AllReduce.match(op):
            return self.reduction(op)
        if task.AllToAll.match(op):
            return self.all_to_all(op)
        if task.GroupedMatmul.match(op):
            return self.grouped_matmul(op)
        if task.Custom.match(op):  # the user's kernel program makes its own choices, for this world and SMs
            return Tiling(kind="custom", target=self.peaks.target, world=self.world(op), sm_budget=self.peaks.num_sms)
        if task.Elementwise.match(op):
            block = self.o.elementwise_block or 1024
            return Tiling(kind="elementwise", target=self.peaks.target, block=block,
                          num_warps=self.o.num_warps or 4, sm_budget=self.peaks.num_sms)
        return None

    def matmul(self, op: ir.Operation) -> Tiling:
        mm = task.Matmul(op)
        m, k = shape_of(mm.lhs)
        n = shape_of(mm.rhs)[mm.b_dims[1]]
        eb, sms = elem_bytes(mm.lhs), self.peaks.num_sms
        cfg, t = self.timed_gemm(op, m, n, k, sms, eb, split=True)
        aligned = tma_loads(k, k if mm.transpose_b else n, eb)  # the template's rule (rows as stored)
        b_rows = (n, k) if mm.transpose_b else (k, n)
        # the model's choice, where the GEMM loads its operands by TMA (the template's rule for the tile)
        from .device_kernels import dtype_name  # (it imports ditron-tile's Tiling)
        default = choose_config(m, n, k, dtype_name(mm.lhs.type), self.peaks.target, b_trans=mm.transpose_b,
                                fast_accum=mm.fast_accum)  # the template's record fields beside the tile
        tma = default["loads"] == "tma"
        allowed = ("", *REPACKS) if tma else ("",)
        if self.o.repack == "off":
            allowed = ("",)
        elif self.o.repack == "all":  # every operand whose rows are off TMA lines
            offs = off_line(k, b_rows[1], eb, self.peaks)
            allowed = ("a" * offs[0] + "b" * offs[1],)
        repack, t = repack_choice(t, (m, k), b_rows, eb, self.peaks, allowed=allowed)
        fields = self.gemm_fields(cfg, m, n, sms, waits=False, k=k, aligned=aligned)
        if not fields["persistent"] and not self.o.loads and aligned and self.peaks.tma_line and eb == 2:
            # a one-wave grid: TMA where its programs' K loops are long and the GEMM bound by math
            split = self.o.split_k if self.o.split_k is not None else gemm_split(m, n, k, cfg, sms)
            fields["loads"] = one_wave_loads(m, n, k, cfg, self.peaks, split=split, elem_bytes=eb)
            if fields["loads"] == "tma" and default["store"] == "pointer" and self.pin is None \
                    and self.o.num_stages is None:
                fields["num_stages"] = one_wave_stages(cfg, eb, self.peaks.smem_per_sm)
        return Tiling(kind="matmul", target=self.peaks.target, est_us=t * 1e6, repack=repack or None, **fields)

    def all_gather(self, op: ir.Operation) -> Tiling:
        ag = task.AllGather(op)
        if self.o.all_gather in ("push", "one_launch"):
            raise op_error(self.o.name, op, f"all-gather={self.o.all_gather} copies into the peers' gather buffers, "
                                            "which only AG+GEMM has (this all-gather's output is the function's); "
                                            "use pull")
        w, shape, eb = self.world(op), shape_of(ag.input), elem_bytes(ag.input)
        shard_rows = shape[ag.dim]
        row_bytes = math.prod(shape) // max(shard_rows, 1) * eb
        gathered = [d * w if i == ag.dim else d for i, d in enumerate(shape)]
        best = None
        for engine in self.engines(list(shape), [*shape, *gathered]):
            for comm in self.comm_sm_options(engine):
                for rows in self.chunk_options(op, shard_rows, 64, divisor=False):
                    chunks = math.ceil(shard_rows / rows)
                    t = local_copy_time(shard_rows * row_bytes, self.peaks) + copy_time(
                        (w - 1) * shard_rows * row_bytes, self.peaks, engine=engine, peers=w - 1,
                        chunks=(w - 1) * chunks, sms=comm or self.peaks.num_sms)
                    best = _better(best, (t, engine, comm, rows, chunks))
        t, engine, comm, rows, chunks = best
        if engine == "sm" and not comm:
            comm = self.peaks.num_sms
        return Tiling(kind="all_gather", target=self.peaks.target, world=w, shard_rows=shard_rows,
                      chunk_rows=rows, num_chunks=chunks, engine=engine, comm_sms=comm, est_us=t * 1e6)

    def grouped_matmul(self, op: ir.Operation) -> Tiling:
        """The grouped GEMM's tile (kernels.grouped_gemm) from the cost model (cost_model.best_grouped_gemm_config:
        the routing taken as even, the target's grouped-GEMM candidates); each field overridable."""
        g = task.GroupedMatmul(op)
        eb = elem_bytes(g.lhs)
        (rows, k), (groups, _, n) = shape_of(g.lhs), shape_of(g.rhs)
        groups = max(groups, shape_of(g.group_sizes)[0])  # cycled weights: every group may add a partial tile
        try:
            cfg, t = best_grouped_gemm_config(rows, k, n, max(groups, 1), self.peaks, elem_bytes=eb)
        except TargetError as err:
            raise op_error(self.o.name, op, str(err)) from None
        # gated: a tile of block_n output columns computes the gate's and the up's (two accumulators), the work
        # and the registers of the model's tile of 2 * block_n columns
        block_n = max(16, cfg.block_n // 2) if g.gated else cfg.block_n
        return Tiling(kind="grouped_matmul", target=self.peaks.target, block_m=self.o.block_m or cfg.block_m,
                      block_n=self.o.block_n or block_n, block_k=self.o.block_k or cfg.block_k,
                      num_warps=self.o.num_warps or cfg.num_warps, num_stages=self.o.num_stages or cfg.num_stages,
                      sm_budget=self.peaks.num_sms, est_us=t * 1e6)

    def all_to_all(self, op: ir.Operation) -> Tiling | None:
        """Static all_to_all: this rank's input is staged into a symmetric buffer and offered, every rank pulls
        its part of each peer's (one copy per peer) and copies its own part locally. The engine (and its SMs) from
        the model; parts of run-time sizes (split_sizes) are tiled in the bounded form only (``all_to_all_sized``;
        the unbounded one has no device-level lowering)."""
        a2a = task.AllToAll(op)
        if a2a.bounded:
            return self.all_to_all_sized(op)
        if a2a.split_sizes is not None:
            return None
        w, shape, eb = self.world(op), shape_of(a2a.input), elem_bytes(a2a.input)
        nbytes = math.prod(shape) * eb
        part = nbytes // max(w, 1)
        out = shape_of(op.results[0])
        best = None
        for engine in self.engines(list(shape), [*shape, *out]):
            for comm in self.comm_sm_options(engine):
                t = local_copy_time(part, self.peaks) + copy_time(
                    (w - 1) * part, self.peaks, engine=engine, peers=w - 1, chunks=w - 1,
                    sms=comm or self.peaks.num_sms)
                if w > 1:
                    t += local_copy_time(nbytes, self.peaks)  # the staging copy into the symmetric buffer
                best = _better(best, (t, engine, comm))
        t, engine, comm = best
        if engine == "sm" and not comm:
            comm = self.peaks.num_sms
        return Tiling(kind="all_to_all", target=self.peaks.target, world=w,
                      shard_rows=shape[a2a.split_dim] // max(w, 1), num_chunks=1, engine=engine, comm_sms=comm,
                      est_us=t * 1e6)

    def all_to_all_sized(self, op: ir.Operation) -> Tiling:
        """The bounded all_to_all of run-time sizes (collectives/all_to_all_sized.py): the sizes are on the device,
        so the rows move on SMs (a copy engine's size is the host's), as one ``a2a_sized`` pull launch. Its
        programs (``comm_sms``) from the model, for the rows a rank receives when the routing is even (its own
        rows' worth, (W - 1) / W of them from peers) plus the staging copy and the zeroing of the capacity's
        rows past them; the model cannot know the routing."""
        a2a = task.AllToAll(op)
        if self.o.engine == "copy_engine":
            raise op_error(self.o.name, op, "engine=copy_engine cannot move parts of run-time sizes (the sizes are "
                                            "on the device, a copy engine's are the host's); use engine=sm")
        w, shape, eb = self.world(op), shape_of(a2a.input), elem_bytes(a2a.input)
        nbytes = math.prod(shape) * eb
        zeroed = max(a2a.capacity - shape[0], 0) * nbytes / max(shape[0], 1)
        best = None
        for sms in self.comm_sm_options("sm"):
            t = local_copy_time(nbytes, self.peaks) + zeroed / self.peaks.hbm_copy_bw + copy_time(
                nbytes * (w - 1) / max(w, 1), self.peaks, engine="sm", peers=max(w - 1, 1), chunks=w, sms=sms)
            t += self.peaks.launch_latency
            best = _better(best, (t, sms))
        t, sms = best
        return Tiling(kind="all_to_all", target=self.peaks.target, world=w, algorithm="pull_sized", engine="sm",
                      comm_sms=sms, shard_rows=shape[0], num_warps=self.o.num_warps, est_us=t * 1e6)

    def reduction(self, op: ir.Operation) -> Tiling:
        """Standalone reduce_scatter (dim 0) or all_reduce: the reduction kernel reads peers' chunks on SMs."""
        w, eb = self.world(op), elem_bytes(op.operands[0])
        shape = shape_of(op.operands[0])
        rows = shape[0] if shape else 1
        cols = math.prod(shape[1:]) if len(shape) > 1 else 1
        sms = self.peaks.num_sms if self.o.comm_sms is None else max(1, self.o.comm_sms)
        engine = "copy_engine"  # the partials are staged by the copy engine, reduced by a kernel on ``sms`` SMs
        if task.AllReduce.match(op):
            algorithm, engine, t = self.standalone_all_reduce(op, rows, cols, w, eb, sms)
            kind, shard_rows = "all_reduce", math.ceil(rows / w) if algorithm == "two_shot" else rows
        else:
            kind, shard_rows = "reduce_scatter", rows // w
            algorithm = self.standalone_reduce_scatter(op, w)
            estimates = reduce_scatter_estimates(rows, cols, w, self.peaks, elem_bytes=eb, sms=sms)
            if algorithm is None and self.o.engine != "copy_engine" and w > 1:
                algorithm = min(estimates, key=estimates.get) if self.o.engine != "sm" else "one_launch"
            t = estimates[algorithm or "reduce_kernel"]
            if algorithm == "one_launch":  # one kernel reads the peers' partials: the SMs move the data
                engine = "sm"
            else:
                algorithm = None  # the staged reduce kernel: the pattern's default
        best_rows = self.chunk_options(op, shard_rows, 64)
        # more chunks overlap the staging copy with the reduction; the model prefers ~4 when free to choose
        rows_per_chunk = min(best_rows, key=lambda r: abs(math.ceil(shard_rows / r) - 4))
        tile_rows = rows if kind == "all_reduce" else shard_rows
        tile = self.one_launch_tile(tile_rows, cols, eb, sms, push=algorithm == "push") if engine == "sm" else {}
        return Tiling(kind=kind, target=self.peaks.target, world=w, shard_rows=shard_rows,
                      chunk_rows=rows_per_chunk, num_chunks=math.ceil(shard_rows / rows_per_chunk),
                      engine=engine, comm_sms=sms, algorithm=algorithm, est_us=t * 1e6, **tile)

    def standalone_all_reduce(self, op: ir.Operation, rows: int, cols: int, w: int, eb: int,
                              sms: int) -> tuple[str, str, float]:
        """(algorithm, engine, modelled seconds) of a standalone all-reduce: one_shot or two_shot, each staged by
        the copy engine and reduced by a kernel (engine copy_engine; two_shot needs rows divisible by W) or as one
        kernel whose SMs publish, signal and reduce (engine sm); the all-reduce and engine options narrow them."""
        if self.o.all_reduce in ("epilogue", "push_sum"):
            self.all_reduce_algorithms(op, rows, w)  # raises: no GEMM to reduce in
        staged = all_reduce_estimates(rows, cols, w, self.peaks, elem_bytes=eb, sms=sms)
        launch = {"one_shot": all_reduce_one_launch_time, "two_shot": all_reduce_two_shot_launch_time,
                  "push": all_reduce_push_launch_time}
        if self.o.all_reduce == "push":
            self.all_reduce_algorithms(op, rows, w)  # raises where push cannot run
        options = []
        for algorithm in (self.o.all_reduce,) if self.o.all_reduce else ALL_REDUCE_ALGORITHMS:
            if algorithm == "push" and w == 1 and not self.o.all_reduce:
                continue  # one rank: nothing to push
            if self.o.engine != "sm" and algorithm != "push" and (algorithm == "one_shot" or rows % w == 0):
                options.append((staged[algorithm], algorithm, "copy_engine"))
            if self.o.engine != "copy_engine":
                options.append((launch[algorithm](rows, cols, w, self.peaks, elem_bytes=eb, sms=sms), algorithm,
                                "sm"))
        if not options:
            raise op_error(self.o.name, op, f"all-reduce={self.o.all_reduce} with the copy engine needs the {rows} "
                                            f"rows divisible by the {w} ranks; use one_shot or engine=sm")
        t, algorithm, engine = min(options, key=lambda o: o[0])
        return algorithm, engine, t

    def standalone_reduce_scatter(self, op: ir.Operation, w: int) -> str | None:
        """The reduce-scatter option for a standalone reduce-scatter (None: the model's choice)."""
        algorithm = self.o.reduce_scatter or None
        if algorithm not in (None, "reduce_kernel", "one_launch"):
            what = "reduces in a GEMM's epilogue" if algorithm == "epilogue" else "pushes a GEMM's tiles"
            raise op_error(self.o.name, op, f"reduce-scatter={algorithm} {what}; this reduce-scatter does not follow "
                                            "a GEMM (use reduce_kernel or one_launch)")
        if algorithm == "one_launch" and self.o.engine == "copy_engine":
            raise op_error(self.o.name, op, "reduce-scatter=one_launch reads the peers' partials with SMs; it "
                                            "cannot use engine=copy_engine")
        return algorithm if w > 1 else None

    def one_launch_tile(self, rows: int, cols: int, eb: int, sms: int, *, push: bool = False) -> dict[str, int]:
        """The one-launch all-reduce's tile (kernels.reduce.publish_tile); block-m / block-n / num-warps override."""
        from ..kernels.reduce import publish_tile
        tile = publish_tile(rows, cols, eb, sms, block_m=self.o.block_m, block_n=self.o.block_n, push=push)
        if self.o.num_warps:
            tile["num_warps"] = self.o.num_warps
        return tile


class Planner(GroupPlanner, OpPlanner):
    """ditron-tile's planner of one function: ``group`` for an overlap group, ``single`` for an op alone."""


def divisor_at_least(n: int, want: int) -> int:
    """The smallest divisor of n that is >= want (n itself at worst), from n's divisors (sqrt(n) trial divisions,
    not a walk from want to n)."""
    return min(d for d in divisors(n) if d >= want)
