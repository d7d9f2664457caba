"""ditron.dialects: the three ditron dialects (IRDL specs + typed builders/accessors), their verifiers, and the one
factory of MLIR contexts that loads them."""
from .context import DIALECT_NAMESPACES, ditron_context, parse_file, parse_module

__all__ = ["DIALECT_NAMESPACES", "ditron_context", "parse_file", "parse_module"]
