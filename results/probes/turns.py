"""Probe: what taking turns call by call did to an interleaved regress (results/journal.md, 2026-12-07, lease 10).

Reads interleaved runs' side files (results/regress/<stamp>_interleaved*/: the baseline's <stamp>_<gpu>_<size>.json
and the candidate's ...-1.json, as results/probes/pair_spread.py does) and prints:
  1. per run, the spread (standard deviation) of the pairs' log ratios of each process's median: the median over
     the rows with 4 pairs or more, and the host-paced rows (`eager`, `item_each_step`);
  2. per run, for the `eager` rows, each pair's two process medians (ms) and each process's 10th-90th percentile;
  3. per run, Spearman's rho between a process's Python loop at its request's start (host_loop_s) and its median
     of a host-paced row, over both sides' processes;
  4. with --absolute A B: the baseline side's median of the process medians of every row both runs hold, A against
     B, sorted by A (a turn's cost to a microsecond row).
No GPU runs for it. Usage:
  python results/probes/turns.py results/regress/20261207T003200Z_interleaved_control \\
      results/regress/20261207T034557Z_interleaved_control_turns
  python results/probes/turns.py --absolute results/regress/20261207T003200Z_interleaved_control \\
      results/regress/20261207T034557Z_interleaved_control_turns
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np
from scipy import stats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pair_spread import processes, rows, sides  # noqa: E402

HOST_PACED = ("eager", "item_each_step")


def _pairs(rb: dict, rc: dict, key: tuple) -> tuple[list[np.ndarray], list[np.ndarray]]:
    pb, pc = processes(rb[key]), processes(rc[key])
    n = min(len(pb), len(pc))
    return pb[:n], pc[:n]


def spread(folder: str) -> None:
    b, c = sides(folder)
    rb, rc = rows(b), rows(c)
    sds = {}
    for key in sorted(set(rb) & set(rc), key=str):
        pb, pc = _pairs(rb, rc, key)
        if len(pb) >= 4:
            sds[key] = float(np.std([math.log(np.median(y) / np.median(x)) for x, y in zip(pb, pc)], ddof=1))
    print(f"== {folder}: turns {b.get('interleaved', {}).get('turns', 'point')}, {len(sds)} rows with 4 pairs or more")
    print(f"   median spread over the rows {np.median(list(sds.values())):.3f}")
    for key, sd in sds.items():
        if key[3] in HOST_PACED:
            print(f"   {key[0]} {key[2]} {key[3]}: {sd:.3f}")
    for key in sorted(sds, key=str):
        if key[3] == "eager":
            print(f"   {key[2]} eager, per pair: baseline | candidate median ms (10th-90th percentile)")
            for i, (x, y) in enumerate(zip(*_pairs(rb, rc, key))):
                qx, qy = np.percentile(x, [10, 50, 90]) * 1e3, np.percentile(y, [10, 50, 90]) * 1e3
                print(f"     pair {i + 1}: {qx[1]:.2f} ({qx[0]:.2f}-{qx[2]:.2f}) | {qy[1]:.2f} ({qy[0]:.2f}-{qy[2]:.2f})")
    for key in sorted(sds, key=str):
        if key[3] in HOST_PACED:
            loops, medians = [], []
            for r in (rb[key], rc[key]):
                for p, meta in zip(processes(r), r["timing"]["processes"]):
                    if meta.get("host_loop_s"):
                        loops.append(meta["host_loop_s"])
                        medians.append(float(np.median(p)))
            rho = stats.spearmanr(loops, medians)
            print(f"   host loop ~ median, {key[2]} {key[3]}: rho {rho.statistic:+.2f} over {len(loops)} processes "
                  f"(p {rho.pvalue:.3f})")


def absolute(a: str, b: str) -> None:
    ra, rb = rows(sides(a)[0]), rows(sides(b)[0])
    print(f"baseline side, median of the process medians (us): {a} -> {b}")
    got = []
    for key in set(ra) & set(rb):
        x = float(np.median([np.median(p) for p in processes(ra[key])])) * 1e6
        y = float(np.median([np.median(p) for p in processes(rb[key])])) * 1e6
        got.append((x, y, key))
    for x, y, key in sorted(got):
        print(f"  {x:10.1f} -> {y:10.1f}  {100 * (y / x - 1):+7.1f}%  {key}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--absolute"] and len(sys.argv) == 4:
        absolute(sys.argv[2], sys.argv[3])
    elif len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        for folder in sys.argv[1:]:
            spread(folder)
    else:
        raise SystemExit(__doc__)
