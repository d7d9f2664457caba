"""ditron: a compiler for distributed tensor programs that generates Triton kernels.

The public API is imported lazily so that loading and running a compiled artifact needs torch + triton only.
"""
from .errors import (CompileError, DitronError, DitronRuntimeError, ParseError, PassError, TargetError,
                     VerificationError, WaitTimeoutError)

__version__ = "0.1.0"

__all__ = ["CompileError", "DitronError", "DitronRuntimeError", "ParseError", "PassError", "TargetError",
           "VerificationError", "WaitTimeoutError", "__version__"]
