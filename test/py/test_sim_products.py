"""sim.products: GEMM tile products served from row blocks agree with the tile-by-tile products -- same findings,
same schedule, the same outputs up to float32 summation order -- and a block whose inputs changed is recomputed."""
from __future__ import annotations

import numpy as np
import pytest

import sim_programs as P
from ditron.dialects.context import ditron_context
from ditron.sim import products as prod
from ditron.sim import simulate
from ditron.sim.memory import Buffer
from ditron.sim.mutate import run_mutants

W, M, K_, N_ = 4, 100, 64, 64  # as test_sim_mutations: rows that do not divide the tiles


def _buffers(rng, *shapes):
    out = []
    for i, shape in enumerate(shapes):
        b = Buffer(f"b{i}", 0, shape, "f32", symmetric=False, kind="in")
        b.data[...] = rng.standard_normal(shape)
        b.changed((0,) * len(shape), shape)
        out.append(b)
    return out


def test_a_block_serves_its_tiles_and_is_recomputed_after_a_write():
    rng = np.random.default_rng(0)
    a, b, bt = _buffers(rng, (256, 64), (64, 96), (96, 64))
    p = prod.Products([a, b, bt], rows=128)
    for r, c in ((0, 0), (64, 32), (0, 64)):  # three tiles of rows block 0
        got = p(a.data[r:r + 64, :], b.data[:, c:c + 32])
        np.testing.assert_allclose(got, a.data[r:r + 64] @ b.data[:, c:c + 32], rtol=1e-5, atol=1e-5)
    assert (p.computed, p.served, p.direct) == (1, 3, 0)
    a.data[70:80] = 5.0  # a write into the block's rows: the next tile of the block sees it
    a.changed((70, 0), (80, 64))
    got = p(a.data[64:128, :], b.data[:, 0:32])
    np.testing.assert_allclose(got, a.data[64:128] @ b.data[:, 0:32], rtol=1e-5, atol=1e-5)
    assert p.computed == 2
    b.data[:, 90:] = -1.0  # a write into B's columns (outside the tile's): the block is stale all the same
    b.changed((0, 90), (64, 96))
    p(a.data[0:64, :], b.data[:, 0:32])
    assert p.computed == 3
    a.data[200:210] = 7.0  # a write into another block's rows leaves this one served
    a.changed((200, 0), (210, 64))
    p(a.data[0:64, :], b.data[:, 32:64])
    assert p.computed == 3
    got = p(a.data[128:192, 16:48], bt.data[8:40, 16:48].T)  # B stored [N, K]: a transposed view, K steps 16..48
    np.testing.assert_allclose(got, a.data[128:192, 16:48] @ bt.data[8:40, 16:48].T, rtol=1e-5, atol=1e-5)
    assert p.computed == 4
    # operands that are not views of buffers are multiplied as given
    x = p(a.data[[1, 5]], b.data)
    np.testing.assert_allclose(x, a.data[[1, 5]] @ b.data, rtol=1e-5, atol=1e-5)
    y = p(np.ones((3, 64), np.float32), b.data)
    assert p.direct == 2 and y.shape == (3, 96)


def test_rows_written_after_the_block_was_computed_are_recomputed_alone():
    """A block whose rows of A arrive chunk by chunk (an all-gather feeding the GEMM): each arrival makes only its
    rows stale; the next tile reading them recomputes those rows, the block's other rows are served as kept."""
    rng = np.random.default_rng(3)
    a, b = _buffers(rng, (256, 32), (32, 48))
    p = prod.Products([a, b], rows=256)
    np.testing.assert_allclose(p(a.data[0:32], b.data[:, :16]), a.data[0:32] @ b.data[:, :16], rtol=1e-5, atol=1e-5)
    assert (p.computed, p.rows_computed) == (1, 256)
    for chunk in range(1, 8):  # rows [32 c, 32 c + 32) arrive, then a tile reads them
        lo = 32 * chunk
        a.data[lo:lo + 32] = rng.standard_normal((32, 32))
        a.changed((lo, 0), (lo + 32, 32))
        got = p(a.data[lo:lo + 32], b.data[:, 16:48])
        np.testing.assert_allclose(got, a.data[lo:lo + 32] @ b.data[:, 16:48], rtol=1e-5, atol=1e-5)
        # an earlier chunk's tile is served from the kept rows
        np.testing.assert_allclose(p(a.data[0:32], b.data[:, :16]), a.data[0:32] @ b.data[:, :16], rtol=1e-5,
                                   atol=1e-5)
    assert p.computed == 8 and p.rows_computed == 256 + 7 * 32
    a.data[40:50] = 1.0  # written again, and two chunks at once: one recompute of the span that changed
    a.changed((40, 0), (50, 32))
    a.data[100:110] = 2.0
    a.changed((100, 0), (110, 32))
    got = p(a.data[96:128], b.data)
    np.testing.assert_allclose(got, a.data[96:128] @ b.data, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(p(a.data[32:64], b.data), a.data[32:64] @ b.data, rtol=1e-5, atol=1e-5)
    assert p.computed == 9 and p.rows_computed == 256 + 7 * 32 + 70


def test_a_tile_straddling_two_blocks_is_computed_alone():
    rng = np.random.default_rng(1)
    a, b = _buffers(rng, (256, 32), (32, 32))
    p = prod.Products([a, b], rows=128)
    got = p(a.data[100:160], b.data)
    np.testing.assert_allclose(got, a.data[100:160] @ b.data, rtol=1e-5, atol=1e-5)
    assert (p.computed, p.direct) == (0, 1)


def test_kept_blocks_stay_within_max_bytes():
    rng = np.random.default_rng(2)
    a, b = _buffers(rng, (512, 16), (16, 64))
    p = prod.Products([a, b], rows=128, max_bytes=2 * 128 * 64 * 4)
    for r in (0, 128, 256, 384, 0):
        p(a.data[r:r + 64], b.data[:, :32])
    assert p.computed == 5 and p._bytes <= p.max_bytes  # the first block was dropped, least recently used


def _tile_by_tile(monkeypatch):
    monkeypatch.setattr(prod.Products, "__call__", lambda self, a, b, rows=None: a @ b)


@pytest.mark.parametrize("name", ["ag_gemm", "gemm_rs", "gemm_ar"])
def test_batched_and_tile_by_tile_runs_agree(name, monkeypatch):
    text, records = getattr(P, name)(W, M, K_, N_)
    reference = getattr(P, f"{name}_reference")
    served = []
    real = prod.Products.__call__

    def counting(self, a, b):
        out = real(self, a, b)
        served.append(self.served)
        return out

    monkeypatch.setattr(prod.Products, "__call__", counting)
    runs = {}
    for mode in ("batched", "tile_by_tile"):
        if mode == "tile_by_tile":
            _tile_by_tile(monkeypatch)
        runs[mode] = []
        for seed in (0, 3):
            with ditron_context():
                module = P.parse(text, P.path(name), records)
                runs[mode].append(simulate(module, W, seed=seed, calls=2, reference=reference))
                del module
    assert served and served[-1] > 0  # the batched runs did serve products from blocks
    for a, b in zip(runs["batched"], runs["tile_by_tile"]):
        assert a.ok and b.ok, (a.summary(), b.summary())
        assert a.schedule_digest == b.schedule_digest and a.steps == b.steps
        assert [f.kind for f in a.findings] == [f.kind for f in b.findings]
        for ra, rb in zip(a.outputs, b.outputs):
            for x, y in zip(ra, rb):
                np.testing.assert_allclose(x, y, rtol=2.0 ** -7, atol=1e-3)


def test_mutants_get_the_same_verdicts_batched_and_tile_by_tile(monkeypatch):
    text, records = P.ag_gemm(W, M, K_, N_)

    def verdicts():
        results = run_mutants(lambda: P.parse(text, P.path("ag_gemm"), records), W, seed=1, calls=2,
                              reference=P.ag_gemm_reference)
        return {str(r.mutation): sorted({f.kind for f in r.result.findings}) for r in results}

    batched = verdicts()
    _tile_by_tile(monkeypatch)
    assert batched == verdicts() and len(batched) > 5


# ------------------------------------------------------------------------------------------ grouped GEMMs

def test_a_grouped_product_batches_within_its_group_and_its_expert():
    """A grouped GEMM multiplies the rows of group g by matrix b[g] of a 3-d buffer: the block spans the group's
    rows only (``rows``), b[g] is a view of the buffer's rows [g K, g K + K), and each (rows, expert) pair is kept
    apart; a view crossing two experts' matrices is multiplied as given."""
    rng = np.random.default_rng(4)
    a, b = _buffers(rng, (256, 32), (3, 32, 48))
    p = prod.Products([a, b], rows=256)
    for r, c in ((16, 0), (32, 16), (16, 32)):  # tiles of group 1 (rows 10..200) by expert 1
        got = p(a.data[r:r + 16], b.data[1][:, c:c + 16], (10, 200))
        np.testing.assert_allclose(got, a.data[r:r + 16] @ b.data[1][:, c:c + 16], rtol=1e-5, atol=1e-5)
    assert (p.computed, p.rows_computed, p.served) == (1, 190, 3)
    got = p(a.data[200:216], b.data[2][:, 0:16], (200, 256))  # group 2, expert 2: a block of its own
    np.testing.assert_allclose(got, a.data[200:216] @ b.data[2][:, 0:16], rtol=1e-5, atol=1e-5)
    assert (p.computed, p.rows_computed) == (2, 246)
    got = p(a.data[0:16], b.data[1][:, 0:16], (10, 200))  # rows outside the group: computed alone
    np.testing.assert_allclose(got, a.data[0:16] @ b.data[1][:, 0:16], rtol=1e-5, atol=1e-5)
    assert p.direct == 1
    b.data[1, 3] = 0.5  # a write into expert 1's matrix drops its block, expert 2's stays
    b.changed((1, 3, 0), (2, 4, 48))
    p(a.data[16:32], b.data[1][:, 0:16], (10, 200))
    p(a.data[200:216], b.data[2][:, 16:32], (200, 256))
    assert p.computed == 3
    crossing = b.data.reshape(96, 48)[16:48, :16]  # rows 16..48: half of b[0], half of b[1]
    p(a.data[0:16], crossing, None)
    assert p.direct == 2


def _moe(monkeypatch=None):
    import test_device_passes as D
    from ditron.sim import load_program, random_inputs

    w = 2
    text = D.moe_program(w, 64 * w)
    dev = D.lower(text, D.FULL % ("block-m=16 block-n=16 block-k=16", ""))
    program = load_program(dev)

    def inputs(call):  # groups of many rows (the default draws 0..8), so that a group spans several tiles
        xs = random_inputs(program, w, 5, call)
        for r, x in enumerate(xs):
            x[2] = np.array([40 + 3 * r + call, 0, 70 - call], dtype=np.float64)
        return xs

    return w, text, dev, inputs


def test_grouped_gemm_batched_and_tile_by_tile_runs_agree(monkeypatch):
    from ditron.sim import task_reference

    w, text, dev, inputs = _moe()
    reference = task_reference(text)
    seen = []
    real = prod.Products.__call__

    def counting(self, a, b, rows=None):
        seen.append(self)
        return real(self, a, b, rows)

    monkeypatch.setattr(prod.Products, "__call__", counting)
    batched = [simulate(dev, w, inputs, seed=s, calls=2, reference=reference) for s in (0, 1)]
    assert seen and seen[-1].served > seen[-1].computed > 0  # products were served from blocks
    monkeypatch.setattr(prod.Products, "__call__", lambda self, a, b, rows=None: a @ b)
    plain = [simulate(dev, w, inputs, seed=s, calls=2, reference=reference) for s in (0, 1)]
    for x, y in zip(batched, plain):
        assert x.ok and y.ok, (x.summary(), y.summary())
        assert x.schedule_digest == y.schedule_digest and x.steps == y.steps
        for ra, rb in zip(x.outputs, y.outputs):
            for u, v in zip(ra, rb):
                np.testing.assert_allclose(u, v, rtol=2.0 ** -7, atol=1e-3)


def test_grouped_gemm_mutants_get_the_same_verdicts_batched_and_tile_by_tile(monkeypatch):
    from ditron.dialects.context import parse_module
    from ditron.sim import task_reference

    w, text, dev, inputs = _moe()
    reference = task_reference(text)

    def verdicts():
        results = run_mutants(lambda: parse_module(dev, "<moe>"), w, seed=1, calls=2, inputs=inputs,
                              reference=reference)
        return {str(r.mutation): sorted({f.kind for f in r.result.findings}) for r in results}

    batched = verdicts()
    assert any(batched.values())  # a mutant is caught
    monkeypatch.setattr(prod.Products, "__call__", lambda self, a, b, rows=None: a @ b)
    assert batched == verdicts() and len(batched) > 3
