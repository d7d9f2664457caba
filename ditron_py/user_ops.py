"""ditron.user_ops: a user's device program called like the built-in ``ditron.ops``, on torch tensors.

    import ditron.device as dd
    from ditron.user_ops import UserOp

    def build(W, shapes, dtype, *, sm_budget, target):      # shapes: each rank's input shapes, in order
        (m, k), (_, n) = shapes
        return ag_gemm_user.program(W, m, k, n, dtype=dtype, num_sms=sm_budget, target=target)

    ag_gemm = UserOp("ag_gemm_user", build, arity=2)
    ys = ag_gemm([a0, a1], [b0, b1], world=ditron.World.virtual(2))     # virtual: a list of one tensor per rank
    y = ag_gemm(a, b, world=ditron.World.from_torch())                  # real: this rank's tensors

A call checks its tensors (one per rank in a virtual world, every rank's of the same shape and dtype), builds the
program for the world size, the shapes, the dtype, the target and the SMs a rank may hold (a virtual world of W > 1
ranks shares one GPU: every rank's spinning kernels must be resident at once, so ``sm_budget`` =
``World.cta_budget``, which the executor holds a virtual world of one rank to as well), compiles it once (``ditron.compile``, through the compile cache, or into ``directory`` when
given: a GPU box without the compiler then loads the artifacts built elsewhere, see ``UserOp.prebuild``), and runs
it through the executor (``graph=True``: CUDA-graph replays; ``sync=False``: enqueued on the caller's stream). Extra
keyword arguments of a call are the builder's own parameters (part of the key).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Sequence

from .errors import DitronError

__all__ = ["UserOp", "UserOpError"]

TORCH_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "int32": "i32"}
NUM_SMS = 132  # the SMs the target's cost model knows, when no GPU is asked (ditron.cost_model.peaks_for)


class UserOpError(DitronError):
    """A user op called with arguments that do not fit it (tensors, world, parameters)."""


class UserOp:
    """A device-program builder ``build(W, shapes, dtype, *, sm_budget, target, **params) -> ditron.device.Program``
    callable on torch tensors. ``arity``: how many tensors it takes (None: any). ``directory``: where its artifacts
    are kept (one per key; default: the compile cache)."""

    def __init__(self, name: str, build: Callable[..., Any], *, arity: int | None = None,
                 directory: str | Path | None = None, target: str | None = None):
        if not callable(build):
            raise UserOpError(f"user op '{name}': build must be callable, got {type(build).__name__}")
        self.name, self.build, self.arity = name, build, arity
        self.directory = None if directory is None else Path(directory)
        self.target = target
        self._executables: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<ditron UserOp {self.name}>"

    # ---- keys and programs

    def key(self, world_size: int, virtual: bool, shapes: Sequence[Sequence[int]], dtype: str, target: str,
            params: dict[str, Any]) -> str:
        """The artifact's name for one signature: readable, unique through a hash of everything that decides it."""
        spec = {"op": self.name, "W": world_size, "virtual": virtual, "shapes": [list(s) for s in shapes],
                "dtype": dtype, "target": target, "params": params}
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True, default=repr).encode()).hexdigest()[:12]
        dims = "_".join("x".join(map(str, s)) for s in shapes)
        return f"{self.name}-{dtype}-w{world_size}{'v' if virtual else 'r'}-{dims}-{target.replace(':', '')}-{digest}"

    def program(self, world_size: int, virtual: bool, shapes: Sequence[Sequence[int]], dtype: str, target: str,
                **params: Any):
        """The builder's Program for one signature, checked to take these tensors."""
        from .device import Program
        budget = NUM_SMS
        if virtual:  # the executor holds every virtual world, of one rank too, to World.cta_budget
            from .runtime.world import World
            budget = World(world_size, None, None).cta_budget(NUM_SMS)
        p = self.build(world_size, [tuple(s) for s in shapes], dtype, sm_budget=budget, target=target, **params)
        if not isinstance(p, Program):
            raise UserOpError(f"user op '{self.name}': its builder returned {type(p).__name__}, not a "
                              "ditron.device.Program")
        if p.world_size != world_size:
            raise UserOpError(f"user op '{self.name}': its builder made a program for {p.world_size} rank(s), the "
                              f"world has {world_size}")
        got = [tuple(b.shape) for b in p.inputs]
        if got != [tuple(s) for s in shapes] or any(b.dtype != dtype for b in p.inputs):
            raise UserOpError(f"user op '{self.name}': its program takes {[list(s) for s in got]} "
                              f"({', '.join(b.dtype for b in p.inputs)}); the call passes {[list(s) for s in shapes]} "
                              f"{dtype}")
        return p

    def prebuild(self, world_size: int, virtual: bool, shapes: Sequence[Sequence[int]], dtype: str,
                 target: str = "cuda:90", **params: Any) -> Path:
        """Compile one signature's artifact into ``directory`` (where the compiler is); its path."""
        if self.directory is None:
            raise UserOpError(f"user op '{self.name}': prebuild needs a directory (UserOp(..., directory=DIR))")
        path = self.directory / self.key(world_size, virtual, shapes, dtype, target, params)
        if not path.exists():
            self.program(world_size, virtual, shapes, dtype, target, **params).compile(target, out_dir=path)
        return path

    def executable(self, world_size: int, virtual: bool, shapes, dtype: str, target: str, **params: Any):
        key = self.key(world_size, virtual, shapes, dtype, target, params)
        exe = self._executables.get(key)
        if exe is not None:
            return exe
        from .runtime.loader import load_artifact
        path = None if self.directory is None else self.directory / key
        if path is not None and path.exists():
            exe = load_artifact(path)
        else:
            compile_options = {} if path is None else {"out_dir": path}
            exe = self.program(world_size, virtual, shapes, dtype, target, **params).compile(target, **compile_options)
        self._executables[key] = exe
        return exe

    # ---- calls

    def __call__(self, *tensors: Any, world: Any, out: Any = None, sync: bool = True, graph: bool = False,
                 **params: Any) -> Any:
        import torch
        if not (hasattr(world, "world_size") and hasattr(world, "is_virtual")):
            raise UserOpError(f"{self.name}: world must be a ditron.World (World.virtual(W) or World.from_torch()), "
                              f"got {type(world).__name__}")
        if self.arity is not None and len(tensors) != self.arity:
            raise UserOpError(f"{self.name} takes {self.arity} tensor(s), got {len(tensors)}")
        W = world.world_size
        if world.is_virtual:
            for i, t in enumerate(tensors):
                if isinstance(t, torch.Tensor) or not isinstance(t, (list, tuple)) or len(t) != W:
                    raise UserOpError(f"{self.name}: in a virtual world of {W} ranks, argument {i} is a list of one "
                                      f"tensor per rank")
            ranks = [list(r) for r in zip(*tensors)]
        else:
            ranks = [list(tensors)]
        first = ranks[0]
        for r, row in enumerate(ranks):
            for i, t in enumerate(row):
                if not isinstance(t, torch.Tensor):
                    raise UserOpError(f"{self.name}: argument {i} of rank {r} is {type(t).__name__}, not a tensor")
                if t.shape != first[i].shape or t.dtype != first[i].dtype:
                    raise UserOpError(f"{self.name}: argument {i} of rank {r} is {tuple(t.shape)} {t.dtype}, rank "
                                      f"0's is {tuple(first[i].shape)} {first[i].dtype}; every rank passes the same")
        dtypes = {str(t.dtype).removeprefix("torch.") for t in first}
        if len(dtypes) != 1 or next(iter(dtypes)) not in TORCH_DTYPES:
            raise UserOpError(f"{self.name}: the tensors must share one of {', '.join(TORCH_DTYPES)}, got "
                              f"{', '.join(sorted(dtypes))}")
        target = self.target
        if target is None:
            from .runtime.loader import device_target_name
            target = self.target = device_target_name()
        exe = self.executable(W, world.is_virtual, [tuple(t.shape) for t in first],
                              TORCH_DTYPES[next(iter(dtypes))], target, **params)
        outputs = None
        if out is not None:
            outputs = [[o] for o in out] if world.is_virtual else [out]
        result = exe.run(world, ranks if world.is_virtual else ranks[0], outputs if world.is_virtual else
                         (outputs[0] if outputs else None), sync=sync, graph=graph)
        single = sum(a.get("io") == "out" for a in exe.host_program["args"]) == 1
        if world.is_virtual:
            return [r[0] for r in result] if single else result
        return result[0] if single else result

    def close(self) -> None:
        """Close every executor of every executable (in a real world: collectively, on every rank); their fast
        calls (ditron.fastcall: a registered program's torch operator) are forgotten."""
        from . import fastcall
        for exe in self._executables.values():
            exe.close()
            fastcall.forget(exe)
        self._executables.clear()
