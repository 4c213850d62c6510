"""point_to_point in PyTorch: torch.distributed send/recv and batch_isend_irecv around a ring.

On NCCL the transfers run on NCCL's stream and a Work's wait() makes the current stream wait for
them (the host does not block); on gloo send/recv block the host and wait() blocks it.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def prepare(inputs, params, device):
    rank, n = dist.get_rank(), dist.get_world_size()
    x = torch.from_numpy(inputs["x"]).to(device)
    return {"x": x, "buf": torch.zeros_like(x), "rank": rank, "n": n,
            "right": (rank + 1) % n, "left": (rank - 1) % n}


def barrier(state):
    dist.barrier()


def poison(state):
    state["buf"].zero_()  # what a read before the wait would see
    barrier(state)  # untimed, before every repeat: the ranks start together


def _ring(state):
    """Post this rank's send to the right and receive from the left; the handles to wait on."""
    ops = [dist.P2POp(dist.isend, state["x"], state["right"]), dist.P2POp(dist.irecv, state["buf"], state["left"])]
    return dist.batch_isend_irecv(ops)


def run_blocking(state):
    if state["n"] == 1:
        return {"received": state["x"].clone()}  # a ring of one: the message to itself is a copy
    if state["rank"] % 2 == 0:  # alternate the order, or every rank waits in send for a recv never posted
        dist.send(state["x"], state["right"])
        dist.recv(state["buf"], state["left"])
    else:
        dist.recv(state["buf"], state["left"])
        dist.send(state["x"], state["right"])
    return {"received": state["buf"]}


def run_nonblocking(state):
    if state["n"] == 1:
        return {"received": state["x"].clone()}
    for work in _ring(state):
        work.wait()
    return {"received": state["buf"]}


def run_read_before_wait(state):
    if state["n"] == 1:
        return {"received": state["x"].clone()}
    works = _ring(state)
    seen = state["buf"].to("cpu", copy=True)  # bug: read before the wait; the message may not be there yet
    for work in works:
        work.wait()
    return {"received": seen}
