"""Worlds: which ranks exist, which of them this process drives, and on which GPU.

* ``World.from_torch()`` — one process per GPU under torchrun / torch.distributed (initialised here from the
  torchrun environment if the caller has not done it).
* ``World.virtual(W)`` — W ranks in this one process on one GPU. Every rank's CTAs must be resident at once (a
  CTA spinning on a signal that a never-scheduled CTA would set is a deadlock), so launches in a virtual world are
  capped by ``cta_budget``; same-GPU copies need SMs too, so a few SMs stay free for them.
Imports torch only (never mlir).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import DitronRuntimeError

# SMs left free in a virtual world for same-GPU copies (cudaMemcpy D2D runs on SMs).
COPY_SM_RESERVE = 4


@dataclass
class World:
    world_size: int
    rank: int | None          # this process's rank; None in a virtual world (it drives all ranks)
    device: "object"          # torch.device
    group: "object" = None    # torch ProcessGroup of a real world
    _owns_group: bool = field(default=False, repr=False)

    @property
    def is_virtual(self) -> bool:
        return self.rank is None

    @property
    def ranks_here(self) -> list[int]:
        """The ranks this process runs."""
        return list(range(self.world_size)) if self.is_virtual else [self.rank]

    def cta_budget(self, num_sms: int) -> int:
        """How many CTAs one rank's launch may keep resident: all of them in a real world; in a virtual world
        an equal share of the SMs left after the copy reserve (at least 1)."""
        if not self.is_virtual:
            return num_sms
        return max(1, (num_sms - COPY_SM_RESERVE) // self.world_size)

    @staticmethod
    def virtual(world_size: int, device: str | int | None = None) -> "World":
        import torch
        if isinstance(world_size, bool) or not isinstance(world_size, int):
            raise DitronRuntimeError(f"world_size must be an int, got {world_size!r}")
        if world_size < 1:
            raise DitronRuntimeError(f"a world needs at least one rank, got world_size={world_size}")
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise DitronRuntimeError(f"World.virtual: device {device!r} is not a torch device ({err})") from None
        return World(world_size, None, device)

    @staticmethod
    def from_torch(group=None, backend: str = "nccl") -> "World":
        """The world of torch.distributed (initialising it from torchrun's environment if needed)."""
        import torch
        import torch.distributed as dist
        owns = False
        if not dist.is_initialized():
            if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
                raise DitronRuntimeError("torch.distributed is not initialised and RANK/WORLD_SIZE are not set: "
                                         "launch with torchrun, or use World.virtual(W) for one process")
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            if torch.cuda.is_available():
                torch.cuda.set_device(local_rank)
            dist.init_process_group(backend if torch.cuda.is_available() else "gloo")
            owns = True
        group = group or dist.group.WORLD
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else \
            torch.device("cpu")
        return World(size, rank, device, group, owns)

    def close(self) -> None:
        """Tear down what this world created (the process group, if it made it)."""
        if self._owns_group:
            import torch.distributed as dist
            if dist.is_initialized():
                dist.barrier()
                dist.destroy_process_group()
            self._owns_group = False
