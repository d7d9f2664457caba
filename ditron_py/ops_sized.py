"""ditron.ops.all_to_all with split sizes computed on the device (the router's token counts): MoE's dispatch and
combine. ``ops.all_to_all(x, world, splits=s)`` comes here.

    out, recv = ops.all_to_all(x, world, splits=counts)            # counts: a device tensor [W] (any int dtype)
    out, recv = ops.all_to_all(x, world, splits=counts, capacity=C)

Rank p's x [N, ...] sends its rows in order, ``splits[d]`` of them to rank d (a negative size counts 0; sizes
past N are cut at x's end, every rank alike). Rank r's ``out`` [capacity, ...] holds, in source rank order, the
rows each rank sent it, then zeros; ``recv`` [W] int32 holds the rows each rank sent it (``recv.sum()`` rows
arrived, of which the first ``capacity`` are in out).

No host synchronisation: the sizes never leave the device (the device program exchanges them and one SM kernel
moves the rows at offsets it computes on the device: passes/collectives/all_to_all_sized.py), so a call is one
fixed sequence of enqueued work, replayed by ``graph=True`` or captured in the caller's CUDA graph (after one
eager call with the same shapes, which makes the capture plan: ditron.runtime.callplan).

Capacity. The default, ``W * N`` rows, is the worst case (every rank sends every row here): nothing can
overflow. A smaller capacity bounds the output's memory; rows past it are not written (never past the buffer),
and the overflow is a count the caller checks: ``overflow(recv, capacity)`` (a device tensor, no sync) is
``max(0, recv.sum() - capacity)``. The eager API raises it: with ``sync=True`` (the default, which waits for the
call anyway) and a capacity below the worst case, a call that overflowed on any rank raises
``CapacityOverflowError`` naming the rank and the rows lost (one small read of the counts after the wait).
``sync=False`` and ``graph=True`` never read them back: check ``overflow`` on the device.

The op is the task program ``program_text`` (the bounded ``ditron_task.all_to_all``, local view), compiled once
per (world, shape, dtype, capacity, target) by ``ditron.compile`` and cached in this process; a GPU box without
the compiler loads the artifacts ``build`` wrote elsewhere (``library=ops.Library(directory)``).
"""
from __future__ import annotations

from typing import Any

from .errors import DitronError

AXIS = "tp"
_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
_EXECUTABLES: dict[tuple, Any] = {}


class CapacityOverflowError(DitronError):
    """A bounded all_to_all received more rows than its capacity (the rows past it were not written)."""


def program_text(w: int, shape: tuple[int, ...], dtype: str, capacity: int) -> str:
    """The op's task program: one bounded all_to_all over mesh axis ``tp`` of ``w`` ranks (i32 sizes)."""
    dims = "x".join(str(d) for d in shape[1:])
    rest = f"x{dims}" if dims else ""
    t, o = f"tensor<{shape[0]}{rest}x{dtype}>", f"tensor<{capacity}{rest}x{dtype}>"
    s = f"tensor<{w}xi32>"
    return (f'module attributes {{ditron.mesh = {{axes = ["{AXIS}"], shape = array<i64: {w}>}}}} {{\n'
            f'  func.func @all_to_all_sized(%x: {t}, %s: {s}) -> ({o}, {s}) attributes {{ditron.view = "local"}} {{\n'
            f'    %y, %c = "ditron_task.all_to_all"(%x, %s) {{axis = "{AXIS}", split_dim = 0 : i64, '
            f'concat_dim = 0 : i64}} : ({t}, {s}) -> ({o}, {s})\n'
            f'    return %y, %c : {o}, {s}\n  }}\n}}\n')


def overflow(recv, capacity: int):
    """The rows that did not fit (a device tensor, computed on the device: no sync): max(0, recv.sum() - capacity)
    per call, from its recv counts (one rank's [W], or a list of them in a virtual world)."""
    if isinstance(recv, (list, tuple)):
        return [overflow(r, capacity) for r in recv]
    return (recv.sum() - capacity).clamp(min=0)


def all_to_all_sized(x, splits, world, *, capacity: int | None = None, sync: bool = True, graph: bool = False,
                     capturable: bool = True, target: Any = None, split_dim: int = 0, concat_dim: int = 0,
                     out=None, library=None, passes=None):
    """(out, recv) of the bounded all_to_all (module doc). Virtual world: x and splits are lists of one tensor per
    rank, and so are out and recv; real world: this rank's. ``library``: an ops.Library whose directory holds the
    artifact (``build``; else it is compiled, into that directory) and whose target is used. ``capturable``: an
    eager call also makes the plan a
    later capture in the caller's torch.cuda.graph needs (a graph-mode heap: ditron.runtime.callplan); a call
    inside the capture enqueues that plan into outputs of the capture's pool. ``split_dim`` / ``concat_dim`` must
    be 0, and ``out`` / ``passes`` (ops.all_to_all's options for equal parts) None: refused otherwise."""
    import torch

    if splits is None:
        raise DitronError("all_to_all: capacity= bounds parts of run-time sizes; it needs splits=")
    if (split_dim, concat_dim) != (0, 0):
        raise DitronError(f"all_to_all: splits= splits and concatenates dim 0, got split_dim={split_dim}, "
                          f"concat_dim={concat_dim}")
    given = [n for n, v in (("out", out), ("passes", passes)) if v is not None]
    if given:
        raise DitronError(f"all_to_all: with splits= the output is allocated per call and the program's passes "
                          f"are the default ones; {', '.join(given)}= is not taken")

    virtual = world.is_virtual
    xs, ss = (list(x), list(splits)) if virtual else ([x], [splits])
    w = world.world_size
    if virtual and (len(xs) != w or len(ss) != w):
        raise DitronError(f"all_to_all: in a virtual world of {w} ranks, x and splits are lists of one tensor per "
                          f"rank; got {len(xs)} and {len(ss)}")
    shape, dt = tuple(xs[0].shape), str(xs[0].dtype).removeprefix("torch.")
    if dt not in _DTYPES:
        raise DitronError(f"all_to_all: tensors of {xs[0].dtype} are not supported; use {', '.join(_DTYPES)}")
    if not shape:
        raise DitronError("all_to_all: x needs a dim 0 (the rows to send)")
    for r, (xr, sr) in enumerate(zip(xs, ss)):
        if tuple(xr.shape) != shape or xr.dtype != xs[0].dtype:
            raise DitronError(f"all_to_all: x of rank {r} is {tuple(xr.shape)} {xr.dtype}, rank 0's is {shape} "
                              f"{xs[0].dtype}; every rank passes the same shapes")
        if not isinstance(sr, torch.Tensor) or tuple(sr.shape) != (w,) or sr.dtype.is_floating_point or \
                sr.dtype == torch.bool:
            raise DitronError(f"all_to_all: splits of rank {r} must be an integer tensor of shape ({w},) (one size "
                              f"per rank), got {getattr(sr, 'dtype', type(sr).__name__)} "
                              f"{tuple(getattr(sr, 'shape', ()))}")
    worst = w * shape[0]
    cap = worst if capacity is None else capacity
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise DitronError(f"all_to_all: capacity must be a positive int (rows of the output), got {capacity!r}")
    # on the device, no sync: sizes past the rows are cut there anyway, and the cut keeps int64 sizes from wrapping
    ss = [s if s.dtype == torch.int32 else s.clamp(-1, shape[0]).to(torch.int32) for s in ss]
    if target is None:
        target = library.target if library is not None and library.target else _target(xs[0])
    exe = _executable(w, shape, _DTYPES[dt], cap, target, None if library is None else library.directory)
    inputs = [[a, b] for a, b in zip(xs, ss)] if virtual else [xs[0], ss[0]]
    if torch.cuda.is_current_stream_capturing():  # inside the caller's torch.cuda.graph: the call's capture plan
        return _capture(exe, world, inputs, xs, cap, virtual)
    result = exe.run(world, inputs, sync=sync, graph=graph)
    if capturable and not graph:  # the plan a later capture of this call needs, made now (outside any capture)
        from .runtime.callplan import plan_for
        plan_for(exe, world, make=True)
    per_rank = result if virtual else [result]
    if sync and not graph and cap < worst:
        lost = [int(v) for v in torch.stack([overflow(r[1], cap) for r in per_rank]).cpu()]
        over = [(world.rank if not virtual else i, n) for i, n in enumerate(lost) if n]
        if over:
            where = ", ".join(f"rank {r}: {n} row(s)" for r, n in over)
            raise CapacityOverflowError(f"all_to_all: capacity {cap} overflowed ({where} past it were not written; "
                                        f"the worst case is {worst} rows: pass capacity >= the rows a rank can "
                                        "receive, or check overflow(recv, capacity) with sync=False)")
    if virtual:
        return [r[0] for r in per_rank], [r[1] for r in per_rank]
    return per_rank[0][0], per_rank[0][1]


def _capture(exe, world, inputs, xs, cap: int, virtual: bool):
    """Enqueue the call into the capturing stream through its capture plan (ditron.runtime.callplan: every replay
    of the caller's graph is then a correct call), into outputs allocated in the capture's pool."""
    import torch

    from .runtime.callplan import CaptureNotPreparedError, plan_for
    plan = plan_for(exe, world, make=False)
    if plan is None:
        raise CaptureNotPreparedError(
            "all_to_all with splits= is being captured into a CUDA graph before an eager call of it with these "
            "shapes (or with capturable=False): run it once eagerly before torch.cuda.graph, which loads it and "
            "makes its capture plan")
    w = world.world_size
    made = [(torch.empty((cap,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device),
             torch.empty(w, dtype=torch.int32, device=x.device)) for x in xs]
    plan.enqueue(inputs, [list(m) for m in made] if virtual else list(made[0]))
    if virtual:
        return [m[0] for m in made], [m[1] for m in made]
    return made[0]


def _target(t) -> str:
    from .runtime.loader import device_target_name
    return device_target_name()


def artifact_name(w: int, shape: tuple[int, ...], dtype: str, capacity: int, target: str) -> str:
    """The artifact's directory name inside a library directory (``build``, ``library=``)."""
    dims = "x".join(str(d) for d in shape)
    return f"all_to_all_sized-{dtype}-w{w}-{dims}-c{capacity}-{target.replace(':', '')}"


def build(directory, cases, target: str = "cuda:90") -> list:
    """Compile the artifact of each case (w, shape, dtype ('bf16' | 'f16' | 'f32'), capacity) into directory (the
    CPU side, where the MLIR bindings are); a GPU box with torch + triton only then runs them through
    ``library=ops.Library(directory)``. Returns the artifact paths."""
    from pathlib import Path

    from .api import compile as ditron_compile
    out = []
    for w, shape, dtype, capacity in cases:
        path = Path(directory) / artifact_name(w, tuple(shape), dtype, capacity, target)
        ditron_compile(program_text(w, tuple(shape), dtype, capacity), target=target, out_dir=path, cache=False)
        out.append(path)
    return out


def _executable(w: int, shape: tuple[int, ...], dtype: str, capacity: int, target: str, directory=None):
    """The op's executable: loaded from ``directory`` where its artifact is there, else compiled (and written
    there, when a directory is given)."""
    key = (w, shape, dtype, capacity, target, None if directory is None else str(directory))
    exe = _EXECUTABLES.get(key)
    if exe is None:
        path = None if directory is None else directory / artifact_name(w, shape, dtype, capacity, target)
        if path is not None and path.is_dir():
            from .runtime.loader import load_artifact
            exe = load_artifact(path)
        else:
            from .api import compile as ditron_compile
            exe = ditron_compile(program_text(w, shape, dtype, capacity), target=target, out_dir=path)
        _EXECUTABLES[key] = exe
    return exe
