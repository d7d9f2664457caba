"""ditron-lower-core-to-triton and the compile path: kernels built with the typed ditron_core builders, lowered per
backend, compiled by Triton for cuda:90, cuda:80 and gfx942; the binaries checked for the instructions each primitive
must become. (Every compile re-parses the lowered TTIR with Triton's own parser.)"""
from __future__ import annotations

import io
import re
import time
from typing import Callable, Sequence

import pytest
from mlir import ir
from mlir.dialects import arith

from ditron.compiler import emit_stage, kernel_ttir, lower_and_compile
from ditron.dialects import core, ditron_context, ttir
from ditron.dialects.opbase import walk_ops
from ditron.errors import CompileError, PassError, TargetError
from ditron.passes import lower_core_to_triton as lowering
from ditron.passes.lower_core_to_triton import LowerCoreToTritonPass

TARGETS = ["cuda:90", "cuda:80", "hip:gfx942"]
TILE = 4096  # bf16 elements per program: 16-byte vectors per thread on both vendors
BOUND_ABI = [["wait_bound", "i64"], ["wait_err", "*i32"], ["wait_tag", "i32"]]  # what every bounded spin needs


def make_kernel(module: ir.Module, name: str, args: Sequence[str], body: Callable[..., None],
                divisible: Sequence[int] = ()) -> ir.Operation:
    """A public tt.func `name` with argument types `args` (text), built by body(*block_args) at the module end."""
    types = [ir.Type.parse(a) for a in args]
    with ir.InsertionPoint(module.body):
        func = ir.Operation.create("tt.func", regions=1, attributes={
            "sym_name": ir.StringAttr.get(name), "sym_visibility": ir.StringAttr.get("public"),
            "function_type": ir.TypeAttr.get(ir.FunctionType.get(types, [])),
            "arg_attrs": ir.ArrayAttr.get([ir.DictAttr.get(
                {"tt.divisibility": ir.IntegerAttr.get(ttir.i32(), 16)} if i in divisible else {})
                for i in range(len(types))])})
    block = func.regions[0].blocks.append(*types)
    with ir.InsertionPoint(block):
        body(*block.arguments)
        ir.Operation.create("tt.return")
    return func


def tile_ptrs(base: ir.Value, n: int) -> ir.Value:
    rng = ir.Operation.create("tt.make_range", results=[ir.RankedTensorType.get([n], ttir.i32())],
                              attributes={"start": ir.IntegerAttr.get(ttir.i32(), 0),
                                          "end": ir.IntegerAttr.get(ttir.i32(), n)}).result
    return ttir.addptr(ttir.splat(base, [n]), rng)


def c32(v: int) -> ir.Value:
    return ttir.c(v, ttir.i32())


def every_primitive(module: ir.Module, name: str = "every_primitive") -> ir.Operation:
    """rank 0 .. W-1 ring: wait for my flag, read the previous rank's tile through symm_at, store it, notify the next
    rank (add), then meet every rank in barrier_all."""
    def body(src, out, flags, pad):
        rank = core.Rank.build().rank
        world = core.NumRanks.build().num_ranks
        nxt = arith.RemSIOp(arith.AddIOp(rank, c32(1)).result, world).result
        prev = arith.RemSIOp(arith.AddIOp(rank, arith.SubIOp(world, c32(1)).result).result, world).result
        token = core.Wait.build(flags, c32(1), scope="sys", semantic="acquire").token
        remote = core.SymmAt.build(src, prev).result
        remote = core.ConsumeToken.build(remote, token).result
        ttir.store(tile_ptrs(out, TILE), ttir.load(tile_ptrs(remote, TILE)))
        core.Notify.build(flags, nxt, c32(1), op="add", scope="sys", semantic="release")
        core.BarrierAll.build(pad, scope="sys")
    return make_kernel(module, name, ["!tt.ptr<bf16>", "!tt.ptr<bf16>", "!tt.ptr<i32>", "!tt.ptr<i32>"], body,
                       divisible=(0, 1))


def core_op_names(module: ir.Module) -> list[str]:
    return [op.name for op in walk_ops(module.operation) if op.name.startswith("ditron_core.")]


@pytest.fixture(scope="module")
def every_compiled():
    out = {}
    for target in TARGETS:
        with ditron_context():
            module = ir.Module.create()
            every_primitive(module)
            start = time.perf_counter()
            (kernel,) = lower_and_compile(module, target)
            out[target] = (kernel, time.perf_counter() - start)
            assert core_op_names(module) == []
            del module
    return out


# --------------------------------------------------------------------------------------------- binaries

@pytest.mark.parametrize("target", TARGETS)
def test_every_primitive_compiles(every_compiled, target):
    kernel, seconds = every_compiled[target]
    assert kernel.binary[:4] == b"\x7fELF"
    assert b"every_primitive" in kernel.binary
    assert kernel.metadata["abi"] == [["rank", "i32"], ["num_ranks", "i32"], ["heap_bases", "*i64"]] + BOUND_ABI
    assert kernel.metadata["signature"] == ["*bf16", "*bf16", "*i32", "*i32", "i32", "i32", "*i64", "i64", "*i32",
                                            "i32"]
    assert seconds < 3.0, f"compile took {seconds:.2f} s"


@pytest.mark.parametrize("target", ["cuda:90", "cuda:80"])
def test_nvidia_instructions(every_compiled, target):
    ptx = every_compiled[target][0].asm["ptx"]
    assert "ld.acquire.sys.global.b32" in ptx                     # wait, barrier_all spin
    assert re.search(r"atom\.global\.sys\.release\.add\.u32", ptx)  # notify add
    assert re.search(r"atom\.global\.sys\.release\.exch\.b32", ptx)  # barrier_all announce
    assert "ld.global.v4.b32" in ptx                              # tile through symm_at stays vectorized
    assert "ld.volatile.global.b32" in ptx                        # barrier generation counter
    assert re.search(r"begin inline asm\s+mov\.b32 %r\d+, 0;", ptx)  # consume_token's opaque zero
    assert "bar.sync" in ptx
    assert f".target sm_{target[5:]}" in ptx


def test_amd_instructions(every_compiled):
    gcn = every_compiled["hip:gfx942"][0].asm["amdgcn"]
    # wait: LLVM turns the acquire atomic add of 0 into a system-coherent load, then invalidates the caches
    assert re.search(r"global_load_dword v\d+, v\d+, s\[\d+:\d+\] sc0 sc1\n\ts_waitcnt vmcnt\(0\)\n"
                     r"\tbuffer_inv sc0 sc1", gcn)
    assert "buffer_wbl2 sc0 sc1" in gcn                             # release at system scope
    assert re.search(r"global_atomic_add\b.* sc1", gcn)             # notify add
    assert re.search(r"global_atomic_swap\b.* sc1", gcn)            # barrier_all announce
    assert re.search(r"(buffer|global)_load_dwordx4", gcn)          # vectorized tile through symm_at
    assert re.search(r"v_mov_b32 v\d+, 0\b", gcn)
    assert "s_barrier" in gcn


def test_symm_at_hint_is_what_keeps_loads_vectorized(monkeypatch):
    """Control: claim only 2-byte aligned heap bases and the same tile load becomes scalar."""
    monkeypatch.setattr(lowering, "HEAP_BASE_ALIGN", 2)
    with ditron_context():
        module = ir.Module.create()
        every_primitive(module, "unaligned")
        (kernel,) = lower_and_compile(module, "cuda:90")
        del module
    assert "ld.global.v4.b32" not in kernel.asm["ptx"]
    assert re.search(r"ld\.global\.b16", kernel.asm["ptx"])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("scope,semantic", [("gpu", "acquire"), ("sys", "relaxed")])
def test_wait_on_a_tensor_of_slots(target, scope, semantic):
    def body(flags, out):
        slots = tile_ptrs(flags, 64)
        token = core.Wait.build(slots, c32(3), scope=scope, semantic=semantic).token
        offsets = core.ConsumeToken.build(ttir.c(0, ttir.i64()), token).result
        ttir.store(ttir.addptr(out, offsets), token)
    with ditron_context():
        module = ir.Module.create()
        make_kernel(module, "wait_many", ["!tt.ptr<i32>", "!tt.ptr<i32>"], body)
        (kernel,) = lower_and_compile(module, target)
        del module
    assert kernel.metadata["abi"] == BOUND_ABI
    if target.startswith("cuda"):
        assert f"ld.{semantic}.{scope}.global.b32" in kernel.asm["ptx"]
    else:
        gcn = kernel.asm["amdgcn"]
        invalidate = {("sys", "acquire"): "buffer_inv sc0 sc1", ("gpu", "acquire"): "buffer_inv sc1"}
        if semantic == "acquire":
            assert invalidate[scope, semantic] in gcn
        else:
            assert "buffer_inv" not in gcn


def _wait_once(target: str):
    """A kernel that waits for flags[0] >= 1 and stores the token: (compiled kernel, its asm)."""
    def body(flags, out):
        ttir.store(out, core.Wait.build(flags, c32(1), scope="sys", semantic="acquire").token)
    with ditron_context():
        module = ir.Module.create()
        make_kernel(module, "wait_once", ["!tt.ptr<i32>", "!tt.ptr<i32>"], body)
        (kernel,) = lower_and_compile(module, target)
        del module
    return kernel, kernel.asm["ptx" if target.startswith("cuda") else "amdgcn"]


@pytest.mark.parametrize("target", ["cuda:90", "cuda:80"])
def test_bounded_wait_ptx(target):
    """The spin is bounded without costing memory traffic: one acquire load per poll and an i64 counter in a
    register; giving up, one thread per program adds 1 to wait_err[0] and writes wait_tag and the value seen to
    wait_err[1], wait_err[2], then the kernel goes on."""
    kernel, ptx = _wait_once(target)
    assert kernel.metadata["abi"] == BOUND_ABI
    assert kernel.metadata["signature"] == ["*i32", "*i32", "i64", "*i32", "i32"]
    loop = re.search(r"(\$L__BB0_\d+):[^\n]*\n(.*?)@%p\d+ bra\s+\1;", ptx, re.S)
    assert loop, ptx
    memory = re.findall(r"^\s*(?:@%p\d+\s+)?((?:ld|st|atom|red|cp)\.[\w.]+)", loop.group(2), re.M)
    assert memory == ["ld.acquire.sys.global.b32"], memory   # the poll, and nothing else
    assert re.search(r"setp\.lt\.s64\s+%p\d+, %rd\d+, %rd\d+;", loop.group(2))  # polls < wait_bound
    assert re.search(r"add\.s64\s+%rd\d+, %rd\d+, 1;", loop.group(2))
    after = ptx[loop.end():]
    err = re.search(r"ld\.param\.b64\s+(%rd\d+), \[wait_once_param_3\];", ptx).group(1)
    tag = re.search(r"ld\.param\.b32\s+(%r\d+), \[wait_once_param_4\];", ptx).group(1)
    assert re.search(rf"@%p\d+ atom\.global\.gpu\.relaxed\.add\.u32 %r\d+, \[ {err} \+ 0 \], %r\d+;", after)
    assert re.search(rf"@%p\d+ atom\.global\.gpu\.relaxed\.exch\.b32 %r\d+, \[ %rd\d+ \+ 0 \], {tag};", after)
    assert len(re.findall(r"atom\.global\.gpu\.relaxed\.exch\.b32", after)) == 2


def test_bounded_wait_amdgcn():
    kernel, gcn = _wait_once("hip:gfx942")
    assert kernel.metadata["abi"] == BOUND_ABI
    assert re.search(r"global_atomic_add v\d+, v\d+, s\[\d+:\d+\]\n", gcn)           # wait_err[0] += 1
    assert re.search(r"global_atomic_swap v\d+, v\d+, s\[\d+:\d+\] offset:4\n", gcn)  # wait_err[1] = tag
    assert re.search(r"global_atomic_swap v\d+, v\d+, s\[\d+:\d+\] offset:8\n", gcn)  # wait_err[2] = seen


@pytest.mark.parametrize("target", TARGETS)
def test_notify_set_relaxed_at_gpu_scope(target):
    def body(flags, peer):
        core.Notify.build(flags, peer, c32(7), op="set", scope="gpu", semantic="relaxed")
    with ditron_context():
        module = ir.Module.create()
        make_kernel(module, "notify_gpu", ["!tt.ptr<i32>", "i32"], body)
        (kernel,) = lower_and_compile(module, target)
        del module
    if target.startswith("cuda"):
        assert re.search(r"atom\.global\.gpu\.relaxed\.exch\.b32|atom\.global\.gpu\.exch\.b32", kernel.asm["ptx"])
        assert "release" not in kernel.asm["ptx"]
    else:
        assert "global_atomic_swap" in kernel.asm["amdgcn"]
        assert "buffer_wbl2 sc0 sc1" not in kernel.asm["amdgcn"]


# ---------------------------------------------------------------------------------------------------- the pass

def test_pass_appends_abi_arguments_once():
    with ditron_context():
        module = ir.Module.create()
        func = every_primitive(module)
        LowerCoreToTritonPass(target="hip:gfx942").run(module)
        first = str(module)
        assert core_op_names(module) == []
        assert ir.StringAttr(module.operation.attributes["ditron.target"]).value == "hip:gfx942"
        ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        assert [str(t) for t in ftype.inputs][-6:] == ["i32", "i32", "!tt.ptr<i64>", "i64", "!tt.ptr<i32>", "i32"]
        assert len(func.regions[0].blocks[0].arguments) == 10
        LowerCoreToTritonPass(target="hip:gfx942").run(module)  # nothing left to lower: unchanged
        assert str(module) == first
        del module, func


def test_kernel_ttir_strips_ditron_attributes_and_splits_kernels():
    with ditron_context():
        module = ir.Module.create()
        every_primitive(module, "first")
        every_primitive(module, "second")
        module.operation.attributes["ditron.mesh_note"] = ir.StringAttr.get("dropped")
        with pytest.raises(CompileError, match="still holds ditron_core ops"):
            kernel_ttir(module)
        LowerCoreToTritonPass(target="cuda:90").run(module)
        pieces = kernel_ttir(module)
        del module
    assert [n for n, _ in pieces] == ["first", "second"]
    for name, text in pieces:
        assert "ditron" not in text and f'sym_name = "{name}"' in text and text.count('"tt.func"') == 1


def test_unknown_target_is_a_pass_error():
    with ditron_context():
        module = ir.Module.create()
        with pytest.raises(PassError, match="unsupported target 'cuda:75'; supported targets: cuda:80"):
            LowerCoreToTritonPass(target="cuda:75").run(module)
        del module


def test_all_type_errors_are_reported_together():
    def body(sig, peer):
        core.Wait.build(peer, c32(1))                     # not a pointer
        core.SymmAt.build(peer, peer)                     # not a pointer
    with ditron_context():
        module = ir.Module.create()
        make_kernel(module, "bad", ["!tt.ptr<i32>", "i32"], body)
        with pytest.raises(PassError) as err:
            LowerCoreToTritonPass().run(module)
        del module
    messages = [d.message for d in err.value.diagnostics]
    assert len(messages) == 2
    assert "'ditron_core.wait' expects ptr to be !tt.ptr<i32>" in messages[0]
    assert "'ditron_core.symm_at' expects a pointer" in messages[1]


# --------------------------------------------------------------------------------------------------- --emit

@pytest.mark.parametrize("target,stage,marker", [
    ("cuda:90", "ttir", "tt.func public @every_primitive"), ("cuda:90", "ttgir", "#ttg.blocked"),
    ("cuda:80", "llir", "define ptx_kernel void @every_primitive"), ("cuda:90", "ptx", ".entry every_primitive"),
    ("hip:gfx942", "amdgcn", "every_primitive:")])
def test_emit_stage(target, stage, marker):
    with ditron_context():
        module = ir.Module.create()
        every_primitive(module)
        text = emit_stage(module, stage, target)
        del module
    assert marker in text


def test_emit_stage_errors():
    with ditron_context():
        module = ir.Module.create()
        every_primitive(module)
        with pytest.raises(TargetError, match="--emit=ptx is not a stage of hip:gfx942"):
            emit_stage(module, "ptx", "hip:gfx942")
        with pytest.raises(TargetError, match="no target given"):
            emit_stage(module, "ttir", None)
        with pytest.raises(TargetError, match="--emit=sass: choose mlir or one of"):
            emit_stage(module, "sass", "cuda:90")
        del module


def test_ditron_opt_emit(tmp_path):
    from ditron.tools.ditron_opt import run
    with ditron_context():
        module = ir.Module.create()
        every_primitive(module)
        text = module.operation.get_asm(print_generic_op_form=True)
        del module
    src = tmp_path / "k.mlir"
    src.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    assert run([str(src), "--emit=ptx", "--target=cuda:90"], io.StringIO(), out, err) == 0, err.getvalue()
    assert "ld.acquire.sys.global.b32" in out.getvalue() and "ld.global.v4.b32" in out.getvalue()
    out, err = io.StringIO(), io.StringIO()
    assert run([str(src), "--emit=amdgcn", "--target=cuda:90"], io.StringIO(), out, err) == 1
    assert err.getvalue().startswith("error: --emit=amdgcn is not a stage of cuda:90")


@pytest.mark.parametrize("target", ["cuda:90", "hip:gfx942"])
def test_kernel_record_sets_its_launch_options(target):
    """A template's tile config needs its own num_warps/num_stages (a 128x256 GEMM tile with the module-wide default
    of 4 warps spilled and ran 7x slower on the H200): the ditron.kernel record overrides the module options."""
    from ditron.kernels import get_template
    from ditron.kernels.gemm import make_record
    with ditron_context():
        module = ir.Module.create()
        record = make_record(m=256, n=256, k=128, num_warps=8, num_stages=2, loads="pointer", store="pointer",
                             persistent=False)
        get_template("gemm").build(record, ip=ir.InsertionPoint(module.body))
        (kernel,) = lower_and_compile(module, target, {"num_warps": 4, "num_stages": 3})
        del module
    assert (kernel.metadata["num_warps"], kernel.metadata["num_stages"]) == (8, 2)
