#!/usr/bin/env python3
"""fp8 (e4m3, e5m2) GEMMs with scales, the GEMM template's fused epilogue against torch._scaled_mm, on one GPU.

    python benchmarks/bench_fp8.py --build [DIR]   # CPU box with ditron + MLIR: per shape, the GEMM template's
                                                   # kernel (make_record's own choice) with per-tensor and per-row
                                                   # scales fused, as .ttir + manifest.json
                                                   # (default DIR: build/fp8_kernels)
    python benchmarks/bench_fp8.py --build [DIR] --variants   # also e4m3 precise tiles beside the candidates
                                                   # ("e4m3v<i>" rows: VARIANTS)
    python benchmarks/bench_fp8.py --run [DIR]     # GPU box, torch + triton only: check every kernel against
                                                   # float32 torch and torch._scaled_mm, and time it against
                                                   # torch._scaled_mm (use_fast_accum off and on)

Both take A [M, K] row-major and B in nn.Linear's [N, K] layout (``b_trans``; torch._scaled_mm's column-major
second operand is that tensor's ``.t()``), fp8, and store bf16. The cases per shape and scales: e4m3 with precise
accumulation (torch's default: each K step of 128 added into fp32), e4m3 with ``fast_accum`` (torch's
use_fast_accum) and e5m2 precise; each against torch._scaled_mm in the same accumulation mode ("vs_scaled_mm").
torch._scaled_mm (cuBLASLt) does not multiply two e5m2 matrices: an e5m2 kernel is timed against the e4m3
_scaled_mm of the same shape (the same bytes and FLOPs) and checked against float32 torch alone.

* per_tensor: C = bf16((A @ B^T) * sa * sb), sa and sb [1] fp32 -- two "scalar" epilogue steps;
* per_row:    C = bf16((A @ B^T) * sa[:, None] * sb[None, :]), sa [M, 1] (per row of A) and sb [N] (per row of
  B, a column of C) fp32 -- a "row" and a "bias" step.

What ditron-fuse-epilogue makes of ``dt.cast(dt.matmul(a, b, out_dtype="f32", transpose_b=True) * sa * sb,
"bf16")``: the scales multiply the fp32 accumulator before the one rounding to bf16.

Output: a table on stdout and benchmarks/results/fp8.csv -- per case the fused kernel's time, torch._scaled_mm's
(precise and fast accumulation) and the ratios, the issue's target being >= 0.95 of torch._scaled_mm. Timing:
triton.testing.do_bench, median, L2 flushed before every repetition.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DIR = HERE.parent / "build" / "fp8_kernels"
RESULTS = HERE / "results"
# LLaMA-3 8B's projections at 8192 / 2048 tokens, a square one, and a ragged M
SHAPES = [(8192, 14336, 4096), (8192, 4096, 14336), (2048, 14336, 4096), (4096, 4096, 4096), (1000, 4096, 4096)]
SCALES = {
    "per_tensor": [{"fn": "mul", "arg": "sa", "operand": "scalar", "dtype": "fp32"},
                   {"fn": "mul", "arg": "sb", "operand": "scalar", "dtype": "fp32"}],
    "per_row": [{"fn": "mul", "arg": "sa", "operand": "row", "dtype": "fp32"},
                {"fn": "mul", "arg": "sb", "operand": "bias", "dtype": "fp32"}],
}


def _bench_gemm():
    """benchmarks/bench_gemm.py, imported by name (its precompile's worker processes find it so)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import bench_gemm
    return bench_gemm


# ================================================================================ build (CPU box, needs MLIR)

# name prefix -> make_record fields: (in_dtype, fast_accum)
MODES = {"e4m3": ("fp8e4m3", False), "e4m3fast": ("fp8e4m3", True), "e5m2": ("fp8e5m2", False)}
# the template's next candidates (kernels/gemm/configs.py) of e4m3, per-tensor scales: "<mode>alt<i>" rows, the
# data to rank the fp8 tiles by (the cost model's fp8 efficiencies are estimates)
ALTERNATIVES = {"e4m3": 3, "e4m3fast": 2}


# ``--variants`` (with --build): e4m3 precise tiles beside the template's candidates, per-tensor scales, named
# "e4m3v<i>": one warp group a program with two or three programs an SM (programs_per_sm, num_sms: another program's
# wgmmas fill the tensor cores while one adds its partial accumulator), and Triton's warp specialization (a TMA
# producer group and two consumer groups of 4 warps). Data for the precise tile rule (configs.candidates).
VARIANTS = (  # as run for results/fp8.csv (v1, v2 and v8 then as num_sms=264: the same 264 programs)
    dict(block_m=128, block_n=128, num_warps=4, num_stages=3, programs_per_sm=2),  # now the precise lead
    dict(block_m=128, block_n=128, num_warps=4, num_stages=2, programs_per_sm=2),
    dict(block_m=128, block_n=128, num_warps=4, num_stages=3, persistent=False, flatten=False),
    dict(block_m=64, block_n=128, num_warps=4, num_stages=4, num_sms=264),
    dict(block_m=64, block_n=128, num_warps=4, num_stages=2, num_sms=396),
    dict(block_m=128, block_n=128, num_warps=4, num_stages=4, flatten=False, warp_specialize=True, programs_per_sm=1),
    dict(block_m=128, block_n=128, num_warps=4, num_stages=3, flatten=False, warp_specialize=True, programs_per_sm=1),
    dict(block_m=128, block_n=128, num_warps=4, num_stages=3, programs_per_sm=2, flatten=False),
    dict(block_m=64, block_n=128, num_warps=4, num_stages=3, num_sms=264),
)


def kernels(shapes=SHAPES, modes=tuple(MODES), alternatives=ALTERNATIVES, variants=()) -> list[dict]:
    from ditron.kernels import gemm
    out = []
    for m, n, k in shapes:
        for mode in modes:
            dtype, fast = MODES[mode]
            for kind, steps in SCALES.items():
                fields = {"in_dtype": dtype, "out_dtype": "bf16", "b_trans": True, "epilogue": steps}
                if fast:
                    fields["fast_accum"] = True
                out.append({"name": f"{mode}_{kind}_{m}x{n}x{k}", "group": f"{m}x{n}x{k}", "m": m, "n": n, "k": k,
                            "fields": fields})
                if kind == "per_tensor" and mode == "e4m3":
                    for i, var in enumerate(variants, 1):
                        out.append({"name": f"e4m3v{i}_{kind}_{m}x{n}x{k}", "group": f"{m}x{n}x{k}", "m": m, "n": n,
                                    "k": k, "fields": dict(fields, **var)})
                if kind != "per_tensor" or not alternatives.get(mode):
                    continue
                cands = gemm.candidates(m, n, k, dtype, "cuda:90", b_trans=True, fast_accum=fast)
                for i, cand in enumerate(cands[1:1 + alternatives[mode]], 1):
                    out.append({"name": f"{mode}alt{i}_{kind}_{m}x{n}x{k}", "group": f"{m}x{n}x{k}", "m": m, "n": n,
                                "k": k, "fields": dict(fields, **cand)})
    return out


def build(out_dir: Path, shapes=SHAPES, variants=()) -> dict:
    manifest = _bench_gemm().build_kernels(out_dir, kernels(shapes, variants=variants))
    print(f"wrote {len(manifest['kernels'])} kernels to {out_dir}")
    return manifest


# ================================================================================ run (GPU box, torch + triton)

def inputs(rec: dict, seed: int = 0) -> dict:
    """A, B ([N, K]) in fp8 and the scales of the record's steps, O(1) products; and C (NaN: unwritten shows)."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    bg = _bench_gemm()
    a, b, _ = bg.gemm_inputs(rec, seed=seed)
    m, n = rec["m"], rec["n"]
    sizes = {"scalar": (1,), "row": (m, 1), "bias": (n,)}
    t = {"a": a, "b": b, "c": torch.full((m, rec["ldc"]), float("nan"), device="cuda", dtype=torch.bfloat16)}
    for s in rec["epilogue"]:
        t[s["arg"]] = torch.rand(*sizes[s["operand"]], device="cuda", generator=g) * 1.5 + 0.25
    return t


def reference(rec: dict, t: dict):
    """float32 torch: (A @ B^T) * sa * sb, rounded once to bf16."""
    import torch
    acc = torch.matmul(t["a"].float(), t["b"].float().t())
    return (acc * t["sa"] * t["sb"]).to(torch.bfloat16)  # sa [M, 1] or [1], sb [N] or [1]: broadcast


def scaled_mm(t: dict, fast: bool):
    """torch._scaled_mm on the same tensors: per-tensor scales as they are, per-row ones as [M, 1] and [1, N];
    e5m2 operands (which it does not multiply) as e4m3 ones of the same shape."""
    import torch
    sa, sb = t["sa"], t["sb"]
    if t["a"].dtype == torch.float8_e5m2:
        t = dict(t, a=t["a"].to(torch.float8_e4m3fn), b=t["b"].to(torch.float8_e4m3fn))
    if sa.numel() > 1 or sb.numel() > 1:
        sa, sb = sa.reshape(-1, 1), sb.reshape(1, -1)
    else:
        sa, sb = sa.reshape(()), sb.reshape(())
    return torch._scaled_mm(t["a"], t["b"].t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                            use_fast_accum=fast)


def check(bg, kernel_dir: Path, entry: dict, seed: int = 0) -> tuple[dict, object, dict]:
    """Run the kernel once; its relative errors against float32 torch and torch._scaled_mm in the kernel's
    accumulation mode (e5m2: float32 torch only, the entry's rel_error_vs_scaled_mm NaN)."""
    import torch
    rec = entry["record"]
    t = inputs(rec, seed)
    fn = bg.GemmLaunch(bg.compile_entry(kernel_dir, entry), entry, **t)
    fn()
    torch.cuda.synchronize()
    c = t["c"][:, :rec["n"]]
    if not bool(torch.isfinite(c).all()):
        raise AssertionError(f"{entry['name']}: tiles left unwritten (NaN in C)")
    same = rec["in_dtype"] == "fp8e4m3"
    errors = {"rel_error": bg.rel_error(c, reference(rec, t)),
              "rel_error_vs_scaled_mm": bg.rel_error(c, scaled_mm(t, fast=bool(rec.get("fast_accum"))))
              if same else float("nan")}
    return t, fn, errors


def accurate(errors: dict) -> bool:
    """Within 1e-2 of float32 torch (scaled before the one rounding to bf16) and of torch._scaled_mm."""
    vs = errors["rel_error_vs_scaled_mm"]
    return errors["rel_error"] < 1e-2 and (vs != vs or vs < 1e-2)


def run(kernel_dir: Path, rep: int, out: Path) -> list[dict]:
    bg = _bench_gemm()
    bg.set_scratch_allocator()
    manifest = json.loads((kernel_dir / "manifest.json").read_text())
    failed = bg.precompile(kernel_dir, manifest["kernels"])  # Triton's cache, in parallel
    rows = []
    for entry in manifest["kernels"]:
        variant = entry["name"].startswith("e4m3v")  # --variants: data, not the template's own choices
        if variant and entry["name"] in failed:
            print(f"{entry['name']}: did not compile: {failed[entry['name']]}", flush=True)
            continue
        t, fn, errors = check(bg, kernel_dir, entry)
        if not accurate(errors):
            if variant:
                print(f"{entry['name']}: off by {errors} (relative), left out", flush=True)
                continue
            raise SystemExit(f"{entry['name']}: off by {errors} (relative)")
        ours = bg.bench_ms(fn, rep)
        precise = bg.bench_ms(lambda: scaled_mm(t, fast=False), rep)
        fast = bg.bench_ms(lambda: scaled_mm(t, fast=True), rep)
        mode, kind, shape = entry["name"].split("_", 2)[0], *entry["name"].split("_", 1)[1].rsplit("_", 1)
        same_mode = fast if entry["record"].get("fast_accum") else precise
        rows.append({"shape": shape, "mode": mode, "scales": kind, "ditron_ms": ours, "scaled_mm_ms": precise,
                     "scaled_mm_fast_accum_ms": fast, "vs_scaled_mm": same_mode / ours,
                     "vs_scaled_mm_precise": precise / ours, "vs_scaled_mm_fast_accum": fast / ours, **errors,
                     "config": bg.describe(entry["record"])})
        r = rows[-1]
        print(f"{shape:>18} {mode:>8} {kind:>10}  ditron {ours * 1e3:8.1f} us  _scaled_mm {precise * 1e3:8.1f} us "
              f"fast_accum {fast * 1e3:8.1f} us  x{r['vs_scaled_mm']:.3f} (same mode)  "
              f"err {errors['rel_error']:.1e}  [{r['config']}]", flush=True)
    bg.write_csv(out / "fp8.csv", rows)
    modes = dict.fromkeys(r["mode"] for r in rows)
    summary = ", ".join(f"{mode} x{bg.geomean(r['vs_scaled_mm'] for r in rows if r['mode'] == mode):.3f}"
                        for mode in modes)
    print(f"geomean ditron / torch._scaled_mm in the same accumulation mode: {summary} (target >= 0.95); "
          f"{out / 'fp8.csv'}")
    return rows


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    variants = VARIANTS if "--variants" in argv else ()
    argv = [a for a in argv if a != "--variants"]
    _bench_gemm().build_run_main(__doc__, DEFAULT_DIR, RESULTS, lambda out: build(out, variants=variants), run, argv)


if __name__ == "__main__":
    sys.exit(main())
