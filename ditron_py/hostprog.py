"""Host programs: a module's device-level function (docs/device_ir.md) as JSON, which the executor
(ditron.runtime.executor) runs. Compile time only: this module imports the MLIR bindings; running a host program
needs torch and triton alone. The pass ditron-emit-host-program (passes/emit_host_program.py) uses it:

    program = serialize(module)                  # the device function -> a JSON-able dict (format below)
    erase_device_functions(module)               # what is left is core level: tt.func kernels
    add_runtime_kernels(module, program, target) # wait / signal kernels (ditron.kernels.runtime)

Format (``FORMAT_VERSION`` 1; the manifest stores it as ``host_program = {format_version, program}``)::

    {"name": "all_gather", "loc": "ag.mlir:12:3", "axis": "tp" | null, "mesh": {"axes": [...], "shape": [...]},
     "fence": "barrier" | "waits",
     "args":   [{"index": 0, "io": "in", "shape": [128, 64], "dtype": "bf16", "value": 0}, ...,
                {"index": 2, "io": "epoch", "value": 2}],
     "allocs": [{"name": "ag_stage", "shape": [128, 64], "dtype": "bf16", "loc": "...", "rotate": true?,
                 "consumed": true?}, ...],
     "streams": [0, 1],
     "kernels": {"ag_gemm_kernel": {"args": ["a", "b", ...], "spins": true, "template": "gemm",
                                    "wait": {"arg": "arrived", "value_arg": "epoch", ...} | null}},
     "runtime": {"wait": "ditron_rt_wait", "signal": {"set:sys": "ditron_rt_signal_set_sys", ...}},
     "body": [op, ...]}

An op is ``{"op": <MLIR op name>, "in": [value ids], "out": [value ids], "loc": "file:line:col" | null, ...}``
plus, per op: ``value`` (arith.constant), ``predicate`` (arith.cmpi), ``width``/``src_width`` (casts), ``regions``
(scf.for / scf.if: ``[{"args": [ids], "body": [ops]}]``) and, for ditron_device ops, ``stream`` and
``alloc`` (alloc_symmetric: index into allocs), ``engine``/``ndim``/``kernel`` (copy; ``kernel``: an SM copy's
copy-template kernel, whose record says pull or push), ``kind``/``scope`` (signal),
``where`` (wait), ``kernel``/``grid``/``sm_budget``/``tile_order`` (launch). Value ids are small integers, unique
in the program; arguments come first.

The runtime kernels the executor launches beside the program's own (wait, signal, barrier) are kernel templates
of their own: ``ditron.kernels.runtime``.
"""
from __future__ import annotations

from typing import Any

from mlir import ir

from .dialects import device
from .dialects.context import diagnostic_at
from .dialects.device import HOST_ARITH_CASTS, HOST_OPS, IO_ATTR, LEVEL_ATTR, device_functions
from .dialects.opbase import attr_to_py, memref_shape, walk_ops
from .errors import PassError
from .kernels import I32_LIMIT, KERNEL_ATTR
from .kernels.runtime import (BARRIER_KERNEL, WAIT_KERNEL, WAIT_LANES, add_runtime_kernels,  # noqa: F401
                              runtime_kernels_needed, signal_kernel_name)
from .schema import ABI_ATTR, AXIS_ATTR, COPY_KERNEL_ATTR, FENCES, HOST_PROGRAM_VERSION, JIT_ATTR, MESH_ATTR

FORMAT_VERSION = HOST_PROGRAM_VERSION
IO_ROLES = ("in", "out", "epoch")
DEVICE_OPS = device.OP_NAMES



# ------------------------------------------------------------------------------------------------ helpers

def _loc(op_or_loc) -> str | None:
    loc = op_or_loc.location if hasattr(op_or_loc, "location") else op_or_loc
    d = diagnostic_at(loc, "")
    return None if d.file is None else f"{d.file}:{d.line}:{d.col}"


def _error(where, message: str) -> PassError:
    loc = where.location if hasattr(where, "location") else where
    return PassError(message, [diagnostic_at(loc, message)])


def _dtype(t: ir.Type) -> str:
    """MLIR element type spelling ('bf16', 'f32', 'i32', 'f8E4M3FN', ...)."""
    return str(t)


def _width(t: ir.Type) -> int:
    return 64 if isinstance(t, ir.IndexType) else ir.IntegerType(t).width


def _memref(t: ir.Type) -> tuple[list[int], str] | None:
    """(shape with -1 for dynamic dims, element type spelling) of a memref type; None for other types."""
    shape = memref_shape(t)
    return None if shape is None else (list(shape), _dtype(ir.MemRefType(t).element_type))


def _sym_name(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def launched_kernels(func: ir.Operation) -> list[str]:
    return sorted({device.Launch(op).kernel for op in walk_ops(func) if device.Launch.match(op) is not None})


def kernels_ready(module: ir.Module) -> bool:
    """Whether every kernel the device functions launch is a tt.func of module (core level already) or a user
    @ditron.jit kernel's declaration (compiled from Python, ``schema.JIT_ATTR``), and every SM copy names its copy
    kernel (a program of SM copies and no launch still needs ditron-lower-device-to-core)."""
    tt_funcs = {_sym_name(op.operation) for op in module.body.operations
                if (op.operation.name == "tt.func" or JIT_ATTR in op.operation.attributes)
                and "sym_name" in op.operation.attributes}
    funcs = device_functions(module)
    sm_copies_ready = all(COPY_KERNEL_ATTR in op.attributes for f in funcs for op in walk_ops(f)
                          if (c := device.Copy.match(op)) is not None and c.engine == "sm")
    return sm_copies_ready and all(k in tt_funcs for f in funcs for k in launched_kernels(f))


# ----------------------------------------------------------------------------------------------- serialize

class _Serializer:
    def __init__(self, module: ir.Module, func: ir.Operation):
        self.module, self.func = module, func
        self.fname = _sym_name(func)
        self.ids: dict[ir.Value, int] = {}
        self.allocs: list[dict[str, Any]] = []
        self.pad_slots = 0
        self.streams: set[int] = set()
        self.kernels: dict[str, dict[str, Any]] = {}
        self.symbols = {_sym_name(op.operation): op.operation for op in module.body.operations
                        if "sym_name" in op.operation.attributes}
        self.enqueued = False

    def vid(self, v: ir.Value, *, define: bool = False, user: ir.Operation | None = None) -> int:
        i = self.ids.get(v)
        if i is None:
            if not define:  # used before defined: a value from outside the function
                raise _error(user, f"'{user.name}' in @{self.fname} uses a value defined outside the device "
                                   "function; host programs are self-contained")
            i = self.ids[v] = len(self.ids)
        return i

    def program(self) -> dict[str, Any]:
        func, fname = self.func, self.fname
        entry = func.regions[0].blocks[0]
        args = []
        for i, (v, io) in enumerate(zip(entry.arguments, device.arg_roles(func))):
            if io not in IO_ROLES:
                raise _error(func, f"argument {i} of @{fname} has no '{IO_ATTR}' attribute (\"in\", \"out\" or "
                                   "\"epoch\"); device programs are in destination-passing style")
            spec: dict[str, Any] = {"index": i, "io": io, "value": self.vid(v, define=True)}
            if io == "epoch":
                if not isinstance(v.type, ir.IndexType):
                    raise _error(func, f"the epoch argument {i} of @{fname} must be an index, got {v.type}")
            else:
                mt = _memref(v.type)
                if mt is None:
                    raise _error(func, f"argument {i} of @{fname} is \"{io}\" but of type {v.type}, not a memref")
                spec["shape"], spec["dtype"] = mt
            args.append(spec)
        if [a["io"] for a in args].count("epoch") != 1 or args[-1]["io"] != "epoch":
            raise _error(func, f"@{fname}: the last argument must be the epoch (index, {IO_ATTR} = \"epoch\"), "
                               "and only the last")
        body = self.block_ops(entry)
        mesh = None
        if MESH_ATTR in self.module.operation.attributes:
            m = attr_to_py(self.module.operation.attributes[MESH_ATTR])
            if isinstance(m, dict):
                mesh = {"axes": m.get("axes"), "shape": m.get("shape")}
        axis = ir.StringAttr(func.attributes[AXIS_ATTR]).value if AXIS_ATTR in func.attributes else None
        fence = ir.StringAttr(func.attributes[device.FENCE_ATTR]).value if device.FENCE_ATTR in func.attributes \
            else "barrier"
        if fence not in FENCES:
            raise _error(func, f"@{fname}: {device.FENCE_ATTR} = \"{fence}\" is not one of {', '.join(FENCES)}")
        return {"name": fname, "loc": _loc(func), "axis": axis, "mesh": mesh, "fence": fence, "args": args,
                "allocs": self.allocs, "streams": sorted(self.streams) or [0], "kernels": self.kernels,
                "runtime": {}, "body": body}

    def block_ops(self, block: ir.Block) -> list[dict[str, Any]]:
        return [self.op(op.operation) for op in block.operations]

    def op(self, op: ir.Operation) -> dict[str, Any]:
        name = op.name
        if name not in HOST_OPS and name not in DEVICE_OPS:
            raise _error(op, f"'{name}' cannot run in a host program: device-level functions hold ditron_device "
                             "ops and arith/scf on index values (docs/device_ir.md)")
        out: dict[str, Any] = {"op": name, "in": [self.vid(v, user=op) for v in op.operands], "out": [],
                               "loc": _loc(op)}
        for r in op.results:
            if not isinstance(r.type, (ir.IndexType, ir.IntegerType, ir.MemRefType)):
                raise _error(op, f"'{name}' yields a {r.type}; host values are index, integer or memref")
        if name == "arith.constant":
            attr = op.attributes["value"]
            if not isinstance(attr, ir.IntegerAttr):
                raise _error(op, f"arith.constant {attr} is not an integer; host programs compute on index and "
                                 "integer values")
            out["value"] = int(ir.IntegerAttr(attr).value)
        elif name == "arith.cmpi":
            out["predicate"] = int(ir.IntegerAttr(op.attributes["predicate"]).value)
        elif name in HOST_ARITH_CASTS:
            out["width"], out["src_width"] = _width(op.results[0].type), _width(op.operands[0].type)
        elif name in ("scf.for", "scf.if"):
            regions = []
            for region in op.regions:
                if not len(region.blocks):
                    continue
                block = region.blocks[0]
                regions.append({"args": [self.vid(a, define=True) for a in block.arguments],
                                "body": self.block_ops(block)})
            out["regions"] = regions
        if name in DEVICE_OPS:
            self.device_op(op, out)
        out["out"] = [self.vid(r, define=True) for r in op.results]
        return out

    def device_op(self, op: ir.Operation, out: dict[str, Any]) -> None:
        if (al := device.AllocSymmetric.match(op)) is not None:
            if self.enqueued:
                raise _error(op, f"alloc_symmetric '{al.name}' comes after device work; every symmetric buffer is "
                                 "allocated before the first copy, signal, wait or launch (docs/device_ir.md)")
            if op.parent is None or op.parent.operation != self.func:
                raise _error(op, f"alloc_symmetric '{al.name}' is nested in a region; allocations go at the top "
                                 "of the device function")
            mt = _memref(al.buffer.type)
            if mt is None or -1 in mt[0]:
                raise _error(op, f"alloc_symmetric '{al.name}' must have a static memref shape")
            if any(a["name"] == al.name for a in self.allocs):
                raise _error(op, f"two symmetric buffers are named '{al.name}'")
            if mt[1] == "i32" and len(mt[0]) == 1:  # a signal pad: the executor's pads lie side by side
                self.pad_slots += mt[0][0]
                if self.pad_slots + WAIT_LANES >= I32_LIMIT:  # the barrier kernel clears them with i32 indices
                    raise _error(op, f"the signal pads up to '{al.name}' hold {self.pad_slots} slots; the runtime "
                                     f"kernels index them in 32 bits (at most {I32_LIMIT - WAIT_LANES - 1})")
            out["alloc"] = len(self.allocs)
            self.allocs.append({"name": al.name, "shape": mt[0], "dtype": mt[1], "loc": _loc(op),
                                **({"rotate": True} if device.ROTATE_ATTR in op.attributes else {}),
                                **({"consumed": True} if device.CONSUMED_ATTR in op.attributes else {})})
            return
        if device.Rank.match(op) is not None or device.NumRanks.match(op) is not None:
            return
        self.enqueued = True
        stream = int(ir.IntegerAttr(op.attributes["stream"]).value) if "stream" in op.attributes else 0
        if stream < 0:
            raise _error(op, f"'{op.name}' has stream = {stream}; streams are numbered from 0")
        out["stream"] = stream
        self.streams.add(stream)
        if (c := device.Copy.match(op)) is not None:
            out["engine"], out["ndim"] = c.engine, c.rank
            if COPY_KERNEL_ATTR in op.attributes:  # an SM copy: the executor launches its copy kernel
                name = ir.FlatSymbolRefAttr(op.attributes[COPY_KERNEL_ATTR]).value
                target = self.symbols.get(name)
                n_args = len(target.regions[0].blocks[0].arguments) if target is not None and target.regions \
                    and target.regions[0].blocks else -1
                self.kernel(op, name, n_args)
                out["kernel"] = name
        elif (s := device.Signal.match(op)) is not None:
            out["kind"], out["scope"] = s.kind, s.scope
        elif (w := device.Wait.match(op)) is not None:
            out["where"] = w.where
        elif (ln := device.Launch.match(op)) is not None:
            out["kernel"], out["grid"] = ln.kernel, [int(g) for g in ln.grid]
            out["sm_budget"], out["tile_order"] = int(ln.sm_budget), ln.tile_order
            self.kernel(op, ln.kernel, len(op.operands))

    def kernel(self, launch: ir.Operation, name: str, n_operands: int) -> None:
        if name in self.kernels:
            return
        target = self.symbols.get(name)
        if target is None:
            raise _error(launch, f"launch of '@{name}': no such symbol in the module")
        if target.name == "func.func" and JIT_ATTR in target.attributes:  # a user @ditron.jit kernel (ditron.device)
            spec = attr_to_py(target.attributes[JIT_ATTR])
            params = [str(a) for a in spec["params"]]
            if n_operands != len(params):
                raise _error(launch, f"launch of '@{name}' passes {n_operands} operand(s); the kernel takes "
                                     f"{len(params)}: {', '.join(params)}")
            # "wait": the pad and value parameters its in-kernel waits use (the watchdog names their slots)
            self.kernels[name] = {"spins": True, "template": None, "wait": spec.get("wait"), "args": params}
            return
        if target.name != "tt.func":
            raise _error(launch, f"launch of '@{name}': the kernel is a {target.name}, not a tt.func; run "
                                 "ditron-lower-device-to-core first (it instantiates kernel templates)")
        info: dict[str, Any] = {"spins": kernel_spins(target), "template": None, "wait": None}
        n_args = len(target.regions[0].blocks[0].arguments)
        if KERNEL_ATTR in target.attributes:
            record = attr_to_py(target.attributes[KERNEL_ATTR])
            info["template"] = record.get("template")
            if isinstance(record.get("args"), list):
                info["args"] = [str(a) for a in record["args"]]
            if record.get("template") == "copy":  # what the executor needs to launch it for an SM copy
                info["copy"] = {k: record.get(k) for k in ("direction", "grid", "rows", "cols")}
            for part in ("wait", "publish"):  # the pad (and value) an in-kernel wait spins on, for the watchdog
                if isinstance(record.get(part), dict):
                    info["wait"] = record[part]
                    break
        if n_operands != n_args and ABI_ATTR in target.attributes:
            raise _error(launch, f"launch of '@{name}': the kernel was already lowered by ditron-lower-core-to-triton "
                                 "(it takes the rank and the peers' heap bases as arguments the launch does not "
                                 "pass); compile the module from before that pass")
        if n_operands != n_args:
            raise _error(launch, f"launch of '@{name}' passes {n_operands} operand(s); the kernel takes {n_args}")
        self.kernels[name] = info


def kernel_spins(kernel: ir.Operation) -> bool:
    """Whether a kernel may spin-wait: it holds ditron_core.wait / barrier_all or an scf.while loop (every spin in
    TTIR is one). Such a kernel's programs must all be resident at once."""
    for op in walk_ops(kernel):
        if op.name in ("ditron_core.wait", "ditron_core.barrier_all", "scf.while"):
            return True
    return False


def serialize(module: ir.Module, function: str | None = None) -> dict[str, Any]:
    """The device function of module (the only one, or the one named) as a host program (see the module doc)."""
    funcs = device_functions(module)
    names = [_sym_name(f) for f in funcs]
    if function is not None:
        if function not in names:
            raise PassError(f"no device-level function '@{function}' in the module (device functions: "
                            f"{', '.join('@' + n for n in names) or 'none'})")
        func = funcs[names.index(function)]
    elif len(funcs) == 1:
        func = funcs[0]
    elif not funcs:
        raise PassError(f"the module has no device-level function (a func.func with {LEVEL_ATTR} = \"device\") "
                        "to make a host program of")
    else:
        raise _error(funcs[1], f"the module has several device functions ({', '.join('@' + n for n in names)}); "
                               "an executable runs one host program: compile them separately")
    return _Serializer(module, func).program()


def erase_device_functions(module: ir.Module) -> None:
    """Drop the device functions and the func.func kernel declarations left beside them (after serialize)."""
    for op in list(module.body.operations):
        op = op.operation
        if op.name != "func.func":
            continue
        if op in device_functions(module) or KERNEL_ATTR in op.attributes:
            op.erase()


__all__ = ["BARRIER_KERNEL", "FORMAT_VERSION", "WAIT_KERNEL", "WAIT_LANES", "add_runtime_kernels", "device_functions",
           "erase_device_functions", "kernel_spins", "kernels_ready", "runtime_kernels_needed", "serialize",
           "signal_kernel_name"]
