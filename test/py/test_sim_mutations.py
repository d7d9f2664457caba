"""The simulator has teeth: removing any single wait or signal, shifting any copy's source or destination offset,
shifting a launch's scalar operand (a chunk's row offset, a wait value), or dropping the wait / notify part of a
kernel's record must be reported (race, deadlock, out-of-bounds or wrong result) — for every such op of the
hand-written AG+GEMM and GEMM+RS programs (and the collectives), at sizes that do not divide the tiles."""
from __future__ import annotations

import pytest

import sim_programs as P
from ditron.dialects import device
from ditron.dialects.context import ditron_context
from ditron.dialects.opbase import find
from ditron.sim.mutate import KINDS, apply, mutations, run_mutants

W, M, K_, N_ = 4, 100, 64, 64  # M rows per rank: not a multiple of the 128-row GEMM tiles

PROGRAMS = {
    "all_gather": (lambda: (P.all_gather(W, M, K_), []), P.all_gather_reference),
    "ag_gemm": (lambda: P.ag_gemm(W, M, K_, N_), P.ag_gemm_reference),
    "gemm_rs": (lambda: P.gemm_rs(W, M, K_, N_), P.gemm_rs_reference),
    "gemm_ar": (lambda: P.gemm_ar(W, M, K_, N_), P.gemm_ar_reference),
    "reduce_scatter": (lambda: P.reduce_scatter(W, M, N_), P.reduce_scatter_reference),
    "all_reduce": (lambda: P.all_reduce(W, M, N_), P.all_reduce_reference),
}


def _builder(name: str):
    make, _ = PROGRAMS[name]
    text, records = make()
    return lambda: P.parse(text, P.path(name), records)


def _assert_all_caught(results, name: str) -> None:
    missed = [str(r.mutation) for r in results if not r.caught]
    assert not missed, f"{name}: mutants the simulator did not report: {missed}"
    for r in results:
        f = r.result.findings[0]
        assert f.loc.file is not None and f.loc.line > 0, f"{r.mutation}: finding without a location: {f}"


@pytest.mark.parametrize("name", list(PROGRAMS))
@pytest.mark.parametrize("seed", [0, 1])
def test_every_single_mutation_is_reported(name, seed):
    _, reference = PROGRAMS[name]
    results = run_mutants(_builder(name), W, seed=seed, calls=2, reference=reference)
    kinds = {r.mutation.kind for r in results}
    assert {"drop-wait", "drop-signal"} <= kinds and kinds & {"shift-launch", "shift-src"}
    _assert_all_caught(results, name)


@pytest.mark.parametrize("name", ["all_gather", "ag_gemm", "gemm_rs", "all_reduce", "reduce_scatter"])
@pytest.mark.parametrize("amount", [1, -1])
def test_small_shifts_are_reported(name, amount):
    _, reference = PROGRAMS[name]
    results = run_mutants(_builder(name), W, kinds=("shift-src", "shift-dst", "shift-launch"), amount=amount,
                          seed=0, calls=2, reference=reference)
    assert results
    _assert_all_caught(results, name)


def test_mutants_cover_every_op():
    build = _builder("ag_gemm")
    with ditron_context():
        module = build()
        found = mutations(module)
        waits, signals, copies = (len(find(module.operation, w)) for w in (device.Wait, device.Signal, device.Copy))
        del module
    count = {k: sum(1 for m in found if m.kind == k) for k in KINDS}
    assert count["drop-wait"] == waits == 3 and count["drop-signal"] == signals == 5
    assert count["shift-src"] == count["shift-dst"] == copies == 2
    assert count["drop-kernel-wait"] == 1 and count["shift-launch"] == 1  # the GEMM's wait value
    with ditron_context():
        module = _builder("gemm_ar")()
        kinds = [m.kind for m in mutations(module)]
        del module
    assert kinds.count("drop-kernel-notify") == 1 and kinds.count("drop-kernel-wait") == 1


def test_an_unknown_mutation_kind_is_an_error():
    from ditron.sim import SimulationError

    with ditron_context():
        module = _builder("gemm_rs")()
        with pytest.raises(SimulationError, match="unknown mutation kind 'swap'"):
            mutations(module, ["swap"])
        del module


def test_apply_changes_exactly_one_op():
    build = _builder("gemm_rs")
    with ditron_context():
        module = build()
        before = len(find(module.operation, device.Wait))
        m = next(m for m in mutations(module) if m.kind == "drop-wait")
        apply(module, m)
        assert len(find(module.operation, device.Wait)) == before - 1
        shift = next(m for m in mutations(module) if m.kind == "shift-launch")
        apply(module, shift)
        launch = find(module.operation, device.Launch)[1]
        assert launch.args[2].owner.name == "arith.addi"
        del module


def test_the_unmutated_programs_are_clean():
    for name, (make, reference) in PROGRAMS.items():
        text, records = make()
        result = P.simulate_with_kernels(text, P.path(name), records, W, seed=0, calls=2, reference=reference)
        assert result.ok, result.summary()


def test_record_parts_a_template_needs_are_not_mutated():
    """AG+GEMM in one launch: its gather needs its wait, so dropping the wait is no mutant (ditron sim --mutate
    stopped with "template 'gemm' failed to describe the tiles ... KeyError: 'wait'"); what is mutated is caught."""
    from ditron.passes.registry import parse_pipeline, run_passes

    text = """module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @ag_gemm(%x: tensor<128x256xbf16> {ditron.sharding = {dims = [["tp"], []]}},
                     %w: tensor<256x512xbf16> {ditron.sharding = {dims = [[], ["tp"]]}})
      -> (tensor<128x512xbf16> {ditron.sharding = {dims = [[], ["tp"]]}}) {
    %y = "ditron_task.matmul"(%x, %w) : (tensor<128x256xbf16>, tensor<256x512xbf16>) -> tensor<128x512xbf16>
    return %y : tensor<128x512xbf16>
  }
}
"""

    def build():
        from ditron.dialects.context import parse_module
        module = parse_module(text, "ag1.mlir")
        run_passes(module, parse_pipeline("ditron-device"))
        return module

    with ditron_context():
        module = build()
        assert not [m for m in mutations(module) if m.kind == "drop-kernel-wait"]
        del module
    results = run_mutants(build, 2, seed=0, calls=2)
    _assert_all_caught(results, "one-launch ag_gemm")
