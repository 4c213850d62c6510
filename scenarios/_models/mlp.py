"""The small MLP of parts 4-6 (data parallelism, ZeRO, tensor parallelism), written out by hand.

CuPy has no autograd, so its training impls run this forward and backward. Every function takes the
array module `xp` (numpy on the CPU, cupy on a GPU; `cupy.get_array_module(x)` gives it), so the tests
run the very code the CuPy impls run with numpy and hold it against torch's autograd.

Layers are (W, b) pairs, W of shape (fan_in, fan_out): y = x @ W + b, ReLU between layers and none
after the last. Loss: mean squared error over every element of the batch.
"""
from __future__ import annotations

import numpy as np


def init_params(sizes, seed, dtype=np.float32):
    """Host (numpy) weights for layer sizes [d_in, h, ..., d_out]: the same draw in every framework."""
    rng = np.random.default_rng(seed)
    return [((rng.standard_normal((i, o)) / np.sqrt(i)).astype(dtype), (0.1 * rng.standard_normal(o)).astype(dtype))
            for i, o in zip(sizes[:-1], sizes[1:])]


def linear(xp, x, w, b):
    return x @ w + b


def linear_backward(xp, x, w, dy):
    """(dx, dW, db) of y = x @ w + b."""
    return dy @ w.T, x.T @ dy, dy.sum(axis=0)


def relu(xp, z):
    return xp.maximum(z, 0)


def relu_backward(xp, z, dy):
    return dy * (z > 0)


def forward(xp, params, x):
    """The output and what backward needs: each layer's input and pre-activation."""
    cache, h = [], x
    for i, (w, b) in enumerate(params):
        z = linear(xp, h, w, b)
        cache.append((h, z))
        h = relu(xp, z) if i < len(params) - 1 else z
    return h, cache


def mse(xp, y, target):
    """Mean squared error over every element, and its gradient with respect to y."""
    d = y - target
    return (d * d).mean(), d * (2.0 / d.size)


def backward_layers(xp, params, cache, dy):
    """Yield (i, (dW, db)) from the last layer to the first, as backward produces them (what data
    parallelism overlaps its all-reduces with). The first layer's dx is not computed: nothing reads it
    (torch's autograd skips it too when the input does not require grad)."""
    for i in reversed(range(len(params))):
        h, z = cache[i]
        dz = relu_backward(xp, z, dy) if i < len(params) - 1 else dy
        w = params[i][0]  # fetched for every layer (ZeRO-3 gathers it here, as FSDP does before a backward)
        dy = dz @ w.T if i > 0 else None
        yield i, (h.T @ dz, dz.sum(axis=0))


def backward_tensors(xp, params, cache, dy):
    """Yield (j, gradient) for each parameter in the order torch's autograd makes them ready: from the
    last layer to the first, a layer's bias (j = 2i + 1) before its weight (j = 2i); j is the
    parameter's place in the flat order (W0, b0, W1, b1, ...). The first layer's dx is not computed."""
    for i in reversed(range(len(params))):
        h, z = cache[i]
        dz = relu_backward(xp, z, dy) if i < len(params) - 1 else dy
        yield 2 * i + 1, dz.sum(axis=0)
        yield 2 * i, h.T @ dz
        if i > 0:
            dy = dz @ params[i][0].T


def backward(xp, params, cache, dy):
    """Gradients [(dW, db), ...] in layer order, from dL/dy."""
    grads = [None] * len(params)
    for i, g in backward_layers(xp, params, cache, dy):
        grads[i] = g
    return grads


def sgd(params, grads, lr):
    """One plain SGD step: new (W, b) pairs."""
    return [(w - lr * dw, b - lr * db) for (w, b), (dw, db) in zip(params, grads)]


def adam(xp, p, g, m, v, step, lr, b1=0.9, b2=0.999, eps=1e-8):
    """One Adam step (torch.optim.Adam's formula, no weight decay) on arrays of any shape, in place:
    p, m and v are updated; step counts from 1. Elementwise, so it runs on a shard of a flat vector
    as well as on a whole layer (what ZeRO relies on)."""
    m *= b1
    m += (1 - b1) * g
    v *= b2
    v += (1 - b2) * g * g
    denom = xp.sqrt(v) / np.sqrt(1 - b2 ** step) + eps
    p -= (lr / (1 - b1 ** step)) * m / denom
    return p
