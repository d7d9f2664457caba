"""The kernel templates at sizes where 32-bit index arithmetic overflows (ditron issue 25).

An 8 GB activation (65536 x 65536 bf16) fits an H200 many times over; its element offsets pass 2**31, so the IR a
template emits for it must compute them in 64 bits -- and only there: ordinary sizes keep i32. Each test builds the
record, runs the programs at the far end of the grid in the numpy interpreter (which wraps integers to their width,
as the GPU does) on buffers that cost memory only where they are written, checks the numbers against numpy, and
has Triton parse the module. Records whose tile, slot or block counts cannot be i32 are refused by the template.
"""
from __future__ import annotations

import mmap

import numpy as np
import pytest
from mlir import ir

from ditron.dialects import ditron_context
from ditron.dialects import ttir as T
from ditron.errors import VerificationError
from ditron.kernels import (I32_LIMIT, MAX_DIM, copy, elementwise, gemm, get_template, grouped_gemm, interp, reduce)
from ditron.kernels.gemm import PyOps
from ditron.kernels.numerics import random, round_to, storage_dtype
from kernel_checks import emit, triton_parse

RNG = np.random.default_rng(25)
MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # Linux; Python's mmap names it from 3.13


def huge(n: int, dtype: str) -> np.ndarray:
    """n zeros of dtype's storage that take memory only where written (anonymous pages, no reservation)."""
    dt = storage_dtype(dtype)
    return np.frombuffer(mmap.mmap(-1, n * dt.itemsize, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE),
                         dt)


def run_programs(rec, memory: dict, programs, *, rank: int = 0, num_ranks: int = 1, scalars=None) -> str:
    """Run the record's IR for those programs of one rank on memory; returns the module's text, which Triton
    parses once lowered for sm_90."""
    template = get_template(rec["template"])
    with ditron_context():
        module = ir.Module.create()
        func = template.build(rec, ip=ir.InsertionPoint(module.body))
        interp.run(func, memory, grid=template.grid(rec)[0], rank=rank, num_ranks=num_ranks, scalars=scalars or {},
                   programs=programs)
        text = T.module_text(module)
    triton_parse(emit(rec, lower="cuda:90"))
    return text


def box(flat: np.ndarray, ld: int, r0: int, rows: int, c0: int, cols: int) -> np.ndarray:
    """The rows x cols box at (r0, c0) of a row-major buffer with rows ld elements apart (a view)."""
    return flat[r0 * ld:(r0 + rows) * ld].reshape(rows, ld)[:, c0:c0 + cols]


def fill(flat: np.ndarray, ld: int, r0: int, rows: int, c0: int, cols: int, dtype: str) -> np.ndarray:
    values = random(dtype, (rows, cols), RNG)
    box(flat, ld, r0, rows, c0, cols)[...] = values
    return values


def close(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=1e-2, atol=1e-2)


# ------------------------------------------------------------------------------------------------------ gemm

BIG = 65536  # 65536 x 65536 bf16: 8 GB


@pytest.mark.parametrize("loads", ["pointer", "tma"])
def test_gemm_on_an_8_gb_activation_computes_its_last_tile(loads):
    """A [65536, 65536] (the GEMM reads its first 32 columns: lda 65536) times B [32, 65536] into C [65536, 65536]:
    the last tile's rows start at 65408 * 65536 elements."""
    rec = gemm.make_record(BIG, BIG, 32, lda=BIG, loads=loads, store=loads, persistent=False, split_k=1,
                           block_m=128, block_n=128, block_k=32, group_m=8, epilogue_split=1, flatten=False)
    last = gemm.geometry(rec).tiles - 1
    pid_m, pid_n = gemm.tile_coords(rec, last)
    m0, n0 = pid_m * 128, pid_n * 128
    a, c = huge(BIG * BIG, "bf16"), huge(BIG * BIG, "bf16")
    b = random("bf16", (32, BIG), RNG)
    a_tile = fill(a, BIG, m0, 128, 0, 32, "bf16")
    text = run_programs(rec, {("a", 0): a, ("b", 0): b.ravel(), ("c", 0): c}, [last])
    assert ("xi64>" in text) == (loads == "pointer")  # TMA: the descriptors' strides are i64 in any case
    close(box(c, BIG, m0, 128, n0, 128), round_to("bf16", a_tile @ b[:, n0:n0 + 128]))


def test_gemm_push_inbox_slab_rows_past_2_31():
    """GEMM+AR by push on 4 ranks with 2**30 rows: rank 0's tile goes to slab 2 of rank 1's inbox, at rows
    2 * 2**30 + m0 (an i32 slab * m wrapped to a negative row)."""
    W, m, n = 4, MAX_DIM, 16
    rec = gemm.make_record(m, n, 16, push={"arg": "inbox", "pad": "pushed", "slabs": W - 1}, loads="pointer",
                           store="pointer", persistent=False, split_k=1, block_m=16, block_n=16, block_k=16,
                           group_m=1, tile_order="row_major", epilogue_split=1, flatten=False)
    g = gemm.geometry(rec)
    last = g.tiles - 1
    m0 = last * 16
    memory = {("a", 0): huge(m * 16, "bf16"), ("b", 0): random("bf16", (16, n), RNG).ravel(),
              ("c", 0): huge(m * n, "bf16")}
    for q in range(1, W):
        memory[("inbox", q)] = huge((W - 1) * m * n, "bf16")
        memory[("pushed", q)] = huge((W - 1) * g.tiles_m, "i32")
    a_tile = fill(memory[("a", 0)], 16, m0, 16, 0, 16, "bf16")
    want = round_to("bf16", a_tile @ memory[("b", 0)].reshape(16, n))
    text = run_programs(rec, memory, [last], rank=0, num_ranks=W)
    assert "xi64>" in text
    close(box(memory[("c", 0)], n, m0, 16, 0, n), want)
    for i in range(1, W):  # peer rank i keeps this rank's tiles in slab W - 1 - i
        slab = W - 1 - i
        close(box(memory[("inbox", i)], n, slab * m + m0, 16, 0, n), want)
        assert memory[("pushed", i)][slab * g.tiles_m + last] == 1


def test_gemm_keeps_i32_offsets_for_ordinary_sizes():
    rec = gemm.make_record(8192, 4096, 14336, push={"arg": "inbox", "pad": "pushed", "slabs": 3})
    assert "xi64>" not in emit(rec)


def test_gemm_refuses_more_tiles_than_i32_counts():
    with pytest.raises(VerificationError, match="gemm template: tiles .* 32-bit"):
        gemm.make_record(MAX_DIM, MAX_DIM, 16, block_m=16, block_n=16, block_k=16, persistent=False)
    with pytest.raises(VerificationError, match="gemm template: push slots .* 32-bit"):
        gemm.make_record(MAX_DIM, 4096, 16, push={"arg": "inbox", "pad": "pushed", "slabs": 1023}, block_m=128,
                         block_n=256, block_k=16, persistent=True)
    with pytest.raises(VerificationError, match="gemm template: gather counts .* 32-bit"):
        gemm.make_record(MAX_DIM, 256, MAX_DIM, wait={"arg": "ready", "rows_per_slot": MAX_DIM // 2},
                         gather={"arg": "x"}, rows_per_rank=MAX_DIM // 2, tile_order="rank_rotated", block_m=128,
                         block_n=256, block_k=64, persistent=True)


# ------------------------------------------------------------------------------------------------ reduce

def test_reduce_push_inbox_slab_rows_past_2_31():
    """The one-shot all-reduce by push on 4 ranks over 2**30 x 16: the last tile's stores into slab 2 of rank 1's
    inbox, and its sum of the own inbox slabs 0..2, both at rows past 2**31."""
    W, rows, cols = 4, MAX_DIM, 16
    rec = reduce.make_record(rows, cols, dtype="bf16", block_m=256, block_n=16, grid=rows // 256,
                             publish={"arg": "published", "value_arg": "epoch", "copy_from": "x", "push": W - 1})
    tiles = rows // 256
    last = tiles - 1
    r0 = last * 256
    memory = {("dst", 0): huge(rows * cols, "bf16"), ("x", 0): huge(rows * cols, "bf16")}
    for q in range(W):
        memory[("src", q)] = huge((W - 1) * rows * cols, "bf16")
        memory[("published", q)] = huge((W - 1) * tiles, "i32")
    x = fill(memory[("x", 0)], cols, r0, 256, 0, cols, "bf16")
    slabs = [fill(memory[("src", 0)], cols, j * rows + r0, 256, 0, cols, "bf16") for j in range(W - 1)]
    memory[("published", 0)][last * (W - 1):(last + 1) * (W - 1)] = 5  # the peers' pushes of the tile landed
    text = run_programs(rec, memory, [last], rank=0, num_ranks=W, scalars={"epoch": 5})
    assert "xi64>" in text
    for i in range(1, W):
        close(box(memory[("src", i)], cols, (W - 1 - i) * rows + r0, 256, 0, cols), x)
        assert memory[("published", i)][last * (W - 1) + W - 1 - i] == 5
    close(box(memory[("dst", 0)], cols, r0, 256, 0, cols), round_to("bf16", x + sum(slabs)))


def test_chunk_templates_refuse_more_tiles_than_i32_counts():
    with pytest.raises(VerificationError, match="reduce template: tiles .* 32-bit"):
        reduce.make_record(MAX_DIM, MAX_DIM, block_m=16, block_n=16)
    with pytest.raises(VerificationError, match="copy template: tiles .* 32-bit"):
        copy.make_record(MAX_DIM, MAX_DIM, block_m=16, block_n=16)
    with pytest.raises(VerificationError, match=r"reduce template: src's rows \(src_row 3221225472 \+ 16 \+ a tile\)"):
        reduce.make_record(16, 16, src_row=3 * MAX_DIM)


# ---------------------------------------------------------------------------------------------------- copy

def test_copy_of_an_8_gb_region_moves_its_last_tile():
    rec = copy.make_record(BIG, BIG, dtype="bf16", src_row="arg:src_row", dst_row="arg:dst_row", block_m=32,
                           block_n=256, grid=(BIG // 32) * (BIG // 256))
    last = rec["grid"] - 1
    r0, c0 = last // (BIG // 256) * 32, last % (BIG // 256) * 256
    memory = {("src", 1): huge(BIG * BIG, "bf16"), ("dst", 0): huge(BIG * BIG, "bf16")}
    tile = fill(memory[("src", 1)], BIG, r0, 32, c0, 256, "bf16")
    text = run_programs(rec, memory, [last], rank=0, num_ranks=2,
                        scalars={"peer": 1, "src_row": 0, "dst_row": 0, "src_col": 0, "dst_col": 0})
    assert "xi64>" in text
    close(box(memory[("dst", 0)], BIG, r0, 32, c0, 256), tile)


# --------------------------------------------------------------------------------------------- elementwise

def test_elementwise_on_an_8_gb_tensor_computes_its_last_tile():
    rec = elementwise.make_record("relu", 1, [BIG, BIG], "bf16", num_sms=BIG * BIG // 1024, waves=1)
    last = rec["grid"] - 1
    r0, c0 = last // (BIG // 1024), last % (BIG // 1024) * 1024
    x, y = huge(BIG * BIG, "bf16"), huge(BIG * BIG, "bf16")
    tile = fill(x, BIG, r0, 1, c0, 1024, "bf16")
    text = run_programs(rec, {("x0", 0): x, ("y", 0): y}, [last])
    assert "xi64>" in text
    close(box(y, BIG, r0, 1, c0, 1024), np.maximum(tile, 0))


def test_elementwise_keeps_i32_offsets_below_2_31_and_refuses_uncountable_tiles():
    assert "xi64>" not in emit(elementwise.make_record("gelu", 1, [8192, 14336], "bf16"))
    with pytest.raises(VerificationError, match="elementwise template: tiles .* 32-bit"):
        elementwise.make_record("relu", 1, [MAX_DIM, MAX_DIM], "bf16")


# -------------------------------------------------------------------------------------------- grouped_gemm

def test_grouped_gemm_with_an_output_past_2_31_elements():
    """262144 tokens x 16384 columns (a MoE layer's up-projection over a large batch): c's offsets pass 2**31."""
    t, k, n, e = 1 << 18, 16, 1 << 14, 2
    tiles = (t // 64) * (n // 128)
    rec = grouped_gemm.make_record(t, k, n, e, block_m=64, block_n=128, block_k=16, loads="pointer", num_sms=tiles,
                                   waves=1)
    a, c = huge(t * k, "bf16"), huge(t * n, "bf16")
    b = random("bf16", (e, k, n), RNG)
    sizes = np.array([t - 40, 40], np.int32)  # group 1: the last 40 rows, a row slot of its own
    boxes = grouped_gemm.tile_boxes(rec, sizes)
    c0 = n - 128
    last = boxes.index((1, t - 40, 40, c0, 128))  # group 1's tile in the last column block
    a_tile = fill(a, k, t - 40, 40, 0, k, "bf16")
    text = run_programs(rec, {("a", 0): a, ("b", 0): b.ravel(), ("sizes", 0): sizes, ("c", 0): c},
                        [last % rec["grid"]])
    assert "xi64>" in text
    close(box(c, n, t - 40, 40, c0, 128), round_to("bf16", a_tile @ b[1][:, c0:c0 + 128]))


def test_grouped_gemm_tma_needs_i32_descriptor_rows():
    """b is one descriptor of e * k rows (TMA shapes are i32): past 2**31 rows the record takes pointer loads,
    and refuses TMA asked for."""
    e, k = 1 << 11, 1 << 21
    assert grouped_gemm.make_record(128, k, 128, e)["loads"] == "pointer"
    with pytest.raises(VerificationError, match="grouped_gemm template: .*TMA"):
        grouped_gemm.make_record(128, k, 128, e, loads="tma")


def test_grouped_gemm_refuses_more_groups_than_its_slot_vectors_hold():
    with pytest.raises(VerificationError, match="grouped_gemm template: e = 4096 groups.* at most 4095"):
        grouped_gemm.make_record(128, 64, 128, 4096)


# ------------------------------------------------------------------------------------------------ interp

def test_interp_wraps_i32_like_the_gpu():
    with ditron_context():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            f, (out,) = T.func("k", [("out", T.ptr("i32"), {})])
            with ir.InsertionPoint(f.regions[0].blocks[0]):
                big = T.mul(T.program_id(0), 1 << 30)  # 2 * 2**30 wraps to -2**31
                T.store(T.addptr(out, 0), big)
                T.store(T.addptr(out, 1), T.int_cast(T.mul(T.int_cast(T.program_id(0), T.i64()),
                                                           T.c(3 << 30, T.i64())), T.i32()))
                T.ret()
        memory = {("out", 0): np.zeros(2, np.int32)}
        interp.run(f, memory, grid=3, arg_names=["out"], programs=[2])
        assert memory[("out", 0)].tolist() == [-I32_LIMIT, -I32_LIMIT]  # 6 * 2**30 truncated to i32
        with pytest.raises(OverflowError, match="does not fit in i32"):
            with ir.InsertionPoint(module.body):
                T.c(I32_LIMIT)


def test_interp_refuses_a_loop_whose_last_step_overflows():
    with ditron_context():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            f, (out,) = T.func("k", [("out", T.ptr("i32"), {})])
            with ir.InsertionPoint(f.regions[0].blocks[0]):
                with T.For(T.c(I32_LIMIT - 100), T.c(I32_LIMIT - 1), 64):  # steps to 2**31 + 28
                    T.store(out, T.c(1))
                T.ret()
        with pytest.raises(OverflowError, match="induction variable's last step overflows i32"):
            interp.run(f, {("out", 0): np.zeros(1, np.int32)}, grid=1, arg_names=["out"])
