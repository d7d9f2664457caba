"""ditron-lower-device-to-core: instantiate the core kernels of a device program and keep its host program.

Every kernel a launch names is declared by ditron-lower-task-to-device as a private ``func.func`` carrying its
``ditron.kernel`` record; this pass replaces each declaration with the ``tt.func`` its template (ditron.kernels)
builds from the record — GEMMs with their per-tile waits and notifies, reductions, elementwise kernels — in
generic TTIR plus ditron_core primitives (ditron-lower-core-to-triton lowers those per target). Chunk copies on
SMs (``engine = "sm"``) get a copy-template kernel too, named by ``ditron.copy_kernel``. The device function
stays: it is the host program (ordered copies, signal writes, waits, launches, per stream); the rank stays a
run-time value (``ditron_device.rank`` on the host, ``ditron_core.rank`` in kernels).

    "ditron_device.launch"(%a, %b, %c) {kernel = @gemm, ...}
    func.func private @gemm(memref<...>, memref<...>, memref<...>) attributes {ditron.kernel = {template = "gemm", ...}}
  becomes
    "ditron_device.launch"(%a, %b, %c) {kernel = @gemm, ...}
    "tt.func"() <{sym_name = "gemm", ...}> ({ ... tt.dot ... }) {ditron.kernel = {template = "gemm", ...}}

Copy kernels take (src, dst, peer, src_row, src_col, dst_row, dst_col): a pull (the destination on the executing
rank) reads the peer ``src_rank``'s src, a push (the source on the executing rank) writes the peer ``dst_rank``'s
dst; the offsets are the region's (rank-1 regions: row 0) and its sizes the kernel's static rows x cols. The
executor launches the kernel for the copy (``ditron.runtime.program``). An SM copy of another region (rank 3,
run-time sizes) or between two other ranks is an error: it has no kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from ..dialects import device
from ..dialects.opbase import walk_ops
from ..errors import DitronError
from ..kernels import KernelRecord, get_template
from . import device_kernels as K
from ..schema import JIT_ATTR
from .device_builder import KERNEL_ATTR, KernelTable
from .registry import Pass
from .rewrite import constant_int
from .tile import op_error, require_device_level

COPY_KERNEL_ATTR = "ditron.copy_kernel"


def _is_rank(v: ir.Value) -> bool:
    """Whether v is the executing rank (the result of ditron_device.rank)."""
    owner = v.owner
    return isinstance(owner, (ir.Operation, ir.OpView)) and device.Rank.match(getattr(owner, "operation", owner)) \
        is not None


def _template(name: str, op: ir.Operation, pass_name: str):
    try:
        return get_template(name)
    except KeyError:
        raise op_error(pass_name, op, f"names kernel template '{name}', which ditron.kernels does not define") \
            from None


def _declarations(module: ir.Module) -> dict[str, ir.Operation]:
    out = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and KERNEL_ATTR in op.attributes and len(op.regions[0].blocks) == 0:
            out[ir.StringAttr(op.attributes["sym_name"]).value] = op
    return out


@dataclass(frozen=True)
class LowerDeviceToCorePass(Pass):
    name = "ditron-lower-device-to-core"
    summary = "Instantiate the core kernel templates a device program launches (tt.func + ditron_core)"

    def run(self, module: ir.Module) -> None:
        device_funcs = require_device_level(module, self.name, "lower it with ditron-lower-task-to-device (and "
                                                               "schedule it with ditron-schedule-overlap) first")
        kernels = KernelTable(module)
        for fn in device_funcs:
            self._copy_kernels(fn, kernels)
        self._check_launches(module, device_funcs)
        for name, decl in _declarations(module).items():
            self._instantiate(decl)

    def _instantiate(self, decl: ir.Operation) -> None:
        name = ir.StringAttr(decl.attributes["sym_name"]).value
        try:
            rec = KernelRecord.from_attr(decl.attributes[KERNEL_ATTR])
        except (TypeError, ValueError) as err:
            raise op_error(self.name, decl, f"kernel '@{name}': its {KERNEL_ATTR} record is malformed ({err})") from None
        template = _template(rec.get("template", "?"), decl, self.name)
        rec["name"] = name
        try:
            template.build(rec, ip=ir.InsertionPoint(decl), loc=decl.location)
        except DitronError as err:
            raise op_error(self.name, decl, f"kernel '@{name}' cannot be built: {err}") from None
        except (KeyError, TypeError, ValueError, IndexError) as err:  # a field missing or of the wrong kind
            raise op_error(self.name, decl, f"kernel '@{name}': its {KERNEL_ATTR} record is malformed "
                                            f"({type(err).__name__}: {err})") from None
        decl.erase()

    def _check_launches(self, module: ir.Module, funcs) -> None:
        decls = _declarations(module)
        defined = {ir.StringAttr(op.operation.attributes["sym_name"]).value for op in module.body.operations
                   if op.operation.name == "tt.func" or JIT_ATTR in op.operation.attributes}  # jit: compiled from Python
        for fn in funcs:
            for op in walk_ops(fn):
                ln = device.Launch.match(op)
                if ln is None:
                    continue
                if ln.kernel in defined:
                    continue
                if ln.kernel not in decls:
                    raise op_error(self.name, op, f"launches '@{ln.kernel}', which has no '{KERNEL_ATTR}' record to "
                                                  "instantiate")
                rec = KernelRecord.from_attr(decls[ln.kernel].attributes[KERNEL_ATTR])
                if len(rec.get("args", [])) != len(ln.args):
                    raise op_error(self.name, op, f"passes {len(ln.args)} argument(s) to '@{ln.kernel}', whose "
                                                  f"record names {len(rec.get('args', []))}: "
                                                  f"{', '.join(rec.get('args', []))}")

    # ---- SM copies

    def _copy_kernels(self, fn: ir.Operation, kernels: KernelTable) -> None:
        for op in walk_ops(fn):
            cp = device.Copy.match(op)
            if cp is None or cp.engine != "sm" or COPY_KERNEL_ATTR in op.attributes:
                continue
            rec = self._copy_record(cp, op)
            name = kernels.declare(rec, [], op.location)
            op.attributes[COPY_KERNEL_ATTR] = ir.FlatSymbolRefAttr.get(name)

    def _copy_record(self, cp: device.Copy, op: ir.Operation) -> KernelRecord:
        """A copy-template record for an SM copy: a static-size rank-1 or rank-2 region of buffers whose dims fit
        the kernel's i32 offsets, pulled (the destination on the executing rank; peer = src_rank) or pushed (the
        source on the executing rank; peer = dst_rank). Anything else cannot run on SMs: a located error that says
        to use the copy engine."""
        from ..kernels import copy as copy_template
        sizes = [constant_int(s) for s in cp.sizes]
        src_t, dst_t = ir.MemRefType(cp.src.type), ir.MemRefType(cp.dst.type)
        refusal = copy_template.sm_copy_refusal(cp.rank, sizes, [*src_t.shape, *dst_t.shape])
        if refusal:
            raise op_error(self.name, op, f"{refusal}; use engine = \"copy_engine\"")
        if _is_rank(cp.dst_rank):
            direction = "pull"
        elif _is_rank(cp.src_rank):
            direction = "push"
        else:
            raise op_error(self.name, op, "copies with engine = \"sm\" between two ranks neither of which is the "
                                          "executing one (ditron_device.rank); an SM copy pulls into or pushes "
                                          "from the executing rank's memory")
        rows, cols = (1, sizes[0]) if cp.rank == 1 else (sizes[0], sizes[1])
        src_ld = src_t.shape[-1] if cp.rank == 2 else src_t.shape[0]
        dst_ld = dst_t.shape[-1] if cp.rank == 2 else dst_t.shape[0]
        sms = op.attributes["ditron.sms"].value if "ditron.sms" in op.attributes else 16
        try:
            return copy_template.make_record(rows, cols, dtype=K.dtype_name(src_t), direction=direction,
                                             peer="arg:peer", src_ld=src_ld, dst_ld=dst_ld, src_row="arg:src_row",
                                             src_col="arg:src_col", dst_row="arg:dst_row", dst_col="arg:dst_col",
                                             grid=max(1, sms))
        except DitronError as err:
            raise op_error(self.name, op, f"has no SM copy kernel: {err}") from None
