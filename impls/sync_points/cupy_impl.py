"""sync_points in CuPy.

ndarray.shape/.dtype are host-side metadata: free. float(a), a.item(), a.get() and cupy.asnumpy(a)
wait for the current stream and copy back: each is a host-device sync. CuPy has no detector for
them, so this impl reports the reads it makes (host_reads): a count by construction.
"""
from __future__ import annotations

import cupy
import numpy as np

from harness.measure.metrics import emit


def prepare(inputs, params, device):
    # The batches are uploaded once, untimed, as a loader would have handed them over.
    with device:
        xs, ys = cupy.asarray(inputs["xs"]), cupy.asarray(inputs["ys"])
        return {"batches": list(zip(xs, ys)), "w0": cupy.asarray(inputs["w0"]), "lr": float(inputs["lr"]),
                "steps": int(params["steps"]), "device": device}


def loop(state):
    """The loader: step i gets batch i mod len(batches), already on the device."""
    nb = len(state["batches"])
    return (state["batches"][i % nb] for i in range(state["steps"]))


def sgd_step(w, x, y, lr):
    b = x.shape[0]  # metadata: already on the host, no sync
    r = x @ w - y
    loss = cupy.mean(r * r)
    return w - (2.0 * lr / b) * (x.T @ r), loss  # all queued on the current stream


def run_item_each_step(state):
    w, losses = state["w0"], []
    for x, y in loop(state):
        w, loss = sgd_step(w, x, y, state["lr"])
        losses.append(float(loss))  # sync: the host waits for this step, the device then waits for the host
    emit("host_reads", len(losses))
    return {"losses": np.asarray(losses, dtype=np.float64), "w": w}  # read already: a host array, as torch's


def run_on_device(state):
    w = state["w0"]
    losses = cupy.empty(state["steps"], dtype=w.dtype)
    for i, (x, y) in enumerate(loop(state)):
        w, losses[i] = sgd_step(w, x, y, state["lr"])  # a device-side copy into the log: no sync
    emit("host_reads", 1)
    return {"losses": losses.get(), "w": w}  # the one sync: waits for every step, copies all losses
