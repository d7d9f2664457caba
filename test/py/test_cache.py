"""The content-addressed compile cache: keys, hits, atomic publication under races, damaged entries."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import ditron
from ditron import cache as cache_mod
from ditron.artifact import MANIFEST
from ditron.cache import TMP_PREFIX, CacheError, CompileCache, cache_key, ditron_source_hash
from ditron.tools.build_gpu_test_artifacts import ELEMENTWISE_MLIR, VECTOR_ADD_MLIR, compile_times

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def cache_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("DITRON_CACHE_DIR", str(root))
    monkeypatch.delenv("DITRON_NO_CACHE", raising=False)
    return root


def entries(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/*") if not p.name.startswith(TMP_PREFIX))


def leftovers(root: Path) -> list[Path]:
    return sorted(root.glob(f"*/{TMP_PREFIX}*"))


# ------------------------------------------------------------------------------------------------------------ keys

def test_key_covers_every_input(monkeypatch):
    base = cache_key("ir", "cuda:90", {"num_warps": 4})
    assert base == cache_key("ir", "cuda:90", {"num_warps": 4}) and len(base) == 64
    assert base != cache_key("ir2", "cuda:90", {"num_warps": 4})
    assert base != cache_key("ir", "cuda:80", {"num_warps": 4})
    assert base != cache_key("ir", "cuda:90", {"num_warps": 8})
    assert base != cache_key("ir", "cuda:90", {"num_warps": 4}, source_name="a.mlir")
    monkeypatch.setattr(cache_mod, "triton_version", lambda: "9.9.9")
    assert base != cache_key("ir", "cuda:90", {"num_warps": 4})
    monkeypatch.undo()
    monkeypatch.setattr(cache_mod, "ditron_source_hash", lambda: "0" * 64)
    assert base != cache_key("ir", "cuda:90", {"num_warps": 4})


def test_source_hash_covers_ditron_sources():
    files = [p for d in cache_mod._package_dirs() for p in d.rglob("*.py")]
    names = {p.name for p in files}
    assert {"api.py", "registry.py", "context.py", "base.py"} <= names  # ditron_py, passes, dialects, backends
    assert any(p.suffix == ".mlir" for d in cache_mod._package_dirs() for p in d.rglob("*.irdl.mlir"))
    assert len(ditron_source_hash()) == 64


def test_source_change_changes_key(tmp_path, monkeypatch):
    """Editing a source file of ditron gives another key (computed in a fresh process each time)."""
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(cache_mod, "_package_dirs", lambda: [pkg])
    cache_mod.ditron_source_hash.cache_clear()
    try:
        first = cache_mod.ditron_source_hash()
        (pkg / "a.py").write_text("x = 2\n")
        cache_mod.ditron_source_hash.cache_clear()
        assert cache_mod.ditron_source_hash() != first
    finally:
        cache_mod.ditron_source_hash.cache_clear()


# ------------------------------------------------------------------------------------------------- hits and misses

def test_second_compile_hits(cache_root):
    first = ditron.compile(VECTOR_ADD_MLIR, target="cuda:90")
    second = ditron.compile(VECTOR_ADD_MLIR, target="cuda:90")
    assert (first.compile_info["cache"], second.compile_info["cache"]) == ("miss", "hit")
    assert first.path == second.path and entries(cache_root) == [first.path]
    assert first.path.name == first.compile_info["key"] and first.manifest.cache_key == first.path.name
    other = ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", num_warps=8)
    assert other.compile_info["cache"] == "miss" and len(entries(cache_root)) == 2
    assert not leftovers(cache_root)


def test_no_cache_env(cache_root, monkeypatch):
    monkeypatch.setenv("DITRON_NO_CACHE", "1")
    exe = ditron.compile(VECTOR_ADD_MLIR, target="cuda:90")
    assert exe.compile_info["cache"] == "off" and exe.path is None
    assert not cache_root.exists()
    assert set(exe.kernels) == {"add_kernel"} and exe["add_kernel"].binary[:4] == b"\x7fELF"


def test_cache_argument_overrides_env(cache_root, monkeypatch):
    monkeypatch.setenv("DITRON_NO_CACHE", "1")
    assert ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", cache=True).compile_info["cache"] == "miss"
    monkeypatch.delenv("DITRON_NO_CACHE")
    assert ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", cache=False).compile_info["cache"] == "off"


def test_damaged_entry_is_rebuilt(cache_root):
    exe = ditron.compile(VECTOR_ADD_MLIR, target="cuda:90")
    (exe.path / MANIFEST).write_text("{ half written")
    again = ditron.compile(VECTOR_ADD_MLIR, target="cuda:90")
    assert again.compile_info["cache"] == "miss" and json.loads((again.path / MANIFEST).read_text())
    # an entry whose binary no longer matches its manifest fails to load: it is discarded and rebuilt
    binary = again.path / "add_kernel.cubin"
    binary.write_bytes(b"garbage")
    third = ditron.compile(VECTOR_ADD_MLIR, target="cuda:90")
    assert third.compile_info["cache"] == "miss" and (third.path / "add_kernel.cubin").read_bytes()[:4] == b"\x7fELF"
    assert not leftovers(cache_root)


@pytest.mark.parametrize("damage", [
    lambda p: (p / next(n for n in os.listdir(p) if n.endswith(".ptx"))).write_text(
        (p / next(n for n in os.listdir(p) if n.endswith(".ptx"))).read_text()[:100]),     # a truncated stage
    lambda p: (p / next(n for n in os.listdir(p) if n.endswith(".llir"))).write_bytes(b""),  # an empty one
    lambda p: (p / MANIFEST).write_text((p / MANIFEST).read_text().replace('"host_program": null',
                                                                           '"host_program":  null')),
    lambda p: (p / "stray.txt").write_text("left by someone"),                                # a file too many
    lambda p: os.unlink(p / next(n for n in os.listdir(p) if n.endswith(".ttgir"))),          # one too few
], ids=["truncated-ptx", "empty-llir", "edited-manifest", "extra-file", "missing-ttgir"])
def test_damage_the_loader_cannot_see_is_a_miss(cache_root, tmp_path, damage):
    """Entries are sealed (a hash of every file, written last): a stage text truncated, a manifest edited, a file
    added or removed make the entry a miss -- never served, never copied into an artifact -- and the rebuild
    replaces it."""
    exe = ditron.compile(VECTOR_ADD_MLIR, target="cuda:90")
    good = {p.name: p.read_bytes() for p in exe.path.iterdir()}
    damage(exe.path)
    out = tmp_path / "out"
    again = ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", out_dir=out)
    assert again.compile_info["cache"] == "miss"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == good
    assert {p.name: p.read_bytes() for p in exe.path.iterdir()} == good
    assert ditron.compile(VECTOR_ADD_MLIR, target="cuda:90").compile_info["cache"] == "hit"
    assert not leftovers(cache_root)


def test_failed_compile_leaves_nothing(cache_root):
    with pytest.raises(ditron.CompileError, match="no kernel"):
        ditron.compile("module {\n}\n", target="cuda:90")
    assert not entries(cache_root) and not leftovers(cache_root)


def test_unwritable_cache_dir(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("DITRON_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(CacheError, match="cannot create the compile cache directory .*set DITRON_CACHE_DIR to a "
                                         "writable directory or DITRON_NO_CACHE=1"):
        ditron.compile(VECTOR_ADD_MLIR, target="cuda:90")


def test_stale_temporaries_are_cleaned(cache_root):
    store = CompileCache(cache_root)
    key = "ab" + "0" * 62
    stale = store.entry(key).parent / f"{TMP_PREFIX}dead-compile"
    stale.mkdir(parents=True)
    old = time.time() - 2 * cache_mod.STALE_TMP_S
    os.utime(stale, (old, old))
    fresh = store.entry(key).parent / f"{TMP_PREFIX}running-compile"
    fresh.mkdir()
    store.publish(key, lambda d: (d / MANIFEST).write_text("{}"))
    assert not stale.exists() and fresh.exists()


# ------------------------------------------------------------------------------------------------------------ races

def test_publish_race_threads(cache_root):
    """Two builders of one key run at the same time: both get the same, complete entry; nothing is left over."""
    store = CompileCache(cache_root)
    key = "cd" + "1" * 62
    both_building = threading.Barrier(2, timeout=30)
    results, errors = {}, []

    def build(tag):
        def fill(d: Path):
            both_building.wait()  # both temporaries exist before either is renamed
            (d / "who").write_text(tag)
            (d / MANIFEST).write_text(json.dumps({"tag": tag}))
        return fill

    def worker(tag):
        try:
            results[tag] = store.publish(key, build(tag))
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert results["a"] == results["b"] == store.entry(key)
    winner = (store.entry(key) / "who").read_text()
    assert json.loads((store.entry(key) / MANIFEST).read_text()) == {"tag": winner}
    assert not leftovers(cache_root)


def test_concurrent_compiles_in_two_processes(cache_root, tmp_path):
    """Two processes compile the same module into one cache at once; both succeed and share one entry."""
    src = tmp_path / "k.mlir"
    src.write_text(ELEMENTWISE_MLIR)
    go = tmp_path / "go"
    script = (
        "import sys, time, os, pathlib, ditron\n"
        f"go = pathlib.Path({str(go)!r})\n"
        "while not go.exists():\n"
        "    time.sleep(0.005)\n"
        f"exe = ditron.compile(pathlib.Path({str(src)!r}), target='cuda:90')\n"
        "print(exe.compile_info['cache'], exe.path, sorted(exe.kernels))\n")
    env = dict(os.environ, DITRON_CACHE_DIR=str(cache_root))
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=REPO) for _ in range(2)]
    time.sleep(0.5)  # let both import ditron, mlir and triton
    go.write_text("go")
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    lines = [out.split() for out, _ in outs]
    paths = {line[1] for line in lines}
    assert len(paths) == 1 and all(line[2:] == ["['add_kernel',", "'axpy_kernel']"] for line in lines)
    assert entries(cache_root) == [Path(paths.pop())]
    assert not leftovers(cache_root)
    # a third process finds the entry (a process, not this one: its hash of ditron's sources is from its start)
    again = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split()[:2] == ["hit", str(entries(cache_root)[0])]


# ---------------------------------------------------------------------------------------------------- compile time

def test_compile_time_report(capsys):
    """Cold vs cached compile of the vector add, beside triton.compile of the same kernel (printed; run with -s)."""
    times = compile_times(repeat=1)
    with capsys.disabled():
        print("\ncompile time of a 1024-wide f32 vector add for cuda:90 (imports excluded):")
        for name, seconds in times.items():
            print(f"  {name:24s} {seconds * 1e3:8.1f} ms")
    assert times["ditron cached"] < times["ditron cold"]
    assert times["triton.compile cached"] < times["triton.compile cold"]
