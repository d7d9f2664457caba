"""Hand-written device-level programs the executor tests run (on the GPU) and the simulator checks (on the CPU).

Each program follows docs/device_ir.md: rank-generic, destination-passing style, the epoch as the last argument,
signal values derived from the epoch so pads never need resetting, and every buffer reuse across calls guarded by
a "done reading" signal. Kernels come from ditron.kernels templates (gemm, reduce) and carry their records.

    text, records = program("ag_gemm", W=4, M=4091)     # MLIR text + kernel records (no MLIR needed)
    module_text(case)                                   # the module with the kernels built in (needs MLIR)
    build_all(outdir)                                   # compile every CASE into outdir/<name> (needs MLIR)

On the GPU side (torch only): ``CASES[name]`` gives the sizes, ``make_inputs`` and ``reference`` the data.

Programs (per-rank chunk M rows; R = W*M):
    all_gather      x [M, K]           -> out [R, K]      = concat over ranks
    reduce_scatter  x [R, N]           -> out [M, N]      = sum over ranks of x rows [rank*M, +M)
    all_reduce      x [R, N]           -> out [R, N]      = sum over ranks (one shot: every rank reduces all rows)
    all_reduce2     x [R, N]           -> out [R, N]      two shot: reduce own chunk, then gather the chunks
    ag_gemm         a [M, K], b [K, N] -> c [R, N]        = concat(a) @ b; the GEMM waits per tile in-kernel
    gemm_rs         a [R, K], b [K, N] -> out [M, N]      = sum over ranks of (a @ b) rows [rank*M, +M)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NUM_SMS = 132            # H200; the virtual-world CTA budget of a spinning kernel is (NUM_SMS - 4) // W
COPY_SM_RESERVE = 4


def cta_budget(W: int) -> int:
    return max(1, (NUM_SMS - COPY_SM_RESERVE) // W)


@dataclass(frozen=True)
class Case:
    op: str
    W: int
    M: int
    K: int = 256
    N: int = 256
    dtype: str = "bf16"
    options: dict = field(default_factory=dict)
    gemm_grid: int | None = None      # ag_gemm: persistent programs (default: the CTA budget, at most 32)

    @property
    def name(self) -> str:
        return f"{self.op}_w{self.W}_m{self.M}" + ("_biggrid" if self.gemm_grid else "")


def _cases() -> dict[str, Case]:
    out = {}
    for W in (1, 2, 4, 8):
        for op in ("all_gather", "reduce_scatter", "all_reduce", "all_reduce2", "ag_gemm", "gemm_rs"):
            c = Case(op, W, 4091)
            out[c.name] = c
    for op in ("all_gather", "reduce_scatter", "all_reduce2", "ag_gemm", "gemm_rs"):
        c = Case(op, 4, 128, K=128, N=128)
        out[c.name] = c
    # a spinning GEMM whose grid exceeds the W=8 virtual-world budget: the executor must refuse it
    c = Case("ag_gemm", 8, 256, K=128, N=512, gemm_grid=64)
    out[c.name] = c
    # a program that waits for a signal nobody sends: the executor must time out
    c = Case("stuck", 2, 16, K=16)
    out[c.name] = c
    return out


CASES: dict[str, Case] = _cases()


# ------------------------------------------------------------------------------------------------ text

def _header(W: int) -> str:
    return f'module attributes {{ditron.mesh = {{axes = ["tp"], shape = array<i64: {W}>}}}} {{\n'


def _func(name: str, args: list[tuple[str, str, str]]) -> str:
    params = ", ".join(f'%{n}: {t} {{ditron.io = "{io}"}}' for n, t, io in args)
    return (f'  func.func @{name}({params}, %epoch: index {{ditron.io = "epoch"}})\n'
            '      attributes {ditron.level = "device", ditron.axis = "tp"} {\n')


def _consts(values: dict[str, int]) -> str:
    return "".join(f"    %{k} = arith.constant {v} : index\n" for k, v in values.items())


def _mr(shape, t) -> str:
    return "memref<" + "x".join(str(s) for s in shape) + f"x{t}>"


def _copy(src, dst, src_rank, dst_rank, so, do, sizes, st, dt, stream=0) -> str:
    operands = ", ".join([src, dst, src_rank, dst_rank, *so, *do, *sizes])
    types = ", ".join([st, dt] + ["index"] * (2 + 3 * len(sizes)))
    s = f", stream = {stream} : i64" if stream else ""
    return f'"ditron_device.copy"({operands}) {{engine = "copy_engine"{s}}} : ({types}) -> ()'


def _signal(pad, pt, target, slot, value, stream=0, op="set") -> str:
    s = f", stream = {stream} : i64" if stream else ""
    return (f'"ditron_device.signal"({pad}, {target}, {slot}, {value}) {{op = "{op}", scope = "sys"{s}}} : '
            f'({pt}, index, index, index) -> ()')


def _wait(pad, pt, value, slot, stream=0) -> str:
    s = f", stream = {stream} : i64" if stream else ""
    return f'"ditron_device.wait"({pad}, {value}, {slot}) {{where = "stream"{s}}} : ({pt}, index, index) -> ()'


def _launch(kernel, operands, types, grid) -> str:
    segments = ", ".join(["1"] * len(operands) + ["0"] * (16 - len(operands)))  # 16 optional argument slots
    return (f'"ditron_device.launch"({", ".join(operands)}) {{kernel = @{kernel}, grid = array<i64: {grid}>, '
            f'operandSegmentSizes = array<i32: {segments}>, sm_budget = {grid} : i64, tile_order = "row_major"}} : '
            f'({", ".join(types)}) -> ()')


def _for_peers(var: str, body: str, *, skip_self: bool, ind: str = "    ") -> str:
    """scf.for over ranks; %{var} is the peer ((rank + i) mod W, starting with the next rank)."""
    lb = "%c1" if skip_self else "%c0"
    return (f"{ind}scf.for %i_{var} = {lb} to %w step %c1 {{\n"
            f"{ind}  %s_{var} = arith.addi %r, %i_{var} : index\n"
            f"{ind}  %{var} = arith.remui %s_{var}, %w : index\n"
            + "".join(f"{ind}  {line}\n" for line in body.strip("\n").split("\n")) + f"{ind}}}\n")


_PROLOGUE = ('    %r = "ditron_device.rank"() : () -> index\n'
             '    %w = "ditron_device.num_ranks"() : () -> index\n'
             '    %c0 = arith.constant 0 : index\n    %c1 = arith.constant 1 : index\n'
             '    %prev = arith.subi %epoch, %c1 : index\n')


def _alloc(name: str, sym: str, t: str) -> str:
    return f'    %{name} = "ditron_device.alloc_symmetric"() {{name = "{sym}"}} : () -> {t}\n'


def _end() -> str:
    return "    return\n  }\n}\n"


def all_gather(c: Case) -> tuple[str, list]:
    W, M, K, T = c.W, c.M, c.K, c.dtype
    xt, ot, pt = _mr([M, K], T), _mr([W * M, K], T), _mr([2 * W], "i32")
    text = (_header(W) + _func("all_gather", [("x", xt, "in"), ("out", ot, "out")]) +
            _alloc("stage", "ag_stage", xt) + _alloc("sig", "ag_sig", pt) + _PROLOGUE + _consts({"cm": M, "ck": K}) +
            "    %row = arith.muli %r, %cm : index\n" +
            # stream 0: every peer has read my previous stage -> restage -> announce (slot <rank> on every rank)
            _for_peers("q", "%slot = arith.addi %w, %q : index\n" + _wait("%sig", pt, "%prev", "%slot"),
                       skip_self=True) +
            "    " + _copy("%x", "%stage", "%r", "%r", ["%c0", "%c0"], ["%c0", "%c0"], ["%cm", "%ck"], xt, xt) + "\n" +
            _for_peers("q", _signal("%sig", pt, "%q", "%r", "%epoch"), skip_self=False) +
            # stream 1: my own rows, then the peers' as their flags come; tell each peer when its stage was read
            "    " + _copy("%x", "%out", "%r", "%r", ["%c0", "%c0"], ["%row", "%c0"], ["%cm", "%ck"], xt, ot, 1) + "\n"
            + _for_peers("p", "\n".join([
                _wait("%sig", pt, "%epoch", "%p", 1),
                "%prow = arith.muli %p, %cm : index",
                _copy("%stage", "%out", "%p", "%r", ["%c0", "%c0"], ["%prow", "%c0"], ["%cm", "%ck"], xt, ot, 1),
                "%done = arith.addi %w, %r : index",
                _signal("%sig", pt, "%p", "%done", "%epoch", 1)]), skip_self=True) + _end())
    return text, []


def _reduce_record(name: str, rows: int, c: Case, *, src_row, dst_row, grid: int = 32):
    from ditron.kernels import reduce
    return reduce.make_record(rows, c.N, name=name, dtype=c.dtype, src_ld=c.N, dst_ld=c.N, src_row=src_row,
                              dst_row=dst_row, grid=grid)


def reduce_scatter(c: Case, *, all_rows: bool = False) -> tuple[str, list]:
    """reduce_scatter, or (all_rows) the one-shot all_reduce: stage, announce, wait for all, reduce, release."""
    W, M, N, T = c.W, c.M, c.N, c.dtype
    R = W * M
    rows = R if all_rows else M
    xt, ot, pt = _mr([R, N], T), _mr([rows, N], T), _mr([2 * W], "i32")
    name = "all_reduce" if all_rows else "reduce_scatter"
    rec = _reduce_record(f"{name}_kernel", rows, c, src_row=0 if all_rows else "arg:row", dst_row=0)
    operands, types = ["%stage", "%out"], [xt, ot]
    if not all_rows:
        operands.append("%row")
        types.append("index")
    text = (_header(W) + _func(name, [("x", xt, "in"), ("out", ot, "out")]) +
            _alloc("stage", "red_stage", xt) + _alloc("sig", "red_sig", pt) + _PROLOGUE +
            _consts({"cr": R, "cn": N, "cm": M}) + "    %row = arith.muli %r, %cm : index\n" +
            _for_peers("q", "%slot = arith.addi %w, %q : index\n" + _wait("%sig", pt, "%prev", "%slot"),
                       skip_self=True) +
            "    " + _copy("%x", "%stage", "%r", "%r", ["%c0", "%c0"], ["%c0", "%c0"], ["%cr", "%cn"], xt, xt) + "\n" +
            _for_peers("q", _signal("%sig", pt, "%q", "%r", "%epoch"), skip_self=False) +
            _for_peers("q", _wait("%sig", pt, "%epoch", "%q"), skip_self=True) +
            "    " + _launch(rec["name"], operands, types, rec["grid"]) + "\n" +
            _for_peers("q", "%done = arith.addi %w, %r : index\n" + _signal("%sig", pt, "%q", "%done", "%epoch"),
                       skip_self=True) + _end())
    return text, [rec]


def all_reduce2(c: Case) -> tuple[str, list]:
    """Two-shot all_reduce: every rank reduces its chunk into a symmetric buffer, then pulls every chunk."""
    W, M, N, T = c.W, c.M, c.N, c.dtype
    R = W * M
    xt, pt = _mr([R, N], T), _mr([4 * W], "i32")
    rec = _reduce_record("all_reduce2_kernel", M, c, src_row="arg:row", dst_row="arg:row")
    # slots: [0,W) staged, [W,2W) done reading my stage, [2W,3W) chunk reduced, [3W,4W) done reading my chunk
    text = (_header(W) + _func("all_reduce2", [("x", xt, "in"), ("out", xt, "out")]) +
            _alloc("stage", "ar_stage", xt) + _alloc("mid", "ar_mid", xt) + _alloc("sig", "ar_sig", pt) +
            _PROLOGUE + _consts({"cr": R, "cn": N, "cm": M, "c2": 2, "c3": 3}) +
            "    %row = arith.muli %r, %cm : index\n    %w2 = arith.muli %w, %c2 : index\n"
            "    %w3 = arith.muli %w, %c3 : index\n" +
            _for_peers("q", "%slot = arith.addi %w, %q : index\n" + _wait("%sig", pt, "%prev", "%slot"),
                       skip_self=True) +
            "    " + _copy("%x", "%stage", "%r", "%r", ["%c0", "%c0"], ["%c0", "%c0"], ["%cr", "%cn"], xt, xt) + "\n" +
            _for_peers("q", _signal("%sig", pt, "%q", "%r", "%epoch"), skip_self=False) +
            _for_peers("q", _wait("%sig", pt, "%epoch", "%q"), skip_self=True) +
            # every reader (me included, on stream 1) is done with my previous chunk
            _for_peers("q", "%slot = arith.addi %w3, %q : index\n" + _wait("%sig", pt, "%prev", "%slot"),
                       skip_self=False) +
            "    " + _launch(rec["name"], ["%stage", "%mid", "%row"], [xt, xt, "index"], rec["grid"]) + "\n" +
            _for_peers("q", "%done = arith.addi %w, %r : index\n" + _signal("%sig", pt, "%q", "%done", "%epoch"),
                       skip_self=True) +
            _for_peers("q", "%ready = arith.addi %w2, %r : index\n" + _signal("%sig", pt, "%q", "%ready", "%epoch"),
                       skip_self=False) +
            # stream 1: gather the reduced chunks, own first
            _for_peers("p", "\n".join([
                "%pslot = arith.addi %w2, %p : index",
                _wait("%sig", pt, "%epoch", "%pslot", 1),
                "%prow = arith.muli %p, %cm : index",
                _copy("%mid", "%out", "%p", "%r", ["%prow", "%c0"], ["%prow", "%c0"], ["%cm", "%cn"], xt, xt, 1),
                "%read = arith.addi %w3, %r : index",
                _signal("%sig", pt, "%p", "%read", "%epoch", 1)]), skip_self=False) + _end())
    return text, [rec]


def _gemm_record(name: str, m: int, c: Case, **fields):
    from ditron.kernels import gemm
    config = dict(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=4, num_stages=3, loads="pointer",
                  store="pointer", epilogue_split=1, flatten=False, split_k=1)
    config.update(fields.pop("config", {}))
    return gemm.make_record(m, c.N, c.K, name=name, in_dtype=c.dtype, out_dtype=c.dtype, **fields, **config)


def ag_gemm(c: Case) -> tuple[str, list]:
    """Pull-based AG+GEMM, copy engine, overlapped: the GEMM starts on the own rows and waits per tile in-kernel
    (slot p of ag_arrived >= epoch once rank p's rows are here)."""
    W, M, K, N, T = c.W, c.M, c.K, c.N, c.dtype
    R = W * M
    grid = c.gemm_grid or min(32, cta_budget(W))
    rec = _gemm_record("ag_gemm_kernel", R, c, tile_order="rank_rotated", rows_per_rank=M,
                       wait={"arg": "arrived", "rows_per_slot": M, "value_arg": "epoch"},
                       config=dict(persistent=True, num_sms=grid))
    at, bt, ct, gt, pt, dt = (_mr([M, K], T), _mr([K, N], T), _mr([R, N], T), _mr([R, K], T), _mr([W], "i32"),
                              _mr([1], "i32"))
    text = (_header(W) + _func("ag_gemm", [("a", at, "in"), ("b", bt, "in"), ("c", ct, "out")]) +
            _alloc("buf", "ag_buf", gt) + _alloc("ready", "ag_ready", pt) + _alloc("arrived", "ag_arrived", pt) +
            _alloc("ack", "ag_ack", pt) + _alloc("done", "ag_done", dt) + _PROLOGUE +
            _consts({"cm": M, "ck": K}) + "    %row = arith.muli %r, %cm : index\n" +
            # stream 0: every peer has pulled my previous rows -> restage, mark them arrived here, announce
            _for_peers("q", _wait("%ack", pt, "%prev", "%q"), skip_self=True) +
            "    " + _copy("%a", "%buf", "%r", "%r", ["%c0", "%c0"], ["%row", "%c0"], ["%cm", "%ck"], at, gt) + "\n" +
            "    " + _signal("%arrived", pt, "%r", "%r", "%epoch") + "\n" +
            _for_peers("q", _signal("%ready", pt, "%q", "%r", "%epoch"), skip_self=True) +
            "    " + _launch(rec["name"], ["%buf", "%b", "%c", "%arrived", "%epoch"], [gt, bt, ct, pt, "index"],
                            _gemm_grid(rec)) + "\n" +
            "    " + _signal("%done", dt, "%r", "%c0", "%epoch") + "\n" +
            # stream 1: once the previous GEMM is done with the buffer, pull the peers' rows in ring order
            "    " + _wait("%done", dt, "%prev", "%c0", 1) + "\n" +
            _for_peers("p", "\n".join([
                _wait("%ready", pt, "%epoch", "%p", 1),
                "%prow = arith.muli %p, %cm : index",
                _copy("%buf", "%buf", "%p", "%r", ["%prow", "%c0"], ["%prow", "%c0"], ["%cm", "%ck"], gt, gt, 1),
                _signal("%arrived", pt, "%r", "%p", "%epoch", 1),
                _signal("%ack", pt, "%p", "%r", "%epoch", 1)]), skip_self=True) + _end())
    return text, [rec]


def _gemm_grid(rec) -> int:
    from ditron.kernels import gemm
    return gemm.grid(rec)[0]


def gemm_rs(c: Case) -> tuple[str, list]:
    """GEMM+RS: each rank's GEMM writes its partial product into a symmetric buffer and, per tile, adds 1 to the
    owner rank's slot of the rows it finished (on that rank); the owner waits until every rank's tiles of its rows
    are done, then reduces its rows from every rank."""
    W, M, K, N, T = c.W, c.M, c.K, c.N, c.dtype
    R = W * M
    g = _gemm_record("gemm_rs_gemm", R, c, tile_order="grouped", rows_per_rank=M,
                     notify={"arg": "ready", "rows_per_slot": M, "peer": "slot_owner", "value": 1},
                     config=dict(persistent=False, num_sms=NUM_SMS))
    red = _reduce_record("gemm_rs_reduce", M, c, src_row="arg:row", dst_row=0)
    bm, tiles_n = g["block_m"], math.ceil(N / g["block_n"])
    at, bt, ot, pt_, st = (_mr([R, K], T), _mr([K, N], T), _mr([M, N], T), _mr([R, N], T), _mr([W], "i32"))
    text = (_header(W) + _func("gemm_rs", [("a", at, "in"), ("b", bt, "in"), ("out", ot, "out")]) +
            _alloc("part", "grs_partial", pt_) + _alloc("ready", "grs_ready", st) + _alloc("done", "grs_done", st) +
            _PROLOGUE + _consts({"cm": M, "cbm": bm, "ctn": tiles_n}) +
            "    %row = arith.muli %r, %cm : index\n" +
            _for_peers("q", _wait("%done", st, "%prev", "%q"), skip_self=True) +
            "    " + _launch(g["name"], ["%a", "%b", "%part", "%ready"], [at, bt, pt_, st], _gemm_grid(g)) + "\n" +
            # every rank adds (m-tiles touching my rows) * tiles_n per call to my slot
            "    %first = arith.divui %row, %cbm : index\n"
            "    %end = arith.addi %row, %cm : index\n    %lastrow = arith.subi %end, %c1 : index\n"
            "    %last = arith.divui %lastrow, %cbm : index\n    %span0 = arith.subi %last, %first : index\n"
            "    %span = arith.addi %span0, %c1 : index\n    %per = arith.muli %span, %ctn : index\n"
            "    %all = arith.muli %per, %w : index\n    %want = arith.muli %all, %epoch : index\n" +
            "    " + _wait("%ready", st, "%want", "%r") + "\n" +
            "    " + _launch(red["name"], ["%part", "%out", "%row"], [pt_, ot, "index"], red["grid"]) + "\n" +
            _for_peers("q", _signal("%done", st, "%q", "%r", "%epoch"), skip_self=True) + _end())
    return text, [g, red]


def stuck(c: Case) -> tuple[str, list]:
    """Waits for slot 0 >= epoch, which nobody signals: a WaitTimeoutError, never a hang."""
    W, M, K, T = c.W, c.M, c.K, "f32"
    xt, pt = _mr([M, K], T), _mr([2], "i32")
    text = (_header(W) + _func("stuck", [("x", xt, "in"), ("y", xt, "out")]) + _alloc("sig", "stuck_sig", pt) +
            _PROLOGUE + _consts({"cm": M, "ck": K}) +
            "    " + _copy("%x", "%y", "%r", "%r", ["%c0", "%c0"], ["%c0", "%c0"], ["%cm", "%ck"], xt, xt) + "\n" +
            "    " + _signal("%sig", pt, "%r", "%c1", "%epoch") + "\n" +
            "    " + _wait("%sig", pt, "%epoch", "%c0") + "\n" + _end())
    return text, []


PROGRAMS = {"all_gather": all_gather, "reduce_scatter": reduce_scatter,
            "all_reduce": lambda c: reduce_scatter(c, all_rows=True), "all_reduce2": all_reduce2,
            "ag_gemm": ag_gemm, "gemm_rs": gemm_rs, "stuck": stuck}


def program(case: Case | str, **overrides) -> tuple[str, list]:
    """(device-level MLIR text, kernel records) of a case (by name, or a Case with fields overridden)."""
    c = CASES[case] if isinstance(case, str) else case
    if overrides:
        c = Case(**{**c.__dict__, **overrides})
    return PROGRAMS[c.op](c)


def module_text(case: Case | str, **overrides) -> str:
    """The program with its kernels (tt.func from the templates' build) appended, as generic MLIR text."""
    from mlir import ir

    from ditron.dialects import ditron_context, parse_module
    from ditron.kernels import get_template

    text, records = program(case, **overrides)
    with ditron_context():
        module = parse_module(text, f"{getattr(case, 'name', case)}.mlir")
        for rec in records:
            get_template(rec["template"]).build(rec, ip=ir.InsertionPoint(module.body))
        out = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=True)
        del module
    return out


def build_all(outdir: str | Path, names=None, *, target: str = "cuda:90") -> dict[str, Path]:
    """Compile the cases (all, or the names given) into outdir/<name>."""
    import ditron
    out = Path(outdir)
    built = {}
    for name in names or CASES:
        exe = ditron.compile(module_text(name), target=target, out_dir=out / name, cache=False,
                             **CASES[name].options)
        built[name] = exe.path
    return built


def without_signals_to(program: dict, pad_name: str) -> dict:
    """A copy of a host program (JSON, ditron.hostprog) whose signals to the symmetric buffer pad_name are dropped:
    whatever waits for them is stuck (the executor's timeout tests)."""
    import json
    program = json.loads(json.dumps(program))
    alloc = [a["name"] for a in program["allocs"]].index(pad_name)
    pad_values = set()

    def strip(ops):
        kept = []
        for op in ops:
            if op["op"] == "ditron_device.alloc_symmetric" and op["alloc"] == alloc:
                pad_values.update(op["out"])
            if op["op"] == "ditron_device.signal" and op["in"][0] in pad_values:
                continue
            for region in op.get("regions", ()):
                region["body"] = strip(region["body"])
            kept.append(op)
        return kept

    program["body"] = strip(program["body"])
    if not pad_values:
        raise KeyError(f"the program allocates no '{pad_name}'")
    return program


# ------------------------------------------------------------------------------------------- GPU side

def make_inputs(case: Case, call: int, device: str = "cuda") -> list[list[Any]]:
    """Per rank, the input tensors of one call (different every call and rank)."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(1000 * call + case.W)
    W, M, K, N = case.W, case.M, case.K, case.N
    dt = torch.float32 if case.op == "stuck" else torch.bfloat16

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(dt).to(device)

    shapes = {"all_gather": [(M, K)], "reduce_scatter": [(W * M, N)], "all_reduce": [(W * M, N)],
              "all_reduce2": [(W * M, N)], "ag_gemm": [(M, K), (K, N)], "gemm_rs": [(W * M, K), (K, N)],
              "stuck": [(M, K)]}[case.op]
    return [[rnd(*s) for s in shapes] for _ in range(W)]


def reference(case: Case, inputs: list[list[Any]]) -> list[list[Any]]:
    """The expected outputs per rank (fp32 accumulation, rounded to the output type)."""
    import torch
    W, M = case.W, case.M
    f = [[x.float() for x in xs] for xs in inputs]
    if case.op == "all_gather":
        full = torch.cat([xs[0] for xs in f])
        return [[full.to(inputs[0][0].dtype)] for _ in range(W)]
    if case.op == "reduce_scatter":
        total = sum(xs[0] for xs in f)
        return [[total[r * M:(r + 1) * M].to(torch.bfloat16)] for r in range(W)]
    if case.op in ("all_reduce", "all_reduce2"):
        total = sum(xs[0] for xs in f).to(torch.bfloat16)
        return [[total] for _ in range(W)]
    if case.op == "ag_gemm":
        a = torch.cat([xs[0] for xs in f])
        return [[(a @ f[r][1]).to(torch.bfloat16)] for r in range(W)]
    if case.op == "gemm_rs":
        total = sum(xs[0] @ xs[1] for xs in f)
        return [[total[r * M:(r + 1) * M].to(torch.bfloat16)] for r in range(W)]
    raise KeyError(case.op)
