"""ditron's autotuner: GEMM tile configs timed on the GPU, winners kept in a persistent tuning cache.

    ditron tune --shape 3000x5000x3000 --shape 1x4096x14336       # build the candidates, time them, keep winners
    ditron tune --build DIR --shape ...    (CPU box, MLIR)           # then, on the GPU box (torch + triton only):
    ditron tune --run DIR                                            # time DIR's plan, write the tuning cache

What is tuned. For each case -- a ditron.ops GEMM op (``ag_gemm``; at W = 1 a plain GEMM, ``gemm_rs``, ``gemm_ar``)
at a whole-problem shape M x N x K, dtype, world size -- the candidates are the target's GEMM tile configs
(``cost_model.gemm_candidates``, from ``backends/<vendor>/facts.py``) the cost model ranks best for that GEMM, the
first ``top`` of them (plus, for a GEMM alone beyond one wave, the best one without a persistent grid), each compiled
as the whole op with ditron-tile's ``gemm-config`` option (the rest of the plan -- chunks, engines, algorithms -- is
the model's for that config), beside the op as the model plans it alone (``tuning-cache=off``). A fused op is timed
whole, under its real waits and copies. Timing: CUDA events around a fixed number of graph-mode calls after a
warm-up, the median of ``reps`` repetitions; a candidate whose output differs from the model plan's is dropped.

The tuning cache. A JSON file (``cache_path``: ditron-tile's ``tuning-cache`` option, else $DITRON_TUNING_CACHE, else
tuning.json in the cache directory), ``{"version": 1, "entries": {key: entry}}``, one entry per (target, device
name, dtype, world size, op kind as ditron-tile plans it, SM budget, M bucket = M rounded up to a power of two, N,
K exact), the key of the GEMM a rank runs (AG+GEMM: M x N/W x K; GEMM+RS / GEMM+AR: M x N x K/W). An entry holds the
winning config (ditron-tile's gemm-config text), its time, the model's config and time, every candidate's time.
Writes are atomic (a temporary file renamed over the old one, entries merged with what is on disk then); a file that
does not parse, has another version or malformed entries is refused with a TuningError where it is read strictly
(ditron-tile's option), passed over where it is the default, and rebuilt by the next ``ditron tune``.

ditron-tile (passes/planner.py) takes a cached winner over the model's choice for a GEMM of the same key (the
``ditron.tiling`` record says ``config_from = "tuning-cache"``), so later compiles, ``ditron.ops`` artifacts built
anywhere with the file and ``ditron.compile`` all reuse it; ``tune=True`` of ditron.compile and of the GEMM ops tunes
what the cache lacks first. This module imports neither MLIR nor torch at import time (ditron-tile reads the cache;
the GPU box runs ``--run`` without the compiler).
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import os
import re
import statistics
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from . import env
from .backends.base import BackendOptions
from .backends.facts import GemmConfig
from .errors import DitronError

VERSION = 1
FILE_NAME = "tuning.json"
PLAN_FILE = "tune_plan.json"
OPS = ("matmul", "ag_gemm", "gemm_rs", "gemm_ar")  # matmul: ag_gemm at W = 1
DTYPES = ("bf16", "f16")
DEFAULT_TOP = 4
_CONFIG = re.compile(r"(\d+)x(\d+)x(\d+)-w(\d+)-s(\d+)-g(\d+)(-p|-np)?", re.ASCII)
_ENTRY_FIELDS = {"target": str, "device": str, "dtype": str, "world": int, "kind": str, "sms": int, "m_bucket": int,
                 "n": int, "k": int, "config": str, "time_us": float}


class TuningError(DitronError):
    """A tuning cache or plan that cannot be read, a case that cannot be tuned, or tuning without a GPU."""


# ------------------------------------------------------------------------------------------------ configs

@dataclass(frozen=True)
class GemmPin:
    """A GEMM config fixed over the model's choice: tiles, warps, stages, group, and a persistent grid or not
    (None: ditron-tile's rule). ``source``: "tuning-cache" or "gemm-config" (the option)."""

    config: GemmConfig
    persistent: bool | None = None
    source: str = "tuning-cache"

    @property
    def text(self) -> str:
        return config_text(self.config, self.persistent)

    @staticmethod
    def parse(text: str, source: str = "tuning-cache") -> "GemmPin":
        """'128x256x64-w8-s3-g8[-p|-np]' -> GemmPin; ValueError saying what is wrong."""
        match = _CONFIG.fullmatch(text.strip())
        if not match:
            raise ValueError(f"'{text}' is not a GEMM config: write BMxBNxBK-wW-sS-gG, optionally -p or -np "
                             "(persistent or not), e.g. 128x256x64-w8-s3-g8")
        bm, bn, bk, warps, stages, group = (int(g) for g in match.groups()[:6])
        for name, v in (("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk)):
            if v < 16 or v & (v - 1):
                raise ValueError(f"'{text}': {name} must be a power of two >= 16, got {v}")
        if warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"'{text}': warps must be 1, 2, 4, 8 or 16, got {warps}")
        if not 1 <= stages <= BackendOptions.MAX_STAGES or group < 1:
            raise ValueError(f"'{text}': stages must be from 1 to {BackendOptions.MAX_STAGES} and group >= 1")
        persistent = {"-p": True, "-np": False}.get(match.group(7) or "")
        return GemmPin(GemmConfig(bm, bn, bk, warps, stages, group), persistent, source)


def config_text(cfg: Any, persistent: bool | None = None) -> str:
    """The gemm-config text of a GemmConfig (or of a tiling dict with block_m ... group_m)."""
    get = cfg.get if isinstance(cfg, dict) else lambda f, d=None: getattr(cfg, f, d)
    tail = "" if persistent is None else "-p" if persistent else "-np"
    return (f"{get('block_m')}x{get('block_n')}x{get('block_k')}-w{get('num_warps')}-s{get('num_stages')}"
            f"-g{get('group_m', 8)}{tail}")


def m_bucket(m: int) -> int:
    """The M range an entry covers: M rounded up to a power of two (1, 2, 4, ..., 4096 for 2049..4096)."""
    return 1 if m <= 1 else 1 << (int(m) - 1).bit_length()


def entry_key(target: str, device: str, dtype: str, world: int, kind: str, sms: int, m: int, n: int, k: int) -> str:
    return f"{target}|{device}|{dtype}|w{world}|{kind}|sms{sms}|m{m_bucket(m)}|n{n}|k{k}"


# ------------------------------------------------------------------------------------------------- cache

def cache_path(option: str = "") -> Path | None:
    """The tuning cache file: ``option`` (ditron-tile's tuning-cache), else $DITRON_TUNING_CACHE, else
    tuning.json in the cache directory; None when the one that applies says off."""
    text = option or env.tuning_cache() or ""
    if text.lower() in ("off", "none"):
        return None
    return Path(text).expanduser() if text else env.cache_dir() / FILE_NAME


def cache_digest(option: str = "") -> str | None:
    """sha256 of the tuning cache file in effect (None: none there), for the compile cache's key: a compile
    whose GEMMs may take tuned configs is not served from an entry compiled before the file changed."""
    path = cache_path(option)
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path is not None else None
    except OSError:
        return None


class TuningCache:
    """The entries of one tuning cache file (see the module doc)."""

    def __init__(self, path: str | os.PathLike, entries: dict[str, dict] | None = None):
        self.path = Path(path)
        self.entries: dict[str, dict] = dict(entries or {})

    @staticmethod
    def load(path: str | os.PathLike) -> "TuningCache":
        """The file's entries (none if there is no file); TuningError if it cannot be read or is malformed."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return TuningCache(path)
        except (OSError, UnicodeDecodeError) as err:
            raise TuningError(f"cannot read the tuning cache '{path}': {getattr(err, 'strerror', None) or err}") \
                from None
        return TuningCache(path, _parse(text, path))

    @staticmethod
    def open(path: str | os.PathLike) -> tuple["TuningCache", str | None]:
        """(the cache, None), or (an empty cache, why the file was refused) for a damaged file, which the next
        save replaces: what the tuner does."""
        try:
            return TuningCache.load(path), None
        except TuningError as err:
            return TuningCache(path), str(err)

    def lookup(self, target: str, device: str, dtype: str, world: int, kind: str, sms: int, m: int, n: int,
               k: int) -> dict | None:
        """The entry for a GEMM; ``device`` "" takes the latest tuned of any GPU of the target."""
        if device:
            return self.entries.get(entry_key(target, device, dtype, world, kind, sms, m, n, k))
        tail = entry_key(target, "", dtype, world, kind, sms, m, n, k).split("|", 2)[2]
        found = [e for key, e in self.entries.items() if key.startswith(target + "|") and key.split("|", 2)[2] == tail]
        return max(found, key=lambda e: e.get("tuned_at", "")) if found else None

    def pin(self, *args) -> GemmPin | None:
        entry = self.lookup(*args)
        return None if entry is None else GemmPin.parse(entry["config"], "tuning-cache")

    def record(self, entry: dict) -> None:
        _check_entry(entry, self.path, "new entry")
        key = entry_key(entry["target"], entry["device"], entry["dtype"], entry["world"], entry["kind"],
                        entry["sms"], entry["m_bucket"], entry["n"], entry["k"])
        self.entries[key] = entry

    def save(self) -> None:
        """Write atomically, merged with the entries on disk (another tuner's): ours win on the same key; a
        damaged file on disk is replaced."""
        on_disk, _ = TuningCache.open(self.path)
        merged = {**on_disk.entries, **self.entries}
        self.entries = merged
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.parent / f".{self.path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            tmp.write_text(json.dumps({"version": VERSION, "entries": merged}, indent=1, sort_keys=True) + "\n",
                           encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as err:
            raise TuningError(f"cannot write the tuning cache '{self.path}': {err.strerror}") from None
        finally:
            if tmp.exists():
                tmp.unlink()


def _parse(text: str, path: Path) -> dict[str, dict]:
    try:
        data = json.loads(text)
    except ValueError as err:
        raise TuningError(f"tuning cache '{path}' is not JSON ({err}); delete it or run ditron tune to rebuild "
                          "it") from None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("entries"), dict):
        have = data.get("version") if isinstance(data, dict) else type(data).__name__
        raise TuningError(f"tuning cache '{path}' is not a version {VERSION} tuning cache (version {have!r}); "
                          "delete it or run ditron tune to rebuild it")
    for key, entry in data["entries"].items():
        _check_entry(entry, path, f"entry '{key}'")
    return data["entries"]


def _check_entry(entry: Any, path: Path, what: str) -> None:
    if not isinstance(entry, dict):
        raise TuningError(f"tuning cache '{path}': {what} is not an object")
    for name, kind in _ENTRY_FIELDS.items():
        v = entry.get(name)
        if not isinstance(v, kind) and not (kind is float and isinstance(v, int)) or isinstance(v, bool):
            raise TuningError(f"tuning cache '{path}': {what} has no {kind.__name__} '{name}'; delete it or run "
                              "ditron tune to rebuild it")
    try:
        GemmPin.parse(entry["config"])
    except ValueError as err:
        raise TuningError(f"tuning cache '{path}': {what}: {err}") from None


# ------------------------------------------------------------------------------------------------- cases

@dataclass(frozen=True)
class Case:
    """One op to tune: ``op`` (OPS) over the whole problem m x n x k (each rank holds its 1/W, as ditron.ops)."""

    op: str
    m: int
    n: int
    k: int
    dtype: str = "bf16"
    world: int = 1
    target: str = "cuda:90"
    virtual: bool = True

    def __post_init__(self):
        if self.op not in OPS:
            raise TuningError(f"unknown op '{self.op}'; ditron tune tunes {', '.join(OPS)}")
        if self.dtype not in DTYPES:
            raise TuningError(f"{self.op}: dtype '{self.dtype}' cannot be tuned; use one of {', '.join(DTYPES)}")
        if min(self.m, self.n, self.k) < 1 or self.world < 1:
            raise TuningError(f"{self.label}: every dim and the world size must be >= 1")
        if self.op == "matmul" and self.world != 1:
            raise TuningError(f"{self.label}: matmul is one GPU's GEMM; use ag_gemm, gemm_rs or gemm_ar for W > 1")
        split = {"ag_gemm": ("M", self.m), "gemm_rs": ("K", self.k), "gemm_ar": ("K", self.k)}.get(self.op)
        if split and split[1] % self.world or self.op == "ag_gemm" and self.n % self.world or \
                self.op == "gemm_rs" and self.m % self.world:
            raise TuningError(f"{self.label}: the sharded dims must divide by the {self.world} ranks")

    @property
    def label(self) -> str:
        return f"{self.op} {self.m}x{self.n}x{self.k} {self.dtype} w{self.world}"

    def shapes(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """Each rank's input shapes, as ditron.ops takes them."""
        m, n, k, w = self.m, self.n, self.k, self.world
        if self.op in ("matmul", "ag_gemm"):
            return (m // w, k), (k, n // w)
        return (m, k // w), (k // w, n)

    def gemm(self) -> tuple[int, int, int]:
        """The GEMM one rank runs, as ditron-tile plans it (the tuning cache's shape)."""
        if self.op in ("matmul", "ag_gemm"):
            return self.m, self.n // self.world, self.k
        return self.m, self.n, self.k // self.world

    def signature(self, gemm_config: str | None = None):
        """The ditron.ops Signature: the model's plan without any tuning cache, or one with gemm-config."""
        from . import ops
        tile = {"tuning-cache": "off"}
        if gemm_config:
            tile["gemm-config"] = gemm_config
        return ops.signature_for("ag_gemm" if self.op == "matmul" else self.op, self.shapes(), self.dtype,
                                 self.world, self.virtual, self.target, {"ditron-tile": tile})

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def parse(text: str, **fields: Any) -> "Case":
        """'MxNxK' (with the op, dtype, world, target as keywords)."""
        try:
            m, n, k = (int(v) for v in text.lower().split("x"))
        except ValueError:
            raise TuningError(f"shape '{text}' is not MxNxK (three positive integers, e.g. 4096x4096x4096)") from None
        return Case(m=m, n=n, k=k, **fields)


def sm_budget(case: Case) -> int:
    """The SMs ditron-tile plans a rank's GEMM on (the cache key's SM budget)."""
    from .backends.facts import target_facts
    sig_budget = case.signature().cta_budget()
    return sig_budget if sig_budget is not None else target_facts(case.target).num_sms


def candidates(case: Case, top: int = DEFAULT_TOP) -> list[str]:
    """The gemm-config texts worth timing, best modelled first: the ``top`` configs the cost model ranks best for
    the case's GEMM; then, around the best, the template's shapes the model's table leaves out and so cannot
    rank (``variants``); and for a GEMM alone whose tiles exceed a wave the best one without a persistent grid."""
    from .backends.facts import lookup
    from .cost_model import gemm_candidates, gemm_split, gemm_tiles, gemm_time, peaks_for
    sms = sm_budget(case)
    peaks = peaks_for(case.target, num_sms=sms)
    eb = 2
    m, n, k = case.gemm()
    alone = case.world == 1
    configs = gemm_candidates(peaks, eb)

    def seconds(c: GemmConfig) -> float:
        split = gemm_split(m, n, k, c, sms) if alone else 1
        return gemm_time(m, n, k, c, peaks, sms=sms, elem_bytes=eb, split=split)
    ranked = sorted(configs, key=lambda c: (seconds(c), configs.index(c)))[:max(1, top)]
    out = [config_text(c) for c in ranked]
    facts = lookup(peaks.target)
    for variant in variants(ranked[0]):
        text = config_text(variant)
        if text not in out and variant.smem_bytes(eb, facts.vendor) <= peaks.smem_per_sm:
            out.append(text)
    if alone and gemm_tiles(m, n, ranked[0]) > sms:
        out.append(config_text(ranked[0], False))
    return out


def variants(cfg: GemmConfig) -> list[GemmConfig]:
    """The template's neighbours of a tile config that the cost model's table does not hold: the tile transposed
    (BM and BN swapped, also with one more stage), the group of tile rows halved and doubled, one more stage, the
    other of 4 / 8 warps. H200, bf16 (benchmarks/results/tune_candidates.csv): group 4 won at 12345 x 1000 x 3000
    (139.6 against 141.4 us), 256x128 tiles with 4 stages at 3072 x 5000 x 3072 (153.1 against 153.7)."""
    new = dataclasses.replace
    out = [new(cfg, group_m=max(1, cfg.group_m // 2)), new(cfg, group_m=cfg.group_m * 2),
           new(cfg, num_stages=cfg.num_stages + 1), new(cfg, num_warps=4 if cfg.num_warps == 8 else 8)]
    if cfg.block_m != cfg.block_n:
        out[:0] = [new(cfg, block_m=cfg.block_n, block_n=cfg.block_m),
                   new(cfg, block_m=cfg.block_n, block_n=cfg.block_m, num_stages=cfg.num_stages + 1)]
    return [c for c in out if c.num_stages <= BackendOptions.MAX_STAGES]  # past it no backend compiles them


# ------------------------------------------------------------------------------------------ build and run

def build(cases: Sequence[Case], directory: str | os.PathLike, *, top: int = DEFAULT_TOP,
          progress: bool | None = None) -> dict:
    """Compile every case's model plan and candidates into ``directory`` (a ditron.ops Library) and write the
    plan (``tune_plan.json``) that ``run`` times. Needs the MLIR bindings. A candidate whose plan is the model's
    (the same GEMM fields) is not built twice."""
    from . import ops
    root = Path(directory)
    plan_cases = []
    bar = _bar(len(cases) * (top + 2), "build", progress)
    for case in cases:
        model_sig = case.signature()
        model_choice = _gemm_choice(ops.choices(ops.build_one(model_sig, root)), case)
        bar.update(1)
        model_text = config_text(model_choice, model_choice.get("persistent"))
        entry = {"case": case.to_json(), "kind": model_choice["kind"], "gemm": list(case.gemm()),
                 "sms": sm_budget(case), "model": {"config": model_text, "signature": model_sig.to_json(),
                                                   "est_us": model_choice.get("est_us")}, "candidates": []}
        seen = {_plan_fields(model_choice)}
        for text in candidates(case, top):
            sig = case.signature(text)
            choice = _gemm_choice(ops.choices(ops.build_one(sig, root)), case)
            bar.update(1)
            if _plan_fields(choice) in seen:
                continue
            seen.add(_plan_fields(choice))
            entry["candidates"].append({"config": config_text(choice, choice.get("persistent")),
                                        "signature": sig.to_json(), "est_us": choice.get("est_us")})
        plan_cases.append(entry)
    bar.close()
    plan = {"version": VERSION, "cases": plan_cases}
    root.mkdir(parents=True, exist_ok=True)
    (root / PLAN_FILE).write_text(json.dumps(plan, indent=1) + "\n", encoding="utf-8")
    return plan


def _gemm_choice(choices: list[dict], case: Case) -> dict:
    found = [c for c in choices if c.get("block_m") and c.get("kind") in ("matmul", "ag_matmul", "matmul_rs",
                                                                           "matmul_ar")]
    if not found:
        raise TuningError(f"{case.label}: ditron-tile chose no GEMM config (choices: {choices})")
    return found[0]


def _plan_fields(choice: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in choice.items() if k not in ("est_us", "config_from", "op")))


def load_plan(directory: str | os.PathLike) -> dict:
    path = Path(directory) / PLAN_FILE
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TuningError(f"'{directory}' holds no {PLAN_FILE}: run ditron tune --build {directory} first") from None
    except (OSError, ValueError) as err:
        raise TuningError(f"cannot read the tuning plan '{path}': {err}") from None
    if not isinstance(plan, dict) or plan.get("version") != VERSION or not isinstance(plan.get("cases"), list):
        raise TuningError(f"'{path}' is not a version {VERSION} tuning plan; build it again")
    return plan


@dataclass
class Result:
    """One case's outcome: times in microseconds of the model's plan and of each candidate (None: dropped)."""

    case: Case
    kind: str
    model_config: str
    model_us: float
    tuned_config: str
    tuned_us: float
    timings: dict[str, float | None]

    @property
    def speedup(self) -> float:
        return self.model_us / self.tuned_us if self.tuned_us else 1.0


# a timer: (case, the ditron.ops Signature's JSON, its artifact directory) -> seconds per call; raises
# TuningError to drop the candidate (e.g. a wrong result)
Timer = Callable[[Case, dict, Path], float]


def run(directory: str | os.PathLike, *, cache: str | os.PathLike | None = None, timer: Timer | None = None,
        device: str | None = None, progress: bool | None = None, log: Callable[[str], None] | None = None
        ) -> list[Result]:
    """Time the plan ``build`` wrote into ``directory`` and record each case's winner in the tuning cache
    (``cache``: a path, default ``cache_path()``). ``timer``: default GpuTimer (CUDA events, medians; needs a GPU,
    not the MLIR bindings); ``device``: the GPU name of the entries (default the timer's)."""
    plan = load_plan(directory)
    root = Path(directory)
    timer, device, path = _setup(timer, device, cache)
    store, damaged = TuningCache.open(path)
    if damaged and log:
        log(f"warning: {damaged}; rebuilding it")
    results = []
    total = sum(1 + len(c["candidates"]) for c in plan["cases"])
    bar = _bar(total, "tune", progress)
    for entry in plan["cases"]:
        case = Case(**entry["case"])
        timings: dict[str, float | None] = {}
        for plan_entry in [entry["model"], *entry["candidates"]]:
            sig = plan_entry["signature"]
            from . import ops
            art = root / ops.Signature.from_json(sig).key
            try:
                us = timer(case, sig, art) * 1e6
                # two plans of one config (a fused op's other choices around it): the config's best time
                before = timings.get(plan_entry["config"])
                timings[plan_entry["config"]] = us if before is None else min(before, us)
            except TuningError as err:
                if plan_entry is entry["model"]:
                    raise
                timings[plan_entry["config"]] = None
                if log:
                    log(f"warning: {case.label} {plan_entry['config']} dropped: {err}")
            bar.update(1)
        model = entry["model"]["config"]
        best = min((t, c) for c, t in timings.items() if t is not None)
        # ties keep the model's plan: a candidate must be faster by more than 0.5 %
        tuned_us, tuned = (best if best[0] < timings[model] * 0.995 else (timings[model], model))
        m, n, k = entry["gemm"]
        store.record({"target": case.target, "device": device, "dtype": case.dtype, "world": case.world,
                      "kind": entry["kind"], "sms": entry["sms"], "m_bucket": m_bucket(m), "m": m, "n": n, "k": k,
                      "config": tuned, "time_us": round(tuned_us, 3), "model_config": model,
                      "model_us": round(timings[model], 3),
                      "timings": {c: None if t is None else round(t, 3) for c, t in timings.items()},
                      "tuned_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
        results.append(Result(case, entry["kind"], model, timings[model], tuned, tuned_us, timings))
    bar.close()
    store.save()
    return results


def tune(cases: Sequence[Case], *, directory: str | os.PathLike | None = None, cache: str | os.PathLike | None = None,
         timer: Timer | None = None, device: str | None = None, top: int = DEFAULT_TOP, force: bool = False,
         progress: bool | None = None, log: Callable[[str], None] | None = None) -> list[Result]:
    """Build and time in one process (needs MLIR and, with the default timer, a GPU): the cases the cache lacks
    for this device (all with ``force``). ``directory``: where the candidates' artifacts go (default
    tune-artifacts in the cache directory)."""
    timer, device, path = _setup(timer, device, cache)
    store, _ = TuningCache.open(path)
    todo = [c for c in cases if force or store.lookup(c.target, device, c.dtype, c.world, _kind_guess(c),
                                                      sm_budget(c), *c.gemm()) is None]
    if not todo:
        return []
    directory = Path(directory) if directory is not None else env.cache_dir() / "tune-artifacts"
    build(todo, directory, top=top, progress=progress)
    return run(directory, cache=path, timer=timer, device=device, progress=progress, log=log)


def _setup(timer: Timer | None, device: str | None, cache: str | os.PathLike | None) -> tuple[Timer, str, Path]:
    """(the timer, default GpuTimer; the GPU name of the entries, default the timer's; the cache file)."""
    timer = timer if timer is not None else GpuTimer()
    device = device or getattr(timer, "device_name", "") or "unknown"
    path = Path(cache) if cache is not None else cache_path()
    if path is None:
        raise TuningError("the tuning cache is off ($DITRON_TUNING_CACHE=off): give ditron tune --cache FILE")
    return timer, device, path


def _kind_guess(case: Case) -> str:
    """The overlap kind ditron-tile gives the case's GEMM (what fuse-overlap pairs at W > 1)."""
    if case.world == 1:
        return "matmul"
    return {"ag_gemm": "ag_matmul", "gemm_rs": "matmul_rs", "gemm_ar": "matmul_ar"}[case.op]


# -------------------------------------------------------------------------------------------- the GPU timer

class GpuTimer:
    """Times one op artifact on the current GPU: graph-mode calls (ditron.runtime's executor, as ditron.ops with
    graph=True), ``warmup`` calls, then ``reps`` repetitions of CUDA events around ``iters`` calls (default: as
    many as take about 2 ms, 3 to 200); the median repetition. Each case's inputs are drawn once (seeded); every
    candidate's output is compared with the model plan's (the first timed of a case)."""

    def __init__(self, *, reps: int = 5, warmup: int = 3, iters: int | None = None, budget_s: float = 2e-3):
        import torch
        if not torch.cuda.is_available():
            raise TuningError("tuning times candidates on a GPU, and torch sees none here (build the candidates "
                              "with ditron tune --build DIR, then run ditron tune --run DIR on the GPU box)")
        self.reps, self.warmup, self.iters, self.budget_s = reps, warmup, iters, budget_s
        self.device_name = torch.cuda.get_device_name()
        self._case, self._inputs, self._ref, self._world = None, None, None, {}

    def __call__(self, case: Case, sig: dict, path: Path) -> float:
        import torch

        from .runtime.loader import load_artifact
        from .runtime.world import World
        if not (path / "manifest.json").exists():
            raise TuningError(f"{case.label}: no artifact at '{path}' (build the plan again)")
        world = self._world.setdefault(case.world, World.virtual(case.world))
        if self._case != case:
            gen = torch.Generator(device="cuda").manual_seed(0)
            dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[case.dtype]
            self._inputs = [[torch.randn(s, device="cuda", dtype=dtype, generator=gen) / s[-1] ** 0.25
                             for s in case.shapes()] for _ in range(case.world)]
            self._case, self._ref = case, None
        exe = load_artifact(path)
        try:
            bound = exe.executor(world, graph=True).bind(self._inputs, None)
            out = [r[0].clone() for r in bound(True)]
            if self._ref is None:
                self._ref = out
            else:
                for got, want in zip(out, self._ref):
                    if not torch.allclose(got.float(), want.float(), rtol=2e-2, atol=2e-2):
                        raise TuningError(f"output differs from the model plan's by "
                                          f"{(got.float() - want.float()).abs().max().item():.3g}")
            for _ in range(self.warmup):
                bound(False)
            torch.cuda.synchronize()
            iters = self.iters or self._calibrate(bound)
            times = []
            for _ in range(self.reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    bound(False)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e-3 / iters)
            return statistics.median(times)
        finally:
            exe.close()

    def _calibrate(self, bound) -> int:
        import torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        bound(False)
        end.record()
        end.synchronize()
        one = max(start.elapsed_time(end) * 1e-3, 1e-6)
        return max(3, min(200, math.ceil(self.budget_s / one)))


# --------------------------------------------------------------------------------------------- reporting

def _bar(total: int, what: str, progress: bool | None):
    """A tqdm progress bar on stderr (``progress`` None: only on a terminal)."""
    from tqdm import tqdm
    return tqdm(total=total, desc=what, unit="plan", file=sys.stderr, leave=False,
                disable=(not sys.stderr.isatty()) if progress is None else not progress)


def summary(results: Iterable[Result]) -> str:
    """The table: shape, kind, the model's config and time, the tuned config and time, speedup."""
    rows = [("op", "shape", "kind", "model's choice", "model us", "tuned choice", "tuned us", "speedup")]
    for r in results:
        c = r.case
        rows.append((f"{c.op} w{c.world}", f"{c.m}x{c.n}x{c.k}", r.kind, r.model_config, f"{r.model_us:.1f}",
                     r.tuned_config, f"{r.tuned_us:.1f}", f"{r.speedup:.3f}x"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    speedups = [r.speedup for r in results]
    if speedups:
        geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
        lines.append(f"{len(speedups)} case(s), tuned over model geomean {geo:.3f}x")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ tune= of compile and the ops

def op_case(op: str, shapes: Sequence[Sequence[int]], dtype: str, world: int, target: str, virtual: bool) -> Case:
    """The Case of a ditron.ops GEMM call from each rank's input shapes."""
    (m, k), (_, n) = shapes
    if op == "ag_gemm":
        return Case("matmul", m, n, k, dtype, 1, target, virtual) if world == 1 else \
            Case("ag_gemm", m * world, n * world, k, dtype, world, target, virtual)
    return Case(op, m, n, k * world, dtype, world, target, virtual)


def ops_passes(op: str, first: Sequence[Any], world: Any, lib: Any, passes: dict | None) -> dict:
    """``tune=True`` of a ditron.ops GEMM call (``first``: rank 0's tensors): the caller's pass overrides with
    ditron-tile's gemm-config set to the tuned winner."""
    from .ops import _dtype_name
    if not world.is_virtual and world.world_size > 1:
        raise TuningError(f"{op}: tune=True times the op in one process (a virtual world); tuning in a real world "
                          f"of {world.world_size} ranks, every rank timing at once, is not supported")
    case = op_case(op, [tuple(t.shape) for t in first], _dtype_name(first[0]), world.world_size,
                   lib.target or lib.default_target(), world.is_virtual)
    tile = dict((passes or {}).get("ditron-tile", {}), **{"gemm-config": tuned_config(case, directory=lib.directory)})
    return {**(passes or {}), "ditron-tile": tile}


def tuned_config(case: Case, *, timer: Timer | None = None, directory: str | os.PathLike | None = None) -> str:
    """The tuning cache's winner for ``case`` on this GPU, tuned first (on the GPU) when the cache lacks it: what
    ``tune=True`` of the ops pins with ditron-tile's gemm-config."""
    timer = timer if timer is not None else GpuTimer()
    device = getattr(timer, "device_name", "") or "unknown"
    path = cache_path()
    if path is None:
        raise TuningError("tune=True needs the tuning cache, which $DITRON_TUNING_CACHE=off turns off")
    kind = _kind_guess(case)
    entry = TuningCache.open(path)[0].lookup(case.target, device, case.dtype, case.world, kind, sm_budget(case),
                                            *case.gemm())
    if entry is None:
        tune([case], directory=directory, cache=path, timer=timer, device=device, progress=False)
        entry = TuningCache.load(path).lookup(case.target, device, case.dtype, case.world, kind, sm_budget(case),
                                              *case.gemm())
    if entry is None:
        raise TuningError(f"{case.label}: tuning recorded no winner (the op's GEMM is planned as another kind than "
                          f"'{kind}')")
    return entry["config"]


def program_cases(text: str, source_name: str, target: str) -> tuple[list[Case], list[str]]:
    """The GEMMs of a task program that ``ditron.compile(tune=True)`` tunes, as Cases (each matmul alone), and a
    note for each one it cannot time in one process (a fused op of W > 1 ranks, a dtype the
    tuner does not take): its passes up to ditron-tile run on a copy, without the tuning cache."""
    from mlir import ir

    from .dialects import ditron_context, parse_module, task
    from .dialects.opbase import walk_ops
    from .passes.manager import PassManager
    from .passes.registry import PIPELINES
    from .passes.tiling import TARGET_ATTR, TILING_ATTR, Tiling, shape_of
    names = list(PIPELINES["ditron-default"])
    upto = names[:names.index("ditron-tile")] + ["ditron-tile{tuning-cache=off}"]
    cases, notes = [], []
    with ditron_context():
        module = parse_module(text, source_name)
        if TARGET_ATTR not in module.operation.attributes:
            module.operation.attributes[TARGET_ATTR] = ir.StringAttr.get(target)
        PassManager(",".join(upto), record=False).run(module)
        for op in walk_ops(module.operation):
            if op.name != "ditron_task.matmul" or TILING_ATTR not in op.attributes:
                continue
            tiling = Tiling.of(op)
            mm = task.Matmul(op)
            (m, k), n = shape_of(mm.lhs), shape_of(mm.rhs)[mm.b_dims[1]]
            dtype = {"bf16": "bf16", "f16": "f16"}.get(str(ir.ShapedType(op.operands[0].type).element_type))
            found = re.fullmatch(r'loc\("(.*)":(\d+):(\d+)\)', str(op.location))
            where = ":".join(found.groups()) if found else str(op.location)
            if dtype is None:
                notes.append(f"{where}: a {ir.ShapedType(op.operands[0].type).element_type} GEMM is not tuned "
                             f"(the tuner takes {', '.join(DTYPES)})")
            elif mm.transpose_b:
                notes.append(f"{where}: a GEMM of B [N, K] (transpose_b) is not tuned (the tuner times B [K, N])")
            elif tiling.kind != "matmul":
                notes.append(f"{where}: the {tiling.kind} GEMM of {tiling.world} rank(s) is not tuned here (its "
                             f"waits and copies need its world); tune it with ditron tune --op ... --world "
                             f"{tiling.world}")
            else:
                cases.append(Case("matmul", m, n, k, dtype, 1, target, False))
        del module
    return list(dict.fromkeys(cases)), notes
