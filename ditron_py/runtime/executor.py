"""Run a host program on GPUs with torch + triton only (never the MLIR bindings).

    exe = ditron.load("out/")                                  # an artifact with a host program
    world = ditron.runtime.world.World.virtual(4)              # or World.from_torch() under torchrun
    outs = exe.run(world, [[x0, w], [x1, w], [x2, w], [x3, w]])  # virtual: inputs per rank; real: [x, w]

One ``Executor`` per (executable, world), made on first use and reused: its symmetric heap (every
``alloc_symmetric`` of the program, zeroed once, ``SymmetricHeap``), its streams (one per rank and stream index,
created once, non-blocking), its error records, and the warm-up: every kernel loaded on the GPU and the wait bound
calibrated before anything runs (loading a kernel while another spins deadlocked on the H200).

Each call (``run``) bumps the epoch (1, 2, ...), allocates the outputs, makes every stream wait for the caller's
current stream, then enqueues each local rank's trace (``HostProgram.trace``) in program order:

* ``copy`` -> ``dst[region].copy_(src[region])`` on the op's stream (copy engine; same-GPU copies run on SMs);
  peer buffers are the peers' heap views.
* ``signal`` -> "set": the stream write-value memop (``cuStreamWriteValue32``: a system fence precedes the write,
  no SM needed) through the driver (``memops``), else through torch's symmetric-memory binding; else, and for
  "add", the runtime signal kernel (a release atomic on the peer's slot).
* ``wait`` -> one driver stream wait per slot (``cuStreamWaitValue32`` GEQ, ``memops``: no kernel, no SM) where the
  CUDA driver is (``wait_via="auto"|"memop"``); else (``"kernel"``) the runtime wait kernel (one program spinning
  with acquire loads, bounded, see ``timeouts``).
* ``barrier`` -> arrival n: every rank's slot <rank> := n, then wait for slots 0..W-1 >= n.
* ``launch`` -> the kernel through Triton's launcher, operands bound positionally to its ABI (memrefs as
  pointers, index values as i32), then rank / num_ranks / heap_bases / wait_bound / wait_err / wait_tag by kind
  (a kernel that spins in-kernel gives up after max_iters polls and records it like the wait kernel).

Then the caller's stream waits for every stream, so results are ordered before later work on it. ``sync=True``
(default) also waits on the host, with the watchdog, and checks the error records. A memop wait has no in-kernel
bound: with ``sync=False`` a stuck one is found by the next ``synchronize`` (or ``close``), whose watchdog releases
it (INT32_MAX satisfies every GEQ wait) and raises.

``graph=True`` (decided at creation; see ``graphs``): each call replays a CUDA graph of the program traced once with
epoch 1, on parity e % 2 of two sets of signal pads (the call zeroes its own pads of the other parity first), so a
call costs one graph launch and one event on the host.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Sequence

from .. import env
from ..errors import DitronRuntimeError, WaitTimeoutError
from ..schema import USER_ARG_KINDS
from .callplan import EpochTraces
from .graphs import BoundCall, GraphCall, GraphRunner, check_graph_program
from .heap import SymmetricHeap, program_layout
from .memops import DriverMemops, MemopError
from .program import (DTYPES, BarrierAction, Buf, CopyAction, HostProgram, HostProgramError, LaunchAction,
                      SignalAction, WaitAction, slot_runs)
from .timeouts import DRAIN_S, SILENT_STALL_FACTOR, Blocked, Milestone, Watch, raise_silent_stall, timeout_message
from .world import World

INT32_MAX = (1 << 31) - 1
MAX_POLLS = 1 << 62       # the wait kernel's poll counter is 64-bit
# poll counts used to measure the wait kernel's poll rate at warm-up
CALIBRATE_POLLS = (2_000, 20_000)
# pad, first, count, value, max_iters, err, tag (ditron.hostprog builds the kernel)
WAIT_KERNEL_TYPES = ("*i32", "i32", "i32", "i32", "i64", "*i32", "i32")
ERR_FIELDS = 4            # per rank: [timed-out waits, last tag, last value seen, unused]
TRITON_POINTEE = {"bf16": "bf16", "fp16": "f16", "fp32": "f32", "fp64": "f64", "i1": "i1", "i8": "i8",
                  "i16": "i16", "i32": "i32", "i64": "i64", "fp8e4nv": "f8E4M3FN", "fp8e5": "f8E5M2",
                  "u8": "i8", "u32": "i32", "u64": "i64"}


def torch_dtype(name: str):
    import torch
    return getattr(torch, DTYPES[name][0])


def _new_stream(device):
    """A new non-blocking stream of its own: created through the driver (torch's stream pool hands out the same 32
    streams round-robin, and two ranks sharing a stream would deadlock when one spins); the pool otherwise."""
    import ctypes

    import torch
    if torch.version.cuda:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            handle = ctypes.c_void_p()
            with torch.cuda.device(device):
                torch.cuda.current_stream()  # the primary context is current on this thread
                if lib.cuStreamCreate(ctypes.byref(handle), 1) == 0:  # CU_STREAM_NON_BLOCKING
                    return torch.cuda.ExternalStream(handle.value, device=device), (lib, handle)
        except OSError:
            pass
    return torch.cuda.Stream(device=device), None


def _device_of(world: World):
    """The world's GPU as a torch.device with an index; DitronRuntimeError when it is not a GPU."""
    import torch
    device = torch.device(world.device)
    if device.type != "cuda":
        raise DitronRuntimeError(f"executing a host program needs a GPU; the world's device is {device}")
    return device if device.index is not None else torch.device("cuda", torch.cuda.current_device())


def _pinned(t):
    """t in page-locked host memory (so that copies to and from the GPU are asynchronous), where CUDA is."""
    import torch
    return t.pin_memory() if torch.cuda.is_available() else t


def driver_memops() -> DriverMemops | None:
    """The CUDA driver's stream wait/write binding, or None where there is no driver (CPU, ROCm)."""
    return DriverMemops.load()


def stream_write_value32():
    """torch's stream write-value (``cuStreamWriteValue32`` with a system fence before the write; takes a flat
    uint32 tensor, an element offset and a value in [0, 2^32)) as a callable, or None where torch lacks it."""
    import torch
    if not torch.version.cuda or getattr(torch.version, "hip", None):
        return None
    try:
        return torch.ops.symm_mem.stream_write_value32_
    except (AttributeError, RuntimeError):
        pass
    try:
        from torch.distributed._symmetric_memory import _SymmetricMemory
    except ImportError:
        return None
    return getattr(_SymmetricMemory, "stream_write_value32", None)


class Executor:
    """Runs one executable's host program in one world (see the module doc)."""

    def __init__(self, exe: Any, world: World, *, signal_via: str = "auto", wait_via: str = "auto",
                 graph: bool = False, timeout_s: float | None = None):
        import torch
        if exe.host_program is None:
            raise DitronRuntimeError(f"{exe.path or 'this executable'} has no host program: it holds core-level "
                                     "kernels only; launch them with exe.kernels[name][grid](...)")
        for option, value in (("signal_via", signal_via), ("wait_via", wait_via)):
            if value not in ("auto", "memop", "kernel"):
                raise DitronRuntimeError(f"{option}='{value}': choose 'auto', 'memop' or 'kernel'")
        if not isinstance(graph, bool):
            raise DitronRuntimeError(f"graph={graph!r}: pass True (CUDA-graph replay) or False (eager)")
        # A memop node costs ~2.5 us of host time at every launch of a CUDA graph, a kernel node ~0.4 us (H200:
        # 20 write memops 50 us, 20 wait memops 33 us, 20 kernels 9 us per replay). But a graph may not run a
        # side stream's kernel beside a kernel that spins waiting for it (seen: GEMM+RS deadlocked with its comm
        # lane's wait and signal kernels), and a memop needs no SM. So graphs use the kernels on stream 0, where
        # nothing spins beside them (stream 0's own launches are finished; side streams use memops), and memops
        # on side streams.
        self._stream0_kernels = (graph and signal_via == "auto", graph and wait_via == "auto")
        self.exe, self.world = exe, world
        self.program = HostProgram(exe.host_program)
        self.graph = graph
        self.W, self.ranks = world.world_size, world.ranks_here
        if self.program.world_size not in (None, self.W):  # its num_ranks and peers would be wrong
            raise DitronRuntimeError(f"{exe.path or 'this executable'}: a world of {self.W} rank(s) cannot run "
                                     f"@{self.program.name}: it is written for {self.program.describe_world()}")
        # graph mode is refused before anything is allocated when the program cannot be replayed
        self._graph_traces = check_graph_program(self.program, self.ranks, self.W,
                                                  not world.is_virtual) if graph else None
        self.device = _device_of(world)
        self.timeout_s = env.wait_timeout_s() if timeout_s is None else float(timeout_s)
        self.epoch = 0
        self._broken: str | None = None
        self._closed = False
        self._owned_streams: list[Any] = []
        self._capturing = False
        # graph capture: per rank, (the call's final barrier, the rank's pads of the other parity it zeroes)
        self._final_clear: dict[int, tuple[Any, Any]] = {}
        with torch.cuda.device(self.device):
            self._setup(signal_via, wait_via)

    # ------------------------------------------------------------------------------------------ set-up
    def _setup(self, signal_via: str, wait_via: str) -> None:
        import torch
        prog = self.program
        self.num_sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        self.cta_budget = self.world.cta_budget(self.num_sms)
        self._check_kernels()
        self._pads = [j for j, a in enumerate(prog.allocs) if a.dtype == "i32" and len(a.shape) == 1]
        self._rotates = any(a.rotate for a in prog.allocs)
        layout, names = program_layout([(a.name, a.shape, torch_dtype(a.dtype)) for a in prog.allocs], self._pads,
                                       2 if self.graph else 1, [j for j, a in enumerate(prog.allocs) if a.rotate])
        self.heap = SymmetricHeap(self.world, layout)
        # per parity (one in eager mode unless buffers rotate): views, uint32 views and addresses of every buffer
        self._parity_views = [{(j, r): self.heap.view(names[p][j], r) for j in range(len(prog.allocs))
                               for r in range(self.W)} for p in range(len(names))]
        self._parity_u32 = [{(j, r): v[(j, r)].view(torch.uint32) for j in self._pads for r in range(self.W)}
                            for v in self._parity_views]
        self._parity_ptr = [{(j, r): v[(j, r)].data_ptr() for j in self._pads for r in range(self.W)}
                            for v in self._parity_views]
        self._pad_spans = [layout.span([names[p][j] for j in self._pads]) for p in range(len(names))]
        self._use_parity(0)
        self.streams: dict[tuple[int, int], Any] = {}
        for r in self.ranks:
            for s in prog.streams:
                self.streams[(r, s)] = self._stream()
        self._diag = self._stream()
        self._check_connections()
        self._err = torch.zeros((len(self.ranks), ERR_FIELDS), dtype=torch.int32, device=self.device)
        self._err_host = _pinned(torch.zeros(self._err.shape, dtype=torch.int32))
        pad_bytes = sum(prog.allocs[j].nbytes for j in self._pads) * len(self.ranks) * len(self._parity_views)
        self._pads_host = _pinned(torch.zeros(max(1, pad_bytes // 4), dtype=torch.int32))
        self._release = _pinned(torch.full((max([prog.allocs[j].shape[0] for j in self._pads] or [1]),), INT32_MAX,
                                           dtype=torch.int32))
        self._barriers: dict[tuple[int, int], int] = {}
        self._tags: dict[int, tuple[int, WaitAction, tuple[int, ...], int, int]] = {}
        self._pinned_tags: dict[int, tuple[int, Any, tuple[int, ...], int, int]] = {}  # tags baked into graphs
        self._next_tag = 1
        self._checked_sites: set[tuple[int, int]] = set()
        self.watch = Watch()
        self._choose_memops(signal_via, wait_via)
        self._plans = {name: self._abi_plan(name) for name in prog.kernels}
        self._scratch = self._scratch_arena()
        self.exe.warmup()  # every kernel loaded before anything can spin
        self._warm_copies()
        self.max_iters = self._calibrate()
        self._graphs = GraphRunner(self, signal_via, wait_via) if self.graph else None
        self._eager_traces = {r: EpochTraces(prog, r, self.W) for r in self.ranks} if not self.graph else {}
        self.heap.barrier()

    def _use_parity(self, parity: int) -> None:
        """Bind the signal pads and rotating buffers of one parity (graph mode captures each parity's graph with
        its own; an eager call e binds parity e % 2, where only rotating buffers differ)."""
        self._views = self._parity_views[parity]
        self._pad_u32 = self._parity_u32[parity]
        self._pad_ptr = self._parity_ptr[parity]

    def _choose_memops(self, signal_via: str, wait_via: str) -> None:
        """Driver memops for stream waits (and "set" signals) where the driver runs them (probed once), torch's
        write-value for signals where it is not, the runtime kernels otherwise or when asked."""
        drv = driver_memops() if (signal_via, wait_via) != ("kernel", "kernel") else None
        if drv is not None:
            problem = self._probe_memops(drv)
            if problem is not None:
                if "memop" in (signal_via, wait_via):
                    raise MemopError(f"the CUDA driver's stream memory operations do not work here: {problem}; use "
                                     "signal_via='kernel' and wait_via='kernel'")
                warnings.warn(f"stream memory operations do not work here ({problem}): the executor uses its wait "
                              "and signal kernels", RuntimeWarning, stacklevel=5)
                drv = None
        if wait_via == "memop" and drv is None:
            raise DitronRuntimeError("wait_via='memop' needs the CUDA driver's cuStreamWaitValue32 (libcuda.so.1), "
                                     "which is not available here; use 'kernel' or 'auto'")
        self._memops = drv if wait_via != "kernel" else None
        self.wait_memop = self._memops is not None
        self._signal_drv = drv if signal_via != "kernel" else None
        memop = stream_write_value32() if signal_via != "kernel" and self._signal_drv is None else None
        if signal_via == "memop" and self._signal_drv is None and memop is None:
            raise DitronRuntimeError("signal_via='memop': neither the CUDA driver (cuStreamWriteValue32) nor this "
                                     "torch (torch.ops.symm_mem.stream_write_value32_) has a stream write-value; "
                                     "use 'kernel' or 'auto'")
        self._write_value = memop
        self.signal_memop = self._signal_drv is not None or self._write_value is not None

    def _probe_memops(self, drv: DriverMemops) -> str | None:
        """Write, wait for and write a scratch word on a side stream; what went wrong, or None."""
        import torch
        word = torch.zeros(2, dtype=torch.int32, device=self.device)
        torch.cuda.synchronize(self.device)
        try:
            h = self._diag.cuda_stream
            drv.write(h, word.data_ptr(), 1)
            drv.wait_geq(h, word.data_ptr(), 1)
            drv.write(h, word.data_ptr() + 4, 2)
        except MemopError as err:
            return str(err)
        self._diag.synchronize()
        got = word.tolist()
        return None if got == [1, 2] else f"a probe wrote [1, 2] and read back {got}"

    def _stream(self):
        stream, owned = _new_stream(self.device)
        if owned is not None:
            self._owned_streams.append(owned)
        return stream

    def _check_connections(self) -> None:
        limit = env.cuda_max_connections()
        n = len(self.streams) + 1
        if self.world.is_virtual and n > limit:
            warnings.warn(f"{n} streams share {limit} hardware queues (CUDA_DEVICE_MAX_CONNECTIONS={limit}): a "
                          "spinning wait may block an unrelated stream queued behind it. Set "
                          "CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts", RuntimeWarning, stacklevel=4)

    def _kernel(self, name: str):
        try:
            return self.exe.kernels[name]
        except KeyError:
            raise DitronRuntimeError(f"the host program of {self.exe.path or 'this executable'} launches "
                                     f"'{name}', which the artifact does not hold (kernels: "
                                     f"{', '.join(self.exe.kernels)}); recompile it") from None

    def _check_kernels(self) -> None:
        prog = self.program
        for name in [*prog.kernels, *([prog.wait_kernel] if prog.wait_kernel else []),
                     *([prog.barrier_kernel] if prog.barrier_kernel else []), *prog.signal_kernels.values()]:
            self._kernel(name)
        if prog.wait_kernel is None and self._has_op((WaitAction, BarrierAction)):
            raise DitronRuntimeError("the host program waits but its artifact has no runtime wait kernel; "
                                     "recompile it with this ditron")
        if prog.wait_kernel is not None:
            types = [a.type for a in self._kernel(prog.wait_kernel).args]
            if types != list(WAIT_KERNEL_TYPES):
                raise DitronRuntimeError(f"the runtime wait kernel of {self.exe.path or 'this executable'} takes "
                                         f"({', '.join(types)}), this ditron passes ({', '.join(WAIT_KERNEL_TYPES)}); "
                                         "recompile the artifact with this ditron")

    def _has_op(self, kinds) -> bool:
        return any(isinstance(a, kinds) for r in range(min(self.W, 2)) for a in self.program.trace(r, self.W, 1))

    def _zero(self, stream, t) -> None:
        """Enqueue t := 0 on ``stream`` (graph mode's parity reset; a graph node when captured)."""
        import torch
        if t.numel():
            torch.cuda.set_stream(stream)
            t.zero_()

    def _abi_plan(self, name: str) -> list[tuple[str, str, str]]:
        """(kind, type, name) per kernel argument, in order; user arguments (pointer/scalar) come first."""
        plan = [(a.kind, a.type, a.name) for a in self._kernel(name).args]
        kinds = [k for k, _, _ in plan]
        n_user = sum(k in USER_ARG_KINDS for k in kinds)
        if any(k not in USER_ARG_KINDS for k in kinds[:n_user]):
            raise DitronRuntimeError(f"kernel '{name}': its ABI lists appended arguments before its own ones")
        return plan

    def _scratch_arena(self) -> dict[tuple[int, int], Any]:
        """Global scratch (device-side TMA descriptors) per (rank, launch site), allocated now: an allocation while
        a kernel spins can deadlock."""
        import torch
        need: dict[tuple[int, int], int] = {}
        for r in self.ranks:
            for a in self.program.trace(r, self.W, 1):
                if isinstance(a, LaunchAction):
                    md = self._kernel(a.kernel).metadata
                    size = getattr(md, "global_scratch_size", 0) or 0
                    if size > 0:
                        ctas = getattr(md, "num_ctas", 1) or 1
                        need[(r, a.site)] = -(-size * ctas * math.prod(a.grid) // 256) * 256
        if not need:
            return {}
        arena = torch.empty(sum(need.values()), dtype=torch.uint8, device=self.device)
        out, offset = {}, 0
        for key, size in need.items():
            out[key] = arena[offset: offset + size]
            offset += size
        self._arena = arena
        return out

    def _warm_copies(self) -> None:
        """Run each copy of the first call once on scratch tensors of the same sizes, strides and type: a region
        copy that is not one contiguous block runs one of torch's copy kernels, whose module CUDA loads lazily --
        and a module load while a kernel spins can deadlock."""
        import torch
        seen = set()
        for r in self.ranks:
            for a in self.program.trace(r, self.W, 1):
                if not isinstance(a, CopyAction) or 0 in a.sizes:
                    continue
                views = []
                for b, off in ((a.src, a.src_off), (a.dst, a.dst_off)):
                    info = self.program.allocs[b.index] if b.kind == "sym" else self.program.args[b.index]
                    if -1 in info.shape or len(off) != len(info.shape):
                        break
                    strides = [math.prod(info.shape[d + 1:]) for d in range(len(info.shape))]
                    views.append((tuple(a.sizes), tuple(strides), info.dtype))
                if len(views) != 2 or tuple(views) in seen:
                    continue
                seen.add(tuple(views))
                src, dst = (torch.empty_strided(size, stride, dtype=torch_dtype(dt), device=self.device)
                            for size, stride, dt in views)
                dst.copy_(src)
        torch.cuda.synchronize(self.device)

    def _calibrate(self) -> int:
        """Polls of the wait kernel that last 1.5 timeouts (measured at warm-up; at least 10^4)."""
        import torch
        if self.program.wait_kernel is None:
            return MAX_POLLS
        kernel = self._kernel(self.program.wait_kernel).triton_kernel
        pad = torch.zeros(4, dtype=torch.int32, device=self.device)
        err = torch.zeros(ERR_FIELDS, dtype=torch.int32, device=self.device)
        torch.cuda.synchronize(self.device)  # the zeros (on the caller's stream) are there; nothing spins yet
        stream = self._diag
        times = []
        for polls in CALIBRATE_POLLS:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            kernel[(1, 1, 1)](pad, 0, 1, 1, polls, err, 0, stream=stream.cuda_stream)
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        per_poll = max((times[1] - times[0]) / (CALIBRATE_POLLS[1] - CALIBRATE_POLLS[0]), 1e-9)
        self.poll_seconds = per_poll
        return int(min(MAX_POLLS, max(10_000, 1.5 * self.timeout_s / per_poll)))

    # ------------------------------------------------------------------------------------------ calls
    def run(self, inputs: Sequence[Any], outputs: Sequence[Any] | None = None, *, sync: bool = True):
        """Run one call. Virtual world: ``inputs[r]`` lists rank r's input tensors (the "in" arguments in order);
        real world: ``inputs`` lists this rank's. Outputs come back in the same shape (allocated here unless
        ``outputs`` gives them). ``sync``: wait for completion on the host (with the watchdog).

        Everything that can fail (operands, regions, slots) is checked for every local rank before anything is
        enqueued: a rank left half-enqueued would leave its peers spinning."""
        import torch
        self._check_usable()
        if self._graphs is not None:
            return self._graphs.run(inputs, outputs, sync)
        with torch.cuda.device(self.device):
            tensors, result = self._bind_io(inputs, outputs)
            epoch = self.epoch + 1
            if self._rotates:
                self._use_parity(epoch & 1)
            work = []
            for r in self.ranks:
                for a in self._eager_traces[r].trace(epoch):  # callplan.EpochTraces: traced once
                    if (r, a.site) not in self._checked_sites:
                        self._check_action(r, a)
                    work.append(self._prepare(r, a, tensors[r]))
            self.epoch = epoch
            self.watch.prune()
            current = torch.cuda.current_stream(self.device)
            start = torch.cuda.Event()
            start.record(current)
            for s in self.streams.values():
                s.wait_event(start)
            try:
                for enqueue in work:
                    enqueue()
            finally:
                torch.cuda.set_stream(current)
            for (r, s), stream in self.streams.items():
                end = torch.cuda.Event()
                end.record(stream)
                current.wait_event(end)
                self.watch.add((r, s), Milestone(end, r, s, None, epoch))
            if sync:
                self._synchronize()
        return result

    __call__ = run

    def bind(self, inputs: Sequence[Any], outputs: Sequence[Any] | None = None) -> BoundCall:
        """Graph mode: ``inputs`` and ``outputs`` (as for ``run``) bound once, checked in full; ``bound(sync=...)``
        then runs one call with them for the host cost of a graph replay and its event. The tensors must keep
        their storage while bound."""
        self._check_usable()
        if self._graphs is None:
            raise DitronRuntimeError("bind() replays CUDA graphs: make the executor with graph=True")
        return BoundCall(self._graphs, self._graphs.entry(inputs, outputs), inputs, outputs)

    def _check_usable(self) -> None:
        if self._closed:
            raise DitronRuntimeError("this executor is closed")
        if self._broken:
            raise DitronRuntimeError(f"this executor cannot run again: {self._broken}")

    def synchronize(self) -> None:
        """Wait on the host for every call enqueued so far (with the watchdog) and check the error records."""
        import torch
        with torch.cuda.device(self.device):
            self._synchronize()

    def _bind_io(self, inputs, outputs) -> tuple[dict[int, list[Any]], Any]:
        import torch
        prog = self.program
        per_rank_in = self._per_rank(inputs, "inputs", len(prog.inputs))
        per_rank_out = None if outputs is None else self._per_rank(outputs, "outputs", len(prog.outputs))
        tensors: dict[int, list[Any]] = {}
        results = []
        for i, r in enumerate(self.ranks):
            slots: list[Any] = [None] * (len(prog.args) - 1)
            for spec, x in zip(prog.inputs, per_rank_in[i]):
                slots[spec.index] = self._checked(x, spec, r, "input")
            outs = []
            for k, spec in enumerate(prog.outputs):
                if per_rank_out is not None:
                    y = self._checked(per_rank_out[i][k], spec, r, "output", contiguous=True)
                else:
                    if -1 in spec.shape:
                        raise DitronRuntimeError(f"output argument {spec.index} has a dynamic shape "
                                                 f"{list(spec.shape)}: pass outputs=")
                    y = torch.empty(spec.shape, dtype=torch_dtype(spec.dtype), device=self.device)
                slots[spec.index] = y
                outs.append(y)
            tensors[r] = slots
            results.append(outs)
        return tensors, (results if self.world.is_virtual else results[0])

    def _per_rank(self, given, what: str, n: int) -> list[list[Any]]:
        given = list(given)
        if self.world.is_virtual:
            if len(given) != self.W or not all(isinstance(g, (list, tuple)) for g in given):
                raise DitronRuntimeError(f"{what}: a virtual world of {self.W} rank(s) takes one list of tensors "
                                         f"per rank, got {len(given)} item(s)")
            per = [list(g) for g in given]
        else:
            per = [given]
        for r, g in zip(self.ranks, per):
            if len(g) != n:
                raise DitronRuntimeError(f"{what} of rank {r}: the program takes {n}, got {len(g)}")
        return per

    def _checked(self, x, spec, rank: int, what: str, contiguous: bool = False):
        import torch
        if not isinstance(x, torch.Tensor):
            raise DitronRuntimeError(f"{what} argument {spec.index} of rank {rank}: expected a tensor, got "
                                     f"{type(x).__name__}")
        want = torch_dtype(spec.dtype)
        shape_ok = len(x.shape) == len(spec.shape) and all(w in (-1, s) for w, s in zip(spec.shape, x.shape))
        if x.dtype != want or not shape_ok or x.device != self.device:
            shape = "x".join("?" if s < 0 else str(s) for s in spec.shape)
            raise DitronRuntimeError(f"{what} argument {spec.index} of rank {rank}: the program takes a {shape} "
                                     f"{spec.dtype} tensor on {self.device}, got {tuple(x.shape)} {x.dtype} on "
                                     f"{x.device}")
        if not x.is_contiguous():
            if contiguous:
                raise DitronRuntimeError(f"{what} argument {spec.index} of rank {rank} must be contiguous")
            x = x.contiguous()
        return x

    # ------------------------------------------------------------------------------------------ checks
    def _where(self, rank: int, a) -> str:
        return f"{a.loc + ': ' if a.loc else ''}rank {rank}: "

    def _check_action(self, rank: int, a) -> None:
        """Checks made the first time a site runs on a rank (values that change per call are checked always)."""
        if isinstance(a, LaunchAction):
            info = self.program.kernels[a.kernel]
            grid = math.prod(a.grid)
            if info.spins and grid > self.cta_budget:
                where = (f"a virtual world of {self.W} ranks on one GPU ({self.num_sms} SMs) leaves each rank "
                         f"{self.cta_budget}" if self.world.is_virtual else f"this GPU has {self.num_sms} SMs, so")
                raise DitronRuntimeError(
                    f"{self._where(rank, a)}launch of @{a.kernel} has {grid} programs and spin-waits, so all of "
                    f"them must be resident at once, but {where} CTAs; it would deadlock. Compile it with an SM "
                    f"budget of at most {self.cta_budget} (persistent kernels: num_sms / sm_budget)")
            plan = self._plans[a.kernel]
            user = [p for p in plan if p[0] in USER_ARG_KINDS]
            if len(user) != len(a.operands):
                raise DitronRuntimeError(f"{self._where(rank, a)}launch of @{a.kernel} passes {len(a.operands)} "
                                         f"operand(s); the compiled kernel takes {len(user)} "
                                         f"({', '.join(p[2] for p in user)})")
            for (kind, ty, name), v in zip(user, a.operands):
                if kind == "pointer":
                    if not isinstance(v, Buf):
                        raise DitronRuntimeError(f"{self._where(rank, a)}@{a.kernel} argument '{name}' ({ty}) needs "
                                                 "a buffer, got an index value")
                    dtype = self._buf_dtype(v)
                    want = TRITON_POINTEE.get(ty[1:])
                    if want is not None and dtype != want:
                        raise DitronRuntimeError(f"{self._where(rank, a)}@{a.kernel} argument '{name}' is {ty}, "
                                                 f"but the buffer passed holds {dtype}")
                elif isinstance(v, Buf):
                    raise DitronRuntimeError(f"{self._where(rank, a)}@{a.kernel} argument '{name}' ({ty}) is a "
                                             "scalar, but a buffer is passed")
        elif isinstance(a, (SignalAction, WaitAction, BarrierAction)):
            if a.pad.kind != "sym" or a.pad.index not in self._pads:
                raise DitronRuntimeError(f"{self._where(rank, a)}signal pads are 1-d i32 symmetric buffers "
                                         "(alloc_symmetric), so that peers can reach them")
            if isinstance(a, BarrierAction) and self.program.allocs[a.pad.index].shape[0] < self.W:
                raise DitronRuntimeError(f"{self._where(rank, a)}a barrier needs one slot per rank ({self.W}) in "
                                         f"'{self.program.allocs[a.pad.index].name}'")
        self._checked_sites.add((rank, a.site))

    def _buf_dtype(self, b: Buf) -> str:
        return self.program.allocs[b.index].dtype if b.kind == "sym" else self.program.args[b.index].dtype

    def _tensor(self, b: Buf, owner: int, rank: int, tensors: list[Any], a):
        if b.kind == "arg":
            if owner != rank:
                raise HostProgramError(f"{self._where(rank, a)}argument {b.index} of rank {owner} is not reachable: "
                                       "function arguments are local to their rank; only symmetric buffers "
                                       "(alloc_symmetric) are reachable from peers")
            return tensors[b.index]
        return self._views[(b.index, owner)]

    def _region(self, t, off: tuple[int, ...], sizes: tuple[int, ...], rank: int, a, what: str):
        if len(off) != t.dim() or len(sizes) != t.dim() or any(o < 0 or s < 0 or o + s > n
                                                                for o, s, n in zip(off, sizes, t.shape)):
            raise HostProgramError(f"{self._where(rank, a)}copy {what} region at offsets {list(off)} sizes "
                                   f"{list(sizes)} is outside its buffer of shape {list(t.shape)}")
        return t[tuple(slice(o, o + s) for o, s in zip(off, sizes))]

    def _value(self, v: int, rank: int, a, what: str, into: str = "a 32-bit signal slot") -> int:
        if not -(1 << 31) <= v < (1 << 31):
            raise HostProgramError(f"{self._where(rank, a)}{what} {v} does not fit in {into}")
        return v

    def _slot(self, pad: Buf, slot: int, rank: int, a) -> int:
        n = self.program.allocs[pad.index].shape[0]
        if not 0 <= slot < n:
            raise HostProgramError(f"{self._where(rank, a)}slot {slot} of signal pad "
                                   f"'{self.program.allocs[pad.index].name}', which has {n} slots")
        return slot

    # ------------------------------------------------------------------------------------------ enqueue
    def _prepare(self, rank: int, a, tensors: list[Any]) -> Callable[[], None]:
        """Check one action of this call and return what enqueues it."""
        stream = self.streams[(rank, a.stream)]
        if isinstance(a, CopyAction):
            src = self._region(self._tensor(a.src, a.src_rank, rank, tensors, a), a.src_off, a.sizes, rank, a,
                               "source")
            dst = self._region(self._tensor(a.dst, a.dst_rank, rank, tensors, a), a.dst_off, a.sizes, rank, a,
                               "destination")
            return lambda: self._copy(stream, src, dst)
        if isinstance(a, SignalAction):
            slot = self._slot(a.pad, a.slot, rank, a)
            value = self._value(a.value, rank, a, "signal value")
            return lambda: self._signal(rank, stream, a.pad, a.target, slot, value, a.op, a.scope)
        if isinstance(a, WaitAction):
            for s in a.slots:
                self._slot(a.pad, s, rank, a)
            self._value(a.value, rank, a, "wait value")
            return lambda: self._wait(rank, stream, a)
        if isinstance(a, BarrierAction):
            return lambda: self._barrier(rank, stream, a)
        values = self._launch_values(rank, a, tensors)
        return lambda: self._launch(rank, stream, a, values)

    @staticmethod
    def _copy(stream, src, dst) -> None:
        import torch
        if dst.numel():
            torch.cuda.set_stream(stream)
            dst.copy_(src)

    def _barrier(self, rank: int, stream, a: BarrierAction) -> None:
        """Arrival n on this pad: slot <rank> := n on every rank, then wait until slots 0..W-1 >= n. Where both
        would be kernels (a graph's stream 0), the runtime barrier kernel does it in one launch."""
        key = (a.pad.index, rank)
        n = self._barriers[key] = self._barriers.get(key, 0) + 1
        wait = WaitAction(a.stream, a.loc, a.site, a.pad, n, tuple(range(self.W)), "barrier")
        if self.program.barrier_kernel and self._signals_by_kernel(rank, stream) and self._waits_by_kernel(rank, stream):
            clear = self._final_clear.get(rank)  # graph mode: the call's final barrier zeroes the other parity
            span = clear[1] if clear is not None and clear[0] is a else None
            own = {"pad": self._views[(a.pad.index, rank)], "value": n, "max_iters": self.max_iters,
                   "err": self._err[self.ranks.index(rank)], "tag": self._new_tag(rank, wait, wait.slots, n),
                   "clear": self._views[(a.pad.index, rank)] if span is None else span,
                   "clear_words": 0 if span is None else span.numel()}
            name = self.program.barrier_kernel
            self._kernel(name).triton_kernel[(1, 1, 1)](*self._runtime_values(name, rank, own),
                                                        stream=stream.cuda_stream)
            self._milestone(rank, wait, stream)
            return
        for q in range(self.W):
            self._signal(rank, stream, a.pad, q, rank, n, "set", "sys")
        self._wait(rank, stream, wait)

    def _on_stream0(self, rank: int, stream) -> bool:
        return self.streams.get((rank, 0)) is stream

    def _signals_by_kernel(self, rank: int, stream) -> bool:
        """Whether a "set" signal on this stream is the runtime kernel (else a driver / torch write-value memop)."""
        return (self._stream0_kernels[0] and self._on_stream0(rank, stream)) or \
            (self._signal_drv is None and self._write_value is None)

    def _waits_by_kernel(self, rank: int, stream) -> bool:
        """Whether a wait on this stream is the runtime kernel (else driver stream waits)."""
        return (self._stream0_kernels[1] and self._on_stream0(rank, stream)) or self._memops is None

    def _signal(self, rank: int, stream, pad: Buf, target: int, slot: int, value: int, op: str, scope: str) -> None:
        import torch
        kernel_here = self._signals_by_kernel(rank, stream)
        if op == "set" and self._signal_drv is not None and not kernel_here:
            self._signal_drv.write(stream.cuda_stream, self._pad_ptr[(pad.index, target)] + 4 * slot, value)
            return
        if op == "set" and self._write_value is not None and not kernel_here:
            torch.cuda.set_stream(stream)
            self._write_value(self._pad_u32[(pad.index, target)], slot, value & 0xFFFFFFFF)
            return
        name = self.program.signal_kernels.get(f"{op}:{scope}")
        if name is None:
            raise DitronRuntimeError(f"the artifact has no runtime kernel for signal '{op}' at scope '{scope}'; "
                                     "recompile it with this ditron")
        own = {"pad": self._views[(pad.index, rank)], "slot": slot, "peer": target, "value": value}
        self._kernel(name).triton_kernel[(1, 1, 1)](*self._runtime_values(name, rank, own), stream=stream.cuda_stream)

    def _runtime_values(self, name: str, rank: int, own: dict[str, Any]) -> list[Any]:
        """A runtime kernel's arguments in ABI order: its own by name, then rank / num_ranks / heap_bases."""
        values = []
        for kind, _, arg in self._plans_for(name):
            if kind in USER_ARG_KINDS:
                values.append(own[arg])
            elif kind == "rank":
                values.append(rank)
            elif kind == "num_ranks":
                values.append(self.W)
            else:
                values.append(self.heap.bases())
        return values

    def _plans_for(self, name: str) -> list[tuple[str, str, str]]:
        plan = self._plans.get(name)
        if plan is None:
            plan = self._plans[name] = self._abi_plan(name)
        return plan

    def _wait(self, rank: int, stream, a: WaitAction) -> None:
        """One driver stream wait per slot, else the runtime wait kernel per run of consecutive slots; then a
        milestone for the watchdog."""
        if not self._waits_by_kernel(rank, stream):
            base, handle = self._pad_ptr[(a.pad.index, rank)], stream.cuda_stream
            for s in sorted(set(a.slots)):
                self._memops.wait_geq(handle, base + 4 * s, a.value)
            self._milestone(rank, a, stream)
            return
        kernel = self._kernel(self.program.wait_kernel).triton_kernel
        tag = self._new_tag(rank, a, a.slots, a.value)
        err = self._err[self.ranks.index(rank)]
        base = self._views[(a.pad.index, rank)]
        for first, count in slot_runs(a.slots, self.program.wait_lanes):
            kernel[(1, 1, 1)](base, first, count, a.value, self.max_iters, err, tag, stream=stream.cuda_stream)
        self._milestone(rank, a, stream)

    def _new_tag(self, rank: int, a, slots: tuple[int, ...], value: int) -> int:
        """A number that names (rank, action, call) in an error record; the last 4096 are remembered."""
        tag = self._next_tag
        self._next_tag = self._next_tag % INT32_MAX + 1
        if self._capturing:  # baked into a CUDA graph: kept while the executor lives; the call is the latest one
            self._pinned_tags[tag] = (rank, a, slots, value, -1)
            return tag
        self._tags[tag] = (rank, a, slots, value, self.epoch)
        if len(self._tags) > 4096:
            self._tags.pop(next(iter(self._tags)))
        return tag

    def _milestone(self, rank: int, a, stream) -> None:
        import torch
        if self._capturing:  # a graph call has one milestone, after its replay (graphs.GraphRunner)
            return
        ev = torch.cuda.Event()
        ev.record(stream)
        self.watch.add((rank, a.stream), Milestone(ev, rank, a.stream, a, self.epoch))

    def _launch_values(self, rank: int, a: LaunchAction, tensors: list[Any]) -> list[Any]:
        """The kernel's arguments in ABI order: operands (buffers as tensors, index values checked to fit i32),
        then rank / num_ranks / heap_bases."""
        values, k = [], 0
        for kind, ty, _ in self._plans[a.kernel]:
            if kind in USER_ARG_KINDS:
                v = a.operands[k]
                k += 1
                if isinstance(v, Buf):
                    values.append(self._tensor(v, rank, rank, tensors, a))
                elif ty == "i32":
                    values.append(self._value(v, rank, a, f"@{a.kernel} argument {k - 1} =",
                                              "the kernel's i32 argument"))
                else:
                    values.append(v)
            elif kind == "rank":
                values.append(rank)
            elif kind == "num_ranks":
                values.append(self.W)
            elif kind == "heap_bases":
                values.append(self.heap.bases())
            elif kind == "wait_bound":
                values.append(self.max_iters)
            elif kind == "wait_err":
                values.append(self._err[self.ranks.index(rank)])
            elif kind == "wait_tag":
                values.append(None)  # a fresh tag per launch, at enqueue time
            else:
                raise DitronRuntimeError(f"kernel '{a.kernel}': the executor cannot bind an argument of kind "
                                         f"'{kind}'; update ditron")
        if self._scratch.get((rank, a.site)) is None and getattr(self._kernel(a.kernel).metadata,
                                                                 "global_scratch_size", 0):
            raise DitronRuntimeError(f"{self._where(rank, a)}@{a.kernel} needs global scratch that was not reserved "
                                     "at warm-up (this launch did not run in the first call)")
        return values

    def _launch(self, rank: int, stream, a: LaunchAction, values: list[Any]) -> None:
        from triton.runtime import _allocation
        if any(v is None for v in values):  # not `None in values`: that compares each tensor == None (~100 us)
            values = [self._new_tag(rank, a, (), -1) if v is None else v for v in values]
        grid = tuple(a.grid) + (1,) * (3 - len(a.grid))
        scratch = self._scratch.get((rank, a.site))
        token = None
        if scratch is not None:
            token = _allocation._allocator.set(lambda size, align, s, buf=scratch: buf)
        try:
            self._kernel(a.kernel).triton_kernel[grid](*values, stream=stream.cuda_stream)
        finally:
            if token is not None:
                _allocation._allocator.reset(token)
        if self.program.kernels[a.kernel].spins:
            self._milestone(rank, a, stream)

    # ------------------------------------------------------------------------------------------ waiting
    def _synchronize(self) -> None:
        self.watch.wait(self.timeout_s, self._on_stall)
        self._check_errors()

    def _read_pads(self) -> dict[tuple[int, int, int], list[int]]:
        """Every local rank's signal pads of every parity, {(parity, pad, rank): values}, read on the side (the
        copy engine needs no SM)."""
        import torch
        views, offset = [], 0
        with torch.cuda.stream(self._diag):
            for p, parity_views in enumerate(self._parity_views):
                for r in self.ranks:
                    for j in self._pads:
                        n = self.program.allocs[j].shape[0]
                        self._pads_host[offset: offset + n].copy_(parity_views[(j, r)], non_blocking=True)
                        views.append(((p, j, r), offset, n))
                        offset += n
        self._diag.synchronize()
        host = self._pads_host.tolist()
        return {key: host[o: o + n] for key, o, n in views}

    def _on_stall(self, heads: list[Milestone], stalled_s: float) -> None:
        """Nothing progressed for the timeout: name the waits whose condition is false, release the spinners and
        raise; with no such wait, keep waiting, and give up after SILENT_STALL_FACTOR timeouts."""
        pads = self._read_pads()
        blocked = []
        for m in heads:
            if isinstance(m.action, GraphCall):
                blocked += self._graphs.blocked(m, pads)
            else:
                b = self._blocked(m, pads)
                if b is not None:
                    blocked.append(b)
        if not blocked:
            if stalled_s >= SILENT_STALL_FACTOR * self.timeout_s:
                self._broken = "the GPU made no progress"
                raise_silent_stall(heads, stalled_s)
            return
        self._release_spinners()
        self._broken = f"a wait timed out ({blocked[0].describe()})"
        raise WaitTimeoutError(timeout_message(blocked, self.timeout_s, released=True))

    def _blocked(self, m: Milestone, pads, parity: int = 0) -> Blocked | None:
        a = m.action
        if isinstance(a, WaitAction):
            what = "barrier" if a.where == "barrier" else "wait"
            return self._unsatisfied(m, what, a.pad, a.slots, a.value, pads, a.loc, parity)
        if isinstance(a, LaunchAction):
            info = self.program.kernels[a.kernel]
            spec = info.wait or {}
            args = list(info.args or [])
            pad_arg, value_arg = spec.get("arg"), spec.get("value_arg")
            if pad_arg in args and value_arg in args:
                pad, value = a.operands[args.index(pad_arg)], a.operands[args.index(value_arg)]
                if isinstance(pad, Buf) and isinstance(value, int) and pad.index in self._pads:
                    slots = tuple(range(self.program.allocs[pad.index].shape[0]))
                    return self._unsatisfied(m, f"kernel @{a.kernel} waits in-kernel", pad, slots, value, pads,
                                             a.loc, parity)
            return Blocked(m.rank, m.stream, f"kernel @{a.kernel} spin-waits in-kernel (no wait record to name "
                           "its slot)", "?", (-1,), -1, (-1,), a.loc, m.epoch)
        return None

    def _kernel_wait(self, a: LaunchAction) -> tuple[str, int, tuple[int, ...]]:
        """(pad name, expected value, slots) of a launch's in-kernel wait, from its kernel record where it has one."""
        info = self.program.kernels[a.kernel]
        spec, args = info.wait or {}, list(info.args or [])
        if spec.get("arg") in args and spec.get("value_arg") in args:
            pad, value = a.operands[args.index(spec["arg"])], a.operands[args.index(spec["value_arg"])]
            if isinstance(pad, Buf) and pad.kind == "sym" and isinstance(value, int):
                return self.program.allocs[pad.index].name, value, (-1,)
        return "?", -1, (-1,)

    def _unsatisfied(self, m: Milestone, what: str, pad: Buf, slots, value: int, pads, loc,
                     parity: int = 0) -> Blocked | None:
        values = pads.get((parity, pad.index, m.rank))
        if values is None:
            return None
        bad = tuple(s for s in slots if values[s] < value)
        if not bad:
            return None
        return Blocked(m.rank, m.stream, what, self.program.allocs[pad.index].name, bad, value,
                       tuple(values[s] for s in bad), loc, m.epoch)

    def _release_spinners(self) -> bool:
        """Raise every local signal slot to INT32_MAX (copy engine, no SM needed), again and again (a later "set"
        may lower a slot), until every stream has drained or DRAIN_S passed; whether they drained."""
        import time

        import torch
        deadline = time.monotonic() + DRAIN_S
        while True:
            with torch.cuda.stream(self._diag):
                for parity_views in self._parity_views:
                    for r in self.ranks:
                        for j in self._pads:
                            v = parity_views[(j, r)]
                            v.copy_(self._release[: v.numel()], non_blocking=True)
            self._diag.synchronize()
            time.sleep(0.02)
            self.watch.prune()
            if self.watch.done:
                return True
            if time.monotonic() > deadline:
                return False

    def _check_errors(self) -> None:
        import torch
        with torch.cuda.stream(self._diag):
            self._err_host.copy_(self._err, non_blocking=True)
        self._diag.synchronize()
        rows = self._err_host.tolist()
        failed = [(self.ranks[i], row) for i, row in enumerate(rows) if row[0] > 0]
        if not failed:
            return
        self._err.zero_()
        blocked = []
        for rank, (count, tag, seen, _) in failed:
            entry = self._tags.get(tag) or self._pinned_tags.get(tag)
            if entry is None:
                blocked.append(Blocked(rank, -1, "wait", "?", (-1,), -1, (seen,), None, -1))
                continue
            _, action, slots, value, epoch = entry
            epoch = self.epoch if epoch < 0 else epoch
            gave_up = f"gave up in-kernel; {count} wait(s) of this rank did"
            if isinstance(action, LaunchAction):
                pad, value, slots = self._kernel_wait(action)
                blocked.append(Blocked(rank, action.stream, f"kernel @{action.kernel} waits in-kernel ({gave_up})",
                                       pad, slots, value, (seen,) * len(slots), action.loc, epoch))
                continue
            pad = self.program.allocs[action.pad.index].name
            blocked.append(Blocked(rank, action.stream, f"wait ({gave_up})", pad, slots, value,
                                   (seen,) * len(slots), action.loc, epoch))
        self._broken = f"a wait timed out ({blocked[0].describe()})"
        raise WaitTimeoutError(timeout_message(blocked, self.timeout_s, released=False))

    # ------------------------------------------------------------------------------------------ teardown
    def close(self) -> None:
        """Wait for outstanding work, free the heap (a barrier with the peers in a real world), drop the streams.
        After a timeout, only what can be done without waiting on a stuck GPU is done."""
        import torch
        if self._closed:
            return
        self._closed = True
        with torch.cuda.device(self.device):
            if self._broken is None:
                self._synchronize()  # raises (and leaves the heap alone) if outstanding work times out
                if self._graphs is not None:
                    self._graphs.clear()
                self.heap.close()
                torch.cuda.synchronize(self.device)
                drained = True
            else:
                self.watch.prune()
                drained = self.watch.done
            self.streams.clear()
            # The driver streams are not destroyed: tensors used on them (record_stream) may be freed later, and
            # torch then records an event on the stream — on a destroyed one that aborts the process ("invalid
            # device context", seen on the H200). A few streams per executor stay alive until process exit.
            del drained
            self._owned_streams.clear()

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["Executor", "torch_dtype"]
