"""The ditron_core primitives on a real GPU: two ranks inside one process (one symmetric-heap buffer and one stream
per rank, a device table of both heap bases).

* ring: rank 1's consumer is launched first and spins (wait) on its own signal slot; rank 0's producer, delayed on
  its stream, copies a fresh tile into its heap and notifies rank 1 (release add through symm_at); the consumer then
  reads rank 0's tile through symm_at + consume_token. Data differ per round, so a wait that let the consumer through
  early reads the previous round's tile and fails.
* barrier: both ranks call a barrier_all kernel, one of them late, several times on the same pad without resetting it.

The kernels are compiled with ditron (MLIR bindings) when it is importable; on a GPU box without them, build the
artifacts on a CPU machine first and point DITRON_PRIMITIVE_ARTIFACTS at them:

    python test/py/test_primitives_gpu.py build build/primitive-artifacts          # CPU box (cuda:90)
    DITRON_PRIMITIVE_ARTIFACTS=build/primitive-artifacts pytest -m gpu test/py/test_primitives_gpu.py

Each scenario runs in a child process with a time limit, so a kernel that never stops spinning fails the test
instead of hanging it. Launching uses ditron.backends.launch (torch + triton only).
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
    """Compile the three kernels (needs the MLIR bindings) and write them under directory."""
    from ditron.compiler import lower_and_compile
    from ditron.dialects import ditron_context, parse_module
    for name, text in KERNELS.items():
        with ditron_context():
            module = parse_module(text, f"{name}.mlir")
            (kernel,) = lower_and_compile(module, target)
            del module
        kernel.write(directory)


# ------------------------------------------------------------------------------------------- on the GPU (child)

def _world():
    import torch
    # CUDA loads modules lazily: torch's own kernels used while a kernel spins (_sleep here) must have run once
    # before, or their module load waits for the spinning kernel and never happens.
    torch.cuda._sleep(1)
    torch.cuda.synchronize()
    heaps = [torch.zeros(HEAP_BYTES, dtype=torch.uint8, device="cuda") for _ in range(WORLD)]
    bases = torch.tensor([h.data_ptr() for h in heaps], dtype=torch.int64, device="cuda")
    assert all(h.data_ptr() % 16 == 0 for h in heaps)
    return heaps, bases


def _view(heap, offset: int, count: int, dtype):
    import torch
    size = torch.tensor([], dtype=dtype).element_size()
    return heap[offset:offset + count * size].view(dtype)


def _finish(events, what: str) -> None:
    deadline = time.monotonic() + TIME_LIMIT_S
    while not all(e.query() for e in events):
        if time.monotonic() > deadline:
            print(f"TIMEOUT: {what} did not finish in {TIME_LIMIT_S:.0f} s", flush=True)
            os._exit(3)  # a spinning kernel cannot be stopped: leave without waiting for it
        time.sleep(0.001)


def _load(directory: str, name: str):
    from ditron.backends.launch import load_kernel_dir, warm
    kernel = load_kernel_dir(directory, name)
    warm(kernel)  # every module is loaded before any kernel spins (DESIGN.md section 4)
    return kernel


def run_ring(directory: str) -> None:
    import torch
    from ditron.backends.launch import abi_args
    producer, consumer = _load(directory, "producer"), _load(directory, "consumer")
    heaps, bases = _world()
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
                           *abi_args(consumer.metadata._asdict(), rank=1, num_ranks=WORLD, heap_bases=bases),
                           stream=streams[1].cuda_stream)
            done_1 = torch.cuda.Event()
            done_1.record(streams[1])
        time.sleep(0.02)
        early = done_1.query()
        with torch.cuda.stream(streams[0]):
            torch.cuda._sleep(20_000_000)  # ~10 ms: the consumer spins meanwhile
            producer[grid](srcs[rnd - 1], data[0], sig[0],
                           *abi_args(producer.metadata._asdict(), rank=0, num_ranks=WORLD, heap_bases=bases),
                           stream=streams[0].cuda_stream)
            done_0 = torch.cuda.Event()
            done_0.record(streams[0])
        _finish([done_0, done_1], f"ring round {rnd}")
        assert not early, f"round {rnd}: the consumer finished before the producer ran (wait did not wait)"
        assert int(sig[1].item()) == PROGRAMS * rnd, (rnd, int(sig[1].item()))
        assert int(sig[0].item()) == 0
        assert torch.equal(out, srcs[rnd - 1]), f"round {rnd}: consumer read stale or wrong data"
    print("PASS ring", flush=True)


def run_barrier(directory: str) -> None:
    import torch
    from ditron.backends.launch import abi_args
    barrier = _load(directory, "barrier")
    heaps, bases = _world()
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
                                   *abi_args(barrier.metadata._asdict(), rank=r, num_ranks=WORLD, heap_bases=bases),
                                   stream=streams[r].cuda_stream)
                events.append(torch.cuda.Event())
                events[-1].record(streams[r])
        _finish(events, f"barrier round {rnd}")
        for r in range(WORLD):
            assert pads[r].tolist() == [rnd] * (WORLD + 1), (rnd, r, pads[r].tolist())
            assert int(outs[r].item()) == rnd
    print("PASS barrier", flush=True)


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


@pytest.mark.parametrize("scenario", ["ring", "barrier"])
def test_two_ranks_in_one_process(artifacts, scenario):
    proc = subprocess.run([sys.executable, __file__, "run", scenario, artifacts], capture_output=True, text=True,
                          timeout=TIME_LIMIT_S * ROUNDS + 120)
    assert proc.returncode == 0 and f"PASS {scenario}" in proc.stdout, proc.stdout + proc.stderr


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "build":
        build(sys.argv[2], *(sys.argv[3:4] or []))
        print(f"built {', '.join(KERNELS)} in {sys.argv[2]}")
    elif len(sys.argv) == 4 and sys.argv[1] == "run":
        {"ring": run_ring, "barrier": run_barrier}[sys.argv[2]](sys.argv[3])
    else:
        sys.exit("usage: test_primitives_gpu.py build DIR [TARGET] | run ring|barrier DIR")
