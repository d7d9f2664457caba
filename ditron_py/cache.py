"""The content-addressed compile cache.

An entry is a complete artifact directory, ``<root>/<key[:2]>/<key>``, where ``key`` is the sha256 of everything
that decides the compiled code: the input IR text (with its locations), the target, the backend options, a hash
of ditron's own source files (Python and IRDL), Triton's version and the artifact format version.

Entries appear atomically: an artifact is built in a fresh temporary directory beside its final place, sealed (the
sha256 of every file it holds, written last into ``SEAL``) and renamed into place. A lookup serves an entry only
when its seal matches its files: a truncated .llir / .ptx / binary, an edited manifest or host program, a missing
or extra file make it a miss, and the compile that follows replaces the entry. A rename onto an existing entry fails, so when two compiles of the same key race, the first rename
wins and the loser discards its copy and uses the winner's. Readers therefore never see half-written entries.
The root is ``ditron.env.cache_dir()`` ($DITRON_CACHE_DIR); $DITRON_NO_CACHE=1 turns the cache off.
"""
from __future__ import annotations

import errno
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping

from .artifact import FORMAT_VERSION, MANIFEST
from .errors import DitronError

# packages whose source decides what ditron emits; folders mapped into `ditron` outside ditron_py are listed
SOURCE_PACKAGES = ("ditron", "ditron.dialects", "ditron.kernels", "ditron.passes", "ditron.backends", "ditron.tools")
SOURCE_SUFFIXES = (".py", ".mlir")
TMP_PREFIX = ".tmp-"
SEAL = "contents.sha256"  # {relative path: sha256} of every other file of an entry, written last
STALE_TMP_S = 24 * 3600


class CacheError(DitronError):
    """The cache directory cannot be created or written."""


def _package_dirs() -> list[Path]:
    dirs = []
    for name in SOURCE_PACKAGES:
        spec = importlib.util.find_spec(name)  # finds, does not import, the subpackage (ditron.dialects needs mlir)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(Path(p) for p in spec.submodule_search_locations)
    return dirs


@functools.cache
def ditron_source_hash() -> str:
    """sha256 over ditron's source files (relative path and content), computed once per process."""
    h = hashlib.sha256()
    seen: set[Path] = set()
    for root in _package_dirs():
        files = sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file()
                       and "__pycache__" not in p.parts)
        for path in files:
            real = path.resolve()
            if real in seen:  # ditron_py is one root and contains no mapped package, but stay safe
                continue
            seen.add(real)
            h.update(str(path.relative_to(root.parent)).encode() + b"\0")
            h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def triton_version() -> str:
    import triton
    return triton.__version__


def cache_key(ir_text: str, target: str, options: Mapping[str, Any], *, source_name: str = "",
              extra: Mapping[str, Any] | None = None) -> str:
    """The cache key of one compile. ``source_name`` is the input's file name (it ends up in line info)."""
    payload = {
        "ir": ir_text,
        "source_name": source_name,
        "target": target,
        "options": options,
        "ditron_source": ditron_source_hash(),
        "triton": triton_version(),
        "artifact_format": FORMAT_VERSION,
        "extra": dict(extra or {}),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


class CompileCache:
    """Artifact directories by key under ``root``."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def entry(self, key: str) -> Path:
        if len(key) < 8 or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"not a cache key: {key!r}")
        return self.root / key[:2] / key

    def lookup(self, key: str) -> Path | None:
        """The entry's directory if it is complete and intact (its seal matches every file), else None."""
        path = self.entry(key)
        try:
            seal = json.loads((path / SEAL).read_text(encoding="utf-8"))
            if not isinstance(seal, dict) or MANIFEST not in seal or _contents(path) != seal:
                return None
        except (OSError, ValueError):
            return None
        return path

    def publish(self, key: str, build: Callable[[Path], Any]) -> Path:
        """Build the entry with ``build(tmp_dir)`` and move it into place atomically; the entry's path.

        If another process published the same key meanwhile, its entry is kept and this build is discarded.
        A damaged entry (no readable manifest) is replaced."""
        final = self.entry(key)
        parent = final.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CacheError(f"cannot create the compile cache directory '{parent}': {err.strerror}; set "
                             "DITRON_CACHE_DIR to a writable directory or DITRON_NO_CACHE=1") from None
        self._clean_stale(parent)
        tmp = parent / f"{TMP_PREFIX}{key[:16]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            build(tmp)
            (tmp / SEAL).write_text(json.dumps(_contents(tmp), sort_keys=True), encoding="utf-8")
            _fsync_dir(tmp)
            for _ in range(2):
                try:
                    os.rename(tmp, final)
                    _fsync_dir(parent)
                    return final
                except OSError as err:
                    if err.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR):
                        raise CacheError(f"cannot write the compile cache entry '{final}': {err.strerror}") \
                            from None
                    if self.lookup(key) is not None:  # another compile won the race: use its entry
                        return final
                    self._remove(final)  # a damaged entry: move it away, then try again
            raise CacheError(f"cannot replace the damaged compile cache entry '{final}'; delete it by hand")
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def discard(self, key: str) -> None:
        """Remove an entry (e.g. one that fails to load), safely against concurrent readers of other entries."""
        self._remove(self.entry(key))

    def _remove(self, path: Path) -> None:
        trash = path.parent / f"{TMP_PREFIX}trash-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    @staticmethod
    def _clean_stale(parent: Path) -> None:
        """Remove temporary directories left by compiles that died more than a day ago."""
        now = time.time()
        for child in parent.glob(f"{TMP_PREFIX}*"):
            try:
                if now - child.stat().st_mtime > STALE_TMP_S:
                    shutil.rmtree(child, ignore_errors=True)
            except OSError:
                pass


def _contents(root: Path) -> dict[str, str]:
    """{path relative to root: sha256} of every file under root but the seal."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel != SEAL and path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
