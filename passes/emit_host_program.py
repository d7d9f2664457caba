"""ditron-emit-host-program: the device function becomes the host program; what is left is core level.

The last pass of ditron-default, the last step before the kernels are compiled. On a module whose
device function (``ditron.level = "device"``) launches tt.func kernels (ditron-lower-device-to-core's output):

* the device function is serialised as the host program (``ditron.hostprog``: the JSON the executor runs) and
  stored on the module as the string attribute ``ditron.host_program``;
* the device function and the kernel declarations beside it are erased: what is left is core level only;
* the runtime kernels the program needs (wait, signal, barrier: ``ditron.kernels.runtime``) are appended as
  tt.func kernels for the target, and the program names them (its ``runtime`` entry).

    module attributes {ditron.mesh = ..., ditron.target = "cuda:90"} {
      tt.func @gemm(...) attributes {ditron.kernel = {...}} {...}
      func.func @mlp(%x: memref<...> {ditron.io = "in"}, ..., %epoch: index {ditron.io = "epoch"})
          attributes {ditron.level = "device"} {
        "ditron_device.wait"(...) ...
        "ditron_device.launch"(...) {kernel = @gemm, stream = 0 : i64, ...}
      }
    }
  becomes
    module attributes {ditron.host_program = "{\"name\": \"mlp\", ...}", ditron.mesh = ..., ...} {
      tt.func @gemm(...) attributes {ditron.kernel = {...}} {...}
      tt.func @ditron_rt_wait(...) {...}
    }

A module whose device function cannot be serialised (an op a host program cannot run, a launch of a kernel not
yet instantiated, several device functions) is a located error; so is a module with no device function, or with
task- or device-level ops outside it. An empty module (``module {}``) comes back as it is.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mlir import ir

from ..dialects.context import diagnostic_at
from ..dialects.device import LEVEL_ATTR, device_functions
from ..dialects.opbase import walk_ops
from ..errors import PassError
from ..schema import HOST_PROGRAM_ATTR, TARGET_ATTR
from .registry import Pass, option

DEFAULT_TARGET = "cuda:90"
ABOVE_CORE = ("ditron_task", "ditron_device")


def emitted_program(module: ir.Module) -> dict[str, Any] | None:
    """The host program ditron-emit-host-program stored on module (None where it has none)."""
    attrs = module.operation.attributes
    if HOST_PROGRAM_ATTR not in attrs:
        return None
    try:
        program = json.loads(ir.StringAttr(attrs[HOST_PROGRAM_ATTR]).value)
    except (ValueError, TypeError) as err:
        raise PassError(f"the module's {HOST_PROGRAM_ATTR} is not a host program's JSON text: {err}") from None
    if not isinstance(program, dict):
        raise PassError(f"the module's {HOST_PROGRAM_ATTR} holds {type(program).__name__}, not a host program")
    return program


@dataclass(frozen=True)
class EmitHostProgramPass(Pass):
    """Serialise the device function as the host program, erase it, add the runtime kernels (see the module)."""

    name = "ditron-emit-host-program"
    summary = "device function -> host program (JSON on the module) + runtime kernels; core level is left"

    target: str = option("", "target of the runtime kernels (default: the module's ditron.target, else the device "
                             "function's, else cuda:90)")

    def run(self, module: ir.Module) -> None:
        from ..hostprog import add_runtime_kernels, erase_device_functions, serialize
        from ..backends.target import Target

        if HOST_PROGRAM_ATTR in module.operation.attributes:
            message = (f"{self.name}: the module already holds a host program ({HOST_PROGRAM_ATTR}); the pass runs "
                       "once, on the device program")
            raise PassError(message, [diagnostic_at(module.operation.location, message)])
        if not len(module.body.operations):
            return  # an empty module: nothing to emit (ditron-default on one is a no-op, as in mlir-opt)
        if not device_functions(module):
            message = (f"{self.name}: the module has no device-level function (a func.func with {LEVEL_ATTR} = "
                       "\"device\") to make a host program of")
            raise PassError(message, [diagnostic_at(module.operation.location, message)])
        target = Target.parse(self._target(module))
        program = serialize(module)
        erase_device_functions(module)
        left = [op for op in walk_ops(module.operation) if op.name.split(".")[0] in ABOVE_CORE]
        if left:
            message = (f"{self.name}: '{left[0].name}' is outside the device function; only core-level kernels "
                       "may stay beside it")
            raise PassError(message, [diagnostic_at(left[0].location, message)])
        add_runtime_kernels(module, program, target)
        module.operation.attributes[HOST_PROGRAM_ATTR] = ir.StringAttr.get(json.dumps(program, sort_keys=True))

    def _target(self, module: ir.Module) -> str:
        if self.target:
            return self.target
        for attrs in (module.operation.attributes, *(f.attributes for f in device_functions(module))):
            if TARGET_ATTR in attrs:  # the module's, else the one ditron-lower-task-to-device tiled for
                return ir.StringAttr(attrs[TARGET_ATTR]).value
        return DEFAULT_TARGET


__all__ = ["EmitHostProgramPass", "emitted_program"]
