"""What the simulator found: located findings, the error it raises on bad input, and the result it returns.

A finding is a bug in the *program* (a race, a deadlock, a wrong result ...), reported with the rank, the call
(epoch), the op location and the region involved. A ``SimulationError`` is a problem that keeps the simulator from
running at all (an unsupported op, inputs of the wrong shape, a kernel without a record): it is raised, not
collected.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..errors import Diagnostic, DitronError

# Finding kinds, most severe first (the order of the summary).
DEADLOCK = "deadlock"
RACE_READ = "read-before-signal"          # a read not ordered after the write it sees (missing/too-weak wait)
RACE_WRITE = "write-write"                # two writes to overlapping regions, unordered
RACE_WAR = "write-after-read"             # a write unordered with an earlier read of the same region (reuse)
UNINITIALIZED = "uninitialized-read"      # a read of elements that no one wrote in this program
OUT_OF_BOUNDS = "out-of-bounds"           # a region outside its buffer, or a rank outside the world
UNWRITTEN_OUTPUT = "unwritten-output"     # an output element no one wrote
MISMATCH = "mismatch"                     # an output differs from the reference
INVALID = "invalid"                       # a rule of the device IR broken (remote access to a non-symmetric
#                                           buffer, gpu-scope signal to a peer, buffer allocated late ...)

KINDS = (DEADLOCK, RACE_READ, RACE_WRITE, RACE_WAR, UNINITIALIZED, OUT_OF_BOUNDS, UNWRITTEN_OUTPUT, MISMATCH,
         INVALID)


class SimulationError(DitronError):
    """The simulator cannot run this program or these inputs (not a bug it found in the program)."""

    @classmethod
    def at(cls, loc: "Loc", message: str, *notes: Diagnostic) -> "SimulationError":
        """The error, located: printed as ``file:line:col: error: message`` (plus notes)."""
        return cls(message, [loc.diagnostic(message), *notes])


@dataclass(frozen=True)
class Loc:
    """A source location (from ``diagnostic_at``), kept as plain data so that no MLIR object outlives loading."""

    file: str | None
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}" if self.file is not None else "<unknown location>"

    def diagnostic(self, message: str, severity: str = "error") -> Diagnostic:
        return Diagnostic(message, self.file, self.line, self.col, severity)


UNKNOWN = Loc(None)


@dataclass
class Finding:
    """One bug found in the program. ``loc`` is where it shows (the reading op for a race, the blocked op for a
    deadlock); ``notes`` point at the other party (the unordered writer, the other blocked ranks ...)."""

    kind: str
    message: str
    loc: Loc = UNKNOWN
    rank: int | None = None
    call: int | None = None
    region: str | None = None
    notes: list[Diagnostic] = field(default_factory=list)
    count: int = 1          # how many times the same (kind, ops, buffer) was seen; only the first is described

    def diagnostics(self) -> list[Diagnostic]:
        where = []
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        if self.call is not None:
            where.append(f"call {self.call}")
        prefix = f"[{self.kind}] " + (f"{', '.join(where)}: " if where else "")
        suffix = f" (seen {self.count} times)" if self.count > 1 else ""
        return [self.loc.diagnostic(prefix + self.message + suffix), *self.notes]

    def __str__(self) -> str:
        return "\n".join(str(d) for d in self.diagnostics())


class Findings:
    """Findings, deduplicated by a key: the same race between the same two ops on the same buffer is reported
    once, with a count."""

    def __init__(self, limit_per_kind: int = 50):
        self.items: list[Finding] = []
        self._by_key: dict[tuple, Finding] = {}
        self._limit = limit_per_kind
        self._per_kind: dict[str, int] = {}

    def add(self, finding: Finding, key: tuple | None = None) -> None:
        key = (finding.kind, finding.loc, finding.rank, finding.message) if key is None else (finding.kind, *key)
        seen = self._by_key.get(key)
        if seen is not None:
            seen.count += 1
            return
        n = self._per_kind.get(finding.kind, 0)
        self._per_kind[finding.kind] = n + 1
        if n >= self._limit:
            return
        self._by_key[key] = finding
        self.items.append(finding)

    def total(self, kind: str) -> int:
        return self._per_kind.get(kind, 0)


@dataclass
class Mismatch:
    rank: int
    call: int
    output: int
    max_abs_error: float
    worst_index: tuple[int, ...]
    got: float
    expected: float
    bad_fraction: float


@dataclass
class SimResult:
    """What ``simulate`` returns.

    ``outputs[rank]`` are the "out" arguments of the last call, in argument order (float32 for bf16/f16 data,
    rounded to the element type); ``outputs_per_call[call - 1][rank]`` keep every call. ``inputs_per_call`` are the
    inputs used (generated from the seed when none were given). ``findings`` lists the bugs found.
    """

    world_size: int
    seed: int
    calls: int
    function: str
    outputs_per_call: list[list[list[np.ndarray]]]
    inputs_per_call: list[list[list[np.ndarray]]]
    findings: list[Finding]
    steps: int
    output_names: list[str] = field(default_factory=list)
    compared: bool = False
    finding_totals: dict[str, int] = field(default_factory=dict)
    schedule_digest: str = ""       # a hash of the interleaving (which entity ran at each step)
    # (period, residues) where the outputs were computed and compared at the rows whose number modulo period is
    # one of residues only (sim.products.Sample; the other rows of outputs hold NaN); None: whole
    sampled_rows: tuple[int, list[int]] | None = None

    @property
    def outputs(self) -> list[list[np.ndarray]]:
        return self.outputs_per_call[-1] if self.outputs_per_call else []

    @property
    def ok(self) -> bool:
        """No finding at all (and, when a reference was given, every output equal to it)."""
        return not self.findings

    def of_kind(self, *kinds: str) -> list[Finding]:
        return [f for f in self.findings if f.kind in kinds]

    @property
    def deadlocked(self) -> bool:
        return bool(self.of_kind(DEADLOCK))

    @property
    def races(self) -> list[Finding]:
        return self.of_kind(RACE_READ, RACE_WRITE, RACE_WAR)

    def summary(self) -> str:
        """A few human-readable lines: the verdict, the counts per kind and the first findings."""
        head = (f"ditron.sim: @{self.function}, {self.world_size} rank(s), seed {self.seed}, "
                f"{self.calls} call(s), {self.steps} steps")
        if self.ok:
            verdict = "OK: no deadlock, no race" + (", outputs equal to the reference" if self.compared else "")
            if self.compared and self.sampled_rows is not None:
                period, residues = self.sampled_rows
                verdict += (f" at their sampled rows (row mod {period} in {{{', '.join(map(str, residues))}}}; "
                            f"--check-all-rows for every row)")
            return f"{head}\n{verdict}"
        totals = self.finding_totals or {}
        counts = ", ".join(f"{totals.get(k, 0) or len(self.of_kind(k))} {k}" for k in KINDS if self.of_kind(k))
        lines = [head, f"FAILED: {counts}"]
        for f in self.findings[:8]:
            lines.extend("  " + str(d) for d in f.diagnostics()[:4])
        if len(self.findings) > 8:
            lines.append(f"  ... and {len(self.findings) - 8} more finding(s)")
        return "\n".join(lines)

    def raise_on_findings(self) -> "SimResult":
        if self.findings:
            raise SimulationError(self.summary(), [d for f in self.findings for d in f.diagnostics()])
        return self


def describe_region(buffer_label: str, lo: Sequence[int], hi: Sequence[int]) -> str:
    box = ", ".join(f"{a}:{b}" for a, b in zip(lo, hi))
    return f"{buffer_label}[{box}]"
