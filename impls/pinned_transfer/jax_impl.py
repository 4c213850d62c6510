"""pinned_transfer in JAX.

jax.device_put is asynchronous by contract and has no blocking flag; JAX has no user stream and no
copy into a buffer the user owns: every transfer allocates its destination. Pinned host memory is a
memory kind (SingleDeviceSharding(dev, memory_kind="pinned_host")): device_put into it from NumPy
is the pinning host copy, device_put between it and "device" is the DMA. A jax.Array keeps its host
copy once read, so every D2H run reads a fresh device array, made untimed by poison().
"""
from __future__ import annotations

import time

import jax
import numpy as np
from jax.sharding import SingleDeviceSharding

from harness.measure.metrics import emit
from scenarios.pinned_transfer import flip_bits, prefaulted

NOT_EXPRESSIBLE = {
    "d2h_pinned_non_blocking": "a jax.Array is immutable: no copy can write into a host buffer pinned up front; "
                               "device_put to a pinned_host sharding allocates its destination on every call, which "
                               "is d2h_pin_then_copy",
    "d2h_read_before_sync": "every host read of a jax.Array (np.asarray, jax.device_get, also of a pinned_host "
                            "array) waits until the copy has finished: the host cannot see a half-written "
                            "destination, so the race cannot be written",
}


def prepare(inputs, params, device):
    # Everything is placed here, untimed; the variants only copy.
    x = inputs["x"]
    on_device = SingleDeviceSharding(device, memory_kind="device")
    pinned_host = SingleDeviceSharding(device, memory_kind="pinned_host")
    state = {"x": x, "host": prefaulted(x), "nbytes": x.nbytes, "gpu": device.platform == "gpu",
             "on_device": on_device, "pinned_host": pinned_host,
             # A compiled identity whose output is placed in the other memory kind: XLA issues the copy.
             "jit_to_device": jax.jit(lambda a: a, out_shardings=on_device),
             "jit_to_pinned": jax.jit(lambda a: a, out_shardings=pinned_host),
             "flipped_dev": jax.device_put(flip_bits(x), on_device),
             "pinned": jax.device_put(x, pinned_host)}  # pinned once, up front: a pinned_host jax.Array
    jax.block_until_ready((state["flipped_dev"], state["pinned"]))
    return state


def poison(state):
    produce(state)
    state["src"].block_until_ready()  # untimed: the fresh source exists before the timed call


def produce(state):
    # The computation that made the data: src = ~flipped, bit for bit x, a new device array every call
    # (a jax.Array read once returns its cached host copy: reading the same one again would not transfer).
    f = state["flipped_dev"]
    bits = jax.lax.bitcast_convert_type(f, np.dtype(f"u{f.dtype.itemsize}"))
    state["src"] = jax.lax.bitcast_convert_type(~bits, f.dtype)


def moved(state):
    emit("link_bytes", state["nbytes"] if state["gpu"] else 0)


def run_h2d_pageable(state):
    moved(state)
    return {"x": jax.device_put(state["host"], state["on_device"]).block_until_ready()}  # no blocking flag: wait


def run_h2d_pageable_non_blocking(state):
    moved(state)
    return {"x": jax.device_put(state["host"], state["on_device"])}  # from a NumPy (pageable) array


def run_h2d_pinned_non_blocking(state):
    moved(state)
    return {"x": jax.device_put(state["pinned"], state["on_device"])}  # pinned_host -> device: the DMA alone


def run_h2d_pin_then_copy(state):
    moved(state)
    staged = jax.device_put(state["host"], state["pinned_host"])  # NumPy -> pinned_host: the pinning copy
    return {"x": jax.device_put(staged, state["on_device"])}


def run_h2d_jit_transfer(state):
    moved(state)
    return {"x": state["jit_to_device"](state["pinned"])}  # pinned_host -> device by a jitted program


def run_d2h_pageable(state):
    moved(state)
    return {"x": jax.device_get(state["src"])}  # waits for the array, then JAX's own D2H path into NumPy


def run_d2h_pin_then_copy(state, to_pinned=None):
    moved(state)
    put = to_pinned or (lambda a: jax.device_put(a, state["pinned_host"]))  # destination allocated now
    staged = put(state["src"]).block_until_ready()
    t0 = time.perf_counter()
    out = np.asarray(staged)  # the pinned_host array as NumPy: what the host can use
    emit("to_numpy_s", time.perf_counter() - t0)
    return {"x": out}


def run_d2h_jit_transfer(state):
    return run_d2h_pin_then_copy(state, state["jit_to_pinned"])  # device -> pinned_host by a jitted program
