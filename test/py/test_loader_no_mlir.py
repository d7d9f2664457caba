"""Loading an artifact needs torch + triton only: the MLIR bindings are never imported (and need not exist).

The parent process compiles; child processes load with `mlir` made unimportable."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ditron
from ditron.errors import DitronRuntimeError, TargetError
from ditron.runtime.loader import _grid3, load_artifact, target_runs_on
from ditron.tools.build_gpu_test_artifacts import ELEMENTWISE_MLIR

REPO = Path(__file__).resolve().parents[2]

# Runs first in every child: any attempt to import mlir (or ditron's MLIR-based modules) fails loudly.
BLOCK_MLIR = textwrap.dedent("""
    import sys
    class _NoMLIR:
        BLOCKED = ("mlir", "ditron.dialects", "ditron.passes", "ditron.compiler", "ditron.api")
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in self.BLOCKED):
                raise ImportError(f"test: importing {name} is not allowed while loading an artifact")
            return None
    sys.meta_path.insert(0, _NoMLIR())
""")


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("noml") / "elementwise"
    ditron.compile(ELEMENTWISE_MLIR, target="cuda:90", out_dir=out, cache=False)
    return out


def run_child(body: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(BLOCK_MLIR + textwrap.dedent(body))
    env = dict(os.environ, DITRON_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=env)


def test_load_imports_no_mlir(artifact, tmp_path):
    proc = run_child(f"""
        import json
        import ditron
        exe = ditron.load({str(artifact)!r})
        from ditron.runtime.loader import load_artifact
        exe2 = load_artifact({str(artifact)!r})
        k = exe.kernels["axpy_kernel"]
        assert k.metadata.name == "axpy_kernel" and k.metadata.num_warps == 4
        assert not k.loaded and k.binary[:4] == b"\\x7fELF"
        assert "mlir" not in sys.modules, "mlir was imported"
        bad = [m for m in sys.modules if m.startswith(("ditron.dialects", "ditron.passes", "ditron.compiler",
                                                       "ditron.api"))]
        assert not bad, bad
        print(json.dumps({{"kernels": sorted(exe.kernels), "target": exe.target,
                          "args": [a.name for a in k.args], "triton": "triton" in sys.modules}}))
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result == {"kernels": ["add_kernel", "axpy_kernel"], "target": "cuda:90",
                      "args": ["alpha", "x_ptr", "y_ptr", "out_ptr", "n"], "triton": True}


def test_blocker_works(tmp_path):
    """The child's import blocker does catch an mlir import (so the test above can fail)."""
    proc = run_child("import ditron\nditron.compile('module {}')\n", tmp_path)
    assert proc.returncode != 0 and "importing" in proc.stderr and "is not allowed" in proc.stderr


def test_cli_info_imports_no_mlir(artifact, tmp_path):
    proc = run_child(f"""
        import io
        from ditron.cli import run
        out, err = io.StringIO(), io.StringIO()
        code = run(["info", {str(artifact)!r}], out, err)
        assert code == 0, err.getvalue()
        assert "mlir" not in sys.modules
        print(out.getvalue())
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "target     cuda:90" in proc.stdout and "axpy_kernel: axpy_kernel.cubin" in proc.stdout


def test_loader_errors_without_mlir(artifact, tmp_path):
    """A damaged artifact gives the same precise error in a process without MLIR."""
    (tmp_path / "empty").mkdir()
    proc = run_child(f"""
        import ditron
        from ditron.artifact import ArtifactError
        try:
            ditron.load({str(tmp_path / "empty")!r})
        except ArtifactError as err:
            print(err)
        assert "mlir" not in sys.modules
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "is not an artifact directory: it has no manifest.json" in proc.stdout


# ----------------------------------------------------------------------------------- launching, before any GPU work

def test_argument_binding(artifact):
    k = load_artifact(artifact)["axpy_kernel"]
    assert k.bind((2.0, 1, 2, 3), {"n": 10}) == [2.0, 1, 2, 3, 10]
    assert k.bind((), {"n": 1, "alpha": 0.5, "x_ptr": 1, "y_ptr": 2, "out_ptr": 3}) == [0.5, 1, 2, 3, 1]
    with pytest.raises(DitronRuntimeError, match="kernel 'axpy_kernel' is missing arguments: n \\(arguments: alpha, "
                                                 "x_ptr, y_ptr, out_ptr, n\\)"):
        k.bind((2.0, 1, 2, 3), {})
    with pytest.raises(DitronRuntimeError, match="kernel 'axpy_kernel' takes 5 arguments .* got 6 positional"):
        k.bind((2.0, 1, 2, 3, 4, 5), {})
    with pytest.raises(DitronRuntimeError, match="kernel 'axpy_kernel' has no argument 'm'"):
        k.bind((2.0, 1, 2, 3), {"m": 4})
    with pytest.raises(DitronRuntimeError, match="argument 'alpha' given twice"):
        k.bind((2.0, 1, 2, 3), {"alpha": 4, "n": 1})
    with pytest.raises(DitronRuntimeError, match="'x_ptr' \\(\\*fp32\\) needs a tensor or an address, got str"):
        k.bind((2.0, "x", 2, 3, 4), {})


def test_grid_checks():
    assert _grid3("k", 4) == (4, 1, 1) and _grid3("k", (2, 3)) == (2, 3, 1) and _grid3("k", [1, 2, 3]) == (1, 2, 3)
    for bad in ((), (1, 2, 3, 4), (1.5,), -1, "4", (True,)):
        with pytest.raises(DitronRuntimeError, match="grid must be an int or a tuple of 1 to 3 ints"):
            _grid3("k", bad)


def test_target_compatibility():
    sm90 = {"vendor": "cuda", "arch": 90}
    sm80 = {"vendor": "cuda", "arch": 80}
    gfx942 = {"vendor": "hip", "arch": "gfx942"}
    assert target_runs_on(sm90, "cuda:90") and not target_runs_on(sm90, "cuda:100")
    assert target_runs_on(sm80, "cuda:86") and target_runs_on(sm80, "cuda:80")
    assert not target_runs_on(sm80, "cuda:90") and not target_runs_on(sm90, "cuda:80")
    assert target_runs_on(gfx942, "hip:gfx942") and not target_runs_on(gfx942, "hip:gfx950")
    assert not target_runs_on(gfx942, "cuda:90") and not target_runs_on(sm90, "hip:gfx942")


def test_launch_checks_the_device(artifact, monkeypatch):
    """The target is checked against the current GPU at the first launch (faked device here)."""
    from ditron.runtime import loader
    exe = load_artifact(artifact)
    monkeypatch.setattr(loader, "device_target_name", lambda: "cuda:80")
    with pytest.raises(TargetError, match="was compiled for cuda:90, which cannot run on this GPU \\(cuda:80\\); "
                                          "recompile it with --target cuda:80"):
        exe["add_kernel"]((1,), 1, 2, 3, 4)
    assert not exe["add_kernel"].loaded


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the error on a machine without GPU")
def test_launch_without_gpu(artifact):
    exe = load_artifact(artifact)
    with pytest.raises(DitronRuntimeError, match="no GPU to launch on"):
        exe["add_kernel"]((1,), 1, 2, 3, 4)


def test_triton_launcher_accepts_the_signature(artifact):
    """Triton's CUDA launcher generator (the C source it compiles on the GPU machine) takes every argument type
    the artifact records: pointers as objects, f32 scalars as doubles, i32 as ints."""
    from triton.backends.nvidia.driver import make_launcher
    exe = load_artifact(artifact)
    formats = {}
    for name, k in exe.kernels.items():
        src = k.triton_kernel.src
        code = make_launcher(src.constants, src.signature, k.metadata.tensordesc_meta)
        formats[name] = code.split('PyArg_ParseTuple(args, "')[1].split('"')[0]
    # grid x/y/z, stream, function, cooperative, pdl, scratch x2, packed metadata, launch metadata, 2 hooks, args
    assert formats["add_kernel"].endswith("OOOi")
    assert formats["axpy_kernel"].endswith("dOOOi")


def test_scratch_allocator_is_installed_only_when_missing():
    """Kernels with global scratch need Triton's allocator: the loader installs torch's when none is set."""
    import contextvars

    from triton.runtime import _allocation

    from ditron.runtime.loader import _ensure_allocator

    def fresh():
        assert isinstance(_allocation._allocator.get(), _allocation.NullAllocator)
        _ensure_allocator()
        return _allocation._allocator.get()

    def user_set():
        mine = lambda size, alignment, stream: None  # noqa: E731
        _allocation._allocator.set(mine)
        _ensure_allocator()
        return _allocation._allocator.get() is mine

    assert not isinstance(contextvars.Context().run(fresh), _allocation.NullAllocator)
    assert contextvars.Context().run(user_set)
