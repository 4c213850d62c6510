"""zero in CuPy: the stages written out (impls/_shared/zero.py) on cupyx.distributed's NCCL communicator, one
process per GPU (no CPU path). This is where every byte that ZeRO moves is visible.

Compute and collectives run on the current stream, in order: a reduce-scatter reads a layer's gradient only
after backward wrote it, Adam reads a chunk only after its reduce-scatter, and the next layer's matmul reads a
gathered layer only after its all-gather. NCCL works in place on a layer's padded segment (recv = send + rank x
count). A zero3 layer gathered for forward or backward is a temporary: its pool block is reused once the
Python reference drops, and the stream order makes that safe. Memory: the pool's used bytes, sampled."""
from __future__ import annotations

import cupy as cp

from impls._shared import dp
from impls._shared import zero as Z
from harness.backends.nccl import cupy_comm, device_barrier
from scenarios.zero import sizes


class _Comm:
    """zero.py's collectives on NCCL, on the current stream."""

    def __init__(self, comm, rank):
        self.comm, self.rank = comm, rank

    def all_reduce(self, buf):
        self.comm.all_reduce(buf, buf, op="sum")

    def reduce_scatter(self, src, dst):
        self.comm.reduce_scatter(src, dst, dst.size, op="sum")

    def all_gather(self, src, dst):
        self.comm.all_gather(src, dst, src.size)


def prepare(inputs, params, device):
    rank, world = int(params["rank"]), int(params["world_size"])
    return {"x": [cp.asarray(dp.shard(a, rank, world)) for a in inputs["x"]],
            "t": [cp.asarray(dp.shard(a, rank, world)) for a in inputs["t"]],
            "init": cp.asarray(inputs["init"]), "lay": Z.Layout(sizes(params), world), "lr": float(params["lr"]),
            "eps": float(params["eps"]), "comm": Z.Counted(_Comm(cupy_comm(), rank), world), "rank": rank}


def barrier(state):
    device_barrier(state["comm"].comm.comm)  # untimed: an NCCL all-reduce of one element, then a wait


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _train(state, stage):
    """`steps` Adam steps of one stage from the initial parameters; emits what the rank held and sent (counted by
    the comm every NCCL call goes through). The harness reads the output back (gathered, unpadded) after the run."""
    pool, lay = cp.get_default_memory_pool(), state["lay"]
    base, peak = pool.used_bytes(), [0]

    def probe():
        peak[0] = max(peak[0], pool.used_bytes())

    st, comm = Z.init_state(cp, stage, state["init"], lay, state["rank"]), state["comm"]
    before = dict(comm.sent)
    for x, t in zip(state["x"], state["t"]):
        Z.step(cp, stage, st, lay, x, t, comm, state["lr"], state["eps"], probe)
    Z.report(Z.held(st), {k: (comm.sent[k] - before[k]) / len(state["x"]) for k in Z.KINDS}, peak[0] - base)
    return {"params": Z.Readback(lambda: Z.gather_params(cp, stage, st, lay, comm).get())}


def run_ddp(state):
    return _train(state, "ddp")


def run_zero1(state):
    return _train(state, "zero1")


def run_zero2(state):
    return _train(state, "zero2")


def run_zero3(state):
    return _train(state, "zero3")
