"""ditron.backends.amd: hip:gfx942 and hip:gfx950. Options, the stage driver into Triton's HIP backend, and the
lowering of ditron_core primitives (primitives.py: the only place their GCN-level choices live)."""
from .backend import AmdBackend, AmdOptions
from .facts import VENDOR

BACKEND = AmdBackend  # the vendor table's backend (backends/facts.py)

__all__ = ["BACKEND", "AmdBackend", "AmdOptions", "VENDOR"]
