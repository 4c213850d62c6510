"""zero in JAX: one process per device (jax.distributed joined before prepare), the stages written with
jax.shard_map over the processes' mesh: lax.psum (ddp), lax.psum_scatter (the gradient's reduce-scatter) and
lax.all_gather (the parameters). The state lives in global arrays, one per layer (a padded segment, as in
impls/_shared/zero.py): replicated (P()), or sharded P('r') so that each device holds its chunk.

A step is two jitted programs, the gradient and the update, so the gradient a rank holds between them is a real
array whose bytes can be counted. check_vma=False: a replicated input's gradient stays this device's own (no
implicit psum); every reduction is written out. Dispatch is asynchronous; the harness waits."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from impls._shared import dp
from impls._shared import tensor_parallel as tp
from impls._shared import zero as Z
from scenarios.zero import sizes

HI = jax.lax.Precision.HIGHEST  # full float32 (JAX's GPU default would be TF32)
B1, B2 = 0.9, 0.999
R, REP = P("r"), P()
SPECS = {"ddp": (REP, REP, REP), "zero1": (REP, R, R), "zero2": (REP, R, R), "zero3": (R, R, R)}  # p, g, m/v


class _Programs:
    """One stage's step as two jitted shard_maps, the gradient and the update. The gradient is summed over ranks
    (ddp: psum; zero2, zero3: psum_scatter, zero3's as all_gather's transpose) or left local (zero1); the update
    divides it by N. Compiled once: the bytes its collectives send, XLA's peak bytes."""

    def __init__(self, mesh, lay, stage, eps):
        self.lay, self.stage, self.eps, self.compiled = lay, stage, eps, None
        ps, gs, ms = SPECS[stage]
        sm = lambda f, i, o: jax.jit(jax.shard_map(f, mesh=mesh, in_specs=i, out_specs=o, check_vma=False))  # noqa
        self.grad = sm(self._grad, (ps, R, R), gs)
        self.update = sm(self._update, (ps, gs, ms, ms, REP, REP), (ps, ms, ms))

    def _loss(self, segs, x, t):
        """Mean squared error of the MLP whose layer i is segs[i]; zero3 all-gathers each layer inside
        jax.checkpoint, so that backward is asked to gather it again instead of keeping it."""
        h, gather = x, self.stage == "zero3"
        for i, seg in enumerate(segs):
            def layer(seg, h, i=i):
                w, b = self.lay.layer(jax.lax.all_gather(seg, "r", tiled=True) if gather else seg, i)
                return jnp.matmul(h, w, precision=HI) + b
            z = jax.checkpoint(layer)(seg, h) if gather else layer(seg, h)
            h = jax.nn.relu(z) if i < len(segs) - 1 else z
        return jnp.mean((h - t) ** 2)

    def _grad(self, p, x, t):
        g = jax.grad(self._loss)(p, x, t)
        if self.stage == "ddp":
            return [jax.lax.psum(a, "r") for a in g]
        return [jax.lax.psum_scatter(a, "r", tiled=True) for a in g] if self.stage == "zero2" else g

    def _update(self, p, g, m, v, c1, c2):
        out, n, mine = ([], [], []), self.lay.world, self.stage in ("zero1", "zero2")  # mine: replicated params
        for i, (pi, gi, mi, vi) in enumerate(zip(p, g, m, v)):
            gi = (jax.lax.psum_scatter(gi, "r", tiled=True) if self.stage == "zero1" else gi) / n
            c = self.lay.chunk[i]
            pi = jax.lax.dynamic_slice_in_dim(pi, jax.lax.axis_index("r") * c, c) if mine else pi
            mi, vi = B1 * mi + (1 - B1) * gi, B2 * vi + (1 - B2) * gi * gi
            pi = pi - c1 * mi / (jnp.sqrt(vi) / c2 + self.eps)
            for o, a in zip(out, (jax.lax.all_gather(pi, "r", tiled=True) if mine else pi, mi, vi)):
                o.append(a)
        return out

    def compile(self, p, m, x, t, c):
        if self.compiled is None:
            grad = self.grad.lower(p, x, t).compile()
            both = [grad, self.update.lower(p, grad(p, x, t), m, m, *c).compile()]
            sent = sum(tp.hlo_collectives(b.as_text(), self.lay.world)[1] for b in both)
            mem = [b.memory_analysis() for b in both]
            peak = max((a.argument_size_in_bytes + a.output_size_in_bytes + a.temp_size_in_bytes
                        - a.alias_size_in_bytes) for a in mem) if all(mem) else float("nan")
            self.compiled = (both, sent, peak)
        return self.compiled


def prepare(inputs, params, device):
    mesh = Mesh(np.array(jax.devices()), ("r",))  # one device per process, in process order
    rank, world, lay = jax.process_index(), jax.process_count(), Z.Layout(sizes(params), jax.process_count())
    split, rep = NamedSharding(mesh, R), NamedSharding(mesh, REP)
    glob = jax.make_array_from_process_local_data  # this process's block of a global array
    full = lay.pad(np, inputs["init"])
    return {"lay": lay, "rank": rank, "lr": float(params["lr"]), "split": split, "rep": rep, "glob": glob,
            "x": [glob(split, dp.shard(a, rank, world)) for a in inputs["x"]],
            "t": [glob(split, dp.shard(a, rank, world)) for a in inputs["t"]],
            "full": [lay.seg(full, i) for i in range(len(lay.chunk))],
            "own": [lay.own(full, i, rank) for i in range(len(lay.chunk))],
            "programs": {s: _Programs(mesh, lay, s, float(params["eps"])) for s in Z.STAGES}, "start": {},
            "gather": jax.jit(lambda a: a, out_shardings=rep)}  # zero3's parameters all-gathered, after the steps


def barrier(state):
    multihost_utils.sync_global_devices("triptych repeat")


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _train(state, stage):
    """`steps` Adam steps of one stage from the initial parameters; emits what the rank held and sent."""
    if stage not in state["start"]:  # on the first (untimed) call: device arrays, immutable, reused by every run
        glob, ps, _, ms = state["glob"], *SPECS[stage]
        on = lambda spec, parts: [glob(state["split" if spec == R else "rep"], a) for a in parts]  # noqa: E731
        state["start"][stage] = (on(ps, state["own"] if ps == R else state["full"]),
                                 on(ms, [np.zeros_like(a) for a in (state["own"] if ms == R else state["full"])]))
    p, m = state["start"][stage]
    v = m
    for k, (x, t) in enumerate(zip(state["x"], state["t"]), 1):
        c = (np.float32(state["lr"] / (1 - B1 ** k)), np.float32(np.sqrt(1 - B2 ** k)))
        (grad, update), sent, peak = state["programs"][stage].compile(p, m, x, t, c)
        g = grad(p, x, t)
        p, m, v = update(p, g, m, v, *c)
    nbytes = lambda arrays: sum(s.data.nbytes for a in arrays for s in a.addressable_shards)  # noqa: E731
    Z.report({"param_bytes": nbytes(p), "grad_bytes": nbytes(g), "optim_bytes": nbytes(m) + nbytes(v)}, sent, peak)
    whole = state["gather"](p)
    return {"params": jnp.concatenate([a.addressable_data(0)[:n] for a, n in zip(whole, state["lay"].lengths)])}


def run_ddp(state):
    return _train(state, "ddp")


def run_zero1(state):
    return _train(state, "zero1")


def run_zero2(state):
    return _train(state, "zero2")


def run_zero3(state):
    return _train(state, "zero3")
