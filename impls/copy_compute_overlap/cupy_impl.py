"""copy_compute_overlap in CuPy.

The batches sit in pinned host memory (cupyx.empty_pinned), so ndarray.set() is a cudaMemcpyAsync that
a copy engine runs while the SMs compute. `serial` queues every copy and step on the current stream,
where each waits for the one before. `overlapped` queues the copies on a copy stream and the steps on
a compute stream (both non_blocking: a plain cupy.cuda.Stream() would sync with the legacy default
stream), with two staging buffers and, per buffer, an event "loaded" (the step waits on it) and an
event "read" (the next copy into that buffer waits on it). Both side streams first wait on the main stream:
the buffers outlive a run, and its first two copies must not overwrite what the last run's steps read.
"""
from __future__ import annotations

import time

import cupy
import cupyx
import numpy as np

from harness.measure.metrics import emit
from harness.measure.timeline import span


def prepare(inputs, params, device):
    with device:
        x = inputs["x"]
        host = cupyx.empty_pinned(x.shape, dtype=x.dtype)  # page-locked: the copy engine reads it directly
        host[...] = x
        state = {"host": host, "w": cupy.asarray(inputs["w"]), "device": device,
                 "out": cupy.empty((x.shape[0], inputs["w"].shape[1]), dtype=x.dtype),
                 "bytes": host.nbytes,
                 # No record_stream in CuPy: buffers shared by two streams live here, for as long as the state.
                 "bufs": [cupy.empty(x.shape[1:], dtype=x.dtype) for _ in range(2)],
                 "streams": (cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True))}
        stage_times(state)
        return state


def poison(state):
    state["out"].fill(cupy.nan)  # queued on the main stream: the compute stream must wait for it


def step(x, w, out):
    cupy.mean(cupy.tanh(x @ w), axis=0, out=out)  # GEMM, tanh, mean: queued on the current stream


def stage_times(state):
    """Each stage alone (untimed by the harness): every copy back to back, then every step on a resident
    batch, on the current stream; wall clock to device-done, median of 3 after a warm-up."""
    host, w, out = state["host"], state["w"], state["out"]
    buf = state["bufs"][0]
    stages = {"copy": lambda: [buf.set(h) for h in host],
              "compute": lambda: [step(buf, w, o) for o in out]}
    for name, stage in stages.items():
        times = []
        for _ in range(4):
            t0 = time.perf_counter()
            stage()
            state["device"].synchronize()  # the host waits for the whole stage
            times.append(time.perf_counter() - t0)
        state[f"{name}_alone_s"] = float(np.median(times[1:]))


def report(state):
    emit("copy_alone_ms", state["copy_alone_s"] * 1e3)
    emit("compute_alone_ms", state["compute_alone_s"] * 1e3)
    emit("h2d_GBps", state["bytes"] / state["copy_alone_s"] / 1e9)


def run_serial(state):
    host, w, out = state["host"], state["w"], state["out"]
    buf = state["bufs"][0]
    for i, h in enumerate(host):
        with span("main", f"h2d {i}"):
            buf.set(h)  # cudaMemcpyAsync on the current stream, behind step i-1 (which read buf)
        with span("main", f"compute {i}"):
            step(buf, w, out[i])  # behind its copy, on the same stream: no overlap is possible
    report(state)
    return {"y": out}


def run_overlapped(state):
    host, w, out, bufs = state["host"], state["w"], state["out"], state["bufs"]
    copy_s, comp_s = state["streams"]
    main = cupy.cuda.get_current_stream()
    ready = main.record()  # no wait_stream in CuPy: an event on the main stream, waited for by both side streams
    comp_s.wait_event(ready)  # W and the poisoned output were written on the main stream
    copy_s.wait_event(ready)  # the last run's steps read the persistent buffers; main waited for them at its end
    loaded = [cupy.cuda.Event(disable_timing=True) for _ in range(2)]
    read = [cupy.cuda.Event(disable_timing=True) for _ in range(2)]
    for i, h in enumerate(host):
        b = i % 2
        with copy_s:
            if i >= 2:
                copy_s.wait_event(read[b])  # do not overwrite buffer b before step i-2 has read it
            with span("copy", f"h2d {i}"):
                bufs[b].set(h, stream=copy_s)  # a DMA on the copy stream: runs while the SMs compute
            loaded[b].record(copy_s)
        with comp_s:
            comp_s.wait_event(loaded[b])  # the GPU, not the host, waits for batch i to land
            with span("compute", f"compute {i}"):
                step(bufs[b], w, out[i])
            read[b].record(comp_s)
    main.wait_event(comp_s.record())  # a reader of y on the main stream sees every batch
    report(state)
    return {"y": out}
