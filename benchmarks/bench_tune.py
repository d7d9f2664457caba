#!/usr/bin/env python3
"""The autotuner's benchmark: on a spread of GEMM shapes no issue named, torch.matmul (cuBLAS), ditron's GEMM as the
cost model plans it, and as ``ditron tune`` tunes it, all timed in the same run on one GPU.

Two steps, because the GPU box has torch + triton but not the MLIR bindings:

    python benchmarks/bench_tune.py --build DIR [--top 3] [--quick]   # CPU box: every shape's model plan and
                                                                      # candidates (ditron_py/tune.py build)
    python benchmarks/bench_tune.py --run DIR                         # GPU box: time them (tune.run: CUDA events,
                                                                      # medians, graph-mode calls), winners into
                                                                      # DIR/tuning.json, torch.matmul beside them

Subsets and experiments (same two steps):

    --build DIR --shape 257x2048x7168 --shape ...     # only these shapes (repeatable)
    --build DIR --top 0                               # the model's plan alone, no candidates
    --build DIR --variant "loads=tma stream-k=true"   # beside each model plan, one per set of ditron-tile options
                                                      # (repeatable); --run DIR times them all (--name CSV)
    --build DIR --model-only                          # the model's plans alone, for a comparison of two builds:
    --run DIR --before DIR2                           # DIR's and DIR2's (another version's) model plans in turns

Shapes (M x N x K, bf16, a GEMM alone = ditron.ops.ag_gemm at W = 1): M from 1 to 16384, including M that are not
multiples of 16 or 128; (N, K) of Llama-3 8B / 70B, Qwen2 / 2.5, Mixtral, DeepSeek-V3, GPT-3 layers and LM heads,
and odd ones (K whose rows are not 16-byte aligned: pointer loads). ``--quick``: every fourth shape.

Timing: each candidate as ditron_py/tune.GpuTimer times it (inputs drawn once per shape; the model plan's output is
checked against torch.matmul, every candidate's against the model plan's); torch.matmul on the same inputs, CUDA
events around a fixed number of calls after a warm-up, the median of 5 repetitions, L2 warm as in a model's
repeated layers. Output: a table on stdout, benchmarks/results/tune.csv and tune.png (matplotlib, if importable).
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
RESULTS = HERE / "results"
TARGET = "cuda:90"
# (M, N, K): the layers' (N, K) -- out features, in features -- at token counts from decode to long prefill
SHAPES = [
    (1, 4096, 4096), (1, 14336, 4096), (7, 4096, 14336), (16, 6144, 4096),            # Llama-3 8B decode
    (64, 128256, 4096),                                                               # Llama-3 LM head
    (100, 28672, 8192), (128, 8192, 28672), (777, 8192, 8192),                        # Llama-3 70B
    (200, 7168, 2048), (257, 2048, 7168), (4096, 7168, 2048), (16384, 2048, 7168),    # DeepSeek-V3 experts
    (8192, 18432, 7168),                                                              # DeepSeek-V3 dense MLP
    (256, 4096, 4096), (4096, 4096, 4096), (10000, 4096, 4096), (16384, 4096, 4096),  # square-ish
    (333, 3584, 18944), (512, 18944, 3584), (2048, 152064, 3584),                     # Qwen2.5-7B, its LM head
    (2048, 29568, 8192), (2048, 8192, 29568),                                         # Qwen2-72B
    (1500, 14336, 4096), (8192, 14336, 4096), (8192, 4096, 14336), (16384, 14336, 4096),  # Mixtral / Llama MLP
    (4000, 6144, 4096),                                                               # Llama-3 8B QKV
    (1024, 49152, 12288),                                                             # GPT-3 MLP
    (1000, 1000, 1000), (3000, 5000, 3000), (5000, 3000, 5000), (12345, 1000, 3000),  # odd
    (6000, 3333, 1111),                                                               # odd, K rows unaligned
]


VARIANTS_FILE = "variants_plan.json"


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape '{text}' is not MxNxK") from None
    return m, n, k


def cases(quick: bool, shapes=None):
    from ditron import tune
    shapes = shapes or (SHAPES[::4] if quick else SHAPES)
    return [tune.Case("matmul", m, n, k, "bf16", 1, TARGET) for m, n, k in shapes]


def parse_variant(text: str) -> dict[str, str]:
    """'gemm-config=64x128x128-w4-s4-g8 stream-k=true' -> ditron-tile options."""
    out = {}
    for word in text.split():
        key, eq, value = word.partition("=")
        if not eq or not key or not value:
            raise argparse.ArgumentTypeError(f"variant '{text}': write ditron-tile options as key=value words")
        out[key] = value
    return out


def build(directory: Path, top: int, quick: bool, shapes=None, variants=None, model_only: bool = False) -> None:
    """The tuner's plan (the model's plan and ``top`` candidates a shape; top 0: the model's plan alone), or with
    ``variants`` the model's plan and each variant (ditron-tile options over the model's plan) a shape, into
    DIR/variants_plan.json for --run."""
    import json

    from ditron import ops, tune
    if not variants and not model_only:
        plan = tune.build(cases(quick, shapes), directory, top=top) if top else \
            _model_plan(cases(quick, shapes), directory)
        count = sum(1 + len(c["candidates"]) for c in plan["cases"])
        print(f"built {count} plans of {len(plan['cases'])} shapes into {directory}")
        return
    entries = []
    for case in cases(quick, shapes):
        plans = []
        for label, opts in [("model", {}), *(variants or [])]:
            tile = {"tuning-cache": "off", **opts}
            sig = ops.signature_for("ag_gemm", case.shapes(), case.dtype, 1, True, TARGET, {"ditron-tile": tile})
            try:
                choice = tune._gemm_choice(ops.choices(ops.build_one(sig, directory)), case)
            except Exception as err:  # a variant the template refuses for this shape
                print(f"{case.label} {label}: not built ({str(err).splitlines()[0][:200]})", file=sys.stderr)
                continue
            plans.append({"label": label, "config": tune.config_text(choice, choice.get("persistent")),
                          "choice": {k: v for k, v in choice.items() if k != "op"}, "signature": sig.to_json()})
        entries.append({"case": case.to_json(), "plans": plans})
        print(f"{case.label}: {len(plans)} plans", file=sys.stderr)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / VARIANTS_FILE).write_text(json.dumps(entries, indent=1) + "\n")
    print(f"built {sum(len(e['plans']) for e in entries)} plans of {len(entries)} shapes into {directory}")


def _model_plan(case_list, directory: Path) -> dict:
    """tune.build's plan with no candidates: the model's plan of each case alone."""
    import json

    from ditron import ops, tune
    plan_cases = []
    for case in case_list:
        sig = case.signature()
        choice = tune._gemm_choice(ops.choices(ops.build_one(sig, directory)), case)
        plan_cases.append({"case": case.to_json(), "kind": choice["kind"], "gemm": list(case.gemm()),
                           "sms": tune.sm_budget(case),
                           "model": {"config": tune.config_text(choice, choice.get("persistent")),
                                     "signature": sig.to_json(), "est_us": choice.get("est_us")},
                           "candidates": []})
    plan = {"version": tune.VERSION, "cases": plan_cases}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / tune.PLAN_FILE).write_text(json.dumps(plan, indent=1) + "\n", encoding="utf-8")
    return plan


def run_compare(after: Path, before: Path, out: Path, name: str, rounds: int = 2) -> None:
    """The model plans of two variants builds of the same shapes (``before``: another version of the code), timed
    in turns on the same inputs -- before, after, before, after, ... (``rounds`` each, the best kept: the GPU's
    clocks drift over a run) -- with torch.matmul beside them; rows into OUT/<name>."""
    import json

    from ditron import ops, tune
    timer = CheckedTimer()
    old = {tuple(e["case"].values()): e for e in json.loads((before / VARIANTS_FILE).read_text())}
    rows = []
    for entry in json.loads((after / VARIANTS_FILE).read_text()):
        case = tune.Case(**entry["case"])
        prev = old.get(tuple(entry["case"].values()))
        if prev is None:
            print(f"{case.label}: not in {before}", file=sys.stderr)
            continue
        plans = {"before": (before, prev["plans"][0]), "after": (after, entry["plans"][0])}
        best = {}
        for _ in range(rounds):
            for label, (root, p) in plans.items():
                art = root / ops.Signature.from_json(p["signature"]).key
                us = timer(case, p["signature"], art) * 1e6
                best[label] = min(best.get(label, us), us)
        t = timer.torch_us[(case.m, case.n, case.k)]
        row = {"m": case.m, "n": case.n, "k": case.k, "torch_us": round(t, 2)}
        for label, (_, p) in plans.items():
            c = p["choice"]
            row.update({f"{label}_config": p["config"], f"{label}_loads": c.get("loads", ""),
                        f"{label}_stream_k": c.get("stream_k", ""), f"{label}_repack": c.get("repack", ""),
                        f"{label}_us": round(best[label], 2), f"{label}_vs_torch": round(t / best[label], 4)})
        row["device"] = timer.device_name
        rows.append(row)
        print(f"{case.m}x{case.n}x{case.k}: torch {t:8.2f}  before {p_text(plans['before'][1])} {best['before']:8.2f} "
              f"({t / best['before']:.3f}x)  after {p_text(plans['after'][1])} {best['after']:8.2f} "
              f"({t / best['after']:.3f}x)", flush=True)
    write_csv(out / name, rows)
    for label in ("before", "after"):
        xs = [r[f"{label}_vs_torch"] for r in rows]
        print(f"{label}: geomean {geomean(xs):.3f}x torch.matmul, worst {min(xs):.3f} ({len(xs)} shapes)")
    print(f"wrote {out / name}")


def p_text(p) -> str:
    c = p["choice"]
    extra = "".join(f" {k}={c[k]}" for k in ("loads", "stream_k", "repack") if c.get(k))
    return f"{p['config']}{extra}"


def run_variants(directory: Path, out: Path, name: str) -> None:
    """Time every plan of DIR/variants_plan.json (GpuTimer: outputs checked against the model plan's, and the model
    plan's against torch.matmul) with torch.matmul beside it; rows into OUT/<name>."""
    import json

    from ditron import ops, tune
    timer = CheckedTimer()
    rows = []
    for entry in json.loads((directory / VARIANTS_FILE).read_text()):
        case = tune.Case(**entry["case"])
        for p in entry["plans"]:
            art = directory / ops.Signature.from_json(p["signature"]).key
            try:
                us = timer(case, p["signature"], art) * 1e6
            except Exception as err:
                print(f"{case.label} {p['label']}: {str(err).splitlines()[0][:200]}", file=sys.stderr)
                continue
            t = timer.torch_us[(case.m, case.n, case.k)]
            c = p["choice"]
            rows.append({"m": case.m, "n": case.n, "k": case.k, "label": p["label"], "config": p["config"],
                         "loads": c.get("loads", ""), "split_k": c.get("split_k", ""),
                         "stream_k": c.get("stream_k", ""), "repack": c.get("repack", ""),
                         "est_us": c.get("est_us", ""), "us": round(us, 2), "torch_us": round(t, 2),
                         "vs_torch": round(t / us, 4), "device": timer.device_name})
            print(f"{case.m}x{case.n}x{case.k} {p['label']:50s} {p['config']:28s} {us:9.2f} us  torch {t:8.2f}  "
                  f"{t / us:.3f}x", flush=True)
    write_csv(out / name, rows)
    print(f"wrote {out / name}")


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        raise SystemExit(f"nothing was timed: {path} not written")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


class CheckedTimer:
    """tune.GpuTimer, whose first (model) plan of each shape is also checked against torch.matmul, and which times
    torch.matmul on the same inputs."""

    def __init__(self):
        from ditron import tune
        self.inner = tune.GpuTimer()
        self.device_name = self.inner.device_name
        self.torch_us: dict[tuple, float] = {}

    def __call__(self, case, sig, path):
        import torch
        seconds = self.inner(case, sig, path)
        key = (case.m, case.n, case.k)
        if key not in self.torch_us:  # the model plan, the first timed of a shape
            a, b = self.inner._inputs[0]
            want = torch.matmul(a, b).float()
            got = self.inner._ref[0].float()
            err = ((got - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()
            if err > 2e-2:
                raise RuntimeError(f"{case.label}: ditron's output differs from torch.matmul (relative {err:.3g})")
            self.torch_us[key] = torch_us(lambda: torch.matmul(a, b))
        return seconds


def torch_us(fn, reps: int = 5, budget_s: float = 2e-3) -> float:
    import torch
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    iters = max(3, min(200, math.ceil(budget_s / max(start.elapsed_time(end) * 1e-3, 1e-6))))
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / iters)
    return statistics.median(times)


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def run(directory: Path, cache: Path | None, out: Path) -> None:
    from ditron import tune
    timer = CheckedTimer()
    results = tune.run(directory, cache=cache or directory / tune.FILE_NAME, timer=timer,
                       log=lambda s: print(s, file=sys.stderr))
    print(tune.summary(results))
    rows = []
    for r in results:
        t = timer.torch_us[(r.case.m, r.case.n, r.case.k)]
        rows.append({"m": r.case.m, "n": r.case.n, "k": r.case.k, "torch_us": round(t, 2),
                     "model_config": r.model_config, "model_us": round(r.model_us, 2),
                     "tuned_config": r.tuned_config, "tuned_us": round(r.tuned_us, 2),
                     "model_vs_torch": round(t / r.model_us, 4), "tuned_vs_torch": round(t / r.tuned_us, 4),
                     "tuned_over_model": round(r.speedup, 4), "candidates": len(r.timings) - 1,
                     "device": timer.device_name})
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "tune.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    model = [r["model_vs_torch"] for r in rows]
    tuned = [r["tuned_vs_torch"] for r in rows]
    print(f"vs torch.matmul, geomean (worst): model {geomean(model):.3f} ({min(model):.3f}), tuned "
          f"{geomean(tuned):.3f} ({min(tuned):.3f}); tuned over model {geomean(r['tuned_over_model'] for r in rows):.3f}"
          f"; {len(rows)} shapes; wrote {out / 'tune.csv'}")
    plot(rows, out / "tune.png")


def plot(rows, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    labels = [f"{r['m']}x{r['n']}x{r['k']}" for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.45), 4.5))
    ax.bar([i - 0.2 for i in x], [r["model_vs_torch"] for r in rows], 0.4, label="model's choice")
    ax.bar([i + 0.2 for i in x], [r["tuned_vs_torch"] for r in rows], 0.4, label="tuned")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(list(x), labels, rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("speed vs torch.matmul (x)")
    ax.set_title(f"ditron GEMM, bf16, {rows[0]['device']}: model's choice and tuned vs cuBLAS")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--build", type=Path, metavar="DIR", help="compile the plans into DIR (needs MLIR)")
    where.add_argument("--run", type=Path, metavar="DIR", help="time DIR's plans on this GPU")
    p.add_argument("--top", type=int, default=3, help="candidates per shape beside the model's plan (default 3; 0: "
                                                      "the model's plan alone)")
    p.add_argument("--quick", action="store_true", help="every fourth shape")
    p.add_argument("--shape", type=parse_shape, action="append", metavar="MxNxK",
                   help="build only these shapes (repeatable; default: the spread)")
    p.add_argument("--variant", type=parse_variant, action="append", metavar="OPTS",
                   help="--build: beside each shape's model plan, one with these ditron-tile options (key=value "
                        "words, e.g. 'loads=tma stream-k=true'; repeatable); --run then times them all")
    p.add_argument("--name", default="tune_variants.csv", help="--run of a variants build: the CSV's name")
    p.add_argument("--model-only", action="store_true",
                   help="--build: each shape's model plan alone, as a variants build (for --run DIR --before)")
    p.add_argument("--before", type=Path, metavar="DIR2",
                   help="--run of a --model-only build: time it in turns with DIR2's (the same shapes built by "
                        "another version of the code) and write both, with torch.matmul")
    p.add_argument("--cache", type=Path, help="the tuning cache to write (default DIR/tuning.json)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where tune.csv / tune.png go")
    args = p.parse_args(argv)
    if args.build:
        variants = [(" ".join(f"{k}={v}" for k, v in opts.items()), opts) for opts in args.variant or []]
        build(args.build, args.top, args.quick, args.shape, variants, model_only=args.model_only)
    elif args.before:
        run_compare(args.run, args.before, args.out, args.name)
    elif (args.run / VARIANTS_FILE).exists():
        run_variants(args.run, args.out, args.name)
    else:
        run(args.run, args.cache, args.out)


if __name__ == "__main__":
    main()
