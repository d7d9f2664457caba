"""Which ranks a device program connects: the simulated world is the whole mesh, its collectives run per group.

A device program runs over one mesh axis (its ``ditron.axis``, docs/device_ir.md): ``ditron_device.rank`` and
``num_ranks`` are the rank's index within its group along that axis and the group's size, and every rank a copy,
signal, barrier or kernel names is a member of that group. The simulator runs every rank of the mesh (numbered
row-major, as ``ditron.reference`` numbers them), so a dp x tp program whose collectives run over tp is two
independent tp groups of two ranks, each with its own buffers and pads.

The inputs it draws follow each argument's ``ditron.layout``: ranks that hold the same shard (replicas, along the
mesh axes the layout does not use) get the same values, and the padding of padded layouts is zero, as the
runtime and the reference have it; ranks along a ``partial`` axis hold different summands. Float inputs are
standard normal, rounded to their type; bf16 ones are drawn as 16-bit indices into ``bf16_normal()`` (65536
normal quantiles in bf16, four from each raw 64-bit draw: ``bf16_values``), the same distribution at a tenth of
the cost of drawing and rounding float32 values.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..dialects.sharding import Mesh
from ..reference import axis_group, block_index, rank_coords
from .memory import round_to
from .program import ArgSpec, Program
from .report import SimulationError


@dataclass(frozen=True)
class Groups:
    """The world of a simulation: per (global) rank, its group's members, ordered by their coordinate on the
    program's axis (one group of every rank when the module has no mesh)."""

    members: tuple[tuple[int, ...], ...]
    mesh: Mesh | None = None
    axis: str | None = None

    @property
    def world_size(self) -> int:
        return len(self.members)

    def local(self, rank: int) -> int:
        """rank's index within its group (what ditron_device.rank gives it)."""
        return self.members[rank].index(rank)

    def size(self, rank: int) -> int:
        """The size of rank's group (what ditron_device.num_ranks gives it)."""
        return len(self.members[rank])

    def peer(self, rank: int, local: int) -> int | None:
        """The global rank of member ``local`` of rank's group, or None if the group has no such member."""
        group = self.members[rank]
        return group[local] if 0 <= local < len(group) else None

    def scope(self) -> str:
        """How to name a group in messages: 'the world' on one group, else 'its group over axis ...'."""
        return "the world" if len(set(self.members)) == 1 else f"its group over mesh axis '{self.axis}'"


def describe_mesh(mesh: Mesh) -> str:
    return " x ".join(f"{a}={n}" for a, n in zip(mesh.axes, mesh.shape))


def groups_of(program: Program, world_size: int) -> Groups:
    """The groups of ``program`` in a world of ``world_size`` ranks; with a mesh, that must be the mesh's size."""
    mesh = program.mesh
    if mesh is None:
        every = tuple(range(world_size))
        return Groups(tuple(every for _ in every))
    if world_size != mesh.size:
        raise SimulationError.at(program.loc, f"world_size {world_size}: @{program.name} is written for the "
                                              f"{mesh.size} rank(s) of its ditron.mesh ({describe_mesh(mesh)}); "
                                              f"the simulator runs the whole mesh")
    axis = program.axis
    if axis is None:
        if len(mesh.axes) != 1:
            raise SimulationError.at(program.loc, f"@{program.name} names no ditron.axis, and its mesh "
                                                  f"({describe_mesh(mesh)}) has several axes: which groups its "
                                                  f"ranks form is not known")
        axis = mesh.axes[0]
    return Groups(tuple(tuple(axis_group(mesh, r, axis)) for r in range(mesh.size)), mesh, axis)


# ------------------------------------------------------------------------------------------------ inputs

def _holder(spec: ArgSpec, groups: Groups, rank: int) -> tuple[int, ...]:
    """What identifies the shard rank holds: its coordinates on the axes the layout uses (replicas share them);
    without a layout, the rank itself."""
    if spec.layout is None or groups.mesh is None:
        return (1, rank)
    coords = rank_coords(groups.mesh, rank)
    return (0, *(coords[a] for a in spec.layout.axes_used()))


@functools.cache
def bf16_normal() -> np.ndarray:
    """The standard normal distribution's quantiles at (i + 1/2) / 65536, i = 0 .. 65535, rounded to bf16 (float32
    storage): a bf16 value drawn as ``bf16_normal()[uniform 16-bit index]`` is normal, to the resolution of bf16.
    The quantile function is Acklam's rational approximation (relative error below 1.2e-9, far under bf16's)."""
    a = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
         -3.066479806614716e+01, 2.506628277459239e+00)
    b = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
         -1.328068155288572e+01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
         4.374664141464968e+00, 2.938163982698783e+00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)
    p = (np.arange(1 << 16, dtype=np.float64) + 0.5) / (1 << 16)
    q = np.minimum(p, 1 - p)
    tail = q < 0.02425
    t = np.sqrt(-2 * np.log(np.where(tail, q, 0.5)))  # the tails, below the lower break point (by symmetry)
    x_tail = (((((c[0] * t + c[1]) * t + c[2]) * t + c[3]) * t + c[4]) * t + c[5]) / \
        ((((d[0] * t + d[1]) * t + d[2]) * t + d[3]) * t + 1)
    x_tail = np.where(p < 0.5, x_tail, -x_tail)
    u = p - 0.5
    r = u * u
    x_mid = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * u / \
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    out = np.where(tail, x_tail, x_mid).astype(np.float32)
    round_to("bf16", out)
    return out


def bf16_values(rng: np.random.Generator, shape) -> np.ndarray:
    """Standard normal bf16 values (float32 storage) of ``shape``: ``bf16_normal()`` at uniform 16-bit indices, four
    of them from each raw 64-bit draw of rng's bit generator (a third of the time of ``rng.integers``), gathered
    straight into the result."""
    n = int(np.prod(shape, dtype=np.int64))
    index = rng.bit_generator.random_raw((n + 3) // 4).view(np.uint16)[:n].reshape(shape)
    out = np.empty(shape, dtype=np.float32)
    np.take(bf16_normal(), index, out=out)
    return out


def random_inputs(program: Program, world_size: int, seed: int, call: int) -> list[list[np.ndarray]]:
    """Seeded random inputs, different for every call (so stale data from an earlier call shows) and every shard,
    equal on the replicas of a shard and zero in padding (see the module doc); an argument without a layout gets
    different values on every rank."""
    groups = groups_of(program, world_size)
    out: list[list[np.ndarray]] = [[] for _ in range(world_size)]
    for spec in program.inputs:
        shape = spec.type.shape
        if any(s < 0 for s in shape):
            raise SimulationError(f"input argument {spec.index} of @{program.name} has a dynamic shape; pass "
                                  f"inputs= explicitly")
        for r in range(world_size):
            rng = np.random.default_rng([seed, call, spec.index, *_holder(spec, groups, r)])
            if spec.type.elem.startswith(("i", "ui")):  # integer inputs are sizes (grouped_matmul's groups)
                x = rng.integers(0, 9, size=shape).astype(np.float64)
            elif spec.type.elem == "bf16":
                x = bf16_values(rng, shape)
            else:
                x = rng.standard_normal(size=shape, dtype=np.float32)
                round_to(spec.type.elem, x)
            inside = valid_region(spec, groups, r)
            if inside is not None:  # padded: zero past the end of the global tensor
                x, padded = np.zeros_like(x), x
                x[inside] = padded[inside]
            out[r].append(x)
    return out


def valid_region(spec: ArgSpec, groups: Groups, rank: int) -> tuple[slice, ...] | None:
    """The part of rank's shard of an argument that lies inside the global tensor (None: all of it)."""
    if spec.layout is None or spec.global_shape is None or groups.mesh is None:
        return None
    coords = rank_coords(groups.mesh, rank)
    out = []
    for d, size in enumerate(spec.global_shape):
        local = spec.type.shape[d]
        out.append(slice(0, min(max(size - block_index(spec.layout, d, coords, groups.mesh) * local, 0), local)))
    return tuple(out)
