"""zero in JAX: one process per device (jax.distributed joined before prepare), the stages written with
jax.shard_map over the processes' mesh: lax.psum (ddp), lax.psum_scatter (the gradient's reduce-scatter) and
lax.all_gather (the parameters). The layers are equal (the scenario's model), so the state is one global array
(layers, padded segment) per quantity, in impls/_shared/zero.py's layout: replicated (P()), or P(None, 'r') so
that each device holds its chunk of every layer.

A step is two jitted programs, the gradient and the update, so the gradient a rank holds between them is a real
array whose bytes can be counted. Forward is a lax.scan over the layers under jax.checkpoint that saves the
matmuls' outputs and not the gathers: backward's loop gathers each zero3 layer again, which XLA cannot merge with
forward's gather (another loop). check_vma=False: a replicated input's gradient stays this device's own (no
implicit psum); every reduction is written out. Dispatch is asynchronous; the harness waits."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from impls._shared import dp
from impls._shared import zero as Z
from scenarios.zero import sizes

HI = jax.lax.Precision.HIGHEST  # full float32 (JAX's GPU default would be TF32)
B1, B2 = 0.9, 0.999
R, C, REP = P("r"), P(None, "r"), P()  # R: a device's own rows (its local gradient); C: its chunk of every layer
SPECS = {"ddp": (REP, REP, REP), "zero1": (REP, R, C), "zero2": (REP, C, C), "zero3": (C, C, C)}  # p, g, m/v
SAVE_DOTS = jax.checkpoint_policies.dots_with_no_batch_dims_saveable  # not the all-gathers: backward redoes them


class _Programs:
    """One stage's step as two jitted shard_maps, the gradient and the update. The gradient is summed over ranks
    (ddp: psum; zero2: psum_scatter after backward; zero3: psum_scatter in backward's loop, all_gather's
    transpose) or left local (zero1: the update reduce-scatters it); the update divides it by N. Compiled once: the
    bytes its collectives send (loops' trip counts included), XLA's peak bytes."""

    def __init__(self, mesh, lay, stage, eps):
        self.lay, self.stage, self.eps, self.compiled = lay, stage, eps, None
        ps, gs, ms = SPECS[stage]
        sm = lambda f, i, o: jax.jit(jax.shard_map(f, mesh=mesh, in_specs=i, out_specs=o, check_vma=False))  # noqa
        self.grad = sm(self._grad, (ps, R, R), gs)
        self.update = sm(self._update, (ps, gs, ms, ms, REP, REP), (ps, ms, ms))

    def _loss(self, p, x, t):
        """Mean squared error of the MLP whose layer i is p[i] (zero3: this rank's chunk, all-gathered in the loop)."""
        last = p.shape[0] - 1

        def layer(h, seg_i):
            seg, i = seg_i
            w, b = self.lay.layer(jax.lax.all_gather(seg, "r", tiled=True) if self.stage == "zero3" else seg, 0)
            z = jnp.matmul(h, w, precision=HI) + b
            return jnp.where((z > 0) | (i == last), z, 0), None  # ReLU between layers, none after the last

        h, _ = jax.lax.scan(jax.checkpoint(layer, policy=SAVE_DOTS), x, (p, jnp.arange(last + 1)))
        return jnp.mean((h - t) ** 2)

    def _grad(self, p, x, t):
        g = jax.grad(self._loss)(p, x, t)
        if self.stage == "ddp":
            return jax.lax.psum(g, "r")
        return jax.lax.psum_scatter(g, "r", scatter_dimension=1, tiled=True) if self.stage == "zero2" else g

    def _update(self, p, g, m, v, c1, c2):
        c, mine = self.lay.chunk[0], self.stage in ("zero1", "zero2")  # mine: replicated parameters, own chunk
        g = (jax.lax.psum_scatter(g, "r", scatter_dimension=1, tiled=True) if self.stage == "zero1" else g)
        g = g / self.lay.world
        q = jax.lax.dynamic_slice_in_dim(p, jax.lax.axis_index("r") * c, c, axis=1) if mine else p
        m, v = B1 * m + (1 - B1) * g, B2 * v + (1 - B2) * g * g
        q = q - c1 * m / (jnp.sqrt(v) / c2 + self.eps)
        return jax.lax.all_gather(q, "r", axis=1, tiled=True) if mine else q, m, v

    def compile(self, p, m, x, t, c):
        if self.compiled is None:
            grad = self.grad.lower(p, x, t).compile()
            both = [grad, self.update.lower(p, grad(p, x, t), m, m, *c).compile()]
            sent = [Z.hlo_sent(b.as_text(), self.lay.world) for b in both]
            sent = {k: sum(d[k] for d in sent) for k in Z.KINDS}
            mem = [b.memory_analysis() for b in both]
            peak = max((a.argument_size_in_bytes + a.output_size_in_bytes + a.temp_size_in_bytes
                        - a.alias_size_in_bytes) for a in mem) if all(mem) else float("nan")
            self.compiled = (both, sent, peak)
        return self.compiled


def prepare(inputs, params, device):
    mesh = Mesh(np.array(jax.devices()), ("r",))  # one device per process, in process order
    rank, world, lay = jax.process_index(), jax.process_count(), Z.Layout(sizes(params), jax.process_count())
    split, cols, rep = NamedSharding(mesh, R), NamedSharding(mesh, C), NamedSharding(mesh, REP)
    glob = jax.make_array_from_process_local_data  # this process's block of a global array
    full = lay.pad(np, inputs["init"]).reshape(len(lay.chunk), -1)  # equal layers: one padded segment a row
    own = full.reshape(len(lay.chunk), world, -1)[:, rank]
    return {"lay": lay, "rank": rank, "lr": float(params["lr"]), "glob": glob,
            "sharding": {R: split, C: cols, REP: rep},
            "x": [glob(split, dp.shard(a, rank, world)) for a in inputs["x"]],
            "t": [glob(split, dp.shard(a, rank, world)) for a in inputs["t"]],
            "full": full, "own": own, "start": {},
            "programs": {s: _Programs(mesh, lay, s, float(params["eps"])) for s in Z.STAGES},
            "gather": jax.jit(lambda a: a, out_shardings=rep)}  # zero3's parameters all-gathered, for the readback


def barrier(state):
    multihost_utils.sync_global_devices("triptych repeat")


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _train(state, stage):
    """`steps` Adam steps of one stage from the initial parameters; emits what the rank held and sent. The
    output is read back (gathered, unpadded) by the harness after the timed call: the call is the steps."""
    if stage not in state["start"]:  # on the first (untimed) call: device arrays, immutable, reused by every run
        ps, _, ms = SPECS[stage]
        on = lambda spec, a: state["glob"](state["sharding"][spec], a)  # noqa: E731
        state["start"][stage] = (on(ps, state["own"] if ps == C else state["full"]),
                                 on(ms, np.zeros_like(state["own"] if ms == C else state["full"])))
    p, m = state["start"][stage]
    v = m
    for k, (x, t) in enumerate(zip(state["x"], state["t"]), 1):
        c = (np.float32(state["lr"] / (1 - B1 ** k)), np.float32(np.sqrt(1 - B2 ** k)))
        (grad, update), sent, peak = state["programs"][stage].compile(p, m, x, t, c)
        g = grad(p, x, t)
        p, m, v = update(p, g, m, v, *c)
    nbytes = lambda a: sum(s.data.nbytes for s in a.addressable_shards)  # noqa: E731
    Z.report({"param_bytes": nbytes(p), "grad_bytes": nbytes(g), "optim_bytes": nbytes(m) + nbytes(v)}, sent, peak)

    def read():
        whole = state["gather"](p) if stage == "zero3" else p
        return state["lay"].unpad(np, np.asarray(whole.addressable_data(0)).reshape(-1))

    return {"params": Z.Readback(read, wait=p.block_until_ready)}


def run_ddp(state):
    return _train(state, "ddp")


def run_zero1(state):
    return _train(state, "zero1")


def run_zero2(state):
    return _train(state, "zero2")


def run_zero3(state):
    return _train(state, "zero3")
