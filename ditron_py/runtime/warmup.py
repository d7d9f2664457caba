"""The executor's set-up checks and warm-up (a part of ``executor.Executor``, kept apart by concern): the kernels the
host program names, the runtime wait kernel's ABI, the probe of the driver's stream memops, the parity binding of
signal pads, the global scratch of launch sites, the warm-up of torch's copy kernels and the calibration of the wait
kernel's poll bound. Everything here runs before a call can spin: loading a kernel or a module while another kernel
spins deadlocked on the H200.

``Warmup`` is a mixin of ``Executor``: its methods read and write the executor's state (``program``, ``ranks``,
``W``, ``device``, the heap views, ``_diag``, ...), which ``Executor.__init__`` / ``_setup`` create.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

from .. import env
from ..errors import DitronRuntimeError
from ..schema import USER_ARG_KINDS
from .memops import DriverMemops, MemopError
from .program import DTYPES, BarrierAction, CopyAction, LaunchAction, WaitAction

MAX_POLLS = 1 << 62       # the wait kernel's poll counter is 64-bit
# poll counts used to measure the wait kernel's poll rate at warm-up
CALIBRATE_POLLS = (2_000, 20_000)
# pad, first, count, value, max_iters, err, tag (ditron.hostprog builds the kernel)
WAIT_KERNEL_TYPES = ("*i32", "i32", "i32", "i32", "i64", "*i32", "i32")
ERR_FIELDS = 4            # per rank: [timed-out waits, last tag, last value seen, unused]


def torch_dtype(name: str):
    import torch
    return getattr(torch, DTYPES[name][0])


class Warmup:
    """Set-up checks and warm-up of an ``Executor`` (see the module doc)."""

    def _use_parity(self, parity: int) -> None:
        """Bind the signal pads and rotating buffers of one parity (graph mode captures each parity's graph with
        its own; an eager call e binds parity e % 2, where only rotating buffers differ)."""
        self._views = self._parity_views[parity]
        self._pad_u32 = self._parity_u32[parity]
        self._pad_ptr = self._parity_ptr[parity]

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
