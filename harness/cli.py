"""`python -m harness {list,compare,report,docs,check,selfcheck,regress}`.

Bad input is answered with one line on stderr and exit status 2, before any work and without a
traceback or a partial file. `compare` exits 1 when a check failed (the result file is still written,
since a failure is a finding), 0 when all is well. `regress` exits 1 on any regression, 0 on none.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

from harness.backends import FRAMEWORKS
from harness.options import EXAMPLES, TIMEOUT_S

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


def _seconds(what: str):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number of seconds, not {text!r}") from None
        if not 0 < v <= 86_400:
            raise argparse.ArgumentTypeError(f"{what} must be > 0 and at most a day, not {text}")
        return v

    return parse


_positive_float = _seconds("timeout")


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpu-memory-fraction must be a number, not {text!r}") from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"--gpu-memory-fraction must be in (0, 1], not {text}")
    return v


def _threshold(text: str) -> float:
    """10% or 0.1; at least 0.1% and at most 500% (a threshold past that would hide everything)."""
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--threshold must be a fraction (0.1) or a percentage (10%), not {text!r}") from None
    if not 0.001 <= v <= 5:
        raise argparse.ArgumentTypeError(f"--threshold must be between 0.1% and 500%, not {text}")
    return v


def _confidence(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--confidence must be a number, not {text!r}") from None
    if not 0.5 <= v <= 0.999:
        raise argparse.ArgumentTypeError(f"--confidence must be between 0.5 and 0.999, not {text}")
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
                   help=f"hypothesis examples per scenario (default {EXAMPLES['full']} full, {EXAMPLES['smoke']} smoke)")
    c.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the result JSON (default results/)")
    c.add_argument("--seed", type=_bounded_int(0, 2**32 - 1, "--seed"), default=None)
    c.add_argument("--isolation", choices=["process", "none"], default="process",
                   help="a child process per framework (default) or everything in this process")
    c.add_argument("--timeout", type=_positive_float, default=TIMEOUT_S, help="seconds per framework per request")
    c.add_argument("--budget", type=_seconds("--budget"), default=None,
                   help="wall-clock seconds for the whole run: no scenario starts once they are spent; the result "
                        "keeps what finished and names what did not run (also on SIGTERM)")
    c.add_argument("--no-equivalence", action="store_true")
    c.add_argument("--no-timing", action="store_true")
    c.add_argument("--quiet", action="store_true", help="no progress output")
    c.add_argument("--gpu-memory-fraction", type=_fraction, default=None,
                   help="of the GPU's memory, each framework's cap (default $TRIPTYCH_GPU_MEMORY_FRACTION or 0.15)")
    c.add_argument("--no-report", action="store_true",
                   help="do not write report.md/report.html (default: into a folder named after the result file)")

    r = sub.add_parser("report", help="report.md and a self-contained report.html from a result file")
    r.add_argument("result", type=Path, metavar="RESULT.json")
    r.add_argument("--out", type=Path, default=None,
                   help="folder for the report (default: next to the result, named after its stem)")

    d = sub.add_parser("docs", help="regenerate docs/porting.md and the README's scenario index from the specs")
    d.add_argument("--check", action="store_true", help="write nothing; exit 1 when either is stale")

    k = sub.add_parser("check", help="run one equivalence example (the reproducer a failure prints)")
    k.add_argument("scenario", choices=list(ORDER), metavar="SCENARIO")
    k.add_argument("--params", required=True, help="JSON object of params, as printed by a failure")
    k.add_argument("--frameworks", type=_csv(FRAMEWORKS, "framework"), default=list(FRAMEWORKS))

    s = sub.add_parser("selfcheck", help="trust the clock: harness medians vs the frameworks' own benchmark tools")
    s.add_argument("--frameworks", type=_csv(FRAMEWORKS, "framework"), default=list(FRAMEWORKS))
    s.add_argument("--out", type=Path, default=None, help="also write the rows as JSON into this folder")

    _add_regress_parser(sub, ORDER)
    return p


def _add_regress_parser(sub: Any, order: Sequence[str]) -> None:
    from harness.regress import CLOCKS

    r = sub.add_parser("regress", help="baseline vs candidate: timing changes with intervals, numerical changes")
    r.add_argument("--baseline", type=Path, required=True, help="a result file")
    r.add_argument("--candidate", type=Path, default=None,
                   help="a result file; without it, a fresh run of the baseline's scenarios, frameworks, size, seed")
    r.add_argument("--threshold", type=_threshold, default=0.10, help="timing change that counts (default 10%%)")
    r.add_argument("--confidence", type=_confidence, default=0.95, help="of the ratio's interval (default 0.95)")
    r.add_argument("--clock", choices=CLOCKS, default="device_done")
    r.add_argument("--scenarios", type=_csv(order, "scenario"), default=None, help="compare only these")
    r.add_argument("--frameworks", type=_csv(FRAMEWORKS, "framework"), default=None, help="compare only these")
    r.add_argument("--variants", default=None, help="compare only these variants (comma-separated)")
    r.add_argument("--all", action="store_true", help="show unchanged rows too")
    r.add_argument("--allow-version-change", action="store_true",
                   help="compare a framework's rows across a change of its version")
    fresh = r.add_argument_group("fresh candidate run (without --candidate)")
    fresh.add_argument("--out", type=Path, default=None, help="folder for the candidate's result (default results/)")
    fresh.add_argument("--timeout", type=_positive_float, default=None, help="seconds per framework per scenario")
    fresh.add_argument("--isolation", choices=["process", "none"], default=None)
    fresh.add_argument("--gpu-memory-fraction", type=_fraction, default=None)
    fresh.add_argument("--quiet", action="store_true", help="no progress output")


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
    from harness.results import ResultError, check_writable, result_name, unused_name, write_atomic
    from harness.runner import CompareOptions, run_compare
    from harness.timeline import write_timelines

    if a.no_equivalence and a.no_timing:
        raise UsageError("--no-equivalence and --no-timing together leave nothing to do")
    _check_memory_fraction(a.gpu_memory_fraction, len(a.frameworks))
    _check_faults()
    size = a.size if a.size != "auto" else ("full" if gpu_present() else "smoke")
    examples = a.examples if a.examples is not None else EXAMPLES.get(size, EXAMPLES["full"])
    try:
        check_writable(a.out)
    except ResultError as e:
        raise UsageError(str(e)) from None
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(2**32)
    opts = CompareOptions(scenarios=a.scenarios, frameworks=a.frameworks, size=size, examples=examples, seed=seed,
                          isolation=a.isolation, timeout_s=a.timeout, equivalence=not a.no_equivalence,
                          timing=not a.no_timing, argv=["python -m harness", *argv],
                          gpu_memory_fraction=a.gpu_memory_fraction, budget_s=a.budget)
    doc = run_compare(opts, make_ui(a.quiet))
    name = unused_name(a.out, result_name(doc), with_folder=True)
    pictures = write_timelines(doc, a.out, Path(name).stem)  # referenced from the result, relative to it
    path = write_atomic(doc, a.out, name)
    render_terminal(doc, make_console())
    ok, problems = summary_status(doc)
    print(f"result: {path}", flush=True)
    if pictures:
        print(f"timelines: {a.out / Path(name).stem}/ ({len(pictures) // 2} scenarios, PNG + Chrome trace)", flush=True)
    if not a.no_report:
        from harness.report_html import make_report

        try:
            print(f"report: {make_report(path)}", flush=True)
        except Exception as e:  # the result is written; a report that fails must not hide it
            problems.append(f"report not written: {type(e).__name__}: {e}")
            ok = False
    for p in problems:  # a scenario the budget or a stop left out is missing, not failed; exit 1 either way
        print(f"{'INCOMPLETE' if ': not run (' in p else 'FAILED'} {p}", file=sys.stderr)
    return 0 if ok else 1


def cmd_report(a: argparse.Namespace) -> int:
    from harness.report_html import make_report
    from harness.results import ResultError

    try:
        page = make_report(a.result, a.out)
    except ResultError as e:
        raise UsageError(str(e)) from None
    print(f"report: {page}")
    print(f"        {page.with_name('report.md')}")
    return 0


def cmd_docs(a: argparse.Namespace) -> int:
    from harness.docs import DocsError, generate, stale, write

    try:
        files = generate()
    except DocsError as e:
        raise UsageError(str(e)) from None
    if a.check:
        out = stale(files)
        for path in out:
            print(f"stale: {path} (regenerate with `python -m harness docs` or `make docs`)", file=sys.stderr)
        return 1 if out else 0
    for path in write(files):
        print(f"wrote {path}")
    return 0


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


def _check_memory_fraction(option: float | None, n_frameworks: int) -> float:
    """The fraction in effect (option, else $TRIPTYCH_GPU_MEMORY_FRACTION, else the default); the
    frameworks' caps must fit in the GPU together."""
    from harness.backends.base import MEMORY_FRACTION_ENV, Unavailable, memory_fraction

    if option is None:
        try:
            option = memory_fraction()
        except Unavailable as e:
            raise UsageError(str(e)) from None
        where = f"{MEMORY_FRACTION_ENV}={option:g}"
    else:
        where = f"--gpu-memory-fraction {option:g}"
    if option * n_frameworks > 1.0 + 1e-9:
        raise UsageError(f"{where} x {n_frameworks} frameworks is {option * n_frameworks:.2f} of the GPU: "
                         "they would not fit in it together")
    return option


def _check_faults() -> None:
    from harness import faults

    try:
        faults.planted()
    except ValueError as e:
        raise UsageError(str(e)) from None


def _load_result(path: Path, option: str) -> dict[str, Any]:
    from harness.results import ResultError, load

    try:
        return load(path)
    except ResultError as e:
        raise UsageError(f"{option} {e}") from None


def cmd_regress(a: argparse.Namespace, argv: list[str]) -> int:
    from harness.regress import RegressError, regress
    from harness.regress_view import render
    from harness.report import make_console
    from scenarios import ORDER, get

    fresh_only = [o for o, v in (("--out", a.out), ("--timeout", a.timeout), ("--isolation", a.isolation),
                                 ("--gpu-memory-fraction", a.gpu_memory_fraction)) if v is not None]
    if a.candidate is not None and fresh_only:
        raise UsageError(f"{', '.join(fresh_only)} only apply to a fresh candidate run: drop them or --candidate")
    base = _load_result(a.baseline, "--baseline")
    cand = _load_result(a.candidate, "--candidate") if a.candidate is not None else None
    for name in a.scenarios or []:
        if name not in base["scenarios"]:
            raise UsageError(f"scenario {name!r} is not in the baseline (it has: {', '.join(base['scenarios'])})")
    variants = None
    if a.variants is not None:
        variants = [v.strip() for v in a.variants.split(",") if v.strip()]
        if not variants:
            raise UsageError("no variant given")
        names = [s for s in (a.scenarios or base["scenarios"]) if s in ORDER]
        known = {v.name for s in names for v in get(s).variants}
        unknown = [v for v in variants if v not in known]
        if unknown:
            raise UsageError(f"unknown variant {', '.join(map(repr, unknown))} (variants of {', '.join(names)}: "
                             f"{', '.join(sorted(known))})")
    if cand is None:
        cand, cand_name = _fresh_candidate(a, base, argv)
    else:
        cand_name = str(a.candidate)
    try:
        res = regress(base, cand, base_name=str(a.baseline), cand_name=cand_name, clock=a.clock,
                      threshold=a.threshold, confidence=a.confidence, scenarios=a.scenarios,
                      frameworks=a.frameworks, variants=variants, across_versions=a.allow_version_change)
    except RegressError as e:
        raise UsageError(str(e)) from None
    render(res, base, cand, make_console(), show_all=a.all)
    return 1 if res.regressions else 0


def _fresh_candidate(a: argparse.Namespace, base: dict[str, Any], argv: list[str]) -> tuple[dict[str, Any], str]:
    """Time the baseline's scenarios and frameworks at its size and seed, now; write the result."""
    from harness.progress import make_ui
    from harness.results import ResultError, check_writable, write_atomic
    from harness.runner import CompareOptions, run_compare
    from scenarios import ORDER

    scenarios = [s for s in base["scenarios"] if s in ORDER and (a.scenarios is None or s in a.scenarios)]
    frameworks = [f for f in FRAMEWORKS if f in base["environment"].get("frameworks", {})
                  and (a.frameworks is None or f in a.frameworks)]
    if not scenarios or not frameworks:
        raise UsageError("the baseline names no scenario or framework that this harness can run")
    if base["size"] not in ("smoke", "full") or not isinstance(base.get("seed"), int):
        raise UsageError(f"--baseline has size {base['size']!r} and seed {base.get('seed')!r}: cannot rerun it")
    if not any(r.get("timing") for s in base["scenarios"].values() for r in s["rows"]):
        raise UsageError("--baseline has no timed rows to compare with")
    if base["environment"].get("gpu") and not gpu_present():
        raise UsageError(f"the baseline ran on {base['environment']['gpu']}; this machine has no GPU to rerun it on")
    fraction = a.gpu_memory_fraction
    if fraction is None and isinstance(base["environment"].get("gpu_memory_fraction"), float):
        fraction = base["environment"]["gpu_memory_fraction"]  # like with like
    _check_memory_fraction(fraction, len(frameworks))
    _check_faults()
    out = a.out if a.out is not None else DEFAULT_OUT
    try:
        check_writable(out)
    except ResultError as e:
        raise UsageError(str(e)) from None
    opts = CompareOptions(scenarios=scenarios, frameworks=frameworks, size=base["size"],
                          examples=int(base.get("examples") or 1), seed=base["seed"],
                          isolation=a.isolation or "process", timeout_s=a.timeout or TIMEOUT_S, equivalence=False,
                          timing=True, argv=["python -m harness", *argv], gpu_memory_fraction=fraction)
    doc = run_compare(opts, make_ui(a.quiet))
    path = write_atomic(doc, out)
    print(f"candidate: {path}", flush=True)
    return _load_result(path, "--candidate"), str(path)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        a = build_parser().parse_args(argv)
        if a.cmd == "list":
            return cmd_list()
        if a.cmd == "compare":
            return cmd_compare(a, argv)
        if a.cmd == "report":
            return cmd_report(a)
        if a.cmd == "docs":
            return cmd_docs(a)
        if a.cmd == "check":
            return cmd_check(a)
        if a.cmd == "selfcheck":
            return cmd_selfcheck(a)
        if a.cmd == "regress":
            return cmd_regress(a, argv)
    except UsageError as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("harness: interrupted (no result file written)", file=sys.stderr)
        return 130
    raise AssertionError(a.cmd)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
