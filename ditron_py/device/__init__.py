"""ditron.device: write one rank's device-level program in Python (docs/language.md, "The device builder").

A ``Program`` is the schedule every rank runs (rank-generic, docs/device_ir.md): its arguments, its symmetric
buffers and signal pads, and, in program order, chunk copies with their engine, signals, waits, barriers and
launches of kernel templates, each enqueued on a stream. It produces ditron_device IR (``to_mlir``: text that
``ditron-opt`` and ``ditron sim`` read), compiles to an artifact (``compile``: ``ditron.compile`` of that IR) and
runs through the runtime's executor (``run``: real and virtual worlds, CUDA-graph mode, waits that time out naming
rank, stream, pad and slot); ``simulate`` runs it on the CPU for its W ranks (``ditron.sim``).

    import ditron.device as dd
    p = dd.Program("ag_gemm", world_size=4)
    x = p.input("x", (m, k), "bf16")                   # this rank's tensors, in argument order
    w = p.input("w", (k, n), "bf16")
    y = p.output("y", (4 * m, n), "bf16")
    g = p.symmetric("gathered", (4 * m, k), "bf16")    # the same buffer on every rank, peers may address it
    ready = p.signal_pad("ready", 4)                   # i32 slots, zero at allocation
    with p.loop(0, p.num_ranks) as d:                  # host control flow over index values
        q = (p.rank + d) % p.num_ranks
        p.copy(x, g, dst_rank=q, dst_offsets=(p.rank * m, 0), engine="copy_engine", stream=1)
        p.signal(ready, rank=q, slot=p.rank, stream=1)  # release: the copy is visible to whoever sees the epoch
    gemm = p.gemm(4 * m, n, k, wait={"arg": "ready", "rows_per_slot": m})
    p.launch(gemm, [g, w, y, ready, p.epoch], stream=0, sm_budget=32, tile_order="grouped")
    p.barrier()

Index values (``p.rank``, ``p.num_ranks``, ``p.epoch``, loop variables, ints and arithmetic on them: ``+ - * //
%``, ``dd.minimum`` / ``dd.maximum``, comparisons for ``p.if_``) are host values of the program, evaluated per rank
and per call. Signals have release semantics and waits acquire semantics; work on one stream runs in order, work on
different streams only as signals and waits order it. A signal's value and a wait's value default to the epoch (the
number of the call: a slot is ready when it reaches it), so pads need no reset between calls.

Every call is checked where it is made: a wrong dtype or shape, a region outside its buffer, a wait on something
that is not one of the program's pads, a launch with the wrong number of arguments, an unknown engine, stream or
template field raise ``DeviceBuildError`` located at the caller's line (``file:line:col: error: ...``), and the IR
carries the same locations, so the simulator's findings and the verifier's errors name the user's lines too.
"""
from __future__ import annotations

from .emit import compile_jit_kernels, jit_declarations
from .kernel import JIT_KERNELS, JitKernel, Kernel
from .program import Program
from .values import DTYPES, ENGINES, Buffer, DeviceBuildError, Index, Pad, maximum, minimum

__all__ = ["Program", "Buffer", "Pad", "Index", "Kernel", "JitKernel", "DeviceBuildError", "minimum", "maximum",
           "ENGINES", "DTYPES", "jit_declarations", "compile_jit_kernels"]

# the public classes are ditron.device's (their module is the package: reprs, and ditron.compile's check of what
# it was given, name ditron.device, wherever in the package a class is defined)
for _cls in (Program, Buffer, Pad, Index, Kernel, JitKernel, DeviceBuildError):
    _cls.__module__ = __name__
del _cls
