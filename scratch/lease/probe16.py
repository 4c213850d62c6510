"""Lease 16's probe (issue 51): does the Python loop that every request times say how fast a host-paced row
will run? Lease 14 saw a pair's two requests read CuPy `eager` 1.5x apart after equal loops
(results/journal.md, 2026-12-07, midday).

PROCS processes of FRAMEWORK run side by side for SECONDS. Each, over and over, times a fixed Python loop
(harness/measure/calibrate.py python_loop_s(3), as a request times it when it starts) and then LAUNCHES
back-to-back launches of a one-element kernel, synchronized once (a host-paced row's shape). Each sample is
one JSON line: process, time, loop seconds, launch seconds per call. Read with --read FILE: per process,
the two gauges' medians and 10th-90th percentiles, Spearman's rho between them over time within a process,
and between two processes' launch speeds in the same second (one host-wide state, or one per process).
framework "numpy" stands in on a machine without a GPU (a tiny numpy op for the launch).
usage: PYTHONPATH=. python3 scratch/lease/probe16.py FRAMEWORK PROCS SECONDS [LAUNCHES] > out.jsonl
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


def worker(fw: str, i: int, start: float, seconds: float, launches: int, q) -> None:
    from harness.measure.calibrate import python_loop_s

    call, sync = _launcher(fw)
    for _ in range(launches):  # the first call and a warm-up
        call()
    sync()
    time.sleep(max(0.0, start - time.time()))  # every process samples the same stretch of time
    while time.time() < start + seconds:
        at = time.time()
        loop = python_loop_s(3)
        t0 = time.perf_counter()
        for _ in range(launches):
            call()
        sync()
        q.put({"proc": i, "at": at, "loop_s": loop, "launch_s": (time.perf_counter() - t0) / launches})
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
              f"{np.percentile(launch, 90):.2f}); rho loop ~ launch over time {rho:+.2f}")
        for r in rs:
            seconds.setdefault(int(r["at"]), {}).setdefault(i, []).append(r["launch_s"])
    procs = sorted(by)
    for a, b in zip(procs, procs[1:]):
        both = [(np.median(v[a]), np.median(v[b])) for v in seconds.values() if a in v and b in v]
        if len(both) > 2:
            x, y = zip(*both)
            print(f"processes {a} and {b}: launch speeds in the same second, rho {stats.spearmanr(x, y).statistic:+.2f} "
                  f"over {len(both)} seconds; medians {1e6 * np.median(x):.2f} and {1e6 * np.median(y):.2f} us")


if __name__ == "__main__":
    if sys.argv[1] == "--read":
        read(sys.argv[2])
    else:
        run(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 200)
