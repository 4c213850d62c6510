"""ranks in CuPy: cupyx.distributed's NCCL communicator, one process per GPU (no CPU path).

The communicator was created before prepare (harness/backends/dist.py). Its collectives are enqueued
on the current stream and return at once; barrier() is a host-side rendezvous through its TCP store.
"""
from __future__ import annotations

import cupy as cp

from impls._shared.nccl import cupy_comm


_OWN: dict[str, int] = {}  # module state: each process has its own copy, nothing is shared


def prepare(inputs, params, device):
    _OWN["rank"] = int(params["rank"])
    return {"data": cp.asarray(inputs["data"]), "rank": int(params["rank"]),
            "world": int(params["world_size"]), "comm": cupy_comm()}


def barrier(state):
    cp.cuda.get_current_stream().synchronize()  # this rank's work is done ...
    state["comm"].barrier()  # ... and so is every other rank's


def poison(state):
    barrier(state)  # the harness runs this untimed before every repeat: the ranks start together


def _squares(x):
    return (x * x).sum(axis=0)


def _mark():
    return cp.asarray(_OWN["rank"], dtype=cp.int64)


def _all_reduce(state, partial):
    partial = cp.ascontiguousarray(partial)
    state["comm"].all_reduce(partial, partial, op="sum")  # in place, on the current stream
    return partial


def run_one_process(state):
    return {"total": _squares(state["data"]), "mark": _mark()}


def run_by_rank(state):
    mine = state["data"][state["rank"]::state["world"]]  # the rank id selects the share
    return {"total": _all_reduce(state, _squares(mine)), "mark": _mark()}


def run_same_data_every_rank(state):
    partial = _squares(state["data"])  # bug: no share selected, every rank sums everything
    return {"total": _all_reduce(state, partial), "mark": _mark()}
