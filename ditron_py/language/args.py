"""The arguments of a world launch, shared by ``simulate`` (CPU) and ``run_virtual`` (GPU): the grid, every rank's
arguments by name, and where each array argument lives in every rank's symmetric heap. numpy only (no MLIR, no
torch): each function raises ``error`` (the caller's exception class) on bad input."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

HEAP_ALIGN = 128          # bytes between arrays of a heap (and the heap base alignment)

NP_TO_TL = {"float32": "float32", "float16": "float16", "float64": "float64", "int8": "int8", "int16": "int16",
             "int32": "int32", "int64": "int64", "uint8": "uint8", "uint16": "uint16", "uint32": "uint32",
             "uint64": "uint64", "bool": "int1"}


def heap_layout(kernel, args_per_rank, error=ValueError) -> tuple[dict[str, tuple[int, np.dtype, tuple]], int]:
    """Where each array argument lives in every rank's symmetric heap: ({name: (byte offset, dtype, shape)},
    the heap's size). Every rank must give the same dtype and shape for an array argument."""
    layout: dict[str, tuple[int, np.dtype, tuple]] = {}
    offset = 0
    for r, args in enumerate(args_per_rank):
        for name in kernel.arg_names:
            a = args[name]
            if isinstance(a, np.ndarray):
                if str(a.dtype) not in NP_TO_TL:
                    raise error(f"argument '{name}' of rank {r} has dtype {a.dtype}; supported: "
                                f"{', '.join(NP_TO_TL)}")
                spec = (a.dtype, a.shape)
                if name not in layout:
                    layout[name] = (offset, *spec)
                    offset += -(-max(a.nbytes, 1) // HEAP_ALIGN) * HEAP_ALIGN + HEAP_ALIGN
                elif layout[name][1:] != spec:
                    raise error(f"argument '{name}' is a symmetric array: every rank needs the same "
                                f"dtype and shape (rank 0: {layout[name][1]} {layout[name][2]}, rank "
                                f"{r}: {a.dtype} {a.shape})")
            elif name in layout:
                raise error(f"argument '{name}' is an array on rank 0 but {type(a).__name__} on rank "
                            f"{r}")
    return layout, max(offset, HEAP_ALIGN)


def grid3(grid, error=ValueError) -> tuple[int, int, int]:
    g = (grid,) if isinstance(grid, int) else tuple(grid)
    if not 1 <= len(g) <= 3 or not all(isinstance(n, int) and n >= 1 for n in g):
        raise error(f"grid must be 1 to 3 positive integers, got {grid!r}")
    return tuple(g) + (1,) * (3 - len(g))


def per_rank_args(kernel, args_per_rank, world: int, error=ValueError) -> list[dict[str, Any]]:
    rows = [args_per_rank(r) for r in range(world)] if callable(args_per_rank) else list(args_per_rank)
    if len(rows) != world:
        raise error(f"args_per_rank has {len(rows)} entries for a world of {world} ranks")
    out = []
    for r, row in enumerate(rows):
        if not isinstance(row, Mapping):
            row = list(row)
            if len(row) > len(kernel.arg_names):
                raise error(f"rank {r} gives {len(row)} arguments; kernel '{kernel.__name__}' "
                            f"takes {len(kernel.arg_names)} ({', '.join(kernel.arg_names)})")
            row = dict(zip(kernel.arg_names, row))
        row = {**{n: v for n, v in kernel.defaults.items() if n not in row}, **row}
        missing = [n for n in kernel.arg_names if n not in row]
        extra = [n for n in row if n not in kernel.arg_names]
        if missing or extra:
            raise error(f"rank {r}: " + "; ".join(
                ([f"missing argument(s) {', '.join(missing)}"] if missing else [])
                + ([f"unknown argument(s) {', '.join(extra)}"] if extra else [])))
        out.append({n: (np.array(v, copy=True) if isinstance(v, np.ndarray) else
                        (np.asarray(v.detach().cpu().numpy()).copy() if hasattr(v, "detach") else v))
                    for n, v in row.items()})
    return out
