"""sync_points in PyTorch.

Tensor.shape/.dtype/.device are host-side metadata: free. Tensor.item(), .cpu(), print(t), bool(t)
and nonzero() wait for the device and copy back: each is a host-device sync.
"""
from __future__ import annotations

import torch


def prepare(inputs, params, device):
    # The batches are uploaded once, untimed, as a loader would have handed them over.
    xs = torch.from_numpy(inputs["xs"]).to(device)
    ys = torch.from_numpy(inputs["ys"]).to(device)
    return {"batches": list(zip(xs.unbind(0), ys.unbind(0))), "w0": torch.from_numpy(inputs["w0"]).to(device),
            "lr": float(inputs["lr"]), "steps": int(params["steps"]), "device": device}


def loop(state):
    """The loader: step i gets batch i mod len(batches), already on the device."""
    nb = len(state["batches"])
    return (state["batches"][i % nb] for i in range(state["steps"]))


def sgd_step(w, x, y, lr):
    b = x.shape[0]  # metadata: already on the host, no sync
    r = x @ w - y
    loss = torch.mean(r * r)
    return w - (2.0 * lr / b) * (x.T @ r), loss  # all queued on the current stream


def run_item_each_step(state):
    w, losses = state["w0"], []
    for x, y in loop(state):
        w, loss = sgd_step(w, x, y, state["lr"])
        losses.append(loss.item())  # sync: the host waits for this step, the device then waits for the host
    return {"losses": torch.tensor(losses, dtype=torch.float64), "w": w}


def run_on_device(state):
    w = state["w0"]
    losses = torch.empty(state["steps"], dtype=w.dtype, device=state["device"])
    for i, (x, y) in enumerate(loop(state)):
        w, losses[i] = sgd_step(w, x, y, state["lr"])  # a device-side copy into the log: no sync
    return {"losses": losses.cpu(), "w": w}  # the one sync: waits for every step, copies all losses
