"""ranks in JAX: jax.distributed, one process per device, like torch (JAX's own habit is one process
per host driving all its devices).

The processes joined before prepare (harness/backends/dist.py). Each variant is one jitted program;
by_rank and the hazard are a shard_map over the global mesh of every process's device, whose input
prepare assembles from each process's copy of the data set (make_array_from_process_local_data) and
whose result is a global jax.Array: the harness reads this process's shard. Dispatch is asynchronous.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

_OWN: dict[str, jax.Array] = {}  # module state: each process has its own copy, nothing is shared


def prepare(inputs, params, device):
    n, data = jax.process_count(), inputs["data"]
    _OWN["mark"] = jax.device_put(jnp.asarray(jax.process_index()), device)  # the id, kept on the device
    mesh = Mesh(np.array(jax.devices()), ("r",))  # one device per process, in process order
    padded = _Ranked.padded(data, n)
    glob = jax.make_array_from_process_local_data(NamedSharding(mesh, P("r")), padded, (n * len(padded),) + data.shape[1:])
    ranked = lambda f: jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("r"), out_specs=P()))  # noqa: E731
    return {"data": jax.device_put(data, device), "global": glob, "one": jax.jit(_squares),
            "by_rank": ranked(_Ranked.by_rank), "same_data": ranked(_Ranked.same_data)}


def barrier(state):
    multihost_utils.sync_global_devices("triptych repeat")


def poison(state):
    barrier(state)  # the harness runs this untimed before every repeat: the ranks start together


def _squares(x):
    return (x * x).sum(axis=0)


def _mark():
    return _OWN["mark"]


def _all_reduce(partial):  # inside shard_map: every process ends with the sum
    return lax.psum(partial, "r")


class _Ranked:
    """The shard_map bodies (x: this process's copy of the data set, padded) and their input's padding."""

    @staticmethod
    def padded(data, n):
        """data with zero rows appended up to a multiple of n (at most n-1; a zero adds nothing to a sum
        of squares): rank r's rows r, r+n, ... are then column r of a (rows/n, n, cols) view."""
        return np.concatenate([data, np.zeros(((-len(data)) % n,) + data.shape[1:], data.dtype)])

    @staticmethod
    def by_rank(x):
        n = lax.axis_size("r")
        mine = lax.dynamic_index_in_dim(x.reshape(-1, n, x.shape[-1]), lax.axis_index("r"), axis=1, keepdims=False)
        return _all_reduce(_squares(mine))  # the rank id (axis_index) selects the share

    @staticmethod
    def same_data(x):
        return _all_reduce(_squares(x))  # bug: no share selected, every process sums everything


def run_one_process(state):
    return {"total": state["one"](state["data"]), "mark": _mark()}


def run_by_rank(state):
    return {"total": state["by_rank"](state["global"]), "mark": _mark()}


def run_same_data_every_rank(state):
    return {"total": state["same_data"](state["global"]), "mark": _mark()}
