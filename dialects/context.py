"""The one owner of MLIR contexts: creates them, loads ditron's IRDL dialects exactly once per context, parses.

Loading an IRDL dialect twice into one context aborts the process, so nothing else in ditron calls
``irdl.load_dialects``. Use ``with ditron_context() as ctx:`` and let the context die at the end of the block
(an MLIR context still alive at interpreter exit can abort Python after some failures).
"""
from __future__ import annotations

import contextlib
import functools
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
        for dialect in DIALECTS:
            irdl.load_dialects(ir.Module.parse(irdl_source(dialect), ctx))
        yield ctx


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


def _mlir_error_to_parse_error(err: ir.MLIRError) -> ParseError:
    diags = []
    for d in err.error_diagnostics:
        diags.append(diagnostic_at(d.location, d.message))
        diags.extend(diagnostic_at(n.location, n.message, "note") for n in d.notes
                     if "see current operation" not in n.message)
    return ParseError(str(err), diags)


def parse_module(text: str, filename: str = "<stdin>") -> ir.Module:
    """Parse MLIR text in the current context; its file locations name ``filename``.
    Raises ParseError with located diagnostics."""
    try:
        module = ir.Module.parse(text)
    except ir.MLIRError as err:
        error = _mlir_error_to_parse_error(err)
        raise ParseError(str(error), [Diagnostic(d.message, filename if d.file == "<stdin>" else d.file,
                                                 d.line, d.col, d.severity) for d in error.diagnostics]) from None
    if filename != "-":
        _rename_file_locations(module.operation, filename)
    return module


def _rename_file_locations(root: ir.Operation, filename: str) -> None:
    def rename(op: ir.Operation) -> ir.WalkResult:
        loc = op.location
        if loc.is_a_file() and loc.filename == "-":
            op.location = ir.Location.file(filename, loc.start_line, loc.start_col)
        return ir.WalkResult.ADVANCE

    root.walk(rename)


def parse_file(path: str) -> ir.Module:
    """Parse an MLIR file in the current context; its locations carry the file name."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise ParseError(f"cannot read '{path}': {err.strerror}") from None
    return parse_module(text, path)
