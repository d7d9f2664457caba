"""The fast path of an eager op call (``ditron.ops`` and the ``torch.ops.ditron`` operators) with fresh tensors.

The first eager call of an op with a set of shapes goes the whole way (``ops._call``: arguments checked, the
Signature built, the executable found or built, ``Executable.run``: the tensors checked against the program, the
executor's call plan made, runtime/eager.py). It then leaves a ``FastCall`` in its library under a key that
holds what those checks depended on: the op, the world, the parameters and, for every tensor of every rank (and
every given output), its shape, element type, device and whether it is contiguous. A later call whose key matches
skips every check and lookup: it binds its tensors into the executor's call plan (data pointers swapped in,
outputs allocated) and enqueues it -- one tuple built, one dict lookup, the plan's steps. A call whose key does not
match (another shape, a non-contiguous tensor, another device) takes the whole way, checked as before.

The torch operators (torch_ops._run) keep the same per operator call: a key of (op, world handle, parameters, each
tensor's shape, dtype, device, contiguity) to the output's shape and dtype and the op's FastCall, so that an eager
operator call allocates its output and enqueues, with the capture plan made by the first call (outside any capture;
a call inside the caller's capture always takes the capture path).

After the first such operator call, the next one is a single C call (``op_front``: hotpath.c's op_call, which the
operator's kernel tries first, and ``torch_ops.call`` without torch's dispatcher in plain eager code): the
positional arguments matched against the checked call's, the output made, the plan's C program run.

``ditron.runtime.eager.ENABLED = False`` turns both off (every call interpreted, as before: the benchmark's
baseline). Imports torch only.
"""
from __future__ import annotations

from typing import Any, Sequence

from .runtime import eager
from .schema import DIVISIBILITY

MISS = object()   # what ``call`` returns when the call must take the whole way


def tensor_sigs(ts) -> tuple:
    """What a checked call depended on about each tensor of ``ts``: its shape, element type, device and whether it
    is contiguous (raises AttributeError / TypeError for a non-tensor). One comprehension, no call per tensor."""
    return tuple([(t.shape, t.dtype, t.device, t.is_contiguous()) for t in ts])


def tensor_sig(t) -> tuple:
    """``tensor_sigs`` of one tensor."""
    return tensor_sigs((t,))[0]


def key(op: str, world, params: dict[str, Any], tensors: Sequence[Any], out) -> tuple:
    """The fast-path key of an ops call (virtual world: each argument a list of one tensor per rank)."""
    if world.is_virtual:
        sig = tensor_sigs([t for arg in tensors for t in arg])
        outs = None if out is None else tensor_sigs(out)
    else:
        sig = tensor_sigs(tensors)
        outs = None if out is None else tensor_sig(out)
    return (op, id(world), tuple(params.items()) if params else (), len(tensors), sig, outs)


class FastCall:
    """An op's checked call with one set of shapes in one world: its executor's call plan, ready to bind fresh
    tensors of those shapes."""

    __slots__ = ("world", "exe", "ex", "plan", "virtual", "W")

    def __init__(self, world, exe, ex, plan):
        self.world, self.exe, self.ex, self.plan = world, exe, ex, plan
        self.virtual, self.W = world.is_virtual, world.world_size

    @property
    def live(self) -> bool:
        return not self.ex._closed and self.ex._broken is None

    def __call__(self, tensors: Sequence[Any], out, sync: bool):
        """ops' call with these tensors (checked by the key): results as ``ops._call`` returns them."""
        if self.virtual:  # per argument a tensor per rank -> per rank its tensors (bind reads them in order)
            outs = None if out is None else [[o] for o in out]
            return [r[0] for r in self.plan.call(list(zip(*tensors)), outs, sync)]
        return self.plan.call([tensors], None if out is None else [[out]], sync)[0][0]

    def one(self, tensors: Sequence[Any], out) -> None:
        """A torch operator's call: this rank's tensors (a real world, or a virtual world of one rank) into ``out``,
        enqueued without host synchronisation."""
        self.plan.call([tensors], [[out]], False)


def call(lib, op: str, tensors: Sequence[Any], world, params: dict[str, Any], out, sync: bool):
    """The call through its FastCall where an earlier call left one under its key, else MISS (no import, no
    frame beyond the plan's: a function-level import costs about a microsecond per call)."""
    if not eager.ENABLED:
        return MISS
    try:
        fast = lib._eager.get(key(op, world, params, tensors, out))
    except (AttributeError, TypeError, IndexError):
        return MISS
    if fast is None or fast.world is not world or not fast.live:
        return MISS
    return fast(tensors, out, sync)


def _eager_executor(exe, world):
    """The open eager (not graph-mode) executor of ``exe`` in ``world`` that makes call plans, or None."""
    return next((e for e in getattr(exe, "_executors", ()) if e.world is world and not e._closed and
                 not getattr(e, "graph", False) and hasattr(e, "plan_for_call")), None)


def remember(lib, op: str, tensors: Sequence[Any], world, params: dict[str, Any], out, exe) -> FastCall | None:
    """After a checked eager call: its FastCall, kept in ``lib`` (None where the executor made no plan)."""
    if not eager.ENABLED:
        return None
    try:
        k = key(op, world, params, tensors, out)
    except (AttributeError, TypeError, IndexError):
        return None
    if not all(s[3] for s in k[4]):  # a non-contiguous input is copied by the checked path
        return None
    ex = _eager_executor(exe, world)  # the one that ran the call
    if ex is None:
        return None
    rows = [list(r) for r in zip(*tensors)] if world.is_virtual else [list(tensors)]
    outs = None if out is None else ([[o] for o in out] if world.is_virtual else [[out]])
    plan = ex.plan_for_call(rows, outs)
    if plan is None:
        return None
    fast = lib._eager[k] = FastCall(world, exe, ex, plan)
    return fast


# ------------------------------------------------------------------------------------------ torch operators

_ops: dict[tuple, tuple[Any, Any, FastCall]] = {}   # key -> (world entry, eager.output_maker of the output, fast)


def op_key(op: str, handle: str, params: dict[str, Any], tensors: Sequence[Any]) -> tuple:
    return (op, handle, tuple(params.items()), tensor_sigs(tensors))


def op_call(op: str, handle: str, params: dict[str, Any], tensors: Sequence[Any], entry):
    """A torch operator's eager call through its fast path (the output tensor), or MISS."""
    if not eager.ENABLED:
        return MISS
    try:
        found = _ops.get(op_key(op, handle, params, tensors))
    except (AttributeError, TypeError):
        return MISS
    if found is None or found[0] is not entry or not found[2].live:
        return MISS
    if eager.torch_module().cuda.is_current_stream_capturing():  # (asked only now: the tensors are on the GPU)
        return MISS                                                 # the capture path
    _, make, fast = found
    out = make()
    fast.one(tensors, out)
    return out


def op_remember(op: str, handle: str, params: dict[str, Any], tensors: Sequence[Any], entry, lib, out,
                normalised: dict[str, Any]) -> None:
    """After a torch operator's checked eager call (whose ops call, with the ``normalised`` parameters, left a
    FastCall in ``lib`` under the ops key); ``params`` as the operator was given them."""
    if not eager.ENABLED:
        return
    world = entry[0]
    args = [[t] for t in tensors] if world.is_virtual else list(tensors)
    o = [out] if world.is_virtual else out
    try:
        fast = lib._eager.get(key(op, world, normalised, args, o))
        k = op_key(op, handle, params, tensors)
    except (AttributeError, TypeError):
        return
    if fast is not None:
        _ops[k] = (entry, eager.output_maker(tuple(out.shape), out.dtype, out.device), fast)


# ------------------------------------------------------------------------------ operator calls in one C call

fronts: dict[str, tuple] = {}   # op -> its C calls (hotpath.c's make_op_call), newest first: the operator's kernel
_front_keys: dict[str, list[tuple[tuple, tuple, Any]]] = {}   # op -> [(_ops key, its _ops entry, C call)], newest first
FRONTS_PER_OP = 16              # the C calls kept per operator (a call matches them in turn)
run_front = None                # hotpath.c's op_call(calls, args), set with the first front


def op_front(op: str, args: tuple, tensors: Sequence[Any], handle: str, params: dict[str, Any], worlds) -> None:
    """After a torch operator's eager call made with positional arguments only (``args`` as the dispatcher gave
    them): where that call left a FastCall whose plan is C programs (``EagerPlan.native``: one row; its
    prechecks are alignment checks, done in C), the whole next such call in one C call (hotpath.c's op_call; the operator's kernel tries
    ``fronts[op]`` first): the arguments matched, the output made, the epoch taken (and, where buffers rotate, its
    parity's pads bound), the program run, the milestones of the call's end queued. ``worlds``: torch_ops'
    registered worlds."""
    if not (eager.ENABLED and eager.NATIVE):
        return
    try:
        k = op_key(op, handle, params, tensors)
        found = _ops.get(k)
    except (AttributeError, TypeError):
        return
    if found is None or any(key == k and made is found for key, made, _ in _front_keys.get(op, ())):
        return
    _forget_front(op, lambda key, made: key == k or made[2].ex._closed)  # a stale one, or a closed executor's
    entry, make, fast = found
    plan = fast.plan
    native = getattr(plan, "native", None)
    rotates = bool(fast.ex._rotates)
    if not native or sorted(native) != ([0, 1] if rotates else [0]) or len(plan.rows) != 1 or \
            len(plan.output_slots) != 1 or len(plan.inputs) != len(tensors) or not fast.live:
        return
    from .runtime.memops import hotpath
    from .runtime.timeouts import Milestone
    hot = hotpath()
    if hot is None or not hasattr(hot, "make_op_call"):
        return
    torch = eager.torch_module()
    programs = tuple(tuple(native[p][2]) for p in sorted(native))  # (capsule, the steps it borrows)
    global run_front
    run_front = hot.op_call

    def fail(res, epoch):
        raise plan._native_failure(native[epoch & 1 if rotates else 0][1], tuple(res), epoch)
    capturing = torch.cuda.is_current_stream_capturing
    if capturing is _torch_capturing() and hasattr(torch._C, "_cuda_isCurrentStreamCapturing"):
        capturing = torch._C._cuda_isCurrentStreamCapturing  # what it calls, without its Python frame
    marks = tuple(tuple((q.append, ev, rank, s) for q, ev, rank, s in plan.join_marks[i])
                  for i in range(len(plan.join_marks)))
    c = hot.make_op_call(handle, tuple(args[len(tensors) + 1:]), tuple(type(t) for t in tensors),
                         tuple(t.shape for t in tensors), tuple(t.dtype for t in tensors),
                         tuple(t.device for t in tensors), plan.n_args, (*plan.inputs, plan.output_slots[0]),
                         tuple(sorted(plan.aligned.get(plan.ranks[0], ()))), DIVISIBILITY, make,
                         worlds, entry, fast.ex, plan.max_epoch, programs, fast.ex._use_parity if rotates else None,
                         plan.current_raw, plan.index, plan.get_device, capturing, plan.hooks, fast.ex.watch.prune,
                         eager.PRUNE_AT, Milestone, marks, fail)
    kept = [(k, found, c)] + _front_keys.get(op, [])[:FRONTS_PER_OP - 1]
    _front_keys[op] = kept
    fronts[op] = tuple(cap for _, _, cap in kept)


def program_remember(name: str, args: tuple, tensors: Sequence[Any], handle: str, entry, exe, out, worlds) -> None:
    """After a registered kernel program's torch operator call (torch_ops.register_custom_op: one output ``out``,
    run by ``exe`` in the world of ``entry``): its FastCall under the operator key, then its C call (op_front)."""
    if not (eager.ENABLED and eager.NATIVE):
        return
    try:
        k = op_key(name, handle, {}, tensors)
    except (AttributeError, TypeError):
        return
    world = entry[0]
    found = _ops.get(k)
    if found is not None and found[0] is entry and found[2].exe is exe and found[2].live:
        op_front(name, args, tensors, handle, {}, worlds)  # (made again where dropped; else nothing to do)
        return
    if not all(s[3] for s in k[3]) or not hasattr(out, "data_ptr"):
        return
    ex = _eager_executor(exe, world)
    plan = None if ex is None else ex.plan_for_call([list(tensors)], [[out]])
    if plan is None:
        return
    _ops[k] = (entry, eager.output_maker(tuple(out.shape), out.dtype, out.device), FastCall(world, exe, ex, plan))
    op_front(name, args, tensors, handle, {}, worlds)


def _torch_capturing():
    """torch's own is_current_stream_capturing (torch.cuda's attribute may be replaced, as the dry benchmark does)."""
    from torch.cuda import graphs
    return graphs.is_current_stream_capturing


def drop_fronts() -> None:
    """Forget every operator's C calls (later calls take the Python way until a checked call makes them again;
    ``eager.NATIVE = False`` first keeps them away: the benchmark's baseline)."""
    fronts.clear()
    _front_keys.clear()


def _forget_front(op: str, gone) -> None:
    """Drop op's C calls for which ``gone(key, _ops entry)`` holds."""
    kept = [(k, made, c) for k, made, c in _front_keys.get(op, ()) if not gone(k, made)]
    if kept:
        _front_keys[op], fronts[op] = kept, tuple(c for _, _, c in kept)
    else:
        _front_keys.pop(op, None)
        fronts.pop(op, None)


def _prune_fronts() -> None:
    """Keep only the C calls whose _ops entry is still the one they were made from."""
    for op in list(_front_keys):
        _forget_front(op, lambda k, made: _ops.get(k) is not made)


def forget_world(world=None) -> None:
    """Drop the operators' fast calls in ``world`` (else all)."""
    for k in [k for k, v in _ops.items() if world is None or v[0][0] is world]:
        del _ops[k]
    _prune_fronts()


def forget(exe=None, lib=None) -> None:
    """Drop the fast calls of ``exe`` (else all), the library's and the operators': its executors are closed."""
    if lib is not None:
        lib._eager = {k: v for k, v in lib._eager.items() if exe is not None and v.exe is not exe}
    for k in [k for k, v in _ops.items() if exe is None or v[2].exe is exe]:
        del _ops[k]
    _prune_fronts()


__all__ = ["FRONTS_PER_OP", "MISS", "FastCall", "call", "drop_fronts", "forget", "forget_world", "fronts", "key",
           "op_call", "op_front", "op_key", "op_remember", "program_remember", "remember"]
