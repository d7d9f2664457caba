"""``ditron sim``: simulate a program from the command line (also ``python -m ditron.sim``).

    ditron sim FILE.mlir [-W N] [--seeds 0,1,2] [--calls 2] [--function NAME] [--pipeline P] [--num-sms N]
                         [--sync-between-calls] [--no-reference] [--check-all-rows] [--mutate]
                         [--load FILE.py|MODULE]

FILE holds a device-level program (a func.func with ditron.level = "device"), or a task-level program, which is
first lowered with ``--pipeline`` (default ``ditron-device``) and then serves as its own numpy reference
(ditron.reference, global or local view); it is verified first, and after every pass, as ditron-opt does. The
world is the whole mesh (on a dp x tp mesh, the program's collectives run within the groups of its axis). Inputs
are seeded random arrays that follow each argument's layout (replicas equal, padding zero). For each seed it
prints the summary (``SimResult.summary()``); ``--mutate`` instead removes each wait and signal, shifts each copy
offset and launch scalar in turn, and lists the mutants the simulator did not report. Exit status: 0 when every run
is clean (or every mutant was caught), 1 otherwise; errors print as ``file:line:col: error: ...``, never a
traceback.

The ``ditron`` console command adds this as its ``sim`` subcommand with ``add_arguments(subparser)`` and
``run(args, stdout, stderr)``.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import sys
from typing import Sequence, TextIO

from ..errors import DitronError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="a .mlir file: a device-level program, or a task-level one (lowered first)")
    p.add_argument("-W", "--world-size", type=int, default=None,
                   help="number of ranks: the size of the program's ditron.mesh, whose every rank runs (needed "
                        "only without a mesh)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds, each one interleaving (default 0)")
    p.add_argument("--calls", type=int, default=2, help="calls in a row, epoch 1..N (default 2)")
    p.add_argument("--function", default=None, help="the device function to run (default: the only one)")
    p.add_argument("--pipeline", default="ditron-device",
                   help="passes that lower a task-level input to a device program (default ditron-device)")
    p.add_argument("--num-sms", type=int, default=None, help="SMs per rank (default: only sm_budget limits)")
    p.add_argument("--sync-between-calls", action="store_true", help="synchronise all ranks between calls")
    p.add_argument("--graph", action="store_true", help="run the calls as CUDA-graph replays: epoch 1 every call, a "
                                                        "signal pad per parity, none zeroed (pads must be consumed)")
    p.add_argument("--no-reference", action="store_true", help="do not compare with the task-level reference")
    p.add_argument("--check-all-rows", action="store_true",
                   help="compute and compare every row of the outputs (default: outputs of 2^22 elements or more "
                        "per rank at sampled rows only: docs/design.md, section 5)")
    p.add_argument("--mutate", action="store_true", help="mutation-test the program instead of running it once")
    p.add_argument("--load", action="append", default=[], metavar="FILE.py|MODULE",
                   help="run a Python file (or import a module) first: the kernel programs it registers with "
                        "ditron.register_op are then known to the lowering and the reference (repeatable)")


def keep_freed_memory() -> bool:
    """Make this process's malloc (glibc's) keep the memory it frees for its next allocations: no mmap for large
    blocks (each would be returned to the kernel when freed) and no trimming of the heap below 2 GiB free. A
    simulation at a program's own sizes allocates and frees GB-sized temporaries (inputs, tiles, products), and every
    fresh page costs a page fault: examples/moe.mlir at W = 4 touched about 40 GB for a peak of 15 GB, 20 s of its
    36 s in the kernel on a 2-core VM; with freed memory reused, 10 s of 27 (benchmarks/results/sim.csv). Only the
    ``ditron sim`` command calls it, for its own short-lived process. Returns whether it applied (False without
    glibc's mallopt)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
    return bool(mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, 2 ** 31 - 1) and
                mallopt(M_TOP_PAD, 256 << 20))


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        seeds = []
    if not seeds or any(s < 0 or s >= 2 ** 63 for s in seeds):
        raise DitronError(f"--seeds expects comma-separated non-negative integers, got '{text}'")
    return seeds


def _check_counts(args: argparse.Namespace) -> None:
    if args.calls < 1:
        raise DitronError(f"--calls must be >= 1, got {args.calls}")
    if args.num_sms is not None and args.num_sms < 1:
        raise DitronError(f"--num-sms must be >= 1, got {args.num_sms}")
    if args.world_size is not None and args.world_size < 1:
        raise DitronError(f"--world-size must be >= 1, got {args.world_size}")


def _world_size(module, requested: int | None) -> int:
    """The world the program runs in: its mesh, every rank of it (sim.groups); without a mesh, --world-size."""
    from ..dialects.sharding import Mesh
    from .groups import describe_mesh

    mesh = Mesh.of_module(module)
    if mesh is None:
        if requested is None:
            raise DitronError("the module has no ditron.mesh: pass --world-size")
        return requested
    if requested is not None and requested != mesh.size:
        raise DitronError(f"--world-size {requested}: the program is written for the {mesh.size} rank(s) of its "
                          f"ditron.mesh ({describe_mesh(mesh)}), which the simulator runs whole; change the mesh to "
                          f"simulate another world size")
    return mesh.size


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    from ..dialects.context import ditron_context, parse_file
    from ..dialects.verify import verify
    from ..passes.manager import PassManager
    from ..passes.registry import parse_pipeline
    from . import simulate, task_reference
    from .mutate import run_mutants
    from ..dialects.device import device_functions

    keep_freed_memory()
    try:
        if args.input == "-":
            raise DitronError("ditron sim reads a .mlir file; standard input ('-') is not supported: write it to a "
                              "file first")
        seeds = _seeds(args.seeds)
        _check_counts(args)
        if getattr(args, "load", None):
            from ..custom_ops import load
            load(args.load)
        with open(args.input, encoding="utf-8") as f:
            text = f.read()
        with ditron_context():
            module = parse_file(args.input)
            verify(module)  # what ditron-opt rejects, with its messages, before anything reads the module
            task_level = not device_functions(module)
            passes = parse_pipeline(args.pipeline) if task_level else []
            W = _world_size(module, args.world_size)
            del module
        reference = None if args.no_reference or not task_level else task_reference(text)

        def build():
            m = parse_file(args.input)
            PassManager(passes).run(m)
            return m

        options = dict(calls=args.calls, function=args.function, num_sms=args.num_sms,
                       sync_between_calls=args.sync_between_calls, graph=args.graph, reference=reference,
                       sampled=False if args.check_all_rows else None)
        if args.mutate:
            results = run_mutants(build, W, filename=args.input, seed=seeds[0], **options)
            missed = [r for r in results if not r.caught]
            for r in results:
                verdict = "caught" if r.caught else "MISSED"
                first = r.result.findings[0].kind if r.caught else "no finding"
                stdout.write(f"{verdict:7} {r.mutation}: {first}\n")
            stdout.write(f"{len(results) - len(missed)}/{len(results)} mutants caught\n")
            return 1 if missed or not results else 0
        ok = True
        for seed in seeds:
            with ditron_context():
                module = build()
                result = simulate(module, W, seed=seed, **options)
                del module
            stdout.write(result.summary() + "\n")
            ok = ok and result.ok
        return 0 if ok else 1
    except OSError as err:
        stderr.write(f"error: cannot read '{args.input}': {err.strerror}\n")
        return 1
    except UnicodeDecodeError as err:
        stderr.write(f"error: cannot read '{args.input}': not UTF-8 text (byte {err.start})\n")
        return 1
    except DitronError as err:
        stderr.write(err.render() + "\n")
        return 1
    except MemoryError:
        stderr.write(f"error: out of memory simulating '{args.input}': the simulator holds every rank's buffers "
                     "in numpy; simulate smaller shapes\n")
        return 1
    except Exception as err:  # a bug in ditron: one line and exit 1, as the other commands
        from ..errors import report_internal_error
        return report_internal_error(err, stderr)
    finally:
        gc.collect()


def main(argv: Sequence[str] | None = None, stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    p = argparse.ArgumentParser(prog="ditron sim", description="Simulate a ditron program on the CPU.")
    add_arguments(p)
    return run(p.parse_args(argv), stdout, stderr)
