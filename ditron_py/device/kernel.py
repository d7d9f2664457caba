"""ditron.device's kernels: what a launch can name (a built-in template instance, ``Kernel``; a user @ditron.jit
kernel specialised for a program, ``JitKernel``, registered in ``JIT_KERNELS`` when emitted) and what a template's
record says of its arguments (pads, index values, a GEMM's operand shapes)."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from ..errors import DitronError
from .values import DTYPES, _error


@dataclass
class Kernel:
    """A kernel a launch can name: a built-in template instance (``Program.gemm``, ``Program.template``). Its
    record is made when it is launched (with the launch's tile order and SM budget) and checked there."""

    template: str
    args: tuple
    fields: dict[str, Any]
    where: tuple[str, int, int]

    def record(self, *, tile_order: str | None, sm_budget: int | None, where) -> Any:
        from ..kernels import get_template
        module = get_template(self.template)
        fields = dict(self.fields)
        params = inspect.signature(module.make_record).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for name, value in (("tile_order", tile_order), ("num_sms", sm_budget)):
            if value is None:
                continue
            if name not in params and not takes_any:
                what = "a tile order" if name == "tile_order" else "an SM budget of its own"
                raise _error(f"the {self.template} template takes no {name} ({what}): drop "
                             f"{'tile_order' if name == 'tile_order' else 'sm_budget'}=", where)
            fields[name] = value
        try:
            return module.make_record(*self.args, **fields)
        except DitronError as err:
            raise _error(f"{self.template} kernel: {err}", where) from None
        except TypeError as err:  # an unknown field or a missing one
            raise _error(f"{self.template} kernel: {err}", where) from None


# Triton's pointer and scalar type strings of a @ditron.jit kernel's parameters -> the buffers' element types
_POINTER_DTYPES = {"*bf16": "bf16", "*fp16": "f16", "*fp32": "f32", "*i32": "i32"}
_SCALAR_TYPES = ("i32", "i64", "u32", "u64")
# @ditron.jit kernels of the programs built in this process, by key (their declaration's ditron.jit attribute):
# ditron.compile finds the Python function of a launched kernel here (the IR cannot hold it)
JIT_KERNELS: dict[str, "JitKernel"] = {}


@dataclass
class JitKernel:
    """A user ``@ditron.jit`` kernel specialised for a program (``Program.jit``): the types of its parameters,
    the values of its constexprs, its compile options. Launched with the non-constexpr parameters in order."""

    fn: Any
    signature: dict[str, str]
    constexprs: dict[str, Any]
    options: dict[str, Any]
    where: tuple[str, int, int]
    wait: dict[str, str] | None = None   # {"arg": pad parameter, "value_arg": value parameter}: for the watchdog
    # the parameters compiled as tt.divisibility = 16 (set from the program's launches when it is emitted:
    # ditron_py/device/emit.py, jit_divisible); the executor checks them before each launch
    divisible: frozenset = frozenset()

    @property
    def name(self) -> str:
        return self.fn.__name__

    @property
    def params(self) -> list[str]:
        """The parameters a launch passes: the kernel's, less its tl.constexpr ones (given or defaulted)."""
        return [n for n in self.fn.arg_names if n not in self.fn.constexpr_names]

    def key(self, target: str) -> str:
        """What decides the compiled kernel: its source, types, constexprs, options and target (a hash)."""
        import hashlib
        import json
        try:
            source = inspect.getsource(self.fn.fn)
        except (OSError, TypeError):
            source = repr(self.fn.fn.__code__.co_code)
        spec = json.dumps([self.fn.fn.__module__, self.fn.fn.__qualname__, source, self.signature, self.wait,
                           sorted(self.constexprs.items(), key=lambda kv: kv[0]), sorted(self.options.items()),
                           target, sorted(self.divisible)], default=repr)
        return hashlib.sha256(spec.encode()).hexdigest()[:20]

    def compile(self, target: str) -> Any:
        return self.fn.compile(signature=self.signature, constexprs=self.constexprs, target=target,
                               divisible=self.divisible, **self.options)


def _template_dtype(name: str, what: str) -> str:
    if name in ("fp8e4m3",):
        return name
    if name not in DTYPES:
        raise _error(f"{what}: element type {name!r} is not supported; use one of {', '.join(DTYPES)}")
    return DTYPES[name][1]


def _pad_args(rec) -> set[str]:
    out = set()
    for part in ("wait", "notify", "reduce_own", "publish"):
        spec = rec.get(part)
        if isinstance(spec, dict):
            for key in ("arg", "done", "pad"):
                if isinstance(spec.get(key), str):
                    out.add(spec[key])
    push = rec.get("push")
    if isinstance(push, dict) and isinstance(push.get("pad"), str):
        out.add(push["pad"])
    if rec.get("split_k", 1) > 1 or rec.get("stream_k", 0):
        out.add("locks")
    return out & set(rec.get("args", []))


def _scalar_args(rec) -> set[str]:
    out = set()
    for part in ("wait", "notify", "reduce_own", "push", "publish"):
        spec = rec.get(part)
        if isinstance(spec, dict):
            for key in ("value_arg",):
                if isinstance(spec.get(key), str):
                    out.add(spec[key])
            peer = spec.get("peer")
            if isinstance(peer, str) and peer.startswith("arg:"):
                out.add(peer[4:])
    for key, value in rec.items():  # copy / reduce offsets given as arguments ("arg:src_row")
        if isinstance(value, str) and value.startswith("arg:"):
            out.add(value[4:])
    return out & set(rec.get("args", []))


def _buffer_args(rec) -> set[str]:
    return set(rec.get("args", [])) - _scalar_args(rec)


def _gemm_operands(rec) -> dict[str, tuple[tuple[int, ...], str]]:
    if rec["template"] != "gemm":
        return {}
    m, n, k = rec["m"], rec["n"], rec["k"]
    b = (n, k) if rec.get("b_trans") else (k, n)
    return {"a": ((m, rec["lda"]), rec["in_dtype"]), "b": ((b[0], rec["ldb"]), rec["in_dtype"]),
            "c": ((m, rec["ldc"]), rec["out_dtype"])}
