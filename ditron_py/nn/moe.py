"""Expert parallelism: a Hugging Face sparse MoE block (MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock, ...) whose
experts are sharded over the ranks, tokens dispatched to their experts' ranks and combined back through ditron.

    moe = ditron.nn.ExpertParallelMoE(block, world)     # rank r keeps experts r*E/W .. (r+1)*E/W - 1
    y = moe(x)                                           # x: this rank's tokens [..., H]; y: the block's output

One call, on every rank (T tokens of H features, top-k of E experts, E/W experts a rank, all on the device; no host
synchronisation unless a capacity below the worst case is given, whose overflow is then read back and raised):

1. **Route** (torch, the block's own router ``block.gate``: logits, softmax, top-k and its renormalisation as the
   model defines them): each token's k experts and weights. The T*k (token, expert) pairs are sorted by expert
   (a stable sort: ``route``), so that the rows for rank d's experts are consecutive, rank 0's first.
2. **Dispatch**: ``ops.all_to_all(rows, splits=rows per rank, capacity=C)`` (ditron.ops_sized: sizes exchanged on
   the device) sends each rank the rows of its experts; the per-expert counts go along by a static
   ``ops.all_to_all`` (f32, exact below 2^24) so that each rank knows, per source rank, how many of the rows it
   received belong to each of its experts.
3. **Experts**: the received rows (source-major, expert-minor) are used as they arrive: W * E_l groups (source s,
   expert j: the rows s sent for j), group s * E_l + j times expert j's weights (ops.grouped_gemm cycles the
   groups over the experts) -- no regroup and no unsort, nothing of the capacity's padding rows touched but the
   GEMMs' zero rows. ``ops.grouped_gemm(gated='silu')`` computes silu(x @ gate) * (x @ up) in one launch (the
   gate and up tiles in one program, the [rows, I] result stored once; ``fused_act``: SiLU, Mixtral's and
   Qwen3-MoE's), then ``ops.grouped_gemm`` with the down projection. Another activation runs unfused: the GEMM of
   [rows, 2I], then the block's ``act(gate) * up`` in torch.
4. **Combine**: ``ops.all_to_all(results, splits=recv counts, capacity=T*k)`` returns every row to its source, in
   the order it was sent; each is weighted by its router weight and added into its token (``index_add_``, as the
   block does).

Capacity. ``capacity`` bounds the rows one rank receives in the dispatch (the received buffer, and the grouped
GEMMs' rows). The default is the worst case, W*T*k (every token of every rank routed to this rank's experts):
nothing can overflow, whatever the routing. A smaller one saves memory; a call whose routing overflows it raises
``CapacityOverflowError`` (the dispatch reads the counts back for that), never a silently dropped token.

Weights. Cut once at construction from the block's ``experts`` (transformers' fused ``gate_up_proj`` [E, 2I, H] and
``down_proj`` [E, H, I], or their ``is_transposed`` forms) and stored as the grouped GEMM's [E/W, K, N] operands:
``gate_up`` [E/W, H, 2I] and ``down`` [E/W, I, H], contiguous. E must divide by W (else a ParallelError).

Worlds. A real world (``World.from_torch()``): x is this rank's tokens and the module holds its experts only. A
virtual world of W ranks (one process drives every rank; ``World.virtual(W)``): x is a list of W tensors, one per
rank, the result too, and the module holds every rank's experts. Every rank passes the same token count.

Artifacts. The ops' programs are compiled on first use where the MLIR bindings are; a GPU box without them runs
from ``build(directory, ...)``'s artifacts, passed as ``library=ops.Library(directory)``. Inference only.

The ditron calls go through ``call_dispatch``, ``call_exchange`` and ``call_grouped_gemm``, which the CPU tests
replace by the ops' references to check the routing, regrouping and combining without a GPU.
"""
from __future__ import annotations

from typing import Any

import torch

from .linear import ParallelError

COUNT_COLS = 4  # the per-expert counts' exchange: rows padded to a multiple of 16 bytes (f32)


def call_dispatch(x, splits, world, capacity: int, library, check: bool):
    """ops.all_to_all with device-side split sizes: (out [capacity, ...], recv counts [W] int32), per rank in a
    virtual world. ``check``: wait and raise CapacityOverflowError if a rank received more than ``capacity``."""
    from .. import ops
    return ops.all_to_all(x, world, splits=splits, capacity=capacity, sync=check, library=library)


def call_exchange(x, world, library):
    """The static ops.all_to_all along dim 0 (part r of x to rank r; the parts received concatenated)."""
    from .. import ops
    return ops.all_to_all(x, world, sync=False, library=library)


def call_grouped_gemm(x, w, sizes, world, library, gated=None):
    """ops.grouped_gemm: rows of x grouped by ``sizes`` times w[g % E] (per rank in a virtual world); ``gated``:
    act(gate) * up fused."""
    from .. import ops
    return ops.grouped_gemm(x, w, sizes, world, gated=gated, sync=False, library=library)


def fused_act(act) -> str | None:
    """The grouped GEMM's gated activation for a block's ``act_fn`` ('silu'), None where it has none (the
    activation then runs in torch)."""
    if isinstance(act, torch.nn.SiLU) or act is torch.nn.functional.silu or type(act).__name__ == "SiLUActivation":
        return "silu"
    return None


def route(expert_index, num_experts: int):
    """The (token, expert) pairs of a router's top-k ``expert_index`` [T, k], sorted by expert (stable: a token's
    pairs keep token order within an expert): (order [T*k], the pairs' positions in the flat [T*k] index; token
    [T*k], each sorted pair's token; counts [E] int64, the pairs per expert). On the device, no sync."""
    flat = expert_index.reshape(-1)
    order = torch.argsort(flat, stable=True)
    k = expert_index.shape[-1]
    counts = torch.zeros(num_experts, dtype=torch.int64, device=flat.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    return order, order // k, counts


def expert_weights(experts) -> tuple[Any, Any, Any]:
    """(gate_up [E, H, 2I], down [E, I, H], act) from a transformers experts module: fused ``gate_up_proj`` /
    ``down_proj`` parameters ([E, 2I, H] / [E, H, I], or [E, H, 2I] / [E, I, H] where ``is_transposed``), gate
    before up, and its ``act_fn``."""
    gate_up, down = getattr(experts, "gate_up_proj", None), getattr(experts, "down_proj", None)
    if not isinstance(gate_up, torch.Tensor) or not isinstance(down, torch.Tensor) or gate_up.ndim != 3 or \
            down.ndim != 3:
        raise ParallelError(f"ExpertParallelMoE: the block's experts ({type(experts).__name__}) have no fused 3-d "
                            "gate_up_proj and down_proj parameters (transformers >= 5's experts modules); older "
                            "per-expert ModuleLists are not supported")
    if getattr(experts, "has_bias", False) or getattr(experts, "gate_up_proj_bias", None) is not None:
        raise ParallelError("ExpertParallelMoE: experts with biases are not supported (the grouped GEMM adds none)")
    if getattr(experts, "has_gate", True) is False:
        raise ParallelError("ExpertParallelMoE: experts without a gate projection are not supported")
    act = getattr(experts, "act_fn", None)
    if act is None:
        raise ParallelError("ExpertParallelMoE: the block's experts have no act_fn")
    if not getattr(experts, "is_transposed", False):
        gate_up, down = gate_up.transpose(1, 2), down.transpose(1, 2)
    e, h, two_i = gate_up.shape
    if down.shape != (e, two_i // 2, h) or two_i % 2:
        raise ParallelError(f"ExpertParallelMoE: gate_up_proj {tuple(gate_up.shape)} and down_proj "
                            f"{tuple(down.shape)} (as [E, K, N]) do not fit [E, H, 2I] and [E, I, H]")
    return gate_up, down, act


def _check_world(world) -> None:
    if not (hasattr(world, "world_size") and hasattr(world, "is_virtual")):
        raise ParallelError(f"ExpertParallelMoE: world must be a ditron.World (World.from_torch() under torchrun, "
                            f"or World.virtual(W)), got {type(world).__name__}")


class ExpertParallelMoE(torch.nn.Module):
    """A sparse MoE block with its experts sharded over ``world`` (see the module doc). ``block``: a transformers
    sparse MoE block (``gate``: a router returning (logits, weights, indices); ``experts``: fused expert weights);
    ``capacity``: the most rows one rank receives per call (default: the worst case, W*T*k)."""

    def __init__(self, block, world, *, capacity: int | None = None, library=None, name: str = "the MoE block"):
        super().__init__()
        _check_world(world)
        gate = getattr(block, "gate", None)
        if not isinstance(gate, torch.nn.Module) or not hasattr(block, "experts"):
            raise ParallelError(f"ExpertParallelMoE: {name} ({type(block).__name__}) is not a sparse MoE block "
                                "with a gate (router) and experts")
        gate_up, down, act = expert_weights(block.experts)
        e = gate_up.shape[0]
        w = world.world_size
        if e % w:
            raise ParallelError(f"ExpertParallelMoE: {name} has {e} experts, which do not split over {w} ranks "
                                f"(each rank holds E/W whole experts); use a world size that divides {e}")
        top_k = getattr(block, "top_k", getattr(gate, "top_k", None))
        if not isinstance(top_k, int) or not 1 <= top_k <= e:
            raise ParallelError(f"ExpertParallelMoE: {name} has no top_k in 1..{e} (got {top_k!r})")
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
            raise ParallelError(f"ExpertParallelMoE: capacity is the most rows a rank receives, a positive int; got "
                                f"{capacity!r}")
        if library is not None:
            from .. import ops
            if not isinstance(library, ops.Library):
                raise ParallelError(f"ExpertParallelMoE: library= takes a ditron.ops.Library, got "
                                    f"{type(library).__name__}")
        self.world, self.library, self.capacity, self.top_k, self.act = world, library, capacity, top_k, act
        self.gated = fused_act(act)
        self.gate = gate
        self.num_experts, self.world_size = e, w
        self.local_experts = e // w
        self.hidden, self.intermediate = gate_up.shape[1], gate_up.shape[2] // 2
        # the experts this process holds: every rank's in a virtual world, this rank's in a real one
        first = 0 if world.is_virtual else int(world.rank) * self.local_experts
        held = e if world.is_virtual else self.local_experts
        with torch.no_grad():
            self.gate_up = torch.nn.Parameter(gate_up.detach()[first:first + held].contiguous(), requires_grad=False)
            self.down = torch.nn.Parameter(down.detach()[first:first + held].contiguous(), requires_grad=False)

    def extra_repr(self) -> str:
        return (f"experts={self.num_experts} ({self.local_experts} a rank over {self.world_size}), top_k="
                f"{self.top_k}, hidden={self.hidden}, intermediate={self.intermediate}, capacity="
                f"{self.capacity or 'worst case'}")

    def _rank_weights(self, r: int):
        if not self.world.is_virtual:
            return self.gate_up, self.down
        lo, hi = r * self.local_experts, (r + 1) * self.local_experts
        return self.gate_up[lo:hi], self.down[lo:hi]

    def forward(self, x):
        virtual = self.world.is_virtual
        if virtual:
            if isinstance(x, torch.Tensor) or len(x) != self.world_size:
                raise ParallelError(f"ExpertParallelMoE: in a virtual world of {self.world_size} ranks, x is a list "
                                    "of one tensor per rank")
            xs = list(x)
        else:
            xs = [x]
        for r, xr in enumerate(xs):
            if not isinstance(xr, torch.Tensor) or xr.shape[-1] != self.hidden or xr.shape != xs[0].shape:
                raise ParallelError(f"ExpertParallelMoE: the input of rank {r} is "
                                    f"{tuple(getattr(xr, 'shape', ()))}; every rank passes the same [..., "
                                    f"{self.hidden}] tokens")
        outs = self._forward([xr.reshape(-1, self.hidden) for xr in xs])
        outs = [o.reshape(xr.shape) for o, xr in zip(outs, xs)]
        return outs if virtual else outs[0]

    def _forward(self, xs: list) -> list:
        virtual, w, e_l = self.world.is_virtual, self.world_size, self.local_experts
        one = (lambda v: v) if virtual else (lambda v: v[0])      # per-rank lists -> the ops' arguments
        many = (lambda v: list(v)) if virtual else (lambda v: [v])  # the ops' results -> per-rank lists
        t = xs[0].shape[0]
        pairs = t * self.top_k
        capacity = self.capacity or w * pairs
        routed = []
        for xr in xs:   # 1. route: the block's router, then the pairs sorted by expert
            _, weights, index = self.gate(xr)
            order, token, counts = route(index, self.num_experts)
            routed.append((order, token, counts, weights.reshape(-1)[order]))
        rows = [xr[token] for xr, (_, token, _, _) in zip(xs, routed)]
        splits = [counts.view(w, e_l).sum(1) for _, _, counts, _ in routed]
        # 2. dispatch, and each rank's counts per expert of the receiver (f32, rows padded to 16 bytes)
        received, recv = call_dispatch(one(rows), one(splits), self.world, capacity, self.library,
                                       self.capacity is not None and self.capacity < w * pairs)
        received, recv = many(received), many(recv)
        cols = -(-e_l // COUNT_COLS) * COUNT_COLS
        sent_counts = [torch.nn.functional.pad(counts.view(w, e_l).float(), (0, cols - e_l))
                       for _, _, counts, _ in routed]
        counts_from = many(call_exchange(one(sent_counts), self.world, self.library))
        # 3. experts on the rows as received: group s * E_l + j (rows from s for expert j) times expert j
        sizes = [c[:, :e_l].round().to(torch.int32).reshape(-1) for c in counts_from]
        weights = [self._rank_weights(r) for r in range(len(xs))]
        h = many(call_grouped_gemm(one(received), one([g for g, _ in weights]), one(sizes), self.world,
                                   self.library, self.gated))
        if self.gated is None:  # an activation the GEMM does not fuse: act(gate) * up in torch
            h = [(self.act(g) * u).contiguous() for g, u in (hr.chunk(2, dim=-1) for hr in h)]
        back_in = many(call_grouped_gemm(one(h), one([d for _, d in weights]), one(sizes), self.world,
                                         self.library))
        # 4. combine: every row back to its source, in the order sent; weighted, added into its token
        back, _ = call_dispatch(one(back_in), one(recv), self.world, pairs, self.library, False)
        outs = []
        for xr, br, (_, token, _, wt) in zip(xs, many(back), routed):
            out = torch.zeros_like(xr)
            out.index_add_(0, token, (br * wt[:, None]).to(xr.dtype))
            outs.append(out)
        return outs


def programs(world_size: int, virtual: bool, tokens: int, hidden: int, intermediate: int, num_experts: int,
             top_k: int, *, dtype: str = "bf16", capacity: int | None = None, target: str = "cuda:90",
             gated: str | None = "silu"):
    """What a call of ExpertParallelMoE with ``tokens`` tokens a rank runs: (the ops.Signature list of its static
    all_to_all and grouped GEMMs, the ops_sized cases (w, shape, dtype, capacity) of its dispatch and combine).
    ``gated``: the block's fused_act (None: an activation run in torch, the first GEMM unfused)."""
    from .. import ops
    w, e_l = world_size, num_experts // world_size
    if num_experts % w:
        raise ParallelError(f"ExpertParallelMoE: {num_experts} experts do not split over {w} ranks")
    pairs = tokens * top_k
    cap = capacity or w * pairs
    cols = -(-e_l // COUNT_COLS) * COUNT_COLS
    sigs = [ops.Signature("all_to_all", ((w, cols),), "f32", w, virtual, target),
            ops.Signature("grouped_gemm", ((cap, hidden), (e_l, hidden, 2 * intermediate), (w * e_l,)), dtype, w,
                          virtual, target, (("gated", gated),)),
            ops.Signature("grouped_gemm", ((cap, intermediate), (e_l, intermediate, hidden), (w * e_l,)), dtype, w,
                          virtual, target)]
    sized = [(w, (pairs, hidden), dtype, cap), (w, (cap, hidden), dtype, pairs)]
    return sigs, sized


def build(directory, world_size: int, virtual: bool, tokens: int, hidden: int, intermediate: int,
          num_experts: int, top_k: int, *, dtype: str = "bf16", capacity: int | None = None,
          target: str = "cuda:90", gated: str | None = "silu") -> None:
    """Compile the artifacts of ``programs(...)`` into directory (where the MLIR bindings are); a GPU box then runs
    the module with ``library=ops.Library(directory)``."""
    from .. import ops, ops_sized
    sigs, sized = programs(world_size, virtual, tokens, hidden, intermediate, num_experts, top_k, dtype=dtype,
                           capacity=capacity, target=target, gated=gated)
    ops.build(sigs, directory)
    from pathlib import Path
    for case in sized:
        if not (Path(directory) / ops_sized.artifact_name(case[0], case[1], case[2], case[3], target)).is_dir():
            ops_sized.build(directory, [case], target)
