"""From a core-level module to machine code: lower the ditron_core primitives for a target, split the module into
one module per kernel, hand each to the backend's stage driver.

    lower_and_compile(module, "cuda:90", options) -> [CompiledKernel, ...]   (one per tt.func kernel)
    emit_stage(module, "ptx", "cuda:90")          -> text                    (ditron-opt --emit=ptx --target=cuda:90)
    kernel_ttir(module) -> [(name, generic TTIR text), ...]                  (what Triton is given)

The module is lowered in place when it still holds ditron_core ops. This module imports the MLIR bindings; loading
and launching compiled kernels does not (see ditron.runtime.loader).
"""
from __future__ import annotations

import dataclasses

from typing import Any

from mlir import ir

from .backends import BackendOptions, CompiledKernel, Target, get_backend
from .dialects import core
from .dialects.opbase import walk_ops
from .errors import CompileError, TargetError
from .schema import ABI_ATTR, KERNEL_ATTR, TARGET_ATTR

TT_FUNC = "tt.func"
EMIT_STAGES = ("ttir", "ttgir", "llir", "ptx", "amdgcn")


def has_core_ops(module: ir.Module) -> bool:
    prefix = core.CoreOp.DIALECT + "."
    return any(op.name.startswith(prefix) for op in walk_ops(module.operation))


def lower_core(module: ir.Module, target: "Target | str") -> None:
    """Run ditron-lower-core-to-triton{target} on module if it still holds ditron_core ops."""
    if has_core_ops(module):
        from .passes.lower_core_to_triton import LowerCoreToTritonPass
        LowerCoreToTritonPass(target=str(Target.parse(target))).run(module)


def _sym_name(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def _is_kernel(op: ir.Operation) -> bool:
    if op.name != TT_FUNC:
        return False
    vis = op.attributes["sym_visibility"] if "sym_visibility" in op.attributes else None
    return vis is None or ir.StringAttr(vis).value == "public"


def kernels(module: ir.Module) -> list[ir.Operation]:
    """The kernels (public tt.func ops) at the top of module, in order."""
    return [op.operation for op in module.body.operations if _is_kernel(op.operation)]


def _strip_ditron_attrs(op: ir.Operation) -> None:
    """Triton's parser does not know ditron's attributes: drop them (ditron.abi is read before)."""
    for name in [n for n in op.attributes.keys() if n.startswith("ditron.")]:
        del op.attributes[name]


def kernel_ttir(module: ir.Module) -> list[tuple[str, str]]:
    """(kernel name, generic-form TTIR module text) per kernel: the kernel plus every non-kernel function of the
    module (helpers it may call; Triton's symbol DCE drops unused ones). The module must hold no ditron_core op."""
    if has_core_ops(module):
        raise CompileError("the module still holds ditron_core ops: run ditron-lower-core-to-triton first")
    helpers = [op.operation for op in module.body.operations
               if op.operation.name == TT_FUNC and not _is_kernel(op.operation)]
    out = []
    for kernel in kernels(module):
        with module.context, kernel.location:
            piece = ir.Module.create()
            for name, attr in module.operation.attributes.items():
                if not name.startswith("ditron.") and name != "sym_name":
                    piece.operation.attributes[name] = attr
            for func in [kernel, *helpers]:
                clone = func.clone(ip=ir.InsertionPoint(piece.body))
                _strip_ditron_attrs(clone)
            text = piece.operation.get_asm(print_generic_op_form=True, enable_debug_info=True)
        out.append((_sym_name(kernel), text))
    return out


def abi_of(kernel: ir.Operation) -> list[list[str]]:
    """The arguments ditron-lower-core-to-triton appended to kernel: [[name, type], ...] (e.g. ['rank', 'i32'])."""
    if ABI_ATTR not in kernel.attributes:
        return []
    return [[ir.StringAttr(e).value for e in entry] for entry in ir.ArrayAttr(kernel.attributes[ABI_ATTR])]


def _target_of(module: ir.Module, target: "Target | str | None") -> Target:
    if target is None:
        # the module's target, else the one the pipeline tiled for (stamped on the device function by
        # ditron-lower-task-to-device)
        from .passes.lower_core_to_triton import module_target
        stamped = module_target(module)[1]
        if stamped is not None:
            return Target.parse(stamped)
        raise TargetError("no target given: pass --target=cuda:90 (or hip:gfx942, ...) or set the module attribute "
                          f"{TARGET_ATTR}")
    return Target.parse(target)


def lower_and_compile(module: ir.Module, target: "Target | str | None",
                      options: BackendOptions | dict[str, Any] | None = None, *,
                      dump_dir=None) -> list[CompiledKernel]:
    """Lower module's primitives for target (in place) and compile every kernel. options: the backend's options
    object, or a dict of overrides. Each kernel's metadata gets 'abi' (appended arguments, see abi_of)."""
    target = _target_of(module, target)
    backend = get_backend(target)
    if options is None or isinstance(options, dict):
        options = backend.options(**(options or {}))
    lower_core(module, target)
    abis = {_sym_name(k): abi_of(k) for k in kernels(module)}
    if not abis:
        raise CompileError("the module has no kernel (public tt.func) to compile")
    per_kernel = {_sym_name(k): kernel_launch_options(k, options) for k in kernels(module)}
    out = []
    for name, text in kernel_ttir(module):
        out.append(backend.compile(text, per_kernel[name], dump_dir=dump_dir, metadata={"abi": abis[name]}))
    return out


# launch options a kernel template chooses per kernel (its tile config needs them: a 128x256 GEMM tile with the
# default 4 warps spills and ran 7x slower on the H200); they override the module-wide options for that kernel
RECORD_LAUNCH_OPTIONS = ("num_warps", "num_stages")


def kernel_launch_options(kernel: ir.Operation, options: BackendOptions) -> BackendOptions:
    """options, with num_warps/num_stages taken from the kernel's ditron.kernel record when it has them."""
    if KERNEL_ATTR not in kernel.attributes:
        return options
    record = ir.DictAttr(kernel.attributes[KERNEL_ATTR])
    chosen = {key: ir.IntegerAttr(record[key]).value for key in RECORD_LAUNCH_OPTIONS
              if key in record and isinstance(record[key], ir.IntegerAttr)}
    return dataclasses.replace(options, **chosen) if chosen else options


def emit_stage(module: ir.Module, emit: str, target: "Target | str | None") -> str:
    """The text of one backend stage (ttir, ttgir, llir, ptx, amdgcn) for every kernel of module, concatenated.
    Used by ``ditron-opt --emit=STAGE --target=TARGET``."""
    if emit not in EMIT_STAGES:
        raise TargetError(f"--emit={emit}: choose mlir or one of {', '.join(EMIT_STAGES)}")
    target = _target_of(module, target)
    backend = get_backend(target)
    if emit not in backend.text_stages:
        raise TargetError(f"--emit={emit} is not a stage of {target}; its stages are "
                          f"{', '.join(backend.text_stages)}")
    lower_core(module, target)
    pieces = kernel_ttir(module)
    if not pieces:
        raise CompileError("the module has no kernel (public tt.func) to emit")
    options = backend.options()
    texts = [backend.emit(text, emit, options) for _, text in pieces]
    return "\n".join(t.rstrip("\n") for t in texts)
