"""ditron-opt: the pass driver, in the manner of mlir-opt.

    ditron-opt [FILE|-] --pass-pipeline='ditron-a,ditron-b{opt=v}' [-o OUT]
               [--list-passes] [--print-ir-after-all] [--print-ir-after=NAME] [--verify-each=true|false]
               [--split-input-file] [--mlir-print-debuginfo] [--time-passes] [--load FILE.py|MODULE]

Errors are printed as ``file:line:col: error: message`` on stderr, exit code 1, never a traceback.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import Callable, Sequence, TextIO

SPLIT_MARKER = "// -----"


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would exit 2 with a usage dump
        raise _Usage(message)


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "on"):
        return True
    if text.lower() in ("false", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expects true or false, got '{text}'")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ditron-opt", description="ditron's pass driver (like mlir-opt).", allow_abbrev=False)
    p.add_argument("input", nargs="?", default="-", help="input .mlir file, or - for stdin (default)")
    p.add_argument("-o", dest="output", default="-", help="output file (default stdout)")
    p.add_argument("--pass-pipeline", default="", help="comma-separated passes, e.g. 'ditron-verify,ditron-canonicalize'")
    p.add_argument("--list-passes", action="store_true", help="list passes, their options and named pipelines")
    p.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every pass (stderr)")
    p.add_argument("--print-ir-after", action="append", default=[], metavar="NAME",
                   help="print the IR after each run of pass NAME (stderr); may repeat")
    p.add_argument("--verify-each", type=_bool, default=True, nargs="?", const=True, metavar="BOOL",
                   help="verify after parsing and after every pass (default true)")
    p.add_argument("--split-input-file", action="store_true",
                   help=f"process each '{SPLIT_MARKER}'-separated chunk separately")
    p.add_argument("--mlir-print-debuginfo", action="store_true", help="print locations")
    p.add_argument("--time-passes", action="store_true", help="print time per pass (stderr)")
    p.add_argument("--emit", default="mlir", metavar="KIND",
                   help="what to print: mlir (default), or a backend stage: ttir, ttgir, llir, ptx, amdgcn")
    p.add_argument("--load", action="append", default=[], metavar="FILE.py|MODULE",
                   help="run a Python file (or import a module) first: the kernel programs it registers with "
                        "ditron.register_op are then known to the passes (repeatable)")
    p.add_argument("--target", default=None,
                   help="the GPU target, e.g. cuda:90, hip:gfx942: sets the module's ditron.target (which the passes "
                        "tile for) where it has none, and the backend of --emit")
    return p


def list_passes(out: TextIO, err: TextIO) -> bool:
    """Write every pass (summary, options) and named pipeline to out; False if a registered pass cannot be
    loaded (reported on err, the others are still listed)."""
    from ditron.errors import DitronError
    from ditron.passes.registry import PASSES, PIPELINES, get_pass_class
    ok = True
    out.write("Passes:\n")
    for name in sorted(PASSES):
        try:
            cls = get_pass_class(name)
        except DitronError as e:
            err.write(e.render() + "\n")
            ok = False
            continue
        out.write(f"  {name:34s} {cls.summary}\n")
        for line in cls.option_help():
            out.write(f"      {line}\n")
    out.write("Pipelines:\n")
    for name, steps in sorted(PIPELINES.items()):
        out.write(f"  {name:34s} {','.join(steps)}\n")
    return ok


def _print_module(module, debuginfo: bool) -> str:
    return module.operation.get_asm(enable_debug_info=debuginfo, assume_verified=False)


def process_chunk(text: str, filename: str, args, passes, err: TextIO) -> str:
    """Parse, verify, run the passes; the printed result. Raises DitronError."""
    from ditron.dialects import ditron_context, parse_module
    from ditron.dialects.verify import verify
    from ditron.passes.manager import PassManager

    manager = PassManager(passes, verify_each=args.verify_each, print_after_all=args.print_ir_after_all,
                          print_after=args.print_ir_after, time_passes=args.time_passes,
                          debuginfo=args.mlir_print_debuginfo, err=err)
    with ditron_context():
        module = parse_module(text, filename)
        try:
            if args.target is not None:
                from ditron.api import set_module_target
                set_module_target(module, args.target, "--target")
            if args.verify_each:
                verify(module)
            manager.run(module)
            return _emit(module, args)
        finally:
            del module
            gc.collect()


def _emit(module, args) -> str:
    if args.emit == "mlir":
        return _print_module(module, args.mlir_print_debuginfo)
    from ditron.errors import TargetError
    try:
        from ditron.compiler import emit_stage
    except ImportError:
        raise TargetError(f"--emit={args.emit} needs the backend stages, which this build does not have") from None
    return emit_stage(module, args.emit, args.target)


def _is_split_marker(line: str) -> bool:
    """'// -----' at the start of a line (indentation allowed), alone or followed by a comment as in mlir-opt;
    a longer run of dashes ('// ------') is not a marker."""
    line = line.strip()
    return line.startswith(SPLIT_MARKER) and not line[len(SPLIT_MARKER):].startswith("-")


def _chunks(text: str, split: bool) -> list[tuple[str, int]]:
    """(chunk text, first line number) pairs; line numbers are kept by padding with newlines."""
    if not split:
        return [(text, 1)]
    out, start, lines = [], 0, text.split("\n")
    for i, line in enumerate(lines + [SPLIT_MARKER]):
        if _is_split_marker(line):
            out.append(("\n" * start + "\n".join(lines[start:i]), start + 1))
            start = i + 1
    return out


def ir_error_types() -> tuple[type[BaseException], ...]:
    from mlir import ir
    return (ir.MLIRError,)


def run(argv: Sequence[str], stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from ditron.errors import DitronError
    try:
        args = build_parser().parse_args(list(argv))
    except _Usage as e:
        stderr.write(f"error: {e} (see ditron-opt --help)\n")
        return 1
    except SystemExit as e:  # --help printed the usage
        return e.code if isinstance(e.code, int) else 0
    try:
        if args.list_passes:
            return 0 if list_passes(stdout, stderr) else 1
        if args.target is not None:
            from ditron.backends.target import Target
            args.target = str(Target.parse(args.target))
        if args.load:
            from ditron.custom_ops import load
            load(args.load)
        from ditron.passes.registry import parse_pipeline
        passes = parse_pipeline(args.pass_pipeline)
        known = {p.name for p in passes}
        from ditron.passes.registry import PASSES
        for name in args.print_ir_after:
            if name not in PASSES:
                raise DitronError(f"--print-ir-after: unknown pass '{name}'")
            if name not in known:
                stderr.write(f"warning: --print-ir-after={name}: the pipeline does not run that pass\n")
        if args.input == "-":
            filename = "<stdin>"
            try:
                text = stdin.read()
            except UnicodeDecodeError as e:
                raise DitronError(f"cannot read standard input: not UTF-8 text (byte {e.start})") from None
        else:
            filename = args.input
            try:
                with open(filename, encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise DitronError(f"cannot open input file '{filename}': {e.strerror}") from None
            except UnicodeDecodeError as e:
                raise DitronError(f"cannot read input file '{filename}': not UTF-8 text (byte {e.start} is "
                                  f"0x{e.object[e.start]:02x})") from None
        failed, results = False, []
        for chunk, _ in _chunks(text, args.split_input_file):
            try:
                results.append(process_chunk(chunk, filename, args, passes, stderr))
            except DitronError as e:
                stderr.write(e.render() + "\n")
                failed = True
            except ir_error_types() as e:  # an MLIR diagnostic not yet wrapped by a pass
                from ditron.dialects.context import diagnostics_of
                stderr.write("\n".join(str(d) for d in diagnostics_of(e)) or f"error: {e}")
                stderr.write("\n")
                failed = True
        if args.output == "-":
            out = stdout
            out.write(f"\n{SPLIT_MARKER}\n".join(results) + ("\n" if results else ""))
        elif not failed:  # as mlir-opt: a failed run leaves the output file as it was (it may be the input)
            write_output(args.output, f"\n{SPLIT_MARKER}\n".join(results) + "\n")
        return 1 if failed else 0
    except DitronError as e:
        stderr.write(e.render() + "\n")
        return 1
    except BrokenPipeError:  # the reader went away (ditron-opt ... | head): not ditron's error
        raise
    except Exception as e:  # a bug in ditron: still one line and exit 1, the trace only when asked for
        from ditron.errors import report_internal_error
        return report_internal_error(e, stderr)


def write_output(path: str, text: str) -> None:
    """Write text to path; a regular file (or a new one) through a temporary file renamed over it, so that an
    interrupted write never leaves it half written (devices and pipes are written in place)."""
    import tempfile
    from ditron.errors import DitronError
    try:
        if os.path.exists(path) and not os.path.isfile(path):
            if os.path.isdir(path):
                raise IsADirectoryError(21, "Is a directory")
            with open(path, "w", encoding="utf-8") as out:
                out.write(text)
            return
        fd, tmp = tempfile.mkstemp(prefix=".ditron-opt-", dir=os.path.dirname(os.path.abspath(path)))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            if os.path.exists(path):
                os.chmod(tmp, os.stat(path).st_mode & 0o7777)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise DitronError(f"cannot write output file '{path}': {e.strerror}") from None


def live_mlir_contexts() -> int:
    """How many MLIR contexts are alive (0 if the bindings were never imported)."""
    if "mlir.ir" not in sys.modules:
        return 0
    return sys.modules["mlir.ir"].Context._get_live_count()


def main(argv: Sequence[str] | None = None) -> None:
    try:
        code = run(sys.argv[1:] if argv is None else argv, sys.stdin, sys.stdout, sys.stderr)
        gc.collect()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would complain again when flushing stdout at exit: point it at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.stderr.flush()
    if live_mlir_contexts():
        # A context alive at interpreter exit can abort Python ("Fatal Python error: PyThreadState_Get") after
        # some failures: skip the interpreter's teardown; the output is already flushed.
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    main()
