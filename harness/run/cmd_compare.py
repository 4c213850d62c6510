"""`compare`: equivalence, then timing; the result JSON first, then what is drawn from it.

Order of writing, so that no measurement is lost: while the run goes, a checkpoint after every
scenario (<result stem>.pid<N>.partial.json, a result with complete false: what a run killed outright
or a machine that died leaves); then the result file (or, when its folder cannot take it, a rescue copy
whose place the error names), which replaces the checkpoint, then the terminal table, then the
timelines, then the report. A stop (Ctrl-C, SIGTERM) after the result is written keeps it and exits
130 / 143.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

from harness.run.parser import UsageError, gpu_present
from harness.run.options import EXAMPLES
from harness.measure import machine
from harness.measure.profiling import plan_profiles, write_profiles
from harness.measure.timing import OVERRIDE_ENV
from harness.measure.timeline import plan_timelines, write_timelines
from harness.report.html import make_report
from harness.report.report import Problem, make_console, render_terminal, summary_status
from harness.results.files import OutputError, check_writable
from harness.results.model import Result
from harness.results.results import as_written, checkpoint_name, claim_name, refused, release_folder, write_checkpoint, write_or_rescue
from harness.run import stops
from harness.run.progress import make_ui
from harness.run.runner import CompareOptions, Run, run_compare
from harness.run.stops import Stopped
from harness.workers import faults
from scenarios import default_run


def start_checks(out: Path, fraction: float | None, frameworks: list[str], processes: int,
                 scenarios: Sequence[str] | None = None, size: str | None = None, world_size: int | None = None,
                 label: str = "", processes_option: bool = True) -> None:
    """What every run checks before any work: memory caps that fit (Run.check_memory_fits: together, and
    each above what the run's largest point at `size` holds), planted faults, a writable --out.
    scenarios: those selected (None: any may run); rank groups are counted only where one needs them."""

    Run.check_memory_fits(fraction, frameworks, processes, scenarios, gpu_present, size, machine.gpu_memory_bytes,
                          world_size, label, processes_option)
    if OVERRIDE_ENV in os.environ:
        raise UsageError(f"${OVERRIDE_ENV} is set here: every process would time on other settings than the preset "
                         "the result names; it sets one side of an interleaved regress (--candidate-env)")
    try:
        faults.planted()
        check_writable(out)
    except (ValueError, OutputError) as e:
        raise UsageError(str(e)) from None


def run(a: argparse.Namespace, argv: list[str]) -> int:


    if a.no_equivalence and a.no_timing:
        raise UsageError("--no-equivalence and --no-timing together leave nothing to do")
    a.gpu_memory_fraction = Run.memory_fraction(a.gpu_memory_fraction, a.processes, a.frameworks)
    gpu = gpu_present()
    scenarios = a.scenarios if a.scenarios is not None else list(default_run(gpu))
    size = a.size if a.size != "auto" else ("full" if gpu else "smoke")
    start_checks(a.out, a.gpu_memory_fraction, a.frameworks, a.processes, scenarios, size, a.world_size)
    examples = a.examples if a.examples is not None else EXAMPLES.get(size, EXAMPLES["full"])
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(2**32)
    opts = CompareOptions(scenarios=scenarios, frameworks=a.frameworks, size=size, examples=examples, seed=seed,
                          isolation=a.isolation, timeout_s=a.timeout, startup_timeout_s=a.startup_timeout,
                          equivalence=not a.no_equivalence,
                          timing=not a.no_timing, argv=["python -m harness", *argv],
                          gpu_memory_fraction=a.gpu_memory_fraction, budget_s=a.budget,
                          world_size=a.world_size, cpus=a.cpus, processes=a.processes, profile=a.profile)
    notice = "" if gpu or a.quiet else cpu_notice(None if a.scenarios is not None else scenarios)
    return measure_and_write(opts, a.out, a.quiet, report=not a.no_report, notice=notice)[0]


def cpu_notice(default_set: list[str] | None) -> str:
    """Said once at the start of a run without a GPU; default_set: the CPU set when --scenarios was not given."""
    text = ("no GPU here: CPU figures are indicative only. A CPU cannot decide what streams, copies and overlap "
            "do, so claims about a GPU's machinery read 'not decidable on a CPU'; equivalence and the counted "
            "claims are checked as on a GPU.")
    if default_set is not None:
        text += (f" Without --scenarios a CPU runs the {len(default_set)} scenarios that teach on a CPU "
                 f"({', '.join(default_set)}); a GPU runs them all; `python -m harness list` names the others.")
    return text


def measure_and_write(opts: Any, out: Path, quiet: bool, report: bool = True,
                      notice: str = "") -> tuple[int, Path | None]:
    """Run, write the result before anything that can fail after it, then draw; (exit status, result).
    A stop at any moment after measuring began ends in a written result (harness/run/stops.py): signals
    that arrive while the run shuts down and its result is written wait until it is on disk. notice:
    said once on stderr before the run starts (what a CPU run can tell)."""
    with stops.handling():
        return _measure_and_write(opts, out, quiet, report, notice)


def _measure_and_write(opts: Any, out: Path, quiet: bool, report: bool, notice: str) -> tuple[int, Path | None]:

    if notice:  # after the imports: an interpreter without the dependencies gets its one line alone
        print(notice, file=sys.stderr, flush=True)
    doc = run_compare(opts, make_ui(quiet), lambda so_far: write_checkpoint(so_far, out))  # returns, stops deferred
    name = claim_name(out, doc)  # the result's name and its pictures' folder, both ours alone
    stem = Path(name).stem
    drawn = plan_timelines(doc, stem)  # referenced from the result, relative to it; drawn after it is written
    # --profile's traces: into the claimed folder before the result, so that the result names only traces
    # that were written (where one could not be, its row says why); this never raises
    traces = write_profiles(doc, out, stem, plan_profiles(doc, stem))
    path, rescued = write_or_rescue(doc, out, name, claimed=True)
    if not rescued:  # the result holds all the checkpoint held; a rescued one leaves it where the run was
        with contextlib.suppress(OSError):
            os.unlink(out / checkpoint_name(doc))
    late = stops.resume()
    if late is not None:  # the run had measured everything when it was stopped
        release_folder(out, name)
        print(f"harness: stopped ({late}) after the result was written: {path} is complete", file=sys.stderr)
        return 128 + signal.Signals[late].value, path
    try:
        result = Result.from_dict(as_written(doc))  # the readers' view of what was written, typed once
        render_terminal(result, make_console())
        ok, problems = summary_status(result)
        print(f"result: {path}", flush=True)
        if rescued:
            print(f"harness: error: {rescued}; the measurements are kept in {path}", file=sys.stderr)
            ok = False
        invalid = refused(doc)  # the readers' own check: report and regress must be able to read what passed
        if invalid:
            problems.append(Problem("failed", f"the result file does not pass its own schema, so report and "
                                              f"regress refuse it: {invalid}"))
        if traces:
            print(f"profiles: {out / stem}/ ({len(traces)} traces, one profiled repeat a row)", flush=True)
        if path.suffix == ".json":  # a compressed rescue (the last place) is kept, not drawn from
            _draw(doc, result, path, stem, drawn, problems, report)
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
    sys.stderr.flush()
    print(verdict_line(result, ok, problems), flush=True)
    return (0 if ok else 1), path


def verdict_line(result: Result, ok: bool, problems: list[Any]) -> str:
    """The run's last line: whether every check passed (equivalence, every timed row's output, nothing
    left out), with the counts behind it and the claims' verdicts; a refuted claim is a finding, and a
    claim about a GPU's machinery that ran on a CPU is counted as not decidable there, not as refuted."""
    scns = result.scenarios.values()
    eqs = [s.equivalence.status for s in scns if s.equivalence]
    rows = [r for s in scns for r in s.rows if r.status not in ("skipped",)]
    right = sum(r.status == "ok" for r in rows)
    claims = [c for s in scns for c in s.claims or []]
    count = {k: sum(c.verdict == k for c in claims) for k in ("confirmed", "refuted", "inconclusive")}
    on_cpu = sum(c.verdict == "inconclusive" and c.not_decidable == "cpu" for c in claims)
    said = [f"{count['confirmed']} confirmed"]
    if count["refuted"]:
        said.append(f"{count['refuted']} refuted (findings, listed above)")
    if on_cpu:
        said.append(f"{on_cpu} not decidable on a CPU")
    if count["inconclusive"] - on_cpu:
        said.append(f"{count['inconclusive'] - on_cpu} inconclusive")
    parts = []
    if eqs:
        parts.append(f"equivalence {eqs.count('passed')}/{len(eqs)} scenarios")
    if rows:
        parts.append(f"{right}/{len(rows)} timed rows right")
    if claims:
        parts.append("claims " + ", ".join(said))
    failed = [p for p in problems if p.kind != "refuted"]
    unchecked = "passed" not in eqs  # --no-equivalence, or every scenario's equivalence skipped
    head = ("every check that ran passed (no equivalence check ran)" if ok and unchecked else "all checks passed"
            if ok else (f"NOT all checks passed ({len(failed)} listed above)" if failed else "NOT all checks passed"))
    return f"{head}: " + "; ".join(parts) if parts else head


def _draw(doc: dict[str, Any], result: Result, path: Path, stem: str, drawn: list[Any], problems: list[Any],
          report: bool) -> None:
    """The timelines from the run's document (the runner's own, with the traces), then the report from its result."""

    if drawn:
        written = write_timelines(doc, path.parent, stem)
        print(f"timelines: {path.parent / stem}/ ({len(written) // 2} of {len(drawn)} scenarios, PNG + Chrome trace)",
              flush=True)
        result = Result.from_dict(as_written(doc))  # a timeline that failed says why in the document: typed anew
    if report:

        try:
            print(f"report: {make_report(path, doc=result)}", flush=True)
        except Exception as e:  # noqa: BLE001 - the result is written; a report that fails must not hide it
            problems.append(Problem("failed", f"report not written: {type(e).__name__}: {e}"))
