"""CUDA stream memory operations through the driver (ctypes on ``libcuda.so.1``): a stream waits for a 32-bit word
in GPU memory, or writes one, without a kernel and without an SM.

    drv = DriverMemops.load()                     # None where there is no CUDA driver (CPU, ROCm)
    drv.wait_geq(stream.cuda_stream, addr, 3)     # the stream stalls until (int32)(*addr - 3) >= 0
    drv.write(stream.cuda_stream, addr, 7)        # *addr := 7, after a fence over the stream's earlier work
    drv.record(event.cuda_event, stream_handle)   # cuEventRecord: a completion event without torch's Python
                                                  # stream lookup (torch.cuda.Event.record() costs ~7 us, this ~1)
    drv.wait_event(stream_handle, event_handle)   # cuStreamWaitEvent (the eager call plans' fork and join)
    drv.launch_graph(exec_handle, stream_handle, event_handle)  # cuGraphLaunch (a graph replay without torch's
                                                  # wrapper: 2.1 us against CUDAGraph.replay()'s 2.6,
                                                  # benchmarks/bench_host.py), then cuEventRecord
    launch = drv.graph_launcher()                 # the same as one call returning the CUresult: a graph call's
    code = launch(exec_handle, stream_handle, event_handle)  # hot path (compiled where it can be, see below)

    entries = drv.plan_entries()                  # the eager call plans' C path (runtime/eager.py): packed
    cap = entries.make_launch(function, grid, block_x, smem, stream, types, values, varying)  # kernel launches
    code = entries.launch(cap, *changed_values)   # (cuLaunchKernel), fork and join of streams
    code = entries.fork(event, stream, *streams); code = entries.join(stream, event1, stream1, ...)

``graph_launcher`` and ``plan_entries`` are the helper ``hotpath.c`` (both driver calls in one call from Python, a fraction of a
microsecond less per call than two ctypes calls), built once per machine through Triton's run-time helper builder
(as Triton builds its launchers: the C compiler and Python headers Triton needs), else the two ctypes calls;
``plan_entries`` is None without the helper (the plans launch through Triton's launcher and fork and join through
``record`` / ``wait_event`` then).

``cuStreamWaitValue32`` with ``CU_STREAM_WAIT_VALUE_GEQ`` compares cyclically, ``(int32)(*addr - value) >= 0``:
for the small, growing values of signal pads that is ``*addr >= value``, and INT32_MAX (what the watchdog writes to
release blocked waits) satisfies every wait for a value in [0, 2^31). ``cuStreamWriteValue32`` with the default
flags fences the stream's earlier work before the write (release semantics, system scope). Both are captured into
CUDA graphs as memop nodes.

The entry points are resolved once (the ``_v2`` symbols, which CUDA 11.7+ drivers export and which need no
``NVreg_EnableStreamMemOPs``; the unversioned ones otherwise), their argument types bound once, and every call's
CUresult checked: a failure raises ``MemopError`` naming the call and the driver's error name.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import DitronRuntimeError

CU_STREAM_WAIT_VALUE_GEQ = 0x0
CU_STREAM_WRITE_VALUE_DEFAULT = 0x0


class MemopError(DitronRuntimeError):
    """A stream memory operation the driver refused (the CUresult is named)."""


def _bind(lib, names: tuple[str, ...]):
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint)
            fn.restype = ctypes.c_int
            return name, fn
    return None, None


def _handles(lib, name: str):
    """``name`` bound as CUresult name(handle, handle), or None where the driver lacks it."""
    fn = getattr(lib, name, None)
    if fn is not None:
        fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
        fn.restype = ctypes.c_int
    return fn


@functools.cache
def hotpath():
    """The compiled ``hotpath.c`` (module ``ditron_hotpath``), or None where it cannot be built here."""
    try:
        from triton.runtime.build import compile_module_from_src
        source = (Path(__file__).parent / "hotpath.c").read_text()
        return compile_module_from_src(source, "ditron_hotpath")
    except Exception:  # no C compiler or Python headers, an old Triton: the ctypes calls do the same
        return None


def memop_failure(what: str, code: int, name: str, addr: int, value: int) -> MemopError:
    """The error of a refused stream memory operation (``name``: the driver's name of CUresult ``code``)."""
    return MemopError(f"{what}(addr=0x{addr:x}, value={value}) failed: CUresult {code} ({name}); use "
                      "wait_via='kernel' / signal_via='kernel' if this driver cannot run stream memory operations")


PLAN_ENTRY_POINTS = ("cuLaunchKernel", "cuCtxGetCurrent", "cuEventRecord", "cuStreamWaitEvent",
                     "cuStreamWriteValue32", "cuStreamWaitValue32",  # these two: the bound (_v2) symbols
                     "cuMemcpyDtoDAsync_v2", "cuMemcpy2DAsync_v2")


class Program(NamedTuple):
    """A C program (hotpath.c's make_program) and the step descriptors its capsule borrows (kept alive here: a
    capsule that owned them would hide a reference cycle through the executor from the garbage collector)."""
    capsule: Any
    steps: tuple


class PlanEntries:
    """The eager call plans' C path: ``hotpath.c``'s launch, fork and join bound to the driver's entry points (by
    address: ``addresses`` maps each of PLAN_ENTRY_POINTS to one). Each call returns 0 or a nonzero code (see
    hotpath.c); ``launch`` -1: no current context, nothing launched. ``record(event, stream)`` is a fork to no
    stream; ``memops(stream, value, n_writes, *addrs)`` writes ``value`` to the first n_writes addresses, then waits
    for it (>=) at the rest (``memop_error`` names a refused one); ``copy(stream, dst, src, width, height,
    dst_pitch, src_pitch)`` copies height rows of width bytes between device addresses (0 or the CUresult)."""

    def __init__(self, hot, addresses: dict[str, int]):
        self.hot = hot
        self.launch_entry, self.ctx_entry = addresses["cuLaunchKernel"], addresses["cuCtxGetCurrent"]
        record, wait = addresses["cuEventRecord"], addresses["cuStreamWaitEvent"]
        self.launch = hot.launch
        self.fork = functools.partial(hot.fork, record, wait)
        self.join = functools.partial(hot.join, record, wait)
        self.record = self.fork
        self.memops = functools.partial(hot.memops, addresses["cuStreamWriteValue32"],
                                        addresses["cuStreamWaitValue32"])
        self.copy = functools.partial(hot.copy, addresses["cuMemcpyDtoDAsync_v2"], addresses["cuMemcpy2DAsync_v2"])
        self.program_entries = (record, wait, addresses["cuStreamWriteValue32"], addresses["cuStreamWaitValue32"],
                                addresses["cuMemcpyDtoDAsync_v2"], addresses["cuMemcpy2DAsync_v2"], self.ctx_entry)
        self.run = getattr(hot, "run", None)   # run(program, epoch, stream, rows): a plan's whole call

    @staticmethod
    def memop_error(code: int, n_writes: int, addrs: tuple[int, ...], value: int, error_name) -> MemopError:
        """The error of ``memops``' nonzero code (``error_name``: the driver's names of CUresults)."""
        result, index = code >> 8, (code & 0xFF) - 1
        what = "cuStreamWriteValue32" if index < n_writes else "cuStreamWaitValue32"
        return memop_failure(what, result, error_name(result), addrs[index], value)

    def make_program(self, start: int, fork: tuple[int, ...], join: tuple[tuple[int, ...], ...],
                     steps: tuple) -> "Program | None":
        """A plan's whole call as one C program for ``run(program.capsule, epoch, stream, rows)`` (hotpath.c's
        make_program: the fork from ``start``, the steps, the join per ring slot), or None where the helper has no
        programs (an older build). The capsule borrows the steps' objects: the Program holds both."""
        make = getattr(self.hot, "make_program", None)
        steps = tuple(steps)
        return None if make is None else Program(make(self.program_entries, start, fork, join, steps), steps)

    def make_launch(self, function: int, grid: tuple[int, int, int], block_x: int, smem: int, stream: int,
                    types: str, values: tuple, varying: tuple[int, ...]):
        """A launch packed once: ``types`` one code per argument (hotpath.c: b B h H i I q Q), ``values`` their
        values now, ``varying`` the indices of those ``launch(capsule, *values)`` writes per call, in its order."""
        return self.hot.make_launch(self.launch_entry, self.ctx_entry, function, *grid, block_x, smem, stream, types,
                                    tuple(values), tuple(varying))


class DriverMemops:
    """Bound driver entry points for stream waits and writes on 32-bit words (see the module doc)."""

    def __init__(self, lib):
        self._lib = lib
        self.wait_name, self._wait = _bind(lib, ("cuStreamWaitValue32_v2", "cuStreamWaitValue32"))
        self.write_name, self._write = _bind(lib, ("cuStreamWriteValue32_v2", "cuStreamWriteValue32"))
        if self._wait is None or self._write is None:
            raise OSError("libcuda.so.1 has no cuStreamWaitValue32 / cuStreamWriteValue32")
        self._record = _handles(lib, "cuEventRecord")
        self._stream_wait_event = getattr(lib, "cuStreamWaitEvent", None)
        if self._stream_wait_event is not None:
            self._stream_wait_event.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint)
            self._stream_wait_event.restype = ctypes.c_int
        self._graph_launch = _handles(lib, "cuGraphLaunch")
        self._launcher = None  # graph_launcher(), made at the first launch_graph()
        self._error_name = getattr(lib, "cuGetErrorName", None)
        if self._error_name is not None:
            self._error_name.argtypes = (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))
            self._error_name.restype = ctypes.c_int

    @staticmethod
    @functools.cache
    def load() -> "DriverMemops | None":
        """The process's binding (made once), or None where there is no usable CUDA driver."""
        try:
            import torch
            if not torch.version.cuda or getattr(torch.version, "hip", None):
                return None
            return DriverMemops(ctypes.CDLL("libcuda.so.1"))
        except (OSError, ImportError):
            return None

    @functools.cached_property
    def _plan_entries(self) -> "PlanEntries | None":
        addresses = {}
        bound = {"cuStreamWriteValue32": self._write, "cuStreamWaitValue32": self._wait}
        for name in PLAN_ENTRY_POINTS:
            fn = bound[name] if name in bound else getattr(self._lib, name, None)
            if not isinstance(fn, ctypes._CFuncPtr):
                return None
            addresses[name] = ctypes.cast(fn, ctypes.c_void_p).value
        hot = hotpath()
        return None if hot is None else PlanEntries(hot, addresses)

    def plan_entries(self) -> "PlanEntries | None":
        """The eager call plans' C path bound to this driver (made once), or None where the helper cannot be built
        here or the driver lacks an entry point."""
        return self._plan_entries

    def error_name(self, code: int) -> str:
        if self._error_name is not None:
            text = ctypes.c_char_p()
            if self._error_name(code, ctypes.byref(text)) == 0 and text.value:
                return text.value.decode()
        return "CUDA_ERROR_?"

    def _fail(self, what: str, code: int, addr: int, value: int) -> MemopError:
        return memop_failure(what, code, self.error_name(code), addr, value)

    def wait_geq(self, stream: int, addr: int, value: int) -> None:
        """Enqueue on ``stream`` (a CUstream handle): wait until (int32)(*addr - value) >= 0."""
        code = self._wait(stream, addr, value & 0xFFFFFFFF, CU_STREAM_WAIT_VALUE_GEQ)
        if code:
            raise self._fail(self.wait_name, code, addr, value)

    def write(self, stream: int, addr: int, value: int) -> None:
        """Enqueue on ``stream``: fence the stream's earlier work, then *addr := value (mod 2^32)."""
        code = self._write(stream, addr, value & 0xFFFFFFFF, CU_STREAM_WRITE_VALUE_DEFAULT)
        if code:
            raise self._fail(self.write_name, code, addr, value)

    def record(self, event: int, stream: int) -> bool:
        """cuEventRecord(event, stream) (both raw handles); False where the driver lacks it or refuses (the caller
        records through torch then)."""
        return self._record is not None and event != 0 and self._record(event, stream) == 0

    def can_fork(self) -> bool:
        """Whether ``record`` and ``wait_event`` both go through the driver (the eager call plans fork and join
        their streams so: torch's Event.record and Stream.wait_event cost several microseconds each)."""
        return self._record is not None and self._stream_wait_event is not None

    def wait_event(self, stream: int, event: int) -> None:
        """cuStreamWaitEvent(stream, event, 0) (raw handles): later work on ``stream`` waits for the event's latest
        record as of now."""
        code = self._stream_wait_event(stream, event, 0)
        if code:
            raise MemopError(f"cuStreamWaitEvent failed: CUresult {code} ({self.error_name(code)})")

    def graph_launcher(self):
        """``launch(graph_exec, stream, event) -> code``: cuGraphLaunch(graph_exec, stream), then, where ``event`` is
        not 0, cuEventRecord(event, stream) (raw handles); 0, the CUresult of a refused launch, or minus that of a
        refused record (``fail`` raises for it). The compiled helper where there is one, else ctypes. None where
        the driver lacks either entry point."""
        launch, record = self._graph_launch, self._record
        if launch is None or record is None:
            return None
        hot = hotpath() if isinstance(launch, ctypes._CFuncPtr) and isinstance(record, ctypes._CFuncPtr) else None
        if hot is not None:
            return functools.partial(hot.launch_graph, ctypes.cast(launch, ctypes.c_void_p).value,
                                     ctypes.cast(record, ctypes.c_void_p).value)

        def launch_graph(graph_exec: int, stream: int, event: int) -> int:
            code = launch(graph_exec, stream)
            if code or not event:
                return code
            return -record(event, stream)
        return launch_graph

    def fail(self, code: int) -> DitronRuntimeError:
        """The error of a graph launcher's nonzero code."""
        what = "cuGraphLaunch" if code > 0 else "cuEventRecord"
        return DitronRuntimeError(f"{what} failed: CUresult {abs(code)} ({self.error_name(abs(code))})")

    def launch_graph(self, graph_exec: int, stream: int, event: int = 0) -> bool:
        """``graph_launcher()`` as one checked call: False, having done nothing, where the driver lacks an entry
        point or there is no instantiation handle (the caller replays and records through torch then); raises
        DitronRuntimeError when the driver refuses either call."""
        if not graph_exec or self._graph_launch is None or (event and self._record is None):
            return False
        if self._record is None:
            code = self._graph_launch(graph_exec, stream)
        else:
            if self._launcher is None:
                self._launcher = self.graph_launcher()
            code = self._launcher(graph_exec, stream, event)
        if code:
            raise self.fail(code)
        return True


__all__ = ["CU_STREAM_WAIT_VALUE_GEQ", "DriverMemops", "MemopError", "PLAN_ENTRY_POINTS", "PlanEntries", "Program"]
