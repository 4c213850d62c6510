"""tensor_parallel in CuPy: Megatron's block written out (impls/_shared/tensor_parallel.py, by hand:
CuPy has no autograd), with cupyx.distributed's NCCL all-reduce and all-gather (no CPU path).

The NCCL calls are enqueued on the current stream and return at once: the next kernel on that stream
waits for them on the device, the host never does. The communicator was created before prepare.
"""
from __future__ import annotations

import cupy as cp

from harness.backends.nccl import cupy_comm, device_barrier
from impls._shared import tensor_parallel as tp
from scenarios.tensor_parallel import shard_of

NOT_EXPRESSIBLE = {"tp_sharded": "CuPy has no sharded array type or partitioner: only the explicit version"}


def prepare(inputs, params, device):
    rank, n = int(params["rank"]), int(params["world_size"])
    whole = {k: cp.asarray(v) for k, v in inputs.items()}
    s = shard_of(params, rank)
    shard = {"w1": cp.ascontiguousarray(whole["w1"][:, s]), "b1": whole["b1"][s].copy(),
             "w2": cp.ascontiguousarray(whole["w2"][s]), "b2": whole["b2"]}
    comm = cupy_comm()
    return {"whole": whole, "shard": shard, "rank": rank, "cols": s, "nccl": comm,
            "comm": tp.Collectives(n, lambda a: _all_reduce(comm, a), lambda a: _all_gather(comm, n, a))}


def barrier(state):
    device_barrier(state["nccl"])  # this rank's work is done, and every other rank's


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _all_reduce(comm, a):
    out = cp.empty_like(a)
    comm.all_reduce(cp.ascontiguousarray(a), out, op="sum")  # on the current stream
    return out


def _all_gather(comm, n, a):
    out = cp.empty((n,) + a.shape, dtype=a.dtype)
    comm.all_gather(cp.ascontiguousarray(a), out, a.size)  # rank j's block lands in out[j]
    return out


def _step(state, fn, *args):
    out = fn(cp, state["shard"], state["whole"]["x"], state["whole"]["target"], state["comm"], *args)
    state["comm"].emit()
    return out


def run_dense(state):
    w = state["whole"]
    state["comm"].start()
    out = tp.dense_step(cp, w, w["x"], w["target"], state["cols"])
    state["comm"].emit()  # none issued: the counts are zero, as counted
    return out


def run_tp_naive(state):
    return _step(state, tp.naive_step, state["rank"])


def run_tp_megatron(state):
    return _step(state, tp.megatron_step)


def run_row_parallel_without_reduce(state):
    return _step(state, tp.megatron_step, False)  # bug: g forgotten, y stays a partial sum
