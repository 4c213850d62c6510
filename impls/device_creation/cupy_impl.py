"""device_creation in CuPy.

CuPy mirrors NumPy: the same array code makes the data on the host (numpy) or on the device (cupy),
where kernels on the current stream write device memory and nothing crosses the link. Host data
goes over with cupy.asarray, which copies it into a buffer from CuPy's pinned memory pool and
queues an asynchronous DMA from there.
"""
from __future__ import annotations

import time

import cupy
import numpy as np

from harness.measure.metrics import emit
from scenarios.device_creation import FILL_PERIOD, FILL_SHIFT, FILL_STEP, host_numpy


def prepare(inputs, params, device):
    seed = int(params["seed"])
    with device:
        return {"kind": params["kind"], "n": int(params["n"]), "device": device,
                "host_gen": np.random.default_rng(seed),  # NumPy's PCG64, one host thread
                "device_gen": cupy.random.default_rng(seed)}  # XORWOW states live on the device


def generate(state, device, gen):
    with device:
        if state["kind"] == "normal":
            return gen.standard_normal(state["n"], dtype=cupy.float32)  # kernels on the current stream
        i = cupy.arange(state["n"], dtype=cupy.int32)
        return (i % FILL_PERIOD).astype(cupy.float32) * cupy.float32(FILL_STEP) - cupy.float32(FILL_SHIFT)


def run_host_then_copy(state):
    t0 = time.perf_counter()
    host = host_numpy(state["kind"], state["n"], state["host_gen"])  # the same code as generate, in NumPy
    emit("host_create_s", time.perf_counter() - t0)
    emit("link_bytes", host.nbytes)
    with state["device"]:
        return {state["kind"]: cupy.asarray(host)}  # staged through pinned memory; the DMA is queued


def run_on_device(state):
    emit("link_bytes", 0)
    return {state["kind"]: generate(state, state["device"], state["device_gen"])}  # queued; returns at once
