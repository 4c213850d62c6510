"""collectives in JAX: one process per device (jax.distributed), each collective a jitted shard_map
over the global mesh, axis "r" = the rank. Functional: every call writes a fresh output.

prepare assembles the global array from each process's block (make_array_from_process_local_data),
untimed; a call dispatches asynchronously and each process reads back its own shard.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from harness.metrics import emit
from scenarios.collectives import bus_factor, nbytes


def prepare(inputs, params, device):
    mesh = Mesh(np.array(jax.devices()), ("r",))  # one device per process, in process order
    x = jax.device_put(inputs["x"][None], device)
    glob = jax.make_array_from_process_local_data(NamedSharding(mesh, P("r")), x)
    fn = jax.jit(jax.shard_map(OPS[params["op"]], mesh=mesh, in_specs=P("r"), out_specs=P("r")))
    return {"x": x, "global": glob, "fn": fn, "op": params["op"],
            "bytes": nbytes(params), "factor": bus_factor(params["op"], jax.process_count())}


def barrier(state):
    multihost_utils.sync_global_devices("triptych repeat")


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _broadcast(a):
    return lax.psum(jnp.where(lax.axis_index("r") == 0, a, jnp.zeros_like(a)), "r")  # no broadcast primitive: a psum


def _reduce(a):
    total = lax.psum(a, "r")
    return jnp.where(lax.axis_index("r") == 0, total, jnp.zeros_like(total))  # non-roots: zeros


def _all_reduce(a):
    return lax.psum(a, "r")


def _all_gather(a):
    return lax.all_gather(a[0], "r", tiled=True)[None]


def _reduce_scatter(a):
    return lax.psum_scatter(a[0], "r", tiled=True)[None]


def _all_to_all(a):
    n = lax.axis_size("r")  # block j of this rank goes to rank j; block j received came from rank j
    return lax.all_to_all(a.reshape(n, -1), "r", 0, 0, tiled=True).reshape(1, -1)


def _barrier(a):
    return a  # no device-side barrier: run_collective meets the other processes on the host


OPS = {"broadcast": _broadcast, "reduce": _reduce, "all_reduce": _all_reduce, "all_gather": _all_gather,
       "reduce_scatter": _reduce_scatter, "all_to_all": _all_to_all, "barrier": _barrier}


def run_collective(state):
    emit("bytes", state["bytes"])
    emit("bus_factor", state["factor"])
    if state["op"] == "barrier":
        barrier(state)  # host-side, through the coordinator
    return {"out": state["fn"](state["global"]).addressable_data(0)[0]}  # this process's shard
