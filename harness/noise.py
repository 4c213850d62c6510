"""How sure a median is: within one process (when to stop repeating) and between processes.

Most of a timing's variance on a GPU host is between processes (where the allocator and the pinned or
pageable pages landed, clocks, the host's state), not between the repeats of one process: pyperf
and asv run each benchmark in several processes for this reason. A row is therefore timed in two or
more worker processes, and its spread comes from a hierarchical bootstrap: resample the processes,
then the repeats within each chosen process, and take the pooled median.
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


def hierarchical_medians(procs: Sequence[np.ndarray], resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """Bootstrap medians of the pooled samples: each resample draws len(procs) processes with
    replacement, then each chosen process's repeats with replacement. With one process this is the
    plain bootstrap of its repeats."""
    rng = np.random.default_rng(seed)
    procs = [np.asarray(p, dtype=np.float64) for p in procs if len(p)]
    if not procs:
        raise ValueError("no samples")
    picks = np.sort(rng.integers(0, len(procs), (resamples, len(procs))), axis=1)
    combos, counts = np.unique(picks, axis=0, return_counts=True)
    out = []
    for combo, k in zip(combos, counts):  # vectorized over the resamples that drew the same processes
        parts = [procs[c][rng.integers(0, procs[c].size, (k, procs[c].size))] for c in combo]
        out.append(np.median(np.concatenate(parts, axis=1), axis=1))
    return rng.permutation(np.concatenate(out))


def rel_halfwidth(procs: Sequence[np.ndarray], confidence: float = CONFIDENCE, seed: int = 0) -> float:
    """Half the width of the hierarchical bootstrap interval of the pooled median, relative to it."""
    meds = hierarchical_medians(procs, seed=seed)
    med = float(np.median(np.concatenate([np.asarray(p, dtype=np.float64) for p in procs])))
    alpha = 1 - confidence
    lo, hi = np.quantile(meds, [alpha / 2, 1 - alpha / 2])
    return float((hi - lo) / 2 / med) if med > 0 else math.inf
