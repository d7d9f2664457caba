"""ditron.backends.nvidia: cuda:80 and cuda:90 (sm_90a). Options, the stage driver into Triton's CUDA backend, and
the lowering of ditron_core primitives (primitives.py: the only place their PTX-level choices live)."""
from .backend import NvidiaBackend, NvidiaOptions
from .facts import VENDOR

BACKEND = NvidiaBackend  # the vendor table's backend (backends/facts.py)

__all__ = ["BACKEND", "NvidiaBackend", "NvidiaOptions", "VENDOR"]
