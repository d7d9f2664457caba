#!/usr/bin/env python3
"""Fused GEMM epilogues against the GEMM followed by torch's elementwise ops, bf16, on one GPU, in the same run.

    python benchmarks/bench_epilogue.py --build [DIR]   # CPU box with ditron + MLIR: per shape and epilogue, the
                                                        # GEMM template's kernel plain and with the fused epilogue
                                                        # (the same tiles: make_record's own choice), as .ttir +
                                                        # manifest.json (default DIR: build/epilogue_kernels)
    python benchmarks/bench_epilogue.py --run [DIR]     # GPU box, torch + triton only: check every kernel against
                                                        # torch, time fused vs the plain GEMM + torch's ops and vs
                                                        # torch.matmul + torch's ops

Epilogues (what ditron-fuse-epilogue folds into the GEMM of a task program's ``elementwise`` ops after a matmul):
bias_gelu (``gelu(x @ w + b)``), bias_silu, residual (``r + x @ w``), silu_mul (``silu(x @ wg) * up``, the gated
MLP with the up projection's result as the operand) and cast_fp32 (the product stored as fp32 from bf16 inputs:
the baseline is ``(x @ w).float()``).

Output: a table on stdout and benchmarks/results/epilogue.csv -- per case the fused kernel's time, the plain
GEMM's, the plain GEMM + torch ops, torch.matmul + torch ops, and the speedups fused / (GEMM + torch ops), the
issue's target being >= 1.05. Timing: triton.testing.do_bench, median, L2 flushed before every repetition.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DIR = HERE.parent / "build" / "epilogue_kernels"
RESULTS = HERE / "results"
# LLaMA-3 8B's MLP at 8192 tokens (up / gate 14336, down 4096) and square ones
SHAPES = [(8192, 14336, 4096), (8192, 4096, 14336), (4096, 4096, 4096), (8192, 8192, 8192), (2048, 14336, 4096)]
EPILOGUES = {
    "bias_gelu": [{"fn": "add", "arg": "ep0", "operand": "bias", "dtype": "bf16", "acc": 0}, {"fn": "gelu"}],
    "bias_silu": [{"fn": "add", "arg": "ep0", "operand": "bias", "dtype": "bf16", "acc": 0}, {"fn": "silu"}],
    "residual": [{"fn": "add", "arg": "ep0", "operand": "full", "dtype": "bf16", "acc": 1}],
    "silu_mul": [{"fn": "silu_mul", "arg": "ep0", "operand": "full", "dtype": "bf16", "acc": 0}],
    "cast_fp32": [],  # the store's out_dtype
}


def _bench_gemm():
    spec = importlib.util.spec_from_file_location("bench_gemm", HERE / "bench_gemm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ================================================================================ build (CPU box, needs MLIR)

def kernels(shapes=SHAPES) -> list[dict]:
    out = []
    for m, n, k in shapes:
        group = f"{m}x{n}x{k}"
        out.append({"name": f"plain_{m}x{n}x{k}", "group": group, "m": m, "n": n, "k": k,
                    "fields": {"in_dtype": "bf16"}})
        for kind, steps in EPILOGUES.items():
            fields = {"in_dtype": "bf16"}
            if steps:
                fields["epilogue"] = steps
            if kind == "cast_fp32":
                fields["out_dtype"] = "fp32"
            out.append({"name": f"{kind}_{m}x{n}x{k}", "group": group, "m": m, "n": n, "k": k, "fields": fields})
    return out


def build(out_dir: Path) -> None:
    manifest = _bench_gemm().build_kernels(out_dir, kernels())
    print(f"wrote {len(manifest['kernels'])} kernels to {out_dir}")


# ================================================================================ run (GPU box, torch + triton)

def _torch_epilogue(kind: str, c, ops: dict):
    import torch.nn.functional as F
    if kind == "bias_gelu":
        return F.gelu(c + ops["ep0"])
    if kind == "bias_silu":
        return F.silu(c + ops["ep0"])
    if kind == "residual":
        return ops["ep0"] + c
    if kind == "silu_mul":
        return F.silu(c) * ops["ep0"]
    assert kind == "cast_fp32", kind
    return c.float()


def run(kernel_dir: Path, rep: int, out: Path) -> list[dict]:
    import torch
    bg = _bench_gemm()
    bg.set_scratch_allocator()
    manifest = json.loads((kernel_dir / "manifest.json").read_text())
    by_group: dict[str, dict[str, dict]] = {}
    for e in manifest["kernels"]:
        by_group.setdefault(e["group"], {})[e["name"].rsplit("_", 1)[0]] = e  # <kind>_<m>x<n>x<k>
    rows = []
    for group, entries in by_group.items():
        plain = entries["plain"]
        rec = plain["record"]
        m, n, k = rec["m"], rec["n"], rec["k"]
        a, b, c = bg.gemm_inputs(rec)
        plain_fn = bg.GemmLaunch(bg.compile_entry(kernel_dir, plain), plain, a, b, c)
        g = torch.Generator(device="cuda").manual_seed(1)
        operands = {"bias": torch.randn(n, device="cuda", generator=g).to(torch.bfloat16),
                    "full": torch.randn(m, n, device="cuda", generator=g).to(torch.bfloat16)}
        plain_ms = bg.bench_ms(plain_fn, rep)
        torch_mm_ms = bg.bench_ms(lambda: torch.matmul(a, b), rep)
        for kind in EPILOGUES:
            entry = entries[kind]
            frec = entry["record"]
            ops = {s["arg"]: operands[s["operand"]] for s in frec.get("epilogue", []) if "arg" in s}
            cf = torch.empty(m, n, device="cuda", dtype=bg.torch_dtype(frec["out_dtype"]))
            fused_fn = bg.GemmLaunch(bg.compile_entry(kernel_dir, entry), entry, a, b, cf, **ops)
            fused_fn()
            plain_fn()
            torch.cuda.synchronize()
            want = _torch_epilogue(kind, torch.matmul(a.float(), b.float()).to(torch.bfloat16), ops)
            error = bg.rel_error(cf, want)
            if not error < 2e-2:
                raise SystemExit(f"{entry['name']}: the fused kernel's output is off by {error:.3g} (relative)")
            fused_ms = bg.bench_ms(fused_fn, rep)
            ditron_then_torch = bg.bench_ms(lambda: _torch_epilogue(kind, (plain_fn(), c)[1], ops), rep)
            torch_then_torch = bg.bench_ms(lambda: _torch_epilogue(kind, torch.matmul(a, b), ops), rep)
            rows.append({"shape": group, "epilogue": kind, "fused_ms": fused_ms, "gemm_ms": plain_ms,
                         "gemm_then_torch_ms": ditron_then_torch, "torch_matmul_ms": torch_mm_ms,
                         "torch_matmul_then_torch_ms": torch_then_torch, "rel_error": error,
                         "speedup_vs_gemm_then_torch": ditron_then_torch / fused_ms,
                         "speedup_vs_torch": torch_then_torch / fused_ms, "epilogue_cost": fused_ms / plain_ms})
            r = rows[-1]
            print(f"{group:>18} {kind:>10}  fused {fused_ms * 1e3:8.1f} us  gemm+torch {ditron_then_torch * 1e3:8.1f}"
                  f"  x{r['speedup_vs_gemm_then_torch']:.3f}   torch.matmul+torch {torch_then_torch * 1e3:8.1f} "
                  f" x{r['speedup_vs_torch']:.3f}   (plain gemm {plain_ms * 1e3:.1f} us)", flush=True)
    bg.write_csv(out / "epilogue.csv", rows)
    geo = bg.geomean(r["speedup_vs_gemm_then_torch"] for r in rows)
    geo_t = bg.geomean(r["speedup_vs_torch"] for r in rows)
    print(f"geomean: fused / (GEMM + torch ops) x{geo:.3f}, fused / (torch.matmul + torch ops) x{geo_t:.3f} "
          f"(target >= 1.05); {out / 'epilogue.csv'}")
    return rows


def main(argv=None) -> None:
    _bench_gemm().build_run_main(__doc__, DEFAULT_DIR, RESULTS, build, run, argv)


if __name__ == "__main__":
    sys.exit(main())
