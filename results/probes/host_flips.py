"""Probe: how fast does a lent host's Python speed change, per process or per CPU? (lease 19, 2026-12-07)

Two parts ran on the H100 machine, each pasted into the call as a script of its own (the bodies below, as run):
  flips  a fixed loop of 20,000 additions, timed back to back for 40 s, in one process and then in two forked
         ones side by side; each writes (monotonic time, seconds) rows to flips_<i>.npy
         -> results/logs/20261207T1530Z_probe_host_flips_{one_0,two_0,two_1}.npy, with /proc/stat once a second
            beside it (..._proc_stat.txt)
  sweep  the same loop for 1.2 s pinned to each of the 16 CPUs in turn, three rounds; p10, median, p90 per CPU
         -> results/logs/20261207T1535Z_probe_cpu_sweep.json
Read them here with `python results/probes/host_flips.py --read`. No GPU needed for that.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

LOGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "logs")


def loop(n: int = 20000) -> int:
    s = 0
    for i in range(n):
        s += i
    return s


def flips(out: str, dur: float, i: int) -> None:
    t_end = time.monotonic() + dur
    rows = []
    while time.monotonic() < t_end:
        t0 = time.perf_counter(); loop(); t1 = time.perf_counter()  # noqa: E702
        rows.append((time.monotonic(), t1 - t0))
    np.save(os.path.join(out, f"flips_{i}.npy"), np.array(rows))


def sweep(out: str) -> None:
    res = []
    for rnd in range(3):
        for cpu in range(16):
            os.sched_setaffinity(0, {cpu})
            t_end, d = time.monotonic() + 1.2, []
            while time.monotonic() < t_end:
                t0 = time.perf_counter(); loop(); d.append(time.perf_counter() - t0)  # noqa: E702
            d.sort()
            res.append((rnd, cpu, time.monotonic(), d[len(d) // 10], d[len(d) // 2], d[9 * len(d) // 10]))
    json.dump(res, open(out, "w"))


def read() -> None:
    """The tables of the journal's entry: per second, each process's median loop; how long a speed lasts; per CPU."""
    for name in ("one_0", "two_0", "two_1"):
        a = np.load(os.path.join(LOGS, f"20261207T1530Z_probe_host_flips_{name}.npy"))
        t, d = a[:, 0] - a[0, 0], a[:, 1] * 1e3
        fast = d < 0.85  # ms: the two speeds sit near 0.6 and 1.1 ms
        per_s = [np.median(d[(t >= k) & (t < k + 1)]) for k in range(int(t[-1]))]
        print(f"{name}: fast share {fast.mean():.2f}; median ms per second: {' '.join(f'{m:.2f}' for m in per_s)}")
        for w in (0.005, 0.02, 0.1, 0.5):
            b = np.floor(t / w).astype(int)
            n = np.bincount(b)
            share = (np.bincount(b, weights=fast) / np.maximum(n, 1))[n > 0]
            print(f"  windows of {w * 1e3:4.0f} ms: all fast {(share == 1).mean():.2f}, all slow {(share == 0).mean():.2f}, "
                  f"mixed {((share > 0) & (share < 1)).mean():.2f}")
    res = json.load(open(os.path.join(LOGS, "20261207T1535Z_probe_cpu_sweep.json")))
    for rnd in range(3):
        print(f"sweep round {rnd}, CPU: median ms: " + " ".join(f"{c}:{m * 1e3:.2f}" for r, c, _, _, m, _ in res if r == rnd))


if __name__ == "__main__":
    if sys.argv[1:] == ["--read"]:
        read()
    elif sys.argv[1] == "sweep":
        sweep(sys.argv[2])
    else:  # flips OUT DUR NPROC
        out, dur, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
        os.makedirs(out, exist_ok=True)
        pids = []
        for i in range(n):
            pid = os.fork()
            if pid == 0:
                flips(out, dur, i)
                os._exit(0)
            pids.append(pid)
        for p in pids:
            os.waitpid(p, 0)
