"""The eager call plans' C path (runtime/hotpath.c through memops.PlanEntries, used by runtime/eager.py): a kernel
launch packed once and re-written per call, fork / join of streams and stream memops, each one C call into the
driver's entry points -- here C function pointers (ctypes callbacks) that record what they are given. Then a whole
ops call on bench_host's dry GPU: the C path launches exactly what Triton's launcher is given on the Python path
(the same grid, stream, function and arguments, the fresh tensors' pointers), with the streams forked and joined
around it; the executor's error tags are forgotten in O(1); outputs come from empty_like of a prototype."""
from __future__ import annotations

import contextlib
import ctypes
from types import SimpleNamespace

import pytest
import torch

from ditron.runtime import eager, memops

LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                          ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
CTX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_uint64))
HANDLES = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
WAIT_EVENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint)
VALUE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint)
DTOD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p)


class Memcpy2D(ctypes.Structure):  # CUDA_MEMCPY2D (cuda.h)
    _fields_ = [("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t), ("srcMemoryType", ctypes.c_int),
                ("srcHost", ctypes.c_void_p), ("srcDevice", ctypes.c_uint64), ("srcArray", ctypes.c_void_p),
                ("srcPitch", ctypes.c_size_t), ("dstXInBytes", ctypes.c_size_t), ("dstY", ctypes.c_size_t),
                ("dstMemoryType", ctypes.c_int), ("dstHost", ctypes.c_void_p), ("dstDevice", ctypes.c_uint64),
                ("dstArray", ctypes.c_void_p), ("dstPitch", ctypes.c_size_t), ("WidthInBytes", ctypes.c_size_t),
                ("Height", ctypes.c_size_t)]


COPY2D = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Memcpy2D), ctypes.c_void_p)
WIDTH = {"b": ctypes.c_int8, "B": ctypes.c_uint8, "h": ctypes.c_int16, "H": ctypes.c_uint16, "i": ctypes.c_int32,
         "I": ctypes.c_uint32, "q": ctypes.c_int64, "Q": ctypes.c_uint64}


def _fields(c) -> dict:
    return {name: getattr(c, name) for name, _ in Memcpy2D._fields_}


def _hot():
    hot = memops.hotpath()
    if hot is None:
        pytest.skip("no C compiler or Python headers here: the helper cannot be built")
    return hot


class Driver:
    """Recording entry points: ``log`` gets (name, args...) per call; ``codes[name]`` is what each returns; the
    launch reads its arguments at the widths of ``types`` (set by the test)."""

    def __init__(self):
        self.log, self.codes, self.types, self.ctx = [], {}, "", 0xc0

        def launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            args = tuple(ctypes.cast(params[i], ctypes.POINTER(WIDTH[t])).contents.value
                         for i, t in enumerate(self.types))
            self.log.append(("launch", f, (gx, gy, gz), (bx, by, bz), smem, stream, args))
            return self.codes.get("launch", 0)

        def ctx(out):
            out[0] = self.ctx
            return 0
        self.fns = {"cuLaunchKernel": LAUNCH(launch), "cuCtxGetCurrent": CTX(ctx),
                    "cuEventRecord": HANDLES(lambda e, s: self.log.append(("record", e, s)) or
                                             self.codes.get("record", 0)),
                    "cuStreamWaitEvent": WAIT_EVENT(lambda s, e, f: self.log.append(("wait_event", s, e)) or
                                                    self.codes.get("wait_event", 0)),
                    "cuStreamWriteValue32": VALUE(lambda s, a, v, f: self.log.append(("write", s, a, v)) or
                                                  self.codes.get("write", 0)),
                    "cuStreamWaitValue32": VALUE(lambda s, a, v, f: self.log.append(("wait_value", s, a, v)) or
                                                 self.codes.get("wait_value", 0)),
                    "cuMemcpyDtoDAsync_v2": DTOD(lambda d, s, n, st: self.log.append(("dtod", d, s, n, st)) or
                                                 self.codes.get("dtod", 0)),
                    "cuMemcpy2DAsync_v2": COPY2D(lambda c, st: self.log.append(("copy2d", _fields(c.contents), st))
                                                 or self.codes.get("copy2d", 0))}
        self.addresses = {k: ctypes.cast(fn, ctypes.c_void_p).value for k, fn in self.fns.items()}

    def entries(self):
        return memops.PlanEntries(_hot(), self.addresses)


def test_a_packed_launch_writes_only_the_varying_arguments_each_call():
    d = Driver()
    e = d.entries()
    d.types = "QibBhqQQQ"  # a pointer, i32, i8, u8, i16, i64, a pointer, then Triton's two scratch pointers
    cap = e.make_launch(0xf0, (3, 2, 1), 128, 4096, 0x5, d.types, (0, -7, -3, 200, -300, -(1 << 40), 0xabc, 0, 0),
                        (0, 1))
    assert e.launch(cap, 0x1000, 42) == 0
    assert d.log == [("launch", 0xf0, (3, 2, 1), (128, 1, 1), 4096, 0x5,
                      (0x1000, 42, -3, 200, -300, -(1 << 40), 0xabc, 0, 0))]
    assert e.launch(cap, 0x2000, -1) == 0 and d.log[1][-1][:2] == (0x2000, -1)
    del d.log[:]
    with pytest.raises(OverflowError, match="argument 1: 2147483648 does not fit"):
        e.launch(cap, 0x3000, 1 << 31)
    with pytest.raises(TypeError, match="1 values for 2 varying"):
        e.launch(cap, 0x3000)
    with pytest.raises(TypeError):
        e.launch(cap, "0x3000", 1)
    assert d.log == []  # nothing launched by a refused call
    d.codes["launch"] = 719
    assert e.launch(cap, 0x3000, 1) == 719
    d.ctx = 0  # no current context: nothing launched, -1 (the plan goes through Triton's launcher then)
    assert e.launch(cap, 0x3000, 1) == -1 and len(d.log) == 1
    d.ctx = 0xc0
    empty = e.make_launch(0xf0, (0, 1, 1), 128, 0, 0x5, "Q", (0,), (0,))
    assert e.launch(empty, 0x10) == 0 and len(d.log) == 1  # an empty grid launches nothing, as Triton's launcher
    with pytest.raises(OverflowError):
        e.make_launch(0xf0, (1, 1, 1), 32, 0, 0x5, "B", (256,), ())
    with pytest.raises(ValueError, match="unknown type code"):
        e.make_launch(0xf0, (1, 1, 1), 32, 0, 0x5, "f", (1,), ())
    with pytest.raises(IndexError):
        e.make_launch(0xf0, (1, 1, 1), 32, 0, 0x5, "Q", (1,), (1,))


def test_fork_join_and_memops_in_one_call_each():
    d = Driver()
    e = d.entries()
    assert e.fork(0xe0, 0x1, 0x2, 0x3) == 0
    assert e.join(0x1, 0xe2, 0x2, 0xe3, 0x3) == 0
    assert e.record(0xe4, 0x2) == 0
    assert d.log == [("record", 0xe0, 0x1), ("wait_event", 0x2, 0xe0), ("wait_event", 0x3, 0xe0),
                     ("record", 0xe2, 0x2), ("wait_event", 0x1, 0xe2), ("record", 0xe3, 0x3),
                     ("wait_event", 0x1, 0xe3), ("record", 0xe4, 0x2)]
    del d.log[:]
    assert e.memops(0x2, 7, 2, 0x100, 0x104, 0x200) == 0  # a barrier: two writes, then a wait
    assert d.log == [("write", 0x2, 0x100, 7), ("write", 0x2, 0x104, 7), ("wait_value", 0x2, 0x200, 7)]
    assert e.memops(0x2, -1, 1, 0x100) == 0 and d.log[-1] == ("write", 0x2, 0x100, 0xFFFFFFFF)  # mod 2^32
    d.codes.update(wait_event=400)
    assert e.fork(0xe0, 0x1, 0x2, 0x3) == -400 and d.log[-1] == ("wait_event", 0x2, 0xe0)  # stops there
    d.codes.update(record=700)
    assert e.join(0x1, 0xe2, 0x2) == 700
    d.codes.update(wait_value=1)
    del d.log[:]
    code = e.memops(0x2, 5, 1, 0x100, 0x200, 0x300)
    assert d.log == [("write", 0x2, 0x100, 5), ("wait_value", 0x2, 0x200, 5)]
    err = e.memop_error(code, 1, (0x100, 0x200, 0x300), 5, lambda c: f"E{c}")
    assert isinstance(err, memops.MemopError)
    assert "cuStreamWaitValue32(addr=0x200, value=5) failed: CUresult 1 (E1)" in str(err)


def test_driver_binds_the_plan_entry_points_and_none_without_the_helper(monkeypatch):
    d = Driver()
    lib = SimpleNamespace(cuStreamWaitValue32_v2=d.fns["cuStreamWaitValue32"],
                          cuStreamWriteValue32_v2=d.fns["cuStreamWriteValue32"],
                          **{k: v for k, v in d.fns.items() if "Value32" not in k})
    _hot()
    entries = memops.DriverMemops(lib).plan_entries()
    assert entries is not None and entries.launch_entry == d.addresses["cuLaunchKernel"]
    assert entries.memops(0x9, 3, 1, 0x40) == 0 and d.log == [("write", 0x9, 0x40, 3)]
    monkeypatch.setattr(memops, "hotpath", lambda: None)
    assert memops.DriverMemops(lib).plan_entries() is None
    del lib.cuLaunchKernel
    monkeypatch.undo()
    assert memops.DriverMemops(lib).plan_entries() is None  # a driver without cuLaunchKernel: no C path


def _recording_dry_gpu(monkeypatch):
    """bench_host (for its dry GPU) with its driver's entry points a recording Driver: (bench, driver)."""
    from test_ops import _bench
    _hot()
    bench = _bench("bench_host")
    d = Driver()
    lib_entries = bench._DryLib(memops.hotpath())
    for name, fn in d.fns.items():
        setattr(lib_entries, {"cuStreamWriteValue32": "cuStreamWriteValue32_v2",
                              "cuStreamWaitValue32": "cuStreamWaitValue32_v2"}.get(name, name), fn)
    drv = memops.DriverMemops(lib_entries)
    monkeypatch.setattr(bench, "_dry_driver", lambda: drv)
    return bench, d


@pytest.mark.parametrize("c_path,native", [(True, True), (True, False), (False, False)])
def test_a_planned_ops_call_launches_what_tritons_launcher_is_given(monkeypatch, tmp_path, c_path, native):
    """bench_host's dry GPU, its driver's entry points recording: an ops.ag_gemm call through its plan forks the
    user's stream to the executor's, launches the GEMM with the call's fresh tensors and joins back -- through the
    C path (cuLaunchKernel; the whole call one C program, or a C call per step) and through Triton's launcher (its
    C launch recorded) alike, with the same arguments."""
    from ditron import ops
    from ditron.runtime.world import World
    bench, d = _recording_dry_gpu(monkeypatch)
    triton = []
    monkeypatch.setattr(bench, "_dry_launch", lambda *args: triton.append(args))
    monkeypatch.setattr(eager, "C_PATH", c_path)
    monkeypatch.setattr(eager, "NATIVE", native)
    with contextlib.ExitStack() as stack:
        bench.dry_gpu(stack)
        lib = ops.Library(tmp_path / "lib", target="cuda:90")
        world = World.virtual(1, device="cpu")
        b = [torch.randn(32, 16).to(torch.bfloat16)]
        xs = [[torch.randn(64, 32).to(torch.bfloat16)] for _ in range(3)]
        outs = [ops.ag_gemm(x, b, world, sync=False, library=lib) for x in xs]  # the first call makes the plan
        fast = next(iter(lib._eager.values()))
        plan = fast.plan
        assert (plan.entries is not None) == c_path and plan.c_launches == (1 if c_path else 0)
        assert bool(plan.native) == native
        (kernel,) = {a.kernel for a in plan.ex._eager_traces[0]._fixed}
        ck = plan.ex._kernel(kernel).triton_kernel
        d.types = "Q" * (len(ck.src.signature) + 2)
        del d.log[:], triton[:]
        more = [[torch.randn(64, 32).to(torch.bfloat16)] for _ in range(2)]
        got = [ops.ag_gemm(x, b, world, sync=False, library=lib) for x in more]
        log, through_triton = list(d.log), list(triton)
        from triton import knobs
        hook = lambda metadata: None  # noqa: E731 - a plain function as a launch hook
        del triton[:]
        with monkeypatch.context() as m:
            m.setattr(knobs.runtime, "launch_enter_hook", hook)
            ops.ag_gemm(more[0], b, world, sync=False, library=lib)
        assert len(triton) == 1 and triton[0][11] is hook  # a registered hook: Triton's launcher, given the hook
        lib.close()
    d.log, triton = log, through_triton
    assert all(o[0].shape == (64, 16) and o[0].is_contiguous() for o in outs + got)
    assert len({o[0].data_ptr() for o in got}) == 2  # fresh outputs
    (a,) = plan.ex._eager_traces[0]._fixed
    grid = tuple(a.grid) + (1,) * (3 - len(a.grid))
    user, executor = d.log[0][2], plan.handles[(0, a.stream)]
    if c_path:  # per call: fork (record on the user's stream, the executor's waits), the launch, join
        assert [e[0] for e in d.log] == ["record", "wait_event", "launch", "record", "wait_event"] * 2
        assert not triton
        launched = [e[1:] for e in d.log if e[0] == "launch"]
        assert all(f == ck.function and g == grid and block == (32 * ck.metadata.num_warps, 1, 1) and
                   smem == ck.metadata.shared and stream == executor and args[-2:] == (0, 0)
                   for f, g, block, smem, stream, args in launched)
        values = [args[:-2] for *_, args in launched]
    else:  # the ctypes fork / join around Triton's launcher
        assert [e[0] for e in d.log] == ["record", "wait_event", "record", "wait_event"] * 2
        assert len(triton) == 2
        values = []
        for gx, gy, gz, stream, function, _, _, gscratch, pscratch, packed, meta, enter, leave, *vals in triton:
            assert (gx, gy, gz) == grid and stream == executor and function == ck.function
            assert packed == ck.packed_metadata and gscratch is None and pscratch is None and meta is None
            values.append(tuple(vals))
    assert d.log[1][1] == executor and d.log[-1][1] == user  # the executor's stream waits; the user's joins
    for vals, x, y in zip(values, more, got):  # the call's fresh tensors, the weight, in the kernel's ABI order
        assert sorted(vals) == sorted((x[0].data_ptr(), b[0].data_ptr(), y[0].data_ptr()))
    assert values[0].index(more[0][0].data_ptr()) == values[1].index(more[1][0].data_ptr())


class T:
    """A stand-in tensor: its data pointer."""

    def __init__(self, ptr):
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr


def test_a_program_is_a_whole_call_in_one_c_call():
    """make_program / run: the fork, each step with the call's pointers and epoch values, the join of the epoch's
    ring slot -- in order, in one call; a refused driver call comes back as (step, code) with the steps before it
    enqueued; no current context: -1, nothing enqueued; a Python step's error propagates."""
    d = Driver()
    e = d.entries()
    d.types = "QiiQQ"  # a pointer, an affine i32, the tag, Triton's two scratch pointers
    cap = e.make_launch(0xf0, (2, 1, 1), 128, 0, 0x5, d.types, (0, 0, 0, 0, 0), (0, 1, 2))
    seen = []

    def pre(epoch):
        return 100 + epoch, ("lazy", epoch)

    def post(epoch, lazy):
        seen.append(("post", epoch, lazy))

    def py(epoch, row):
        seen.append(("py", epoch, [t.data_ptr() for t in row]))
    steps = (("L", 0, cap, ((0, 1),), ((1, 10, 3),), 2, pre, post),
             ("M", 0x5, 7, 1, 1, (0x100, 0x200), lambda epoch: seen.append(("after", epoch))),
             ("C", 1, 0x6, 0, 0x10, -1, 0x9000, 256, 3, 512, 1024),
             ("P", 1, py))
    join = tuple((0xe0 + 2 * i, 0x5, 0xe1 + 2 * i, 0x6) for i in range(4))
    prog = e.make_program(0xee, (0x5, 0x6), join, steps).capsule
    rows = [[T(0xa000), T(0xb000)], [T(0xc000)]]
    assert e.run(prog, 3, 0x1, rows) == 0
    launch = ("launch", 0xf0, (2, 1, 1), (128, 1, 1), 0, 0x5, (0xb000, 10 + 3 * 2, 103, 0, 0))
    assert [x if x[0] != "copy2d" else (x[0], x[1]["srcDevice"], x[1]["dstDevice"], x[1]["Height"], x[2])
            for x in d.log] == [
        ("record", 0xee, 0x1), ("wait_event", 0x5, 0xee), ("wait_event", 0x6, 0xee), launch,
        ("write", 0x5, 0x100, 9), ("wait_value", 0x5, 0x200, 9), ("copy2d", 0xc010, 0x9000, 3, 0x6),
        ("record", 0xe6, 0x5), ("wait_event", 0x1, 0xe6), ("record", 0xe7, 0x6), ("wait_event", 0x1, 0xe7)]
    assert seen == [("post", 3, ("lazy", 3)), ("after", 3), ("py", 3, [0xc000])]
    del d.log[:]
    d.codes["write"] = 9
    assert e.run(prog, 4, 0x1, rows) == (1, (9 << 8) | 1)   # the memops step's first address refused
    assert [x[0] for x in d.log][-2:] == ["launch", "write"]
    d.codes.clear()
    d.codes["wait_event"] = 400
    assert e.run(prog, 4, 0x1, rows) == (-1, -400)           # the fork
    d.codes.clear()
    del d.log[:]
    d.ctx = 0
    assert e.run(prog, 4, 0x1, rows) == -1 and d.log == []   # no context: nothing enqueued
    d.ctx = 0xc0
    with pytest.raises(IndexError, match="no tensor 1 in row 0"):
        e.run(prog, 4, 0x1, [[T(1)], [T(2)]])
    boom = e.make_program(0xee, (), ((),), (("P", 0, lambda epoch, row: 1 / 0),))  # it keeps its steps alive
    with pytest.raises(ZeroDivisionError):
        e.run(boom.capsule, 1, 0x1, [[]])
    with pytest.raises(ValueError, match="step 0: unknown kind"):
        e.make_program(0xee, (), ((),), (("X", 0),))
    with pytest.raises(ValueError, match="not a 64-bit argument"):
        e.make_program(0xee, (), ((),), (("L", 0, cap, ((1, 0),), (), -1, None, None),))


class Fake(T):
    """A stand-in tensor for op_call: shape, dtype, device, contiguity, data pointer."""

    def __init__(self, ptr, shape=(4, 8), contiguous=True):
        super().__init__(ptr)
        self.shape, self.dtype, self.device, self.contiguous = torch.Size(shape), torch.bfloat16, "dev", contiguous

    def is_contiguous(self):
        return self.contiguous


def test_op_call_matches_then_runs_the_epochs_parity_program():
    """make_op_call / op_call with stand-ins: a call matches on its handle, the arguments after it (type and value)
    and each tensor's exact type, shape, dtype, device and contiguity, the aligned slots' data pointers; it takes
    the epoch, binds the epoch's parity (use_parity) and runs that parity's program with the call's tensors and a fresh output in their slots, queues
    the end's milestones; a refused launch calls fail; a closed executor, a capture, another registration of the
    world, an epoch past the plan's last: None, nothing done."""
    d = Driver()
    e = d.entries()
    d.types = "QQQQ"
    progs = []
    for f in (0xf0, 0xf1):
        cap = e.make_launch(f, (1, 1, 1), 32, 0, 0x5, d.types, (0, 0, 0, 0), (0, 1))
        progs.append(tuple(e.make_program(0xee, (0x5,), tuple((0xe0 + i, 0x5) for i in range(2)),
                                          (("L", 0, cap, ((0, 2), (1, 0)), (), -1, None, None),))))
    ex = SimpleNamespace(epoch=4, _closed=False, _broken=None)
    parities, queued, pruned, capturing = [], [], [], [False]
    entry = ("world",)
    worlds = {"w": entry}
    made = iter(Fake(0x9000 + 0x100 * i) for i in range(100))

    def fail(res, epoch):
        raise RuntimeError(f"refused {tuple(res)} at {epoch}")
    c = e.hot.make_op_call("w", ("auto",), (Fake,), (torch.Size((4, 8)),), (torch.bfloat16,), ("dev",), 3, (2, 0),
                           (2,), 16,
                           lambda: next(made), worlds, entry, ex, 6, tuple(progs), parities.append,
                           lambda index: 0x1, 0, None, lambda: capturing[0], None, lambda: pruned.append(1), 2,
                           lambda *m: m, tuple(((queued.append, "ev%d" % i, 0, 0),) for i in range(2)), fail)
    x = Fake(0xa000)
    out = e.hot.op_call((c,), (x, "w", "auto"))
    assert out.ptr == 0x9000 and ex.epoch == 5 and parities == [1] and queued == [("ev1", 0, 0, None, 5)]
    assert [x[:2] for x in d.log] == [("record", 0xee), ("wait_event", 0x5), ("launch", 0xf1), ("record", 0xe1),
                                      ("wait_event", 0x1)]
    assert d.log[2][-1] == (0xa000, 0x9000, 0, 0)   # the input in slot 2 (arg 0), the output in slot 0 (arg 1)
    assert e.hot.op_call((c,), (x, "w", "auto")).ptr == 0x9100 and ex.epoch == 6 and parities == [1, 0]
    assert d.log[-3][1] == 0xf0 and pruned == [1]    # parity 0's program; prune every 2nd call
    n = len(d.log)
    for args in [(Fake(1, (4, 9)), "w", "auto"), (Fake(1, contiguous=False), "w", "auto"), (x, "v", "auto"),
                 (x, "w", "one_shot"), (x, "w"), (x, "w", "auto", 0), (object(), "w", "auto"),
                 (type("Sub", (Fake,), {})(1), "w", "auto"), (Fake(0xa008), "w", "auto")]:  # the last unaligned
        assert e.hot.op_call((c,), args) is None     # no match
    ex.epoch = 6                                     # the next would be 7, past the plan's last (6)
    assert e.hot.op_call((c,), (x, "w", "auto")) is None and ex.epoch == 6
    ex.epoch = 2
    for undo, do in [(lambda: setattr(ex, "_closed", False), lambda: setattr(ex, "_closed", True)),
                     (lambda: setattr(ex, "_broken", None), lambda: setattr(ex, "_broken", "timed out")),
                     (lambda: capturing.__setitem__(0, False), lambda: capturing.__setitem__(0, True)),
                     (lambda: worlds.__setitem__("w", entry), lambda: worlds.__setitem__("w", ("again",)))]:
        do()
        assert e.hot.op_call((c,), (x, "w", "auto")) is None
        undo()
    assert len(d.log) == n and ex.epoch == 2
    d.ctx = 0                                        # no context: the epoch given back, the Python way
    assert e.hot.op_call((c,), (x, "w", "auto")) is None and ex.epoch == 2 and len(d.log) == n
    d.ctx = 0xc0
    d.codes["launch"] = 719
    with pytest.raises(RuntimeError, match=r"refused \(0, 719\) at 3"):
        e.hot.op_call((c,), (x, "w", "auto"))


def test_executor_tags_keep_the_last_ones_issued_in_constant_time():
    from ditron.runtime.actions import INT32_MAX, TAGS_KEPT, Actions
    ex = SimpleNamespace(_next_tag=INT32_MAX - 10, _capturing=False, _tags={}, _pinned_tags={}, epoch=3)
    tags = [Actions._new_tag(ex, 0, "a", (), 1) for _ in range(TAGS_KEPT + 20)]
    assert tags[10] == INT32_MAX and tags[11] == 1  # wraps
    assert list(ex._tags) == tags[-TAGS_KEPT:]
    ex._capturing = True
    pinned = Actions._new_tag(ex, 0, "a", (), 1)
    ex._capturing = False
    after = Actions._new_tag(ex, 0, "a", (), 1)
    assert pinned in ex._pinned_tags and pinned not in ex._tags and after in ex._tags
    assert len(ex._tags) == TAGS_KEPT - 1  # the window counts the pinned tag too


def test_outputs_come_from_an_expanded_prototype():
    make = eager.output_maker((3, 5, 7), torch.bfloat16, torch.device("cpu"))
    assert make.func is torch.empty_like and make.args[0].untyped_storage().nbytes() == 2  # one element
    made = [make() for _ in range(2)]
    assert all(m.shape == (3, 5, 7) and m.is_contiguous() and m.dtype == torch.bfloat16 for m in made)
    assert made[0].data_ptr() != made[1].data_ptr()
    empty = eager.output_maker((0, 4), torch.bfloat16, torch.device("cpu"))
    assert empty.func is torch.empty and empty().shape == (0, 4) and empty().stride() == (4, 1)


def test_a_copy_is_one_driver_copy_of_rows():
    d = Driver()
    e = d.entries()
    assert e.copy(0x5, 0x1000, 0x2000, 4096, 1, 4096, 4096) == 0   # one row: cuMemcpyDtoDAsync
    assert d.log[-1] == ("dtod", 0x1000, 0x2000, 4096, 0x5)
    assert e.copy(0x6, 0x1000, 0x2000, 256, 7, 1024, 512) == 0     # 7 rows of 256 bytes, pitches 1024 / 512
    name, c, stream = d.log[-1]
    assert (name, stream) == ("copy2d", 0x6)
    assert (c["dstDevice"], c["dstPitch"], c["srcDevice"], c["srcPitch"], c["WidthInBytes"], c["Height"]) == \
        (0x1000, 1024, 0x2000, 512, 256, 7)
    assert c["srcMemoryType"] == c["dstMemoryType"] == 2 and c["srcXInBytes"] == c["dstY"] == 0  # device, at 0
    d.codes["copy2d"] = 700
    assert e.copy(0x6, 0x1000, 0x2000, 256, 7, 1024, 512) == 700    # the CUresult comes back


@pytest.mark.parametrize("sizes,strides,want", [
    ((4, 8), [(8, 1), (8, 1)], (64, 1, (64, 64))),            # whole tensors: one row
    ((2, 8), [(8, 1), (16, 1)], (16, 2, (16, 32))),           # a dense source, destination rows apart
    ((3, 5), [(5, 1), (9, 1)], (10, 3, (10, 18))),             # rows into a wider buffer
    ((1, 3, 5), [(15, 5, 1), (45, 9, 1)], (10, 3, (10, 18))),  # a leading 1 does not count
    ((2, 3, 5), [(15, 5, 1), (45, 9, 1)], None),               # two outer dims: torch's copy_
    ((3, 5), [(5, 1), (1, 3)], None),                          # a transposed view: torch's copy_
])
def test_copy_rows(sizes, strides, want):
    from ditron.runtime.regions import copy_rows
    assert copy_rows(sizes, strides, 2) == want


def test_a_torch_operator_call_like_a_checked_one_is_one_c_call(monkeypatch, tmp_path):
    """bench_host's dry GPU, its driver recording: after a checked torch.ops.ditron.ag_gemm call, a call with
    fresh tensors of the same shapes is hotpath.c's op_call (fastcall.op_front) -- the Python operator path is not
    entered -- with the fresh pointers launched, a fresh output, the executor's epoch taken once, the end's
    milestone queued; another shape, a capture, a launch hook or a closed executor go the Python way; a refused
    launch raises the plan's error."""
    from ditron import fastcall, ops, torch_ops
    from ditron.runtime.world import World
    bench, d = _recording_dry_gpu(monkeypatch)
    capturing = [False]
    with contextlib.ExitStack() as stack:
        bench.dry_gpu(stack)
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
        lib = ops.Library(tmp_path / "lib", target="cuda:90")
        world = World.virtual(1, device="cpu")
        handle = torch_ops.register_world(world, lib, capturable=False)
        stack.callback(lambda: (torch_ops.close(world), torch_ops.unregister_world(handle)))
        b = torch.randn(32, 16).to(torch.bfloat16)
        first = torch.ops.ditron.ag_gemm(torch.randn(64, 32).to(torch.bfloat16), b, handle)
        calls = fastcall.fronts["ag_gemm"]
        fast = next(v[2] for v in fastcall._ops.values() if v[2].world is world)
        ex = fast.ex
        (kernel,) = {a.kernel for a in ex._eager_traces[0]._fixed}
        d.types = "Q" * (len(ex._kernel(kernel).triton_kernel.src.signature) + 2)
        real_run = torch_ops._run
        monkeypatch.setattr(torch_ops, "_run", lambda *a: pytest.fail("the Python operator path was taken"))
        del d.log[:]
        epoch, queued = ex.epoch, sum(len(q) for q in ex.watch.queues.values())
        xs = [torch.randn(64, 32).to(torch.bfloat16) for _ in range(3)]
        outs = [torch.ops.ditron.ag_gemm(x, b, handle) for x in xs]
        assert ex.epoch == epoch + 3 and sum(len(q) for q in ex.watch.queues.values()) == queued + 3
        assert all(o.shape == first.shape and o.dtype == first.dtype and o.is_contiguous() for o in outs)
        assert len({o.data_ptr() for o in outs}) == 3
        launched = [e[-1][:-2] for e in d.log if e[0] == "launch"]
        assert [e[0] for e in d.log] == ["record", "wait_event", "launch", "record", "wait_event"] * 3
        for vals, x, y in zip(launched, xs, outs):
            assert sorted(vals) == sorted((x.data_ptr(), b.data_ptr(), y.data_ptr()))
        # the Python way (run_front gives None, having done nothing)
        x = xs[0]
        assert fastcall.run_front(calls, (torch.randn(48, 32).to(torch.bfloat16), b, handle)) is None
        assert fastcall.run_front(calls, (x, b, handle, 0)) is None          # another form of the arguments
        assert fastcall.run_front(calls, (x.t().contiguous().t(), b, handle)) is None  # not contiguous
        capturing[0] = True
        assert fastcall.run_front(calls, (x, b, handle)) is None
        capturing[0] = False
        from triton import knobs
        with monkeypatch.context() as m:
            m.setattr(knobs.runtime, "launch_enter_hook", lambda metadata: None)
            assert fastcall.run_front(calls, (x, b, handle)) is None
        ex._closed = True
        assert fastcall.run_front(calls, (x, b, handle)) is None
        ex._closed = False
        assert ex.epoch == epoch + 3 and len(d.log) == 15
        # torch_ops.call (ditron.nn's layers, the wrappers): the C call without the dispatcher in plain eager code,
        # the operator (which tries the C call itself) under a dispatch mode
        from torch.utils._python_dispatch import TorchDispatchMode

        class Seen(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.ops = []

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                self.ops.append(str(func))
                return func(*args, **(kwargs or {}))
        fronted = []
        real_front = fastcall.run_front
        monkeypatch.setattr(fastcall, "run_front", lambda calls, args: fronted.append(len(args)) or
                            real_front(calls, args))
        with torch.no_grad():  # the C call straight away, max_rows=0 left out as the dispatcher leaves it out
            assert torch_ops.call("ag_gemm", x, b, handle, 0).shape == first.shape and ex.epoch == epoch + 4
            assert fronted == [3]
            with Seen() as seen:
                assert torch_ops.call("ag_gemm", x, b, handle).shape == first.shape
            assert seen.ops == ["ditron.ag_gemm.default"] and ex.epoch == epoch + 5
            with pytest.raises(RuntimeError):  # too many arguments: the dispatcher's schema error
                torch_ops.call("ag_gemm", x, b, handle, 0, 0)
        del fronted[:]
        assert torch_ops.call("ag_gemm", x, b, handle).shape == first.shape  # grad mode: through the operator
        assert fronted == [3] and ex.epoch == epoch + 6
        monkeypatch.setattr(fastcall, "run_front", real_front)
        del d.log[:]
        d.codes["launch"] = 719
        with pytest.raises(eager.DitronRuntimeError, match=f"cuLaunchKernel of @{kernel} failed: CUresult 719"):
            torch.ops.ditron.ag_gemm(x, b, handle)
        d.codes.clear()
        monkeypatch.setattr(torch_ops, "_run", real_run)
        y = torch.ops.ditron.ag_gemm(torch.randn(48, 32).to(torch.bfloat16), b, handle)  # another shape: checked
        assert y.shape == (48, 16) and len(fastcall.fronts["ag_gemm"]) == 2
        torch_ops.unregister_world(handle)  # registered again (a new handle): first call checked, then C calls
        handle = torch_ops.register_world(world, lib, capturable=False)
        torch.ops.ditron.ag_gemm(x, b, handle)
        with monkeypatch.context() as m:
            m.setattr(torch_ops, "_run", lambda *a: pytest.fail("the Python operator path was taken"))
            torch.ops.ditron.ag_gemm(x, b, handle)
        torch_ops.close(world)
        assert "ag_gemm" not in fastcall.fronts
        lib.close()


def test_a_registered_kernel_programs_operator_call_like_a_checked_one_is_one_c_call(monkeypatch):
    """torch_ops.register_custom_op on bench_host's dry GPU: after a checked call of ditron::user_gather, a call with
    fresh tensors of the same shape is one C call (its builder is not run again, nor the UserOp's checks); an input
    the kernel's 16-byte specialisation does not hold goes the Python way, whose check raises."""
    from test_custom_ops import GATHER

    from ditron import errors as ditron_errors
    from ditron import fastcall, torch_ops
    from ditron.runtime.world import World
    bench, d = _recording_dry_gpu(monkeypatch)
    with contextlib.ExitStack() as stack:
        bench.dry_gpu(stack)
        oper = torch_ops.register_custom_op(GATHER)
        monkeypatch.setattr(GATHER.user_op, "target", "cuda:90")
        world = World.virtual(1, device="cpu")
        handle = torch_ops.register_world(world, capturable=False)
        stack.callback(lambda: (torch_ops.close(world), torch_ops.unregister_world(handle)))
        first = oper(torch.randn(37), handle)
        assert first.shape == (37,) and "user_gather" in fastcall.fronts
        ex = next(v[2].ex for k, v in fastcall._ops.items() if k[0] == "user_gather")
        (kernel,) = {a.kernel for a in ex._eager_traces[0]._fixed if hasattr(a, "kernel")}
        d.types = "Q" * (len(ex._kernel(kernel).triton_kernel.src.signature) + 2)
        del d.log[:]
        xs = [torch.randn(37) for _ in range(2)]
        with monkeypatch.context() as m:
            m.setattr(GATHER, "build", lambda *a, **k: pytest.fail("the Python operator path was taken"))
            outs = [oper(x, handle) for x in xs]
        assert all(o.shape == (37,) for o in outs) and outs[0].data_ptr() != outs[1].data_ptr()
        launched = [e[-1] for e in d.log if e[0] == "launch"]
        assert len(launched) == 2 and all(x.data_ptr() in args for x, args in zip(xs, launched))
        fastcall.drop_fronts()  # the next call makes its C call again (its FastCall is still good)
        oper(xs[0], handle)
        with monkeypatch.context() as m, torch.no_grad():
            m.setattr(GATHER, "build", lambda *a, **k: pytest.fail("the Python operator path was taken"))
            assert oper(xs[0], handle).shape == (37,)
            assert torch_ops.call("user_gather", xs[1], handle).shape == (37,)  # no defaults to leave out
        big = torch.randn(38)
        with pytest.raises(ditron_errors.DitronRuntimeError, match="16"):
            oper(big[1:], handle)  # 4 bytes off: the Python way (its builder, then the executor's check)


def test_a_closed_executor_with_c_programs_is_collected(monkeypatch, tmp_path):
    """The plans' C programs borrow their steps' objects (memops.Program keeps them), so an executor whose plan
    has programs -- steps that reach back to it -- is freed once closed and dropped, as without them."""
    import gc
    import weakref

    from ditron import ops
    from ditron.runtime.world import World
    bench, d = _recording_dry_gpu(monkeypatch)
    with contextlib.ExitStack() as stack:
        bench.dry_gpu(stack)
        lib = ops.Library(tmp_path / "lib", target="cuda:90")
        world = World.virtual(2, device="cpu")
        xs = [torch.randn(128, 256).to(torch.bfloat16) for _ in range(2)]
        for _ in range(3):
            ops.all_reduce(xs, world, "one_shot", sync=False, library=lib)
        (fast,) = lib._eager.values()
        steps = [s for _, rank_steps in fast.plan.steps[0] for s in rank_steps]
        assert fast.plan.native and any(getattr(s, "native", ("",))[0] == "L" and s.native[5] is not None
                                        for s in steps)  # a launch whose tag callback reaches the executor
        del steps
        ex = weakref.ref(fast.ex)
        del fast
        lib.close()
        del lib
        gc.collect()
        assert ex() is None
