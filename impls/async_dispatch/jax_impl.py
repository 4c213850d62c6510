"""async_dispatch in JAX.

Every jitted call (and every eager op) is dispatched asynchronously and returns a jax.Array that is
a future: block_until_ready() waits for it, is_ready() polls it, reading it (np.asarray, float)
blocks. There is no device-wide synchronize and no stream to wait on: you wait on arrays.
On the CPU backend dispatch is asynchronous too (XLA's CPU client runs on its own threads).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from harness.measure.metrics import emit


def prepare(inputs, params, device):
    # Uploaded once, untimed; jax.Arrays are immutable, so runs can repeat on the same inputs.
    return {"x": jax.device_put(inputs["x"], device), "w": jax.device_put(inputs["w"], device),
            "steps": int(params["steps"])}


@jax.jit
def step(x, w):
    # One dispatch per step; float32 GEMM at full precision (JAX's GPU default would be TF32).
    return jnp.tanh(jnp.matmul(x, w, precision=jax.lax.Precision.HIGHEST))


def run_sync_each(state):
    x = state["x"]
    for _ in range(state["steps"]):
        x = step(x, state["w"])
        x.block_until_ready()  # host blocks until this step's result exists (its buffer's definition event)
    return {"x": x}


def run_async(state):
    x = state["x"]
    for _ in range(state["steps"]):
        x = step(x, state["w"])  # returns a future at once
    return {"x": x}


def run_async_poll(state):
    out = run_async(state)
    iters = 0
    while not out["x"].is_ready():  # polls; never blocks
        iters += 1
    emit("cpu_iters_while_waiting", iters)
    return out
