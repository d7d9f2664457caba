"""The ``ditron`` command.

    ditron compile FILE.mlir --target cuda:90 -o DIR [--opt num_warps=8 ...] [--no-cache] [--no-stages]
                   (FILE: task-level, device-level or core-level IR; the higher levels run ditron-default first)
    ditron info DIR [--json]
    ditron tune --shape MxNxK [--shape ...] [--op matmul|ag_gemm|gemm_rs|gemm_ar] [--world W] [--dtype bf16]
                [--target cuda:90] [--top N] [--cache FILE] [--build DIR | --run DIR] [--force]
                (times GEMM tile candidates on the GPU and keeps the winners in the tuning cache: ditron_py/tune.py)

Errors print as ``error: ...`` (or ``file:line:col: error: ...`` for IR errors) on stderr with exit code 1, never a
traceback. ``ditron info`` reads artifacts with torch + triton only, as a GPU server without the compiler would.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path
from typing import Any, Sequence, TextIO


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would exit 2 with a usage dump
        raise _Usage(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ditron", description="ditron: compile MLIR to GPU artifacts, inspect artifacts, tune GEMMs, simulate "
                                             "programs.",
                allow_abbrev=False)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    c = sub.add_parser("compile", help="compile a .mlir module (task, device or core level) into an artifact "
                                       "directory", allow_abbrev=False,
                       description="Compile a .mlir module into an artifact directory. Task-level programs (global "
                                   "or local view) and device-level programs run the default pipeline (ditron-opt "
                                   "--list-passes) down to core level first; core-level modules (tt.func kernels "
                                   "with ditron_core primitives) are compiled as they are.")
    c.add_argument("input", help="input .mlir file, or - for standard input: a task-level program (ditron_task ops "
                                 "with shardings), a device-level program (ditron_device), or core-level kernels "
                                 "(tt.func with ditron_core primitives)")
    c.add_argument("--target", default="cuda:90", help="cuda:80, cuda:90, hip:gfx942, hip:gfx950 (default cuda:90)")
    c.add_argument("-o", dest="output", required=True, help="artifact directory to write (replaced if it holds one)")
    c.add_argument("--opt", action="append", default=[], metavar="NAME=VALUE",
                   help="a backend option, e.g. num_warps=8; may repeat")
    c.add_argument("--no-cache", action="store_true", help="compile even if the compile cache has the result")
    c.add_argument("--no-stages", action="store_true", help="leave the stage texts (ttir, ptx, ...) out")
    c.add_argument("--tune", action="store_true", help="first time the program's GEMMs' tile candidates on the GPU "
                                                       "where the tuning cache lacks them (see ditron tune)")
    i = sub.add_parser("info", help="describe an artifact directory", allow_abbrev=False)
    i.add_argument("artifact", help="artifact directory")
    i.add_argument("--json", action="store_true", help="print the manifest as JSON")
    t = sub.add_parser("tune", help="time GEMM tile candidates on the GPU and keep the winners in the tuning cache "
                                    "that ditron-tile reads", allow_abbrev=False,
                       description="Autotune ditron.ops GEMMs: the cost model's best GEMM tile configs for each "
                                   "shape, each compiled as the whole op, timed on the GPU (CUDA events, medians); "
                                   "the winners go into the tuning cache (--cache, else $DITRON_TUNING_CACHE, else "
                                   "tuning.json in the cache directory), which later compiles take over the "
                                   "model's choice. One step needs the compiler and a GPU; --build DIR (compiler) "
                                   "then --run DIR (GPU, torch + triton only) split it.")
    t.add_argument("--shape", action="append", default=[], metavar="MxNxK",
                   help="a whole problem M x N x K (each rank holds its 1/W, as ditron.ops); may repeat")
    t.add_argument("--op", default="matmul", choices=("matmul", "ag_gemm", "gemm_rs", "gemm_ar"),
                   help="the op tuned (default matmul: one GPU's GEMM, ag_gemm at W = 1)")
    t.add_argument("--world", type=int, default=1, help="ranks of the op's (virtual) world (default 1)")
    t.add_argument("--dtype", default="bf16", choices=("bf16", "f16"), help="element type (default bf16)")
    t.add_argument("--target", default="cuda:90", help="target the candidates are compiled for (default cuda:90)")
    t.add_argument("--top", type=int, default=4, help="candidates per shape: the model's best N configs "
                                                      "(default 4)")
    t.add_argument("--cache", help="the tuning cache file to write (default: $DITRON_TUNING_CACHE, else "
                                   "tuning.json in the cache directory)")
    where = t.add_mutually_exclusive_group()
    where.add_argument("--build", metavar="DIR", help="only compile the candidates and the plan into DIR")
    where.add_argument("--run", metavar="DIR", help="only time DIR's plan (built by --build) on this GPU")
    t.add_argument("--dir", metavar="DIR", help="where the one-step tuning keeps the candidates' artifacts "
                                                "(default: tune-artifacts in the cache directory)")
    t.add_argument("--force", action="store_true", help="tune shapes the cache already holds too")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    sub.add_parser("sim", help="simulate a device-level (or task-level) program for W ranks on the CPU and check "
                   "it (see ditron sim --help)", allow_abbrev=False)
    return p


def parse_option(text: str) -> tuple[str, Any]:
    """'num_warps=8' -> ('num_warps', 8); values: int, float, true/false, none, else the text."""
    from .errors import DitronError
    name, sep, value = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not name:
        raise DitronError(f"--opt '{text}': write NAME=VALUE, e.g. --opt num_warps=8")
    value = value.strip()
    lowered = value.lower()
    if lowered in ("true", "false"):
        return name, lowered == "true"
    if lowered in ("none", "null"):
        return name, None
    for conv in (lambda v: int(v, 0), float):
        try:
            return name, conv(value)
        except ValueError:
            pass
    return name, value


def cmd_compile(args, out: TextIO) -> int:
    from .api import compile as ditron_compile
    from .errors import DitronError
    options: dict[str, Any] = {}
    for text in args.opt:
        name, value = parse_option(text)
        if name in options:
            raise DitronError(f"--opt {name} given twice")
        options[name] = value
    if args.input == "-":  # as ditron-opt: standard input
        try:
            src: Any = sys.stdin.read()
        except UnicodeDecodeError as e:
            raise DitronError(f"cannot read standard input: not UTF-8 text (byte {e.start})") from None
    else:
        src = Path(args.input)
    exe = ditron_compile(src, target=args.target, out_dir=args.output,
                         cache=False if args.no_cache else None, keep_stages=not args.no_stages, tune=args.tune,
                         **options)
    info = exe.compile_info
    out.write(f"wrote {exe.path}: {len(exe.kernels)} kernel{'s' if len(exe.kernels) != 1 else ''} "
              f"({', '.join(exe.kernels)}) for {exe.target} in {info['seconds']:.2f} s "
              f"(cache {info['cache']})\n")
    return 0


def describe(exe) -> str:
    """A human-readable summary of a loaded artifact."""
    m = exe.manifest
    lines = [f"artifact   {exe.path}",
             f"format     {m.format_version} (ditron {m.ditron_version}, triton {m.triton_version})",
             f"target     {m.target_name}",
             "options    " + " ".join(f"{k}={_show(v)}" for k, v in sorted(m.options.items()))]
    if m.cache_key:
        lines.append(f"cache key  {m.cache_key}")
    lines.append("kernels")
    for name, kernel in exe.kernels.items():
        md = kernel.metadata
        size = len(kernel.binary)
        lines.append(f"  {name}: {kernel.entry.binary} ({size / 1024:.1f} KiB), num_warps={md.num_warps} "
                     f"num_stages={getattr(md, 'num_stages', '?')} num_ctas={md.num_ctas} shared={md.shared} B")
        for a in kernel.args:
            lines.append(f"    {a.name}: {a.type} ({a.kind})")
        if kernel.entry.stages:
            lines.append(f"    stages: {', '.join(kernel.entry.stages)}")
    host = m.host_program
    lines.append("host program  " + ("none" if host is None else f"format {host['format_version']}"))
    return "\n".join(lines) + "\n"


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "none" if v is None else str(v)


def cmd_info(args, out: TextIO) -> int:
    from .runtime.loader import load_artifact
    exe = load_artifact(args.artifact)
    if args.json:
        out.write(json.dumps(exe.manifest.to_json(), indent=1) + "\n")
    else:
        out.write(describe(exe))
    return 0


def cmd_tune(args, out: TextIO) -> int:
    from . import tune
    from .errors import DitronError
    progress = False if args.no_progress else None
    if args.run:
        if args.shape:
            raise DitronError("ditron tune --run DIR times the plan DIR holds; its shapes were given to --build")
        results = tune.run(args.run, cache=args.cache, progress=progress, log=lambda s: out.write(s + "\n"))
    else:
        if not args.shape:
            raise DitronError("ditron tune: give at least one --shape MxNxK (see ditron tune --help)")
        if args.top < 1:
            raise DitronError(f"ditron tune: --top must be >= 1, got {args.top}")
        cases = [tune.Case.parse(text, op=args.op, dtype=args.dtype, world=args.world, target=args.target)
                 for text in args.shape]
        if args.build:
            plan = tune.build(cases, args.build, top=args.top, progress=progress)
            count = sum(1 + len(c["candidates"]) for c in plan["cases"])
            out.write(f"wrote {args.build}: {count} plans of {len(cases)} case(s); time them on the GPU with "
                      f"ditron tune --run {args.build}\n")
            return 0
        results = tune.tune(cases, directory=args.dir, cache=args.cache, top=args.top, force=args.force,
                            progress=progress, log=lambda s: out.write(s + "\n"))
        if not results:
            out.write("the tuning cache holds every shape already (--force tunes them again)\n")
            return 0
    out.write(tune.summary(results))
    return 0


def run_sim(argv: list[str], stdout: TextIO, stderr: TextIO) -> int:
    """`ditron sim ...`: its parser lives with the simulator, imported only here (`ditron info` must not load
    mlir)."""
    from .sim import command as sim_command
    parser = _Parser(prog="ditron sim", description="Simulate a program for W ranks on the CPU and check it.",
                     allow_abbrev=False)
    sim_command.add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except _Usage as e:
        stderr.write(f"error: {e} (see ditron sim --help)\n")
        return 1
    return sim_command.run(args, stdout, stderr)


def run(argv: Sequence[str], stdout: TextIO, stderr: TextIO) -> int:
    from .errors import DitronError
    argv = list(argv)
    if argv[:1] == ["sim"]:
        return run_sim(argv[1:], stdout, stderr)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help printed the usage
        return e.code if isinstance(e.code, int) else 0
    except _Usage as e:
        command = next((a for a in argv if not a.startswith("-")), None)
        where = f"ditron {command} --help" if command in ("compile", "info", "tune") else "ditron --help"
        stderr.write(f"error: {e} (see {where})\n")
        return 1
    if args.command is None:
        stderr.write("error: give a command: compile, info, tune or sim (see ditron --help)\n")
        return 1
    try:
        return {"compile": cmd_compile, "info": cmd_info, "tune": cmd_tune}[args.command](args, stdout)
    except DitronError as e:
        stderr.write(e.render() + "\n")
        return 1
    except Exception as e:  # a bug in ditron: still one line and exit 1, the trace only when asked for
        from .errors import report_internal_error
        return report_internal_error(e, stderr)


def main(argv: Sequence[str] | None = None) -> None:
    code = run(sys.argv[1:] if argv is None else argv, sys.stdout, sys.stderr)
    gc.collect()
    sys.stdout.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
