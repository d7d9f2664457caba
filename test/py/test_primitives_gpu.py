"""The ditron_core primitives on a real GPU: two ranks inside one process (one symmetric-heap buffer and one stream
per rank, a device table of both heap bases).

* ring: rank 1's consumer is launched first and spins (wait) on its own signal slot; rank 0's producer, delayed on
  its stream, copies a fresh tile into its heap and notifies rank 1 (release add through symm_at); the consumer then
  reads rank 0's tile through symm_at + consume_token. Data differ per round, so a wait that let the consumer through
  early reads the previous round's tile and fails.
* barrier: both ranks call a barrier_all kernel, one of them late, several times on the same pad without resetting it.
* bound: every spin is bounded (wait_bound polls). A consumer whose signal never comes and a barrier that only one
  rank enters give up, record it in their error record (count, tag, value seen) and finish.

The kernels are compiled with ditron (MLIR bindings) when it is importable; on a GPU box without them, build the
artifact on a CPU machine first and point DITRON_PRIMITIVE_ARTIFACTS at the directory it was built in:

    python test/py/test_primitives_gpu.py build build/primitive-artifacts          # CPU box (cuda:90)
    DITRON_PRIMITIVE_ARTIFACTS=build/primitive-artifacts pytest -m gpu test/py/test_primitives_gpu.py

Each scenario runs in a child process with a time limit, so a kernel that never stops spinning fails the test
instead of hanging it. The kernels are one artifact (``<directory>/primitives``), launched through the loader
(``ditron.load``: torch + triton only) with the arguments the lowering appended passed by name.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

BLOCK = 1024       # bf16 elements per program
PROGRAMS = 8       # programs per launch, for producer and consumer
ROUNDS = 4
SIG_OFFSET = 1 << 16          # bytes: signal slot in each rank's heap (after the data)
PAD_OFFSET = SIG_OFFSET + 256  # barrier pad: num_ranks + 1 slots
HEAP_BYTES = 1 << 17
WORLD = 2
TIME_LIMIT_S = 30.0
WAIT_BOUND = 10_000_000   # polls: seconds on an H200, far beyond the ~10 ms a wait here lasts, within TIME_LIMIT_S
GIVE_UP_BOUND = 10_000    # polls: a few milliseconds
ARTIFACT = "primitives"   # the artifact's directory under the build directory

_PROLOGUE = """
  %cB = "arith.constant"() <{value = 1024 : i32}> : () -> i32
  %c1 = "arith.constant"() <{value = 1 : i32}> : () -> i32
  %pid = "tt.get_program_id"() {axis = 0 : i32} : () -> i32
  %start = "arith.muli"(%pid, %cB) : (i32, i32) -> i32
  %rg = "tt.make_range"() <{end = 1024 : i32, start = 0 : i32}> : () -> tensor<1024xi32>
  %st = "tt.splat"(%start) : (i32) -> tensor<1024xi32>
  %offs = "arith.addi"(%st, %rg) : (tensor<1024xi32>, tensor<1024xi32>) -> tensor<1024xi32>
  %rank = "ditron_core.rank"() : () -> i32
  %world = "ditron_core.num_ranks"() : () -> i32
"""
_LOAD = ('"tt.load"({p}) {{cache = 1 : i32, evict = 1 : i32, isVolatile = false, operandSegmentSizes = '
         'array<i32: 1, 0, 0>}} : (tensor<1024x!tt.ptr<bf16>>) -> tensor<1024xbf16>')
_STORE = '"tt.store"({p}, {v}) {{cache = 1 : i32, evict = 1 : i32}} : (tensor<1024x!tt.ptr<bf16>>, tensor<1024xbf16>) -> ()'

KERNELS = {
    # copy src[tile] into my heap's data, then add 1 to the next rank's signal slot (release, system scope)
    "producer": f"""
"tt.func"() ({{
^bb0(%src: !tt.ptr<bf16>, %data: !tt.ptr<bf16>, %sig: !tt.ptr<i32>):
{_PROLOGUE}
  %n1 = "arith.addi"(%rank, %c1) : (i32, i32) -> i32
  %next = "arith.remsi"(%n1, %world) : (i32, i32) -> i32
  %ss = "tt.splat"(%src) : (!tt.ptr<bf16>) -> tensor<1024x!tt.ptr<bf16>>
  %sp = "tt.addptr"(%ss, %offs) : (tensor<1024x!tt.ptr<bf16>>, tensor<1024xi32>) -> tensor<1024x!tt.ptr<bf16>>
  %v = {_LOAD.format(p="%sp")}
  %ds = "tt.splat"(%data) : (!tt.ptr<bf16>) -> tensor<1024x!tt.ptr<bf16>>
  %dp = "tt.addptr"(%ds, %offs) : (tensor<1024x!tt.ptr<bf16>>, tensor<1024xi32>) -> tensor<1024x!tt.ptr<bf16>>
  {_STORE.format(p="%dp", v="%v")}
  "ditron_core.notify"(%sig, %next, %c1) {{op = "add", scope = "sys", semantic = "release"}} : (!tt.ptr<i32>, i32, i32) -> ()
  "tt.return"() : () -> ()
}}) {{arg_attrs = [{{tt.divisibility = 16 : i32}}, {{tt.divisibility = 16 : i32}}, {{}}], function_type = (!tt.ptr<bf16>, !tt.ptr<bf16>, !tt.ptr<i32>) -> (), sym_name = "producer", sym_visibility = "public"}} : () -> ()
""",
    # wait until my signal slot reaches `expect`, then read the previous rank's tile through symm_at
    "consumer": f"""
"tt.func"() ({{
^bb0(%data: !tt.ptr<bf16>, %sig: !tt.ptr<i32>, %out: !tt.ptr<bf16>, %expect: i32):
{_PROLOGUE}
  %p1 = "arith.addi"(%rank, %world) : (i32, i32) -> i32
  %p2 = "arith.subi"(%p1, %c1) : (i32, i32) -> i32
  %prev = "arith.remsi"(%p2, %world) : (i32, i32) -> i32
  %tok = "ditron_core.wait"(%sig, %expect) {{scope = "sys", semantic = "acquire"}} : (!tt.ptr<i32>, i32) -> i32
  %remote = "ditron_core.symm_at"(%data, %prev) : (!tt.ptr<bf16>, i32) -> !tt.ptr<bf16>
  %after = "ditron_core.consume_token"(%remote, %tok) : (!tt.ptr<bf16>, i32) -> !tt.ptr<bf16>
  %rs = "tt.splat"(%after) : (!tt.ptr<bf16>) -> tensor<1024x!tt.ptr<bf16>>
  %rp = "tt.addptr"(%rs, %offs) : (tensor<1024x!tt.ptr<bf16>>, tensor<1024xi32>) -> tensor<1024x!tt.ptr<bf16>>
  %v = {_LOAD.format(p="%rp")}
  %os = "tt.splat"(%out) : (!tt.ptr<bf16>) -> tensor<1024x!tt.ptr<bf16>>
  %op = "tt.addptr"(%os, %offs) : (tensor<1024x!tt.ptr<bf16>>, tensor<1024xi32>) -> tensor<1024x!tt.ptr<bf16>>
  {_STORE.format(p="%op", v="%v")}
  "tt.return"() : () -> ()
}}) {{arg_attrs = [{{tt.divisibility = 16 : i32}}, {{}}, {{tt.divisibility = 16 : i32}}, {{}}], function_type = (!tt.ptr<bf16>, !tt.ptr<i32>, !tt.ptr<bf16>, i32) -> (), sym_name = "consumer", sym_visibility = "public"}} : () -> ()
""",
    # all ranks meet; then record the generation this rank reached
    "barrier": """
"tt.func"() ({
^bb0(%pad: !tt.ptr<i32>, %out: !tt.ptr<i32>):
  "ditron_core.barrier_all"(%pad) {scope = "sys"} : (!tt.ptr<i32>) -> ()
  %world = "ditron_core.num_ranks"() : () -> i32
  %gen_slot = "tt.addptr"(%pad, %world) : (!tt.ptr<i32>, i32) -> !tt.ptr<i32>
  %gen = "tt.load"(%gen_slot) {cache = 1 : i32, evict = 1 : i32, isVolatile = true, operandSegmentSizes = array<i32: 1, 0, 0>} : (!tt.ptr<i32>) -> i32
  "tt.store"(%out, %gen) {cache = 1 : i32, evict = 1 : i32} : (!tt.ptr<i32>, i32) -> ()
  "tt.return"() : () -> ()
}) {function_type = (!tt.ptr<i32>, !tt.ptr<i32>) -> (), sym_name = "barrier", sym_visibility = "public"} : () -> ()
""",
}


def build(directory: str, target: str = "cuda:90") -> None:
    """Compile the three kernels into one artifact, directory/primitives (needs the MLIR bindings)."""
    import ditron
    from pathlib import Path
    ditron.compile("".join(KERNELS.values()), target=target, out_dir=Path(directory) / ARTIFACT, cache=False)


# ------------------------------------------------------------------------------------------- on the GPU (child)

def _world():
    """Per rank a zeroed symmetric heap, the device table of their base addresses, and an error record
    ([gave up, tag, value seen, unused] i32, 16-byte aligned, zeroed)."""
    import torch
    # CUDA loads modules lazily: torch's own kernels used while a kernel spins (_sleep here) must have run once
    # before, or their module load waits for the spinning kernel and never happens.
    torch.cuda._sleep(1)
    torch.cuda.synchronize()
    heaps = [torch.zeros(HEAP_BYTES, dtype=torch.uint8, device="cuda") for _ in range(WORLD)]
    bases = torch.tensor([h.data_ptr() for h in heaps], dtype=torch.int64, device="cuda")
    assert all(h.data_ptr() % 16 == 0 for h in heaps)
    errs = [torch.zeros(4, dtype=torch.int32, device="cuda") for _ in range(WORLD)]
    return heaps, bases, errs


def _view(heap, offset: int, count: int, dtype):
    import torch
    size = torch.tensor([], dtype=dtype).element_size()
    return heap[offset:offset + count * size].view(dtype)


def _finish(events, what: str) -> None:
    """Wait for events (an empty list: the current stream's work so far); exit the process if that takes more than
    TIME_LIMIT_S (a spinning kernel cannot be stopped)."""
    if not events:
        import torch
        events = [torch.cuda.Event()]
        events[0].record()
    deadline = time.monotonic() + TIME_LIMIT_S
    while not all(e.query() for e in events):
        if time.monotonic() > deadline:
            print(f"TIMEOUT: {what} did not finish in {TIME_LIMIT_S:.0f} s", flush=True)
            os._exit(3)  # a spinning kernel cannot be stopped: leave without waiting for it
        time.sleep(0.001)


def _load(directory: str):
    """The artifact's kernels, every module loaded before any kernel spins (docs/design.md §4)."""
    import os

    import ditron
    return ditron.load(os.path.join(directory, ARTIFACT)).warmup().kernels


def _abi(kernel, **values) -> dict:
    """The arguments the lowering appended to kernel (rank, heap_bases, wait_bound, ...), by name, from values by
    kind; only those the kernel has."""
    return {a.name: values[a.kind] for a in kernel.args if a.kind not in ("pointer", "scalar")}


def run_ring(directory: str) -> None:
    import torch
    kernels = _load(directory)
    producer, consumer = kernels["producer"], kernels["consumer"]
    heaps, bases, errs = _world()
    n = PROGRAMS * BLOCK
    srcs = [torch.randn(n, device="cuda").to(torch.bfloat16) for _ in range(ROUNDS)]
    out = torch.zeros(n, dtype=torch.bfloat16, device="cuda")
    streams = [torch.cuda.Stream() for _ in range(WORLD)]
    data = [_view(h, 0, n, torch.bfloat16) for h in heaps]
    sig = [_view(h, SIG_OFFSET, 1, torch.int32) for h in heaps]
    torch.cuda.synchronize()
    grid = (PROGRAMS, 1, 1)
    for rnd in range(1, ROUNDS + 1):
        out.zero_()
        torch.cuda.synchronize()
        with torch.cuda.stream(streams[1]):
            consumer[grid](data[1], sig[1], out, PROGRAMS * rnd,
                           **_abi(consumer, rank=1, num_ranks=WORLD, heap_bases=bases, wait_bound=WAIT_BOUND,
                                  wait_err=errs[1], wait_tag=rnd), stream=streams[1])
            done_1 = torch.cuda.Event()
            done_1.record(streams[1])
        time.sleep(0.02)
        early = done_1.query()
        with torch.cuda.stream(streams[0]):
            torch.cuda._sleep(20_000_000)  # ~10 ms: the consumer spins meanwhile
            producer[grid](srcs[rnd - 1], data[0], sig[0],
                           **_abi(producer, rank=0, num_ranks=WORLD, heap_bases=bases), stream=streams[0])
            done_0 = torch.cuda.Event()
            done_0.record(streams[0])
        _finish([done_0, done_1], f"ring round {rnd}")
        assert not early, f"round {rnd}: the consumer finished before the producer ran (wait did not wait)"
        assert errs[1].tolist() == [0, 0, 0, 0], f"round {rnd}: a wait gave up: {errs[1].tolist()}"
        assert int(sig[1].item()) == PROGRAMS * rnd, (rnd, int(sig[1].item()))
        assert int(sig[0].item()) == 0
        assert torch.equal(out, srcs[rnd - 1]), f"round {rnd}: consumer read stale or wrong data"
    print("PASS ring", flush=True)


def run_barrier(directory: str) -> None:
    import torch
    barrier = _load(directory)["barrier"]
    heaps, bases, errs = _world()
    pads = [_view(h, PAD_OFFSET, WORLD + 1, torch.int32) for h in heaps]
    outs = [torch.zeros(1, dtype=torch.int32, device="cuda") for _ in range(WORLD)]
    streams = [torch.cuda.Stream() for _ in range(WORLD)]
    torch.cuda.synchronize()
    for rnd in range(1, ROUNDS + 1):
        late = rnd % WORLD  # a different rank arrives late each round
        events = []
        for r in range(WORLD):
            with torch.cuda.stream(streams[r]):
                if r == late:
                    torch.cuda._sleep(20_000_000)
                barrier[(1, 1, 1)](pads[r], outs[r],
                                   **_abi(barrier, rank=r, num_ranks=WORLD, heap_bases=bases, wait_bound=WAIT_BOUND,
                                          wait_err=errs[r], wait_tag=rnd), stream=streams[r])
                events.append(torch.cuda.Event())
                events[-1].record(streams[r])
        _finish(events, f"barrier round {rnd}")
        for r in range(WORLD):
            assert pads[r].tolist() == [rnd] * (WORLD + 1), (rnd, r, pads[r].tolist())
            assert int(outs[r].item()) == rnd
            assert errs[r].tolist() == [0, 0, 0, 0], (rnd, r, errs[r].tolist())
    print("PASS barrier", flush=True)


def run_bound(directory: str) -> None:
    """Waits that cannot complete give up after GIVE_UP_BOUND polls, record it and let their kernel finish."""
    import torch
    kernels = _load(directory)
    consumer, barrier = kernels["consumer"], kernels["barrier"]
    heaps, bases, errs = _world()
    n = PROGRAMS * BLOCK
    data = [_view(h, 0, n, torch.bfloat16) for h in heaps]
    sig = _view(heaps[1], SIG_OFFSET, 1, torch.int32)
    out = torch.zeros(n, dtype=torch.bfloat16, device="cuda")
    torch.cuda.synchronize()
    # the consumer's signal never comes: each of its programs gives up once
    consumer[(PROGRAMS, 1, 1)](data[1], sig, out, 1, **_abi(consumer, rank=1, num_ranks=WORLD, heap_bases=bases,
                                                             wait_bound=GIVE_UP_BOUND, wait_err=errs[1], wait_tag=77))
    _finish([], "the consumer whose signal never comes")
    assert errs[1].tolist() == [PROGRAMS, 77, 0, 0], errs[1].tolist()
    # only rank 0 enters the barrier: its wait for rank 1's arrival gives up (slot 1 stays 0); its own slot is set
    pad = _view(heaps[0], PAD_OFFSET, WORLD + 1, torch.int32)
    gen = torch.zeros(1, dtype=torch.int32, device="cuda")
    barrier[(1, 1, 1)](pad, gen, **_abi(barrier, rank=0, num_ranks=WORLD, heap_bases=bases, wait_bound=GIVE_UP_BOUND,
                                        wait_err=errs[0], wait_tag=78))
    _finish([], "a barrier only one rank entered")
    assert errs[0].tolist() == [1, 78, 0, 0], errs[0].tolist()
    assert pad.tolist() == [1, 0, 1] and int(gen.item()) == 1, (pad.tolist(), int(gen.item()))
    print("PASS bound", flush=True)


# ---------------------------------------------------------------------------------------------------- pytest

pytestmark = pytest.mark.gpu


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> str:
    if not _has_cuda():
        pytest.skip("needs a CUDA GPU")
    given = os.environ.get("DITRON_PRIMITIVE_ARTIFACTS")
    if given:
        return given
    try:
        import mlir  # noqa: F401
    except ImportError:
        pytest.skip("no MLIR bindings here: build the kernels elsewhere and set DITRON_PRIMITIVE_ARTIFACTS")
    directory = str(tmp_path_factory.mktemp("primitives"))
    build(directory)
    return directory


@pytest.mark.parametrize("scenario", ["ring", "barrier", "bound"])
def test_two_ranks_in_one_process(artifacts, scenario):
    proc = subprocess.run([sys.executable, __file__, "run", scenario, artifacts], capture_output=True, text=True,
                          timeout=TIME_LIMIT_S * ROUNDS + 120)
    assert proc.returncode == 0 and f"PASS {scenario}" in proc.stdout, proc.stdout + proc.stderr


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "build":
        build(sys.argv[2], *(sys.argv[3:4] or []))
        print(f"built {', '.join(KERNELS)} in {sys.argv[2]}/{ARTIFACT}")
    elif len(sys.argv) == 4 and sys.argv[1] == "run":
        {"ring": run_ring, "barrier": run_barrier, "bound": run_bound}[sys.argv[2]](sys.argv[3])
    else:
        sys.exit("usage: test_primitives_gpu.py build DIR [TARGET] | run ring|barrier|bound DIR")
