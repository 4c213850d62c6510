"""collectives in JAX: one process per device (jax.distributed), each call one jitted shard_map over
the global mesh, axis "r" = the rank, on a 1-D global array whose block r is rank r's buffer.

Functional, so both columns are donation (jit's donate_argnums), JAX's closest idiom to a buffer
written in place, not a promise. Out of place: a receive buffer made in prepare, donated, which XLA
writes the output into (nccl-tests' send and receive buffers, both made before the timing; without it
every call would allocate its output and free the last). In place: the input donated, which XLA
writes the output into where the two have one shape. prepare builds the global arrays from each
process's block (make_array_from_process_local_data), untimed; a call dispatches asynchronously and
returns the global array as it is (the harness reads this process's shard from it, untimed). A
donated buffer is gone after its call: poison makes the sample's buffers afresh with a jitted copy,
untimed.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from harness.measure.metrics import emit
from scenarios import collectives as C

LACKS: dict[str, str] = {}  # XLA's all_to_all may write into its donated input (it buffers what it must)


def cannot_run_at(variant, params):
    return C.in_place_why(variant, params, LACKS)


def prepare(inputs, params, device):
    op, n, r = params["op"], jax.process_count(), jax.process_index()
    mesh = Mesh(np.array(jax.devices()), ("r",))  # one device per process, in process order
    blocks = NamedSharding(mesh, P("r"))
    size, take, _ = C.in_place(op, inputs["x"].size, n, r)
    fill = np.zeros(size, inputs["x"].dtype)
    fill[take] = inputs["x"]  # nccl-tests' layout; the rest zeros, which no output element equals
    spmd = lambda f: jax.shard_map(f, mesh=mesh, in_specs=P("r"), out_specs=P("r"))  # noqa: E731
    into = lambda f: jax.shard_map(lambda a, _recv: f(a), mesh=mesh, in_specs=(P("r"), P("r")),  # noqa: E731
                                   out_specs=P("r"))  # _recv: only its buffer, which the output takes
    recv = np.zeros(C.out_count(op, inputs["x"].size, n), inputs["x"].dtype)
    x = jax.make_array_from_process_local_data(blocks, inputs["x"])
    traffic = {k: v for k, v in TRAFFIC.items() if k == "reduce" or device.platform == "cpu"}  # psums (_broadcast)
    return {"x": x, "x_local": x.addressable_data(0), "op": op, "bytes": C.nbytes(params),
            "factor": C.bus_factor(traffic.get(op, op), n), "all_reduce_traffic": float(op in traffic),
            "fn": jax.jit(into(OPS[op]), donate_argnums=1, keep_unused=True) if op in OPS else None,
            "recv": jax.make_array_from_process_local_data(blocks, recv), "out": None,
            "fn_in_place": jax.jit(spmd(IN_PLACE.get(op, OPS.get(op))), donate_argnums=0) if op in OPS else None,
            "one": jax.make_array_from_process_local_data(blocks, np.ones(1, inputs["x"].dtype)),
            "arrive": jax.jit(spmd(_all_reduce)),  # barrier: an all-reduce of one element, as torch's on NCCL
            "fill": jax.make_array_from_process_local_data(blocks, fill),
            "copy": jax.jit(jnp.copy), "slots": C.slots(params), "ring": [], "i": 0, "rank": r,
            "zeros": jax.device_put(np.zeros(C.out_count(op, inputs["x"].size, n), inputs["x"].dtype), device)}


def barrier(state):
    multihost_utils.sync_global_devices("triptych repeat")


def poison(state):
    # the last sample's buffers are dropped before the new ones are made: held across, the ring would cost
    # two (2 x 20 x 256 MiB at a 256 MiB all_reduce); torch and CuPy rewrite theirs in place
    state["ring"], state["out"] = [], None
    state["ring"] = [state["copy"](state["fill"]) for _ in range(state["slots"])]  # the donated ones are gone
    state["out"] = state["copy"](state["recv"])  # zeros, as torch's out.zero_()
    jax.block_until_ready((state["ring"], state["out"]))  # the harness's synchronize() waits on nothing in JAX
    state["i"] = 0
    barrier(state)  # untimed, before every repeat: the ranks start together


def _broadcast(a):
    # XLA's collective-broadcast (NCCL's broadcast on GPUs). XLA:CPU has no lowering for it: there its documented
    # equivalent, a psum of a masked block, which moves an all-reduce's data (prepare's all_reduce_traffic)
    masked = lambda a: lax.pcast(lax.psum(jnp.where(lax.axis_index("r") == 0, a, jnp.zeros_like(a)), "r"), "r",  # noqa: E731
                                 to="varying")  # typed as pbroadcast's (a value per rank), as the switch needs
    return lax.platform_dependent(a, cpu=masked, default=lambda a: lax.pbroadcast(a, "r", 0))


def _reduce(a):
    total = lax.psum(a, "r")  # no reduce primitive: a psum that the other ranks do not keep
    return jnp.where(lax.axis_index("r") == 0, total, jnp.zeros_like(total))


def _all_reduce(a):
    return lax.psum(a, "r")


def _all_gather(a, in_place=False):
    if in_place:  # this rank's input is its chunk of the (donated) output buffer
        c = a.shape[-1] // lax.axis_size("r")
        a = lax.dynamic_slice_in_dim(a, lax.axis_index("r") * c, c, axis=a.ndim - 1)
    return lax.all_gather(a, "r", axis=a.ndim - 1, tiled=True)


def _reduce_scatter(a, in_place=False):
    part = lax.psum_scatter(a, "r", scatter_dimension=a.ndim - 1, tiled=True)
    if not in_place:
        return part
    at = lax.axis_index("r") * part.shape[-1]  # written into this rank's chunk of the donated buffer, as NCCL's lands
    return lax.dynamic_update_slice_in_dim(a, part, at, axis=a.ndim - 1), part


def _all_to_all(a):
    n = lax.axis_size("r")  # block j of this rank goes to rank j; block j received came from rank j
    return lax.all_to_all(a.reshape(n, -1), "r", 0, 0, tiled=True).reshape(a.shape)


OPS = {"broadcast": _broadcast, "reduce": _reduce, "all_reduce": _all_reduce, "all_gather": _all_gather,
       "reduce_scatter": _reduce_scatter, "all_to_all": _all_to_all}
IN_PLACE = {"all_gather": partial(_all_gather, in_place=True), "reduce_scatter": partial(_reduce_scatter, in_place=True)}
TRAFFIC = {"broadcast": "all_reduce", "reduce": "all_reduce"}  # a psum moves an all-reduce's data (broadcast: on the CPU)


def _emit(state):
    if state["op"] != "barrier":  # no bytes, no bandwidth
        emit("bytes", state["bytes"])
        emit("bus_factor", state["factor"])
        emit("all_reduce_traffic", state["all_reduce_traffic"])


def _reported(state, out):
    if state["op"] == "reduce" and state["rank"] != 0:  # unspecified there: zeros made in prepare, and the result
        return {"out": state["zeros"], "result": out}
    return {"out": out}


def run_out_of_place(state):
    _emit(state)
    if state["op"] == "barrier":
        return {"out": state["x_local"], "arrived": state["arrive"](state["one"])}
    state["out"] = state["fn"](state["x"], state["out"])  # donated: the output takes the receive buffer
    return _reported(state, state["out"])


def run_in_place(state):
    _emit(state)
    i = state["i"] % len(state["ring"])
    state["i"] += 1
    got = state["fn_in_place"](state["ring"][i])  # donated: the output may take its buffer
    state["ring"][i], out = got if isinstance(got, tuple) else (got, got)  # reduce_scatter: (buffer, its chunk)
    return _reported(state, out)
