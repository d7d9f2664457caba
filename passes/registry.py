"""The pass registry, named pipelines and the pipeline parser.

A pass is a frozen dataclass: class-level ``name`` (``ditron-...``), ``summary`` and a docstring with a before/after
example; its dataclass fields are its options, typed, with defaults. ``run(module)`` transforms the module in place
and raises a DitronError (usually PassError) when it cannot. Passes are imported lazily, by name.

Pipelines are written as in mlir-opt: ``ditron-a,ditron-b{opt=1 other=x}``; a named pipeline expands in place.
"""
from __future__ import annotations

import dataclasses
import importlib
import re
import shlex
import typing
from dataclasses import dataclass
from typing import Any, ClassVar

from mlir import ir

from ..errors import PassError

# kebab-case pass name -> "module:Class" under ditron.passes (imported on first use)
PASSES: dict[str, str] = {
    "ditron-verify": "verify:VerifyPass",
    "ditron-canonicalize": "canonicalize:CanonicalizePass",
    "ditron-lower-core-to-triton": "lower_core_to_triton:LowerCoreToTritonPass",
    "ditron-partition": "partition:PartitionPass",
    "ditron-fuse-overlap": "fuse_overlap:FuseOverlapPass",
    "ditron-fuse-epilogue": "fuse_epilogue:FuseEpiloguePass",
    "ditron-tile": "tile:TilePass",
    "ditron-lower-task-to-device": "lower_task_to_device:LowerTaskToDevicePass",
    "ditron-schedule-overlap": "schedule_overlap:ScheduleOverlapPass",
    "ditron-lower-device-to-core": "lower_device_to_core:LowerDeviceToCorePass",
    "ditron-emit-host-program": "emit_host_program:EmitHostProgramPass",
}

_DEVICE = ("ditron-partition", "ditron-canonicalize", "ditron-fuse-overlap", "ditron-fuse-epilogue", "ditron-tile",
           "ditron-lower-task-to-device", "ditron-schedule-overlap", "ditron-lower-device-to-core")
# named pipeline -> its passes (each may carry {options})
PIPELINES: dict[str, tuple[str, ...]] = {
    "ditron-check": ("ditron-verify", "ditron-canonicalize"),
    # task IR (global or local view) -> the device program (a func.func with ditron.level = "device") launching
    # core kernels (tt.func + ditron_core): what the simulator runs and what ditron.ops reads its kernels from; the
    # target comes from the module's ditron.target (default cuda:90)
    "ditron-device": _DEVICE,
    # the same, then the device function becomes the host program (ditron-emit-host-program): core level is left.
    # ditron.compile runs it, then ditron-lower-core-to-triton.
    "ditron-default": (*_DEVICE, "ditron-emit-host-program"),
}


@dataclass(frozen=True)
class Pass:
    """Base of every ditron pass."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def run(self, module: ir.Module) -> None:
        raise NotImplementedError

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        return list(dataclasses.fields(cls))

    @classmethod
    def option_help(cls) -> list[str]:
        hints = typing.get_type_hints(cls)
        out = []
        for f in cls.options():
            help_ = f.metadata.get("help", "")
            out.append(f"{f.name.replace('_', '-')}: {_type_name(hints[f.name])} = {_show(f.default)}  {help_}")
        return out

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "Pass":
        """Build the pass from textual options ('kebab-name' or 'snake_name' -> text)."""
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in cls.options()}
        values: dict[str, Any] = {}
        for key, text in options.items():
            field_name = key.replace("-", "_")
            if field_name not in fields:
                known = ", ".join(f.replace("_", "-") for f in fields) or "none"
                raise PassError(f"pass '{cls.name}' has no option '{key}' (options: {known})")
            values[field_name] = _convert(cls.name, key, text, hints[field_name])
        try:
            return cls(**values)
        except (ValueError, TypeError) as err:
            raise PassError(f"pass '{cls.name}': {err}") from None

    def spec(self) -> str:
        """This pass as pipeline text, with the options that differ from their defaults."""
        opts = [f"{f.name.replace('_', '-')}={_show(getattr(self, f.name))}" for f in self.options()
                if getattr(self, f.name) != f.default]
        return self.name + ("{" + " ".join(opts) + "}" if opts else "")


def option(default: Any, help: str) -> Any:  # noqa: A002 - mirrors argparse
    """A pass option field with a help text."""
    return dataclasses.field(default=default, metadata={"help": help})


def _type_name(t) -> str:
    if typing.get_origin(t) is not None:  # tuple[int, ...], int | None, Optional[str]
        return str(t).replace("typing.", "")
    return getattr(t, "__name__", str(t)).replace("typing.", "")


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tuple):
        return ",".join(_show(x) for x in v)
    if isinstance(v, str) and (not v or any(c.isspace() or c in "{}'\"" for c in v)):
        return shlex.quote(v)  # read back by _parse_options
    return str(v)


def _convert(pass_name: str, key: str, text: str, t) -> Any:
    def bad(expect: str):
        return PassError(f"pass '{pass_name}': option '{key}' expects {expect}, got '{text}'")

    origin = typing.get_origin(t)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        args = [a for a in typing.get_args(t) if a is not type(None)]
        if text in ("", "none", "None"):
            return None
        return _convert(pass_name, key, text, args[0])
    if t is bool:
        if text.lower() in ("true", "1", "yes", "on"):
            return True
        if text.lower() in ("false", "0", "no", "off"):
            return False
        raise bad("true or false")
    if t is int:
        try:
            return int(text, 0)
        except ValueError:
            raise bad("an integer") from None
    if t is float:
        try:
            return float(text)
        except ValueError:
            raise bad("a number") from None
    if origin is tuple:
        args = typing.get_args(t)
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if len(args) == 2 and args[1] is Ellipsis:  # tuple[X, ...]
            return tuple(_convert(pass_name, key, p, args[0]) for p in parts)
        if len(parts) != len(args):
            raise bad(f"{len(args)} comma-separated values")
        return tuple(_convert(pass_name, key, p, a) for p, a in zip(parts, args))
    return text


def get_pass_class(name: str) -> type[Pass]:
    if name not in PASSES:
        hint = _closest(name, list(PASSES) + list(PIPELINES))
        raise PassError(f"unknown pass or pipeline '{name}'" + (f"; did you mean '{hint}'?" if hint else
                                                                 "; see ditron-opt --list-passes"))
    module_name, _, class_name = PASSES[name].partition(":")
    try:
        cls = getattr(importlib.import_module(f"ditron.passes.{module_name}"), class_name)
    except (ImportError, AttributeError) as err:
        raise PassError(f"pass '{name}' is registered as '{PASSES[name]}' but cannot be loaded: "
                        f"{type(err).__name__}: {err}") from None
    if not (isinstance(cls, type) and issubclass(cls, Pass)) or cls.name != name:
        raise PassError(f"registry entry '{name}' points at {PASSES[name]}, whose name is "
                        f"'{getattr(cls, 'name', None)}'; the two must agree")
    return cls


def _closest(name: str, candidates: list[str]) -> str | None:
    import difflib
    found = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


def _split_top(text: str, sep: str) -> list[str]:
    """Split text on sep outside braces and parentheses."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "{(":
            depth += 1
        elif ch in "})":
            depth -= 1
            if depth < 0:
                raise PassError(f"unbalanced '{ch}' in pass pipeline '{text}'")
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise PassError(f"unbalanced braces in pass pipeline '{text}'")
    parts.append("".join(cur))
    return parts


_COMMA_JOINED = re.compile(r",\s*[A-Za-z][\w-]*=")  # 'a=1,b=2': a value that swallowed the next option
_COMMA_BEFORE_OPTION = re.compile(r"\s*,\s*(?=[A-Za-z][\w-]*=)")


def _parse_options(name: str, body: str) -> dict[str, str]:
    """'a=1 b="x y"' -> {'a': '1', 'b': 'x y'} (items separated by spaces; values may be quoted)."""
    try:
        items = shlex.split(body)
    except ValueError as err:
        raise PassError(f"pass '{name}': cannot read options '{body}': {err}") from None
    options: dict[str, str] = {}
    for i, item in enumerate(items):
        if item.startswith(",") or _COMMA_JOINED.search(item) or item.endswith(",") and item is not items[-1]:
            fixed = _COMMA_BEFORE_OPTION.sub(" ", body.strip())
            raise PassError(f"pass '{name}': options are separated by spaces, not commas: write {name}{{{fixed}}}")
        if "=" not in item:
            before = items[i - 1] if i else ""
            if before.endswith("="):  # 'block-m= 64': the value split off by a space
                raise PassError(f"pass '{name}': write {before}{item}, without spaces around '='")
            raise PassError(f"pass '{name}': option '{item}' needs a value (write {item}=VALUE)")
        key, value = item.split("=", 1)
        if key.replace("-", "_") in {k.replace("-", "_") for k in options}:
            raise PassError(f"pass '{name}': option '{key}' is given twice")
        options[key] = value
    return options


def parse_pipeline(text: str, _expanding: tuple[str, ...] = ()) -> list[Pass]:
    """'ditron-a,ditron-b{opt=v}' (optionally wrapped in builtin.module(...)) -> pass instances."""
    text = text.strip()
    if text.startswith("builtin.module(") and text.endswith(")"):
        text = text[len("builtin.module("):-1]
    if not text:
        return []
    passes: list[Pass] = []
    for item in _split_top(text, ","):
        item = item.strip()
        if not item:
            raise PassError(f"empty pass name in pipeline '{text}'")
        name, options = item, {}
        if "(" in item:
            anchor = item.split("(", 1)[0]
            raise PassError(f"'{item}': ditron passes run on the whole module; write them without the "
                            f"'{anchor}(...)' nesting")
        if "{" in item:
            if not item.endswith("}") or item.count("{") != 1:
                raise PassError(f"malformed pass '{item}': options go in braces at the end, like {{opt=value}}")
            name, body = item[:-1].split("{", 1)
            name = name.strip()
            options = _parse_options(name, body)
        if name in PIPELINES:
            if options:
                raise PassError(f"pipeline '{name}' takes no options; set them on its passes")
            if name in _expanding:
                raise PassError(f"pipeline '{name}' includes itself: {' -> '.join((*_expanding, name))}")
            passes.extend(parse_pipeline(",".join(PIPELINES[name]), (*_expanding, name)))
            continue
        passes.append(get_pass_class(name).from_options(options))
    return passes


def run_passes(module: ir.Module, passes: list[Pass]) -> None:
    """Run passes in order on module through the pass manager (passes/manager.py): verified after each, recorded.
    Raises DitronError."""
    from .manager import PassManager
    PassManager(passes).run(module)
