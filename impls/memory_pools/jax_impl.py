"""memory_pools in JAX: XLA's BFC allocator keeps its regions for the process's life. With its defaults it
preallocates 75% of the GPU at the first array; the harness's workers run with preallocation off and a
cap, so their pool grows on demand up to the cap, and never shrinks either.

A buffer goes back to the pool when its last reference is gone and the computations using it are done
(the runtime tracks its uses: deleting an array while a queued program reads it is safe).
"""
from __future__ import annotations

import gc
import json

import jax
import jax.numpy as jnp
import numpy as np

from harness.measure.metrics import emit
from impls._shared.child import MEMORY_OVERRIDES, child_env, emit_numbers, run_child

NOT_EXPRESSIBLE = {"raw": "JAX has no raw cudaMalloc call; the closest, XLA_PYTHON_CLIENT_ALLOCATOR=platform, is read "
                          "once when the backend starts, before this worker's first array",
                   "beside_jax": "JAX is the first framework of this variant (torch's and CuPy's rows); its own pool "
                                 "from the first array on is fresh_process's first_array_bytes"}
FW = "jax"


fill = jax.jit(lambda x, k, n: jnp.full((n,), jax.lax.dynamic_index_in_dim(x, k, keepdims=False)),
               static_argnames="n")
peak = jax.jit(jnp.max)
stack = jax.jit(lambda *m: jnp.stack(m))


def device_of(ordinal):
    return jax.devices()[ordinal]


def prepare(inputs, params, device):
    x = np.asarray(inputs["x"])
    return {"x": jax.device_put(x, device), "host_x": x, "n": int(params["n"]), "device": device,
            "ks": [jax.device_put(np.int32(k), device) for k in range(len(x))], "ordinal": device.id}


def poison(state):
    pass  # every run makes its arrays anew: nothing preallocated to overwrite


def held(state):
    """Bytes the BFC pool holds that no array uses, by XLA's counters; None without them (the CPU)."""
    stats = state["device"].memory_stats()
    if not stats:
        return None
    return stats.get("pool_bytes", stats.get("bytes_reserved", 0)) - stats["bytes_in_use"]


def release(state):
    gc.collect()  # the closest JAX has: arrays in reference cycles go, compiled programs go; the pool stays
    jax.clear_caches()


def cycles(state, release_each):
    peaks = []
    for k in range(len(state["host_x"])):
        a = fill(state["x"], state["ks"][k], n=state["n"])  # a BFC block (the pool grows when none fits)
        peaks.append(peak(a))
        if release_each:
            a.delete()  # now, not when the reference goes: the BFC pool keeps the block all the same
        del a
    out = {"peaks": stack(*peaks)}
    if state["device"].platform != "cpu":
        out["peaks"].block_until_ready()  # the blocks are back in the pool once their programs are done
        emit("held_after_free_bytes", held(state))
    return out


def child(state, mode):
    """A fresh process with JAX's default allocator settings (impls/memory_pools/child.py)."""
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
