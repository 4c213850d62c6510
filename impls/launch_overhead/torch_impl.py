"""launch_overhead in PyTorch.

Each in-place op (mul_, tanh_) on a CUDA tensor is one kernel launch: a few µs of Python, dispatcher and
driver work on the host for a kernel that runs for a microsecond or two. A CUDA graph records the
launches once; CUDAGraph.replay() submits the whole chain with one cudaGraphLaunch on the current
stream. The CPU has no graphs: there `graph` is skipped and `eager` runs each op to completion.
"""
from __future__ import annotations

import time

import torch

from harness.measure.metrics import emit
from scenarios.launch_overhead import SCALE


def prepare(inputs, params, device):
    # Uploaded once, untimed; every run works on a copy, so the input stays as uploaded.
    state = {"x": torch.from_numpy(inputs["x"]).to(device), "ops": int(params["ops"]), "graph": None}
    if device.type == "cuda":
        state["graph"], state["out"] = capture(state)  # recorded once, like a compiled function
    return state


def chain(y, ops):
    for k in range(ops):
        if k % 2 == 0:
            y.mul_(SCALE)  # one kernel, queued on the current stream
        else:
            y.tanh_()  # one kernel
    return y


def capture(state):
    """Record copy + chain into a CUDA graph that reads the static input and writes one static output."""
    out = torch.empty_like(state["x"])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # the upload of x is ordered before the warm-up reads it
    with torch.cuda.stream(side):  # warm-up outside the capture: lazy initialization happens here
        chain(out.copy_(state["x"]), state["ops"])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # Captured on torch's capture stream; nothing runs now. thread_local: CUDA calls made by other threads
    # (another framework sharing the process) do not invalidate the capture.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        chain(out.copy_(state["x"]), state["ops"])  # in place: no allocation inside the graph
    return graph, out


def poison(state):
    if state["graph"] is not None:
        state["out"].fill_(float("nan"))  # current stream, before the replay: a replay that wrote nothing shows


def run_eager(state):
    t0 = time.perf_counter()
    y = chain(state["x"].clone(), state["ops"])  # one copy, then one launch per op
    emit("host_us_per_op", (time.perf_counter() - t0) / state["ops"] * 1e6)
    return {"x": y}


def run_graph(state):
    t0 = time.perf_counter()
    state["graph"].replay()  # one launch for the copy and every op, on the current stream
    emit("host_us_per_op", (time.perf_counter() - t0) / state["ops"] * 1e6)
    return {"x": state["out"]}  # the graph's static output: overwritten by the next replay
