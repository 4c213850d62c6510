"""event_sync in JAX.

No streams, no events: the consumer is given the producer's result, so XLA runs it after the producer
whatever the host does. That is event_wait with no call at all, and the host stays free: to port event
code to JAX, delete the events and keep the data dependence. The host-side waits still exist as the
closest equivalents: block on every array in flight (device_synchronize) or on the producer's result
(stream_synchronize). A consumer that does not wait for its producer cannot be written (no_sync).
"""
from __future__ import annotations

import time
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import SingleDeviceSharding

from harness.measure.metrics import emit

NOT_EXPRESSIBLE = {"no_sync": "data flow orders every consumer after its producer: a missing wait cannot be written"}

def prepare(inputs, params, device):
    pinned = SingleDeviceSharding(device, memory_kind="pinned_host")
    state = {"x": jax.device_put(inputs["x"], device), "w": jax.device_put(inputs["w"], device),
             "bg_host": jax.device_put(inputs["bg"], pinned),  # page-locked host memory
             "dev": SingleDeviceSharding(device, memory_kind="device"), "steps": int(params["steps"])}
    jax.block_until_ready(state["x"])
    return state


def poison(state):
    """Nothing to overwrite: jax.Arrays are immutable and every run returns fresh ones."""


@partial(jax.jit, static_argnames="steps")
def produce(x, w, steps):
    for _ in range(steps):
        x = jnp.tanh(jnp.matmul(x, w, precision=jax.lax.Precision.HIGHEST))  # `steps` GEMMs in one dispatch
    return x


@jax.jit
def consume(p):
    return jnp.mean(p, axis=0)


def start(state):
    """The producer, then the background (an upload from pinned memory and its mean), dispatched at once.
    XLA runs every computation on one compute stream in dispatch order: a background mean dispatched
    first held the producer back until the upload it reads had landed (a GPU timeline shows it)."""
    p = produce(state["x"], state["w"], state["steps"])
    # On a GPU this copy started only when the producer had finished (its copy stream waited on the
    # compute stream): unlike torch's and CuPy's background, it does not run beside the producer.
    return p, consume(jax.device_put(state["bg_host"], state["dev"]))


def finish(state, y, bg, t0, t1):
    emit("host_blocked_ms", (t1 - t0) * 1e3)
    return {"y": y, "bg": bg}


def run_device_synchronize(state):
    p, bg = start(state)
    t0 = time.perf_counter()
    jax.block_until_ready((p, bg))  # no device-wide wait in JAX: block on every array in flight
    t1 = time.perf_counter()
    return finish(state, consume(p), bg, t0, t1)


def run_stream_synchronize(state):
    p, bg = start(state)
    t0 = time.perf_counter()
    p.block_until_ready()  # the host waits for the producer's result only
    t1 = time.perf_counter()
    return finish(state, consume(p), bg, t0, t1)


def run_event_wait(state):
    p, bg = start(state)
    t0 = t1 = time.perf_counter()  # nothing to call: consume(p) is ordered after produce by data flow
    return finish(state, consume(p), bg, t0, t1)
