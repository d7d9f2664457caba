"""ditron.torch_ops on a real GPU: every operator against torch at W = 1 (eager and torch.compile(fullgraph=True)),
a tensor-parallel block captured inside the test's own torch.cuda.graph and replayed with new inputs, at W = 1 and
in a real two-process world on this one GPU (PyTorch symmetric memory), where each process also runs every operator
eagerly and compiled.

The GPU machine needs torch + triton only. Build the artifacts where the compiler is, then run there:

    python tools/build_gpu_test_artifacts.py build/gpu_arts          # CPU machine (needs MLIR): OUTDIR/torch_ops
    CUDA_DEVICE_MAX_CONNECTIONS=32 DITRON_TEST_ARTIFACTS=build/gpu_arts \\
        python -m pytest -q -m gpu test/py/test_torch_ops_gpu.py     # GPU machine

(or ``python test/py/test_torch_ops_gpu.py build DIR`` and ``DITRON_OPS_DIR=DIR``). Without either variable the
artifacts are built here (which needs the compiler).
"""
from __future__ import annotations

import os

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")  # effective only if CUDA has not started yet

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from ditron import ops  # noqa: E402

HERE = Path(__file__).resolve()
TARGET = "cuda:90"
M, K, N = 128, 256, 128
REPLAYS = 3
OPS = ("ag_gemm", "gemm_rs", "gemm_ar", "all_gather", "reduce_scatter", "all_reduce", "all_to_all")


def op_shapes(op: str, W: int) -> list[tuple[int, ...]]:
    """Each rank's input shapes of the per-op cases."""
    if op == "ag_gemm":
        return [(M, K), (K, N)]
    if op in ("gemm_rs", "gemm_ar"):
        return [(W * M, N), (N, K)]
    if op == "all_gather":
        return [(M, K)]
    return [(W * M, K)]


def block_signatures(W: int, virtual: bool) -> list[ops.Signature]:
    """The block captured in the user's graph: x [M, K] -> ag_gemm(x, w1 [K, N]) [W*M, N] -> relu -> gemm_rs(., w2
    [N, K]) [M, K] -> all_reduce [M, K]."""
    return [ops.signature_for("ag_gemm", [(M, K), (K, N)], "bf16", W, virtual, TARGET),
            ops.signature_for("gemm_rs", [(W * M, N), (N, K)], "bf16", W, virtual, TARGET),
            ops.signature_for("all_reduce", [(M, K)], "bf16", W, virtual, TARGET)]


def signatures() -> list[ops.Signature]:
    out = []
    for W, virtual in ((1, True), (2, False)):
        out += [ops.signature_for(op, op_shapes(op, W), "bf16", W, virtual, TARGET) for op in OPS]
        out += [s for s in block_signatures(W, virtual) if s not in out]
    return out


def build(directory: str) -> None:
    """Compile every case's artifact into directory (the CPU side of this test)."""
    ops.build(signatures(), directory, log=print)


# ------------------------------------------------------------------------------------------- torch side

def inputs_of(shapes, W: int, seed: int):
    """Every rank's inputs (seeded by rank and seed; every process makes all of them alike)."""
    import torch
    out = []
    for r in range(W):
        g = torch.Generator(device="cuda").manual_seed(1000 * seed + r)
        out.append([(torch.randn(s, generator=g, device="cuda") * 0.5).to(torch.bfloat16) for s in shapes])
    return out


def close_enough(got, want) -> bool:
    import torch
    scale = max(float(want.abs().max()), 1.0)
    return got.shape == want.shape and torch.allclose(got.float(), want.float(), rtol=2 ** -6, atol=2 ** -6 * scale)


def block(x, w1, w2, handle: str):
    import torch
    y = torch.ops.ditron.ag_gemm(x, w1, handle).relu()
    return torch.ops.ditron.all_reduce(torch.ops.ditron.gemm_rs(y, w2, handle), handle)


def check_ops(handle: str, W: int, rank: int, compiled: bool) -> list[str]:
    """Every operator eagerly (and under torch.compile(fullgraph=True)) against ops.reference; the failures."""
    import torch
    failures = []
    for op in OPS:
        sig = ops.signature_for(op, op_shapes(op, W), "bf16", W, W == 1, TARGET)
        fn = getattr(torch.ops.ditron, op)
        call = fn if not compiled else torch.compile(lambda *a, fn=fn: fn(*a, handle), fullgraph=True)
        for seed in (1, 2):
            xs = inputs_of(sig.shapes, W, seed)
            got = call(*xs[rank], handle) if not compiled else call(*xs[rank])
            torch.cuda.synchronize()
            want = ops.reference(sig, xs)[rank]
            if not close_enough(got, want):
                failures.append(f"{op}{' compiled' if compiled else ''} seed {seed}: max error "
                                f"{float((got.float() - want).abs().max())}")
    return failures


def check_capture(handle: str, W: int, rank: int) -> list[str]:
    """The block warmed up eagerly, captured in our own torch.cuda.graph, replayed with new values copied into the
    static inputs: each replay against torch."""
    import torch
    sigs = block_signatures(W, W == 1)
    shapes = [(M, K), (K, N), (N, K)]
    static = [t.clone() for t in inputs_of(shapes, W, 0)[rank]]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, as torch.cuda.graph's docs advise: makes the capture plans
        block(*static, handle)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = block(*static, handle)
    failures = []
    for replay in range(1, REPLAYS + 1):
        xs = inputs_of(shapes, W, 100 + replay)
        for s, x in zip(static, xs[rank]):
            s.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        gathered = ops.reference(sigs[0], [[x[0], x[1]] for x in xs])
        hidden = [g.relu().to(torch.bfloat16) for g in gathered]
        reduced = ops.reference(sigs[1], [[h, x[2]] for h, x in zip(hidden, xs)])
        want = ops.reference(sigs[2], [[r.to(torch.bfloat16)] for r in reduced])[rank]
        if not close_enough(out, want):
            failures.append(f"capture replay {replay}: max error {float((out.float() - want).abs().max())}")
    return failures


def library_dir(tmp_path_factory=None) -> str:
    given = os.environ.get("DITRON_OPS_DIR")
    if not given and os.environ.get("DITRON_TEST_ARTIFACTS"):
        given = str(Path(os.environ["DITRON_TEST_ARTIFACTS"]) / "torch_ops")
    if given:
        missing = [s.key for s in signatures() if not (Path(given) / s.key / "op.json").exists()]
        if missing:
            pytest.fail(f"{given} lacks the artifacts of {missing[:3]} ({len(missing)} in all); build them with: "
                        "python tools/build_gpu_test_artifacts.py OUTDIR (OUTDIR/torch_ops)")
        return given
    if not ops.compiler_available():
        pytest.skip("no MLIR bindings here to build the artifacts: set DITRON_TEST_ARTIFACTS to a directory built by "
                    "tools/build_gpu_test_artifacts.py")
    root = tmp_path_factory.mktemp("torch_ops_arts")
    build(str(root))
    return str(root)


# ------------------------------------------------------------------------------------------------ tests

@pytest.fixture(scope="module")
def lib_dir(tmp_path_factory):
    return library_dir(tmp_path_factory)


def _gpu():
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        major, minor = torch.cuda.get_device_capability()
        pytest.skip(f"the artifacts are built for {TARGET}; this GPU is sm_{major}{minor}")


pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def w1(lib_dir):
    _gpu()
    from ditron import torch_ops
    from ditron.runtime.world import World
    world = World.virtual(1)
    library = ops.Library(lib_dir, target=TARGET, compile=False)
    yield torch_ops.register_world(world, library)
    torch_ops.close(world)
    library.close()


def test_w1_every_operator_eager_matches_torch(w1):
    assert check_ops(w1, 1, 0, compiled=False) == []


def test_w1_every_operator_under_torch_compile_fullgraph(w1):
    import torch
    torch._dynamo.reset()
    assert check_ops(w1, 1, 0, compiled=True) == []


def test_w1_block_captured_in_our_own_cuda_graph(w1):
    assert check_capture(w1, 1, 0) == []


def test_w1_block_under_torch_compile_reduce_overhead(w1):
    """torch.compile's CUDA graphs (mode="reduce-overhead": warm-up runs, then a capture of the compiled block,
    replayed): every call against torch."""
    import torch
    torch._dynamo.reset()
    sigs = block_signatures(1, True)
    f = torch.compile(lambda x, w1_, w2: block(x, w1_, w2, w1), mode="reduce-overhead", fullgraph=True)
    failures = []
    for call in range(1, 6):
        (x, a, b), = inputs_of([(M, K), (K, N), (N, K)], 1, 200 + call)
        got = f(x, a, b).clone()
        torch.cuda.synchronize()
        hidden = ops.reference(sigs[0], [[x, a]])[0].relu().to(torch.bfloat16)
        want = ops.reference(sigs[1], [[hidden, b]])[0]
        if not close_enough(got, want):
            failures.append(f"call {call}: max error {float((got.float() - want).abs().max())}")
    assert failures == []


def test_two_process_world_eager_compiled_and_captured(lib_dir):
    """W = 2 processes on this one GPU: every operator eagerly and compiled, and the block captured in each
    process's own torch.cuda.graph and replayed."""
    _gpu()
    from two_ranks import run_two_ranks
    run_two_ranks([str(HERE), "worker", lib_dir], ["eager", "compiled", "captured"])


# ----------------------------------------------------------------------------------------- entry points

def worker(directory: str) -> int:
    import torch
    import torch.distributed as dist

    from test_ops_gpu import worker_done

    from ditron import torch_ops
    from ditron.runtime.world import World
    torch.cuda.set_device(0)
    dist.init_process_group("gloo")  # NCCL refuses two ranks on one GPU; symmetric memory needs only the store
    world = World.from_torch()
    library = ops.Library(directory, target=TARGET, compile=False)
    handle = torch_ops.register_world(world, library)
    failed = 0
    for name, check in (("eager", lambda: check_ops(handle, 2, world.rank, compiled=False)),
                        ("compiled", lambda: check_ops(handle, 2, world.rank, compiled=True)),
                        ("captured", lambda: check_capture(handle, 2, world.rank))):
        failures = check()
        for f in failures:
            print(f"rank {world.rank}: {name} MISMATCH {f}", flush=True)
        failed += bool(failures)
        if not failures:
            print(f"rank {world.rank}: {name} ok", flush=True)
    torch_ops.synchronize(world)
    torch_ops.close(world)
    return worker_done(library, failed)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "build":
        build(argv[1])
        return 0
    if len(argv) >= 2 and argv[0] == "worker":
        return worker(argv[1])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    sys.exit(main(sys.argv[1:]))
