"""Probe: can JAX overlap a host-to-device copy with compute, and which idiom does it?

copy_compute_overlap's full size (32 batches of 2048 x 2048 float32 in pinned host memory, each reduced
by mean(tanh(x @ W)), W 2048 x 2560). Each way is timed wall-clock to the last result ready, median of
7 after 2 warm-ups, beside the copies alone and the steps alone:
  serial          one jitted program per batch: device_put inside jit, then the step
  overlapped      today's impl: device_put(batch i+1) queued after step i, the host waiting for step i-1
  ahead_numpy     every batch device_put from a numpy array first, then the steps (PJRT's own H2D path)
  ahead_pinned    every batch device_put from the pinned_host arrays first, then the steps (no host wait)
  one_program     one jit over all batches, device_put to device memory inside it: XLA schedules the copies
  interleaved     device_put(batch i+1) queued right after step i, no host wait
  depth2, depth3  device_put(batch i+k) queued right after step i, no host wait: k + 1 batches alive
Then each way runs once under jax.profiler, and the trace's GPU plane says on which streams the copies and
the kernels ran and how long copies and kernels overlapped in time.
Usage: python3 results/probes/jax_overlap.py [out.json] [trace_dir]
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np


def main() -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    dev = jax.devices()[0]
    n, r, d, k = 32, 2048, 2048, 2560
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((n, r, d), dtype=np.float32)
    w = jax.device_put(rng.standard_normal((d, k), dtype=np.float32) / np.float32(np.sqrt(d)), dev)
    pinned, dmem = (SingleDeviceSharding(dev, memory_kind=m) for m in ("pinned_host", "device"))
    host = [jax.device_put(b, pinned) for b in xs]
    jax.block_until_ready(host)

    @jax.jit
    def step(x, w):
        return jnp.mean(jnp.tanh(jnp.matmul(x, w, precision=jax.lax.Precision.HIGHEST)), axis=0)

    copy_then_step = jax.jit(lambda h, w: step(jax.device_put(h, dmem), w))

    @jax.jit
    def one_program(hs, w):
        return [step(jax.device_put(h, dmem), w) for h in hs]

    x0 = jax.device_put(host[0], dmem)

    def overlapped():
        nxt, ys = jax.device_put(host[0], dmem), []
        for i in range(n):
            ys.append(step(nxt, w))
            if i + 1 < n:
                if i >= 1:
                    ys[i - 1].block_until_ready()
                nxt = jax.device_put(host[i + 1], dmem)
        return ys

    def ahead(src):
        def run():
            dev_batches = [jax.device_put(b, dmem) for b in src]
            return [step(b, w) for b in dev_batches]
        return run

    def interleaved():
        nxt, ys = jax.device_put(host[0], dmem), []
        for i in range(n):
            ys.append(step(nxt, w))
            if i + 1 < n:
                nxt = jax.device_put(host[i + 1], dmem)
        return ys

    def depth(k):
        def run():  # copies k batches ahead of the step; only Python references bound the batches alive
            ahead, ys = [jax.device_put(h, dmem) for h in host[:k]], []
            for i in range(n):
                ys.append(step(ahead.pop(0), w))
                if i + k < n:
                    ahead.append(jax.device_put(host[i + k], dmem))  # its copy waits for step i, not step i + 1
            return ys
        return run

    ways = {
        "copy_alone": lambda: [jax.device_put(h, dmem) for h in host],
        "copy_alone_numpy": lambda: [jax.device_put(b, dmem) for b in xs],
        "compute_alone": lambda: [step(x0, w) for _ in host],
        "serial": lambda: [copy_then_step(h, w) for h in host],
        "overlapped": overlapped,
        "ahead_numpy": ahead(xs),
        "ahead_pinned": ahead(host),
        "one_program": lambda: one_program(host, w),
        "interleaved": interleaved,
        "depth2": depth(2),
        "depth3": depth(3),
    }
    out = {"jax": jax.__version__, "device": str(dev), "ms": {}}
    for name, fn in ways.items():
        times = []
        for i in range(9):
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            times.append(time.perf_counter() - t0)
        out["ms"][name] = round(float(np.median(times[2:])) * 1e3, 3)
        print(f"{name:18s} {out['ms'][name]:9.3f} ms", flush=True)
    hlo = one_program.lower(host, w).compile().as_text()
    out["one_program_async_copies"] = hlo.count("copy-start")
    out["one_program_hlo_ops"] = sorted({ln.split("=")[1].split("(")[0].strip().split(" ")[-1]
                                          for ln in hlo.splitlines() if " = " in ln and "copy" in ln})[:20]
    print("one_program copy-start ops:", out["one_program_async_copies"], out["one_program_hlo_ops"])
    trace_dir = sys.argv[2] if len(sys.argv) > 2 else "/tmp/jax_overlap_trace"
    out["streams"] = {}
    for name in ("serial", "overlapped", "ahead_pinned", "interleaved", "one_program", "depth2", "depth3"):
        d = f"{trace_dir}/{name}"
        with jax.profiler.trace(d):
            jax.block_until_ready(ways[name]())
        out["streams"][name] = streams(d)
        print(name, json.dumps(out["streams"][name]), flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f, indent=1)


def streams(trace_dir: str) -> dict:
    """Per GPU stream of the trace: events, copy and kernel busy ms; and the ms during which a copy on one
    stream ran while a kernel ran on another."""
    import glob

    from jax.profiler import ProfileData

    path = sorted(glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True))[-1]
    data = ProfileData.from_file(path)
    gpu = [p for p in data.planes if p.name.startswith("/device:GPU")]
    res, copies, kernels = {}, [], []
    for plane in gpu:
        for line in plane.lines:
            evs = list(line.events)
            is_copy = [("memcpy" in e.name.lower() or "copy" in e.name.lower()) for e in evs]
            c = [(e.start_ns, e.end_ns) for e, k in zip(evs, is_copy) if k]
            kk = [(e.start_ns, e.end_ns) for e, k in zip(evs, is_copy) if not k]
            copies += [(line.name, a, b) for a, b in c]
            kernels += [(line.name, a, b) for a, b in kk]
            res[f"{plane.name}|{line.name}"] = {"events": len(evs), "copies": len(c),
                                               "copy_ms": round(sum(b - a for a, b in c) / 1e6, 3),
                                               "kernel_ms": round(sum(b - a for a, b in kk) / 1e6, 3),
                                               "names": sorted({e.name[:40] for e in evs})[:6]}
    both = 0
    for ln, a, b in copies:
        for lk, x, y in kernels:
            if lk != ln:
                both += max(0, min(b, y) - max(a, x))
    res["copy_kernel_overlap_ms"] = round(both / 1e6, 3)
    return res


if __name__ == "__main__":
    main()
