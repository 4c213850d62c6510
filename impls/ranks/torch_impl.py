"""ranks in PyTorch: torch.distributed, one process per device (gloo on the CPU, NCCL on GPUs).

The process group was joined before prepare (harness/backends/dist.py, from torchrun's environment).
On NCCL a collective is enqueued on the current stream and returns at once; on gloo it blocks the host.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

_OWN: dict[str, object] = {}  # module state: each process has its own copy, nothing is shared


def prepare(inputs, params, device):
    _OWN["rank"] = dist.get_rank()
    _OWN["mark"] = torch.tensor(_OWN["rank"], dtype=torch.int64, device=device)  # the id, kept on the device
    return {"data": torch.from_numpy(inputs["data"]).to(device), "rank": dist.get_rank(),
            "world": dist.get_world_size()}


def barrier(state):
    dist.barrier()  # every rank has finished its previous work before any starts the next repeat


def poison(state):
    barrier(state)  # the harness runs this untimed before every repeat: the ranks start together


def _squares(x):
    return (x * x).sum(dim=0)  # two kernels: the squares written out, then read back by the column sum


def _mark():
    return _OWN["mark"]


def _all_reduce(state, partial):
    dist.all_reduce(partial, op=dist.ReduceOp.SUM)  # in place; every rank ends with the sum
    return partial


def run_one_process(state):
    return {"total": _squares(state["data"]), "mark": _mark()}


def run_by_rank(state):
    mine = state["data"][state["rank"]::state["world"]]  # the rank id selects the share
    return {"total": _all_reduce(state, _squares(mine)), "mark": _mark()}


def run_same_data_every_rank(state):
    partial = _squares(state["data"])  # bug: no share selected, every rank sums everything
    return {"total": _all_reduce(state, partial), "mark": _mark()}
