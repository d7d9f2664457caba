"""The symmetric heap: the same layout of buffers on every rank, each rank's heap addressable by its peers.

One contiguous byte region per rank holds every symmetric buffer at the same offset on every rank, so a peer's
copy of a buffer is ``heap_base[peer] + offset`` — which is how ``ditron_core.symm_at`` is lowered (a table of
heap bases, ``bases()``). Buffers are laid out once, before anything runs, and reused across calls.

``program_layout`` lays out a host program's buffers: in program order (eager executors), or, for CUDA-graph
executors, with every signal pad twice — parity 0 under its own name, parity 1 as ``name@1`` — the data buffers
first, then each parity's pads side by side, so that one memset clears a parity's pads (``HeapLayout.span``).
A rotating buffer (a push's inbox in a program without an end barrier) is held twice in either mode.

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

    def span(self, names) -> tuple[int, int]:
        """(offset, nbytes) of the smallest byte range holding every named buffer (gaps between them included)."""
        specs = [self.buffers[n] for n in names]
        if not specs:
            return 0, 0
        start = min(s.offset for s in specs)
        return start, max(s.offset + s.nbytes for s in specs) - start


PARITY_SEP = "@"


def parity_name(name: str, parity: int) -> str:
    """The heap name of a buffer's copy for one parity: the buffer's own name for 0, ``name@1`` for 1."""
    return name if parity == 0 else f"{name}{PARITY_SEP}{parity}"


def program_layout(buffers, pads, parities: int = 1, rotating=()) -> tuple[HeapLayout, list[list[str]]]:
    """The heap layout of a program's symmetric buffers ``buffers`` ([(name, shape, torch dtype)] in program
    order; ``pads``: the indices of the signal pads; ``rotating``: the indices of the data buffers held twice,
    call e using copy e % 2) and, per parity, the heap name of each buffer index.

    ``parities=1`` (eager executors): the pads once, in program order with the data buffers. ``parities=2``
    (CUDA-graph mode): the data buffers in program order, then the parity-0 pads, then the parity-1 pads
    (``parity_name``), so that one memset clears a parity's pads. A rotating buffer's second copy follows its
    first; with rotating buffers there are two parities of names either way (the pads of an eager layout have
    one name in both)."""
    if parities not in (1, 2):
        raise DitronRuntimeError(f"a heap layout has 1 or 2 parities of signal pads, not {parities}")
    layout = HeapLayout()
    pads, rotating = set(pads), set(rotating)
    if pads & rotating:
        raise DitronRuntimeError("a signal pad cannot rotate (its parities are the executor's)")
    copies = 2 if parities == 2 or rotating else 1
    names = [[name for name, _, _ in buffers] for _ in range(copies)]
    for j, (name, shape, dtype) in enumerate(buffers):
        if j in rotating:
            for p in range(copies):
                names[p][j] = parity_name(name, p)
                layout.add(names[p][j], shape, dtype)
        elif j not in pads or parities == 1:
            layout.add(name, shape, dtype)
    for p in range(parities if parities == 2 else 0):
        for j, (name, shape, dtype) in enumerate(buffers):
            if j in pads:
                names[p][j] = parity_name(name, p)
                layout.add(names[p][j], shape, dtype)
    return layout, names


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

    def raw(self, rank: int, offset: int, nbytes: int):
        """Bytes [offset, offset + nbytes) of rank ``rank``'s heap as a uint8 tensor."""
        return self._heaps[rank][offset: offset + nbytes]

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
