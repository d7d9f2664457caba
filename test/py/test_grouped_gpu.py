"""grouped_matmul (MoE experts) on a GPU, against torch: alone (one rank; groups of uneven sizes, an empty one,
rows past the last group), and the MoE exchange of a local-view program (all_to_all -> grouped_matmul ->
all_to_all) in virtual worlds of 2 and 4 ranks on one GPU. Each program goes through ditron-default and
ditron.compile as a user's would.

The GPU machine needs torch + triton only. Build the artifacts where the compiler is, then run there:

    python test/py/test_grouped_gpu.py build build/grouped_arts                 # CPU machine (needs MLIR)
    DITRON_GROUPED_DIR=build/grouped_arts python -m pytest -q -m gpu test/py/test_grouped_gpu.py   # GPU machine

Without DITRON_GROUPED_DIR the artifacts are built here (which needs the compiler).
"""
from __future__ import annotations

import os

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")  # effective only if CUDA has not started yet

import sys  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

HERE = Path(__file__).resolve()
CALLS = 3


@dataclass(frozen=True)
class Case:
    W: int
    rows: int        # this rank's rows (tokens) before the exchange
    k: int
    n: int
    experts: int     # this rank's experts
    moe: bool        # all_to_all -> grouped_matmul -> all_to_all, else grouped_matmul alone

    @property
    def name(self) -> str:
        return f"{'moe' if self.moe else 'gmm'}_w{self.W}_t{self.rows}_e{self.experts}"

    def text(self) -> str:
        t, k, n, e, W = self.rows, self.k, self.n, self.experts, self.W
        x, w, g, y = f"tensor<{t}x{k}xbf16>", f"tensor<{e}x{k}x{n}xbf16>", f"tensor<{e}xi32>", f"tensor<{t}x{n}xbf16>"
        if not self.moe:
            body = f'    %y = "ditron_task.grouped_matmul"(%x, %w, %g) : ({x}, {w}, {g}) -> {y}\n'
        else:
            a2a = '{axis = "ep", split_dim = 0 : i64, concat_dim = 0 : i64}'
            body = (f'    %d = "ditron_task.all_to_all"(%x) {a2a} : ({x}) -> {x}\n'
                    f'    %h = "ditron_task.grouped_matmul"(%d, %w, %g) : ({x}, {w}, {g}) -> {y}\n'
                    f'    %y = "ditron_task.all_to_all"(%h) {a2a} : ({y}) -> {y}\n')
        return (f'module attributes {{ditron.mesh = {{axes = ["ep"], shape = array<i64: {W}>}}}} {{\n'
                f'  func.func @{self.name}(%x: {x}, %w: {w}, %g: {g}) -> {y} attributes {{ditron.view = "local"}} {{\n'
                f'{body}    return %y : {y}\n  }}\n}}\n')


CASES = {c.name: c for c in (Case(1, 4096, 1024, 2048, 8, False), Case(1, 300, 64, 96, 5, False),
                             Case(2, 512, 256, 128, 4, True), Case(4, 512, 128, 256, 2, True))}


def build(directory: str) -> None:
    """Compile every case's artifact into directory (the CPU side of this test)."""
    import ditron
    for name, case in CASES.items():
        ditron.compile(case.text(), target="cuda:90", out_dir=Path(directory) / name, cache=False)
        print(f"built {name}")


# ------------------------------------------------------------------------------------------- torch side

def make_inputs(case: Case, call: int):
    """Every rank's (x, w, group sizes): groups of uneven sizes, one empty, some rows past the last group."""
    import torch
    out = []
    for r in range(case.W):
        g = torch.Generator(device="cuda").manual_seed(1000 * call + r)
        x = torch.randn(case.rows, case.k, generator=g, device="cuda").to(torch.bfloat16)
        w = (torch.randn(case.experts, case.k, case.n, generator=g, device="cuda") / case.k ** 0.5).to(torch.bfloat16)
        weights = torch.rand(case.experts, generator=g, device="cuda")
        weights[(call + r) % case.experts] = 0.0
        sizes = (weights / weights.sum() * (case.rows - 7)).floor().to(torch.int32)
        out.append([x, w, sizes])
    return out


def grouped(x, w, sizes):
    import torch
    y = torch.zeros(x.shape[0], w.shape[2], device=x.device)
    start = 0
    for e, s in enumerate(sizes.tolist()):
        y[start:start + s] = x[start:start + s].float() @ w[e].float()
        start += s
    return y


def exchange(xs):
    import torch
    W = len(xs)
    part = xs[0].shape[0] // W
    return [torch.cat([x[r * part:(r + 1) * part] for x in xs]) for r in range(W)]


def reference(case: Case, inputs):
    if not case.moe:
        return [grouped(*inputs[0])]
    d = exchange([x for x, _, _ in inputs])
    h = [grouped(d[r], w, s).to(d[r].dtype) for r, (_, w, s) in enumerate(inputs)]
    return exchange(h)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    given = os.environ.get("DITRON_GROUPED_DIR")
    if given:
        return Path(given)
    try:
        import mlir  # noqa: F401
    except ImportError:
        pytest.skip("no MLIR bindings here to build the artifacts: set DITRON_GROUPED_DIR to a directory built by "
                    "`python test/py/test_grouped_gpu.py build DIR`")
    root = tmp_path_factory.mktemp("grouped_arts")
    build(str(root))
    return root


pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", sorted(CASES))
def test_grouped_matmul_matches_torch(artifacts, name):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the artifacts are built for cuda:90")
    import ditron
    from ditron.runtime.world import World
    case = CASES[name]
    exe = ditron.load(artifacts / name)
    world = World.virtual(case.W)
    for call in range(1, CALLS + 1):
        xs = make_inputs(case, call)
        got = exe.run(world, xs)
        for r, want in enumerate(reference(case, xs)):
            g, want = got[r][0].float(), want.float()
            scale = max(float(want.abs().max()), 1.0)
            assert g.shape == want.shape and torch.allclose(g, want, rtol=2 ** -6, atol=2 ** -6 * scale), \
                f"{name} call {call} rank {r}: max error {float((g - want).abs().max())}"
    exe.close()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "build":
        build(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)
