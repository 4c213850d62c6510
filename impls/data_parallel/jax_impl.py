"""data_parallel in JAX: jax.grad, one process per device, like torch (jax.distributed joined before prepare).
Each variant is one jitted program that runs every step and returns the flat parameters, compiled on its first
(untimed) call; the all-reduces in the compiled program are counted then (impls/_shared/dp.py hlo_all_reduces).
Two idioms: explicit (a shard_map over the processes' mesh, lax.psum inside) and automatic (the steps jitted over
a batch sharded across the mesh, the parameters replicated: XLA inserts the gradients' all-reduces and decides how
to split, combine and schedule them; JAX has no buckets of its own). Dispatch is asynchronous; the harness waits."""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from harness.measure.metrics import emit
from impls._shared import dp
from scenarios.data_parallel import sizes

HI = jax.lax.Precision.HIGHEST  # full float32 (JAX's GPU default would be TF32)
ROWS = P(None, "r")  # (steps, rows, features): each rank's rows of every step's batch


def _model(flat, xs, ts, dims, lr, accum, reduce=lambda g: g):
    """Inside a program: `steps` SGD steps of the flat parameters; reduce(g) averages a gradient over ranks."""
    params = dp.unflatten(flat, dims)
    for k in range(xs.shape[0]):
        g = reduce(_grads(params, xs[k], ts[k], accum))
        params = jax.tree.map(lambda q, d: q - lr * d, params, g)
    return jnp.concatenate([a.ravel() for layer in params for a in layer])


def _grads(params, x, t, accum):
    """The mean-squared-error gradient, accum micro-batches summed and scaled by 1/accum. Only the parameters
    are differentiated, so no dx of the first layer is computed (tests/test_mlp.py counts the products)."""
    def loss(params, x, t):
        h = x
        for i, (w, b) in enumerate(params):
            h = jnp.matmul(h, w, precision=HI) + b
            h = jax.nn.relu(h) if i < len(params) - 1 else h
        return jnp.mean((h - t) ** 2)

    m = x.shape[0] // accum
    gs = [jax.grad(loss)(params, x[a * m:(a + 1) * m], t[a * m:(a + 1) * m]) for a in range(accum)]
    return jax.tree.map(lambda *g: sum(g) / accum, *gs)


def _reducer(world, naive):
    """g -> g summed over the ranks / N, one psum per gradient tensor. naive: none starts before backward wrote
    every gradient (an optimization barrier over them all); otherwise XLA schedules them."""
    def reduce(g):
        g = jax.lax.optimization_barrier(g) if naive else g
        return jax.tree.map(lambda a: jax.lax.psum(a, "r") / world, g)
    return reduce


def prepare(inputs, params, device):
    mesh = Mesh(np.array(jax.devices()), ("r",))  # one device per process, in process order
    rank, world = jax.process_index(), jax.process_count()
    synced = np.asarray(multihost_utils.broadcast_one_to_all(inputs["init_own"]))  # rank 0's draw, on every rank
    glob = jax.make_array_from_process_local_data  # this process's block of a global array
    split, rows, rep = (NamedSharding(mesh, s) for s in (P("r"), ROWS, P()))
    mine = lambda a: np.stack([dp.shard(b, rank, world) for b in a])  # noqa: E731 - this rank's rows of each step
    return {"x": jax.device_put(inputs["x"], device), "t": jax.device_put(inputs["t"], device),
            "xg": glob(rows, mine(inputs["x"])), "tg": glob(rows, mine(inputs["t"])),
            "plain": jax.device_put(inputs["init"], device), "synced": glob(split, synced),
            "own": glob(split, inputs["init_own"]), "replicated": glob(rep, synced), "mesh": mesh,
            "dims": sizes(params), "lr": float(params["lr"]), "accum": int(params["accum"]), "world": world,
            "steps": inputs["x"].shape[0], "grad_bytes": inputs["init"].nbytes, "programs": {}}


def barrier(state):
    multihost_utils.sync_global_devices("triptych repeat")


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _train(state, name, accum, args, reduce=None, spmd=False):
    """Program `name`: `steps` steps on args (flat parameters, x, t). Explicit (reduce given): a shard_map, each
    device its parameters' block and its rows; spmd: XLA partitions over the sharded rows; else this device
    alone. Compiled on the first call, its all-reduces counted then; a call of a program over the ranks emits them
    (_emit). Returns this process's parameters."""
    if name not in state["programs"]:
        f = partial(_model, dims=state["dims"], lr=state["lr"], accum=accum, **({"reduce": reduce} if reduce else {}))
        if reduce is not None:
            f = jax.shard_map(f, mesh=state["mesh"], in_specs=(P("r"), ROWS, ROWS), out_specs=P("r"))
        jitted = jax.jit(f, out_shardings=NamedSharding(state["mesh"], P())) if spmd else jax.jit(f)
        compiled = jitted.lower(*args).compile()
        state["programs"][name] = (compiled, dp.hlo_all_reduces(compiled.as_text()))
    compiled, counted = state["programs"][name]
    out = compiled(*args)
    if reduce is not None or spmd:
        _emit(state, counted)
        out = out.addressable_data(0)  # this process's block
    return {"params": out}


def _emit(state, counted):
    """Per step: the all-reduces of the compiled program (they run once per step)."""
    calls, nbytes = counted
    dp.emit_per_step(state["steps"], nbytes, calls, state["grad_bytes"])


def _comm_seconds(state):
    """The naive step's all-reduces alone (one psum per gradient tensor, one program), waited for before and
    after: the median of 5 after one warm-up, measured once, in the variant's first (untimed) call."""
    if "comm_s" not in state:
        split = NamedSharding(state["mesh"], P("r"))
        glob = jax.make_array_from_process_local_data  # this process's block of a global array
        bufs = [glob(split, np.zeros(s, np.float32)) for s in dp.shapes(state["dims"])]
        psums = jax.jit(jax.shard_map(lambda g: [jax.lax.psum(a, "r") for a in g], mesh=state["mesh"],
                                      in_specs=P("r"), out_specs=P()))
        state["comm_s"] = dp.median_seconds(lambda: jax.block_until_ready(bufs),
                                            lambda: jax.block_until_ready(psums(bufs)))
    return state["comm_s"]


def run_single_process(state):
    return _train(state, "single", 1, (state["plain"], state["x"], state["t"]))


def run_grad_accumulation(state):
    return _train(state, "accum", state["accum"], (state["plain"], state["x"], state["t"]))


def _naive(state, name, start):
    return _train(state, name, 1, (start, state["xg"], state["tg"]), _reducer(state["world"], naive=True))


def run_ddp_naive(state):
    emit("comm_s", _comm_seconds(state))
    return _naive(state, "naive", state["synced"])


def run_ddp_bucketed_overlap(state):
    # The rows sharded, the parameters replicated: XLA adds (and schedules) the gradients' all-reduces.
    return _train(state, "spmd", 1, (state["replicated"], state["xg"], state["tg"]), spmd=True)


def run_ddp_accumulate_no_sync(state):
    return _train(state, "no_sync", state["accum"], (state["synced"], state["xg"], state["tg"]),
                  _reducer(state["world"], naive=False))  # accum micro-batches, then the step's only psums


def run_unsynced_init(state):
    return _naive(state, "unsynced", state["own"])  # bug: each rank's own draw, no broadcast
