"""The signature of a ditron.ops op: what one compiled op program is for (op, each rank's shapes, dtype, world,
target, parameters, pass options), its key, and each rank's output shape -- plain data, no MLIR, no torch, so that
the loader, the torch operators' fake implementations and the bucket planner read it anywhere. ditron.ops re-exports
every name."""
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .errors import DitronError
from .schema import GATED_ACTS as GATED  # grouped_gemm's gated activations

OPS = ("ag_gemm", "gemm_rs", "gemm_ar", "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "grouped_gemm")
ALGORITHMS = ("auto", "one_shot", "two_shot", "push")
GEMM_AR_ALGORITHMS = ALGORITHMS + ("push_sum",)  # push_sum: the sum in the GEMM's epilogue (one launch)
# the parameters each op takes, with their defaults
PARAMS: dict[str, dict[str, Any]] = {
    "ag_gemm": {}, "gemm_rs": {}, "gemm_ar": {"algorithm": "auto"}, "all_gather": {"dim": 0},
    "reduce_scatter": {"dim": 0}, "all_reduce": {"algorithm": "auto"}, "all_to_all": {"split_dim": 0, "concat_dim": 0},
    "grouped_gemm": {"gated": None},
}
ARITY = {"ag_gemm": 2, "gemm_rs": 2, "gemm_ar": 2, "all_gather": 1, "reduce_scatter": 1, "all_reduce": 1,
         "all_to_all": 1, "grouped_gemm": 3}
# the arguments of an op that are int32 sizes (run-time data, not of the op's element type): grouped_gemm's
# group sizes
SIZE_ARGS: dict[str, tuple[int, ...]] = {"grouped_gemm": (2,)}
DTYPES = ("bf16", "f16", "f32")
TORCH_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
AXIS = "tp"
FORMAT_VERSION = 1          # of op.json and of the key: bump when what a key means changes


class OpError(DitronError):
    """An op called with arguments that do not fit it (shapes, dtype, world, parameters)."""


# ---------------------------------------------------------------------------------------------- signatures

def _target_name(target: Any) -> str:
    from .backends.target import Target  # plain data: no MLIR, no Triton
    return str(Target.parse(target))


@dataclass(frozen=True)
class Signature:
    """Everything that decides an op's compiled program. ``shapes``: each rank's input shapes, in argument order;
    ``params``: the op's parameters (all of them, defaults filled in); ``passes``: pass option overrides
    ``(pass, option, value)``, e.g. ``("ditron-tile", "num-chunks", "4")``."""

    op: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    world_size: int
    virtual: bool
    target: str = "cuda:90"
    params: tuple[tuple[str, Any], ...] = ()
    passes: tuple[tuple[str, str, str], ...] = ()

    def __post_init__(self):
        if self.op not in OPS:
            raise OpError(f"unknown op '{self.op}'; ditron.ops has {', '.join(OPS)}")
        shapes = tuple(tuple(int(s) for s in shape) for shape in self.shapes)
        object.__setattr__(self, "shapes", shapes)
        object.__setattr__(self, "target", _target_name(self.target))
        params = dict(PARAMS[self.op])
        for k, v in dict(self.params).items():
            if k not in params:
                raise OpError(f"{self.op}: unknown parameter '{k}' (parameters: {', '.join(params) or 'none'})")
            params[k] = v
        object.__setattr__(self, "params", tuple(sorted(params.items())))
        object.__setattr__(self, "passes", tuple(sorted((str(p), str(o), str(v)) for p, o, v in self.passes)))
        if self.dtype not in DTYPES:
            raise OpError(f"{self.op}: element type '{self.dtype}' is not supported; use one of {', '.join(DTYPES)}")
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise OpError(f"{self.op}: world size must be a positive int, got {self.world_size!r}")
        self._check_shapes()

    @property
    def param(self) -> dict[str, Any]:
        return dict(self.params)

    def _check_shapes(self) -> None:
        op, W, shapes = self.op, self.world_size, self.shapes
        if len(shapes) != ARITY[op]:
            raise OpError(f"{op} takes {ARITY[op]} tensor(s), got {len(shapes)}")
        if any(not s or min(s) < 1 for s in shapes):
            raise OpError(f"{op}: every dim must be >= 1, got shapes {list(shapes)}")
        p = self.param
        if op == "grouped_gemm":
            x, w, g = shapes
            if len(x) != 2 or len(w) != 3 or len(g) != 1 or x[1] != w[1] or g[0] % w[0]:
                raise OpError(f"grouped_gemm: needs x [T, K], w [E, K, N] and group_sizes [G] (G a multiple of E: "
                              f"group g times w[g % E]; the same K), got {list(x)}, {list(w)} and {list(g)}")
            if p["gated"] is not None and (p["gated"] not in GATED or w[2] % 2):
                raise OpError(f"grouped_gemm: gated={p['gated']!r} needs one of {', '.join(GATED)} (or None) and w "
                              f"[E, K, 2N] (the gate's columns, then the up's), got w {list(w)}")
            return
        if op in ("ag_gemm", "gemm_rs", "gemm_ar"):
            (a, b) = shapes
            if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
                raise OpError(f"{op}: needs a [M, K] and b [K, N] with the same K, got {list(a)} and {list(b)}")
            if self.dtype == "f32":
                raise OpError(f"{op}: the GEMM templates take bf16 or f16 (or fp8), not f32; cast a and b first")
            if op == "gemm_rs" and a[0] % W:
                raise OpError(f"gemm_rs: the {a[0]} rows of a @ b do not split over {W} ranks; use M divisible by "
                              f"{W} (or gemm_ar)")
        else:
            (x,) = shapes
            for name in ("dim", "split_dim", "concat_dim"):
                if name not in p:
                    continue
                d = p[name]
                if isinstance(d, bool) or not isinstance(d, int) or not -len(x) <= d < len(x):
                    raise OpError(f"{op}: {name} {d!r} is out of range for a tensor of shape {list(x)}")
                p[name] = d % len(x)
            object.__setattr__(self, "params", tuple(sorted(p.items())))
            split = p.get("dim") if op == "reduce_scatter" else p.get("split_dim")
            if split is not None and x[split] % W:
                what = "dim" if op == "reduce_scatter" else "split_dim"
                raise OpError(f"{op}: {what} {split} of {list(x)} (size {x[split]}) does not split over {W} ranks")
        if "algorithm" in p:
            allowed = GEMM_AR_ALGORITHMS if op == "gemm_ar" else ALGORITHMS
            if p["algorithm"] not in allowed:
                raise OpError(f"{op}: algorithm must be one of {', '.join(allowed)}, got {p['algorithm']!r}")
            rows = shapes[0][0]
            if p["algorithm"] == "two_shot" and rows % W:
                raise OpError(f"{op}: algorithm='two_shot' scatters the {rows} rows over the {W} ranks, which "
                              "does not divide them; use 'one_shot' or 'auto'")

    def output_shape(self) -> tuple[int, ...]:
        """Each rank's output shape."""
        return output_shape(self.op, self.shapes, self.world_size, self.param)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "shapes": [list(s) for s in self.shapes], "dtype": self.dtype,
                "world_size": self.world_size, "virtual": self.virtual, "target": self.target,
                "params": dict(self.params), "passes": [list(p) for p in self.passes]}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> "Signature":
        return Signature(data["op"], tuple(tuple(s) for s in data["shapes"]), data["dtype"], data["world_size"],
                         data["virtual"], data["target"], tuple(data["params"].items()),
                         tuple(tuple(p) for p in data["passes"]))

    @property
    def key(self) -> str:
        """The artifact's directory name: readable, and unique through a hash of the whole signature."""
        digest = hashlib.sha256(json.dumps([FORMAT_VERSION, self.to_json()], sort_keys=True).encode()).hexdigest()
        shapes = "_".join("x".join(str(d) for d in s) for s in self.shapes)
        world = f"w{self.world_size}{'v' if self.virtual else 'r'}"
        return f"{self.op}-{self.dtype}-{world}-{shapes}-{self.target.replace(':', '')}-{digest[:12]}"

    def cta_budget(self) -> int | None:
        """SMs one rank may keep busy (ditron-tile's num-sms), where the world limits it: a virtual world of W > 1
        ranks shares one GPU, and every rank's spinning kernels must be resident at once."""
        if not self.virtual or self.world_size == 1:
            return None
        from .cost_model import peaks_for
        from .runtime.world import World
        return World(self.world_size, None, None).cta_budget(peaks_for(self.target).num_sms)

    def pass_options(self) -> dict[str, dict[str, str]]:
        """Options for the passes of ditron-device: the caller's overrides, the algorithm asked for, the budget."""
        out: dict[str, dict[str, str]] = {}
        for name, option, value in self.passes:
            out.setdefault(name, {})[option] = value
        tile = out.setdefault("ditron-tile", {})
        algorithm = self.param.get("algorithm", "auto")
        if algorithm != "auto":
            if tile.get("all-reduce", algorithm) != algorithm:
                raise OpError(f"{self.op}: algorithm='{algorithm}' contradicts the override ditron-tile "
                              f"all-reduce={tile['all-reduce']}")
            tile["all-reduce"] = algorithm
        budget = self.cta_budget()
        if budget is not None:
            given = int(tile.get("num-sms", budget))
            if given > budget:
                raise OpError(f"{self.op}: ditron-tile num-sms={given} exceeds the {budget} SMs each rank of a "
                              f"virtual world of {self.world_size} may use (spinning kernels would deadlock)")
            tile["num-sms"] = str(given)
        return {k: v for k, v in out.items() if v}


def output_shape(op: str, shapes: Sequence[Sequence[Any]], world_size: int, params: Mapping[str, Any]) -> tuple:
    """Each rank's output shape of ``op`` from each rank's input shapes (``params``: its parameters, dims already
    in range). Plain arithmetic on the dims, so that torch's symbolic sizes go through it too (ditron.torch_ops'
    fake implementations)."""
    W = world_size
    if op == "grouped_gemm":
        return (shapes[0][0], shapes[1][2] // 2 if params.get("gated") else shapes[1][2])
    if op == "ag_gemm":
        return (W * shapes[0][0], shapes[1][1])
    if op == "gemm_rs":
        return (shapes[0][0] // W, shapes[1][1])
    if op == "gemm_ar":
        return (shapes[0][0], shapes[1][1])
    x = list(shapes[0])
    if op == "all_gather":
        x[params["dim"]] *= W
    elif op == "reduce_scatter":
        x[params["dim"]] //= W
    elif op == "all_to_all":
        x[params["split_dim"]] //= W
        x[params["concat_dim"]] *= W
    return tuple(x)


def signature_for(op: str, shapes: Sequence[Sequence[int]], dtype: str, world_size: int, virtual: bool,
                  target: Any = "cuda:90", passes: Mapping[str, Mapping[str, Any]] | None = None,
                  **params: Any) -> Signature:
    """A Signature from keyword parameters and a ``{pass: {option: value}}`` override mapping."""
    return Signature(op, tuple(tuple(s) for s in shapes), dtype, world_size, virtual, target,
                     tuple(params.items()), _pass_triples(passes))


def _pass_triples(passes: Mapping[str, Mapping[str, Any]] | None) -> tuple[tuple[str, str, str], ...]:
    if not passes:
        return ()
    if not isinstance(passes, Mapping) or not all(isinstance(v, Mapping) for v in passes.values()):
        raise OpError("passes= takes {pass name: {option: value}}, e.g. {'ditron-tile': {'num-chunks': 4}}")
    out = []
    for name, options in passes.items():
        if not options:
            raise OpError(f"passes= gives pass '{name}' no option; drop it or give {{option: value}}")
        for option, value in options.items():
            value = str(value).lower() if isinstance(value, bool) else str(value)
            option = str(option).replace("_", "-")
            if not _OPTION_TEXT.fullmatch(value) or not _OPTION_TEXT.fullmatch(option):
                raise OpError(f"passes= {name}: {option}={value!r}: option names and values are plain words "
                              "(letters, digits, '_', '-', '.', ':')")
            out.append((str(name), option, value))
    return tuple(out)


_OPTION_TEXT = re.compile(r"[A-Za-z0-9_.:-]+", re.ASCII)
