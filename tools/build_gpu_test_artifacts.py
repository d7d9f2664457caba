#!/usr/bin/env python3
"""Build the artifacts test/py/test_loader_gpu.py launches, on a machine with the compiler (no GPU needed).

    python tools/build_gpu_test_artifacts.py OUTDIR [--timing]

Then, on the GPU machine (torch + triton, no MLIR bindings needed):

    DITRON_TEST_ARTIFACTS=OUTDIR python -m pytest -q -m gpu test/py/test_loader_gpu.py
    CUDA_DEVICE_MAX_CONNECTIONS=32 DITRON_TEST_ARTIFACTS=OUTDIR python -m pytest -q -m gpu \
        test/py/test_executor_gpu.py

OUTDIR/executor holds the host-program artifacts of test_executor_gpu.py (``--no-executor`` skips them),
OUTDIR/torch_ops the op artifacts of test_torch_ops_gpu.py (``--no-torch-ops`` skips them), OUTDIR/nn those of
test_llama_gpu.py (ditron.nn and the tensor-parallel Llama; ``--no-nn`` skips them):

    CUDA_DEVICE_MAX_CONNECTIONS=32 DITRON_TEST_ARTIFACTS=OUTDIR python -m pytest -q -m gpu \
        test/py/test_torch_ops_gpu.py
    DITRON_TEST_ARTIFACTS=OUTDIR python -m pytest -q -m gpu test/py/test_llama_gpu.py

``--timing`` also prints the compile time of the vector add: ditron cold (cache miss) and cached, beside
``triton.compile`` of the same kernel written in Triton's Python, cold and from Triton's cache.

The kernels are written here as generic-form TTIR (what ditron hands to Triton), with argument names as name
locations, as Triton's frontend writes them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

BLOCK = 1024

_HEADER = '#loc = loc("elementwise.mlir":1:1)\n"builtin.module"() ({\n'
_FOOTER = '}) : () -> ()\n'


def _kernel(name: str, params: list[tuple[str, str, bool]], body: str) -> str:
    """A public tt.func; params are (name, type, 16-byte divisible pointer)."""
    attrs = ", ".join("{tt.divisibility = 16 : i32}" if div else "{}" for _, _, div in params)
    types = ", ".join(t for _, t, _ in params)
    args = ", ".join(f'%{n}: {t} loc("{n}"(#loc))' for n, t, _ in params)
    return (f'  "tt.func"() <{{arg_attrs = [{attrs}], function_type = ({types}) -> (), sym_name = "{name}", '
            f'sym_visibility = "public"}}> ({{\n  ^bb0({args}):\n{body}    "tt.return"() : () -> ()\n'
            '  }) : () -> ()\n')


def _offsets_and_mask(n: str) -> str:
    """%offs (this program's BLOCK offsets) and %mask (offs < n)."""
    t = f"tensor<{BLOCK}xi32>"
    return (f'    %c = "arith.constant"() <{{value = {BLOCK} : i32}}> : () -> i32\n'
            '    %pid = "tt.get_program_id"() <{axis = 0 : i32}> : () -> i32\n'
            '    %start = "arith.muli"(%pid, %c) : (i32, i32) -> i32\n'
            f'    %range = "tt.make_range"() <{{end = {BLOCK} : i32, start = 0 : i32}}> : () -> {t}\n'
            f'    %starts = "tt.splat"(%start) : (i32) -> {t}\n'
            f'    %offs = "arith.addi"(%starts, %range) : ({t}, {t}) -> {t}\n'
            f'    %ns = "tt.splat"(%{n}) : (i32) -> {t}\n'
            f'    %mask = "arith.cmpi"(%offs, %ns) <{{predicate = 2 : i64}}> : ({t}, {t}) -> tensor<{BLOCK}xi1>\n')


def _pointers(ptr: str, out: str, elem: str = "f32") -> str:
    pt = f"tensor<{BLOCK}x!tt.ptr<{elem}>>"
    return (f'    %{out}_s = "tt.splat"(%{ptr}) : (!tt.ptr<{elem}>) -> {pt}\n'
            f'    %{out} = "tt.addptr"(%{out}_s, %offs) : ({pt}, tensor<{BLOCK}xi32>) -> {pt}\n')


def _load(ptr: str, out: str, elem: str = "f32") -> str:
    pt = f"tensor<{BLOCK}x!tt.ptr<{elem}>>"
    return (_pointers(ptr, f"{out}_p", elem) +
            f'    %{out} = "tt.load"(%{out}_p, %mask) <{{boundaryCheck = array<i32>, cache = 1 : i32, '
            'evict = 1 : i32, isVolatile = false, operandSegmentSizes = array<i32: 1, 1, 0>}> : '
            f'({pt}, tensor<{BLOCK}xi1>) -> tensor<{BLOCK}x{elem}>\n')


def _store(ptr: str, value: str, elem: str = "f32") -> str:
    pt = f"tensor<{BLOCK}x!tt.ptr<{elem}>>"
    return (_pointers(ptr, "o_p", elem) +
            f'    "tt.store"(%o_p, %{value}, %mask) <{{boundaryCheck = array<i32>, cache = 1 : i32, evict = 1 : i32}}>'
            f' : ({pt}, tensor<{BLOCK}x{elem}>, tensor<{BLOCK}xi1>) -> ()\n')


def vector_add_kernel(name: str = "add_kernel") -> str:
    """out[i] = x[i] + y[i] for i < n (f32)."""
    f = f"tensor<{BLOCK}xf32>"
    body = (_offsets_and_mask("n") + _load("x_ptr", "xv") + _load("y_ptr", "yv") +
            f'    %sum = "arith.addf"(%xv, %yv) : ({f}, {f}) -> {f}\n' + _store("out_ptr", "sum"))
    params = [("x_ptr", "!tt.ptr<f32>", True), ("y_ptr", "!tt.ptr<f32>", True), ("out_ptr", "!tt.ptr<f32>", True),
              ("n", "i32", False)]
    return _kernel(name, params, body)


def axpy_kernel(name: str = "axpy_kernel") -> str:
    """out[i] = alpha * x[i] + y[i] for i < n (f32; alpha is a scalar argument)."""
    f = f"tensor<{BLOCK}xf32>"
    body = (_offsets_and_mask("n") + _load("x_ptr", "xv") + _load("y_ptr", "yv") +
            f'    %alphas = "tt.splat"(%alpha) : (f32) -> {f}\n'
            f'    %ax = "arith.mulf"(%alphas, %xv) : ({f}, {f}) -> {f}\n'
            f'    %r = "arith.addf"(%ax, %yv) : ({f}, {f}) -> {f}\n' + _store("out_ptr", "r"))
    params = [("alpha", "f32", False), ("x_ptr", "!tt.ptr<f32>", True), ("y_ptr", "!tt.ptr<f32>", True),
              ("out_ptr", "!tt.ptr<f32>", True), ("n", "i32", False)]
    return _kernel(name, params, body)


def rank_kernel(name: str = "rank_kernel") -> str:
    """out[program] = rank * 1000 + num_ranks: rank and num_ranks become trailing arguments (the ABI)."""
    body = ('    %r = "ditron_core.rank"() : () -> i32\n'
            '    %w = "ditron_core.num_ranks"() : () -> i32\n'
            '    %k = "arith.constant"() <{value = 1000 : i32}> : () -> i32\n'
            '    %rk = "arith.muli"(%r, %k) : (i32, i32) -> i32\n'
            '    %v = "arith.addi"(%rk, %w) : (i32, i32) -> i32\n'
            '    %pid = "tt.get_program_id"() <{axis = 0 : i32}> : () -> i32\n'
            '    %p = "tt.addptr"(%out_ptr, %pid) : (!tt.ptr<i32>, i32) -> !tt.ptr<i32>\n'
            '    "tt.store"(%p, %v) <{boundaryCheck = array<i32>, cache = 1 : i32, evict = 1 : i32}> : '
            '(!tt.ptr<i32>, i32) -> ()\n')
    return _kernel(name, [("out_ptr", "!tt.ptr<i32>", True)], body)


def module(*kernels: str) -> str:
    return _HEADER + "".join(kernels) + _FOOTER


# The module the tests compile: two kernels (so an artifact holds several), pointer, i32 and f32 arguments.
ELEMENTWISE_MLIR = module(vector_add_kernel(), axpy_kernel())
VECTOR_ADD_MLIR = module(vector_add_kernel())
# A kernel with ditron_core primitives: the lowering appends arguments, which the artifact's ABI lists.
RANK_MLIR = module(rank_kernel())

# artifact directory name -> (target, options); test_loader_gpu.py knows these names
ARTIFACTS = {
    "elementwise_cuda90": ("cuda:90", {}),
    "elementwise_cuda90_w8": ("cuda:90", {"num_warps": 8}),
    "elementwise_cuda80": ("cuda:80", {}),
}


def build(outdir: str | Path) -> dict[str, Path]:
    """Compile ELEMENTWISE_MLIR for each entry of ARTIFACTS into OUTDIR/<name>; {name: path}."""
    import ditron
    out = Path(outdir)
    built = {}
    for name, (target, options) in ARTIFACTS.items():
        exe = ditron.compile(ELEMENTWISE_MLIR, target=target, out_dir=out / name, cache=False, **options)
        built[name] = exe.path
    exe = ditron.compile(RANK_MLIR, target="cuda:90", out_dir=out / "rank_cuda90", cache=False)
    built["rank_cuda90"] = exe.path
    (out / "README.txt").write_text("Artifacts for test/py/test_loader_gpu.py, built by "
                                    "tools/build_gpu_test_artifacts.py. Run on the GPU machine with\n"
                                    f"  DITRON_TEST_ARTIFACTS={out} python -m pytest -q -m gpu "
                                    "test/py/test_loader_gpu.py\n")
    return built


def build_executor(outdir: str | Path, names=None) -> dict[str, Path]:
    """Compile the device-level programs of test/py/test_executor_gpu.py (test/py/executor_programs) into
    OUTDIR/executor/<case>; {case: path}."""
    _tests_on_path()
    import executor_programs
    return executor_programs.build_all(Path(outdir) / "executor", names)


def build_nn(outdir: str | Path) -> dict[str, Path]:
    """Compile every op test/py/test_llama_gpu.py calls (its ``signatures()``: each shape the tensor-parallel Llama
    meets at prefill and decode) into the op library OUTDIR/nn; {"nn/<key>": path}."""
    _tests_on_path()
    import test_llama_gpu

    from ditron import ops
    return {f"nn/{sig.key}": path for sig, path in ops.build(test_llama_gpu.signatures(), Path(outdir) / "nn").items()}


def _tests_on_path() -> None:
    tests = Path(__file__).resolve().parents[1] / "test" / "py"
    if str(tests) not in sys.path:
        sys.path.insert(0, str(tests))


def build_torch_ops(outdir: str | Path) -> dict[str, Path]:
    """Compile the op artifacts of test/py/test_torch_ops_gpu.py into OUTDIR/torch_ops (an ops.Library directory);
    {signature key: path}."""
    _tests_on_path()
    import test_torch_ops_gpu
    from ditron import ops
    built = ops.build(test_torch_ops_gpu.signatures(), Path(outdir) / "torch_ops")
    return {sig.key: path for sig, path in built.items()}


def _triton_vector_add():
    """The same vector add in Triton's Python, for triton.compile."""
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    return add_kernel


def compile_times(target: str = "cuda:90", repeat: int = 3) -> dict[str, float]:
    """Seconds per compile of the vector add (best of ``repeat``), imports done beforehand:
    ditron cold (empty cache), ditron cached, triton.compile cold (always_compile), triton.compile cached."""
    import ditron
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from ditron.backends import Target

    fn = _triton_vector_add()
    gpu_target = Target.parse(target).gpu_target()
    src = ASTSource(fn, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                   "BLOCK": "constexpr"}, constexprs={"BLOCK": BLOCK})
    assert isinstance(gpu_target, GPUTarget)
    times: dict[str, list[float]] = {"ditron cold": [], "ditron cached": [], "triton.compile cold": [],
                                     "triton.compile cached": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeat):
            old = os.environ.get("DITRON_CACHE_DIR")
            os.environ["DITRON_CACHE_DIR"] = str(Path(tmp) / f"ditron{i}")  # an empty compile cache
            try:
                t0 = time.perf_counter()
                cold = ditron.compile(VECTOR_ADD_MLIR, target=target, cache=True)
                t1 = time.perf_counter()
                warm = ditron.compile(VECTOR_ADD_MLIR, target=target, cache=True)
                t2 = time.perf_counter()
            finally:
                if old is None:
                    del os.environ["DITRON_CACHE_DIR"]
                else:
                    os.environ["DITRON_CACHE_DIR"] = old
            assert cold.compile_info["cache"] == "miss" and warm.compile_info["cache"] == "hit"
            times["ditron cold"].append(t1 - t0)
            times["ditron cached"].append(t2 - t1)
            with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
                triton.knobs.cache.dir = str(Path(tmp) / f"triton{i}")
                triton.knobs.compilation.always_compile = True
                t0 = time.perf_counter()
                triton.compile(src, target=gpu_target)
                t1 = time.perf_counter()
                triton.knobs.compilation.always_compile = False
                triton.compile(src, target=gpu_target)
                t2 = time.perf_counter()
            times["triton.compile cold"].append(t1 - t0)
            times["triton.compile cached"].append(t2 - t1)
    return {k: min(v) for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("outdir", help="directory to write the artifacts into")
    p.add_argument("--timing", action="store_true", help="also print compile times (ditron vs triton.compile)")
    p.add_argument("--no-executor", action="store_true",
                   help="skip the host-program artifacts of test/py/test_executor_gpu.py (OUTDIR/executor)")
    p.add_argument("--no-torch-ops", action="store_true",
                   help="skip the op artifacts of test/py/test_torch_ops_gpu.py (OUTDIR/torch_ops)")
    p.add_argument("--no-nn", action="store_true", help="skip the op artifacts of test/py/test_llama_gpu.py (OUTDIR/nn)")
    args = p.parse_args(argv)
    from ditron.errors import DitronError
    try:
        built = build(args.outdir)
        if not args.no_executor:
            built.update({f"executor/{k}": v for k, v in build_executor(args.outdir).items()})
        if not args.no_torch_ops:
            built.update({f"torch_ops/{k}": v for k, v in build_torch_ops(args.outdir).items()})
        if not args.no_nn:
            built.update(build_nn(args.outdir))
    except DitronError as err:
        sys.stderr.write(err.render() + "\n")
        return 1
    for name, path in built.items():
        print(f"built {name}: {path}")
    if args.timing:
        times = compile_times()
        print(json.dumps({k: round(v, 4) for k, v in times.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
