"""Fuzz ditron-opt with mutated valid inputs: no crash (abort, segfault), no traceback, no hang.

The cases come from fuzz_worker.make_case (valid inputs under test/lit/dialects, test/lit/passes and examples/,
each mutated 1-3 times, deterministically from a seed and the case number). Python and MLIR take about a second
to start, so each worker process runs many cases through ditron-opt's run() and prints the case it is on before
running it: if a worker dies (a signal, an exit code >= 128) or hangs, the test names the case and writes its
input next to the test's temporary files so that it can be replayed with ``ditron-opt``.

DITRON_FUZZ_SEED and DITRON_FUZZ_CASES (cases per worker) override the defaults, for longer local runs.
"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import fuzz_worker  # noqa: E402  (a helper module next to this test, not a test itself)

SEED = int(os.environ.get("DITRON_FUZZ_SEED", "20261129"))
WORKERS = 4
CASES_PER_WORKER = int(os.environ.get("DITRON_FUZZ_CASES", "150"))
WORKER_TIMEOUT_S = 150


def _replay_hint(tmp_path: pathlib.Path, index: int) -> str:
    case = fuzz_worker.make_case(SEED, index)
    path = tmp_path / f"fuzz_case_{index}.mlir"
    path.write_text(case["text"])
    return (f"case {index}: {case['source']} after {case['mutations']}; replay: ditron-opt {path} "
            f"{' '.join(case['argv'])}")


def test_corpus_is_valid():
    """Every input the fuzzer starts from is accepted as it is (else the mutations prove little)."""
    from ditron.tools.ditron_opt import run
    import io

    inputs = fuzz_worker.corpus()
    assert len(inputs) >= 10
    for name, text in inputs:
        out, err = io.StringIO(), io.StringIO()
        assert run(["--pass-pipeline=ditron-verify,ditron-canonicalize"], io.StringIO(text), out, err) == 0, \
            f"{name}: {err.getvalue()}"


def test_cases_are_deterministic_and_mutated():
    inputs = fuzz_worker.corpus()
    first = [fuzz_worker.make_case(SEED, i, inputs) for i in range(50)]
    assert first == [fuzz_worker.make_case(SEED, i, inputs) for i in range(50)]
    originals = {text for _, text in inputs}
    assert sum(case["text"] not in originals for case in first) >= 45
    kinds = {m.split()[0] for case in first for m in case["mutations"]}
    assert len(kinds) >= 8, kinds


def test_fuzz_ditron_opt(tmp_path):
    start = time.monotonic()
    procs = []
    for w in range(WORKERS):
        cmd = [sys.executable, str(HERE / "fuzz_worker.py"), str(SEED), str(w * CASES_PER_WORKER),
               str(CASES_PER_WORKER)]
        out = open(tmp_path / f"worker{w}.log", "w+b")
        procs.append((w, subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=HERE), out))
    failures, ran = [], 0
    for w, proc, out in procs:
        try:
            rc = proc.wait(timeout=max(1.0, WORKER_TIMEOUT_S - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
        out.seek(0)
        log = out.read().decode(errors="replace")
        out.close()
        started = [int(i) for i in re.findall(r"^CASE (\d+)$", log, re.M)]
        finished = {int(i) for i in re.findall(r"^(?:DONE|PROBLEM) (\d+)", log, re.M)}
        ran += len(finished)
        for m in re.finditer(r"^PROBLEM (\d+) (.*)$", log, re.M):
            failures.append(f"{m.group(2)}\n    {_replay_hint(tmp_path, int(m.group(1)))}")
        unfinished = [i for i in started if i not in finished]
        if rc is None:
            where = _replay_hint(tmp_path, unfinished[-1]) if unfinished else "before its first case"
            failures.append(f"worker {w} hung (killed after {WORKER_TIMEOUT_S} s) on {where}")
        elif rc != 0 or "FINISHED" not in log:
            why = f"signal {-rc}" if rc < 0 else f"exit code {rc}"
            where = _replay_hint(tmp_path, unfinished[-1]) if unfinished else "outside any case"
            tail = "\n".join(log.strip().splitlines()[-5:])
            failures.append(f"worker {w} died ({why}) on {where}\n    last output: {tail}")
    assert not failures, f"{len(failures)} fuzz failure(s):\n" + "\n".join(failures)
    assert ran == WORKERS * CASES_PER_WORKER


def test_worker_reports_escapes_and_leaks(monkeypatch):
    """The worker's checks can fail: an exception escaping run(), an exit code of a crash and a context left
    alive are reported."""
    import ditron.tools.ditron_opt as driver
    from mlir import ir

    def raising(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(driver, "run", raising)
    assert fuzz_worker.run_case({"argv": [], "text": "module {}"}) == \
        (None, "exception escaped run(): RuntimeError: boom")

    monkeypatch.setattr(driver, "run", lambda *args: 134)
    assert fuzz_worker.run_case({"argv": [], "text": "module {}"}) == (134, "exit code 134")

    kept = []
    monkeypatch.setattr(driver, "run", lambda *args: kept.append(ir.Context()) or 0)
    assert fuzz_worker.run_case({"argv": [], "text": "module {}"}) == (0, "1 MLIR context(s) alive after the case")
    kept.clear()
