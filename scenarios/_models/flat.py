"""The flat layout of the MLP's parameters and gradients ([W0.ravel(), b0, W1.ravel(), b1, ...], the
data_parallel and zero scenarios' output layout; a layer's (W, b) are views into it) and one rank's local
gradient over it: the model that the scenarios' numpy references and the impls (impls/_shared/dp.py) both run,
so it lives outside impls/."""
from __future__ import annotations

import numpy as np

from scenarios._models import mlp


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


def local_grad(xp, flat, sizes, x, t, grad, accum=1, on_ready=None):
    """grad[:] = the mean-squared-error gradient over the rows of x, in `accum` equal micro-batches,
    summed and scaled by 1/accum. on_ready(j) is called once the flat order's tensor j (W0, b0, W1, ...)
    holds its gradient of the last micro-batch, in the order backward makes them ready."""
    params, grads = unflatten(flat, sizes), [g for layer in unflatten(grad, sizes) for g in layer]
    m = x.shape[0] // accum
    for a in range(accum):
        y, cache = mlp.forward(xp, params, x[a * m:(a + 1) * m])
        _, dy = mlp.mse(xp, y, t[a * m:(a + 1) * m])
        for j, g in mlp.backward_tensors(xp, params, cache, dy):
            if a == 0:
                grads[j][...] = g
            else:
                grads[j][...] += g
            if a == accum - 1:
                if accum > 1:
                    grads[j][...] /= accum
                if on_ready is not None:
                    on_ready(j)
    return grad
