"""data_parallel in JAX: jax.grad, one process per device, like torch (jax.distributed joined before
prepare). Two idioms: explicit (a jitted shard_map over the processes' mesh, lax.psum / lax.pmean
inside) and automatic (the step jitted over a batch sharded across the mesh with the parameters
replicated: XLA inserts the all-reduce and schedules it). Dispatch is asynchronous; the harness waits.
"""
from __future__ import annotations

import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from harness.metrics import emit
from impls._shared import dp
from scenarios.data_parallel import sizes

HI = jax.lax.Precision.HIGHEST  # full float32 (JAX's GPU default would be TF32)


def _loss(params, x, t):
    h = x
    for i, (w, b) in enumerate(params):
        h = jnp.matmul(h, w, precision=HI) + b
        h = jax.nn.relu(h) if i < len(params) - 1 else h
    return jnp.mean((h - t) ** 2)


def _accum_grad(params, x, t, accum):
    m = x.shape[0] // accum
    gs = [jax.grad(_loss)(params, x[a * m:(a + 1) * m], t[a * m:(a + 1) * m]) for a in range(accum)]
    return jax.tree.map(lambda *g: sum(g) / accum, *gs)


def _sgd(params, grads, lr):
    return jax.tree.map(lambda q, g: q - lr * g, params, grads)


_grad = jax.jit(jax.grad(_loss))


@partial(jax.jit, static_argnames=("accum", "lr"))
def _step(params, x, t, accum, lr):
    return _sgd(params, _accum_grad(params, x, t, accum), lr)


def _explicit(mesh, accum, lr):
    """Each device: its own parameters' block and batch shard; accum micro-batches, then ONE pmean."""
    def body(params, x, t):
        mine = jax.tree.map(lambda a: a[0], params)
        g = jax.lax.pmean(_accum_grad(mine, x, t, accum), "r")  # the step's only collective
        return jax.tree.map(lambda a: a[None], _sgd(mine, g, lr))
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("r"), out_specs=P("r")))


def prepare(inputs, params, device):
    mesh = Mesh(np.array(jax.devices()), ("r",))  # one device per process, in process order
    rank, world, dims = jax.process_index(), jax.process_count(), sizes(params)
    lr, accum = float(params["lr"]), int(params["accum"])
    synced = multihost_utils.broadcast_one_to_all(inputs["init_own"])  # rank 0's draw, on every rank
    split, rep = NamedSharding(mesh, P("r")), NamedSharding(mesh, P())
    glob = lambda sh, a: jax.make_array_from_process_local_data(sh, a)  # noqa: E731
    local = lambda flat: jax.device_put(dp.unflatten(flat, dims), device)  # noqa: E731
    xs, ts = [dp.shard(a, rank, world) for a in inputs["x"]], [dp.shard(a, rank, world) for a in inputs["t"]]
    return {
        "x": jax.device_put(inputs["x"], device), "t": jax.device_put(inputs["t"], device), "lr": lr, "accum": accum,
        "world": world, "plain": local(inputs["init"]), "naive": local(synced),
        "xs": [jax.device_put(a, device) for a in xs], "ts": [jax.device_put(a, device) for a in ts],
        "xg": [glob(split, a) for a in xs], "tg": [glob(split, a) for a in ts],
        "stacked": jax.tree.map(lambda a: glob(split, a[None]), dp.unflatten(synced, dims)),
        "own": jax.tree.map(lambda a: glob(split, a[None]), dp.unflatten(inputs["init_own"], dims)),
        "replicated": jax.tree.map(lambda a: glob(rep, a), dp.unflatten(synced, dims)),
        "explicit": _explicit(mesh, accum, lr), "explicit1": _explicit(mesh, 1, lr),
        "psum": jax.jit(jax.shard_map(lambda a: jax.lax.psum(a, "r"), mesh=mesh, in_specs=P("r"), out_specs=P())),
        "split": split, "grad_bytes": 4 * dp.offsets(dims)[1],
    }


def barrier(state):
    multihost_utils.sync_global_devices("triptych repeat")


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _flat(params, pick=lambda a: a):
    return jnp.concatenate([pick(a).ravel() for layer in params for a in layer])


def _local_steps(state, accum):
    params = state["plain"]
    for k in range(len(state["x"])):
        params = _step(params, state["x"][k], state["t"][k], accum=accum, lr=state["lr"])
    return {"params": _flat(params)}


def run_single_process(state):
    return _local_steps(state, 1)


def run_grad_accumulation(state):
    return _local_steps(state, state["accum"])


@partial(jax.jit, static_argnames=("lr",))
def _sgd_jit(params, grads, lr):
    return _sgd(params, grads, lr)


def _all_reduce_mean(state, g):
    blocks = jax.make_array_from_process_local_data(state["split"], g[None])
    return state["psum"](blocks).addressable_data(0)[0] / state["world"]


def run_ddp_naive(state):
    params, comm = state["naive"], 0.0
    for k in range(len(state["xs"])):
        g = jax.block_until_ready(_grad(params, state["xs"][k], state["ts"][k]))  # backward done
        t0 = time.perf_counter()
        g = jax.block_until_ready(jax.tree.map(lambda a: _all_reduce_mean(state, a), g))  # one tensor at a time
        comm += time.perf_counter() - t0
        params = _sgd_jit(params, g, state["lr"])
    emit("comm_s", comm / len(state["xs"]))
    _emit_bytes(state, 2 * len(params))
    return {"params": _flat(params)}


def _emit_bytes(state, calls):
    emit("allreduce_bytes", state["grad_bytes"])
    emit("buckets", calls)
    emit("grad_bytes", state["grad_bytes"])


def _explicit_steps(state, params, fn):
    for k in range(len(state["xg"])):
        params = fn(params, state["xg"][k], state["tg"][k])
    return {"params": _flat(params, lambda a: a.addressable_data(0)[0])}


def run_ddp_bucketed_overlap(state):
    params = state["replicated"]
    for k in range(len(state["xg"])):  # the global batch, sharded: XLA adds the gradients' all-reduce
        params = _step(params, state["xg"][k], state["tg"][k], accum=1, lr=state["lr"])
    emit("grad_bytes", state["grad_bytes"])
    return {"params": _flat(params, lambda a: a.addressable_data(0))}


def run_ddp_accumulate_no_sync(state):
    out = _explicit_steps(state, state["stacked"], state["explicit"])
    _emit_bytes(state, 1)
    return out


def run_unsynced_init(state):
    return _explicit_steps(state, state["own"], state["explicit1"])  # bug: each rank's own draw, no broadcast
