"""One point of a scenario, timed in several worker processes per framework (--processes), interleaved.

The frameworks take turns: in their order in each one's first process, in reverse order in each one's
second, and so on: slow drift (clocks, the host's load, the GPU's temperature) hits every framework and
variant alike. Each process's repeats stay in the row: timing.samples holds
them all, in process order, and timing.processes says how many came from which process and why it
stopped, and the host's speed in it just before the point was timed (host_loop_s, harness/measure/calibrate.py's
Python loop). The row's median is the median of its processes' medians (noise.row_median: each process one
vote), its quartiles and extremes those of the pooled repeats; timing.noise is
the relative half-width of that median's 95% hierarchical bootstrap interval (harness/measure/noise.py)
per clock, which counts the variance between processes as well as within one. A rank scenario's
timing processes are groups of rank processes, one group per framework and timing process
(harness/workers/ranks.py Groups): there a "process" of timing.processes is a group of WORLD_SIZE
processes of its own, and a row timed as the mean over ranks pools its slowest rank's repeats beside
(timing.slowest_rank).

The first PLAN_AFTER processes of a row run the preset's budget; each later one at most the repeats
that Kalibera and Jones' rule gives from the processes so far (plan, repeats_where_the_variance_is):
more processes where the processes differ, more repeats where the repeats do. Each row also records
where its wall time went (timed_s against phase_s, per process and summed) and how its process medians
moved with the host loop measured beside them (timing.host_sensitivity, harness/measure/noise.py).
"""
from __future__ import annotations

import math
import time
from dataclasses import is_dataclass, replace
from typing import Any, Callable

import numpy as np

from harness.results.model import (CLOCKS, ROW_PARTS, Json, Phase, Process, ProcessRow, ProcessTiming, Row, Stats,
                                   Timing)
from harness.measure.noise import host_sensitivity, rel_halfwidth, row_median, split
from harness.workers.protocol import Answer
from harness.workers.worker import Handle, WorkerError, WorkerLost
from scenarios.spec import Params, Scenario

# Kept per process in timing.processes: the host's speed beside the row (and when, wall-clock seconds; and
# row_loop_s, just before and after its repeats, in files of older trees' regress runs),
# the row's timed seconds and its whole wall time in that process (its timed share), and the seconds of
# the request that timed it (shared by the rows of one request): in the worker (served_s), round trip, and
# of them its traced kernel clock (kernel_s: what a regress that reads none does not spend; forecast.py);
# and its measure() (loop_s), of that the first call and warm-up (warm_s) and the checks (check_s): what a
# row's first process pays that its later ones do not is what a cheaper later process would cut.
PER_PROCESS = ("host_loop_s", "host_loop_at", "row_loop_s", "timed_s", "phase_s", "served_s", "request_s", "kernel_s",
               "loop_s", "warm_s", "check_s")
SUMMED = ("timed_s", "phase_s", "loop_s", "check_s", "repeats_s", "warm_s", "before_s", "agree_s")
PLAN_AFTER = 2  # processes timed on the preset's budget before the others get a planned one (plan)
# Processes of a row that trace a kernel clock where the framework has no CUDA events (JAX): a trace costs a row
# a share of a second a process (results/journal.md), and a device-paced clock varies little between processes;
# CUDA events, which cost nothing, time every process.
KERNEL_PROCESSES = 2
SAME_REPEATS_MIN = 3  # distinct repeats two processes must share, bit for bit, to be called one source (same_repeats)
MIN_PLANNED = 5  # the fewest repeats a planned process runs: the noise rule's and a median's least
IQR_SIGMAS = 1.349  # a normal distribution's interquartile range in standard deviations
Timed = Answer  # a time request's answer (handlers.time_point), or its failure
# The timing processes: per process {framework: worker (or rank group)}, in the order they time a point;
# processes[0] also runs the equivalence. --processes says how many (CompareOptions.timing_processes).
Processes = list[dict[str, Handle]]


def time_point(processes: Processes, frameworks: list[str], scn: Scenario, params: Params, cfg: Any,
               timeout: float, step: Callable[[str, str], None], detail: Callable[[str, str], None], *,
               seed: int | None = None) -> dict[str, list[Timed]]:
    """{framework: one answer per process} at the point params with the run's seed; step(fw, text) per
    request, detail(fw, text) per variant as it goes. A failed request answers
    {"status": ..., "reason": ...}, and that framework is not asked again for this point."""
    got: dict[str, list[Timed]] = {fw: [] for fw in frameworks}
    for i, proc in enumerate(processes):
        for fw in (frameworks if i % 2 == 0 else frameworks[::-1]):
            if got[fw] and "status" in got[fw][-1]:
                continue
            step(fw, f"timing (process {i + 1} of {len(processes)})")
            todo = plan(got[fw], cfg) if i >= PLAN_AFTER else cfg
            if i >= KERNEL_PROCESSES and is_dataclass(todo) and getattr(todo, "kernel_clock", False):
                todo = replace(todo, kernel_clock=False)  # the traced kernel clock: the row's first processes' alone
            t0 = time.perf_counter()
            try:
                got[fw].append(proc[fw].request("time", scn.name, params, todo, i == 0, seed=seed, timeout=timeout,
                                                progress=lambda text, fw=fw: detail(fw, text)))
            except (WorkerLost, WorkerError) as e:  # timeout / crashed; error / oom
                got[fw].append({"status": e.status, "reason": str(e)})
                continue
            round_trip(got[fw][-1], time.perf_counter() - t0)
    return got


def round_trip(answer: Timed, seconds: float) -> Timed:
    """answer with its request's round trip (messages included) as every timed row's request_s: what the
    run's timing phase is made of (phase)."""
    for row in answer.get("rows") or []:
        if isinstance(row.get("timing"), dict):
            row["timing"]["request_s"] = seconds
    return answer


def repeats_where_the_variance_is(procs: list[tuple[list[float], float, float]], lo: int, hi: int) -> int | None:
    """Kalibera and Jones' optimal repeats per process ("Rigorous benchmarking in reasonable time", 2013),
    for the figure the harness keeps, a process's median: r = ceil(sqrt(c2 T1^2 / (c1 T2^2))), T1^2 / n the
    sampling variance of a process's median of n repeats (pi/2 (IQR/1.349)^2 / n, the normal's, from the
    repeats' quartiles), T2^2 the variance between processes' medians beyond it, c1 the cost of one more
    repeat and c2 the cost of one more process (set-up, first call, warm-up, checks). Why: a repeat is
    cheap but only averages out noise within its process; where the processes differ more, a new process
    buys more certainty per second than more repeats in the same ones. Quartiles, not the sample variance:
    one slow repeat in 200 (a host hiccup) would make the repeats look noisy and plan hi for a median it
    barely moves. procs: (the process's device_done samples, its repeat loop's wall time, its whole wall
    time for the row); clipped to [lo, hi]; hi where no variance between processes shows; None below two
    processes of two samples."""
    procs = [(np.asarray(x, dtype=np.float64), r, w) for x, r, w in procs if len(x) >= 2]
    if len(procs) < 2:
        return None
    t1 = float(np.mean([math.pi / 2 * (float(np.subtract(*np.percentile(x, [75, 25]))) / IQR_SIGMAS) ** 2
                        for x, _, _ in procs]))
    n = float(np.mean([x.size for x, _, _ in procs]))
    t2 = float(np.var([np.median(x) for x, _, _ in procs], ddof=1)) - t1 / n
    c1 = float(np.mean([r / x.size for x, r, _ in procs]))
    c2 = float(np.mean([max(w - r, 0.0) for _, r, w in procs]))
    if t2 <= 0 or c1 <= 0:
        return hi  # no variance between processes beyond the repeats' own: spend on repeats
    r = math.ceil(math.sqrt(c2 * t1 / (c1 * t2)))
    return max(lo, min(hi, r))


def plan(answers: list[Timed], cfg: Any) -> Any:
    """cfg with, per variant, the repeats a further process runs (repeats_where_the_variance_is) from this
    framework's processes so far; cfg itself where none can be decided (failed, skipped, no timings)."""
    if not answers or any("status" in a for a in answers):
        return cfg
    decided = []
    for variant, per in by_variant(answers).items():
        timings = [row.get("timing") for row in per]
        if not all(isinstance(t, dict) and "repeats_s" in t and "phase_s" in t for t in timings):
            continue
        r = repeats_where_the_variance_is([(t["samples"]["device_done"], t["repeats_s"], t["phase_s"])
                                           for t in timings], min(MIN_PLANNED, cfg.max_repeats), cfg.max_repeats)
        if r is not None:
            decided.append((variant, r))
    return replace(cfg, plan=tuple(decided)) if decided and is_dataclass(cfg) else cfg


def merge(answers: list[Timed]) -> tuple[list[Row], dict[str, np.ndarray] | None] | Timed:
    """One framework's rows (model.Row) with every process's repeats pooled (a variant's, from the
    processes that timed it: by_variant), and its baseline output sample; or the first failure, whose
    status and reason become every variant's. A failed request that named its variants (an interleaved
    run's later pairs: its "variants") fails those rows alone: the others keep what they timed. The one
    place a row's processes become one row."""
    failed = next((a for a in answers if "status" in a), None)
    if failed is not None and "variants" not in failed:
        return failed
    timed = [a for a in answers if "status" not in a]
    rows = [_merge_row([ProcessRow.from_dict(r) for r in per]) for per in by_variant(timed).values()]
    for f in (a for a in answers if "status" in a):  # each names its variants here
        rows = [replace(r, status=f["status"], reason=f["reason"], timing=None, check=None, wall_s=None)
                if r.variant in f["variants"] else r for r in rows]
    return rows, timed[0]["sample"] if timed else None


def by_variant(answers: list[Timed]) -> dict[str, list[Json]]:
    """{variant: its row from each process that timed it, in process order}, variants in the order they
    first appear: a process asked for some variants only (an interleaved run's later pairs) has no row for
    the others, and adds nothing to them."""
    out: dict[str, list[Json]] = {}  # rows as the wire has them (ProcessRow.to_dict), typed once, by merge
    for a in answers:
        for row in a["rows"]:
            out.setdefault(row["variant"], []).append(row)
    return out


def _merge_row(per: list[ProcessRow]) -> Row:
    row = per[0]
    if row.timing is None:
        return row.merged(None)
    twins = same_repeats([r.timing for r in per])
    if twins is not None:  # not a measurement: the row fails rather than count one process's figures twice
        i, j = twins
        return row.merged(None, status="error", check=None, wall_s=None, reason=(
            f"processes {i + 1} and {j + 1} timed the same {len(per[i].timing.samples['device_done'])} repeats, "  # type: ignore[union-attr]
            f"bit for bit: they shared a state (a cache of timings, one process asked twice), not a measurement"))
    bad = next((r for r in per if r.status == "wrong"), None)
    if bad is not None:
        status, check = "wrong", bad.check
    else:
        status = row.status
        check = replace(row.check, checked=sum(r.check.checked for r in per),
                        wrong=sum(r.check.wrong for r in per),  # a hazard's wrong runs: every process's
                        max_rel_err=max((r.check.max_rel_err for r in per
                                         if r.check.max_rel_err is not None), default=None))
    return row.merged(pool_timing([r.timing for r in per]), status=status, check=check,
                      wall_s=sum(r.wall_s for r in per))


def same_repeats(timings: list[ProcessTiming | None]) -> tuple[int, int] | None:
    """The positions of the first two processes whose repeats on the row's clock are the same values in the
    same order, or None. Two processes' clocks (perf_counter, nanoseconds) never agree on SAME_REPEATS_MIN
    distinct repeats to the last bit; where they do, the figures came from one source, and pooling them would
    shrink the spread between processes that the row's interval and regress's pairs rest on. A process with
    fewer distinct repeats (a clock too coarse for the row) proves nothing and is not compared."""
    seen: dict[tuple[float, ...], int] = {}
    for j, t in enumerate(timings):
        x = tuple(t.samples.get("device_done") or ()) if t is not None else ()
        if len(set(x)) < SAME_REPEATS_MIN:
            continue
        if x in seen:
            return seen[x], j
        seen[x] = j
    return None


def pool_timing(timings: list[ProcessTiming]) -> Timing:
    """Per-process timings (each one process's, as handlers.time_point sends them) as one: pooled samples
    and statistics, the processes' counts and stop reasons, and the between-process noise per clock."""
    first = timings[0]
    samples = {c: [x for m in timings for x in m.samples.get(c, [])] for c in CLOCKS
               if all(m.samples.get(c) for m in timings)
               or (c == "kernel" and all(bool(m.samples.get(c)) == (i < KERNEL_PROCESSES) for i, m in enumerate(timings)))}
    counts = [len(m.samples["device_done"]) for m in timings]
    # per clock, each process's samples: one a repeat, but a kernel clock read from traced runs (kernel_clock.py)
    n = {c: [len(m.samples.get(c, ())) for m in timings] for c in samples}  # a kernel clock's untraced processes: 0
    # the pooled repeats' spread (quartiles, extremes), the processes' own median (noise.row_median)
    stats = {c: replace(Stats.of(samples[c]), median=row_median(split(samples[c], n[c])))
             if c in samples else None for c in CLOCKS}
    slow, slowest = first.slowest_rank_samples, first.slowest_rank
    if all(m.slowest_rank_samples is not None for m in timings):  # a rank row timed as the mean over ranks
        slow = {c: [x for m in timings for x in m.slowest_rank_samples.get(c, ())] for c in CLOCKS  # type: ignore[union-attr]
                if all(m.slowest_rank_samples.get(c) for m in timings)  # type: ignore[union-attr]
                or (c == "kernel" and all(bool(m.slowest_rank_samples.get(c)) == (i < KERNEL_PROCESSES)  # type: ignore[union-attr]
                                          for i, m in enumerate(timings)))}
        # each clock split by its own per-process counts (a traced kernel clock's differ from the repeats')
        slowest = {c: replace(Stats.of(v), median=row_median(split(v, [len(m.slowest_rank_samples.get(c, ()))  # type: ignore[union-attr]
                                                                    for m in timings])))
                   for c, v in slow.items()}
    processes = [Process(n=k, stopped=m.stopped, noise=m.noise, median=float(np.median(m.samples["device_done"])),
                         first_call_s=m.first_call_s, kernel_n=n["kernel"][i] if n.get("kernel", counts) != counts else None,
                         **{f: getattr(m, f) for f in PER_PROCESS if getattr(m, f) is not None})
                 for i, (k, m) in enumerate(zip(counts, timings))]
    summed = {k: sum(getattr(m, k) for m in timings) for k in SUMMED  # where the row's wall time went
              if all(getattr(m, k) is not None for m in timings)}
    return Timing.pooled(
        first, **stats, samples=samples,
        host_loops=[x for m in timings for x in m.host_loops] if all(m.host_loops for m in timings) else None,  # type: ignore[union-attr]
        slowest_rank_samples=slow, slowest_rank=slowest,
        checked_repeats=sum(m.checked_repeats for m in timings),
        wrong_repeats=sum(m.wrong_repeats for m in timings),
        worst=next((m.worst for m in timings if m.worst), ""),
        metrics={k: float(np.median([m.metrics[k] for m in timings if k in m.metrics])) for k in first.metrics},
        processes=processes,
        # where the processes' seconds went: the row has their sum, or none where a process lacks one (an older
        # tree's), rather than the first process's alone
        **({k: None for k in SUMMED} | summed),
        host_sensitivity=host_sensitivity([p.median for p in processes], [p.host_loop_s for p in processes]),
        noise={c: _finite(rel_halfwidth(split(samples[c], n[c]))) for c in samples},
        kernel_why=None if "kernel" in samples else next((m.kernel_why for m in timings if m.kernel_why), None))


def _finite(x: float) -> float | None:
    """A relative half-width, or None where it has no finite value: a clock whose median is 0 (a call that did
    no device work, on the kernel clock) has no relative noise, and the schema writes that null."""
    return x if math.isfinite(x) else None


def phase(rows: list[Row], wall_s: float | None) -> Phase:
    """A scenario's timing phase: its wall time (every point's requests, messages, set-up, checks and
    trace included) and the seconds inside timed repeats, all processes together: the share of the
    phase that measured something. Rows without timed_s (failed, skipped) add nothing. Where the rest
    went: rows_s (the rows' own wall time in their processes), served_s (the requests in the workers:
    rows, input set-up, host loop, timelines), requests_s (their round trips, messages included); and
    inside rows_s (ROW_PARTS: harness/measure/timing.py measure), warm_s (first calls and warm-up),
    before_s (set-up between repeats: poisoning), check_s (every check) and agree_s (rank agreement).
    wall_s None: the requests' round trips are the wall time (an interleaved run's side, whose requests
    the other side's interleave with)."""
    timings = [r.timing for r in rows if r.timing is not None]
    timed = sum(t.timed_s or 0.0 for t in timings)
    # one per request: the rows of a request share its host loop's time stamp and its seconds. Not by a
    # process's position in a row: a later process that timed some of a point's rows only (an interleaved
    # run's) holds another position in each
    requests: dict[tuple[Any, ...], tuple[float, float]] = {}
    for r in rows:
        for i, p in enumerate((r.timing.processes if r.timing is not None else None) or []):
            if p.request_s is not None and p.served_s is not None:
                at = p.host_loop_at if p.host_loop_at is not None else i
                requests[(r.framework, r.point_index, at, p.request_s, p.served_s)] = (p.request_s, p.served_s)
    requests_s = sum(q for q, _ in requests.values())
    wall = requests_s if wall_s is None else wall_s
    out: Json = {"wall_s": wall, "timed_s": timed, "share": timed / wall if wall > 0 else None,
                 "rows_s": sum(t.phase_s or 0.0 for t in timings)}
    for k in ROW_PARTS:
        if any(getattr(t, k) is not None for t in timings):  # rows from before a part was recorded leave it out
            out[k] = sum(getattr(t, k) or 0.0 for t in timings)
    if requests:
        out["requests_s"] = requests_s
        out["served_s"] = sum(s for _, s in requests.values())
    return Phase.from_dict(out)  # in this order, a null share kept: the order phases were always written in


def run_phase(phases: list[Phase]) -> Phase:
    """The run's timing phase: its scenarios' phases (phase()) summed."""
    wall, timed = sum(p.wall_s or 0.0 for p in phases), sum(p.timed_s or 0.0 for p in phases)
    out: Json = {"wall_s": wall, "timed_s": timed, "share": timed / wall if wall > 0 else None}
    for k in ("rows_s", "requests_s", "served_s", *ROW_PARTS):
        if any(getattr(p, k) is not None for p in phases):
            out[k] = sum(getattr(p, k) or 0.0 for p in phases)
    return Phase.from_dict(out)
