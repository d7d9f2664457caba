"""``parallelize(model, world, plan=None)``: a model made tensor-parallel in place, layer by layer, in the spirit of
PyTorch's ``parallelize_module`` with ColwiseParallel / RowwiseParallel.

A plan maps module-name patterns to styles. A pattern is a dotted module name in which ``*`` stands for one name
component (``layers.*.self_attn.q_proj``). Styles:

* ``"colwise"`` or ``Colwise(input="replicated" | "sequence")`` — the nn.Linear becomes a ColumnParallelLinear;
* ``"rowwise"`` or ``Rowwise(output="replicated" | "sequence", algorithm=...)`` — a RowParallelLinear.

Without a plan, the model's own is read: a transformers model's ``config.base_model_tp_plan`` (its patterns are
relative to ``model.base_model``, e.g. LlamaModel inside LlamaForCausalLM), whose "colwise" / "rowwise" are those
above (transformers' rowwise all-reduces: here ``ops.gemm_ar``). Any other style in a plan (transformers'
"colwise_rep", "gather", "sequence_parallel", ...) is an error that names it: nothing is silently left replicated.

Attention heads. A column-parallel layer whose parent module has an int ``head_dim`` (transformers' attention
modules) outputs whole heads: its out_features must divide into heads over the ranks, else a ParallelError. A
parent's int ``num_heads`` / ``num_key_value_heads`` attributes (older attention modules that reshape by them) are
divided by W; transformers' current modules reshape with -1 and need nothing.

Batch sizes. ``parallelize(..., max_rows=N)``: N is the most tokens per call over the whole world; each layer gets
its share (N / W rows for a sequence-parallel input, else N) and serves any row count up to it from its op's
power-of-two bucket programs (ditron.buckets). ``signatures(..., max_rows=N)`` lists those programs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from .linear import INPUTS, OUTPUTS, ColumnParallelLinear, ParallelError, RowParallelLinear, check_world

HEAD_ATTRS = ("num_heads", "num_key_value_heads")


@dataclass(frozen=True)
class Colwise:
    """Column parallelism: the output features sharded; ``input`` replicated (a local GEMM) or sequence-sharded
    (ops.ag_gemm)."""
    input: str = "replicated"  # noqa: A003 - PyTorch's word for it

    def __post_init__(self):
        if self.input not in INPUTS:
            raise ParallelError(f"Colwise: input must be one of {', '.join(INPUTS)}, got {self.input!r}")

    def build(self, linear, world, library, name: str, head_dim: int | None, max_rows: int = 0):
        return ColumnParallelLinear(linear, world, input=self.input, library=library, head_dim=head_dim, name=name,
                                    max_rows=self.rows(max_rows, world.world_size))

    def rows(self, tokens: int, world_size: int) -> int:
        """The most rows of this layer's input on one rank, for ``tokens`` per call over the whole world (0: 0)."""
        if self.input != "sequence" or not tokens:
            return tokens
        if tokens < world_size:
            raise ParallelError(f"max_rows={tokens} tokens per call do not give each of {world_size} ranks one row "
                                "of a sequence-parallel input")
        return tokens // world_size


@dataclass(frozen=True)
class Rowwise:
    """Row parallelism: the input features sharded; the sum replicated (ops.gemm_ar) or sequence-sharded
    (ops.gemm_rs)."""
    output: str = "replicated"
    algorithm: str = "auto"

    def __post_init__(self):
        if self.output not in OUTPUTS:
            raise ParallelError(f"Rowwise: output must be one of {', '.join(OUTPUTS)}, got {self.output!r}")

    def build(self, linear, world, library, name: str, head_dim: int | None, max_rows: int = 0):
        return RowParallelLinear(linear, world, output=self.output, algorithm=self.algorithm, library=library,
                                 name=name, max_rows=self.rows(max_rows, world.world_size))

    def rows(self, tokens: int, world_size: int) -> int:
        """The most rows of this layer's input on one rank, for ``tokens`` per call over the whole world."""
        return tokens


STYLES = {"colwise": Colwise(), "rowwise": Rowwise()}


def _style(style: Any, pattern: str):
    if isinstance(style, (Colwise, Rowwise)):
        return style
    if isinstance(style, str) and style in STYLES:
        return STYLES[style]
    raise ParallelError(f"plan entry '{pattern}': style {style!r} is not one ditron.nn applies; use 'colwise', "
                        "'rowwise', Colwise(...) or Rowwise(...) (or leave the module out of the plan to keep it "
                        "replicated)")


def _pattern(text: str) -> re.Pattern:
    if not isinstance(text, str) or not text or any(not part for part in text.split(".")):
        raise ParallelError(f"plan key {text!r} is not a dotted module name (e.g. 'layers.*.self_attn.q_proj')")
    return re.compile(r"\.".join("[^.]+" if part == "*" else re.escape(part) for part in text.split(".")))


def model_plan(model) -> tuple[str, dict[str, Any]]:
    """(the name of the module the plan's patterns are relative to, the plan) of a model that has its own: a
    transformers model's ``config.base_model_tp_plan`` under ``model.base_model``."""
    config = getattr(model, "config", None)
    plan = getattr(config, "base_model_tp_plan", None)
    if not plan:
        raise ParallelError(f"parallelize: {type(model).__name__} has no tensor-parallel plan of its own (no "
                            "config.base_model_tp_plan); pass plan={'module.pattern': 'colwise' | 'rowwise', ...}")
    base = getattr(model, "base_model", model)
    prefix = next((name for name, m in model.named_modules() if m is base), None)
    if prefix is None:
        raise ParallelError(f"parallelize: {type(model).__name__}.base_model is not one of its modules")
    return prefix, dict(plan)


def resolve_plan(model, plan: Mapping[str, Any] | None = None) -> dict[str, Colwise | Rowwise]:
    """{module name in model: style} for every module the plan names. Every pattern must match at least one
    module, every matched module must be an nn.Linear, and no module may match two patterns."""
    if not isinstance(model, torch.nn.Module):
        raise ParallelError(f"parallelize takes a torch.nn.Module, got {type(model).__name__}")
    if plan is None:
        prefix, plan = model_plan(model)
    elif isinstance(plan, Mapping):
        prefix = ""
    else:
        raise ParallelError(f"plan= is a mapping {{module pattern: style}}, got {type(plan).__name__}")
    names = [name for name, _ in model.named_modules() if name]
    modules = dict(model.named_modules())
    out: dict[str, Colwise | Rowwise] = {}
    origin: dict[str, str] = {}
    for key, style in plan.items():
        full = f"{prefix}.{key}" if prefix else key
        regex, chosen = _pattern(full), _style(style, key)
        hits = [name for name in names if regex.fullmatch(name)]
        if not hits:
            raise ParallelError(f"plan entry '{key}' matches no module of {type(model).__name__}")
        for name in hits:
            if name in out:
                raise ParallelError(f"module '{name}' matches two plan entries, '{origin[name]}' and '{key}'")
            module = modules[name]
            if not isinstance(module, torch.nn.Linear):
                raise ParallelError(f"plan entry '{key}': module '{name}' is a {type(module).__name__}; ditron.nn "
                                    "makes nn.Linear modules tensor-parallel only")
            out[name], origin[name] = chosen, key
    return out


def parallelize(model, world, plan: Mapping[str, Any] | None = None, *, library=None, max_rows: int = 0):
    """Make ``model`` tensor-parallel over ``world``, in place, and return it: each nn.Linear the plan names is
    replaced by its ditron.nn layer (this rank's shard of its weight). ``plan``: {pattern: style} (module doc);
    None reads the model's own (transformers' base_model_tp_plan). ``library``: the ops.Library the layers' ops
    load their artifacts from (default ops.default_library()). ``max_rows``: the most tokens per call over the
    whole world (as ``signatures``' rows); each layer then serves any row count up to its share of them from its
    op's bucket programs (ditron.buckets; 0: one program per row count)."""
    check_world(world, "parallelize")
    _check_max_rows(max_rows, "parallelize")
    chosen = resolve_plan(model, plan)
    W = world.world_size
    parents: dict[str, torch.nn.Module] = {}
    built: dict[str, torch.nn.Module] = {}
    for name, style in chosen.items():  # build every layer first: an error leaves the model as it was
        parent_name, _, _ = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        head_dim = getattr(parent, "head_dim", None)
        head_dim = head_dim if isinstance(head_dim, int) and isinstance(style, Colwise) else None
        built[name] = style.build(model.get_submodule(name), world, library, name, head_dim, max_rows)
        if isinstance(style, Colwise):
            parents[parent_name] = parent
    for parent_name, parent in parents.items():
        for attr in HEAD_ATTRS:
            value = getattr(parent, attr, None)
            if isinstance(value, int) and not isinstance(value, bool) and value % W:
                raise ParallelError(f"'{parent_name or type(model).__name__}': its {attr}={value} do not divide "
                                    f"over {W} ranks")
    for name, layer in built.items():
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, layer)
    for parent in parents.values():
        for attr in HEAD_ATTRS:
            value = getattr(parent, attr, None)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(parent, attr, value // W)
    return model


def signatures(model, world_size: int, rows, plan: Mapping[str, Any] | None = None, *, target: str = "cuda:90",
               virtual: bool = False, dtype=None, max_rows: int = 0) -> list:
    """The ops.Signatures of every ditron op ``parallelize(model, world, plan)`` makes the model call, for each
    number of rows (tokens per call, over the whole world: batch * sequence at prefill, batch at a decode step; a
    sequence-parallel input holds rows / W of them on each rank) in ``rows``: what a GPU box
    without the compiler needs prebuilt (``ops.build(signatures(...), DIR)`` where the compiler is). The model is
    only read (a model on the meta device will do). ``dtype``: the element type (default: each layer's weight's).
    ``max_rows``: the model was (will be) parallelized with ``max_rows``: each row count's signature is the bucket
    program that serves it (``rows=range(1, max_rows + 1)`` lists every bucket; ``ditron.buckets.prebuild`` builds
    them with a progress bar)."""
    from .. import buckets, ops
    _check_max_rows(max_rows, "signatures")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ParallelError(f"signatures: world_size must be a positive int, got {world_size!r}")
    W, chosen = world_size, resolve_plan(model, plan)
    out: dict[Any, None] = {}
    for m in rows:
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise ParallelError(f"signatures: rows are positive ints (tokens per call), got {m!r}")
        for name, style in chosen.items():
            linear = model.get_submodule(name)
            t = ops.TORCH_DTYPES.get(str(dtype or linear.weight.dtype).removeprefix("torch."))
            if t is None:
                raise ParallelError(f"signatures: '{name}' holds {linear.weight.dtype} weights; ditron's ops take "
                                    f"{', '.join(ops.TORCH_DTYPES)}")
            i, o = linear.in_features, linear.out_features
            if isinstance(style, Colwise):
                if style.input == "sequence":
                    if m % W:
                        raise ParallelError(f"signatures: {m} rows do not split over {W} ranks (sequence-parallel "
                                            f"input of '{name}')")
                    sig = ops.signature_for("ag_gemm", [(m // W, i), (i, o // W)], t, W, virtual, target)
                else:
                    continue  # a local GEMM
            elif style.output == "sequence":
                sig = ops.signature_for("gemm_rs", [(m, i // W), (i // W, o)], t, W, virtual, target)
            else:
                sig = ops.signature_for("gemm_ar", [(m, i // W), (i // W, o)], t, W, virtual, target,
                                        algorithm=style.algorithm)
            if max_rows:
                if m > max_rows:
                    raise ParallelError(f"signatures: {m} rows exceed max_rows={max_rows}")
                sig = buckets.bucket_signature(sig, style.rows(max_rows, W))
            out[sig] = None
    return list(out)


def _check_max_rows(max_rows, what: str) -> None:
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0:
        raise ParallelError(f"{what}: max_rows is the most tokens per call over the whole world (0: one program per "
                            f"row count), got {max_rows!r}")
