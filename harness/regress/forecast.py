"""What an interleaved regress's budget can buy, said before its pairs start: how many pairs, and the
smallest change those pairs can call different.

The figures come from the newest earlier compare result of the same scenarios, size and GPU (in the run's
output folder, runs/ or results/): its timing phase per scenario gives what one process of a side costs,
and each row's spread between its processes' medians gives the spread of a pair's log ratio (two
independent processes: sqrt(2) times it). The pairs are then tested as judge_pairs tests them: a two-sided
paired t test at the false-discovery rate split over the run's looks and its rows (a lone change under
Benjamini-Hochberg), never below the effect floor (regress.detectable's rule, here on a spread measured
before the run). Why: a user with ten minutes should learn before spending them whether they can find a
15% change, and choose fewer scenarios or a longer budget if not (asv and Pinpoint leave that to trial).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from harness.results.files import read_regular
from harness.results.model import Result
from harness.regress.regress import COVARIATE_MIN_PAIRS, process_medians, smallest_change
from harness.results.results import MAX_BYTES, ResultError, gpu_slug, read

NEWEST = 12  # candidate files parsed at most: each is a whole JSON parse (seconds for a big one)
_NAME = re.compile(r"^\d{8}T\d{6}Z_(?P<gpu>[a-z0-9-]+)_(?P<size>[a-z]+)(-\d+)?\.json$")


@dataclass
class Forecast:
    """A forecast for one interleaved run (render: its lines)."""

    source: str  # the earlier result it rests on
    pair_s: float  # one pair over every point, both sides' processes
    start_s: float  # starting a stage's workers (ADDED pairs at a time), measured in this run
    pairs: int  # pairs the budget buys, at most max_pairs (every row unknown: each pair times every point)
    budget_s: float | None
    rows: int  # rows of the earlier result with a spread between processes
    could: int  # of those, rows whose threshold change pairs would call different at `pairs`
    median_change: float  # the change the median row could call different at `pairs` (inf: none)
    threshold: float
    upper: bool = False  # the price an upper bound: an older file traced a kernel clock, and kept no kernel_s
    added: int = 2  # pairs a stage starts together (interleave.ADDED), sharing its start
    covariate: bool = False  # the run judges rows of enough pairs at equal host speeds (--host-covariate)


def earlier(folders: Iterable[Path], scenarios: list[str], frameworks: list[str], size: str,
            gpu: str | None) -> tuple[Path, Result] | None:
    """The newest compare result in folders of this GPU and size with timed rows of every scenario for every
    framework, each row in two processes or more; None where there is none. Only the NEWEST newest files
    of the GPU and size (by name) are parsed; an interleaved regress's side files, which share the names, are
    passed over (their phases count only their own requests, and later pairs time unknown rows alone)."""
    want, named = gpu_slug(gpu), []
    for folder in folders:
        try:
            named += [p for p in folder.iterdir()
                      if (m := _NAME.match(p.name)) and m["gpu"] == want and m["size"] == size]  # regex groups
        except OSError:  # absent or unreadable: nothing there to go by
            continue
    for path in sorted(named, key=lambda p: p.name, reverse=True)[:NEWEST]:
        try:
            # a quick look, typed but not validated, before read() validates the one it takes
            doc = Result.from_dict(json.loads(read_regular(path, MAX_BYTES)))
            if (doc.command or [None, None])[1:2] != ["compare"] or not _holds(doc, scenarios, frameworks):
                continue
            return path, read(path)
        except (OSError, ValueError, RecursionError, KeyError, TypeError, AttributeError, ResultError):
            continue
    return None


def _holds(doc: Result, scenarios: list[str], frameworks: list[str]) -> bool:
    """Whether a result has, for every scenario, a row of each framework timed in 2+ processes."""
    for name in scenarios:
        scn = doc.scenarios.get(name)  # scenarios: keyed by scenario name (data)
        timed = {r.framework for r in (scn.rows if scn is not None else [])
                 if r.timing is not None and len(r.timing.processes or []) >= 2}
        if not timed or not set(frameworks) <= timed:
            return False
    return True


def spreads(doc: Result, scenarios: list[str], frameworks: list[str], clock: str) -> list[float]:
    """Each timed row's spread between processes: the standard deviation of its log process medians."""
    out = []
    for name in scenarios:
        for row in doc.scenarios[name].rows:
            meds = (process_medians(row, clock) or []) if row.timed and row.framework in frameworks else []
            if len(meds) >= 2 and min(meds) > 0:
                out.append(float(np.std(np.log(meds), ddof=1)))
    return out


def side_process_s(doc: Result, scenarios: list[str], frameworks: list[str], traced: bool = True) -> float:
    """One process of one side over every point, for these frameworks: per framework and point, the round trip
    of a request of the earlier run's processes after the first (the first also counts host syncs and traces
    timelines, which a regress does not), or of its first where it had no other; without the request's traced
    kernel clock (kernel_s) where this run reads none (traced False). Rows without round trips (older files):
    the scenario's timing phase over its processes, for these frameworks' share of its rows."""
    total = 0.0
    for name in scenarios:
        scn = doc.scenarios.get(name)  # scenarios: keyed by scenario name (data)
        if scn is None:
            raise ValueError(f"it has no {name}")
        trips: dict[tuple[str, int], dict[int, float]] = {}
        for r in scn.rows:
            for i, p in enumerate(r.timing.processes or [] if r.timed and r.framework in frameworks else []):  # type: ignore[union-attr]
                if p.request_s is not None:  # a request's rows share its round trip
                    spared = 0.0 if traced else (p.kernel_s or 0.0)
                    # a later process that traced none (kernel_n 0), where this run traces in every pair: what the
                    # row's traced processes spent on it is added back
                    owed = traced_s(r.timing) if traced and p.kernel_n == 0 else 0.0  # type: ignore[arg-type]
                    trips.setdefault((r.framework, r.point_index), {})[i] = max(p.request_s - spared + owed, 0.0)
        if trips:
            total += sum(float(np.mean([s for i, s in by.items() if i > 0] or list(by.values()))) for by in trips.values())
            continue
        timed = [r for r in scn.rows if r.timed]
        procs = max((len(r.timing.processes or []) for r in timed), default=0)  # type: ignore[union-attr]
        if scn.timing_phase is None or not scn.timing_phase.wall_s or procs < 1:
            raise ValueError(f"{name} has no timing phase to go by")
        total += scn.timing_phase.wall_s / procs * sum(r.framework in frameworks for r in timed) / len(timed)
    return total


def traced_s(timing: Any) -> float:
    """The mean seconds of a row's request traces in the processes that traced its kernel clock (0: none known)."""
    spent = [p.kernel_s for p in timing.processes or [] if p.kernel_n != 0 and p.kernel_s is not None]
    return float(np.mean(spent)) if spent else 0.0


def traced_kernel_clock(doc: Result, scenarios: list[str], frameworks: list[str]) -> bool:
    """Whether the earlier run read a kernel clock from traces (not CUDA events) for any of these rows without
    saying what its traces took (Process.kernel_s: files written before it was kept)."""
    return any(r.timing is not None and r.timing.kernel_source is not None and "events" not in r.timing.kernel_source
               and any(p.kernel_s is None and p.kernel_n != 0 for p in r.timing.processes or [])  # 0: traced none
               for name in scenarios for r in doc.scenarios[name].rows if r.framework in frameworks)


def change_at(spread: float, pairs: int, alpha: float, threshold: float) -> float:
    """The smallest change judge_pairs calls different after `pairs` pairs (regress.smallest_change), each pair's
    log ratio spread sqrt(2) times the processes' spread (two independent processes)."""
    return smallest_change(math.sqrt(2) * spread, pairs, threshold, alpha)


def forecast(found: tuple[Path, Result], scenarios: list[str], frameworks: list[str], plan: Any, start_s: float,
             added: int, fdr: float, traced: bool = True) -> Forecast:
    """The forecast from an earlier result (earlier()) for plan (interleave.Plan: pairs, max_pairs, budget_s,
    threshold, clock), a stage's measured start and ADDED pairs a stage; fdr already split over the looks.
    traced: whether this run reads the traced kernel clock; where it does not and the earlier run did, the
    earlier run's price of a pair leaves out what its traces took, or is an upper bound where its file does not
    say (Forecast.upper)."""
    path, doc = found
    return _bought(str(path), 2 * side_process_s(doc, scenarios, frameworks, traced), start_s,
                   spreads(doc, scenarios, frameworks, plan.clock), plan, added, fdr,
                   upper=not traced and traced_kernel_clock(doc, scenarios, frameworks))


def from_first_pairs(medians: Iterable[list[list[float]]], pairs: int, stage_s: float, start_s: float, plan: Any,
                     added: int, fdr: float) -> Forecast:
    """The forecast from this run's own first stage, where no earlier result could give one: `pairs` pairs over
    every point took stage_s seconds, start_s of them starting their workers; medians holds, per row, each
    side's process medians on the run's clock, one a pair. A row's spread between processes is the root of its
    two sides' mean variance of log medians. Why: a run with nothing to go by would otherwise say what it could
    find only at its end."""
    sp = []
    for sides in medians:
        var = [float(np.var(np.log(m), ddof=1)) for m in sides if len(m) >= 2 and min(m) > 0]
        if var:
            sp.append(math.sqrt(float(np.mean(var))))
    return _bought(f"this run's first {pairs} pairs", max(stage_s - start_s, 0.0) / pairs, start_s, sp, plan, added,
                   fdr)


def _bought(source: str, pair_s: float, start_s: float, sp: list[float], plan: Any, added: int, fdr: float,
            upper: bool = False) -> Forecast:
    """What the budget buys at this price of a pair and these rows' spreads between processes."""
    per_pair = pair_s + start_s / added
    if plan.budget_s is None:
        pairs = plan.max_pairs
    else:
        pairs = max(0, min(plan.max_pairs, int(plan.budget_s // per_pair)))
    alpha = fdr / max(len(sp), 1)
    changes = [change_at(s, pairs, alpha, plan.threshold) for s in sp]
    could = sum(c <= plan.threshold * (1 + 1e-9) for c in changes)
    median = float(np.median(changes)) if changes else math.inf
    return Forecast(source, pair_s, start_s, pairs, plan.budget_s, len(sp), could, median, plan.threshold,
                    upper=upper, added=added, covariate=bool(getattr(plan, "host_covariate", False)))


def render(f: Forecast) -> list[str]:
    """The forecast as the run's log lines."""
    buys = (f"the budget of {f.budget_s:g} s buys about {f.pairs} pair(s)" if f.budget_s is not None
            else f"{f.pairs} pairs (--max-pairs) take about {f.pairs * (f.pair_s + f.start_s / f.added) / 60:.0f} min")
    change = "no change" if not math.isfinite(f.median_change) else f"a change of {100 * f.median_change:.0f}%"
    about = "at most" if f.upper else "about"
    lines = [f"forecast from {Path(f.source).name}: a pair takes {about} {f.pair_s:.0f} s and a stage's start "
             f"{f.start_s:.0f} s, so {buys}" + (" or more (an older file: it traced a kernel clock that this run does not read, and kept no kernel_s)"
                                                if f.upper else ""),
             f"forecast: at {f.pairs} pairs a {100 * f.threshold:g}% change could be called different in {f.could} of "
             f"{f.rows} rows; the median row could call {change} different (each row's spread between processes "
             "there, had it been the only change)"]
    if f.covariate and f.pairs >= COVARIATE_MIN_PAIRS:  # the plain test's count: the loop cannot be fitted before
        lines.append(f"forecast: counted with the plain paired test; from {COVARIATE_MIN_PAIRS} pairs on, "
                     "--host-covariate may narrow the intervals of rows that the host's speed moves")
    if f.could < f.rows / 2:
        lines.append("forecast: fewer scenarios (--scenarios) or a longer budget (--budget) buy more pairs a row")
    return lines
