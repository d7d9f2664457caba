"""fp8 GEMMs with fused scales on a GPU against torch._scaled_mm: per-tensor and per-row scales of
benchmarks/bench_fp8.py, e4m3 with precise and fast accumulation and e5m2 (checked against float32 torch: torch's
_scaled_mm takes no two e5m2 matrices), on shapes that do not divide the tiles, a small-M one (the model's split-K
/ stream-K choice) and a pointer-load grid one included.

The GPU box has torch + triton but not the MLIR bindings: the kernels are built beforehand on a machine with
ditron (``python test/py/test_fp8_gpu.py --build``, writing build/fp8_gpu_kernels/) and compiled on the GPU box
with ``triton.compile`` alone.

    python -m pytest -m gpu test/py/test_fp8_gpu.py
"""
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from test_gemm_gpu import _cuda

ROOT = Path(__file__).resolve().parents[2]
KERNEL_DIR = ROOT / "build" / "fp8_gpu_kernels"
# ragged M and N tiles (K and N multiples of 16: fp8 rows 16-byte aligned, as torch._scaled_mm needs), small M
SHAPES = [(4091, 1008, 4096), (96, 8192, 8192), (1000, 1040, 336)]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_fp8", ROOT / "benchmarks" / "bench_fp8.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(out_dir: Path = KERNEL_DIR) -> dict:
    be = _bench()
    specs = be.kernels(SHAPES, alternatives={})
    for s in specs:  # the first shape with TMA loads and stores, persistent; the last with pointer loads on a grid
        if (s["m"], s["n"], s["k"]) == SHAPES[0]:
            s["fields"].update(loads="tma", store="tma", persistent=True, epilogue_split=1, flatten=True, block_m=128,
                               block_n=128, block_k=128, num_warps=8, num_stages=4)  # 128 KiB of stages + 32 KiB C
        if (s["m"], s["n"], s["k"]) == SHAPES[-1]:
            s["fields"].update(loads="pointer", store="pointer", persistent=False, epilogue_split=1, flatten=False)
    # precise fp8's 256-row tile as two dots (m_split), ragged rows and columns, per-row scales, e4m3 and e5m2
    for s in [s for s in specs if (s["m"], s["n"], s["k"]) == SHAPES[0] and "per_row" in s["name"]
              and not s["fields"].get("fast_accum")]:
        specs.append(dict(s, name="msplit_" + s["name"], fields=dict(
            s["fields"], block_m=256, block_n=128, block_k=128, num_warps=8, num_stages=4, m_split=2, loads="tma",
            store="tma", persistent=True, epilogue_split=2, flatten=True)))
        # the precise tiles bench_fp8 --variants times: one warp group a program, two or three programs an SM,
        # warp specialization
        specs += [dict(s, name=f"var{i}_" + s["name"], fields=dict(s["fields"], **var))
                  for i, var in enumerate(be.VARIANTS, 1) if s["fields"]["in_dtype"] == "fp8e4m3"]
    return be._bench_gemm().build_kernels(out_dir, specs)


def _entries() -> list[dict]:
    path = KERNEL_DIR / "manifest.json"
    return json.loads(path.read_text())["kernels"] if path.exists() else []


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("entry", _entries(), ids=lambda e: e["name"])
def test_fp8_scaled_gemm_matches_torch_scaled_mm(entry):
    be = _bench()
    bg = be._bench_gemm()
    bg.set_scratch_allocator()
    _, _, errors = be.check(bg, KERNEL_DIR, entry, seed=3)
    assert be.accurate(errors), errors  # float32 torch, scaled before the one rounding to bf16; torch._scaled_mm


if __name__ == "__main__":
    if sys.argv[1:2] == ["--build"]:
        out = Path(sys.argv[2]) if len(sys.argv) > 2 else KERNEL_DIR
        print(f"built {len(build(out)['kernels'])} kernels into {out}")
    else:
        sys.exit("usage: python test/py/test_fp8_gpu.py --build [DIR]; then pytest -m gpu on the GPU box")
