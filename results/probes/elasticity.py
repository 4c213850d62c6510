"""How far a row's time follows the host, measured in the committed H200 runs: the bound that file
regress takes for a row whose own sensitivity it cannot fit (harness/regress/env.py ELASTICITY_MAX).

For every row of every committed H200 file whose processes recorded the host loop timed beside them
(timing.processes[].host_loop_s), each pair of the row's processes whose loops differ by more than
--min-move gives an elasticity log(median ratio) / log(loop ratio): how much of the host's change the
row showed. Printed per framework: pairs, median, 95th and 99th percentiles, largest.

    python results/probes/elasticity.py [--min-move 0.4] [results/*.json ...]
"""
from __future__ import annotations

import argparse
import glob
import itertools
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from harness.results.results import load  # noqa: E402


def elasticities(paths: list[str], min_move: float) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for path in paths:
        doc = load(path)
        if "H200" not in str((doc.get("environment") or {}).get("gpu")):
            continue
        for scn in doc["scenarios"].values():
            for row in scn.get("rows") or []:
                procs = [p for p in ((row.get("timing") or {}).get("processes") or [])
                         if p.get("host_loop_s") and p.get("median")]
                for a, b in itertools.combinations(procs, 2):
                    move = math.log(b["host_loop_s"] / a["host_loop_s"])
                    if abs(move) > math.log1p(min_move):
                        out.setdefault(row["framework"], []).append(math.log(b["median"] / a["median"]) / move)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--min-move", type=float, default=0.4, help="the loops of a pair differ by more than this")
    args = ap.parse_args()
    paths = args.files or sorted(glob.glob(str(Path(__file__).resolve().parents[2] / "results" / "*_full.json")))
    for fw, e in sorted(elasticities(paths, args.min_move).items()):
        q = np.quantile(e, [0.5, 0.95, 0.99])
        print(f"{fw:6s} pairs {len(e):4d}  median {q[0]:+.2f}  95th {q[1]:+.2f}  99th {q[2]:+.2f}  largest {max(e):+.2f}")


if __name__ == "__main__":
    main()
