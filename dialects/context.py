"""The one owner of MLIR contexts: creates them, loads ditron's IRDL dialects exactly once per context, parses.

Loading an IRDL dialect twice into one context aborts the process, so nothing else in ditron calls
``irdl.load_dialects``; ``load_dialects(ctx)`` adds them safely to a context made elsewhere. Use
``with ditron_context() as ctx:`` and let the context die at the end of the block (an MLIR context still alive at
interpreter exit can abort Python after some failures).

``parse_module`` also refuses, with a located error, the inputs on which MLIR 22's parser would abort or overflow
the stack instead of reporting an error (see ``_refuse_parser_aborts``), and explains the parse failures MLIR
leaves without a diagnostic.
"""
from __future__ import annotations

import contextlib
import functools
import re
from importlib import resources
from typing import Iterator

from mlir import ir
from mlir.dialects import irdl

from ..errors import Diagnostic, ParseError

DIALECTS = ("task", "device", "core")
DIALECT_NAMESPACES = tuple(f"ditron_{d}" for d in DIALECTS)


@functools.cache
def irdl_source(dialect: str) -> str:
    """The IRDL text of one ditron dialect ('task', 'device' or 'core')."""
    return resources.files("ditron.dialects").joinpath(f"{dialect}.irdl.mlir").read_text()


@contextlib.contextmanager
def ditron_context() -> Iterator[ir.Context]:
    """A fresh context with the three ditron dialects loaded, unregistered (Triton) ops allowed, and an unknown
    location as default. It is also the current context inside the block."""
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    with ctx, ir.Location.unknown(ctx):
        load_dialects(ctx)
        yield ctx


# One op per dialect, to ask a context whether that dialect is already loaded.
_PROBE_OPS = {"task": "matmul", "device": "copy", "core": "wait"}


def load_dialects(ctx: ir.Context) -> None:
    """Load the three ditron dialects into ctx, skipping any already there (loading one twice aborts)."""
    for dialect in DIALECTS:
        if not ctx.is_registered_operation(f"ditron_{dialect}.{_PROBE_OPS[dialect]}"):
            irdl.load_dialects(ir.Module.parse(irdl_source(dialect), ctx))


def location_parts(loc: ir.Location) -> tuple[str | None, int, int]:
    """(file, line, col) of the first file location inside loc (name, call-site and fused locations are
    looked through); (None, 0, 0) if there is none."""
    if loc.is_a_file():
        return loc.filename, loc.start_line, loc.start_col
    if loc.is_a_name():
        return location_parts(loc.child_loc)
    if loc.is_a_callsite():
        return location_parts(loc.callee)
    if loc.is_a_fused():
        for inner in loc.locations:
            found = location_parts(inner)
            if found[0] is not None:
                return found
    return None, 0, 0


def diagnostic_at(loc: ir.Location, message: str, severity: str = "error") -> Diagnostic:
    file, line, col = location_parts(loc)
    if file == "-":
        file = "<stdin>"
    return Diagnostic(message, file, line, col, severity)


_CURRENT_OP = re.compile(r'see current operation:\s*(?:%[^=]*= )?"?([A-Za-z_][\w$]*\.[\w$.]+)')


def _op_named_in(diag) -> str | None:
    """The op name in the 'see current operation: ...' note MLIR attaches to verifier errors, or None."""
    for note in diag.notes:
        m = _CURRENT_OP.match(note.message)
        if m:
            return m.group(1)
    return None


_NAMED_OP_MESSAGE = re.compile(r"'[\w$.]+' op ")

# (op, words in MLIR's message) -> what to add so that the user can fix it
_HINTS = {
    ("ditron_device.launch", "operandSegmentSizes"):
        "; a launch has 16 optional argument slots: write operandSegmentSizes = array<i32: ...> with 16 entries, "
        "1 for each of its arguments and then 0 (ditron's Launch.build does this)",
}


def _with_op_name(message: str, op_name: str | None) -> str:
    """IRDL's verifier says 'op expects exactly 1 operands' or 'expected base type ...' without naming the op;
    name it the way MLIR's own verifiers do ('ditron_task.all_gather' op ...), and add a hint where one helps."""
    if op_name is None or _NAMED_OP_MESSAGE.match(message) or message.startswith("unregistered operation"):
        return message
    hint = "".join(h for (name, words), h in _HINTS.items() if name == op_name and words in message)
    if message.startswith("op "):
        return f"'{op_name}' {message}{hint}"
    return f"'{op_name}' op {message}{hint}"


def diagnostics_of(err: ir.MLIRError) -> list[Diagnostic]:
    """err's diagnostics as located Diagnostics (errors, with their notes), op names filled in."""
    diags = []
    for d in err.error_diagnostics:
        diags.append(diagnostic_at(d.location, _with_op_name(d.message, _op_named_in(d))))
        diags.extend(diagnostic_at(n.location, n.message, "note") for n in d.notes
                     if "see current operation" not in n.message)
    return diags


def _mlir_error_to_parse_error(err: ir.MLIRError) -> ParseError:
    return ParseError(str(err), diagnostics_of(err))


def parse_module(text: str, filename: str = "<stdin>") -> ir.Module:
    """Parse MLIR text in the current context; its file locations name ``filename``.
    Raises ParseError with located diagnostics."""
    bad, why = None, ""
    if "\0" in text:
        bad, why = text.index("\0"), "input contains a NUL character; is it a text .mlir file?"
    else:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:  # lone surrogates: bytes that were not UTF-8, decoded leniently
            bad, why = err.start, "input is not UTF-8 text"
    if bad is not None:
        before = text[:bad]
        line, col = before.count("\n") + 1, len(before) - before.rfind("\n")
        raise ParseError(why, [Diagnostic(why, filename, line, col)])
    _refuse_parser_aborts(text, filename)
    try:
        module = ir.Module.parse(text)
    except ir.MLIRError as err:
        if not err.error_diagnostics:
            raise _silent_parse_failure(text, filename) from None
        error = _mlir_error_to_parse_error(err)
        raise ParseError(str(error), [Diagnostic(d.message, filename if d.file == "<stdin>" else d.file,
                                                 d.line, d.col, d.severity) for d in error.diagnostics]) from None
    if filename != "-":
        _rename_file_locations(module.operation, filename)
    return module


# Inputs on which MLIR 22's parser (built with assertions) aborts the process instead of reporting an error.
# Each is refused before parsing, with the error MLIR should have given.
_PARSER_ABORTS = (
    (re.compile(r"\barray\s*<\s*index\b"),
     "dense arrays need an integer or float element type, like array<i64: ...>; array<index ...> is not supported"),
)
_STRING_OR_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*')


# MLIR's parser, verifier and printer recurse once per level of nesting and overflow the stack (a segfault) at a
# few thousand levels of brackets or regions; real programs stay far below this limit.
MAX_NESTING = 256


def _refuse_parser_aborts(text: str, filename: str) -> None:
    """Raise ParseError at the first construct of _PARSER_ABORTS, or nesting deeper than MAX_NESTING, outside
    string literals and comments."""
    blanked = _STRING_OR_COMMENT.sub(lambda m: " " * len(m.group(0)), text)

    def error_at(offset: int, message: str) -> ParseError:
        before = text[:offset]
        line, col = before.count("\n") + 1, len(before) - before.rfind("\n")
        return ParseError(message, [Diagnostic(message, filename, line, col)])

    for pattern, message in _PARSER_ABORTS:
        m = pattern.search(blanked)
        if m:
            raise error_at(m.start(), message)
    too_deep = (f"brackets, regions and aliases nest deeper than {MAX_NESTING} levels; ditron refuses such input "
                f"(MLIR's parser would overflow the stack)")
    alias_depth: dict[str, int] = {}  # '#name' / '!name' -> how deep its definition nests, its aliases included
    for m in _ALIAS_DEF.finditer(blanked):
        name, start, end = m.group(1), m.start(2), m.end(2)
        alias_depth[name] = _max_depth(blanked, start, end, alias_depth)
        if alias_depth[name] > MAX_NESTING:
            raise error_at(m.start(), too_deep)
    at = _deepest_point(blanked, alias_depth)
    if at is not None:
        raise error_at(at, too_deep)


_ALIAS_DEF = re.compile(r"^[ \t]*([#!][A-Za-z_][\w$.-]*)[ \t]*=[ \t]*(.*)$", re.M)
_NESTING_TOKEN = re.compile(r"->|[\[\]{}()<>]|[#!][A-Za-z_][\w$.-]*")


def _max_depth(text: str, start: int, end: int, aliases: dict[str, int]) -> int:
    """The deepest nesting in text[start:end], counting an alias reference as the nesting of its definition."""
    depth = deepest = 0
    for m in _NESTING_TOKEN.finditer(text, start, end):
        tok = m.group(0)
        if tok in ("(", "[", "{", "<"):
            depth += 1
            deepest = max(deepest, depth)
        elif tok in (")", "]", "}", ">"):
            depth = max(0, depth - 1)
        elif tok != "->":
            deepest = max(deepest, depth + aliases.get(tok, 0))
    return deepest


def _deepest_point(text: str, aliases: dict[str, int]) -> int | None:
    """The offset where the nesting first exceeds MAX_NESTING, or None."""
    depth = 0
    for m in _NESTING_TOKEN.finditer(text):
        tok = m.group(0)
        if tok in ("(", "[", "{", "<"):
            depth += 1
            if depth > MAX_NESTING:
                return m.start()
        elif tok in (")", "]", "}", ">"):
            depth = max(0, depth - 1)
        elif tok != "->" and depth + aliases.get(tok, 0) > MAX_NESTING:
            return m.start()
    return None


_CUSTOM_FORM = re.compile(r'(?<!["\w.$])(ditron_(?:task|device|core)\.\w+)(?![\w"])')


def _silent_parse_failure(text: str, filename: str) -> ParseError:
    """A ParseError for a parse that failed without a diagnostic. MLIR does this for an IRDL op written in custom
    form (``ditron_task.matmul %a, %b``): IRDL ops have only the generic form, so point at the first one."""
    for number, line in enumerate(text.split("\n"), 1):
        m = _CUSTOM_FORM.search(line.split("//", 1)[0])
        if m:
            message = (f"custom op '{m.group(1)}' is unknown: ditron ops have only the generic form, "
                       f"like \"{m.group(1)}\"(%operands) {{attributes}} : (types) -> types")
            return ParseError(message, [Diagnostic(message, filename, number, m.start(1) + 1)])
    message = "cannot parse the input (MLIR gave no diagnostic)"
    return ParseError(message, [Diagnostic(message, filename, 1, 1)])


def _renamed(loc: ir.Location, filename: str) -> ir.Location | None:
    """loc with every file location of the parser's "-" pointing at filename; None if nothing changes."""
    if loc.is_a_file():
        return ir.Location.file(filename, loc.start_line, loc.start_col) if loc.filename == "-" else None
    if loc.is_a_name():
        child = _renamed(loc.child_loc, filename)
        return None if child is None else ir.Location.name(loc.name_str, childLoc=child)
    if loc.is_a_callsite():
        callee, caller = _renamed(loc.callee, filename), _renamed(loc.caller, filename)
        if callee is None and caller is None:
            return None
        return ir.Location.callsite(callee or loc.callee, [caller or loc.caller])
    if loc.is_a_fused() and not str(loc).startswith("loc(fused<"):  # metadata cannot be read back: leave those
        inner = [_renamed(x, filename) for x in loc.locations]
        if all(x is None for x in inner):
            return None
        return ir.Location.fused([n or o for n, o in zip(inner, loc.locations)])
    return None


def _rename_file_locations(root: ir.Operation, filename: str) -> None:
    def rename(op: ir.Operation) -> ir.WalkResult:
        new = _renamed(op.location, filename)
        if new is not None:
            op.location = new
        for region in op.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    new = _renamed(arg.location, filename)
                    if new is not None:
                        arg.set_location(new)
        return ir.WalkResult.ADVANCE

    root.walk(rename)


def parse_file(path: str) -> ir.Module:
    """Parse an MLIR file in the current context; its locations carry the file name."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise ParseError(f"cannot read '{path}': {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ParseError(f"cannot read '{path}': not UTF-8 text (byte {err.start} is 0x{err.object[err.start]:02x})"
                         ) from None
    return parse_module(text, path)
