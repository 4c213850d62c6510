"""copy_compute_overlap in PyTorch.

The batches sit in pinned host memory, so a non_blocking copy_ is a DMA that a copy engine runs while
the SMs compute. `serial` queues every copy and step on the current stream, where each waits for the
one before. `overlapped` queues the copies on a copy stream and the steps on a compute stream, with two
staging buffers and, per buffer, an event "loaded" (the step waits on it) and an event "read" (the next
copy into that buffer waits on it). On the CPU nothing is pinned and there are no streams: only
`serial` runs there, each copy a memcpy inside the call.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from harness.measure.metrics import emit
from harness.measure.timeline import span


def prepare(inputs, params, device):
    gpu = device.type == "cuda"
    x = torch.from_numpy(inputs["x"])
    host = torch.empty(x.shape, dtype=x.dtype, pin_memory=gpu)  # page-locked: the copy engine reads it directly
    host.copy_(x)
    state = {"host": host, "w": torch.from_numpy(inputs["w"]).to(device), "gpu": gpu, "device": device,
             "out": torch.empty((x.shape[0], inputs["w"].shape[1]), dtype=x.dtype, device=device),
             "bytes": host.nbytes,
             "streams": (torch.cuda.Stream(device), torch.cuda.Stream(device)) if gpu else None}
    stage_times(state)
    return state


def poison(state):
    state["out"].fill_(float("nan"))  # queued on the main stream: the compute stream must wait for it


def step(x, w, out):
    torch.mean(torch.tanh(x @ w), dim=0, out=out)  # GEMM, tanh, mean: queued on the current stream


def stage_times(state):
    """Each stage alone (untimed by the harness): every copy back to back, then every step on a resident
    batch, on the current stream; wall clock to device-done, median of 3 after a warm-up."""
    host, w, out = state["host"], state["w"], state["out"]
    buf = torch.empty(host.shape[1:], dtype=host.dtype, device=state["device"])
    stages = {"copy": lambda: [buf.copy_(h, non_blocking=True) for h in host],
              "compute": lambda: [step(buf, w, o) for o in out]}
    for name, stage in stages.items():
        times = []
        for _ in range(4):
            t0 = time.perf_counter()
            stage()
            if state["gpu"]:
                torch.cuda.synchronize()  # the host waits for the whole stage
            times.append(time.perf_counter() - t0)
        state[f"{name}_alone_s"] = float(np.median(times[1:]))


def report(state):
    emit("copy_alone_ms", state["copy_alone_s"] * 1e3)
    emit("compute_alone_ms", state["compute_alone_s"] * 1e3)
    emit("h2d_GBps", state["bytes"] / state["copy_alone_s"] / 1e9)


def run_serial(state):
    host, w, out = state["host"], state["w"], state["out"]
    buf = torch.empty(host.shape[1:], dtype=host.dtype, device=state["device"])
    for i, h in enumerate(host):
        with span("main", f"h2d {i}"):
            buf.copy_(h, non_blocking=True)  # a DMA on the current stream, behind step i-1 (which read buf)
        with span("main", f"compute {i}"):
            step(buf, w, out[i])  # behind its copy, on the same stream: no overlap is possible
    report(state)
    return {"y": out}


def run_overlapped(state):
    host, w, out = state["host"], state["w"], state["out"]
    copy_s, comp_s = state["streams"]
    main = torch.cuda.current_stream()
    comp_s.wait_stream(main)  # W and the poisoned output were written on the main stream
    with torch.cuda.stream(copy_s):
        bufs = [torch.empty(host.shape[1:], dtype=host.dtype, device=state["device"]) for _ in range(2)]
    loaded = [torch.cuda.Event(), torch.cuda.Event()]
    read = [torch.cuda.Event(), torch.cuda.Event()]
    for i, h in enumerate(host):
        b = i % 2
        with torch.cuda.stream(copy_s):
            if i >= 2:
                copy_s.wait_event(read[b])  # do not overwrite buffer b before step i-2 has read it
            with span("copy", f"h2d {i}"):
                bufs[b].copy_(h, non_blocking=True)  # a DMA on the copy stream: runs while the SMs compute
            loaded[b].record(copy_s)
        with torch.cuda.stream(comp_s):
            comp_s.wait_event(loaded[b])  # the GPU, not the host, waits for batch i to land
            with span("compute", f"compute {i}"):
                step(bufs[b], w, out[i])
            read[b].record(comp_s)
    for buf in bufs:
        buf.record_stream(comp_s)  # made on the copy stream, read on the compute stream: no reuse before it is done
    main.wait_stream(comp_s)  # a reader of y on the main stream sees every batch
    report(state)
    return {"y": out}
