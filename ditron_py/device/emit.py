"""ditron.device's emission: a Program as ditron_device IR (``_Emitter``, with the lowering's DeviceBuilder), and
what is made of that IR: the verified module, its text, the compiled artifact, the executor, the simulation; the
@ditron.jit kernels such a module declares, compiled from their Python functions."""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .kernel import JIT_KERNELS, JitKernel
from .values import AXIS, DTYPES, Buffer, Index, Pad, _error, _Op

if TYPE_CHECKING:
    from .program import Program


class _Emission:
    """Program's IR and what is made of it (a mixin of Program)."""

    def build(self, ctx: Any = None) -> Any:
        """The program as an ir.Module in ``ctx`` (default: the current context), which must have the ditron
        dialects (``ditron.dialects.ditron_context()``), verified."""
        from ..dialects.verify import verify
        if ctx is not None:
            from mlir import ir
            with ctx, ir.Location.unknown(ctx):
                module = _Emitter(self).module()
        else:
            module = _Emitter(self).module()
        verify(module)
        return module

    def to_mlir(self, pipeline: str = "", *, debuginfo: bool = True) -> str:
        """The module as MLIR text (after ``pipeline``, e.g. "ditron-lower-device-to-core"), with the Python
        locations of every op unless ``debuginfo=False``."""
        import gc
        from ..dialects import ditron_context
        from ..passes.registry import parse_pipeline, run_passes
        with ditron_context():
            module = self.build()
            try:
                if pipeline:
                    run_passes(module, parse_pipeline(pipeline))
                return module.operation.get_asm(enable_debug_info=debuginfo)
            finally:
                del module
                gc.collect()

    def compile(self, target: str | None = None, **options: Any) -> Any:
        """``ditron.compile(self, target, **options)``: its kernels and host program as an artifact (``out_dir=``
        to keep it, e.g. for a GPU box without the compiler: ``ditron.load(dir)`` runs it); the Executable."""
        from ..api import compile as ditron_compile
        return ditron_compile(self, target or self.target, **options)

    def executable(self, target: str | None = None, **options: Any) -> Any:
        """The Executable of ``compile(target, **options)``, compiled once per program and options."""
        key = (target or self.target, tuple(sorted(options.items())))
        exe = self._executables.get(key)
        if exe is None:
            exe = self._executables[key] = self.compile(*key[:1], **options)
        return exe

    def executor(self, world: Any, *, graph: bool = False, target: str | None = None, **options: Any) -> Any:
        """The runtime executor of the program in ``world`` (a ditron.World of ``world_size`` ranks), compiled for
        ``target`` (default: this GPU's); ``options`` go to the executor (``timeout_s``, ``wait_via``, ...)."""
        if getattr(world, "world_size", None) != self.world_size:
            raise _error(f"program '{self.name}' is built for {self.world_size} rank(s); the world has "
                         f"{getattr(world, 'world_size', '?')}")
        if target is None:
            from ..runtime.loader import device_target_name
            target = device_target_name()
        return self.executable(target).executor(world, graph=graph, **options)

    def run(self, world: Any, inputs: Sequence[Any], outputs: Sequence[Any] | None = None, *, sync: bool = True,
            graph: bool = False, target: str | None = None) -> Any:
        """Run the program in ``world``: inputs per rank in a virtual world (``[[x0, w0], [x1, w1], ...]``), this
        rank's in a real one; the outputs in the same shape. ``graph``: replay a CUDA graph per set of tensors."""
        return self.executor(world, graph=graph, target=target).run(inputs, outputs, sync=sync)

    def simulate(self, inputs: Any = None, *, reference: Callable | None = None, **options: Any) -> Any:
        """Run the program on the CPU for its ``world_size`` ranks (``ditron.sim.simulate``: deadlocks, races,
        unwritten outputs, mismatches against ``reference(per_rank_inputs) -> per_rank_outputs``)."""
        import gc
        from ..dialects import ditron_context
        from ..sim import simulate
        jit = self._jit_launches()
        if jit:
            raise _error(f"program '{self.name}' launches @ditron.jit kernel(s) ({', '.join(k.name for k in jit)}), "
                         "which the device-level simulator cannot run yet (it runs template kernels tile by tile): "
                         "check the kernel alone with ditron.language.simulate", jit[0].where)
        with ditron_context():
            module = self.build()
            try:
                return simulate(module, self.world_size, inputs, reference=reference, **options)
            finally:
                del module
                gc.collect()



class _Emitter:
    """Builds the device function of a Program with the lowering's DeviceBuilder (passes/device_builder.py)."""

    def __init__(self, program: Program):
        self.p = program

    def module(self) -> Any:
        from mlir import ir
        from mlir.dialects import func
        from ..dialects import device
        from ..dialects.sharding import Mesh
        from ..passes.device_builder import DeviceBuilder, KernelTable
        from .. import schema

        p = self.p
        loc = self.loc(p.where)
        module = ir.Module.create(loc=loc)
        module.operation.attributes[schema.MESH_ATTR] = Mesh((AXIS,), (p.world_size,)).to_attr()
        module.operation.attributes[schema.TARGET_ATTR] = ir.StringAttr.get(p.target)
        args = p.inputs + p.outputs
        types = [self.memref(b) for b in args] + [ir.IndexType.get()]
        fn = func.FuncOp(p.name, ir.FunctionType.get(types, []), ip=ir.InsertionPoint(module.body), loc=loc)
        fn = fn.operation
        fn.attributes[schema.LEVEL_ATTR] = ir.StringAttr.get("device")
        fn.attributes[schema.AXIS_ATTR] = ir.StringAttr.get(AXIS)
        fn.attributes[schema.TARGET_ATTR] = ir.StringAttr.get(p.target)
        io = [b.kind for b in args] + ["epoch"]
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get(
            [ir.DictAttr.get({schema.IO_ATTR: ir.StringAttr.get(r)}) for r in io])
        limit = _epoch_limit(p)
        if limit is not None:
            fn.attributes[schema.EPOCH_LIMIT_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), limit)
        entry = fn.regions[0].blocks.append(*types, arg_locs=[loc] * len(types))
        self.b = DeviceBuilder(fn, entry.arguments[len(args)], loc)
        self.kernels = KernelTable(module)
        self.values: dict[int, Any] = {}
        for b, a in zip(args, entry.arguments):
            self.values[id(b)] = a
        for b in p.buffers:
            with self.b.located(self.loc(b.where)):
                if isinstance(b, Pad):
                    v = self.b.pad(b.slots, b.name, consumed=b.consumed)
                else:
                    v = self.b.alloc(list(b.shape), self.elem(b.dtype), b.name)
                    if b.rotate:
                        self.b.rotate(v)
            if device.AllocSymmetric(v.owner).name != b.name:
                raise _error(f"buffer '{b.name}' clashes with a name ditron reserves", b.where)
            self.values[id(b)] = v
        self.vars: dict[int, Any] = {}
        self.ops(p._ops)
        with loc:
            func.ReturnOp([], ip=ir.InsertionPoint(entry))
        return module

    # ---- types and locations

    @staticmethod
    def loc(where) -> Any:
        from mlir import ir
        return ir.Location.file(where[0], where[1], where[2])

    @staticmethod
    def elem(dtype: str) -> Any:
        from mlir import ir
        return ir.Type.parse(DTYPES[dtype][0])

    def memref(self, b: Buffer) -> Any:
        from mlir import ir
        return ir.MemRefType.get(list(b.shape), self.elem(b.dtype))

    # ---- index values

    def index(self, x: Index) -> Any:
        from mlir.dialects import arith
        b = self.b
        if x.kind == "const":
            return b.c(x.args[0])
        if x.kind == "rank":
            return b.rank
        if x.kind == "num_ranks":
            return b.num_ranks
        if x.kind == "epoch":
            return b.epoch
        if x.kind == "loop":
            return self.vars[x.args[0]]
        lhs, rhs = (self.index(a) for a in x.args)
        if x.kind == "add":
            return b.add(lhs, rhs)
        if x.kind == "sub":
            return b.sub(lhs, rhs)
        if x.kind == "mul":
            return b.mul(lhs, rhs)
        if x.kind == "min":
            return b.min(lhs, rhs)
        if x.kind == "max":
            return b.max(lhs, rhs)
        fn = {"div": arith.floordivsi, "rem": arith.remsi}.get(x.kind)
        with b.loc, b.ip:
            if fn is not None:
                return fn(lhs, rhs)
            pred = {"lt": arith.CmpIPredicate.slt, "le": arith.CmpIPredicate.sle, "gt": arith.CmpIPredicate.sgt,
                    "ge": arith.CmpIPredicate.sge, "eq": arith.CmpIPredicate.eq,
                    "ne": arith.CmpIPredicate.ne}[x.kind]
            return arith.cmpi(pred, lhs, rhs)

    def cond(self, x: Index) -> Any:
        from mlir import ir
        from mlir.dialects import arith
        if x.kind == "const":
            with self.b.loc, self.b.ip:
                return arith.constant(ir.IntegerType.get_signless(1), int(bool(x.args[0])))
        return self.index(x)

    # ---- ops

    def ops(self, ops: list[_Op]) -> None:
        for op in ops:
            with self.b.located(self.loc(op.where)):
                getattr(self, "op_" + op.kind)(op.fields, op)

    def stream(self, emitted: Any, stream: int) -> None:
        from mlir import ir
        target = emitted.op if hasattr(emitted, "op") else emitted
        target = getattr(target, "operation", target)
        target.attributes["stream"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), stream)

    @staticmethod
    def lane(stream: int) -> str:
        return "compute" if stream == 0 else "comm"

    def op_loop(self, f, op: _Op) -> None:
        with self.b.loop(self.index(f["lo"]), self.index(f["hi"]), self.index(f["step"])) as iv:
            self.vars[f["var"].args[0]] = iv
            self.ops(op.body)

    def op_if(self, f, op: _Op) -> None:
        with self.b.if_(self.cond(f["cond"])):
            self.ops(op.body)

    def op_copy(self, f, op: _Op) -> None:
        c = self.b.copy(self.values[id(f["src"])], self.values[id(f["dst"])], src_rank=self.index(f["src_rank"]),
                        dst_rank=self.index(f["dst_rank"]), src_offsets=[self.index(o) for o in f["src_offsets"]],
                        dst_offsets=[self.index(o) for o in f["dst_offsets"]],
                        sizes=[self.index(s) for s in f["sizes"]], engine=f["engine"], lane=self.lane(f["stream"]))
        self.stream(c, f["stream"])

    def op_signal(self, f, op: _Op) -> None:
        s = self.b.signal(self.values[id(f["pad"])], target=self.index(f["rank"]), slot=self.index(f["slot"]),
                          value=self.index(f["value"]), op=f["op"], scope=f["scope"], lane=self.lane(f["stream"]))
        self.stream(s, f["stream"])

    def op_wait(self, f, op: _Op) -> None:
        w = self.b.wait(self.values[id(f["pad"])], [self.index(s) for s in f["slots"]],
                        value=self.index(f["value"]), lane=self.lane(f["stream"]))
        self.stream(w, f["stream"])

    def op_barrier(self, f, op: _Op) -> None:
        self.stream(self.b.barrier(self.values[id(f["pad"])]), f["stream"])

    def op_launch(self, f, op: _Op) -> None:
        from mlir import ir
        args = [self.values[id(a)] if isinstance(a, Buffer) else self.index(a) for a in f["args"]]
        if "jit" in f:
            ln = self.b.launch(self.declare_jit(f["jit"], [a.type for a in args]), args, grid=f["grid"],
                               sm_budget=f["sm_budget"], tile_order="row_major", lane=self.lane(f["stream"]))
            self.stream(ln, f["stream"])
            return
        if f["scratch"]:  # a split-K / stream-K GEMM's workspace and locks: the kernel's own, zero at allocation
            (ws_shape, _), ((locks,), _) = f["scratch"]["workspace"], f["scratch"]["locks"]
            args += [self.b.alloc(ws_shape, ir.F32Type.get(), "gemm_workspace"), self.b.pad(locks, "gemm_locks")]
        rec = f["record"]
        name = self.kernels.declare(rec, [a.type for a in args], self.b.loc)
        ln = self.b.launch(name, args, grid=f["grid"], sm_budget=f["sm_budget"], tile_order=f["tile_order"],
                           lane=self.lane(f["stream"]))
        self.stream(ln, f["stream"])


    def declare_jit(self, k: JitKernel, types: list) -> str:
        """The private declaration standing for a @ditron.jit kernel (schema.JIT_ATTR: its key in JIT_KERNELS and
        its parameters); ditron.compile compiles the kernel from its Python function under the same name."""
        from mlir import ir
        from mlir.dialects import func
        from .. import schema
        k = dataclasses.replace(k, divisible=jit_divisible(self.p, k))
        key = k.key(self.p.target)
        JIT_KERNELS[key] = k
        for op in self.kernels.module.body.operations:
            op = op.operation
            if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == k.name:
                if schema.JIT_ATTR not in op.attributes:
                    raise _error(f"kernel '{k.name}' clashes with another symbol of the program", k.where)
                return k.name
        with self.loc(k.where):
            decl = func.FuncOp(k.name, ir.FunctionType.get(types, []), visibility="private",
                               ip=ir.InsertionPoint(self.kernels.module.body))
        fields = {"key": ir.StringAttr.get(key), "params": ir.ArrayAttr.get([ir.StringAttr.get(n) for n in k.params])}
        if k.wait:
            fields["wait"] = ir.DictAttr.get({n: ir.StringAttr.get(v) for n, v in k.wait.items()})
        decl.attributes[schema.JIT_ATTR] = ir.DictAttr.get(fields)
        self.kernels.names.add(k.name)
        return k.name


def jit_divisible(p: Program, k: JitKernel) -> frozenset:
    """The parameters of @ditron.jit kernel ``k`` compiled as tt.divisibility = 16 (stock Triton's specialization,
    docs/language.md §3), from every launch of a kernel of that name in ``p``: a buffer parameter (symmetric
    buffers are heap-aligned; the program's own inputs and outputs are checked by the executor before each
    launch, an error for a misaligned tensor), an index parameter whose value is a constant multiple of 16 at
    every launch; never one the kernel lists in do_not_specialize(_on_alignment)."""
    from ..language.specialize import DIVISIBILITY
    skip = set(getattr(k.fn, "do_not_specialize", ())) | set(getattr(k.fn, "do_not_specialize_on_alignment", ()))
    out = None

    def visit(ops):
        nonlocal out
        for op in ops:
            if op.kind == "launch" and "jit" in op.fields and op.fields["jit"].name == k.name:
                mine = set()
                for name, a in zip(k.params, op.fields["args"]):
                    if name in skip:
                        continue
                    if isinstance(a, Buffer):
                        mine.add(name)
                    elif getattr(a, "kind", None) == "const" and a.args[0] % DIVISIBILITY == 0:
                        mine.add(name)
                out = mine if out is None else out & mine
            visit(op.body)
    visit(p._ops)
    return frozenset(out or ())


def jit_declarations(module: Any) -> dict[str, tuple[str, list[str]]]:
    """The @ditron.jit kernels a module's device program launches: name -> (key, parameter names)."""
    from mlir import ir
    from .. import schema
    out = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and schema.JIT_ATTR in op.attributes:
            d = ir.DictAttr(op.attributes[schema.JIT_ATTR])
            out[ir.StringAttr(op.attributes["sym_name"]).value] = (
                ir.StringAttr(d["key"]).value, [ir.StringAttr(a).value for a in ir.ArrayAttr(d["params"])])
    return out


def compile_jit_kernels(declared: dict[str, tuple[str, list[str]]], target: Any) -> list[tuple[Any, list[str]]]:
    """The compiled kernels (ditron.backends.CompiledKernel) of declared @ditron.jit kernels, with their parameter
    names; a CompileError for one whose Python function this process does not hold."""
    from ..errors import CompileError
    out = []
    for name, (key, params) in declared.items():
        k = JIT_KERNELS.get(key)
        if k is None:
            raise CompileError(f"the program launches @{name}, a @ditron.jit kernel whose Python function is not in "
                               "this process (the IR names it only): compile the ditron.device Program itself "
                               "(ditron.compile(program) or program.compile())")
        compiled = k.compile(str(target))
        if compiled.name != name:
            raise CompileError(f"@ditron.jit kernel '{name}' compiled as '{compiled.name}'")
        out.append((compiled, params))
    return out


def _epoch_limit(p: Program) -> int | None:
    """The last epoch for which every slot value fits i32 (docs/device_ir.md, ``ditron.epoch_limit``), where the
    most a slot grows per call is known while building: signals that set the epoch (or a constant multiple of it),
    adds of constants in loops of constant trip counts, barriers (W per call). None where it is not known."""
    growth = {}

    def trips(loop) -> int | None:
        lo, hi, st = (loop.fields[k].constant for k in ("lo", "hi", "step"))
        if lo is None or hi is None or st is None:
            return None
        return max(0, math.ceil((hi - lo) / st))

    def visit(ops, mult) -> bool:
        for op in ops:
            if op.kind == "loop":
                n = trips(op)
                if n is None or not visit(op.body, mult * n):
                    return False
            elif op.kind == "if":
                if not visit(op.body, mult):
                    return False
            elif op.kind == "signal":
                v = op.fields["value"]
                name = op.fields["pad"].name
                if op.fields["op"] == "set":
                    per = 1 if v.kind == "epoch" else (v.args[1].constant if v.kind == "mul" and
                                                       v.args[0].kind == "epoch" else None)
                    per = per if per is not None else (0 if v.kind == "const" else None)
                    if per is None:
                        return False
                    growth[name] = max(growth.get(name, 0), per)
                else:
                    if v.constant is None:
                        return False
                    growth[name] = growth.get(name, 0) + abs(v.constant) * mult
            elif op.kind == "barrier":
                name = op.fields["pad"].name
                growth[name] = growth.get(name, 0) + p.world_size * mult
        return True

    if not visit(p._ops, 1):
        return None
    step = max(growth.values(), default=1) or 1
    return (2 ** 31 - 1) // step
