"""Probe: what a row-process's timing loop would cost under other timing settings, replayed from a run's repeats.

Issue 51's four processes in six minutes need a row-process's timing loop (first call, warm-up, repeats) at about
0.18 s, half of it timed; the full preset spent 0.40 s on the last default run (docs/design/processes.md, "The
floor"). This replays each process's own repeats, in order, through TimingConfig.stop under the settings given
(a $TRIPTYCH_TIMING-style JSON object over the full preset), and estimates per row-process:
  - the repeat loop: the repeats it would run times the row's loop seconds a repeat (repeats_s / n, timed and not);
  - the warm-up: the first call, then `warmup` calls and calls until warmup_s, each at the row's seconds a repeat;
  - the timed seconds: the replayed repeats' device_done sum;
  - the process median's own precision: median_rel_halfwidth of the repeats it would keep.
Run with the preset's own settings ('{}') first: the estimate should then land near the run's measured loop.
A process that would run more repeats than it recorded keeps those it has (an estimate low by that much: counted).
No GPU runs for it. Usage: python results/probes/loop_budget.py <result.json> ['{"min_time_s": 0.04}' ...]
"""
from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from harness.measure.noise import median_rel_halfwidth, split  # noqa: E402
from harness.measure.timing import PRESETS, overrides  # noqa: E402


def replay(x: np.ndarray, cfg, per_repeat: float, calls: int = 1) -> tuple[int, bool]:
    """(the repeats cfg.stop lets a process run over its recorded repeats x, whether it wanted more than x has);
    calls: a repeat's back-to-back calls, each of which x's per-call figure counts toward min_time_s."""
    total = 0.0
    for k in range(1, x.size + 1):
        total += float(x[k - 1]) * calls
        if cfg.stop(k, total, k * per_repeat, lambda k=k: median_rel_halfwidth(x[:k])):
            return k, False
    return x.size, True


def estimate(doc: dict, cfg) -> dict[str, float]:
    got = dict.fromkeys(("row_processes", "warm_s", "repeats_s", "timed_s", "short", "measured_s"), 0.0)
    widths = []
    for scn in doc["scenarios"].values():
        for r in scn["rows"]:
            t = r.get("timing") or {}
            procs = t.get("processes") or []
            done = (t.get("samples") or {}).get("device_done")
            if not procs or not done or t.get("repeats_s") is None or t.get("warm_s") is None:
                continue
            n = [p["n"] for p in procs]
            per_repeat = t["repeats_s"] / sum(n)  # the loop's seconds a repeat, timed and not
            warm_calls = cfg.warmup + (math.ceil(cfg.warmup_s / per_repeat) if cfg.warmup_s > 0 else 0)
            got["measured_s"] += t["warm_s"] + t["repeats_s"]
            for p, x in zip(procs, split(done, n)):
                # a repeat of several calls (Scenario.calls) counts each toward min_time_s: its timed_s says how many
                calls = max(1, round((p.get("timed_s") or 0.0) / float(np.sum(x)))) if np.sum(x) > 0 else 1
                k, short = replay(x, cfg, per_repeat, calls)
                got["row_processes"] += 1
                got["short"] += short
                got["warm_s"] += (p.get("first_call_s") or 0.0) + warm_calls * per_repeat
                got["repeats_s"] += k * per_repeat
                got["timed_s"] += float(np.sum(x[:k])) * calls
                widths.append(median_rel_halfwidth(x[:k]))
    finite = [w for w in widths if math.isfinite(w)]
    got["median_width"] = float(np.median(finite)) if finite else math.nan
    got["no_width"] = len(widths) - len(finite)
    return got


def main(path: str, settings: list[str]) -> None:
    doc = json.load(open(path))
    base = replace(PRESETS["full"], plan=())
    print(f"# {path}\n\n| settings | row-processes | warm-up s | repeat loop s | a row-process s | timed share "
          "| process median's half-width | wanted more repeats |\n|---|---|---|---|---|---|---|---|")
    for text in settings or ["{}"]:
        cfg = replace(base, **overrides(text, base)) if text.strip() != "{}" else base
        e = estimate(doc, cfg)
        n = e["row_processes"] or 1
        loop = e["warm_s"] + e["repeats_s"]
        print(f"| `{text}` | {int(e['row_processes'])} | {e['warm_s']:.1f} | {e['repeats_s']:.1f} | {loop / n:.3f} "
              f"| {e['timed_s'] / loop:.0%} | {e['median_width']:.2%} | {int(e['short'])} |")
    print(f"\nmeasured: warm-up and repeat loops {e['measured_s']:.1f} s, {e['measured_s'] / n:.3f} s a row-process")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    main(sys.argv[1], sys.argv[2:])
