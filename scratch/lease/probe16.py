"""Lease 16's probe (issue 51): does the Python loop that every request times say how fast a host-paced row
will run? Lease 14 saw a pair's two requests read CuPy `eager` 1.5x apart after equal loops
(results/journal.md, 2026-12-07, midday).

PROCS processes of FRAMEWORK run side by side for SECONDS. Each, over and over, times a fixed Python loop
(harness/measure/calibrate.py python_loop_s(3), as a request times it when it starts) and then LAUNCHES
back-to-back launches of a one-element kernel, synchronized once (a host-paced row's shape). Each sample is
one JSON line: process, time, loop seconds, launch seconds per call. Read with --read FILE: per process,
the two gauges' medians and 10th-90th percentiles, Spearman's rho between them over time within a process,
and between two processes' launch speeds in the same second (one host-wide state, or one per process).
framework "both": CuPy's launches and torch's, one after the other, in each process.
framework "numpy" stands in on a machine without a GPU (a tiny numpy op for the launch).
--serial: ROUNDS fresh processes one after another, each alone for SECONDS (across processes, not in time).
PROBE_CPU=N in the environment: every process on CPU N (is a process's speed its CPU's?).
usage: PYTHONPATH=. python3 scratch/lease/probe16.py FRAMEWORK PROCS SECONDS [LAUNCHES] > out.jsonl
       PYTHONPATH=. python3 scratch/lease/probe16.py --serial FRAMEWORK ROUNDS SECONDS [LAUNCHES] > out.jsonl
       python3 scratch/lease/probe16.py --read out.jsonl
"""
import json
import multiprocessing as mp
import sys
import time


def _launcher(fw: str):
    if fw == "cupy":
        import cupy as cp
        x = cp.zeros(1, dtype=cp.float32)
        return lambda: cp.add(x, 1, out=x), cp.cuda.Device().synchronize
    if fw == "torch":
        import torch
        x = torch.zeros(1, device="cuda")
        return lambda: x.add_(1), torch.cuda.synchronize
    import numpy as np
    x = np.zeros(1, dtype=np.float32)
    return lambda: np.add(x, 1, out=x), lambda: None


def _timed(call, sync, launches: int) -> float:
    t0 = time.perf_counter()
    for _ in range(launches):
        call()
    sync()
    return (time.perf_counter() - t0) / launches


def _cpu() -> int:  # the CPU this process last ran on: /proc/self/stat's 39th field
    return int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[36])


def worker(fw: str, i: int, start: float, seconds: float, launches: int, q) -> None:
    import os
    from harness.measure.calibrate import python_loop_s

    if os.environ.get("PROBE_CPU"):  # every process on this one CPU
        os.sched_setaffinity(0, {int(os.environ["PROBE_CPU"])})

    # "both": CuPy's launches, then torch's, in one process (does a slow process launch slowly in either?)
    second = _launcher("torch") if fw == "both" else None
    call, sync = _launcher("cupy" if fw == "both" else fw)
    for c, s in [(call, sync)] + ([second] if second else []):  # the first call and a warm-up
        _timed(c, s, launches)
    if start is None:  # serial: this process alone, from now
        start = time.time()
    time.sleep(max(0.0, start - time.time()))  # every process samples the same stretch of time
    while time.time() < start + seconds:
        at = time.time()
        loop = python_loop_s(3)
        got = {"proc": i, "at": at, "loop_s": loop, "launch_s": _timed(call, sync, launches), "cpu": _cpu()}
        if second:
            got["launch2_s"] = _timed(*second, launches)
        q.put(got)
    q.put(None)


def run(fw: str, procs: int, seconds: float, launches: int) -> None:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    start = time.time() + 20  # after the frameworks' imports and first calls
    ps = [ctx.Process(target=worker, args=(fw, i, start, seconds, launches, q)) for i in range(procs)]
    for p in ps:
        p.start()
    done = 0
    while done < procs:
        got = q.get()
        if got is None:
            done += 1
        else:
            print(json.dumps(got), flush=True)
    for p in ps:
        p.join()


def serial(fw: str, rounds: int, seconds: float, launches: int) -> None:
    """ROUNDS fresh processes one after another, each alone for SECONDS: does a process's own loop say how
    fast its launches are, across processes (what a request's start loop would have to predict)?"""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    for i in range(rounds):
        p = ctx.Process(target=worker, args=(fw, i, None, seconds, launches, q))
        p.start()
        while (got := q.get()) is not None:
            print(json.dumps(got), flush=True)
        p.join()


def read(path: str) -> None:
    import numpy as np
    from scipy import stats

    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    by = {}
    for r in rows:
        by.setdefault(r["proc"], []).append(r)
    seconds = {}
    for i, rs in sorted(by.items()):
        loop = np.array([r["loop_s"] for r in rs]) * 1e3
        launch = np.array([r["launch_s"] for r in rs]) * 1e6
        rho = stats.spearmanr(loop, launch).statistic if len(rs) > 2 else float("nan")
        print(f"process {i}: {len(rs)} samples; loop {np.median(loop):.2f} ms ({np.percentile(loop, 10):.2f}-"
              f"{np.percentile(loop, 90):.2f}); launch {np.median(launch):.2f} us ({np.percentile(launch, 10):.2f}-"
              f"{np.percentile(launch, 90):.2f}); rho loop ~ launch over time {rho:+.2f}; "
              f"CPUs {sorted({r.get('cpu') for r in rs})}")
        for r in rs:
            seconds.setdefault(int(r["at"]), {}).setdefault(i, []).append(r["launch_s"])
    procs = sorted(by)
    if len(procs) > 3:  # across processes: each process's median loop against its median launch
        loops = [np.median([r["loop_s"] for r in by[i]]) for i in procs]
        launch = [np.median([r["launch_s"] for r in by[i]]) for i in procs]
        print(f"across {len(procs)} processes: rho of median loop ~ median launch "
              f"{stats.spearmanr(loops, launch).statistic:+.2f}; loop {1e3 * min(loops):.2f}-{1e3 * max(loops):.2f} ms, "
              f"launch {1e6 * min(launch):.2f}-{1e6 * max(launch):.2f} us")
        if all("launch2_s" in r for i in procs for r in by[i]):
            other = [np.median([r["launch2_s"] for r in by[i]]) for i in procs]
            print(f"across {len(procs)} processes: rho of CuPy's median launch ~ torch's "
                  f"{stats.spearmanr(launch, other).statistic:+.2f}; torch {1e6 * min(other):.2f}-{1e6 * max(other):.2f} us; "
                  f"rho loop ~ torch's {stats.spearmanr(loops, other).statistic:+.2f}")
            for i in procs:
                print(f"  process {i}: loop {1e3 * loops[i]:.2f} ms, CuPy {1e6 * launch[i]:.2f} us, torch {1e6 * other[i]:.2f} us")
    for a, b in zip(procs, procs[1:]):
        both = [(np.median(v[a]), np.median(v[b])) for v in seconds.values() if a in v and b in v]
        if len(both) > 2:
            x, y = zip(*both)
            print(f"processes {a} and {b}: launch speeds in the same second, rho {stats.spearmanr(x, y).statistic:+.2f} "
                  f"over {len(both)} seconds; medians {1e6 * np.median(x):.2f} and {1e6 * np.median(y):.2f} us")


if __name__ == "__main__":
    if sys.argv[1] == "--read":
        read(sys.argv[2])
    elif sys.argv[1] == "--serial":
        serial(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]) if len(sys.argv) > 5 else 200)
    else:
        run(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 200)
