"""The one table of collective lowerings, keyed by (op, algorithm).

``op`` is a collective's name (``all_gather``, ``reduce_scatter``, ``all_reduce``, ``all_to_all``: the
``ditron_task`` op) or a fused pattern's overlap kind (``ag_matmul``, ``matmul_rs``, ``matmul_ar``: ditron-fuse-
overlap's groups); ``algorithm`` is the ``algorithm`` field of the op's ``ditron.tiling`` (ditron-tile's choice; a
tiling without one means the op's DEFAULTS entry). A module of this package registers each of its algorithms with
``@register(op, algorithm)``:

* a collective's lowering is ``fn(ctx, op, t, x, out)``: x the memref of the op's input, out the memref of its
  (first) result (already placed: ``ctx.dest``); it runs only for world > 1 (one rank: a local copy, here),
  except for ops of several results (the bounded all_to_all and its recv_counts), lowered for every world;
* a fused pattern's lowering is ``fn(ctx, g, t)`` for the OverlapGroup g; it runs only for world > 1
  (one rank: the GEMM alone, in ditron-lower-task-to-device).
"""
from __future__ import annotations

from typing import Callable

from mlir import ir

from ..tiling import OverlapGroup, Tiling
from .context import LoweringContext

COLLECTIVES = {  # op (the ditron_task op's name) -> the name of its output buffer
    "all_gather": "ag", "reduce_scatter": "rs", "all_reduce": "ar", "all_to_all": "a2a"}
FUSED = ("ag_matmul", "matmul_rs", "matmul_ar")
# the algorithm a tiling without an ``algorithm`` field means
DEFAULTS = {"all_gather": "pull", "reduce_scatter": "reduce_kernel", "all_reduce": "one_shot", "all_to_all": "pull",
            "ag_matmul": "pull", "matmul_rs": "reduce_kernel", "matmul_ar": "one_shot"}

Lowering = Callable[..., None]
ALGORITHMS: dict[tuple[str, str], Lowering] = {}


def register(op: str, algorithm: str) -> Callable[[Lowering], Lowering]:
    """Decorator: ``fn`` lowers ``op`` by ``algorithm``. One lowering per key."""
    if op not in COLLECTIVES and op not in FUSED:
        raise ValueError(f"register: unknown collective '{op}' (known: {', '.join([*COLLECTIVES, *FUSED])})")

    def add(fn: Lowering) -> Lowering:
        if (op, algorithm) in ALGORITHMS:
            raise ValueError(f"register: {op} algorithm '{algorithm}' is registered twice "
                             f"({ALGORITHMS[op, algorithm].__module__} and {fn.__module__})")
        ALGORITHMS[op, algorithm] = fn
        return fn
    return add


def algorithms(op: str) -> list[str]:
    """The algorithms registered for op, in registration order."""
    return [a for (o, a) in ALGORITHMS if o == op]


def lowering(ctx: LoweringContext, at: ir.Operation, op: str, t: Tiling) -> Lowering:
    """The registered lowering of op by t's algorithm; a located error at ``at`` when there is none."""
    algorithm = t.algorithm or DEFAULTS[op]
    fn = ALGORITHMS.get((op, algorithm))
    if fn is None:
        raise ctx.error(at, f"has {op} algorithm '{algorithm}' in its 'ditron.tiling', which has no device "
                            f"lowering (registered: {', '.join(sorted(algorithms(op))) or 'none'}); run ditron-tile again")
    return fn


def lower_collective(ctx: LoweringContext, op: ir.Operation, t: Tiling) -> None:
    """Lower a standalone collective op (not in an overlap group)."""
    name = op.name.split(".", 1)[1]
    x = ctx.buf(op.operands[0])
    out = ctx.dest(op.results[0], COLLECTIVES[name])
    if len(op.results) > 1:  # the bounded all_to_all: even one rank clips to the capacity and counts the rows
        lowering(ctx, op, name, t)(ctx, op, t, x, out)
        return
    if (t.world or 1) == 1:  # one rank: the collective is the identity
        ctx.local_copy(x, out, lane="compute")
        return
    lowering(ctx, op, name, t)(ctx, op, t, x, out)


def lower_fused(ctx: LoweringContext, g: OverlapGroup, t: Tiling) -> None:
    """Lower an overlap group (world > 1) by its fused pattern."""
    lowering(ctx, g.collective, g.kind, t)(ctx, g, t)
