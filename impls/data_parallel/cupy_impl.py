"""data_parallel in CuPy: no autograd, so backward is the hand-written one (impls/_shared/mlp.py via
impls/_shared/dp.py), and DDP is written out: cupyx.distributed's NCCL communicator, one process per GPU (no CPU path).

Parameters and gradients are flat device vectors; a layer's (W, b) are views. Compute runs on the current stream.
The bucketed variant all-reduces each bucket (a contiguous slice of the gradient vector) on its own communication
stream, after an event recorded once backward wrote the bucket's last layer; the compute stream waits for the
communication stream's last event before the SGD step reads the gradients, and the next step's backward is
enqueued behind it, so no bucket is overwritten while NCCL still reads it."""
from __future__ import annotations

import time

import cupy as cp

from harness.metrics import emit
from impls._shared import dp
from impls._shared.nccl import cupy_comm
from scenarios.data_parallel import BUCKETS, sizes


def _model(flat, comm=None):
    """The parameters as one flat device vector (a layer's W, b are views); with comm, rank 0's."""
    out = cp.asarray(flat)
    if comm is not None:
        comm.broadcast(out, root=0)  # every rank starts from rank 0's draw
    return out


def _grads(state, flat, x, t, accum=1, on_layer=None):
    """The hand-written forward and backward into state["grad"] (accum micro-batches, / accum)."""
    return dp.local_grad(cp, flat, state["dims"], x, t, state["grad"], accum, on_layer)


def _reducer(state):
    """on_layer for backward: once a bucket's last-written layer is enqueued, the communication stream
    waits for it and all-reduces the bucket in place; then wait() orders the compute stream after it."""
    comm, side, g = state["comm"], state["comm_stream"], state["grad"]
    first = {layer: g[a:b] for a, b, layer in state["buckets"]}  # views of the gradient vector

    def ready(layer):
        if layer in first:
            written = cp.cuda.Event()
            written.record(cp.cuda.get_current_stream())
            side.wait_event(written)  # NCCL reads the bucket only after backward wrote it
            comm.all_reduce(first[layer], first[layer], op="sum", stream=side)

    def wait():
        reduced = cp.cuda.Event()
        reduced.record(side)
        cp.cuda.get_current_stream().wait_event(reduced)  # the step reads the gradients after every bucket

    return ready, wait


def prepare(inputs, params, device):
    comm, dims = cupy_comm(), sizes(params)
    n = dp.offsets(dims)[1]
    return {"x": cp.asarray(inputs["x"]), "t": cp.asarray(inputs["t"]), "plain": _model(inputs["init"]),
            "synced": _model(inputs["init_own"], comm), "own": _model(inputs["init_own"]),
            "grad": cp.empty(n, dtype=cp.float32), "dims": dims, "lr": float(params["lr"]),
            "accum": int(params["accum"]), "comm": comm, "rank": int(params["rank"]),
            "world": int(params["world_size"]), "buckets": dp.buckets(dims, n // BUCKETS),
            "comm_stream": cp.cuda.Stream(non_blocking=True)}


def barrier(state):
    cp.cuda.get_current_stream().synchronize()
    state["comm"].barrier()


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _train(state, start, accum, mine, reduce=None):
    """`steps` SGD steps from start; reduce(flat, x, t) fills state["grad"] with the averaged gradient."""
    flat, reduce = start.copy(), reduce or (lambda flat, x, t: _grads(state, flat, x, t, accum))
    for k in range(state["x"].shape[0]):
        x, t = (dp.shard(a[k], state["rank"], state["world"]) if mine else a[k] for a in (state["x"], state["t"]))
        reduce(flat, x, t)
        flat -= state["lr"] * state["grad"]
    return {"params": flat}


def _emit(state, calls):
    emit("allreduce_bytes", state["grad"].nbytes)
    emit("buckets", calls)
    emit("grad_bytes", state["grad"].nbytes)


def run_single_process(state):
    return _train(state, state["plain"], 1, mine=False)


def run_grad_accumulation(state):
    return _train(state, state["plain"], state["accum"], mine=False)


def _naive(state, start):
    comm, spent = state["comm"], [0.0]

    def reduce(flat, x, t):
        g = _grads(state, flat, x, t)
        cp.cuda.get_current_stream().synchronize()  # backward done: what follows is the all-reduces alone
        t0 = time.perf_counter()
        for w, b in dp.unflatten(g, state["dims"]):  # one tensor at a time, after backward
            comm.all_reduce(w, w, op="sum")
            comm.all_reduce(b, b, op="sum")
        cp.cuda.get_current_stream().synchronize()
        spent[0] += time.perf_counter() - t0
        g /= state["world"]

    out = _train(state, start, 1, mine=True, reduce=reduce)
    emit("comm_s", spent[0] / state["x"].shape[0])
    _emit(state, 2 * (len(state["dims"]) - 1))
    return out


def run_ddp_naive(state):
    return _naive(state, state["synced"])


def run_ddp_bucketed_overlap(state):
    ready, wait = _reducer(state)

    def reduce(flat, x, t):
        _grads(state, flat, x, t, on_layer=ready)  # buckets leave as backward finishes them
        wait()
        state["grad"] /= state["world"]

    out = _train(state, state["synced"], 1, mine=True, reduce=reduce)
    _emit(state, len(state["buckets"]))
    return out


def run_ddp_accumulate_no_sync(state):
    def reduce(flat, x, t):
        g = _grads(state, flat, x, t, state["accum"])  # accum micro-batches, no collective
        state["comm"].all_reduce(g, g, op="sum")  # one per step, on the current stream
        g /= state["world"]

    out = _train(state, state["synced"], 1, mine=True, reduce=reduce)
    _emit(state, 1)
    return out


def run_unsynced_init(state):
    return _naive(state, state["own"])  # bug: each rank's own draw, never broadcast
