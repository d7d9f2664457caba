"""``@ditron.jit``: a kernel written in Triton's language plus ditron.language, compiled by stock Triton.

    @ditron.jit
    def k(x_ptr, pad_ptr, n, BLOCK: tl.constexpr):
        ...

    k.ttir(signature={"x_ptr": "*fp32", "pad_ptr": "*i32", "n": "i32"}, constexprs={"BLOCK": 128},
           target="cuda:90")                                     -> TTIR text (stock Triton, hidden args appended)
    k.compile(signature=..., constexprs=..., target="hip:gfx942", num_warps=4)
                                                                 -> ditron.backends.CompiledKernel
    k.emit("ptx", signature=..., constexprs=..., target="cuda:90") -> the text of one stage
    k.abi                                                         -> [["rank", "i32"], ...] (metadata["abi"])
    k.runtime_arg_names                                           -> the compiled kernel's own parameters

The compiled kernel's parameters are the user's non-constexpr parameters in order, then the hidden arguments of
``ditron.schema.APPENDED_ARGS`` (all six, always, in that order); ``metadata["abi"]`` names them as
ditron.compile's kernels do, so the executor binds them by kind. ``signature`` takes Triton's type strings
("*fp16", "i32", ...); ``constexprs`` the values of the ``tl.constexpr`` parameters.

Launching needs a world: ``k[grid](...)`` raises a clear error (DitronRuntimeError) -- run a @ditron.jit kernel
with ``ditron.language.run_virtual`` (W ranks on one GPU) or through the device-level builder's executor, or
check it on the CPU with ``ditron.language.simulate``.
"""
from __future__ import annotations

import ast
import inspect
from typing import Any, Iterable, Mapping

from triton.runtime.jit import JITFunction

from ..errors import CompileError, Diagnostic, DitronRuntimeError
from ..schema import APPENDED_ARGS
from . import specialize, tracing

ABI = [[name, kind] for name, kind in zip(APPENDED_ARGS, ("i32", "i32", "*i64", "i64", "*i32", "i32"))]


class _TracedJIT(JITFunction):
    """Triton's JITFunction whose AST starts with ``tracing.kernel_entry()`` (appends the hidden arguments)."""

    def parse(self):
        tree = super().parse()
        func = tree.body[0]
        entry = ast.Expr(ast.Call(func=ast.Constant(value=tracing.kernel_entry), args=[], keywords=[]))
        ast.copy_location(entry, func.body[0])
        ast.fix_missing_locations(entry)
        func.body.insert(0, entry)
        return tree


setattr(_TracedJIT, tracing.KERNEL_MARK, True)


def _located(err: Exception, jit: JITFunction) -> CompileError:
    """Triton's CompilationError as a CompileError located at the kernel's source line."""
    from triton.compiler.errors import CompilationError
    from triton.runtime.jit import get_jit_fn_file_line
    file, begin = get_jit_fn_file_line(jit)
    chain, inner = [], err
    while inner is not None:
        chain.append(inner)
        inner = inner.__cause__
    node = next((e.node for e in chain if isinstance(e, CompilationError) and e.node is not None
                 and hasattr(e.node, "lineno")), None)
    messages = [str(e) if not isinstance(e, CompilationError) else (e.error_message or "") for e in chain]
    message = next((m for m in reversed(messages) if m), type(err).__name__).strip().splitlines()[-1]
    if node is None:
        return CompileError(message)
    line, col = begin + node.lineno - 1, node.col_offset + 1
    return CompileError(message, [Diagnostic(message, file, line, col)])


class DitronJITFunction:
    """A ``@ditron.jit`` kernel (see the module docstring)."""

    def __init__(self, fn, do_not_specialize=None, do_not_specialize_on_alignment=None):
        if not inspect.isfunction(fn):
            raise TypeError(f"@ditron.jit decorates a Python function, got {type(fn).__name__}")
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.traced = _TracedJIT(fn)
        self.arg_names = list(self.traced.arg_names)
        self.constexpr_names = [p.name for p in self.traced.params if p.is_constexpr]
        self.do_not_specialize = specialize.resolve_params(fn.__name__, self.arg_names, do_not_specialize,
                                                           "do_not_specialize")
        self.do_not_specialize_on_alignment = specialize.resolve_params(
            fn.__name__, self.arg_names, do_not_specialize_on_alignment, "do_not_specialize_on_alignment")
        for name in self.do_not_specialize + self.do_not_specialize_on_alignment:
            if name in self.constexpr_names:
                raise TypeError(f"@ditron.jit of '{fn.__name__}': '{name}' is a tl.constexpr parameter (its value "
                                "is part of the kernel); do_not_specialize lists runtime parameters")
        self.defaults = {name: p.default for name, p in inspect.signature(fn).parameters.items()
                         if p.default is not inspect.Parameter.empty}

    def __repr__(self) -> str:
        return f"<ditron.jit kernel {self.fn.__module__}.{self.__name__}>"

    @property
    def abi(self) -> list[list[str]]:
        """The hidden arguments appended to the compiled kernel: [[name, type], ...] (metadata["abi"])."""
        return [list(entry) for entry in ABI]

    @property
    def runtime_arg_names(self) -> list[str]:
        """The compiled kernel's own parameters, in order (the non-constexpr ones), before the hidden ones:
        ``ditron.api.kernel_abi(compiled, user_names=k.runtime_arg_names)`` names every argument for an
        artifact."""
        return [n for n in self.arg_names if n not in self.constexpr_names]

    # -- compiling
    def specialization(self, values: Mapping[str, Any]) -> frozenset[str]:
        """The parameters stock Triton would compile as ``tt.divisibility = 16`` for these argument values
        (``{name: value}``: tensors by their ``data_ptr()``, ints by their value), respecting do_not_specialize
        and do_not_specialize_on_alignment: give it as ``divisible=`` to ``ttir`` / ``compile`` / ``emit``."""
        return specialize.divisible(self, values)

    def _source(self, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None,
                divisible: Iterable[str] = ()):
        from triton.compiler.compiler import ASTSource
        constexprs = {**{n: v for n, v in self.defaults.items() if n in self.constexpr_names and n not in signature},
                      **(constexprs or {})}
        unknown = sorted(set(signature) - set(self.arg_names)) + sorted(set(constexprs) - set(self.arg_names))
        if unknown:
            raise CompileError(f"kernel '{self.__name__}' has no parameter {', '.join(map(repr, unknown))}; its "
                               f"parameters: {', '.join(self.arg_names)}")
        missing = [n for n in self.arg_names if n not in signature and n not in constexprs]
        if missing:
            raise CompileError(f"kernel '{self.__name__}': give the type of {', '.join(map(repr, missing))} in "
                               f"signature= (e.g. '*fp32', 'i32') or its value in constexprs=")
        not_constexpr = [n for n in constexprs if n not in self.constexpr_names]
        if not_constexpr:
            raise CompileError(f"kernel '{self.__name__}': {', '.join(map(repr, not_constexpr))} "
                               f"{'is' if len(not_constexpr) == 1 else 'are'} not tl.constexpr parameters; give "
                               f"{'its' if len(not_constexpr) == 1 else 'their'} type in signature=")
        sig = {n: ("constexpr" if n in constexprs else signature[n]) for n in self.arg_names}
        names = specialize.check_names(self, divisible, sig)
        return ASTSource(self.traced, signature=sig, constexprs={(self.arg_names.index(n),): v
                                                                 for n, v in constexprs.items()},
                         attrs=specialize.attrs(self, names))

    def ttir(self, *, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None = None,
             target: str = "cuda:90", divisible: Iterable[str] = (), **options: Any) -> str:
        """The kernel as stock TTIR (Triton's printed form, with source locations), before Triton's passes.
        ``divisible``: the pointer / integer parameters assumed multiples of 16 (``tt.divisibility = 16``, the
        variant stock Triton compiles for such arguments; ``specialization(values)`` computes them)."""
        from triton._C.libtriton import ir as tir
        from triton.compiler.compiler import make_backend

        from ..backends import Target, get_backend
        tgt = Target.parse(target)
        backend = get_backend(tgt)
        opts = backend.options(**options)
        src = self._source(signature, constexprs, divisible)
        tb = make_backend(tgt.gpu_target())
        topts = tb.parse_options(opts.triton_options())
        ctx = tir.context()
        tir.load_dialects(ctx)
        tb.load_dialects(ctx)
        token = tracing.current_target.set(tgt)
        try:
            module = src.make_ir(tgt.gpu_target(), topts, tb.get_codegen_implementation(topts), tb.get_module_map(),
                                 ctx)
        except Exception as err:  # noqa: BLE001 - Triton raises CompilationError (and bare errors) here
            raise _located(err, self.traced) from None
        finally:
            tracing.current_target.reset(token)
        return str(module)

    def compile(self, *, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None = None,
                target: str = "cuda:90", divisible: Iterable[str] = (), dump_dir=None, **options: Any):
        """The kernel compiled for target through all of Triton's stages: a ``ditron.backends.CompiledKernel``
        (binary, asm per stage, launch metadata with ``abi`` and, under ``specialize.METADATA_KEY``, the
        ``divisible`` parameters it assumes: the executor checks them before each launch). options: the
        backend's (num_warps, num_stages ...)."""
        from ..backends import get_backend
        text = self.ttir(signature=signature, constexprs=constexprs, target=target, divisible=divisible, **options)
        backend = get_backend(target)
        return backend.compile(text, backend.options(**options), dump_dir=dump_dir,
                               metadata={"abi": self.abi, specialize.METADATA_KEY: sorted(divisible)})

    def emit(self, stage: str, *, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None = None,
             target: str = "cuda:90", divisible: Iterable[str] = (), **options: Any) -> str:
        """The text of one stage (ttir, ttgir, llir, ptx | amdgcn) after Triton's passes."""
        from ..backends import get_backend
        text = self.ttir(signature=signature, constexprs=constexprs, target=target, divisible=divisible, **options)
        backend = get_backend(target)
        return backend.emit(text, stage, backend.options(**options))

    # -- launching
    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            raise DitronRuntimeError(
                f"kernel '{self.__name__}' is a @ditron.jit kernel: it runs in a world of ranks (its hidden "
                f"arguments {', '.join(APPENDED_ARGS)} are bound by the executor), not by a plain launch. Launch it "
                f"with ditron.language.run_virtual({self.__name__}, grid, args_per_rank, world=W) on a GPU, or "
                f"check it on the CPU with ditron.language.simulate({self.__name__}, grid, args_per_rank, world=W)")
        return launch

    def __call__(self, *args, **kwargs):
        raise TypeError(f"@ditron.jit kernel '{self.__name__}' cannot be called as a Python function")


def jit(fn=None, *, do_not_specialize=None, do_not_specialize_on_alignment=None, **kwargs):
    """Decorator: a kernel in Triton's language that may use ditron.language primitives. As ``triton.jit``:
    ``do_not_specialize`` (names or indices) -- parameters never specialised on their values;
    ``do_not_specialize_on_alignment`` -- parameters never assumed 16-divisible (docs/language.md §3)."""
    if kwargs:
        raise TypeError(f"@ditron.jit takes only do_not_specialize and do_not_specialize_on_alignment (got "
                        f"{', '.join(kwargs)}); give compile options to .compile()")
    if fn is None:
        return lambda f: DitronJITFunction(f, do_not_specialize, do_not_specialize_on_alignment)
    return DitronJITFunction(fn, do_not_specialize, do_not_specialize_on_alignment)
