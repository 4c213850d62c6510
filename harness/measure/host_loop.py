"""The host's speed as one number: a fixed pure-Python loop's seconds, best of a few runs.

The interpreter's speed on the CPU a process runs on, which host-paced rows (launch loops, syncs, small copies)
move with. Its own module because the timer (harness/measure/timing.py, beside a row's repeats), the
calibration (harness/measure/calibrate.py, which imports the timer) and the workers all take it.
"""
from __future__ import annotations

import hashlib
import time
from pathlib import Path

LOOP = 200_000


def python_loop_s(repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        total = 0
        for i in range(LOOP):
            total += i
        best = min(best, time.perf_counter() - t0)
    return best


def identity() -> str:
    """This module's source, hashed: two trees whose workers time the same loop say the same (an interleaved regress
    that reads the loop as a covariate asks both sides; a tree that changed the loop would move it with the change)."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
