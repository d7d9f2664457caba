"""Targets: ``cuda:80``, ``cuda:90`` (compiled as sm_90a), ``hip:gfx942``, ``hip:gfx950`` -- those of the vendor
tables (backends/*/facts.py).

A Target is plain data (no Triton import), so that artifacts and the pass options can name one cheaply.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import TargetError


def supported_targets() -> list[str]:
    """Every target of the vendor tables (backends/*/facts.py), by vendor name, then by arch."""
    from .facts import vendors
    return [t.name for v in vendors() for t in sorted(v.targets, key=lambda t: t.arch)]


@dataclass(frozen=True)
class Target:
    """One GPU target. ``arch`` is the compute capability (int) on cuda, the gfx name (str) on hip."""

    vendor: str
    arch: int | str
    warp_size: int

    @classmethod
    def parse(cls, text: "str | Target") -> "Target":
        """'cuda:90' | 'hip:gfx942' (also accepts a Target). Raises TargetError listing the supported targets."""
        if isinstance(text, Target):
            return text
        if not isinstance(text, str):
            raise TargetError(f"a target is a string like 'cuda:90', got {type(text).__name__} {text!r}")
        spec = text.strip().lower()
        if spec != text:  # ' cuda:90', 'CUDA:90': a target is written exactly, or it is not the one meant
            raise TargetError(f"unsupported target {text!r}: targets are written in lower case without spaces "
                              f"(did you mean '{spec}'?); supported targets: {', '.join(supported_targets())}")
        from .facts import lookup
        found = lookup(spec)
        if found is not None:
            return cls(found.vendor, found.arch, found.warp_size)
        raise TargetError(f"unsupported target '{text}'; supported targets: {', '.join(supported_targets())}")

    def __str__(self) -> str:
        return f"{self.vendor}:{self.arch}"

    @property
    def is_nvidia(self) -> bool:
        return self.vendor == "cuda"

    @property
    def is_amd(self) -> bool:
        return self.vendor == "hip"

    def gpu_target(self):
        """The same target as Triton's ``GPUTarget`` (imports triton)."""
        from triton.backends.compiler import GPUTarget
        return GPUTarget(self.vendor, self.arch, self.warp_size)
