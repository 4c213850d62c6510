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
dst), each a sum over ranks where it reduces), so this code says which bytes move when; Counted wraps
a comm and counts the bytes of each call it passes on.
"""
from __future__ import annotations

import re

import numpy as np

from harness.measure.metrics import emit
from impls._shared import dp
from scenarios._models import mlp
from impls._shared.tensor_parallel import hlo_collectives

STAGES = ("ddp", "zero1", "zero2", "zero3")
FULL_GRAD = ("ddp", "zero1")  # the stages whose ranks keep the whole gradient


KINDS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")


def wire(kind, nbytes, n):
    """Bytes one rank sends on a ring for a collective over a buffer of nbytes (the reduced buffer, a
    reduce-scatter's input, an all-gather's output): 2(N-1)/N for an all-reduce, (N-1)/N otherwise."""
    return nbytes * (n - 1) / n * (2 if kind == "all_reduce" else 1)


class Counted:
    """A comm (all_reduce, reduce_scatter, all_gather) whose calls add the bytes this rank sends, by kind."""

    def __init__(self, comm, n):
        self.comm, self.n, self.rank, self.sent = comm, n, comm.rank, dict.fromkeys(KINDS, 0.0)

    def all_reduce(self, buf):
        self.comm.all_reduce(buf)
        self.sent["all_reduce"] += wire("all_reduce", buf.nbytes, self.n)

    def reduce_scatter(self, src, dst):
        self.comm.reduce_scatter(src, dst)
        self.sent["reduce_scatter"] += wire("reduce_scatter", src.nbytes, self.n)

    def all_gather(self, src, dst):
        self.comm.all_gather(src, dst)
        self.sent["all_gather"] += wire("all_gather", dst.nbytes, self.n)


class Readback:
    """A run's output, read when the harness converts it to numpy (np.asarray: untimed, after the run; every rank
    converts the same runs' outputs, so a gather in read() is a collective every rank joins). The timed call is
    the steps: the gather and unpadding of the result is not the stage's work. wait() blocks on what the steps
    made (JAX: the harness waits on the outputs it is given; torch and CuPy wait on the whole device)."""

    def __init__(self, read, wait=lambda: None):
        self.read, self.wait = read, wait

    def block_until_ready(self):
        self.wait()
        return self

    def __array__(self, dtype=None, copy=None):
        a = np.asarray(self.read())
        return a if dtype is None else a.astype(dtype)


_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.-]+) \(.*\{$")
_CALLS = re.compile(r"\b(body|calls|to_apply|condition|true_computation|false_computation)=%?([\w.-]+)")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def hlo_sent(text, n):
    """Bytes one rank sends on a ring in one run of a compiled XLA program (its HLO text), by kind, each
    collective counted as often as it runs: a while loop's body times its known trip count (NaN where XLA
    knows none)."""
    comps, name, entry = {}, None, None
    for line in text.splitlines():
        head = _COMPUTATION.match(line)
        if head:
            name = head.group(1)
            comps[name] = []
            entry = name if line.startswith("ENTRY") else entry
        elif name is not None:
            comps[name].append(line)

    def sent(comp):
        total = dict.fromkeys(KINDS, 0.0)
        for line in comps[comp]:
            for kind in KINDS:
                if f" {kind.replace('_', '-')}" in line:
                    total[kind] += hlo_collectives(line, n)[1]
            for role, callee in _CALLS.findall(line):
                if role == "body" or (role == "calls" and " call(" in line):
                    trips = _TRIPS.search(line)
                    times = 1 if role == "calls" else (int(trips.group(1)) if trips else float("nan"))
                    for kind, b in sent(callee).items():
                        total[kind] += times * b
        return total

    return sent(entry)


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

    def layer(self, seg, i, out_in=False):
        """(W, b) as views of a padded segment; W is (in, out), or (out, in) as torch keeps it with out_in."""
        fi, fo = self.sizes[i], self.sizes[i + 1]
        return seg[:fi * fo].reshape((fo, fi) if out_in else (fi, fo)), seg[fi * fo:fi * fo + fo]

    def pad(self, xp, flat):
        buf = xp.zeros(self.total, dtype=flat.dtype)
        for i, (a, b) in enumerate(dp.layer_ranges(self.sizes)):
            self.seg(buf, i)[:b - a] = flat[a:b]
        return buf

    def unpad(self, xp, buf):
        return xp.concatenate([self.seg(buf, i)[:n] for i, n in enumerate(self.lengths)])

    def shard(self, xp, full, rank):
        return xp.concatenate([self.own(full, i, rank) for i in range(len(self.lengths))])


def dim0_chunk(d0, rank, n):
    """Rank's rows of a tensor's dim 0 as FSDP2 shards it: ceil(d0 / N) rows a rank, the last ones may hold none."""
    rows = -(-d0 // n)
    return slice(rank * rows, (rank + 1) * rows)


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
            "v": zeros(n_mv), "k": 0}


def held(st):
    """Bytes of parameters, gradients and optimizer state this rank holds at the optimizer step."""
    return {"param_bytes": st["p"].nbytes, "grad_bytes": st["g"].nbytes, "optim_bytes": st["m"].nbytes + st["v"].nbytes}


def report(held_bytes, sent, peak_bytes=None):
    """Emit a run's metrics: what the rank held at the optimizer step, sent per step ({kind: bytes}), and its peak
    (if measured)."""
    for k, v in held_bytes.items():
        emit(k, v)
    emit("model_state_bytes", sum(held_bytes.values()))
    emit("comm_bytes", sum(sent.values()))
    for kind in KINDS:
        emit(f"comm_bytes_{kind}", sent[kind])
    if peak_bytes is not None:
        emit("peak_bytes", peak_bytes)


def step(xp, stage, st, lay, x, t, comm, lr, eps, probe=lambda: None):
    """One Adam step on this rank's rows (x, t); the gradient is averaged over the N ranks.
    probe() is called where the held bytes peak (after a gather, after backward)."""
    n, r = lay.world, comm.rank

    def fetch(i):
        if stage != "zero3":
            return lay.layer(lay.seg(st["p"], i), i)
        full = xp.empty(lay.padded[i], dtype=st["p"].dtype)  # this layer only, dropped after use
        comm.all_gather(lay.piece(st["p"], i), full)
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
            probe()
    probe()
    if stage == "ddp":
        comm.all_reduce(st["g"])
    st["k"] += 1
    for i in range(len(lay.lengths)):
        if stage == "zero1":  # in place: this rank's chunk of the full gradient becomes the sum
            comm.reduce_scatter(lay.seg(st["g"], i), lay.own(st["g"], i, r))
        pick = (lambda a: lay.seg(a, i)) if stage == "ddp" else (lambda a: lay.piece(a, i))
        p = pick(st["p"]) if stage in ("ddp", "zero3") else lay.own(st["p"], i, r)
        g = lay.own(st["g"], i, r) if stage == "zero1" else pick(st["g"])
        g /= n
        mlp.adam(xp, p, g, pick(st["m"]), pick(st["v"]), st["k"], lr, eps=eps)
        if stage in ("zero1", "zero2"):  # in place: every rank's updated chunk into the full parameters
            comm.all_gather(p, lay.seg(st["p"], i))
    probe()


def gather_params(xp, stage, st, lay, comm):
    """The full parameters, flat and unpadded (zero3 all-gathers them; not counted as a step's traffic)."""
    if stage != "zero3":
        return lay.unpad(xp, st["p"])
    full = xp.empty(lay.total, dtype=st["p"].dtype)
    for i in range(len(lay.lengths)):
        comm.all_gather(lay.piece(st["p"], i), lay.seg(full, i))
    return lay.unpad(xp, full)
