"""collectives in PyTorch: torch.distributed (NCCL on GPUs, gloo on the CPU), out of place where torch
has a call for it (all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single).

On NCCL each call is enqueued on the current stream and returns at once; on gloo it blocks the host.
broadcast, reduce and all_reduce work in place: prepare keeps a buffer that poison refills, untimed.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from harness.metrics import emit
from scenarios.collectives import bus_factor, nbytes

# torch 2.13 renamed the out-of-place pair (*_into_tensor / *_tensor are deprecated); older torch has only those.
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def prepare(inputs, params, device):
    x = torch.from_numpy(inputs["x"]).to(device)
    n = dist.get_world_size()
    out = {"all_gather": torch.empty(n * x.numel(), dtype=x.dtype, device=device),
           "reduce_scatter": torch.empty(x.numel() // n, dtype=x.dtype, device=device),
           "all_to_all": torch.empty_like(x)}.get(params["op"], torch.empty_like(x))
    return {"x": x, "out": out, "op": params["op"], "rank": dist.get_rank(),
            "bytes": nbytes(params), "factor": bus_factor(params["op"], n)}


def barrier(state):
    dist.barrier()


def poison(state):
    if state["op"] in ("broadcast", "reduce", "all_reduce"):
        state["out"].copy_(state["x"])  # the in-place calls start from this rank's input
    barrier(state)  # untimed, before every repeat: the ranks start together


def _broadcast(s):
    dist.broadcast(s["out"], src=0)
    return s["out"]


def _reduce(s):
    dist.reduce(s["out"], dst=0, op=dist.ReduceOp.SUM)
    return s["out"] if s["rank"] == 0 else torch.zeros_like(s["out"])  # non-roots: unspecified


def _all_reduce(s):
    dist.all_reduce(s["out"], op=dist.ReduceOp.SUM)
    return s["out"]


def _all_gather(s):
    _ALL_GATHER(s["out"], s["x"])
    return s["out"]


def _reduce_scatter(s):
    _REDUCE_SCATTER(s["out"], s["x"], op=dist.ReduceOp.SUM)
    return s["out"]


def _all_to_all(s):
    dist.all_to_all_single(s["out"], s["x"])  # chunk j of x goes to rank j
    return s["out"]


def _barrier(s):
    dist.barrier()
    return s["x"]


OPS = {"broadcast": _broadcast, "reduce": _reduce, "all_reduce": _all_reduce, "all_gather": _all_gather,
       "reduce_scatter": _reduce_scatter, "all_to_all": _all_to_all, "barrier": _barrier}


def run_collective(state):
    emit("bytes", state["bytes"])
    emit("bus_factor", state["factor"])
    return {"out": OPS[state["op"]](state)}
