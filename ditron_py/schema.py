"""The names every layer shares: ditron's attribute names on the IR, the arguments the primitive lowering appends to
a kernel, the host program's fences and format version.

Ground floor: this module imports nothing of ditron and never the MLIR bindings, torch or triton, so that every
layer (dialects, backends, kernels, passes, the runtime, the roof) may import it. A name written here is written
nowhere else; what each attribute holds is documented where it is produced (docs/device_ir.md for the device level).
"""
from __future__ import annotations

# ------------------------------------------------------------------------------------------------ on the module
TARGET_ATTR = "ditron.target"              # the GPU target ("cuda:90"); ditron-lower-task-to-device also stamps it
                                           # on the device function it tiled for
MESH_ATTR = "ditron.mesh"                  # {axes = [...], shape = array<i64: ...>}
PIPELINE_ATTR = "ditron.pipeline"          # the stages of ditron-default (its last the emission) that RAN on
                                           # the module, as pipeline text, in order (passes/manager.py)
HOST_PROGRAM_ATTR = "ditron.host_program"  # the host program, as JSON text (ditron-emit-host-program)

# ---------------------------------------------------------------------------------------------------- task level
VIEW_ATTR = "ditron.view"                  # on a task function: "local" (SPMD view); absent: the global view
SHARDING_ATTR = "ditron.sharding"          # per argument / result: how the mesh axes split it
GLOBAL_SHAPE_ATTR = "ditron.global_shape"  # per padded local-view argument: the whole tensor's shape
OVERLAP_ATTR = "ditron.overlap"            # on ops ditron-fuse-overlap paired
EPILOGUE_ATTR = "ditron.epilogue"          # on a matmul and the elementwise ops ditron-fuse-epilogue fused into it
TILING_ATTR = "ditron.tiling"              # on ops: ditron-tile's choices

# grouped_matmul's gated activations (act(x @ gate) * (x @ up) fused in the grouped GEMM: the activations
# kernels/elementwise.py has a fused <act>_mul for), as the frontend, the verifier, ops and the kernel accept them
GATED_ACTS = ("silu",)

# -------------------------------------------------------------------------------------------------- device level
LEVEL_ATTR = "ditron.level"                # = "device" on a device-level func.func
IO_ATTR = "ditron.io"                      # per argument of a device function: "in", "out" or "epoch"
LAYOUT_ATTR = "ditron.layout"              # per in/out argument: the task-level sharding of what it holds
AXIS_ATTR = "ditron.axis"                  # on a device function: the mesh axis its collectives run within
FENCE_ATTR = "ditron.fence"                # on a device function: one of FENCES
EPOCH_LIMIT_ATTR = "ditron.epoch_limit"    # on a device function: the last epoch whose signal values fit the pads
ROTATE_ATTR = "ditron.rotate"              # unit, on an alloc_symmetric: held twice, call e uses copy e % 2
CONSUMED_ATTR = "ditron.consumed"          # unit, on a signal pad: every slot is cleared by its waiter each call
ROLE_ATTR = "ditron.role"                  # on device ops: the part of a lowering pattern they play ("ag.pull")
LANE_ATTR = "ditron.lane"                  # on device ops: compute, comm or reduce (ditron-schedule-overlap's input)
GROUP_ATTR = "ditron.group"                # on device ops: which task op's lowering they belong to
GATHER_ATTR = "ditron.gather"              # on device ops: which all-gather pattern of the function
PULL_ATTR = "ditron.pull"                  # on all-gather pull loops: "direct" or "ring"
SMS_ATTR = "ditron.sms"                    # on SM copies: the SMs ditron-schedule-overlap gave them
COPY_KERNEL_ATTR = "ditron.copy_kernel"    # on an SM copy: its copy-template kernel (ditron-lower-device-to-core)

# ---------------------------------------------------------------------------------------------------- core level
KERNEL_ATTR = "ditron.kernel"              # on a kernel (tt.func) or its declaration: the template record
JIT_ATTR = "ditron.jit"                    # on a private func.func: it stands for a user @ditron.jit kernel
# a @ditron.jit kernel's launch metadata: the parameters it was compiled assuming multiples of DIVISIBILITY
# (tt.divisibility; pointers in bytes, integers in units): the executor checks them before each launch
DIVISIBLE_META = "ditron_divisible"
DIVISIBILITY = 16
                                           # ({key, params}; ditron.device), compiled from Python by ditron.compile
ABI_ATTR = "ditron.abi"                    # on a lowered kernel: the arguments ditron-lower-core-to-triton appended

# the kinds of the arguments ditron-lower-core-to-triton appends to a kernel, in this order: the rank, the world
# size, the peers' heap bases, and what a bounded in-kernel wait needs (the polls before it gives up, the rank's
# error record, the tag naming the launch in it); the executor binds them by kind
APPENDED_ARGS = ("rank", "num_ranks", "heap_bases", "wait_bound", "wait_err", "wait_tag")
# the kinds of a kernel's own (user) arguments, which come first; ARG_KINDS: every kind an artifact's ABI may name
USER_ARG_KINDS = ("pointer", "scalar")
ARG_KINDS = USER_ARG_KINDS + APPENDED_ARGS

# the vocabulary of the distributed primitives (ditron_core ops and ditron.language alike)
SCOPES = ("gpu", "sys")
WAIT_SEMANTICS = ("acquire", "relaxed")
NOTIFY_SEMANTICS = ("release", "relaxed")
NOTIFY_OPS = ("set", "add", "clear")
NOTIFY_RMW = {"set": "xchg", "add": "add"}  # notify's op -> the tt.atomic_rmw kind that does it (clear: a CAS)

# ---------------------------------------------------------------------------------------------- the host program
HOST_PROGRAM_VERSION = 1                   # the format of the host program's JSON (passes/emit_host_program.py)
# how call e + 1 of a host program is ordered after the peers' call e: an end barrier, or the program's own waits
FENCES = ("barrier", "waits")

__all__ = [name for name in dir() if name.isupper()]
