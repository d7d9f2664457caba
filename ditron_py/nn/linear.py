"""Tensor-parallel linear layers over ditron's fused ops.

* ``ColumnParallelLinear(linear, world)`` — rank r keeps rows r of W of the weight ([out/W, in]) and of the bias:
  it computes its 1/W of the output features. ``input="replicated"`` (every rank holds the whole input): a local
  GEMM, no communication (Megatron's column-parallel layer, transformers' "colwise"); ``input="sequence"`` (each
  rank holds its rows of the input, sequence parallelism): ``ops.ag_gemm`` gathers the rows while the GEMM runs,
  and the output holds every rank's rows (dim 0 times W), this rank's columns.
* ``RowParallelLinear(linear, world)`` — rank r keeps columns r of W of the weight ([out, in/W]) and takes its 1/W
  of the input features (a column-parallel layer's output). ``output="replicated"``: ``ops.gemm_ar`` (the sum over
  ranks, every rank gets it; transformers' "rowwise"); ``output="sequence"``: ``ops.gemm_rs`` (rank r keeps rows
  r of W of the sum: dim 0 divided by W). The bias is added once, after the sum.

Weights. A layer is built from an ``nn.Linear`` whose weight is [out, in]; its shard is cut once, at construction,
and stored transposed ([in, out/W] or [in/W, out], contiguous), which is the [K, N] operand the ops read. The
parameter ``weight`` is the transpose of that storage: [out/W, in] or [out, in/W], nn.Linear's layout (a state dict
keeps its meaning), and ``weight.t()`` is contiguous, so no call copies or transposes it (``module.to(...)``,
deepcopy and load_state_dict keep that layout).

Batch sizes. ``max_rows=N`` (both layers; 0, the default, compiles one program per row count) lets a layer serve
any number of rows 1..N of its input on this rank (the input's leading dims flattened: tokens per call) from its
op's power-of-two bucket programs (ditron.buckets, the operators' ``max_rows``): a serving process that meets many
batch sizes compiles about log2(N) + 1 programs per op, ahead (``buckets.prebuild(ditron.nn.signatures(model, W,
rows, max_rows=...))``) or on a bucket's first call. A column-parallel layer on a replicated input (a local
``torch.matmul``) needs no program; its max_rows only bounds the rows, like the others'.

Inference only: ditron's operators have no backward.

Worlds. A layer runs in a real world (``World.from_torch()``: this process is one rank) or in a world of one rank;
a virtual world of W > 1 ranks (one process driving every rank, one tensor per rank) cannot hold a module's single
tensors and is refused.

The ops are ditron's torch operators (``torch.ops.ditron.*``, ditron.torch_ops): enqueued on the caller's stream with
no host synchronisation, traced by ``torch.compile(fullgraph=True)`` without a graph break, and captured into the
caller's own CUDA graph (after one eager warm-up step). Each layer registers its world and library once, at
construction (``torch_ops.register_world``: the handle string the operators take). The calls go through
``call_op``, one function, which the CPU tests replace to check the layers without a GPU.
"""
from __future__ import annotations

from typing import Any

import torch

from .. import torch_ops
from ..errors import DitronError
from ..op_signature import PARAMS

INPUTS = ("replicated", "sequence")
OUTPUTS = ("replicated", "sequence")


class ParallelError(DitronError, ValueError):
    """A layer or a plan that does not fit the world or the model (sizes, module kinds, worlds, plan styles)."""


def call_op(op: str, a, b, handle: str, params: dict[str, Any]):
    """Run ditron op ``op`` (ag_gemm, gemm_rs, gemm_ar) on this rank's a [M, K] and b [K, N] through its torch
    operator (torch.ops.ditron.<op>, ditron.torch_ops), in the world ``handle`` names; enqueued on the current stream,
    traced by torch.compile without a graph break, captured into the caller's CUDA graph. The parameters go
    positionally, in the schema's order (their defaults between), through ``torch_ops.call``: an eager call like an
    earlier one is one C call."""
    names = torch_ops.SIGNATURES[op][1] + ("max_rows",)
    if not params:
        return torch_ops.call(op, a, b, handle)
    if not set(params) <= set(names):  # torch's own error names the parameter
        return getattr(torch.ops.ditron, op)(a, b, handle, **params)
    last = max(names.index(name) for name in params)
    defaults = {**PARAMS[op], "max_rows": 0}
    return torch_ops.call(op, a, b, handle, *[params.get(name, defaults[name]) for name in names[:last + 1]])


def check_world(world, what: str) -> None:
    """A world the layers run in: a ditron World, real, or of one rank."""
    if not (hasattr(world, "world_size") and hasattr(world, "is_virtual") and hasattr(world, "ranks_here")):
        raise ParallelError(f"{what}: world must be a ditron.World (World.from_torch() under torchrun), got "
                            f"{type(world).__name__}")
    if world.is_virtual and world.world_size > 1:
        raise ParallelError(f"{what}: a virtual world of {world.world_size} ranks drives every rank from one process "
                            "(one tensor per rank), which a module's single tensors cannot hold; run one process "
                            "per rank with World.from_torch() (test/py/two_ranks.py runs two on one GPU)")


def _rank(world) -> int:
    return 0 if world.is_virtual else int(world.rank)


def _check_linear(linear, what: str) -> None:
    if not isinstance(linear, torch.nn.Linear):
        raise ParallelError(f"{what} is built from a torch.nn.Linear, got {type(linear).__name__}")


def _split(size: int, world_size: int, what: str, dim: str, name: str) -> int:
    if size % world_size:
        raise ParallelError(f"{name}: its {dim} {size} does not split over {world_size} ranks ({what} shards it "
                            f"in {world_size} equal parts and pads nothing); use a size divisible by {world_size}")
    return size // world_size


def _shard_parameter(storage, requires_grad: bool):
    """An nn.Parameter that is ``storage.t()``: nn.Linear's [out, in] layout over [in, out] contiguous memory."""
    return torch.nn.Parameter(storage.t(), requires_grad=requires_grad)


class _ParallelLinear:
    """What both layers share: the world, the library, the sizes, and the flattening of leading dims."""

    def _setup(self, linear, world, library, what: str, max_rows: int) -> None:
        _check_linear(linear, what)
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0:
            raise ParallelError(f"{what}: max_rows is the most rows of a call's input on this rank (0: one program "
                                f"per row count), got {max_rows!r}")
        self.max_rows = max_rows
        check_world(world, what)
        from .. import ops, torch_ops
        if library is not None and not isinstance(library, ops.Library):
            raise ParallelError(f"{what}: library= takes a ditron.ops.Library, got {type(library).__name__}")
        self.world = world
        self.handle = torch_ops.register_world(world, library)
        self.library = library
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.rank = _rank(world)
        self.world_size = world.world_size

    def _flat(self, x, features: int, what: str):
        if x.shape[-1] != features:
            raise ParallelError(f"{what}: input of shape {tuple(x.shape)} has {x.shape[-1]} features, the layer takes "
                                f"{features} (this rank's share)")
        return x.reshape(-1, features)

    def _params(self, **params) -> dict[str, Any]:
        """The op's parameters, with max_rows where the layer serves any row count."""
        return {**params, "max_rows": self.max_rows} if self.max_rows else params

    def _b(self):
        """The ops' [K, N] operand: the weight's contiguous transposed storage."""
        return self.weight.t()


class ColumnParallelLinear(torch.nn.Module, _ParallelLinear):
    """y[..., this rank's out/W features] = x @ weight_shard.T + bias_shard (see the module doc).

    ``input``: "replicated" (x is the whole input on every rank: a local GEMM) or "sequence" (x is this rank's rows;
    the rows of every rank are gathered by ``ops.ag_gemm``: the result's dim 0 is W times x's).
    ``head_dim``: where the output features are attention heads, their size; a head is never split over ranks."""

    def __init__(self, linear, world, *, input: str = "replicated", library=None,  # noqa: A002 - torch's word
                 head_dim: int | None = None, name: str = "the layer", max_rows: int = 0):
        super().__init__()
        self._setup(linear, world, library, "ColumnParallelLinear", max_rows)
        if input not in INPUTS:
            raise ParallelError(f"ColumnParallelLinear: input must be one of {', '.join(INPUTS)}, got {input!r}")
        self.input = input
        W = self.world_size
        if head_dim is not None and linear.out_features % (head_dim * W):
            heads = linear.out_features / head_dim
            raise ParallelError(f"{name}: its {linear.out_features} output features ({heads:g} heads of {head_dim}) "
                                f"do not divide into whole heads over {W} ranks; use a head count divisible by {W}")
        n = _split(linear.out_features, W, "ColumnParallelLinear", "out_features", name)
        with torch.no_grad():
            rows = linear.weight.detach()[self.rank * n:(self.rank + 1) * n]   # [n, in]
            self.weight = _shard_parameter(rows.t().contiguous(), linear.weight.requires_grad)
            self.bias = None if linear.bias is None else torch.nn.Parameter(
                linear.bias.detach()[self.rank * n:(self.rank + 1) * n].clone(), linear.bias.requires_grad)
        self.local_out_features = n

    def forward(self, x):
        a = self._flat(x, self.in_features, "ColumnParallelLinear")
        if self.input == "replicated":
            if self.max_rows and isinstance(a.shape[0], int) and a.shape[0] > self.max_rows:
                raise ParallelError(f"ColumnParallelLinear: {a.shape[0]} rows exceed max_rows={self.max_rows}")
            y = torch.matmul(a, self._b())  # a local GEMM: any rows, no program
            shape = (*x.shape[:-1], self.local_out_features)
        else:
            y = call_op("ag_gemm", a.contiguous(), self._b(), self.handle, self._params())
            shape = (x.shape[0] * self.world_size, *x.shape[1:-1], self.local_out_features)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(shape)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features} "
                f"(rank {self.rank} of {self.world_size}: {self.local_out_features}), input={self.input}, "
                f"bias={self.bias is not None}" + (f", max_rows={self.max_rows}" if self.max_rows else ""))


class RowParallelLinear(torch.nn.Module, _ParallelLinear):
    """y = sum over ranks of x_r @ weight_shard_r.T, + bias (see the module doc). x: this rank's in/W features.

    ``output``: "replicated" (``ops.gemm_ar``: every rank gets the sum) or "sequence" (``ops.gemm_rs``: rank r keeps
    rows r of W of the sum; dim 0 of x must divide by W). ``algorithm``: gemm_ar's all-reduce algorithm."""

    def __init__(self, linear, world, *, output: str = "replicated", algorithm: str = "auto", library=None,
                 name: str = "the layer", max_rows: int = 0):
        super().__init__()
        self._setup(linear, world, library, "RowParallelLinear", max_rows)
        if output not in OUTPUTS:
            raise ParallelError(f"RowParallelLinear: output must be one of {', '.join(OUTPUTS)}, got {output!r}")
        from ..ops import GEMM_AR_ALGORITHMS
        if output == "sequence" and algorithm != "auto":
            raise ParallelError("RowParallelLinear: algorithm= chooses gemm_ar's all-reduce, which output='sequence' "
                                "(gemm_rs) does not run; leave it 'auto'")
        if algorithm not in GEMM_AR_ALGORITHMS:
            raise ParallelError(f"RowParallelLinear: algorithm must be one of {', '.join(GEMM_AR_ALGORITHMS)}, got "
                                f"{algorithm!r}")
        self.output = output
        self.algorithm = algorithm
        k = _split(linear.in_features, self.world_size, "RowParallelLinear", "in_features", name)
        with torch.no_grad():
            cols = linear.weight.detach()[:, self.rank * k:(self.rank + 1) * k]  # [out, k]
            self.weight = _shard_parameter(cols.t().contiguous(), linear.weight.requires_grad)
            self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone(),
                                                                             linear.bias.requires_grad)
        self.local_in_features = k

    def forward(self, x):
        a = self._flat(x, self.local_in_features, "RowParallelLinear").contiguous()
        if self.output == "replicated":
            y = call_op("gemm_ar", a, self._b(), self.handle, self._params(algorithm=self.algorithm))
            shape = (*x.shape[:-1], self.out_features)
        else:
            if x.shape[0] % self.world_size:
                raise ParallelError(f"RowParallelLinear(output='sequence'): dim 0 of the input {tuple(x.shape)} does "
                                    f"not split over {self.world_size} ranks")
            y = call_op("gemm_rs", a, self._b(), self.handle, self._params())
            shape = (x.shape[0] // self.world_size, *x.shape[1:-1], self.out_features)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(shape)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features} (rank {self.rank} of {self.world_size}: {self.local_in_features}), "
                f"out_features={self.out_features}, output={self.output}, bias={self.bias is not None}"
                + (f", max_rows={self.max_rows}" if self.max_rows else ""))
