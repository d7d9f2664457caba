"""CUDA stream memory operations through the driver (ctypes on ``libcuda.so.1``): a stream waits for a 32-bit word
in GPU memory, or writes one, without a kernel and without an SM.

    drv = DriverMemops.load()                     # None where there is no CUDA driver (CPU, ROCm)
    drv.wait_geq(stream.cuda_stream, addr, 3)     # the stream stalls until (int32)(*addr - 3) >= 0
    drv.write(stream.cuda_stream, addr, 7)        # *addr := 7, after a fence over the stream's earlier work
    drv.record(event.cuda_event, stream_handle)   # cuEventRecord: a completion event without torch's Python
                                                  # stream lookup (torch.cuda.Event.record() costs ~7 us, this ~1)
    drv.launch_graph(exec_handle, stream_handle, event_handle)  # cuGraphLaunch (a graph replay without torch's
                                                  # wrapper: 2.1 us against CUDAGraph.replay()'s 2.6,
                                                  # benchmarks/bench_host.py), then cuEventRecord

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


class DriverMemops:
    """Bound driver entry points for stream waits and writes on 32-bit words (see the module doc)."""

    def __init__(self, lib):
        self._lib = lib
        self.wait_name, self._wait = _bind(lib, ("cuStreamWaitValue32_v2", "cuStreamWaitValue32"))
        self.write_name, self._write = _bind(lib, ("cuStreamWriteValue32_v2", "cuStreamWriteValue32"))
        if self._wait is None or self._write is None:
            raise OSError("libcuda.so.1 has no cuStreamWaitValue32 / cuStreamWriteValue32")
        self._record = _handles(lib, "cuEventRecord")
        self._graph_launch = _handles(lib, "cuGraphLaunch")
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

    def error_name(self, code: int) -> str:
        if self._error_name is not None:
            text = ctypes.c_char_p()
            if self._error_name(code, ctypes.byref(text)) == 0 and text.value:
                return text.value.decode()
        return "CUDA_ERROR_?"

    def _fail(self, what: str, code: int, addr: int, value: int) -> MemopError:
        return MemopError(f"{what}(addr=0x{addr:x}, value={value}) failed: CUresult {code} "
                          f"({self.error_name(code)}); use wait_via='kernel' / signal_via='kernel' if this driver "
                          "cannot run stream memory operations")

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

    def launch_graph(self, graph_exec: int, stream: int, event: int = 0) -> bool:
        """cuGraphLaunch(graph_exec, stream), then cuEventRecord(event, stream) where ``event`` is given (raw handles):
        one Python call for a graph call's launch and its completion event. False, having done nothing, where the
        driver lacks an entry point it needs or there is no instantiation handle (the caller replays and records
        through torch then). Raises DitronRuntimeError when the driver refuses either."""
        launch, record = self._graph_launch, self._record
        if launch is None or not graph_exec or (event and record is None):
            return False
        code = launch(graph_exec, stream)
        if code:
            raise DitronRuntimeError(f"cuGraphLaunch failed: CUresult {code} ({self.error_name(code)})")
        if event:
            code = record(event, stream)
            if code:
                raise DitronRuntimeError(f"cuEventRecord failed: CUresult {code} ({self.error_name(code)})")
        return True


__all__ = ["CU_STREAM_WAIT_VALUE_GEQ", "DriverMemops", "MemopError"]
