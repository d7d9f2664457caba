"""make demo: the example task programs through every level of ditron.

For each of examples/{ag_gemm,gemm_rs,gemm_ar,mlp}.mlir (global view, LLaMA-size shapes, tp = 4) and
examples/moe.mlir (a mixture-of-experts layer in the local view, ep = 4):
  1. Task level:   parse + verify; ditron-partition shows the collectives it inserts.
  2. Device/core:  the default pipeline (partition, fuse-overlap, tile, lower-task-to-device, schedule-overlap,
                   lower-device-to-core): what the rank program does and which core kernels it launches.
  3. Binaries:     ditron.compile for cuda:90 (sm_90a cubin) and hip:gfx942 (hsaco), no GPU needed.
  4. Simulation:   the same program at W = 4 with small shapes, run by ditron.sim on the CPU under two
                   interleavings (seeds), two calls each, compared with the numpy reference of the task program.

    python examples/demo.py [--show-ir] [--only NAME] [--world-size W] [--targets cuda:90,hip:gfx942]
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from pathlib import Path

import ditron
from ditron.dialects import ditron_context, parse_module
from ditron.dialects.opbase import walk_ops
from ditron.passes.registry import parse_pipeline
from ditron.sim import simulate, task_reference

EXAMPLES = Path(__file__).resolve().parent
NAMES = ("ag_gemm", "gemm_rs", "gemm_ar", "mlp", "moe")
# full-size dims -> the small ones the CPU simulator runs (a prime row count per rank keeps tiles ragged)
SMALL = {"8192": "4091", "4096": "64", "14336": "128", "28672": "128"}


def small(text: str, world: int) -> str:
    text = re.sub(r"(?<=[<x])(8192|4096|14336|28672)(?=x)", lambda m: SMALL[m.group(1)], text)
    text = text.replace("4091x", f"{4091 * world}x")  # rows: 4091 per rank (M = 4091 * W)
    return re.sub(r"shape = array<i64: \d+>", f"shape = array<i64: {world}>", text)


def rows_of(result) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(result.items()))


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 100 - len(title)))


def task_level(name: str, text: str, show: bool) -> None:
    with ditron_context():
        module = parse_module(text, f"examples/{name}.mlir")
        local = 'ditron.view = "local"' in text  # collectives the program writes itself: partition leaves them
        for p in parse_pipeline("ditron-verify,ditron-partition"):
            p.run(module)
        collectives = Counter(op.name.split(".")[1] for op in walk_ops(module)
                              if op.name in ("ditron_task.all_gather", "ditron_task.reduce_scatter",
                                             "ditron_task.all_reduce", "ditron_task.all_to_all"))
        what = "local view, its collectives" if local else "ditron-partition inserts"
        print(f"[task]   verified; {what}: {rows_of(collectives) or 'no collective'}")
        if show:
            print(module)
        del module


def device_level(name: str, text: str, show: bool) -> None:
    with ditron_context():
        module = parse_module(text, f"examples/{name}.mlir")
        start = time.perf_counter()
        for p in parse_pipeline("ditron-device"):
            p.run(module)
        ms = 1e3 * (time.perf_counter() - start)
        ops = Counter(op.name.split(".")[1] for op in walk_ops(module) if op.name.startswith("ditron_device."))
        kernels = [op for op in walk_ops(module) if op.name == "tt.func"]
        print(f"[device] ditron-device in {ms:.0f} ms; the rank program: {rows_of(ops)}")
        for k in kernels:
            record = k.attributes["ditron.kernel"] if "ditron.kernel" in k.attributes else None
            what = re.sub(r"\s+", " ", str(record))[:150] if record is not None else ""
            print(f"[core]   @{k.attributes['sym_name'].value}: {what}")
        if show:
            print(module)
        del module


def binaries(text: str, targets: list[str]) -> None:
    for target in targets:
        start = time.perf_counter()
        exe = ditron.compile(text, target=target)
        sizes = ", ".join(f"{n} {len(k.binary) // 1024} KiB" if hasattr(k, "binary") else n
                          for n, k in exe.kernels.items())
        state = exe.compile_info.get("cache", "?") if hasattr(exe, "compile_info") else "?"
        print(f"[binary] {target:11s} {len(exe.kernels)} kernels in {time.perf_counter() - start:5.2f} s "
              f"(cache {state}): {sizes}")


def simulation(name: str, text: str, world: int) -> bool:
    text = small(text, world)
    ok = True
    with ditron_context():
        module = parse_module(text, f"examples/{name}.mlir (small)")
        for p in parse_pipeline("ditron-device"):
            p.run(module)
        reference = task_reference(text)
        for seed in (0, 1):
            start = time.perf_counter()
            result = simulate(module, world, seed=seed, calls=2, reference=reference)
            verdict = "equal to the reference, no race, no deadlock" if result.ok else "FAILED"
            print(f"[sim]    W={world} seed={seed}: {verdict} ({time.perf_counter() - start:.1f} s)")
            if not result.ok:
                print(result.summary())
                ok = False
        del module
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show-ir", action="store_true", help="print the IR at each level")
    ap.add_argument("--only", choices=NAMES, help="one example")
    ap.add_argument("--world-size", type=int, default=4, help="ranks to simulate (default 4)")
    ap.add_argument("--targets", default="cuda:90,hip:gfx942", help="targets to compile for")
    args = ap.parse_args()
    ok = True
    for name in ([args.only] if args.only else NAMES):
        text = (EXAMPLES / f"{name}.mlir").read_text()
        section(f"examples/{name}.mlir")
        task_level(name, text, args.show_ir)
        device_level(name, text, args.show_ir)
        binaries(text, [t for t in args.targets.split(",") if t])
        ok &= simulation(name, text, args.world_size)
    print("\nall examples compiled and simulated correctly" if ok else "\nSOME SIMULATIONS FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
