"""ditron.ops on a real GPU: every op, compiled through ditron-default from its task program, against torch, in
virtual worlds W in {1, 2, 4, 8} on one GPU (M = 128·W and 4091·W), with pipelined calls and given outputs; and a
real two-process world on the same GPU through PyTorch symmetric memory.

The GPU machine needs torch + triton only. Build the artifacts where the compiler is, then run there:

    python test/py/test_ops_gpu.py build build/ops_arts                        # CPU machine (needs MLIR)
    CUDA_DEVICE_MAX_CONNECTIONS=32 DITRON_OPS_DIR=build/ops_arts \\
        python -m pytest -q -m gpu test/py/test_ops_gpu.py                      # GPU machine

Run this file in its own pytest process (CUDA_DEVICE_MAX_CONNECTIONS is read when CUDA starts). Without
DITRON_OPS_DIR the artifacts are built here (which needs the compiler).
"""
from __future__ import annotations

import os

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")  # effective only if CUDA has not started yet

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from two_ranks import run_two_ranks  # noqa: E402

from ditron import ops  # noqa: E402

HERE = Path(__file__).resolve()
CALLS = 3
TARGET = "cuda:90"
K, N = 256, 128
# persistent pushes on three programs: each tile counted after the next one's K loop (or, summing, each waiting
# for the peers' copy before the program's next tile)
FEW = {"num-sms": "3", "persistent": "true", "block-m": "64", "block-n": "64"}


def case_shapes(op: str, W: int, m: int, dim: int = 0) -> list[tuple[int, ...]]:
    """Each rank's input shapes for an op at m rows per rank (the GEMM's M is W*m)."""
    if op == "ag_gemm":
        return [(m, K), (K, N)]
    if op in ("gemm_rs", "gemm_ar"):
        return [(W * m, N), (N, K)]
    if op == "all_gather":
        return [(m, K)] if dim == 0 else [(m, K // W)]
    return [(W * m, K)]  # reduce_scatter, all_reduce, all_to_all (split and concatenate rows)


def _cases() -> dict[str, ops.Signature]:
    out = {}

    def add(name, op, W, m, virtual=True, shapes=None, **params):
        out[name] = ops.signature_for(op, shapes or case_shapes(op, W, m, params.get("dim", 0)), "bf16", W, virtual,
                                      TARGET, **params)
    for W in (1, 2, 4, 8):
        for m in (128, 4091):
            for op in ("ag_gemm", "gemm_rs", "gemm_ar", "all_gather", "reduce_scatter", "all_reduce", "all_to_all"):
                add(f"{op}_w{W}_m{m}", op, W, m)
            # all_to_all resharding rows -> columns (strided parts), and each engine forced
            add(f"all_to_all_reshard_w{W}_m{m}", "all_to_all", W, m, shapes=[(m, K)], split_dim=1, concat_dim=0)
            if W > 1:
                add(f"gemm_rs1l_w{W}_m{m}", "gemm_rs", W, m, passes={"ditron-tile": {"reduce-scatter": "one_launch"}})
                add(f"reduce_scatter_staged_w{W}_m{m}", "reduce_scatter", W, m,  # the default is one launch
                    passes={"ditron-tile": {"reduce-scatter": "reduce_kernel"}})
                add(f"all_reduce1_w{W}_m{m}", "all_reduce", W, m, algorithm="one_shot")
                add(f"all_reduce1ce_w{W}_m{m}", "all_reduce", W, m, algorithm="one_shot",  # staged, not one launch
                    passes={"ditron-tile": {"engine": "copy_engine"}})
                add(f"all_reduce2_w{W}_m{m}", "all_reduce", W, m, algorithm="two_shot")  # one launch
                add(f"all_reduce2ce_w{W}_m{m}", "all_reduce", W, m, algorithm="two_shot",  # staged
                    passes={"ditron-tile": {"engine": "copy_engine"}})
                add(f"all_reduce_push_w{W}_m{m}", "all_reduce", W, m, algorithm="push")
                add(f"gemm_ar_push_w{W}_m{m}", "gemm_ar", W, m, algorithm="push")
                for engine in ("copy_engine", "sm"):
                    add(f"all_to_all_{engine}_w{W}_m{m}", "all_to_all", W, m, passes={"ditron-tile": {"engine": engine}})
                    add(f"all_to_all_reshard_{engine}_w{W}_m{m}", "all_to_all", W, m, shapes=[(m, K)], split_dim=1,
                        concat_dim=0, passes={"ditron-tile": {"engine": engine}})
        if W > 1:  # GEMM+RS by push: GEMM row tiles must not straddle two ranks' rows (m = 128, not 4091)
            add(f"gemm_rs_push_w{W}_m128", "gemm_rs", W, 128, passes={"ditron-tile": {"reduce-scatter": "push"}})
            add(f"gemm_rs_push3_w{W}_m128", "gemm_rs", W, 128, passes={"ditron-tile": {"reduce-scatter": "push", **FEW}})
            add(f"gemm_ar_push3_w{W}_m128", "gemm_ar", W, 128, algorithm="push", passes={"ditron-tile": FEW})
            # GEMM+RS with the sum in the GEMM: the own tiles (last in every program) add the inbox themselves
            add(f"gemm_rs_push_sum_w{W}_m128", "gemm_rs", W, 128,
                passes={"ditron-tile": {"reduce-scatter": "push_sum"}})
            add(f"gemm_rs_push_sum3_w{W}_m128", "gemm_rs", W, 128,
                passes={"ditron-tile": {"reduce-scatter": "push_sum", **FEW}})
            # GEMM+AR in one launch (one wave: every tile resident)
            add(f"gemm_ar_push_sum_w{W}_m128", "gemm_ar", W, 128, passes={"ditron-tile": {"all-reduce": "push_sum"}})
            # ... beyond one wave: persistent programs, each tile waiting for the peers' same tile
            add(f"gemm_ar_push_sum3_w{W}_m128", "gemm_ar", W, 128,
                passes={"ditron-tile": {"all-reduce": "push_sum", **FEW}})
        add(f"all_gather_dim1_w{W}_m128", "all_gather", W, 128, dim=1)
        if W > 1:  # AG+GEMM in one launch, own rows first: copiers beside the own tiles / all programs copying
            add(f"ag_gemm_own_first_w{W}_m512", "ag_gemm", W, 512, passes={"ditron-tile": {"own-first": "true"}})
            add(f"ag_gemm_own_first8_w{W}_m512", "ag_gemm", W, 512, passes={"ditron-tile": {
                "own-first": "true", "num-sms": "8", "persistent": "true"}})
    for op in ("ag_gemm", "gemm_rs", "gemm_ar", "all_gather", "reduce_scatter", "all_reduce", "all_to_all"):
        add(f"real_{op}_w2_m4091", op, 2, 4091, virtual=False)
    for engine in ("copy_engine", "sm"):
        add(f"real_all_to_all_reshard_{engine}_w2_m4091", "all_to_all", 2, 4091, virtual=False, shapes=[(4091, K)],
            split_dim=1, concat_dim=0, passes={"ditron-tile": {"engine": engine}})
    add("real_all_reduce1_w2_m4091", "all_reduce", 2, 4091, virtual=False, algorithm="one_shot")
    add("real_ag_gemm_own_first_w2_m512", "ag_gemm", 2, 512, virtual=False, passes={"ditron-tile": {"own-first": "true"}})
    add("real_ag_gemm_own_first8_w2_m512", "ag_gemm", 2, 512, virtual=False, passes={"ditron-tile": {
        "own-first": "true", "num-sms": "8", "persistent": "true"}})
    add("real_all_reduce2_w2_m4091", "all_reduce", 2, 4091, virtual=False, algorithm="two_shot")
    add("real_all_reduce_push_w2_m4091", "all_reduce", 2, 4091, virtual=False, algorithm="push")
    add("real_gemm_ar_push_w2_m4091", "gemm_ar", 2, 4091, virtual=False, algorithm="push")
    add("real_gemm_rs_push_w2_m128", "gemm_rs", 2, 128, virtual=False,
        passes={"ditron-tile": {"reduce-scatter": "push"}})
    add("real_gemm_rs_push_sum_w2_m128", "gemm_rs", 2, 128, virtual=False,
        passes={"ditron-tile": {"reduce-scatter": "push_sum"}})
    add("real_gemm_rs_push_sum3_w2_m128", "gemm_rs", 2, 128, virtual=False,
        passes={"ditron-tile": {"reduce-scatter": "push_sum", **FEW}})
    add("real_gemm_ar_push_sum3_w2_m128", "gemm_ar", 2, 128, virtual=False,
        passes={"ditron-tile": {"all-reduce": "push_sum", **FEW}})
    add("real_gemm_ar_push_sum_w2_m4091", "gemm_ar", 2, 4091, virtual=False,
        passes={"ditron-tile": {"all-reduce": "push_sum"}})
    add("real_reduce_scatter_staged_w2_m4091", "reduce_scatter", 2, 4091, virtual=False,
        passes={"ditron-tile": {"reduce-scatter": "reduce_kernel"}})
    # skinny GEMMs whose K splits (one wave of tiles, split-K): GEMM+AR's push from the last split
    skinny = [(128, 2048), (2048, 1024)]
    add("skinny_gemm_ar_w2", "gemm_ar", 2, 0, shapes=skinny)
    add("skinny_gemm_rs1l_w2", "gemm_rs", 2, 0, shapes=skinny, passes={"ditron-tile": {"reduce-scatter": "one_launch"}})
    add("real_skinny_gemm_ar_w2", "gemm_ar", 2, 0, virtual=False, shapes=skinny)
    add("real_skinny_gemm_rs1l_w2", "gemm_rs", 2, 0, virtual=False, shapes=skinny,
        passes={"ditron-tile": {"reduce-scatter": "one_launch"}})
    return out


CASES = _cases()
VIRTUAL = [name for name, s in CASES.items() if s.virtual]
REAL = [name for name, s in CASES.items() if not s.virtual]


def build(directory: str) -> None:
    """Compile every case's artifact into directory (the CPU side of this test)."""
    ops.build(CASES.values(), directory, log=print)


# ------------------------------------------------------------------------------------------- torch side

def make_inputs(s: ops.Signature, call: int):
    """Every rank's inputs for one call (seeded by rank and call, so that a stale result shows)."""
    import torch
    out = []
    for r in range(s.world_size):
        g = torch.Generator(device="cuda").manual_seed(1000 * call + r)
        out.append([torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(torch.bfloat16)
                    for shape in s.shapes])
    return out


def close_enough(got, want) -> bool:
    import torch
    scale = max(float(want.abs().max()), 1.0)
    return got.shape == want.shape and torch.allclose(got.float(), want, rtol=2 ** -6, atol=2 ** -6 * scale)


def max_error(got, want) -> float:
    return float((got.float() - want).abs().max())


def call_op(s: ops.Signature, world, inputs, lib, **kw):
    fn = getattr(ops, s.op)
    args = [list(col) for col in zip(*inputs)] if world.is_virtual else inputs
    passes: dict[str, dict[str, str]] = {}
    for name, option, value in s.passes:
        passes.setdefault(name, {})[option] = value
    return fn(*args, world, **s.param, library=lib, passes=passes or None, **kw)


# ------------------------------------------------------------------------------------------------ tests

@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    given = os.environ.get("DITRON_OPS_DIR")
    if given:
        library = ops.Library(given, target=TARGET, compile=False)
        missing = [name for name, s in CASES.items() if not (Path(given) / s.key / "op.json").exists()]
        if missing:
            pytest.fail(f"DITRON_OPS_DIR={given} lacks the artifacts of {missing[:4]} ({len(missing)} in all); build "
                        f"them with: python {HERE.relative_to(HERE.parents[2])} build {given}")
        return library
    if not ops.compiler_available():
        pytest.skip("no MLIR bindings here to build the artifacts: set DITRON_OPS_DIR to a directory built by "
                    "`python test/py/test_ops_gpu.py build DIR`")
    root = tmp_path_factory.mktemp("ops_arts")
    build(str(root))
    return ops.Library(root, target=TARGET, compile=False)


def _gpu():
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        major, minor = torch.cuda.get_device_capability()
        pytest.skip(f"the artifacts are built for {TARGET}; this GPU is sm_{major}{minor}")


pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", VIRTUAL)
def test_virtual_world_matches_torch(lib, name):
    _gpu()
    from ditron.runtime.world import World
    s = CASES[name]
    world = World.virtual(s.world_size)
    for call in range(1, CALLS + 1):
        xs = make_inputs(s, call)
        got = call_op(s, world, xs, lib)
        want = ops.reference(s, xs)
        assert len(got) == s.world_size
        for r, (g, w) in enumerate(zip(got, want)):
            assert tuple(g.shape) == s.output_shape() and close_enough(g, w), \
                f"{name} call {call}: rank {r} differs; max error {max_error(g, w)}"
    exe = lib.executable(s)
    ex = exe.executor(world)
    assert ex.epoch == CALLS and ex.watch.done, "one executor per world, reused by every call"
    lib.release(s)


@pytest.mark.parametrize("name", ["ag_gemm_w4_m4091", "gemm_rs_w8_m4091", "all_reduce2_w8_m4091",
                                  "gemm_ar_w2_m128", "all_gather_w8_m4091", "all_to_all_reshard_w4_m4091"])
def test_pipelined_calls_and_given_outputs(lib, name):
    """Calls enqueued back to back on the caller's stream (sync=False) into outputs the caller gave."""
    _gpu()
    import torch

    from ditron.runtime.world import World
    s = CASES[name]
    world = World.virtual(s.world_size)
    inputs = [make_inputs(s, call) for call in range(1, CALLS + 2)]
    outs = [[torch.full(s.output_shape(), 7.0, dtype=torch.bfloat16, device="cuda") for _ in range(s.world_size)]
            for _ in inputs]
    results = [call_op(s, world, xs, lib, out=o, sync=False) for xs, o in zip(inputs, outs)]
    lib.synchronize(world)
    for xs, o, got in zip(inputs, outs, results):
        assert all(g is given for g, given in zip(got, o))
        for g, w in zip(got, ops.reference(s, xs)):
            assert close_enough(g, w), f"{name}: max error {max_error(g, w)}"
    lib.release(s)


def test_real_two_process_world_through_symmetric_memory(lib):
    """W = 2 processes on this one GPU: the real rendezvous path (torch symmetric memory, CUDA IPC). Without MPS
    the GPU time-slices between the two contexts: slow, but it must be correct."""
    _gpu()
    run_two_ranks([str(HERE), "worker", str(lib.directory), *REAL], REAL)


# ----------------------------------------------------------------------------------------- entry points

def worker(directory: str, names: list[str]) -> int:
    """One rank of the real world (launched by the test above): every rank builds every rank's inputs alike and
    checks its own output."""
    import torch
    import torch.distributed as dist

    from ditron.runtime.world import World
    torch.cuda.set_device(0)
    dist.init_process_group("gloo")  # NCCL refuses two ranks on one GPU; symmetric memory needs only the store
    world = World.from_torch()
    library = ops.Library(directory, target=TARGET, compile=False)
    failed = 0
    for name in names:
        s = CASES[name]
        failed_before = failed
        for call in range(1, CALLS + 1):
            xs = make_inputs(s, call)
            got = call_op(s, world, xs[world.rank], library)
            failed += not checked(world, name, call, got, ops.reference(s, xs)[world.rank])
        case_done(world, library, s, name, failed == failed_before)
    return worker_done(library, failed)


def checked(world, name: str, call: int, got, want) -> bool:
    """Whether a two-process worker's result is close enough; prints the mismatch where it is not."""
    if close_enough(got, want):
        return True
    print(f"rank {world.rank}: {name} call {call} MISMATCH, max error {max_error(got, want)}", flush=True)
    return False


def case_done(world, library, s, name: str, ok: bool) -> None:
    library.release(s)
    if ok:
        print(f"rank {world.rank}: {name} ok", flush=True)


def worker_done(library, failed: int) -> int:
    import torch.distributed as dist
    library.close()
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "build":
        build(argv[1])
        return 0
    if len(argv) >= 2 and argv[0] == "worker":
        return worker(argv[1], argv[2:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    sys.exit(main(sys.argv[1:]))
