"""ditron.buckets: one op for every row count from 1 to a maximum, from a handful of programs compiled ahead.

An op's program is compiled for exact shapes (an ``ops.Signature``). A serving process meets many batch sizes, so
``max_rows`` lets one op serve any row count M in 1..max_rows: the rows are cut into power-of-two *buckets*
(1, 2, 4, ..., and max_rows itself when it is not a power of two), each bucket's program is the op's signature at
the bucket's largest row count, and a call runs the program of the smallest bucket that holds its rows::

    from ditron import buckets
    ys = buckets.ag_gemm(a, b, world, max_rows=4096)                  # any a.shape[0] in 1..4096
    sigs = buckets.signatures("ag_gemm", [(4096, 8192), (8192, 3584)], "bf16", 2, False, "cuda:90",
                              max_rows=4096)                         # the 13 bucket programs
    buckets.prebuild(sigs, DIR)                                       # compiled ahead, with a progress bar

The same ``max_rows`` is a parameter of the torch operators (``torch.ops.ditron.ag_gemm(a, b, world,
max_rows=4096)``, ditron.torch_ops) and of ditron.nn's layers and ``parallelize`` (``max_rows=``), and
``ditron.nn.signatures(model, W, rows, max_rows=...)`` lists the bucket programs a model needs.

Rows. The bucketed dim is dim 0 of the op's first argument (the tokens). Where an op splits those rows over the
ranks (gemm_rs, reduce_scatter and all_to_all along dim 0), the rows count in *units* of W rows -- M must divide by
W, as without buckets -- and the buckets are of units: rank r's part of a call is the rows r*M/W.. of its input.
Where an op concatenates every rank's rows (ag_gemm, all_gather along dim 0, all_to_all into dim 0), its output
holds W blocks, one per rank.

Padding. A call of M rows in a bucket of P > M rows copies its first argument into a staging tensor of P rows
(kept per padded shape, world and device, and reused by every call that falls into the bucket: stream order on
the caller's stream makes the reuse safe, since the executor joins its streams back into the caller's before a call
returns; calls of one bucket on two streams at once are not, as for the op's own symmetric buffers), runs the bucket's program, and returns the real rows of the program's output: the first rows of it (a
view of a fresh output, no copy), or where the output holds W blocks, the first rows of each block (one copy). In
a split-row op each of the W parts is padded at its end (the staging tensor holds W parts of P/W rows). The rows
past M in the staging tensor keep whatever an earlier call left there (zero at first): every op here computes each
output row from the same row of its inputs (a GEMM's row i of C from row i of A; a collective's row i from the
ranks' rows i), so no padding row reaches a real one: the real rows are what a program of M rows with the
bucket's tile plan computes (bit for bit; a program compiled for M itself may round differently where ditron-tile
picks another plan for it, e.g. another split of K). A call whose M is a bucket's size passes its tensors on as
they are.

Cost. A call in a bucket of P rows does the work of P rows: at most twice its own (M = P/2 + 1), a third more on
average over M uniform in a bucket. Where M is under the GEMM's block_m (decode batches) the padded GEMM runs the
same tiles as the exact one, and the extra is the staging copy (M x K elements) and the padded rows'
communication. ``padding_overhead(sig, max_rows)`` gives the cost model's estimate of the extra time of the GEMM
ops; benchmarks/bench_buckets.py measures it on a GPU.

Plans. Each bucket's program is what ditron-tile chooses for the bucket's shape (the cost model at P rows): the
plan changes with the bucket, never from a table of shapes. The programs are built lazily on a bucket's first
call (into the library's directory, else the compile cache) or ahead by ``prebuild``.
"""
from __future__ import annotations

import dataclasses
import sys
import weakref
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from . import ops
from .ops import OpError, Signature
from .runtime.callplan import CaptureNotPreparedError

# ops whose first argument's rows are split over the ranks (in units of W rows), by parameter
_SPLIT_ROWS = {"gemm_rs": None, "reduce_scatter": ("dim", 0), "all_to_all": ("split_dim", 0)}
# ops whose output concatenates every rank's rows (W blocks)
_CAT_ROWS = {"ag_gemm": None, "all_gather": ("dim", 0), "all_to_all": ("concat_dim", 0)}


def _holds(table: Mapping[str, Any], op: str, params: Mapping[str, Any]) -> bool:
    if op not in table:
        return False
    rule = table[op]
    return rule is None or params.get(rule[0], ops.PARAMS[op].get(rule[0])) == rule[1]


@dataclass(frozen=True)
class Layout:
    """Where an op's rows are. ``unit``: rows per bucket unit (W where the rows are split over the ranks: the input's
    parts, or two_shot's reduce-scatter; else 1); ``split_in``: the input holds W parts (each padded at its end);
    ``cat_out``: the output holds W blocks."""

    unit: int
    split_in: bool
    cat_out: bool
    world_size: int


def layout(op: str, world_size: int, params: Mapping[str, Any] | None = None) -> Layout:
    if op not in ops.OPS:
        raise OpError(f"unknown op '{op}'; ditron.ops has {', '.join(ops.OPS)}")
    p = dict(params or {})
    split, cat = _holds(_SPLIT_ROWS, op, p), _holds(_CAT_ROWS, op, p)
    # two_shot scatters the rows over the ranks (its reduce-scatter half): they count in units of W, padded at the end
    whole_units = split or p.get("algorithm") == "two_shot"
    return Layout(world_size if whole_units else 1, split, cat, world_size)


def bucket_sizes(max_units: int) -> tuple[int, ...]:
    """The buckets (in units) that serve 1..max_units: the powers of two below max_units, then max_units."""
    if isinstance(max_units, bool) or not isinstance(max_units, int) or max_units < 1:
        raise OpError(f"max_rows must give at least one row (unit) per call, got {max_units!r}")
    sizes, b = [], 1
    while b < max_units:
        sizes.append(b)
        b *= 2
    sizes.append(max_units)
    return tuple(sizes)


def bucket_for(units: int, max_units: int) -> int:
    """The smallest bucket of ``bucket_sizes(max_units)`` that holds ``units``."""
    if units < 1 or units > max_units:
        raise OpError(f"{units} unit(s) of rows is outside the 1..{max_units} that max_rows allows")
    b = 1 << (units - 1).bit_length()
    return min(b, max_units)


def _max_units(op: str, lay: Layout, max_rows: int) -> int:
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise OpError(f"{op}: max_rows must be a positive int, got {max_rows!r}")
    if max_rows < lay.unit:
        raise OpError(f"{op}: max_rows={max_rows} is under the {lay.unit} rows of one call (the rows split over "
                      f"{lay.unit} ranks)")
    return max_rows // lay.unit


def bucket_rows(op: str, rows: int, world_size: int, max_rows: int, params: Mapping[str, Any] | None = None) -> int:
    """The rows of the program that serves a call of ``rows`` rows (dim 0 of the first argument)."""
    lay = layout(op, world_size, params)
    max_units = _max_units(op, lay, max_rows)
    if rows > max_rows:
        raise OpError(f"{op}: {rows} rows exceed max_rows={max_rows}; raise max_rows (it costs one more program "
                      "per power of two)")
    if rows % lay.unit:
        raise OpError(f"{op}: the {rows} rows do not split over {lay.unit} ranks; use a row count divisible by "
                      f"{lay.unit}")
    return lay.unit * bucket_for(rows // lay.unit, max_units)


def bucket_signature(sig: Signature, max_rows: int) -> Signature:
    """The signature of the program that serves ``sig``'s rows (``sig`` at its bucket's rows)."""
    rows = bucket_rows(sig.op, sig.shapes[0][0], sig.world_size, max_rows, sig.param)
    if rows == sig.shapes[0][0]:
        return sig
    return dataclasses.replace(sig, shapes=((rows, *sig.shapes[0][1:]), *sig.shapes[1:]))


def signatures(op: str, shapes: Sequence[Sequence[int]], dtype: str, world_size: int, virtual: bool,
               target: Any = "cuda:90", *, max_rows: int, passes: Mapping[str, Mapping[str, Any]] | None = None,
               **params: Any) -> list[Signature]:
    """Every bucket program of ``op`` for calls of 1..max_rows rows: ``shapes`` give the other dims (dim 0 of the
    first shape is ignored)."""
    lay = layout(op, world_size, _normal_params(op, len(shapes[0]), params))
    return [ops.signature_for(op, _at_rows(shapes, lay.unit * b), dtype, world_size, virtual, target,
                              passes=passes, **params)
            for b in bucket_sizes(_max_units(op, lay, max_rows))]


def _normal_params(op: str, ndim: int, params: Mapping[str, Any]) -> dict[str, Any]:
    """The op's parameters with defaults and its dims in range (as ops.Signature normalises them)."""
    p = {**ops.PARAMS[op], **params}
    for name in ("dim", "split_dim", "concat_dim"):
        if name in p and isinstance(p[name], int) and -ndim <= p[name] < ndim:
            p[name] %= ndim
    return p


def _at_rows(shapes: Sequence[Sequence[int]], rows: int) -> list[tuple[int, ...]]:
    return [(rows, *shapes[0][1:]), *[tuple(s) for s in shapes[1:]]]


def prebuild(sigs: Iterable[Signature], directory=None, *, library: "ops.Library | None" = None,
             progress: bool = True) -> list[Any]:
    """Compile every signature ahead, with a progress bar (tqdm where it is installed, else a line per program on
    stderr; ``progress=False``: silent). ``directory``: build artifacts there (``ops.build_one``: what a GPU box
    without the compiler loads); else each is loaded into ``library`` (default ``ops.default_library()``), compiled
    into the compile cache if it is not there. Returns the artifact paths (directory) or the Executables."""
    sigs = list(dict.fromkeys(sigs))
    bar = _progress(len(sigs)) if progress else None
    out = []
    try:
        for sig in sigs:
            if bar is not None:
                bar.set_description(f"{sig.op} {'x'.join(map(str, sig.shapes[0]))}")
            if directory is not None:
                out.append(ops.build_one(sig, directory))
            else:
                out.append((library or ops.default_library()).executable(sig))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return out


class _Lines:
    """A progress bar without tqdm: one line per program on stderr."""

    def __init__(self, total: int):
        self.total, self.done, self.what = total, 0, ""

    def set_description(self, what: str) -> None:
        self.what = what

    def update(self, n: int) -> None:
        self.done += n
        print(f"ditron prebuild [{self.done}/{self.total}] {self.what}", file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


def _progress(total: int):
    try:
        from tqdm import tqdm
    except ImportError:
        return _Lines(total)
    return tqdm(total=total, unit="program", desc="ditron prebuild")


# --------------------------------------------------------------------------------------------- padding

def pad_into(x, staging, lay: Layout) -> None:
    """Write ``x`` (M rows) into ``staging`` (P rows) at the rows the bucket program reads as x's (numpy arrays or
    torch tensors)."""
    rows, prows = x.shape[0], staging.shape[0]
    if lay.split_in:
        W = lay.world_size
        staging.reshape(W, prows // W, *staging.shape[1:])[:, :rows // W] = x.reshape(W, rows // W, *x.shape[1:])
    else:
        staging[:rows] = x


def real_rows(y, rows_out: int, lay: Layout):
    """The real rows (``rows_out`` of them) of a bucket program's output ``y``: a view of its first rows, or the
    first rows of each of its W blocks (a copy)."""
    if not lay.cat_out:
        return y[:rows_out]
    W = lay.world_size
    blocks = y.reshape(W, y.shape[0] // W, *y.shape[1:])[:, :rows_out // W]
    return blocks.reshape(rows_out, *y.shape[1:])


def pad(x, prows: int, lay: Layout, fill=None):
    """``x`` padded to ``prows`` rows as pad_into lays it out, in a new array (numpy) or tensor (torch); the
    padding rows hold ``fill`` (an array of ``prows`` rows, e.g. an earlier call's) or zeros. For tests and the
    simulator."""
    if fill is not None:
        out = fill.copy() if hasattr(fill, "copy") and not hasattr(fill, "clone") else fill.clone()
    elif hasattr(x, "new_zeros"):
        out = x.new_zeros((prows, *x.shape[1:]))
    else:
        import numpy as np
        out = np.zeros((prows, *x.shape[1:]), dtype=x.dtype)
    pad_into(x, out, lay)
    return out


# ------------------------------------------------------------------------------------------------ calls

# library -> {(padded shape, dtype, device, id(world), rank): staging tensor}: one staging tensor per padded shape,
# shared by every op whose bucket program takes that first argument. Calls enqueued on one stream run in order, a
# CUDA graph's replays too (its capture stream forks from the caller's and joins it back); calls on two streams at
# once would race here as they do on an op's own symmetric heap. A library's staging goes with it.
_STAGING: "weakref.WeakKeyDictionary[Any, dict[tuple, Any]]" = weakref.WeakKeyDictionary()
_PLANS: "weakref.WeakKeyDictionary[Any, dict[tuple, tuple]]" = weakref.WeakKeyDictionary()  # call key -> plan
_WORLDS: dict[int, Any] = {}   # id(world) -> world, so that a reused id cannot alias another world's staging


class StagingMissingError(CaptureNotPreparedError):
    """A bucketed call inside a CUDA-graph capture whose staging tensor was never made (nothing may be allocated
    inside a capture): the capture was not prepared by an eager call of the bucket."""


def _register(world) -> None:
    """Remember ``world`` under its id, forgetting the staging and plans of an earlier world of the same id."""
    if _WORLDS.get(id(world)) is world:
        return
    for held, at in ((_STAGING, -2), (_PLANS, 1)):
        for entries in held.values():
            for key in [k for k in entries if k[at] == id(world)]:
                del entries[key]
    _WORLDS[id(world)] = world


def staging(library, shape: Sequence[int], world, rank: int, like, *, make: bool = True):
    """The staging tensor of ``shape`` for ``rank`` of ``world`` (zeros when first made;
    ``like``: a tensor of the call, for the device and dtype). With ``make`` False (inside a CUDA-graph capture,
    where nothing may be allocated) a missing one is a StagingMissingError."""
    _register(world)
    held = _STAGING.setdefault(library, {})
    key = (tuple(shape), like.dtype, like.device, id(world), rank)
    t = held.get(key)
    if t is None:
        if not make:
            raise StagingMissingError(
                f"a call of {like.shape[0]} rows runs the bucket program of {shape[0]} rows, whose staging tensor "
                f"({'x'.join(map(str, shape))} {like.dtype}) does not exist yet, and a CUDA-graph capture cannot "
                f"allocate it: run the step once eagerly, before the capture, with a row count of this bucket "
                f"({shape[0] // 2 + 1}..{shape[0]} rows for a power of two)")
        t = held[key] = like.new_zeros(tuple(shape))
    return t


def release_staging(library=None) -> None:
    """Free the staging tensors of ``library`` (default: of every library), after the calls and CUDA graphs that
    use them are done; later calls make them again."""
    if library is None:
        _STAGING.clear()
    else:
        _STAGING.pop(library, None)


def operator_staging(op: str, tensors: Sequence[Any], world, library, params: Mapping[str, Any], max_rows: int,
                     *, make: bool = True):
    """For a torch operator's call (this rank's tensors, ``params`` normalised): (the tensors its bucket program
    takes: the first one staged, the others as they are; a function from the program's output to the call's, or
    None where the rows are a bucket's and nothing was staged)."""
    lib = library or ops.default_library()
    W = world.world_size
    x = tensors[0]
    rows = x.shape[0]
    prows = bucket_rows(op, rows, W, max_rows, params)
    if prows == rows:
        return tuple(tensors), None
    lay = layout(op, W, params)
    rank = 0 if world.is_virtual else world.rank
    st = staging(lib, (prows, *x.shape[1:]), world, rank, x, make=make)
    pad_into(x, st, lay)
    rows_out = ops.output_shape(op, [tuple(t.shape) for t in tensors], W, params)[0]
    return (st, *tensors[1:]), lambda y: real_rows(y, rows_out, lay)


def padded_call(op: str, tensors: Sequence[Any], world, params: dict[str, Any], *, max_rows: int, out=None,
                sync: bool = True, library=None, passes=None, graph: bool = False):
    """``ops.<op>`` for any rows in 1..max_rows, through the bucket programs (module doc). Arguments as ops'."""
    import torch
    lib = library or ops.default_library()
    if not isinstance(lib, ops.Library):
        raise OpError(f"{op}: library= takes an ops.Library (e.g. ops.Library(directory)), got "
                      f"{type(library).__name__}")
    per = ops._per_rank(op, tensors, world)
    ops._check_out(op, out, world)
    first = per[0]
    _register(world)
    held = _PLANS.setdefault(lib, {})
    key = (op, id(world), tuple((tuple(t.shape), t.dtype) for t in first), tuple(params.items()),
           ops._pass_triples(passes), max_rows)
    plan = held.get(key)
    if plan is None:  # the call's own signature checks it as ops would (shapes, rows over the ranks, parameters)
        sig = Signature(op, tuple(tuple(t.shape) for t in first), ops._dtype_name(first[0]), world.world_size,
                        world.is_virtual, lib.target or "cuda:90", tuple(params.items()), ops._pass_triples(passes))
        plan = held[key] = (sig, bucket_signature(sig, max_rows), layout(op, world.world_size, sig.param))
    sig, padded, lay = plan
    if padded is sig:
        return ops._call(op, tensors, world, params, out, sync, lib, passes, graph)
    stage = [staging(lib, padded.shapes[0], world, r, row[0]) for r, row in enumerate(per)]
    for x, s in zip((row[0] for row in per), stage):
        pad_into(x, s, lay)
    if world.is_virtual:
        args = [stage, *[[row[i] for row in per] for i in range(1, len(first))]]
    else:
        args = [stage[0], *first[1:]]
    result = ops._call(op, args, world, params, None, sync, lib, passes, graph)
    rows_out = sig.output_shape()[0]
    ys = result if world.is_virtual else [result]
    real = [real_rows(y, rows_out, lay) for y in ys]
    if graph:  # a graph-mode result is reused by the next call with the same (staging) tensors
        real = [y.clone() for y in real]
    if out is not None:
        outs = list(out) if world.is_virtual else [out]
        with torch.no_grad():
            for o, y in zip(outs, real):
                o.copy_(y)
        real = outs
    return real if world.is_virtual else real[0]


def _op_function(op: str, names: Sequence[str]):
    def call(*args, max_rows: int, out=None, sync: bool = True, library=None, passes=None, graph: bool = False,
             **params):
        arity = ops.ARITY[op]
        if len(args) < arity + 1:
            raise OpError(f"{op} takes {arity} tensor argument(s) and the world")
        tensors, world, rest = args[:arity], args[arity], args[arity + 1:]
        if len(rest) > len(names):
            raise OpError(f"{op}: too many positional arguments")
        p = {**ops.PARAMS[op], **dict(zip(names, rest)), **params}
        return padded_call(op, tensors, world, p, max_rows=max_rows, out=out, sync=sync, library=library,
                           passes=passes, graph=graph)
    call.__name__ = call.__qualname__ = op
    call.__doc__ = (f"ditron.ops.{op} for any row count in 1..max_rows, through its bucket programs (module "
                    f"doc); the other arguments are ops.{op}'s.")
    return call


ag_gemm = _op_function("ag_gemm", ())
gemm_rs = _op_function("gemm_rs", ())
gemm_ar = _op_function("gemm_ar", ())
all_gather = _op_function("all_gather", ("dim",))
reduce_scatter = _op_function("reduce_scatter", ("dim",))
all_reduce = _op_function("all_reduce", ("algorithm",))
all_to_all = _op_function("all_to_all", ("split_dim", "concat_dim"))


# ------------------------------------------------------------------------------------------------ cost

def padding_overhead(sig: Signature, max_rows: int) -> float:
    """The cost model's estimate of the extra GEMM time of serving ``sig`` (a GEMM op) by its bucket program: the
    best configuration's time at the bucket's rows over its time at the call's own, minus 1 (0.0 when the call's
    rows are a bucket's). The communication's extra is in proportion to the rows, P / M - 1."""
    from .cost_model import best_gemm_config, peaks_for
    if sig.op not in ("ag_gemm", "gemm_rs", "gemm_ar"):
        raise OpError(f"padding_overhead estimates the GEMM ops (ag_gemm, gemm_rs, gemm_ar), not {sig.op}")
    padded = bucket_signature(sig, max_rows)
    peaks = peaks_for(sig.target)
    W = sig.world_size

    def t(s: Signature) -> float:
        (m, k), (_, n) = s.shapes
        rows = W * m if s.op == "ag_gemm" else m
        return best_gemm_config(rows, n, k, peaks)[1]
    return t(padded) / t(sig) - 1.0


__all__ = ["Layout", "ag_gemm", "all_gather", "all_reduce", "all_to_all", "bucket_for", "bucket_rows",
           "bucket_signature", "bucket_sizes", "gemm_ar", "gemm_rs", "layout", "pad", "pad_into", "padded_call",
           "operator_staging", "padding_overhead", "prebuild", "real_rows", "reduce_scatter", "release_staging", "signatures",
           "staging", "StagingMissingError"]
