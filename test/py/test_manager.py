"""passes/manager.py: the one pass manager — verification after each pass, IR dumps, timings, the record of the
ditron-default stages a module went through (ditron.pipeline), and what ditron.compile reads from it."""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlir import ir

from ditron.dialects.context import ditron_context, parse_module
from ditron.errors import PassError, VerificationError
from ditron.passes.manager import PassManager, passes_left, passes_run, record_text, recorded_names
from ditron.passes.registry import PIPELINES, Pass, parse_pipeline
from ditron.schema import PIPELINE_ATTR

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = list(PIPELINES["ditron-device"])  # ditron-default up to the device program

# a global-view task program: ditron-partition turns it into the local view
GLOBAL = """module attributes {ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}} {
  func.func @f(%x: tensor<8x8xf32> {ditron.sharding = {dims = [["tp"], []]}}) -> tensor<8x8xf32> {
    return %x : tensor<8x8xf32>
  }
}
"""


@dataclass(frozen=True)
class BreakMesh(Pass):
    """A pass that leaves invalid IR (a malformed ditron.mesh)."""
    name = "test-break-mesh"

    def run(self, module):
        module.operation.attributes["ditron.mesh"] = ir.ArrayAttr.get([ir.StringAttr.get("tp")])


@dataclass(frozen=True)
class Nothing(Pass):
    """A pass that changes nothing."""
    name = "test-nothing"

    def run(self, module):
        pass


def run(text: str, pipeline, **options):
    """(the module's text after the pipeline, its record's pass names, the manager)."""
    with ditron_context():
        module = parse_module(text)
        try:
            manager = PassManager(pipeline, **options)
            manager.run(module)
            return str(module), passes_run(module), manager
        finally:
            del module


def test_verifies_after_each_pass_and_names_what_it_left():
    with pytest.raises(VerificationError, match="'ditron.mesh' must be a dictionary"):
        run(GLOBAL, [BreakMesh(), Nothing()])
    text, _, manager = run(GLOBAL, [BreakMesh()], verify_each=False)
    assert 'ditron.mesh = ["tp"]' in text and [name for name, _ in manager.timings] == ["test-break-mesh"]


def test_print_after_and_timings_go_to_err():
    err = io.StringIO()
    run(GLOBAL, "ditron-partition,ditron-canonicalize", print_after=["ditron-canonicalize"], time_passes=True,
        err=err)
    out = err.getvalue()
    assert "// -----// IR Dump After ditron-canonicalize //----- //" in out
    assert "IR Dump After ditron-partition" not in out
    assert "// time ditron-partition: " in out and "// time ditron-canonicalize: " in out
    err = io.StringIO()
    run(GLOBAL, "ditron-partition,ditron-canonicalize", print_after_all=True, err=err)
    assert err.getvalue().count("// -----// IR Dump After") == 2
    with pytest.raises(PassError, match="give it err="):
        PassManager("ditron-canonicalize", time_passes=True)
    with pytest.raises(PassError, match="runs ditron passes, got str"):
        PassManager(["ditron-canonicalize"])


def test_after_each_sees_every_pass():
    seen = []
    run(GLOBAL, "ditron-partition,ditron-canonicalize", after_each=lambda p, m: seen.append(p.name))
    assert seen == ["ditron-partition", "ditron-canonicalize"]


def test_the_record_lists_the_stages_in_order():
    text, ran, _ = run(GLOBAL, "ditron-partition,ditron-canonicalize")
    assert ran == ["ditron-partition", "ditron-canonicalize"]
    assert f'{PIPELINE_ATTR} = "ditron-partition,ditron-canonicalize"' in text
    # the record travels with the text: the next run appends to it
    text, ran, _ = run(text, "ditron-fuse-overlap,ditron-fuse-epilogue,ditron-tile{num-sms=8}")
    assert ran == DEFAULT[:5] and \
        '"ditron-partition,ditron-canonicalize,ditron-fuse-overlap,ditron-fuse-epilogue,ditron-tile{num-sms=8}"' in text
    # a pass outside the staged pipeline is not recorded; record=False records nothing
    assert run(GLOBAL, "ditron-verify")[1] == []
    assert run(GLOBAL, "ditron-partition", record=False)[1] == []


def test_a_pass_that_ran_is_recorded_even_if_it_changed_nothing():
    """ditron-partition on a program that is already in the local view changes nothing, yet ran."""
    local, _, _ = run(GLOBAL, "ditron-partition", record=False)
    assert run(local, "ditron-partition")[1] == ["ditron-partition"]


def test_canonicalize_alone_does_not_skip_the_partition():
    """The pitfall of recording what changed instead of what ran in its place: a module only canonicalized has
    been through no stage of ditron-default, and still needs all of it, ditron-partition first."""
    text, ran, _ = run(GLOBAL, "ditron-canonicalize")
    assert ran == [] and PIPELINE_ATTR not in text
    with ditron_context():
        module = parse_module(text)
        assert passes_left(module, DEFAULT) == DEFAULT
        del module


def test_passes_left_reads_the_record():
    with ditron_context():
        module = parse_module(GLOBAL)
        assert passes_left(module, DEFAULT) == DEFAULT
        module.operation.attributes[PIPELINE_ATTR] = ir.StringAttr.get(
            "ditron-partition,ditron-canonicalize,ditron-fuse-overlap{x=1},ditron-fuse-epilogue,ditron-tile")
        assert passes_left(module, DEFAULT) == DEFAULT[5:]
        # out of order: only the prefix that ran in order counts
        module.operation.attributes[PIPELINE_ATTR] = ir.StringAttr.get("ditron-canonicalize,ditron-partition")
        assert passes_left(module, DEFAULT) == DEFAULT[1:]
        module.operation.attributes[PIPELINE_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 3)
        with pytest.raises(PassError, match="must be a string"):
            record_text(module)
        del module


def test_an_empty_module_comes_back_as_it_is():
    text, ran, _ = run("module {}", "ditron-default")
    assert ran == [] and PIPELINE_ATTR not in text


def test_recorded_names_are_the_default_pipeline_then_the_emission():
    assert list(PIPELINES["ditron-default"]) == [*DEFAULT, "ditron-emit-host-program"]
    assert list(recorded_names()) == [*DEFAULT, "ditron-emit-host-program"]


def test_compile_runs_the_stages_the_record_does_not_list(monkeypatch):
    """ditron.compile of a device program that went through ditron-schedule-overlap (through the manager) runs only
    ditron-lower-device-to-core, then the emission: the record says so, not the IR's stream attributes."""
    import ditron
    from ditron.passes import manager as M
    source = (ROOT / "examples" / "gemm_rs.mlir").read_text()
    text, ran, _ = run(source, ",".join(DEFAULT[:DEFAULT.index("ditron-schedule-overlap") + 1]))
    assert ran == DEFAULT[:7]
    pipelines = []
    real = M.PassManager.run

    def spy(self, module):
        pipelines.append([p.name for p in self.passes])
        return real(self, module)

    monkeypatch.setattr(M.PassManager, "run", spy)
    exe = ditron.compile(text, target="cuda:90", cache=False)
    assert pipelines == [["ditron-lower-device-to-core"], ["ditron-emit-host-program"]]
    assert exe.host_program is not None


def test_every_driver_runs_the_manager(monkeypatch):
    """ditron-opt and the frontend's to_mlir run their passes through the manager."""
    from ditron.passes import manager as M
    from ditron.tools import ditron_opt
    calls = []
    real = M.PassManager.run

    def spy(self, module):
        calls.append([p.name for p in self.passes])
        return real(self, module)

    monkeypatch.setattr(M.PassManager, "run", spy)
    out, err = io.StringIO(), io.StringIO()
    assert ditron_opt.run(["-", "--pass-pipeline=ditron-canonicalize"], io.StringIO(GLOBAL), out, err) == 0, \
        err.getvalue()
    assert calls == [["ditron-canonicalize"]]
    assert [p.name for p in parse_pipeline("ditron-check")] == ["ditron-verify", "ditron-canonicalize"]
