"""CPU tests of the grouped GEMM template (ditron.kernels.grouped_gemm) and the GEMM epilogues (bias, activations,
residual, casts, the add-once before a sum over ranks) and the elementwise template: IR, ``tiles()`` and numpy agree."""
from __future__ import annotations

import numpy as np
import pytest
from mlir import ir

from ditron.dialects import ditron_context
from ditron.errors import VerificationError
from ditron.kernels import KernelRecord, expanded, gemm, interp
from ditron.kernels.numerics import random, round_to, storage_dtype
from tolerances import assert_sum_close
from kernel_checks import RNG_SEED, SMALL, emit, triton_parse, run_both, close, gemm_memory, rank_products, gemm_lds


# ------------------------------------------------------------------------------------------------ grouped GEMM

GROUPED_CASES = {  # t, k, n, sizes (their sum at most t), dtype, tile
    "ragged-empty-group-rows-past-the-end": (70, 40, 50, [20, 0, 45], "bf16", (16, 32, 16)),
    "fp32-one-group-every-row": (33, 16, 16, [33, 0], "fp32", (16, 16, 16)),
    "groups-inside-one-tile": (64, 32, 48, [5, 17, 16, 10], "bf16", (32, 16, 16)),
    "fp16-in-fp32-out-i64-sizes": (40, 24, 20, [7, 0, 0, 30], "fp16", (16, 16, 16)),
    # TMA loads whose last K step runs past k: a reads zeros there, b the next group's rows (which add nothing)
    "tma-k-step-past-k": (50, 40, 32, [10, 25, 15], "bf16", (16, 16, 32)),
    # skewed routing: empty groups first and between, one group holding almost every row, many groups
    "skewed-many-groups-empty-first": (61, 16, 32, [0, 0, 50] + [0] * 20 + [3, 0, 1] + [0] * 10, "bf16",
                                       (16, 16, 16)),
    # sizes past t are clamped to the rows a has, a negative size counts as 0
    "sizes-past-t-and-negative": (30, 16, 16, [12, -5, 40, 7], "bf16", (16, 16, 16)),
    # an expert-parallel MoE's received rows: W = 3 sources x 2 experts, group g times b[g % 2], empty groups
    "cycled-weights-w3": (60, 32, 32, [4, 0, 17, 9, 0, 21], "bf16", (16, 16, 16), dict(b_groups=2)),
    # act(gate) * up: b [e, k, 2n], gate columns first; ragged n (the gate tile's last columns read up's)
    "gated-silu-pointer": (50, 40, 50, [20, 0, 25], "bf16", (16, 32, 16), dict(gated="silu")),
    "gated-silu-tma-cycled": (70, 32, 48, [0, 30, 5, 0, 20, 11], "bf16", (16, 32, 16),
                              dict(gated="silu", b_groups=3)),
}


def _case(name):
    t, k, n, sizes, dtype, tile, *extra = GROUPED_CASES[name]
    return t, k, n, sizes, dtype, tile, (extra[0] if extra else {})


def test_grouped_gemm_cases_cover_both_loads():
    from ditron.kernels import grouped_gemm
    loads = {grouped_gemm.make_record(t, k, n, len(sizes), dtype=dtype, **extra)["loads"]
             for t, k, n, sizes, dtype, _, extra in map(_case, GROUPED_CASES)}
    assert loads == {"tma", "pointer"}  # 16-byte row strides or not


@pytest.mark.parametrize("case", sorted(GROUPED_CASES))
def test_grouped_gemm_ir_and_tiles_match_numpy(case):
    """The emitted IR (interpreted) and tiles()' compute both give each row its own group's product, rows past the
    last group zero (group g times b[g % b_groups]; gated: silu(gate) * up); Triton parses the kernel for both
    vendors."""
    from ditron.kernels import grouped_gemm
    t, k, n, sizes, dtype, (bm, bn, bk), extra = _case(case)
    out_dtype, sizes_dtype = ("fp32", "i64") if dtype == "fp16" else (dtype, "i32")
    rec = grouped_gemm.make_record(t, k, n, len(sizes), dtype=dtype, out_dtype=out_dtype, sizes_dtype=sizes_dtype,
                                   block_m=bm, block_n=bn, block_k=bk, num_sms=2, waves=1, **extra)
    gated, e_b = extra.get("gated"), extra.get("b_groups", len(sizes))
    rng = np.random.default_rng(RNG_SEED)
    a, b = random(dtype, (t, k), rng), random(dtype, (e_b, k, 2 * n if gated else n), rng)
    # each row's product with its group's b, exact (float64), and a bound of its terms' magnitudes
    exact, magnitude, start = np.zeros((t, n)), np.zeros((t, n)), 0
    for g, size in enumerate(sizes):
        end = min(start + max(size, 0), t)
        rows, w = a[start:end].astype(np.float64), b[g % e_b].astype(np.float64)
        if gated:  # silu(G) * U: |silu'| < 1.1, |silu(G)| <= |G| + 1; G, U, silu(G) and the product each rounded
            gate, up = rows @ w[:, :n], rows @ w[:, n:]     # to out_dtype: four roundings of the bound's one
            mag_gate, mag_up = np.abs(rows) @ np.abs(w[:, :n]), np.abs(rows) @ np.abs(w[:, n:])
            exact[start:end] = gate / (1 + np.exp(-gate)) * up
            magnitude[start:end] = 4 * ((np.abs(gate) + mag_gate + 1) * mag_up + 1.1 * mag_gate * np.abs(up))
        else:
            exact[start:end] = rows @ w
            magnitude[start:end] = np.abs(rows) @ np.abs(w)
        start = end

    def check(got):  # the kernel adds K steps in its own order: within fp32 accumulation + output rounding
        assert_sum_close(got, exact, magnitude, k, out_dtype)
    group_sizes = np.array(sizes, np.int64 if sizes_dtype == "i64" else np.int32)
    mem = {("a", 0): a.ravel().copy(), ("b", 0): b.ravel().copy(), ("sizes", 0): group_sizes,
           ("c", 0): np.full(t * n, 7, storage_dtype(out_dtype))}
    with ditron_context():
        module = ir.Module.create()
        func = grouped_gemm.build(rec, ip=ir.InsertionPoint(module.body))
        assert KernelRecord.of(func) == rec
        interp.run(func, mem, grid=grouped_gemm.grid(rec)[0])
        del module, func
    check(mem[("c", 0)].reshape(t, n))
    views = {"a": a, "b": b, "sizes": group_sizes, "c": np.full((t, n), 7, np.float32)}
    steps = grouped_gemm.tiles(rec, rank=0, num_ranks=1, scalars={})
    written = np.zeros((t, n), int)

    def view(r):
        return views[r.arg][tuple(slice(o, o + s) for o, s in zip(r.offsets, r.sizes))]
    for program in steps:
        for step in expanded(program, view):
            step.compute(view)
            (c,) = step.writes
            written[c.offsets[0]:c.offsets[0] + c.sizes[0], c.offsets[1]:c.offsets[1] + c.sizes[1]] += 1
            if step.reads:  # a tile of group g reads only its group's rows of a and b[g % b_groups] (twice gated)
                a_reg, *b_regs = step.reads
                assert len(b_regs) == (2 if gated else 1)
                rows = np.arange(a_reg.offsets[0], a_reg.offsets[0] + a_reg.sizes[0])
                groups = grouped_gemm.group_of_rows(group_sizes, rows)
                assert all((groups % e_b == r.offsets[0]).all() for r in b_regs)
                if gated:
                    assert b_regs[1].offsets[2] == b_regs[0].offsets[2] + n
    assert (written == 1).all()  # every element of c written once: tiles never straddle or overlap
    check(views["c"])
    for target in ("cuda:90", "hip:gfx942"):
        triton_parse(emit(rec, lower=target), ("cuda", 90, 32) if target == "cuda:90" else ("hip", "gfx942", 64))


@pytest.mark.parametrize("change,match", [
    (dict(block_m=8), "block_m must be a power of two >= 16"), (dict(sizes_dtype="f32"), "sizes_dtype 'f32'"),
    (dict(e=0), "field 'e' must be a positive integer"), (dict(dtype="fp8e4m3"), "dtype 'fp8e4m3' is not supported"),
    (dict(n=33, loads="tma"), "TMA loads need 16-byte row strides"), (dict(loads="cp.async"), "loads 'cp.async'"),
    (dict(gated="gelu"), "gated 'gelu' is not supported"), (dict(b_groups=3), "e = 2 groups do not cycle"),
])
def test_grouped_gemm_rejects_bad_records(change, match):
    from ditron.kernels import grouped_gemm
    rec = grouped_gemm.make_record(64, 32, 32, 2)
    rec.update(change)
    with pytest.raises(VerificationError, match=match):
        grouped_gemm.check(rec)


# ------------------------------------------------------------------------------------------ GEMM epilogues

EPILOGUE_CASES = {
    # bias + gelu, then a cast to fp16 on a bf16 GEMM stored as fp32
    "pointer-bias-gelu-cast": (dict(m=70, n=50, k=40, loads="pointer", store="pointer", persistent=False,
                                    out_dtype="fp32", epilogue_split=1, flatten=False),
                               [("add", "bias", 0), ("gelu",), ("cast", "fp16")]),
    "tma-persistent-residual-silu": (dict(m=70, n=56, k=40, loads="tma", store="tma", persistent=True,
                                          epilogue_split=2, flatten=True),
                                     [("silu",), ("add", "full", 1)]),
    "splitk3-bias-silu-mul": (dict(m=70, n=40, k=200, loads="pointer", store="pointer", persistent=False,
                                   split_k=3, epilogue_split=1, flatten=False, num_sms=100),
                              [("add", "bias", 0), ("silu_mul", "full", 1)]),
    "streamk-bias-relu": (dict(m=70, n=50, k=200, loads="pointer", store="pointer", persistent=True, stream_k=2,
                               epilogue_split=1, flatten=False, num_sms=4),
                          [("add", "bias", 1), ("relu",)]),
}


def _epilogue_steps(spec):
    steps = []
    for i, s in enumerate(spec):
        if s[0] == "cast":
            steps.append({"fn": "cast", "dtype": s[1]})
        elif len(s) == 1:
            steps.append({"fn": s[0]})
        else:
            steps.append({"fn": s[0], "arg": f"ep{i}", "operand": s[1], "dtype": "bf16", "acc": s[2]})
    return steps


def _epilogue_numpy(steps, acc, operands):
    from ditron.kernels.elementwise import NUMPY
    for s in steps:
        if s["fn"] == "cast":
            acc = round_to(s["dtype"], acc).astype(np.float32)
        elif "arg" not in s:
            acc = NUMPY[s["fn"]](acc)
        else:
            x = operands[s["arg"]].astype(np.float32)
            acc = NUMPY[s["fn"]](*((acc, x) if s["acc"] == 0 else (x, acc)))
    return acc


@pytest.mark.parametrize("case", sorted(EPILOGUE_CASES))
def test_gemm_epilogue_ir_matches_tiles_and_numpy(case):
    fields, spec = EPILOGUE_CASES[case]
    fields = dict(SMALL, **fields)
    m, n, k = fields.pop("m"), fields.pop("n"), fields.pop("k")
    steps = _epilogue_steps(spec)
    rec = gemm.make_record(m, n, k, name=f"gemm_ep_{case.replace('-', '_')}", epilogue=steps, **fields)
    assert rec["args"][3:3 + sum("arg" in s for s in steps)] == [s["arg"] for s in steps if "arg" in s]
    rng = np.random.default_rng(RNG_SEED)
    mem, ref = gemm_memory(rec, rng)
    operands, lds = {}, gemm_lds(rec)
    for s in steps:
        if "arg" in s:
            shape = (n,) if s["operand"] == "bias" else (m, n)
            operands[s["arg"]] = random("bf16", shape, rng)
            mem[(s["arg"], 0)] = operands[s["arg"]].ravel().copy()
            lds[s["arg"]] = None if s["operand"] == "bias" else n
    mem_ir, mem_tiles = run_both(rec, mem, lds)
    c_ir = mem_ir[("c", 0)].reshape(m, rec["ldc"])[:, :n]
    c_tiles = mem_tiles[("c", 0)].reshape(m, rec["ldc"])[:, :n]
    want = round_to(rec["out_dtype"], _epilogue_numpy(steps, ref.astype(np.float32), operands))
    close(c_ir, want, tol=2e-2)
    close(c_tiles, c_ir)
    triton_parse(emit(rec, lower="cuda:90"))


@pytest.mark.parametrize("steps, match", [
    ([{"fn": "erfc"}], "fn 'erfc' is unknown"),
    ([{"fn": "add", "arg": "ep0", "operand": "column", "dtype": "bf16"}], "needs arg"),
    ([{"fn": "mul", "arg": "ep0", "operand": "bias", "dtype": "bf16", "first_rank": True}], "only an add"),
    ([{"fn": "cast", "dtype": "fp64"}], "cast needs dtype"),
    ([], "non-empty"),
])
def test_gemm_epilogue_rejects_bad_steps(steps, match):
    rec = gemm.make_record(64, 64, 64, **SMALL)
    rec["epilogue"] = steps
    with pytest.raises(VerificationError, match=match):
        gemm.check(rec)


def test_gemm_epilogue_before_a_sum_over_ranks_is_adds_once_only():
    spec = {"arg": "inbox", "pad": "pushed", "slabs": 1, "sum": True, "value_arg": "epoch"}
    with pytest.raises(VerificationError, match="first_rank or own_rows adds"):
        gemm.make_record(64, 64, 64, push=spec, store="pointer", persistent=True,
                         epilogue=[{"fn": "gelu"}], **SMALL)
    rec = gemm.make_record(64, 64, 64, push=spec, store="pointer", persistent=True,
                           epilogue=[{"fn": "add", "arg": "bias", "operand": "bias", "dtype": "bf16",
                                      "first_rank": True}], **SMALL)
    assert rec["args"][-1] == "bias"


@pytest.mark.parametrize("fn, bias, out_dtype", [("gelu", False, None), ("add", True, None),
                                                 ("silu_mul", True, None), ("cast", False, "fp32")])
def test_elementwise_ir_matches_tiles_and_numpy(fn, bias, out_dtype):
    from ditron.kernels import elementwise
    rows, cols = 37, 70
    arity = elementwise.ARITY[fn]
    rec = elementwise.make_record(fn, arity, [rows, cols], "bf16", name=f"ew_{fn}", block=256, num_sms=2, waves=1,
                                  bias=bias, out_dtype=out_dtype)
    rng = np.random.default_rng(RNG_SEED)
    xs = [random("bf16", (cols,) if bias and i == 1 else (rows, cols), rng) for i in range(arity)]
    mem = {(f"x{i}", 0): x.ravel().copy() for i, x in enumerate(xs)}
    mem[("y", 0)] = np.zeros(rows * cols, storage_dtype(out_dtype or "bf16"))
    lds = {f"x{i}": cols for i in range(arity)}
    lds["y"] = cols
    if bias:
        lds["x1"] = None
    mem_ir, mem_tiles = run_both(rec, mem, lds)
    args = [x.astype(np.float32) for x in xs]
    want = round_to(out_dtype or "bf16", elementwise.NUMPY[fn](*args))
    close(mem_ir[("y", 0)].reshape(rows, cols), want)
    close(mem_tiles[("y", 0)], mem_ir[("y", 0)])
    triton_parse(emit(rec, lower="cuda:90"))


@pytest.mark.parametrize("W", [2, 3])
def test_gemm_epilogue_adds_once_before_a_sum_match_tiles(W):
    """The adds that move before a reduction over the ranks: rank r adds its bias and residual to the rows it owns
    (own_rows R: rows [r R, (r + 1) R), a residual [R, n] of its own) and rank 0 alone adds a replicated term
    (first_rank); row tiles straddle the ranks' rows (R = 20, BLOCK_M 16); summed over the ranks, each row got its
    owner's bias and residual and the replicated term once."""
    R, n, k = 20, 44, 32
    m = W * R
    steps = [{"fn": "add", "arg": "bias", "operand": "bias", "dtype": "bf16", "own_rows": R},
             {"fn": "add", "arg": "res", "operand": "full", "dtype": "bf16", "own_rows": R, "acc": 1},
             {"fn": "add", "arg": "rep", "operand": "full", "dtype": "bf16", "first_rank": True}]
    rec = gemm.make_record(m, n, k, loads="pointer", store="pointer", persistent=True, epilogue_split=1,
                           flatten=False, out_dtype="fp32", epilogue=steps, **dict(SMALL, block_m=16))
    rng = np.random.default_rng(RNG_SEED)
    a, bs, _ = rank_products(W, m, n, k, rng)
    rep = random("bf16", (m, n), rng)
    biases = [random("bf16", (n,), rng) for _ in range(W)]
    res = [random("bf16", (R, n), rng) for _ in range(W)]
    mem = {}
    for r in range(W):
        mem[("a", r)], mem[("b", r)], mem[("c", r)] = a, bs[r], np.zeros(m * n, np.float32)
        mem[("bias", r)], mem[("res", r)], mem[("rep", r)] = biases[r], res[r].ravel().copy(), rep.ravel().copy()
    lds = gemm_lds(rec) | {"bias": None, "res": n, "rep": n}
    mem_ir, mem_tiles = run_both(rec, mem, lds, ranks=range(W), num_ranks=W)
    a32 = a.reshape(m, k).astype(np.float32)
    total = np.zeros((m, n), np.float32)
    for r in range(W):
        want = a32 @ bs[r].reshape(k, n).astype(np.float32)
        want[r * R:(r + 1) * R] += biases[r].astype(np.float32) + res[r].astype(np.float32)
        if r == 0:
            want += rep.astype(np.float32)
        close(mem_ir[("c", r)].reshape(m, n), want)
        close(mem_tiles[("c", r)], mem_ir[("c", r)])
        total += mem_ir[("c", r)].reshape(m, n)
    owner = np.repeat(np.arange(W), R)
    expect = sum(a32 @ b.reshape(k, n).astype(np.float32) for b in bs) + rep.astype(np.float32) + \
        np.stack([biases[q] for q in owner]).astype(np.float32) + np.concatenate(res).astype(np.float32)
    close(total, expect, tol=3e-2)
    triton_parse(emit(rec, lower="cuda:90"))
