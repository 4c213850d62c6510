"""Probe (no GPU: reads committed results): can a row's own host-return / device-done bound how far the
host's speed can move it between two runs?

Model: a host s times slower can lengthen a call by at most (s - 1) x host-return, since the device's own
work does not slow down: device-done' <= device-done + (s - 1) x host-return, and likewise for a faster host.
If this held, file regress could judge asynchronous rows (host-return << device-done) on a host that ran at
two speeds, instead of taking every row to follow the host. The test: the committed back-to-back full runs
of one commit on the H200 (no change of code), s the two speeds the host ran at in both runs (10th and 90th
percentiles of every host loop), every row that moved more than 10%, and whether its move lies within the
model's reach widened by 10% of noise.
Usage: python results/probes/host_reach.py (from the repository root)
"""
import json
import math
from collections import Counter

import numpy as np

PAIRS = [("20261203T181518Z", "20261203T182448Z"), ("20261203T201354Z", "20261203T202246Z"),
         ("20261204T141307Z", "20261204T142212Z")]


def rows(doc):
    return {(n, str(r.get("point", 0)), r["framework"], r["variant"]): r["timing"]
            for n, s in doc["scenarios"].items() for r in s["rows"]
            if (r.get("timing") or {}).get("host_return") and r["timing"].get("device_done")}


def loops(doc):
    during = [p["host_loop_s"] for s in doc["scenarios"].values() for r in s["rows"]
              for p in ((r.get("timing") or {}).get("processes") or []) if p.get("host_loop_s")]
    return during or [c["python_loop_s"] for per in (doc["environment"]["machine"].get("calibration") or {}).values()
                      for c in per if isinstance(c, dict) and c.get("python_loop_s")]


def main():
    moved, outside = Counter(), Counter()
    for a, b in PAIRS:
        A, B = (json.load(open(f"results/{x}_nvidia-h200_full.json")) for x in (a, b))
        fast, slow = np.quantile(loops(A) + loops(B), [0.1, 0.9])
        s = slow / fast
        ra, rb = rows(A), rows(B)
        for k in sorted(set(ra) & set(rb)):
            dd, hr = ra[k]["device_done"]["median"], ra[k]["host_return"]["median"]
            r = rb[k]["device_done"]["median"] / dd
            if abs(math.log(r)) <= math.log(1.1):
                continue
            moved[k[2]] += 1
            if not (1 - (1 - 1 / s) * hr / dd) * 0.9 <= r <= (1 + (s - 1) * hr / dd) * 1.1:
                outside[k[2]] += 1
                print(f"{a}->{b} (s {s:.2f}) {' '.join(k):60s} moved {r:.2f}x, host-return/device-done {hr / dd:.2f}")
    for fw in sorted(moved):
        print(f"{fw}: {moved[fw]} rows moved more than 10%, {outside[fw]} beyond the model's reach")


if __name__ == "__main__":
    main()
