"""collectives in PyTorch: torch.distributed (NCCL on GPUs, gloo on the CPU), out of place and in place.

Out of place: all_gather_into_tensor, reduce_scatter_tensor and all_to_all_single write an output of
their own; broadcast, reduce and all_reduce take one tensor only, so their out-of-place form is a copy
into the output, then the call on it (as torch's functional collectives do: a clone, then the call).
In place: nccl-tests' layout (all_gather's input is the rank's chunk of its output, reduce_scatter's
output the rank's chunk of its input); NCCL has no in-place all_to_all.

On NCCL each call is enqueued on the current stream and returns at once; on gloo it blocks the host.
An in-place reduction changes its own input: the calls of a sample take the next of slots(params)
buffers, which poison refills untimed, so the sample's last output is one call's.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from harness.measure.metrics import emit
from scenarios import collectives as C

# torch 2.13 renamed the out-of-place pair (*_into_tensor / *_tensor are deprecated); older torch has only those.
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
LACKS = C.NCCL_NO_IN_PLACE  # torch and CuPy call NCCL


def cannot_run_at(variant, params):
    return C.in_place_why(variant, params, LACKS)


def prepare(inputs, params, device):
    op, n, r = params["op"], dist.get_world_size(), dist.get_rank()
    x = torch.from_numpy(inputs["x"]).to(device)
    size, take, give = C.in_place(op, x.numel(), n, r)
    fill = torch.zeros(size, dtype=x.dtype, device=device)
    fill[take] = x  # nccl-tests' layout; the rest zeros, which no output element equals
    return {"x": x, "out": torch.empty(C.out_count(op, x.numel(), n), dtype=x.dtype, device=device), "op": op,
            "bytes": C.nbytes(params), "factor": C.bus_factor(op, n), "fill": fill, "take": take, "give": give,
            "ring": [torch.empty_like(fill) for _ in range(C.slots(params))], "i": 0, "rank": r,
            "zeros": torch.zeros(C.out_count(op, x.numel(), n), dtype=x.dtype, device=device)}


def barrier(state):
    dist.barrier()


def poison(state):
    state["out"].zero_()
    for b in state["ring"]:
        b.copy_(state["fill"])
    state["i"] = 0
    barrier(state)  # untimed, before every repeat: the ranks start together


def _broadcast(s, src, dst):
    if src is not dst:
        dst.copy_(src)  # no out-of-place call
    dist.broadcast(dst, src=0)


def _reduce(s, src, dst):
    if src is not dst:
        dst.copy_(src)  # no out-of-place call
    dist.reduce(dst, dst=0, op=dist.ReduceOp.SUM)


def _all_reduce(s, src, dst):
    if src is not dst:
        dst.copy_(src)  # no out-of-place call
    dist.all_reduce(dst, op=dist.ReduceOp.SUM)


def _all_gather(s, src, dst):
    _ALL_GATHER(dst, src)


def _reduce_scatter(s, src, dst):
    _REDUCE_SCATTER(dst, src, op=dist.ReduceOp.SUM)


def _all_to_all(s, src, dst):
    dist.all_to_all_single(dst, src)  # chunk j of src goes to rank j


OPS = {"broadcast": _broadcast, "reduce": _reduce, "all_reduce": _all_reduce, "all_gather": _all_gather,
       "reduce_scatter": _reduce_scatter, "all_to_all": _all_to_all}


def _emit(state):
    if state["op"] != "barrier":  # no bytes, no bandwidth
        emit("bytes", state["bytes"])
        emit("bus_factor", state["factor"])
        emit("all_reduce_traffic", 0.0)


def _reported(state, out):
    if state["op"] == "reduce" and state["rank"] != 0:  # unspecified there: zeros made in prepare, and the result
        return {"out": state["zeros"], "result": out}
    return {"out": out}


def run_out_of_place(state):
    _emit(state)
    if state["op"] == "barrier":
        dist.barrier()  # NCCL: an all-reduce of one element, then the host waits for it; gloo: its own
        return {"out": state["x"]}
    OPS[state["op"]](state, state["x"], state["out"])
    return _reported(state, state["out"])


def run_in_place(state):
    _emit(state)
    buf = state["ring"][state["i"] % len(state["ring"])]
    state["i"] += 1
    src = buf[state["take"]]
    dst = src if state["take"] == state["give"] else buf[state["give"]]  # one tensor: the call is in place
    OPS[state["op"]](state, src, dst)
    return _reported(state, dst)
