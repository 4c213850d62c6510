"""How long does a vCPU stay fast or slow? Back-to-back ~0.6 ms loops, pinned to one CPU, then unpinned."""
import os, sys, time, json
import numpy as np
def loop(n=20000):
    t = time.perf_counter(); s = 0
    for i in range(n): s += i
    return time.perf_counter() - t
res = {}
allc = sorted(os.sched_getaffinity(0))
for mode in (f"pinned{allc[0]}", f"pinned{allc[-1]}", "free"):
    if mode.startswith("pinned"): os.sched_setaffinity(0, {int(mode[6:])})
    else: os.sched_setaffinity(0, set(allc))
    ts, ds = [], []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 3.0:
        ts.append(time.perf_counter() - t0); ds.append(loop())
    d = np.array(ds) * 1e3; thr = (np.quantile(d, .1) + np.quantile(d, .9)) / 2
    slow = (d > thr).astype(float)
    lag_ms = {}
    dt = np.median(np.diff(ts)) * 1e3
    for lag in (1, 3, 10, 30, 100, 300, 1000):
        if lag < len(slow) - 1:
            a, b = slow[:-lag], slow[lag:]
            lag_ms[f"{lag * dt:.0f}ms"] = round(float(np.corrcoef(a, b)[0, 1]), 2) if a.std() and b.std() else None
    # run lengths of the slow/fast state
    changes = np.flatnonzero(np.diff(slow)) ; runs = np.diff(np.r_[0, changes + 1, len(slow)]) * dt
    res[mode] = {"n": len(d), "q10": round(float(np.quantile(d, .1)), 3), "q50": round(float(np.median(d)), 3), "q90": round(float(np.quantile(d, .9)), 3),
                 "p_slow": round(float(slow.mean()), 2), "autocorr": lag_ms, "median_run_ms": round(float(np.median(runs)), 1), "mean_run_ms": round(float(runs.mean()), 1)}
    print(mode, res[mode], flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "timescale.json"), "w"))
