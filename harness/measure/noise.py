"""How sure a median is: within one process (when to stop repeating) and between processes.

Most of a timing's variance on a GPU host is between processes (where the allocator and the pinned or
pageable pages landed, clocks, the host's state), not between the repeats of one process: pyperf
and asv run each benchmark in several processes for this reason. A row is therefore timed in two or
more worker processes; its figure is the median of the processes' medians (row_median), and its spread
comes from a hierarchical bootstrap: resample the processes, then the repeats within each chosen process,
and take the same median.

With two processes per run the bootstrap sees at most three distinct draws of processes, and so
underrates the spread between them (a cluster bootstrap needs many clusters). regress therefore also
takes Student's t interval on the runs' process medians (log scale, pooled variance, nb + nc - 2
degrees of freedom), the classic answer for few groups, and judges on the hull of the two.
"""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import Sequence

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000


def median_rel_halfwidth(samples: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE) -> float:
    """Half the width of the distribution-free confidence interval of one process's median (order
    statistics at n/2 -+ z sqrt(n)/2), relative to the median; inf below 5 samples or at a 0 median."""
    a = np.sort(np.asarray(samples, dtype=np.float64))
    n = a.size
    if n < 5:
        return math.inf
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    lo = max(0, int(math.floor(n / 2 - z * math.sqrt(n) / 2)))
    hi = min(n - 1, int(math.ceil(n / 2 + z * math.sqrt(n) / 2)))
    med = float(np.median(a))
    return (a[hi] - a[lo]) / 2 / med if med > 0 else math.inf


def split(samples: Sequence[float], counts: Sequence[int]) -> list[np.ndarray]:
    """The pooled samples of a row cut back into its processes (counts in process order)."""
    a = np.asarray(samples, dtype=np.float64)
    if sum(counts) != a.size:
        raise ValueError(f"process counts {list(counts)} do not add up to {a.size} samples")
    return [part for part in np.split(a, np.cumsum(counts)[:-1]) if part.size]


def row_median(procs: Sequence[np.ndarray]) -> float:
    """A row's figure from its processes' repeats: the median of the processes' medians, every process one
    vote. Why not the pooled repeats' median: a process stops on time spent (TimingConfig), so a faster
    process runs more repeats, and a pooled median would lean toward it wherever processes differ more than
    their repeats do, which on a GPU host is most rows (docs/design/processes.md). One process: its median."""
    meds = [float(np.median(p)) for p in procs if len(p)]
    if not meds:
        raise ValueError("no samples")
    return float(np.median(meds))


def hierarchical_medians(procs: Sequence[np.ndarray], resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """Bootstrap draws of row_median: each resample draws len(procs) processes with replacement, then each
    chosen process's repeats with replacement, and takes the median of the chosen processes' medians. With
    one process this is the plain bootstrap of its median. Each process's draws are made together, in
    slices of at most DRAW_MAX values."""
    rng = np.random.default_rng(seed)
    procs = [np.asarray(p, dtype=np.float64) for p in procs if len(p)]
    if not procs:
        raise ValueError("no samples")
    picks = rng.integers(0, len(procs), (resamples, len(procs)))
    meds = np.empty(picks.shape)
    for i, p in enumerate(procs):
        where = np.flatnonzero(picks == i)
        step = max(1, DRAW_MAX // p.size)
        for start in range(0, where.size, step):
            at = where[start:start + step]
            meds.flat[at] = np.median(p[rng.integers(0, p.size, (at.size, p.size))], axis=1)
    return np.median(meds, axis=1)


DRAW_MAX = 1 << 22  # values drawn at once (32 MiB of indices)


def rel_halfwidth(procs: Sequence[np.ndarray], confidence: float = CONFIDENCE, seed: int = 0) -> float:
    """Half the width of the hierarchical bootstrap interval of the row's median (row_median), relative to it."""
    meds = hierarchical_medians(procs, seed=seed)
    med = row_median(procs)
    alpha = 1 - confidence
    lo, hi = np.quantile(meds, [alpha / 2, 1 - alpha / 2])
    return float((hi - lo) / 2 / med) if med > 0 else math.inf


def process_ratio_interval(base: Sequence[np.ndarray], cand: Sequence[np.ndarray],
                           confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Student's t interval of the candidate's over the baseline's geometric mean of process medians:
    each process one observation on the log scale, the two runs' variances pooled (nb + nc - 2 degrees
    of freedom). None where a run has fewer than two processes (no variance to pool) or a median is
    not positive."""
    lb = [float(np.median(p)) for p in base if len(p)]
    lc = [float(np.median(p)) for p in cand if len(p)]
    if len(lb) < 2 or len(lc) < 2 or min(lb + lc) <= 0:
        return None
    from scipy.stats import t as student_t  # heavy (~0.3 s): only a comparison of two runs needs it

    xb, xc = np.log(lb), np.log(lc)
    df = xb.size + xc.size - 2
    pooled = ((xb.size - 1) * xb.var(ddof=1) + (xc.size - 1) * xc.var(ddof=1)) / df
    half = float(student_t.ppf(0.5 + confidence / 2, df)) * math.sqrt(pooled * (1 / xb.size + 1 / xc.size))
    d = float(xc.mean() - xb.mean())
    return math.exp(d - half), math.exp(d + half)


def ratio_ci_bootstrap(base: np.ndarray | list[np.ndarray], cand: np.ndarray | list[np.ndarray], confidence: float,
                       resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float, float]:
    """(ratio of the rows' medians, lo, hi): percentile bootstrap of row_median(cand) / row_median(base), each
    side one array of repeats or a list of them, one per process (resampled hierarchically)."""
    pb = [np.asarray(x, dtype=np.float64) for x in (base if isinstance(base, list) else [base])]
    pc = [np.asarray(x, dtype=np.float64) for x in (cand if isinstance(cand, list) else [cand])]
    mb = hierarchical_medians(pb, resamples, seed)
    mc = hierarchical_medians(pc, resamples, seed + 1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(mc / mb, [alpha / 2, 1 - alpha / 2])
    return row_median(pc) / row_median(pb), float(lo), float(hi)


def ratio_interval(base: list[np.ndarray], cand: list[np.ndarray], confidence: float = CONFIDENCE,
                   resamples: int = RESAMPLES) -> tuple[float, float, float]:
    """(ratio of the rows' medians, lo, hi): the hull of the hierarchical bootstrap and, where both runs have
    two or more processes, Student's t interval on their process medians (the module's docstring)."""
    ratio, lo, hi = ratio_ci_bootstrap(base, cand, confidence, resamples)
    between = process_ratio_interval(base, cand, confidence)
    if between is not None:
        lo, hi = min(lo, between[0]), max(hi, between[1])
    return ratio, lo, hi


def host_sensitivity(medians: Sequence[float], host_loops: Sequence[float]) -> dict[str, float | int | None]:
    """How a row's process medians move with the host's speed measured beside them (each process's
    Python loop, harness/measure/calibrate.py): {"slope", "r", "n"} of the least-squares line of log(median) on
    log(host loop) over the row's n processes. slope is an elasticity: 1 where the row's time grows in
    proportion to the host's loop time (host-paced), 0 where the host does not move it (device-paced);
    r is Pearson's correlation of the two logs. Both None below three processes, where a host loop or
    median is not positive, or where the host's loop did not vary (nothing to regress on)."""
    pairs = [(m, h) for m, h in zip(medians, host_loops) if m is not None and h is not None]
    n = len(pairs)
    out: dict[str, float | int | None] = {"slope": None, "r": None, "n": n}
    if n < 3 or min(min(p) for p in pairs) <= 0:
        return out
    fit = loglog_fit([[(h, m) for m, h in pairs]])
    if fit is not None:
        out["slope"], _, _, out["r"] = fit
    return out


def loglog_fit(groups: Sequence[Sequence[tuple[float, float]]]) -> tuple[float, float, int, float] | None:
    """The least-squares slope of log y on log x over groups of positive (x, y) pairs, each group centred
    on its own means (a level that differs between groups, e.g. two runs, is not a slope): (slope, its
    standard error, residual degrees of freedom, Pearson r of the centred logs); None where x did not vary."""
    logs = [np.log(np.asarray(g, dtype=np.float64)) for g in groups if len(g)]
    x = np.concatenate([g[:, 0] - g[:, 0].mean() for g in logs])
    y = np.concatenate([g[:, 1] - g[:, 1].mean() for g in logs])
    scale = max(1.0, max(float(np.abs(g[:, 0]).max()) for g in logs))
    sxx, syy = float(x @ x), float(y @ y)
    if sxx <= x.size * (1e-12 * scale) ** 2:
        return None
    slope = float(x @ y) / sxx
    df = x.size - len(logs) - 1
    resid = y - slope * x
    se = math.sqrt(float(resid @ resid) / df / sxx) if df > 0 else math.inf
    return slope, se, df, (float(x @ y) / math.sqrt(sxx * syy) if syy > 0 else 0.0)
