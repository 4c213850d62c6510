"""data_parallel in JAX: jax.grad, one process per device, like torch (jax.distributed joined before prepare).
Two idioms: explicit (a jitted shard_map over the processes' mesh, lax.psum / lax.pmean inside) and automatic
(the step jitted over a batch sharded across the mesh with the parameters replicated: XLA inserts the all-reduce
and schedules it). Dispatch is asynchronous; the harness waits."""
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


def _model(flat, dims, device):
    """The parameters [(W, b), ...] on this process's device."""
    return jax.device_put(dp.unflatten(flat, dims), device)


def _grads(params, x, t, accum):
    """The mean-squared-error gradient, accum micro-batches summed and scaled by 1/accum."""
    def loss(params, x, t):
        h = x
        for i, (w, b) in enumerate(params):
            h = jnp.matmul(h, w, precision=HI) + b
            h = jax.nn.relu(h) if i < len(params) - 1 else h
        return jnp.mean((h - t) ** 2)

    m = x.shape[0] // accum
    gs = [jax.grad(loss)(params, x[a * m:(a + 1) * m], t[a * m:(a + 1) * m]) for a in range(accum)]
    return jax.tree.map(lambda *g: sum(g) / accum, *gs)


_sgd = jax.jit(lambda params, g, lr: jax.tree.map(lambda q, d: q - lr * d, params, g), static_argnames="lr")
_step = jax.jit(lambda params, x, t, accum, lr: _sgd(params, _grads(params, x, t, accum), lr),
                static_argnames=("accum", "lr"))
_local_grads = jax.jit(_grads, static_argnames="accum")


def _reducer(mesh, accum, lr):
    """The explicit step: each device gets its block of the (rank-stacked) parameters and its batch
    shard, accumulates accum micro-batches, then ONE pmean."""
    def body(params, x, t):
        mine = jax.tree.map(lambda a: a[0], params)
        g = jax.lax.pmean(_grads(mine, x, t, accum), "r")  # the step's only collective
        return jax.tree.map(lambda a: a[None], jax.tree.map(lambda q, d: q - lr * d, mine, g))
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("r"), out_specs=P("r")))


def prepare(inputs, params, device):
    mesh = Mesh(np.array(jax.devices()), ("r",))  # one device per process, in process order
    rank, world, dims = jax.process_index(), jax.process_count(), sizes(params)
    lr, accum = float(params["lr"]), int(params["accum"])
    synced = multihost_utils.broadcast_one_to_all(inputs["init_own"])  # rank 0's draw, on every rank
    split, rep = NamedSharding(mesh, P("r")), NamedSharding(mesh, P())
    glob = jax.make_array_from_process_local_data  # this process's block of a global array
    xs, ts = [dp.shard(a, rank, world) for a in inputs["x"]], [dp.shard(a, rank, world) for a in inputs["t"]]
    return {"x": jax.device_put(inputs["x"], device), "t": jax.device_put(inputs["t"], device), "lr": lr,
            "accum": accum, "world": world, "plain": _model(inputs["init"], dims, device),
            "naive": _model(synced, dims, device),
            "xs": [jax.device_put(a, device) for a in xs], "ts": [jax.device_put(a, device) for a in ts],
            "xg": [glob(split, a) for a in xs], "tg": [glob(split, a) for a in ts],
            "stacked": jax.tree.map(lambda a: glob(split, a[None]), dp.unflatten(synced, dims)),
            "own": jax.tree.map(lambda a: glob(split, a[None]), dp.unflatten(inputs["init_own"], dims)),
            "replicated": jax.tree.map(lambda a: glob(rep, a), dp.unflatten(synced, dims)),
            "explicit": _reducer(mesh, accum, lr), "explicit1": _reducer(mesh, 1, lr),
            "psum": jax.jit(jax.shard_map(lambda a: jax.lax.psum(a, "r"), mesh=mesh, in_specs=P("r"), out_specs=P())),
            "split": split, "grad_bytes": 4 * dp.offsets(dims)[1]}


def barrier(state):
    multihost_utils.sync_global_devices("triptych repeat")


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _train(state, params, step, xs, ts, pick=lambda a: a):
    """`steps` calls of step(params, x, t); pick reads this process's copy of a parameter."""
    for x, t in zip(xs, ts):
        params = step(params, x, t)
    return {"params": jnp.concatenate([pick(a).ravel() for layer in params for a in layer])}


def _emit(state, calls):
    emit("allreduce_bytes", state["grad_bytes"])
    emit("buckets", calls)
    emit("grad_bytes", state["grad_bytes"])


def run_single_process(state):
    return _train(state, state["plain"], partial(_step, accum=1, lr=state["lr"]), state["x"], state["t"])


def run_grad_accumulation(state):
    return _train(state, state["plain"], partial(_step, accum=state["accum"], lr=state["lr"]), state["x"], state["t"])


def _naive(state, params):
    spent = [0.0]

    def mean(g):  # one tensor: this process's block of a global array, psum over the mesh, / N
        blocks = jax.make_array_from_process_local_data(state["split"], g[None])
        return state["psum"](blocks).addressable_data(0)[0] / state["world"]

    def step(params, x, t):
        g = jax.block_until_ready(_local_grads(params, x, t, accum=1))  # backward done
        t0 = time.perf_counter()
        g = jax.block_until_ready(jax.tree.map(mean, g))  # one tensor at a time, after backward
        spent[0] += time.perf_counter() - t0
        return _sgd(params, g, lr=state["lr"])

    out = _train(state, params, step, state["xs"], state["ts"])
    emit("comm_s", spent[0] / len(state["xs"]))
    _emit(state, 2 * len(params))
    return out


def run_ddp_naive(state):
    return _naive(state, state["naive"])


def run_ddp_bucketed_overlap(state):
    # The global batch, sharded; parameters replicated: XLA adds (and schedules) the gradients' all-reduce.
    out = _train(state, state["replicated"], partial(_step, accum=1, lr=state["lr"]), state["xg"], state["tg"],
                 lambda a: a.addressable_data(0))
    emit("grad_bytes", state["grad_bytes"])
    return out


def run_ddp_accumulate_no_sync(state):
    out = _train(state, state["stacked"], state["explicit"], state["xg"], state["tg"], lambda a: a.addressable_data(0)[0])
    _emit(state, 1)
    return out


def run_unsynced_init(state):
    # bug: each rank's own draw, no broadcast
    return _train(state, state["own"], state["explicit1"], state["xg"], state["tg"], lambda a: a.addressable_data(0)[0])
