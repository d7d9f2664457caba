"""``ditron.compile``: a module in, an executable out (with its artifact directory on disk).

    exe = ditron.compile("kernels.mlir", target="cuda:90", num_warps=8)
    exe.kernels["add"][(grid,)](x, y, out, n)

The input is an ``mlir`` Module (built in a ditron context), MLIR text, a path to a ``.mlir`` file, or a
``ditron.frontend`` Program (task level) or a ``ditron.device`` Program (device level). Steps:

1. read the input as text (the cache key hashes it);
2. on a cache miss, parse it in a fresh ditron context, verify it, and bring it to core level (``_to_core_level``:
   the one place where the task-level pipeline ``ditron-default`` runs, when the module has task- or
   device-level ops);
3. lower the ditron_core primitives and compile every ``tt.func`` (``ditron.compiler.lower_and_compile``);
4. write the artifact (``ditron.artifact``) into the compile cache (``ditron.cache``) or a given directory;
5. load it with the torch + triton loader (``ditron.runtime.loader``), as a deployment would.
"""
from __future__ import annotations

import gc
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterable

from . import __version__, env, schema
from .artifact import MANIFEST, ArgSpec, ArtifactError, options_json, triton_type, write_artifact
from .cache import CompileCache, cache_key, triton_version
from .errors import CompileError, ParseError, PassError, TargetError
from .runtime.loader import Executable, load_artifact

# The named pipeline that takes task- or device-level modules to core level (tt.func kernels + ditron_core + the host
# program); it ends with ditron-emit-host-program. DEVICE_PIPELINE stops before that pass, at the device program
# (what the simulator runs and ditron.ops reads its kernel records from).
TO_CORE_PIPELINE = "ditron-default"
DEVICE_PIPELINE = "ditron-device"
HIGHER_LEVEL_DIALECTS = ("ditron_task", "ditron_device")
# the module's target, which ditron-tile's model reads; the kinds of the arguments ditron-lower-core-to-triton
# appends, as they appear in the ABI (ditron.schema says what each is; the executor binds them)
TARGET_ATTR = schema.TARGET_ATTR


def compile_module(module: Any, target: Any = "cuda:90", **kwargs: Any) -> Executable:
    """``compile`` of a Module of the current ditron context, handed on as a module: each build runs on a copy of
    it (the module itself is left as it is), with no printing and parsing in between -- how ditron.ops hands the
    module its pipeline made to the compile step. Its text (with locations) is still what the cache key hashes.
    Takes compile's keywords."""
    if not hasattr(getattr(module, "operation", None), "clone"):
        raise ParseError(f"compile_module takes an mlir Module, got {type(module).__name__}")
    return _compile(module, target, module, **kwargs)


def compile(src: Any, target: Any = "cuda:90", *, out_dir: str | os.PathLike | None = None,  # noqa: A001
            cache: bool | None = None, keep_stages: bool = True, tune: Any = False, **options: Any) -> Executable:
    """Compile a core-level module for ``target`` and return its Executable.

    ``src``: an ``mlir.ir.Module``, MLIR text, a path to a .mlir file (a PathLike, or a str on one line
    without braces: MLIR text always has some), or a ``ditron.frontend`` Program (task level, like a .mlir file
    of task ops: the default pipeline brings it to core level), or a ``ditron.device`` Program (device level).
    ``options``: backend options (num_warps=8, num_stages=4, ...); unknown names or bad values raise TargetError.
    ``out_dir``: also write the artifact there (replacing an artifact already there). ``cache``: use the compile
    cache (default: yes unless $DITRON_NO_CACHE=1); it lives in $DITRON_CACHE_DIR. ``keep_stages``: keep the stage
    texts (ttir, ttgir, llir, ptx / amdgcn) in the artifact.
    ``tune``: first time on the GPU (ditron_py/tune.py) each GEMM alone of a task program that the tuning cache
    lacks for this GPU, and keep the winners there (True, or a timer: ``fn(case, signature json, artifact dir)`` ->
    seconds); ditron-tile then takes the cached winners, as every compile does when the cache holds them.
    ``exe.compile_info`` says whether the cache answered and how long the call took."""
    return _compile(src, target, None, out_dir=out_dir, cache=cache, keep_stages=keep_stages, tune=tune, **options)


def _compile(src: Any, target: Any, handed: Any, *, out_dir: str | os.PathLike | None = None,
             cache: bool | None = None, keep_stages: bool = True, tune: Any = False, **options: Any) -> Executable:
    """compile; ``handed``: the Module to build from (a copy per build) instead of parsing src's text."""
    from .backends import Target, get_backend

    start = time.perf_counter()
    if out_dir is not None and not isinstance(out_dir, (str, os.PathLike)):
        raise ArtifactError(f"out_dir takes a directory path, got {type(out_dir).__name__}")
    for flag, value in (("cache", cache), ("keep_stages", keep_stages)):
        if value is not None and not isinstance(value, bool):
            raise TargetError(f"{flag} takes True or False, got {value!r}")
    text, source_name = read_input(src)
    tgt = Target.parse(target)
    backend = get_backend(tgt)
    opts = backend.options(**options)
    from . import tune as tuner
    if tune is not False:
        _tune_program(text, source_name, str(tgt), tune)
    # the tuning cache's winners decide the GEMMs' tiles: an entry compiled before the file changed is not served
    key = cache_key(text, str(tgt), options_json(opts), source_name=source_name,
                    extra={"keep_stages": keep_stages, "options_hash": opts.hash(), "tuning": tuner.cache_digest()})

    def build(directory: Path) -> None:
        build_artifact(text, source_name, tgt, opts, directory, cache_key=key, keep_stages=keep_stages,
                       module=None if handed is None else handed.operation.clone())

    use_cache = (not env.cache_disabled()) if cache is None else bool(cache)
    status = "off"
    if use_cache:
        store = CompileCache(env.cache_dir())
        entry = store.lookup(key)
        status = "hit" if entry is not None else "miss"
        if entry is None:
            entry = store.publish(key, build)
        try:
            exe = load_artifact(entry)
        except ArtifactError:  # a damaged entry: compile again
            store.discard(key)
            status = "miss"
            entry = store.publish(key, build)
            exe = load_artifact(entry)
        if out_dir is not None:
            install_dir(out_dir, lambda d: shutil.copytree(entry, d, dirs_exist_ok=True))
            exe = load_artifact(out_dir)
    elif out_dir is not None:
        install_dir(out_dir, build)
        exe = load_artifact(out_dir)
    else:  # no directory to keep: the loaded kernels hold their binaries in memory
        with tempfile.TemporaryDirectory(prefix="ditron-") as tmp:
            build(Path(tmp) / "artifact")
            exe = load_artifact(Path(tmp) / "artifact")
        exe.path = None
    exe.compile_info = {"cache": status, "key": key, "seconds": time.perf_counter() - start}
    return exe


def _tune_program(text: str, source_name: str, target: str, tune: Any) -> None:
    """compile's ``tune``: the program's GEMMs alone tuned where the tuning cache lacks them (warnings name those it
    cannot time in one process)."""
    import warnings

    from . import tune as tuner
    if tune is not True and not callable(tune):
        raise TargetError(f"tune takes True, False or a timer function, got {tune!r}")
    cases, notes = tuner.program_cases(text, source_name, target)
    for note in notes:
        warnings.warn(note, RuntimeWarning, stacklevel=3)
    if cases:
        tuner.tune(cases, timer=None if tune is True else tune, progress=None)


# ------------------------------------------------------------------------------------------------------- input

def read_input(src: Any) -> tuple[str, str]:
    """(MLIR text, source name) of a Module, MLIR text, a .mlir path, or a ``ditron.frontend`` / ``ditron.device``
    Program (traced here, its locations those of the Python source)."""
    if type(src).__name__ == "Program" and type(src).__module__ in ("ditron.frontend", "ditron.device"):
        return src.to_mlir(debuginfo=True), f"<program {src.name}>"
    if isinstance(src, (os.PathLike, str)) and _looks_like_path(src):
        path = os.fspath(src)
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(), path
        except (OSError, UnicodeDecodeError) as err:
            raise ParseError(f"cannot read '{path}': {getattr(err, 'strerror', None) or err}") from None
    if isinstance(src, str):
        return src, "<string>"
    operation = getattr(src, "operation", None)
    if operation is not None and hasattr(operation, "get_asm"):
        return operation.get_asm(enable_debug_info=True), "<module>"
    raise ParseError(f"ditron.compile takes an mlir Module, MLIR text, a .mlir path or a ditron.frontend Program, "
                     f"got {type(src).__name__}")


def _looks_like_path(src: Any) -> bool:
    if isinstance(src, os.PathLike):
        return True
    return "\n" not in src and "{" not in src  # MLIR text of a module always has braces


# ------------------------------------------------------------------------------------------------------- build

def build_artifact(text: str, source_name: str, target: Any, options: Any, directory: Path, *,
                   cache_key: str | None = None, keep_stages: bool = True, module: Any = None) -> None:
    """Parse (or take ``module``, of the current context, which this consumes), verify, bring to core level, lower
    and compile; write the artifact into ``directory``."""
    import contextlib

    from .compiler import lower_and_compile
    from .device import compile_jit_kernels, jit_declarations
    from .dialects import ditron_context, parse_module
    from .dialects.verify import verify

    with (contextlib.nullcontext() if module is not None else ditron_context()):
        module = parse_module(text, source_name) if module is None else module
        try:
            verify(module)
            host_program = _to_core_level(module, target)
            arg_names = kernel_arg_names(module)
            jit = jit_declarations(module)  # user @ditron.jit kernels a ditron.device Program launches
            # a host program of copies alone (e.g. a one-rank all_gather) needs no kernel
            copies_only = host_program is not None and not arg_names
            kernels = [] if copies_only else list(lower_and_compile(module, target, options))
        finally:
            del module
            gc.collect()
    for kernel, params in compile_jit_kernels(jit, target):
        kernels.append(kernel)
        arg_names[kernel.name] = params
    if not kernels and host_program is None:
        raise CompileError(f"{source_name}: no kernel to compile (the module has no tt.func)")
    entries = [(k, kernel_signature(k), kernel_abi(k, arg_names.get(k.name))) for k in kernels]
    write_artifact(directory, target=target, options=options, options_hash=options.hash(), kernels=entries,
                   ditron_version=__version__, triton_version=triton_version(), cache_key=cache_key,
                   host_program=host_program, keep_stages=keep_stages)


def set_module_target(module: Any, target: str, what: str = "compiling for") -> None:
    """The module's ditron.target, which the pipeline tiles for, set to ``target`` where it has none; one that
    names another target is an error (the kernels would be tiled for one GPU and compiled for another): TargetError
    '<what> <target>: the module's ditron.target is ...'."""
    from mlir import ir

    attrs = module.operation.attributes
    if TARGET_ATTR not in attrs:
        attrs[TARGET_ATTR] = ir.StringAttr.get(target)
        return
    have = attrs[TARGET_ATTR]
    have = ir.StringAttr(have).value if isinstance(have, ir.StringAttr) else str(have)
    if have != target:
        raise TargetError(f"{what} {target}: the module's {TARGET_ATTR} is '{have}'")


def _passes_left(module: Any, task_level: bool) -> list[str]:
    """The passes of ``ditron-default`` a module still needs, from the record of the passes that ran on it
    (``ditron.pipeline``, written by the pass manager: passes/manager.py). A module without a record is taken at
    its level: a task program needs them all; a device program (written by hand, or by passes run outside the
    manager) is what ditron-lower-task-to-device makes, and needs the passes after it."""
    from .passes.manager import passes_left, passes_run
    from .passes.registry import PIPELINES
    names = list(PIPELINES[TO_CORE_PIPELINE])
    if passes_run(module) or task_level or "ditron-lower-task-to-device" not in names:
        return passes_left(module, names)
    return names[names.index("ditron-lower-task-to-device") + 1:]


def _task_functions(module: Any) -> list[Any]:
    """The func.func task programs of a module with a mesh: neither device functions nor kernel declarations."""
    from .dialects.sharding import MESH_ATTR
    from .kernels import KERNEL_ATTR
    if MESH_ATTR not in module.operation.attributes:
        return []
    return [op.operation for op in module.body.operations if op.operation.name == "func.func"
            and schema.LEVEL_ATTR not in op.operation.attributes and KERNEL_ATTR not in op.operation.attributes]


def _to_core_level(module: Any, target: Any = None) -> dict[str, Any] | None:
    """Bring a task- or device-level module to core level and return its host program (None for a core-level
    module: its kernels are launched by the caller).

    Task-level ops, or launches of kernels not yet instantiated, run the pipeline ``ditron-default``; a device
    program whose launched kernels are already tt.func kernels is taken as it is; the pass manager's record
    (``ditron.pipeline``) says which passes of ``ditron-default`` already ran. Its last pass,
    ditron-emit-host-program, runs once the rest has left no op above core level but the device function's: it
    serialises the device function as the host program, removes it and adds the runtime kernels it needs (wait,
    signal, barrier) for ``target`` (default: the module's ditron.target), so that what is compiled is core level
    only. A module that already went through that pass (ditron-opt's ditron-default output) gives back the host
    program it holds."""
    from . import hostprog
    from .dialects.context import diagnostic_at
    from .dialects.opbase import walk_ops
    from .passes.emit_host_program import EmitHostProgramPass
    from .passes.manager import PassManager
    from .passes.registry import PIPELINES
    from .schema import HOST_PROGRAM_ATTR

    if HOST_PROGRAM_ATTR in module.operation.attributes:  # ditron-emit-host-program ran (in ditron-opt)
        return _take_host_program(module)
    higher = [op for op in walk_ops(module.operation) if op.name.split(".")[0] in HIGHER_LEVEL_DIALECTS]
    # a task program need not hold a task op: `return %x` with x sharded and the result replicated is an all-gather
    task_funcs = [op for op in _task_functions(module) if not higher]
    if not higher and not task_funcs:
        return None
    higher = higher or task_funcs
    task_level = bool(task_funcs) or any(op.name.split(".")[0] == "ditron_task" for op in higher)
    if task_level or not hostprog.device_functions(module) or not hostprog.kernels_ready(module):
        names = sorted({op.name for op in higher})
        if TO_CORE_PIPELINE not in PIPELINES:
            message = (f"the module has task- or device-level ops ({', '.join(names)}); compiling them needs the "
                       f"pipeline '{TO_CORE_PIPELINE}', which this build does not register; give ditron.compile a "
                       "core-level module (tt.func kernels with ditron_core primitives), or a device-level "
                       "program whose launched kernels are tt.func kernels")
            raise PassError(message, [diagnostic_at(higher[0].location, message)])
        if target is not None:
            set_module_target(module, str(target))
        PassManager(",".join(n for n in _passes_left(module, task_level) if n != EmitHostProgramPass.name)).run(module)

    def left_above_core() -> None:
        left = sorted({op.name for op in walk_ops(module.operation)
                       if op.name.split(".")[0] in HIGHER_LEVEL_DIALECTS})
        if left:
            raise PassError(f"pipeline '{TO_CORE_PIPELINE}' left ops above core level: {', '.join(left)}")

    if not hostprog.device_functions(module):
        left_above_core()
    # ditron-default's last stage: the device function becomes the host program, the runtime kernels join the kernels
    emit = EmitHostProgramPass(target="" if target is None else str(target))
    PassManager([emit]).run(module)
    return _take_host_program(module)


def _take_host_program(module: Any) -> dict[str, Any] | None:
    """The host program ditron-emit-host-program stored on module, removed from it (what is compiled is the
    kernels); None where the module holds none."""
    from .passes.emit_host_program import emitted_program
    from .schema import HOST_PROGRAM_ATTR
    program = emitted_program(module)
    if program is not None:
        del module.operation.attributes[HOST_PROGRAM_ATTR]
    return program


def kernel_signature(kernel: Any) -> tuple[str, ...]:
    """Triton launcher types of a compiled kernel's arguments ('*fp32', 'i32', ...)."""
    signature = kernel.metadata.get("signature")
    if not isinstance(signature, (list, tuple)):
        raise CompileError(f"kernel '{kernel.name}': the backend recorded no signature in its metadata")
    return tuple(triton_type(str(t)) for t in signature)


def kernel_abi(kernel: Any, user_names: list[str] | None = None) -> tuple[ArgSpec, ...]:
    """Name, kind and type of each argument of a compiled kernel.

    The kernel's own arguments come first, named ``user_names`` (from the tt.func before lowering; else arg0,
    arg1, ...); the arguments ditron-lower-core-to-triton appended follow, as listed in metadata['abi']
    (``[[name, type], ...]`` or ``[{"name", "kind"}, ...]``); their kind is their name (rank, num_ranks,
    heap_bases) when it is one of those."""
    signature = kernel_signature(kernel)
    appended = list(_abi_items(kernel.name, kernel.metadata.get("abi") or ()))
    n_user = len(signature) - len(appended)
    if n_user < 0 or (user_names is not None and len(user_names) != n_user):
        raise CompileError(f"kernel '{kernel.name}' takes {len(signature)} arguments, but it had "
                           f"{'?' if user_names is None else len(user_names)} before lowering and the lowering "
                           f"appended {len(appended)} ({', '.join(a['name'] for a in appended) or 'none'})")
    names = list(user_names) if user_names is not None else [f"arg{i}" for i in range(n_user)]
    names += [a["name"] for a in appended]
    kinds = [None] * n_user + [a["kind"] for a in appended]
    args = tuple(ArgSpec(name=name, kind=kind or ("pointer" if ty.startswith("*") else "scalar"), type=ty)
                 for name, kind, ty in zip(names, kinds, signature))
    if len(set(names)) != len(names):
        raise CompileError(f"kernel '{kernel.name}': two arguments share a name ({', '.join(names)}); rename the "
                           "kernel's arguments (their name locations)")
    return args


def _abi_items(kernel_name: str, abi: Any) -> Iterable[dict[str, Any]]:
    for item in abi:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            name, kind = item["name"], item.get("kind")
        elif isinstance(item, (list, tuple)) and item and isinstance(item[0], str):
            name, kind = item[0], None
        else:
            raise CompileError(f"kernel '{kernel_name}': malformed ABI entry {item!r} in the backend's metadata")
        if kind is None:
            kind = name if name in schema.APPENDED_ARGS else None
        elif kind not in schema.ARG_KINDS:
            raise CompileError(f"kernel '{kernel_name}': ABI entry '{name}' has unknown kind '{kind}'")
        yield {"name": name, "kind": kind}


def kernel_arg_names(module: Any) -> dict[str, list[str]]:
    """Kernel name -> the names of its arguments, from their name locations (``loc("x_ptr"(...))``, as Triton
    writes them), else arg0, arg1, ..."""
    from .compiler import kernels
    from mlir import ir
    out = {}
    for func in kernels(module):
        args = func.regions[0].blocks[0].arguments
        names = []
        for i, arg in enumerate(args):
            loc = arg.location
            name = loc.name_str if loc.is_a_name() else ""
            names.append(name if name.isidentifier() else f"arg{i}")
        if len(set(names)) != len(names):  # repeated names: fall back to positions
            names = [f"arg{i}" for i in range(len(args))]
        out[ir.StringAttr(func.attributes["sym_name"]).value] = names
    return out


# --------------------------------------------------------------------------------------------------- output dir

def _holds_artifact(directory: Path) -> bool:
    """Whether directory is a ditron artifact (its manifest names the format), i.e. one a compile may replace: a
    directory that merely holds some other manifest.json is the user's."""
    from .artifact import FORMAT
    try:
        data = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


def install_dir(out_dir: str | os.PathLike, fill: Any) -> Path:
    """Fill a fresh directory beside ``out_dir`` with ``fill(dir)``, then put it in place of ``out_dir``.

    ``out_dir`` may be missing, empty, or an artifact (it is replaced); anything else is refused."""
    out = Path(out_dir)
    if out.exists():
        if not out.is_dir():
            raise ArtifactError(f"cannot write the artifact to '{out}': it exists and is not a directory")
        if any(out.iterdir()) and not _holds_artifact(out):
            raise ArtifactError(f"refusing to write the artifact into '{out}': it is a non-empty directory that "
                                "holds no ditron artifact; choose another -o directory")
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fill(tmp)
        if out.exists():
            os.rename(out, old)
        try:
            os.rename(tmp, out)
        except OSError:
            if old.exists():  # put the previous artifact back
                os.rename(old, out)
            raise
    except OSError as err:
        raise ArtifactError(f"cannot write the artifact to '{out}': {err.strerror or err}") from None
    finally:
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover, ignore_errors=True)
    return out


__all__ = ["build_artifact", "compile", "compile_module", "install_dir", "kernel_abi", "kernel_arg_names",
           "kernel_signature",
           "read_input"]
