"""What every backend shares: the options base class, ``CompiledKernel`` and the stage driver into Triton.

A vendor backend (backends/nvidia, backends/amd) subclasses ``Backend`` and fills in a small table: its options
class, its binary and assembly stage names, and its primitive-lowering module. Everything else -- parsing TTIR with
Triton, running Triton's own stages in order, dumping them, collecting launch metadata, turning Triton's stderr
diagnostics into CompileError -- is written once, here.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, Iterator

from ..errors import CompileError, TargetError
from .target import Target

# metadata keys a launcher (ours or Triton's CompiledKernel) reads on every vendor; checked after every compile
LAUNCH_KEYS = ("name", "num_warps", "num_ctas", "shared", "warp_size", "profile_scratch_size",
               "profile_scratch_align", "launch_cooperative_grid", "target", "signature", "triton_version")


# ----------------------------------------------------------------------------------------------------- options

def _power_of_two(n: int) -> bool:
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class BackendOptions:
    """Options every backend has. Subclasses add vendor fields (and their checks in ``_validate``).

    ``triton_options()`` gives the dict handed to Triton's ``parse_options``; ``hash()`` is a deterministic hex string
    over the class and every field (use it in cache keys)."""

    num_warps: int = 4
    num_stages: int = 3
    num_ctas: int = 1
    enable_fp_fusion: bool = True
    launch_cooperative_grid: bool = False
    debug: bool = False

    MAX_WARPS: ClassVar[int] = 32
    MAX_STAGES: ClassVar[int] = 8

    def __post_init__(self):
        if not _power_of_two(self.num_warps) or self.num_warps > self.MAX_WARPS:
            raise TargetError(f"option num_warps={self.num_warps!r}: must be a power of two from 1 to "
                              f"{self.MAX_WARPS}")
        if not isinstance(self.num_stages, int) or not 1 <= self.num_stages <= self.MAX_STAGES:
            raise TargetError(f"option num_stages={self.num_stages!r}: must be an integer from 1 to "
                              f"{self.MAX_STAGES}")
        if not _power_of_two(self.num_ctas) or self.num_ctas > 16:
            raise TargetError(f"option num_ctas={self.num_ctas!r}: must be 1, 2, 4, 8 or 16")
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type in (bool, "bool") and not isinstance(v, bool):
                raise TargetError(f"option {f.name}={v!r}: must be true or false")
            if f.type in (int, "int") and isinstance(v, bool):  # True is an int to Python, not a count
                raise TargetError(f"option {f.name}={v!r}: must be an integer")
        self._validate()

    def _validate(self) -> None:
        """Vendor checks; raise TargetError."""

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def triton_options(self) -> dict[str, Any]:
        return {k: v for k, v in self.as_dict().items() if v is not None}

    def hash(self) -> str:
        text = type(self).__name__ + ";" + ";".join(f"{k}={v!r}" for k, v in sorted(self.as_dict().items()))
        return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------------------------ the artifact

@dataclass(frozen=True)
class CompiledKernel:
    """One compiled kernel, as plain data.

    ``binary``: cubin or hsaco bytes. ``asm``: the text stages (ttir, ttgir, llir, ptx | amdgcn) as Triton produced
    them. ``metadata``: JSON-able; the same keys Triton's own ``<kernel>.json`` has (so ``triton.compiler.
    CompiledKernel`` loads it without recompiling) plus ``signature`` (Triton type string per kernel argument, in
    order), ``arg_names`` and ``abi`` (the arguments ditron-lower-core-to-triton appended) and ``ditron_target``.
    It reaches the disk, and a GPU, only as part of an artifact: ``ditron.artifact.write_artifact`` writes it,
    ``ditron.runtime.loader`` loads it as Triton's own CompiledKernel."""

    name: str
    target: str
    binary: bytes
    asm: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------- capturing stderr

@contextlib.contextmanager
def capture_output() -> Iterator[list[str]]:
    """Capture what C++ (file descriptor 2) and Python (sys.stdout/sys.stderr) print inside the block; the text is
    appended to the yielded list when the block ends. Triton prints MLIR parse and pass diagnostics on fd 2."""
    box: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(2)
    py_out = io.StringIO()
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            with contextlib.redirect_stdout(py_out), contextlib.redirect_stderr(py_out):
                yield box
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            box.append(tmp.read().decode(errors="replace") + py_out.getvalue())


_MLIR_LOC = re.compile(r'loc\("([^"]*)":(\d+):(\d+)\): ')


def _first_lines(text: str, limit: int = 40) -> str:
    """The first lines of a tool's log, with MLIR's ``loc("file":line:col): `` prefixes written as ditron writes
    locations (``file:line:col: ``)."""
    lines = [_MLIR_LOC.sub(r"\1:\2:\3: ", line) for line in text.strip().splitlines() if line.strip()]
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more lines)"]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------- backends

class Backend:
    """The hooks of one target. Subclasses set the class attributes."""

    VENDOR: ClassVar[str] = ""
    OPTIONS: ClassVar[type[BackendOptions]] = BackendOptions
    BINARY_EXT: ClassVar[str] = ""
    ASM_EXT: ClassVar[str] = ""          # "ptx" or "amdgcn"
    LAUNCH_KEYS: ClassVar[tuple[str, ...]] = LAUNCH_KEYS  # what this vendor's Triton launcher reads
    PRIMITIVES: ClassVar[str] = ""      # module path, imported on first use (it imports the MLIR bindings)

    def __init__(self, target: Target):
        if target.vendor != self.VENDOR:
            raise TargetError(f"{type(self).__name__} compiles for {self.VENDOR}, not {target}")
        self.target = target

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.target}>"

    # -- options
    @property
    def text_stages(self) -> tuple[str, ...]:
        return ("ttir", "ttgir", "llir", self.ASM_EXT)

    @property
    def stage_names(self) -> tuple[str, ...]:
        return self.text_stages + (self.BINARY_EXT,)

    def options(self, **overrides: Any) -> BackendOptions:
        """Default options for this target, with overrides. Unknown names raise TargetError naming the known ones."""
        known = self.OPTIONS.field_names()
        unknown = [k for k in overrides if k not in known]
        if unknown:
            raise TargetError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                              f"for target {self.target}; known options: {', '.join(known)}")
        options = self.OPTIONS(**{**self.default_overrides(), **overrides})
        self.check_options(options)
        return options

    def default_overrides(self) -> dict[str, Any]:
        """Per-target defaults that differ from the options class's defaults."""
        return {}

    def check_options(self, options: BackendOptions) -> None:
        """Checks that need the target (e.g. num_ctas > 1 needs sm_90); raise TargetError."""

    # -- primitive lowering
    @property
    def primitives(self) -> ModuleType:
        """The module holding this vendor's lowering of every ditron_core primitive (the only place its atomic or
        assembly text lives)."""
        import importlib
        return importlib.import_module(self.PRIMITIVES)

    def lower_primitive(self, op, kernel) -> list:
        """Build, at the current insertion point, the TTIR of one ditron_core primitive ``op`` and return the values
        replacing its results. ``kernel`` is ditron-lower-core-to-triton's per-kernel context (the arguments it
        appended, the peer-address and spin-loop builders); it calls back into ``self.primitives`` for every
        vendor-specific piece."""
        return kernel.rule(op.name)(op, self.primitives)

    # -- Triton
    def _triton_backend(self):
        from triton.compiler.compiler import make_backend
        return make_backend(self.target.gpu_target())

    def stages(self, options: BackendOptions) -> tuple[Any, Any, dict[str, Any]]:
        """(triton backend, triton options, ordered {ext: fn(src, metadata)}) from Triton's own ``add_stages``."""
        from triton.backends.compiler import Language
        tb = self._triton_backend()
        try:
            topts = tb.parse_options(options.triton_options())
        except (ValueError, AssertionError) as err:
            raise TargetError(f"Triton rejects options for {self.target}: {err}") from None
        stages: dict[str, Any] = {}
        tb.add_stages(stages, topts, Language.TRITON)
        expected = list(self.stage_names)
        if list(stages) != expected:
            raise TargetError(f"Triton's {self.target} backend has stages {list(stages)}; ditron expects {expected}")
        return tb, topts, stages

    def compile(self, ttir_text: str, options: BackendOptions | None = None, *,
                dump_dir: str | os.PathLike | None = None,
                metadata: dict[str, Any] | None = None) -> CompiledKernel:
        """Compile one kernel (TTIR text, generic form, no ditron_core ops) through all of Triton's stages.
        ``metadata``: extra JSON-able keys for the kernel's metadata (e.g. ``abi``); Triton's keys win.

        Raises CompileError with Triton's diagnostic text when Triton rejects the IR or a stage fails."""
        name, asm, binary, metadata = self._run_stages(ttir_text, options, None, dump_dir, metadata or {})
        kernel = CompiledKernel(name=name, target=str(self.target), binary=binary, asm=asm, metadata=metadata)
        if dump_dir is not None:
            (Path(dump_dir) / f"{name}.json").write_text(json.dumps(metadata, sort_keys=True, indent=1))
        return kernel

    def emit(self, ttir_text: str, stage: str, options: BackendOptions | None = None) -> str:
        """The text of one stage (ttir, ttgir, llir, ptx | amdgcn) for one kernel; runs only the stages up to it."""
        if stage not in self.text_stages:
            raise TargetError(f"stage '{stage}' is not a text stage of {self.target}; choose one of "
                              f"{', '.join(self.text_stages)}")
        return self._run_stages(ttir_text, options, stage, None, {})[1][stage]

    def _run_stages(self, ttir_text: str, options: BackendOptions | None, until: str | None,
                    dump_dir: str | os.PathLike | None,
                    extra: dict[str, Any]) -> tuple[str, dict[str, str], bytes, dict[str, Any]]:
        import triton
        from triton._C.libtriton import get_cache_invalidating_env_vars
        from triton._C.libtriton import ir as tir

        options = options if options is not None else self.options()
        if not isinstance(options, self.OPTIONS):
            raise TargetError(f"options for {self.target} must come from get_backend('{self.target}').options(), "
                              f"got {type(options).__name__}")
        if "tt.func" not in ttir_text:  # Triton's get_entry_func_name crashes on a module without a function
            raise CompileError(f"the TTIR for {self.target} has no kernel (tt.func) to compile")
        tb, topts, stages = self.stages(options)
        ctx = tir.context()
        tir.load_dialects(ctx)
        tb.load_dialects(ctx)
        dump = Path(dump_dir) if dump_dir is not None else None
        with tempfile.TemporaryDirectory(prefix="ditron-") as tmp:
            src_path = os.path.join(tmp, "kernel.ttir")
            with open(src_path, "w", encoding="utf-8") as f:
                f.write(ttir_text)
            with capture_output() as log:
                try:
                    module = tir.parse_mlir_module(src_path, ctx)
                except RuntimeError:
                    module = None
            if module is None:
                raise CompileError(f"Triton cannot parse the TTIR for {self.target}:\n{_first_lines(log[0])}")
        module.context = ctx
        try:
            name = module.get_entry_func_name()
            signature = list(module.get_function_signature(module.get_function(name)))
        except Exception as err:  # noqa: BLE001 - Triton raises bare RuntimeError/IndexError here
            raise CompileError(f"the TTIR for {self.target} has no kernel (tt.func): {err}") from None
        if dump is not None:
            dump.mkdir(parents=True, exist_ok=True)
            (dump / f"{name}.source.ttir").write_text(ttir_text)

        key = hashlib.sha256("\n".join([ttir_text, str(self.target), options.hash(), triton.__version__])
                             .encode()).hexdigest()
        tgt = self.target.gpu_target()
        metadata: dict[str, Any] = {**extra, "hash": key, "target": {"backend": tgt.backend, "arch": tgt.arch,
                                                              "warp_size": tgt.warp_size},
                                    **topts.__dict__, **get_cache_invalidating_env_vars(),
                                    "triton_version": triton.__version__}
        asm: dict[str, str] = {}
        binary = b""
        current: Any = module
        for ext, run_stage in stages.items():
            with capture_output() as log:
                try:
                    current = run_stage(current, metadata)
                    failure = None
                except Exception as err:  # noqa: BLE001 - Triton raises RuntimeError, PTXASError, AssertionError
                    failure = err
            if failure is not None:
                raise CompileError(f"Triton's '{ext}' stage failed for kernel '{name}' on {self.target}: "
                                   f"{type(failure).__name__}: {failure}\n{_first_lines(log[0])}".rstrip())
            if ext == self.BINARY_EXT:
                binary = bytes(current)
            else:
                asm[ext] = current if isinstance(current, str) else str(current)
            if dump is not None:
                path = dump / f"{name}.{ext}"
                if ext == self.BINARY_EXT:
                    path.write_bytes(binary)
                else:
                    path.write_text(asm[ext])
            if ext == until:
                return name, asm, binary, {}
        metadata["name"] = metadata.get("name", name)
        metadata["signature"] = signature
        metadata["ditron_target"] = str(self.target)
        metadata = json.loads(json.dumps(metadata, default=vars))
        missing = [k for k in self.LAUNCH_KEYS if k not in metadata]
        if missing:
            raise CompileError(f"Triton {triton.__version__} left out launch metadata {missing} for '{name}'")
        return metadata["name"], asm, binary, metadata
