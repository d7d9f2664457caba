"""Fused GEMM epilogues on a GPU against torch: every epilogue of benchmarks/bench_epilogue.py on shapes that do
not divide the tiles, a split-K small-M GEMM and a pointer-load grid one included.

The GPU box has torch + triton but not the MLIR bindings: the kernels are built beforehand on a machine with
ditron (``python test/py/test_epilogue_gpu.py --build``, writing build/epilogue_gpu_kernels/) and compiled on the
GPU box with ``triton.compile`` alone.

    python -m pytest -m gpu test/py/test_epilogue_gpu.py
"""
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from test_gemm_gpu import _cuda

ROOT = Path(__file__).resolve().parents[2]
KERNEL_DIR = ROOT / "build" / "epilogue_gpu_kernels"
SHAPES = [(4091, 1000, 4096), (128, 8192, 8192), (1000, 1000, 333)]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_epilogue", ROOT / "benchmarks" / "bench_epilogue.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(out_dir: Path = KERNEL_DIR) -> dict:
    be = _bench()
    specs = be.kernels(SHAPES)
    for s in specs:  # the last shape with pointer loads on a grid (the other path of the epilogue's operands)
        if (s["m"], s["n"], s["k"]) == SHAPES[-1]:
            s["fields"].update(loads="pointer", store="pointer", persistent=False, epilogue_split=1, flatten=False)
    return be._bench_gemm().build_kernels(out_dir, specs)


def _entries() -> list[dict]:
    path = KERNEL_DIR / "manifest.json"
    return json.loads(path.read_text())["kernels"] if path.exists() else []


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("entry", [e for e in _entries() if not e["name"].startswith("plain_")],
                         ids=lambda e: e["name"])
def test_fused_epilogue_matches_torch(entry):
    import torch
    be = _bench()
    bg = be._bench_gemm()
    bg.set_scratch_allocator()
    rec = entry["record"]
    m, n = rec["m"], rec["n"]
    a, b, _ = bg.gemm_inputs(rec, seed=3)
    g = torch.Generator(device="cuda").manual_seed(4)
    operands = {"bias": torch.randn(n, device="cuda", generator=g).to(torch.bfloat16),
                "full": torch.randn(m, n, device="cuda", generator=g).to(torch.bfloat16)}
    ops = {s["arg"]: operands[s["operand"]] for s in rec.get("epilogue", []) if "arg" in s}
    c = torch.full((m, n), float("nan"), device="cuda", dtype=bg.torch_dtype(rec["out_dtype"]))
    bg.GemmLaunch(bg.compile_entry(KERNEL_DIR, entry), entry, a, b, c, **ops)()
    torch.cuda.synchronize()
    kind = entry["name"].rsplit("_", 1)[0]
    want = be._torch_epilogue(kind, torch.matmul(a.float(), b.float()).to(torch.bfloat16), ops)
    assert bool(torch.isfinite(c).all()), "tiles left unwritten"
    assert bg.rel_error(c, want) < 2e-2


if __name__ == "__main__":
    if sys.argv[1:2] == ["--build"]:
        out = Path(sys.argv[2]) if len(sys.argv) > 2 else KERNEL_DIR
        print(f"built {len(build(out)['kernels'])} kernels into {out}")
    else:
        sys.exit("usage: python test/py/test_epilogue_gpu.py --build [DIR]; then pytest -m gpu on the GPU box")
