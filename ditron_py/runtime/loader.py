"""Load an artifact directory and launch its kernels, with torch + triton only (never ``mlir``).

    exe = ditron.load("out/")                  # checks the manifest; builds Triton kernels, no GPU touched
    exe.warmup()                               # optional: load every module on the GPU now
    exe.kernels["add"][(n // 1024,)](x, y, out, n)             # Triton's style
    exe.kernels["add"]((n // 1024,), x, y, out, n=n, stream=s)   # or call it; keywords by ABI name

Each kernel is Triton's own ``CompiledKernel`` built from the artifact's files (the launch metadata JSON and the
binary), so launching goes through Triton's launcher (``driver.active.launcher_cls``). Handles are created lazily,
on the first launch or ``warmup()``; that is also when the artifact's target is checked against the current GPU.
Load every kernel (``Executable.warmup``) before launching one that spin-waits on another: a module load while a
kernel spins can deadlock.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..artifact import (BINARY_EXT, MANIFEST, ArgSpec, ArtifactError, ArtifactVersionError, KernelEntry, Manifest,
                        read_manifest, split_version)
from ..backends.facts import vendor_facts
from ..errors import DitronRuntimeError, TargetError


class TritonVersionWarning(UserWarning):
    """The artifact was built with another patch release of Triton than the one running it."""


class _LaunchSource:
    """What Triton's launcher reads from a kernel's source: the signature (index -> type) and no constants
    (every argument of a TTIR kernel is a run-time argument)."""

    def __init__(self, name: str, signature: Sequence[str]):
        self.name = name
        self.signature = {i: ty for i, ty in enumerate(signature)}
        self.constants: dict = {}

    def hash(self) -> str:
        return hashlib.sha256(json.dumps([self.name, list(self.signature.values())]).encode()).hexdigest()


def check_triton_version(built_with: str, where: str) -> None:
    """Same major.minor as the running Triton, else ArtifactVersionError; another patch release warns."""
    import triton
    have = triton.__version__
    if split_version(built_with)[:2] != split_version(have)[:2]:
        raise ArtifactVersionError(f"{where} was built with triton {built_with}, but this process runs triton "
                                   f"{have}; recompile it with triton {have} (or run it with triton {built_with})")
    if built_with != have:
        warnings.warn(f"{where} was built with triton {built_with} and runs with triton {have}",
                      TritonVersionWarning, stacklevel=3)


def device_target_name() -> str:
    """The current GPU as a ditron target name ('cuda:90', 'hip:gfx942'), from Triton's active driver."""
    from triton.runtime.driver import driver
    try:
        target = driver.active.get_current_target()
    except Exception as err:  # no driver, no device: Triton raises RuntimeError or others
        raise DitronRuntimeError(f"no GPU to launch on (Triton found none: {err})") from None
    arch = target.arch.split(":")[0] if isinstance(target.arch, str) else target.arch
    return f"{target.backend}:{arch}"


def target_runs_on(artifact_target: Mapping[str, Any], device: str) -> bool:
    """Whether code built for ``artifact_target`` runs on the device target ``device`` ('cuda:90'): the vendor
    table's ``runs_on`` (backends/*/facts.py; exact arch match for a vendor without a table)."""
    vendor, _, arch = device.partition(":")
    if vendor != artifact_target["vendor"]:
        return False
    facts = vendor_facts(vendor)
    if facts is None:
        return str(artifact_target["arch"]) == arch
    return facts.runs_on(str(artifact_target["arch"]), arch)


class Kernel:
    """One kernel of an artifact: Triton's CompiledKernel plus the ditron ABI (argument names and kinds)."""

    def __init__(self, root: Path, entry: KernelEntry, manifest: Manifest, executable: "Executable"):
        from triton.compiler.compiler import CompiledKernel
        self.name = entry.name
        self.entry = entry
        self.args: tuple[ArgSpec, ...] = entry.args
        self._executable = executable
        binary = (root / entry.binary).read_bytes()
        if hashlib.sha256(binary).hexdigest() != entry.binary_sha256:
            raise ArtifactError(f"artifact '{root}': '{entry.binary}' does not match the checksum in {MANIFEST}; "
                                "the artifact is damaged: recompile it")
        try:
            metadata = json.loads((root / entry.metadata).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ArtifactError(f"artifact '{root}': cannot read launch metadata '{entry.metadata}': {err}") from None
        target = metadata.get("target") if isinstance(metadata, dict) else None
        if not isinstance(target, dict) or target.get("backend") != manifest.vendor:
            raise ArtifactError(f"artifact '{root}': '{entry.metadata}' is not launch metadata for a "
                                f"{manifest.vendor} kernel")
        if metadata.get("name") != entry.name:
            raise ArtifactError(f"artifact '{root}': '{entry.metadata}' describes kernel "
                                f"{metadata.get('name')!r}, not '{entry.name}'")
        # The metadata group as Triton's cache would hand it over: the JSON, the binary, the stage texts.
        group = {entry.metadata: str(root / entry.metadata), entry.binary: str(root / entry.binary)}
        group.update({file: str(root / file) for file in entry.stages.values()})
        try:
            self.triton_kernel = CompiledKernel(_LaunchSource(entry.name, entry.signature), group,
                                                entry.binary_sha256)
        except (KeyError, TypeError, AttributeError, ValueError, RuntimeError) as err:
            raise ArtifactError(f"artifact '{root}': Triton cannot read kernel '{entry.name}' "
                                f"({type(err).__name__}: {err})") from None

    @property
    def metadata(self):
        """Triton's launch metadata (a namedtuple: num_warps, num_stages, shared, ...)."""
        return self.triton_kernel.metadata

    @property
    def asm(self) -> Mapping[str, Any]:
        """Stage texts kept in the artifact, and the binary (Triton's ``asm`` dict)."""
        return self.triton_kernel.asm

    @property
    def binary(self) -> bytes:
        return self.triton_kernel.kernel

    @property
    def loaded(self) -> bool:
        """Whether the module is loaded on the GPU."""
        return self.triton_kernel.module is not None

    def warmup(self) -> "Kernel":
        """Check the target against the current GPU and load the module there (no launch). A kernel is loaded
        once, on the device current at its first launch or warmup; launch it on that device."""
        if not self.loaded:
            self._executable.check_device()
            try:
                self.triton_kernel._init_handles()
            except DitronRuntimeError:
                raise
            except Exception as err:  # driver errors: out of resources, bad binary, no device
                raise DitronRuntimeError(f"cannot load kernel '{self.name}' on the GPU: "
                                         f"{type(err).__name__}: {err}") from None
        return self

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        """Positional and keyword (ABI name) arguments -> the full argument list, in ABI order."""
        names = [a.name for a in self.args]
        if len(args) > len(names):
            raise DitronRuntimeError(f"kernel '{self.name}' takes {len(names)} arguments ({', '.join(names)}), "
                                     f"got {len(args)} positional")
        bound: dict[str, Any] = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names:
                raise DitronRuntimeError(f"kernel '{self.name}' has no argument '{key}' "
                                         f"(arguments: {', '.join(names)})")
            if key in bound:
                raise DitronRuntimeError(f"kernel '{self.name}': argument '{key}' given twice")
            bound[key] = value
        missing = [n for n in names if n not in bound]
        if missing:
            raise DitronRuntimeError(f"kernel '{self.name}' is missing arguments: {', '.join(missing)} "
                                     f"(arguments: {', '.join(names)})")
        out = []
        for spec in self.args:
            value = bound[spec.name]
            if spec.type.startswith("*") and not (hasattr(value, "data_ptr") or isinstance(value, int)):
                raise DitronRuntimeError(f"kernel '{self.name}': argument '{spec.name}' ({spec.type}) needs a "
                                         f"tensor or an address, got {type(value).__name__}")
            out.append(value)
        return out

    def launch(self, grid: Any, *args: Any, stream: Any = None, **kwargs: Any) -> None:
        """Launch on ``grid`` (an int, a tuple of 1-3 ints, or a callable of the bound arguments dict) on
        ``stream`` (None: the current stream; a torch.cuda.Stream or a raw handle)."""
        values = self.bind(args, kwargs)
        if callable(grid):
            grid = grid({a.name: v for a, v in zip(self.args, values)})
        dims = _grid3(self.name, grid)
        self.warmup()
        if getattr(self.triton_kernel.metadata, "global_scratch_size", 0) > 0:
            _ensure_allocator()
        if stream is not None and not isinstance(stream, int):
            stream = getattr(stream, "cuda_stream", stream)
        self.triton_kernel[dims](*values, stream=stream)

    def __call__(self, grid: Any, *args: Any, stream: Any = None, **kwargs: Any) -> None:
        self.launch(grid, *args, stream=stream, **kwargs)

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return lambda *args, stream=None, **kwargs: self.launch(grid, *args, stream=stream, **kwargs)

    def __repr__(self) -> str:
        args = ", ".join(f"{a.name}: {a.type}" for a in self.args)
        return f"<ditron Kernel {self.name}({args}) num_warps={self.metadata.num_warps}>"


def _grid3(name: str, grid: Any) -> tuple[int, int, int]:
    dims = (grid,) if isinstance(grid, int) else tuple(grid) if isinstance(grid, (tuple, list)) else None
    if not dims or len(dims) > 3 or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                            for d in dims):
        raise DitronRuntimeError(f"kernel '{name}': grid must be an int or a tuple of 1 to 3 ints >= 0, "
                                 f"got {grid!r}")
    return tuple(dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


def _ensure_allocator() -> None:
    """Kernels with global scratch (device-side TMA descriptors) need Triton's allocator: if the user set none,
    use torch's caching allocator on the current device."""
    from triton.runtime import _allocation
    if not isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        return
    import torch
    import triton

    def alloc(size: int, alignment: int, stream: Any):
        return torch.empty(size, dtype=torch.int8, device="cuda")

    triton.set_allocator(alloc)


class Executable:
    """A loaded artifact: its manifest, its kernels by name, and its host program (when there is one)."""

    def __init__(self, path: str | Path | None, manifest: Manifest, kernels: dict[str, Kernel]):
        self.path = None if path is None else Path(path)
        self.manifest = manifest
        self.kernels = kernels
        self.compile_info: dict[str, Any] = {}
        self._device_checked = False
        self._executors: list[Any] = []

    @property
    def target(self) -> str:
        return self.manifest.target_name

    @property
    def host_program(self) -> Mapping[str, Any] | None:
        host = self.manifest.host_program
        return None if host is None else host.get("program")

    def check_device(self) -> None:
        """Raise TargetError when the current GPU cannot run this artifact's binaries."""
        if self._device_checked:
            return
        device = device_target_name()
        if not target_runs_on(self.manifest.target, device):
            where = self.path or "this executable"
            raise TargetError(f"{where} was compiled for {self.target}, which cannot run on this GPU ({device}); "
                              f"recompile it with --target {device}")
        self._device_checked = True

    def warmup(self) -> "Executable":
        """Load every kernel on the GPU now (do this before launching kernels that wait on each other)."""
        for kernel in self.kernels.values():
            kernel.warmup()
        return self

    def executor(self, world: Any, *, graph: bool = False, **options: Any) -> Any:
        """The Executor that runs this executable's host program in ``world`` (made once per world and mode, on
        first use: symmetric heap, streams, kernels loaded). ``graph``: CUDA-graph replay (True) or eager (False);
        the two modes never share an executor (their signal pads differ), so each has its own. ``options``:
        signal_via, wait_via, timeout_s (first use only). In a real world every rank must ask for the same."""
        from .executor import Executor
        from .world import World
        if not isinstance(world, World):
            raise DitronRuntimeError(f"world must be a ditron.World (ditron.World.virtual(W) for W ranks on one GPU, "
                                     f"ditron.World.from_torch() under torchrun), got {type(world).__name__} "
                                     f"{world!r}")
        if not isinstance(graph, bool):
            raise DitronRuntimeError(f"graph={graph!r}: pass True (CUDA-graph replay) or False (eager)")
        for ex in self._executors:
            if ex.world is world and not ex._closed and ex.graph == graph:
                return ex
        ex = Executor(self, world, graph=graph, **options)
        self._executors.append(ex)
        return ex

    def run(self, world: Any, inputs: Sequence[Any], outputs: Sequence[Any] | None = None, *,
            sync: bool = True, graph: bool = False) -> Any:
        """Run the host program once in ``world`` (a ditron.runtime.world.World): ``inputs`` per rank in a virtual
        world (``[[x0, ...], [x1, ...]]``), this rank's in a real one; returns the outputs in the same shape.
        ``graph=True`` replays a CUDA graph per set of tensors (see ditron.runtime.graphs: without ``outputs``, the
        returned tensors are reused by the next call with the same inputs)."""
        return self.executor(world, graph=graph).run(inputs, outputs, sync=sync)

    __call__ = run

    def close(self) -> None:
        """Close every executor of this executable (outstanding work is waited for, heaps are freed)."""
        executors, self._executors = self._executors, []
        for ex in executors:
            ex.close()

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self.kernels[name]
        except KeyError:
            raise DitronRuntimeError(f"no kernel '{name}' in this executable (kernels: "
                                     f"{', '.join(self.kernels)})") from None

    def __repr__(self) -> str:
        return f"<ditron Executable {self.target} kernels=[{', '.join(self.kernels)}] at {self.path}>"


def load_artifact(directory: str | Path) -> Executable:
    """Read an artifact directory (see ditron.artifact) into an Executable. Works without a GPU; the target is
    checked against the GPU at the first launch. Raises ArtifactError / ArtifactVersionError."""
    if not isinstance(directory, (str, os.PathLike)):
        raise ArtifactError(f"load takes an artifact directory (a path), got {type(directory).__name__}")
    root = Path(directory)
    manifest = read_manifest(root)
    if manifest.vendor not in BINARY_EXT:
        raise ArtifactError(f"artifact '{root}': unknown vendor '{manifest.vendor}'")
    check_triton_version(manifest.triton_version, f"artifact '{root}'")
    exe = Executable(root, manifest, {})
    for entry in manifest.kernels:
        exe.kernels[entry.name] = Kernel(root, entry, manifest, exe)
    return exe


load = load_artifact
