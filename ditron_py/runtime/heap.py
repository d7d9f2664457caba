"""The symmetric heap: the same layout of buffers on every rank, each rank's heap addressable by its peers.

One contiguous byte region per rank holds every symmetric buffer at the same offset on every rank, so a peer's
copy of a buffer is ``heap_base[peer] + offset`` — which is how ``ditron_core.symm_at`` is lowered (a table of
heap bases, ``bases()``). Buffers are laid out once, before anything runs, and reused across calls.

Backends: PyTorch symmetric memory (``torch.distributed._symmetric_memory``, one process per GPU) for real worlds;
one tensor per rank on the same device for virtual worlds.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import DitronRuntimeError
from .world import World

ALIGN = 256  # bytes: keeps 16-byte vector loads and TMA's alignment


@dataclass(frozen=True)
class BufferSpec:
    name: str
    shape: tuple[int, ...]
    dtype: "object"   # torch.dtype
    offset: int       # bytes from the heap base

    @property
    def nbytes(self) -> int:
        import math
        return math.prod(self.shape) * self.dtype.itemsize


class HeapLayout:
    """Where each named buffer lives in the heap. Built before allocation."""

    def __init__(self):
        self.buffers: dict[str, BufferSpec] = {}
        self.size = 0

    def add(self, name: str, shape, dtype) -> BufferSpec:
        if name in self.buffers:
            raise DitronRuntimeError(f"symmetric buffer '{name}' is allocated twice")
        offset = -(-self.size // ALIGN) * ALIGN
        spec = BufferSpec(name, tuple(int(s) for s in shape), dtype, offset)
        self.buffers[name] = spec
        self.size = offset + spec.nbytes
        return spec


class SymmetricHeap:
    """Allocates the layout on every rank of the world (zero-filled), once."""

    def __init__(self, world: World, layout: HeapLayout):
        import torch
        self.world, self.layout = world, layout
        size = max(ALIGN, -(-layout.size // ALIGN) * ALIGN)
        self._handle = None
        if world.is_virtual:
            self._heaps = [torch.zeros(size, dtype=torch.uint8, device=world.device) for _ in range(world.world_size)]
        else:
            import torch.distributed._symmetric_memory as symm_mem
            local = symm_mem.empty(size, dtype=torch.uint8, device=world.device)
            local.zero_()
            self._handle = symm_mem.rendezvous(local, world.group.group_name)
            self._heaps = [self._handle.get_buffer(r, (size,), torch.uint8) if r != world.rank else local
                           for r in range(world.world_size)]
            self._handle.barrier()
        self._bases = torch.tensor([h.data_ptr() for h in self._heaps], dtype=torch.int64, device=world.device)

    def view(self, name: str, rank: int):
        """Buffer ``name`` of rank ``rank`` as a tensor (a peer's buffer is only addressable on GPUs with P2P)."""
        spec = self.layout.buffers[name]
        raw = self._heaps[rank][spec.offset: spec.offset + spec.nbytes]
        return raw.view(spec.dtype).view(spec.shape)

    def bases(self):
        """int64 tensor [world_size] of heap base addresses (the table symm_at reads)."""
        return self._bases

    def barrier(self) -> None:
        if self._handle is not None:
            self._handle.barrier()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.barrier()
        self._heaps, self._handle = [], None
