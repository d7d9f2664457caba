"""Shared pytest set-up for ditron.

* MLIR context leak guard (autouse): after every test, ``gc.collect()`` (only when contexts are alive) and fail
  the test if it left more MLIR contexts alive than there were when it started. Contexts still alive when the interpreter exits can abort
  Python ("Fatal Python error: PyThreadState_Get", see MLIR_NOTES.md), so every test must drop the contexts it
  creates: keep ``ir.Context``/``ir.Module`` inside a ``with ditron_context():`` block and do not stash IR objects in
  globals. Fixtures of module or session scope may hold a context for their lifetime (they are set up before the
  count is taken); at the end of the session no context may be left at all.
* Cheap collections: once the test modules are imported, everything alive is moved out of the collector's sight
  (``gc.freeze()``), so a ``gc.collect()`` scans only what the tests made since: 0.1 ms instead of 0.1 s with
  torch, triton and MLIR loaded -- it was a third of the suite's time.
* ``gpu`` marker: skipped where torch sees no CUDA device.
* ``mlir_context`` fixture: a fresh ditron context (dialects loaded), current during one test.
"""
from __future__ import annotations

import gc
import os
import sys

import pytest

# the tests' tilings are the model's: a tuning cache of this machine (ditron tune) must not change them; the tuner's
# tests name their cache file
os.environ["DITRON_TUNING_CACHE"] = "off"


def live_mlir_contexts() -> int:
    """How many MLIR contexts are alive now (0 if the bindings were never imported)."""
    ir = sys.modules.get("mlir._mlir_libs._mlir.ir") or sys.modules.get("mlir.ir")
    if ir is None:
        return 0
    return ir.Context._get_live_count()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        item.stash[_FAILED] = True  # a failed test's traceback may keep its context alive: do not pile on


_FAILED = pytest.StashKey[bool]()


def _live_after_collecting() -> int:
    """Live MLIR contexts once garbage is collected (no collection when none is alive: nothing to find)."""
    if live_mlir_contexts():
        gc.collect()
    return live_mlir_contexts()


@pytest.fixture(autouse=True)
def _no_leaked_mlir_context(request):
    before = _live_after_collecting()
    yield
    if request.node.stash.get(_FAILED, False):
        return
    after = _live_after_collecting()
    assert after <= before, (
        f"{request.node.nodeid} leaked {after - before} MLIR context(s) ({before} alive before, {after} after "
        f"gc.collect()): keep contexts inside 'with ditron_context():' and drop every IR object built in them")


@pytest.fixture(scope="session", autouse=True)
def _no_mlir_context_at_exit(request):
    gc.collect()
    assert live_mlir_contexts() == 0, "an MLIR context is alive before the first test (made at import time)"
    gc.freeze()  # the imported modules' objects: never garbage, no longer scanned by each collection
    yield
    gc.unfreeze()
    gc.collect()
    if request.session.testsfailed:
        return
    left = live_mlir_contexts()
    assert left == 0, f"{left} MLIR context(s) still alive at the end of the session (exit-time abort risk)"


@pytest.fixture
def mlir_context():
    """A fresh MLIR context with the ditron dialects loaded, current for the test's duration (``ir.Context.current``).
    It yields nothing: pytest keeps fixture values referenced until after the leak check, so a yielded context
    would look leaked."""
    from ditron.dialects import ditron_context

    with ditron_context():
        yield None


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:  # torch missing or broken: no GPU tests
        has_gpu = False
    if not has_gpu:
        skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is false)")
        for item in gpu_items:
            item.add_marker(skip)
