"""ZeRO stages 1-3 written out against an array module (`xp`): what CuPy's zero impl runs with NCCL,
and what the tests run with numpy and simulated collectives (one thread per rank).

Layout. The parameters keep data_parallel's flat order (W0, b0, W1, b1, ...). Each layer's (W, b) is
one segment, padded with zeros to a multiple of N and split into N equal chunks, as FSDP shards a
module: rank r owns chunk r of every layer, and its shard buffer is those chunks, layer after layer.
A full buffer holds every layer's padded segment; a rank's chunk in it is a view, so NCCL's in-place
reduce-scatter and all-gather (recv = send + rank x count) need no staging copy. Padding stays zero:
its gradient is zero and so is its Adam update.

What a rank holds between steps (p parameters, g gradients, m and v Adam's moments; T the padded
parameter count, S = T/N its shard):
    ddp    p T, g T, m T, v T     all-reduce of g
    zero1  p T, g T, m S, v S     reduce-scatter of g into its own chunk, Adam on it, all-gather of p
    zero2  p T, g S, m S, v S     each layer's gradient reduce-scattered as backward finishes it
    zero3  p S, g S, m S, v S     each layer all-gathered before forward and again before backward
Collectives are callbacks of `comm` (all_reduce(buf), reduce_scatter(src, dst), all_gather(src,
dst), each a sum over ranks where it reduces), so this code says which bytes move when.
"""
from __future__ import annotations

import numpy as np

from harness.metrics import emit
from impls._shared import dp, mlp

STAGES = ("ddp", "zero1", "zero2", "zero3")
FULL_GRAD = ("ddp", "zero1")  # the stages whose ranks keep the whole gradient


def wire(kind, nbytes, n):
    """Bytes one rank sends on a ring for a collective over a buffer of nbytes (the reduced buffer, a
    reduce-scatter's input, an all-gather's output): 2(N-1)/N for an all-reduce, (N-1)/N otherwise."""
    return nbytes * (n - 1) / n * (2 if kind == "all_reduce" else 1)


class Layout:
    """Per layer i: its padded length padded[i] (a multiple of N), chunk[i] = padded[i] / N, its
    offset in a full buffer and in a rank's shard."""

    def __init__(self, sizes, world):
        self.sizes, self.world = list(sizes), world
        self.lengths = [b - a for a, b in dp.layer_ranges(sizes)]
        self.padded = [-(-n // world) * world for n in self.lengths]
        self.chunk = [p // world for p in self.padded]
        self.offset = np.cumsum([0, *self.padded]).tolist()
        self.shard_offset = np.cumsum([0, *self.chunk]).tolist()
        self.total, self.shard_total = self.offset[-1], self.shard_offset[-1]

    def seg(self, buf, i):
        """Layer i's padded segment of a full buffer."""
        return buf[self.offset[i]:self.offset[i + 1]]

    def own(self, buf, i, rank):
        """Rank's chunk of layer i inside a full buffer (a view)."""
        return self.seg(buf, i)[rank * self.chunk[i]:(rank + 1) * self.chunk[i]]

    def piece(self, shard, i):
        """Layer i's chunk inside a rank's shard buffer."""
        return shard[self.shard_offset[i]:self.shard_offset[i + 1]]

    def layer(self, seg, i):
        """(W, b) as views of a padded segment."""
        fi, fo = self.sizes[i], self.sizes[i + 1]
        return seg[:fi * fo].reshape(fi, fo), seg[fi * fo:fi * fo + fo]

    def pad(self, xp, flat):
        buf = xp.zeros(self.total, dtype=flat.dtype)
        for i, (a, b) in enumerate(dp.layer_ranges(self.sizes)):
            self.seg(buf, i)[:b - a] = flat[a:b]
        return buf

    def unpad(self, xp, buf):
        return xp.concatenate([self.seg(buf, i)[:n] for i, n in enumerate(self.lengths)])

    def shard(self, xp, full, rank):
        return xp.concatenate([self.own(full, i, rank) for i in range(len(self.lengths))])


class _Layers:
    """The layers as mlp.forward / mlp.backward_layers index them, each fetched when it is used."""

    def __init__(self, n, fetch):
        self.n, self.fetch = n, fetch

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.fetch(i)


def init_state(xp, stage, flat, lay, rank):
    """A rank's buffers before the first step, from the full initial parameters (flat, unpadded)."""
    full = lay.pad(xp, flat)
    n_g = lay.total if stage in FULL_GRAD else lay.shard_total
    n_mv = lay.total if stage == "ddp" else lay.shard_total
    zeros = lambda n: xp.zeros(n, dtype=full.dtype)  # noqa: E731
    return {"p": lay.shard(xp, full, rank) if stage == "zero3" else full, "g": zeros(n_g), "m": zeros(n_mv),
            "v": zeros(n_mv), "k": 0, "wire": 0.0}


def held(st):
    """Bytes of parameters, gradients and optimizer state this rank holds at the optimizer step."""
    return {"param_bytes": st["p"].nbytes, "grad_bytes": st["g"].nbytes, "optim_bytes": st["m"].nbytes + st["v"].nbytes}


def report(held_bytes, comm_bytes, peak_bytes=None):
    """Emit a run's metrics: what the rank held at the optimizer step, sent per step, and its peak (if measured)."""
    for k, v in held_bytes.items():
        emit(k, v)
    emit("model_state_bytes", sum(held_bytes.values()))
    emit("comm_bytes", comm_bytes)
    if peak_bytes is not None:
        emit("peak_bytes", peak_bytes)


def step(xp, stage, st, lay, x, t, comm, lr, eps, probe=lambda: None):
    """One Adam step on this rank's rows (x, t); the gradient is averaged over the N ranks.
    probe() is called where the held bytes peak (after a gather, after backward)."""
    n, r = lay.world, comm.rank

    def count(kind, nbytes):
        st["wire"] += wire(kind, nbytes, n)

    def fetch(i):
        if stage != "zero3":
            return lay.layer(lay.seg(st["p"], i), i)
        full = xp.empty(lay.padded[i], dtype=st["p"].dtype)  # this layer only, dropped after use
        comm.all_gather(lay.piece(st["p"], i), full)
        count("all_gather", full.nbytes)
        probe()
        return lay.layer(full, i)

    layers = _Layers(len(lay.lengths), fetch)
    y, cache = mlp.forward(xp, layers, x)
    _, dy = mlp.mse(xp, y, t)
    for i, (dw, db) in mlp.backward_layers(xp, layers, cache, dy):
        seg = lay.seg(st["g"], i) if stage in FULL_GRAD else xp.zeros(lay.padded[i], dtype=st["g"].dtype)
        w, b = lay.layer(seg, i)
        w[...], b[...] = dw, db
        if stage not in FULL_GRAD:  # the layer's full gradient lives only until its reduce-scatter
            comm.reduce_scatter(seg, lay.piece(st["g"], i))
            count("reduce_scatter", seg.nbytes)
            probe()
    probe()
    if stage == "ddp":
        comm.all_reduce(st["g"])
        count("all_reduce", st["g"].nbytes)
    st["k"] += 1
    for i in range(len(lay.lengths)):
        if stage == "zero1":  # in place: this rank's chunk of the full gradient becomes the sum
            comm.reduce_scatter(lay.seg(st["g"], i), lay.own(st["g"], i, r))
            count("reduce_scatter", lay.seg(st["g"], i).nbytes)
        pick = (lambda a: lay.seg(a, i)) if stage == "ddp" else (lambda a: lay.piece(a, i))
        p = pick(st["p"]) if stage in ("ddp", "zero3") else lay.own(st["p"], i, r)
        g = lay.own(st["g"], i, r) if stage == "zero1" else pick(st["g"])
        g /= n
        mlp.adam(xp, p, g, pick(st["m"]), pick(st["v"]), st["k"], lr, eps=eps)
        if stage in ("zero1", "zero2"):  # in place: every rank's updated chunk into the full parameters
            comm.all_gather(p, lay.seg(st["p"], i))
            count("all_gather", lay.seg(st["p"], i).nbytes)
    probe()


def gather_params(xp, stage, st, lay, comm):
    """The full parameters, flat and unpadded (zero3 all-gathers them; not counted as a step's traffic)."""
    if stage != "zero3":
        return lay.unpad(xp, st["p"])
    full = xp.empty(lay.total, dtype=st["p"].dtype)
    for i in range(len(lay.lengths)):
        comm.all_gather(lay.piece(st["p"], i), lay.seg(full, i))
    return lay.unpad(xp, full)
