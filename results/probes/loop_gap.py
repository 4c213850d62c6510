"""Probe: why does the host's loop before each repeat lift a 4 KiB copy? (lease 25: +12-17% on both of its runs)

Two explanations predict different things. If the loop's own work (the interpreter's code and data in the CPU's
caches) slows the call after it, a wait of the same length that runs other code (spinning on perf_counter) or none
(sleep) lifts it less or not at all. If the idle time before the copy does (a device or a link idle that long wakes
slower), any wait of that length lifts it alike. Each framework's pinned 4 KiB host-to-device copy is timed as
the harness times a repeat (synchronize, then the clock around the call and its synchronize), after one of:
  none   nothing
  loop   the harness's own short loop (harness/measure/host_loop.py beside_s)
  spin   a spin on time.perf_counter for as long as the loop took
  sleep  time.sleep for as long as the loop took
The conditions take turns in blocks, in a new random order each round. Prints each condition's median copy in
microseconds per round, and the median over rounds against `none`. Writes JSON lines to the path given.
GPU only. Usage: python results/probes/loop_gap.py OUT.jsonl [ROUNDS] [REPEATS]
"""
from __future__ import annotations

import json
import random
import sys
import time

import numpy as np

sys.path.insert(0, ".")
from harness.measure.host_loop import beside_s, python_loop_s  # noqa: E402

CONDITIONS = ("none", "loop", "spin", "sleep")


def copies(fw: str):
    """(copy, synchronize) of a pinned 4 KiB host buffer to the device, for one framework."""
    if fw == "torch":
        import torch
        src = torch.ones(1024, dtype=torch.float32).pin_memory()
        return (lambda: src.to("cuda", non_blocking=True)), torch.cuda.synchronize
    import cupy
    import cupyx
    src = cupyx.empty_pinned((1024,), dtype=np.float32)
    src[:] = 1
    dst = cupy.empty((1024,), dtype=cupy.float32)
    return (lambda: dst.set(src, stream=cupy.cuda.get_current_stream())), cupy.cuda.Device().synchronize


def block(copy, sync, condition: str, gap: float, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        sync()
        if condition == "loop":
            beside_s()
        elif condition == "spin":
            t_end = time.perf_counter() + gap
            while time.perf_counter() < t_end:
                pass
        elif condition == "sleep":
            time.sleep(gap)
        t0 = time.perf_counter()
        copy()
        sync()
        out.append(time.perf_counter() - t0)
    return out


def main(path: str, rounds: int = 8, repeats: int = 300) -> None:
    rng = random.Random(1)
    with open(path, "w") as f:
        f.write(json.dumps({"python_loop_s": python_loop_s()}) + "\n")
        for fw in ("torch", "cupy"):
            copy, sync = copies(fw)
            block(copy, sync, "none", 0, 200)  # first calls, clocks up
            gap = float(np.median([beside_s() for _ in range(50)]))
            got: dict[str, list[float]] = {c: [] for c in CONDITIONS}
            for r in range(rounds):
                for c in rng.sample(CONDITIONS, len(CONDITIONS)):
                    x = block(copy, sync, c, gap, repeats)
                    got[c].append(float(np.median(x)))
                    f.write(json.dumps({"fw": fw, "round": r, "condition": c, "gap_s": gap, "samples": x}) + "\n")
            none = np.median(got["none"])
            print(f"{fw}: loop {1e6 * gap:.0f} us; " + "; ".join(
                f"{c} {1e6 * np.median(v):.2f} us ({100 * (np.median(v) / none - 1):+.1f}%, rounds "
                f"{' '.join(f'{1e6 * m:.1f}' for m in v)})" for c, v in got.items()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))
