"""ditron.hostprog: a device-level function serialised to a host program (JSON), its errors, and the runtime kernels
(wait, signal) it adds; the artifact's manifest carries the program (ditron.compile of a device-level module)."""
from __future__ import annotations

import json

import pytest

import executor_programs as EP
from ditron import hostprog
from ditron.dialects.context import ditron_context, parse_module
from ditron.errors import CompileError, PassError
from ditron.runtime.program import HostProgram

DEV = 'attributes {ditron.level = "device", ditron.axis = "tp"}'


def serialize(text: str, name: str = "prog.mlir"):
    with ditron_context():
        module = parse_module(text, name)
        try:
            return hostprog.serialize(module)
        finally:
            del module


def small(op: str, W: int = 2, **sizes):
    return EP.Case(op, W, sizes.pop("M", 40), K=sizes.pop("K", 64), N=sizes.pop("N", 48))


def with_kernels(case) -> str:
    return EP.module_text(case)


# ------------------------------------------------------------------------------------------------ round trip

def test_all_gather_round_trips_through_json():
    text, _ = EP.program(small("all_gather", 4))
    program = serialize(text, "ag.mlir")
    again = json.loads(json.dumps(program))
    assert again == program
    assert program["name"] == "all_gather" and program["axis"] == "tp"
    assert program["mesh"] == {"axes": ["tp"], "shape": [4]}
    assert [a["io"] for a in program["args"]] == ["in", "out", "epoch"]
    assert program["args"][0]["shape"] == [40, 64] and program["args"][0]["dtype"] == "bf16"
    assert [(a["name"], a["shape"], a["dtype"]) for a in program["allocs"]] == [
        ("ag_stage", [40, 64], "bf16"), ("ag_sig", [8], "i32")]
    assert program["streams"] == [0, 1]
    assert program["kernels"] == {}
    # every value id is defined once; locations name the file
    ids = [a["value"] for a in program["args"]]

    def walk(ops):
        for op in ops:
            assert op["loc"].startswith("ag.mlir:")
            for region in op.get("regions", ()):
                ids.extend(region["args"])
                walk(region["body"])
            ids.extend(op["out"])

    walk(program["body"])
    assert len(ids) == len(set(ids))
    HostProgram(again)  # the run-time side accepts it


def test_ops_carry_their_attributes():
    case = small("ag_gemm", 2)
    program = serialize(with_kernels(case))
    ops = []

    def walk(body):
        for op in body:
            ops.append(op)
            for region in op.get("regions", ()):
                walk(region["body"])

    walk(program["body"])
    by_name = {}
    for op in ops:
        by_name.setdefault(op["op"], []).append(op)
    copy = by_name["ditron_device.copy"][0]
    assert copy["engine"] == "copy_engine" and copy["ndim"] == 2 and len(copy["in"]) == 4 + 6
    signal = by_name["ditron_device.signal"][0]
    assert signal["kind"] == "set" and signal["scope"] == "sys" and signal["stream"] == 0
    waits = by_name["ditron_device.wait"]
    assert {w["where"] for w in waits} == {"stream"} and {w["stream"] for w in waits} == {0, 1}
    launch = by_name["ditron_device.launch"][0]
    assert launch["kernel"] == "ag_gemm_kernel" and len(launch["in"]) == 5
    assert launch["grid"] == [EP._gemm_grid(EP.program(case)[1][0])] and launch["sm_budget"] == launch["grid"][0]
    assert by_name["arith.constant"][0]["value"] == 0
    assert all("alloc" in op for op in by_name["ditron_device.alloc_symmetric"])
    kernel = program["kernels"]["ag_gemm_kernel"]
    assert kernel["spins"] is True and kernel["template"] == "gemm"
    assert kernel["args"] == ["a", "b", "c", "arrived", "epoch"]
    assert kernel["wait"]["arg"] == "arrived" and kernel["wait"]["value_arg"] == "epoch"


def test_sm_copies_run_as_launches_of_their_copy_kernels():
    """An SM copy is the launch of its copy-template kernel (src, dst, peer, rows and columns of both regions), on
    the copy's stream with the kernel's grid; a copy-engine copy stays a copy."""
    from pathlib import Path

    from ditron.passes.lower_device_to_core import LowerDeviceToCorePass
    from ditron.runtime.program import CopyAction, HostProgramError, LaunchAction
    text = (Path(__file__).parents[1] / "lit/lower-device-to-core/sm_copies.mlir").read_text()
    with ditron_context():
        module = parse_module(text, "sm_copies.mlir")
        LowerDeviceToCorePass().run(module)
        program = hostprog.serialize(module)
        del module
    program = json.loads(json.dumps(program))
    host = HostProgram(program)
    for rank in (0, 1):
        pull, push, plain = host.trace(rank, 2, 1)
        peer = 1 - rank
        assert isinstance(pull, LaunchAction) and isinstance(push, LaunchAction) and isinstance(plain, CopyAction)
        assert host.kernels[pull.kernel].copy["direction"] == "pull"
        assert host.kernels[push.kernel].copy["direction"] == "push"
        assert pull.operands[2:] == (peer, 16 * rank, 0, 16 * rank, 0) and pull.grid == (16, 1, 1)
        assert push.operands[2:] == (peer, 0, 0, 16 * rank, 0)
        assert [b.kind for b in pull.operands[:2]] == ["sym", "arg"] and plain.engine == "copy_engine"
    # a program whose copy kernel does not match the copy is refused at load time
    bad = json.loads(json.dumps(program))
    bad["kernels"][pull.kernel]["copy"]["direction"] = "sideways"
    with pytest.raises(HostProgramError, match="malformed copy facts"):
        HostProgram(bad)
    bad = json.loads(json.dumps(program))
    bad["kernels"][pull.kernel]["copy"]["rows"] = 8
    with pytest.raises(HostProgramError, match=r"SM copy on rank 0 of sizes \[16, 64\]: its kernel"):
        HostProgram(bad).trace(0, 2, 1)


def test_kernels_that_only_notify_do_not_spin():
    program = serialize(with_kernels(small("gemm_rs", 2)))
    assert program["kernels"]["gemm_rs_gemm"]["spins"] is False
    assert program["kernels"]["gemm_rs_reduce"]["spins"] is False


def test_casts_record_both_widths():
    text = f"""module {{
  func.func @f(%x: memref<4xi32> {{ditron.io = "in"}}, %epoch: index {{ditron.io = "epoch"}}) {DEV} {{
    %c = arith.constant 3 : i32
    %i = arith.index_cast %c : i32 to index
    %t = arith.trunci %c : i32 to i8
    %u = arith.extui %t : i8 to i64
    return
  }}
}}"""
    program = serialize(text)
    ops = {op["op"]: op for op in program["body"]}
    assert (ops["arith.index_cast"]["width"], ops["arith.index_cast"]["src_width"]) == (64, 32)
    assert (ops["arith.trunci"]["width"], ops["arith.trunci"]["src_width"]) == (8, 32)
    assert (ops["arith.extui"]["width"], ops["arith.extui"]["src_width"]) == (64, 8)
    assert program["streams"] == [0]


# ----------------------------------------------------------------------------------------------------- errors

def _program(body: str, args: str = '%x: memref<4xf32> {ditron.io = "in"}, %epoch: index {ditron.io = "epoch"}',
             extra: str = "") -> str:
    return f"""module {{
  func.func @f({args}) {DEV} {{
{body}
    return
  }}
{extra}}}"""


@pytest.mark.parametrize("args, message", [
    ('%x: memref<4xf32>, %epoch: index {ditron.io = "epoch"}', "argument 0 of @f has no 'ditron.io' attribute"),
    ('%epoch: index {ditron.io = "epoch"}, %x: memref<4xf32> {ditron.io = "in"}',
     "the last argument must be the epoch"),
    ('%x: memref<4xf32> {ditron.io = "in"}, %epoch: i32 {ditron.io = "epoch"}', "must be an index, got i32"),
    ('%x: f32 {ditron.io = "in"}, %epoch: index {ditron.io = "epoch"}', 'argument 0 of @f is "in" but of type f32'),
])
def test_argument_errors(args, message):
    with pytest.raises(PassError, match=message):
        serialize(_program("", args))


def test_alloc_after_device_work_is_refused():
    body = ('    %r = "ditron_device.rank"() : () -> index\n'
            '    %s = "ditron_device.alloc_symmetric"() {name = "a"} : () -> memref<2xi32>\n'
            '    "ditron_device.signal"(%s, %r, %r, %epoch) {op = "set", scope = "sys"} : '
            '(memref<2xi32>, index, index, index) -> ()\n'
            '    %t = "ditron_device.alloc_symmetric"() {name = "b"} : () -> memref<2xi32>')
    with pytest.raises(PassError) as err:
        serialize(_program(body), "late.mlir")
    assert "alloc_symmetric 'b' comes after device work" in str(err.value)
    assert err.value.render().startswith("late.mlir:6:10: error:")


def test_alloc_in_a_loop_is_refused():
    body = ('    %c0 = arith.constant 0 : index\n    %c1 = arith.constant 1 : index\n'
            '    scf.for %i = %c0 to %c1 step %c1 {\n'
            '      %s = "ditron_device.alloc_symmetric"() {name = "a"} : () -> memref<2xi32>\n    }')
    with pytest.raises(PassError, match="is nested in a region"):
        serialize(_program(body))


def test_signal_pads_past_the_runtime_kernels_i32_indices_are_refused():
    body = ('    %s = "ditron_device.alloc_symmetric"() {name = "a"} : () -> memref<1073741824xi32>\n'
            '    %t = "ditron_device.alloc_symmetric"() {name = "b"} : () -> memref<1073741824xi32>')
    with pytest.raises(PassError) as err:
        serialize(_program(body), "pads.mlir")
    assert "the signal pads up to 'b' hold 2147483648 slots" in str(err.value)
    assert err.value.render().startswith("pads.mlir:4:10: error:")
    serialize(_program(body.replace("1073741824xi32", "1073741824xf32")))  # data buffers of any size


def test_duplicate_buffer_names_are_refused():
    body = ('    %s = "ditron_device.alloc_symmetric"() {name = "a"} : () -> memref<2xi32>\n'
            '    %t = "ditron_device.alloc_symmetric"() {name = "a"} : () -> memref<4xi32>')
    with pytest.raises(PassError, match="two symmetric buffers are named 'a'"):
        serialize(_program(body))


def test_float_host_arithmetic_is_refused():
    body = "    %f = arith.constant 1.0 : f32\n    %g = arith.addf %f, %f : f32"
    with pytest.raises(PassError, match="'arith.constant' yields a f32; host values are index, integer or memref"):
        serialize(_program(body))


def test_unknown_host_op_is_refused():
    body = "    %c = arith.constant 3 : index\n    %d = index.add %c, %c"
    with pytest.raises(PassError, match="'index.add' cannot run in a host program"):
        serialize(_program(body))


LAUNCH = ('    "ditron_device.launch"(%x) {kernel = @k, grid = array<i64: 1>, operandSegmentSizes = '
          'array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, sm_budget = 1 : i64, '
          'tile_order = "row_major"} : (memref<4xf32>) -> ()')


def test_launch_of_a_missing_kernel():
    with pytest.raises(PassError, match="launch of '@k': no such symbol"):
        serialize(_program(LAUNCH))


def test_launch_of_an_uninstantiated_kernel():
    decl = '  func.func private @k() attributes {ditron.kernel = {template = "gemm"}}\n'
    with pytest.raises(PassError, match="the kernel is a func.func, not a tt.func; run ditron-lower-device-to-core"):
        serialize(_program(LAUNCH, extra=decl))


def test_launch_operand_count_must_match_the_kernel():
    kernel = ('  "tt.func"() <{function_type = (!tt.ptr<f32>, i32) -> (), sym_name = "k", '
              'sym_visibility = "public"}> ({\n'
              '  ^bb0(%p: !tt.ptr<f32>, %n: i32):\n    "tt.return"() : () -> ()\n  }) : () -> ()\n')
    with pytest.raises(PassError, match="passes 1 operand\\(s\\); the kernel takes 2"):
        serialize(_program(LAUNCH, extra=kernel))


def test_no_or_several_device_functions():
    with pytest.raises(PassError, match="no device-level function"):
        serialize("module {\n}")
    one = _program("")
    two = one.rsplit("}", 1)[0] + one.split("\n", 1)[1].rsplit("}", 1)[0].replace("@f(", "@g(") + "}"
    with pytest.raises(PassError, match="several device functions \\(@f, @g\\)"):
        serialize(two)


def test_values_from_outside_the_function_are_refused():
    # a use of a value defined outside the device function cannot be expressed in valid IR; check the guard on a
    # serializer whose id table is empty
    with ditron_context():
        module = parse_module(_program("    %c = arith.constant 1 : index\n    %d = arith.addi %c, %c : index"))
        func = hostprog.device_functions(module)[0]
        ser = hostprog._Serializer(module, func)
        add = list(func.regions[0].blocks[0].operations)[1].operation
        with pytest.raises(PassError, match="uses a value defined outside the device function"):
            ser.op(add)
        del module, func, ser, add


# ---------------------------------------------------------------------------------------------- runtime kernels

def test_runtime_kernels_needed():
    text, _ = EP.program(small("all_gather", 2))
    need_wait, signals, need_barrier = hostprog.runtime_kernels_needed(serialize(text))
    assert need_wait and signals == [("set", "sys")] and not need_barrier
    barrier = _program('    %s = "ditron_device.alloc_symmetric"() {name = "bar"} : () -> memref<4xi32>\n'
                       '    "ditron_device.barrier"(%s) : (memref<4xi32>) -> ()')
    assert hostprog.runtime_kernels_needed(serialize(barrier)) == (True, [("set", "sys")], True)
    assert hostprog.runtime_kernels_needed(serialize(_program(""))) == (False, [], False)


@pytest.mark.parametrize("target, needle", [("cuda:90", "ld.acquire.sys.global.b32"),
                                            ("hip:gfx942", "global_atomic_add")])
def test_runtime_barrier_kernel_compiles(target, needle):
    """A program with a barrier gets ditron_rt_barrier: it zeroes clear[0 .. clear_words), then sets its slot on
    every rank (release, through the heap bases) and spins on every slot with the backend's acquire load, bounded
    like the wait kernel."""
    from ditron.compiler import lower_and_compile
    barrier = _program('    %s = "ditron_device.alloc_symmetric"() {name = "bar"} : () -> memref<4xi32>\n'
                       '    "ditron_device.barrier"(%s) : (memref<4xi32>) -> ()')
    with ditron_context():
        module = parse_module(barrier, "bar.mlir")
        program = hostprog.serialize(module)
        hostprog.erase_device_functions(module)
        hostprog.add_runtime_kernels(module, program, target)
        kernels = {k.name: k for k in lower_and_compile(module, target)}
        del module
    assert program["runtime"]["barrier"] == hostprog.BARRIER_KERNEL
    k = kernels[hostprog.BARRIER_KERNEL]
    assert [a[0] for a in k.metadata["abi"]] == ["rank", "num_ranks", "heap_bases"]
    asm = k.asm["ptx" if target.startswith("cuda") else "amdgcn"]
    assert needle in asm
    if target.startswith("cuda"):  # the zeroing of clear[0 .. clear_words) is ordered before the arrival
        assert "release.sys" in asm or "sys.release" in asm
        assert asm.index("bar.sync") < asm.index("release.sys" if "release.sys" in asm else "sys.release")


@pytest.mark.parametrize("target, needle", [("cuda:90", "ld.acquire.sys.global.b32"),
                                            ("hip:gfx942", "global_atomic_add")])
def test_runtime_kernels_compile(target, needle):
    """The wait kernel spins with the backend's acquire load, bounded by max_iters; both compile for NVIDIA and
    AMD with stock Triton."""
    from ditron.compiler import lower_and_compile
    text, _ = EP.program(small("all_gather", 2))
    with ditron_context():
        module = parse_module(text, "ag.mlir")
        program = hostprog.serialize(module)
        hostprog.erase_device_functions(module)
        assert not hostprog.device_functions(module)
        hostprog.add_runtime_kernels(module, program, target)
        kernels = {k.name: k for k in lower_and_compile(module, target)}
        del module
    assert program["runtime"] == {"wait": "ditron_rt_wait", "wait_lanes": hostprog.WAIT_LANES,
                                  "signal": {"set:sys": "ditron_rt_signal_set_sys"}}
    wait = kernels["ditron_rt_wait"]
    asm = wait.asm["ptx" if target.startswith("cuda") else "amdgcn"]
    assert needle in asm
    assert wait.metadata["abi"] == []  # no rank / heap_bases: the executor passes the pad's address itself
    signal = kernels["ditron_rt_signal_set_sys"]
    assert [a[0] for a in signal.metadata["abi"]] == ["rank", "heap_bases"]
    if target.startswith("cuda"):
        assert "atom.global.sys.release.exch" in signal.asm["ptx"] or "red.release.sys" in signal.asm["ptx"] \
            or "release" in signal.asm["ptx"]


def test_runtime_kernel_names_are_reserved():
    text, _ = EP.program(small("all_gather", 2))
    taken = text.rstrip().rsplit("}", 1)[0] + (
        '  "tt.func"() <{function_type = () -> (), sym_name = "ditron_rt_wait", sym_visibility = "public"}> ({\n'
        '    "tt.return"() : () -> ()\n  }) : () -> ()\n}\n')
    with ditron_context():
        module = parse_module(taken, "ag.mlir")
        program = hostprog.serialize(module)
        with pytest.raises(CompileError, match="'@ditron_rt_wait', a name ditron reserves"):
            hostprog.add_runtime_kernels(module, program, "cuda:90")
        del module


# ------------------------------------------------------------------------------------------------ compile API

def test_compile_writes_the_host_program_into_the_manifest(tmp_path):
    import ditron
    case = small("reduce_scatter", 2)
    exe = ditron.compile(EP.module_text(case), target="cuda:90", out_dir=tmp_path / "rs", cache=False)
    program = exe.host_program
    assert program is not None and program["name"] == "reduce_scatter"
    assert set(exe.kernels) == {"reduce_scatter_kernel", "ditron_rt_wait", "ditron_rt_signal_set_sys"}
    manifest = json.loads((tmp_path / "rs" / "manifest.json").read_text())
    assert manifest["host_program"]["format_version"] == hostprog.FORMAT_VERSION
    assert manifest["host_program"]["program"] == program
    # the ABI the executor binds by: the template's arguments, then what the lowering appended
    abi = [(a.name, a.kind) for a in exe.kernels["reduce_scatter_kernel"].args]
    assert abi == [("src", "pointer"), ("dst", "pointer"), ("row", "scalar"), ("rank", "rank"),
                   ("num_ranks", "num_ranks"), ("heap_bases", "heap_bases")]


def test_compile_of_a_core_level_module_has_no_host_program(tmp_path):
    import ditron
    from ditron.tools.build_gpu_test_artifacts import VECTOR_ADD_MLIR
    exe = ditron.compile(VECTOR_ADD_MLIR, target="cuda:90", cache=False)
    assert exe.host_program is None


def test_kernels_ready_tells_whether_the_pipeline_must_run():
    """_to_core_level takes a device program as it is when every launched kernel is a tt.func already; a launch of
    a kernel declaration (func.func with a record) needs ditron-default (ditron-lower-device-to-core)."""
    decl = '  func.func private @k() attributes {ditron.kernel = {template = "gemm"}}\n'
    with ditron_context():
        module = parse_module(_program(LAUNCH, extra=decl))
        assert not hostprog.kernels_ready(module)
        del module
        module = parse_module(with_kernels(small("ag_gemm", 2)))
        assert hostprog.kernels_ready(module)
        assert hostprog.launched_kernels(hostprog.device_functions(module)[0]) == ["ag_gemm_kernel"]
        del module


def test_the_entry_fork_is_dropped_where_the_executors_fork_implies_it():
    """Stream 0's first action sets the rank's own sync slot (gpu scope) and each side stream starts by waiting
    for it: the executor starts every stream of a call from one event, so the wait of a stream that waits for
    nothing else goes (and the signal with the last such wait); the wait of a stream that later waits for a peer
    stays, so does a signal another action reads; other heads are left alone."""
    from ditron.runtime.program import (Buf, CopyAction, LaunchAction, SignalAction, WaitAction,
                                        without_entry_fork)
    pad, data, avail = Buf("sym", 0), Buf("sym", 1), Buf("sym", 2)

    def sig(rank=0, scope="gpu", slot=0):
        return SignalAction(0, None, 0, pad, rank, slot, 1, "set", scope)

    def wait(stream, slot=0, on=pad):
        return WaitAction(stream, None, 1, on, 1, (slot,), "stream")

    def copy(stream, dst_rank):
        return CopyAction(stream, None, 2, Buf("arg", 0), data, 0, dst_rank, (0,), (0,), (8,), "copy_engine")
    push, local = copy(1, 1), copy(2, 0)
    launch = LaunchAction(0, None, 3, "k", (data, 1), (4, 1, 1), 4, "grouped")
    assert without_entry_fork([sig(), wait(1), push, launch], 0) == [push, launch]
    pull = [sig(), wait(1), push, wait(2), local, wait(2, on=avail), copy(2, 0), launch]
    assert without_entry_fork(pull, 0) == [sig(), push, wait(2), local, wait(2, on=avail), copy(2, 0), launch]
    late = WaitAction(1, None, 4, pad, 1, (0,), "stream")  # stream 1 waits again later: its entry wait stays
    assert without_entry_fork([sig(), wait(1), push, launch, late], 0) == [sig(), wait(1), push, launch, late]
    reader = LaunchAction(0, None, 3, "k", (pad, 1), (4, 1, 1), 4, "grouped")
    assert without_entry_fork([sig(), wait(1), push, reader], 0) == [sig(), push, reader]
    for head in (sig(rank=1), sig(scope="sys")):  # a peer's slot, or one a peer may read: not the fork
        assert without_entry_fork([head, wait(1), push], 0) == [head, wait(1), push]
    assert without_entry_fork([sig(), wait(1, slot=1), push], 0) == [sig(), wait(1, slot=1), push]
    assert without_entry_fork([launch, wait(1), push], 0) == [launch, wait(1), push]
