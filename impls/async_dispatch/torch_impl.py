"""async_dispatch in PyTorch.

Every torch call on a CUDA tensor enqueues kernels on the current stream and returns; only an
explicit wait (torch.cuda.synchronize, Event.synchronize) or a read of the data blocks the host.
On the CPU, torch runs each op to completion before returning: there is nothing to overlap.
"""
from __future__ import annotations

import torch

from harness.measure.metrics import emit


def prepare(inputs, params, device):
    # Uploaded once, untimed; the chain reads x and w and never writes them, so runs can repeat.
    return {"x": torch.from_numpy(inputs["x"]).to(device), "w": torch.from_numpy(inputs["w"]).to(device),
            "steps": int(params["steps"]), "gpu": device.type == "cuda"}


def step(x, w):
    return torch.tanh(x @ w)  # two kernels (GEMM, tanh) queued on the current stream


def run_sync_each(state):
    x = state["x"]
    for _ in range(state["steps"]):
        x = step(x, state["w"])
        if state["gpu"]:
            # The host blocks until this step's result exists: an event recorded behind the step on the
            # current stream (the scope of JAX's block_until_ready on an array), not the whole device.
            torch.cuda.current_stream().record_event().synchronize()
    return {"x": x}


def run_async(state):
    x = state["x"]
    for _ in range(state["steps"]):
        x = step(x, state["w"])  # returns as soon as the kernels are queued
    return {"x": x}


def run_async_poll(state):
    out = run_async(state)
    iters = 0
    if state["gpu"]:
        done = torch.cuda.Event()  # recorded after the chain: completes when the chain has
        done.record()
        while not done.query():  # cudaEventQuery: never blocks
            iters += 1
    emit("cpu_iters_while_waiting", iters)
    return out
