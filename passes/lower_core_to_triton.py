"""ditron-lower-core-to-triton{target=cuda:90}: ditron_core primitives -> stock Triton TTIR, per backend.

Input: core level (tt.func kernels holding ditron_core ops). Output: generic-form TTIR that stock Triton 3.6 compiles.
The vendor-specific pieces (how a slot is read with acquire semantics, how it is updated with release semantics, how
an opaque zero is made) come from the target's backend (backends/<vendor>/primitives.py); this pass builds the
rest the same way for every vendor:

* ``rank``, ``num_ranks`` -> new i32 kernel arguments. ``symm_at``, ``notify``, ``barrier_all`` also need
  ``heap_bases`` (a ``!tt.ptr<i64>`` argument: every rank's symmetric-heap base address, 16-byte aligned).
  ``wait`` and ``barrier_all`` spin, and every spin is bounded: they need ``wait_bound`` (i64: polls before a spin
  gives up), ``wait_err`` (``!tt.ptr<i32>``, 16-byte aligned: the rank's error record) and ``wait_tag`` (i32: names
  the launch in that record); the executor binds all three (ditron.runtime.timeouts). The arguments appended are
  recorded, in order, in the kernel attribute ``ditron.abi = [["rank", "i32"], ["num_ranks", "i32"],
  ["heap_bases", "*i64"], ["wait_bound", "i64"], ["wait_err", "*i32"], ["wait_tag", "i32"]]`` (only those used;
  always in this order; a second run reuses them).
* ``symm_at(ptr, peer)`` -> ``addptr(ptr, (base[peer] - base[rank]) / sizeof(T))``, the element delta carrying a
  ``tt.divisibility`` hint of 16 bytes. Triton's axis analysis then keeps ptr's own alignment (gcd of the two), so
  loads through the peer pointer stay vectorized (``ld.global.v4``). Scalar pointers and tensors of pointers alike.
* ``wait(ptr, value)`` -> ``scf.while`` spinning on the backend's acquire load until min(slots) >= value (signed
  i32) or ``wait_bound`` polls have failed (an i64 counter in a register: no memory access per poll beyond the
  acquire load); the token is the minimum observed. Giving up adds 1 to ``wait_err[0]``, writes ``wait_tag`` to
  ``wait_err[1]`` and the minimum observed to ``wait_err[2]``, and goes on (``ditron.dialects.ttir.bounded_spin``).
* ``consume_token(x, token)`` -> ``x + opaque_zero(token)`` (addptr for pointers, addi for integers). The zero comes
  from inline assembly the compiler cannot fold, so every load through the result has a data dependency on the
  wait's result: Triton's LICM and pipeliner cannot hoist such a load above its wait (a merely ordered, independent
  load could be hoisted out of a tile loop). The zero carries a large divisibility hint, so alignment is kept.
* ``notify(ptr, peer, value) {op}`` -> CTA barrier (every thread's earlier stores are ordered before ...), then
  the backend's release exchange (``op = "set"``) or add at scope on ``symm_at(ptr, peer)``; ``op = "clear"``
  (relaxed) -> CTA barrier (every thread has left its spin on the slot: a wait spins per thread), then the
  backend's compare-and-swap of value -> 0 there.
* ``barrier_all(signals)`` -> a sense-free generation barrier on a pad of num_ranks + 1 i32 slots, zeroed once at
  allocation: slot r of rank p holds the last generation rank r announced to p; slot num_ranks holds this rank's
  own generation counter. Each call: gen = pad[W] + 1; pad[W] = gen; for every peer p: set (release) slot rank of
  p's pad to gen; then spin (acquire, bounded like ``wait``) until every local slot is >= gen. Generations only grow and all ranks call the
  barrier equally often, so the pad never needs resetting. One program (CTA) per rank may use a pad at a time.

Before (cuda:90):

    "tt.func"() ({
    ^bb0(%sig: !tt.ptr<i32>, %x: !tt.ptr<bf16>):
      %r = "ditron_core.rank"() : () -> i32
      %t = "ditron_core.wait"(%sig, %c1) {scope = "sys", semantic = "acquire"} : (!tt.ptr<i32>, i32) -> i32
      %y = "ditron_core.consume_token"(%x, %t) : (!tt.ptr<bf16>, i32) -> !tt.ptr<bf16>
      ...
    }) {function_type = (!tt.ptr<i32>, !tt.ptr<bf16>) -> (), sym_name = "k"} : () -> ()

After:

    "tt.func"() ({
    ^bb0(%sig: !tt.ptr<i32>, %x: !tt.ptr<bf16>, %rank: i32, %bound: i64, %err: !tt.ptr<i32>, %tag: i32):
      %n, %t = "scf.while"(%c0_i64) ({
      ^bb0(%polls: i64):
        %v = "tt.elementwise_inline_asm"(%sig) {asm_string = "ld.acquire.sys.global.b32 $0, [$1];", ...}
        %low = "arith.cmpi"(%v, %c1) <{predicate = 2 : i64}> : (i32, i32) -> i1
        %left = "arith.cmpi"(%polls, %bound) <{predicate = 2 : i64}> : (i64, i64) -> i1
        %again = "arith.andi"(%low, %left) : (i1, i1) -> i1
        "scf.condition"(%again, %polls, %v) : (i1, i64, i32) -> ()
      }, { ^bb0(%p: i64, %_: i32): ... "scf.yield"(%p + 1) ... }) : (i64) -> (i64, i32)
      "scf.if"(%t < %c1) ({ atomic add 1 to %err[0]; exchange %tag into %err[1], %t into %err[2] ... })
      %z = "tt.elementwise_inline_asm"(%t) {asm_string = "mov.b32 $0, 0;", tt.divisibility = dense<1073741824> ...}
      %y = "tt.addptr"(%x, %z) : (!tt.ptr<bf16>, i32) -> !tt.ptr<bf16>
    }) {ditron.abi = [["rank", "i32"], ["wait_bound", "i64"], ["wait_err", "*i32"], ["wait_tag", "i32"]], ...}
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from mlir import ir
from mlir.dialects import arith

from ..backends import Backend, Target, get_backend
from ..backends.ops import MLIR_OPS
from ..dialects import core, ttir
from ..dialects.context import diagnostic_at
from ..dialects.opbase import walk_ops
from ..errors import PassError, TargetError
from .registry import Pass, option
from .rewrite import replace_op

TT_FUNC = "tt.func"
ABI_ATTR = "ditron.abi"
TARGET_ATTR = "ditron.target"
DEFAULT_TARGET = "cuda:90"
ABI_ORDER = ("rank", "num_ranks", "heap_bases", "wait_bound", "wait_err", "wait_tag")
HEAP_BASE_ALIGN = 16          # bytes; the runtime guarantees every rank's heap base is this aligned
WAIT_ERR_ALIGN = 16           # bytes; the executor's error records are rows of 4 i32
OPAQUE_ZERO_DIVISIBILITY = 1 << 30

# which appended arguments each primitive needs
BOUND = ("wait_bound", "wait_err", "wait_tag")   # every spin is bounded
NEEDS: dict[str, tuple[str, ...]] = {
    core.Rank.op_name(): ("rank",),
    core.NumRanks.op_name(): ("num_ranks",),
    core.SymmAt.op_name(): ("rank", "heap_bases"),
    core.Notify.op_name(): ("rank", "heap_bases"),
    core.BarrierAll.op_name(): ("rank", "num_ranks", "heap_bases", *BOUND),
    core.Wait.op_name(): BOUND,
    core.ConsumeToken.op_name(): (),
}
ABI_TYPES = {"rank": "i32", "num_ranks": "i32", "heap_bases": "!tt.ptr<i64>", "wait_bound": "i64",
             "wait_err": "!tt.ptr<i32>", "wait_tag": "i32"}
ABI_DIVISIBILITY = {"heap_bases": HEAP_BASE_ALIGN, "wait_err": WAIT_ERR_ALIGN}  # tt.divisibility of pointer args


def _is_core(op: ir.Operation) -> bool:
    return op.name.startswith(core.CoreOp.DIALECT + ".")


def _enclosing_func(op: ir.Operation) -> ir.Operation | None:
    parent = op.parent
    while parent is not None:
        parent = parent.operation
        if parent.name == TT_FUNC:
            return parent
        parent = parent.parent
    return None


# ------------------------------------------------------------------------------------------------- checking

def _ptr_i32_like(t: ir.Type) -> bool:
    return ttir.is_ptr_like(t) and str(ttir.pointee(ttir.elem(t))) == "i32"


def _check(op: ir.Operation) -> str | None:
    """Why op's operands cannot be lowered, or None."""
    name = op.name
    if name == core.SymmAt.op_name():
        t = op.operands[0].type
        if not ttir.is_ptr_like(t):
            return f"'{name}' expects a pointer (!tt.ptr<T>) or a tensor of pointers, got {t}"
        if ttir.pointee_bytes(t) is None:
            return f"'{name}': cannot translate pointers to {ttir.pointee(ttir.elem(t))} (element size unknown)"
    elif name == core.Wait.op_name() and not _ptr_i32_like(op.operands[0].type):
        return f"'{name}' expects ptr to be !tt.ptr<i32> or a tensor of them, got {op.operands[0].type}"
    elif name == core.Notify.op_name() and not _ptr_i32_like(op.operands[0].type):
        return f"'{name}' expects ptr to be !tt.ptr<i32> or a tensor of them, got {op.operands[0].type}"
    elif name == core.BarrierAll.op_name() and str(op.operands[0].type) != "!tt.ptr<i32>":
        return (f"'{name}' expects signals to be a scalar !tt.ptr<i32> (a pad of num_ranks + 1 slots), "
                f"got {op.operands[0].type}")
    elif name == core.ConsumeToken.op_name():
        t = op.operands[0].type
        if not (ttir.is_ptr_like(t) or ttir.is_int_like(t)):
            return f"'{name}' expects a pointer, an integer, or a tensor of them, got {t}"
    return None


# ------------------------------------------------------------------------------------------------- lowering

class _KernelLowering:
    """Lowers the core ops of one tt.func for one backend: the backend's ``lower_primitive`` calls back into the
    rule here for the op, handing it the backend's primitives module (``prims``), whose hooks build through ``MLIR_OPS``
    (backends/ops.py)."""

    def __init__(self, func: ir.Operation, backend: Backend):
        self.func, self.backend = func, backend
        self.prims: ModuleType | None = None
        self.entry = func.regions[0].blocks[0]
        self.args: dict[str, ir.Value] = {}
        self._my_base: ir.Value | None = None

    # -- the kernel's extra arguments
    def _existing_abi(self) -> list[str]:
        if ABI_ATTR not in self.func.attributes:
            return []
        return [ir.StringAttr(entry[0]).value for entry in ir.ArrayAttr(self.func.attributes[ABI_ATTR])]

    def add_arguments(self, needed: set[str]) -> None:
        existing = self._existing_abi()
        block_args = list(self.entry.arguments)
        first = len(block_args) - len(existing)
        for i, name in enumerate(existing):
            self.args[name] = block_args[first + i]
        new = [n for n in ABI_ORDER if n in needed and n not in self.args]
        if not new:
            return
        if "function_type" not in self.func.attributes:
            message = "'tt.func' has no function_type attribute: cannot append the kernel arguments primitives need"
            raise PassError(message, [diagnostic_at(self.func.location, message)])
        ftype = ir.FunctionType(ir.TypeAttr(self.func.attributes["function_type"]).value)
        arg_attrs = (list(ir.ArrayAttr(self.func.attributes["arg_attrs"])) if "arg_attrs" in self.func.attributes
                     else [ir.DictAttr.get({}) for _ in ftype.inputs])
        inputs = list(ftype.inputs)
        for name in new:
            t = ir.Type.parse(ABI_TYPES[name])
            self.args[name] = self.entry.add_argument(t, self.func.location)
            inputs.append(t)
            attrs = ({"tt.divisibility": ir.IntegerAttr.get(ttir.i32(), ABI_DIVISIBILITY[name])}
                     if name in ABI_DIVISIBILITY else {})
            arg_attrs.append(ir.DictAttr.get(attrs))
        self.func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, list(ftype.results)))
        self.func.attributes["arg_attrs"] = ir.ArrayAttr.get(arg_attrs)
        abi = existing + new
        self.func.attributes[ABI_ATTR] = ir.ArrayAttr.get([
            ir.ArrayAttr.get([ir.StringAttr.get(n), ir.StringAttr.get(ttir.triton_type_name(self.args[n].type))])
            for n in abi])

    # -- shared pieces
    def my_base(self) -> ir.Value:
        """heap_bases[rank], loaded once at the top of the kernel."""
        if self._my_base is None:
            with self.func.location, ir.InsertionPoint.at_block_begin(self.entry):
                self._my_base = ttir.load(ttir.addptr(self.args["heap_bases"], self.args["rank"]))
        return self._my_base

    def peer_pointer(self, ptr: ir.Value, peer: ir.Value) -> ir.Value:
        """ptr translated to rank peer's copy of the symmetric heap."""
        peer_base = ttir.load(ttir.addptr(self.args["heap_bases"], peer))
        delta = arith.SubIOp(peer_base, self.my_base()).result
        size = ttir.pointee_bytes(ptr.type)
        if size > 1:
            delta = arith.DivSIOp(delta, ttir.c(size, ttir.i64())).result
        ttir.hint(delta, "divisibility", max(1, HEAP_BASE_ALIGN // size))
        return ttir.addptr(ptr, ttir.broadcast(delta, ttir.shape(ptr)))

    def spin_until(self, ptr: ir.Value, value: ir.Value, scope: str, semantic: str) -> ir.Value:
        """Spin until min(*ptr) >= value, bounded by the kernel's wait_bound (a give-up is recorded in wait_err);
        the minimum observed (i32)."""
        def poll() -> ir.Value:
            return ttir.reduce_min(self.prims.acquire_load(MLIR_OPS, ptr, scope=scope, semantic=semantic))

        return ttir.bounded_spin(poll,
                                 value, bound=self.args["wait_bound"], err=self.args["wait_err"],
                                 tag=self.args["wait_tag"], pause=lambda x: self.prims.pause(MLIR_OPS, x))

    def for_each_rank(self, body: Callable[[ir.Value], None]) -> None:
        with ttir.For(0, self.args["num_ranks"], 1) as loop:
            body(loop.iv)

    # -- one rule per primitive; each returns the values replacing the op's results
    def rule(self, op_name: str) -> Callable[[ir.Operation, ModuleType], list[ir.Value]]:
        method = getattr(self, op_name.split(".", 1)[1])

        def apply(op: ir.Operation, prims: ModuleType) -> list[ir.Value]:
            self.prims = prims
            return method(op)
        return apply

    def rank(self, op):
        return [self.args["rank"]]

    def num_ranks(self, op):
        return [self.args["num_ranks"]]

    def symm_at(self, op):
        s = core.SymmAt(op)
        return [self.peer_pointer(s.ptr, s.peer)]

    def wait(self, op):
        w = core.Wait(op)
        return [self.spin_until(w.ptr, w.value, w.scope, w.semantic)]

    def consume_token(self, op):
        c = core.ConsumeToken(op)
        zero = ttir.hint(self.prims.opaque_zero(MLIR_OPS, c.token), "divisibility", OPAQUE_ZERO_DIVISIBILITY)
        x = c.value
        if ttir.is_ptr_like(x.type):
            return [ttir.addptr(x, ttir.broadcast(zero, ttir.shape(x)))]
        zero = ttir.int_cast(zero, ttir.elem(x))
        return [arith.AddIOp(x, ttir.broadcast(zero, ttir.shape(x))).result]

    def notify(self, op):
        n = core.Notify(op)
        # set / add: every thread's earlier writes happen before the (one-thread) release below; clear: every thread
        # has seen the value it waited for (each spins on its own; cleared early, a slot would strand the others)
        ttir.barrier()
        if n.kind == "clear":
            self.prims.clear_slot(MLIR_OPS, self.peer_pointer(n.ptr, n.peer), n.value, scope=n.scope)
            return []
        target = self.peer_pointer(n.ptr, n.peer)
        self.prims.release_rmw(MLIR_OPS, target, n.value, op=n.kind, scope=n.scope, semantic=n.semantic)
        return []

    def barrier_all(self, op):
        b = core.BarrierAll(op)
        pad, rank, scope = b.signals, self.args["rank"], b.scope
        ttir.barrier()
        gen_slot = ttir.addptr(pad, self.args["num_ranks"])
        gen = arith.AddIOp(ttir.load(gen_slot, volatile=True), ttir.c(1)).result
        ttir.barrier()  # every thread has read the old generation before it is overwritten
        ttir.store(gen_slot, gen)
        my_slot = ttir.addptr(pad, rank)
        self.for_each_rank(lambda peer: self.prims.release_rmw(MLIR_OPS, self.peer_pointer(my_slot, peer), gen,
                                                                op="set", scope=scope, semantic="release"))

        def wait_for(peer: ir.Value) -> None:
            self.spin_until(ttir.addptr(pad, peer), gen, scope, "acquire")

        self.for_each_rank(wait_for)
        ttir.barrier()
        return []

    def run(self, ops: list[ir.Operation]) -> None:
        needed = {a for op in ops for a in NEEDS[op.name]}
        self.add_arguments(needed)
        for op in ops:
            with op.location, ir.InsertionPoint(op):
                values = self.backend.lower_primitive(op, self)
            replace_op(op, values)


def module_target(module: ir.Module) -> tuple[str | None, str | None]:
    """(the module's own ``ditron.target``, the target the module is for): its own, else the one
    ditron-lower-task-to-device stamped on its device functions when they agree; None where there is none."""
    found = [[ir.StringAttr(op.attributes[TARGET_ATTR]).value for op in ops
              if TARGET_ATTR in op.attributes and isinstance(op.attributes[TARGET_ATTR], ir.StringAttr)]
             for ops in ([module.operation], list(module.body.operations))]
    own = found[0][0] if found[0] else None
    return own, own or (found[1][0] if len(set(found[1])) == 1 else None)


@dataclass(frozen=True)
class LowerCoreToTritonPass(Pass):
    name = "ditron-lower-core-to-triton"
    summary = "Lower ditron_core primitives (rank, symm_at, wait, notify, barrier_all, ...) to stock Triton TTIR"

    target: str = option("", "backend whose primitive lowering to use: cuda:80, cuda:90, hip:gfx942, hip:gfx950 "
                             "(default: the module's ditron.target, else the one ditron-lower-task-to-device stamped "
                             "on the device function, else cuda:90)")

    def _target(self, module: ir.Module) -> Target:
        """The option's target, which must agree with the module's ``ditron.target`` (the user's: ditron-opt
        --target, ditron.compile) -- a module for AMD lowered for NVIDIA made Triton's AMD backend abort; without
        the option, the module's, else the one ditron-tile tiled for (stamped on the device function)."""
        own, stamped = module_target(module)
        try:
            if not self.target:
                return Target.parse(stamped or DEFAULT_TARGET)
            target = Target.parse(self.target)
            if own is not None and Target.parse(own) != target:
                raise PassError(f"pass '{self.name}': target={self.target}, but the module is for '{own}' "
                                f"({TARGET_ATTR}); lower for '{own}', or change the module's target first")
            return target
        except TargetError as err:
            raise PassError(f"pass '{self.name}': {err}") from None

    def run(self, module: ir.Module) -> None:
        target = self._target(module)
        backend = get_backend(target)
        work: list[tuple[ir.Operation, list[ir.Operation]]] = []  # (kernel, its core ops in order)
        diags = []
        for op in walk_ops(module.operation):
            if not _is_core(op):
                continue
            func = _enclosing_func(op)
            if func is None:
                diags.append(diagnostic_at(op.location, f"'{op.name}' is not inside a tt.func kernel: {self.name} "
                                                        "lowers primitives only in core-level kernels"))
                continue
            if op.name not in NEEDS:
                diags.append(diagnostic_at(op.location, f"'{op.name}': {self.name} has no lowering for it"))
                continue
            problem = _check(op)
            if problem is not None:
                diags.append(diagnostic_at(op.location, problem))
            for kernel, ops in work:
                if kernel == func:
                    ops.append(op)
                    break
            else:
                work.append((func, [op]))
        if diags:
            raise PassError(f"{self.name} failed", diags)
        for func, ops in work:
            _KernelLowering(func, backend).run(ops)
        module.operation.attributes[TARGET_ATTR] = ir.StringAttr.get(str(target))
