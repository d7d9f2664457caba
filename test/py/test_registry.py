"""The pass registry: every registered pass is well-formed and tested, pipelines expand, options parse."""
from __future__ import annotations

import dataclasses
import inspect
import pathlib
import typing
from dataclasses import dataclass

import pytest

from ditron.errors import PassError
from ditron.passes import registry
from ditron.passes.registry import PASSES, PIPELINES, Pass, get_pass_class, option, parse_pipeline

LIT_ROOT = pathlib.Path(__file__).resolve().parents[1] / "lit"


def lit_texts() -> dict[str, str]:
    return {str(p.relative_to(LIT_ROOT)): p.read_text(encoding="utf-8") for p in LIT_ROOT.rglob("*")
            if p.suffix in (".mlir", ".py") and p.is_file() and "Output" not in p.parts}


# ------------------------------------------------------------------------------------- the registered passes

@pytest.mark.parametrize("name", sorted(PASSES))
def test_registered_pass_is_well_formed(name):
    cls = get_pass_class(name)
    assert issubclass(cls, Pass) and dataclasses.is_dataclass(cls)
    assert cls.name == name, f"PASSES['{name}'] points at a pass named '{cls.name}'"
    assert name.startswith("ditron-") and name == name.lower() and " " not in name
    module_name = PASSES[name].split(":")[0]
    assert module_name == name[len("ditron-"):].replace("-", "_"), "one module per pass, named after it"
    assert cls.summary and "\n" not in cls.summary, "a one-line summary"
    doc = inspect.getdoc(inspect.getmodule(cls)) or ""
    doc += inspect.getdoc(cls) or ""
    assert doc.strip(), f"{name} needs a docstring (with a small before/after example)"
    assert cls.__dataclass_params__.frozen, "passes are frozen dataclasses"
    cls()  # every option has a default


@pytest.mark.parametrize("name", sorted(PASSES))
def test_registered_pass_has_lit_tests(name):
    files = [path for path, text in lit_texts().items() if name in text and "RUN:" in text]
    assert files, f"no lit test under test/lit mentions '{name}'"


@pytest.mark.parametrize("name", sorted(PASSES))
def test_option_help_and_spec(name):
    cls = get_pass_class(name)
    helps = cls.option_help()
    assert len(helps) == len(cls.options())
    for line, f in zip(helps, cls.options()):
        assert line.startswith(f.name.replace("_", "-") + ": ")
    default = cls()
    assert default.spec() == name
    assert parse_pipeline(default.spec()) == [default]


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_named_pipelines_expand(pipeline):
    passes = parse_pipeline(pipeline)
    assert [p.spec() for p in passes] == [p.spec() for p in parse_pipeline(",".join(PIPELINES[pipeline]))]
    assert passes, f"pipeline '{pipeline}' is empty"
    assert pipeline not in PASSES, "a name is a pass or a pipeline, not both"


def test_check_pipeline_contents():
    assert [p.name for p in parse_pipeline("ditron-check")] == ["ditron-verify", "ditron-canonicalize"]


# ----------------------------------------------------------------------------------------- pipeline syntax

def test_pipeline_syntax():
    canon = get_pass_class("ditron-canonicalize")
    assert parse_pipeline("") == []
    assert parse_pipeline("   ") == []
    assert parse_pipeline("builtin.module()") == []
    want = [get_pass_class("ditron-verify")(), canon(upstream=False)]
    for text in ("ditron-verify,ditron-canonicalize{upstream=false}",
                 "builtin.module(ditron-verify,ditron-canonicalize{upstream=false})",
                 " ditron-verify , ditron-canonicalize{ upstream=0 } ",
                 "ditron-verify,ditron-canonicalize{upstream=off}",
                 'ditron-verify,ditron-canonicalize{upstream="false"}'):
        assert parse_pipeline(text) == want, text
    assert parse_pipeline("ditron-check,ditron-check") == parse_pipeline("ditron-check") * 2


@pytest.mark.parametrize("text, message", [
    ("ditron-canonicalise", "unknown pass or pipeline 'ditron-canonicalise'; did you mean 'ditron-canonicalize'?"),
    ("frobnicate", "unknown pass or pipeline 'frobnicate'; see ditron-opt --list-passes"),
    ("ditron-verify,,ditron-canonicalize", "empty pass name in pipeline"),
    ("ditron-verify,", "empty pass name in pipeline"),
    ("ditron-verify{", "unbalanced braces in pass pipeline 'ditron-verify{'"),
    ("ditron-verify}", "unbalanced '}' in pass pipeline"),
    ("ditron-verify{}x", "malformed pass 'ditron-verify{}x': options go in braces at the end"),
    ("ditron-verify{}{}", "malformed pass 'ditron-verify{}{}'"),
    ("func.func(ditron-verify)", "ditron passes run on the whole module; write them without the 'func.func(...)'"),
    ("ditron-check{upstream=false}", "pipeline 'ditron-check' takes no options; set them on its passes"),
    ("ditron-canonicalize{upstream}", "option 'upstream' needs a value (write upstream=VALUE)"),
    ("ditron-canonicalize{upstream=yes upstream=no}", "option 'upstream' is given twice"),
    ("ditron-canonicalize{upstream=maybe}", "option 'upstream' expects true or false, got 'maybe'"),
    ("ditron-canonicalize{fast=true}", "pass 'ditron-canonicalize' has no option 'fast' (options: upstream)"),
    ("ditron-verify{x=1}", "pass 'ditron-verify' has no option 'x' (options: none)"),
    ('ditron-canonicalize{upstream="true}', "cannot read options"),
])
def test_pipeline_errors(text, message):
    with pytest.raises(PassError) as info:
        parse_pipeline(text)
    assert message in str(info.value)


def test_self_including_pipeline(monkeypatch):
    monkeypatch.setitem(PIPELINES, "loop-a", ("ditron-verify", "loop-b"))
    monkeypatch.setitem(PIPELINES, "loop-b", ("loop-a",))
    with pytest.raises(PassError, match="pipeline 'loop-a' includes itself: loop-a -> loop-b -> loop-a"):
        parse_pipeline("loop-a")


def test_broken_registry_entries(monkeypatch):
    monkeypatch.setitem(PASSES, "ditron-missing", "no_such_module:NoPass")
    with pytest.raises(PassError, match="pass 'ditron-missing' is registered as 'no_such_module:NoPass' but cannot "
                                        "be loaded: ModuleNotFoundError"):
        get_pass_class("ditron-missing")
    monkeypatch.setitem(PASSES, "ditron-misnamed", "verify:VerifyPass")
    with pytest.raises(PassError, match="registry entry 'ditron-misnamed' points at verify:VerifyPass, whose name "
                                        "is 'ditron-verify'"):
        get_pass_class("ditron-misnamed")
    monkeypatch.setitem(PASSES, "ditron-noclass", "verify:NoSuchPass")
    with pytest.raises(PassError, match="cannot be loaded: AttributeError"):
        get_pass_class("ditron-noclass")


# ---------------------------------------------------------------------------------------------- option types

@dataclass(frozen=True)
class OptionsPass(Pass):
    """A pass with one option of every supported type (test only)."""

    name = "ditron-test-options"
    summary = "test"

    flag: bool = option(False, "a bool")
    count: int = option(3, "an int")
    ratio: float = option(0.5, "a float")
    label: str = option("x", "a str")
    sizes: tuple[int, ...] = option((1, 2), "ints")
    pair: tuple[str, int] = option(("a", 1), "a str and an int")
    limit: typing.Optional[int] = option(None, "an optional int")
    maybe: float | None = option(None, "an optional float")

    def __post_init__(self):
        if self.count < 0:
            raise ValueError(f"count must be >= 0, got {self.count}")

    def run(self, module):
        pass


@pytest.fixture
def options_pass(monkeypatch):
    real = registry.get_pass_class
    monkeypatch.setattr(registry, "get_pass_class",
                        lambda name: OptionsPass if name == OptionsPass.name else real(name))
    return OptionsPass


@pytest.mark.parametrize("text, field, value", [
    ("flag=true", "flag", True), ("flag=1", "flag", True), ("flag=ON", "flag", True), ("flag=no", "flag", False),
    ("count=7", "count", 7), ("count=0x10", "count", 16), ("count=1_000", "count", 1000),
    ("ratio=0.25", "ratio", 0.25), ("ratio=1e-3", "ratio", 1e-3), ("ratio=3", "ratio", 3.0),
    ("label=hello", "label", "hello"), ('label="two words"', "label", "two words"), ("label=a=b", "label", "a=b"),
    ("sizes=4,8,16", "sizes", (4, 8, 16)), ("sizes=", "sizes", ()), ("sizes=5", "sizes", (5,)),
    ("pair=b,2", "pair", ("b", 2)),
    ("limit=9", "limit", 9), ("limit=none", "limit", None), ("limit=", "limit", None),
    ("maybe=2.5", "maybe", 2.5), ("maybe=None", "maybe", None),
])
def test_option_conversion(options_pass, text, field, value):
    (p,) = parse_pipeline(f"ditron-test-options{{{text}}}")
    assert getattr(p, field) == value
    assert type(getattr(p, field)) is type(value)


def test_kebab_and_snake_option_names(options_pass):
    @dataclass(frozen=True)
    class Kebab(Pass):
        name = "ditron-test-options"
        num_sms: int = option(1, "")

    assert Kebab.from_options({"num-sms": "4"}).num_sms == 4
    assert Kebab.from_options({"num_sms": "5"}).num_sms == 5
    assert Kebab(num_sms=6).spec() == "ditron-test-options{num-sms=6}"
    assert Kebab.option_help() == ["num-sms: int = 1  "]


@pytest.mark.parametrize("text, message", [
    ("flag=2", "option 'flag' expects true or false, got '2'"),
    ("count=seven", "option 'count' expects an integer, got 'seven'"),
    ("count=1.5", "option 'count' expects an integer, got '1.5'"),
    ("ratio=fast", "option 'ratio' expects a number, got 'fast'"),
    ("sizes=1,x", "option 'sizes' expects an integer, got 'x'"),
    ("pair=a", "option 'pair' expects 2 comma-separated values, got 'a'"),
    ("pair=a,b", "option 'pair' expects an integer, got 'b'"),
    ("limit=lots", "option 'limit' expects an integer, got 'lots'"),
    ("count=-1", "pass 'ditron-test-options': count must be >= 0, got -1"),
    ("limit= 4", "pass 'ditron-test-options': write limit=4, without spaces around '='"),
])
def test_option_errors(options_pass, text, message):
    with pytest.raises(PassError) as info:
        parse_pipeline(f"ditron-test-options{{{text}}}")
    assert message in str(info.value)


def test_spec_round_trips_options(options_pass):
    p = OptionsPass(flag=True, count=9, ratio=0.125, label="two words", sizes=(3, 4), pair=("z", 5), limit=2,
                    maybe=1.5)
    spec = p.spec()
    assert spec.startswith("ditron-test-options{flag=true count=9 ratio=0.125 label='two words' sizes=3,4 ")
    assert parse_pipeline(spec) == [p]
    assert OptionsPass().spec() == "ditron-test-options"


def test_option_help_lists_types_and_defaults():
    helps = dict(line.split(": ", 1) for line in OptionsPass.option_help())
    assert helps["flag"] == "bool = false  a bool"
    assert helps["sizes"] == "tuple[int, ...] = 1,2  ints"
    assert helps["limit"].startswith("Optional[int] = None") or helps["limit"].startswith("int | None = None")
    assert helps["maybe"] == "float | None = None  an optional float"


def test_base_pass_run_is_abstract():
    with pytest.raises(NotImplementedError):
        Pass().run(None)


# ------------------------------------------------------------------------------- rewrite helpers for passes

def test_rewrite_helpers(mlir_context):
    from mlir import ir

    from ditron.dialects import parse_module
    from ditron.dialects.opbase import walk_ops
    from ditron.passes.rewrite import apply_to_fixpoint, constant_int, erase_op, has_uses, replace_op

    module = parse_module(
        "func.func @f(%x: index) -> index {\n"
        "  %c5 = arith.constant 5 : index\n  %big = arith.constant -1 : i64\n"
        "  %t = arith.constant true\n  %w = arith.constant 100000000000000000000 : i128\n"
        "  %f = arith.constant 1.0 : f32\n  %s = arith.addi %x, %c5 : index\n  return %s : index\n}")
    ops = {op.results[0].get_name(): op for op in walk_ops(module) if op.name == "arith.constant"}
    values = {name: constant_int(op.results[0]) for name, op in ops.items()}
    assert values == {"%c5": 5, "%c-1_i64": -1, "%true": 1, "%c100000000000000000000_i128": 10 ** 20, "%cst": None}
    add = next(op for op in walk_ops(module) if op.name == "arith.addi")
    assert constant_int(add.results[0]) is None
    func_arg = add.operands[0]
    assert constant_int(func_arg) is None  # a block argument
    assert has_uses(ops["%c5"].results[0]) and not has_uses(ops["%cst"].results[0])
    with pytest.raises(AssertionError, match="erasing arith.constant whose result still has uses"):
        erase_op(ops["%c5"])  # refused here instead of aborting inside MLIR
    with pytest.raises(AssertionError, match="2 replacements for 1 results"):
        replace_op(add, [func_arg, func_arg])
    replace_op(add, [func_arg])
    assert "arith.addi" not in str(module)

    # a pattern that never stops rewriting is caught, not looped on forever
    with pytest.raises(AssertionError, match="patterns did not converge"):
        apply_to_fixpoint(module.operation, {"arith.constant": lambda op: True})
    # erasing patterns run until nothing matches, however many ops there are
    count = apply_to_fixpoint(module.operation, {"arith.constant": lambda op: not has_uses(op.results[0])
                                                 and (erase_op(op) or True)})
    assert count == 5 and "arith.constant" not in str(module)
