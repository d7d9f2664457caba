"""Sampled checks (docs/design.md, section 5): above ``sim.SAMPLE_FROM`` output elements a simulation computes the
GEMM products and compares the outputs at the rows of a ``sim.products.Sample`` only, and the task-level reference
computes just those rows (``reference.evaluate(..., rows=)``). The rows it computes agree with the whole
evaluation; the whole output is never evaluated; a tile corrupted in its last row alone is still reported; and a
program that moves product rows by other than the sample's period is checked again in full, not reported wrong."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from ditron import reference as ref
from ditron.dialects import task
from ditron.dialects.context import ditron_context, parse_module
from ditron.passes.registry import parse_pipeline
from ditron.sim import MISMATCH, SAMPLE_FROM, load_program, random_inputs, simulate, task_reference
from ditron.sim.products import Sample

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCALE = {"8192": "512", "4096": "64", "14336": "128"}  # as test_sim_programs._scaled_example


def _text(name: str, sizes: dict[str, str], mesh: int | None = None) -> str:
    text = (EXAMPLES / f"{name}.mlir").read_text()
    text = re.sub(r"(?<=[<x])(8192|4096|14336)(?=x)", lambda m: sizes[m.group(1)], text)
    if mesh is not None:
        text = re.sub(r"shape = array<i64: \d+>", f"shape = array<i64: {mesh}>", text, count=1)
    return text


def _device(text: str):
    with ditron_context():
        module = parse_module(text, "<sampled>")
        for p in parse_pipeline("ditron-device"):
            p.run(module)
        yield module
        del module


@pytest.mark.parametrize("name", ["ag_gemm", "gemm_rs", "gemm_ar", "mlp", "moe"])
def test_the_reference_at_some_rows_equals_the_whole_reference_there(name):
    text = _text(name, SCALE)
    for module in _device(text):
        program = load_program(module)
    reference = task_reference(text)
    xs = random_inputs(program, 4, 0, 1)
    whole = reference(xs)
    rng = np.random.default_rng(3)
    rows = [[np.unique(rng.integers(0, o.shape[0], 9)) for o in per] for per in whole]
    some = reference(xs, rows)
    for r in range(4):
        for w, s, idx in zip(whole[r], some[r], rows[r]):
            assert isinstance(s, ref.Rows) and np.array_equal(s.index, idx)
            np.testing.assert_allclose(s.data, np.asarray(w)[idx], rtol=1e-5, atol=1e-5 * np.abs(w).max())


def test_evaluate_at_rows_runs_the_matmuls_on_those_rows_only(monkeypatch):
    text = _text("mlp", SCALE)
    seen = []
    real = ref._rows_matmul

    def spy(it, op, operands, rows):
        seen.append([len(i) for i in rows])
        return real(it, op, operands, rows)

    def whole(*args):
        raise AssertionError("a matmul was evaluated on every row")

    monkeypatch.setitem(ref._ROW_HANDLERS, task.Matmul.op_name(), spy)
    monkeypatch.setitem(ref._HANDLERS, task.Matmul.op_name(), whole)
    for module in _device(text):
        program = load_program(module)
    xs = random_inputs(program, 4, 0, 1)
    out = task_reference(text)(xs, [[np.array([0, 5, 127])] for _ in range(4)])
    assert all(isinstance(per[0], ref.Rows) and len(per[0].index) == 3 for per in out)
    # both GEMMs of the MLP, at the 4 ranks' 3 rows each of the global result (x's rows are sharded)
    assert seen == [[12], [12]]


# an AG+GEMM whose per-rank output (4096 x 1024) is at the sampling threshold, with K = 64 to keep it quick
BIG = {"8192": "4096", "4096": "64", "14336": "4096"}


def test_a_large_output_is_checked_at_sampled_rows_never_whole(monkeypatch):
    text = _text("ag_gemm", BIG)
    calls = []
    reference = task_reference(text)

    def spy(xs, rows=None):
        calls.append(rows)
        return reference(xs, rows)

    spy.takes_rows = True

    def whole(*args):
        raise AssertionError("the reference evaluated a matmul on every row")

    monkeypatch.setitem(ref._HANDLERS, task.Matmul.op_name(), whole)
    for module in _device(text):
        program = load_program(module)
        assert max(int(np.prod(s.type.shape)) for s in program.outputs) >= SAMPLE_FROM
        result = simulate(module, 4, seed=0, calls=1, reference=spy)
    assert result.ok, result.summary()
    assert result.sampled_rows is not None and "sampled rows" in result.summary()
    sample = Sample(0)
    (rows,) = calls
    for per in rows:
        (idx,) = per
        assert np.array_equal(idx, sample.rows(4096)) and len(idx) < 4096 // 8
    out = result.outputs[0][0]
    assert np.isfinite(out[sample.rows(4096)]).all()  # the sampled rows are computed...
    assert np.isnan(out[3]).all()                     # ...and the others are not


class _LastRowWrong:
    """The GEMM template with one tile's last row (of the C it writes) off by one."""

    def __init__(self, template, program: int):
        self.template, self.program = template, program
        self.corrupted = []

    def __getattr__(self, name):
        return getattr(self.template, name)

    def tiles(self, record, **kw):
        programs = self.template.tiles(record, **kw)
        if kw.get("rank") != 1:
            return programs
        steps = list(programs[self.program])
        at = max(i for i, st in enumerate(steps) if st.writes and st.compute)
        step, compute, region = steps[at], steps[at].compute, steps[at].writes[-1]

        def corrupt(view, compute=compute, region=region):
            compute(view)
            c = view(region)
            c[-1, :] += 1.0
            self.corrupted.append(c.shape)

        steps[at] = dataclasses.replace(step, compute=corrupt)
        return [*programs[:self.program], steps, *programs[self.program + 1:]]


def _runs(monkeypatch) -> list:
    """The ``sampled`` argument of every run_program call from now on (None: chosen by size)."""
    import ditron.sim as sim
    seen, real = [], sim.run_program

    def spy(*args, **kw):
        seen.append(kw.get("sampled"))
        return real(*args, **kw)

    monkeypatch.setattr(sim, "run_program", spy)
    return seen


@pytest.mark.parametrize("seed", [0, 1])
def test_a_tile_wrong_in_its_last_row_only_is_reported_by_the_sampled_check(seed, monkeypatch):
    from ditron.kernels import get_template
    from ditron.sim.kernels import template_name
    from ditron.sim.program import load

    text = _text("ag_gemm", BIG)
    runs = _runs(monkeypatch)
    for module in _device(text):
        names = {template_name(k.record) for k in load(module).kernels.values()}
        gemm = [n for n in names if "gemm" in n]
        assert len(gemm) == 1, names
        mutant = _LastRowWrong(get_template(gemm[0]), program=5)
        clean = simulate(module, 4, seed=seed, calls=1, reference=task_reference(text))
        assert runs == [None]
        result = simulate(module, 4, seed=seed, calls=1, reference=task_reference(text),
                          templates={gemm[0]: mutant})
    assert clean.ok and clean.sampled_rows is not None, clean.summary()
    assert mutant.corrupted and all(shape[0] > 1 for shape in mutant.corrupted)
    # the sampled run found it (only a mismatch there runs the program again, whole) ...
    assert runs == [None, None, False] and result.sampled_rows is None
    bad = result.of_kind(MISMATCH)
    assert bad and all(f.rank == 1 for f in bad), result.summary()
    # ... and the whole run says where: the last row of a tile, that row alone
    for f in bad:
        lo, hi = (int(v) for v in re.search(r"\[(\d+):(\d+),", f.message).groups())
        assert hi - lo == 1 and hi % 128 == 0, f.message


def test_a_program_moving_product_rows_off_the_period_is_checked_whole(monkeypatch):
    # GEMM + RS on 2 ranks with 1100-row shards: the partial products' rows move by 1100 (not a multiple of the
    # sample's 128), so sampled output rows read rows the sampled run did not compute -- the run is redone whole
    text = _text("gemm_rs", {"8192": "2200", "14336": "32", "4096": "4096"}, mesh=2)
    runs = _runs(monkeypatch)
    for module in _device(text):
        program = load_program(module)
        assert max(int(np.prod(s.type.shape)) for s in program.outputs) >= SAMPLE_FROM
        result = simulate(module, 2, seed=0, calls=1, reference=task_reference(text))
        assert runs == [None, False]
        forced = simulate(module, 2, seed=0, calls=1, reference=task_reference(text), sampled=False)
    assert result.ok, result.summary()
    assert result.sampled_rows is None and forced.sampled_rows is None
    np.testing.assert_array_equal(result.outputs[0][0], forced.outputs[0][0])


def test_the_sample_holds_every_tile_edge_and_depends_on_the_seed():
    a, b = Sample(0), Sample(1)
    for s in (a, b):
        assert {0, 1, 2, 62, 63, 64, 65, 125, 126, 127} <= set(s.residues.tolist())
        assert len(s.residues) == 12
        rows = s.rows(1000)
        assert rows.tolist() == [i for i in range(1000) if i % 128 in set(s.residues.tolist())]
        assert s.positions(130, 10).tolist() == [i - 130 for i in range(130, 140) if i % 128 in set(s.residues)]
    assert a.residues.tolist() != b.residues.tolist()


def test_sampled_true_needs_a_reference_that_takes_rows():
    from ditron.sim import SimulationError
    text = _text("ag_gemm", SCALE)
    for module in _device(text):
        with pytest.raises(SimulationError, match="sampled=True needs a reference"):
            simulate(module, 4, calls=1, reference=lambda xs: xs, sampled=True)
