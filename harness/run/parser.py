"""The command line's grammar: every command's options, their types and bounds, their help.

Defaults come from their one source: `CompareOptions` (harness/run/runner.py) for a run's settings.
"""
from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
from pathlib import Path
from typing import Any, NoReturn, Sequence

from harness.backends import FRAMEWORKS, backend_class, in_prose
from harness.run.options import EXAMPLES
from harness.regress.regress import CLOCKS
from harness.run.options import CompareOptions
from harness.workers.cpus import CpuSpecError, parse
from scenarios import CPU_RUN, OPT_IN, ORDER

ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_OUT = ROOT / "runs"  # ignored by git; results/ holds runs committed on purpose (--out results)
MAX_EXAMPLES = 10_000
MAX_PROCESSES = 16  # --processes; a baseline file's count too (cmd_regress), which the schema bounds alike
# The interleaved run's options and their defaults; a run of result files takes none of them.
INTERLEAVED = {"size": "auto", "seed": None, "pairs": 4, "max_pairs": 12, "budget": None, "fdr": 0.05,
               "world_size": None, "turns": "point", "same_cpu": False,
               "host_covariate": True}


def default(name: str) -> Any:
    """A run setting's default, from CompareOptions: the one place it is written."""
    return next(f.default for f in dataclasses.fields(CompareOptions) if f.name == name)


class UsageError(Exception):
    """Bad input: reported as one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not usage + message
        raise UsageError(message)


def _cpus(text: str) -> str | list[int]:
    try:
        return parse(text)
    except CpuSpecError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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


def bounded_int(lo: int, hi: int, what: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, not {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{what} must be between {lo} and {hi}, not {v}")
        return v

    return parse


def _number(what: str, ok: Any, bounds: str, kind: str = "a number"):
    """A float option: `{what} must be {kind}` when it is not one, `{what} must be {bounds}` when not ok(v)."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be {kind}, not {text!r}") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(f"{what} must be {bounds}, not {text}")
        return v

    return parse


def _seconds(what: str):
    return _number(what, lambda v: 0 < v <= 86_400, "> 0 and at most a day", "a number of seconds")


_positive_float = _seconds("timeout")
memory_fraction = _number("--gpu-memory-fraction", lambda v: 0 < v <= 1, "in (0, 1]")
_confidence = _number("--confidence", lambda v: 0.5 <= v <= 0.999, "between 0.5 and 0.999")


def _share(option: str, lo: float, hi: float, bounds: str, open_lo: bool = False, open_hi: bool = False):
    """A share given as a fraction (0.1) or a percentage (10%), within [lo, hi] (an end open where said):
    `{option} must be {bounds}` outside; every message names the option it parses."""
    def parse(text: str) -> float:
        t = text.strip()
        try:
            v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{option} must be a fraction (0.1) or a percentage (10%), not {text!r}") from None
        if not ((lo < v if open_lo else lo <= v) and (v < hi if open_hi else v <= hi)):
            raise argparse.ArgumentTypeError(f"{option} must be {bounds}, not {text}")
        return v

    return parse


# 10% or 0.1; at least 0.1% and at most 500% (a threshold past that would hide everything)
_threshold = _share("--threshold", 0.001, 5, "between 0.1% and 500%")
# a false discovery rate is a probability: 0 would call nothing different, 1 everything
_fdr = _share("--fdr", 0, 1, "above 0 and below 1 (100%)", open_lo=True, open_hi=True)


def _nonempty(option: str):
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{option} is empty")
        return text

    return parse


def _path(option: str):
    """A path option: refused when empty (Path('') is the current folder, which nobody means by it) or
    when its name is not text (a byte that is not UTF-8 could not be said in the result, the report or a
    message)."""
    def parse(text: str) -> Path:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{option} is empty: name a file or folder")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise argparse.ArgumentTypeError(f"{option} {shown!r} has a byte that is not UTF-8 text: name a path "
                                             "whose name is") from None
        return Path(text)

    return parse


def gpu_present() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        q = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return q.returncode == 0 and "GPU" in q.stdout


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m harness", description=f"triptych: the host/device paradigm in {in_prose()}")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    sub.add_parser("list", help="the scenarios, their variants and concepts")

    _add_compare_parser(sub, ORDER)

    r = sub.add_parser("report", help="report.md and a self-contained report.html from a result file")
    r.add_argument("result", type=_path("RESULT.json"), metavar="RESULT.json")
    r.add_argument("--out", type=_path("--out"), default=None,
                   help="folder for the report (default: next to the result, named after its stem)")

    x = sub.add_parser("export", help="a result as a tidy CSV (pandas reads it as is) or a Markdown summary for CI")
    x.add_argument("result", type=Path, metavar="RESULT.json")
    form = x.add_mutually_exclusive_group(required=True)
    form.add_argument("--csv", dest="form", action="store_const", const="csv",
                      help="one line per scenario x point x framework x variant x clock: median, q1, q3 (seconds), "
                           "processes, samples, status")
    form.add_argument("--markdown", dest="form", action="store_const", const="markdown",
                      help="per scenario a table of variants x frameworks, the equivalence verdict and the claims, "
                           "for a CI job's summary page ($GITHUB_STEP_SUMMARY)")
    x.add_argument("--out", type=Path, default=None, metavar="FILE",
                   help="write into this file, atomically (default: standard output); never the result itself")

    d = sub.add_parser("docs", help="regenerate docs/porting.md and docs/scenarios.md from the specs")
    d.add_argument("--check", action="store_true", help="write nothing; exit 1 when either is stale")

    k = sub.add_parser("check", help="run one equivalence example (the reproducer a failure prints)")
    k.add_argument("scenario", choices=list(ORDER), metavar="SCENARIO")
    k.add_argument("--params", required=True, help="JSON object of params, as printed by a failure")
    k.add_argument("--frameworks", type=_csv(FRAMEWORKS, "framework"), default=list(FRAMEWORKS),
                   help="comma-separated frameworks (default: all)")

    s = sub.add_parser("selfcheck", help="trust the clock: harness medians vs the frameworks' own benchmark tools")
    s.add_argument("--frameworks", type=_csv(FRAMEWORKS, "framework"), default=list(FRAMEWORKS),
                   help="comma-separated frameworks (default: all)")
    s.add_argument("--out", type=_path("--out"), default=None, help="also write the rows as JSON into this folder")

    _add_regress_parser(sub, ORDER)
    return p


def _add_compare_parser(sub: Any, order: Sequence[str]) -> None:
    c = sub.add_parser("compare", help="equivalence, then timing, of scenarios x frameworks x variants")
    c.add_argument("--scenarios", type=_csv(order, "scenario"), default=None,
                   help="comma-separated scenarios to run (default on a GPU: all in registry order but "
                        f"{', '.join(OPT_IN)}, which start a fresh process every repeat and run when named; "
                        f"without a GPU: the {len(CPU_RUN)} that teach on a CPU, {', '.join(CPU_RUN)})")
    c.add_argument("--frameworks", type=_csv(FRAMEWORKS, "framework"), default=list(FRAMEWORKS),
                   help=f"comma-separated frameworks (default: {','.join(FRAMEWORKS)})")
    c.add_argument("--size", choices=["auto", "smoke", "full"], default="auto",
                   help="full on a GPU machine, smoke (small, fast: what a CPU runs) elsewhere; default: auto")
    c.add_argument("--examples", type=bounded_int(1, MAX_EXAMPLES, "--examples"), default=None,
                   help=f"hypothesis examples per scenario (default {EXAMPLES['full']} full, {EXAMPLES['smoke']} smoke)")
    c.add_argument("--out", type=_path("--out"), default=DEFAULT_OUT,
                   help="folder for the result JSON (default runs/, ignored by git; --out results for a run to commit)")
    c.add_argument("--seed", type=bounded_int(0, 2**32 - 1, "--seed"), default=None,
                   help="seed of every input and of hypothesis (default: a random one, recorded in the result)")
    c.add_argument("--isolation", choices=["process", "none"], default=default("isolation"),
                   help="a child process per framework (default) or everything in this process")
    c.add_argument("--timeout", type=_positive_float, default=default("timeout_s"),
                   help=f"seconds per framework per scenario (default {default('timeout_s'):g})")
    c.add_argument("--startup-timeout", type=_positive_float, default=default("startup_timeout_s"),
                   help="seconds a framework's worker may take to import and pick its device before it counts as "
                        f"failed (default {default('startup_timeout_s'):g}; on a loaded host an import alone can take 20 s)")
    c.add_argument("--budget", type=_seconds("--budget"), default=None,
                   help="wall-clock seconds for the whole run: no scenario starts once they are spent; the result "
                        "keeps what finished and names what did not run (also on SIGTERM)")
    c.add_argument("--no-equivalence", action="store_true", help="skip the equivalence checks: timing only")
    c.add_argument("--no-timing", action="store_true", help="skip the timing: equivalence only")
    c.add_argument("--quiet", action="store_true", help="no progress output")
    c.add_argument("--gpu-memory-fraction", type=memory_fraction, default=None,
                   help="of the GPU's memory, each framework's cap (default $TRIPTYCH_GPU_MEMORY_FRACTION or 0.15)")
    c.add_argument("--processes", type=bounded_int(1, MAX_PROCESSES, "--processes"), default=default("processes"),
                   help=f"worker processes per framework that time every row, interleaved (default "
                        f"{default('processes')}); more give regress tighter intervals (Student's t on "
                        "the processes' medians) and cost time in proportion")
    c.add_argument("--world-size", type=bounded_int(1, 1024, "--world-size"), default=None,
                   help="rank processes per framework for the rank scenarios (default: the number of GPUs, or 2)")
    c.add_argument("--cpus", type=_cpus, default=default("cpus"),
                   help="CPUs of every process of the run: all (default), auto (time each CPU, drop those slow "
                        "throughout), or numbers such as 0-3,8")
    c.add_argument("--no-report", action="store_true",
                   help="do not write report.md/report.html (default: into a folder named after the result file)")
    c.add_argument("--profile", action="store_true",
                   help="after each row's timed repeats, one more under the framework's own profiler ("
                        + "; ".join(f"{backend_class(f).short_name}: {backend_class(f).profiler}" for f in FRAMEWORKS)
                        + "), written beside the result and linked from the report; no figure changes")


def _add_regress_parser(sub: Any, order: Sequence[str]) -> None:
    r = sub.add_parser("regress", help="baseline vs candidate: timing changes with intervals, numerical changes")
    r.add_argument("--baseline", type=_path("--baseline"), default=None,
                   help="a result file (or --baseline-tree / --baseline-python: an interleaved run of both sides)")
    r.add_argument("--candidate", type=_path("--candidate"), default=None,
                   help="a result file; without it, a fresh run of the baseline's scenarios, frameworks, size, seed")
    r.add_argument("--threshold", type=_threshold, default=0.10, help="timing change that counts (default 10%%)")
    r.add_argument("--confidence", type=_confidence, default=0.95, help="of the ratio's interval (default 0.95)")
    r.add_argument("--clock", choices=CLOCKS, default="device_done", help="which clock to compare (default device_done)")
    r.add_argument("--scenarios", type=_csv(order, "scenario"), default=None, help="compare only these")
    r.add_argument("--frameworks", type=_csv(FRAMEWORKS, "framework"), default=None, help="compare only these")
    r.add_argument("--variants", default=None, help="compare only these variants (comma-separated)")
    r.add_argument("--all", action="store_true", help="show unchanged rows too")
    r.add_argument("--allow-version-change", action="store_true",
                   help="compare a framework's rows across a change of its version")
    fresh = r.add_argument_group("fresh candidate run (without --candidate)")
    fresh.add_argument("--out", type=_path("--out"), default=None, help="folder for the candidate's result (default runs/)")
    fresh.add_argument("--timeout", type=_positive_float, default=None,
                       help=f"seconds per framework per scenario (default {default('timeout_s'):g})")
    fresh.add_argument("--isolation", choices=["process", "none"], default=None,
                       help=f"as for compare (default {default('isolation')})")
    fresh.add_argument("--gpu-memory-fraction", type=memory_fraction, default=None,
                       help="as for compare (default: the baseline's)")
    fresh.add_argument("--quiet", action="store_true", help="no progress output")
    both = r.add_argument_group(
        "interleaved run (baseline and candidate timed in one run, process pairs in A-B-B-A order)")
    for side in ("baseline", "candidate"):
        both.add_argument(f"--{side}-tree", type=_nonempty(f"--{side}-tree"), default=None, metavar="DIR_OR_REF",
                          help=f"the {side}'s code: a folder, or a git ref checked out into a temporary worktree "
                               "(default: this checkout)")
        both.add_argument(f"--{side}-python", type=_nonempty(f"--{side}-python"), default=None, metavar="PY",
                          help=f"the {side}'s interpreter (default: this one)")
        both.add_argument(f"--{side}-env", action="append", default=[], metavar="KEY=VALUE",
                          help=f"an environment variable of the {side}'s processes alone (repeatable), e.g. "
                               "TRIPTYCH_FAULT=... (a planted fault) or TRIPTYCH_TIMING='{\"warmup_s\": 0}' (other "
                               "timing settings than the preset's, to measure what they change)")
    # their defaults (INTERLEAVED) are filled in by the interleaved run: None says "not given", which a run of
    # result files refuses rather than ignores
    both.add_argument("--size", choices=["auto", "smoke", "full"], default=None,
                      help="full on a GPU machine, smoke elsewhere (default: auto)")
    both.add_argument("--seed", type=bounded_int(0, 2**32 - 1, "--seed"), default=None,
                      help="seed of every input, the same on both sides (default: a random one)")
    both.add_argument("--pairs", type=bounded_int(2, 64, "--pairs"), default=None,
                      help="process pairs every row gets first (default 4)")
    both.add_argument("--max-pairs", type=bounded_int(2, 256, "--max-pairs"), default=None,
                      help="pairs at most: rows whose verdict is unknown get two more pairs at a time, A-B and "
                           "B-A (default 12)")
    both.add_argument("--budget", type=_seconds("--budget"), default=None,
                      help="seconds after which no new point or pair starts (default: none; --max-pairs bounds the "
                           "run); the first pairs time every point two at a time and a point started runs through "
                           "its two; points that pairs 1-2 did not reach are listed as not timed, the result files "
                           "are incomplete and the exit code is 1; points that later first pairs did not reach keep "
                           "fewer pairs")
    both.add_argument("--fdr", type=_fdr, default=None,
                      help="false discovery rate over the run's rows, Benjamini-Hochberg (default 0.05)")
    both.add_argument("--turns", choices=["point", "call"], default=None,
                      help="how a pair's two processes share the GPU: a point at a time, one side's requests after "
                           "the other's (default), or call by call, each side's call of a row milliseconds from the "
                           "other's (experimental: it narrows the host-paced rows' spread but adds tens of "
                           "microseconds to each call of a microsecond row, whose figures and ratios it distorts: "
                           "docs/regress.md); rank groups always take a point at a time")
    both.add_argument("--same-cpu", action="store_true", default=None,
                      help="a pair's two processes of a framework live on one CPU, every thread of theirs "
                           "included, with one OpenMP thread unless OMP_NUM_THREADS is set; the pairs take the "
                           "run's CPUs in turn, so that both sides read one CPU. Not shown to narrow host-paced "
                           "rows on a host at two speeds (docs/regress.md). Rank groups are not pinned. A "
                           "one-CPU process's figures are not an unpinned run's")
    both.add_argument("--host-covariate", action=argparse.BooleanOptionalAction, default=None,
                      help="time a short Python loop just before each repeat (twice, 0.1-0.2 ms a repeat) "
                           "and judge a row of 6 pairs or more at equal host speeds: its pairs' log ratios "
                           "regressed on the log ratios of their processes' median loops, the change read where the "
                           "two agree (default: on where both sides run one Python and the pairs take a point at a "
                           "time; --no-host-covariate judges every row plain; docs/regress.md)")
    both.add_argument("--world-size", type=bounded_int(1, 1024, "--world-size"), default=None,
                      help="rank processes per framework for the rank scenarios (default: the number of GPUs, or 2)")
