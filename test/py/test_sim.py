"""ditron.sim: semantics, determinism, findings and error paths, on small hand-written device programs
(test/py/sim_programs/)."""
from __future__ import annotations

import numpy as np
import pytest

import sim_programs as P
from ditron.dialects.context import ditron_context, parse_module
from ditron.errors import VerificationError
from ditron.sim import (DEADLOCK, INVALID, MISMATCH, OUT_OF_BOUNDS, RACE_READ, RACE_WAR, RACE_WRITE,
                        UNINITIALIZED, UNWRITTEN_OUTPUT, SimulationError, simulate, task_reference)
from ditron.sim.memory import Pad, round_to

BARRIER = '"ditron_device.barrier"(%bar) : (memref<1xi32>) -> ()'


def shift_reference(per_rank_inputs):
    n = len(per_rank_inputs)
    return [[np.asarray(per_rank_inputs[(r - 1) % n][0])] for r in range(n)]


# ------------------------------------------------------------------------------------------------ numerics


@pytest.mark.parametrize("W", [1, 2, 4, 8])
@pytest.mark.parametrize("M", [128, 4091])
def test_all_gather_equals_reference(W, M):
    seeds = (0, 1) if W * M > 8 * 1000 else (0, 1, 2)
    text = P.all_gather(W, M, 32)
    for seed in seeds:
        result = simulate(text, W, seed=seed, calls=2, reference=P.all_gather_reference)
        assert result.ok, result.summary()
        assert result.compared
        assert len(result.outputs) == W and result.outputs[0][0].shape == (W * M, 32)


def test_all_gather_against_the_task_level_reference():
    W, M, K = 4, 128, 16
    result = simulate(P.all_gather(W, M, K), W, seed=3, calls=2,
                      reference=task_reference(P.task_all_gather(W, M, K)))
    assert result.ok, result.summary()
    assert "outputs equal to the reference" in result.summary()


def test_outputs_are_rounded_to_bf16():
    W, M, K = 2, 8, 16
    xs = [[np.full((M, K), 1.0 + 2.0 ** -10, dtype=np.float32)] for _ in range(W)]  # not a bf16 value
    result = simulate(P.all_gather(W, M, K), W, inputs=xs)
    assert result.ok, result.summary()
    assert np.all(result.outputs[0][0] == 1.0)  # rounded to nearest even on the way in


def test_bf16_rounding_is_round_to_nearest_even():
    x = np.array([1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -9, np.inf, np.nan, -2.5], dtype=np.float32)
    round_to("bf16", x)
    assert x[0] == 1.0 and x[1] == 1.0 and x[2] == 1.0 + 2.0 ** -6 and x[3] == 1.0
    assert np.isinf(x[4]) and np.isnan(x[5]) and x[6] == -2.5


def test_a_wrong_result_is_a_mismatch():
    W, M, K = 2, 16, 8

    def wrong(per_rank_inputs):
        out = P.all_gather_reference(per_rank_inputs)
        out[1][0] = out[1][0].copy()
        out[1][0][3, 5] += 1.0
        return out

    result = simulate(P.all_gather(W, M, K), W, calls=1, reference=wrong)
    (f,) = result.of_kind(MISMATCH)
    assert f.rank == 1 and f.call == 1
    assert "1/" in f.message and "[3, 5]" in f.message


# ----------------------------------------------------------------------------------------------- determinism


def test_same_seed_same_run_and_seeds_vary_the_interleaving():
    text = P.all_gather(4, 16, 8)
    a = simulate(text, 4, seed=5, calls=2)
    b = simulate(text, 4, seed=5, calls=2)
    assert a.schedule_digest == b.schedule_digest and a.steps == b.steps
    assert all(np.array_equal(x, y, equal_nan=True) for ra, rb in zip(a.outputs, b.outputs) for x, y in zip(ra, rb))
    digests = {simulate(text, 4, seed=s, calls=2).schedule_digest for s in range(6)}
    assert len(digests) > 1


# -------------------------------------------------------------------------------------- happens-before teeth


def test_a_wait_satisfied_too_early_is_a_race_for_every_seed():
    # The receiver waits for slot >= epoch - 1: in call 1 the initial zero satisfies it. Whatever the timing
    # (the data may well have arrived), the read is not ordered after the push.
    text = P.program("shift_right", LAG=1, BARRIER=BARRIER)
    for seed in range(6):
        result = simulate(text, 4, seed=seed, calls=1)
        kinds = {f.kind for f in result.findings}
        assert kinds & {RACE_READ, UNINITIALIZED}, (seed, result.summary())
        race = result.of_kind(RACE_READ) or result.of_kind(UNINITIALIZED)
        assert race[0].loc.file.endswith("<string>") or race[0].loc.line > 0


def test_reuse_across_calls_without_a_barrier_is_a_race():
    text = P.program("shift_right", LAG=0, BARRIER="")
    one = simulate(text, 4, seed=0, calls=1, reference=shift_reference)
    assert one.ok, one.summary()  # a single call is correct ...
    several = [simulate(text, 4, seed=s, calls=3, reference=shift_reference) for s in range(4)]
    for r in several:  # ... but the next call may push into the inbox while the previous one is being read
        assert r.of_kind(RACE_WAR, RACE_WRITE, RACE_READ), r.summary()
        war = r.of_kind(RACE_WAR, RACE_WRITE, RACE_READ)[0]
        assert "'inbox'" in war.message and war.region and war.notes


def test_a_barrier_fixes_reuse():
    text = P.program("shift_right", LAG=0, BARRIER=BARRIER)
    for seed in range(4):
        result = simulate(text, 4, seed=seed, calls=3, reference=shift_reference)
        assert result.ok, result.summary()


def test_sync_between_calls_orders_the_calls():
    text = P.program("shift_right", LAG=0, BARRIER="")
    for seed in range(4):
        result = simulate(text, 4, seed=seed, calls=3, reference=shift_reference, sync_between_calls=True)
        assert result.ok, result.summary()


def test_pad_acquires_the_earliest_satisfying_release():
    pad = Pad("'p'", 0, 1)
    c1 = np.array([5, 0], dtype=np.int64)
    c2 = np.array([0, 7], dtype=np.int64)
    assert pad.acquire(0, 1) is None
    pad.apply(0, "add", 1, c1)
    pad.apply(0, "add", 1, c2)
    assert list(pad.acquire(0, 1)) == [5, 0]         # value 1 was enough: only the first add is known
    assert list(pad.acquire(0, 2)) == [5, 7]         # an add extends the release sequence
    pad.apply(0, "set", 3, np.array([1, 1], dtype=np.int64))
    assert list(pad.acquire(0, 3)) == [1, 1]         # a set starts a new one
    assert len(pad.acquire(0, 0)) == 0               # satisfied by the initial value: nothing to acquire


# ---------------------------------------------------------------------------------------------- deadlocks


def test_deadlock_names_rank_location_slot_and_value():
    result = simulate(P.path("deadlock_ring"), 3, calls=1)
    assert result.deadlocked and not result.ok
    (f,) = result.of_kind(DEADLOCK)
    assert f.loc.file.endswith("deadlock_ring.mlir") and (f.loc.line, f.loc.col) == (17, 5)
    assert f.rank == 0 and f.call == 1
    assert "'ring_sig' on rank 0 slot 0 >= 1 (now 0)" in f.message
    for r in range(3):
        assert f"rank {r}: rank {r} stream 0: wait (call 1) waits for 'ring_sig' on rank {r} slot 0 >= 1" in \
            "\n".join(str(d) for d in f.diagnostics())
    text = result.summary()
    assert "deadlock_ring.mlir:17:5: error: [deadlock]" in text and "FAILED: 1 deadlock" in text


def test_deadlock_when_a_signal_is_missing_on_one_rank_only():
    # shift_right with W = 1 pushes to itself: correct. With a wait for a value nobody sets: deadlock.
    text = P.program("shift_right", LAG=-1, BARRIER="")  # waits for epoch + 1
    result = simulate(text, 2)
    (f,) = result.of_kind(DEADLOCK)
    assert "'inbox_sig'" in f.message and ">= 2 (now 1)" in f.message


# ------------------------------------------------------------------------------------------- error paths


def test_wrong_input_shape_is_a_precise_error():
    text = P.all_gather(2, 16, 8)
    bad = [[np.zeros((16, 8))], [np.zeros((16, 9))]]
    with pytest.raises(SimulationError) as err:
        simulate(text, 2, inputs=bad)
    msg = str(err.value)
    assert "inputs of rank 1" in msg and "argument 0 of @all_gather is memref<16x8xbf16>" in msg
    assert "(16, 9)" in msg


def test_wrong_number_of_inputs_and_ranks():
    text = P.all_gather(2, 16, 8)
    with pytest.raises(SimulationError, match=r"one entry per rank \(2\), got 1"):
        simulate(text, 2, inputs=[[np.zeros((16, 8))]])
    with pytest.raises(SimulationError, match=r"takes 1 input argument\(s\) \(0\), got 2"):
        simulate(text, 2, inputs=[[np.zeros((16, 8))] * 2] * 2)
    with pytest.raises(SimulationError, match="world_size must be >= 1"):
        simulate(text, 0)


def test_reference_of_the_wrong_shape_is_an_error():
    with pytest.raises(SimulationError, match=r"reference output 0 of rank 0 has shape \(3,\)"):
        simulate(P.all_gather(2, 4, 4), 2, reference=lambda xs: [[np.zeros(3)] for _ in xs])


def _device_func(body: str, args: str = "%y: memref<4xf32> {ditron.io = \"out\"}, ") -> str:
    return (f"module {{\n  func.func @f({args}%epoch: index {{ditron.io = \"epoch\"}}) "
            f"attributes {{ditron.level = \"device\"}} {{\n{body}\n    return\n  }}\n}}\n")


def test_an_op_the_simulator_cannot_run_is_a_located_error():
    text = _device_func('    %m = memref.alloc() : memref<4xf32>')
    with pytest.raises(SimulationError) as err:
        simulate(text, 1)
    assert "'memref.alloc' is not an op of a device-level program" in str(err.value)
    assert err.value.diagnostics[0].line == 3


def test_missing_or_ambiguous_device_function():
    with pytest.raises(SimulationError, match="no device-level function"):
        simulate("module {\n  func.func @f() {\n    return\n  }\n}", 1)
    text = P.all_gather(1, 4, 4)
    extra = text[text.index("  func.func"):text.rindex("}")].replace("@all_gather", "@other")
    both = text[:text.rindex("}")] + extra + "}\n"
    with pytest.raises(SimulationError, match="several device functions"):
        simulate(both, 1)
    assert simulate(both, 1, function="other").function == "other"
    with pytest.raises(SimulationError, match="no device-level function '@nope'"):
        simulate(both, 1, function="nope")


def test_arguments_need_io_and_a_trailing_epoch():
    text = ("module {\n  func.func @f(%y: memref<4xf32>, %e: index {ditron.io = \"epoch\"}) "
            "attributes {ditron.level = \"device\"} {\n    return\n  }\n}\n")
    with pytest.raises(SimulationError, match="argument 0 of @f has no 'ditron.io'"):
        simulate(text, 1)
    text = ("module {\n  func.func @f(%y: memref<4xf32> {ditron.io = \"out\"}) "
            "attributes {ditron.level = \"device\"} {\n    return\n  }\n}\n")
    with pytest.raises(SimulationError, match="last argument must be the epoch"):
        simulate(text, 1)


def test_invalid_ir_is_a_verification_error():
    text = _device_func('    %c0 = arith.constant 0 : index\n'
                        '    "ditron_device.copy"(%y, %y, %c0, %c0, %c0, %c0, %c0) {engine = "warp"} : '
                        '(memref<4xf32>, memref<4xf32>, index, index, index, index, index) -> ()')
    with pytest.raises(VerificationError, match="engine 'warp'"):
        simulate(text, 1)


# --------------------------------------------------------------------------------------- rules of the IR

_PAD = '    %sig = "ditron_device.alloc_symmetric"() {name = "sig"} : () -> memref<2xi32>\n'
_CONSTS = ('    %c0 = arith.constant 0 : index\n    %c1 = arith.constant 1 : index\n'
           '    %c4 = arith.constant 4 : index\n    %r = "ditron_device.rank"() : () -> index\n')


def _sig(target: str, scope: str = "sys", slot: str = "%c0") -> str:
    return (f'    "ditron_device.signal"(%sig, {target}, {slot}, %epoch) {{op = "set", scope = "{scope}"}} : '
            f'(memref<2xi32>, index, index, index) -> ()\n')


def _fill_y() -> str:
    return ('    %z = "ditron_device.alloc_symmetric"() {name = "z"} : () -> memref<4xf32>\n'
            '    "ditron_device.copy"(%z, %y, %r, %r, %c0, %c0, %c4) {engine = "copy_engine"} : '
            '(memref<4xf32>, memref<4xf32>, index, index, index, index, index) -> ()\n')


def test_gpu_scope_signal_to_a_peer_is_invalid():
    w = '    %w = "ditron_device.num_ranks"() : () -> index\n    %p = arith.subi %w, %c1 : index\n'
    result = simulate(_device_func(_PAD + _CONSTS + w + _sig("%p", "gpu")), 2)
    (f,) = result.of_kind(INVALID)
    assert "scope 'gpu'" in f.message and f.rank == 0 and f.loc.line > 0
    assert not simulate(_device_func(_PAD + _CONSTS + _sig("%r", "gpu")), 2).of_kind(INVALID)


def test_rank_and_slot_outside_the_world_are_out_of_bounds():
    result = simulate(_device_func(_PAD + _CONSTS + _sig("%c4")), 2)
    assert "outside the world of 2 rank(s)" in result.of_kind(OUT_OF_BOUNDS)[0].message
    result = simulate(_device_func(_PAD + _CONSTS + _sig("%r", slot="%c4")), 2)
    assert "slot 4 of signal pad 'sig'" in result.of_kind(OUT_OF_BOUNDS)[0].message


def test_remote_access_to_an_argument_is_invalid():
    body = _CONSTS + ('    %w = "ditron_device.num_ranks"() : () -> index\n    %p = arith.subi %w, %c1 : index\n'
                      '    "ditron_device.copy"(%x, %y, %p, %r, %c0, %c0, %c4) {engine = "copy_engine"} : '
                      '(memref<4xf32>, memref<4xf32>, index, index, index, index, index) -> ()\n')
    text = _device_func(body, '%x: memref<4xf32> {ditron.io = "in"}, %y: memref<4xf32> {ditron.io = "out"}, ')
    result = simulate(text, 2)
    assert any("only symmetric buffers" in f.message for f in result.of_kind(INVALID))
    assert result.of_kind(UNWRITTEN_OUTPUT)


def test_late_allocation_is_invalid():
    body = _CONSTS + _fill_y() + '    %late = "ditron_device.alloc_symmetric"() {name = "late"} : () -> memref<4xf32>'
    result = simulate(_device_func(body), 1)
    (f,) = result.of_kind(INVALID)
    assert "'late' comes after device work was enqueued" in f.message
    assert result.of_kind(UNINITIALIZED)  # z was never written


def test_alloc_in_a_loop_is_an_error():
    body = (_CONSTS + '    scf.for %i = %c0 to %c4 step %c1 {\n'
            '      %b = "ditron_device.alloc_symmetric"() {name = "b"} : () -> memref<4xf32>\n    }')
    with pytest.raises(SimulationError, match="runs more than once in one call"):
        simulate(_device_func(body), 1)


def test_unwritten_output_is_reported_with_its_region():
    result = simulate(_device_func(_CONSTS), 2)
    assert len(result.of_kind(UNWRITTEN_OUTPUT)) == 2
    assert "4 element(s) of output argument 0" in result.of_kind(UNWRITTEN_OUTPUT)[0].message


def test_host_control_flow_on_index_values():
    # scf.if with results, scf.for with iter_args, signed/unsigned arithmetic.
    body = (_CONSTS + '    %w = "ditron_device.num_ranks"() : () -> index\n'
            '    %sum = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %c0) -> (index) {\n'
            '      %n = arith.addi %acc, %i : index\n      scf.yield %n : index\n    }\n'
            '    %six = arith.constant 6 : index\n'
            '    %eq = arith.cmpi eq, %sum, %six : index\n'
            '    %m1 = arith.constant -1 : index\n'
            '    %q = arith.divsi %m1, %c4 : index\n'        # 0 (truncation toward zero)
            '    %f = arith.floordivsi %m1, %c4 : index\n'   # -1
            '    %ok1 = arith.cmpi eq, %q, %c0 : index\n'
            '    %ok2 = arith.cmpi slt, %f, %c0 : index\n'
            '    %ok12 = arith.andi %ok1, %ok2 : i1\n'
            '    %ok = arith.andi %eq, %ok12 : i1\n'
            '    %n = scf.if %ok -> (index) {\n      scf.yield %c4 : index\n    } else {\n'
            '      scf.yield %c1 : index\n    }\n'
            '    %z = "ditron_device.alloc_symmetric"() {name = "z"} : () -> memref<4xf32>\n'
            '    "ditron_device.copy"(%x, %y, %r, %r, %c0, %c0, %n) {engine = "copy_engine"} : '
            '(memref<4xf32>, memref<4xf32>, index, index, index, index, index) -> ()\n')
    text = _device_func(body, '%x: memref<4xf32> {ditron.io = "in"}, %y: memref<4xf32> {ditron.io = "out"}, ')
    result = simulate(text, 1, reference=lambda xs: [[xs[0][0]]])
    assert result.ok, result.summary()  # the copy moved all 4 elements: %n was 4


def test_simulate_accepts_a_module_and_a_path():
    with ditron_context():
        module = parse_module(P.all_gather(2, 8, 4), "ag.mlir")
        assert simulate(module, 2, reference=P.all_gather_reference).ok
        del module
    assert simulate(P.path("deadlock_ring"), 1).deadlocked


# ------------------------------------------------------------------------------------------ kernel launches

def _launch_program(record: str, operands: str = "%x, %y", types: str = "memref<8x4xf32>, memref<8x4xf32>",
                    kernel: str = "@k") -> str:
    n = operands.count("%")
    seg = ", ".join(["1"] * n + ["0"] * (16 - n))
    decl = f'  func.func private @k() attributes {{ditron.kernel = {record}}}\n' if record else \
        '  func.func private @k()\n'
    return (f'module {{\n  func.func @f(%x: memref<8x4xf32> {{ditron.io = "in"}}, %y: memref<8x4xf32> '
            f'{{ditron.io = "out"}}, %epoch: index {{ditron.io = "epoch"}}) attributes {{ditron.level = "device"}} {{\n'
            f'    "ditron_device.launch"({operands}) {{operandSegmentSizes = array<i32: {seg}>, kernel = {kernel}, '
            f'grid = array<i64: 2>, sm_budget = 2 : i64, tile_order = "row_major"}} : ({types}) -> ()\n'
            f'    return\n  }}\n{decl}}}\n')


class Probe:
    """A test template: two programs, each copying (or mis-copying, by ``mode``) half of x into y."""

    def __init__(self, mode: str = "ok"):
        self.mode = mode

    def tiles(self, record, *, rank, num_ranks, scalars):
        from ditron.kernels import Region, TileStep

        if self.mode == "raise":
            raise KeyError("block_m")
        out = []
        for p in range(2):
            src, dst = Region("x", (4 * p, 0), (4, 4)), Region("y", (4 * p, 0), (4, 4))
            mode = self.mode

            def compute(view, src=src, dst=dst):
                if mode == "write_read":
                    view(src)[...] = 0.0
                elif mode == "undeclared":
                    view(Region("y", (0, 0), (8, 4)))[...] = 0.0
                else:
                    view(dst)[...] = view(src) * 2
            out.append([TileStep(reads=[src], writes=[dst], compute=compute)])
        return out


REC = '{template = "probe", name = "k", args = ["x", "y"]}'


def test_a_launch_runs_its_template():
    result = simulate(_launch_program(REC), 2, templates={"probe": Probe()},
                      reference=lambda xs: [[2 * x[0]] for x in xs])
    assert result.ok, result.summary()


@pytest.mark.parametrize("mode, message", [
    ("write_read", "writes into a region it declares only as a read"),
    ("undeclared", "a region its reads and writes do not declare"),
    ("raise", "template 'probe' failed to describe the tiles of '@k' on rank 0: KeyError"),
])
def test_template_bugs_are_located_errors(mode, message):
    with pytest.raises(SimulationError) as err:
        simulate(_launch_program(REC), 1, templates={"probe": Probe(mode)})
    assert message in str(err.value) and "<string>:3:" in str(err.value)


def test_launch_errors():
    with pytest.raises(SimulationError, match="passes 1 operand.* names 2 argument"):
        simulate(_launch_program(REC, "%x", "memref<8x4xf32>"), 1, templates={"probe": Probe()})
    with pytest.raises(SimulationError, match="uses template 'nosuch', which ditron.kernels does not define"):
        simulate(_launch_program(REC.replace("probe", "nosuch")), 1)
    with pytest.raises(SimulationError, match="has no 'ditron.kernel' record"):
        simulate(_launch_program(""), 1)


def test_a_program_writing_its_input_writes_its_own_copy():
    # An input buffer borrows its call's input array until the program writes it (memory.Buffer): the write goes to
    # the buffer's own copy, and the inputs the reference (and the caller) read are the ones given.
    body = (_CONSTS + '    %c2 = arith.constant 2 : index\n'
            '    "ditron_device.copy"(%x, %x, %r, %r, %c0, %c2, %c2) {engine = "copy_engine"} : '
            '(memref<4xf32>, memref<4xf32>, index, index, index, index, index) -> ()\n'
            '    "ditron_device.copy"(%x, %y, %r, %r, %c0, %c0, %c4) {engine = "copy_engine"} : '
            '(memref<4xf32>, memref<4xf32>, index, index, index, index, index) -> ()\n')
    text = _device_func(body, '%x: memref<4xf32> {ditron.io = "in"}, %y: memref<4xf32> {ditron.io = "out"}, ')
    given = [[np.array([1, 2, 3, 4], dtype=np.float32)], [np.array([5, 6, 7, 8], dtype=np.float32)]]

    def reference(xs):
        return [[np.concatenate([x[0][:2], x[0][:2]])] for x in xs]

    result = simulate(text, 2, inputs=given, reference=reference)
    assert result.ok, result.summary()
    assert [list(x[0]) for x in result.inputs_per_call[1]] == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert list(result.outputs[1][0]) == [5, 6, 5, 6]
    assert list(given[0][0]) == [1, 2, 3, 4]


def test_an_input_buffer_borrows_its_input_until_written():
    from ditron.sim.memory import Buffer
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = Buffer("input argument 0", 0, x.shape, "f32", symmetric=False, kind="in", init=x)
    assert np.shares_memory(buf.data, x) and buf.borrowed
    with pytest.raises(ValueError):
        buf.data[0, 0] = 100  # every write goes through writable()
    buf.writable()[0, 0] = 100
    assert x[0, 0] == 0 and buf.data[0, 0] == 100 and not np.shares_memory(buf.data, x)
    other = Buffer("input argument 1", 0, (3, 4), "bf16", symmetric=False, kind="in", init=x.astype(np.float64))
    assert not other.borrowed and other.data.dtype == np.float32  # not its storage type: copied
