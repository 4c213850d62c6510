"""Probe: can JAX overlap a host-to-device copy with compute, and which idiom does it?

copy_compute_overlap's full size (32 batches of 2048 x 2048 float32 in pinned host memory, each reduced
by mean(tanh(x @ W)), W 2048 x 2560). Each way is timed wall-clock to the last result ready, median of
7 after 2 warm-ups, beside the copies alone and the steps alone:
  serial          one jitted program per batch: device_put inside jit, then the step
  overlapped      today's impl: device_put(batch i+1) queued after step i, the host waiting for step i-1
  ahead_numpy     every batch device_put from a numpy array first, then the steps (PJRT's own H2D path)
  ahead_pinned    every batch device_put from the pinned_host arrays first, then the steps (no host wait)
  one_program     one jit over all batches, device_put to device memory inside it: XLA schedules the copies
Usage: python3 docs/probes/jax_overlap.py [out.json]
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

    ways = {
        "copy_alone": lambda: [jax.device_put(h, dmem) for h in host],
        "copy_alone_numpy": lambda: [jax.device_put(b, dmem) for b in xs],
        "compute_alone": lambda: [step(x0, w) for _ in host],
        "serial": lambda: [copy_then_step(h, w) for h in host],
        "overlapped": overlapped,
        "ahead_numpy": ahead(xs),
        "ahead_pinned": ahead(host),
        "one_program": lambda: one_program(host, w),
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
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
