"""Kernel launches: from a ``ditron.kernel`` record to the tile programs the simulator runs.

A launch's operands map positionally to the record's argument names: memref operands become buffers (by key),
index operands become the integer scalars the template's ``tiles()`` receives. The template is found by the
record's template name in ``ditron.kernels.<name>`` (or in the ``templates`` given to ``simulate``, which take
precedence), and ``tiles(record, rank=, num_ranks=, scalars=)`` gives each program's ordered TileSteps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..kernels import TileStep, get_template
from ..errors import DitronError
from .report import Loc, SimulationError


def record_get(record: Any, key: str, default: Any = None) -> Any:
    """A field of a kernel record, whether the record is a mapping or an object with attributes."""
    if isinstance(record, Mapping):
        return record.get(key, default)
    if hasattr(record, "get") and callable(record.get):
        try:
            return record.get(key, default)
        except TypeError:
            pass
    return getattr(record, key, default)


def arg_names(record: Any) -> list[str]:
    args = record_get(record, "args")
    if args is None:
        raise KeyError("args")
    out = []
    for a in args:
        if isinstance(a, str):
            out.append(a)
        elif isinstance(a, Mapping) and "name" in a:
            out.append(str(a["name"]))
        elif hasattr(a, "name"):
            out.append(str(a.name))
        else:
            raise ValueError(f"cannot read the name of kernel argument {a!r}")
    return out


def template_name(record: Any) -> str:
    for key in ("template", "kind", "name"):
        v = record_get(record, key)
        if isinstance(v, str):
            return v
    raise KeyError("template")


def find_template(name: str, templates: Mapping[str, Any] | None):
    """The object or module whose ``tiles`` implements template ``name``: the caller's ``templates``, else
    ``ditron.kernels.get_template`` (None for a name it does not know)."""
    if templates and name in templates:
        return templates[name]
    try:
        return get_template(name)
    except KeyError:
        return None


@dataclass
class LaunchPlan:
    """What one launch on one rank runs: the programs' tiles and how kernel argument names resolve."""

    kernel: str
    template: str
    programs: list[list[TileStep]]
    buffers: dict[str, Any]      # kernel arg name -> buffer key
    scalars: dict[str, int]
    grid_size: int


def plan_launch(kernel_info, operands: list[Any], *, grid: tuple[int, ...], rank: int, num_ranks: int,
                loc: Loc, templates: Mapping[str, Any] | None) -> LaunchPlan:
    record = kernel_info.record
    name = kernel_info.name
    try:
        names = arg_names(record)
        tname = template_name(record)
    except (KeyError, ValueError) as err:
        raise SimulationError.at(kernel_info.loc, f"kernel '@{name}': its record does not name its template and "
                                                  f"arguments ({err})") from None
    if len(names) != len(operands):
        raise SimulationError.at(
            loc, f"launch of '@{name}' passes {len(operands)} operand(s) but the kernel's record names {len(names)} "
            f"argument(s) ({', '.join(names)})")
    template = find_template(tname, templates)
    if template is None:
        raise SimulationError.at(loc, f"kernel '@{name}' uses template '{tname}', which ditron.kernels does not "
                                      f"define")
    buffers, scalars = {}, {}
    for n, v in zip(names, operands):
        if isinstance(v, tuple):
            buffers[n] = v
        else:
            scalars[n] = int(v)
    try:
        programs = template.tiles(record, rank=rank, num_ranks=num_ranks, scalars=dict(scalars))
    except DitronError as err:
        raise SimulationError.at(loc, f"template '{tname}' cannot describe the launch of '@{name}' on rank {rank}: "
                                      f"{err}") from None
    except (KeyError, ValueError, TypeError, IndexError) as err:
        raise SimulationError.at(loc, f"template '{tname}' failed to describe the tiles of '@{name}' on rank "
                                      f"{rank}: {type(err).__name__}: {err} (scalars: {scalars})") from None
    return LaunchPlan(name, tname, [list(p) for p in programs], buffers, scalars, math.prod(grid))
