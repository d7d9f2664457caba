"""ditron.register_op: a user's kernel program as an op of task programs and of torch tensors.

    import ditron, ditron.frontend as dt

    def build(W, shapes, dtype, *, sm_budget, target, **params) -> ditron.device.Program:
        ...                                        # this rank's program for local input shapes (a ditron.device builder)

    gather = ditron.register_op("user_gather", build, inputs=[dt.shard(0, "tp")], outputs=[dt.replicated],
                                reference=lambda x: x)

    @dt.program(dt.Mesh(tp=4))
    def f(x: dt.Tensor[(64, 32), "f32", dt.shard(0, "tp")], w: dt.Tensor[(32, 48), "f32", dt.shard(1, "tp")]):
        return gather(x) @ w                       # a ditron_task.custom op, then a matmul

    ys = gather([x0, x1], world=ditron.World.virtual(2))    # on torch tensors, like ditron.ops (a UserOp)

The *sharding rule* says how the kernel program takes its inputs and gives its outputs over the mesh axis it runs
over (``axis``, default: the one its shardings name): one frontend sharding (``dt.shard``, ``dt.partial``,
``dt.replicated``) per input and per output. In a task program the op is ``ditron_task.custom {kernel = name,
axis, in_shardings, out_shardings, params}`` (verified: arity, shapes, the rule over one axis, no padding);
ditron-partition converts each operand to the sharding the rule takes (all-gathers, reduce-scatters, as for any
use) and lays the results out as it gives them; ditron-tile records the world and SM budget; ditron-lower-task-to-
device builds the program for the world, the local shapes, the element type, the target and the SMs, checks it
takes and gives those shapes, and inlines it into the device function (its buffers, pads, copies, signals, waits,
template and @ditron.jit launches; its stream 0 on the compute lane, its other streams on the comm lane).

``reference(*inputs, **params)`` is the op's numpy semantics in the *global* view (whole tensors; one array, or a
tuple of arrays for several outputs): ``ditron.reference`` evaluates the op with it (in the local view: the
operands unsharded by the rule, the results sharded by it), so ``ditron sim`` and ``ditron.ops.reference``-style
checks of a task program compare against the user's own definition.

A registered op lives in this process (the IR names it): lowering a task program that names a kernel program no
process registered is a located error. The builder is ``UserOp``'s (ditron.user_ops), so the op is also a UserOp
on torch tensors (``op(tensors..., world=...)``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .errors import DitronError

__all__ = ["register_op", "registered", "load", "CustomOp", "CustomOpError", "REGISTRY"]


class CustomOpError(DitronError):
    """A custom op registered or called with arguments that do not fit it."""


REGISTRY: dict[str, "CustomOp"] = {}

# MLIR element types -> the builder's dtype names (ditron.device)
ELEMENTS = {"bf16": "bf16", "f16": "f16", "f32": "f32", "i32": "i32"}
NUM_SMS = 132


@dataclass
class CustomOp:
    """A registered kernel program (``register_op``): its builder, its sharding rule, its reference."""

    name: str
    build: Callable[..., Any]
    inputs: tuple
    outputs: tuple
    reference: Callable[..., Any]
    axis: str | None = None
    _user_op: Any = field(default=None, repr=False)

    # ---- the program for one call of the op

    def program(self, world_size: int, shapes: Sequence[Sequence[int]], dtype: str, *, target: str = "cuda:90",
                sm_budget: int = NUM_SMS, **params: Any):
        """The builder's Program for local input ``shapes`` in a world of ``world_size`` ranks, checked to take
        those inputs (CustomOpError otherwise)."""
        from .device import Program
        p = self.build(world_size, [tuple(s) for s in shapes], dtype, sm_budget=sm_budget, target=target, **params)
        if not isinstance(p, Program):
            raise CustomOpError(f"custom op '{self.name}': its builder returned {type(p).__name__}, not a "
                                "ditron.device.Program")
        if p.world_size != world_size:
            raise CustomOpError(f"custom op '{self.name}': its builder made a program for {p.world_size} rank(s), "
                                f"the mesh axis has {world_size}")
        got = [tuple(b.shape) for b in p.inputs]
        if got != [tuple(s) for s in shapes] or any(b.dtype != dtype for b in p.inputs):
            raise CustomOpError(f"custom op '{self.name}': its program takes {[list(s) for s in got]} "
                                f"({', '.join(b.dtype for b in p.inputs) or 'nothing'}); the op passes "
                                f"{[list(s) for s in shapes]} {dtype}")
        if len(p.outputs) != len(self.outputs):
            raise CustomOpError(f"custom op '{self.name}': its sharding rule names {len(self.outputs)} output(s), its "
                                f"program has {len(p.outputs)}")
        return p

    def evaluate(self, arrays: Sequence[Any], params: dict) -> list:
        """The reference's outputs (a list of arrays) for global input arrays."""
        import numpy as np
        out = self.reference(*arrays, **params)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(self.outputs):
            raise CustomOpError(f"custom op '{self.name}': its reference returned {len(outs)} array(s) for "
                                f"{len(self.outputs)} output(s)")
        return [np.asarray(o) for o in outs]

    # ---- calls

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """In a traced task program (frontend values): the ``ditron_task.custom`` op. On torch tensors: the
        ``UserOp`` call (``world=``, ``out=``, ``sync=``, ``graph=``)."""
        from . import frontend
        if args and isinstance(args[0], frontend.Value):
            return frontend.custom(self, *args, **kwargs)
        return self.user_op(*args, **kwargs)

    @property
    def user_op(self):
        """The op on torch tensors (ditron.user_ops.UserOp, arity = its inputs)."""
        if self._user_op is None:
            from .user_ops import UserOp
            self._user_op = UserOp(self.name, self.build, arity=len(self.inputs))
        return self._user_op


def register_op(name: str, build: Callable[..., Any], *, inputs: Sequence[Any], outputs: Sequence[Any],
                reference: Callable[..., Any], axis: str | None = None) -> CustomOp:
    """Register a kernel program as op ``name`` (see the module doc): ``build(W, shapes, dtype, *, sm_budget,
    target, **params) -> ditron.device.Program`` for local input shapes; ``inputs`` / ``outputs``: the sharding
    rule, one frontend sharding per input / output, over one mesh axis (``axis``); ``reference``: the numpy
    semantics in the global view. Registering a name again replaces it (a module imported again)."""
    import re

    from .frontend import Spec
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", name):
        raise CustomOpError(f"register_op: the name must be letters, digits, '_' and '.', got {name!r}")
    if not callable(build) or not callable(reference):
        raise CustomOpError(f"register_op '{name}': build and reference must be callable")
    specs = []
    for what, group in (("inputs", inputs), ("outputs", outputs)):
        group = tuple(group)
        for i, s in enumerate(group):
            if not isinstance(s, Spec):
                raise CustomOpError(f"register_op '{name}': {what}[{i}] is {s!r}, not a sharding (dt.shard(...), "
                                    "dt.partial(...), dt.replicated)")
            if s.padded:
                raise CustomOpError(f"register_op '{name}': {what}[{i}] is padded; a kernel program takes whole "
                                    "shards")
        specs.append(group)
    if not specs[1]:
        raise CustomOpError(f"register_op '{name}': it has no outputs (outputs=[...] names one sharding each)")
    used = {a for group in specs for s in group for _, axes in s.splits for a in axes} | \
        {a for group in specs for s in group for a in s.partial}
    if axis is None:
        if len(used) > 1:
            raise CustomOpError(f"register_op '{name}': its shardings use mesh axes {sorted(used)}; a kernel program "
                                "runs over one axis")
        axis = next(iter(used), None)
    elif used - {axis}:
        raise CustomOpError(f"register_op '{name}': its shardings use mesh axis '{sorted(used - {axis})[0]}', but it "
                            f"runs over axis '{axis}'")
    op = CustomOp(name, build, specs[0], specs[1], reference, axis)
    REGISTRY[name] = op
    return op


def load(sources: Sequence[str]) -> None:
    """Run each Python file (a path ending in .py) or import each module, for the kernel programs it registers
    (``ditron-opt --load``, ``ditron sim --load``: a process that lowers or simulates IR naming them). A file's
    directory is on sys.path while it runs, so it imports its neighbours."""
    import importlib
    import os
    import runpy
    import sys
    for src in sources:
        try:
            if src.endswith(".py"):
                if not os.path.exists(src):
                    raise CustomOpError(f"--load {src}: no such file")
                folder = os.path.dirname(os.path.abspath(src))
                sys.path.insert(0, folder)
                try:
                    runpy.run_path(src, run_name=f"ditron_load_{os.path.basename(src)[:-3]}")
                finally:
                    sys.path.remove(folder)
            else:
                importlib.import_module(src)
        except DitronError:
            raise
        except Exception as err:  # noqa: BLE001 - the user's module failed: say which and why
            raise CustomOpError(f"--load {src}: {type(err).__name__}: {err}") from None


def registered(name: str) -> CustomOp:
    """The op registered as ``name`` (KeyError, naming those registered, if none)."""
    op = REGISTRY.get(name)
    if op is None:
        known = ", ".join(sorted(REGISTRY)) or "none"
        raise KeyError(f"no kernel program '{name}' is registered in this process (ditron.register_op; "
                       f"registered: {known})")
    return op
