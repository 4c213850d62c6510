"""device_creation in PyTorch.

torch.randn / torch.arange with device= make the data where the tensor lives: on a CUDA device a
kernel writes device memory (randn draws from the device's Philox generator) and nothing crosses
the link. Made on the CPU (torch's own CPU threads), the data then goes over with .to(device): a
copy from pageable memory, which the host waits for.
"""
from __future__ import annotations

import time

import torch

from harness.measure.metrics import emit
from scenarios.device_creation import FILL_PERIOD, FILL_SHIFT, FILL_STEP


def prepare(inputs, params, device):
    seed = int(params["seed"])
    return {"kind": params["kind"], "n": int(params["n"]), "device": device, "gpu": device.type == "cuda",
            "host_gen": torch.Generator().manual_seed(seed),  # CPU generator (MT19937)
            "device_gen": torch.Generator(device=device).manual_seed(seed)}  # CUDA: Philox, state on the device


def generate(state, device, gen):
    if state["kind"] == "normal":
        return torch.randn(state["n"], generator=gen, device=device)  # on a GPU: one kernel on the current stream
    i = torch.arange(state["n"], dtype=torch.int32, device=device)
    return (i % FILL_PERIOD).to(torch.float32) * FILL_STEP - FILL_SHIFT  # four elementwise kernels, all exact


def run_host_then_copy(state):
    t0 = time.perf_counter()
    host = generate(state, torch.device("cpu"), state["host_gen"])  # the host computes; nothing is queued
    emit("host_create_s", time.perf_counter() - t0)
    emit("link_bytes", host.nbytes if state["gpu"] else 0)
    return {state["kind"]: host.to(state["device"])}  # from pageable memory: the host waits for the copy


def run_on_device(state):
    emit("link_bytes", 0)
    return {state["kind"]: generate(state, state["device"], state["device_gen"])}  # queued; returns at once
