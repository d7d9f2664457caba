"""ditron.torch_ops: every op of ditron.ops as a torch operator (torch.library, namespace ``ditron``), so that a model
calling them compiles under ``torch.compile(fullgraph=True)`` with no graph break and runs inside the model's own
``torch.cuda.graph`` capture.

    import ditron, torch
    from ditron import torch_ops
    world = ditron.World.from_torch()                 # under torchrun (or World.virtual(1) on one GPU)
    tp = torch_ops.register_world(world)              # the world's handle: a plain string
    y = torch.ops.ditron.ag_gemm(a, b, tp)            # this rank's a [m, K], b [K, n] -> [W*m, n]
    y = torch_ops.ag_gemm(a, b, tp)                   # the same operator, through a Python wrapper

Schemas (``world``: the handle of a registered world; shapes are this rank's, W its world size; ditron.ops says what
each op computes):

    ditron::ag_gemm(Tensor a, Tensor b, str world, int max_rows=0) -> Tensor                          [W*m, n]
    ditron::gemm_rs(Tensor a, Tensor b, str world, int max_rows=0) -> Tensor                          [M/W, N]
    ditron::gemm_ar(Tensor a, Tensor b, str world, str algorithm="auto", int max_rows=0) -> Tensor    [M, N]
    ditron::all_gather(Tensor x, str world, int dim=0, int max_rows=0) -> Tensor                      dim * W
    ditron::reduce_scatter(Tensor x, str world, int dim=0, int max_rows=0) -> Tensor                  dim / W
    ditron::all_reduce(Tensor x, str world, str algorithm="auto", int max_rows=0) -> Tensor           x's shape
    ditron::all_to_all(Tensor x, str world, int split_dim=0, int concat_dim=0, int max_rows=0) -> Tensor
                                                                                          split / W, concat * W
    ditron::grouped_gemm(Tensor x, Tensor w, Tensor group_sizes, str world, str? gated=None, int max_rows=0)
                   -> Tensor        [T, N]; gated="silu": w [E, K, 2N] -> silu(x @ gate) * (x @ up), fused [T, N]
                                                                     (group_sizes int32; max_rows must be 0)

``max_rows`` (every operator): 0 runs the program of the call's exact shapes (one program per row count); N > 0
serves any row count 1..N (dim 0 of the first argument) from the op's power-of-two bucket programs
(ditron.buckets): the first argument is copied into the bucket's staging tensor, the real rows of the bucket's
output are returned (a view of a fresh tensor, or one copy where the output holds W blocks of rows), and a process
meeting any number of batch sizes compiles at most about log2(N) + 1 programs. The staging tensor, like the capture
plan, is made by an eager call (one of the bucket's row counts) before a capture.

A world is not a tensor, so an operator names it by a string, as torch's functional collectives name a process
group: ``register_world(world, library=None)`` gives the handle (the same one for the same world and library) and
``world_of(handle)`` the world back. The handle is a constant of the traced graph; the fake implementations read
the world size from it, so the output shapes and dtypes are known without running anything (FakeTensor, meta,
make_fx, torch.compile, with symbolic sizes too). Each operator takes one tensor per argument: this rank's, in a
real world (``World.from_torch()``) or in a virtual world of one rank; a virtual world of W > 1 ranks (one list of
W tensors per argument) is ditron.ops' own calls.

A call checks its arguments as ditron.ops does (the same OpError), allocates its output, and enqueues the op on
the caller's current stream with no host synchronisation (``sync=False``: a stuck call is found by the next
``Library.synchronize(world)`` or the watchdog, as for ditron.ops). The outputs are fresh tensors (never an
input, never reused by a later call), as torch.library requires. A later call with positional arguments of the
same form and plain tensors of the same shapes, dtypes and device is one C call (ditron.fastcall.op_front: its
checks then are that match, the world's registration, the executor's state, the device, capture and launch
hooks); from plain eager inference code (grad mode off) ``torch_ops.call(op, *args)`` (ditron.nn's layers, the
wrappers below) reaches it without torch's dispatcher.

Inside the caller's CUDA-graph capture (``torch.cuda.graph``) the op is captured into the caller's graph. The signal
values of an eager call depend on the call's epoch, so a replay of an eagerly captured call would meet the signals
of the replay before; the call is captured instead as one graph-mode call (the program traced once with epoch 1, on parity 0 of the
plan's two sets of signal pads) followed by a closing step on parity 1 that zeroes the own pads of parity 0 (the
program's final barrier again; for programs that fence by their waits, a barrier by driver memops; else the call
again: ``ditron.runtime.callplan``), so every replay finds the pads as the capture did; the same plan serves a
world of one rank. The plan (a graph-mode executor of its own: a second symmetric heap per op signature, loaded
kernels) must exist before the capture starts: the op's first eager call with the same shapes makes it (a
warm-up step of the model, as torch.cuda.graph's docs and serving engines do before capturing), and a capture
without it is refused with an error that says so. ``register_world(..., capturable=False)`` skips the plans.
``synchronize(world)`` waits for the calls of a world; ``close(world)`` frees its plans, after the graphs that
captured them are released.
"""
import itertools
import threading
from typing import Any

import torch

from . import fastcall, ops
from .runtime import eager
from .errors import DitronError

NAMESPACE = "ditron"
PREFIX = "ditron-world-"
DEVICE_TYPE = "cuda"   # where the operators' tensors live (benchmarks/bench_host.py --cpu-dry runs them on the CPU)


class WorldHandleError(DitronError, ValueError):
    """A world handle that names no world registered in this process (or a world that torch operators cannot
    take)."""


# ------------------------------------------------------------------------------------------------ worlds

_lock = threading.Lock()
_registered = itertools.count()   # handles count up: one unregistered never comes back as another world's
# handle -> (world, library or None: ops.default_library(), capturable)
_worlds: dict[str, tuple[Any, Any, bool]] = {}


def register_world(world, library: "ops.Library | None" = None, *, capturable: bool = True) -> str:
    """The handle (a string) that names ``world`` in the torch operators, with the ops.Library its calls use
    (default ``ops.default_library()``) and whether they may be captured into the caller's CUDA graphs
    (``capturable``: an op's first eager call then also makes its capture plan, a graph-mode executor with its own
    symmetric heap, see ditron.runtime.callplan; False saves that memory, and a capture of the op is refused). The
    same world and options always get the same handle; in a real world every rank registers its worlds in the same
    order, so a handle names the same world on every rank."""
    if not (hasattr(world, "world_size") and hasattr(world, "is_virtual")):
        raise WorldHandleError(f"register_world takes a ditron.World (World.virtual(1) or World.from_torch()), got "
                               f"{type(world).__name__}")
    if world.is_virtual and world.world_size != 1:
        raise WorldHandleError(f"torch operators take one tensor per argument: this process's rank; a virtual world "
                               f"of {world.world_size} ranks takes one list of tensors per argument, through "
                               "ditron.ops (use World.virtual(1) or World.from_torch())")
    if library is not None and not isinstance(library, ops.Library):
        raise WorldHandleError(f"register_world: library= takes an ops.Library, got {type(library).__name__}")
    if not isinstance(capturable, bool):
        raise WorldHandleError(f"register_world: capturable= takes True or False, got {capturable!r}")
    with _lock:
        for name, (w, lib, cap) in _worlds.items():
            if w is world and lib is library and cap is capturable:
                return name
        kind = "v" if world.is_virtual else "r"
        name = f"{PREFIX}{next(_registered)}-w{world.world_size}{kind}"
        _worlds[name] = (world, library, capturable)
        return name


def world_of(handle: str):
    """The world a handle names (WorldHandleError if none)."""
    return _entry(handle)[0]


def unregister_world(handle: str) -> None:
    """Forget a handle (its calls then raise WorldHandleError); the world itself is untouched."""
    with _lock:
        if _worlds.pop(handle, None) is None:
            raise WorldHandleError(f"no world is registered under the handle {handle!r}")


def _entry(handle: str) -> tuple[Any, Any, bool]:
    try:
        return _worlds[handle]
    except (KeyError, TypeError):
        known = ", ".join(sorted(_worlds)) or "none"
        raise WorldHandleError(f"{handle!r} is not the handle of a world registered in this process (registered: "
                               f"{known}); ditron.torch_ops.register_world(world) gives one") from None


# --------------------------------------------------------------------------------------------- arguments

def _params(op: str, shapes, params: dict[str, Any]) -> dict[str, Any]:
    """The op's parameters with its dims in range (as ops.Signature normalises them), or OpError."""
    out = dict(params)
    for name in ("dim", "split_dim", "concat_dim"):
        if name in out:
            rank = len(shapes[0])
            d = out[name]
            if not -rank <= d < rank:
                raise ops.OpError(f"{op}: {name} {d} is out of range for a tensor of shape {list(shapes[0])}")
            out[name] = d % rank
    return out


_checked: dict[tuple, dict[str, Any]] = {}   # a call's key -> its normalised parameters (checked in full once)


def _check(op: str, tensors, world_size: int, params: dict[str, Any]) -> dict[str, Any]:
    """Check the arguments as ditron.ops does; returns the normalised parameters. Concrete sizes get the whole
    check of ops.Signature, once per key (op, shapes, dtypes, world size, parameters); symbolic ones (torch.compile's
    dynamic shapes, which cannot be hashed) the structural one here, the rest of it deferred to the call (a symbolic
    size cannot be tested without a guard)."""
    try:
        key = (op, world_size, tuple(params.items()), *[(t.shape, t.dtype) for t in tensors])
        p = _checked.get(key)
    except (TypeError, AttributeError):  # a symbolic size, or not a tensor: checked below
        key = p = None
    if p is not None:
        return p
    p = _check_all(op, tensors, world_size, params)
    if key is not None and all(isinstance(d, int) for t in tensors for d in t.shape):
        _checked[key] = p
    return p


def _check_all(op: str, tensors, world_size: int, params: dict[str, Any]) -> dict[str, Any]:
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise ops.OpError(f"{op}: argument {i} is {type(t).__name__}, not a tensor")
    sizes = ops.SIZE_ARGS.get(op, ())
    for i in sizes:
        if tensors[i].dtype != torch.int32:
            raise ops.OpError(f"{op}: argument {i} holds sizes and must be an int32 tensor, got {tensors[i].dtype}")
    dtypes = {t.dtype for i, t in enumerate(tensors) if i not in sizes}
    if len(dtypes) > 1:
        raise ops.OpError(f"{op}: the arguments have different element types "
                          f"({', '.join(sorted(str(d) for d in dtypes))})")
    dtype = ops._dtype_name(tensors[0])
    shapes = [tuple(t.shape) for t in tensors]
    p = _params(op, shapes, params)
    if all(isinstance(d, int) for s in shapes for d in s):
        ops.Signature(op, tuple(shapes), dtype, world_size, False, "cuda:90", tuple(p.items()))
    elif op in ("ag_gemm", "gemm_rs", "gemm_ar"):
        (a, b) = shapes
        if len(a) != 2 or len(b) != 2:
            raise ops.OpError(f"{op}: needs a [M, K] and b [K, N], got {len(a)}-d and {len(b)}-d tensors")
        torch._check(a[1] == b[0], lambda: f"{op}: a [M, K] and b [K, N] need the same K, got {a} and {b}")
    return p


def _output(op: str, tensors, world_size: int, params: dict[str, Any]):
    shape = ops.output_shape(op, [tuple(t.shape) for t in tensors], world_size, params)
    return tensors[0].new_empty(shape)


def _run(op: str, tensors, handle: str, params: dict[str, Any], max_rows: int = 0):
    """The operator's implementation: one call of the ditron.ops op on this rank's tensors, enqueued on the current
    stream (captured into the caller's graph when the caller captures one). ``max_rows`` > 0: any rows up to it,
    through the op's bucket programs (ditron.buckets: the first argument staged, the real rows returned)."""
    entry = _entry(handle)
    if not max_rows and (out := fastcall.op_call(op, handle, params, tensors, entry)) is not fastcall.MISS:
        return out  # a call like a checked earlier one, not being captured: at once (ditron.fastcall)
    world, library, capturable = entry
    p = _check(op, tensors, world.world_size, params)
    _check_device(op, tensors)
    capturing = torch.cuda.is_current_stream_capturing()
    finish = None
    if max_rows:
        from .buckets import operator_staging
        tensors, finish = operator_staging(op, tensors, world, library, p, _max_rows(op, max_rows),
                                           make=not capturing)
    out = _output(op, tensors, world.world_size, p)
    virtual = world.is_virtual
    inputs = [list(tensors)] if virtual else list(tensors)
    outputs = [[out]] if virtual else [out]
    if capturing:
        _capture(op, tensors, world, library, capturable, p, inputs, outputs)
    else:
        ops._call(op, [[t] for t in tensors] if virtual else list(tensors), world, p, [out] if virtual else out,
                  False, library, None)
        if capturable:  # the plan a later capture of this call needs, made now (in a real world: collectively)
            from .runtime.callplan import plan_for
            plan_for(_executable(op, tensors, world, library, p), world, make=True)
        if finish is None:
            fastcall.op_remember(op, handle, params, tensors, entry, library or ops.default_library(), out, p)
    return out if finish is None else finish(out)


def _check_device(op: str, tensors) -> None:
    for i, t in enumerate(tensors):
        if t.device.type != DEVICE_TYPE:
            raise ops.OpError(f"{op}: argument {i} is on {t.device}; ditron's ops run on CUDA tensors")


def _max_rows(op: str, max_rows) -> int:
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0:
        raise ops.OpError(f"{op}: max_rows is a row count (0: exact shapes, one program per shape), got {max_rows!r}")
    if max_rows and op in ops.SIZE_ARGS:
        raise ops.OpError(f"{op}: max_rows (bucket programs) is not supported for an op with run-time sizes; call it "
                          "with its exact shapes")
    return max_rows


_executables: dict[tuple, tuple[Any, Any, Any]] = {}   # call key -> (world, library, Executable)


def _executable(op: str, tensors, world, library, p: dict[str, Any]):
    """The loaded Executable of a call (as ops._call finds it), cached by the call's key."""
    exe = _executable_if_loaded(op, tensors, world, library, p)
    if exe is not None:
        return exe
    lib = library or ops.default_library()
    sig = ops.Signature(op, tuple(tuple(t.shape) for t in tensors), ops._dtype_name(tensors[0]), world.world_size,
                        world.is_virtual, lib.target or lib.default_target(), tuple(p.items()))
    exe = lib.executable(sig)
    _executables[_call_key(op, tensors, world, library, p)] = (world, library, exe)
    return exe


def _call_key(op: str, tensors, world, library, p: dict[str, Any]) -> tuple:
    return (op, id(world), id(library), tuple(tuple(t.shape) for t in tensors), tensors[0].dtype,
            tuple(sorted(p.items())))


def _capture(op: str, tensors, world, library, capturable: bool, p, inputs, outputs) -> None:
    """The call inside the caller's CUDA-graph capture: its capture plan (ditron.runtime.callplan)."""
    from .runtime.callplan import CaptureNotPreparedError, plan_for, refusal
    shapes = " and ".join("x".join(map(str, t.shape)) for t in tensors)
    if not capturable:
        raise CaptureNotPreparedError(f"ditron::{op} ({shapes} {tensors[0].dtype}) is being captured into a CUDA "
                                      "graph, but its world was registered with capturable=False; register it with "
                                      "capturable=True (the default)")
    exe = _executable_if_loaded(op, tensors, world, library, p)
    why = None if exe is None else refusal(exe, world)
    if why is not None:
        raise CaptureNotPreparedError(f"ditron::{op} ({shapes} {tensors[0].dtype}) cannot be captured into a CUDA "
                                      f"graph: {why}")
    plan = None if exe is None else plan_for(exe, world, make=False)
    if plan is None:
        raise CaptureNotPreparedError(
            f"ditron::{op} ({shapes} {tensors[0].dtype}, world of {world.world_size}) is being captured into a CUDA "
            "graph before any eager call of it with these shapes: run the step once eagerly before torch.cuda.graph "
            "(a warm-up, as torch.cuda.graph's own docs advise), which loads the op and makes its capture plan "
            "(a symmetric heap and loaded kernels: nothing may be allocated or synchronised inside a capture)")
    plan.enqueue(inputs, outputs)


def _executable_if_loaded(op: str, tensors, world, library, p):
    found = _executables.get(_call_key(op, tensors, world, library, p))
    return found[2] if found is not None and found[0] is world and found[1] is library else None


def _fake(op: str, tensors, handle: str, params: dict[str, Any], max_rows: int = 0):
    world = _entry(handle)[0]
    p = _check(op, tensors, world.world_size, params)
    if _max_rows(op, max_rows):
        rows = tensors[0].shape[0]
        if isinstance(rows, int):
            from .buckets import bucket_rows
            bucket_rows(op, rows, world.world_size, max_rows, p)
        else:
            torch._check(rows <= max_rows, lambda: f"{op}: {rows} rows exceed max_rows={max_rows}")
    return _output(op, tensors, world.world_size, p)


def synchronize(world) -> None:
    """Wait on the host (with the watchdog) for every torch-operator call enqueued in ``world`` (a World or its
    handle): the eager calls (ops.Library.synchronize) and the executors of captured calls."""
    from .runtime.callplan import synchronize_plans
    w = world_of(world) if isinstance(world, str) else world
    for name, (known, library, _) in list(_worlds.items()):
        if known is w:
            (library or ops.default_library()).synchronize(w)
    synchronize_plans(w)


def close(world=None) -> None:
    """Free the capture plans' executors (of ``world``, a World or its handle, else of every world; in a real world
    collectively, on every rank); the eager executors are the ops.Library's (``Library.close()``)."""
    from .runtime.callplan import close_plans
    w = world_of(world) if isinstance(world, str) else world
    close_plans(w)
    fastcall.forget_world(w)
    for key in [k for k, (known, _, _) in _executables.items() if w is None or known is w]:
        del _executables[key]


# ------------------------------------------------------------------------------------------- operators
# Defined through torch.library.Library (schema, one CompositeExplicitAutograd kernel, a fake) rather than
# torch.library.custom_op, whose Python wrapper layers cost about five times as much host time per call (measured
# here: 92 against 18 us on a loaded CPU, for an op that only allocates its output). No autograd formula: the
# operators are for inference (a backward through one is torch's error naming it).

# op -> (schema text after the name, the parameter names after the world, in order)
SIGNATURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ag_gemm": ("(Tensor a, Tensor b, str world, int max_rows=0) -> Tensor", ()),
    "gemm_rs": ("(Tensor a, Tensor b, str world, int max_rows=0) -> Tensor", ()),
    "gemm_ar": ('(Tensor a, Tensor b, str world, str algorithm="auto", int max_rows=0) -> Tensor', ("algorithm",)),
    "all_gather": ("(Tensor x, str world, SymInt dim=0, int max_rows=0) -> Tensor", ("dim",)),
    "reduce_scatter": ("(Tensor x, str world, SymInt dim=0, int max_rows=0) -> Tensor", ("dim",)),
    "all_reduce": ('(Tensor x, str world, str algorithm="auto", int max_rows=0) -> Tensor', ("algorithm",)),
    "all_to_all": ("(Tensor x, str world, SymInt split_dim=0, SymInt concat_dim=0, int max_rows=0) -> Tensor",
                   ("split_dim", "concat_dim")),
    "grouped_gemm": ("(Tensor x, Tensor w, Tensor group_sizes, str world, str? gated=None, int max_rows=0) -> "
                     "Tensor", ("gated",)),
}
assert set(SIGNATURES) == set(ops.OPS), "every op of ditron.ops is a torch operator"

_library = torch.library.Library(NAMESPACE, "DEF")


def _define(op: str) -> None:
    schema, names = SIGNATURES[op]
    arity = ops.ARITY[op]
    defaults = ops.PARAMS[op]

    def split(args, kwargs) -> tuple[tuple, str, dict[str, Any], int]:
        """(tensors, world handle, parameters, max_rows) from the arguments as the dispatcher passes them: the
        parameters positional or by keyword, the defaults left out or filled in."""
        p = dict(defaults)
        p.update(zip((*names, "max_rows"), args[arity + 1:]))
        p.update(kwargs)
        return args[:arity], args[arity], p, p.pop("max_rows", 0)

    def kernel(*args, **kwargs):
        if not kwargs and eager.ENABLED and (calls := fastcall.fronts.get(op)) is not None:
            out = fastcall.run_front(calls, args)  # like a checked earlier call: one C call (fastcall.op_front)
            if out is not None:
                return out
        tensors, handle, p, max_rows = split(args, kwargs)
        out = _run(op, tensors, handle, p, max_rows)
        if not kwargs and not max_rows:
            fastcall.op_front(op, args, tensors, handle, p, _worlds)
        return out

    def fake(*args, **kwargs):
        return _fake(op, *split(args, kwargs))

    _library.define(op + schema)
    _library.impl(op, kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{op}", fake, lib=_library)


for _op in ops.OPS:
    _define(_op)
del _op

OPERATORS = {op: getattr(torch.ops.ditron, op) for op in ops.OPS}
# per operator: its tensors and the world (how many arguments ``call`` never strips), and the defaults of the
# parameters after them in the schema's order (max_rows last)
_ARITY1 = {op: ops.ARITY[op] + 1 for op in ops.OPS}
_TRAILING = {op: tuple(ops.PARAMS[op][name] for name in SIGNATURES[op][1]) + (0,) for op in ops.OPS}


# ------------------------------------------------------------------------ registered kernel programs

_custom_library = torch.library.Library(NAMESPACE, "FRAGMENT")
_custom: dict[str, tuple[Any, dict[str, Any]]] = {}   # name -> (ditron.custom_ops.CustomOp, its builder's params)


def register_custom_op(op, **params: Any):
    """A kernel program registered with ``ditron.register_op`` as the torch operator ``torch.ops.ditron.<name>``:
    ``ditron::<name>(Tensor x0, ..., str world) -> Tensor`` (a tuple of tensors for several outputs); ``params``:
    its builder's parameters, fixed for the operator. The fake implementation builds the program for the handle's
    world size and the tensors' shapes (ditron.device's builder: no MLIR, no GPU) and gives its outputs' shapes and
    dtypes; a call is the op's UserOp call on this rank's tensors (a real world, or a virtual world of one rank),
    enqueued on the current stream with no host synchronisation; a later call like a checked one (one output) is one
    C call, as the built-in operators' (fastcall.program_remember). Not capturable into the caller's CUDA graphs
    yet (refused inside a capture). Static shapes only. Returns the operator."""
    from .custom_ops import CustomOp
    from .user_ops import TORCH_DTYPES
    if not isinstance(op, CustomOp):
        raise DitronError(f"register_custom_op takes an op of ditron.register_op, got {type(op).__name__}")
    name = op.name
    if name in _custom:
        if _custom[name] != (op, params):
            raise DitronError(f"torch operator ditron::{name} is already registered for another op or parameters")
        return getattr(torch.ops.ditron, name)
    if not name.isidentifier() or name in ops.OPS:
        raise DitronError(f"register_custom_op: '{name}' cannot name a torch operator of namespace ditron (an "
                          f"identifier that is none of ditron.ops' own: {', '.join(ops.OPS)})")
    n_in, n_out = len(op.inputs), len(op.outputs)
    to_torch = {v: getattr(torch, k) for k, v in TORCH_DTYPES.items()}

    def program(tensors, world):
        dtypes = {str(t.dtype).removeprefix("torch.") for t in tensors}
        if len(dtypes) != 1 or next(iter(dtypes)) not in TORCH_DTYPES:
            raise ops.OpError(f"ditron::{name}: the tensors must share one of {', '.join(TORCH_DTYPES)}, got "
                              f"{', '.join(sorted(dtypes))}")
        return op.program(world.world_size, [tuple(int(d) for d in t.shape) for t in tensors],
                          TORCH_DTYPES[next(iter(dtypes))], **params)

    def fake(*args):
        tensors, handle = args[:n_in], args[n_in]
        outs = [tensors[0].new_empty(tuple(b.shape), dtype=to_torch[b.dtype])
                for b in program(tensors, _entry(handle)[0]).outputs]
        return outs[0] if n_out == 1 else tuple(outs)

    def kernel(*args):
        if eager.ENABLED and (calls := fastcall.fronts.get(name)) is not None:
            out = fastcall.run_front(calls, args)  # like a checked earlier call: one C call (fastcall.op_front)
            if out is not None:
                return out
        tensors, handle = args[:n_in], args[n_in]
        entry = _entry(handle)
        world = entry[0]
        if torch.cuda.is_current_stream_capturing():
            from .runtime.callplan import CaptureNotPreparedError
            raise CaptureNotPreparedError(f"ditron::{name} (a registered kernel program) cannot be captured into "
                                          "a CUDA graph yet: call it outside the capture")
        program(tensors, world)  # the same checks as the fake
        user = op.user_op
        result = user(*([[t] for t in tensors] if world.is_virtual else tensors), world=world, sync=False, **params)
        if world.is_virtual:
            result = result[0]
        if n_out == 1:  # the next call like this one: one C call
            exe = user.executable(world.world_size, world.is_virtual, [tuple(t.shape) for t in tensors],
                                  TORCH_DTYPES[str(tensors[0].dtype).removeprefix("torch.")], user.target, **params)
            fastcall.program_remember(name, args, tensors, handle, entry, exe, result, _worlds)
        return result if n_out == 1 else tuple(result)

    inputs = ", ".join(f"Tensor x{i}" for i in range(n_in))
    returns = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"
    _custom_library.define(f"{name}({inputs}{', ' if inputs else ''}str world) -> {returns}")
    _custom_library.impl(name, kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_custom_library)
    _custom[name] = (op, dict(params))
    return getattr(torch.ops.ditron, name)


# ------------------------------------------------------------------------------- Python-facing wrappers
# Each takes the world's handle (or a World, registered here with the default library: outside a compiled region,
# since registering is Python that torch.compile does not trace) and calls torch.ops.ditron.<op> (through ``call``).

def _handle(world) -> str:
    return world if isinstance(world, str) else register_world(world)


_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)
_function_modes = getattr(torch._C, "_is_torch_function_mode_enabled", lambda: False)
_tracing = getattr(torch._C, "_get_tracing_state", lambda: None)
_transforms = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


def call(op: str, *args):
    """``torch.ops.ditron.<op>(*args)`` (positional arguments, in the schema's order). In plain eager inference
    code -- not traced, scripted or compiled, grad mode off (torch.no_grad / inference_mode), no torch function or
    dispatch mode, no functorch transform -- a call like a checked earlier one (the same arguments after the
    tensors, trailing defaults left out as the dispatcher leaves them out; plain tensors of the same shapes) goes
    straight to its one C call (fastcall.op_front) without torch's dispatcher in front of it; anything else is the
    operator's call. ditron.nn's layers and the wrappers below call this."""
    if not torch.compiler.is_compiling() and eager.ENABLED and (calls := fastcall.fronts.get(op)) is not None \
            and not torch.is_grad_enabled() and not _dispatch_modes() and not _function_modes() \
            and _tracing() is None and not _transforms():
        n, defaults = len(args), _TRAILING.get(op)
        if defaults is not None and n <= _ARITY1[op] + len(defaults):  # else the dispatcher's schema error
            first = _ARITY1[op]
            while n > first and type(args[n - 1]) is type(defaults[n - first - 1]) and \
                    args[n - 1] == defaults[n - first - 1]:
                n -= 1
        out = fastcall.run_front(calls, args if n == len(args) else args[:n])
        if out is not None:
            return out
    return getattr(torch.ops.ditron, op)(*args)


def ag_gemm(a, b, world, max_rows: int = 0):
    """torch.ops.ditron.ag_gemm: a [m, K] (this rank's rows), b [K, n] -> [W*m, n] = all_gather(a) @ b."""
    return call("ag_gemm", a, b, _handle(world), max_rows)


def gemm_rs(a, b, world, max_rows: int = 0):
    """torch.ops.ditron.gemm_rs: a [M, k], b [k, N] (K sharded) -> [M/W, N] = this rank's rows of sum(a @ b)."""
    return call("gemm_rs", a, b, _handle(world), max_rows)


def gemm_ar(a, b, world, algorithm: str = "auto", max_rows: int = 0):
    """torch.ops.ditron.gemm_ar: a [M, k], b [k, N] (K sharded) -> [M, N] = sum over ranks of a @ b."""
    return call("gemm_ar", a, b, _handle(world), algorithm, max_rows)


def all_gather(x, world, dim: int = 0, max_rows: int = 0):
    """torch.ops.ditron.all_gather: every rank's x concatenated along dim."""
    return call("all_gather", x, _handle(world), dim, max_rows)


def reduce_scatter(x, world, dim: int = 0, max_rows: int = 0):
    """torch.ops.ditron.reduce_scatter: the sum over ranks of x, this rank's part r of W along dim."""
    return call("reduce_scatter", x, _handle(world), dim, max_rows)


def all_reduce(x, world, algorithm: str = "auto", max_rows: int = 0):
    """torch.ops.ditron.all_reduce: the sum over ranks of x."""
    return call("all_reduce", x, _handle(world), algorithm, max_rows)


def all_to_all(x, world, split_dim: int = 0, concat_dim: int = 0, max_rows: int = 0):
    """torch.ops.ditron.all_to_all: part r of x along split_dim to rank r, concatenated along concat_dim."""
    return call("all_to_all", x, _handle(world), split_dim, concat_dim, max_rows)


def grouped_gemm(x, w, group_sizes, world, gated: str | None = None, max_rows: int = 0):
    """torch.ops.ditron.grouped_gemm: x [T, K] grouped by expert, w [E, K, N], group_sizes [G] int32 -> [T, N]
    (ditron.ops.grouped_gemm says what it computes); gated="silu": w [E, K, 2N] -> silu(x @ gate) * (x @ up)."""
    return call("grouped_gemm", x, w, group_sizes, _handle(world), gated, max_rows)


__all__ = ["NAMESPACE", "OPERATORS", "WorldHandleError", "ag_gemm", "call", "all_gather", "all_reduce", "all_to_all", "close",
           "gemm_ar", "gemm_rs", "grouped_gemm", "reduce_scatter", "register_custom_op", "register_world", "synchronize",
           "unregister_world", "world_of"]
