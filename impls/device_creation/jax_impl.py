"""device_creation in JAX.

One jitted function makes the data on the device: jax.random.normal from a threefry key, or the
fill, which XLA fuses into a single kernel. Its only input is the seed, a device scalar put there
once, so nothing crosses the link per run and the output lands on the seed's device. Host data is
made with NumPy and sent with jax.device_put.
"""
from __future__ import annotations

import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from harness.measure.metrics import emit
from scenarios.device_creation import FILL_PERIOD, FILL_SHIFT, FILL_STEP, host_numpy


def prepare(inputs, params, device):
    seed = int(params["seed"])
    return {"kind": params["kind"], "n": int(params["n"]), "device": device, "gpu": device.platform == "gpu",
            "host_gen": np.random.default_rng(seed),  # NumPy's PCG64, one host thread
            "device_gen": jax.device_put(np.uint32(seed), device).block_until_ready()}  # untimed, once


@partial(jax.jit, static_argnames=("n", "kind"), keep_unused=True)  # the seed places the output
def generate(seed, n, kind):
    if kind == "normal":
        return jax.random.normal(jax.random.key(seed), (n,), jnp.float32)
    i = jnp.arange(n, dtype=jnp.int32)
    return (i % FILL_PERIOD).astype(jnp.float32) * FILL_STEP - FILL_SHIFT  # one fused kernel, all exact


def run_host_then_copy(state):
    t0 = time.perf_counter()
    host = host_numpy(state["kind"], state["n"], state["host_gen"])
    emit("host_create_s", time.perf_counter() - t0)
    emit("link_bytes", host.nbytes if state["gpu"] else 0)
    return {state["kind"]: jax.device_put(host, state["device"])}  # from a NumPy (pageable) array


def run_on_device(state):
    emit("link_bytes", 0)
    return {state["kind"]: generate(state["device_gen"], n=state["n"], kind=state["kind"])}  # dispatched; a future
