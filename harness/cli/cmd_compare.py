"""`compare`: equivalence, then timing; the result JSON first, then what is drawn from it.

Order of writing, so that no measurement is lost: the result file (or, when its folder cannot take
it, a rescue copy whose place the error names), then the terminal table, then the timelines, then
the report. A stop (Ctrl-C, SIGTERM) after the result is written keeps it and exits 130 / 143.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

from harness.cli.parser import UsageError, gpu_present
from harness.options import EXAMPLES


def start_checks(out: Path, fraction: float | None, frameworks: list[str], processes: int) -> None:
    """What every run checks before any work: memory caps that fit, planted faults, a writable --out."""
    from harness import faults
    from harness.backends.base import MEMORY_FRACTION_ENV, Unavailable, memory_fraction
    from harness.files import OutputError, check_writable

    if fraction is None:
        try:
            fraction = memory_fraction()
        except Unavailable as e:
            raise UsageError(str(e)) from None
        where = f"{MEMORY_FRACTION_ENV}={fraction:g}"
    else:
        where = f"--gpu-memory-fraction {fraction:g}"
    n_frameworks = len(frameworks)
    if fraction * n_frameworks > 1.0 + 1e-9:
        raise UsageError(f"{where} x {n_frameworks} frameworks is {fraction * n_frameworks:.2f} of the GPU: "
                         "they would not fit in it together")
    if "jax" in frameworks and fraction * 2 * processes > 1.0 + 1e-9 and gpu_present():
        raise UsageError(f"{where} x {2 * processes} JAX processes ({processes} workers and as many rank groups, "
                         f"each keeping its pool) is {fraction * 2 * processes:.2f} of the GPU: use "
                         f"--gpu-memory-fraction {math.floor(100 / (2 * processes)) / 100:g} or fewer --processes")
    try:
        faults.planted()
        check_writable(out)
    except (ValueError, OutputError) as e:
        raise UsageError(str(e)) from None


def run(a: argparse.Namespace, argv: list[str]) -> int:
    from harness.backends.base import MEMORY_FRACTION_ENV
    from harness.options import default_memory_fraction
    from harness.runner import CompareOptions

    if a.no_equivalence and a.no_timing:
        raise UsageError("--no-equivalence and --no-timing together leave nothing to do")
    if a.gpu_memory_fraction is None and not os.environ.get(MEMORY_FRACTION_ENV, "").strip():
        a.gpu_memory_fraction = default_memory_fraction(a.processes, a.frameworks)  # JAX's pools must fit
    start_checks(a.out, a.gpu_memory_fraction, a.frameworks, a.processes)
    size = a.size if a.size != "auto" else ("full" if gpu_present() else "smoke")
    examples = a.examples if a.examples is not None else EXAMPLES.get(size, EXAMPLES["full"])
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(2**32)
    opts = CompareOptions(scenarios=a.scenarios, frameworks=a.frameworks, size=size, examples=examples, seed=seed,
                          isolation=a.isolation, timeout_s=a.timeout, equivalence=not a.no_equivalence,
                          timing=not a.no_timing, argv=["python -m harness", *argv],
                          gpu_memory_fraction=a.gpu_memory_fraction, budget_s=a.budget,
                          world_size=a.world_size, cpus=a.cpus, processes=a.processes)
    return measure_and_write(opts, a.out, a.quiet, report=not a.no_report)[0]


def measure_and_write(opts: Any, out: Path, quiet: bool, report: bool = True) -> tuple[int, Path | None]:
    """Run, write the result before anything that can fail after it, then draw; (exit status, result).
    A stop at any moment after measuring began ends in a written result (harness/stops.py): signals
    that arrive while the run shuts down and its result is written wait until it is on disk."""
    from harness import stops

    with stops.handling():
        return _measure_and_write(opts, out, quiet, report)


def _measure_and_write(opts: Any, out: Path, quiet: bool, report: bool) -> tuple[int, Path | None]:
    from harness import stops
    from harness.progress import make_ui
    from harness.report import make_console, render_terminal, summary_status
    from harness.results import claim_name, release_folder, write_or_rescue
    from harness.runner import run_compare
    from harness.stops import Stopped
    from harness.timeline import plan_timelines

    doc = run_compare(opts, make_ui(quiet))  # returns with stops deferred
    stops.pause("result")
    name = claim_name(out, doc)  # the result's name and its pictures' folder, both ours alone
    stem = Path(name).stem
    drawn = plan_timelines(doc, stem)  # referenced from the result, relative to it; drawn after it is written
    path, rescued = write_or_rescue(doc, out, name, claimed=True)
    late = stops.resume()
    if late is not None:  # the run had measured everything when it was stopped
        release_folder(out, name)
        print(f"harness: stopped ({late}) after the result was written: {path} is complete", file=sys.stderr)
        return 128 + signal.Signals[late].value, path
    try:
        render_terminal(doc, make_console())
        ok, problems = summary_status(doc)
        print(f"result: {path}", flush=True)
        if rescued:
            print(f"harness: error: {rescued}; the measurements are kept in {path}", file=sys.stderr)
            ok = False
        _draw(doc, path, stem, drawn, problems, report)
        ok = ok and all(p.kind == "refuted" for p in problems)  # a report that could not be written fails too
    except (KeyboardInterrupt, Stopped) as e:
        stops.defer()  # a second signal now is ignored
        sig = str(e) if isinstance(e, Stopped) else "SIGINT"
        print(f"harness: stopped ({sig}) after the result was written: {path} is complete", file=sys.stderr)
        return 128 + signal.Signals[sig].value, path
    finally:
        release_folder(out, name)  # the claimed folder, where no timeline or report went
    for p in problems:  # a scenario left out is missing, not failed; a refuted claim is a finding
        print(f"{p.kind.upper()} {p}", file=sys.stderr)
    return (0 if ok else 1), path


def _draw(doc: dict[str, Any], path: Path, stem: str, drawn: list[Any], problems: list[Any], report: bool) -> None:
    from harness.report import Problem
    from harness.timeline import write_timelines

    from harness import stops

    if drawn:
        stops.pause("timelines")
        written = write_timelines(doc, path.parent, stem)
        print(f"timelines: {path.parent / stem}/ ({len(written) // 2} of {len(drawn)} scenarios, PNG + Chrome trace)",
              flush=True)
    if report:
        stops.pause("report")
        from harness.report_html import make_report
        from harness.results import as_written

        try:
            print(f"report: {make_report(path, doc=as_written(doc))}", flush=True)
        except Exception as e:  # noqa: BLE001 - the result is written; a report that fails must not hide it
            problems.append(Problem("failed", f"report not written: {type(e).__name__}: {e}"))
