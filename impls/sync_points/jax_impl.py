"""sync_points in JAX.

jax.Array.shape/.dtype are host-side metadata: free. float(a), a.item(), np.asarray(a), print(a) and
jax.device_get(a) wait for the array and copy it back: each is a device-to-host transfer, which
jax.transfer_guard_device_to_host can log or forbid.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np


def prepare(inputs, params, device):
    # The batches are uploaded once, untimed, as a loader would have handed them over.
    batches = [(jax.device_put(x, device), jax.device_put(y, device)) for x, y in zip(inputs["xs"], inputs["ys"])]
    return {"batches": batches, "w0": jax.device_put(inputs["w0"], device), "lr": float(inputs["lr"]),
            "steps": int(params["steps"])}


def loop(state):
    """The loader: step i gets batch i mod len(batches), already on the device."""
    nb = len(state["batches"])
    return (state["batches"][i % nb] for i in range(state["steps"]))


@partial(jax.jit, static_argnames="lr")  # lr is a compile-time constant, not a host-to-device copy per call
def sgd_step(w, x, y, lr):
    b = x.shape[0]  # metadata: known while tracing, no sync
    hi = jax.lax.Precision.HIGHEST
    r = jnp.matmul(x, w, precision=hi) - y
    loss = jnp.mean(r * r)
    return w - (2.0 * lr / b) * jnp.matmul(x.T, r, precision=hi), loss  # one dispatch per step


def run_item_each_step(state):
    w, losses = state["w0"], []
    for x, y in loop(state):
        w, loss = sgd_step(w, x, y, state["lr"])
        losses.append(float(loss))  # sync: the host waits for this step, the device then waits for the host
    return {"losses": np.asarray(losses, dtype=np.float64), "w": w}  # read already: a host array, as torch's


def run_on_device(state):
    w, losses = state["w0"], []
    for x, y in loop(state):
        w, loss = sgd_step(w, x, y, state["lr"])
        losses.append(loss)  # a future: no sync
    return {"losses": jax.device_get(jnp.stack(losses)), "w": w}  # the one sync: one transfer of all losses
