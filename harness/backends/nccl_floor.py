"""The raw NCCL floor of the collectives scenario, measured in the rank processes themselves.

Every rank of the CuPy group calls measure() with the same points (a collective needs all of them):
each point's operation goes straight to cupy.cuda.nccl's NcclCommunicator (the one under cupyx's
NCCLBackend) on raw buffers, out of place and in place (nccl-tests' offsets), on a stream of its own,
timed on the rows' clock: after a barrier and a full device sync, `calls` back-to-back calls, a full
device sync again, the host's wall time divided by `calls` (scenarios/collectives.py calls: nccl-tests'
-n 20); one such sample as a warm-up, the median of REPS samples. The parent keeps the mean over ranks
per point, as the rows do (harness/workers/ranks.py merge_ceilings), and the run's machine ceilings hold it
under scenarios/collectives.py's floor_key, as the raw cudaMemcpy rates. all_to_all is grouped
ncclSend/ncclRecv (NCCL has no alltoall call; they need NCCL 2.7) and has no in-place form; barrier
moves no bytes and has no floor. The buffers hold zeros: an in-place reduction's repeated calls leave
them as they are, and NCCL's time does not depend on the values.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from harness.backends.base import RankCeilings, wall
from harness.backends.nccl import cupy_comm
from scenarios.collectives import NCCL_NO_IN_PLACE, calls, count, floor_key, in_place
from scenarios.spec import Params

REPS = 5
SEND_RECV_SINCE = 2700  # NCCL_VERSION_CODE of 2.7.0: ncclSend / ncclRecv


def per_call_s(sync: Callable[[], None], fn: Callable[[], None], calls: int, reps: int = REPS,
               before: Callable[[], None] | None = None, clock: Callable[[], float] = wall) -> float:
    """The median over `reps` samples (after one untimed) of a sample's wall time per call: `before`
    (untimed), sync, `calls` calls of fn back to back, sync."""
    times = []
    for i in range(reps + 1):
        if before is not None:
            before()
        sync()
        t0 = clock()
        for _ in range(calls):
            fn()
        sync()
        if i:
            times.append((clock() - t0) / calls)
    return float(np.median(times))


def measure(cp: Any, points: list[Params], comm: Any = None, nccl: Any = None,
            reps: int = REPS, clock: Callable[[], float] = wall) -> RankCeilings:
    """{"ceilings": {floor_key: seconds per call, "nccl_ranks": N}, "not_measured": {label: why}}. comm:
    the rank's cupyx NCCLBackend by default, or a raw NcclCommunicator (a one-rank one in the GPU test)."""
    if nccl is None:
        from cupy.cuda import nccl
    comm = cupy_comm() if comm is None else comm
    raw = getattr(comm, "_comm", comm)  # cupyx's NCCLBackend keeps the NcclCommunicator there
    n, r = raw.size(), raw.rank_id()
    got: dict[str, float] = {"nccl_ranks": float(n)}
    why: dict[str, str] = {}
    stream = cp.cuda.Stream(non_blocking=True)
    sync = cp.cuda.Device().synchronize  # the rows' full sync: every stream of the device
    for p in points:
        op, label = p["op"], p.get("label", floor_key(p))
        if op == "barrier":
            why[label] = "barrier moves no bytes: no floor"
            continue
        if op == "all_to_all" and nccl.get_version() < SEND_RECV_SINCE:
            why[label] = f"NOT measured: NCCL {nccl.get_version()} has no ncclSend/ncclRecv (2.7+)"
            continue
        c = count(p)
        x = cp.zeros(c, dtype=p["dtype"])
        out = cp.zeros({"all_gather": c * n, "reduce_scatter": c // n}.get(op, c), dtype=p["dtype"])
        k = c // n if op == "reduce_scatter" else c  # NCCL's count: reduce_scatter's is the receive count
        call = raw_call(nccl, raw, op, (x.data.ptr, out.data.ptr), x, k, n, stream.ptr)
        got[floor_key(p)] = per_call_s(sync, call, calls(p), reps, getattr(comm, "barrier", None), clock)
        x = out = None  # freed before the next buffers
        if op in NCCL_NO_IN_PLACE:
            why[f"{label} in place"] = NCCL_NO_IN_PLACE[op]
            continue
        size, take, give = in_place(op, c, n, r)
        buf = cp.zeros(size, dtype=p["dtype"])
        at = lambda s: buf.data.ptr + (s.start or 0) * buf.itemsize  # noqa: E731 - a slice's first byte
        call = raw_call(nccl, raw, op, (at(take), at(give)), buf, k, n, stream.ptr)
        got[floor_key(p, in_place=True)] = per_call_s(sync, call, calls(p), reps, getattr(comm, "barrier", None),
                                                      clock)
        buf = None
    cp.get_default_memory_pool().free_all_blocks()
    return {"ceilings": got, "not_measured": why}


def raw_call(nccl: Any, c: Any, op: str, ptrs: tuple[int, int], like: Any, k: int, n: int,
             stream: int) -> Callable[[], None]:
    """One NCCL call of `op` with count k from the send pointer into the receive pointer on the stream;
    `like` gives NCCL's dtype and the element size."""
    dt = {"float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64}[like.dtype.name]
    (s, r), add, item = ptrs, nccl.NCCL_SUM, like.itemsize

    def all_to_all() -> None:
        chunk = k // n  # chunk j goes to rank j; chunk j received came from rank j
        nccl.groupStart()
        try:
            for j in range(n):
                c.send(s + j * chunk * item, chunk, dt, j, stream)
                c.recv(r + j * chunk * item, chunk, dt, j, stream)
        finally:
            nccl.groupEnd()

    return {"broadcast": lambda: c.broadcast(s, r, k, dt, 0, stream),
            "reduce": lambda: c.reduce(s, r, k, dt, add, 0, stream),
            "all_reduce": lambda: c.allReduce(s, r, k, dt, add, stream),
            "all_gather": lambda: c.allGather(s, r, k, dt, stream),
            "reduce_scatter": lambda: c.reduceScatter(s, r, k, dt, add, stream),
            "all_to_all": all_to_all}[op]
