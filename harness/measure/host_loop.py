"""The host's speed as one number: a fixed pure-Python loop's seconds.

The interpreter's speed on the CPU a process runs on, which host-paced rows (launch loops, syncs, small copies)
move with. python_loop_s is the long loop, best of a few runs (a request's start, the calibration); beside_s the
short one timed before each repeat (harness/measure/timing.py, TimingConfig.host_beside): a lent host's CPU
may run at two speeds about 1.8x apart that change within tens of milliseconds (docs/design/host_speed.md), too
fast for a loop a row or a process apart to tell which speed a repeat met. Its own module because
the timer, the calibration (harness/measure/calibrate.py, which imports the timer) and the workers all take it.
"""
from __future__ import annotations

import hashlib
import time
from pathlib import Path

LOOP = 200_000
BESIDE = 2_000  # about 60 us at the fast speed: short against a repeat of milliseconds, long against perf_counter


def python_loop_s(repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        total = 0
        for i in range(LOOP):
            total += i
        best = min(best, time.perf_counter() - t0)
    return best


def beside_s() -> float:
    """One run of the short loop: the host's speed at this moment."""
    t0 = time.perf_counter()
    total = 0
    for i in range(BESIDE):
        total += i
    return time.perf_counter() - t0


def identity() -> str:
    """This module's source, hashed: two trees whose workers time the same loop say the same (an interleaved regress
    that reads the loop as a covariate asks both sides; a tree that changed the loop would move it with the change)."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
