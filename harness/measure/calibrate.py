"""The host's speed, measured in the run: what tells a slower machine from slower code.

Each worker process measures, before its first timing request:
  tiny_op_s      one framework call on one element, synchronized (device_done median): the host's
                 cost of a call, which host-bound rows (launch overhead, small copies) move with;
  python_loop_s  a fixed pure-Python loop (best of a few): the interpreter's speed on this CPU.
Each process measures its own, so the spread between processes is the calibration's own noise.
Every timing request measures the Python loop again (harness/workers/handlers.py time_point), stamped with the
wall-clock time: host_series gathers them into the run's host speed over time, since on a shared cloud
host the speed drifts at the scale of minutes, not only between processes.
"""
from __future__ import annotations

import time
from typing import Any, TypedDict

from harness.measure.host_loop import python_loop_s
from harness.measure.timing import TimingConfig, measure

TINY = TimingConfig(warmup=20, min_repeats=200, max_repeats=200, min_time_s=0.0)


class Calibration(TypedDict, total=False):
    """One worker process's calibration (calibrate; the runner's, where the process did not answer: error), kept
    per framework in the environment's machine["calibration"]: seconds of a tiny device op and of the host's
    Python loop, and when, wall-clock seconds."""

    tiny_op_s: float
    python_loop_s: float
    at: float
    error: str


def calibrate(backend: Any) -> Calibration:
    """Inside a worker: the loaded backend's tiny-op cost and the Python loop, in seconds."""
    m = measure(backend.tiny_op(), backend, TINY)
    return {"tiny_op_s": m.device_done.median, "python_loop_s": python_loop_s(), "at": time.time()}


def host_series(machine: dict[str, Any], scenarios: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Python-loop measurement of the run, in time order: {"at": wall-clock seconds, "loop_s",
    "framework", "scenario" (None for the start-up calibration), "point"}; one per worker process at
    start-up and one per timing request (the rows of one request share theirs: counted once)."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for fw, per in (machine.get("calibration") or {}).items():
        for c in per:
            if isinstance(c, dict) and c.get("at") is not None and c.get("python_loop_s") is not None:
                out[(fw, None, None, c["at"])] = {"at": c["at"], "loop_s": c["python_loop_s"], "framework": fw,
                                                  "scenario": None, "point": None}
    for name, scn in scenarios.items():
        for r in scn.get("rows") or []:
            t = r.get("timing") if isinstance(r.get("timing"), dict) else {}
            for p in t.get("processes") or []:
                if p.get("host_loop_at") is not None and p.get("host_loop_s") is not None:
                    key = (r["framework"], name, r.get("point", 0), p["host_loop_at"])
                    out[key] = {"at": p["host_loop_at"], "loop_s": p["host_loop_s"], "framework": r["framework"],
                                "scenario": name, "point": r.get("point", 0)}
    return sorted(out.values(), key=lambda e: e["at"])
