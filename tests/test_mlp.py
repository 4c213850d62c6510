"""The hand-written MLP (impls/_shared/mlp.py) that CuPy's training impls run: the same code with
numpy, held against torch's autograd on the same weights and batch."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from impls._shared import mlp

torch = pytest.importorskip("torch")


@settings(max_examples=25, deadline=None)
@given(depth=st.integers(1, 4), width=st.integers(1, 24), batch=st.integers(1, 16), seed=st.integers(0, 2**31 - 1))
def test_forward_and_backward_match_torch_autograd(depth, width, batch, seed):
    sizes = [width + 3] + [width] * (depth - 1) + [5]
    params = mlp.init_params(sizes, seed, np.float64)
    rng = np.random.default_rng(seed + 1)
    x, t = rng.standard_normal((batch, sizes[0])), rng.standard_normal((batch, sizes[-1]))

    y, cache = mlp.forward(np, params, x)
    loss, dy = mlp.mse(np, y, t)
    grads = mlp.backward(np, params, cache, dy)

    tp = [(torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)) for w, b in params]
    h = torch.tensor(x)
    for i, (w, b) in enumerate(tp):
        h = h @ w + b
        if i < len(tp) - 1:
            h = torch.relu(h)
    tloss = torch.nn.functional.mse_loss(h, torch.tensor(t))
    tloss.backward()
    np.testing.assert_allclose(loss, tloss.item(), rtol=1e-12)
    for (dw, db), (w, b) in zip(grads, tp):
        np.testing.assert_allclose(dw, w.grad.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(db, b.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_sgd_moves_against_the_gradient():
    params = mlp.init_params([4, 3, 2], 0)
    grads = [(np.ones_like(w), np.ones_like(b)) for w, b in params]
    new = mlp.sgd(params, grads, 0.5)
    for (w, b), (nw, nb) in zip(params, new):
        np.testing.assert_array_equal(nw, w - 0.5)
        np.testing.assert_array_equal(nb, b - 0.5)


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 50), steps=st.integers(1, 5), seed=st.integers(0, 2**31 - 1))
def test_adam_matches_torch_optim_adam(n, steps, seed):
    rng = np.random.default_rng(seed)
    p0, grads = rng.standard_normal(n), rng.standard_normal((steps, n))
    p, m, v = p0.copy(), np.zeros(n), np.zeros(n)
    tp = torch.tensor(p0, requires_grad=True)
    opt = torch.optim.Adam([tp], lr=0.01)
    for k in range(steps):
        mlp.adam(np, p, grads[k], m, v, k + 1, 0.01)
        tp.grad = torch.tensor(grads[k])
        opt.step()
    np.testing.assert_allclose(p, tp.detach().numpy(), rtol=1e-12, atol=1e-14)
    half = p0.copy()  # elementwise: a shard's step is the whole step's shard
    mh, vh = np.zeros(n), np.zeros(n)
    for k in range(steps):
        mlp.adam(np, half[: n // 2], grads[k][: n // 2], mh[: n // 2], vh[: n // 2], k + 1, 0.01)
    np.testing.assert_array_equal(half[: n // 2], p[: n // 2])
