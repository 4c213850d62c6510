"""Megatron's tensor-parallel MLP block, forward and backward by hand (CuPy has no autograd).

Built from scenarios/_models/mlp.py's layer functions against an array module `xp`, with the collectives
passed in, so the tests run the very code the CuPy impl runs with numpy ranks (threads) on the CPU.
A rank's shard: w1 (d_model, k) and b1 (k,) its columns of the first linear (column parallel),
w2 (k, d_model) its rows of the second (row parallel), b2 whole. x and target are whole on every rank.
"""
from __future__ import annotations

import math
import re

from harness.measure.metrics import emit
from scenarios._models import mlp


class Collectives:
    """all_reduce(a) -> sum over ranks; all_gather(a) -> every rank's a stacked on a new axis 0.
    Each call is counted in the current phase ("fwd" or "bwd") with the bytes one rank sends in a
    ring: 2(N-1)/N x a for an all-reduce, (N-1) x a for an all-gather."""

    def __init__(self, n, all_reduce, all_gather):
        self.n, self._all_reduce, self._all_gather = n, all_reduce, all_gather
        self.phase = "fwd"
        self.calls = {"fwd": 0, "bwd": 0}
        self.wire = {"fwd": 0.0, "bwd": 0.0}

    def issued(self, kind, nbytes):
        """Count one collective of `kind` on a block of nbytes per rank, issued here or by a library."""
        self.calls[self.phase] += 1
        self.wire[self.phase] += (2 * (self.n - 1) / self.n if kind == "all_reduce" else self.n - 1) * nbytes

    def all_reduce(self, a):
        self.issued("all_reduce", a.nbytes)
        return self._all_reduce(a)

    def all_gather(self, a):
        self.issued("all_gather", a.nbytes)
        return self._all_gather(a)

    def start(self):
        self.phase, self.calls, self.wire = "fwd", {"fwd": 0, "bwd": 0}, {"fwd": 0.0, "bwd": 0.0}

    def emit(self):
        for phase in ("fwd", "bwd"):
            emit(f"{phase}_collectives", self.calls[phase])
            emit(f"{phase}_wire_bytes", self.wire[phase])


def _grads(xp, shard, x, target, z1, h, y):
    """The row-parallel backward needs no communication: dy is whole on every rank. Returns the
    shard's gradients and dx's partial sum (this rank's hidden columns only)."""
    dy = y - target  # L = sum((y - target)^2) / 2
    dh, dw2, db2 = mlp.linear_backward(xp, h, shard["w2"], dy)
    dx_partial, dw1, db1 = mlp.linear_backward(xp, x, shard["w1"], mlp.relu_backward(xp, z1, dh))
    return dx_partial, {"dw1": dw1, "db1": db1, "dw2": dw2, "db2": db2}


def megatron_step(xp, shard, x, target, comm, reduce=True):
    """Column then row parallel: g (all-reduce) ends the forward, f (all-reduce of dx) the backward.
    reduce=False is the hazard: g forgotten, y is this rank's partial sum."""
    comm.start()
    z1 = mlp.linear(xp, x, shard["w1"], shard["b1"])  # column parallel: no communication
    h = mlp.relu(xp, z1)
    partial = h @ shard["w2"]  # row parallel: a partial sum over this rank's hidden rows
    y = (comm.all_reduce(partial) if reduce else partial) + shard["b2"]  # g; b2 added once
    comm.phase = "bwd"
    dx_partial, grads = _grads(xp, shard, x, target, z1, h, y)
    return {"y": y, "dx": comm.all_reduce(dx_partial), **grads}  # f's backward


def naive_step(xp, shard, x, target, comm, rank):
    """Every linear's output made whole by an all-gather (partial sums gathered, then summed here)."""
    comm.start()
    k = shard["w1"].shape[1]
    z1_r = mlp.linear(xp, x, shard["w1"], shard["b1"])
    z1 = xp.concatenate(list(comm.all_gather(z1_r)), axis=1)  # the whole hidden layer on every rank
    h = mlp.relu(xp, z1)[:, rank * k:(rank + 1) * k]  # ... of which the row-parallel linear uses its rows
    y = comm.all_gather(h @ shard["w2"]).sum(axis=0) + shard["b2"]
    comm.phase = "bwd"
    dx_partial, grads = _grads(xp, shard, x, target, z1_r, h, y)
    return {"y": y, "dx": comm.all_gather(dx_partial).sum(axis=0), **grads}


def dense_step(xp, whole, x, target, cols):
    """One device, the whole block; reports the gradients of the shard `cols` (a slice of hidden).
    Six GEMMs, as autograd runs them: two forward, and dh, dW2, dx, dW1 backward (mlp.backward drops
    the first layer's dx, which the block reports)."""
    z1 = mlp.linear(xp, x, whole["w1"], whole["b1"])
    h = mlp.relu(xp, z1)
    y = mlp.linear(xp, h, whole["w2"], whole["b2"])
    dx, g = _grads(xp, whole, x, target, z1, h, y)  # the whole hidden layer: dx is whole, not a partial sum
    return {"y": y, "dx": dx, "dw1": g["dw1"][:, cols], "db1": g["db1"][cols], "dw2": g["dw2"][cols], "db2": g["db2"]}


_HLO_COLLECTIVE = re.compile(r"=\s*(.*?)\s(all-reduce|all-gather|reduce-scatter)(-start)?\(")
_HLO_ARRAY = re.compile(r"\b(f64|f32|bf16|f16)\[([\d,]*)\]")
_HLO_BYTES = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2}


def hlo_collectives(text, n):
    """(calls, bytes one rank sends in a ring) of the collectives in a compiled XLA program's text
    (JAX: jit(f).lower(...).compile().as_text()). Sizes are the results': an all-gather's result is
    N blocks, of which a rank sends N-1; a reduce-scatter's result is one block, sent N-1 times. An async
    all-gather-start's result is (operands, results): only the results count."""
    calls, wire = 0, 0.0
    for result, op, start in _HLO_COLLECTIVE.findall(text):
        arrays = _HLO_ARRAY.findall(result)
        if start and op == "all-gather":
            arrays = arrays[len(arrays) // 2:]
        size = sum(_HLO_BYTES[t] * math.prod(int(d) for d in dims.split(",") if d) for t, dims in arrays)
        calls += 1
        wire += size * {"all-reduce": 2 * (n - 1) / n, "all-gather": (n - 1) / n, "reduce-scatter": n - 1}[op]
    return calls, wire
