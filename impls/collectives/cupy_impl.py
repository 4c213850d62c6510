"""collectives in CuPy: cupyx.distributed's NCCLBackend, out of place and in place.

Out of place: NCCL's own calls take a send and a receive buffer; NCCLBackend.broadcast takes one
array only, so out-of-place broadcast goes to the NcclCommunicator under it (cupy.cuda.nccl), which
has ncclBroadcast's two. all_to_all is grouped send/recv (NCCL has no alltoall call). In place:
nccl-tests' layout (all_gather's input is the rank's chunk of its output, reduce_scatter's output the
rank's chunk of its input); NCCL has no in-place all_to_all.

Each call is enqueued on the current stream and returns at once; the barrier row's NCCLBackend.barrier
is host-side (cupyx's TCP store), while the untimed barrier before each repeat is an NCCL all-reduce of
one element and a wait (harness/backends/nccl.py device_barrier). An in-place
reduction changes its own input: the calls of a sample take the next of slots(params) buffers, which
poison refills untimed, so the sample's last output is one call's.
"""
from __future__ import annotations

import cupy as cp
from cupy.cuda import nccl

from harness.measure.metrics import emit
from harness.backends.nccl import cupy_comm, device_barrier
from scenarios import collectives as C

LACKS = C.NCCL_NO_IN_PLACE  # torch and CuPy call NCCL


def cannot_run_at(variant, params):
    return C.in_place_why(variant, params, LACKS)


def prepare(inputs, params, device):
    op, n, r = params["op"], int(params["world_size"]), int(params["rank"])
    x = cp.asarray(inputs["x"])
    size, take, give = C.in_place(op, x.size, n, r)
    fill = cp.zeros(size, dtype=x.dtype)
    fill[take] = x  # nccl-tests' layout; the rest zeros, which no output element equals
    return {"x": x, "out": cp.empty(C.out_count(op, x.size, n), dtype=x.dtype), "op": op, "comm": cupy_comm(),
            "n": n, "bytes": C.nbytes(params), "factor": C.bus_factor(op, n), "fill": fill, "take": take,
            "give": give, "ring": [cp.empty_like(fill) for _ in range(C.slots(params))], "i": 0, "rank": r,
            "zeros": cp.zeros(C.out_count(op, x.size, n), dtype=x.dtype)}


def barrier(state):
    device_barrier(state["comm"])  # untimed: an NCCL all-reduce of one element, then a wait


def poison(state):
    state["out"][...] = 0
    for b in state["ring"]:
        b[...] = state["fill"]
    state["i"] = 0
    barrier(state)  # untimed, before every repeat: the ranks start together


def _broadcast(s, src, dst):
    if src is dst:
        s["comm"].broadcast(dst, root=0)
        return
    dt = {"float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64}[src.dtype.name]  # NCCLBackend: one array
    s["comm"]._comm.broadcast(src.data.ptr, dst.data.ptr, src.size, dt, 0, cp.cuda.get_current_stream().ptr)


def _reduce(s, src, dst):
    s["comm"].reduce(src, dst, root=0, op="sum")


def _all_reduce(s, src, dst):
    s["comm"].all_reduce(src, dst, op="sum")


def _all_gather(s, src, dst):
    s["comm"].all_gather(src, dst, src.size)


def _reduce_scatter(s, src, dst):
    s["comm"].reduce_scatter(src, dst, dst.size, op="sum")


def _all_to_all(s, src, dst):
    c = src.size // s["n"]  # row j goes to rank j; row j of the result came from rank j
    s["comm"].all_to_all(src.reshape(s["n"], c), dst.reshape(s["n"], c))


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
        state["comm"].barrier()  # host-side, through cupyx's TCP store: no device work
        return {"out": state["x"]}
    OPS[state["op"]](state, state["x"], state["out"])
    return _reported(state, state["out"])


def run_in_place(state):
    _emit(state)
    buf = state["ring"][state["i"] % len(state["ring"])]
    state["i"] += 1
    src = buf[state["take"]]
    dst = src if state["take"] == state["give"] else buf[state["give"]]  # one array: the call is in place
    OPS[state["op"]](state, src, dst)
    return _reported(state, dst)
