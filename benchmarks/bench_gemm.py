#!/usr/bin/env python3
"""GEMM benchmark: ditron's GEMM template against torch.matmul (cuBLAS), bf16, on one GPU, in the same run.

Two steps, because the GPU box has torch + triton but not the MLIR bindings:

    python benchmarks/bench_gemm.py --build [DIR]   # CPU box with ditron + MLIR: for every shape, the candidate
                                                    # configs of gemm.candidates() as generic-form .ttir files
                                                    # plus manifest.json (default DIR: build/gemm_kernels)
    python benchmarks/bench_gemm.py --run [DIR]     # GPU box, torch + triton only: triton.compile each .ttir,
                                                    # check it against torch.matmul, time every candidate
                                                    # (autotune), time the winner and torch.matmul alternately

Without arguments it builds when MLIR is importable and runs when a GPU is present (both on a box with both).
``--skinny`` (with --build): the M = 128 GEMMs of the distributed ops' small-M rows instead, with ditron-tile's own
tile candidates (cost_model) beside the template's, written as gemm_skinny.csv / .png: the evidence for the
candidates' pipeline depth. ``--stages`` (with --build): the same shapes over a grid of tiles, BLOCK_K, pipeline
stages and loads, timed back to back (L2 warm, as inside the distributed ops' repeated calls) beside torch.matmul,
every candidate written to gemm_skinny_warm.csv: the evidence for the small tiles' stages in
``backends/nvidia/facts.py`` (GEMM_CANDIDATES). ``--stream-k`` (with --build): the M = 1024 GEMMs of the distributed ops, whose
big tiles fill the SMs in a fraction of a wave, whole-tile persistent against stream-K (the last tiles shared out
by K steps), timed the same way -> gemm_stream_k.csv: the evidence for the model's stream-K.

Output: a table on stdout; benchmarks/results/gemm.csv, gemm.png (if matplotlib is importable),
gemm_compile.csv (compile times: ditron's TTIR through Triton's stages vs triton.compile of the equivalent
Triton-Python kernel, cold = empty Triton cache in a fresh process, cached = second compile in-process).

Timing: triton.testing.do_bench, median, L2 flushed before every repetition (do_bench's default), random
normal inputs. The --run part imports nothing from ditron, so it also serves as a template for loading ditron's
kernels with torch + triton alone. TMA kernels create their descriptors on the device and need Triton's global
scratch allocator: ``triton.set_allocator`` is set below.
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DIR = HERE.parent / "build" / "gemm_kernels"
RESULTS = HERE / "results"
TARGET = "cuda:90"
NUM_SMS = 132  # cuda:90's SMs (backends/nvidia/facts.py, an H200): describe() names other program counts
SHAPES = [(8192, 8192, 8192), (8192, 14336, 4096), (8192, 28672, 8192), (8192, 8192, 28672), (8192, 29568, 8192),
          (8192, 49152, 12288), (128, 8192, 8192), (1024, 8192, 8192)]
MAX_CANDIDATES = 7
# one rank's GEMM of AG+GEMM / GEMM+RS / GEMM+AR at M = 128 on two ranks (LLaMA-3 8B and 70B)
SKINNY = [(128, 4096, 7168), (128, 8192, 14336), (128, 7168, 4096), (128, 14336, 8192)]


# ================================================================================ build (CPU box, needs MLIR)

def build_kernels(out_dir: Path, kernels: list[dict], target: str = TARGET) -> dict:
    """Write one generic-form .ttir per kernel (its ditron_core primitives lowered for target: what Triton is
    given) and manifest.json. kernels: [{"name", "m", "n", "k", "fields" (make_record keyword arguments), "group"
    (what the runner groups candidates by)}]. Each manifest entry lists in "abi" the arguments the lowering
    appended (split-K's bounded lock wait: wait_bound, wait_err, wait_tag). Returns the manifest."""
    import triton
    from mlir import ir

    from ditron.compiler import abi_of, kernel_ttir, lower_core
    from ditron.dialects import ditron_context
    from ditron.kernels import gemm

    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.ttir"):
        old.unlink()
    entries, timings = [], {}
    for spec in kernels:
        rec = gemm.make_record(spec["m"], spec["n"], spec["k"], name=spec["name"], target=target, **spec["fields"])
        start = time.perf_counter()
        with ditron_context():
            module = ir.Module.create()
            func = gemm.build(rec, ip=ir.InsertionPoint(module.body))
            lower_core(module, target)
            abi = abi_of(func)
            ((_, text),) = kernel_ttir(module)
            del module, func
        timings[rec["name"]] = time.perf_counter() - start
        (out_dir / f"{rec['name']}.ttir").write_text(text)
        entries.append({"name": rec["name"], "group": spec.get("group", rec["name"]), "file": f"{rec['name']}.ttir",
                        "grid": list(gemm.grid(rec)), "num_warps": rec["num_warps"],
                        "num_stages": rec["num_stages"], "tiles": gemm.geometry(rec).tiles, "record": dict(rec),
                        "abi": abi, "scratch": gemm.scratch(rec)})
    manifest = {"target": target, "built_with_triton": triton.__version__, "kernels": entries}
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    (out_dir / "timings.json").write_text(json.dumps({"ttir_build_s": timings}, indent=1, sort_keys=True) + "\n")
    return manifest


def bench_kernels(shapes=SHAPES, max_candidates: int = MAX_CANDIDATES, dtype: str = "bf16",
                  model_tiles: bool = False) -> list[dict]:
    """The benchmark's kernels: the first max_candidates configs of gemm.candidates() per shape; model_tiles: also
    the cost model's candidate tiles up to 128x128 (ditron-tile's choices), grid-launched with their stages."""
    from ditron.cost_model import gemm_candidates, peaks_for
    from ditron.kernels import gemm
    out = []
    for m, n, k in shapes:
        configs = gemm.candidates(m, n, k, dtype, TARGET)[:max_candidates]
        if model_tiles:
            base = dict(group_m=8, num_sms=peaks_for(TARGET).num_sms, loads="tma", store="pointer",
                        epilogue_split=1, flatten=False, split_k=1, persistent=False)
            configs += [dict(base, block_m=c.block_m, block_n=c.block_n, block_k=c.block_k, num_warps=c.num_warps,
                             num_stages=stages) for c in gemm_candidates(peaks_for(TARGET))
                        if c.block_m * c.block_n <= 128 * 128 and c.block_m >= 64 for stages in (4, c.num_stages)]
            configs = list({json.dumps(c, sort_keys=True): c for c in configs}.values())
        for i, cfg in enumerate(configs):
            out.append({"name": f"gemm_{m}x{n}x{k}_c{i}", "group": f"{m}x{n}x{k}", "m": m, "n": n, "k": k,
                        "fields": dict(cfg, in_dtype=dtype)})
    return out


# the --stages grid: the small tiles of the memory-bound GEMMs, every pipeline depth that fits the shared memory
STAGE_TILES = ((64, 64, 4), (64, 128, 4), (128, 64, 4), (128, 128, 8))
SCRATCH_BYTES = 8192  # what Triton's own scratch may need beside the stages


def stage_kernels(shapes=SKINNY, dtype: str = "bf16") -> list[dict]:
    from ditron.cost_model import peaks_for
    peaks = peaks_for(TARGET)
    out = []
    base = dict(group_m=8, num_sms=peaks.num_sms, store="pointer", epilogue_split=1, flatten=False,
                persistent=False, split_k=1)
    for m, n, k in shapes:
        i = 0
        for bm, bn, warps in STAGE_TILES:
            for bk in (64, 128):
                for stages in range(4, 10):
                    if stages * (bm + bn) * bk * 2 > peaks.smem_per_sm - SCRATCH_BYTES:
                        continue
                    for loads in ("tma", "pointer"):
                        out.append({"name": f"gemm_{m}x{n}x{k}_s{i}", "group": f"{m}x{n}x{k}", "m": m, "n": n, "k": k,
                                    "fields": dict(base, block_m=bm, block_n=bn, block_k=bk, num_warps=warps,
                                                   num_stages=stages, loads=loads, in_dtype=dtype)})
                        i += 1
    return out


# one rank's GEMM of AG+GEMM / GEMM+RS at M = 1024 on two ranks (LLaMA-3 8B and 70B)
MID = [(1024, 7168, 4096), (1024, 14336, 8192), (1024, 4096, 7168), (1024, 8192, 14336)]


def stream_k_kernels(shapes=MID, dtype: str = "bf16") -> list[dict]:
    """Per shape: the big tiles whole (persistent) and stream-K over the partial wave's tiles (and over one more
    wave), with TMA and with pointer loads (AG+GEMM's one-launch gather reads A through pointers)."""
    from ditron.cost_model import peaks_for
    sms = peaks_for(TARGET).num_sms
    out = []
    base = dict(group_m=8, num_sms=sms, store="pointer", epilogue_split=1, flatten=False, persistent=True,
                split_k=1)
    for m, n, k in shapes:
        i = 0
        for bm, bn, warps, stages in ((128, 256, 8, 3), (128, 128, 8, 5)):
            tiles = math.ceil(m / bm) * math.ceil(n / bn)
            for sk in sorted({0, tiles % sms, tiles % sms + sms} - {sms}):
                if sk > tiles or (sk and sk * math.ceil(k / 64) < sms):
                    continue
                for loads in ("tma", "pointer"):
                    out.append({"name": f"gemm_{m}x{n}x{k}_k{i}", "group": f"{m}x{n}x{k}", "m": m, "n": n, "k": k,
                                "fields": dict(base, block_m=bm, block_n=bn, block_k=64, num_warps=warps,
                                               num_stages=stages, loads=loads, stream_k=sk, in_dtype=dtype)})
                    i += 1
    return out


def build(out_dir: Path, skinny: bool = False, stages: bool = False, stream_k: bool = False) -> None:
    if stages or stream_k:
        manifest = build_kernels(out_dir, stream_k_kernels() if stream_k else stage_kernels())
        manifest["timing"] = "warm"
        manifest["csv"] = "gemm_stream_k.csv" if stream_k else "gemm_skinny_warm.csv"
        (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        print(f"built {len(manifest['kernels'])} kernels into {out_dir} (timed L2 warm)")
        return
    manifest = build_kernels(out_dir, bench_kernels(SKINNY, model_tiles=True) if skinny else bench_kernels())
    timings = json.loads((out_dir / "timings.json").read_text())
    # one cold compile of the whole ditron path on this box, for reference: template -> TTIR -> Triton stages
    try:
        from ditron.backends import get_backend
        first = manifest["kernels"][0]
        be = get_backend(TARGET)
        start = time.perf_counter()
        be.compile((out_dir / first["file"]).read_text(),
                   be.options(num_warps=first["num_warps"], num_stages=first["num_stages"]))
        timings["cpu_box_stages_s"] = {first["name"]: time.perf_counter() - start}
        (out_dir / "timings.json").write_text(json.dumps(timings, indent=1, sort_keys=True) + "\n")
    except ImportError:
        pass
    print(f"built {len(manifest['kernels'])} kernels for {len(SKINNY if skinny else SHAPES)} shapes into {out_dir}")


# ================================================================================ run (GPU box: torch + triton)

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8e4m3": "float8_e4m3fn",
                "fp8e5m2": "float8_e5m2", "i32": "int32"}


def torch_dtype(name: str):
    import torch
    return getattr(torch, TORCH_DTYPES[name])


def gpu_target(name: str | None = None):
    """Triton's GPUTarget: the current GPU's, or one named like 'cuda:90' (compile-only runs without a GPU)."""
    if name:
        from triton.backends.compiler import GPUTarget
        vendor, arch = name.split(":")
        return GPUTarget("cuda", int(arch), 32) if vendor == "cuda" else GPUTarget("hip", arch, 64)
    from triton.runtime import driver
    return driver.active.get_current_target()


def set_scratch_allocator() -> None:
    """TMA kernels write their tensor descriptors to Triton's global scratch, allocated per launch."""
    import torch
    import triton

    def alloc(size: int, alignment: int, stream):
        return torch.empty(size, device="cuda", dtype=torch.int8)

    triton.set_allocator(alloc)


def compile_entry(kernel_dir: Path, entry: dict, target: str | None = None):
    import triton
    return triton.compile(str(kernel_dir / entry["file"]), target=gpu_target(target),
                          options={"num_warps": entry["num_warps"], "num_stages": entry["num_stages"]})


def _compile_worker(args) -> tuple[str, float, str]:
    kernel_dir, entry, target = args
    start = time.perf_counter()
    try:
        compile_entry(Path(kernel_dir), entry, target)
        return entry["name"], time.perf_counter() - start, ""
    except Exception as err:  # noqa: BLE001 - report and go on with the other candidates
        return entry["name"], time.perf_counter() - start, f"{type(err).__name__}: {str(err)[:200]}"


def precompile(kernel_dir: Path, entries: list[dict], target: str | None = None) -> dict[str, str]:
    """Fill Triton's cache in parallel processes; returns {name: error} for kernels that failed."""
    import concurrent.futures
    import multiprocessing
    workers = max(1, min(16, (os.cpu_count() or 2) - 1, len(entries)))
    ctx = multiprocessing.get_context("spawn")
    errors = {}
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        for name, _, error in pool.map(_compile_worker, [(str(kernel_dir), e, target) for e in entries]):
            if error:
                errors[name] = error
    return errors


# polls before a split-K lock wait gives up (tens of seconds on an H200): a lost partial becomes an error count in
# GemmLaunch.err, not a hang
WAIT_BOUND = 100_000_000


class GemmLaunch:
    """One launch of a compiled GEMM template on torch tensors a, b, c (row-major, as the record describes) and
    the ``operands`` its other arguments name (a fused epilogue's), with the arguments its lowering appended
    (entry["abi"]). ``gave_up()``: waits that gave up so far."""

    def __init__(self, kernel, entry: dict, a, b, c, **operands):
        import torch
        rec = entry["record"]
        self.kernel, self.grid = kernel, tuple(entry["grid"])
        self.err = torch.zeros(4, device=a.device, dtype=torch.int32)  # [gave up, tag, value seen, unused]
        buffers = {"a": a, "b": b, "c": c, **operands, "wait_bound": WAIT_BOUND, "wait_err": self.err,
                   "wait_tag": 1}
        for name, (shape, dtype) in (entry.get("scratch") or {}).items():  # split-K / stream-K (locks zeroed)
            buffers[name] = torch.zeros(shape, device=a.device, dtype=torch_dtype(dtype))
        names = list(rec["args"]) + [name for name, _ in entry.get("abi", [])]
        missing = [x for x in names if x not in buffers]
        if missing:
            raise ValueError(f"{entry['name']}: the benchmark has no value for argument(s) {missing}")
        self.args = [buffers[x] for x in names]

    def gave_up(self) -> int:
        return int(self.err[0].item())

    def __call__(self):
        self.kernel[self.grid](*self.args)


def rel_error(c, ref) -> float:
    import torch
    return (torch.linalg.norm((c.float() - ref.float())) / torch.linalg.norm(ref.float())).item()


def gemm_inputs(rec: dict, seed: int = 0):
    """Random A, B (scaled so outputs are O(1)) and an output buffer, laid out as the record says."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    m, n, k = rec["m"], rec["n"], rec["k"]
    dt = torch_dtype(rec["in_dtype"])
    scale = 1.0 / math.sqrt(math.sqrt(k))
    a = (torch.randn(m, rec["lda"], device="cuda", generator=g) * scale).to(dt)
    b_shape = (n, rec["ldb"]) if rec["b_trans"] else (k, rec["ldb"])
    b = (torch.randn(*b_shape, device="cuda", generator=g) * scale).to(dt)
    c = torch.empty(m, rec["ldc"], device="cuda", dtype=torch_dtype(rec["out_dtype"]))
    return a, b, c


def reference(rec: dict, a, b):
    """torch.matmul on the same operands; in float32 (exact upcast, no TF32) for fp8 inputs or an fp32 output."""
    import torch
    n, k = rec["n"], rec["k"]
    av = a[:, :k]
    bv = b[:, :k].t() if rec["b_trans"] else b[:, :n]
    if rec["in_dtype"].startswith("fp8") or rec["out_dtype"] == "fp32":
        return torch.matmul(av.float(), bv.float())
    return torch.matmul(av, bv)


def bench_ms(fn, rep: int) -> float:
    import triton
    return triton.testing.do_bench(fn, warmup=max(10, rep // 8), rep=rep, return_mode="median")


def describe(rec: dict) -> str:
    parts = [f"{rec['block_m']}x{rec['block_n']}x{rec['block_k']}", f"w{rec['num_warps']}", f"s{rec['num_stages']}",
             rec["loads"], "persistent" if rec["persistent"] else "grid"]
    if rec.get("split_k", 1) > 1:
        parts.append(f"splitk{rec['split_k']}")
    if rec.get("stream_k", 0):
        parts.append(f"streamk{rec['stream_k']}")
    if rec.get("epilogue_split", 1) > 1:
        parts.append("epi/2")
    if rec.get("m_split", 1) > 1:
        parts.append(f"msplit{rec['m_split']}")
    if rec.get("warp_specialize"):
        parts.append("ws")
    if rec.get("programs_per_sm", 1) > 1:
        parts.append(f"{rec['programs_per_sm']}/SM")
    if rec.get("persistent") and rec["num_sms"] != NUM_SMS:
        parts.append(f"sms{rec['num_sms']}")
    if rec.get("flatten"):
        parts.append("flat")
    if rec.get("fast_accum"):
        parts.append("fast_accum")
    return " ".join(parts)


def load_manifest(kernel_dir: Path) -> dict:
    path = kernel_dir / "manifest.json"
    if not path.exists():
        sys.exit(f"no {path}: build the kernels first on a machine with ditron + MLIR: "
                 f"python benchmarks/bench_gemm.py --build {kernel_dir}")
    return json.loads(path.read_text())


def run(kernel_dir: Path, rep: int = 200, tune_rep: int = 40, dry_run_target: str | None = None) -> list[dict]:
    """Compile, check and time every candidate; returns one row per shape. dry_run_target ('cuda:90'): only
    compile, for that target, without a GPU."""
    import triton
    manifest = load_manifest(kernel_dir)
    if manifest["built_with_triton"] != triton.__version__:
        print(f"note: kernels built with triton {manifest['built_with_triton']}, running triton {triton.__version__}")
    entries = manifest["kernels"]
    t0 = time.perf_counter()
    errors = precompile(kernel_dir, entries, dry_run_target)
    print(f"compiled {len(entries)} kernels in {time.perf_counter() - t0:.1f} s ({len(errors)} failed)")
    for name, error in errors.items():
        print(f"  {name}: {error}")
    if dry_run_target:
        return []
    import torch
    if not torch.cuda.is_available():
        sys.exit("bench_gemm --run needs a CUDA GPU (or --dry-run TARGET to compile only)")
    set_scratch_allocator()
    groups: dict[str, list[dict]] = {}
    for e in entries:
        groups.setdefault(e["group"], []).append(e)
    rows = []
    for group, cands in groups.items():
        print(f"{group}: {len(cands)} candidates")
        row = bench_group(kernel_dir, cands, errors, rep, tune_rep)
        if row is None:
            print(f"{group}: no candidate ran correctly")
        else:
            rows.append(row)
        torch.cuda.empty_cache()
    return rows


def group_inputs(cands: list[dict]):
    """One shape's first record, its operands, output, reference result and a buffer for torch.matmul's."""
    import torch
    rec0 = cands[0]["record"]
    a, b, c = gemm_inputs(rec0)
    ref = reference(rec0, a, b)
    return rec0, a, b, c, ref, torch.empty_like(ref)


def bench_group(kernel_dir: Path, cands: list[dict], errors: dict, rep: int, tune_rep: int) -> dict | None:
    """Check and time every candidate of one shape, then time the fastest and torch.matmul alternately."""
    import torch
    rec0, a, b, c, ref, c_ref = group_inputs(cands)
    m, n, k = rec0["m"], rec0["n"], rec0["k"]
    tried = []
    for e in cands:
        if e["name"] in errors:
            tried.append((e, None, None, errors[e["name"]]))
            continue
        try:
            launch = GemmLaunch(compile_entry(kernel_dir, e), e, a, b, c)
            c.zero_()
            launch()
            torch.cuda.synchronize()
            err = rel_error(c[:, :n], ref)
            gave_up = launch.gave_up()
            ms = bench_ms(launch, tune_rep) if err < 2e-2 and not gave_up else None
            note = f"{gave_up} split-K wait(s) gave up" if gave_up else f"rel. error {err:.2e}"
            tried.append((e, launch, ms, note if ms is None else ""))
        except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory on this GPU
            tried.append((e, None, None, f"{type(exc).__name__}: {str(exc)[:120]}"))
    for e, _, ms, note in tried:
        print(f"  {e['name']:<28} {describe(e['record']):<48} {'%.3f ms' % ms if ms is not None else note}")
    ok = [t for t in tried if t[2] is not None]
    if not ok:
        return None
    e, launch = min(ok, key=lambda t: t[2])[:2]

    def torch_fn():
        torch.matmul(a, b, out=c_ref)

    # alternate, keep each side's best median
    t_ditron = min(bench_ms(launch, rep), bench_ms(launch, rep))
    t_torch = min(bench_ms(torch_fn, rep), bench_ms(torch_fn, rep))
    c.zero_()
    launch()
    err = rel_error(c[:, :n], ref)
    flop = 2.0 * m * n * k
    return {"M": m, "N": n, "K": k, "ditron_ms": t_ditron, "torch_ms": t_torch,
            "ditron_tflops": flop / t_ditron / 1e9, "torch_tflops": flop / t_torch / 1e9,
            "ratio": t_torch / t_ditron, "rel_err": err, "config": describe(e["record"]), "winner": e["name"],
            "candidates": len(cands),
            "tuning": "; ".join(f"{describe(t[0]['record'])}: {'%.3f ms' % t[2] if t[2] is not None else t[3]}"
                                for t in tried)}


def warm_us(fn, iters: int = 200, blocks: int = 2) -> float:
    """Microseconds per call of fn repeated back to back (L2 warm), the best of ``blocks`` blocks of CUDA events."""
    import torch
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(blocks):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / iters)
    return best


def run_stages(kernel_dir: Path, out: Path) -> None:
    """--stages / --stream-k: every candidate and torch.matmul per shape, L2 warm; the ranking printed, all
    written as CSV (the manifest's "csv")."""
    import torch
    manifest = load_manifest(kernel_dir)
    errors = precompile(kernel_dir, manifest["kernels"])
    set_scratch_allocator()
    groups: dict[str, list[dict]] = {}
    for e in manifest["kernels"]:
        groups.setdefault(e["group"], []).append(e)
    rows = []
    for group, cands in groups.items():
        rec0, a, b, c, ref, c_ref = group_inputs(cands)
        timed = []
        for e in cands:
            if e["name"] in errors:
                print(f"  {e['name']}: {errors[e['name']]}")
                continue
            launch = GemmLaunch(compile_entry(kernel_dir, e), e, a, b, c)
            c.zero_()
            launch()
            torch.cuda.synchronize()
            err = rel_error(c[:, :rec0["n"]], ref)
            if err > 2e-2:
                print(f"  {e['name']} {describe(e['record'])}: rel. error {err:.2e}")
                continue
            timed.append((warm_us(launch), describe(e["record"]), err))
        t_torch = min(warm_us(lambda: torch.matmul(a, b, out=c_ref)) for _ in range(2))
        timed.sort()
        print(f"{group}: torch.matmul {t_torch:.1f} us")
        for t, desc, _ in timed[:10]:
            print(f"  {t:7.1f} us  {t_torch / t:5.2f}  {desc}")
        rows += [{"M": rec0["m"], "N": rec0["n"], "K": rec0["k"], "config": desc, "ditron_us": t,
                  "torch_us": t_torch, "ratio": t_torch / t, "rel_err": err} for t, desc, err in timed]
        torch.cuda.empty_cache()
    out.mkdir(parents=True, exist_ok=True)
    name = manifest.get("csv", "gemm_skinny_warm.csv")
    with open(out / name, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out / name}")


# ------------------------------------------------------------------ the equivalent Triton-Python kernel

def _triton_reference_kernel():
    """The persistent TMA GEMM written in Triton's Python DSL, same structure as the template's default config
    (grouped order, device-side descriptors, flattened tile loop, split epilogue). Used as the baseline of the
    compile-time comparison and as a same-config speed check."""
    import triton
    import triton.language as tl

    @triton.jit
    def gemm_reference(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                       NUM_SMS: tl.constexpr, FLATTEN: tl.constexpr, ESPLIT: tl.constexpr):
        start = tl.program_id(0)
        tiles_m = tl.cdiv(M, BM)
        tiles_n = tl.cdiv(N, BN)
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN // ESPLIT])
        per_group = GROUP_M * tiles_n
        for t in tl.range(start, tiles_m * tiles_n, NUM_SMS, flatten=FLATTEN):
            first = (t // per_group) * GROUP_M
            size = min(tiles_m - first, GROUP_M)
            m0 = (first + t % size) * BM
            n0 = ((t % per_group) // size) * BN
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for kk in range(0, tl.cdiv(K, BK)):
                acc = tl.dot(a_desc.load([m0, kk * BK]), b_desc.load([kk * BK, n0]), acc)
            if ESPLIT == 2:
                lo, hi = tl.split(tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))
                c_desc.store([m0, n0], lo.to(c_ptr.dtype.element_ty))
                c_desc.store([m0, n0 + BN // 2], hi.to(c_ptr.dtype.element_ty))
            else:
                c_desc.store([m0, n0], acc.to(c_ptr.dtype.element_ty))

    return gemm_reference


def triton_reference_source(rec: dict):
    from triton.compiler import ASTSource
    ty = {"bf16": "*bf16", "fp16": "*fp16", "fp32": "*fp32"}
    return ASTSource(_triton_reference_kernel(),
                     signature={"a_ptr": ty[rec["in_dtype"]], "b_ptr": ty[rec["in_dtype"]], "c_ptr": ty[rec["out_dtype"]]},
                     constexprs={"M": rec["m"], "N": rec["n"], "K": rec["k"], "BM": rec["block_m"], "BN": rec["block_n"],
                                 "BK": rec["block_k"], "GROUP_M": rec["group_m"], "NUM_SMS": rec["num_sms"],
                                 "FLATTEN": rec["flatten"], "ESPLIT": rec["epilogue_split"]},
                     attrs={(i,): [["tt.divisibility", 16]] for i in range(3)})


def _compile_once(kind: str, kernel_dir: Path, entry: dict, target: str | None = None) -> float:
    import triton
    start = time.perf_counter()
    if kind == "ditron":
        compile_entry(kernel_dir, entry, target)
    else:
        triton.compile(triton_reference_source(entry["record"]), target=gpu_target(target),
                       options={"num_warps": entry["num_warps"], "num_stages": entry["num_stages"]})
    return time.perf_counter() - start


def compile_times(kernel_dir: Path, entry: dict, target: str | None = None) -> list[dict]:
    """Cold (fresh process, empty Triton cache) and cached (second compile in this process) compile seconds."""
    out = []
    timings_path = kernel_dir / "timings.json"
    build_s = json.loads(timings_path.read_text())["ttir_build_s"].get(entry["name"], 0.0) \
        if timings_path.exists() else 0.0
    for kind in ("ditron", "triton"):
        with tempfile.TemporaryDirectory(prefix="triton-cold-") as cache:
            env = dict(os.environ, TRITON_CACHE_DIR=cache)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--compile-once", kind, str(kernel_dir),
                   entry["name"]] + (["--dry-run", target] if target else [])
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"cold compile of the {kind} kernel failed:\n{proc.stderr[-2000:]}")
                continue
            cold = float(proc.stdout.strip().splitlines()[-1])
        _compile_once(kind, kernel_dir, entry, target)
        cached = _compile_once(kind, kernel_dir, entry, target)
        out.append({"kernel": kind, "ttir_build_s": build_s if kind == "ditron" else 0.0, "stages_cold_s": cold,
                    "cold_total_s": cold + (build_s if kind == "ditron" else 0.0), "cached_s": cached})
    return out


def triton_reference_speed(entry: dict, rep: int) -> dict:
    import triton
    rec = entry["record"]
    kernel = triton.compile(triton_reference_source(rec), target=gpu_target(),
                            options={"num_warps": entry["num_warps"], "num_stages": entry["num_stages"]})
    a, b, c = gemm_inputs(rec)
    grid = (min(rec["num_sms"], entry["tiles"]), 1, 1)

    def launch():
        kernel[grid](a, b, c)

    launch()
    err = rel_error(c, reference(rec, a, b))
    ms = min(bench_ms(launch, rep), bench_ms(launch, rep))
    return {"ms": ms, "tflops": 2.0 * rec["m"] * rec["n"] * rec["k"] / ms / 1e9, "rel_err": err}


# ================================================================================ report

def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def build_run_main(doc: str, default_dir: Path, results: Path, build, run, argv=None) -> None:
    """The command line of a kernel benchmark in two steps: ``--build [DIR]`` (CPU box: build(DIR)), ``--run
    [DIR]`` (GPU box: run(DIR, rep, out)), or both."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--build", nargs="?", const=str(default_dir), metavar="DIR", help="write the kernels (CPU box)")
    p.add_argument("--run", nargs="?", const=str(default_dir), metavar="DIR", help="time them (GPU box)")
    p.add_argument("--rep", type=int, default=200, help="do_bench milliseconds per measurement")
    p.add_argument("--out", default=str(results), help="where the CSV goes")
    args = p.parse_args(argv)
    if args.build is None and args.run is None:
        p.error("give --build, --run or both")
    if args.build is not None:
        build(Path(args.build))
    if args.run is not None:
        run(Path(args.run), args.rep, Path(args.out))


def report(rows: list[dict], compile_rows: list[dict], ref_speed: dict | None, out_dir: Path,
           name: str = "gemm") -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    print()
    print(f"{'M':>6} {'N':>6} {'K':>6} | {'ditron ms':>9} {'TFLOP/s':>8} | {'torch ms':>9} {'TFLOP/s':>8} | "
          f"{'ratio':>6} | {'rel.err':>8} | winning config")
    for r in rows:
        print(f"{r['M']:>6} {r['N']:>6} {r['K']:>6} | {r['ditron_ms']:>9.3f} {r['ditron_tflops']:>8.1f} | "
              f"{r['torch_ms']:>9.3f} {r['torch_tflops']:>8.1f} | {r['ratio']:>6.3f} | {r['rel_err']:>8.1e} | "
              f"{r['config']} ({r['candidates']} tried)")
    g = geomean(r["ratio"] for r in rows)
    print(f"geometric-mean ratio (torch time / ditron time): {g:.3f}   (target >= 0.97)")
    if ref_speed:
        print(f"Triton-Python kernel with the 8192^3 config: {ref_speed['ms']:.3f} ms, {ref_speed['tflops']:.1f} "
              f"TFLOP/s (rel. err {ref_speed['rel_err']:.1e})")
    fields = ["M", "N", "K", "ditron_ms", "ditron_tflops", "torch_ms", "torch_tflops", "ratio", "rel_err", "config",
              "winner", "candidates", "tuning"]
    with open(out_dir / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
        f.write(f"# geomean ratio,{g:.4f}\n")
    if compile_rows:
        print("\ncompile time (s)       TTIR build   Triton stages (cold)   cold total   cached")
        for c in compile_rows:
            print(f"  {c['kernel']:<20} {c['ttir_build_s']:>10.3f} {c['stages_cold_s']:>22.3f} "
                  f"{c['cold_total_s']:>12.3f} {c['cached_s']:>8.3f}")
        print("  (ditron: template -> generic TTIR with MLIR on the build box, then triton.compile of that file;\n"
              "   triton: triton.compile(ASTSource) of the same kernel written in Triton's Python DSL)")
        with open(out_dir / "gemm_compile.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(compile_rows[0]))
            w.writeheader()
            w.writerows(compile_rows)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not importable: skipped {out_dir / f'{name}.png'}")
        return
    labels = [f"{r['M']}x{r['N']}x{r['K']}" for r in rows]
    xs = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 1.3), 4.5))
    ax.bar([x - 0.2 for x in xs], [r["ditron_tflops"] for r in rows], 0.4, label="ditron")
    ax.bar([x + 0.2 for x in xs], [r["torch_tflops"] for r in rows], 0.4, label="torch.matmul (cuBLAS)")
    for x, r in zip(xs, rows):
        ax.text(x, max(r["ditron_tflops"], r["torch_tflops"]) * 1.01, f"{r['ratio']:.2f}x", ha="center", fontsize=8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("TFLOP/s (bf16)")
    ax.set_title(f"GEMM: ditron vs cuBLAS, geomean ratio {g:.3f}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / f"{name}.png", dpi=120)
    print(f"wrote {out_dir / f'{name}.csv'}, {out_dir / f'{name}.png'}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", nargs="?", const=str(DEFAULT_DIR), metavar="DIR",
                   help="generate the candidate kernels (needs ditron + MLIR)")
    p.add_argument("--run", nargs="?", const=str(DEFAULT_DIR), metavar="DIR",
                   help="benchmark prebuilt kernels (needs a GPU, torch, triton)")
    p.add_argument("--skinny", action="store_true", help="with --build: the M = 128 shapes of the distributed ops "
                   "and ditron-tile's candidate tiles (results: gemm_skinny.*)")
    p.add_argument("--stages", action="store_true", help="with --build: the M = 128 shapes over tiles, BLOCK_K, "
                   "stages and loads, timed L2 warm (results: gemm_skinny_warm.csv)")
    p.add_argument("--stream-k", action="store_true", help="with --build: the M = 1024 shapes, whole tiles against "
                   "stream-K, timed L2 warm (results: gemm_stream_k.csv)")
    p.add_argument("--rep", type=int, default=200, help="do_bench milliseconds per final measurement")
    p.add_argument("--out", default=str(RESULTS), help="where the CSV and PNG go")
    p.add_argument("--dry-run", metavar="TARGET", help="with --run: only compile, for TARGET (e.g. cuda:90); no GPU "
                   "needed")
    p.add_argument("--compile-once", nargs=3, metavar=("KIND", "DIR", "NAME"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.compile_once:
        kind, kdir, name = args.compile_once
        entry = next(e for e in load_manifest(Path(kdir))["kernels"] if e["name"] == name)
        print(_compile_once(kind, Path(kdir), entry, args.dry_run))
        return
    if args.build is None and args.run is None:
        if importlib.util.find_spec("mlir") is not None:
            args.build = str(DEFAULT_DIR)
        try:
            import torch
            if torch.cuda.is_available():
                args.run = str(DEFAULT_DIR)
        except ImportError:
            pass
        if args.build is None and args.run is None:
            sys.exit("nothing to do: no MLIR bindings (for --build) and no GPU (for --run)")
    if args.build is not None:
        build(Path(args.build), skinny=args.skinny, stages=args.stages, stream_k=args.stream_k)
    if args.run is not None:
        kdir = Path(args.run)
        if load_manifest(kdir).get("timing") == "warm" and not args.dry_run:
            run_stages(kdir, Path(args.out))
            return
        rows = run(kdir, rep=args.rep, dry_run_target=args.dry_run)
        manifest = load_manifest(kdir)
        first = next((e for e in manifest["kernels"] if e["group"] == "8192x8192x8192"), manifest["kernels"][0])
        comparable = first["record"]["persistent"] and first["record"]["loads"] == "tma" \
            and first["record"]["store"] == "tma" and first["record"]["split_k"] == 1
        compile_rows = compile_times(kdir, first, args.dry_run) if comparable else []
        ref_speed = triton_reference_speed(first, args.rep) if comparable and not args.dry_run else None
        if args.dry_run:
            for c in compile_rows:
                print(f"{c['kernel']}: cold {c['cold_total_s']:.3f} s (TTIR build {c['ttir_build_s']:.3f} s), "
                      f"cached {c['cached_s']:.3f} s")
            return
        skinny = all(e["group"] in {f"{m}x{n}x{k}" for m, n, k in SKINNY} for e in manifest["kernels"])
        report(rows, compile_rows, ref_speed, Path(args.out), "gemm_skinny" if skinny else "gemm")


if __name__ == "__main__":
    main()
