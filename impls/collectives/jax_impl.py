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


def _root_only(a):
    return jnp.where(lax.axis_index("r") == 0, a, jnp.zeros_like(a))


def _all_to_all(a):
    n = lax.axis_size("r")  # block j of this rank goes to rank j; block j received came from rank j
    return lax.all_to_all(a.reshape(n, -1), "r", 0, 0, tiled=True).reshape(1, -1)


BODIES = {"broadcast": lambda a: lax.psum(_root_only(a), "r"),  # no broadcast primitive: a psum
          "reduce": lambda a: _root_only(lax.psum(a, "r")),
          "all_reduce": lambda a: lax.psum(a, "r"),
          "all_gather": lambda a: lax.all_gather(a[0], "r", tiled=True)[None],
          "reduce_scatter": lambda a: lax.psum_scatter(a[0], "r", tiled=True)[None],
          "all_to_all": _all_to_all}


def prepare(inputs, params, device):
    mesh = Mesh(np.array(jax.devices()), ("r",))  # one device per process, in process order
    x = jax.device_put(inputs["x"][None], device)
    glob = jax.make_array_from_process_local_data(NamedSharding(mesh, P("r")), x)
    body = BODIES.get(params["op"])
    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("r"), out_specs=P("r"))) if body else None
    return {"x": x, "global": glob, "fn": fn, "op": params["op"],
            "bytes": nbytes(params), "factor": bus_factor(params["op"], jax.process_count())}


def barrier(state):
    multihost_utils.sync_global_devices("triptych repeat")


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def run_collective(state):
    emit("bytes", state["bytes"])
    emit("bus_factor", state["factor"])
    if state["op"] == "barrier":
        barrier(state)  # host-side, through the coordinator
        return {"out": state["x"][0]}
    return {"out": state["fn"](state["global"]).addressable_data(0)[0]}  # this process's shard
