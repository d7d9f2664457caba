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

import warnings
from typing import Any, Sequence

from .. import env
from ..errors import DitronRuntimeError
from .actions import INT32_MAX, Actions
from . import eager
from .callplan import EpochTraces
from .eager import EagerPlan, Unplanned
from .graphs import BoundCall, GraphRunner, check_graph_program
from .heap import SymmetricHeap, program_layout
from .memops import DriverMemops, MemopError
from .program import HostProgram, WaitAction
from .timeouts import Milestone, Watch
from .warmup import ERR_FIELDS, Warmup, torch_dtype
from .watchdog import Watchdog
from .world import World

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

class Executor(Warmup, Actions, Watchdog):
    """Runs one executable's host program in one world (see the module doc). Its concerns live in their own modules:
    set-up checks and warm-up (``warmup.Warmup``), the checks and enqueueing of actions (``actions.Actions``), the
    watchdog and error records (``watchdog.Watchdog``); graph capture and replay in ``graphs.GraphRunner``."""

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
        self._eager_plans: dict[tuple, EagerPlan | Unplanned] = {}  # eager call plans by argument shapes
        self.heap.barrier()

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

    def _stream(self):
        stream, owned = _new_stream(self.device)
        if owned is not None:
            self._owned_streams.append(owned)
        return stream

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
            plan = self.eager_plan(tensors)
            if plan is not None:
                plan.enqueue(tensors, sync)
            else:
                self._run_interpreted(tensors, sync)
        return result

    def eager_plan(self, tensors: dict[int, list[Any]]) -> EagerPlan | None:
        """The eager call plan for these argument tensors' shapes (runtime/eager.py), made the first time; None in
        graph mode, when plans are off (``eager.ENABLED``) or where the program is not of a form a plan covers
        (``_eager_plans`` keeps the reason). Building it checks every action as an interpreted call does."""
        if self._graphs is not None or not eager.ENABLED:
            return None
        key = eager.shapes_key(tensors)
        plan = self._eager_plans.get(key)
        if plan is None:
            try:
                plan = EagerPlan(self, tensors)
            except Unplanned as why:
                plan = why
            self._eager_plans[key] = plan
        return plan if isinstance(plan, EagerPlan) else None

    def plan_for_call(self, inputs: list[list[Any]], outputs: list[list[Any]] | None) -> EagerPlan | None:
        """The call plan an earlier checked call made for these tensors' shapes (inputs / outputs: one list per
        local rank, as ``EagerPlan.call`` takes them), or None."""
        prog = self.program
        key = []
        for i in range(len(self.ranks)):
            slots: list[Any] = [None] * (len(prog.args) - 1)
            for spec, x in zip(prog.inputs, inputs[i]):
                slots[spec.index] = tuple(x.shape)
            for k, spec in enumerate(prog.outputs):
                slots[spec.index] = tuple(spec.shape) if outputs is None else tuple(outputs[i][k].shape)
            key.append(tuple(slots))
        plan = self._eager_plans.get(tuple(key))
        return plan if isinstance(plan, EagerPlan) else None

    def _run_interpreted(self, tensors: dict[int, list[Any]], sync: bool) -> None:
        """One eager call, every action of the epoch's trace checked and enqueued through the executor's methods
        (what a call plan does with prebound steps)."""
        import torch
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
