"""point_to_point in CuPy: cupyx.distributed's NCCL send/recv around a ring (no CPU path).

The NCCL calls run on a stream of their own; waiting is the current stream waiting on an event
recorded after them (the host does not block). Blocking send/recv are ordered by rank parity on that
stream, since each NCCL send waits on the device for its matching recv.
"""
from __future__ import annotations

import cupy as cp
from cupy.cuda import nccl

from harness.backends.nccl import cupy_comm, device_barrier



def prepare(inputs, params, device):
    rank, n = int(params["rank"]), int(params["world_size"])
    x = cp.asarray(inputs["x"])
    return {"x": x, "buf": cp.zeros_like(x), "rank": rank, "n": n, "comm": cupy_comm(),
            "stream": cp.cuda.Stream(non_blocking=True), "right": (rank + 1) % n, "left": (rank - 1) % n}


def barrier(state):
    device_barrier(state["comm"])  # untimed: an NCCL all-reduce of one element, then a wait


def poison(state):
    state["buf"].fill(0)  # what a read before the wait would see
    barrier(state)  # untimed, before every repeat: the ranks start together


def _ring(state):
    """Post this rank's send to the right and receive from the left as one NCCL group; the event to wait on."""
    state["stream"].wait_event(cp.cuda.get_current_stream().record())  # x and buf are ready
    nccl.groupStart()
    state["comm"].send(state["x"], state["right"], stream=state["stream"])
    state["comm"].recv(state["buf"], state["left"], stream=state["stream"])
    nccl.groupEnd()
    return state["stream"].record()


def run_blocking(state):
    if state["n"] == 1:
        return {"received": state["x"].copy()}  # a ring of one: the message to itself is a copy
    s, c = state["stream"], state["comm"]
    s.wait_event(cp.cuda.get_current_stream().record())
    if state["rank"] % 2 == 0:  # alternate the order, or every send waits for a recv never posted
        c.send(state["x"], state["right"], stream=s)
        c.recv(state["buf"], state["left"], stream=s)
    else:
        c.recv(state["buf"], state["left"], stream=s)
        c.send(state["x"], state["right"], stream=s)
    cp.cuda.get_current_stream().wait_event(s.record())
    return {"received": state["buf"]}


def run_nonblocking(state):
    if state["n"] == 1:
        return {"received": state["x"].copy()}
    cp.cuda.get_current_stream().wait_event(_ring(state))  # the wait: on the device, not the host
    return {"received": state["buf"]}


def run_read_before_wait(state):
    if state["n"] == 1:
        return {"received": state["x"].copy()}
    done = _ring(state)
    seen = state["buf"].copy()  # bug: copied on the current stream before it waits for the receive
    cp.cuda.get_current_stream().wait_event(done)
    return {"received": seen}
