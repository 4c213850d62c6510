"""memory_pools in PyTorch: the caching allocator keeps a freed tensor's block for the next tensor of the
same stream; torch.cuda.empty_cache() hands the unused cached blocks back with cudaFree.

Frees are stream-ordered: `del a` returns the block at once, reusable by later work on the same stream,
which runs after the kernels still reading it. Nothing here synchronizes the host.
"""
from __future__ import annotations

import json

import numpy as np
import torch

from harness.measure.metrics import emit
from impls._shared.child import MEMORY_OVERRIDES, child_env, emit_numbers, run_child

NOT_EXPRESSIBLE = {"raw": "torch has no raw cudaMalloc call; the closest, PYTORCH_NO_CUDA_MEMORY_CACHING=1, is read "
                          "once when CUDA starts, before this worker's first tensor"}
FW = "torch"


def device_of(ordinal):
    return torch.device("cuda", ordinal)


def prepare(inputs, params, device):
    if device.type == "cuda":
        torch.cuda.empty_cache()  # what earlier variants left in the pool
    return {"x": torch.from_numpy(np.asarray(inputs["x"])).to(device), "host_x": np.asarray(inputs["x"]),
            "n": int(params["n"]), "device": device, "ordinal": device.index or 0}


def poison(state):
    pass  # every run makes its arrays anew: nothing preallocated to overwrite


def held(state):
    """Bytes the pool holds that no tensor uses, by torch's counters; None without a pool (the CPU)."""
    if state["device"].type != "cuda":
        return None
    return torch.cuda.memory_reserved(state["device"]) - torch.cuda.memory_allocated(state["device"])


def release(state):
    torch.cuda.empty_cache()  # cudaFree of every cached block no tensor uses; a no-op before CUDA starts


def cycles(state, release_each):
    peaks = []
    for k in range(len(state["host_x"])):
        a = torch.empty(state["n"], device=state["device"])  # a pool block, or cudaMalloc when none fits
        a.fill_(state["x"][k])  # from a 0-d device tensor: a copy kernel, no host sync
        peaks.append(a.amax())
        del a  # back to the pool, stream-ordered
        if release_each:
            release(state)
    out = {"peaks": torch.stack(peaks)}
    h = held(state)
    if h is not None:
        emit("held_after_free_bytes", h)
    return out


def child(state, mode):
    """A fresh process with torch's (and JAX's) default allocator settings (impls/memory_pools/child.py)."""
    got = run_child("impls.memory_pools.child", [FW, mode, state["ordinal"], state["n"],
                                                 json.dumps(state["host_x"].tolist())], child_env(MEMORY_OVERRIDES))
    emit_numbers(got, f"memory_pools/{FW}/{mode}")  # the out-of-memory text goes to the worker's log
    return {"peaks": np.asarray(got["peaks"], np.float32)}


def run_pooled(state):
    return cycles(state, release_each=False)


def run_released(state):
    return cycles(state, release_each=True)


def run_fresh_process(state):
    return child(state, "fresh_process")


def run_beside_jax(state):
    return child(state, "beside_jax")
