"""Probe: does the host's loop before each repeat move the rows it precedes?

Reads interleaved runs whose candidate side alone timed the loop (`--candidate-env 'TRIPTYCH_TIMING={"host_beside":
true}'`, judged plain) and prints, per group of rows (a scenario, or a scenario's point), over every pair:
- the rows: how many, how many read higher with the loop, and the median row's change (each row's mean log ratio of
  the pairs' process medians, as regress judges it);
- the pairs: each pair's mean log ratio over the group's rows, and how many pairs read higher. The rows of one pair
  share its two processes, so they are not independent draws; the pairs are, which makes the pairs' sign test
  (binomial, two-sided) the one to read;
- the host: the share of the pair's two processes at the slower of the host's two speeds (host_loop_s, the loop at
  each point's start, on both sides alike), and the pairs' change where both met the host at one speed.
No GPU runs for it. Usage:
  python results/probes/loop_ab.py results/regress/<stamp>_interleaved_loop_ab* [...]
"""
from __future__ import annotations

import math
import os
import sys
from collections import defaultdict

import numpy as np
from scipy import stats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pair_spread import rows, sides  # noqa: E402


def group_of(doc: dict, key: tuple) -> str:
    scenario, point = key[0], key[1]
    points = doc["scenarios"][scenario].get("points") or []
    label = points[point].get("label") if point is not None and point < len(points) else None
    return f"{scenario} {label}" if label else scenario


def pct(x: float) -> str:
    return f"{100 * math.expm1(x):+.1f}%"


def main(folders: list[str]) -> None:
    for folder in folders:
        base, cand = sides(folder)
        rb, rc = rows(base), rows(cand)
        by_group: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = defaultdict(list)
        loops = [p["host_loop_s"] for r in (*rb.values(), *rc.values()) for p in r["timing"]["processes"]
                 if p.get("host_loop_s")]
        split = math.sqrt(float(np.quantile(loops, 0.1)) * float(np.quantile(loops, 0.9)))
        for key in sorted(set(rb) & set(rc), key=str):
            pb, pc = rb[key]["timing"]["processes"], rc[key]["timing"]["processes"]
            n = min(len(pb), len(pc))
            d = np.log([pc[k]["median"] / pb[k]["median"] for k in range(n)])
            lb, lc = (np.array([p.get("host_loop_s") or np.nan for p in ps[:n]]) for ps in (pb, pc))
            by_group[group_of(base, key)].append((d, lb, lc))
        print(f"{folder}: the host's two speeds split at a {1e3 * split:.1f} ms loop")
        print(f"  {'group':<24} {'rows':>4} {'higher':>6} {'median row':>10} | {'pairs':>5} {'higher':>6} {'sign p':>7}"
              f" {'mean pair':>9} | {'one speed':>9} {'mean':>7}")
        for group, ds in by_group.items():
            per_row = np.array([d.mean() for d, _, _ in ds])
            n = max(len(d) for d, _, _ in ds)  # pair k: the mean over the rows that reached it
            per_pair = np.array([np.mean([d[k] for d, _, _ in ds if len(d) > k]) for k in range(n)])
            # a pair met the host at one speed where both its processes' median loops fall on one side of the split
            lb = np.array([np.nanmedian([b[k] for d, b, _ in ds if len(d) > k]) for k in range(n)])
            lc = np.array([np.nanmedian([c[k] for d, _, c in ds if len(d) > k]) for k in range(n)])
            same = (lb > split) == (lc > split)
            up = int((per_pair > 0).sum())
            p = stats.binomtest(up, n).pvalue
            one = f"{int(same.sum()):>9} {pct(float(per_pair[same].mean())) if same.any() else '-':>7}"
            print(f"  {group:<24} {len(ds):>4} {int((per_row > 0).sum()):>6} {pct(float(np.median(per_row))):>10} | "
                  f"{n:>5} {up:>6} {p:>7.3f} {pct(float(per_pair.mean())):>9} | {one}")


if __name__ == "__main__":
    main(sys.argv[1:])
