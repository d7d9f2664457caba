"""Run a ``@ditron.jit`` kernel on one GPU in a virtual world of W ranks (the GPU counterpart of ``simulate``).

    outputs = ditron.language.run_virtual(kernel, grid, args_per_rank, world=4)   # outputs[rank][name]: numpy

Arguments are given as for ``simulate`` (numpy arrays become each rank's arrays of its symmetric heap; every
rank's heap is one device buffer, the arrays at the same offsets). The kernel is compiled for the GPU's target
(``DitronJITFunction.emit("ttir")``, then ``triton.compile``), specialised as ``triton.jit`` would be for the
call's arguments (``tt.divisibility = 16`` on the pointers and integers that are multiples of 16 on every rank; one
variant per key, kept for the process), and launched once per rank, each rank on its own stream, with the hidden
arguments bound: rank, num_ranks, the heap bases, and a bounded wait (``wait_bound`` polls) whose give-up is read
back after the launch and raised as WaitTimeoutError naming the rank -- a missing notify ends in an error, not a
hang. Every rank's programs must be resident at once (they spin on each other): world x programs must not exceed
the GPU's SMs minus a reserve, and every rank's stream needs its own hardware queue -- start the process with
CUDA_DEVICE_MAX_CONNECTIONS=32 (read when CUDA starts) for worlds of more than a few ranks.
"""
from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np

from ..errors import DitronRuntimeError, WaitTimeoutError
from .args import grid3, heap_layout, per_rank_args

DEFAULT_WAIT_BOUND = 1 << 22       # polls (each with the vendor's pause) before a wait gives up
_TRITON_TYPES = {"float32": "fp32", "float16": "fp16", "float64": "fp64", "int8": "i8", "int16": "i16",
                 "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
                 "bool": "i1"}
SM_RESERVE = 4


def _signature(kernel, rows) -> dict[str, str]:
    sig = {}
    for name in kernel.arg_names:
        if name in kernel.constexpr_names:
            continue
        kinds = set()
        for row in rows:
            v = row[name]
            if isinstance(v, np.ndarray):
                kinds.add("*" + _TRITON_TYPES[str(v.dtype)])
            elif isinstance(v, bool):
                kinds.add("i1")
            elif isinstance(v, int):
                kinds.add("i32" if -2 ** 31 <= v < 2 ** 31 else "i64")
            elif isinstance(v, float):
                kinds.add("fp32")
            else:
                raise DitronRuntimeError(f"run_virtual: argument '{name}' is a {type(v).__name__}; give numpy "
                                         f"arrays, ints or floats")
        if len(kinds) > 1:
            kinds = {"i64"} if kinds <= {"i32", "i64"} else kinds
        if len(kinds) != 1:
            raise DitronRuntimeError(f"run_virtual: argument '{name}' has different types on different ranks: "
                                     f"{sorted(kinds)}")
        sig[name] = kinds.pop()
    return sig


_VARIANTS: dict[tuple, Any] = {}   # compiled variants by (kernel, signature, constexprs, target, divisible, options)


def _compiled(kernel, signature, constexprs, target, divisible, options):
    """The kernel's variant for one specialization key, compiled once per process."""
    import triton
    key = (id(kernel), tuple(sorted(signature.items())), repr(sorted(constexprs.items())), target,
           tuple(sorted(divisible)), repr(sorted(options.items())))
    if key not in _VARIANTS:
        # after Triton's ttir passes (inlined): triton.compile skips the passes of a .ttir file's own stage
        text = kernel.emit("ttir", signature=signature, constexprs=constexprs, target=target, divisible=divisible,
                           **options)
        with tempfile.TemporaryDirectory(prefix="ditron-lang-") as tmp:
            path = os.path.join(tmp, f"{kernel.__name__}.ttir")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            _VARIANTS[key] = (kernel, triton.compile(path, options=dict(options)))
    return _VARIANTS[key][1]


def run_virtual(kernel, grid, args_per_rank, *, world: int, wait_bound: int = DEFAULT_WAIT_BOUND,
                device: Any = None, **options: Any) -> list[dict[str, np.ndarray]]:
    """Launch kernel for every rank of a virtual world on one GPU; every array argument after the run, per rank.
    options: the backend's compile options (num_warps, num_stages, ...)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        raise DitronRuntimeError("run_virtual needs torch") from None
    if not torch.cuda.is_available():
        raise DitronRuntimeError(f"run_virtual: no GPU (torch sees no CUDA/ROCm device) to launch kernel "
                                 f"'{kernel.__name__}' on; check it on the CPU with ditron.language.simulate")
    from ..runtime.loader import _ensure_allocator, device_target_name
    if not isinstance(world, int) or world < 1:
        raise DitronRuntimeError(f"run_virtual: world must be a positive number of ranks, got {world!r}")
    g = grid3(grid, DitronRuntimeError)
    rows = per_rank_args(kernel, args_per_rank, world, DitronRuntimeError)
    dev = torch.device(device if device is not None else "cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    if world * g[0] * g[1] * g[2] > sms - SM_RESERVE:
        raise DitronRuntimeError(f"run_virtual: {world} ranks x {g[0] * g[1] * g[2]} programs cannot all be "
                                 f"resident on {sms} SMs; use fewer programs")
    layout, nbytes = heap_layout(kernel, rows, DitronRuntimeError)
    target = device_target_name()
    signature = _signature(kernel, rows)
    constexprs = {n: rows[0][n] for n in kernel.constexpr_names}
    heaps = [torch.zeros(nbytes, dtype=torch.uint8, device=dev) for _ in range(world)]
    bases = torch.tensor([h.data_ptr() for h in heaps], dtype=torch.int64, device=dev)
    errs = torch.zeros((world, 4), dtype=torch.int32, device=dev)
    views: list[dict[str, Any]] = []
    for r, row in enumerate(rows):
        mine = {}
        for name, (off, dtype, shape) in layout.items():
            a = np.ascontiguousarray(row[name])
            t = heaps[r][off:off + a.nbytes]
            t.copy_(torch.from_numpy(a.reshape(-1).view(np.uint8).copy()).to(dev))
            mine[name] = t
        views.append(mine)
    # Triton's specialization, as triton.jit keys it at each call: what every rank's values allow
    divisible = frozenset.intersection(*[kernel.specialization({**row, **views[r]}) for r, row in enumerate(rows)])
    compiled = _compiled(kernel, signature, constexprs, target, divisible, options)
    _ensure_allocator()   # Triton's global-scratch allocator, as the loader sets it
    torch.cuda.synchronize(dev)
    streams = [torch.cuda.Stream(dev) for _ in range(world)]
    for r, row in enumerate(rows):
        args = [views[r][n] if n in layout else row[n] for n in kernel.arg_names if n not in kernel.constexpr_names]
        hidden = [r, world, bases, int(wait_bound), errs[r], r]
        with torch.cuda.stream(streams[r]):
            compiled[g](*args, *hidden, stream=streams[r].cuda_stream)
    torch.cuda.synchronize(dev)
    record = errs.cpu().numpy()
    stuck = [r for r in range(world) if record[r, 0] > 0]
    if stuck:
        parts = [f"rank {r}: {int(record[r, 0])} wait(s) gave up, the last having seen {int(record[r, 2])}"
                 for r in stuck]
        raise WaitTimeoutError(f"kernel '{kernel.__name__}' in a virtual world of {world}: a dl.wait did not "
                               f"complete within {wait_bound} polls (a missing dl.notify?): " + "; ".join(parts)
                               + ". Run ditron.language.simulate on it to find the slot and the line.")
    outputs = []
    for r in range(world):
        out = {}
        for name, (off, dtype, shape) in layout.items():
            raw = views[r][name].cpu().numpy()
            out[name] = raw.view(dtype).reshape(shape).copy()
        outputs.append(out)
    return outputs
