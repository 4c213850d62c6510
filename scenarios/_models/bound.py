"""How far a correct float32 run of the MLP with Adam (scenarios/_models/mlp.py) may end from the float64
reference, per parameter: the zero scenario's tolerance beyond its flat band (Scenario.error_bound).

Why a bound and not a wider band: Adam moves a parameter by about lr whatever its gradient's size, so a
gradient that float32 gets slightly wrong moves its parameter by up to lr x dg / (|g| + eps); and where a
pre-activation lies within float32's rounding of zero, float32 may take the other side of the ReLU, which
changes that unit's share of a whole column of gradients outright, by far more than rounding. Both are
correct float32 computations. Each is rare (about one such pre-activation in 10^7, a few a run at the full
size), so a flat band wide enough for them would also pass a stage that skipped an update.

The bound runs the reference's steps in float64 beside error bounds, layer by layer, in the probabilistic
model of rounding (Higham, "Accuracy and Stability of Numerical Algorithms", 3.6): the errors of
independent operations add in quadrature. (Added as absolute values they grow about 25x a layer at width
1024, and by the second step every ReLU of the model was ambiguous: a bound of 6e-3, six steps of lr, on
every parameter, which no failure could leave.)
- a dot product of K float32 terms errs by at most LAMBDA u sqrt(K) ||terms||_2 (u = 2^-24), at LAMBDA =
  8 about 20 standard deviations of a sum rounded in any order (a TF32 GEMM's error, 2^13 u a term, is far
  outside it);
- errors already in a layer's inputs and parameters add sqrt(dh^2 W^2 + h^2 dW^2 + dh^2 dW^2);
- a pre-activation whose |z| is within its own bound is ambiguous: its unit's gradient may be dy or 0,
  so the bound on dz there is |dy| plus dy's own bound;
- the gradients' bounds D follow backward the same way; Adam's update u = m^ / (sqrt(v^) + eps) then moves
  by at most (1 + c) max(D) / max(sqrt(v^) + eps - max(D), eps): m^ and sqrt(v^) are a weighted mean and a
  weighted norm of the steps' gradients, each moved by at most max(D), and |m^| <= c sqrt(v^), where c
  (adam_cap: 1 at the first step, 1.0013 at the second) follows from the weights; and by at most 2c;
- the parameters' bounds P grow by lr times that (and Adam's own rounding), and enter the next step's
  forward and backward.
Checked by tests/test_zero.py: float32 runs that take the other branch at every ambiguous ReLU stay inside
the bound, and a stage that skipped an update is still outside it in most parameters.
"""
from __future__ import annotations

import math

import numpy as np

from scenarios._models import mlp
from scenarios._models.flat import unflatten

U = 2.0 ** -24  # float32's unit roundoff
LAMBDA = 8.0  # standard deviations of rounding a sum, times about 2.5 (sqrt(K/6) against sqrt(K))


def _round(terms_sq_sum: np.ndarray, k: int, lam: float) -> np.ndarray:
    """The rounding bound of dot products of k terms, from the sums of their squared terms."""
    return lam * U * math.sqrt(k) * np.sqrt(terms_sq_sum)


def adam_cap(step: int, b1: float = 0.9, b2: float = 0.999) -> float:
    """The largest |m^| / sqrt(v^) Adam can take at `step` (Cauchy-Schwarz over the gradients' weights)."""
    w1 = [(1 - b1) * b1 ** (step - s) / (1 - b1 ** step) for s in range(1, step + 1)]
    w2 = [(1 - b2) * b2 ** (step - s) / (1 - b2 ** step) for s in range(1, step + 1)]
    return math.sqrt(sum(a * a / b for a, b in zip(w1, w2)))


def _grad_with_bound(params, bounds, x, t, lam):
    """The float64 gradient at params on (x, t), with a bound on a float32 run's error in it given the
    parameters' own bounds (errors of independent operations combined in quadrature); also each hidden
    layer's ambiguous pre-activations (boolean masks)."""
    h, eh2, cache, amb = x, np.zeros_like(x), [], []
    for i, ((w, b), (pw, pb)) in enumerate(zip(params, bounds)):
        z = h @ w + b
        w2, pw2 = w * w, pw * pw
        ez2 = (_round((h * h) @ w2, w.shape[0] + 1, lam) ** 2 + (U * b) ** 2 + eh2 @ w2 + (h * h) @ pw2
               + eh2 @ pw2 + pb * pb)
        cache.append((h, eh2, z))
        if i < len(params) - 1:
            amb.append(z * z <= ez2)
            h, eh2 = np.maximum(z, 0), ez2
        else:
            y, ey2 = z, ez2
    dy = (y - t) * (2.0 / (y.size))
    edy2 = ey2 * (2.0 / y.size) ** 2 + (2 * U * dy) ** 2
    grads, gbounds = [None] * len(params), [None] * len(params)
    for i in reversed(range(len(params))):
        h, eh2, z = cache[i]
        if i < len(params) - 1:
            alive, a = z > 0, amb[i]
            dz, edz2 = dy * alive, edy2 * (alive | a) + dy * dy * a  # ambiguous: dz is dy or 0
        else:
            dz, edz2 = dy, edy2
        dz2, h2 = dz * dz, h * h
        egw2 = _round(h2.T @ dz2, h.shape[0], lam) ** 2 + eh2.T @ dz2 + h2.T @ edz2 + eh2.T @ edz2
        egb2 = _round(dz2.sum(axis=0), h.shape[0], lam) ** 2 + edz2.sum(axis=0)
        grads[i], gbounds[i] = (h.T @ dz, dz.sum(axis=0)), (np.sqrt(egw2), np.sqrt(egb2))
        if i > 0:
            w, pw = params[i][0], bounds[i][0]
            w2 = w * w
            edy2 = (_round(dz2 @ w2.T, w.shape[1], lam) ** 2 + edz2 @ w2.T + dz2 @ (pw * pw).T + edz2 @ (pw * pw).T)
            dy = dz @ w.T
    return grads, gbounds, amb


def adam_bound(flat: np.ndarray, sizes: list[int], xs: np.ndarray, ts: np.ndarray, lr: float, eps: float,
               lam: float = LAMBDA) -> tuple[np.ndarray, list[list[np.ndarray]]]:
    """(per parameter, the bound on |float32 run - float64 reference| after len(xs) Adam steps from flat on
    the batches xs, ts; per step, each hidden layer's ambiguous pre-activations)."""
    p = flat.astype(np.float64).copy()
    m, v, pbound = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    dmax = np.zeros_like(p)
    ambiguous = []
    for k in range(len(xs)):
        params, bounds = unflatten(p, sizes), unflatten(pbound, sizes)
        grads, gbounds, amb = _grad_with_bound(params, bounds, xs[k].astype(np.float64), ts[k].astype(np.float64), lam)
        ambiguous.append(amb)
        g = np.concatenate([a.ravel() for layer in grads for a in layer])
        d = np.concatenate([a.ravel() for layer in gbounds for a in layer])
        dmax = np.maximum(dmax, d)
        before = p.copy()
        mlp.adam(np, p, g, m, v, k + 1, lr, eps=eps)
        step = k + 1
        a = np.sqrt(v / (1 - 0.999 ** step)) + eps
        cap = adam_cap(step)
        du = np.minimum((1 + cap) * dmax / np.maximum(a - dmax, eps), 2 * cap)
        moved = np.abs(p - before)
        pbound += lr * du + 4 * U * (np.abs(p) + moved)
    return pbound, ambiguous
