"""data_parallel in CuPy: no autograd, so backward is the hand-written one (scenarios/_models/mlp.py via
impls/_shared/dp.py), and DDP is written out: cupyx.distributed's NCCL communicator, one process per GPU (no CPU path).

Parameters and gradients are flat device vectors; a layer's (W, b) are views. Compute runs on the current stream.
The bucketed variants all-reduce each of DDP's buckets (impls/_shared/dp.py: a contiguous slice of the gradient
vector) on a communication stream, after an event recorded once backward wrote the bucket's last tensor; the
compute stream waits for the communication stream's last event before the SGD step reads the gradients, and the
next step's backward is enqueued behind it, so no bucket is overwritten while NCCL still reads it. Every
all-reduce goes through dp.Counted, which counts the bytes and calls."""
from __future__ import annotations

import cupy as cp

from harness.measure.metrics import emit
from impls._shared import dp
from harness.backends.nccl import cupy_comm, device_barrier
from scenarios.data_parallel import sizes


def _model(flat, comm=None):
    """The parameters as one flat device vector (a layer's W, b are views); with comm, rank 0's."""
    out = cp.asarray(flat)
    if comm is not None:
        comm.broadcast(out, root=0)  # every rank starts from rank 0's draw
    return out


def _grads(state, flat, x, t, accum=1, on_ready=None):
    """The hand-written forward and backward into state["grad"] (accum micro-batches, / accum)."""
    return dp.local_grad(cp, flat, state["dims"], x, t, state["grad"], accum, on_ready)


def _reducer(state):
    """on_ready for backward: once a bucket's last-ready tensor is enqueued, the communication stream
    waits for it and all-reduces the bucket in place; then wait() orders the compute stream after it."""
    comm, side, g = state["comm"], state["comm_stream"], state["grad"]
    last = {j: g[a:b] for a, b, j in state["buckets"]}  # views of the gradient vector

    def ready(j):
        if j in last:
            written = cp.cuda.Event(disable_timing=True)
            written.record(cp.cuda.get_current_stream())
            side.wait_event(written)  # NCCL reads the bucket only after backward wrote it
            comm.all_reduce(last[j], last[j], op="sum", stream=side)

    def wait():
        reduced = cp.cuda.Event(disable_timing=True)
        reduced.record(side)
        cp.cuda.get_current_stream().wait_event(reduced)  # the step reads the gradients after every bucket

    return ready, wait


def prepare(inputs, params, device):
    comm, dims = cupy_comm(), sizes(params)
    n = dp.offsets(dims)[1]
    return {"x": cp.asarray(inputs["x"]), "t": cp.asarray(inputs["t"]), "plain": _model(inputs["init"]),
            "synced": _model(inputs["init_own"], comm), "own": _model(inputs["init_own"]),
            "grad": cp.empty(n, dtype=cp.float32), "dims": dims, "lr": float(params["lr"]),
            "accum": int(params["accum"]), "comm": dp.Counted(comm), "rank": int(params["rank"]),
            "world": int(params["world_size"]), "buckets": dp.buckets(dims, 4),
            "comm_stream": cp.cuda.Stream(non_blocking=True)}


def barrier(state):
    device_barrier(state["comm"].comm)  # the raw communicator: the barrier's all-reduce is no gradient traffic


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


def _emit(state):
    """Per step: the bytes and all-reduce calls dp.Counted saw over the call (then reset)."""
    dp.emit_per_step(state["x"].shape[0], *state["comm"].take(), state["grad"].nbytes)


def _comm_seconds(state):
    """The naive step's all-reduces alone (one per gradient tensor, on the current stream), synchronized
    before and after: the median of 5 after one warm-up, measured once, in the variant's first (untimed) call."""
    if "comm_s" not in state:
        bufs = [a for layer in dp.unflatten(cp.zeros_like(state["grad"]), state["dims"]) for a in layer]
        s = cp.cuda.get_current_stream()

        def run():
            for a in bufs:
                state["comm"].all_reduce(a, a, op="sum")
            s.synchronize()
        state["comm_s"] = dp.median_seconds(s.synchronize, run)
        state["comm"].take()  # not the step's traffic
    return state["comm_s"]


def run_single_process(state):
    return _train(state, state["plain"], 1, mine=False)


def run_grad_accumulation(state):
    return _train(state, state["plain"], state["accum"], mine=False)


def _naive(state, start):
    def reduce(flat, x, t):
        g = _grads(state, flat, x, t)
        for a in (a for layer in dp.unflatten(g, state["dims"]) for a in layer):  # one tensor at a time, after
            state["comm"].all_reduce(a, a, op="sum")  # backward, on the current stream: no overlap
        g /= state["world"]

    out = _train(state, start, 1, mine=True, reduce=reduce)
    _emit(state)
    return out


def run_ddp_naive(state):
    emit("comm_s", _comm_seconds(state))
    return _naive(state, state["synced"])


def run_ddp_bucketed_overlap(state, accum=1):
    ready, wait = _reducer(state)

    def reduce(flat, x, t):
        _grads(state, flat, x, t, accum, on_ready=ready)  # the last micro-batch's buckets leave as backward ends each
        wait()
        state["grad"] /= state["world"]

    out = _train(state, state["synced"], 1, mine=True, reduce=reduce)
    _emit(state)
    return out


def run_ddp_accumulate_no_sync(state):
    # accum micro-batches, only the last one's buckets all-reduced
    return run_ddp_bucketed_overlap(state, state["accum"])


def run_unsynced_init(state):
    return _naive(state, state["own"])  # bug: each rank's own draw, never broadcast
