"""One exception family for everything ditron raises on purpose.

Every error says what is wrong and, where one exists, how to fix it. Errors tied to IR carry diagnostics with
source locations, printed as ``file:line:col: error: message`` like MLIR tools do.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Diagnostic:
    """One located message. ``file`` is None when the IR had no file location."""

    message: str
    file: str | None = None
    line: int = 0
    col: int = 0
    severity: str = "error"

    def __str__(self) -> str:
        if self.file is None:
            return f"{self.severity}: {self.message}"
        return f"{self.file}:{self.line}:{self.col}: {self.severity}: {self.message}"


class DitronError(Exception):
    """Base of every error ditron raises on purpose."""

    def __init__(self, message: str, diagnostics: tuple[Diagnostic, ...] | list[Diagnostic] = ()):
        self.diagnostics = tuple(diagnostics) or (Diagnostic(message),)
        super().__init__(message if not diagnostics else "\n".join(str(d) for d in self.diagnostics))

    def render(self) -> str:
        """The message as a command-line tool prints it: one located line per diagnostic."""
        return "\n".join(str(d) for d in self.diagnostics)


class ParseError(DitronError):
    """The input is not valid MLIR, or uses an op the dialects do not have."""


class VerificationError(DitronError):
    """The IR parses but breaks a rule of its dialect (shapes, sharding, mesh axes, ...)."""


class PassError(DitronError):
    """An unknown pass or pipeline, a bad option, or a pass that cannot transform its input."""


class TargetError(DitronError):
    """An unknown or unsupported target, or a backend that cannot compile for it."""


class CompileError(DitronError):
    """Triton or a backend tool failed on IR ditron produced."""


class DitronRuntimeError(DitronError):
    """A failure while loading or running a compiled executable."""


class WaitTimeoutError(DitronRuntimeError):
    """A wait on a signal slot did not complete in time: names the rank, the slot and the value expected."""


def report_internal_error(err: BaseException, stderr) -> int:
    """What a command-line tool does with an exception that is not a DitronError (a bug in ditron): one line on
    stderr, the Python trace only under $DITRON_TRACEBACK=1; returns the exit status, 1."""
    from .env import traceback_enabled
    if traceback_enabled():
        import traceback
        traceback.print_exception(err, file=stderr)
    stderr.write(f"error: internal compiler error: {type(err).__name__}: {err} "
                 "(set DITRON_TRACEBACK=1 for the Python trace, and please report it)\n")
    return 1
