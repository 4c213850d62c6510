"""memory_pools in CuPy: the default memory pool keeps a freed array's chunk for the next array (per
stream); get_default_memory_pool().free_all_blocks() hands the unused chunks back with cudaFree.

Frees are stream-ordered: dropping the last reference returns the chunk at once, reusable by later
work on the same stream. `raw` bypasses the pool: cudaMalloc, and cudaFree after a wait on the stream.
"""
from __future__ import annotations

import json

import cupy
import numpy as np

from harness.measure.metrics import emit
from impls._shared.child import MEMORY_OVERRIDES, child_env, emit_numbers, run_child

FW = "cupy"


def device_of(ordinal):
    dev = cupy.cuda.Device(ordinal)
    dev.use()
    return dev


def prepare(inputs, params, device):
    with device:
        cupy.get_default_memory_pool().free_all_blocks()  # what earlier variants left in the pool
        return {"x": cupy.asarray(np.asarray(inputs["x"])), "host_x": np.asarray(inputs["x"]),
                "n": int(params["n"]), "device": device, "ordinal": device.id}


def poison(state):
    pass  # every run makes its arrays anew: nothing preallocated to overwrite


def held(state):
    """Bytes the pool holds that no array uses, by CuPy's counters."""
    pool = cupy.get_default_memory_pool()
    return pool.total_bytes() - pool.used_bytes()


def release(state):
    cupy.get_default_memory_pool().free_all_blocks()  # cudaFree of every chunk no array uses


def cycles(state, release_each):
    peaks = []
    for k in range(len(state["host_x"])):
        a = cupy.empty(state["n"], cupy.float32)  # a pool chunk, or cudaMalloc when none fits
        a[...] = state["x"][k]  # from a 0-d device view: a copy kernel, no host sync
        peaks.append(a.max())
        del a  # back to the pool, stream-ordered
        if release_each:
            release(state)
    out = {"peaks": cupy.stack(peaks)}
    emit("held_after_free_bytes", held(state))
    return out


def child(state, mode):
    """A fresh process with CuPy's (and JAX's) default allocator settings (impls/memory_pools/child.py)."""
    got = run_child("impls.memory_pools.child", [FW, mode, state["ordinal"], state["n"],
                                                 json.dumps(state["host_x"].tolist())], child_env(MEMORY_OVERRIDES))
    emit_numbers(got, f"memory_pools/{FW}/{mode}")  # the out-of-memory text goes to the worker's log
    return {"peaks": np.asarray(got["peaks"], np.float32)}


def run_raw(state):
    peaks, nbytes = [], state["n"] * 4
    stream = cupy.cuda.get_current_stream()
    for k in range(len(state["host_x"])):
        ptr = cupy.cuda.runtime.malloc(nbytes)  # cudaMalloc
        mem = cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, nbytes, None, state["ordinal"]), 0)
        a = cupy.ndarray((state["n"],), cupy.float32, mem)
        a[...] = state["x"][k]
        peaks.append(a.max())
        stream.synchronize()  # cudaFree must not free what a queued kernel still reads
        del a, mem
        cupy.cuda.runtime.free(ptr)  # cudaFree
    return {"peaks": cupy.stack(peaks)}


def run_pooled(state):
    return cycles(state, release_each=False)


def run_released(state):
    return cycles(state, release_each=True)


def run_fresh_process(state):
    return child(state, "fresh_process")


def run_beside_jax(state):
    return child(state, "beside_jax")
