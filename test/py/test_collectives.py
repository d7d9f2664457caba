"""passes/collectives: the table of collective lowerings keyed by (op, algorithm). Every registered algorithm
lowers a program ditron-tile was told to give it, through the table, to a device program that ditron.sim runs
race-free to the task program's result; a tiling naming an algorithm nobody registered is a located error; the
table refuses a second lowering of a key; the collectives do not import the function lowering (no cycle)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ditron.dialects import ditron_context, parse_module
from ditron.dialects.verify import verify
from ditron.errors import PassError
from ditron.passes import collectives, planner
from ditron.passes.registry import parse_pipeline
from ditron.sim import simulate, task_reference

ROOT = Path(__file__).resolve().parents[2]
W, M, K, N = 2, 128, 64, 64  # rows of one shard: M; the GEMMs are [W*M, K] x [K, N]

# (op, algorithm) -> (the program, ditron-tile's options that make it choose the algorithm)
CASES = {
    ("all_gather", "pull"): ("all_gather", ""),
    ("all_to_all", "pull"): ("all_to_all", ""),
    ("all_to_all", "pull_sized"): ("all_to_all_sized", ""),
    ("reduce_scatter", "reduce_kernel"): ("reduce_scatter", "reduce-scatter=reduce_kernel"),
    ("reduce_scatter", "one_launch"): ("reduce_scatter", "reduce-scatter=one_launch"),
    ("all_reduce", "one_shot"): ("all_reduce", "all-reduce=one_shot"),
    ("all_reduce", "two_shot"): ("all_reduce", "all-reduce=two_shot"),
    ("all_reduce", "push"): ("all_reduce", "all-reduce=push"),
    **{("ag_matmul", a): ("ag_gemm", f"all-gather={a}") for a in ("pull", "push", "one_launch")},
    **{("matmul_rs", a): ("gemm_rs", f"reduce-scatter={a}")
       for a in ("epilogue", "reduce_kernel", "one_launch", "push", "push_sum")},
    **{("matmul_ar", a): ("gemm_ar", f"all-reduce={a}")
       for a in ("one_shot", "two_shot", "push", "epilogue", "push_sum")},
}
# the algorithms whose lowering also branches on the engine: each engine is lowered too
ENGINES = {("all_reduce", "one_shot"): ("sm", "copy_engine"), ("all_reduce", "two_shot"): ("sm", "copy_engine"),
           ("matmul_rs", "epilogue"): ("sm", "copy_engine"), ("matmul_ar", "epilogue"): ("sm", "copy_engine")}


def _t(r: int, c: int) -> str:
    return f"tensor<{r}x{c}xbf16>"


def program(kind: str, algorithm: str = "") -> str:
    """A local-view task program of one collective or fused pattern over W ranks. ``algorithm``: a hand-written
    ``ditron.tiling`` naming it (for the table's errors), else none (ditron-tile writes it)."""
    big = W * M
    def mark(role, fused):
        return f'ditron.overlap = {{group = 0 : i64, kind = "{fused}", role = "{role}"}}'

    def tiling(k):
        return (f', ditron.tiling = {{kind = "{k}", target = "cuda:90", world = {W} : i64, block_m = 64 : i64, '
                f'chunk_rows = {M} : i64, engine = "sm", algorithm = "{algorithm}"}}' if algorithm else "")
    if kind == "ag_gemm":
        args, res = f"%x: {_t(M, K)}, %w: {_t(K, N)}", _t(big, N)
        body = (f'%g = "ditron_task.all_gather"(%x) {{axis = "tp", dim = 0 : i64, {mark("producer", "ag_matmul")}'
                f'{tiling("ag_matmul")}}} : ({_t(M, K)}) -> {_t(big, K)}\n'
                f'    %y = "ditron_task.matmul"(%g, %w) {{{mark("consumer", "ag_matmul")}{tiling("ag_matmul")}}} : '
                f'({_t(big, K)}, {_t(K, N)}) -> {_t(big, N)}')
    elif kind in ("gemm_rs", "gemm_ar"):
        coll, fused = ("reduce_scatter", "matmul_rs") if kind == "gemm_rs" else ("all_reduce", "matmul_ar")
        out = _t(M, N) if kind == "gemm_rs" else _t(big, N)
        dim = "dim = 0 : i64, " if kind == "gemm_rs" else ""
        args, res = f"%x: {_t(big, K)}, %w: {_t(K, N)}", out
        body = (f'%p = "ditron_task.matmul"(%x, %w) {{{mark("producer", fused)}{tiling(fused)}}} : '
                f'({_t(big, K)}, {_t(K, N)}) -> {_t(big, N)}\n'
                f'    %y = "ditron_task.{coll}"(%p) {{axis = "tp", {dim}reduce = "sum", {mark("consumer", fused)}'
                f'{tiling(fused)}}} : ({_t(big, N)}) -> {out}')
    elif kind == "all_gather":
        args, res = f"%x: {_t(M, K)}", _t(big, K)
        body = f'%y = "ditron_task.all_gather"(%x) {{axis = "tp", dim = 0 : i64{tiling(kind)}}} : ({_t(M, K)}) -> {res}'
    elif kind == "reduce_scatter":
        args, res = f"%x: {_t(big, K)}", _t(M, K)
        body = (f'%y = "ditron_task.reduce_scatter"(%x) {{axis = "tp", dim = 0 : i64, reduce = "sum"{tiling(kind)}}}'
                f' : ({_t(big, K)}) -> {res}')
    elif kind == "all_reduce":
        args, res = f"%x: {_t(big, K)}", _t(big, K)
        body = f'%y = "ditron_task.all_reduce"(%x) {{axis = "tp", reduce = "sum"{tiling(kind)}}} : ({res}) -> {res}'
    elif kind == "all_to_all_sized":  # split sizes of the run (the simulator's random i32 inputs), two results
        t, s = _t(M, K), f"tensor<{W}xi32>"
        args, res = f"%x: {t}, %s: {s}", f"{_t(big, K)}, {s}"
        body = (f'%y, %c = "ditron_task.all_to_all"(%x, %s) {{axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64'
                f'{tiling("all_to_all")}}} : ({t}, {s}) -> ({res})')
        return (f'module attributes {{ditron.mesh = {{axes = ["tp"], shape = array<i64: {W}>}}}} {{\n'
                f'  func.func @{kind}({args}) -> ({res}) attributes {{ditron.view = "local"}} {{\n'
                f'    {body}\n    return %y, %c : {res}\n  }}\n}}\n')
    else:
        assert kind == "all_to_all", kind
        args, res = f"%x: {_t(big, K)}", _t(big, K)
        body = (f'%y = "ditron_task.all_to_all"(%x) {{axis = "tp", split_dim = 0 : i64, concat_dim = 0 : i64'
                f'{tiling(kind)}}} : ({res}) -> {res}')
    return (f'module attributes {{ditron.mesh = {{axes = ["tp"], shape = array<i64: {W}>}}}} {{\n'
            f'  func.func @{kind}({args}) -> {res} attributes {{ditron.view = "local"}} {{\n'
            f'    {body}\n    return %y : {res}\n  }}\n}}\n')


def lower(text: str, pipeline: str) -> str:
    with ditron_context():
        module = parse_module(text)
        for p in parse_pipeline(pipeline):
            p.run(module)
            verify(module)
        out = str(module)
        del module
    return out


def test_every_registered_algorithm_has_a_case():
    """A new algorithm registers in the table and gets a case here (the test below lowers and simulates it)."""
    assert set(collectives.ALGORITHMS) == set(CASES)


def test_every_algorithm_ditron_tile_offers_is_registered():
    offered = {"ag_matmul": planner.ALL_GATHER_ALGORITHMS, "matmul_rs": planner.REDUCE_SCATTER_ALGORITHMS,
               "matmul_ar": planner.GEMM_AR_ALGORITHMS, "all_reduce": planner.ALL_REDUCE_ALGORITHMS,
               "reduce_scatter": ("reduce_kernel", "one_launch")}
    for op, algorithms in offered.items():
        missing = set(algorithms) - set(collectives.algorithms(op))
        assert not missing, f"ditron-tile offers {op} {sorted(missing)}, which no lowering registers"
    assert set(collectives.DEFAULTS) == set(collectives.COLLECTIVES) | set(collectives.FUSED)
    for op, algorithm in collectives.DEFAULTS.items():
        assert (op, algorithm) in collectives.ALGORITHMS


@pytest.mark.parametrize("key,engine", [(key, e) for key in CASES for e in ENGINES.get(key, ("",))],
                         ids=lambda v: "-".join(v) if isinstance(v, tuple) else v or "model")
def test_registered_algorithm_lowers_and_computes(key, engine, monkeypatch):
    op, algorithm = key
    kind, options = CASES[key]
    options = " ".join(o for o in (options, f"engine={engine}" if engine else "") if o)
    calls = []
    registered = collectives.ALGORITHMS[key]

    def spy(ctx, *args):
        calls.append(args[-1] if len(args) == 2 else args[1])
        return registered(ctx, *args)
    monkeypatch.setitem(collectives.ALGORITHMS, key, spy)
    text = program(kind)
    tiled = lower(text, f"ditron-tile{{{options}}}")
    assert f'algorithm = "{algorithm}"' in tiled or algorithm == collectives.DEFAULTS[op]
    device_text = lower(tiled, "ditron-lower-task-to-device,ditron-schedule-overlap")
    assert len(calls) == 1, f"{key} was lowered {len(calls)} times through the table"
    assert calls[0].algorithm in (algorithm, None)
    if engine:
        assert calls[0].engine == engine
    result = simulate(device_text, world_size=W, seed=0, calls=2, reference=task_reference(text))
    assert result.ok, result.summary()


@pytest.mark.parametrize("kind,op", [("gemm_rs", "matmul_rs"), ("ag_gemm", "ag_matmul"), ("all_reduce", "all_reduce"),
                                     ("reduce_scatter", "reduce_scatter")])
def test_unregistered_algorithm_is_a_located_error(kind, op):
    with pytest.raises(PassError) as err:
        lower(program(kind, algorithm="bogus"), "ditron-lower-task-to-device")
    text = str(err.value)
    assert f"has {op} algorithm 'bogus' in its 'ditron.tiling', which has no device lowering (registered: " in text
    assert ", ".join(sorted(collectives.algorithms(op))) in text
    assert re.match(r"<stdin>:\d+:10: error: ditron-lower-task-to-device: 'ditron_task\.\w+' op has ", text), text


def test_register_refuses_a_second_lowering_and_unknown_ops():
    key = next(iter(collectives.ALGORITHMS))
    with pytest.raises(ValueError, match="registered twice"):
        collectives.register(*key)(lambda *a: None)
    with pytest.raises(ValueError, match="unknown collective 'broadcast'"):
        collectives.register("broadcast", "tree")


def test_collectives_do_not_import_the_function_lowering():
    """No import cycle: the collectives see the function lowering through LoweringContext only."""
    for path in sorted((ROOT / "passes" / "collectives").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names]
                assert not any("lower_task_to_device" in n for n in names), f"{path.name} imports {names}"
