"""GEMM template numerics on a GPU against torch.matmul: several shapes (some that do not divide the tiles),
every variant (TMA persistent, pointer loads, split-K, B transposed, fp16 -> fp32, fp8 inputs, row-major order).

The GPU box has torch + triton but not the MLIR bindings, so the kernels are generated beforehand on a machine with
ditron (``python test/py/test_gemm_gpu.py --build``, writing build/gemm_gpu_kernels/, carried to
the GPU box; a CPU test in test_kernels.py checks that the build works) and compiled here with ``triton.compile`` alone.

    python -m pytest -m gpu test/py/test_gemm_gpu.py    # assertions
    python test/py/test_gemm_gpu.py                     # the same checks as a table
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNEL_DIR = ROOT / "build" / "gemm_gpu_kernels"

# name, M, N, K, make_record fields (tuning fields not given come from choose_config)
CASES = [
    ("tma_persistent", 4096, 4096, 4096, {}),
    ("tma_ragged_mn", 4091, 1000, 4096, {}),
    ("pointer_ragged_k", 4091, 1000, 333, {}),
    ("small_m_split_k", 128, 8192, 8192, {}),
    ("split_k_ragged", 200, 1000, 3000, {}),
    ("b_transposed", 1024, 2048, 512, {"b_trans": True}),
    ("fp16_in_fp32_out", 2048, 1536, 1024, {"in_dtype": "fp16", "out_dtype": "fp32"}),
    ("fp8_b_transposed", 1024, 1024, 2048, {"in_dtype": "fp8e4m3", "b_trans": True}),
    ("fp8_b_row_major", 1000, 1024, 2048, {"in_dtype": "fp8e4m3"}),
    ("pointer_variant", 2048, 2048, 2048, {"loads": "pointer", "store": "pointer", "persistent": False,
                                           "epilogue_split": 1, "flatten": False, "num_stages": 4}),
    ("row_major_unflattened", 3000, 3000, 3000, {"tile_order": "row_major", "flatten": False}),
]
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-3}


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gemm", ROOT / "benchmarks" / "bench_gemm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(out_dir: Path = KERNEL_DIR) -> dict:
    """Generate the cases' kernels (needs ditron + MLIR)."""
    kernels = [{"name": f"gemm_{name}", "group": name, "m": m, "n": n, "k": k, "fields": fields}
               for name, m, n, k, fields in CASES]
    return _bench().build_kernels(out_dir, kernels)


def _entries() -> list[dict]:
    path = KERNEL_DIR / "manifest.json"
    if not path.exists():
        return []
    import json
    return json.loads(path.read_text())["kernels"]


def check(entry: dict) -> dict:
    """Run one kernel on random data; return its relative Frobenius error against torch.matmul."""
    import torch
    bench = _bench()
    bench.set_scratch_allocator()
    rec = entry["record"]
    a, b, c = bench.gemm_inputs(rec, seed=7)
    c.fill_(float("nan"))
    launch = bench.GemmLaunch(bench.compile_entry(KERNEL_DIR, entry), entry, a, b, c)
    launch()
    torch.cuda.synchronize()
    n = rec["n"]
    ref = bench.reference(rec, a, b).float()
    out = c[:, :n].float()
    err = bench.rel_error(out, ref)
    return {"name": entry["name"], "shape": f"{rec['m']}x{n}x{rec['k']}", "config": bench.describe(rec),
            "dtypes": f"{rec['in_dtype']}->{rec['out_dtype']}", "rel_err": err,
            "finite": bool(torch.isfinite(out).all()), "tolerance": TOLERANCE[rec["out_dtype"]],
            "gave_up": launch.gave_up()}


def _cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("entry", _entries(), ids=lambda e: e["name"])
def test_gemm_matches_torch(entry):
    result = check(entry)
    assert result["gave_up"] == 0, f"{entry['name']}: a split-K lock wait gave up (a partial never arrived)"
    assert result["finite"], f"{entry['name']}: the kernel left NaN/inf in C (tiles not written?)"
    assert result["rel_err"] <= result["tolerance"], result


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--build":
        manifest = build(Path(argv[1]) if len(argv) > 1 else KERNEL_DIR)
        print(f"built {len(manifest['kernels'])} kernels into {argv[1] if len(argv) > 1 else KERNEL_DIR}")
        return
    if not _cuda():
        sys.exit("needs a CUDA GPU (or --build on a machine with ditron + MLIR)")
    print(f"{'case':<28} {'M x N x K':<18} {'dtypes':<15} {'config':<44} {'rel.err':>9}  ok")
    failed = 0
    for entry in _entries():
        r = check(entry)
        ok = r["finite"] and r["rel_err"] <= r["tolerance"] and r["gave_up"] == 0
        failed += not ok
        print(f"{r['name']:<28} {r['shape']:<18} {r['dtypes']:<15} {r['config']:<44} {r['rel_err']:>9.2e}  "
              f"{'yes' if ok else 'NO'}")
    print(f"{len(_entries()) - failed} of {len(_entries())} cases within tolerance")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
