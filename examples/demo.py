"""make demo: take the example task programs through ditron and show what happens at each level.

    python examples/demo.py [--show-ir] [--world-size W]
"""
from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from ditron.tools.ditron_opt import run as ditron_opt

EXAMPLES = Path(__file__).resolve().parent


def opt(path: Path, pipeline: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    code = ditron_opt([str(path), f"--pass-pipeline={pipeline}"], io.StringIO(), out, err)
    if code != 0:
        sys.exit(f"ditron-opt failed on {path.name}:\n{err.getvalue()}")
    return out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show-ir", action="store_true", help="print the IR after each step")
    args = ap.parse_args()
    for path in sorted(EXAMPLES.glob("*.mlir")):
        text = opt(path, "ditron-verify,ditron-canonicalize")
        print(f"[task]   {path.name}: verified and canonicalized ({text.count(chr(10))} lines)")
        if args.show_ir:
            print(text)


if __name__ == "__main__":
    main()
