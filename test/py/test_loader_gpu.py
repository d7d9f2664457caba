"""Launch compiled artifacts on a GPU and compare with torch.

The GPU machine need not have the MLIR bindings: build the artifacts where the compiler is, carry them over, and
point DITRON_TEST_ARTIFACTS at them:

    python tools/build_gpu_test_artifacts.py /tmp/arts          # compiler machine (CPU is enough)
    DITRON_TEST_ARTIFACTS=/tmp/arts python -m pytest -q -m gpu test/py/test_loader_gpu.py   # GPU machine

Without DITRON_TEST_ARTIFACTS the artifacts are built here (which needs the compiler).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import ditron
from ditron.errors import DitronRuntimeError, TargetError

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

REPO = Path(__file__).resolve().parents[2]
BLOCK = 1024  # the kernels' block size (tools/build_gpu_test_artifacts.py)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    given = os.environ.get("DITRON_TEST_ARTIFACTS")
    if given:
        root = Path(given)
        if not (root / "elementwise_cuda90").is_dir():
            pytest.fail(f"DITRON_TEST_ARTIFACTS={given} holds no elementwise_cuda90 artifact; build it with "
                        "tools/build_gpu_test_artifacts.py")
        return root
    try:
        import mlir  # noqa: F401
    except ImportError:
        pytest.skip("no MLIR bindings here to build the artifacts: set DITRON_TEST_ARTIFACTS to a directory built "
                    "by tools/build_gpu_test_artifacts.py")
    from ditron.tools.build_gpu_test_artifacts import build
    root = tmp_path_factory.mktemp("gpu_artifacts")
    build(root)
    return root


def device_target() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"cuda:{major * 10 + minor}"


@pytest.fixture(scope="module")
def exe(artifacts):
    if device_target() != "cuda:90":
        pytest.skip(f"the test artifacts are built for cuda:90; this GPU is {device_target()}")
    return ditron.load(artifacts / "elementwise_cuda90")


def test_vector_add_matches_torch(exe):
    n = 1_000_003  # not a multiple of the block: the mask matters
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.full((n + 4096,), 7.0, device="cuda")  # a tail the kernel must not touch
    exe.kernels["add_kernel"][(triton_cdiv(n, BLOCK),)](x, y, out, n)
    torch.cuda.synchronize()
    assert torch.equal(out[:n], x + y)
    assert torch.all(out[n:] == 7.0)


def test_axpy_keywords_stream_and_float_scalar(exe):
    n = 50_000
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())  # the inputs, made on the current stream, are ready first
    exe["axpy_kernel"](lambda a: (triton_cdiv(a["n"], BLOCK),), 2.5, x, y, out_ptr=out, n=n, stream=stream)
    stream.synchronize()
    torch.testing.assert_close(out, 2.5 * x + y, rtol=1e-6, atol=1e-6)


def test_num_warps_variant_and_warmup(artifacts):
    if device_target() != "cuda:90":
        pytest.skip("cuda:90 artifacts")
    exe8 = ditron.load(artifacts / "elementwise_cuda90_w8")
    assert exe8["add_kernel"].metadata.num_warps == 8
    assert not any(k.loaded for k in exe8.kernels.values())
    exe8.warmup()
    assert all(k.loaded for k in exe8.kernels.values())
    n = 4096 * 3 + 5
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    exe8["add_kernel"][triton_cdiv(n, BLOCK)](x, y, out, n)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)


def test_relocated_artifact(artifacts, tmp_path):
    """An artifact directory moved elsewhere still loads and runs."""
    if device_target() != "cuda:90":
        pytest.skip("cuda:90 artifacts")
    moved = tmp_path / "moved"
    shutil.copytree(artifacts / "elementwise_cuda90", moved)
    exe = ditron.load(moved)
    n = 3000
    x, y = torch.arange(n, device="cuda", dtype=torch.float32), torch.ones(n, device="cuda")
    out = torch.zeros(n, device="cuda")
    exe["add_kernel"]((triton_cdiv(n, BLOCK),), x, y, out, n)
    torch.cuda.synchronize()
    assert torch.equal(out, x + 1)


def test_wrong_target_is_refused(artifacts):
    here = device_target()
    other = "elementwise_cuda80" if here != "cuda:80" else "elementwise_cuda90"
    exe = ditron.load(artifacts / other)
    x = torch.zeros(8, device="cuda")
    with pytest.raises(TargetError, match=f"which cannot run on this GPU \\({here}\\)"):
        exe["add_kernel"]((1,), x, x, x, 8)


def test_appended_abi_arguments(artifacts):
    """rank / num_ranks, appended by the primitive lowering, are passed by name."""
    if device_target() != "cuda:90":
        pytest.skip("cuda:90 artifacts")
    exe = ditron.load(artifacts / "rank_cuda90")
    assert [a.kind for a in exe["rank_kernel"].args] == ["pointer", "rank", "num_ranks"]
    out = torch.zeros(6, dtype=torch.int32, device="cuda")
    exe["rank_kernel"][(5,)](out, rank=3, num_ranks=8)
    torch.cuda.synchronize()
    assert out.tolist() == [3008] * 5 + [0]


def test_bad_launch_arguments(exe):
    x = torch.zeros(8, device="cuda")
    with pytest.raises(DitronRuntimeError, match="is missing arguments: n"):
        exe["add_kernel"]((1,), x, x, x)


def test_launch_in_a_process_without_mlir(artifacts, tmp_path):
    """Load and launch with `mlir` unimportable, as on a GPU server without the compiler."""
    if device_target() != "cuda:90":
        pytest.skip("cuda:90 artifacts")
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        class _NoMLIR:
            def find_spec(self, name, path=None, target=None):
                if name == "mlir" or name.startswith("mlir."):
                    raise ImportError("mlir is not allowed here")
                return None
        sys.meta_path.insert(0, _NoMLIR())
        import torch, ditron
        exe = ditron.load({str(artifacts / "elementwise_cuda90")!r})
        n = 10_000
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        exe["add_kernel"][((n + 1023) // 1024,)](x, y, out, n)
        torch.cuda.synchronize()
        assert torch.equal(out, x + y)
        assert "mlir" not in sys.modules
        print("ok")
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b
