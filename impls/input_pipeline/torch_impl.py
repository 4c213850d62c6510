"""input_pipeline in PyTorch.

Batches come from a torch DataLoader over host (numpy) batches. `naive` copies each pageable batch with
.to(device): the copy is queued behind the previous step on the same stream and the host waits for it.
`prefetched` takes page-locked batches from DataLoader(pin_memory=True) and queues batch i+1's copy
(non_blocking) on a side stream while step i computes; the compute stream waits for the copy
(wait_stream), and record_stream tells the caching allocator which stream still reads the batch.
`compute_only` runs the same steps on batches staged on the device beforehand.
"""
from __future__ import annotations

import torch
from torch.utils.data import DataLoader


def prepare(inputs, params, device):
    xs, ys, nb = inputs["xs"], inputs["ys"], len(inputs["xs"])
    state = {"host": [(xs[i % nb], ys[i % nb]) for i in range(int(params["steps"]))],  # numpy views: step i's batch
             "staged": [(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)) for x, y in zip(xs, ys)],
             "w1": torch.from_numpy(inputs["w1"]).to(device), "w2": torch.from_numpy(inputs["w2"]).to(device),
             "lr": float(inputs["lr"]), "steps": int(params["steps"]), "device": device}
    if device.type == "cuda":
        state["side"] = torch.cuda.Stream(device)  # the copy stream; non-blocking w.r.t. the default stream
    return state  # everything above is uploaded once, untimed


def train_step(w1, w2, x, y, lr):
    a = torch.tanh(x @ w1)
    r = a @ w2 - y
    loss = torch.mean(r * r)
    g = (2.0 / x.shape[0]) * r
    gz = (g[:, None] * w2) * (1.0 - a * a)
    return w1 - lr * (x.T @ gz), w2 - lr * (a.T @ g), loss  # all queued on the current stream


def train(state, batches):
    w1, w2, losses = state["w1"], state["w2"], []
    for x, y in batches:
        w1, w2, loss = train_step(w1, w2, x, y, state["lr"])
        losses.append(loss)  # stays on the device: no sync
    return {"losses": torch.stack(losses), "w1": w1, "w2": w2}


def host_batches(state, pin):
    """The loader: step i's batch as host tensors; with pin, copied into page-locked memory (main thread)."""
    return DataLoader(state["host"], batch_size=None, shuffle=False, num_workers=0, pin_memory=pin)


def to_device_ahead(state, batches):
    """Device batches, one ahead: batch i's copy is queued on the side stream before step i-1 is enqueued."""
    side, compute, ahead = state["side"], torch.cuda.current_stream(), None
    for host in batches:
        with torch.cuda.stream(side):
            staged = [t.to(state["device"], non_blocking=True) for t in host]  # pinned source: returns at once
        if ahead is not None:
            yield ahead  # the caller enqueues step i-1 now; batch i's copy runs beside it
        compute.wait_stream(side)  # the next step waits for batch i's copy (the only copy not yet waited for)
        for t in staged:
            t.record_stream(compute)  # allocated on the side stream, read on the compute stream
        ahead = staged
    if ahead is not None:
        yield ahead


def run_naive(state):
    dev = state["device"]
    return train(state, ((x.to(dev), y.to(dev)) for x, y in host_batches(state, pin=False)))  # host waits per copy


def run_prefetched(state):
    return train(state, to_device_ahead(state, host_batches(state, pin=True)))


def run_compute_only(state):
    return train(state, (state["staged"][i % len(state["staged"])] for i in range(state["steps"])))
