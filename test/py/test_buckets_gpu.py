"""ditron.buckets on a GPU: every op serving many row counts from its bucket programs in virtual worlds of 1 and 2
ranks on one GPU (each call against torch, the compile count bounded by the buckets), calls enqueued back to back
through one staging tensor, and a torch operator with max_rows captured into the caller's CUDA graph.

The GPU machine needs torch + triton only. Build the bucket programs where the compiler is, then run there:

    python test/py/test_buckets_gpu.py build build/bucket_arts                    # CPU machine (needs MLIR)
    CUDA_DEVICE_MAX_CONNECTIONS=32 DITRON_OPS_DIR=build/bucket_arts \\
        python -m pytest -q -m gpu test/py/test_buckets_gpu.py                    # GPU machine

Without DITRON_OPS_DIR the programs are built here (which needs the compiler).
"""
from __future__ import annotations

import os

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")  # effective only if CUDA has not started yet

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from test_ops_gpu import _gpu  # noqa: E402
from test_ops_gpu import close_enough as _close  # noqa: E402
from test_ops_gpu import make_inputs as _inputs  # noqa: E402

from ditron import buckets, ops  # noqa: E402

HERE = Path(__file__).resolve()
TARGET = "cuda:90"
K, N = 256, 128
MAX = 64   # rows (units of W rows where the op splits them) a call may have
# row counts a serving process meets: every bucket, filled and not, W = 3 dividing none of them
ROWS = (1, 2, 3, 5, 7, 8, 9, 13, 16, 17, 31, 33, 47, 63, 64)


def shapes_at(op: str, m: int, W: int) -> list[tuple[int, ...]]:
    if op in ("ag_gemm", "gemm_ar"):
        return [(m, K), (K, N)]
    if op == "gemm_rs":
        return [(W * m, K), (K, N)]
    if op in ("reduce_scatter", "all_to_all"):
        return [(W * m, K)]
    return [(m, K)]   # all_gather, all_reduce


CASES = {f"{op}_w{W}": (op, W) for W in (1, 2)
         for op in ("ag_gemm", "gemm_rs", "gemm_ar", "all_gather", "reduce_scatter", "all_reduce", "all_to_all")}


def case_signatures(name: str) -> list[ops.Signature]:
    op, W = CASES[name]
    unit = buckets.layout(op, W).unit
    return buckets.signatures(op, shapes_at(op, MAX, W), "bf16", W, True, TARGET, max_rows=MAX * unit)


def all_signatures() -> list[ops.Signature]:
    return [s for name in CASES for s in case_signatures(name)]


def build(directory: str) -> None:
    """Compile every bucket program into directory (the CPU side of this test), with a progress bar."""
    buckets.prebuild(all_signatures(), directory)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    given = os.environ.get("DITRON_OPS_DIR")
    if given:
        missing = [s.key for s in all_signatures() if not (Path(given) / s.key / "op.json").exists()]
        if missing:
            pytest.fail(f"DITRON_OPS_DIR={given} lacks {len(missing)} bucket programs ({missing[:3]}); build them "
                        f"with: python {HERE.relative_to(HERE.parents[2])} build {given}")
        return ops.Library(given, target=TARGET, compile=False)
    if not ops.compiler_available():
        pytest.skip("no MLIR bindings here: set DITRON_OPS_DIR to a directory built by "
                    "`python test/py/test_buckets_gpu.py build DIR`")
    root = tmp_path_factory.mktemp("bucket_arts")
    build(str(root))
    return ops.Library(root, target=TARGET, compile=False)


pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", list(CASES))
def test_any_rows_from_the_bucket_programs(lib, name):
    """Every row count of ROWS (times W where the op splits rows): each call equals torch, and the programs
    loaded are the buckets' (at most log2(MAX) + 1 of them)."""
    _gpu()
    from ditron.runtime.world import World
    op, W = CASES[name]
    unit = buckets.layout(op, W).unit
    world = World.virtual(W)
    before = set(lib._executables)
    for i, m in enumerate(ROWS):
        s = ops.signature_for(op, shapes_at(op, m, W), "bf16", W, True, TARGET)
        xs = _inputs(s, i)
        args = [list(col) for col in zip(*xs)]
        got = getattr(buckets, op)(*args, world, max_rows=MAX * unit, library=lib)
        for r, (g, w) in enumerate(zip(got, ops.reference(s, xs))):
            assert tuple(g.shape) == s.output_shape() and _close(g, w), f"{name} at {m} rows: rank {r} differs"
    loaded = set(lib._executables) - before
    assert loaded <= set(case_signatures(name)) and len(loaded) <= len(buckets.bucket_sizes(MAX))


def test_pipelined_calls_share_one_staging_tensor(lib):
    """Calls of 5, 6, 7 rows (one 8-row bucket) enqueued back to back (sync=False) through one staging tensor:
    each result is its own call's."""
    _gpu()
    import torch

    from ditron.runtime.world import World
    world = World.virtual(2)
    calls = []
    for i, m in enumerate((5, 6, 7, 5)):
        s = ops.signature_for("ag_gemm", shapes_at("ag_gemm", m, 2), "bf16", 2, True, TARGET)
        xs = _inputs(s, 50 + i)
        got = buckets.ag_gemm(*[list(c) for c in zip(*xs)], world, max_rows=MAX, library=lib, sync=False)
        calls.append((s, xs, got))
    lib.synchronize(world)
    torch.cuda.synchronize()
    for s, xs, got in calls:
        for g, w in zip(got, ops.reference(s, xs)):
            assert _close(g, w)


def test_torch_operator_with_max_rows_in_the_callers_graph(lib):
    """torch.ops.ditron.gemm_ar(..., max_rows=MAX) at W = 1: eager at 13 rows (its staging tensor and capture
    plan made), captured in torch.cuda.graph, replayed on new data; then 50 batch sizes eagerly, loading no
    program beyond the buckets'."""
    _gpu()
    import torch

    from ditron import torch_ops
    from ditron.runtime.world import World
    world = World.virtual(1)
    h = torch_ops.register_world(world, lib)
    b = torch.randn(K, N, device="cuda").to(torch.bfloat16)
    a = torch.randn(13, K, device="cuda").to(torch.bfloat16)
    torch.testing.assert_close(torch.ops.ditron.gemm_ar(a, b, h, max_rows=MAX).float(), (a.float() @ b.float()),
                               rtol=2 ** -6, atol=2 ** -6 * 16)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = torch.ops.ditron.gemm_ar(a, b, h, max_rows=MAX)
    for seed in range(3):
        a.copy_(torch.randn(13, K, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed)))
        graph.replay()
        torch.cuda.synchronize()
        want = a.float() @ b.float()
        assert _close(y, want), f"replay {seed}"
    del graph
    before = set(lib._executables)
    for m in range(1, 51):
        x = torch.randn(m, K, device="cuda").to(torch.bfloat16)
        assert _close(torch.ops.ditron.gemm_ar(x, b, h, max_rows=MAX), x.float() @ b.float())
    assert len(set(lib._executables) - before) <= len(buckets.bucket_sizes(MAX))
    torch_ops.synchronize(h)
    torch_ops.close(world)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "build":
        build(argv[1])
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    sys.exit(main(sys.argv[1:]))
