"""Artifact directories: what ``ditron.compile`` writes and ``ditron.load`` reads.

An artifact is a directory that runs with torch + triton alone (this module imports neither, nor ``mlir``)::

    manifest.json        format + versions, target, options, kernels with their ABI, host program
    <kernel>.cubin       one binary per kernel (.hsaco on AMD), the file Triton's loader reads
    <kernel>.json        Triton's launch metadata of that kernel (num_warps, shared, target, ...)
    <kernel>.ttir ...    the stage texts (ttir, ttgir, llir, ptx / amdgcn), optional

The manifest (format version 1)::

    {"format": "ditron-artifact", "format_version": 1, "ditron_version": "0.1.0", "triton_version": "3.6.0",
     "target": {"name": "cuda:90", "vendor": "cuda", "arch": 90, "warp_size": 32},
     "options": {"num_warps": 4, ...}, "options_hash": "...", "cache_key": "..." | null,
     "kernels": [{"name": "add", "binary": "add.cubin", "binary_sha256": "...", "metadata": "add.json",
                  "stages": {"ttir": "add.ttir", ...}, "signature": ["*fp32", "i32"],
                  "args": [{"name": "x", "kind": "pointer", "type": "*fp32"}, ...]}],
     "host_program": null | {"format_version": 1, "program": {...}}}

``signature`` is what Triton's launcher needs (one type per kernel argument, Triton's spelling); ``args`` is the
ABI: the name and kind of each argument, including those the primitive lowering adds (``rank``, ``num_ranks``,
``heap_bases``). The host program (the device-level schedule, as JSON) is versioned on its own.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from .backends.facts import binary_extensions
from .errors import DitronRuntimeError
from .schema import ARG_KINDS, HOST_PROGRAM_VERSION

FORMAT = "ditron-artifact"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"

BINARY_EXT = binary_extensions()  # vendor -> binary file extension, from the vendor tables (backends/*/facts.py)
# keys of a kernel's launch metadata that Triton's CompiledKernel reads whatever the backend
LAUNCH_METADATA_KEYS = ("name", "target", "num_warps", "num_ctas", "shared")

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_$.]*$")
# MLIR scalar type -> Triton's spelling in launcher signatures
_TRITON_SCALAR = {"f16": "fp16", "bf16": "bf16", "f32": "fp32", "f64": "fp64", "f8E4M3FN": "fp8e4nv",
                  "f8E5M2": "fp8e5"}


class ArtifactError(DitronRuntimeError):
    """An artifact directory that cannot be read: missing or malformed manifest, missing files, bad entries."""


class ArtifactVersionError(ArtifactError):
    """An artifact written by an incompatible ditron (format version) or Triton, or for another target."""


def triton_type(mlir_type: str) -> str:
    """Triton's launcher spelling of an MLIR argument type: '!tt.ptr<f32>' -> '*fp32', 'f16' -> 'fp16'."""
    text = mlir_type.strip()
    m = re.fullmatch(r"!tt\.ptr<([^,>]+)(?:,\s*\d+)?>", text)
    if m:
        return "*" + triton_type(m.group(1))
    if text.startswith("*"):
        return "*" + triton_type(text[1:])
    return _TRITON_SCALAR.get(text, text)


@dataclass(frozen=True)
class ArgSpec:
    """One kernel argument of the ABI."""

    name: str
    kind: str
    type: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "kind": self.kind, "type": self.type}


@dataclass(frozen=True)
class KernelEntry:
    """One kernel of a manifest."""

    name: str
    binary: str
    binary_sha256: str
    metadata: str
    signature: tuple[str, ...]
    args: tuple[ArgSpec, ...]
    stages: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "binary": self.binary, "binary_sha256": self.binary_sha256,
                "metadata": self.metadata, "stages": dict(self.stages), "signature": list(self.signature),
                "args": [a.to_json() for a in self.args]}


@dataclass(frozen=True)
class Manifest:
    """The parsed, checked manifest.json of an artifact."""

    ditron_version: str
    triton_version: str
    target: Mapping[str, Any]
    options: Mapping[str, Any]
    options_hash: str
    kernels: tuple[KernelEntry, ...]
    host_program: Mapping[str, Any] | None = None
    cache_key: str | None = None
    format_version: int = FORMAT_VERSION

    @property
    def target_name(self) -> str:
        return str(self.target["name"])

    @property
    def vendor(self) -> str:
        return str(self.target["vendor"])

    def kernel(self, name: str) -> KernelEntry:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "format_version": self.format_version, "ditron_version": self.ditron_version,
                "triton_version": self.triton_version, "target": dict(self.target), "options": dict(self.options),
                "options_hash": self.options_hash, "cache_key": self.cache_key,
                "kernels": [k.to_json() for k in self.kernels], "host_program": self.host_program}


# ----------------------------------------------------------------------------------------------------------- writing

def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "__dict__"):  # e.g. Triton's GPUTarget
        return _jsonable(vars(value))
    return str(value)


def target_json(target: Any) -> dict[str, Any]:
    """A target (ditron's Target, or anything with vendor/arch/warp_size) as manifest JSON."""
    for attr in ("vendor", "arch", "warp_size"):
        if not hasattr(target, attr):
            raise TypeError(f"target_json expects a Target, got {target!r}")
    return {"name": f"{target.vendor}:{target.arch}", "vendor": target.vendor, "arch": target.arch,
            "warp_size": target.warp_size}


def options_json(options: Any) -> dict[str, Any]:
    """Backend options (a frozen dataclass, or a mapping) as JSON."""
    import dataclasses
    if dataclasses.is_dataclass(options):
        return _jsonable({f.name: getattr(options, f.name) for f in dataclasses.fields(options)})
    return _jsonable(dict(options))


def check_kernel_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name) or name == MANIFEST[:-5]:
        raise ArtifactError(f"kernel name {name!r} cannot name artifact files; kernel (tt.func) names must be "
                            "identifiers (letters, digits, '_', '$', '.'), and not 'manifest'")
    return name


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_artifact(directory: str | os.PathLike, *, target: Any, options: Any, options_hash: str,
                   kernels: Iterable[tuple[Any, tuple[str, ...], tuple[ArgSpec, ...]]],
                   ditron_version: str, triton_version: str, cache_key: str | None = None,
                   host_program: Mapping[str, Any] | None = None, keep_stages: bool = True) -> Manifest:
    """Write an artifact into ``directory`` (created; it must not exist or be empty).

    ``kernels`` holds (compiled kernel, launcher signature, ABI) triples; a compiled kernel has ``name``,
    ``binary`` (bytes), ``asm`` (stage -> text) and ``metadata`` (Triton's launch metadata, JSON-able).
    Atomicity is the caller's business: write into a fresh directory and rename it into place."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise ArtifactError(f"cannot write an artifact into '{out}': the directory is not empty")
    target_j = target_json(target)
    binary_ext = BINARY_EXT.get(target_j["vendor"])
    if binary_ext is None:
        raise ArtifactError(f"no binary format known for vendor '{target_j['vendor']}'")
    entries, seen = [], set()
    for compiled, signature, args in kernels:
        name = check_kernel_name(compiled.name)
        if name in seen:
            raise ArtifactError(f"two kernels named '{name}' in one artifact; kernel names must be unique")
        seen.add(name)
        metadata = _jsonable(dict(compiled.metadata))
        missing = [k for k in LAUNCH_METADATA_KEYS if k not in metadata]
        if missing:
            raise ArtifactError(f"kernel '{name}': launch metadata lacks {', '.join(missing)} (the backend's "
                                "CompiledKernel.metadata must hold Triton's metadata)")
        if metadata["name"] != name:
            raise ArtifactError(f"kernel '{name}': launch metadata names the kernel '{metadata['name']}'")
        if len(signature) != len(args):
            raise ArtifactError(f"kernel '{name}': the ABI lists {len(args)} arguments, the kernel takes "
                                f"{len(signature)}")
        binary = bytes(compiled.binary)
        _write_bytes(out / f"{name}.{binary_ext}", binary)
        _write_bytes(out / f"{name}.json", json.dumps(metadata, indent=1, sort_keys=True).encode())
        stages = {}
        if keep_stages:
            for ext, text in sorted(dict(compiled.asm).items()):
                if ext == binary_ext or not isinstance(text, str) or not re.fullmatch(r"[a-z0-9_]+", ext):
                    continue
                _write_bytes(out / f"{name}.{ext}", text.encode())
                stages[ext] = f"{name}.{ext}"
        entries.append(KernelEntry(name=name, binary=f"{name}.{binary_ext}",
                                   binary_sha256=hashlib.sha256(binary).hexdigest(), metadata=f"{name}.json",
                                   signature=tuple(signature), args=tuple(args), stages=stages))
    if not entries and host_program is None:  # a host program may consist of copies alone
        raise ArtifactError("an artifact needs at least one kernel or a host program")
    host = None if host_program is None else {"format_version": HOST_PROGRAM_VERSION,
                                              "program": _jsonable(host_program)}
    manifest = Manifest(ditron_version=ditron_version, triton_version=triton_version, target=target_j,
                        options=options_json(options), options_hash=options_hash, kernels=tuple(entries),
                        host_program=host, cache_key=cache_key)
    _write_bytes(out / MANIFEST, json.dumps(manifest.to_json(), indent=1).encode())
    return manifest


# ----------------------------------------------------------------------------------------------------------- reading

def _need(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise ArtifactError(f"{where}: missing field '{key}'")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ArtifactError(f"{where}: field '{key}' has the wrong type ({type(value).__name__})")
    return value


def _parse_kernel(obj: Any, where: str) -> KernelEntry:
    if not isinstance(obj, dict):
        raise ArtifactError(f"{where}: a kernel entry must be an object")
    name = _need(obj, "name", str, where)
    where = f"{where} (kernel '{name}')"
    args = []
    for i, a in enumerate(_need(obj, "args", list, where)):
        if not isinstance(a, dict):
            raise ArtifactError(f"{where}: argument {i} must be an object")
        spec = ArgSpec(_need(a, "name", str, where), _need(a, "kind", str, where), _need(a, "type", str, where))
        if spec.kind not in ARG_KINDS:
            raise ArtifactError(f"{where}: argument '{spec.name}' has unknown kind '{spec.kind}' "
                                f"(known: {', '.join(ARG_KINDS)})")
        args.append(spec)
    signature = tuple(_need(obj, "signature", list, where))
    if len(signature) != len(args) or not all(isinstance(s, str) for s in signature):
        raise ArtifactError(f"{where}: 'signature' must list one type string per argument")
    stages = _need(obj, "stages", dict, where)
    entry = KernelEntry(name=check_kernel_name(name), binary=_need(obj, "binary", str, where),
                        binary_sha256=_need(obj, "binary_sha256", str, where),
                        metadata=_need(obj, "metadata", str, where), signature=signature, args=tuple(args),
                        stages={str(k): str(v) for k, v in stages.items()})
    for file in (entry.binary, entry.metadata, *entry.stages.values()):
        if Path(file).name != file:
            raise ArtifactError(f"{where}: file '{file}' is not a plain file name inside the artifact")
    return entry


def parse_manifest(data: Any, where: str = MANIFEST) -> Manifest:
    """Check manifest JSON and return it as a Manifest. Raises ArtifactError / ArtifactVersionError."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ArtifactError(f"{where} is not a ditron artifact manifest (no \"format\": \"{FORMAT}\")")
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise ArtifactVersionError(
            f"{where}: artifact format version {version!r}, but this ditron reads version {FORMAT_VERSION}; "
            "recompile it with this ditron (ditron compile ...)")
    target = _need(data, "target", dict, where)
    for key in ("name", "vendor", "arch", "warp_size"):
        _need(target, key, (str, int), f"{where}: target")
    host = data.get("host_program")
    if host is not None:
        if not isinstance(host, dict) or host.get("format_version") != HOST_PROGRAM_VERSION:
            got = host.get("format_version") if isinstance(host, dict) else host
            raise ArtifactVersionError(f"{where}: host program format version {got!r}, but this ditron reads "
                                       f"version {HOST_PROGRAM_VERSION}; recompile the artifact")
    kernels = tuple(_parse_kernel(k, where) for k in _need(data, "kernels", list, where))
    if not kernels and host is None:  # a host program may consist of copies alone
        raise ArtifactError(f"{where}: the artifact has no kernels")
    cache_key = data.get("cache_key")
    return Manifest(ditron_version=_need(data, "ditron_version", str, where),
                    triton_version=_need(data, "triton_version", str, where), target=target,
                    options=_need(data, "options", dict, where), options_hash=_need(data, "options_hash", str, where),
                    kernels=kernels, host_program=host, cache_key=cache_key if isinstance(cache_key, str) else None,
                    format_version=version)


def read_manifest(directory: str | os.PathLike) -> Manifest:
    """Read and check ``directory/manifest.json`` and that every file it names is there."""
    root = Path(directory)
    if not root.is_dir():
        what = "a file; an artifact is the directory ditron compile -o wrote" if root.exists() else "no such directory"
        raise ArtifactError(f"'{root}' is not an artifact directory ({what})")
    path = root / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ArtifactError(f"'{root}' is not an artifact directory: it has no {MANIFEST}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ArtifactError(f"cannot read '{path}': {getattr(err, 'strerror', None) or err}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ArtifactError(f"'{path}' is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); "
                            "the artifact is damaged: recompile it") from None
    manifest = parse_manifest(data, str(path))
    for k in manifest.kernels:
        for file in (k.binary, k.metadata, *k.stages.values()):
            if not (root / file).is_file():
                raise ArtifactError(f"artifact '{root}': kernel '{k.name}' needs '{file}', which is missing")
    return manifest


def split_version(version: str) -> tuple[int, ...]:
    """'3.6.0+git1234' -> (3, 6, 0)."""
    parts = []
    for piece in re.split(r"[.+-]", version):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)
