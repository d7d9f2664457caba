"""Launching compiled kernels through Triton's own launcher, from ditron's plain-data ``CompiledKernel`` or from a
directory of files it wrote. Imports torch/triton only when used, never the MLIR bindings.

    k = load_kernel(compiled)                  # or load_kernel_dir(path, name)
    k[grid](*user_args, *abi_args(compiled.metadata, rank=r, num_ranks=w, heap_bases=t), stream=s.cuda_stream)

``load_kernel`` builds ``triton.compiler.CompiledKernel`` from the metadata JSON and the binary, exactly as Triton
does on a cache hit, so nothing is recompiled (Triton only builds its small C launcher for the signature, once, in
its cache). Load every kernel before launching any kernel that spin-waits (see DESIGN.md §4): call
``warm(kernel)`` to force the module load up front.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import DitronRuntimeError
from .base import CompiledKernel

ABI_KINDS = ("rank", "num_ranks", "heap_bases")


class _LaunchSource:
    """What Triton's launchers read from a compile source: the signature (argument index -> Triton type string,
    e.g. '*bf16', 'i32') and constants (none: ditron kernels have no constexpr arguments left)."""

    def __init__(self, name: str, signature: Sequence[str]):
        self.name = name
        self.signature = {i: t for i, t in enumerate(signature)}
        self.constants: dict = {}

    def hash(self) -> str:
        return self.name


def _binary_ext(metadata: Mapping[str, Any]) -> str:
    return "hsaco" if metadata["target"]["backend"] == "hip" else "cubin"


def _triton_kernel(metadata: Mapping[str, Any], group: dict[str, str]):
    from triton.compiler.compiler import CompiledKernel as TritonKernel
    if "signature" not in metadata:
        raise DitronRuntimeError(f"kernel '{metadata.get('name')}': metadata has no 'signature' (not written by "
                                 "ditron's backend?)")
    return TritonKernel(_LaunchSource(metadata["name"], metadata["signature"]), group, metadata.get("hash", ""))


def load_kernel(kernel: CompiledKernel, directory: str | os.PathLike | None = None):
    """A ``triton.compiler.CompiledKernel`` for kernel (files go to directory, default a new temporary one)."""
    if not kernel.binary:
        raise DitronRuntimeError(f"kernel '{kernel.name}' has no binary")
    directory = directory if directory is not None else tempfile.mkdtemp(prefix=f"ditron-{kernel.name}-")
    return _triton_kernel(kernel.metadata, kernel.write(directory))


def load_kernel_dir(directory: str | os.PathLike, name: str):
    """A ``triton.compiler.CompiledKernel`` from ``<name>.json`` and ``<name>.cubin|hsaco`` (and any asm stages)
    in directory, as ``CompiledKernel.write`` leaves them."""
    directory = Path(directory)
    meta_path = directory / f"{name}.json"
    try:
        metadata = json.loads(meta_path.read_text())
    except (OSError, ValueError) as err:
        raise DitronRuntimeError(f"cannot read kernel metadata '{meta_path}': {err}") from None
    binary = directory / f"{name}.{_binary_ext(metadata)}"
    if not binary.is_file():
        raise DitronRuntimeError(f"kernel '{name}': binary '{binary}' is missing")
    group = {p.name: str(p) for p in directory.iterdir()
             if p.name.startswith(name + ".") and p.suffix and p.name.count(".") == 1}
    return _triton_kernel(metadata, group)


def read_compiled(directory: str | os.PathLike, name: str) -> CompiledKernel:
    """ditron's plain-data CompiledKernel back from the files ``CompiledKernel.write`` wrote."""
    directory = Path(directory)
    metadata = json.loads((directory / f"{name}.json").read_text())
    ext = _binary_ext(metadata)
    asm = {p.suffix[1:]: p.read_text() for p in directory.glob(f"{name}.*")
           if p.suffix[1:] not in (ext, "json") and p.name.count(".") == 1}
    return CompiledKernel(name=name, target=metadata.get("ditron_target", ""),
                          binary=(directory / f"{name}.{ext}").read_bytes(), asm=asm, metadata=metadata)


def abi_args(metadata: Mapping[str, Any], *, rank: int | None = None, num_ranks: int | None = None,
             heap_bases: Any = None) -> list[Any]:
    """The trailing arguments ditron-lower-core-to-triton appended (metadata['abi']), in order: rank (int),
    num_ranks (int), heap_bases (a device tensor of int64 holding every rank's symmetric-heap base address)."""
    given = {"rank": rank, "num_ranks": num_ranks, "heap_bases": heap_bases}
    out = []
    for name, _type in metadata.get("abi", []):
        if name not in given:
            raise DitronRuntimeError(f"kernel '{metadata.get('name')}': unknown ABI argument '{name}' "
                                     f"(this loader knows {', '.join(ABI_KINDS)})")
        if given[name] is None:
            raise DitronRuntimeError(f"kernel '{metadata.get('name')}' needs the argument '{name}'")
        out.append(given[name])
    return out


def warm(kernel) -> None:
    """Load a ``triton.compiler.CompiledKernel`` on the current device now (module load + launcher build), so that
    no load happens later while another kernel spins."""
    kernel._init_handles()  # Triton's own lazy-load entry point
