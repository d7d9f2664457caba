"""ditron.ops: distributed ops on torch tensors, each compiled by ditron from a task-level program.

    import ditron
    from ditron import ops
    world = ditron.World.virtual(4)                       # W ranks on one GPU: one tensor per rank, in a list
    ys = ops.ag_gemm([a0, a1, a2, a3], [b0, b1, b2, b3], world)
    world = ditron.World.from_torch()                     # under torchrun: this rank's tensors
    y = ops.ag_gemm(a, b, world)

Ops (W = world size; shapes are each rank's):

* ``ag_gemm(a, b)``: a [m, K] (rows of x), b [K, n] (columns of W)         -> [W*m, n]  = all_gather(a) @ b
* ``gemm_rs(a, b)``: a [M, k], b [k, N] (K sharded)                          -> [M/W, N]  = reduce_scatter(a @ b)
* ``gemm_ar(a, b)``: a [M, k], b [k, N] (K sharded)                          -> [M, N]    = all_reduce(a @ b)
* ``all_gather(x, dim=0)``                                                   -> x's shape with dim * W
* ``reduce_scatter(x, dim=0)``: sum over ranks, each keeps its 1/W of dim    -> x's shape with dim / W
* ``all_reduce(x, algorithm="auto"|"one_shot"|"two_shot"|"push")``          -> x's shape, summed over ranks
* ``all_to_all(x, split_dim=0, concat_dim=0)``: part r of W of x along split_dim goes to rank r, which
  concatenates the parts it receives along concat_dim, in rank order         -> split_dim / W, concat_dim * W
  (``splits=`` sizes computed on the device: ditron.ops_sized, MoE's dispatch and combine)
* ``grouped_gemm(x, w, group_sizes)``: x [T, K] grouped by expert, w [E, K, N], group_sizes [E] run-time data
  (no communication: each rank's own experts)                                -> [T, N]

How. Each op is a task program in the *global view*, written with ``ditron.frontend`` (``task_program``): the
math and the shardings of its arguments and result, nothing else. ``ditron-device`` does the rest — partition
inserts the collective, fuse-overlap pairs it with the GEMM, tile picks chunks, engines, SM split and GEMM tiles
from the cost model, the lowering and scheduling passes emit the device program — and ``ditron.compile`` builds
the kernels and the host program. ops.py passes the pipeline only what the caller asked for (``algorithm``,
``passes=`` overrides) and what the world dictates: in a virtual world of W > 1 ranks every rank's spinning
kernels must be resident at once, so ``ditron-tile`` gets ``num-sms`` = the world's CTA budget per rank.

Artifacts. One artifact directory per op signature (``Signature``: op, each rank's input shapes, dtype, world
size, virtual or real, target, parameters, pass overrides), named ``Signature.key`` inside a library directory
(``Library(directory)``, default ``$DITRON_OPS_DIR``). A call looks its artifact up there; if it is missing and the
MLIR bindings are importable, it is compiled on the spot (into the directory, else into the compile cache).
A GPU box without the compiler runs from artifacts built elsewhere::

    build box:  ops.build([ops.Signature("ag_gemm", ((512, 4096), (4096, 3584)), "bf16", 4, True, "cuda:90")], DIR)
    GPU box:    DITRON_OPS_DIR=DIR python app.py        (or ops.Library(DIR) passed as library=)

Each artifact holds ``op.json`` beside its manifest: the signature and the choices ditron-tile made.

Executables are cached per signature in their Library and each binds one executor per world, on first use, that
later calls reuse (symmetric heap, streams, kernels loaded). ``sync=False`` leaves the call enqueued on the caller's
stream (``Library.synchronize(world)`` waits, with the watchdog); ``Library.close()`` frees every heap (do it before
tearing down torch.distributed).

The same ops as torch operators (``torch.ops.ditron.*``, for torch.compile and CUDA graphs): ditron.torch_ops.
No ``from __future__ import annotations`` here: the frontend reads the programs' annotations (local variables).
"""
import dataclasses
import errno
import functools
import json
import os
import shutil
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable, Sequence

from . import env, fastcall, tune as _tune
from .errors import DitronError, DitronRuntimeError
from .op_reference import reference
from .op_signature import (ALGORITHMS, ARITY, AXIS, DTYPES, FORMAT_VERSION, GEMM_AR_ALGORITHMS, OPS, PARAMS,  # noqa: F401
                           SIZE_ARGS, TORCH_DTYPES, OpError, Signature, _pass_triples, _target_name, output_shape, signature_for)
from .runtime.graphs import GRAPH_CACHE, tensor_key, tensors_key as _tensors_key

OP_FILE = "op.json"
TMP_PREFIX = ".tmp-"
BOUND_CALLS = 4 * GRAPH_CACHE  # graph-mode calls a Library remembers by their tensors


class ArtifactMissingError(DitronRuntimeError):
    """No prebuilt artifact for an op signature, and no compiler here to build it."""


# ------------------------------------------------------------------------------------ programs (need MLIR)

def task_program(sig: Signature):
    """The op as a global-view task program (ditron.frontend): the math and the shardings, nothing else."""
    import ditron.frontend as dt

    W, t = sig.world_size, sig.dtype
    mesh = dt.Mesh(**{AXIS: W})
    rows, cols = dt.shard(0, AXIS), dt.shard(1, AXIS)
    if sig.op == "ag_gemm":
        (m, k), (_, n) = sig.shapes

        @dt.program(mesh)
        def ag_gemm(a: dt.Tensor[(W * m, k), t, rows], b: dt.Tensor[(k, W * n), t, cols]) -> dt.Sharded[cols]:
            return a @ b
        return ag_gemm
    if sig.op in ("gemm_rs", "gemm_ar"):
        (m, k), (_, n) = sig.shapes
        result = rows if sig.op == "gemm_rs" else dt.replicated

        @dt.program(mesh, name=sig.op)
        def gemm_reduce(a: dt.Tensor[(m, W * k), t, cols], b: dt.Tensor[(W * k, n), t, rows]) -> dt.Sharded[result]:
            return a @ b
        return gemm_reduce
    if sig.op == "grouped_gemm":  # the local view: each rank's own rows, groups and weights; no communication
        (x, w, g) = sig.shapes

        @dt.program(mesh, view="local")
        def grouped_gemm(a: dt.Tensor[x, t], b: dt.Tensor[w, t], sizes: dt.Tensor[g, "i32"]):
            return dt.grouped_matmul(a, b, sizes, gated=sig.param["gated"])
        return grouped_gemm
    shape, dim = sig.shapes[0], sig.param.get("dim", 0)
    if sig.op == "all_gather":
        whole = tuple(s * W if d == dim else s for d, s in enumerate(shape))

        @dt.program(mesh)
        def all_gather(x: dt.Tensor[whole, t, dt.shard(dim, AXIS)]) -> dt.Sharded[dt.replicated]:
            return x
        return all_gather
    if sig.op == "all_to_all":  # the local view: split_dim == concat_dim is no resharding of a global tensor
        sd, cd = sig.param["split_dim"], sig.param["concat_dim"]
        whole = tuple(s * W if d == cd else s for d, s in enumerate(shape))

        @dt.program(mesh, view="local")
        def all_to_all(x: dt.Tensor[whole, t, dt.shard(cd, AXIS)]) -> dt.Sharded[dt.shard(sd, AXIS)]:
            return dt.all_to_all(x, split_dim=sd, concat_dim=cd, axis=AXIS)
        return all_to_all
    # reduce_scatter / all_reduce: each rank holds a whole partial sum
    result = dt.shard(dim, AXIS) if sig.op == "reduce_scatter" else dt.replicated

    @dt.program(mesh, name=sig.op)
    def reduce(x: dt.Tensor[shape, t, dt.partial(AXIS)]) -> dt.Sharded[result]:
        return x
    return reduce


def pipeline(sig: Signature) -> str:
    """ditron-device (ditron-default up to the device program, whose kernel records ``lower`` shows; ditron.compile
    emits the host program), with the signature's pass options attached to their passes."""
    from .passes.registry import PIPELINES
    from .api import DEVICE_PIPELINE
    names = PIPELINES[DEVICE_PIPELINE]
    options = sig.pass_options()
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise OpError(f"{sig.op}: passes= names {', '.join(unknown)}, which are not in {DEVICE_PIPELINE} "
                      f"({', '.join(names)})")
    return ",".join(name + ("{" + " ".join(f"{k}={v}" for k, v in sorted(options[name].items())) + "}"
                            if name in options else "") for name in names)


def lower(sig: Signature) -> tuple[str, list[dict[str, Any]]]:
    """Run the op's task program through ``pipeline(sig)``: (the core-level module with its device program, as
    text with locations; the tilings ditron-tile chose, one per tiled op)."""
    import gc

    from .dialects import ditron_context

    with ditron_context() as ctx:
        module, choices = lowered_module(sig, ctx)
        try:
            text = module.operation.get_asm(enable_debug_info=True)
        finally:
            del module
            gc.collect()
    return text, choices


def lowered_module(sig: Signature, ctx: Any) -> tuple[Any, list[dict[str, Any]]]:
    """``lower``'s module itself, built in the ditron context ``ctx`` (the caller drops it before the context)."""
    from .dialects.opbase import walk_ops
    from .passes.manager import PassManager
    from .passes.tile import TARGET_ATTR, TILING_ATTR, Tiling
    from mlir import ir

    choices: list[dict[str, Any]] = []

    def read_choices(p, module) -> None:
        if p.name == "ditron-tile":
            choices[:] = [{"op": op.name, **{k: v for k, v in vars(Tiling.of(op)).items() if v is not None}}
                          for op in walk_ops(module.operation) if TILING_ATTR in op.attributes]

    manager = PassManager(pipeline(sig), after_each=read_choices)
    module = task_program(sig).build(ctx)
    module.operation.attributes[TARGET_ATTR] = ir.StringAttr.get(sig.target)
    manager.run(module)
    return module, choices


def _compile_signature(sig: Signature, **options: Any) -> tuple[Any, list[dict[str, Any]]]:
    """(the Executable of sig's lowered module, handed to ditron.compile as a module; ditron-tile's choices)."""
    import gc

    from .api import compile_module
    from .dialects import ditron_context

    with ditron_context() as ctx:
        module, choices = lowered_module(sig, ctx)
        try:
            return compile_module(module, target=sig.target, **options), choices
        finally:
            del module
            gc.collect()


def build(signatures: Iterable[Signature], directory: str | os.PathLike, *, force: bool = False,
          keep_stages: bool = False, log=None) -> dict[Signature, Path]:
    """Compile each signature's artifact into ``directory/<key>`` (skipping those already there unless ``force``);
    {signature: path}. Needs the MLIR bindings."""
    out = {}
    for sig in signatures:
        out[sig] = build_one(sig, directory, force=force, keep_stages=keep_stages)
        if log is not None:
            log(f"built {sig.key}")
    return out


def build_one(sig: Signature, directory: str | os.PathLike, *, force: bool = False,
              keep_stages: bool = False) -> Path:
    """Compile one signature into ``directory/<key>``, atomically (a build racing another keeps the first). An
    artifact already there is kept when it was built from the same ditron sources (else it is rebuilt)."""
    root = Path(directory)
    final = root / sig.key
    if not force and _read_op_file(final) == sig:
        if _built_from(final) == _source_hash():
            return final
        force = True
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"{TMP_PREFIX}{sig.key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        choices = _compile_signature(sig, out_dir=tmp, keep_stages=keep_stages)[1]
        (tmp / OP_FILE).write_text(json.dumps({"format_version": FORMAT_VERSION, "signature": sig.to_json(),
                                               "pipeline": pipeline(sig), "choices": choices,
                                               "source_hash": _source_hash()}, indent=1, sort_keys=True) + "\n")
        _publish(tmp, final, replace=force)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _publish(tmp: Path, final: Path, *, replace: bool) -> None:
    if replace and final.exists():
        trash = final.parent / f"{TMP_PREFIX}old-{uuid.uuid4().hex[:8]}"
        os.rename(final, trash)
        shutil.rmtree(trash, ignore_errors=True)
    try:
        os.rename(tmp, final)
    except OSError as err:
        if err.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR):
            raise DitronRuntimeError(f"cannot write the op artifact '{final}': {err.strerror}") from None
        # another build of the same signature won the race: keep its artifact


@functools.cache
def _source_hash() -> str:
    from .cache import ditron_source_hash
    return ditron_source_hash()


def _read_op_file(path: Path) -> Signature | None:
    try:
        data = json.loads((path / OP_FILE).read_text(encoding="utf-8"))
        if data.get("format_version") != FORMAT_VERSION:
            return None
        return Signature.from_json(data["signature"])
    except (OSError, ValueError, KeyError, TypeError, DitronError):
        return None


def _built_from(path: Path) -> str | None:
    try:
        return json.loads((path / OP_FILE).read_text(encoding="utf-8")).get("source_hash")
    except (OSError, ValueError, AttributeError):
        return None


def choices(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The tilings ditron-tile chose for the artifact at ``path`` (from its op.json)."""
    try:
        return json.loads((Path(path) / OP_FILE).read_text(encoding="utf-8"))["choices"]
    except (OSError, ValueError, KeyError) as err:
        raise DitronRuntimeError(f"'{path}' is not an op artifact with an {OP_FILE}: {err}") from None


def compiler_available() -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec("mlir") is not None
    except (ImportError, ValueError):
        return False


# ------------------------------------------------------------------------------------------------ library

class Library:
    """Op artifacts in a directory (default ``$DITRON_OPS_DIR``), loaded once per signature.

    ``compile``: None (default) builds a missing artifact when the MLIR bindings are importable; False never
    builds (a missing artifact raises ArtifactMissingError); True always may (an import error if there is no
    compiler). ``target``: the default target of signatures (else the current GPU's)."""

    def __init__(self, directory: str | os.PathLike | None = None, *, target: Any = None,
                 compile: bool | None = None):  # noqa: A002 - the option's natural name
        self.directory = Path(directory) if directory is not None else env.ops_dir()
        self.target = None if target is None else _target_name(target)
        self.compile = compile
        self._executables: dict[Signature, Any] = {}
        self._fast: dict[tuple, Any] = {}          # ops._call: repeated calls skip building the Signature
        self._fast_worlds: dict[int, Any] = {}     # id(world) -> world, so a reused id cannot alias another
        self._eager: dict[tuple, Any] = {}         # eager calls by fastcall.key -> fastcall.FastCall
        # graph-mode calls by their tensors -> (world, BoundCall): a repeated call is one replay (ops._call)
        self._bound: OrderedDict[tuple, tuple[Any, Any]] = OrderedDict()
        # per op: its last graph-mode call in a real world, repeated at once if called again alike (ops._call; the
        # host path of a small all-reduce is the call's cost)
        self._last: dict[str, Any] = {}
        self._warned_source = False

    def __repr__(self) -> str:
        return f"<ditron.ops.Library {self.directory or '(compile cache)'} target={self.target or 'device'}>"

    def default_target(self) -> str:
        if self.target is None:
            from .runtime.loader import device_target_name
            self.target = _target_name(device_target_name())
        return self.target

    def path(self, sig: Signature) -> Path | None:
        return None if self.directory is None else self.directory / sig.key

    def executable(self, sig: Signature):
        """The loaded Executable of sig: cached, else loaded from the directory, else compiled (see the class doc)."""
        exe = self._executables.get(sig)
        if exe is None:
            exe = self._executables[sig] = self._load(sig)
        return exe

    def _load(self, sig: Signature):
        from .runtime.loader import load_artifact
        path = self.path(sig)
        if path is not None and (path / OP_FILE).exists():
            found = _read_op_file(path)
            if found != sig:
                raise DitronRuntimeError(f"op artifact '{path}' holds {found.key if found else 'an unreadable '}"
                                         f"{OP_FILE}, not {sig.key}; delete it and rebuild")
            self._check_source(path)
            return load_artifact(path)
        can_build = compiler_available() if self.compile is None else self.compile
        if not can_build:
            where = f"in '{self.directory}'" if self.directory is not None else \
                "(no library directory: set $DITRON_OPS_DIR or pass ditron.ops.Library(DIR))"
            raise ArtifactMissingError(
                f"no artifact for {sig.op} {sig.key} {where}, and no compiler here to build it (the MLIR bindings "
                f"are not importable). Build it where ditron's compiler is: ditron.ops.build([signature], DIR) "
                f"with signature = ditron.ops.Signature.from_json({json.dumps(sig.to_json(), sort_keys=True)}), "
                f"then copy DIR here (benchmarks/bench_dist.py --build does this for the benchmark's ops)")
        if self.directory is not None:
            return load_artifact(build_one(sig, self.directory))
        return _compile_signature(sig)[0]

    def _check_source(self, path: Path) -> None:
        if self._warned_source:
            return
        built = _built_from(path)
        if built and built != _source_hash():
            import warnings
            self._warned_source = True
            warnings.warn(f"op artifacts in '{self.directory}' were built from other ditron sources than this "
                          "process runs; rebuild them if the compiler changed", RuntimeWarning, stacklevel=4)

    def _remember(self, hot: tuple, world, bound) -> None:
        self._bound[hot] = (world, bound)
        self._bound.move_to_end(hot)
        while len(self._bound) > BOUND_CALLS:
            self._bound.popitem(last=False)

    def synchronize(self, world) -> None:
        """Wait (with the watchdog) for every call enqueued in ``world`` through this library."""
        for exe in self._executables.values():
            for ex in exe._executors:
                if ex.world is world and not ex._closed:
                    ex.synchronize()

    def release(self, sig: Signature) -> None:
        """Close sig's executors (freeing their symmetric heaps) and forget its executable."""
        exe = self._executables.pop(sig, None)
        if exe is not None:
            self._fast = {k: v for k, v in self._fast.items() if v is not exe}
            fastcall.forget(exe, self)
            for k in [k for k, (_, b) in self._bound.items() if b.runner.ex.exe is exe]:
                del self._bound[k]
            self._last = {k: v for k, v in self._last.items() if v.bound.runner.ex.exe is not exe}
            exe.close()

    def close(self) -> None:
        """Close every executor of every executable (in a real world: collectively, on every rank)."""
        sigs = list(self._executables)
        for sig in sigs:
            self.release(sig)


@functools.lru_cache(maxsize=1)
def default_library() -> Library:
    """The library the ops use when none is passed: ``Library()`` ($DITRON_OPS_DIR, the current GPU's target)."""
    return Library()


# ----------------------------------------------------------------------------------------------------- calls

def _dtype_name(t) -> str:
    name = str(t.dtype).removeprefix("torch.")
    if name not in TORCH_DTYPES:
        raise OpError(f"tensors of {t.dtype} are not supported; use {', '.join(TORCH_DTYPES)}")
    return TORCH_DTYPES[name]


def _check_out(op: str, out, world) -> None:
    """``out=``: a list of one tensor per rank (virtual world), this rank's tensor (real)."""
    import torch
    if out is None:
        return
    if world.is_virtual:
        if isinstance(out, torch.Tensor) or not isinstance(out, (list, tuple)) or len(out) != world.world_size \
                or not all(isinstance(o, torch.Tensor) for o in out):
            raise OpError(f"{op}: in a virtual world of {world.world_size} ranks, out= is a list of one tensor per "
                          f"rank; got {type(out).__name__}")
    elif not isinstance(out, torch.Tensor):
        raise OpError(f"{op}: in a real world, out= is this rank's output tensor; got {type(out).__name__}")


def _per_rank(op: str, tensors: Sequence[Any], world) -> list[list[Any]]:
    """Inputs as [[rank 0's tensors], [rank 1's], ...] (virtual) or [[this rank's tensors]] (real), checked alike."""
    import torch
    if not (hasattr(world, "world_size") and hasattr(world, "is_virtual")):
        raise OpError(f"{op}: world must be a ditron.World (World.virtual(W) or World.from_torch()), got "
                      f"{type(world).__name__}")
    if world.is_virtual:
        per = []
        for i, t in enumerate(tensors):
            if isinstance(t, torch.Tensor) or len(t) != world.world_size:
                got = "a tensor" if isinstance(t, torch.Tensor) else f"{len(t)} item(s)"
                raise OpError(f"{op}: in a virtual world of {world.world_size} ranks, argument {i} is a list of one "
                              f"tensor per rank; got {got}")
            per.append(list(t))
        ranks = [list(r) for r in zip(*per)]
    else:
        if not all(isinstance(t, torch.Tensor) for t in tensors):
            raise OpError(f"{op}: in a real world each argument is this rank's tensor")
        ranks = [list(tensors)]
    first = ranks[0]
    for r, row in enumerate(ranks):
        for i, (t, t0) in enumerate(zip(row, first)):
            if not isinstance(t, torch.Tensor):
                raise OpError(f"{op}: argument {i} of rank {r} is {type(t).__name__}, not a tensor")
            if t.shape != t0.shape or t.dtype != t0.dtype:
                raise OpError(f"{op}: argument {i} of rank {r} is {tuple(t.shape)} {t.dtype}, rank 0's is "
                              f"{tuple(t0.shape)} {t0.dtype}; every rank passes the same shapes")
    sizes = SIZE_ARGS.get(op, ())
    for i in sizes:
        if first[i].dtype != torch.int32:
            raise OpError(f"{op}: argument {i} holds sizes and must be an int32 tensor, got {first[i].dtype}")
    dtypes = {_dtype_name(t) for i, t in enumerate(first) if i not in sizes}
    if len(dtypes) > 1:
        raise OpError(f"{op}: the arguments have different element types ({', '.join(sorted(dtypes))})")
    return ranks


def _call(op: str, tensors: Sequence[Any], world, params: dict[str, Any], out, sync: bool, library, passes,
          graph: bool = False, tune: bool = False):
    if tune:  # the tuning cache's winner on this GPU (tuned first where missing), pinned by gemm-config
        passes = _tune.ops_passes(op, _per_rank(op, tensors, world)[0], world, library or default_library(), passes)
    if library is not None and not isinstance(library, Library):
        raise OpError(f"{op}: library= takes an ops.Library (e.g. ops.Library(directory)), got "
                      f"{type(library).__name__}")
    lib = library or default_library()
    if not graph and passes is None:  # a call like a checked earlier one: its call plan at once (ditron.fastcall)
        if (done := fastcall.call(lib, op, tensors, world, params, out, sync)) is not fastcall.MISS:
            return done
    if graph is True and passes is None and out is not None:  # the op's last call again (real world): replay it
        again = lib._last.get(op)
        if again is not None and again(world, tensors, out, params, sync):
            return out
    if graph is True:  # a call with the same tensors as an earlier one: replay its graph straight away
        try:
            virtual = world.is_virtual
            hot = (op, id(world), tuple(params.items()) if params else (),
                   None if passes is None else _pass_triples(passes), _tensors_key(tensors, virtual),
                   None if out is None else _tensors_key((out,), virtual))
            bound = lib._bound.get(hot)
        except (TypeError, AttributeError, KeyError, DitronError):
            hot, bound = None, None
        if bound is not None and bound[0] is world and bound[1].live:
            result = bound[1](sync)
            if out is not None:  # the caller's tensors (the bound ones may be other objects on the same memory)
                if not virtual and passes is None:
                    lib._last[op] = bound[1].again(world, tensors, out, params)
                return list(out) if virtual else out
            return [r[0] for r in result] if virtual else result[0]
    # A call like an earlier one skips building its Signature (a replay costs microseconds, the checks tens): keyed
    # on the op, world, rank 0's shapes and dtypes, parameters, overrides; the executor checks every rank's tensors.
    try:
        first = [t[0] for t in tensors] if world.is_virtual else list(tensors)
        fast = (op, id(world), tuple((t.shape, t.dtype) for t in first), tuple(params.items()),
                None if passes is None else _pass_triples(passes))
        exe = lib._fast.get(fast)
    except (TypeError, AttributeError, IndexError, KeyError):
        fast, exe = None, None
    if exe is not None and lib._fast_worlds.get(id(world)) is world:
        ranks = [list(r) for r in zip(*tensors)] if world.is_virtual else [list(tensors)]
    else:
        ranks = _per_rank(op, tensors, world)
        first = ranks[0]
        _check_out(op, out, world)
        # the arguments are checked before the device is asked for its target (without a GPU: "no GPU" only for
        # a call that is otherwise right)
        sig = Signature(op, tuple(tuple(t.shape) for t in first), _dtype_name(first[0]), world.world_size,
                        world.is_virtual, lib.target or "cuda:90", tuple(params.items()), _pass_triples(passes))
        if lib.target is None:
            sig = dataclasses.replace(sig, target=lib.default_target())
        exe = lib.executable(sig)
        if fast is not None:
            lib._fast[fast] = exe
            lib._fast_worlds[id(world)] = world
    outputs = None if out is None else ([[o] for o in out] if world.is_virtual else [out])
    inputs = ranks if world.is_virtual else ranks[0]
    if graph == "copy":  # fresh activations copied into one captured set of inputs (runtime/graphs.GraphRunner)
        result = exe.executor(world, graph=True)._graphs.copy_in(inputs, outputs, sync)
    elif graph:
        bound = exe.executor(world, graph=True).bind(inputs, outputs)
        if hot is not None:
            lib._remember(hot, world, bound)
        result = bound(sync)
    else:
        result = exe.run(world, inputs, outputs, sync=sync)
        fastcall.remember(lib, op, tensors, world, params, out, exe) if passes is None else None
    return [r[0] for r in result] if world.is_virtual else result[0]


_CALL_DOC = """
    Virtual world: each tensor argument is a list of one tensor per rank, and so is the result; real world:
    this rank's tensors. ``out``: the output tensor(s) to write (else allocated). ``sync``: wait for completion on
    the host, with the watchdog (False: enqueue on the caller's stream and return). ``library``: where the
    artifacts are (default ``default_library()``). ``passes``: pass option overrides, {pass: {option: value}}.
    ``graph``: replay a CUDA graph per set of tensors (a few microseconds of host time per call; its own executor,
    see ditron.runtime.graphs); without ``out`` the result tensors are reused by the next call with the same inputs.
    ``tune`` (GEMM ops): the tuning cache's config for this GPU (tuned first if missing, ditron_py/tune.py).
    ``graph="copy"``: the first argument copied into inputs captured once per shapes, then a replay (fresh tensors).
"""


def ag_gemm(a, b, world, *, out=None, sync: bool = True, library: Library | None = None, passes=None,
            graph: bool = False, tune: bool = False):
    """All-gather + GEMM: a [m, K] (this rank's rows of x), b [K, n] (its columns of W) -> [W*m, n] =
    concat_ranks(a) @ b, the gather overlapped with the GEMM."""
    return _call("ag_gemm", (a, b), world, {}, out, sync, library, passes, graph, tune)


def gemm_rs(a, b, world, *, out=None, sync: bool = True, library: Library | None = None, passes=None,
            graph: bool = False, tune: bool = False):
    """GEMM + reduce-scatter: a [M, k], b [k, N] (K sharded) -> [M/W, N]: this rank's rows of sum_ranks(a @ b)."""
    return _call("gemm_rs", (a, b), world, {}, out, sync, library, passes, graph, tune)


def gemm_ar(a, b, world, *, algorithm: str = "auto", out=None, sync: bool = True, library: Library | None = None,
            passes=None, graph: bool = False, tune: bool = False):
    """GEMM + all-reduce: a [M, k], b [k, N] (K sharded) -> [M, N] = sum_ranks(a @ b). ``algorithm``: auto (the
    cost model picks), one_shot, two_shot, push (one-shot by SM stores into the peers' inboxes) or push_sum (the same
    push, summed in the GEMM's epilogue: one launch, for a GEMM whose tiles all fit on the GPU at once)."""
    return _call("gemm_ar", (a, b), world, {"algorithm": algorithm}, out, sync, library, passes, graph, tune)


def all_gather(x, world, dim: int = 0, *, out=None, sync: bool = True, library: Library | None = None,
               passes=None, graph: bool = False):
    """Concatenate every rank's x along dim."""
    return _call("all_gather", (x,), world, {"dim": dim}, out, sync, library, passes, graph)


def reduce_scatter(x, world, dim: int = 0, *, out=None, sync: bool = True, library: Library | None = None,
                   passes=None, graph: bool = False):
    """Sum x over the ranks; rank r keeps part r of W along dim."""
    return _call("reduce_scatter", (x,), world, {"dim": dim}, out, sync, library, passes, graph)


def all_to_all(x, world, split_dim: int = 0, concat_dim: int = 0, *, splits=None, capacity: int | None = None,
               out=None, sync: bool = True, library: Library | None = None, passes=None, graph: bool = False):
    """Split x along split_dim into W equal parts; part r goes to rank r, which concatenates the parts it receives
    (rank 0's first) along concat_dim. split_dim == concat_dim (the default, 0) is MoE's token exchange; split_dim
    != concat_dim reshards (e.g. rows sharded -> columns sharded: split_dim=1, concat_dim=0). splits=: ops_sized."""
    if splits is not None or capacity is not None:  # parts of run-time sizes -> (out [capacity, ...], recv_counts)
        from .ops_sized import all_to_all_sized
        return all_to_all_sized(x, splits, world, capacity=capacity, sync=sync, graph=graph, split_dim=split_dim,
                                concat_dim=concat_dim, out=out, library=library, passes=passes)
    return _call("all_to_all", (x,), world, {"split_dim": split_dim, "concat_dim": concat_dim}, out, sync, library,
                 passes, graph)


def all_reduce(x, world, algorithm: str = "auto", *, out=None, sync: bool = True, library: Library | None = None,
               passes=None, graph: bool = False):
    """Sum x over the ranks; every rank gets the sum. ``algorithm``: auto (the cost model picks), one_shot (every
    rank reduces everything, reading the peers' copies), two_shot (reduce-scatter, then all-gather) or push (every
    rank stores its x into each peer's inbox, then sums its own)."""
    return _call("all_reduce", (x,), world, {"algorithm": algorithm}, out, sync, library, passes, graph)


def grouped_gemm(x, w, group_sizes, world, *, gated: str | None = None, out=None, sync: bool = True,
                 library: Library | None = None, passes=None, graph: bool = False):
    """MoE experts, no communication: x [T, K] holds rows grouped by expert (group g: the next group_sizes[g] rows,
    in order), w [E, K, N] the experts' weights -> [T, N], group g's rows times w[g % E] (G = E sizes: one group an
    expert; G = W * E: an expert-parallel rank's received rows, source-major, used as they arrive); rows past the
    groups' sum are zeros. ``gated`` ('silu'): w is [E, K, 2N] (the gate's columns, then the up's) and the result
    [T, N] is silu(x @ gate) * (x @ up), fused in the GEMM. ``group_sizes`` [E] is a device tensor of any int dtype (run-time data: one program serves every routing;
    int64 sizes become int32 on the device, no sync; a negative size counts 0, a sum past T is cut at T)."""
    import torch
    sizes = [group_sizes] if isinstance(group_sizes, torch.Tensor) else group_sizes
    if not isinstance(sizes, (list, tuple)) or not all(isinstance(s, torch.Tensor) for s in sizes):
        raise OpError(f"grouped_gemm: group_sizes is a device tensor [E] (a list of one per rank in a virtual "
                      f"world), got {type(group_sizes).__name__}")
    for s in sizes:
        if s.dtype.is_floating_point or s.dtype.is_complex or s.dtype == torch.bool:
            raise OpError(f"grouped_gemm: group_sizes must hold integers, got {s.dtype}")
    big = torch.iinfo(torch.int32).max
    sizes = [s if s.dtype == torch.int32 else s.clamp(-1, big).to(torch.int32) for s in sizes]
    g = sizes[0] if isinstance(group_sizes, torch.Tensor) else sizes
    return _call("grouped_gemm", (x, w, g), world, {"gated": gated}, out, sync, library, passes, graph)


for _f in (ag_gemm, gemm_rs, gemm_ar, all_gather, reduce_scatter, all_reduce, all_to_all, grouped_gemm):
    _f.__doc__ = (_f.__doc__ or "") + "\n" + _CALL_DOC
del _f


__all__ = ["ALGORITHMS", "OPS", "ArtifactMissingError", "Library", "OpError", "Signature", "ag_gemm", "all_gather",
           "all_reduce", "all_to_all", "build", "build_one", "choices", "compiler_available", "default_library", "gemm_ar",
           "gemm_rs", "grouped_gemm", "lower", "output_shape", "pipeline", "reduce_scatter", "reference", "signature_for", "task_program"]
