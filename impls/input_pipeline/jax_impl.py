"""input_pipeline in JAX.

There are no user streams: jax.device_put returns a future at once and XLA copies on its own transfer
stream, so any overlap comes from dispatching the copy early enough. `naive` device_puts each pageable
batch right before its step. `prefetched` first copies each batch into page-locked host memory
(device_put to memory_kind="pinned_host": JAX cannot pin a user's numpy array), then issues batch i+2's
device_put right after step i is queued (flax's prefetch_to_device with size 2). The runtime runs a
host-to-device copy after the compute already queued, so that copy runs beside step i+1; one batch ahead
would serialise copy and step (docs/design/jax_prefetch.md). Three batches are alive where CuPy's ring
has two slots, and the host never waits. `compute_only` runs the same steps on batches placed on the
device beforehand.
"""
from __future__ import annotations

from collections import deque
from functools import partial

import jax
import jax.numpy as jnp

AHEAD = 2  # a copy queued after step i runs after it: one batch ahead would serialise copy and step


def prepare(inputs, params, device):
    xs, ys, nb = inputs["xs"], inputs["ys"], len(inputs["xs"])
    state = {"host": [(xs[i % nb], ys[i % nb]) for i in range(int(params["steps"]))],  # numpy views: step i's batch
             "staged": [jax.device_put((x, y), device) for x, y in zip(xs, ys)],
             "w1": jax.device_put(inputs["w1"], device), "w2": jax.device_put(inputs["w2"], device),
             "lr": float(inputs["lr"]), "steps": int(params["steps"]), "device": device}
    # The memory kinds: "device" and "pinned_host" on a GPU; the CPU backend names them too (both host memory),
    # so the prefetcher runs, and is checked, on a CPU device as well.
    state["pinned"] = jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host")
    state["hbm"] = jax.sharding.SingleDeviceSharding(device, memory_kind="device")
    return state  # everything above is uploaded once, untimed


@partial(jax.jit, static_argnames="lr")  # lr is a compile-time constant
def train_step(w1, w2, x, y, lr):
    hi = jax.lax.Precision.HIGHEST
    a = jnp.tanh(jnp.matmul(x, w1, precision=hi))
    r = jnp.matmul(a, w2, precision=hi) - y
    loss = jnp.mean(r * r)
    g = (2.0 / x.shape[0]) * r
    gz = (g[:, None] * w2) * (1.0 - a * a)
    return w1 - lr * jnp.matmul(x.T, gz, precision=hi), w2 - lr * jnp.matmul(a.T, g, precision=hi), loss


def train(state, batches):
    w1, w2 = state["w1"], state["w2"]
    losses = []
    for x, y in batches:
        w1, w2, loss = train_step(w1, w2, x, y, state["lr"])  # one dispatch per step; returns futures
        losses.append(loss)  # stays on the device: no sync
    return {"losses": jnp.stack(losses), "w1": w1, "w2": w2}


def host_batches(state, pin):
    """The loader: step i's batch as numpy arrays; with pin, copied into page-locked host memory by JAX."""
    for batch in state["host"]:
        yield jax.device_put(batch, state["pinned"]) if pin else batch


def to_device_ahead(state, batches):
    """Device batches, two ahead: batch i+2's device_put is issued once the caller has queued step i."""
    ahead = deque()
    for batch in batches:
        ahead.append(jax.device_put(batch, state["hbm"]))  # pinned -> device, after the compute queued so far
        if len(ahead) == AHEAD:
            yield ahead.popleft()  # the caller queues this batch's step now; its buffer is freed after that step
    yield from ahead


def run_naive(state):
    return train(state, (jax.device_put(b, state["device"]) for b in host_batches(state, pin=False)))


def run_prefetched(state):
    return train(state, to_device_ahead(state, host_batches(state, pin=True)))


def run_compute_only(state):
    return train(state, (state["staged"][i % len(state["staged"])] for i in range(state["steps"])))
