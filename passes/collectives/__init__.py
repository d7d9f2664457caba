"""The collectives of ditron-lower-task-to-device: one module per collective (all_gather, reduce_scatter,
all_reduce, all_to_all) and per fused pattern (ag_gemm, gemm_rs, gemm_ar), each registering its algorithms in the
one table keyed by (op, algorithm) (``table.ALGORITHMS``), lowered through the LoweringContext interface
(``context``). A new algorithm is a new module here that registers it (imported below, by the package), plus its
cost formula (ditron.cost_model, chosen by ditron-tile) and its simulator semantics. docs/design.md §3."""
from __future__ import annotations

import importlib
import pkgutil

from .context import LoweringContext
from .table import ALGORITHMS, COLLECTIVES, DEFAULTS, FUSED, algorithms, lower_collective, lower_fused, register

_SUPPORT = {"context", "table", "common"}
for _m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _m not in _SUPPORT:
        importlib.import_module(f"{__name__}.{_m}")

__all__ = ["ALGORITHMS", "COLLECTIVES", "DEFAULTS", "FUSED", "LoweringContext", "algorithms", "lower_collective",
           "lower_fused", "register"]
