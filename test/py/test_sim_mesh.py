"""ditron.sim on meshes: inputs that follow each argument's layout (replicas equal, padding zero, partial summands
different), and multi-axis meshes, where every rank of the mesh runs and a program's collectives run within the
groups of its ditron.axis."""
from __future__ import annotations

import io

import numpy as np
import pytest

import sim_programs as P
from ditron.dialects.context import ditron_context, parse_module
from ditron.passes.registry import parse_pipeline, run_passes
from ditron.sim import OUT_OF_BOUNDS, SimulationError, load_program, random_inputs, simulate
from ditron.sim.command import main

BARRIER = '"ditron_device.barrier"(%bar) : (memref<1xi32>) -> ()'


def _sim(tmp_path, text: str, *argv: str) -> tuple[int, str, str]:
    f = tmp_path / "prog.mlir"
    f.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    code = main([str(f), *argv], out, err)
    return code, out.getvalue(), err.getvalue()


def _module(axes, shape, args, results, body) -> str:
    """A task program: args/results are (type, sharding) pairs, body its ops (returning %y)."""
    mesh = f'{{axes = [{", ".join(f"{chr(34)}{a}{chr(34)}" for a in axes)}], shape = array<i64: ' \
           f'{", ".join(map(str, shape))}>}}'
    params = ", ".join(f"%{n}: {t} {{ditron.sharding = {s}}}" for n, (t, s) in args.items())
    res = ", ".join(f"{t} {{ditron.sharding = {s}}}" for t, s in results)
    return (f"module attributes {{ditron.mesh = {mesh}}} {{\n  func.func @f({params}) -> ({res}) {{\n{body}\n"
            f"    return %y : {results[0][0]}\n  }}\n}}\n")


def _dims(*dims) -> str:
    return "{dims = [" + ", ".join("[" + ", ".join(f'"{a}"' for a in d) + "]" for d in dims) + "]}"


REP2 = _dims((), ())


# ------------------------------------------------------------------------------------------------ inputs

@pytest.mark.parametrize("W", [1, 2, 3, 4, 8])
def test_an_add_of_replicated_tensors_matches_the_reference(tmp_path, W):
    """Replicated arguments hold the same values on every rank (the reference reads rank 0's replica): before,
    every rank drew its own and each rank but 0 was a mismatch."""
    t = "tensor<37x20xf32>"
    text = _module(["tp"], [W], {"x": (t, REP2), "w": (t, REP2)}, [(t, REP2)],
                   f'    %y = "ditron_task.elementwise"(%x, %w) {{fn = "add"}} : ({t}, {t}) -> {t}')
    code, out, err = _sim(tmp_path, text)
    assert code == 0 and "outputs equal to the reference" in out, out + err


@pytest.mark.parametrize("W", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("fn", ["relu", "exp"])
def test_padded_shards_are_zero_padded(tmp_path, W, fn):
    """37 rows over W ranks: the padding of the inputs is zero (relu keeps it zero, as the reference has it); exp
    makes the output's padding 1, which is not part of the result and not compared."""
    t = "tensor<37x20xf32>"
    s = '{dims = [["tp"], []], padded = true}'
    text = _module(["tp"], [W], {"x": (t, s)}, [(t, s)],
                   f'    %y = "ditron_task.elementwise"(%x) {{fn = "{fn}"}} : ({t}) -> {t}')
    code, out, err = _sim(tmp_path, text)
    assert code == 0 and "outputs equal to the reference" in out, out + err


def _lowered(text: str):
    with ditron_context():
        module = parse_module(text, "<test>")
        run_passes(module, parse_pipeline("ditron-device"))
        program = load_program(module)
        del module
    return program


def test_random_inputs_follow_each_layout_on_a_2d_mesh():
    t = "tensor<5x4xf32>"
    args = {"a": (t, '{dims = [["dp"], []], padded = true}'), "b": (t, _dims((), ("tp",))), "c": (t, REP2),
            "p": (t, '{dims = [[], []], partial = ["tp"]}')}
    # b, c and p unused: only their layouts matter here
    body = f'    %y = "ditron_task.elementwise"(%a) {{fn = "relu"}} : ({t}) -> {t}'
    program = _lowered(_module(["dp", "tp"], [2, 2], args, [(t, args["a"][1])], body))
    # ranks (dp, tp): 0 = (0, 0), 1 = (0, 1), 2 = (1, 0), 3 = (1, 1)
    xs = random_inputs(program, 4, seed=3, call=1)
    a, b, c, p = ([xs[r][i] for r in range(4)] for i in range(4))
    same = np.array_equal
    assert same(a[0], a[1]) and same(a[2], a[3]) and not same(a[0], a[2])  # split over dp, replicated over tp
    assert a[0].shape == (3, 4) and a[0].all() and a[2][:2].all() and not a[2][2].any()  # global row 5: padding
    assert same(b[0], b[2]) and same(b[1], b[3]) and not same(b[0], b[1])  # split over tp
    assert all(same(c[0], c[r]) for r in range(4))                         # replicated
    assert same(p[0], p[2]) and not same(p[0], p[1])                       # partial over tp: summands differ
    again = random_inputs(program, 4, seed=3, call=2)
    assert not same(again[0][0], a[0])                                     # a new call: new values


# -------------------------------------------------------------------------------------------- 2-D meshes

MESHES = {1: (1, 1), 2: (2, 1), 3: (1, 3), 4: (2, 2), 8: (2, 4)}


def _matmul(dp: int, tp: int, x, w, y, M=40, K=32, N=48) -> str:
    tx, tw, ty = f"tensor<{M}x{K}xbf16>", f"tensor<{K}x{N}xbf16>", f"tensor<{M}x{N}xbf16>"
    return _module(["dp", "tp"], [dp, tp], {"x": (tx, x), "w": (tw, w)}, [(ty, y)],
                   f'    %y = "ditron_task.matmul"(%x, %w) : ({tx}, {tw}) -> {ty}')


def _padded(*dims) -> str:
    return _dims(*dims)[:-1] + ", padded = true}"


@pytest.mark.parametrize("W", sorted(MESHES))
@pytest.mark.parametrize("case", ["dp_rows_tp_cols", "ag_over_tp_of_dp_tp_rows", "ag_over_tp_dp_replicating",
                                  "ag_over_dp"])
def test_dp_x_tp_programs_simulate_to_the_reference(tmp_path, W, case):
    """y = x @ w on dp x tp meshes of 1 .. 8 ranks, N = 45 padded over the mesh; the all-gathered rows divide
    evenly (ditron-partition keeps a gathered dim's padding, which a result less split than x cannot hold)."""
    dp, tp = MESHES[W]
    x, w, y = {
        "dp_rows_tp_cols": (_padded(("dp",), ()), _padded((), ("tp",)), _padded(("dp",), ("tp",))),
        "ag_over_tp_of_dp_tp_rows": (_dims(("dp", "tp"), ()), _padded((), ("tp",)), _padded(("dp",), ("tp",))),
        "ag_over_tp_dp_replicating": (_dims(("tp",), ()), _padded((), ("tp",)), _padded((), ("tp",))),
        "ag_over_dp": (_dims(("dp",), ()), _padded((), ("dp",)), _padded((), ("dp",))),
    }[case]
    M = 37 if case == "dp_rows_tp_cols" else 16 * dp * tp
    code, out, err = _sim(tmp_path, _matmul(dp, tp, x, w, y, M=M, N=45), "--seeds", "0,1")
    assert code == 0 and out.count("outputs equal to the reference") == 2, out + err
    assert f"{dp * tp} rank(s)" in out


def test_the_world_is_the_whole_mesh(tmp_path):
    text = _matmul(2, 2, _dims(("tp",), ()), _dims((), ("tp",)), _dims((), ("tp",)))
    code, out, err = _sim(tmp_path, text, "-W", "2")
    assert code == 1 and not out
    assert err == ("error: --world-size 2: the program is written for the 4 rank(s) of its ditron.mesh (dp=2 x "
                   "tp=2), which the simulator runs whole; change the mesh to simulate another world size\n")
    with pytest.raises(SimulationError, match=r"world_size 2: @f is written for the 4 rank\(s\) of its ditron.mesh"):
        simulate(program_text(text), 2)


def program_text(text: str) -> str:
    with ditron_context():
        module = parse_module(text, "<test>")
        run_passes(module, parse_pipeline("ditron-device"))
        out = module.operation.get_asm(enable_debug_info=True)
        del module
    return out


def _shift(dp: int, tp: int, barrier: str = "", lag: int = 0) -> str:
    """shift_right on a dp x tp mesh, over tp: y on (d, t) = x on (d, t - 1)."""
    text = P.program("shift_right", LAG=lag, BARRIER=barrier)
    text = text.replace("module {", f'module attributes {{ditron.mesh = {{axes = ["dp", "tp"], shape = array<i64: '
                                     f'{dp}, {tp}>}}}} {{')
    return text.replace('attributes {ditron.level = "device"}', 'attributes {ditron.level = "device", '
                                                                 'ditron.axis = "tp"}')


@pytest.mark.parametrize("barrier, calls", [("", 1), (BARRIER, 3)])  # without the barrier call 2 races
def test_ranks_and_peers_are_those_of_the_group(barrier, calls):
    """Each tp group of a 2 x 3 mesh shifts its blocks to the right within the group, and its barrier waits for
    the group only (a barrier counting every rank of the mesh would deadlock)."""
    dp, tp = 2, 3
    xs = [[np.full((16, 8), float(r))] for r in range(dp * tp)]
    result = simulate(_shift(dp, tp, barrier), dp * tp, inputs=xs, calls=calls, seed=1)
    assert result.ok, result.summary()
    for r in range(dp * tp):
        d, t = divmod(r, tp)
        assert (result.outputs[r][0] == d * tp + (t - 1) % tp).all(), r


def test_a_rank_outside_the_group_is_out_of_bounds():
    text = _shift(2, 2).replace("%right = arith.remui %r1, %w : index", "%right = arith.addi %r1, %w : index")
    result = simulate(text, 4, calls=1)
    found = result.of_kind(OUT_OF_BOUNDS)
    assert found and "outside its group over mesh axis 'tp' of 2 rank(s)" in found[0].message


def test_a_multi_axis_mesh_needs_an_axis():
    text = _shift(2, 2).replace(', ditron.axis = "tp"', "")
    with pytest.raises(SimulationError, match="names no ditron.axis, and its mesh \\(dp=2 x tp=2\\) has several"):
        simulate(text, 4)
