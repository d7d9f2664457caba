"""The one place that reads ditron's environment variables."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where compiled artifacts are cached: $DITRON_CACHE_DIR, else ~/.cache/ditron."""
    path = os.environ.get("DITRON_CACHE_DIR")
    return Path(path) if path else Path.home() / ".cache" / "ditron"


def cache_disabled() -> bool:
    """$DITRON_NO_CACHE=1 compiles every time."""
    return os.environ.get("DITRON_NO_CACHE", "0") not in ("", "0")


def dump_dir() -> Path | None:
    """$DITRON_DUMP_DIR: when set, every compile writes each stage (ttir, ttgir, llir, ptx, ...) there."""
    path = os.environ.get("DITRON_DUMP_DIR")
    return Path(path) if path else None


def wait_timeout_s() -> float:
    """Seconds a host-side wait may take before it raises WaitTimeoutError: $DITRON_WAIT_TIMEOUT_S, default 10."""
    return float(os.environ.get("DITRON_WAIT_TIMEOUT_S", "10"))


def cuda_max_connections() -> int:
    """$CUDA_DEVICE_MAX_CONNECTIONS (CUDA's own variable, read here only): how many hardware queues the GPU's
    streams share (CUDA's default 8). A virtual world with more streams than queues can block a stream behind
    another's spinning wait."""
    try:
        return int(os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "8"))
    except ValueError:
        return 8


def traceback_enabled() -> bool:
    """$DITRON_TRACEBACK=1: command-line tools print the Python trace of an internal error."""
    return os.environ.get("DITRON_TRACEBACK", "0") not in ("", "0")


def ops_dir() -> Path | None:
    """$DITRON_OPS_DIR: where ``ditron.ops`` looks up (and, with the compiler present, writes) the prebuilt
    artifacts of its ops, one directory per op signature; unset: compile into the compile cache."""
    path = os.environ.get("DITRON_OPS_DIR")
    return Path(path) if path else None


def tuning_cache() -> str | None:
    """$DITRON_TUNING_CACHE: the tuning cache file ditron tune writes and ditron-tile reads (``off``: none); unset:
    tuning.json in ``cache_dir()``."""
    return os.environ.get("DITRON_TUNING_CACHE") or None


def tuning_device() -> str:
    """$DITRON_TUNING_DEVICE: the GPU name (torch.cuda.get_device_name) whose tuning-cache entries ditron-tile
    takes; unset: the latest tuned entry of any GPU of the target."""
    return os.environ.get("DITRON_TUNING_DEVICE", "")
