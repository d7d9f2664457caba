"""The NVIDIA backend: cuda:80 (sm_80) and cuda:90 (sm_90a), through Triton's CUDA stages
(TTIR -> TTGIR -> LLVM IR -> PTX -> cubin)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...errors import TargetError
from ..base import LAUNCH_KEYS, Backend, BackendOptions
from .facts import VENDOR as FACTS


@dataclass(frozen=True)
class NvidiaOptions(BackendOptions):
    """num_warps, num_stages, num_ctas (> 1 only on sm_90: thread-block clusters), plus CUDA knobs Triton takes:
    maxnreg (registers per thread), ptx_version (None: what the bundled ptxas supports), launch_pdl
    (programmatic dependent launch)."""

    num_stages: int = 3
    maxnreg: int | None = None
    ptx_version: int | None = None
    launch_pdl: bool = False

    MAX_WARPS: ClassVar[int] = 32

    def _validate(self) -> None:
        if self.maxnreg is not None and (not isinstance(self.maxnreg, int) or not 16 <= self.maxnreg <= 255):
            raise TargetError(f"option maxnreg={self.maxnreg!r}: must be None or an integer from 16 to 255")
        if self.ptx_version is not None and (not isinstance(self.ptx_version, int) or self.ptx_version < 70):
            raise TargetError(f"option ptx_version={self.ptx_version!r}: must be None or an integer like 86 "
                              "(PTX ISA 8.6)")


class NvidiaBackend(Backend):
    VENDOR = FACTS.vendor
    OPTIONS = NvidiaOptions
    BINARY_EXT = FACTS.binary_ext
    ASM_EXT = FACTS.asm_ext
    PRIMITIVES = "ditron.backends.nvidia.primitives"
    LAUNCH_KEYS = LAUNCH_KEYS + ("global_scratch_size", "global_scratch_align", "launch_pdl", "tensordesc_meta")

    def check_options(self, options: BackendOptions) -> None:
        if options.num_ctas > 1 and self.target.arch < 90:
            raise TargetError(f"option num_ctas={options.num_ctas} needs thread-block clusters (sm_90+); "
                              f"target {self.target} takes num_ctas=1")
