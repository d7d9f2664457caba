"""The interface a collective's lowering sees of the function being lowered (ditron-lower-task-to-device): the
device builder, the task value -> memref map, which memrefs are symmetric or function inputs, and the
function-wide facts a collective records (it crosses ranks, how much a signal slot grows per call, the gather
patterns' ids). ``_FunctionLowering`` implements it; the collectives use nothing else of it."""
from __future__ import annotations

import abc
from typing import Sequence

from mlir import ir

from ...dialects import device
from ...errors import PassError
from ...kernels import KernelRecord
from ..device_builder import DeviceBuilder


class LoweringContext(abc.ABC):
    """What a registered collective lowering may read and change of the function it lowers into."""

    b: DeviceBuilder  # builds at the current op's location

    @abc.abstractmethod
    def error(self, op: ir.Operation, message: str) -> PassError:
        """A located PassError of this pass at op (to raise)."""

    @abc.abstractmethod
    def buf(self, v: ir.Value) -> ir.Value:
        """The memref holding task value v."""

    @abc.abstractmethod
    def dest(self, v: ir.Value, name: str) -> ir.Value:
        """The memref that will hold task value v: its "out" argument if v is returned, else a new symmetric
        buffer named ``name``."""

    @abc.abstractmethod
    def bind(self, v: ir.Value, m: ir.Value) -> None:
        """Task value v lives in memref m from now on (e.g. a fused GEMM's result in a symmetric partial)."""

    @abc.abstractmethod
    def alloc_symmetric(self, shape: Sequence[int], element_type: ir.Type, name: str) -> ir.Value:
        """A new symmetric buffer (peers may read or write it through symm_at)."""

    @abc.abstractmethod
    def is_symmetric(self, m: ir.Value) -> bool:
        """m is a symmetric buffer (not a function argument)."""

    @abc.abstractmethod
    def is_input(self, m: ir.Value) -> bool:
        """m is an "in" argument (ready at the start of the call: no lane needs to wait for its producer)."""

    @abc.abstractmethod
    def crosses(self, *, inbox: ir.Value | None = None) -> None:
        """Record a cross-rank collective. ``inbox``: it fences itself (peers only store into this buffer and
        signal this rank's pads, and every rank waits, every call, on every peer's stores): no end barrier once
        the inbox rotates; None: it needs the end-of-program barrier."""

    @abc.abstractmethod
    def grow_slot_step(self, step: int) -> None:
        """Some signal slot grows by up to ``step`` per call (bounds the epochs whose values fit the i32 pads)."""

    @abc.abstractmethod
    def next_gather_id(self) -> int:
        """A new id for an all-gather pattern of this function (``ditron.gather``: the ring rewrite's unit)."""

    @abc.abstractmethod
    def epilogue(self, mm: ir.Operation) -> tuple[list | None, list[ir.Value], ir.Type]:
        """Matmul mm's fused epilogue (ditron-fuse-epilogue): (the GEMM record's ``epilogue`` steps or None, the
        memrefs of the steps' operands, to pass after the GEMM's other arguments, the type its C is stored in)."""

    @abc.abstractmethod
    def launch(self, record: KernelRecord, args: Sequence[ir.Value], *, lane: str, role: str,
               group: int | None = None) -> device.Launch:
        """Launch the record's kernel (declared once per distinct record), with a GEMM's scratch buffers."""

    @abc.abstractmethod
    def local_copy(self, src: ir.Value, dst: ir.Value, *, lane: str) -> None:
        """Copy the whole of src into dst on this rank (the copy engine)."""
