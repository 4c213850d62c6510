"""What regress must know about the two runs' machines before it compares rows: whether they can be
compared at all, what differs (the header's notes), and how much faster or slower the host was.

Host speed: each worker process of a run measured a tiny op per framework and a fixed Python loop
(harness/measure/calibrate.py). The candidate's host factor is the geometric mean, over those measures, of
the candidate's median over the baseline's. The calibration's own noise is its spread between the
processes of one run (the larger of the two runs'), and never less than HOST_FLOOR. Where the factor
is outside that noise the machines differ: the header says by how much, and a host-bound row of files
without their rows' own host loops whose change that factor can explain (raised to ELASTICITY_MAX, and
the host's two speeds where it ran at two) is unknown (a host 30% slower makes a launch-bound row 30%
slower without any change of code).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.measure.noise import loglog_fit
from harness.measure.timing import OVERRIDE_ENV
from harness.results.model import FrameworkEnv, Json, Result, Row
from harness.workers import faults

HOST_FLOOR = 0.10  # below this the two hosts count as one (the default regress threshold)


class RegressError(ValueError):
    """The two files cannot be compared at all; str(self) is the one-line reason."""


def typed(doc: Result | Json) -> Result:
    """A result as the model has it (harness/results/model.py): a Result as it is; a document built in memory
    (an interleaved run's sides, a test's) converted once, here, where regress takes it."""
    return doc if isinstance(doc, Result) else Result.from_dict(doc)


@dataclass(frozen=True)
class HostSpeed:
    factor: float  # candidate time / baseline time for the same host work
    noise: float  # the calibration's own relative noise
    measures: int  # how many calibration measures both runs share

    @property
    def differs(self) -> bool:
        return abs(math.log(self.factor)) > math.log1p(self.noise)

    def describe(self) -> str:
        return (f"the candidate's host is {100 * abs(self.factor - 1):.0f}% {'slower' if self.factor > 1 else 'faster'} "
                f"(tiny ops and a Python loop, {self.measures} measures; their own noise ±{100 * self.noise:.0f}%): "
                "a host-bound row whose change that can explain is unknown")


def _calibration(doc: Result) -> dict[str, list[float]]:
    """{measure: its value in every process}, e.g. {"torch tiny_op_s": [9e-6, 9.2e-6], ...}."""
    out: dict[str, list[float]] = {}
    # machine: the machine's facts, calibration among them: per framework, per process, measures by name (data)
    for fw, procs in ((doc.environment.machine or {}).get("calibration") or {}).items():
        for p in procs:  # a process's measures: keys are measure names (data), or error
            for k, v in p.items():
                if isinstance(v, (int, float)) and v > 0:
                    out.setdefault(f"{fw} {k}", []).append(float(v))
    return out


def host_speed(base: Result, cand: Result) -> HostSpeed | None:
    """None where either run has no calibration (files written before it was measured)."""
    cb, cc = _calibration(base), _calibration(cand)
    shared = sorted(set(cb) & set(cc))
    if not shared:
        return None
    logs = [math.log(np.median(cc[k]) / np.median(cb[k])) for k in shared]
    spread = [max(v) / min(v) - 1 for c in (cb, cc) for k in shared for v in [c[k]] if len(v) > 1]
    return HostSpeed(math.exp(float(np.mean(logs))), max([HOST_FLOOR, *spread]), len(shared))


def host_during(doc: Result) -> list[float]:
    """The host's Python-loop seconds measured by every process just before each point it timed
    (timing.processes[].host_loop_s; older files have none)."""
    return [float(p.host_loop_s) for scn in (doc.scenarios or {}).values() for r in scn.rows
            for p in ((r.timing.processes if r.timing else None) or []) if p.host_loop_s]


def request_loops(doc: Result) -> tuple[list[float], str]:
    """The host's Python-loop seconds a run measured, and where: before every point in every process
    (host_during), or, in files written before that was measured, once in every process at its start
    (machine.calibration's python_loop_s): the only record of the host's speeds such a run has."""
    during = host_during(doc)
    if during:
        return during, "every process, before every point"
    return ([v for k, vs in _calibration(doc).items() if k.endswith(" python_loop_s") for v in vs],
            "every process at its start")


def slow_share(base: list[float], cand: list[float], threshold: float) -> tuple[float, float, float, float] | None:
    """(fast, slow, base share, cand share) where two runs' host loops (seconds) together span two speeds:
    their 10th and 90th percentiles further apart than 1 + threshold. Each share is the run's part of its
    loops above the two speeds' geometric mean. None at one speed, or where a run has no loop. Why: a
    host-paced row's median moves with the share of its time at the slower speed (docs/design/host_speed.md)."""
    if not base or not cand:
        return None
    fast, slow = (float(x) for x in np.quantile(base + cand, [0.1, 0.9], method="nearest"))
    if slow / fast <= 1 + threshold:
        return None
    split = math.sqrt(fast * slow)
    return fast, slow, float(np.mean(np.asarray(base) > split)), float(np.mean(np.asarray(cand) > split))


def describe_host_during(base: Result, cand: Result, threshold: float) -> str | None:
    """A header note where the two runs' hosts ran the loop differently: rows that the host paces
    (pageable copies, launch-bound loops) can then move without a change of code. Said, not acted on:
    which rows the host paces is not known row by row.

    A lent GPU host ran Python at two speeds, in spells of milliseconds (docs/design/host_speed.md):
    where the loop's times of both runs together span two speeds (their 10th and 90th percentiles
    further apart than the threshold), the note gives the two speeds and the share of measurements at
    the slower one in each run, which is what moves a host-paced row's median; otherwise it compares the
    runs' medians."""
    (hb, wb), (hc, wc) = request_loops(base), request_loops(cand)
    if not hb or not hc:
        return None
    where = wb if wb == wc else f"the baseline: {wb}; the candidate: {wc}"
    speeds = slow_share(hb, hc, threshold)
    if speeds is not None:
        fast, slow, sb, sc = speeds
        if abs(sc - sb) < 0.1:
            return None
        return (f"the host's speed during the runs differs: it ran a fixed Python loop at two speeds, about "
                f"{1e3 * fast:.1f} and {1e3 * slow:.1f} ms, at the slower in {100 * sb:.0f}% of the measurements in "
                f"the baseline and {100 * sc:.0f}% in the candidate ({where}): rows "
                f"that the host paces can move by up to {100 * (slow / fast - 1):.0f}% without a change of code")
    mb, mc = float(np.median(hb)), float(np.median(hc))
    if abs(math.log(mc / mb)) <= math.log1p(threshold):
        return None

    def ms(v: list[float]) -> str:
        return f"{1e3 * float(np.median(v)):.1f} ms [{1e3 * min(v):.1f}-{1e3 * max(v):.1f}]"

    return (f"the host's speed during the runs differs: a fixed Python loop took {ms(hb)} in the baseline and "
            f"{ms(hc)} in the candidate (median [range]; {where}): rows that the host "
            f"paces can move by {100 * abs(mc / mb - 1):.0f}% without a change of code")


def host_bound(doc: Result) -> set[tuple[str, str, str]]:
    """(scenario, point, variant) whose time is the host's: every row of a run without a GPU; on a GPU,
    where device events saw the device busy for less than half the call (a framework without device
    events follows the rows of the same variant that have them)."""
    out = set()
    on_gpu = bool(doc.environment.gpu)
    for name, scn in doc.scenarios.items():
        for r in scn.rows:
            ev, done = (r.timing.device_events, r.timing.device_done) if r.timing else (None, None)
            if not on_gpu or (ev and done and ev.median < 0.5 * done.median):
                out.add((name, str(r.point_index), r.variant))
    return out


def fw_version(info: FrameworkEnv) -> str | None:
    """'2.11.0+cu130 · CUDA 13.0' for an available framework, None for one that did not run."""
    if not info.available:
        return None
    env = info.env or {}
    parts = [str(env.get("version", "?"))]  # env: the backend's own facts, its keys (data)
    if env.get("jaxlib") and env.get("jaxlib") != env.get("version"):  # env: the backend's facts (data)
        parts.append(f"jaxlib {env['jaxlib']}")  # env: the backend's facts (data)
    if env.get("cuda_runtime"):  # env: the backend's facts (data)
        parts.append(f"CUDA {env['cuda_runtime']}")  # env: the backend's facts (data)
    return " · ".join(parts)


def describe(doc: Result) -> str:
    gpu = doc.environment.gpu or "no GPU"
    return f"{doc.created} · {gpu} · {doc.size} · seed {doc.seed}"


def _environments(base: Result, cand: Result, across_versions: bool) -> tuple[list[str], dict[str, str]]:
    """(header notes, {framework: why its rows are not comparable})."""
    eb, ec = base.environment, cand.environment
    gb, gc = eb.gpu, ec.gpu
    if gb != gc:
        raise RegressError(f"nothing comparable: the baseline ran on {gb or 'no GPU (CPU)'}, "
                           f"the candidate on {gc or 'no GPU (CPU)'}")
    notes, excluded = [], {}
    # host: the machine's facts (code, driver, python, cpu_model, ...), keys named by harness/measure/machine.py (data)
    hb, hc = eb.host or {}, ec.host or {}
    if hb.get("code") != hc.get("code") and (hb.get("code") or hc.get("code")):  # host facts (data)
        notes.append(f"triptych code {hb.get('code') or 'unknown'} → {hc.get('code') or 'unknown'}")
    for key, what in (("driver", "driver"), ("python", "Python"), ("numpy", "numpy")):
        if hb.get(key) != hc.get(key):
            notes.append(f"{what} {hb.get(key, '?')} → {hc.get(key, '?')} (compared anyway)")
    for key, what in (("cpu_model", "CPU"), ("cpus", "CPU count"), ("kernel", "kernel"),
                      ("transparent_hugepages", "transparent huge pages")):  # older files lack it
        if key in hb and key in hc and hb[key] != hc[key]:
            notes.append(f"{what} {hb[key]} → {hc[key]} (compared anyway)")
    if base.size != cand.size:
        notes.append(f"size preset {base.size} → {cand.size} (only points with the same params compare)")
    if base.seed != cand.seed:
        notes.append(f"seed {base.seed} → {cand.seed}: different inputs, numbers not judged")
    fb, fc = eb.gpu_memory_fraction, ec.gpu_memory_fraction
    if fb != fc and fb is not None and fc is not None:
        notes.append(f"GPU memory fraction {fb} → {fc} (compared anyway)")
    for which, doc in (("baseline", base), ("candidate", cand)):
        side = doc.extra.get("interleaved") or {}  # one side of an interleaved regress (harness/run/interleave.py)
        planted = {k: v for k, v in (side.get("env") or {}).items() if k in (faults.ENV, OVERRIDE_ENV)}
        if planted:
            notes.append(f"{which}: one side ({side.get('side', '?')}) of an interleaved regress, timed with "
                         + " ".join(f"{k}={v}" for k, v in planted.items())
                         + ": a planted fault, or timing settings other than its size's preset")
    fws_b, fws_c = eb.frameworks or {}, ec.frameworks or {}
    for fw in sorted(set(fws_b) & set(fws_c)):
        vb, vc = fw_version(fws_b[fw]), fw_version(fws_c[fw])
        if vb and vc and vb != vc:
            if across_versions:
                notes.append(f"{fw} {vb} → {vc} (compared across the change)")
            else:
                notes.append(f"{fw} {vb} → {vc}: its rows are not compared (--allow-version-change compares them)")
                excluded[fw] = f"{fw} {vb} → {vc}"
    return notes, excluded


# -- a row's sensitivity to the host, measured ------------------------------------------------------

SENSITIVITY_MIN_SPREAD = 0.05  # the host loop must have varied this much within a run to fit a slope
SENSITIVITY_MIN_DF = 3  # residual degrees of freedom of the fit: fewer cannot show a row to be insensitive
# The most of the host's change a row shows, d log(time) / d log(host loop), where its own cannot be
# fitted: the 99th percentile of what pairs of one row's processes showed in the committed GPU runs
# (docs/design/host_speed.md). A fitted
# upper bound is held to it too: a few processes' fit does not show a row more sensitive than that.
ELASTICITY_MAX = 1.5


@dataclass(frozen=True)
class HostEffect:
    """What the host's speed can do to one row between the two runs.

    base_ms, cand_ms: the host loop's median over the row's processes in each run (timing.processes[]
    .host_loop_s, measured just before the point was timed in that process).
    fast_ms, slow_ms: the two speeds the host ran at during the runs (every process and point of both),
    where it ran at two: a process can time its row at either whatever the loop read just before it
    (a host can switch speed in spells of milliseconds: docs/design/host_speed.md); else None.
    slope: the row's elasticity to the host, d log(time) / d log(host loop), fitted within each run
    (a run's own intercept: a change of code between the runs is not read as host sensitivity) over
    the row's processes; hi its upper 95% bound. None where it cannot be measured (too few processes,
    or a host loop that hardly varied within the runs): the row is then taken to follow the host as far
    as any row was seen to (ELASTICITY_MAX), not merely in step with it."""

    base_ms: float
    cand_ms: float
    slope: float | None
    hi: float | None
    fast_ms: float | None = None
    slow_ms: float | None = None
    stood: bool = False  # a run's start-up loop stood in for the row's own (stand_in): an older file

    def explainable(self, slower: bool) -> float:
        """The largest factor (candidate / baseline) in the change's direction that the host can put
        on this row: the row's own host change, or the host's two speeds where it ran at two."""
        own = self.cand_ms / self.base_ms
        swing = self.slow_ms / self.fast_ms if self.fast_ms and self.slow_ms else 1.0
        factor = max(own, swing, 1.0) if slower else min(own, 1 / swing, 1.0)
        return factor ** (ELASTICITY_MAX if self.hi is None else min(max(self.hi, 0.0), ELASTICITY_MAX))

    def describe(self) -> str:
        sens = ("its sensitivity to the host not measurable" if self.slope is None
                else f"sensitivity {self.slope:.2f} (up to {self.hi:.2f})")
        two = (f"; the host ran at {self.fast_ms:.1f} and {self.slow_ms:.1f} ms during the runs"
               if self.fast_ms and self.slow_ms else "")
        whose = "; a run's start-up loop stands in for the row's own, which it did not record" if self.stood else ""
        return f"host speed changed ({self.base_ms:.1f} ms → {self.cand_ms:.1f} ms{whose}{two}; {sens})"


def two_speeds(base: Result, cand: Result, threshold: float) -> tuple[float, float] | None:
    """(fast, slow) host loop seconds where a run's host itself ran at speeds further apart than the
    threshold (its loop times' 10th and 90th percentiles), the two runs' together; else None (a host
    steady within each run explains only the change of its speed between them)."""
    (hb, _), (hc, _) = request_loops(base), request_loops(cand)
    if not hb or not hc:
        return None
    spread = [np.quantile(h, [0.1, 0.9], method="nearest") for h in (hb, hc)]
    if not any(slow / fast > 1 + threshold for fast, slow in spread):
        return None
    fast, slow = (float(x) for x in np.quantile(hb + hc, [0.1, 0.9], method="nearest"))
    return fast, slow


def host_effect(base_procs: list[tuple[float, float]], cand_procs: list[tuple[float, float]],
                speeds: tuple[float, float] | None = None, stood: bool = False) -> HostEffect | None:
    """From each run's (host loop seconds, process median) pairs; None where a run has no host loop."""
    if not base_procs or not cand_procs:
        return None
    hb = float(np.median([h for h, _ in base_procs]))
    hc = float(np.median([h for h, _ in cand_procs]))
    slope = hi = None
    groups = [np.log(np.asarray(g, dtype=np.float64)) for g in (base_procs, cand_procs) if len(g) >= 2]
    n = sum(len(g) for g in groups)
    df = n - len(groups) - 1
    within = max((float(np.ptp(g[:, 0])) for g in groups), default=0.0)
    # a slope fitted on host loops that moved less within a run than between the runs says nothing of
    # the change between them (a few % of jitter fits a slope near 0): then the row follows the host
    if (df >= SENSITIVITY_MIN_DF and within > math.log1p(SENSITIVITY_MIN_SPREAD)
            and within >= abs(math.log(hc / hb)) - 1e-9):
        from scipy import stats  # heavy (~0.3 s): only the host-speed fit needs it


        slope, se, _, _ = loglog_fit([g for g in (base_procs, cand_procs) if len(g) >= 2])
        hi = slope + float(stats.t.ppf(0.975, df)) * se
    fast, slow = speeds if speeds else (None, None)
    return HostEffect(1e3 * hb, 1e3 * hc, slope, hi, fast and 1e3 * fast, slow and 1e3 * slow, stood)


def stand_in(doc: Result) -> float | None:
    """The host loop that stands in for a row's own in a file written before rows recorded theirs: the
    median of every process's start-up calibration loop (host_loops); None for a file whose rows record
    their own, or one without any loop."""
    if host_during(doc):
        return None
    loops, _ = request_loops(doc)
    return float(np.median(loops)) if loops else None


def host_procs(row: Row, medians: list[float] | None, clock: str = "device_done") -> list[tuple[float, float]]:
    """(host loop s, process median) for every process of a row that recorded its host loop; medians: one for
    each process with samples of `clock` (a kernel clock traced in a row's first processes only has fewer)."""
    procs = (row.timing.processes if row.timing else None) or []
    counts = row.timing.counts(clock) if row.timing else None
    if counts and len(counts) == len(procs):
        procs = [p for p, k in zip(procs, counts) if k]
    if medians is None or len(medians) != len(procs):
        return []
    return [(float(p.host_loop_s), m) for p, m in zip(procs, medians)
            if isinstance(p.host_loop_s, (int, float)) and 0 < p.host_loop_s < math.inf and 0 < m < math.inf]
