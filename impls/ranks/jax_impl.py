"""ranks in JAX: jax.distributed, one process per device, like torch (JAX's own habit is one process
per host driving all its devices).

The processes joined before prepare (harness/backends/dist.py). A collective is a jitted shard_map
over the global mesh of every process's device: each process hands in its local block with
make_array_from_process_local_data and reads back its own shard. Dispatch is asynchronous.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

_OWN: dict[str, int] = {}  # module state: each process has its own copy, nothing is shared


def prepare(inputs, params, device):
    _OWN["rank"] = jax.process_index()
    mesh = Mesh(np.array(jax.devices()), ("r",))  # one device per process, in process order
    return {"data": jax.device_put(inputs["data"], device), "rank": jax.process_index(),
            "world": jax.process_count(), "mesh": mesh,
            "psum": jax.jit(jax.shard_map(lambda a: jax.lax.psum(a, "r"), mesh=mesh, in_specs=P("r"), out_specs=P()))}


def barrier(state):
    multihost_utils.sync_global_devices("triptych repeat")  # every process reaches this point


def poison(state):
    barrier(state)  # the harness runs this untimed before every repeat: the ranks start together


@jax.jit
def _squares(x):
    return (x * x).sum(axis=0)


def _mark():
    return jnp.asarray(_OWN["rank"])


def _all_reduce(state, partial):
    blocks = jax.make_array_from_process_local_data(NamedSharding(state["mesh"], P("r")), partial[None])
    return state["psum"](blocks).addressable_data(0)[0]  # replicated: this process's copy


def run_one_process(state):
    return {"total": _squares(state["data"]), "mark": _mark()}


def run_by_rank(state):
    mine = state["data"][state["rank"]::state["world"]]  # the rank id selects the share
    return {"total": _all_reduce(state, _squares(mine)), "mark": _mark()}


def run_same_data_every_rank(state):
    partial = _squares(state["data"])  # bug: no share selected, every process sums everything
    return {"total": _all_reduce(state, partial), "mark": _mark()}
