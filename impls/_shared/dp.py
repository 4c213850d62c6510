"""Data-parallel training written out against an array module (`xp`): what CuPy's data_parallel impl
runs, and what the tests run with numpy and a simulated all-reduce.

Parameters and gradients live in one flat vector, layer by layer ([W0.ravel(), b0, W1.ravel(), b1,
...], the scenario's output layout); a layer's (W, b) are views into it. Collectives are callbacks,
so the code names *when* a buffer may be reduced and leaves *how* (NCCL on a stream) to the impl.
"""
from __future__ import annotations

import numpy as np

from impls._shared import mlp


def shapes(sizes):
    """[(W shape), (b shape), ...] in flat order."""
    return [s for i, o in zip(sizes[:-1], sizes[1:]) for s in ((i, o), (o,))]


def offsets(sizes):
    """Start of each flat piece, and the total length."""
    ends = np.cumsum([int(np.prod(s)) for s in shapes(sizes)])
    return [0, *ends[:-1].tolist()], int(ends[-1])


def unflatten(flat, sizes):
    """[(W, b), ...] as views into flat."""
    starts, _ = offsets(sizes)
    views = [flat[a:a + int(np.prod(s))].reshape(s) for a, s in zip(starts, shapes(sizes))]
    return list(zip(views[0::2], views[1::2]))


def layer_ranges(sizes):
    """(start, end) of each layer's (W, b) in the flat vector."""
    starts, total = offsets(sizes)
    return [(starts[2 * i], starts[2 * i + 2] if 2 * i + 2 < len(starts) else total) for i in range(len(sizes) - 1)]


def buckets(sizes, cap_elems):
    """Layers grouped from the last (backward produces it first) into contiguous flat ranges of about
    cap_elems each, as torch's DDP fills its buckets: [(start, end, first_layer), ...] in reduce order."""
    out, end, count = [], None, 0
    for i, (a, b) in reversed(list(enumerate(layer_ranges(sizes)))):
        end = b if end is None else end
        count += b - a
        if count >= cap_elems or i == 0:
            out.append((a, end, i))
            end, count = None, 0
    return out


def local_grad(xp, flat, sizes, x, t, grad, accum=1, on_layer=None):
    """grad[:] = the mean-squared-error gradient over the rows of x, in `accum` equal micro-batches,
    summed and scaled by 1/accum. on_layer(i) is called once layer i's gradient of the last
    micro-batch is written (backward runs from the last layer to the first)."""
    params, grads = unflatten(flat, sizes), unflatten(grad, sizes)
    m = x.shape[0] // accum
    for a in range(accum):
        y, cache = mlp.forward(xp, params, x[a * m:(a + 1) * m])
        _, dy = mlp.mse(xp, y, t[a * m:(a + 1) * m])
        for i, (dw, db) in mlp.backward_layers(xp, params, cache, dy):
            if a == 0:
                grads[i][0][...], grads[i][1][...] = dw, db
            else:
                grads[i][0][...] += dw
                grads[i][1][...] += db
            if a == accum - 1:
                if accum > 1:
                    grads[i][0][...] /= accum
                    grads[i][1][...] /= accum
                if on_layer is not None:
                    on_layer(i)
    return grad


def shard(x, rank, world):
    """Rank r's rows of a global batch: the contiguous r-th of `world` equal parts."""
    n = x.shape[0] // world
    return x[rank * n:(rank + 1) * n]
