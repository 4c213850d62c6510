"""Probe: what an interleaved regress run's spread between pairs is made of (results/probes/pair_spread.md).

Reads the two side files of interleaved runs (results/regress/<stamp>_interleaved/: the baseline's
<stamp>_<gpu>_<size>.json and the candidate's ...-1.json) and prints, over the rows both sides timed:
  1. the spread of the pairs' log ratios with each per-process statistic (median, mean, quartiles, min);
  2. the part of that spread a process's own repeats explain (the bootstrap error of its median);
  3. the repeats a later process would run under Kalibera and Jones' rule, on the repeats' variance and on
     their quartiles (harness/workers/processes.py), and the repeat loops each would leave;
  4. the repeat loops and the predicted spread at a cap on a process's repeats;
  5. how the host loop measured beside each request differs between two requests, by their distance in time;
  6. whether the warm-up (one call and at least 0.05 s) was done: a process's first repeat, and the median
     of its first three, against the median of its repeats from the eleventh on, per scenario.
Usage: python results/probes/pair_spread.py results/regress/<stamp>_interleaved [...]
"""
from __future__ import annotations

import collections
import glob
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from harness.workers.processes import repeats_where_the_variance_is  # noqa: E402

STATS = {"median": np.median, "mean": np.mean, "q25": lambda x: np.percentile(x, 25),
         "q10": lambda x: np.percentile(x, 10), "min": np.min}
CAPS = (10, 20, 30, 50, 100, 200)
rng = np.random.default_rng(20261205)


def processes(row: dict) -> list[np.ndarray]:
    """A row's device_done repeats split by process, in process (pair) order."""
    t = row.get("timing") or {}
    samples, out, i = (t.get("samples") or {}).get("device_done") or [], [], 0
    for p in t.get("processes") or []:
        out.append(np.asarray(samples[i:i + p["n"]], dtype=np.float64))
        i += p["n"]
    return out


def sides(folder: str) -> tuple[dict, dict]:
    files = sorted(glob.glob(os.path.join(folder, "*.json")), key=lambda f: f.endswith("-1.json"))
    if len(files) != 2:
        raise SystemExit(f"{folder}: expected a baseline and a candidate file, found {len(files)}")
    return tuple(json.load(open(f)) for f in files)  # type: ignore[return-value]


def rows(doc: dict) -> dict[tuple, dict]:
    return {(s, r.get("point"), r["framework"], r["variant"]): r
            for s, scn in doc["scenarios"].items() for r in scn["rows"] if (r.get("timing") or {}).get("processes")}


def median_error(x: np.ndarray) -> float:
    """The bootstrap standard error of log(median(x))."""
    if x.size < 3:
        return 0.0
    return float(np.std(np.log(np.median(rng.choice(x, size=(300, x.size)), axis=1))))


def kj_on_variances(procs: list, lo: int, hi: int) -> int | None:
    """Kalibera and Jones' rule as published: the repeats' sample variance, the processes' means."""
    xs = [(np.asarray(x), r, w) for x, r, w in procs if len(x) >= 2]
    if len(xs) < 2:
        return None
    t1 = float(np.mean([x.var(ddof=1) for x, _, _ in xs]))
    t2 = float(np.var([x.mean() for x, _, _ in xs], ddof=1)) - t1 / float(np.mean([x.size for x, _, _ in xs]))
    c1 = float(np.mean([r / x.size for x, r, _ in xs]))
    c2 = float(np.mean([max(w - r, 0.0) for _, r, w in xs]))
    return hi if t2 <= 0 or c1 <= 0 else max(lo, min(hi, math.ceil(math.sqrt(c2 * t1 / (c1 * t2)))))


def main(folders: list[str]) -> None:
    spread: dict[str, list[float]] = collections.defaultdict(list)
    by_group: dict[tuple, list[tuple[float, float, float]]] = collections.defaultdict(list)
    loops = collections.Counter()
    plans: dict[str, list[int]] = collections.defaultdict(list)
    capped: dict[int, list[float]] = collections.defaultdict(list)
    host: list[tuple[float, float]] = []
    first: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for folder in folders:
        base, cand = sides(folder)
        rb, rc = rows(base), rows(cand)
        for doc in (base, cand):  # 3: each side's processes plan on their own, as harness/run/interleave.py planned
            for row in rows(doc).values():
                t, ps = row["timing"], processes(row)
                per = (t.get("repeats_s") or 0.0) / max(sum(x.size for x in ps), 1)
                procs = [(list(x), per * x.size, p.get("phase_s") or 0.0) for x, p in zip(ps, t["processes"])]
                loops["now"] += per * sum(x.size for x in ps)
                for name, rule in (("variances", kj_on_variances), ("quartiles", repeats_where_the_variance_is)):
                    r = rule(procs, 5, 200)
                    if r is not None:
                        plans[name].append(r)
                        loops[name] += per * sum(min(x.size, r) for x in ps)
                for c in CAPS:
                    loops[c] += per * sum(min(x.size, c) for x in ps)
                host += [(p["host_loop_at"], p["host_loop_s"]) for p in t["processes"]
                         if p.get("host_loop_at") and p.get("host_loop_s")]
                first[row["scenario"]] += [(x[0] / np.median(x[10:]), np.median(x[:3]) / np.median(x[10:]))
                                           for x in ps if x.size >= 20]
        for key, b in rb.items():
            c = rc.get(key)
            if c is None:
                continue
            pb, pc = processes(b), processes(c)
            n = min(len(pb), len(pc))
            if n < 2:
                continue
            for name, f in STATS.items():
                spread[name].append(float(np.std([math.log(f(pc[k]) / f(pb[k])) for k in range(n)], ddof=1)))
            within = float(np.mean([median_error(pb[k]) ** 2 + median_error(pc[k]) ** 2 for k in range(n)]))
            observed = spread["median"][-1]
            by_group[(key[0], key[2])].append((observed, math.sqrt(within), float(np.mean([x.size for x in pb + pc]))))
            between = max(observed ** 2 - within, 0.0)
            repeats = float(np.mean([x.size for x in pb + pc]))
            for cap in CAPS:
                capped[cap].append(math.sqrt(between + within * max(repeats / cap, 1.0)))

    print(f"1. spread of the pairs' log ratios over {len(spread['median'])} rows, by the per-process statistic")
    for name, v in spread.items():
        print(f"   per-process {name:7s}: median row {100 * np.median(v):5.2f}%, q75 {100 * np.percentile(v, 75):5.2f}%")
    print("2. observed spread against a process's own repeats' share (bootstrap of its median)")
    obs = np.array([o for v in by_group.values() for o, _, _ in v])
    own = np.array([w for v in by_group.values() for _, w, _ in v])
    print(f"   all rows: observed {100 * np.median(obs):5.2f}%, repeats alone {100 * np.median(own):5.2f}% (medians)")
    for (scn, fw), v in sorted(by_group.items()):
        a = np.array(v)
        print(f"   {scn:20s} {fw:6s} rows {len(a):3d}  observed {100 * np.median(a[:, 0]):6.2f}%  "
              f"repeats alone {100 * np.median(a[:, 1]):5.2f}%  repeats a process {np.median(a[:, 2]):4.0f}")
    print(f"3. Kalibera and Jones' plan over {len(plans['quartiles'])} rows of a side (repeat loops now {loops['now']:.1f} s)")
    for name in ("variances", "quartiles"):
        p = np.array(plans[name])
        print(f"   on {name:9s}: median {np.median(p):4.0f} repeats, at the maximum (200) {100 * np.mean(p >= 200):3.0f}%, "
              f"repeat loops {loops[name]:.1f} s")
    print("4. a cap on a process's repeats: repeat loops, and the predicted median spread between pairs")
    for cap in CAPS:
        print(f"   cap {cap:4d}: {loops[cap]:6.1f} s   {100 * np.median(capped[cap]):5.2f}%")
    print(f"5. the host loop beside {len(set(host))} requests: log ratio of two requests by their distance in time")
    at = np.array([a for a, _ in sorted(set(host))])
    lg = np.log(np.array([s for _, s in sorted(set(host))]))
    dt = np.abs(at[:, None] - at[None, :])
    dl = lg[:, None] - lg[None, :]
    upper = np.triu(np.ones_like(dt, dtype=bool), 1)
    for lo, hi in ((0, 2), (2, 10), (10, 40), (40, 160), (160, math.inf)):
        m = upper & (dt >= lo) & (dt < hi)
        if m.any():
            print(f"   {lo:3.0f} to {hi:3.0f} s apart: {int(m.sum()):6d} pairs of requests, sd {100 * np.std(dl[m]):5.1f}%, "
                  f"|ratio| over 20% in {100 * np.mean(np.abs(dl[m]) > math.log(1.2)):3.0f}%")

    print("6. the first repeat (and the first three) against the median of the repeats from the eleventh on")
    for scn, v in sorted(first.items()):
        a = np.array(v)
        print(f"   {scn:20s} {len(a):4d} processes: first {np.median(a[:, 0]):.3f} (q90 {np.percentile(a[:, 0], 90):.3f}), "
              f"first three {np.median(a[:, 1]):.3f} (q90 {np.percentile(a[:, 1], 90):.3f})")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    main(sys.argv[1:])
