"""ditron.runtime: loading and running compiled artifacts with torch + triton only (never the MLIR bindings)."""
from .loader import Executable, Kernel, load, load_artifact

__all__ = ["Executable", "Kernel", "load", "load_artifact"]
