"""input_pipeline in CuPy.

`naive` uploads each batch with cupy.asarray on the current stream. CuPy already stages a numpy array
through its pinned memory pool (a host memcpy) and copies asynchronously, so the host does not wait for
the transfer; but the copy is queued behind the previous step on the compute stream, and the step
waits for it. `prefetched` runs a ring of two page-locked slots (cupyx.empty_pinned) and two device
slots: the host fills a pinned slot, the copy goes on a non-blocking side stream, and events order
reuse both ways (the host waits for the copy that last read a pinned slot; the side stream waits for
the step that last read a device slot). `compute_only` runs the same steps on pre-staged batches.
"""
from __future__ import annotations

import cupy
import cupyx
import numpy as np

RING = 2  # slots: while step i reads one device slot, batch i+1 is copied into the other


def prepare(inputs, params, device):
    xs, ys, nb = inputs["xs"], inputs["ys"], len(inputs["xs"])
    with device:
        state = {"host": [(xs[i % nb], ys[i % nb]) for i in range(int(params["steps"]))],  # numpy views
                 "staged": [(cupy.asarray(x), cupy.asarray(y)) for x, y in zip(xs, ys)],
                 "w1": cupy.asarray(inputs["w1"]), "w2": cupy.asarray(inputs["w2"]),
                 "lr": float(inputs["lr"]), "steps": int(params["steps"]),
                 "side": cupy.cuda.Stream(non_blocking=True),  # the copy stream
                 "ring": [{"pinned": tuple(cupyx.empty_pinned(a.shape[1:], a.dtype) for a in (xs, ys)),
                           "dev": tuple(cupy.empty(a.shape[1:], a.dtype) for a in (xs, ys)),
                           "copied": cupy.cuda.Event(disable_timing=True), "used": cupy.cuda.Event(disable_timing=True)}
                          for _ in range(RING)]}
    return state  # everything above is uploaded or allocated once, untimed


def train_step(w1, w2, x, y, lr):
    a = cupy.tanh(x @ w1)
    r = a @ w2 - y
    loss = cupy.mean(r * r)
    g = (2.0 / x.shape[0]) * r
    gz = (g[:, None] * w2) * (1.0 - a * a)
    return w1 - lr * (x.T @ gz), w2 - lr * (a.T @ g), loss  # all queued on the current stream


def train(state, batches):
    w1, w2, losses = state["w1"], state["w2"], []
    for x, y in batches:
        w1, w2, loss = train_step(w1, w2, x, y, state["lr"])
        losses.append(loss)  # stays on the device: no sync
    return {"losses": cupy.stack(losses), "w1": w1, "w2": w2}


def host_batches(state, pin):
    """The loader: step i's batch as numpy arrays; with pin, copied into the next pinned slot of the ring."""
    for i, batch in enumerate(state["host"]):
        if not pin:
            yield batch
            continue
        slot = state["ring"][i % RING]
        slot["copied"].synchronize()  # the host waits until the copy that last read this pinned slot is done
        for dst, src in zip(slot["pinned"], batch):
            np.copyto(dst, src)  # host memcpy into page-locked memory (what pin_memory does in torch)
        yield slot


def to_device_ahead(state, batches):
    """Device batches, one ahead: batch i's copy is queued on the side stream before step i-1 is enqueued."""
    side, compute, ahead = state["side"], cupy.cuda.get_current_stream(), None
    for slot in batches:
        side.wait_event(slot["used"])  # the device slot is free once the step that last read it is done
        for dst, src in zip(slot["dev"], slot["pinned"]):
            dst.set(src, stream=side)  # pinned source: cudaMemcpyAsync on the side stream, returns at once
        side.record(slot["copied"])
        if ahead is not None:
            yield ahead["dev"]  # the caller enqueues step i-1 now; batch i's copy runs beside it
            compute.record(ahead["used"])  # after step i-1's kernels: its device slot may be refilled after this
        compute.wait_event(slot["copied"])  # the next step waits for batch i's copy
        ahead = slot
    if ahead is not None:
        yield ahead["dev"]
        compute.record(ahead["used"])


def run_naive(state):
    # asarray: memcpy into CuPy's pinned pool, then an async copy on the compute stream, between two steps
    return train(state, ((cupy.asarray(x), cupy.asarray(y)) for x, y in host_batches(state, pin=False)))


def run_prefetched(state):
    return train(state, to_device_ahead(state, host_batches(state, pin=True)))


def run_compute_only(state):
    return train(state, (state["staged"][i % len(state["staged"])] for i in range(state["steps"])))
