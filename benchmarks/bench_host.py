#!/usr/bin/env python3
"""Host cost of one ditron op call in CUDA-graph mode, layer by layer: what a call costs the Python thread when the
GPU keeps up (a small all-reduce is host-bound when this is larger than its GPU time).

    python benchmarks/bench_host.py --build DIR     (where the compiler is: the all-reduce artifact)
    python benchmarks/bench_host.py --run DIR       (one GPU; torch + triton only)
    python benchmarks/bench_host.py --cpu-dry DIR   (no GPU: the Python host path of eager calls, see below)
    python benchmarks/bench_host.py --breakdown DIR (a GPU or none: an eager call's layers)
    python benchmarks/bench_host.py --real2 DIR     (one GPU: a real world of two processes on it)

Rows (µs per call, the median of 5 repetitions of 3000 calls each, ``sync=False`` into fixed outputs; a virtual
world of one rank, the same host path as a real rank's): ``ops.all_reduce`` (the public call), ``Executable.run``,
``Executor.run`` (the graph key and its lookup), ``BoundCall`` (``Executor.bind``: no key), the graph launch alone
through torch (``CUDAGraph.replay``) and through the graph runner's backend, and, for scale, one torch
elementwise op.

Then the calls a model makes, with a fresh input tensor each call (cycling through FRESH tensors at distinct
addresses, as a model's activations come) and no given output (the median of 5 repetitions of 300 calls): the eager
``ops.all_reduce``, ``ops.all_reduce(graph=True)`` (a capture per new tensor set), the torch operator
``torch.ops.ditron.all_reduce`` eagerly and through ``torch.compile(fullgraph=True)``, and the replay of the
caller's own ``torch.cuda.graph`` holding the operator (ditron.runtime.callplan). Printed and written to
benchmarks/results/host_w1.csv (``--out DIR``: there). ``--run`` also times the eager calls of the fused ops
(EAGER_CASES: ag_gemm / gemm_rs / gemm_ar at W = 1, the torch operator of each) with fresh inputs, through the call
plans (runtime/eager.py) and interpreted (``eager.ENABLED = False``), and ``graph=True`` with fresh inputs when
each new input set is captured against copying it into one captured set (``graph="copy"``).

``--cpu-dry DIR`` needs no GPU: the same eager calls (W = 1 and virtual W = 2, DRY_CASES, built into DIR where the
compiler is) with every device call replaced by a no-op -- Triton's launcher (CompiledKernel.run and the
CudaLauncher's frame run, its C launch does not), torch's events and streams, and the CUDA driver: ditron's
DriverMemops binds C functions that do nothing (hotpath.c's dry_entry_points) in place of libcuda's, so its
ctypes calls (memops, event record, stream waits) and the call plans' C path (hotpath.c's launch, fork, join and
memops) run up to the driver -- so what is timed is the host path alone, with the call plans and interpreted (written to host_dry.csv). The driver calls and
torch's allocator cost a few microseconds more per call on a GPU host; ``--run`` measures them.

``--real2 DIR [--gpus 2]`` runs the W = 2 cases in a real world of two processes, both on GPU 0 (or one GPU
each: host_real_w2_2gpu.csv), in grad-off inference mode: per op the host time
of one torch-operator call with fresh inputs into an idle GPU (the median of REAL_CALLS), through ``torch_ops.call``
(ditron.nn's path), through ``torch.ops.ditron.<op>``, and the Python way with a C call per step
(``eager.NATIVE = False``); written to host_real_w2.csv.

``--breakdown DIR`` (a GPU, or no GPU: then dry as above) splits the eager call with fresh inputs of the W = 1
cases into its layers, us per call (the median of 5 runs of 3000 calls, 2000 dry): the whole ``ops`` call, the call plan's
``enqueue`` (fork, steps, join) and ``bind`` (argument slots, the outputs allocated) with the call's tensors
already checked, the outputs alone, the fork + join alone (hotpath.c: two cuEventRecord, two cuStreamWaitEvent),
the plan's steps alone (the launches: ``steps_gpu_us`` is the GPU's time per call over the same loop, CUDA events;
where it is as large as ``steps_us`` the loop waited for the GPU, not the host; ``steps_alone_us`` and
``full_alone_us``: one call into an idle GPU, synchronized before each, the median of 1000), ``enqueue_per_step_us``
(the enqueue with a C call per step instead of the plan's one C program, runtime/hotpath.c), the op's torch operator
with fresh inputs (``op_us``: through its one C call, fastcall.op_front, ``op_in_c`` says it was made; against
``op_python_us``: the operator's Python path with a C call per step, as before those; ``*_alone_us`` into an idle
GPU), and torch's ``add_`` and ``matmul`` of the op's operands for scale. Written to host_breakdown.csv.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SHAPE = (128, 256)     # 64 KB of bf16: the kernel is short, the call is host-bound
CALLS, REPEATS = 3000, 5
FRESH_CALLS = 300      # per repetition, for the rows with a fresh tensor per call (some capture a graph per call)
FRESH = 64             # distinct input tensors the fresh rows cycle through (more than the graph cache holds)


def signature():
    from ditron import ops
    return ops.signature_for("all_reduce", [SHAPE], "bf16", 1, True, algorithm="one_shot")


def eager_signatures():
    from ditron import ops
    return [ops.signature_for(op, shapes, "bf16", W, True, **params) for op, shapes, params, W in DRY_CASES]


def real_signatures():
    """The W = 2 cases of DRY_CASES in a real world (``--real2``: one process per rank)."""
    from ditron import ops
    return [ops.signature_for(op, shapes, "bf16", W, False, **params) for op, shapes, params, W in DRY_CASES
            if W == 2]


def build(directory: Path) -> None:
    from ditron import ops
    ops.build([signature(), *eager_signatures(), *real_signatures()], directory)
    print(f"built {signature().key} and the eager cases into {directory}")


def timed(fn, calls: int = CALLS) -> float:
    import torch
    for _ in range(min(200, calls)):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) * 1e6 / calls)
        torch.cuda.synchronize()
    return statistics.median(runs)


def fresh_rows(x0, world, lib) -> list[tuple[str, object]]:
    """The rows with a fresh input tensor per call: (name, fn)."""
    import itertools

    import torch

    from ditron import ops, torch_ops
    pool = [x0.clone() for _ in range(FRESH)]
    nxt = itertools.cycle(pool).__next__
    handle = torch_ops.register_world(world, lib)
    op = torch.ops.ditron.all_reduce
    compiled = torch.compile(lambda x: op(x, handle, "one_shot"), fullgraph=True)
    static = x0.clone()
    op(static, handle, "one_shot")  # the warm-up that makes the capture plan
    compiled(static)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = op(static, handle, "one_shot")
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, static)  # W = 1: the all-reduce is the identity
    return [
        ("ops.all_reduce eager, fresh x", lambda: ops.all_reduce([nxt()], world, "one_shot", sync=False, library=lib)),
        ("ops.all_reduce(graph=True), fresh x", lambda: ops.all_reduce([nxt()], world, "one_shot", sync=False,
                                                                       library=lib, graph=True)),
        ("ops.all_reduce(graph='copy'), fresh x", lambda: ops.all_reduce([nxt()], world, "one_shot", sync=False,
                                                                         library=lib, graph="copy")),
        ("torch.ops.ditron.all_reduce, fresh x", lambda: op(nxt(), handle, "one_shot")),
        ("torch.compile(fullgraph) of it, fresh x", lambda: compiled(nxt())),
        ("user torch.cuda.graph holding it", graph.replay),
    ]


def run(directory: Path, out_dir: Path = RESULTS) -> int:
    import torch

    from ditron import ops
    from ditron.runtime.world import World
    if not torch.cuda.is_available():
        sys.exit("bench_host --run needs a CUDA GPU")
    world = World.virtual(1)
    lib = ops.Library(directory, compile=False)
    x = [(torch.randn(*SHAPE, device="cuda") * 0.1).to(torch.bfloat16)]
    out = [torch.empty_like(x[0])]
    call = {"algorithm": "one_shot", "out": out, "sync": False, "library": lib, "graph": True}
    ops.all_reduce(x, world, **call)
    exe = lib.executable(signature())
    ex = exe.executor(world, graph=True)
    inputs, outputs = [[x[0]]], [[out[0]]]
    bound = ex.bind(inputs, outputs)
    runner = ex._graphs
    entry = runner.entry(inputs, outputs)
    parity = next(p for p in (0, 1) if entry.graphs[p] is not None)
    graph = entry.graphs[parity]
    y = torch.empty_like(x[0])
    rows = [
        ("ops.all_reduce(graph=True)", lambda: ops.all_reduce(x, world, **call)),
        ("Executable.run(graph=True)", lambda: exe.run(world, inputs, outputs, sync=False, graph=True)),
        ("Executor.run", lambda: ex.run(inputs, outputs, sync=False)),
        ("BoundCall", lambda: bound(False)),
        ("CUDAGraph.replay", graph.replay),
        ("graph backend replay", lambda: runner.backend.replay(graph)),
        ("torch y.add_(x) (one kernel)", lambda: y.add_(x[0])),
    ]
    results = []
    for name, fn in rows:
        us = timed(fn)
        results.append({"call": name, "host_us": round(us, 2)})
        print(f"  {name:40s} {us:7.2f} us")
    torch.testing.assert_close(out[0], x[0])  # W = 1: the all-reduce is the identity
    for name, fn in fresh_rows(x[0], world, lib):
        us = timed(fn, FRESH_CALLS)
        results.append({"call": name, "host_us": round(us, 2)})
        print(f"  {name:40s} {us:7.2f} us")
    for name, us in gpu_eager_rows(lib):
        results.append({"call": name, "host_us": round(us, 2)})
        print(f"  {name:40s} {us:7.2f} us")
    from ditron import torch_ops
    torch_ops.close(world)
    lib.close()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "host_w1.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["call", "host_us"])
        w.writeheader()
        w.writerows(results)
    print(f"wrote {path} ({torch.cuda.get_device_name()})")
    return 0


def gpu_eager_rows(lib) -> list[tuple[str, float]]:
    """The fused ops' eager calls with fresh inputs (DRY_CASES on the GPU), through the call plans and
    interpreted, and each op's torch operator: (name, us)."""
    import itertools

    import torch

    from ditron import ops, torch_ops
    from ditron.runtime import eager
    from ditron.runtime.world import World
    out = []
    worlds = {W: World.virtual(W) for W in (1, 2)}
    for op, shapes, params, W in DRY_CASES:
        world = worlds[W]
        pool = [[(torch.randn(*shapes[0], device="cuda") * 0.1).to(torch.bfloat16) for _ in range(W)]
                for _ in range(FRESH)]
        rest = [[(torch.randn(*sh, device="cuda") * 0.1).to(torch.bfloat16) for _ in range(W)] for sh in shapes[1:]]
        nxt = itertools.cycle(pool).__next__
        fn = getattr(ops, op)
        handle = torch_ops.register_world(world, lib) if W == 1 else None
        opfn, extra = getattr(torch.ops.ditron, op), tuple(params.values())
        for plans in (True, False):
            eager.ENABLED = plans
            how = "plan" if plans else "interpreted"
            rows = [(f"ops.{op} W={W} eager ({how}), fresh x",
                     lambda: fn(nxt(), *rest, world, sync=False, library=lib, **params))]
            if handle is not None:
                rows.append((f"torch.ops.ditron.{op} ({how}), fresh x",
                             lambda: opfn(nxt()[0], *[r[0] for r in rest], handle, *extra)))
            for name, call in rows:
                out.append((name, timed(call, FRESH_CALLS)))
        eager.ENABLED = True
    return out


# ------------------------------------------------------------------------------------- the CPU dry run

DRY_CASES = [("ag_gemm", [(128, 256), (256, 256)], {}, 1), ("gemm_rs", [(128, 128), (128, 256)], {}, 1),
             ("gemm_ar", [(128, 128), (128, 256)], {"algorithm": "auto"}, 1),
             ("ag_gemm", [(64, 256), (256, 128)], {}, 2), ("gemm_rs", [(128, 128), (128, 256)], {}, 2),
             ("gemm_ar", [(128, 128), (128, 256)], {"algorithm": "auto"}, 2),
             ("all_reduce", [(128, 256)], {"algorithm": "one_shot"}, 1),
             ("all_reduce", [(128, 256)], {"algorithm": "one_shot"}, 2)]
DRY_CALLS = 2000


class _DryStream:
    def __init__(self):
        self.cuda_stream = id(self)

    def wait_event(self, event) -> None:
        pass

    def synchronize(self) -> None:
        pass


class _DryEvent:
    cuda_event = 1

    def __init__(self, **kw):
        pass

    def record(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class _DryLib:
    """libcuda.so.1 as ditron's DriverMemops binds it (ctypes), every entry point a C function that does nothing
    and succeeds (hotpath.c's dry_entry_points): the Python and ctypes frames of every driver call run, the driver
    does not."""

    def __init__(self, hot):
        import ctypes
        names = {"cuStreamWriteValue32": "cuStreamWriteValue32_v2", "cuStreamWaitValue32": "cuStreamWaitValue32_v2"}
        for name, address in hot.dry_entry_points().items():
            setattr(self, names.get(name, name), ctypes.CFUNCTYPE(ctypes.c_int)(address))


def _dry_driver():
    from ditron.runtime import memops
    hot = memops.hotpath()
    if hot is None:
        sys.exit("bench_host --cpu-dry needs ditron's C helper (runtime/hotpath.c, built through Triton's helper "
                 "builder: a C compiler and the Python headers)")
    return memops.DriverMemops(_DryLib(hot))


def dry_gpu(stack) -> None:
    """Replace every device call of the executor's path by a no-op, for the life of ``stack`` (an ExitStack)."""
    import contextlib
    from types import SimpleNamespace

    import torch
    from triton.compiler.compiler import CompiledKernel

    from ditron import torch_ops
    from ditron.runtime import eager
    from ditron.runtime import executor as X
    from ditron.runtime import loader
    user = _DryStream()
    saved = []

    def patch(obj, name, value):
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)
    patch(torch.cuda, "device", lambda d: contextlib.nullcontext())
    patch(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    patch(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(multi_processor_count=132))
    patch(torch.cuda, "current_stream", lambda device=None: user)
    patch(torch.cuda, "set_stream", lambda s: None)
    patch(torch.cuda, "Event", _DryEvent)
    patch(torch.cuda, "synchronize", lambda *a: None)
    patch(torch.cuda, "is_current_stream_capturing", lambda: False)
    patch(X, "_device_of", lambda world: torch.device("cpu"))
    patch(X, "_new_stream", lambda device: (_DryStream(), None))
    patch(X, "stream_write_value32", lambda: None)
    drv = _dry_driver()
    patch(X, "driver_memops", lambda: drv)
    patch(X.Executor, "_calibrate", lambda ex: 10 ** 9)
    patch(X.Executor, "_probe_memops", lambda ex, drv: None)
    patch(loader.Kernel, "loaded", property(lambda self: True))
    patch(X.Executor, "_warm_copies", lambda ex: None)
    patch(X.Executor, "_copy", staticmethod(lambda stream, src, dst: None))
    patch(eager, "current_raw_stream", lambda: (lambda index: user.cuda_stream))
    patch(torch_ops, "DEVICE_TYPE", "cpu")
    # Triton's kernels: loaded (no module load), their launcher Triton's CudaLauncher whose C launch is a no-op:
    # CompiledKernel.run, the launcher's frame and kernel[grid](...) run as Triton's
    patch(CompiledKernel, "_init_handles", _dry_init_handles)
    stack.callback(lambda: [setattr(o, n, v) for o, n, v in reversed(saved)])


def _dry_launch(*args) -> None:
    pass


def _dry_init_handles(ck) -> None:
    """A kernel "loaded" without a GPU: function handle 1, Triton's own CudaLauncher (made without compiling its
    C module) whose C launch is a no-op."""
    if ck._run is not None:
        return
    from triton.backends.nvidia.driver import CudaLauncher
    md = ck.metadata
    launcher = object.__new__(CudaLauncher)
    launcher.num_ctas = getattr(md, "num_ctas", 1)
    for name in ("global_scratch_size", "global_scratch_align", "profile_scratch_size", "profile_scratch_align",
                 "launch_cooperative_grid", "launch_pdl"):
        setattr(launcher, name, getattr(md, name, 0))
    launcher.launch = _dry_launch
    ck._run, ck.function = launcher, 1


def _dry_timed(call, warmup: int = 0) -> float:
    """Host us per call on the CPU (no device to wait for): the median of REPEATS runs of DRY_CALLS calls."""
    for _ in range(warmup):
        call()
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(DRY_CALLS):
            call()
        runs.append((time.perf_counter() - start) * 1e6 / DRY_CALLS)
    return statistics.median(runs)


def dry_rows(directory: Path) -> list[dict]:
    import contextlib
    import itertools

    import torch

    from ditron import ops, torch_ops
    from ditron.runtime import eager
    from ditron.runtime.world import World
    out = []
    with contextlib.ExitStack() as stack:
        dry_gpu(stack)
        lib = ops.Library(directory, target="cuda:90")
        for op, shapes, params, W in DRY_CASES:
            world = World.virtual(W, device="cpu")
            s = ops.signature_for(op, shapes, "bf16", W, True, **params)
            pool = [[(torch.randn(shapes[0]) * 0.1).to(torch.bfloat16) for _ in range(W)] for _ in range(FRESH)]
            rest = [[(torch.randn(sh) * 0.1).to(torch.bfloat16) for _ in range(W)] for sh in shapes[1:]]
            nxt = itertools.cycle(pool).__next__
            fn = getattr(ops, op)
            handle = torch_ops.register_world(world, lib, capturable=False) if W == 1 else None
            opfn = getattr(torch.ops.ditron, op)
            extra = tuple(params.values())
            for plans in (False, True):
                eager.ENABLED = plans
                rows = [(f"ops.{op} eager, fresh x", lambda: fn(nxt(), *rest, world, sync=False, library=lib,
                                                              **params))]
                if handle is not None:
                    rows.append((f"torch.ops.ditron.{op}, fresh x",
                                 lambda: opfn(nxt()[0], *[r[0] for r in rest], handle, *extra)))
                for name, call in rows:
                    us = _dry_timed(call, warmup=50)
                    row = {"call": name, "W": W, "signature": s.key, "plans": plans, "host_us": round(us, 2)}
                    out.append(row)
                    print(f"  W={W} {name:42s} {'plan' if plans else 'interpreted':12s} {us:8.2f} us", flush=True)
            eager.ENABLED = True
            if handle is not None:
                torch_ops.close(world)
                torch_ops.unregister_world(handle)
        out += registered_rows()
        x = torch.zeros(SHAPE, dtype=torch.bfloat16)
        for name, call in (("torch.empty of x's shape (for scale)", lambda: torch.empty(SHAPE, dtype=torch.bfloat16)),
                           ("torch x.add_(x) (for scale)", lambda: x.add_(x))):
            us = _dry_timed(call)
            out.append({"call": name, "W": 0, "signature": "", "plans": "", "host_us": round(us, 2)})
            print(f"  {name:46s} {'':12s} {us:8.2f} us", flush=True)
        lib.close()
    return out


def registered_rows() -> list[dict]:
    """(Dry, needs the compiler: a registered program compiles at its first call.) A kernel program registered as a
    torch operator (ditron.register_op + torch_ops.register_custom_op: examples/ag_gemm_user.py's builder, W = 1,
    ag_gemm's first DRY_CASES shapes) with fresh inputs: through its one C call (fastcall.program_remember) and the
    Python way (``eager.NATIVE = False``: the builder and the UserOp's checks every call)."""
    import itertools

    import torch

    import ditron
    import ditron.frontend as dt
    from ditron import fastcall, torch_ops
    from ditron.runtime.world import World
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import ag_gemm_user
    name = "bench_ag_gemm_user"
    op = torch_ops._custom[name][0] if name in torch_ops._custom else ditron.register_op(
        name, ag_gemm_user.build, inputs=[dt.shard(0, "tp"), dt.replicated], outputs=[dt.replicated],
        reference=lambda x, w: x @ w)  # (once per process: a torch operator cannot be defined twice)
    oper = torch_ops.register_custom_op(op)
    op.user_op.target = "cuda:90"
    (m, k), (_, n) = DRY_CASES[0][1]
    world = World.virtual(1, device="cpu")
    handle = torch_ops.register_world(world, capturable=False)
    pool = [(torch.randn(m, k) * 0.1).to(torch.bfloat16) for _ in range(FRESH)]
    w = (torch.randn(k, n) * 0.1).to(torch.bfloat16)
    nxt = itertools.cycle(pool).__next__
    rows = []
    for how in ("C call", "Python"):
        with python_way([v[2].plan for k, v in fastcall._ops.items() if k[0] == name]) if how == "Python" else \
                contextlib.nullcontext():
            us = _dry_timed(lambda: oper(nxt(), w, handle), warmup=50)
        call = "torch.ops.ditron.<registered program>, fresh x"
        rows.append({"call": call, "W": 1, "signature": "ag_gemm_user", "plans": how, "host_us": round(us, 2)})
        print(f"  W=1 {call:42s} {how:12s} {us:8.2f} us", flush=True)
    torch_ops.close(world)
    torch_ops.unregister_world(handle)
    op.user_op.close()
    return rows


def dry_run(directory: Path, out_dir: Path = RESULTS) -> int:
    rows = dry_rows(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "host_dry.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["call", "W", "signature", "plans", "host_us"])
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path} (CPU dry run: device calls are no-ops)")
    return 0


def breakdown_rows(directory: Path) -> list[dict]:
    import contextlib
    import gc
    import itertools
    import warnings

    import torch

    from ditron import ops
    from ditron.runtime import eager
    from ditron.runtime.executor import Executor
    from ditron.runtime.world import World
    rows = []
    warnings.simplefilter("ignore", FutureWarning)  # gc's walk touches torch's deprecated module attributes
    with contextlib.ExitStack() as stack:
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        if dev == "cpu":
            dry_gpu(stack)
        timer = _dry_timed if dev == "cpu" else lambda call, warmup=0: timed(call, CALLS)
        lib = ops.Library(directory, target="cuda:90")
        for op, shapes, params, W in [c for c in DRY_CASES if c[3] == 1]:
            world = World.virtual(1, device=dev)
            pool = [[(torch.randn(shapes[0], device=dev) * 0.1).to(torch.bfloat16)] for _ in range(FRESH)]
            rest = [[(torch.randn(sh, device=dev) * 0.1).to(torch.bfloat16)] for sh in shapes[1:]]
            nxt = itertools.cycle(pool).__next__
            fn = getattr(ops, op)
            before = {id(o) for o in gc.get_objects() if isinstance(o, Executor)}
            row = {"op": op, "device": "dry (no GPU)" if dev == "cpu" else torch.cuda.get_device_name()}
            def call():
                return fn(nxt(), *rest, world, sync=False, library=lib, **params)
            row["full_us"] = timer(call, warmup=50)
            plan = next((p for o in gc.get_objects() if isinstance(o, Executor) and id(o) not in before and
                         not o._closed for p in getattr(o, "_eager_plans", {}).values() if hasattr(p, "steps")), None)
            if plan is None:
                sys.exit(f"bench_host --breakdown: the {op} call made no eager call plan (eager.ENABLED is "
                         f"{eager.ENABLED}); its layers cannot be timed")
            args = [nxt()[0], *[r[0] for r in rest]]
            tensors, _ = plan.bind([args], None)
            row["enqueue_us"] = timer(lambda: plan.enqueue(tensors, False))
            row["bind_us"] = timer(lambda: plan.bind([args], None))
            row["outputs_us"] = timer(plan.new_outputs)
            e, cur = plan.entries, plan.current_raw(plan.index) if plan.current_raw else None
            if e is not None:
                row["fork_join_us"] = timer(lambda: (e.fork(plan.start[1], cur, *plan.fork_handles),
                                                     e.join(cur, *plan.join_args[0])))
            steps, t, epoch = plan.steps[0][0][1], tensors[plan.ex.ranks[0]], plan.ex.epoch

            def run_steps():
                for step in steps:
                    step(epoch, t)
            row["steps"] = len(steps)
            row["steps_us"] = timer(run_steps)
            if dev == "cuda":
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(CALLS):
                    run_steps()
                end.record()
                end.synchronize()
                row["steps_gpu_us"] = start.elapsed_time(end) * 1e3 / CALLS
                row["steps_alone_us"] = _alone_us(run_steps)
                row["full_alone_us"] = _alone_us(call)
            saved = plan.native
            plan.native = {}
            row["enqueue_per_step_us"] = timer(lambda: plan.enqueue(tensors, False))
            plan.native = saved
            row.update(operator_rows(op, nxt, rest, params, world, lib, timer, dev))
            y = torch.zeros(SHAPE, dtype=torch.bfloat16, device=dev)
            row["torch_add_us"] = timer(lambda: y.add_(y))
            if rest and args[0].shape[-1] == rest[0][0].shape[0]:
                row["torch_matmul_us"] = timer(lambda: torch.matmul(nxt()[0], rest[0][0]))
                if dev == "cuda":
                    row["torch_matmul_alone_us"] = _alone_us(lambda: torch.matmul(nxt()[0], rest[0][0]))
            if dev == "cuda":
                torch.cuda.synchronize()
            rows.append({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()})
            print("  " + "  ".join(f"{k} {v}" for k, v in rows[-1].items()), flush=True)
        lib.close()
    return rows


@contextlib.contextmanager
def python_way(plans):
    """Calls as before hotpath.c's C calls, for a baseline: ``eager.NATIVE`` off, the operators' C calls dropped,
    the given plans' C programs off (a C call per step) -- all restored after."""
    from ditron import fastcall
    from ditron.runtime import eager
    saved = [(p, p.native) for p in plans]
    eager.NATIVE = False
    fastcall.drop_fronts()
    try:
        for p, _ in saved:
            p.native = {}
        yield
    finally:
        eager.NATIVE = True
        for p, native in saved:
            p.native = native


def operator_rows(op, nxt, rest, params, world, lib, timer, dev) -> dict:
    """The op's torch operator with fresh inputs: through its C call (fastcall.op_front: ``op_us``, and
    ``op_alone_us`` into an idle GPU) and the Python way (``eager.NATIVE = False``: ``op_python_us``)."""
    import torch

    from ditron import fastcall, torch_ops
    handle = torch_ops.register_world(world, lib, capturable=dev == "cuda")  # (a capture plan needs a GPU)
    fn, extra = getattr(torch.ops.ditron, op), tuple(params.values())

    def call():
        return fn(nxt()[0], *[r[0] for r in rest], handle, *extra)
    row = {"op_us": timer(call, warmup=50), "op_in_c": bool(fastcall.fronts.get(op))}
    if dev == "cuda":
        row["op_alone_us"] = _alone_us(call)
    with python_way([v[2].plan for v in fastcall._ops.values() if v[2].world is world]):
        row["op_python_us"] = timer(call, warmup=50)
        if dev == "cuda":
            row["op_python_alone_us"] = _alone_us(call)
    torch_ops.close(world)
    torch_ops.unregister_world(handle)
    return row


def _alone_us(call, n: int = 1000) -> float:
    """The host time of one call made into an idle GPU (synchronized before each): the median of n."""
    import torch
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def breakdown(directory: Path, out_dir: Path = RESULTS) -> int:
    rows = breakdown_rows(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    path = out_dir / "host_breakdown.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}")
    return 0


# ------------------------------------------------------------------- a real world of two processes on one GPU

def real2(directory: Path, out_dir: Path = RESULTS, gpus: int = 1) -> int:
    """Start this script's ``--rank`` as ranks 0 and 1 of a real world: on this one GPU (``gpus`` 1: torch symmetric
    memory with overlapping devices, as test/py/two_ranks.py) or one GPU each (2); rank 0 writes
    host_real_w2.csv (host_real_w2_2gpu.csv)."""
    import os
    import socket
    import subprocess
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(directory), "--out", str(out_dir)],
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r if gpus == 2 else 0),
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), BENCH_HOST_GPUS=str(gpus),
                                       CUDA_DEVICE_MAX_CONNECTIONS="32",
                                       **({"TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1"} if gpus == 1 else {})))
             for r in range(2)]
    codes = [p.wait(timeout=600) for p in procs]
    return max(codes)


def rank_rows(directory: Path, out_dir: Path) -> int:
    """One rank of ``--real2``: each W = 2 case's torch operator with fresh inputs, the host time of one call into
    an idle GPU (synchronized before each; both ranks make the same calls, so each call's peer is there), the
    median of REAL_CALLS: through ``torch_ops.call`` (ditron.nn's path: the C call without the dispatcher), through
    the operator (``torch.ops.ditron.<op>``: its kernel's C call), and the Python way with a C call per step
    (``eager.NATIVE = False``, as before the C calls). Each output is checked against torch (the sum or gather of
    both ranks' products) once."""
    import itertools
    import os

    import torch
    import torch.distributed as dist

    from ditron import fastcall, ops, torch_ops
    from ditron.runtime.world import World
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("gloo")  # NCCL refuses two ranks on one GPU; symmetric memory needs only the store
    world = World.from_torch()
    lib = ops.Library(directory, compile=False)
    torch.set_grad_enabled(False)    # inference, as a model's decode step runs (torch_ops.call's C call needs it)
    handle = torch_ops.register_world(world, lib)
    rows = []
    for op, shapes, params, W in [c for c in DRY_CASES if c[3] == 2]:
        gen = torch.Generator(device="cuda").manual_seed(world.rank + 1)
        pool = [(torch.randn(*shapes[0], device="cuda", generator=gen) * 0.1).to(torch.bfloat16)
                for _ in range(FRESH)]
        rest = [(torch.randn(*sh, device="cuda", generator=gen) * 0.1).to(torch.bfloat16) for sh in shapes[1:]]
        nxt = itertools.cycle(pool).__next__
        extra = tuple(params.values())
        fn = getattr(torch.ops.ditron, op)
        y = fn(pool[0], *rest, handle, *extra)
        _check_real(op, pool[0], rest, y, world)
        calls = {"torch_ops_call": lambda: torch_ops.call(op, nxt(), *rest, handle, *extra),
                 "operator": lambda: fn(nxt(), *rest, handle, *extra)}
        row = {"op": op, "W": 2, "device": torch.cuda.get_device_name()}
        for name, call in calls.items():
            for _ in range(20):
                call()
            row[f"{name}_alone_us"] = _alone_us(call, REAL_CALLS)
        row["in_c"] = bool(fastcall.fronts.get(op))
        with python_way([v[2].plan for v in fastcall._ops.values() if v[2].world is world]):
            row["python_alone_us"] = _alone_us(calls["operator"], REAL_CALLS)
        rows.append({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()})
        if world.rank == 0:
            print("  " + "  ".join(f"{k} {v}" for k, v in rows[-1].items()), flush=True)
    torch.cuda.synchronize()
    torch_ops.close(world)
    lib.close()
    if world.rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / ("host_real_w2_2gpu.csv" if os.environ.get("BENCH_HOST_GPUS") == "2" else "host_real_w2.csv")
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {path}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


REAL_CALLS = 500


def _check_real(op, a, rest, y, world) -> None:
    """The operator's output against torch's: the products of both ranks gathered / summed (gloo carries them)."""
    import torch
    import torch.distributed as dist
    torch.cuda.synchronize()
    parts = [None, None]
    dist.all_gather_object(parts, (a.float().cpu(), rest[0].float().cpu() if rest else None))
    if op == "ag_gemm":
        want = torch.cat([p[0] for p in parts]) @ parts[world.rank][1]
    elif op in ("gemm_rs", "gemm_ar"):
        want = sum(p[0] @ p[1] for p in parts)
        if op == "gemm_rs":
            want = want.chunk(2)[world.rank]
    else:
        want = sum(p[0] for p in parts)
    torch.testing.assert_close(y.float().cpu(), want, atol=2e-2, rtol=2e-2)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--build", type=Path, metavar="DIR", help="compile the all-reduce artifact into DIR")
    g.add_argument("--run", type=Path, metavar="DIR", help="time the calls with the artifact in DIR")
    g.add_argument("--cpu-dry", type=Path, metavar="DIR", help="no GPU: time the Python host path of eager calls "
                   "(artifacts in DIR, built there if missing and the compiler is here)")
    g.add_argument("--breakdown", type=Path, metavar="DIR", help="the eager call's layers, us each (a GPU, else dry)")
    g.add_argument("--real2", type=Path, metavar="DIR", help="the torch operators' host time in a real world of two "
                   "processes on this GPU (W = 2 artifacts in DIR)")
    g.add_argument("--rank", type=Path, metavar="DIR", help=argparse.SUPPRESS)  # one rank of --real2
    p.add_argument("--gpus", type=int, choices=(1, 2), default=1, help="--real2: both ranks on GPU 0 (1) or one "
                   "GPU each (2)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where host_w1.csv goes (default: benchmarks/results)")
    args = p.parse_args()
    if args.build:
        build(args.build)
        return 0
    if args.cpu_dry:
        return dry_run(args.cpu_dry, args.out)
    if args.breakdown:
        return breakdown(args.breakdown, args.out)
    if args.real2:
        return real2(args.real2, args.out, args.gpus)
    if args.rank:
        return rank_rows(args.rank, args.out)
    return run(args.run, args.out)


if __name__ == "__main__":
    sys.exit(main())
