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

The same ops as torch operators (``torch.ops.ditron.*``, for torch.compile and the caller's CUDA graphs):
ditron.torch_ops.

This module does not define any ``from __future__ import annotations``: the frontend reads the parameter
annotations of the programs below, which name local variables.
"""
import dataclasses
import errno
import functools
import hashlib
import json
import os
import re
import shutil
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from . import env, fastcall
from .errors import DitronError, DitronRuntimeError
from .op_reference import reference
from .runtime.graphs import GRAPH_CACHE, tensor_key, tensors_key as _tensors_key

OPS = ("ag_gemm", "gemm_rs", "gemm_ar", "all_gather", "reduce_scatter", "all_reduce", "all_to_all")
ALGORITHMS = ("auto", "one_shot", "two_shot", "push")
GEMM_AR_ALGORITHMS = ALGORITHMS + ("push_sum",)  # push_sum: the sum in the GEMM's epilogue (one launch)
# the parameters each op takes, with their defaults
PARAMS: dict[str, dict[str, Any]] = {
    "ag_gemm": {}, "gemm_rs": {}, "gemm_ar": {"algorithm": "auto"}, "all_gather": {"dim": 0},
    "reduce_scatter": {"dim": 0}, "all_reduce": {"algorithm": "auto"}, "all_to_all": {"split_dim": 0, "concat_dim": 0},
}
ARITY = {"ag_gemm": 2, "gemm_rs": 2, "gemm_ar": 2, "all_gather": 1, "reduce_scatter": 1, "all_reduce": 1,
         "all_to_all": 1}
DTYPES = ("bf16", "f16", "f32")
TORCH_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
AXIS = "tp"
OP_FILE = "op.json"
FORMAT_VERSION = 1          # of op.json and of the key: bump when what a key means changes
TMP_PREFIX = ".tmp-"
BOUND_CALLS = 4 * GRAPH_CACHE  # graph-mode calls a Library remembers by their tensors


class OpError(DitronError):
    """An op called with arguments that do not fit it (shapes, dtype, world, parameters)."""


class ArtifactMissingError(DitronRuntimeError):
    """No prebuilt artifact for an op signature, and no compiler here to build it."""


# ---------------------------------------------------------------------------------------------- signatures

def _target_name(target: Any) -> str:
    from .backends.target import Target  # plain data: no MLIR, no Triton
    return str(Target.parse(target))


@dataclass(frozen=True)
class Signature:
    """Everything that decides an op's compiled program. ``shapes``: each rank's input shapes, in argument order;
    ``params``: the op's parameters (all of them, defaults filled in); ``passes``: pass option overrides
    ``(pass, option, value)``, e.g. ``("ditron-tile", "num-chunks", "4")``."""

    op: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    world_size: int
    virtual: bool
    target: str = "cuda:90"
    params: tuple[tuple[str, Any], ...] = ()
    passes: tuple[tuple[str, str, str], ...] = ()

    def __post_init__(self):
        if self.op not in OPS:
            raise OpError(f"unknown op '{self.op}'; ditron.ops has {', '.join(OPS)}")
        shapes = tuple(tuple(int(s) for s in shape) for shape in self.shapes)
        object.__setattr__(self, "shapes", shapes)
        object.__setattr__(self, "target", _target_name(self.target))
        params = dict(PARAMS[self.op])
        for k, v in dict(self.params).items():
            if k not in params:
                raise OpError(f"{self.op}: unknown parameter '{k}' (parameters: {', '.join(params) or 'none'})")
            params[k] = v
        object.__setattr__(self, "params", tuple(sorted(params.items())))
        object.__setattr__(self, "passes", tuple(sorted((str(p), str(o), str(v)) for p, o, v in self.passes)))
        if self.dtype not in DTYPES:
            raise OpError(f"{self.op}: element type '{self.dtype}' is not supported; use one of {', '.join(DTYPES)}")
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise OpError(f"{self.op}: world size must be a positive int, got {self.world_size!r}")
        self._check_shapes()

    @property
    def param(self) -> dict[str, Any]:
        return dict(self.params)

    def _check_shapes(self) -> None:
        op, W, shapes = self.op, self.world_size, self.shapes
        if len(shapes) != ARITY[op]:
            raise OpError(f"{op} takes {ARITY[op]} tensor(s), got {len(shapes)}")
        if any(not s or min(s) < 1 for s in shapes):
            raise OpError(f"{op}: every dim must be >= 1, got shapes {list(shapes)}")
        p = self.param
        if op in ("ag_gemm", "gemm_rs", "gemm_ar"):
            (a, b) = shapes
            if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
                raise OpError(f"{op}: needs a [M, K] and b [K, N] with the same K, got {list(a)} and {list(b)}")
            if op == "gemm_rs" and a[0] % W:
                raise OpError(f"gemm_rs: the {a[0]} rows of a @ b do not split over {W} ranks; use M divisible by "
                              f"{W} (or gemm_ar)")
        else:
            (x,) = shapes
            for name in ("dim", "split_dim", "concat_dim"):
                if name not in p:
                    continue
                d = p[name]
                if isinstance(d, bool) or not isinstance(d, int) or not -len(x) <= d < len(x):
                    raise OpError(f"{op}: {name} {d!r} is out of range for a tensor of shape {list(x)}")
                p[name] = d % len(x)
            object.__setattr__(self, "params", tuple(sorted(p.items())))
            split = p.get("dim") if op == "reduce_scatter" else p.get("split_dim")
            if split is not None and x[split] % W:
                what = "dim" if op == "reduce_scatter" else "split_dim"
                raise OpError(f"{op}: {what} {split} of {list(x)} (size {x[split]}) does not split over {W} ranks")
        if "algorithm" in p:
            allowed = GEMM_AR_ALGORITHMS if op == "gemm_ar" else ALGORITHMS
            if p["algorithm"] not in allowed:
                raise OpError(f"{op}: algorithm must be one of {', '.join(allowed)}, got {p['algorithm']!r}")
            rows = shapes[0][0]
            if p["algorithm"] == "two_shot" and rows % W:
                raise OpError(f"{op}: algorithm='two_shot' scatters the {rows} rows over the {W} ranks, which "
                              "does not divide them; use 'one_shot' or 'auto'")

    def output_shape(self) -> tuple[int, ...]:
        """Each rank's output shape."""
        return output_shape(self.op, self.shapes, self.world_size, self.param)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "shapes": [list(s) for s in self.shapes], "dtype": self.dtype,
                "world_size": self.world_size, "virtual": self.virtual, "target": self.target,
                "params": dict(self.params), "passes": [list(p) for p in self.passes]}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> "Signature":
        return Signature(data["op"], tuple(tuple(s) for s in data["shapes"]), data["dtype"], data["world_size"],
                         data["virtual"], data["target"], tuple(data["params"].items()),
                         tuple(tuple(p) for p in data["passes"]))

    @property
    def key(self) -> str:
        """The artifact's directory name: readable, and unique through a hash of the whole signature."""
        digest = hashlib.sha256(json.dumps([FORMAT_VERSION, self.to_json()], sort_keys=True).encode()).hexdigest()
        shapes = "_".join("x".join(str(d) for d in s) for s in self.shapes)
        world = f"w{self.world_size}{'v' if self.virtual else 'r'}"
        return f"{self.op}-{self.dtype}-{world}-{shapes}-{self.target.replace(':', '')}-{digest[:12]}"

    def cta_budget(self) -> int | None:
        """SMs one rank may keep busy (ditron-tile's num-sms), where the world limits it: a virtual world of W > 1
        ranks shares one GPU, and every rank's spinning kernels must be resident at once."""
        if not self.virtual or self.world_size == 1:
            return None
        from .cost_model import peaks_for
        from .runtime.world import World
        return World(self.world_size, None, None).cta_budget(peaks_for(self.target).num_sms)

    def pass_options(self) -> dict[str, dict[str, str]]:
        """Options for the passes of ditron-device: the caller's overrides, the algorithm asked for, the budget."""
        out: dict[str, dict[str, str]] = {}
        for name, option, value in self.passes:
            out.setdefault(name, {})[option] = value
        tile = out.setdefault("ditron-tile", {})
        algorithm = self.param.get("algorithm", "auto")
        if algorithm != "auto":
            if tile.get("all-reduce", algorithm) != algorithm:
                raise OpError(f"{self.op}: algorithm='{algorithm}' contradicts the override ditron-tile "
                              f"all-reduce={tile['all-reduce']}")
            tile["all-reduce"] = algorithm
        budget = self.cta_budget()
        if budget is not None:
            given = int(tile.get("num-sms", budget))
            if given > budget:
                raise OpError(f"{self.op}: ditron-tile num-sms={given} exceeds the {budget} SMs each rank of a "
                              f"virtual world of {self.world_size} may use (spinning kernels would deadlock)")
            tile["num-sms"] = str(given)
        return {k: v for k, v in out.items() if v}


def output_shape(op: str, shapes: Sequence[Sequence[Any]], world_size: int, params: Mapping[str, Any]) -> tuple:
    """Each rank's output shape of ``op`` from each rank's input shapes (``params``: its parameters, dims already
    in range). Plain arithmetic on the dims, so that torch's symbolic sizes go through it too (ditron.torch_ops'
    fake implementations)."""
    W = world_size
    if op == "ag_gemm":
        return (W * shapes[0][0], shapes[1][1])
    if op == "gemm_rs":
        return (shapes[0][0] // W, shapes[1][1])
    if op == "gemm_ar":
        return (shapes[0][0], shapes[1][1])
    x = list(shapes[0])
    if op == "all_gather":
        x[params["dim"]] *= W
    elif op == "reduce_scatter":
        x[params["dim"]] //= W
    elif op == "all_to_all":
        x[params["split_dim"]] //= W
        x[params["concat_dim"]] *= W
    return tuple(x)


def signature_for(op: str, shapes: Sequence[Sequence[int]], dtype: str, world_size: int, virtual: bool,
                  target: Any = "cuda:90", passes: Mapping[str, Mapping[str, Any]] | None = None,
                  **params: Any) -> Signature:
    """A Signature from keyword parameters and a ``{pass: {option: value}}`` override mapping."""
    return Signature(op, tuple(tuple(s) for s in shapes), dtype, world_size, virtual, target,
                     tuple(params.items()), _pass_triples(passes))


def _pass_triples(passes: Mapping[str, Mapping[str, Any]] | None) -> tuple[tuple[str, str, str], ...]:
    if not passes:
        return ()
    if not isinstance(passes, Mapping) or not all(isinstance(v, Mapping) for v in passes.values()):
        raise OpError("passes= takes {pass name: {option: value}}, e.g. {'ditron-tile': {'num-chunks': 4}}")
    out = []
    for name, options in passes.items():
        if not options:
            raise OpError(f"passes= gives pass '{name}' no option; drop it or give {{option: value}}")
        for option, value in options.items():
            value = str(value).lower() if isinstance(value, bool) else str(value)
            option = str(option).replace("_", "-")
            if not _OPTION_TEXT.fullmatch(value) or not _OPTION_TEXT.fullmatch(option):
                raise OpError(f"passes= {name}: {option}={value!r}: option names and values are plain words "
                              "(letters, digits, '_', '-', '.', ':')")
            out.append((str(name), option, value))
    return tuple(out)


_OPTION_TEXT = re.compile(r"[A-Za-z0-9_.:-]+", re.ASCII)


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
    dtypes = {_dtype_name(t) for t in first}
    if len(dtypes) > 1:
        raise OpError(f"{op}: the arguments have different element types ({', '.join(sorted(dtypes))})")
    return ranks


def _call(op: str, tensors: Sequence[Any], world, params: dict[str, Any], out, sync: bool, library, passes,
          graph: bool = False):
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
    # The executable of a call like an earlier one, without building its Signature again (a graph replay costs a
    # few microseconds; the full checks cost tens): keyed on the op, the world, rank 0's shapes and dtypes, the
    # parameters and overrides. The executor checks every rank's tensors against the program either way.
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
    ``graph="copy"``: the first argument copied into inputs captured once per shapes, then a replay (fresh tensors).
"""


def ag_gemm(a, b, world, *, out=None, sync: bool = True, library: Library | None = None, passes=None,
            graph: bool = False):
    """All-gather + GEMM: a [m, K] (this rank's rows of x), b [K, n] (its columns of W) -> [W*m, n] =
    concat_ranks(a) @ b, the gather overlapped with the GEMM."""
    return _call("ag_gemm", (a, b), world, {}, out, sync, library, passes, graph)


def gemm_rs(a, b, world, *, out=None, sync: bool = True, library: Library | None = None, passes=None,
            graph: bool = False):
    """GEMM + reduce-scatter: a [M, k], b [k, N] (K sharded) -> [M/W, N]: this rank's rows of sum_ranks(a @ b)."""
    return _call("gemm_rs", (a, b), world, {}, out, sync, library, passes, graph)


def gemm_ar(a, b, world, *, algorithm: str = "auto", out=None, sync: bool = True, library: Library | None = None,
            passes=None, graph: bool = False):
    """GEMM + all-reduce: a [M, k], b [k, N] (K sharded) -> [M, N] = sum_ranks(a @ b). ``algorithm``: auto (the
    cost model picks), one_shot, two_shot, push (one-shot by SM stores into the peers' inboxes) or push_sum (the same
    push, summed in the GEMM's epilogue: one launch, for a GEMM whose tiles all fit on the GPU at once)."""
    return _call("gemm_ar", (a, b), world, {"algorithm": algorithm}, out, sync, library, passes, graph)


def all_gather(x, world, dim: int = 0, *, out=None, sync: bool = True, library: Library | None = None,
               passes=None, graph: bool = False):
    """Concatenate every rank's x along dim."""
    return _call("all_gather", (x,), world, {"dim": dim}, out, sync, library, passes, graph)


def reduce_scatter(x, world, dim: int = 0, *, out=None, sync: bool = True, library: Library | None = None,
                   passes=None, graph: bool = False):
    """Sum x over the ranks; rank r keeps part r of W along dim."""
    return _call("reduce_scatter", (x,), world, {"dim": dim}, out, sync, library, passes, graph)


def all_to_all(x, world, split_dim: int = 0, concat_dim: int = 0, *, out=None, sync: bool = True,
               library: Library | None = None, passes=None, graph: bool = False):
    """Split x along split_dim into W equal parts; part r goes to rank r, which concatenates the parts it receives
    (rank 0's first) along concat_dim. split_dim == concat_dim (the default, 0) is MoE's token exchange; split_dim
    != concat_dim reshards (e.g. rows sharded -> columns sharded: split_dim=1, concat_dim=0)."""
    return _call("all_to_all", (x,), world, {"split_dim": split_dim, "concat_dim": concat_dim}, out, sync, library,
                 passes, graph)


def all_reduce(x, world, algorithm: str = "auto", *, out=None, sync: bool = True, library: Library | None = None,
               passes=None, graph: bool = False):
    """Sum x over the ranks; every rank gets the sum. ``algorithm``: auto (the cost model picks), one_shot (every
    rank reduces everything, reading the peers' copies), two_shot (reduce-scatter, then all-gather) or push (every
    rank stores its x into each peer's inbox, then sums its own)."""
    return _call("all_reduce", (x,), world, {"algorithm": algorithm}, out, sync, library, passes, graph)


for _f in (ag_gemm, gemm_rs, gemm_ar, all_gather, reduce_scatter, all_reduce, all_to_all):
    _f.__doc__ = (_f.__doc__ or "") + "\n" + _CALL_DOC
del _f


__all__ = ["ALGORITHMS", "OPS", "ArtifactMissingError", "Library", "OpError", "Signature", "ag_gemm", "all_gather",
           "all_reduce", "all_to_all", "build", "build_one", "choices", "compiler_available", "default_library", "gemm_ar",
           "gemm_rs", "lower", "output_shape", "pipeline", "reduce_scatter", "reference", "signature_for", "task_program"]
