"""ditron: a compiler for distributed tensor programs that generates Triton kernels.

The public API is imported lazily so that loading and running a compiled artifact needs torch + triton only:
``ditron.load`` / ``ditron.Executable`` never import the MLIR bindings; ``ditron.compile`` does, when called.
"""
from .errors import (CompileError, DitronError, DitronRuntimeError, ParseError, PassError, TargetError,
                     VerificationError, WaitTimeoutError)

__version__ = "0.1.0"

# public name -> (module, attribute), imported on first access
_LAZY = {
    "compile": ("ditron.api", "compile"),
    "Executable": ("ditron.runtime.loader", "Executable"),
    "load": ("ditron.runtime.loader", "load_artifact"),
    "World": ("ditron.runtime.world", "World"),
    "jit": ("ditron.language.jit", "jit"),
}


# submodules reachable as attributes of ``ditron`` without an import of their own (no MLIR needed)
_SUBMODULES = ("tiling",)


def __getattr__(name: str):
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module(f"ditron.{name}")
    if name in _LAZY:
        import importlib
        module_name, attr = _LAZY[name]
        value = getattr(importlib.import_module(module_name), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ditron' has no attribute '{name}'")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))


__all__ = ["CompileError", "DitronError", "DitronRuntimeError", "Executable", "ParseError", "PassError",
           "TargetError", "VerificationError", "WaitTimeoutError", "World", "__version__", "compile", "jit", "load"]
