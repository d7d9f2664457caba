"""The pass manager: the one place where ditron runs passes on a module.

    manager = PassManager("ditron-partition,ditron-tile{num-sms=8}", print_after_all=True, err=sys.stderr)
    manager.run(module)          # verify after each pass; print, time and record as asked
    manager.timings              # [(pass spec, seconds), ...]

Every driver (ditron-opt, ditron.compile, ditron.ops, the frontend's ``to_mlir``, ditron sim) runs its passes
through it, so that each pass's result is verified (a pass that leaves invalid IR is named, with located
diagnostics, instead of whatever reads the IR next), ``--print-ir-after`` and ``--time-passes`` mean the same
everywhere, and the module carries a record of the stage passes that ran on it.

The record: the module's ``ditron.pipeline`` string attribute lists, as pipeline text with their options, the
stages it has been through: the passes of the staged pipeline (``RECORDED_PIPELINE``, ditron-default, whose last
is the host-program emission), in order. A pass is recorded because it RAN as the module's next stage, whether or not it
changed the module (a canonicalize that found nothing to fold still ran); a pass that runs out of its place
(ditron-canonicalize on a module not yet partitioned) is no stage of it and is not recorded, so the record never
makes a later stage skip ditron-partition. A later stage reads the record back (``passes_run``, ``passes_left``)
instead of guessing from the IR which passes already ran; the record travels with the module's text (ditron-opt's
output, a .mlir file). An empty module comes back as it is (as through mlir-opt): it gets no record.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence, TextIO

from mlir import ir

from ..errors import PassError
from ..schema import PIPELINE_ATTR
from .registry import PIPELINES, Pass, _split_top, parse_pipeline

RECORDED_PIPELINE = "ditron-default"  # the staged pipeline whose passes the record lists
EMIT_PASS = "ditron-emit-host-program"  # the last stage (RECORDED_PIPELINE's last pass)


def recorded_names() -> tuple[str, ...]:
    """The passes the manager records: those of RECORDED_PIPELINE (where the build registers it), whose last is
    the host-program emission (recorded even where the build does not register the pipeline)."""
    names = [p.name for p in parse_pipeline(RECORDED_PIPELINE)] if RECORDED_PIPELINE in PIPELINES else []
    return tuple(dict.fromkeys([*names, EMIT_PASS]))


def record_text(module: ir.Module) -> str:
    """The module's record as pipeline text ('' when it has none). PassError for a record that is not a string."""
    attrs = module.operation.attributes
    if PIPELINE_ATTR not in attrs:
        return ""
    attr = attrs[PIPELINE_ATTR]
    if not isinstance(attr, ir.StringAttr):
        try:
            attr = ir.StringAttr(attr)
        except ValueError:
            raise PassError(f"the module's {PIPELINE_ATTR} must be a string (the passes that ran on it, as "
                            f"pipeline text), got {attr}") from None
    return attr.value


def passes_run(module: ir.Module) -> list[str]:
    """The names of the recorded passes that ran on module, in order (options dropped)."""
    text = record_text(module)
    if not text.strip():
        return []
    return [item.split("{", 1)[0].strip() for item in _split_top(text, ",") if item.strip()]


def passes_left(module: ir.Module, names: Sequence[str]) -> list[str]:
    """The passes of ``names`` (a pipeline, in order) still to run on module: those after the longest prefix of
    ``names`` its record lists in that order."""
    done, ran = 0, iter(passes_run(module))
    for name in names:
        if name not in ran:  # consumes the record up to the match: the matches must come in order
            break
        done += 1
    return list(names[done:])


def _append_record(module: ir.Module, spec: str) -> None:
    text = record_text(module)
    module.operation.attributes[PIPELINE_ATTR] = ir.StringAttr.get(f"{text},{spec}" if text else spec)


class PassManager:
    """Runs passes in order on a module (see the module doc).

    ``passes``: pipeline text or parsed passes. ``verify_each``: run the verifier (ditron.dialects.verify) after
    every pass. ``print_after_all`` / ``print_after`` (pass names): write the IR after those passes to ``err``.
    ``time_passes``: write each pass's time to ``err`` (``timings`` holds them either way). ``record``: append each
    pass that is the module's next stage to its record. ``debuginfo``: print locations in the dumps.
    ``after_each``: called as ``after_each(pass, module)`` after each pass has run and been verified (an
    instrument, as MLIR's: e.g. ditron.ops reads ditron-tile's choices there)."""

    def __init__(self, passes: str | Sequence[Pass], *, verify_each: bool = True, print_after_all: bool = False,
                 print_after: Sequence[str] = (), time_passes: bool = False, record: bool = True,
                 debuginfo: bool = False, err: TextIO | None = None,
                 after_each: Callable[[Pass, ir.Module], None] | None = None):
        self.passes: list[Pass] = parse_pipeline(passes) if isinstance(passes, str) else list(passes)
        for p in self.passes:
            if not isinstance(p, Pass):
                raise PassError(f"the pass manager runs ditron passes, got {type(p).__name__}")
        self.verify_each, self.print_after_all = verify_each, print_after_all
        self.print_after = frozenset(print_after)
        self.time_passes, self.record, self.debuginfo = time_passes, record, debuginfo
        if (print_after_all or self.print_after or time_passes) and err is None:
            raise PassError("the pass manager prints IR dumps and timings to a stream: give it err=")
        self.err, self.after_each = err, after_each
        self.timings: list[tuple[str, float]] = []
        self._stages = recorded_names() if record else ()

    def run(self, module: ir.Module) -> None:
        """Run every pass on module (in place). Raises the DitronError of the first pass that fails, or the
        VerificationError of the IR it left."""
        from ..dialects.verify import verify
        for p in self.passes:
            start = time.perf_counter()
            p.run(module)
            seconds = time.perf_counter() - start
            self.timings.append((p.spec(), seconds))
            if self.time_passes:
                self.err.write(f"// time {p.name}: {1e3 * seconds:.2f} ms\n")
            if self._stages and len(module.body.operations) and p.name in self._stages and \
                    passes_left(module, self._stages)[:1] == [p.name]:  # the module's next stage
                _append_record(module, p.spec())
            if self.verify_each:
                verify(module)
            if self.print_after_all or p.name in self.print_after:
                self.err.write(f"// -----// IR Dump After {p.spec()} //----- //\n")
                self.err.write(module.operation.get_asm(enable_debug_info=self.debuginfo, assume_verified=False)
                               + "\n")
            if self.after_each is not None:
                self.after_each(p, module)


def run_pipeline(module: ir.Module, passes: str | Sequence[Pass], **options) -> PassManager:
    """Run passes on module through a PassManager built with options; the manager (its timings)."""
    manager = PassManager(passes, **options)
    manager.run(module)
    return manager


__all__ = ["PassManager", "RECORDED_PIPELINE", "passes_left", "passes_run", "record_text", "recorded_names",
           "run_pipeline"]
