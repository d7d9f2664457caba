"""Hand-written device-level programs for the simulator tests, and their numpy references.

Each ``<name>.mlir`` here is a device program with ``string.Template`` placeholders for its sizes (W ranks, M rows
per rank, K / N columns, T element type ...); ``program(name, **sizes)`` fills them in. ``path(name)`` is the file,
so locations in findings name it.
"""
from __future__ import annotations

import os
import string

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def path(name: str) -> str:
    return os.path.join(HERE, f"{name}.mlir")


def program(name: str, **sizes) -> str:
    with open(path(name), encoding="utf-8") as f:
        return string.Template(f.read()).substitute(**sizes)


def all_gather(W: int, M: int, K: int, T: str = "bf16") -> str:
    return program("all_gather", W=W, M=M, K=K, T=T, WM=W * M, W2=2 * W)


def all_gather_reference(per_rank_inputs):
    full = np.concatenate([np.asarray(xs[0], dtype=np.float64) for xs in per_rank_inputs])
    return [[full] for _ in per_rank_inputs]


def task_all_gather(W: int, M: int, K: int, T: str = "bf16") -> str:
    """The same collective at task level (local view), for ditron.reference."""
    return f"""module attributes {{ditron.mesh = {{axes = ["tp"], shape = array<i64: {W}>}}}} {{
  func.func @all_gather(%x: tensor<{M}x{K}x{T}>) -> tensor<{W * M}x{K}x{T}> {{
    %y = "ditron_task.all_gather"(%x) {{dim = 0 : i64, axis = "tp"}} : (tensor<{M}x{K}x{T}>) -> tensor<{W * M}x{K}x{T}>
    return %y : tensor<{W * M}x{K}x{T}>
  }}
}}"""


# ------------------------------------------------------------------------------------- programs with kernels

def parse(text: str, filename: str, records=()):
    """Parse a device program in the current context and append one kernel per record: a ``tt.func`` carrying
    the record as its ``ditron.kernel`` attribute (the simulator runs launches from the record alone, so the body
    is left empty; ditron.kernels.<template>.build makes the real one)."""
    from mlir import ir

    from ditron.dialects.context import parse_module

    module = parse_module(text, filename)
    for rec in records:
        stub_kernel(rec, ir.InsertionPoint(module.body))
    return module


def simulate_with_kernels(text: str, filename: str, records, world_size: int, **kwargs):
    """simulate() a program whose kernels are given by their records (see parse)."""
    from ditron.dialects.context import ditron_context
    from ditron.sim import simulate

    with ditron_context():
        module = parse(text, filename, records)
        result = simulate(module, world_size, **kwargs)
        del module
    return result


def stub_kernel(rec, ip):
    from mlir import ir

    from ditron.kernels import KERNEL_ATTR

    f = ir.Operation.create("tt.func", attributes={
        "sym_name": ir.StringAttr.get(rec["name"]), "sym_visibility": ir.StringAttr.get("public"),
        "function_type": ir.TypeAttr.get(ir.FunctionType.get([], [])), KERNEL_ATTR: rec.to_attr()},
        regions=1, ip=ip)
    block = f.regions[0].blocks.append()
    ir.Operation.create("tt.return", ip=ir.InsertionPoint(block))
    return f


def ag_gemm(W: int, M: int, K: int, N: int, *, block_m: int = 128, block_n: int = 64, num_sms: int = 8):
    """(text, records) of the AG+GEMM program: C = all_gather(A) @ B with A [M, K] per rank, B [K, N]."""
    from ditron.kernels import gemm

    rec = gemm.make_record(W * M, N, K, name="ag_gemm_kernel", in_dtype="bf16", out_dtype="bf16",
                           tile_order="rank_rotated", rows_per_rank=M,
                           wait={"arg": "arrived", "rows_per_slot": M, "value_arg": "epoch"},
                           block_m=block_m, block_n=block_n, block_k=64, persistent=True, num_sms=num_sms,
                           loads="pointer", store="pointer", split_k=1)
    rec["args"] = ["a", "b", "c", "arrived", "epoch"]
    grid = gemm.grid(rec)[0]
    text = program("ag_gemm", W=W, M=M, K=K, N=N, WM=W * M, GRID=grid)
    return text, [rec]


def ag_gemm_reference(per_rank_inputs):
    a = np.concatenate([np.asarray(xs[0], dtype=np.float32) for xs in per_rank_inputs])
    return [[a @ np.asarray(xs[1], dtype=np.float32)] for xs in per_rank_inputs]


def _f32(x):
    return np.asarray(x, dtype=np.float32)


def reduce_scatter(W: int, M: int, N: int, *, grid: int = 8, block_m: int = 256):
    """(text, records) of the reduce_scatter program (x [W*M, N] per rank -> out [M, N])."""
    from ditron.kernels import reduce

    rec = reduce.make_record(M, N, name="rs_reduce", dtype="bf16", src_row="arg:row", grid=grid, block_m=block_m)
    return program("reduce_scatter", W=W, M=M, WM=W * M, N=N, GRID=grid), [rec]


def reduce_scatter_reference(per_rank_inputs):
    total = sum(_f32(xs[0]) for xs in per_rank_inputs)
    m = total.shape[0] // len(per_rank_inputs)
    return [[total[r * m:(r + 1) * m]] for r in range(len(per_rank_inputs))]


def task_reduce_scatter(W: int, M: int, N: int) -> str:
    return f"""module attributes {{ditron.mesh = {{axes = ["tp"], shape = array<i64: {W}>}}}} {{
  func.func @rs(%x: tensor<{W * M}x{N}xbf16>) -> tensor<{M}x{N}xbf16> {{
    %y = "ditron_task.reduce_scatter"(%x) {{dim = 0 : i64, axis = "tp", reduce = "sum"}}
        : (tensor<{W * M}x{N}xbf16>) -> tensor<{M}x{N}xbf16>
    return %y : tensor<{M}x{N}xbf16>
  }}
}}"""


def all_reduce(W: int, M: int, N: int, *, grid: int = 8, block_m: int = 256):
    """(text, records) of the one-shot all_reduce program (x [W*M, N] per rank -> out [W*M, N])."""
    from ditron.kernels import reduce

    rec = reduce.make_record(W * M, N, name="ar_reduce", dtype="bf16", grid=grid, block_m=block_m,
                             wait={"arg": "ready", "rows_per_slot": M, "value_arg": "epoch"})
    return program("all_reduce", W=W, M=M, WM=W * M, N=N, GRID=grid), [rec]


def all_reduce_reference(per_rank_inputs):
    total = sum(_f32(xs[0]) for xs in per_rank_inputs)
    return [[total] for _ in per_rank_inputs]


def _gemm_record(name: str, m: int, n: int, k: int, *, block_m: int, block_n: int, num_sms: int, **extra):
    from ditron.kernels import gemm

    return gemm.make_record(m, n, k, name=name, in_dtype="bf16", out_dtype="bf16", block_m=block_m,
                            block_n=block_n, block_k=64, persistent=True, num_sms=num_sms, loads="pointer",
                            store="pointer", split_k=1, **extra)


def gemm_rs(W: int, M: int, K: int, N: int, *, block_m: int = 128, block_n: int = 64, num_sms: int = 8,
            grid_r: int = 8, block_r: int = 256):
    """(text, records) of GEMM+RS: A [W*M, K], B [K, N] per rank -> out [M, N]."""
    from ditron.kernels import gemm, reduce

    g = _gemm_record("rs_gemm", W * M, N, K, block_m=block_m, block_n=block_n, num_sms=num_sms,
                     tile_order="grouped", notify={"arg": "done", "rows_per_slot": block_m, "peer": "rank"})
    geo = gemm.geometry(g)
    red = reduce.make_record(M, N, name="rs_reduce", dtype="bf16", src_row="arg:row", grid=grid_r, block_m=block_r)
    text = program("gemm_rs", W=W, M=M, WM=W * M, K=K, N=N, BM=block_m, T=geo.tiles_m, TN=geo.tiles_n,
                   GRID_G=geo.grid, GRID_R=grid_r)
    return text, [g, red]


def gemm_rs_reference(per_rank_inputs):
    total = sum(_f32(xs[0]) @ _f32(xs[1]) for xs in per_rank_inputs)
    m = total.shape[0] // len(per_rank_inputs)
    return [[total[r * m:(r + 1) * m]] for r in range(len(per_rank_inputs))]


def gemm_ar(W: int, M: int, K: int, N: int, *, block_m: int = 128, block_n: int = 64, num_sms: int = 8,
            grid_r: int = 8, block_r: int = 256):
    """(text, records) of GEMM+AR: A [W*M, K], B [K, N] per rank -> out [W*M, N]."""
    from ditron.kernels import gemm, reduce

    g = _gemm_record("ar_gemm", W * M, N, K, block_m=block_m, block_n=block_n, num_sms=num_sms,
                     tile_order="grouped", notify={"arg": "done", "rows_per_slot": block_m, "peer": "rank"})
    geo = gemm.geometry(g)
    red = reduce.make_record(W * M, N, name="ar_reduce", dtype="bf16", grid=grid_r, block_m=block_r,
                             wait={"arg": "done", "rows_per_slot": block_m, "value_arg": "want"})
    text = program("gemm_ar", W=W, M=M, WM=W * M, K=K, N=N, T=geo.tiles_m, TN=geo.tiles_n, GRID_G=geo.grid,
                   GRID_R=grid_r)
    return text, [g, red]


def gemm_ar_reference(per_rank_inputs):
    total = sum(_f32(xs[0]) @ _f32(xs[1]) for xs in per_rank_inputs)
    return [[total] for _ in per_rank_inputs]
