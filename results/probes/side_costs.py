"""Probe: where each side of an interleaved regress spent its requests, and how its processes spread.

For a run whose sides time on other settings (docs/regress.md, TRIPTYCH_TIMING: e.g. the candidate without the
preset's 0.05 s of time-based warm-up), this says what the change of method costs or saves, next to the verdicts
the run printed. For any run, it is the table of results/journal.md's "where lease 19's pairs spent theirs".

Reads the two side files of interleaved runs (results/regress/<stamp>_interleaved*/, as pair_spread.py does) and
prints per side, in seconds over all its requests:
  1. the steps of its requests: timed repeats; the rest of the repeat loops (poisoning, later checks, the loop
     beside); first call and warm-up; the rest of `measure` (first checks); the rest of a row (its state, freeing);
     outside the rows (inputs read back, the host loop); per scenario too;
  2. its rows' spread between processes: the median over rows of the standard deviation of the log process medians;
  3. how much slower a process's first repeat was than its median from the eleventh repeat on (the warm-up's
     work left undone), the median over processes, per scenario;
  4. where the side traced a kernel clock (--clock kernel: JAX's), the seconds of its traces, part of "outside the
     rows" (kernel_s, counted once a request).
No GPU runs for it. Usage: python results/probes/side_costs.py results/regress/<stamp>_interleaved* [...]
"""
from __future__ import annotations

import collections
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from by_process import request_key  # noqa: E402
from pair_spread import processes, sides  # noqa: E402

STEPS = ("timed repeats", "rest of the repeat loops", "first call and warm-up", "rest of measure", "rest of a row",
         "outside the rows", "requests in all")


def steps(scn: dict) -> list[float]:
    """A scenario's requests' seconds by STEPS, from its timing_phase and its rows' summed timings."""
    tp = scn.get("timing_phase") or {}
    t = collections.Counter()
    for r in scn["rows"]:
        for k in ("loop_s", "repeats_s"):
            t[k] += (r.get("timing") or {}).get(k) or 0.0
    timed, warm, rows, wall = (tp.get(k) or 0.0 for k in ("timed_s", "warm_s", "rows_s", "wall_s"))
    return [timed, t["repeats_s"] - timed, warm, t["loop_s"] - warm - t["repeats_s"], rows - t["loop_s"],
            wall - rows, wall]


def spread(doc: dict) -> float:
    """The median over rows of the standard deviation of the rows' log process medians."""
    sds = [float(np.std(np.log([np.median(p) for p in ps]), ddof=1)) for scn in doc["scenarios"].values()
           for r in scn["rows"] if len(ps := [p for p in processes(r) if p.size and np.median(p) > 0]) >= 2]
    return float(np.median(sds)) if sds else float("nan")


def first_excess(scn: dict) -> float:
    """The median over processes of (first repeat / median of repeats 11 on) - 1."""
    x = [float(p[0] / np.median(p[10:]) - 1) for r in scn["rows"] for p in processes(r) if p.size > 10 and np.median(p[10:]) > 0]
    return float(np.median(x)) if x else float("nan")


def kernel_s(doc: dict) -> float | None:
    """The side's traced kernel clocks in seconds, once a request (its rows share its kernel_s); None where no
    process kept one."""
    seen: dict[tuple, float] = {}
    for scn in doc["scenarios"].values():
        for r in scn["rows"]:
            for i, p in enumerate((r.get("timing") or {}).get("processes") or []):
                if p.get("kernel_s") is not None:
                    seen[request_key(r, p, i)] = p["kernel_s"]
    return sum(seen.values()) if seen else None


def main(folders: list[str]) -> None:
    for folder in folders:
        print(f"# {folder}")
        for doc in sides(folder):
            side = (doc.get("interleaved") or {}).get("side", "?")
            env = (doc.get("interleaved") or {}).get("env") or {}
            print(f"\n## {side}{' · ' + ' '.join(f'{k}={v}' for k, v in env.items()) if env else ''}")
            names = list(doc["scenarios"])
            table = {n: steps(doc["scenarios"][n]) for n in names}
            print("| step | all | " + " | ".join(names) + " |")
            print("|---|---|" + "---|" * len(names))
            for i, step in enumerate(STEPS):
                print(f"| {step} | {sum(table[n][i] for n in names):.1f} | "
                      + " | ".join(f"{table[n][i]:.1f}" for n in names) + " |")
            print(f"\nspread between processes, median row: {100 * spread(doc):.2f}% (log sd)")
            print("first repeat's excess over repeats 11 on, median process: "
                  + ", ".join(f"{n} {100 * first_excess(doc['scenarios'][n]):+.1f}%" for n in names))
            if (k := kernel_s(doc)) is not None:
                print(f"traced kernel clock (kernel_s, part of outside the rows): {k:.1f} s")
        print()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(sys.argv[1:])
