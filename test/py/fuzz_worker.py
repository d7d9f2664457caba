"""Fuzz worker for test_fuzz.py: runs many mutated inputs through ditron-opt's ``run()`` in this one process.

    python fuzz_worker.py SEED FIRST COUNT

Case i (FIRST <= i < FIRST + COUNT) is ``make_case(SEED, i)``: a valid input from the corpus, mutated 1-3 times
(tokens dropped, duplicated, swapped or replaced; types, shapes and attribute values changed; lines dropped or
repeated; the text truncated), and a driver command line. Everything is derived from (SEED, i), so a case can be
rebuilt anywhere. For each case the worker prints ``CASE i`` *before* running it (so that the parent knows which
case killed it if the process dies), then ``DONE i rc`` or ``PROBLEM i what``, and ``FINISHED`` at the end.
Problems found in-process: an exception escaping run(), an exit code other than 0/1, a traceback or an
"internal compiler error" on stderr, an MLIR context left alive, a case taking longer than CASE_TIMEOUT_S.
"""
from __future__ import annotations

import gc
import io
import pathlib
import random
import re
import signal
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
CORPUS_GLOBS = ("test/lit/dialects/*roundtrip*.mlir", "examples/*.mlir", "test/lit/passes/verify.mlir",
                "test/lit/passes/canonicalize.mlir")
CASE_TIMEOUT_S = 20

COMMAND_LINES = (
    ["--pass-pipeline=ditron-verify,ditron-canonicalize"],
    [],
    ["--verify-each=false", "--pass-pipeline=ditron-canonicalize"],
    ["--split-input-file", "--pass-pipeline=ditron-check"],
    ["--mlir-print-debuginfo", "--pass-pipeline=ditron-canonicalize{upstream=false}"],
    ["--verify-each=false", "--pass-pipeline=ditron-verify", "--print-ir-after-all"],
)

TOKEN = re.compile(r'\s+|"[^"\n]*"|%[\w$.#]+|@[\w$.]+|#[\w$.]+|\^\w+|[A-Za-z_][\w.$]*|\d+|->|.', re.S)
TYPES = ("f32", "f16", "bf16", "f64", "i1", "i8", "i32", "i64", "i128", "index", "f8E4M3FN", "none",
         "!tt.ptr<f16>", "tensor<4xf32>", "memref<8xi32>", "tensor<*xf32>", "tensor<?x?xf32>", "complex<f32>")
SHAPES = ("0", "1", "2", "3", "4", "7", "16", "4096", "?", "9223372036854775807", "4294967296", "1x1", "-1")
STRINGS = ('"tp"', '"dp"', '"ep"', '""', '"sum"', '"mean"', '"sys"', '"gpu"', '"cta"', '"set"', '"add"',
           '"copy_engine"', '"sm"', '"rank_rotated"', '"zigzag"', '"gelu"', '"softmax"', '"acquire"', '"release"',
           '"stream"', '"kernel"', '"\\n"', '"x\\"y"')
ATTR_VALUES = ("0 : i64", "-1 : i64", "1", "true", "unit", "[]", "{}", "array<i64>", "array<i64: 0>",
               "array<i32: 1, 2>", "@nowhere", "@a::@b", "100000000000000000000000 : i128", "1.5 : f32",
               "dense<1> : tensor<2xi32>", "#ditron.unknown", "18446744073709551615 : ui64", "loc(unknown)")
JUNK = ("{", "}", "(", ")", "[", "]", "<", ">", ":", ",", "=", "%", "@", "^bb1:", "->", '"', "x", "?",
        "// -----", "loc(", "#loc", "module {", "func.func", "return", '"ditron_task.matmul"', "ditron_core.rank",
        "attributes", "{ditron.mesh = 3}", "%0", "%arg0", "dense_resource<blob>", "{-#", "#-}", "\\")


def corpus() -> list[tuple[str, str]]:
    """(name, text) of every valid input; files with '// -----' contribute each chunk."""
    found = []
    for pattern in CORPUS_GLOBS:
        for path in sorted(REPO.glob(pattern)):
            chunks = re.split(r"^// -----.*$", path.read_text(encoding="utf-8"), flags=re.M)
            for k, chunk in enumerate(chunks):
                if chunk.strip():
                    found.append((f"{path.relative_to(REPO)}#{k}", chunk))
    return found


def _tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def _replace_one(rng: random.Random, text: str, pattern: str, choices, label) -> tuple[str, str] | None:
    """Replace one random match of pattern in text by one of choices: (new text, label(old, new)), or None."""
    spots = list(re.finditer(pattern, text))
    if not spots:
        return None
    m = rng.choice(spots)
    new = rng.choice(choices)
    return text[:m.start()] + new + text[m.end():], label(m.group(0), new)


def _mutate(text: str, rng: random.Random) -> tuple[str, str]:
    """One mutation of text; returns (new text, what was done)."""
    toks = _tokens(text)
    solid = [i for i, t in enumerate(toks) if not t.isspace()]
    kind = rng.choice(("drop", "dup", "swap", "swap_near", "type", "shape", "string", "attr", "number", "junk",
                       "drop_line", "dup_line", "truncate", "swap_lines", "deep"))
    if not solid:
        return text + rng.choice(JUNK), "junk-on-empty"
    i = rng.choice(solid)
    if kind == "drop":
        what = f"drop {toks[i]!r}"
        toks[i] = ""
    elif kind == "dup":
        what = f"dup {toks[i]!r}"
        toks[i] = toks[i] + " " + toks[i]
    elif kind == "swap":
        j = rng.choice(solid)
        what = f"swap {toks[i]!r} {toks[j]!r}"
        toks[i], toks[j] = toks[j], toks[i]
    elif kind == "swap_near":
        k = solid.index(i)
        j = solid[min(k + 1, len(solid) - 1)]
        what = f"swap-near {toks[i]!r} {toks[j]!r}"
        toks[i], toks[j] = toks[j], toks[i]
    elif kind == "type":
        spots = [k for k in solid if re.fullmatch(r"f\d+|bf16|i\d+|index|f8E4M3FN", toks[k])] or solid
        k = rng.choice(spots)
        new = rng.choice(TYPES)
        what = f"type {toks[k]!r}->{new!r}"
        toks[k] = new
    elif kind == "shape":
        done = _replace_one(rng, text, r"(?<=[<x])(\d+|\?)(?=x)", SHAPES, lambda old, new: f"shape {old}->{new}")
        if done:
            return done
        what = "shape-none"
    elif kind == "string":
        spots = [k for k in solid if toks[k].startswith('"') and not toks[k].startswith('"ditron_')] or solid
        k = rng.choice(spots)
        new = rng.choice(STRINGS)
        what = f"string {toks[k]!r}->{new!r}"
        toks[k] = new
    elif kind == "attr":
        done = _replace_one(rng, text, r"(?<== )[^,{}]+?(?=[,}])", ATTR_VALUES,
                            lambda old, new: f"attr {old!r}->{new!r}")
        if done:
            return done
        what = "attr-none"
    elif kind == "number":
        spots = [k for k in solid if toks[k].isdigit()] or solid
        k = rng.choice(spots)
        new = str(rng.choice((0, 1, 2, 3, 5, 64, 2 ** 31, 2 ** 63, 2 ** 64, 10 ** 30, 255)))
        what = f"number {toks[k]!r}->{new}"
        toks[k] = new
    elif kind == "junk":
        new = rng.choice(JUNK)
        what = f"insert {new!r} before {toks[i]!r}"
        toks[i] = new + " " + toks[i]
    elif kind == "deep":  # nesting around a token, sometimes past what MLIR's recursive parser survives
        k = rng.choice((3, 50, 255, 300, 5000))
        opener, closer = rng.choice((("[", "]"), ("(", ")"), ("{", "}"), ("tensor<", ">")))
        what = f"nest {toks[i]!r} {k} deep in {opener}{closer}"
        toks[i] = opener * k + toks[i] + closer * k
    elif kind in ("drop_line", "dup_line", "swap_lines"):
        lines = text.split("\n")
        a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
        if kind == "drop_line":
            what = f"drop line {a + 1}"
            del lines[a]
        elif kind == "dup_line":
            what = f"dup line {a + 1}"
            lines.insert(a, lines[a])
        else:
            what = f"swap lines {a + 1} {b + 1}"
            lines[a], lines[b] = lines[b], lines[a]
        return "\n".join(lines), what
    else:  # truncate
        cut = rng.randrange(len(text))
        return text[:cut], f"truncate at {cut}"
    return "".join(toks), what


def make_case(seed: int, index: int, inputs: list[tuple[str, str]] | None = None) -> dict:
    """Case index of the run seeded with seed: {'source', 'mutations', 'text', 'argv'}."""
    inputs = inputs if inputs is not None else corpus()
    rng = random.Random(f"{seed}:{index}")
    source, text = inputs[rng.randrange(len(inputs))]
    mutations = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        text, what = _mutate(text, rng)
        mutations.append(what)
    argv = list(COMMAND_LINES[rng.randrange(len(COMMAND_LINES))])
    return {"source": source, "mutations": mutations, "text": text, "argv": argv}


class _CaseTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _CaseTimeout()


def run_case(case: dict) -> tuple[int | None, str | None]:
    """Run one case through ditron-opt in this process: (exit code, None if it behaved else what went wrong)."""
    from mlir import ir

    from ditron.tools.ditron_opt import run

    out, err = io.StringIO(), io.StringIO()
    signal.alarm(CASE_TIMEOUT_S)
    try:
        rc = run(case["argv"], io.StringIO(case["text"]), out, err)
    except _CaseTimeout:
        return None, f"hang: still running after {CASE_TIMEOUT_S} s"
    except BaseException as e:  # noqa: BLE001 - whatever escapes run() is the finding
        return None, f"exception escaped run(): {type(e).__name__}: {e}"
    finally:
        signal.alarm(0)
    gc.collect()
    text = err.getvalue()
    if rc not in (0, 1):
        return rc, f"exit code {rc}"
    for sign in ("Traceback", "internal compiler error", "Fatal Python error"):
        if sign in text:
            return rc, f"{sign!r} on stderr: {text[-2000:]}"
    if rc == 1 and not text.strip():
        return rc, "exit code 1 without a message"
    if rc == 1 and not re.search(r"(^|\n)(\S+:\d+:\d+: )?error: ", text):
        return rc, f"failure without an 'error:' line: {text[-500:]}"
    if "MLIR gave no diagnostic" in text:
        return rc, f"a parse failure MLIR did not explain: {text[-500:]}"
    left = ir.Context._get_live_count()
    if left:
        return rc, f"{left} MLIR context(s) alive after the case"
    return rc, None


def main(argv: list[str]) -> int:
    seed, first, count = (int(a) for a in argv)
    inputs = corpus()
    signal.signal(signal.SIGALRM, _on_alarm)
    start = time.perf_counter()
    for i in range(first, first + count):
        case = make_case(seed, i, inputs)
        print(f"CASE {i}", flush=True)
        rc, problem = run_case(case)
        if problem is None:
            print(f"DONE {i} rc={rc}", flush=True)
        else:
            print(f"PROBLEM {i} {problem!r}", flush=True)
    print(f"FINISHED {count} cases in {time.perf_counter() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
