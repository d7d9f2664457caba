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

    def record(self, *, tile_order: str | None, sm_budget: int | None, target: str, where) -> Any:
        """The template's checked record for a launch with this tile order and SM budget, tiled for the program's
        ``target``. A GEMM given none of its tile fields takes the tiles ditron-tile's cost model picks for its
        shape on its SM budget (``gemm_model_fields``), as the built-in patterns' GEMMs do."""
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
        if "target" in params:
            if fields.get("target", target) != target:
                raise _error(f"the {self.template} kernel is given target {fields['target']!r} in a program for "
                             f"{target!r}: drop target= (the program's target tiles its kernels)", where)
            fields["target"] = target
        if self.template == "gemm":
            fields = {**gemm_model_fields(self.args, fields, target), **fields}
        try:
            return module.make_record(*self.args, **fields)
        except DitronError as err:
            raise _error(f"{self.template} kernel: {err}", where) from None
        except TypeError as err:  # an unknown field or a missing one
            raise _error(f"{self.template} kernel: {err}", where) from None


# the GEMM record fields that make its tile: given any of them, the user tiles it (the template fills the rest)
_GEMM_TILE_FIELDS = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages")


def gemm_model_fields(args: tuple, fields: dict[str, Any], target: str) -> dict[str, Any]:
    """The tile fields of a builder GEMM (m, n, k = ``args``) that the user left out: none where any tile field is
    given, else the cost model's tile for the shape on the GEMM's SM budget (its ``num_sms``, else every SM of
    the target: ``ditron.tiling.gemm_config``) and persistence by ditron-tile's rule (persistent where its tiles
    wait or notify, or fill more than one wave with rows TMA can load) -- like-for-like with the GEMMs of the built-in patterns."""
    if any(f in fields for f in _GEMM_TILE_FIELDS) or fields.get("in_dtype", "bf16") not in ("bf16", "f16"):
        return {}
    from ..cost_model import gemm_tiles, peaks_for
    from ..kernels.gemm.configs import tma_loads
    from ..tiling import gemm_config
    m, n, k = args
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (m, n, k)):
        return {}  # the template's own check reports the shape
    sms = fields.get("num_sms") or peaks_for(target).num_sms
    cfg = gemm_config(m, n, k, fields.get("in_dtype", "bf16"), target, sms=sms)
    waits = any(fields.get(f) for f in ("wait", "notify", "reduce_own", "push"))
    aligned = tma_loads(fields.get("lda") or k, fields.get("ldb") or (k if fields.get("b_trans") else n), 2)
    return dict(block_m=cfg.block_m, block_n=cfg.block_n, block_k=cfg.block_k, group_m=cfg.group_m,
                num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                persistent=waits or (gemm_tiles(m, n, cfg) > sms and aligned))


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
    module: str | None = None            # the module the kernel was defined in, when loaded again by file path

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
        spec = json.dumps([self.module or self.fn.fn.__module__, self.fn.fn.__qualname__, source,
                           sorted(self.signature.items()), sorted((self.wait or {}).items()),
                           sorted(self.constexprs.items(), key=lambda kv: kv[0]), sorted(self.options.items()),
                           target, sorted(self.divisible)], default=repr)
        return hashlib.sha256(spec.encode()).hexdigest()[:20]

    def compile(self, target: str) -> Any:
        return self.fn.compile(signature=self.signature, constexprs=self.constexprs, target=target,
                               divisible=self.divisible, **self.options)

    def source(self, target: str) -> dict[str, Any] | None:
        """Where the kernel's Python function is and how it is specialised (the declaration's ``source``): what
        another process needs to find the kernel again (``resolve``); None for a kernel defined inside a function
        or specialised with values IR attributes cannot hold."""
        fn = self.fn.fn
        if "<locals>" in fn.__qualname__:
            return None
        plain = (bool, int, float, str)
        if not all(isinstance(v, plain) for v in (*self.constexprs.values(), *self.options.values())):
            return None
        return {"module": self.module or fn.__module__, "qualname": fn.__qualname__, "file": fn.__code__.co_filename,
                "target": target, "signature": dict(self.signature), "constexprs": dict(self.constexprs),
                "options": dict(self.options), "divisible": sorted(self.divisible), "where": list(self.where)}


def resolve(name: str, key: str, source: dict[str, Any] | None) -> "JitKernel":
    """The JitKernel a declaration names: this process's (``JIT_KERNELS``, by key), else the one its source record
    says -- its module imported (by name, else from its file) and specialised as recorded, checked to be the very
    kernel the IR was built with (same key: source text, types, constexprs, options, divisibility, target). DitronError
    otherwise, saying why."""
    k = JIT_KERNELS.get(key)
    if k is not None:
        return k
    if not source:
        raise DitronError(f"the program launches @{name}, a @ditron.jit kernel whose Python function is not in this "
                          "process (the IR names it only, with no source record): build the ditron.device Program in "
                          "this process (ditron.compile(program), program.simulate())")
    fn = _find_function(name, source)
    where = tuple(source.get("where") or (source["file"], 1, 1))
    k = JitKernel(fn, dict(source["signature"]), dict(source["constexprs"]), dict(source["options"]), where,
                  divisible=frozenset(source.get("divisible", ())), module=source["module"])
    for wait in (None, *_waits(key, source)):
        k.wait = wait
        if k.key(source["target"]) == key:
            JIT_KERNELS[key] = k
            return k
    raise DitronError(f"@{name}: {source['module']}.{source['qualname']} ({source['file']}) is no longer the kernel "
                      "the IR was built with (its source, types, constexprs or options changed): build the IR again")


def _waits(key: str, source: dict[str, Any]) -> list[dict[str, str]]:
    w = source.get("wait")
    return [dict(w)] if isinstance(w, dict) else []


def _find_function(name: str, source: dict[str, Any]) -> Any:
    import importlib
    import importlib.util
    import os
    import sys
    module = sys.modules.get(source["module"]) if source["module"] != "__main__" else None
    if module is None and source["module"] != "__main__":
        try:
            module = importlib.import_module(source["module"])
        except ImportError:
            module = None
    if module is None:
        path = source["file"]
        if not os.path.exists(path):
            raise DitronError(f"@{name}: the @ditron.jit kernel's module '{source['module']}' cannot be imported and "
                              f"its file {path} does not exist: run where the kernel's source is")
        spec = importlib.util.spec_from_file_location(f"_ditron_jit_{abs(hash(path))}", path)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(path))
        try:
            spec.loader.exec_module(module)
        except Exception as err:  # noqa: BLE001 - reported as the reason
            raise DitronError(f"@{name}: loading {path} (the @ditron.jit kernel's source) failed: "
                              f"{type(err).__name__}: {err}") from None
        finally:
            sys.path.remove(os.path.dirname(path))
    obj: Any = module
    for part in source["qualname"].split("."):
        obj = getattr(obj, part, None)
    if obj is None or not hasattr(obj, "constexpr_names"):
        raise DitronError(f"@{name}: {source['module']} has no @ditron.jit kernel {source['qualname']}")
    return obj


def _template_dtype(name: str, what: str) -> str:
    if name in ("fp8e4m3", "fp8e5m2"):
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
