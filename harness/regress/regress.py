"""`python -m harness regress`: is a candidate run slower, faster or less accurate than a baseline?

Rows are matched by scenario, point (label and params, the seed aside), framework and variant; only
rows present in both files, run in both, and comparable are judged. Per row:

timing    r = candidate median / baseline median on one clock (device_done by default), with a
          confidence interval that counts the noise between processes: the hull of a percentile
          bootstrap of the ratio of the rows' medians (noise.row_median), each run resampled on its own and hierarchically
          (its worker processes with replacement, then each chosen process's repeats), and Student's
          t interval on the two runs' log process medians, which the bootstrap underrates with as
          few processes as a run has (harness/measure/noise.py).
          Files written before rows were timed in several processes keep one process's repeats:
          their interval counts only the noise within one process (method "repeats", said in the
          header). For files without samples, a normal interval on log r from each median's standard
          error, estimated from its IQR: SE(median) ~ 1.253 sigma / sqrt(n), sigma ~ IQR / 1.349.
          Where both files recorded the host loop beside each process (timing.processes[].host_loop_s),
          a change that the host can explain is unknown, never a regression or an improvement: the
          interval divided by the largest factor the host can put on the row in the change's
          direction (the row's processes' loop change, or the host's two speeds where it ran at two
          within a run, raised to the row's sensitivity: fitted from its processes, else (and at most)
          the bound env.ELASTICITY_MAX; harness/regress/env.py HostEffect) no longer shows the
          change. Older files (rows without the loop): where the two hosts' calibrations differ
          beyond their noise, that factor is the host's change for host-bound rows (followed up to
          the same bound); else, where the host ran at two speeds, each such file's start-up loops
          (their median) stand in for the row's own (env.stand_in) and the row follows the host.
            regression   the whole interval lies above 1 + threshold
            improvement  the whole interval lies below 1 / (1 + threshold)  (r and 1/r judged alike)
            unchanged    the whole interval lies within [1 / (1 + threshold), 1 + threshold]: a change
                         of the threshold's size is ruled out both ways
            noisy        none of these (an interval too wide, or one that reaches past the threshold
                         on one side): a change of that size is neither shown nor ruled out
            unknown      the host's change explains it: "host speed changed (X ms → Y ms; ...)", or
                         "(the candidate's host N% slower by the two runs' calibrations; ...)" in older files
numbers   the worst relative error of the timed outputs against the reference (check.max_rel_err),
          judged only where both runs drew the same inputs (same params and seed) and checked against
          the float64 reference (not a framework's own baseline output): "worse" when the
          candidate's error is over NUM_FACTOR times the baseline's and over NUM_FLOOR of the dtype's
          rtol (for bit-exact outputs: any error where there was none). A row whose timed outputs
          became wrong is worse whatever the numbers. Hazard variants are not judged on numbers.
status    a row that ran in the baseline and failed in the candidate (error, oom, timeout, crashed)
          is a regression; the other way round an improvement.

An interleaved run (harness/run/interleave.py) is judged by judge_pairs below: same, different or
unknown per row, from the paired processes of one run.

Comparability: runs on different GPUs (or a GPU and a CPU) share nothing to compare. A framework
whose version (or CUDA runtime) differs is left out unless across_versions is set: then its rows
are compared and the change is named in the header. Other differences (driver, Python, numpy,
size preset, seed) are named in the header and do not stop the comparison.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from harness.measure.noise import ratio_interval, row_median, split
from harness.results import model
from harness.results.model import Json, Result, ScenarioResult, Stats
from scenarios import get as get_scenario
from harness.regress.env import (ELASTICITY_MAX, RegressError, HostSpeed, _environments, describe_host_during,
                                  host_bound, host_effect, host_procs, host_speed, stand_in, two_speeds, typed)

CLOCKS = ("device_done", "host_return", "device_events", "kernel")
RAN = ("ok", "wrong")
FAILED = ("error", "oom", "timeout", "crashed")
NUM_FACTOR = 2.0
NUM_FLOOR = 0.01
RESAMPLES = 4000

@dataclass
class Row:
    scenario: str
    label: str
    framework: str
    variant: str
    hazard: bool = False
    verdict: str = "unchanged"  # regression | improvement | noisy | unchanged | unknown (the host's change explains it)
    base_s: float | None = None
    cand_s: float | None = None
    ratio: float | None = None
    lo: float | None = None
    hi: float | None = None
    method: str = ""  # processes (hierarchical bootstrap) | repeats (one process in a file) | iqr
    timing: str = ""  # the timing verdict alone
    base_err: float | None = None
    cand_err: float | None = None
    numbers: str = ""  # worse | better | same | "" (not judged)
    status: str = ""  # "ok → oom: why" when the status changed
    why: list[str] = field(default_factory=list)  # what made the verdict: time, numbers, outputs, status
    host: str = ""  # where the verdict is unknown: "host speed changed (X ms → Y ms; its sensitivity)", or
    # in older files "(the candidate's host N% slower by the two runs' calibrations; ...)"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Regress:
    baseline: str
    candidate: str
    clock: str
    threshold: float
    confidence: float
    notes: list[str]  # differences between the runs' environments
    rows: list[Row]
    not_comparable: list[tuple[str, str]]  # (what, why)
    host: HostSpeed | None = None

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == "regression"]

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in ("regression", "improvement", "noisy", "unchanged", "unknown")}
        for r in self.rows:
            out[r.verdict] += 1
        return out


# -- statistics -----------------------------------------------------------------------------------


def ratio_ci_iqr(base: Stats, cand: Stats, confidence: float) -> tuple[float, float, float]:
    """(median ratio, lo, hi) from the summary stats alone: log-normal interval from each median's
    standard error, estimated from its IQR; infinitely wide with fewer than 2 repeats."""
    r = cand.median / base.median
    if base.n < 2 or cand.n < 2:  # type: ignore[operator]
        return r, 0.0, math.inf

    def rel_se(st: Stats) -> float:
        return 1.2533 * ((st.q3 - st.q1) / 1.349) / math.sqrt(st.n) / st.median  # type: ignore[operator,arg-type]

    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    half = z * math.hypot(rel_se(base), rel_se(cand))
    if not half < 700:  # an IQR hundreds of times its median: exp(half) overflows, the interval is unbounded
        return r, 0.0, math.inf
    return r, r * math.exp(-half), r * math.exp(half)


def judge_timing(lo: float, hi: float, threshold: float) -> str:
    """The timing verdict of an interval [lo, hi] of the ratio (module docstring). Unchanged only where the
    interval rules a change of the threshold out both ways (the equivalence half of a TOST, as the
    interleaved "same"): an interval that reaches past it on one side neither shows nor rules it out."""
    if not 0 < lo <= hi:  # NaN too: no interval, no verdict
        return "noisy"
    if lo > 1 + threshold:
        return "regression"
    if hi < 1 / (1 + threshold):
        return "improvement"
    if lo >= 1 / (1 + threshold) and hi <= 1 + threshold:
        return "unchanged"
    return "noisy"


def judge_numbers(base_err: float, cand_err: float, rtol: float | None) -> str:
    floor = NUM_FLOOR * rtol if rtol else 0.0
    if cand_err > NUM_FACTOR * base_err and cand_err > floor:
        return "worse"
    if base_err > NUM_FACTOR * cand_err and base_err > floor:
        return "better"
    return "same"


# -- rows -----------------------------------------------------------------------------------------


def _key(scn: ScenarioResult, row: model.Row) -> tuple[str, str, str, str]:
    params = dict(scn.params_of(row))
    label = str(params.pop("label", row.label) or "")  # params: keys are parameter names (data)
    params.pop("seed", None)  # params: keys are parameter names (data)
    return (label, json.dumps(params, sort_keys=True), row.framework, row.variant)


def _rtol(scenario: str, params: Json) -> float | None:
    try:
        # params: keys are parameter names (data)
        return get_scenario(scenario).tolerance.for_dtype(str(params.get("dtype", "float32")))[0]
    except (KeyError, TypeError, ValueError):
        return None


def _clock(row: model.Row, clock: str) -> tuple[Stats | None, list[np.ndarray] | None]:
    """(the clock's stats, its repeats split by process: one array for files of one process)."""
    t = row.timing
    if t is None:
        return None, None
    samples = (t.samples or {}).get(clock)  # samples: keys are clock names (data)
    if not samples:
        return t.clock(clock), None
    counts = t.counts(clock)
    return t.clock(clock), split(samples, counts) if counts else [np.asarray(samples, dtype=np.float64)]


def process_medians(row: model.Row, clock: str) -> list[float] | None:
    """Each process's median of a row's repeats on a clock, in process order (_clock's split); None without them."""
    st, parts = _clock(row, clock)
    if st is None or parts is None:
        return None
    return [float(np.median(p)) for p in parts]


def compare_row(scenario: str, scn_b: ScenarioResult, rb: model.Row, scn_c: ScenarioResult, rc: model.Row,
                clock: str, threshold: float, confidence: float, host: float | None = None,
                speeds: tuple[float, float] | None = None,
                stand: tuple[float | None, float | None] = (None, None)) -> Row | str:
    """The judged row, or why this pair is not comparable. stand: each file's start-up loop that stands
    in for a row's own where the file's rows recorded none (env.stand_in)."""
    sb, sc = rb.status, rc.status
    label = _key(scn_b, rb)[0]
    row = Row(scenario, label, rb.framework, rb.variant, bool(rb.hazard))
    if sb == "skipped" or sc == "skipped":
        which = "both" if sb == sc else ("the baseline" if sb == "skipped" else "the candidate")
        return f"skipped in {which}: {(rb if sb == 'skipped' else rc).reason or ''}"
    if sb in FAILED and sc in FAILED:
        return f"failed in both ({sb}, {sc}): {rc.reason or ''}"
    if sb in FAILED or sc in FAILED:
        row.status = f"{sb} → {sc}: {(rc if sc in FAILED else rb).reason or ''}"
        row.verdict = "regression" if sc in FAILED else "improvement"
        row.why.append("status")
        return row
    # Both ran: timing, then numbers.
    problem = _judge_time(row, rb, rc, clock, threshold, confidence, host, speeds, stand)
    if problem:
        return problem
    _judge_numbers(row, scenario, scn_b, rb, scn_c, rc)
    if row.timing == "regression" or row.numbers == "worse":
        row.verdict = "regression"
    elif row.timing == "improvement" or row.numbers == "better":
        row.verdict = "improvement"
    elif row.timing == "unknown":
        row.verdict = "unknown"
    elif row.timing == "noisy":
        row.verdict = "noisy"
    return row


def _judge_time(row: Row, rb: model.Row, rc: model.Row, clock: str, threshold: float, confidence: float,
                host: float | None, speeds: tuple[float, float] | None = None,
                stand: tuple[float | None, float | None] = (None, None)) -> str | None:
    """Set row's ratio, interval and timing verdict; or why the clock cannot be compared. Where both
    runs recorded the host loop beside each process, a change that the host can explain (regress/env.py
    HostEffect: the row's measured sensitivity, the host's change and its two speeds, speeds) is
    unknown. In an older file, whose rows recorded no loop: for host-bound rows, the calibration's factor
    (host, where it differs beyond its noise) is the host's change, which the row follows up to
    ELASTICITY_MAX; else, where the host ran at two speeds, the file's start-up loop stands in for the
    row's (stand)."""
    (stb, xb), (stc, xc) = _clock(rb, clock), _clock(rc, clock)
    if stb is None or stc is None:
        return f"no {clock} clock in {'the baseline' if stb is None else 'the candidate'}"
    samples = xb is not None and xc is not None
    # the figure the ratio is of: the processes' medians' median where the repeats are kept (an older file
    # stored the pooled median), else the stored one
    mb_s, mc_s = (row_median(xb), row_median(xc)) if samples else (stb.median, stc.median)  # type: ignore[arg-type]
    if mb_s <= 0 or mc_s <= 0:
        return f"a zero {clock} median"
    if samples:
        row.ratio, row.lo, row.hi = ratio_interval(xb, xc, confidence, RESAMPLES)  # type: ignore[arg-type]
        row.method = "processes" if len(xb) > 1 and len(xc) > 1 else "repeats"  # type: ignore[arg-type]
    else:
        row.ratio, row.lo, row.hi = ratio_ci_iqr(stb, stc, confidence)
        row.method = "iqr"
    row.base_s, row.cand_s = mb_s, mc_s
    eff = None
    if xb is not None and xc is not None:
        mb, mc = [float(np.median(p)) for p in xb], [float(np.median(p)) for p in xc]
        own_b, own_c = host_procs(rb, mb, clock), host_procs(rc, mc, clock)
        if own_b and own_c:
            eff = host_effect(own_b, own_c, speeds)
        elif speeds and not host and (own_b or stand[0]) and (own_c or stand[1]):
            eff = host_effect(own_b or [(stand[0], m) for m in mb], own_c or [(stand[1], m) for m in mc], speeds,
                              stood=True)
    if eff is not None:
        host = None  # the row's processes say what the host did to it: not the start-up calibration's factor
    row.timing = judge_timing(row.lo, row.hi, threshold)
    if row.timing in ("regression", "improvement") and (eff is not None or host):
        # the most the host's change between the runs can have moved this row, in the change's direction:
        # its own loops' account, else the calibrations' factor, which a row follows up to ELASTICITY_MAX
        slower = row.timing == "regression"
        if eff is not None:
            e, account = eff.explainable(slower), eff.describe()
        else:  # the calibrations' factor, and the host's two speeds where it ran at two (either may meet a row)
            f = host or 1.0
            swing = speeds[1] / speeds[0] if speeds else 1.0
            e = (max(f, swing, 1.0) if slower else min(f, 1 / swing, 1.0)) ** ELASTICITY_MAX
            two = (f"; the host ran at {1e3 * speeds[0]:.1f} and {1e3 * speeds[1]:.1f} ms during the runs"
                   if speeds else "")
            account = (f"host speed changed (the candidate's host {100 * abs(f - 1):.0f}% "
                       f"{'slower' if f > 1 else 'faster'} by the two runs' calibrations{two}; its sensitivity to "
                       "the host not measurable)")
        if judge_timing(row.lo / e, row.hi / e, threshold) != row.timing:
            row.timing, row.host = "unknown", account
            row.why.append("host")
    if row.timing in ("regression", "improvement"):
        row.why.append("time")
    return None


def _judge_numbers(row: Row, scenario: str, scn_b: ScenarioResult, rb: model.Row, scn_c: ScenarioResult,
                   rc: model.Row) -> None:
    sb, sc = rb.status, rc.status
    if sb != sc:  # ok <-> wrong: the timed outputs' check changed
        row.numbers = "worse" if sc == "wrong" else "better"
        worst = rc.check.worst if rc.check is not None else ""
        row.status = f"{sb} → {sc}" + (f": {worst}" if sc == "wrong" else "")
        row.why.append("outputs")
    elif not row.hazard:
        cb, cc = rb.check, rc.check
        eb, ec = (cb.max_rel_err if cb else None), (cc.max_rel_err if cc else None)
        pb, pc = scn_b.params_of(rb), scn_c.params_of(rc)
        # against the float64 reference only: a variant checked against its framework's baseline output
        # measures its distance from another output of the same framework, which moves whenever that one
        # does (JAX's, between two runs of one commit and seed: docs/regress.md)
        if eb is not None and ec is not None and pb == pc and cb.against == cc.against == "reference":  # type: ignore[union-attr]
            row.base_err, row.cand_err = eb, ec
            row.numbers = judge_numbers(eb, ec, _rtol(scenario, pb))
            if row.numbers != "same":
                row.why.append("numbers")


@dataclass
class _Context:
    clock: str
    threshold: float
    confidence: float
    frameworks: list[str] | None
    variants: list[str] | None
    excluded: dict[str, str]
    host: HostSpeed | None
    host_bound: set[tuple[str, str, str]]
    speeds: tuple[float, float] | None = None
    stand: tuple[float | None, float | None] = (None, None)


def regress(base: Result | Json, cand: Result | Json, *, base_name: str = "baseline", cand_name: str = "candidate",
            clock: str = "device_done", threshold: float = 0.10, confidence: float = 0.95,
            scenarios: list[str] | None = None, frameworks: list[str] | None = None,
            variants: list[str] | None = None, across_versions: bool = False) -> Regress:
    """Compare two validated results (a Result, or a document built in memory: typed once, here); RegressError
    when nothing at all is comparable."""
    if clock not in CLOCKS:
        raise RegressError(f"unknown clock {clock!r}")
    base, cand = typed(base), typed(cand)
    notes, excluded = _environments(base, cand, across_versions)
    host = host_speed(base, cand)
    if host is not None and host.differs:
        notes.append(host.describe())
    during = describe_host_during(base, cand, threshold)
    if during:
        notes.append(during)
    for which, d in (("baseline", base), ("candidate", cand)):
        if _one_process(d):
            notes.append(f"the {which} keeps one process's repeats per row (written before rows were timed in "
                         "several processes): its intervals count only the noise within one process")
    speeds = two_speeds(base, cand, threshold)
    ctx = _Context(clock, threshold, confidence, frameworks, variants, excluded, host,
                   host_bound(base) | host_bound(cand), speeds, (stand_in(base), stand_in(cand)))
    rows: list[Row] = []
    nc: list[tuple[str, str]] = []
    for name, scn_b in base.scenarios.items():
        if scenarios is not None and name not in scenarios:
            continue
        scn_c = cand.scenarios.get(name)  # scenarios: keys are scenario names (data)
        if scn_c is None:
            nc.append((name, "not in the candidate"))
            continue
        _scenario_rows(name, scn_b, scn_c, ctx, rows, nc)
    for name in cand.scenarios:
        if name not in base.scenarios and (scenarios is None or name in scenarios):
            nc.append((name, "not in the baseline"))
    if not rows:
        first = "; ".join(f"{w}: {y}" for w, y in nc[:2]) or "no timed rows"
        raise RegressError(f"nothing comparable between {base_name} and {cand_name} ({first})")
    return Regress(base_name, cand_name, clock, threshold, confidence, notes, rows, nc, host)


def _one_process(doc: Result) -> bool:
    return any(r.timing is not None and r.timing.one_process for scn in doc.scenarios.values() for r in scn.rows)


def _scenario_rows(name: str, scn_b: ScenarioResult, scn_c: ScenarioResult, ctx: _Context, rows: list[Row],
                   nc: list[tuple[str, str]]) -> None:
    """Judge one scenario's rows present in both runs; list the rest as not comparable."""
    wanted = (lambda r: (ctx.frameworks is None or r.framework in ctx.frameworks)
              and (ctx.variants is None or r.variant in ctx.variants))
    keep = [r for r in scn_b.rows if wanted(r)]
    if not keep and not scn_b.rows:
        nc.append((name, "no timing rows in the baseline"))
    by_key_c = {_key(scn_c, r): r for r in scn_c.rows}
    seen = set()
    for rb in keep:
        k = _key(scn_b, rb)
        seen.add(k)
        what = "/".join(filter(None, (name, k[0], rb.framework, rb.variant)))
        if rb.framework in ctx.excluded:
            nc.append((what, ctx.excluded[rb.framework]))
            continue
        rc = by_key_c.get(k)
        if rc is None:
            nc.append((what, "not in the candidate (or at other params)"))
            continue
        bound = (name, str(rb.point_index), rb.variant) in ctx.host_bound
        factor = ctx.host.factor if ctx.host is not None and ctx.host.differs and bound else None
        got = compare_row(name, scn_b, rb, scn_c, rc, ctx.clock, ctx.threshold, ctx.confidence, factor, ctx.speeds,
                          ctx.stand)
        if isinstance(got, str):
            nc.append((what, got))
        else:
            rows.append(got)
    for k, rc in by_key_c.items():
        if k not in seen and wanted(rc):
            nc.append(("/".join(filter(None, (name, k[0], rc.framework, rc.variant))), "not in the baseline"))


# -- paired verdicts (an interleaved run: harness/run/interleave.py) ------------------------------------

FDR = 0.05  # the share of false "different" rows tolerated among a run's rows (Benjamini-Hochberg)


@dataclass
class Paired:
    """One row of an interleaved run: baseline and candidate process medians, pair by pair."""

    scenario: str
    label: str
    framework: str
    variant: str
    base: list[float]  # process medians, pair order
    cand: list[float]
    point: int = 0
    verdict: str = "unknown"  # same | different | unknown
    ratio: float | None = None  # geometric mean over pairs of candidate / baseline
    lo: float | None = None
    hi: float | None = None
    p: float = 1.0  # the paired t test's, on the pairs' log ratios
    q: float = 1.0  # Benjamini-Hochberg adjusted over the run's rows
    status: str = ""  # "ok → error: why" where a side failed
    why: str = ""  # what made an unknown or a different verdict
    # The smallest change these pairs would call different if measured as such, by their spread, had the
    # row been the run's only change (detectable); inf where none could be.
    detectable: float = math.inf
    # Each process's median of the host's loops beside its repeats (timing.host_loops), pair order; empty where a
    # side did not record them. With --host-covariate, theta: how far the row's log ratio followed the pairs' log
    # loop ratio, where the verdict was taken at equal host speeds (covariate_test); None where it was not.
    base_loop: list[float] = field(default_factory=list)
    cand_loop: list[float] = field(default_factory=list)
    theta: float | None = None

    @property
    def pairs(self) -> int:
        return min(len(self.base), len(self.cand))

    @property
    def decidable(self) -> bool:
        """Do the pairs have figures to test (every process median finite and above 0)? More pairs do
        not decide a row whose clock read 0 or nothing."""
        return all(math.isfinite(v) and v > 0 for v in self.base + self.cand)

    @property
    def slower(self) -> bool:
        if self.verdict != "different":
            return False
        if self.status:
            return "candidate" in self.why
        return (self.ratio or 1.0) > 1


EQUAL_RATIOS = 1e-9  # a spread of log ratios this small is rounding: ratios equal but for the last bits


def paired_test(base: list[float], cand: list[float], confidence: float) -> tuple[float, float, float, float]:
    """(ratio, lo, hi, p): the geometric mean of the pairs' ratios, its Student-t interval and the
    two-sided paired t test's p on the log ratios.

    Why a t test and not a rank test (Wilcoxon signed-rank, a sign-flip permutation): with n pairs a
    rank test's smallest two-sided p is 2 / 2^n (0.03 at 6 pairs), which Benjamini-Hochberg across a
    run's ~100 rows can never pass (it needs p <= FDR / rows for a lone change); the t test's p is
    continuous. The log makes a host's multiplicative effect additive, and a process's figure is the
    median of its repeats, so that one stall inside a process does not reach the test.
    Pairs whose ratios are all equal (a clock whose ticks are coarse against the call) give the t test
    no spread: then the sign test's p (2 / 2^n where they moved, 1 where they did not) and no interval,
    rather than a p of 0 and an interval of no width that one quantum would decide."""
    with np.errstate(divide="ignore", invalid="ignore"):  # a median of 0 or inf: judge_pairs says so (decidable)
        x = np.log(np.asarray(cand, dtype=np.float64) / np.asarray(base, dtype=np.float64))
        n = len(x)
        ratio = float(np.exp(np.mean(x))) if n else math.nan
        if n < 2:
            return ratio, 0.0, math.inf, 1.0
        sd = float(np.std(x, ddof=1))
    from scipy import stats  # heavy (~0.3 s): only a pair's test needs it

    if sd <= EQUAL_RATIOS:
        return ratio, 0.0, math.inf, (1.0 if abs(np.mean(x)) <= EQUAL_RATIOS else min(1.0, 2.0 ** (1 - n)))
    se = sd / math.sqrt(n)
    t = float(np.mean(x)) / se
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * se
    return ratio, ratio * math.exp(-half), ratio * math.exp(half), float(2 * stats.t.sf(abs(t), n - 1))


COVARIATE_MIN_PAIRS = 6  # fewer pairs: the plain test (the covariate's degree of freedom costs too much below)
LOOP_SPREAD_MIN = 0.01  # the pairs' log loop ratios' standard deviation below which the plain test stands


def covariate_test(base: list[float], cand: list[float], base_loop: list[float], cand_loop: list[float],
                   confidence: float) -> tuple[float, float, float, float, float, float] | None:
    """(ratio, lo, hi, p, se, theta) at equal host speeds: the intercept of the pairs' log ratios regressed on their
    log loop ratios (analysis of covariance; CUPED is the same idea), its Student-t interval and two-sided p on
    n - 2 degrees of freedom, its standard error, and the slope. None where it cannot stand in for paired_test: under
    COVARIATE_MIN_PAIRS pairs, a loop missing or not above 0, loop ratios that spread less than LOOP_SPREAD_MIN (the
    loop's own noise: a slope fitted to it only widens the interval), or no spread left.
    Why: a host-paced row's pairs differ by the host's speed when a pair's two processes met the host at different
    speeds (a lent host's CPU may run a process at one of two speeds 1.8x apart for the whole of a row); the
    loops timed beside the row's repeats (TimingConfig.host_beside), a process's median, track that speed, and the
    intercept is the change had both met it at one. It is unbiased where the change under test does not move the
    loop: two trees on one Python that time one loop at one place (harness/measure/timing.py loop_identity; the loop
    runs twice and keeps the faster, so that how the code before it waited does not reach it), and a change that
    leaves the host's CPUs alone (a candidate whose threads load the host moves both)."""
    n = min(len(base), len(cand), len(base_loop), len(cand_loop))
    if n < COVARIATE_MIN_PAIRS or n != len(base) or n != len(cand):
        return None
    v = np.asarray([base, cand, base_loop[:n], cand_loop[:n]], dtype=np.float64)
    if not (np.isfinite(v).all() and (v > 0).all()):
        return None
    d, x = np.log(v[1] / v[0]), np.log(v[3] / v[2])
    sxx = float(np.sum((x - x.mean()) ** 2))
    if sxx <= (n - 1) * LOOP_SPREAD_MIN ** 2:  # loops about equal in every pair: nothing to tell the host from the change
        return None
    theta = float(np.sum((x - x.mean()) * (d - d.mean())) / sxx)
    delta = float(d.mean() - theta * x.mean())
    resid = d - delta - theta * x
    s2 = float(resid @ resid) / (n - 2)
    if s2 <= EQUAL_RATIOS ** 2:
        return None
    se = math.sqrt(s2 * (1 / n + x.mean() ** 2 / sxx))
    from scipy import stats  # heavy (~0.3 s): only a pair's test needs it

    half = float(stats.t.ppf(0.5 + confidence / 2, n - 2)) * se
    ratio = math.exp(delta)
    p = float(2 * stats.t.sf(abs(delta) / se, n - 2))
    return ratio, ratio * math.exp(-half), ratio * math.exp(half), p, se, theta


def detectable(base: list[float], cand: list[float], threshold: float, alpha: float) -> float:
    """The smallest relative change (slower; a faster one needs its inverse) that pairs with this spread
    would call different when measured as such, at a two-sided paired t test's level alpha: judge_pairs'
    rate, already split over the looks, over its rows (a lone change under Benjamini-Hochberg); at least
    the effect floor; inf below two pairs, where the spread is not finite, or at an alpha outside (0, 1).
    Why: a run that could not have found a change must not read as one that found none."""
    n = min(len(base), len(cand))
    if n < 2 or not 0 < alpha < 1:
        return math.inf
    with np.errstate(divide="ignore", invalid="ignore"):  # a median of 0 or inf: caught as not finite below
        x = np.log(np.asarray(cand[:n], dtype=np.float64) / np.asarray(base[:n], dtype=np.float64))
        sd = float(np.std(x, ddof=1))
    return smallest_change(sd, n, threshold, alpha)


def smallest_change(sd: float, n: int, threshold: float, alpha: float) -> float:
    """detectable's rule on a spread sd of n pairs' log ratios (measured, or forecast: harness/regress/forecast.py):
    the paired t test's smallest change at level alpha, the sign test's where the ratios are equal, never below
    the effect floor; inf below two pairs or where sd is not finite."""
    if n < 2 or not 0 < alpha < 1 or not math.isfinite(sd):  # a median of 0 or inf in a pair: nothing to go by
        return math.inf
    if sd <= EQUAL_RATIOS:  # equal ratios: the sign test (paired_test), whose p depends on n alone
        return threshold if 2.0 ** (1 - n) <= alpha else math.inf
    return change_at(sd / math.sqrt(n), n - 1, threshold, alpha)


def change_at(se: float, df: int, threshold: float, alpha: float) -> float:
    """The smallest change a Student-t test of a log change with standard error se on df degrees of freedom calls
    different at level alpha, never below the effect floor (smallest_change's, and covariate_test's intercept's)."""
    from scipy import stats  # heavy (~0.3 s): only a pair's test needs it

    log = max(math.log1p(threshold), float(stats.t.ppf(1 - alpha / 2, df)) * se)
    return math.expm1(log) if log < 700 else math.inf  # beyond a float: no change that pairs can show


def bh_adjust(ps: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p values (a row is different at FDR q where its adjusted p <= q)."""
    m = len(ps)
    if not m:
        return []
    ps = [p if math.isfinite(p) else 1.0 for p in ps]  # a row without a p (a median of 0) decides nothing
    order = np.argsort(ps)
    adj = np.minimum.accumulate((np.asarray(ps)[order] * m / np.arange(1, m + 1))[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out.tolist()


def judge_pairs(rows: list[Paired], threshold: float, confidence: float, fdr: float = FDR,
                covariate: bool = False) -> None:
    """Every row's verdict, the false discoveries controlled across all the run's rows.

    different  the paired test passes Benjamini-Hochberg at fdr and the ratio is beyond the effect
               floor (1 + threshold, or its inverse: asv's 1.1 at the default 10%)
    same       the ratio's interval at `confidence` lies within the floor both ways: a change as large
               as the floor is unlikely (Pinpoint's SAME; the equivalence half of a TOST)
    unknown    neither: more pairs may decide it (not where a process median is 0 or not finite)
    A row that ran on one side and failed on the other is different whatever its times. A run that
    looks at its rows several times passes fdr and confidence already split over its looks.
    covariate (--host-covariate): a row whose pairs recorded the host's loops beside its repeats is tested at equal
    host speeds where covariate_test can (r.theta says so), its smallest change from that test's error."""
    timed = [r for r in rows if not r.status]
    alpha = fdr / max(len(timed), 1)
    for r in timed:
        r.theta = None
        got = covariate_test(r.base, r.cand, r.base_loop, r.cand_loop, confidence) if covariate else None
        if got is None:
            r.ratio, r.lo, r.hi, r.p = paired_test(r.base, r.cand, confidence)
            r.detectable = detectable(r.base, r.cand, threshold, alpha)
            continue
        r.ratio, r.lo, r.hi, r.p, se, r.theta = got
        r.detectable = change_at(se, r.pairs - 2, threshold, alpha)
    for r, q in zip(timed, bh_adjust([r.p for r in timed])):
        r.q = q
        floor = math.log1p(threshold)
        if not r.decidable:
            r.verdict, r.why = "unknown", "a process median of 0 or not finite: nothing for pairs to decide"
        elif q <= fdr and abs(math.log(r.ratio)) >= floor:
            r.verdict, r.why = "different", ""
        elif r.lo > 0 and r.hi < math.inf and abs(math.log(r.lo)) < floor and abs(math.log(r.hi)) < floor:
            r.verdict, r.why = "same", ""
        elif q <= fdr:
            r.verdict, r.why = "unknown", "changed, but its interval reaches the effect floor"
        else:
            r.verdict, r.why = "unknown", f"not significant (BH q = {q:.2g}) and its interval reaches the floor"
    for r in rows:
        if r.status:
            r.verdict = "different"
