"""data_parallel in CuPy: no autograd, so backward is the hand-written one (impls/_shared/mlp.py via
impls/_shared/dp.py), and DDP is written out: cupyx.distributed's NCCL communicator, one process per
GPU (no CPU path).

Parameters and gradients are flat device vectors; a layer's (W, b) are views. Compute runs on the
current stream. The bucketed variant all-reduces each bucket (a contiguous slice of the gradient
vector) on its own communication stream, after an event recorded once backward wrote the bucket's
last layer; the compute stream waits for the communication stream's last event before the SGD step
reads the gradients, and the next step's backward is enqueued behind it, so no bucket is overwritten
while NCCL still reads it.
"""
from __future__ import annotations

import time

import cupy as cp

from harness.backends.dist import cupy_comm
from harness.metrics import emit
from impls._shared import dp
from scenarios.data_parallel import BUCKETS, sizes


def prepare(inputs, params, device):
    comm, dims = cupy_comm(), sizes(params)
    synced = cp.asarray(inputs["init_own"])
    comm.broadcast(synced, root=0)  # every rank starts from rank 0's draw
    n = dp.offsets(dims)[1]
    return {"x": cp.asarray(inputs["x"]), "t": cp.asarray(inputs["t"]), "plain": cp.asarray(inputs["init"]),
            "synced": synced, "own": cp.asarray(inputs["init_own"]), "grad": cp.empty(n, dtype=cp.float32),
            "dims": dims, "lr": float(params["lr"]), "accum": int(params["accum"]), "comm": comm,
            "rank": int(params["rank"]), "world": int(params["world_size"]),
            "buckets": dp.buckets(dims, n // BUCKETS), "comm_stream": cp.cuda.Stream(non_blocking=True)}


def barrier(state):
    cp.cuda.get_current_stream().synchronize()
    state["comm"].barrier()


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _train(state, start, accum, mine, reduce=None):
    """`steps` SGD steps from start; reduce(grad) turns this rank's gradient into the average."""
    flat, g = start.copy(), state["grad"]
    for k in range(state["x"].shape[0]):
        x, t = state["x"][k], state["t"][k]
        if mine:
            x, t = dp.shard(x, state["rank"], state["world"]), dp.shard(t, state["rank"], state["world"])
        if reduce is None:
            dp.local_grad(cp, flat, state["dims"], x, t, g, accum)
        else:
            reduce(flat, x, t, g)
        flat -= state["lr"] * g
    return {"params": flat}


def _emit(state, bytes_, calls):
    emit("allreduce_bytes", bytes_)
    emit("buckets", calls)
    emit("grad_bytes", state["grad"].nbytes)


def run_single_process(state):
    return _train(state, state["plain"], 1, mine=False)


def run_grad_accumulation(state):
    return _train(state, state["plain"], state["accum"], mine=False)


def _naive(state, start):
    comm, spent = state["comm"], [0.0]

    def reduce(flat, x, t, g):
        dp.local_grad(cp, flat, state["dims"], x, t, g)
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
    _emit(state, state["grad"].nbytes, 2 * (len(state["dims"]) - 1))
    return out


def run_ddp_naive(state):
    return _naive(state, state["synced"])


def run_ddp_bucketed_overlap(state):
    comm, side = state["comm"], state["comm_stream"]
    first = {layer: (a, b) for a, b, layer in state["buckets"]}

    def reduce(flat, x, t, g):
        def ready(layer):  # backward just enqueued this layer's gradient on the compute stream
            if layer in first:
                a, b = first[layer]
                done = cp.cuda.Event()
                done.record(cp.cuda.get_current_stream())
                side.wait_event(done)  # NCCL reads the bucket only after backward wrote it
                comm.all_reduce(g[a:b], g[a:b], op="sum", stream=side)
        dp.local_grad(cp, flat, state["dims"], x, t, g, on_layer=ready)
        reduced = cp.cuda.Event()
        reduced.record(side)
        cp.cuda.get_current_stream().wait_event(reduced)  # the step reads the gradients after every bucket
        g /= state["world"]

    out = _train(state, state["synced"], 1, mine=True, reduce=reduce)
    _emit(state, state["grad"].nbytes, len(state["buckets"]))
    return out


def run_ddp_accumulate_no_sync(state):
    comm = state["comm"]

    def reduce(flat, x, t, g):
        dp.local_grad(cp, flat, state["dims"], x, t, g, state["accum"])  # accum micro-batches, no collective
        comm.all_reduce(g, g, op="sum")  # one per step, on the current stream
        g /= state["world"]

    out = _train(state, state["synced"], 1, mine=True, reduce=reduce)
    _emit(state, state["grad"].nbytes, 1)
    return out


def run_unsynced_init(state):
    return _naive(state, state["own"])  # bug: each rank's own draw, never broadcast
