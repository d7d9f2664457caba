"""The AMD backend: hip:gfx942 (MI300) and hip:gfx950 (MI350), through Triton's HIP stages
(TTIR -> TTGIR -> LLVM IR -> AMDGCN -> hsaco)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...errors import TargetError
from ..base import Backend, BackendOptions
from .facts import VENDOR as FACTS

SCHEDULE_HINTS = ("none", "attention", "memory-bound-attention")


@dataclass(frozen=True)
class AmdOptions(BackendOptions):
    """num_warps (wavefronts of 64), num_stages, num_ctas (must be 1), plus HIP knobs Triton takes: waves_per_eu
    (occupancy hint, 0 = compiler's choice), matrix_instr_nonkdim (MFMA 16 or 32, 0 = auto), kpack (1 or 2),
    schedule_hint."""

    num_stages: int = 2
    waves_per_eu: int = 0
    matrix_instr_nonkdim: int = 0
    kpack: int = 1
    schedule_hint: str = "none"

    MAX_WARPS: ClassVar[int] = 16  # 16 wavefronts x 64 lanes = 1024 threads

    def _validate(self) -> None:
        if self.num_ctas != 1:
            raise TargetError(f"option num_ctas={self.num_ctas}: AMD targets take num_ctas=1")
        if not isinstance(self.waves_per_eu, int) or not 0 <= self.waves_per_eu <= 8:
            raise TargetError(f"option waves_per_eu={self.waves_per_eu!r}: must be an integer from 0 to 8")
        if self.matrix_instr_nonkdim not in (0, 16, 32):
            raise TargetError(f"option matrix_instr_nonkdim={self.matrix_instr_nonkdim!r}: must be 0, 16 or 32")
        if self.kpack not in (1, 2):
            raise TargetError(f"option kpack={self.kpack!r}: must be 1 or 2")
        if not all(h in SCHEDULE_HINTS for h in str(self.schedule_hint).split(",")):
            raise TargetError(f"option schedule_hint={self.schedule_hint!r}: comma-separated values of "
                              f"{', '.join(SCHEDULE_HINTS)}")


class AmdBackend(Backend):
    VENDOR = FACTS.vendor
    OPTIONS = AmdOptions
    BINARY_EXT = FACTS.binary_ext
    ASM_EXT = FACTS.asm_ext
    PRIMITIVES = "ditron.backends.amd.primitives"

    def check_options(self, options: BackendOptions) -> None:
        if self.target.arch == "gfx950" and options.kpack != 1:
            raise TargetError(f"option kpack={options.kpack}: gfx950 takes kpack=1")
