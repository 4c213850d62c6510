"""Probe: would the host's loop, taken as a covariate of each pair, narrow an interleaved regress's intervals?

A pair's log ratio d = log(candidate median / baseline median) moves with the host's speed when the two requests
met the host at different speeds. With x = log(candidate loop / baseline loop) for each pair, a regression
d = delta + theta x (analysis of covariance; CUPED is the same idea) estimates the change delta as if both sides
had met the host at one speed, at the price of one degree of freedom. It is unbiased only where the code under
test does not change the loop itself: an interleaved regress of two trees on one Python.

Reads interleaved runs' side files (results/regress/<stamp>_interleaved*/, as results/probes/pair_spread.py does)
and prints, per run and covariate (`host_loop_s`: the loop at the request's start, every file has it;
`row_loop_s`: the loop just before and after the row's repeats, runs until 70be9fa; `loops_median`: each process's
median of the short loops beside its repeats, timing.host_loops, runs since 310101f), the median 95%
half-width of the rows' change, plain (the regress's paired t test) and adjusted, how many rows narrowed, and
each host-paced row (`eager`, `item_each_step`) and each planted row (PLANTED) as plain -> adjusted. Then the
verdicts that regress's own judge_pairs gives its last look's pairs, plain and with --host-covariate
(harness/regress/regress.py covariate_test, on loops_median where the run has it, else row_loop_s), at the rate
and confidence split over --looks (the run's header says how many: 4 for --pairs 4 --max-pairs 10).
No GPU runs for it. Usage:
  python results/probes/host_covariate.py [--looks N] results/regress/<stamp>_interleaved_* [...]
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np
from scipy import stats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pair_spread import rows, sides  # noqa: E402

from harness.measure.noise import split  # noqa: E402
from harness.regress.regress import Paired, judge_pairs  # noqa: E402

COVARIATES = ("host_loop_s", "row_loop_s", "loops_median")
HOST_PACED = ("eager", "item_each_step")
PLANTED = {("launch_overhead", "cupy", "eager"), ("pinned_transfer", "torch", "h2d_pinned_non_blocking")}


def change(d: np.ndarray, x: np.ndarray | None) -> tuple[float, float]:
    """(the change's log, its 95% half-width): the mean of d, or the intercept of d on x."""
    n = len(d)
    if x is None:
        return float(np.mean(d)), float(stats.t.ppf(0.975, n - 1) * np.std(d, ddof=1) / math.sqrt(n))
    a = np.column_stack([np.ones(n), x])
    beta, *_ = np.linalg.lstsq(a, d, rcond=None)
    resid = d - a @ beta
    cov = resid @ resid / (n - 2) * np.linalg.inv(a.T @ a)
    return float(beta[0]), float(stats.t.ppf(0.975, n - 2) * math.sqrt(cov[0, 0]))


def pairs(rb: dict, rc: dict, covariate: str) -> tuple[np.ndarray, np.ndarray] | None:
    """Each pair's log ratio of process medians and of the covariate; None where a process lacks either."""
    pb, pc = (r["timing"]["processes"] for r in (rb, rc))
    n = min(len(pb), len(pc))
    if covariate == "loops_median":  # the median of the loops beside each process's repeats (since 310101f)
        if not (rb["timing"].get("host_loops") and rc["timing"].get("host_loops")):
            return None
        pb, pc = ([p | {covariate: x} for p, x in zip(ps, _loops(r, n))] for ps, r in ((pb, rb), (pc, rc)))
    got = [(b.get("median"), c.get("median"), b.get(covariate), c.get(covariate)) for b, c in zip(pb[:n], pc[:n])]
    if n < 4 or not all(v and v > 0 for g in got for v in g):
        return None
    g = np.asarray(got, dtype=np.float64)
    return np.log(g[:, 1] / g[:, 0]), np.log(g[:, 3] / g[:, 2])


def _loops(row: dict, n: int) -> list[float]:
    """A row's first n processes' covariates: each one's median of the loops beside its repeats (timing.host_loops),
    else its row_loop_s (the loop before and after its repeats, until 70be9fa); empty without either."""
    t = row["timing"]
    loops, counts = t.get("host_loops"), [p["n"] for p in t["processes"]]
    if loops and sum(counts) == len(loops):  # in files of 310101f-f0aafbb, a loop before and after each repeat
        return [float(np.median(p)) for p in split(loops, counts)][:n]
    got = [p.get("row_loop_s") for p in t["processes"][:n]]
    return got if all(got) else []


def verdicts(rb: dict, rc: dict, looks: int) -> None:
    """judge_pairs' verdicts on the rows' pairs, plain and with --host-covariate (covariate_test): the counts, and
    the rows called different by either."""
    def paired(covariate: bool) -> list[Paired]:
        out = []
        for key in sorted(set(rb) & set(rc), key=str):
            pb, pc = (r["timing"]["processes"] for r in (rb[key], rc[key]))
            n = min(len(pb), len(pc))
            if n < 2 or not all(p.get("median") for p in pb[:n] + pc[:n]):
                continue
            r = Paired(key[0], str(key[1]), key[2], key[3], [p["median"] for p in pb[:n]], [p["median"] for p in pc[:n]])
            r.base_loop, r.cand_loop = _loops(rb[key], n), _loops(rc[key], n)
            out.append(r)
        judge_pairs(out, 0.10, 1 - 0.05 / looks, 0.05 / looks, covariate)
        return out

    for covariate in (False, True):
        got = paired(covariate)
        counts = {v: sum(r.verdict == v for r in got) for v in ("different", "same", "unknown")}
        print(f"  judge_pairs {'with --host-covariate' if covariate else 'plain'}: {counts}; "
              f"{sum(r.theta is not None for r in got)} rows adjusted")
        for r in got:
            if r.verdict == "different" or (r.scenario, r.framework, r.variant) in PLANTED:
                print(f"    {r.verdict:<9} {r.scenario}/{r.label}/{r.framework}/{r.variant}: {100 * (r.ratio - 1):+.1f}% "
                      f"[{100 * (r.lo - 1):+.1f}%, {100 * (r.hi - 1):+.1f}%] q {r.q:.2g}, {r.pairs} pairs"
                      + (f", theta {r.theta:+.2f}" if r.theta is not None else ""))


def main(folders: list[str], looks: int = 1) -> None:
    for folder in folders:
        base, cand = sides(folder)
        rb, rc = rows(base), rows(cand)
        for covariate in COVARIATES:
            out = []
            for key in sorted(set(rb) & set(rc), key=str):
                got = pairs(rb[key], rc[key], covariate)
                if got is not None:
                    d, x = got
                    out.append((key, len(d), change(d, None), change(d, x)))
            if not out:
                continue
            plain, adjusted = (np.median([o[k][1] for o in out]) for k in (2, 3))
            print(f"{os.path.basename(folder.rstrip('/'))}, {covariate}: {len(out)} rows; median half-width "
                  f"{100 * plain:.1f}% plain, {100 * adjusted:.1f}% adjusted; narrower in {sum(o[3][1] < o[2][1] for o in out)}")
            for (s, point, fw, v), n, (m0, h0), (m1, h1) in out:
                if v in HOST_PACED or (s, fw, v) in PLANTED:
                    print(f"  {s}/{point}/{fw}/{v}, {n} pairs: {100 * math.expm1(m0):+.1f}% ±{100 * h0:.1f} -> "
                          f"{100 * math.expm1(m1):+.1f}% ±{100 * h1:.1f}")
        verdicts(rb, rc, looks)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="the host loop as a covariate of an interleaved run's pairs")
    ap.add_argument("--looks", type=int, default=1, help="the run's looks, which split its FDR and confidence")
    ap.add_argument("folders", nargs="+")
    a = ap.parse_args()
    main(a.folders, a.looks)
