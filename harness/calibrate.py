"""The host's speed, measured in the run: what tells a slower machine from slower code.

Each worker process measures, before its first timing request:
  tiny_op_s      one framework call on one element, synchronized (device_done median): the host's
                 cost of a call, which host-bound rows (launch overhead, small copies) move with;
  python_loop_s  a fixed pure-Python loop (best of a few): the interpreter's speed on this CPU.
Each process measures its own, so the spread between processes is the calibration's own noise.
"""
from __future__ import annotations

import time
from typing import Any

from harness.timing import TimingConfig, measure

LOOP = 200_000
TINY = TimingConfig(warmup=20, min_repeats=200, max_repeats=200, min_time_s=0.0)


def python_loop_s(repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        total = 0
        for i in range(LOOP):
            total += i
        best = min(best, time.perf_counter() - t0)
    return best


def calibrate(backend: Any) -> dict[str, float]:
    """Inside a worker: the loaded backend's tiny-op cost and the Python loop, in seconds."""
    m = measure(backend.tiny_op(), backend, TINY)
    return {"tiny_op_s": m.device_done.median, "python_loop_s": python_loop_s()}
