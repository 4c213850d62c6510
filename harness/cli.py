"""`python -m harness {list,compare,check,selfcheck}`.

Bad input is answered with one line on stderr and exit status 2, before any work and without a
traceback or a partial file. `compare` exits 1 when a check failed (the result file is still written,
since a failure is a finding), 0 when all is well.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from harness.backends import FRAMEWORKS

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "results"
MAX_EXAMPLES = 10_000


class UsageError(Exception):
    """Bad input: reported as one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not usage + message
        raise UsageError(message)


def _csv(known: Sequence[str], what: str):
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"no {what} given")
        unknown = [t for t in items if t not in known]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(map(repr, unknown))} (known: {', '.join(known)})")
        if len(set(items)) != len(items):
            raise argparse.ArgumentTypeError(f"{what} listed twice: {text}")
        return [k for k in known if k in items]  # registry order

    return parse


def _bounded_int(lo: int, hi: int, what: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, not {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{what} must be between {lo} and {hi}, not {v}")
        return v

    return parse


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"timeout must be a number of seconds, not {text!r}") from None
    if not 0 < v <= 86_400:
        raise argparse.ArgumentTypeError(f"timeout must be > 0 and at most a day, not {text}")
    return v


def gpu_present() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        q = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return q.returncode == 0 and "GPU" in q.stdout


def build_parser() -> argparse.ArgumentParser:
    from scenarios import ORDER

    p = _Parser(prog="python -m harness", description="triptych: the host/device paradigm in torch, CuPy and JAX")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    sub.add_parser("list", help="the scenarios, their variants and concepts")

    c = sub.add_parser("compare", help="equivalence, then timing, of scenarios x frameworks x variants")
    c.add_argument("--scenarios", type=_csv(ORDER, "scenario"), default=list(ORDER))
    c.add_argument("--frameworks", type=_csv(FRAMEWORKS, "framework"), default=list(FRAMEWORKS))
    c.add_argument("--size", choices=["auto", "smoke", "full"], default="auto",
                   help="full on a GPU machine, smoke (small, fast) elsewhere; default: auto")
    c.add_argument("--examples", type=_bounded_int(1, MAX_EXAMPLES, "--examples"), default=None,
                   help="hypothesis examples per scenario (default 25 full, 6 smoke)")
    c.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the result JSON (default results/)")
    c.add_argument("--seed", type=_bounded_int(0, 2**32 - 1, "--seed"), default=None)
    c.add_argument("--isolation", choices=["process", "none"], default="process",
                   help="a child process per framework (default) or everything in this process")
    c.add_argument("--timeout", type=_positive_float, default=900.0, help="seconds per framework per scenario")
    c.add_argument("--no-equivalence", action="store_true")
    c.add_argument("--no-timing", action="store_true")
    c.add_argument("--quiet", action="store_true", help="no progress output")

    k = sub.add_parser("check", help="run one equivalence example (the reproducer a failure prints)")
    k.add_argument("scenario", choices=list(ORDER), metavar="SCENARIO")
    k.add_argument("--params", required=True, help="JSON object of params, as printed by a failure")
    k.add_argument("--frameworks", type=_csv(FRAMEWORKS, "framework"), default=list(FRAMEWORKS))

    s = sub.add_parser("selfcheck", help="trust the clock: harness medians vs the frameworks' own benchmark tools")
    s.add_argument("--frameworks", type=_csv(FRAMEWORKS, "framework"), default=list(FRAMEWORKS))
    s.add_argument("--out", type=Path, default=None, help="also write the rows as JSON into this folder")
    return p


def cmd_list() -> int:
    from rich.table import Table

    from harness.report import make_console
    from scenarios import all_scenarios

    t = Table(title="triptych scenarios", show_lines=True)
    for col in ("scenario", "variants (baseline first)", "concept"):
        t.add_column(col)
    for s in all_scenarios():
        vs = "\n".join(v.name + (" (hazard)" if v.hazard else "") + _gpu_mark(v) for v in s.variants)
        t.add_row(f"{s.name}\n[dim]{s.title}[/dim]", vs, s.concept)
    make_console().print(t)
    return 0


def _gpu_mark(v) -> str:
    """' [gpu]' or ' [gpu: torch, cupy]', escaped: rich would take the brackets for markup and drop them."""
    from rich.markup import escape

    if isinstance(v.gpu_only, tuple):
        return escape(f" [gpu: {', '.join(v.gpu_only)}]")
    return escape(" [gpu]") if v.gpu_only else ""


def cmd_compare(a: argparse.Namespace, argv: list[str]) -> int:
    from harness.progress import make_ui
    from harness.report import make_console, render_terminal, summary_status
    from harness.results import ResultError, check_writable, write_atomic
    from harness.runner import CompareOptions, run_compare

    if a.no_equivalence and a.no_timing:
        raise UsageError("--no-equivalence and --no-timing together leave nothing to do")
    size = a.size if a.size != "auto" else ("full" if gpu_present() else "smoke")
    examples = a.examples if a.examples is not None else (25 if size == "full" else 6)
    try:
        check_writable(a.out)
    except ResultError as e:
        raise UsageError(str(e)) from None
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(2**32)
    opts = CompareOptions(scenarios=a.scenarios, frameworks=a.frameworks, size=size, examples=examples, seed=seed,
                          isolation=a.isolation, timeout_s=a.timeout, equivalence=not a.no_equivalence,
                          timing=not a.no_timing, argv=["python -m harness", *argv])
    doc = run_compare(opts, make_ui(a.quiet))
    path = write_atomic(doc, a.out)
    render_terminal(doc, make_console())
    ok, problems = summary_status(doc)
    print(f"result: {path}", flush=True)
    for p in problems:
        print(f"FAILED {p}", file=sys.stderr)
    return 0 if ok else 1


def cmd_check(a: argparse.Namespace) -> int:
    from harness import backends
    from harness.equivalence import EquivalenceFailure, check_example
    from harness.execute import run_variants
    from scenarios import get

    scn = get(a.scenario)
    try:
        params = json.loads(a.params)
    except json.JSONDecodeError as e:
        raise UsageError(f"--params is not JSON: {e.msg}") from None
    if not isinstance(params, dict):
        raise UsageError("--params must be a JSON object")
    try:
        inputs = scn.make_inputs(params)
        reference = scn.reference(inputs, params)
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"--params do not fit {scn.name}: {type(e).__name__}: {e}") from None
    outputs = {}
    for fw in a.frameworks:
        b = backends.get(fw)
        ok, why = b.available()
        if not ok:
            print(f"{fw}: skipped — {why}")
            continue
        for variant, got in run_variants(scn, b, params, inputs).items():
            outputs[(fw, variant)] = got
            print(f"{fw}/{variant}: ran")
    try:
        check_example(scn, params, reference, outputs)
    except EquivalenceFailure as e:
        print(str(e))
        return 1
    print(f"{scn.name}: {len(outputs)} outputs match the reference and each other")
    return 0


def cmd_selfcheck(a: argparse.Namespace) -> int:
    from harness.selfcheck import run_selfcheck

    if a.out is not None:
        from harness.results import ResultError, check_writable

        try:
            check_writable(a.out)
        except ResultError as e:
            raise UsageError(str(e)) from None
    return run_selfcheck(a.frameworks, a.out)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        a = build_parser().parse_args(argv)
        if a.cmd == "list":
            return cmd_list()
        if a.cmd == "compare":
            return cmd_compare(a, argv)
        if a.cmd == "check":
            return cmd_check(a)
        if a.cmd == "selfcheck":
            return cmd_selfcheck(a)
    except UsageError as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("harness: interrupted (no result file written)", file=sys.stderr)
        return 130
    raise AssertionError(a.cmd)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
