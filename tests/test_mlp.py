"""The hand-written MLP (scenarios/_models/mlp.py) that CuPy's training impls run: the same code with
numpy, held against torch's autograd on the same weights and batch."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scenarios._models import mlp

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


class _Counting(np.ndarray):
    """numpy arrays that count the matrix products they take part in (the @ operator is np.matmul)."""

    products = 0

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if ufunc is np.matmul:
            _Counting.products += 1
        out = getattr(ufunc, method)(*(np.asarray(a) for a in inputs), **kwargs)
        return out.view(_Counting) if isinstance(out, np.ndarray) else out


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_backward_skips_the_first_layers_dx(depth):
    """L layers: L products forward, 2L - 1 backward (every dW, every dx but the first layer's, which nothing
    reads; torch's autograd skips it too), in both backward generators."""
    sizes = [6] + [5] * (depth - 1) + [3]
    params = [(w.view(_Counting), b.view(_Counting)) for w, b in mlp.init_params(sizes, 0)]
    x = np.ones((4, sizes[0]), np.float32).view(_Counting)
    for backward in (mlp.backward_layers, mlp.backward_tensors):
        _Counting.products = 0
        y, cache = mlp.forward(np, params, x)
        assert _Counting.products == depth
        _, dy = mlp.mse(np, y, np.zeros_like(y))
        list(backward(np, params, cache, dy))
        assert _Counting.products == depth + 2 * depth - 1, backward.__name__


@settings(max_examples=10, deadline=None)
@given(depth=st.integers(1, 4), width=st.integers(1, 9), seed=st.integers(0, 2**31 - 1))
def test_backward_tensors_are_the_gradients_in_ready_order(depth, width, seed):
    """Bias before weight, last layer first (torch's AccumulateGrad order), j the flat index (W0, b0, W1, ...)."""
    sizes = [width + 1] + [width] * (depth - 1) + [2]
    params = mlp.init_params(sizes, seed, np.float64)
    x = np.random.default_rng(seed).standard_normal((5, sizes[0]))
    y, cache = mlp.forward(np, params, x)
    _, dy = mlp.mse(np, y, np.zeros_like(y))
    want = [g for layer in mlp.backward(np, params, cache, dy) for g in layer]
    got = list(mlp.backward_tensors(np, params, cache, dy))
    assert [j for j, _ in got] == list(reversed(range(2 * depth)))
    for j, g in got:
        np.testing.assert_array_equal(g, want[j])
