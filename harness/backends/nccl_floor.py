"""The raw NCCL floor of the collectives scenario, measured in the rank processes themselves.

Every rank of the CuPy group calls measure() with the same points (a collective needs all of them):
each point's operation goes straight to cupy.cuda.nccl's NcclCommunicator (the one under cupyx's
NCCLBackend), out of place on raw buffers, on a stream of its own, timed with CUDA events; the
median of REPS repeats after one warm-up, every repeat started by a barrier as the rows' repeats are.
The parent keeps the slowest rank's time per point (harness/ranks.py, merge_ceilings), and the run's
machine ceilings hold it under scenarios/collectives.py's floor_key, as the raw cudaMemcpy rates.
all_to_all is grouped ncclSend/ncclRecv (NCCL has no alltoall call; they need NCCL 2.7); barrier
moves no bytes and has no floor.
"""
from __future__ import annotations

from typing import Any, Callable

from harness.backends.cuda_events import median_s
from impls._shared.nccl import cupy_comm

REPS = 5
SEND_RECV_SINCE = 2700  # NCCL_VERSION_CODE of 2.7.0: ncclSend / ncclRecv


def measure(cp: Any, points: list[dict[str, Any]], comm: Any = None, nccl: Any = None,
            reps: int = REPS) -> dict[str, dict[str, Any]]:
    """{"ceilings": {floor_key: seconds, "nccl_ranks": N}, "not_measured": {label: why}}. comm: the
    rank's cupyx NCCLBackend by default, or a raw NcclCommunicator (a one-rank one in the GPU test)."""
    from scenarios.collectives import count, floor_key

    if nccl is None:
        from cupy.cuda import nccl
    comm = cupy_comm() if comm is None else comm
    raw = getattr(comm, "_comm", comm)  # cupyx's NCCLBackend keeps the NcclCommunicator there
    n = raw.size()
    got: dict[str, Any] = {"nccl_ranks": float(n)}
    why: dict[str, str] = {}
    stream = cp.cuda.Stream(non_blocking=True)
    for p in points:
        key, op, label = floor_key(p), p["op"], p.get("label", floor_key(p))
        if op == "barrier":
            why[label] = "barrier moves no bytes: no floor"
            continue
        if op == "all_to_all" and nccl.get_version() < SEND_RECV_SINCE:
            why[label] = f"NOT measured: NCCL {nccl.get_version()} has no ncclSend/ncclRecv (2.7+)"
            continue
        c = count(p)
        x = cp.ones(c, dtype=p["dtype"])
        out = cp.empty({"all_gather": c * n, "reduce_scatter": c // n}.get(op, c), dtype=p["dtype"])
        got[key] = median_s(cp, stream, raw_call(nccl, raw, op, x, out, n, stream.ptr), reps,
                            before=getattr(comm, "barrier", None))  # cupyx's, host-side: ranks start together
        x = out = None  # freed before the next point's buffers
    cp.get_default_memory_pool().free_all_blocks()
    return {"ceilings": got, "not_measured": why}


def raw_call(nccl: Any, c: Any, op: str, x: Any, out: Any, n: int, stream: int) -> Callable[[], None]:
    """One NCCL call of `op` from x into out on the stream (pointers, counts and NCCL's dtype)."""
    dt = {"float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64}[x.dtype.name]
    s, r, k, add = x.data.ptr, out.data.ptr, x.size, nccl.NCCL_SUM

    def all_to_all() -> None:
        chunk = k // n  # chunk j goes to rank j; chunk j received came from rank j
        nccl.groupStart()
        try:
            for j in range(n):
                c.send(s + j * chunk * x.itemsize, chunk, dt, j, stream)
                c.recv(r + j * chunk * x.itemsize, chunk, dt, j, stream)
        finally:
            nccl.groupEnd()

    return {"broadcast": lambda: c.broadcast(s, r, k, dt, 0, stream),
            "reduce": lambda: c.reduce(s, r, k, dt, add, 0, stream),
            "all_reduce": lambda: c.allReduce(s, r, k, dt, add, stream),
            "all_gather": lambda: c.allGather(s, r, k, dt, stream),
            "reduce_scatter": lambda: c.reduceScatter(s, r, out.size, dt, add, stream),
            "all_to_all": all_to_all}[op]
