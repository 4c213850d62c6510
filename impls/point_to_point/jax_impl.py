"""point_to_point in JAX: lax.ppermute inside a shard_map over the global mesh, one process per device.

JAX has no per-process send or recv: ppermute is a collective that every process enters, and what it
returns is a future jax.Array. prepare assembles the global input from each process's block; a call
is one jitted program whose result is a global jax.Array, of which the harness reads this process's
shard. Dispatch is asynchronous; the wait is reading the result.
"""
from __future__ import annotations

import jax
import numpy as np
from jax import lax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

NOT_EXPRESSIBLE = {
    "blocking": "no per-process send/recv: lax.ppermute is a collective every process enters",
    "read_before_wait": "a received value is a future jax.Array: there is no buffer to read before it is ready",
}


def prepare(inputs, params, device):
    mesh = Mesh(np.array(jax.devices()), ("r",))  # one device per process, in process order
    n, x = jax.process_count(), inputs["x"]
    ring = [(j, (j + 1) % n) for j in range(n)]  # (source, destination): each to its right
    shift = jax.shard_map(lambda a: lax.ppermute(a, "r", ring), mesh=mesh, in_specs=P("r"), out_specs=P("r"))
    # the global array is every process's block end to end; this process's shard is its own x
    glob = jax.make_array_from_process_local_data(NamedSharding(mesh, P("r")), x, (n * x.shape[0],))
    return {"global": glob, "fn": jax.jit(shift)}


def barrier(state):
    multihost_utils.sync_global_devices("triptych repeat")


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _ring(state):
    return state["fn"](state["global"])


def run_nonblocking(state):
    return {"received": _ring(state)}  # a global array; this process's shard came from its left
