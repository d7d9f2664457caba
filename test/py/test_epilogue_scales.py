"""fp8 GEMMs with scales: the GEMM epilogue's "row" ([m] over C's rows: a per-row scale of A) and "scalar" ([1]:
a per-tensor scale) operands next to "bias" ([n]: a per-column scale of B), in the emitted IR (kernels/interp.py)
against tiles() and numpy, at uneven shapes and under every K schedule; the adds of rows / scalars that move before
a sum over the ranks (own_rows, first_rank) at W = 2, 3; the elementwise template's row / scalar operands; and the
task level end to end (verifier, partition, reference, fusion, device lowering, simulator) at W = 1, 2, 3."""

import numpy as np
import pytest

import ditron.frontend as dt
from ditron.errors import VerificationError
from ditron.kernels import gemm
from ditron.kernels.numerics import random, round_to, storage_dtype
from ditron.sim import simulate, task_reference
from test_collectives import lower
from kernel_checks import RNG_SEED, SMALL, close, emit, gemm_lds, gemm_memory, run_both, triton_parse

CONFIGS = {
    "pointer-plain": dict(loads="pointer", store="pointer", persistent=False, epilogue_split=1, flatten=False),
    "tma-persistent-split": dict(loads="tma", store="tma", persistent=True, epilogue_split=2, flatten=True),
    "splitk3": dict(loads="pointer", store="pointer", persistent=False, split_k=3, epilogue_split=1,
                    flatten=False, num_sms=100),
    "streamk2": dict(loads="pointer", store="pointer", persistent=True, stream_k=2, epilogue_split=1,
                     flatten=False, num_sms=4),
    # the tile's rows as two dots (m_split: precise fp8's 256-row tiles), persistent and under split-K
    "tma-msplit": dict(loads="tma", store="tma", persistent=True, epilogue_split=2, flatten=True, m_split=2),
    "tma-msplit-splitk3": dict(loads="tma", store="pointer", persistent=False, split_k=3, epilogue_split=1,
                               flatten=False, num_sms=100, m_split=2),
}
SCALES = {"per-row": ("row", "bias"), "per-tensor": ("scalar", "scalar"), "row-then-scalar": ("row", "scalar")}


def _scale(kind: str, m: int, n: int, rng) -> np.ndarray:
    size = {"row": m, "bias": n, "scalar": 1}[kind]
    return rng.uniform(0.25, 4.0, size).astype(np.float32)


def _broadcast(kind: str, x: np.ndarray) -> np.ndarray:
    return x[None, :] if kind == "bias" else x[:, None]


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("scales", sorted(SCALES))
def test_fp8_gemm_scales_ir_matches_tiles_and_numpy(config, scales):
    """C = bf16((A @ B) * sa * sb): the scales multiply the fp32 accumulator (its full K sum, under split-K and
    stream-K too) before the one rounding to bf16; ragged rows and columns (70 x 50, tiles of 32)."""
    _check_scaled(config, scales, "fp8e4m3")


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("fast_accum", [False, True])
def test_e5m2_gemm_scales_ir_matches_tiles_and_numpy(config, fast_accum):
    """The same with e5m2 operands (per-row scales), in either accumulation mode."""
    _check_scaled(config, "per-row", "fp8e5m2", fast_accum)


def _check_scaled(config, scales, dtype, fast_accum=False):
    m, n, k = 70, 48 if config.startswith("tma") else 50, 208  # TMA: 16-byte rows
    kinds = SCALES[scales]
    steps = [{"fn": "mul", "arg": f"s{i}", "operand": kind, "dtype": "fp32"} for i, kind in enumerate(kinds)]
    rec = gemm.make_record(m, n, k, name=f"gemm_{dtype}_{config}_{scales}".replace("-", "_"), in_dtype=dtype,
                           out_dtype="bf16", epilogue=steps, fast_accum=fast_accum, **dict(SMALL, **CONFIGS[config]))
    rng = np.random.default_rng(RNG_SEED)
    mem, ref = gemm_memory(rec, rng)
    lds = gemm_lds(rec)
    want = ref.astype(np.float32)
    for s in steps:
        x = _scale(s["operand"], m, n, rng)
        mem[(s["arg"], 0)] = x
        lds[s["arg"]] = 1 if s["operand"] == "row" else None  # a row operand is an [m, 1] column
        want = want * _broadcast(s["operand"], x)
    mem_ir, mem_tiles = run_both(rec, mem, lds)
    c_ir = mem_ir[("c", 0)].reshape(m, rec["ldc"])[:, :n]
    close(c_ir, round_to("bf16", want), tol=2e-2)
    close(mem_tiles[("c", 0)].reshape(m, rec["ldc"])[:, :n], c_ir)
    # scaling the bf16-rounded product instead would be off by up to a bf16 ulp times the scales
    triton_parse(emit(rec, lower="cuda:90"))


@pytest.mark.parametrize("W", [2, 3])
def test_row_and_scalar_adds_before_a_sum_match_tiles(W):
    """Rank r adds its own [R] row vector and [1] scalar to the rows it owns (own_rows R = 20, row tiles of 16
    straddling the ranks' rows) and rank 0 alone a replicated [m] row vector (first_rank): summed over the ranks
    each row got its owner's terms and the replicated one once."""
    R, n, k = 20, 44, 32
    m = W * R
    steps = [{"fn": "add", "arg": "row", "operand": "row", "dtype": "fp32", "own_rows": R},
             {"fn": "add", "arg": "one", "operand": "scalar", "dtype": "bf16", "own_rows": R, "acc": 1},
             {"fn": "add", "arg": "rep", "operand": "row", "dtype": "bf16", "first_rank": True}]
    rec = gemm.make_record(m, n, k, loads="pointer", store="pointer", persistent=True, epilogue_split=1,
                           flatten=False, out_dtype="fp32", epilogue=steps, **dict(SMALL, block_m=16))
    rng = np.random.default_rng(RNG_SEED)
    a = random("bf16", (m * k,), rng)
    bs = [random("bf16", (k * n,), rng) for _ in range(W)]
    rows = [rng.standard_normal(R).astype(np.float32) for _ in range(W)]
    ones = [random("bf16", (1,), rng) for _ in range(W)]
    rep = random("bf16", (m,), rng)
    mem = {}
    for r in range(W):
        mem[("a", r)], mem[("b", r)], mem[("c", r)] = a, bs[r], np.zeros(m * n, np.float32)
        mem[("row", r)], mem[("one", r)], mem[("rep", r)] = rows[r], ones[r], rep.copy()
    lds = gemm_lds(rec) | {"row": 1, "one": None, "rep": 1}
    mem_ir, mem_tiles = run_both(rec, mem, lds, ranks=range(W), num_ranks=W)
    a32 = a.reshape(m, k).astype(np.float32)
    for r in range(W):
        want = a32 @ bs[r].reshape(k, n).astype(np.float32)
        want[r * R:(r + 1) * R] += rows[r][:, None] + ones[r].astype(np.float32)
        if r == 0:
            want += rep.astype(np.float32)[:, None]
        close(mem_ir[("c", r)].reshape(m, n), want)
        close(mem_tiles[("c", r)], mem_ir[("c", r)])
    triton_parse(emit(rec, lower="cuda:90"))


@pytest.mark.parametrize("steps, match", [
    ([{"fn": "mul", "arg": "s", "operand": "column", "dtype": "fp32"}], "operand \\(one of bias, row, scalar"),
    ([{"fn": "mul", "arg": "s", "operand": "row", "dtype": "fp32", "own_rows": 8}], "only an add"),
    ([{"fn": "mul", "arg": "s", "operand": "scalar", "dtype": "fp8e4m3"}], "dtype \\(one of bf16, fp16, fp32"),
])
def test_bad_scale_steps_are_refused(steps, match):
    rec = gemm.make_record(64, 64, 64, in_dtype="fp8e4m3", **SMALL)
    rec["epilogue"] = steps
    with pytest.raises(VerificationError, match=match):
        gemm.check(rec)


@pytest.mark.parametrize("broadcast", ["row", "scalar"])
def test_elementwise_row_and_scalar_operands_match_tiles_and_numpy(broadcast):
    from ditron.kernels import elementwise
    rows, cols = 37, 70
    rec = elementwise.make_record("mul", 2, [rows, cols], "fp32", name=f"ew_{broadcast}", block=256, num_sms=2,
                                  waves=1, broadcast=broadcast)
    rng = np.random.default_rng(RNG_SEED)
    x0 = random("fp32", (rows, cols), rng)
    x1 = random("fp32", (rows if broadcast == "row" else 1,), rng)
    mem = {("x0", 0): x0.ravel().copy(), ("x1", 0): x1.copy(), ("y", 0): np.zeros(rows * cols,
                                                                                storage_dtype("fp32"))}
    mem_ir, mem_tiles = run_both(rec, mem, {"x0": cols, "x1": 1 if broadcast == "row" else None, "y": cols})
    close(mem_ir[("y", 0)].reshape(rows, cols), x0.reshape(rows, cols) * x1[:, None], tol=1e-5)
    close(mem_tiles[("y", 0)], mem_ir[("y", 0)])
    triton_parse(emit(rec, lower="cuda:90"))
    with pytest.raises(VerificationError, match="one kind"):
        elementwise.check(dict(rec, bias=True))


# ------------------------------------------------------------------------------ the task level, end to end

def _scaled(Wn: int, M: int, K: int, N: int, per_row: bool, dtype: str = "f8E4M3FN",
            fast_accum: bool = False) -> dt.Program:
    """An fp8 GEMM of rows sharded over tp (B replicated), scaled per row and per column (or per tensor)."""
    sa_shape = (M, 1) if per_row else (1,)
    sb_shape = (N,) if per_row else (1,)
    sa_sharding = dt.shard(0, "tp", padded=True) if per_row else dt.replicated

    @dt.program(dt.Mesh(tp=Wn))
    def fp8_linear(a: dt.Tensor[(M, K), dtype, dt.shard(0, "tp", padded=True)],
                   b: dt.Tensor[(K, N), dtype, dt.replicated],
                   sa: dt.Tensor[sa_shape, "f32", sa_sharding],
                   sb: dt.Tensor[sb_shape, "f32", dt.replicated]) -> dt.Sharded[dt.shard(0, "tp", padded=True)]:
        return dt.cast(dt.matmul(a, b, out_dtype="f32", fast_accum=fast_accum) * sa * sb, "bf16")
    return fp8_linear


@pytest.mark.parametrize("per_row", [True, False], ids=["per-row", "per-tensor"])
@pytest.mark.parametrize("Wn", [1, 2, 3])
def test_fp8_scaled_gemm_fuses_and_simulates_at_uneven_shapes(Wn, per_row):
    M, K, N = 13 * Wn + 1, 64, 40  # M not a multiple of the mesh: padded rows
    text = _scaled(Wn, M, K, N, per_row).to_mlir()
    device = lower(text, "ditron-device")
    assert device.count('template = "elementwise"') == 0, device
    assert device.count('fn = "mul"') == 2 and ('operand = "row"' in device) == per_row
    result = simulate(device, world_size=Wn, seed=2, calls=2, reference=task_reference(text))
    assert result.ok, result.summary()


@pytest.mark.parametrize("fast_accum", [False, True], ids=["precise", "fast-accum"])
def test_e5m2_and_fast_accum_reach_the_gemm_record_and_simulate(fast_accum):
    """e5m2 operands at the task level, and matmul's fast_accum: kept by partition, it reaches the GEMM record
    (and its tt.dot: kernels/gemm's imprecise_acc) through the device lowering."""
    text = _scaled(2, 27, 64, 40, True, dtype="f8E5M2", fast_accum=fast_accum).to_mlir()
    assert ("fast_accum = true" in text) == fast_accum
    device = lower(text, "ditron-device")
    assert 'in_dtype = "fp8e5m2"' in device and ("fast_accum = true" in device) == fast_accum, device
    result = simulate(device, world_size=2, seed=4, calls=1, reference=task_reference(text))
    assert result.ok, result.summary()


def test_fast_accum_of_a_bf16_matmul_is_a_trace_error():
    @dt.program(dt.Mesh(tp=1))
    def bad(a: dt.Tensor[(16, 32), "bf16", dt.replicated], b: dt.Tensor[(32, 8), "bf16", dt.replicated]):
        return dt.matmul(a, b, fast_accum=True)
    with pytest.raises(dt.TraceError, match="fast_accum is an fp8 accumulation mode; bf16 operands"):
        bad.to_mlir()


@pytest.mark.parametrize("per_row", [True, False], ids=["per-row", "per-tensor"])
def test_unfused_scales_are_elementwise_kernels_computing_the_reference(per_row):
    """Without the fusion the row / scalar muls are elementwise kernels of their own, and still right."""
    text = _scaled(2, 27, 64, 40, per_row).to_mlir()
    device = lower(text, "ditron-partition,ditron-canonicalize,ditron-tile,ditron-lower-task-to-device,"
                         "ditron-schedule-overlap")
    # kernels: mul by the row vector, mul by the bias, the cast; per tensor one scalar mul kernel launched twice
    assert device.count('template = "elementwise"') == (3 if per_row else 2)
    assert device.count("row = true" if per_row else "scalar = true") == 1
    result = simulate(device, world_size=2, seed=3, calls=1, reference=task_reference(text))
    assert result.ok, result.summary()


def test_frontend_row_vector_of_the_wrong_length_is_a_located_trace_error():
    with pytest.raises(dt.TraceError, match=r"operand shapes differ: \(48, 40\) and \(40, 1\)") as err:
        @dt.program(dt.Mesh(tp=1))
        def bad(x: dt.Tensor[(48, 32), "f8E4M3FN"], w: dt.Tensor[(32, 40), "f8E4M3FN"],
                s: dt.Tensor[(40, 1), "f32"]):
            return dt.matmul(x, w, out_dtype="f32") * s
        bad.to_mlir()
    assert "test_epilogue_scales.py:" in str(err.value)


@pytest.mark.parametrize("sa_sharded", [True, False], ids=["sa-sharded", "sa-replicated"])
def test_row_scale_of_an_ag_gemm(sa_sharded):
    """AG+GEMM (A's rows gathered), W = 3, ragged rows: the [M, 1] scale, replicated or sharded like A's rows (then
    partition all-gathers it at the function's start, before the matmul), is read by the waiting GEMM: both scales
    and the cast fused, and the result right."""
    W, M, K, N = 3, 13 * 3, 64, 48
    sa_spec = dt.shard(0, "tp") if sa_sharded else dt.replicated

    @dt.program(dt.Mesh(tp=W))
    def f(a: dt.Tensor[(M, K), "f8E4M3FN", dt.shard(0, "tp")], b: dt.Tensor[(K, N), "f8E4M3FN", dt.shard(1, "tp")],
          sa: dt.Tensor[(M, 1), "f32", sa_spec],
          sb: dt.Tensor[(N,), "f32", dt.shard(0, "tp")]) -> dt.Sharded[dt.shard(1, "tp")]:
        return dt.cast(dt.matmul(a, b, out_dtype="f32") * sa * sb, "bf16")
    text = f.to_mlir()
    device = lower(text, "ditron-device")
    assert device.count('template = "elementwise"') == 0 and 'operand = "row"' in device and "wait = {" in device
    result = simulate(device, world_size=W, seed=1, calls=1, reference=task_reference(text))
    assert result.ok, result.summary()


def test_row_parallel_fp8_scales_fuse_into_each_ranks_partial():
    """A sharded over K: the matmul is a partial sum; partition keeps the scales' muls before the all-reduce (a
    product by a replicated factor commutes with the sum), so the GEMM scales each rank's partial in its epilogue;
    the cast after the sum stays a kernel. Simulated at W = 2 against the reference."""
    W, M, K, N = 2, 45, 64, 48

    @dt.program(dt.Mesh(tp=W))
    def f(a: dt.Tensor[(M, K), "f8E4M3FN", dt.shard(1, "tp")], b: dt.Tensor[(K, N), "f8E4M3FN", dt.shard(0, "tp")],
          sa: dt.Tensor[(M, 1), "f32"], sb: dt.Tensor[(N,), "f32"]) -> dt.Sharded[dt.replicated]:
        return dt.cast(dt.matmul(a, b, out_dtype="f32") * sa * sb, "bf16")
    text = f.to_mlir()
    marked = f.to_mlir("ditron-partition,ditron-canonicalize,ditron-fuse-overlap,ditron-fuse-epilogue")
    assert marked.count("ditron.epilogue") == 3  # the matmul and its two muls; the all_reduce, then the cast
    device = lower(text, "ditron-device")
    assert device.count('template = "elementwise"') == 1 and 'operand = "row"' in device
    result = simulate(device, world_size=W, seed=1, calls=1, reference=task_reference(text))
    assert result.ok, result.summary()


def _local(W: int, args: str, res: str, body: str) -> str:
    return (f'module attributes {{ditron.mesh = {{axes = ["tp"], shape = array<i64: {W}>}}}} {{\n'
            f'  func.func @f({args}) -> {res} attributes {{ditron.view = "local"}} {{\n{body}\n  }}\n}}\n')


@pytest.mark.parametrize("coll, tile", [("reduce_scatter", "reduce-scatter=epilogue engine=sm"),
                                        ("reduce_scatter", "reduce-scatter=reduce_kernel"),
                                        ("reduce_scatter", "reduce-scatter=push_sum engine=sm"),
                                        ("all_reduce", "all-reduce=one_shot"),
                                        ("all_reduce", "all-reduce=push_sum engine=sm")])
@pytest.mark.parametrize("W", [2, 3])
def test_row_and_scalar_adds_after_a_reduction_fuse_and_simulate(coll, tile, W):
    """After GEMM+RS rank r adds its own [R, 1] row vector and [1] scalar to its rows (own_rows); after GEMM+AR a
    replicated [M, 1] and [1] are added by rank 0 (first_rank); the mul by a row vector after it stays a kernel."""
    R, K, N = 64, 32, 48  # the epilogue reduction needs whole row tiles per shard
    big, rows = W * R, (R if coll == "reduce_scatter" else W * R)
    t = lambda *s, e="bf16": f"tensor<{'x'.join(map(str, s))}x{e}>"  # noqa: E731
    out = t(rows, N)
    dim = "dim = 0 : i64, " if coll == "reduce_scatter" else ""
    rep = " {ditron.sharding = {dims = [[], []]}}"
    text = _local(W, f"%x: {t(big, K)}, %w: {t(K, N)}, %v: {t(rows, 1)}{rep}, "
                     f"%s: {t(1)} {{ditron.sharding = {{dims = [[]]}}}}", out, f'''
    %p = "ditron_task.matmul"(%x, %w) : ({t(big, K)}, {t(K, N)}) -> {t(big, N)}
    %y = "ditron_task.{coll}"(%p) {{axis = "tp", {dim}reduce = "sum"}} : ({t(big, N)}) -> {out}
    %a = "ditron_task.elementwise"(%y, %v) {{fn = "add"}} : ({out}, {t(rows, 1)}) -> {out}
    %b = "ditron_task.elementwise"(%a, %s) {{fn = "add"}} : ({out}, {t(1)}) -> {out}
    %c = "ditron_task.elementwise"(%b, %v) {{fn = "mul"}} : ({out}, {t(rows, 1)}) -> {out}
    return %c : {out}''')
    marked = lower(text, "ditron-fuse-overlap,ditron-fuse-epilogue")
    assert marked.count("step = ") == 2, marked
    device = lower(marked, f"ditron-tile{{{tile}}},ditron-lower-task-to-device,ditron-schedule-overlap")
    assert device.count("own_rows" if coll == "reduce_scatter" else "first_rank = true") == 2
    assert device.count('template = "elementwise"') == 1
    result = simulate(device, world_size=W, seed=4, calls=2, reference=task_reference(text))
    assert result.ok, result.summary()
