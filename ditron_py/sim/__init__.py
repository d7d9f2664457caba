"""ditron.sim: run a device-level program for W ranks on the CPU, with numpy, and find its distributed bugs.

    from ditron.sim import simulate
    result = simulate(text_or_module_or_path, world_size=4, seed=0, calls=2,
                      reference=lambda per_rank_inputs: per_rank_expected_outputs)
    print(result.summary())          # verdict, counts, first findings with file:line:col
    result.outputs[rank]             # the "out" arguments of the last call, per rank

The program runs as docs/device_ir.md says: per rank a host program in program order, streams as ordered queues,
copies, signals (release), waits (acquire), barriers and kernel launches whose programs run tile by tile from their
template's ``tiles()``. The interleaving is chosen by ``seed`` (same seed, same run). Every access is checked
against a happens-before relation built from vector clocks, so a missing wait shows as a race even when the data
happened to arrive in time. Running ``calls`` > 1 times in a row (epoch 1, 2, ...) with fresh inputs catches bugs
that only show when signal pads and buffers are reused. ``graph=True`` runs the calls as the runtime's CUDA graphs
replay them (epoch 1 every call, each signal pad held once per call parity, never zeroed in between): the check of
a program whose pads are consumed (``ditron.consumed``), i.e. cleared by their waiters. With a ``ditron.mesh``,
W is the mesh's size: every rank of it runs, and the program's collectives run within the groups of its
``ditron.axis`` (``sim.groups``, which also draws inputs that follow each argument's ``ditron.layout``).

Findings (``SimResult.findings``): deadlock, read-before-signal, write-write and write-after-read races,
uninitialized reads, out-of-bounds regions, unwritten outputs, mismatches against the reference, and broken rules
of the device IR. Each names the rank, the call, the op location and the region.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from mlir import ir

from ..dialects.context import ditron_context, parse_file, parse_module
from ..dialects.verify import verify
from .groups import groups_of, random_inputs, valid_region
from .memory import round_to
from .products import Sample
from ..reference import Rows
from .program import Program, load
from .report import (DEADLOCK, INVALID, KINDS, MISMATCH, OUT_OF_BOUNDS, RACE_READ, RACE_WAR, RACE_WRITE,
                     UNINITIALIZED, UNWRITTEN_OUTPUT, Finding, Loc, SimResult, SimulationError, describe_region)
from .entities import new_world
from .jit import Session
from .scheduler import World, check_call_inputs

__all__ = ["simulate", "task_reference", "sampling", "SAMPLE_FROM", "SimResult", "Finding", "Loc", "SimulationError", "load_program",
           "run_program", "default_tolerance", "random_inputs", "KINDS", "DEADLOCK", "RACE_READ", "RACE_WRITE",
           "RACE_WAR", "UNINITIALIZED", "OUT_OF_BOUNDS", "UNWRITTEN_OUTPUT", "MISMATCH", "INVALID"]

Inputs = Sequence[Sequence[np.ndarray]]          # per rank, one array per "in" argument
Reference = Callable[[Inputs], Sequence[Sequence[np.ndarray]]]


def load_program(module_or_text: Any, function: str | None = None, *, verify_ir: bool = True) -> Program:
    """Load (and verify) the device function of an ir.Module, MLIR text, or an .mlir file path. ``verify_ir=False``
    skips ditron's verifier for an ir.Module (text is always verified by the parser)."""
    if isinstance(module_or_text, ir.Module):
        if verify_ir:
            verify(module_or_text)
        return load(module_or_text, function)
    with ditron_context():
        if isinstance(module_or_text, os.PathLike) or (
                isinstance(module_or_text, str) and "\n" not in module_or_text and module_or_text.endswith(".mlir")
                and os.path.exists(module_or_text)):
            module = parse_file(os.fspath(module_or_text))
        elif isinstance(module_or_text, str):
            module = parse_module(module_or_text, "<string>")
        else:
            raise SimulationError(f"simulate() takes an ir.Module, MLIR text or an .mlir path, got "
                                  f"{type(module_or_text).__name__}")
        verify(module)
        program = load(module, function)
        del module
    return program


# Element types whose outputs the reference may compute in float32 (task_reference).
NARROW_FLOATS = ("bf16", "f16", "f8E4M3FN", "f8E5M2")


def default_tolerance(elem: str) -> float:
    """Relative tolerance for outputs of type elem (also scaled by the largest reference value for atol)."""
    return {"bf16": 2.0 ** -6, "f16": 2.0 ** -8, "tf32": 2.0 ** -8}.get(elem, 1e-4)


def _prepare(program: Program, world_size: int, inputs, seed: int, calls: int) -> list:
    per_call = []
    for call in range(1, calls + 1):
        owned = inputs is None  # fresh arrays of our own: converted and rounded in place, not copied
        if owned:
            xs = random_inputs(program, world_size, seed, call)
        elif callable(inputs):
            xs = inputs(call)
        else:
            xs = inputs
        check_call_inputs(program, world_size, xs)
        rounded = []
        for per_rank in xs:
            row = []
            for spec, x in zip(program.inputs, per_rank):
                a = (np.asarray if owned else np.array)(
                    x, dtype=np.float64 if spec.type.elem == "f64" else
                    (np.float32 if not spec.type.elem.startswith(("i", "ui")) else np.int64))
                if a.dtype == np.float32:
                    round_to(spec.type.elem, a)
                row.append(a)
            rounded.append(row)
        per_call.append(rounded)
    return per_call


def run_program(program: Program, world_size: int, inputs=None, *, seed: int = 0, calls: int = 2,
                reference: Reference | None = None, rtol: float | None = None, atol: float | None = None,
                templates: Mapping[str, Any] | None = None, num_sms: int | None = None,
                sync_between_calls: bool = False, graph: bool = False, sampled: bool | None = None) -> SimResult:
    """Simulate an already loaded Program (see ``simulate``)."""
    if sampled is None:
        sampled = sampling(program, reference)
    elif sampled and not getattr(reference, "takes_rows", False):
        raise SimulationError("sampled=True needs a reference that computes given rows (task_reference)")
    if world_size < 1:
        raise SimulationError(f"world_size must be >= 1, got {world_size}")
    if calls < 1:
        raise SimulationError(f"calls must be >= 1, got {calls}")
    groups_of(program, world_size)  # a world that is not the program's mesh: refused before anything runs
    per_call = _prepare(program, world_size, inputs, seed, calls)
    sample = Sample(seed) if sampled else None
    world = new_world(program, world_size=world_size, calls=calls, inputs_per_call=per_call, seed=seed,
                      templates=templates, num_sms=num_sms, sync_between_calls=sync_between_calls, graph=graph,
                      sample=sample)
    for spec in program.late_allocs:
        world.report(INVALID, f"alloc_symmetric '{spec.name}' comes after device work was enqueued; allocate "
                     f"every symmetric buffer first (allocating while a kernel spins can deadlock the GPU)",
                     spec.loc, None, None)
    with Session(world):  # the World's @ditron.jit kernel programs (sim.jit), if it launches any
        world.run()
    outputs_per_call = []
    for call in range(1, calls + 1):
        per_rank = []
        for r in range(world_size):
            outs = []
            for spec in program.outputs:
                buf = world.memory.get((("arg", spec.index), r, call))
                if buf is None:  # the host never reached this call (deadlock earlier)
                    outs.append(np.full(spec.type.shape, np.nan, dtype=np.float32))
                    continue
                outs.append(buf.data)  # the world ends with this run: nothing writes it any more
                if not world.deadlocked and not buf.written.all():
                    missing = np.argwhere(~buf.written)
                    region = describe_region(buf.name(), missing.min(axis=0), missing.max(axis=0) + 1)
                    world.report(UNWRITTEN_OUTPUT, f"{int((~buf.written).sum())} element(s) of output argument "
                                 f"{spec.index} were never written, within {region}", program.loc, r, call,
                                 region=region)
            per_rank.append(outs)
        outputs_per_call.append(per_rank)
    compared = False
    if reference is not None and not world.deadlocked:
        compared = True
        for call, (xs, outs) in enumerate(zip(per_call, outputs_per_call), start=1):
            if sample is None:
                expected = reference(xs)
            else:
                expected = reference(xs, [[sample.rows(spec.type.shape[0]) if spec.type.shape else None
                                           for spec in program.outputs] for _ in range(world_size)])
            _compare(world, program, call, outs, expected, rtol, atol)
    if sample is not None and world.findings.total(MISMATCH):
        # a mismatch at a sampled row may come from a row the sampled run did not compute (a program that moves
        # rows by other than multiples of the period): the verdict is the full run's
        del world, outputs_per_call, per_call
        return run_program(program, world_size, inputs, seed=seed, calls=calls, reference=reference, rtol=rtol,
                           atol=atol, templates=templates, num_sms=num_sms, sync_between_calls=sync_between_calls,
                           graph=graph, sampled=False)
    totals = {k: world.findings.total(k) for k in KINDS}
    digest = hashlib.sha1(np.asarray(world.schedule, dtype=np.int64).tobytes()).hexdigest()[:16]
    checked = None if sample is None else (sample.period, sample.residues.tolist())
    return SimResult(world_size, seed, calls, program.name, outputs_per_call, per_call, world.findings.items,
                     world.steps, [f"argument {s.index}" for s in program.outputs], compared, totals, digest,
                     checked)


# Outputs of at least this many elements (per rank) are checked at the rows of a Sample, not whole (sampling).
SAMPLE_FROM = 1 << 22


def sampling(program: Program, reference) -> bool:
    """Does a simulation of program check its outputs at sampled rows (``sim.products.Sample``)? Where the
    reference can compute given rows (``task_reference``) and some output has SAMPLE_FROM elements or more."""
    if not getattr(reference, "takes_rows", False):
        return False
    return any(spec.type.shape and int(np.prod(spec.type.shape)) >= SAMPLE_FROM for spec in program.outputs)


def _compare(world: World, program: Program, call: int, outs, expected, rtol, atol) -> None:
    if len(expected) != world.W:
        raise SimulationError(f"the reference returned {len(expected)} rank(s) of outputs, expected {world.W}")
    for r, (got_r, want_r) in enumerate(zip(outs, expected)):
        if len(want_r) != len(got_r):
            raise SimulationError(f"the reference returned {len(want_r)} output(s) for rank {r}; @{program.name} "
                                  f"has {len(got_r)} output argument(s)")
        for k, (spec, got, want) in enumerate(zip(program.outputs, got_r, want_r)):
            ftype = np.float64 if spec.type.elem == "f64" else np.float32
            rows = None  # the output's rows that the reference computed (Rows), else all of them
            if isinstance(want, Rows):
                rows, want = want.index, want.data
                if got.ndim == 0 or (len(rows) and (rows[0] < 0 or rows[-1] >= got.shape[0])):
                    raise SimulationError(f"the reference output {k} of rank {r} has rows outside output "
                                          f"argument {spec.index} (shape {got.shape})")
                got = got[rows]
            want = np.asarray(want, dtype=ftype)
            if want.shape != got.shape:
                raise SimulationError(f"the reference output {k} of rank {r} has shape {want.shape}, output "
                                      f"argument {spec.index} has shape {got.shape}")
            tol = default_tolerance(spec.type.elem) if rtol is None else rtol
            bound = np.abs(want)
            scale = float(np.max(bound)) if want.size else 0.0
            a_tol = tol * max(scale, 1e-30) if atol is None else atol
            g = got.astype(ftype, copy=False)
            bound *= ftype(tol)
            bound += ftype(a_tol)  # the tolerance of each element: a_tol + tol * |want|
            err = np.subtract(g, want)
            np.abs(err, out=err)
            bad = np.less_equal(err, bound)
            np.logical_not(bad, out=bad)  # NaN counts as bad
            del bound
            inside = valid_region(spec, world.groups, r)
            if inside is not None:  # the padding of a padded output holds f(0), whatever the fn: not compared
                outside = np.ones(spec.type.shape, dtype=bool)
                outside[inside] = False
                if rows is not None:
                    outside = outside[rows]
                bad[outside] = False
                err[outside] = 0
            if not bad.any():
                continue
            err = np.where(np.isnan(err), np.inf, err)
            worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(err)), err.shape)) if err.ndim else ()
            idx = np.argwhere(bad)
            at = worst
            if rows is not None:  # the output's own row numbers
                idx[:, 0] = rows[idx[:, 0]]
                at = (int(rows[worst[0]]), *worst[1:])
            region = describe_region(f"output argument {spec.index}", idx.min(axis=0), idx.max(axis=0) + 1) \
                if bad.ndim else f"output argument {spec.index}"
            among = f"{bad.size}" if rows is None else f"{bad.size} compared (sampled rows)"
            world.report(MISMATCH, f"output argument {spec.index} differs from the reference in "
                         f"{int(bad.sum())}/{among} element(s) within {region}; worst at {list(at)}: got "
                         f"{g[worst]:.6g}, expected {want[worst]:.6g} (tolerance {a_tol:.3g} + {tol:.3g}*|expected|)",
                         program.loc, r, call, region=region)


def task_reference(text: str, function: str | None = None, *, view: str = "auto") -> Reference:
    """A reference from a task-level program, evaluated by ``ditron.reference`` on the (already rounded) inputs:
    in float64, or in float32 where every result is of a float type of 16 bits or fewer (bf16, f16, fp8), whose
    tolerance (2^-6, 2^-8 relative to the largest value) is orders of magnitude above float32's sum error (about
    sqrt(K) 2^-24 over K terms), at half the time and memory. Integer arguments stay float64. Its arguments are the
    device program's "in" arguments and its results the "out" arguments, in order.

    view "spmd": a local-view program (the device program's per-rank shapes), run on every rank in lock step.
    view "global": a global-view program with shardings: each rank's inputs are its shards of the arguments
    (by their ditron.sharding); the global inputs are assembled, evaluated, and each rank expects its shard of
    every result. "auto" picks "spmd" when the function has collectives or no sharded argument, else "global".
    """
    if view not in ("auto", "spmd", "global"):
        raise SimulationError(f"task_reference: view must be 'auto', 'spmd' or 'global', got '{view}'")

    def reference(per_rank_inputs, rows=None):
        """Per rank, the expected outputs; ``rows[r][i]``: only those rows (dim 0) of rank r's output i, as a
        ``reference.Rows`` in the rank's own (local) row numbers (None: the whole output)."""
        from .. import reference as ref
        from ..dialects import task
        from ..dialects.opbase import walk_ops
        from ..dialects.sharding import SHARDING_ATTR, Mesh, Sharding, arg_sharding, result_sharding

        with ditron_context():
            module = parse_module(text, "<reference>")
            funcs = [op.operation for op in module.body.operations if op.operation.name == "func.func"]
            if function is not None:
                funcs = [f for f in funcs if ir.StringAttr(f.attributes["sym_name"]).value == function]
            if len(funcs) != 1:
                raise SimulationError(f"the reference module needs exactly one function"
                                      f"{' named @' + function if function else ''}, found {len(funcs)}")
            fn = funcs[0]
            ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
            elems = [str(ir.ShapedType(t).element_type) for t in ftype.results]
            narrow = bool(elems) and all(e in NARROW_FLOATS for e in elems)
            dtypes = [np.float32 if narrow and str(ir.ShapedType(t).element_type).startswith(("f", "bf"))
                      else np.float64 for t in ftype.inputs]
            xs = [[np.asarray(x, dtype=d) for x, d in zip(per_rank, dtypes)] for per_rank in per_rank_inputs]
            mode = view
            if mode == "auto":
                collectives = {c.op_name() for c in task.COLLECTIVES}
                has_collective = any(op.name in collectives for op in walk_ops(fn))
                sharded = "arg_attrs" in fn.attributes and any(
                    SHARDING_ATTR in ir.DictAttr(d) for d in ir.ArrayAttr(fn.attributes["arg_attrs"]))
                mode = "spmd" if has_collective or not sharded else "global"
            if mode == "spmd":
                out = ref.evaluate_spmd(fn, xs, rows=rows)
            else:
                mesh = Mesh.of_module(module) or Mesh(("world",), (1,))
                if mesh.size != len(xs):
                    raise SimulationError(f"the reference's mesh has {mesh.size} ranks, the simulation "
                                          f"{len(xs)}")
                full = []
                for i, t in enumerate(ftype.inputs):
                    shape = tuple(ir.RankedTensorType(t).shape)
                    sharding = arg_sharding(fn, i) or Sharding.replicated(len(shape))
                    full.append(ref.unshard_array([x[i] for x in xs], sharding, mesh, shape))
                out_shardings = [result_sharding(fn, i) or Sharding.replicated(ir.ShapedType(t).rank)
                                 for i, t in enumerate(ftype.results)]
                shapes = [tuple(ir.RankedTensorType(t).shape) for t in ftype.results]
                wanted = None if rows is None else \
                    [_global_rows(rows, i, out_shardings[i], shapes[i], mesh) for i in range(len(shapes))]
                results = ref.evaluate(fn, full, rows=wanted)
                shards = [_local_rows(y, rows, i, out_shardings[i], shapes[i], mesh)
                          if isinstance(y, ref.Rows) else ref.shard_array(y, out_shardings[i], mesh)
                          for i, y in enumerate(results)]
                out = [[s[r] for s in shards] for r in range(mesh.size)]
            del module, funcs, fn
        return out

    reference.takes_rows = True  # run_program may ask it for some rows of each output (sampling)
    return reference


def _global_rows(rows, i: int, sharding, shape, mesh):
    """The rows of global result i that hold the rows ``rows[r][i]`` of each rank's shard of it (None: every row,
    as for a partial result or one some rank wants whole)."""
    from ..reference import block_index, rank_coords
    if sharding.partial or any(r[i] is None for r in rows):
        return None
    local = sharding.local_shape(shape, mesh)[0]
    wanted = []
    for r, per in enumerate(rows):
        first = block_index(sharding, 0, rank_coords(mesh, r), mesh) * local
        g = first + np.asarray(per[i], dtype=np.int64)
        wanted.append(g[g < shape[0]])
    return np.unique(np.concatenate(wanted)) if wanted else np.zeros(0, np.int64)


def _local_rows(y, rows, i: int, sharding, shape, mesh) -> list:
    """Per rank, ``Rows`` of its shard of a global result computed at some rows (``_global_rows``); rows in the
    padding of a padded shard hold zeros (``shard_array``'s padding)."""
    from ..reference import Rows, _block_slices, rank_coords
    out = []
    for r, per in enumerate(rows):
        slices, local = _block_slices(sharding, shape, rank_coords(mesh, r), mesh)
        idx = np.unique(np.asarray(per[i], dtype=np.int64))
        g = slices[0].start + idx
        data = np.zeros((len(idx), *local[1:]), dtype=y.data.dtype)
        inside = g < shape[0]
        pos = np.searchsorted(y.index, g[inside])
        part = y.data[pos][(slice(None), *slices[1:])]  # the shard's other dims (clipped at a padded end)
        sub = np.zeros((len(pos), *local[1:]), dtype=data.dtype)
        sub[(slice(None), *(slice(0, n) for n in part.shape[1:]))] = part
        data[inside] = sub
        out.append(Rows(idx, data))
    return out


def simulate(module_or_text: Any, world_size: int, inputs=None, *, seed: int = 0, function: str | None = None,
             calls: int = 2, reference: Reference | None = None, rtol: float | None = None,
             atol: float | None = None, templates: Mapping[str, Any] | None = None, num_sms: int | None = None,
             sync_between_calls: bool = False, graph: bool = False, verify_ir: bool = True,
             sampled: bool | None = None) -> SimResult:
    """Run a device-level program for ``world_size`` ranks on the CPU.

    module_or_text: an ir.Module (in the caller's context), MLIR text, or the path of an .mlir file.
    world_size: the number of ranks; with a ``ditron.mesh``, the mesh's size: every rank of the mesh runs, and the
        program's collectives run within the groups of its ``ditron.axis`` (``sim.groups``).
    inputs: per rank, one array per "in" argument (in argument order); or a callable ``inputs(call)`` giving them
        per call; or None for seeded random inputs, different for every call and shard, equal on the replicas of
        a shard and zero in padding, by each argument's ``ditron.layout`` (``sim.groups.random_inputs``).
    seed: chooses the interleaving (and the random inputs). Same seed, same run.
    function: the device function to run (default: the only one with ditron.level = "device").
    calls: how many times to run the program in a row (epoch 1..calls, default 2), on the same symmetric buffers
        and pads, with fresh inputs each call: bugs that show only when pads and buffers are reused need 2.
    reference: ``reference(per_rank_inputs) -> per_rank_outputs`` (numpy); outputs are compared per call with
        tolerance ``rtol`` (default by element type: 2^-6 for bf16) and ``atol`` (default rtol x max |expected|),
        outside the padding of padded outputs (by their ``ditron.layout`` and ``ditron.global_shape``).
    templates: kernel templates by name, taking precedence over ditron.kernels.<name>.
    num_sms: SMs per rank shared by all launches and SM copies (default: unlimited, only sm_budget applies).
    sync_between_calls: synchronise every rank between calls (as a device synchronize plus a barrier would).
    graph: run the calls as the runtime's CUDA graphs replay them: every call with epoch 1, each signal pad held
        twice (call e uses copy e % 2) and never zeroed in between -- which holds only for pads that their waiters
        clear (``ditron.consumed``); any other pad is reported invalid.
    verify_ir: run ditron's verifier on an ir.Module first (default).
    sampled: compute the GEMM tiles' products and compare the outputs at the rows of a ``sim.products.Sample``
        only (every row whose number modulo 128 is one of a fixed set of tile edges plus two residues drawn from
        the seed; the outputs' other rows then hold NaN); a run that finds a mismatch there is run again whole
        and reports that run. None (default): sampled where the reference computes given rows (``task_reference``)
        and an output has ``SAMPLE_FROM`` (2^22) elements or more per rank; False: every row. The checks of
        accesses and signals (races, deadlocks, uninitialised reads, bounds, unwritten outputs) are the same in
        both. What a sampled check can miss: docs/design.md, section 5.
    """
    program = load_program(module_or_text, function, verify_ir=verify_ir)
    return run_program(program, world_size, inputs, seed=seed, calls=calls, reference=reference, rtol=rtol,
                       atol=atol, templates=templates, num_sms=num_sms, sync_between_calls=sync_between_calls,
                       graph=graph, sampled=sampled)
