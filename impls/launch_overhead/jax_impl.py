"""launch_overhead in JAX.

Each jitted call is one dispatch through JAX's C++ fast path, a few µs of host work; the eager baseline
makes one call per op. JAX has no user-facing CUDA graphs: its idiom is the loop inside jit. `capture`
is traced once (lax.fori_loop, fully unrolled, so no while loop reads its counter back to the host),
XLA fuses the chain into one kernel, and every run is one dispatch. The same holds on the CPU backend.
"""
from __future__ import annotations

import time
from functools import partial

import jax
import jax.numpy as jnp

from harness.measure.metrics import emit
from scenarios.launch_overhead import SCALE

OPS = (jax.jit(lambda y: y * SCALE), jax.jit(jnp.tanh))  # one compiled single-op program each


def prepare(inputs, params, device):
    # Uploaded once, untimed; jax.Arrays are immutable, so runs can repeat on the same input.
    return {"x": jax.device_put(inputs["x"], device), "ops": int(params["ops"])}


def chain(y, ops):
    for k in range(ops):
        y = OPS[k % 2](y)  # one dispatch per op; returns a future at once
    return y


@partial(jax.jit, static_argnames="ops")
def capture(x, ops):
    """The whole chain as one program: traced on the first call (JAX's capture), then one dispatch per run."""
    y = jax.lax.fori_loop(0, ops // 2, lambda _, y: jnp.tanh(y * SCALE), x, unroll=True)
    return y * SCALE if ops % 2 else y


def poison(state):
    pass  # nothing is preallocated: every run returns a fresh, immutable array


def run_eager(state):
    t0 = time.perf_counter()
    y = chain(state["x"], state["ops"])  # one dispatch per op
    emit("host_us_per_op", (time.perf_counter() - t0) / state["ops"] * 1e6)
    return {"x": y}


def run_graph(state):
    t0 = time.perf_counter()
    y = capture(state["x"], ops=state["ops"])  # one dispatch for the whole chain
    emit("host_us_per_op", (time.perf_counter() - t0) / state["ops"] * 1e6)
    return {"x": y}
