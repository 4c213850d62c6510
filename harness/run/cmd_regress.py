"""`regress --baseline A.json [--candidate B.json]`: timing and numerical changes of B against A; without
--candidate, a fresh run of A's scenarios, frameworks, size and seed is the candidate.
`regress --baseline-tree DIR_OR_REF | --baseline-python PY [--candidate-tree ...] [--candidate-python ...]`:
both sides timed in one run, process pair by process pair (harness/run/interleave.py)."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from harness.backends import FRAMEWORKS
from harness.run.parser import (DEFAULT_OUT, INTERLEAVED, MAX_EXAMPLES, MAX_PROCESSES, UsageError, bounded_int,
                                memory_fraction, default, gpu_present)
from harness.backends.base import DEFAULT_MEMORY_FRACTION, MEMORY_FRACTION_ENV
from harness.measure import machine
from harness.measure.timing import OVERRIDE_ENV, overrides, preset
from harness.regress.regress import RegressError, regress
from harness.regress.view import render, render_paired
from harness.report.report import make_console
from harness.results.model import Result
from harness.results.results import ResultError, claim_name, read, refused, release_folder, write_or_rescue
from harness.run import stops
from harness.run.cmd_compare import start_checks
from harness.run.interleave import ADDED, ROOT, Plan, Schedule, Side, SideError, check_python, run as run_interleaved, tree
from harness.run.progress import make_ui
from harness.run.runner import CompareOptions, Run, run_compare
from harness.run.stops import Stopped
from harness.workers import faults
from harness.workers.ranks import FAULT_RANK_ENV
from scenarios import DEFAULT_RUN, ORDER, get


class CandidateStopped(Exception):
    """The fresh candidate run was stopped: what it measured is written, nothing is compared."""

    def __init__(self, signal_name: str, path: Any) -> None:
        super().__init__(signal_name)
        self.signal_name, self.path = signal_name, path


def _load(path: Any, option: str) -> Result:
    try:
        return read(path)
    except ResultError as e:
        raise UsageError(f"{option} {e}") from None


def _given(a: argparse.Namespace, options: Any) -> list[str]:
    """The options among `options` (argparse names) given on the command line (their default is None), as typed:
    --no-X where a switch X was turned off."""
    return [("--no-" if getattr(a, o) is False and isinstance(INTERLEAVED.get(o), bool) else "--") + o.replace("_", "-")
            for o in options if getattr(a, o, None) is not None]


def _variants(a: argparse.Namespace, base: Result) -> list[str] | None:
    for name in a.scenarios or []:
        if name not in base.scenarios:
            raise UsageError(f"scenario {name!r} is not in the baseline (it has: {', '.join(base.scenarios)})")
    if a.variants is None:
        return None
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    if not variants:
        raise UsageError("no variant given")
    names = [s for s in (a.scenarios or base.scenarios) if s in ORDER]
    known = {v.name for s in names for v in get(s).variants}
    unknown = [v for v in variants if v not in known]
    if unknown:
        raise UsageError(f"unknown variant {', '.join(map(repr, unknown))} (variants of {', '.join(names)}: "
                         f"{', '.join(sorted(known))})")
    return variants


def run(a: argparse.Namespace, argv: list[str]) -> int:

    sides = [o for o in ("baseline_tree", "baseline_python", "candidate_tree", "candidate_python",
                         "baseline_env", "candidate_env") if getattr(a, o)]
    if sides:
        return _interleaved(a, argv, ["--" + o.replace("_", "-") for o in sides])
    if a.baseline is None:
        raise UsageError("--baseline (a result file) or --baseline-tree / --baseline-python (an interleaved run) "
                         "is required")
    interleaved_only = _given(a, INTERLEAVED)
    if interleaved_only:
        one = len(interleaved_only) == 1
        raise UsageError(f"{', '.join(interleaved_only)} only appl{'ies' if one else 'y'} to an interleaved run "
                         f"(--baseline-tree or --baseline-python), not to result files: drop {'it' if one else 'them'}")
    fresh_only = [o for o, v in (("--out", a.out), ("--timeout", a.timeout), ("--isolation", a.isolation),
                                 ("--gpu-memory-fraction", a.gpu_memory_fraction)) if v is not None]
    if a.candidate is not None and fresh_only:
        raise UsageError(f"{', '.join(fresh_only)} only apply to a fresh candidate run: drop them or --candidate")
    base = _load(a.baseline, "--baseline")
    cand = _load(a.candidate, "--candidate") if a.candidate is not None else None
    variants = _variants(a, base)
    if cand is None:
        try:
            cand, cand_name = _fresh_candidate(a, base, argv)
        except CandidateStopped as e:
            print(f"harness: stopped ({e.signal_name}) during the candidate run: nothing compared; what it "
                  f"measured is kept in {e.path}", file=sys.stderr)
            return 128 + signal.Signals[e.signal_name].value
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


def _fresh_candidate(a: argparse.Namespace, base: Result, argv: list[str]) -> tuple[Result, str]:
    """Time the baseline's scenarios and frameworks at its size and seed, now; write the result."""
    env = base.environment
    scenarios = [s for s in base.scenarios if s in ORDER and (a.scenarios is None or s in a.scenarios)]
    frameworks = [f for f in FRAMEWORKS if f in (env.frameworks or {}) and (a.frameworks is None or f in a.frameworks)]
    if not scenarios or not frameworks:
        raise UsageError("the baseline names no scenario or framework that this harness can run")
    if base.size not in ("smoke", "full") or not isinstance(base.seed, int):
        raise UsageError(f"--baseline has size {base.size!r} and seed {base.seed!r}: cannot rerun it")
    if not any(r.timing for s in base.scenarios.values() for r in s.rows):
        raise UsageError("--baseline has no timed rows to compare with")
    if env.gpu and not gpu_present():
        raise UsageError(f"the baseline ran on {env.gpu}; this machine has no GPU to rerun it on")
    fraction = a.gpu_memory_fraction
    if fraction is None and isinstance(env.gpu_memory_fraction, float):
        fraction = _as_option(memory_fraction, env.gpu_memory_fraction, "its memory fraction")
    # like with like: auto again where the baseline chose its CPUs; a list named the baseline machine's CPUs
    auto = env.cpus is not None and env.cpus.mode == "auto"
    out = a.out if a.out is not None else DEFAULT_OUT
    processes = _as_option(bounded_int(1, MAX_PROCESSES, "--processes"), _processes(base),
                           "the processes that timed a row")  # like with like, within --processes' bounds
    start_checks(out, fraction, frameworks, processes, scenarios, base.size, processes_option=False)
    opts = CompareOptions(scenarios=scenarios, frameworks=frameworks, size=base.size,
                          examples=_as_option(bounded_int(1, MAX_EXAMPLES, "--examples"), base.examples or 1,
                                              "its examples"),
                          seed=_as_option(bounded_int(0, 2**32 - 1, "--seed"), base.seed, "its seed"),
                          isolation=a.isolation or default("isolation"), timeout_s=a.timeout or default("timeout_s"),
                          equivalence=False, timing=True, argv=["python -m harness", *argv],
                          gpu_memory_fraction=fraction, cpus="auto" if auto else "all",
                          processes=processes)
    with stops.handling():
        doc = run_compare(opts, make_ui(a.quiet))  # returns with stops deferred: the candidate is written first
        name = claim_name(out, doc)
        path, rescued = write_or_rescue(doc, out, name, claimed=True)
        release_folder(out, name)  # a candidate draws no pictures
        stopped = stops.stopped_by() or stops.resume()
    print(f"candidate: {path}" + (f" ({rescued})" if rescued else ""), flush=True)
    if stopped is not None:
        raise CandidateStopped(stopped, path)
    return _load(path, "--candidate"), str(path)


def _as_option(parse: Any, value: Any, what: str) -> Any:
    """A value a baseline file carries into the fresh run, through the parser of the option that sets it on
    the command line: a file starts no more processes (examples, ...) than a user could ask for."""
    try:
        return parse(str(value))
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"--baseline: {what} cannot be rerun: {e}") from None


def _fraction_for_the_largest_point(fraction: float, pools: int, scenarios: list[str], size: str,
                                    frameworks: list[str], world_size: int | None) -> float:
    """The interleaved run's default cap, raised to what its largest point holds a process (with a margin of
    a hundredth of the GPU for a call's temporaries) where its pools still fit in 90% of the GPU; as it was
    otherwise (the start checks then say what would hold the point). On a GPU only."""

    total = machine.gpu_memory_bytes()
    need = Run.largest_need(scenarios, size, frameworks, world_size) if total else None
    if need is None:
        return fraction
    enough = Run.smallest_fraction(need[0], total) + 0.01
    return enough if fraction < enough and enough * pools <= 0.9 else fraction


def _processes(doc: Result) -> int:
    """The worker processes that timed the baseline's rows (like with like), else the default."""
    counts = [len((r.timing.processes if r.timing else None) or ()) for scn in doc.scenarios.values()
              for r in scn.rows]
    return max(counts, default=0) or default("processes")


def _env(items: list[str], option: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"{option} takes KEY=VALUE, not {item!r}")
        out[key] = value
    return out


def _interleaved(a: argparse.Namespace, argv: list[str], given: list[str]) -> int:
    """Baseline and candidate in one run (harness/run/interleave.py); exit 1 on a slower different row."""
    plain_why = _interleaved_options(a, given)
    scenarios = a.scenarios or list(DEFAULT_RUN)
    frameworks = a.frameworks or list(FRAMEWORKS)
    size = a.size if a.size != "auto" else ("full" if gpu_present() else "smoke")
    seed = a.seed if a.seed is not None else random.randrange(2**32)
    out = a.out if a.out is not None else DEFAULT_OUT
    fraction = _interleaved_cap(a, scenarios, size, frameworks, out)
    envs = [_env(a.baseline_env, "--baseline-env"), _env(a.candidate_env, "--candidate-env")]
    for option, env in zip(("--baseline-env", "--candidate-env"), envs):
        try:
            if faults.ENV in env:
                faults.parse(env[faults.ENV])
            if OVERRIDE_ENV in env and "kernel_warm_s" in overrides(env[OVERRIDE_ENV], preset(size)) \
                    and a.clock != "kernel":  # the JAX trace it changes: read by an interleaved run on --clock kernel
                raise UsageError(f"{option} {OVERRIDE_ENV}: kernel_warm_s changes the traced kernel clock, which this "
                                 "run traces only with --clock kernel: add it, or drop kernel_warm_s")
        except ValueError as e:
            raise UsageError(f"{option} {e}") from None
        if OVERRIDE_ENV in env and a.turns == "call":  # measure() agrees on each warm-up call and repeat with the other side
            raise UsageError(f"{option} {OVERRIDE_ENV}: with --turns call a pair's two processes share every warm-up "
                             "call and repeat, so they cannot time on different settings: drop one of them")
    history = tuple(dict.fromkeys(Path(f).resolve() for f in (out, ROOT / "runs", ROOT / "results")))
    plan = Plan(scenarios, size, seed, a.pairs, a.max_pairs, a.budget, a.threshold, a.confidence, a.fdr, a.clock,
                history=history, turns=a.turns == "call", same_cpu=a.same_cpu, host_covariate=a.host_covariate,
                plain_why=plain_why)
    with stops.handling():  # SIGTERM unwinds like Ctrl-C: the temporary worktrees go with the ExitStack
        res, sides = _run_sides(a, envs, frameworks, fraction, plan)
        paths, invalid = _write_sides(res, sides, argv, out)
        late = stops.resume()  # a signal that came while the files were written, after the timing was done
        code = 0
        try:
            if late is None:
                code = render_paired(res, sides, plan, print)
                if not res.rows and not res.signal:  # nothing judged: a gate must not read that as "no change"
                    why = "; ".join(f"{w}: {y}" for w, y in res.not_comparable[:2]) or "no row was timed on both sides"
                    print(f"harness: error: compared no row, so no change could be ruled out ({why})", file=sys.stderr,
                          flush=True)
                    code = 2
        except (KeyboardInterrupt, Stopped) as e:
            stops.defer()
            late = stops.name_of(e)
        if res.signal or late:
            sig = res.signal or late
            print(f"harness: stopped ({sig}) {'during the timing' if res.signal else 'after the timing'}: what was "
                  f"timed is in {' and '.join(map(str, paths))}", file=sys.stderr, flush=True)
            return 128 + signal.Signals[sig].value
        for line in invalid:
            print(line, file=sys.stderr, flush=True)
        return max(code, 1) if invalid else code


def covariate_unfit(a: argparse.Namespace) -> str | None:
    """Why the host's loop cannot be the pairs' covariate in this run (what rules it out: why), or None."""
    if len({os.path.realpath(p or sys.executable) for p in (a.baseline_python, a.candidate_python)}) > 1:
        return "two Pythons: each side's interpreter times the loop, so it would move with the change"
    if a.turns == "call":
        return "--turns call: the loop runs outside a pair's turns, beside the other side's calls"
    for option, items in (("--baseline-env", a.baseline_env), ("--candidate-env", a.candidate_env)):
        try:
            given = json.loads(_env(items, option).get(OVERRIDE_ENV) or "{}")
        except ValueError:  # not JSON: refused with its own reason after these options, as is JSON not an object
            given = None
        if isinstance(given, dict) and "host_beside" in given:
            return f"{option} {OVERRIDE_ENV} sets host_beside: the loop is a setting of the side, not a covariate"
    return None


def _interleaved_options(a: argparse.Namespace, given: list[str]) -> str:
    """Refuse what an interleaved run cannot take, in one line (UsageError), and fill in its defaults. Returns
    why every row will be judged plain, not at equal host speeds, or "" where the covariate is on."""
    if a.baseline is not None or a.candidate is not None:
        raise UsageError(f"{', '.join(given)} run both sides now: drop --baseline/--candidate (result files)")
    if not (a.baseline_tree or a.baseline_python):
        raise UsageError("an interleaved run needs --baseline-tree or --baseline-python (the candidate defaults to "
                         "this checkout and this interpreter)")
    files_only = [o for o, v in (("--variants", a.variants), ("--allow-version-change", a.allow_version_change),
                                 ("--all", a.all), ("--isolation", a.isolation)) if v]
    if files_only:
        raise UsageError(f"{', '.join(files_only)} apply to result files, not to an interleaved run: drop them")
    asked = a.host_covariate  # True or False where given, None where not
    for key, value in INTERLEAVED.items():  # the interleaved run's defaults (the parser leaves them None)
        if getattr(a, key) is None:
            setattr(a, key, value)
    if a.max_pairs < a.pairs:
        raise UsageError(f"--max-pairs {a.max_pairs} is less than --pairs {a.pairs}")
    # the covariate must not move with the change, nor run beside the other side's calls: given, such a run is
    # refused; by default, it is judged plain and the run's header says why (harness/regress/view.py)
    why_not = covariate_unfit(a)
    if why_not and asked:
        raise UsageError(f"--host-covariate cannot be read with {why_not}; drop one of them")
    if why_not:
        a.host_covariate = False
    # both sides inherit this process's environment: a fault planted there would be planted on both alike
    # and cancel out of every pair, so that a run meant to show it reads "no change"
    for key in (faults.ENV, FAULT_RANK_ENV):
        if key in os.environ:
            raise UsageError(f"${key} is set here and would reach both sides alike: unset it and pass it with "
                             f"--candidate-env (or --baseline-env)")
    return "" if a.host_covariate else "--no-host-covariate" if asked is False else str(why_not)


def _interleaved_cap(a: argparse.Namespace, scenarios: list[str], size: str, frameworks: list[str],
                     out: Any) -> float:
    """Each process's share of the GPU's memory, checked against the run's largest point before anything
    starts. The pairs of a stage live side by side (ADDED at most: harness/run/interleave.py), each side a
    worker and, where a scenario has ranks, a rank group: 70% of the GPU for their pools leaves room for the
    contexts."""
    ranks = any(getattr(get(s), "ranks", False) for s in scenarios)
    pools = 2 * min(a.pairs, ADDED) * (2 if ranks else 1)
    fraction = a.gpu_memory_fraction or min(DEFAULT_MEMORY_FRACTION, int(70 / pools) / 100)
    if a.gpu_memory_fraction is None:
        fraction = _fraction_for_the_largest_point(fraction, pools, scenarios, size, frameworks, a.world_size)
    start_checks(out, fraction, frameworks, 1, scenarios, size, a.world_size, processes_option=False,
                 label="" if a.gpu_memory_fraction else f"the default cap, {fraction:g} of the GPU for each of "
                                                        f"{pools} processes side by side,")
    return fraction


def _run_sides(a: argparse.Namespace, envs: list[dict[str, str]], frameworks: list[str], fraction: float,
               plan: Plan) -> tuple[Any, list[Side]]:
    """(the interleaved run's outcome, its two sides): each side's tree checked out (a temporary worktree for
    a git ref) and its interpreter checked, every process capped at `fraction`. Returns with stops deferred:
    a signal from here on waits until both sides' files are written."""
    old_fraction = os.environ.get(MEMORY_FRACTION_ENV)
    os.environ[MEMORY_FRACTION_ENV] = repr(fraction)  # every side's processes inherit it
    try:
        with contextlib.ExitStack() as stack:
            sides = []
            for j, name in enumerate(("baseline", "candidate")):
                where, label = stack.enter_context(tree(getattr(a, f"{name}_tree")))
                py = getattr(a, f"{name}_python")
                python = check_python(py) if py else sys.executable
                sides.append(Side(name, where, python, envs[j], label + (f" · {py}" if py else "")))
            t_start = time.perf_counter()  # each line says when: where a run's time goes, as compare's do

            def log(text: str) -> None:
                if not a.quiet:
                    print(f"  [{time.perf_counter() - t_start:6.1f}s] {text}", file=sys.stderr, flush=True)

            schedule = Schedule(sides, frameworks, a.timeout or default("timeout_s"), a.world_size, log=log)
            res = run_interleaved(schedule, plan)  # returns with stops deferred where one ended the timing
            stops.defer()  # timed: a signal from here on waits until both sides' files are written
            return res, sides
    except SideError as e:
        raise UsageError(str(e)) from None
    finally:
        if old_fraction is None:
            os.environ.pop(MEMORY_FRACTION_ENV, None)
        else:
            os.environ[MEMORY_FRACTION_ENV] = old_fraction


def _write_sides(res: Any, sides: list[Side], argv: list[str], out: Any) -> tuple[list[Any], list[str]]:
    """(each side's result path, the lines of those its readers would refuse): both files written, each in
    the folder it claimed (or rescued), and checked as report and regress check them."""
    paths, invalid = [], []
    for side, doc in zip(sides, res.docs):
        doc["command"] = ["python -m harness", *argv]  # a write into the side's document as built (runner.document)
        name = claim_name(out, doc)
        path, rescued = write_or_rescue(doc, out, name, claimed=True)
        release_folder(out, name)
        paths.append(path)
        print(f"{side.name}: {path}" + (f" ({rescued})" if rescued else ""), file=sys.stderr, flush=True)
        if why := refused(doc):  # the readers' own check: a file that report and regress refuse fails the run
            invalid.append(f"harness: error: {path} does not pass its own schema, so report and regress "
                           f"refuse it: {why}")
    return paths, invalid
