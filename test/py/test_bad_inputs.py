"""The bad-input corpus: each program below, through ``ditron-opt --pass-pipeline=ditron-default``, ``ditron
compile`` and ``ditron sim``, gives the same located error (``file:line:col: error: ...``) and exit code 1. The
three run in-process, as their console scripts would (``ditron.tools.ditron_opt.run``, ``ditron.cli.run``)."""
from __future__ import annotations

import io

import pytest

from ditron import cli
from ditron.tools import ditron_opt

MESH = '{ditron.mesh = {axes = ["tp"], shape = array<i64: 2>}}'
MESH_2D = '{ditron.mesh = {axes = ["dp", "tp"], shape = array<i64: 2, 2>}}'


def _program(args: str, result: str, op: str, mesh: str = MESH, attrs: str = "") -> str:
    return (f"module attributes {mesh} {{\n"
            f"  func.func @f({args}) -> {result}{attrs} {{\n"
            f"    %y = {op}\n"
            f"    return %y : {result.split(' {')[0].strip('()')}\n"
            f"  }}\n}}\n")


T = "tensor<64x32xf32>"
RELU = f'"ditron_task.elementwise"(%x) {{fn = "relu"}} : ({T}) -> {T}'

# name -> (program, the error it must give: line:col and the start of the message)
CORPUS = {
    "non-divisible sharded dim": (
        _program('%x: tensor<65x32xf32> {ditron.sharding = {dims = [["tp"], []]}}', "tensor<65x32xf32>",
                 RELU.replace("64x32", "65x32")),
        "2:3: error: 'func.func' op argument 0: dim 0 of size 65 does not divide evenly into 2 shards"),
    "unknown mesh axis in a sharding": (
        _program(f'%x: {T} {{ditron.sharding = {{dims = [["dp"], []]}}}}', T, RELU),
        "2:3: error: 'func.func' op argument 0: mesh axis 'dp' is not in the mesh (axes: tp)"),
    "unknown mesh axis in a collective": (
        _program(f"%x: {T}", "tensor<128x32xf32>",
                 f'"ditron_task.all_gather"(%x) {{axis = "ep", dim = 0 : i64}} : ({T}) -> tensor<128x32xf32>',
                 attrs=' attributes {ditron.view = "local"}'),
        "3:10: error: 'ditron_task.all_gather' op mesh axis 'ep' is not in the mesh (axes: tp)"),
    "contraction dims sharded differently": (
        _program('%a: tensor<64x32xbf16> {ditron.sharding = {dims = [[], ["tp"]]}}, '
                 '%b: tensor<32x16xbf16> {ditron.sharding = {dims = [["dp"], []]}}', "tensor<64x16xbf16>",
                 '"ditron_task.matmul"(%a, %b) : (tensor<64x32xbf16>, tensor<32x16xbf16>) -> tensor<64x16xbf16>',
                 mesh=MESH_2D),
        "3:10: error: ditron-partition: 'ditron_task.matmul' op contracts over dim K, which the lhs has split "
        "over 'tp' and the rhs split over 'dp'"),
    "mesh of size 0": (
        _program(f"%x: {T}", T, RELU, mesh=MESH.replace("i64: 2", "i64: 0")),
        "1:1: error: 'builtin.module' op mesh axis sizes must be >= 1, got [0]"),
    "negative mesh size": (
        _program(f"%x: {T}", T, RELU, mesh=MESH_2D.replace("i64: 2, 2", "i64: 2, -4")),
        "1:1: error: 'builtin.module' op mesh axis sizes must be >= 1, got [2, -4]"),
    "sharding with more dims than the tensor": (
        _program(f'%x: {T} {{ditron.sharding = {{dims = [[], [], ["tp"]]}}}}', T, RELU),
        "2:3: error: 'func.func' op argument 0: sharding has 3 dims but the tensor has rank 2"),
    "all_gather dim past the rank": (
        _program(f"%x: {T}", T, f'"ditron_task.all_gather"(%x) {{axis = "tp", dim = 2 : i64}} : ({T}) -> {T}',
                 attrs=' attributes {ditron.view = "local"}'),
        "3:10: error: 'ditron_task.all_gather' op dim 2 is out of range for a tensor of rank 2"),
    "result dtype differs": (
        _program(f"%x: {T}", "tensor<64x32xf16>", RELU.replace(f"-> {T}", "-> tensor<64x32xf16>")),
        "3:10: error: 'ditron_task.elementwise' op element types differ: operand f32, result f16"),
    "contraction sizes differ": (
        _program(f"%a: {T}, %b: tensor<16x16xf32>", "tensor<64x16xf32>",
                 f'"ditron_task.matmul"(%a, %b) : ({T}, tensor<16x16xf32>) -> tensor<64x16xf32>'),
        "3:10: error: 'ditron_task.matmul' op contraction sizes differ: lhs tensor<64x32xf32> has K = 32, rhs "
        "tensor<16x16xf32> has K = 16"),
    "matmul operands of different dtypes": (
        _program("%a: tensor<64x32xbf16>, %b: tensor<32x16xf16>", "tensor<64x16xbf16>",
                 '"ditron_task.matmul"(%a, %b) : (tensor<64x32xbf16>, tensor<32x16xf16>) -> tensor<64x16xbf16>'),
        "3:10: error: 'ditron_task.matmul' op operand element types differ: bf16 and f16"),
    "elementwise operands of different dtypes": (
        _program(f"%x: {T}, %z: tensor<64x32xf16>", T,
                 f'"ditron_task.elementwise"(%x, %z) {{fn = "add"}} : ({T}, tensor<64x32xf16>) -> {T}'),
        "3:10: error: 'ditron_task.elementwise' op element types differ: operand f16, result f32"),
    "collectives over two mesh axes": (
        _program('%x: tensor<64x32xbf16> {ditron.sharding = {dims = [["dp", "tp"], []]}}',
                 '(tensor<64x32xbf16> {ditron.sharding = {dims = [[], []]}})',
                 '"ditron_task.elementwise"(%x) {fn = "relu"} : (tensor<64x32xbf16>) -> tensor<64x32xbf16>',
                 mesh=MESH_2D),
        "2:3: error: ditron-lower-task-to-device: 'func.func' op communicates over several mesh axes (dp, tp); a "
        "device program runs over one axis for now"),
}


def _first_error(code: int, out: str, err: str) -> str:
    assert code == 1, f"exit code {code}\n{out}{err}"
    assert "Traceback" not in err and "internal compiler error" not in err, err
    return err.splitlines()[0] if err else ""


def _opt(path) -> str:
    out, err = io.StringIO(), io.StringIO()
    code = ditron_opt.run([str(path), "--pass-pipeline=ditron-default"], io.StringIO(), out, err)
    return _first_error(code, "", err.getvalue())


def _ditron(*argv) -> str:
    out, err = io.StringIO(), io.StringIO()
    code = cli.run([str(a) for a in argv], out, err)
    return _first_error(code, out.getvalue(), err.getvalue())


@pytest.mark.parametrize("name", list(CORPUS))
def test_every_command_gives_the_same_located_error(tmp_path, name):
    text, expected = CORPUS[name]
    path = tmp_path / "bad.mlir"
    path.write_text(text)
    opt = _opt(path)
    assert opt.startswith(f"{path}:{expected}"), opt
    assert _ditron("compile", path, "-o", tmp_path / "art", "--no-cache") == opt
    assert _ditron("sim", path) == opt
    assert not (tmp_path / "art").exists()
