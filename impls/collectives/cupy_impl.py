"""collectives in CuPy: cupyx.distributed's NCCLBackend, out of place (NCCL's own calls take a send
and a receive buffer; all_to_all is grouped send/recv, NCCL having no alltoall call).

Each call is enqueued on the current stream and returns at once; barrier() is host-side.
broadcast works in place: prepare keeps a buffer that poison refills, untimed.
"""
from __future__ import annotations

import cupy as cp

from harness.metrics import emit
from impls._shared.nccl import cupy_comm
from scenarios.collectives import bus_factor, nbytes


def prepare(inputs, params, device):
    x = cp.asarray(inputs["x"])
    n = int(params["world_size"])
    out = {"all_gather": cp.empty(n * x.size, dtype=x.dtype),
           "reduce_scatter": cp.empty(x.size // n, dtype=x.dtype)}.get(params["op"], cp.empty_like(x))
    return {"x": x, "out": out, "op": params["op"], "rank": int(params["rank"]), "n": n, "comm": cupy_comm(),
            "bytes": nbytes(params), "factor": bus_factor(params["op"], n)}


def barrier(state):
    cp.cuda.get_current_stream().synchronize()
    state["comm"].barrier()


def poison(state):
    if state["op"] == "broadcast":
        state["out"][...] = state["x"]  # the in-place call starts from this rank's input
    barrier(state)  # untimed, before every repeat: the ranks start together


def _broadcast(s):
    s["comm"].broadcast(s["out"], root=0)
    return s["out"]


def _reduce(s):
    s["comm"].reduce(s["x"], s["out"], root=0, op="sum")
    return s["out"] if s["rank"] == 0 else cp.zeros_like(s["out"])  # non-roots: unspecified


def _all_reduce(s):
    s["comm"].all_reduce(s["x"], s["out"], op="sum")
    return s["out"]


def _all_gather(s):
    s["comm"].all_gather(s["x"], s["out"], s["x"].size)
    return s["out"]


def _reduce_scatter(s):
    s["comm"].reduce_scatter(s["x"], s["out"], s["out"].size, op="sum")
    return s["out"]


def _all_to_all(s):
    c = s["x"].size // s["n"]  # row j goes to rank j; row j of the result came from rank j
    s["comm"].all_to_all(s["x"].reshape(s["n"], c), s["out"].reshape(s["n"], c))
    return s["out"]


def _barrier(s):
    s["comm"].barrier()
    return s["x"]


OPS = {"broadcast": _broadcast, "reduce": _reduce, "all_reduce": _all_reduce, "all_gather": _all_gather,
       "reduce_scatter": _reduce_scatter, "all_to_all": _all_to_all, "barrier": _barrier}


def run_collective(state):
    emit("bytes", state["bytes"])
    emit("bus_factor", state["factor"])
    return {"out": OPS[state["op"]](state)}
