"""Probe: the host's speed at each request of an interleaved regress, and what it does to a pair (results/journal.md,
2026-12-07, midday: leases 11 to 14).

Every request times a short Python loop as it starts (a process's `host_loop_s`). Reads interleaved runs' side
files (results/regress/<stamp>_interleaved*/, as results/probes/pair_spread.py does) and prints, per run:
  1. that loop's two speeds over both sides and each side's share of measurements at the slower, as the
     interleaved regress's summary gives them (harness/regress/env.py slow_share), then per framework its
     10th percentile and median over the run's requests;
  2. for each host-paced row (`eager`, `item_each_step`), the spread of the pairs' log ratios over all pairs,
     and over the pairs whose two requests' loops agree within MATCH (both sides at one host speed), with the
     mean change and its 95% interval;
  3. with --pairs, each `eager` pair's two medians (ms) beside their two loops (ms).
No GPU runs for it. Usage:
  python results/probes/host_state.py [--pairs] results/regress/<stamp>_interleaved_* [...]
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np
from scipy import stats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pair_spread import processes, rows, sides  # noqa: E402

from harness.regress.env import slow_share  # noqa: E402

HOST_PACED = ("eager", "item_each_step")
THRESHOLD = 0.10  # the regress's effect floor, which slow_share takes as the least gap between two speeds
MATCH = 0.15  # |log(loop ratio)| under this: one state


def loops(doc: dict) -> dict[str, list[float]]:
    """A side's request loops (s) per framework, one per process of every row (a request times all its rows)."""
    out: dict[str, dict[float, float]] = {}
    for r in rows(doc).values():
        for p in (r.get("timing") or {}).get("processes") or []:
            if p.get("host_loop_s"):
                out.setdefault(r["framework"], {})[p["host_loop_at"]] = p["host_loop_s"]
    return {fw: list(v.values()) for fw, v in out.items()}


def change(x: np.ndarray) -> str:
    if len(x) < 2:
        return f"{len(x)} pair(s)"
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    pct = [100 * (math.exp(v) - 1) for v in (x.mean(), lo, hi)]
    return f"{len(x)} pairs {pct[0]:+.1f}% [{pct[1]:+.1f}, {pct[2]:+.1f}] spread {x.std(ddof=1):.3f}"


def run(folder: str, show_pairs: bool) -> None:
    b, c = sides(folder)
    print(f"== {folder}")
    side = [loops(doc) for doc in (b, c)]
    speeds = slow_share(*([x for v in s.values() for x in v] for s in side), THRESHOLD)
    if speeds is not None:
        print(f"   host loop: two speeds, {speeds[0] * 1e3:.1f} and {speeds[1] * 1e3:.1f} ms; at the slower in "
              f"{speeds[2]:.0%} of the baseline's requests and {speeds[3]:.0%} of the candidate's")
    for fw in sorted(set(side[0]) | set(side[1])):
        a = np.asarray(side[0].get(fw, []) + side[1].get(fw, [])) * 1e3
        print(f"   host loop, {fw}: {len(a)} requests, 10th percentile {np.percentile(a, 10):.1f} ms, "
              f"median {np.median(a):.1f} ms")
    rb, rc = rows(b), rows(c)
    for key in sorted(set(rb) & set(rc), key=str):
        if key[3] not in HOST_PACED:
            continue
        pb, pc = processes(rb[key]), processes(rc[key])
        mb, mc = rb[key]["timing"]["processes"], rc[key]["timing"]["processes"]
        n = min(len(pb), len(pc))
        lr = np.array([math.log(np.median(pc[i]) / np.median(pb[i])) for i in range(n)])
        ll = np.array([math.log(mc[i]["host_loop_s"] / mb[i]["host_loop_s"]) for i in range(n)])
        print(f"   {key[0]} {key[2]} {key[3]}: all {change(lr)} | one host speed {change(lr[np.abs(ll) < MATCH])}")
        if show_pairs and key[3] == "eager":
            print("      " + " ".join(f"[{np.median(pb[i]) * 1e3:.2f}/{mb[i]['host_loop_s'] * 1e3:.1f} | "
                                      f"{np.median(pc[i]) * 1e3:.2f}/{mc[i]['host_loop_s'] * 1e3:.1f}]"
                                      for i in range(n)))


if __name__ == "__main__":
    args = sys.argv[1:]
    show = "--pairs" in args
    for f in [a for a in args if a != "--pairs"]:
        run(f, show)
