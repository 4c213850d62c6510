"""Probe: what each process of a compare run's rows cost, by its place in the row (first, second, ...).

Issue 51 asks for four processes a row in a six-minute default run. A row's first process does work its later
ones do not (the sync census, timelines, the first checks of outputs no other process judged; the first two the
JAX kernel clock), so what a later process costs, not an average, decides how many fit. This prints, per
process index and in all, in seconds over the run: the requests in the worker (served_s, counted once a
request), of them the traced kernel clock (kernel_s, JAX's; "-" where the file kept none, as older files did), the rows' whole wall time (phase_s), their measure() (loop_s), of that the first call and warm-up
(warm_s) and the checks (check_s), and the timed repeats (timed_s); and per scenario each index's requests.
loop_s, warm_s and check_s per process exist in files from 76df4e4 on; older files print "-" there.
No GPU runs for it. Usage: python results/probes/by_process.py results/<stamp>_<gpu>_<size>.json [...]
"""
from __future__ import annotations

import collections
import json
import sys

FIELDS = ("served_s", "kernel_s", "phase_s", "loop_s", "warm_s", "check_s", "timed_s")
PER_REQUEST = ("served_s", "kernel_s")  # a request's, kept on each of its rows: counted once a request


def request_key(r: dict, p: dict, i: int) -> tuple:
    """One request's key for its rows' processes: they share its served_s and its host loop's time stamp (the key
    harness/workers/processes.py phase uses); i, the process's place, where a file kept no stamp."""
    return r["framework"], json.dumps(r.get("params"), sort_keys=True), p.get("host_loop_at", i), p.get("served_s")


def by_index(scn: dict) -> dict[int, dict[str, float | None]]:
    """{process index: {field: seconds over the scenario's rows}}; served_s once per request (its rows share it),
    a field None where a process of that index lacks it."""
    out: dict[int, dict[str, float | None]] = collections.defaultdict(lambda: dict.fromkeys(FIELDS, 0.0))
    seen: set[tuple] = set()
    for r in scn["rows"]:
        for i, p in enumerate((r.get("timing") or {}).get("processes") or []):
            got = out[i]
            key = request_key(r, p, i)
            first = key not in seen
            seen.add(key)
            for f in FIELDS:
                if got[f] is None:
                    continue
                if f == "kernel_s":
                    got[f] += (p.get(f) or 0.0) if first else 0.0
                elif p.get(f) is None:
                    got[f] = None
                elif f not in PER_REQUEST or first:
                    got[f] += p[f]
    return out


def main(paths: list[str]) -> None:
    for path in paths:
        doc = json.load(open(path))
        print(f"# {path}")
        if "interleaved" in doc:  # a side's process k is pair k: one request can stand at other places in other rows
            print("an interleaved regress side file: read it with side_costs.py\n")
            continue
        total: dict[int, dict[str, float | None]] = collections.defaultdict(lambda: dict.fromkeys(FIELDS, 0.0))
        per_scn = {}
        for name, scn in doc["scenarios"].items():
            per_scn[name] = idx = by_index(scn)
            for i, got in idx.items():
                for f in FIELDS:
                    t = total[i][f]
                    total[i][f] = None if t is None or got[f] is None else t + got[f]
        if not any("kernel_s" in p for scn in doc["scenarios"].values() for r in scn["rows"]
                   for p in (r.get("timing") or {}).get("processes") or []):  # kept from some tree on; not before
            for got in total.values():
                got["kernel_s"] = None
        n = max(total, default=-1) + 1
        if not n:
            print("no row of it was timed in processes\n")
            continue
        print("| process | " + " | ".join(FIELDS) + " |\n|---|" + "---|" * len(FIELDS))
        for i in sorted(total):
            print(f"| {i + 1} | " + " | ".join("-" if v is None else f"{v:.1f}" for v in total[i].values()) + " |")
        print("\nserved_s by scenario and process:\n\n| scenario | " + " | ".join(str(i + 1) for i in range(n))
              + " |\n|---|" + "---|" * n)
        for name, idx in per_scn.items():
            print(f"| {name} | " + " | ".join(f"{idx[i]['served_s']:.1f}" if i in idx and idx[i]['served_s'] is not None
                                             else "-" for i in range(n)) + " |")
        print()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    main(sys.argv[1:])
