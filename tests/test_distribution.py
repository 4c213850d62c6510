"""Random outputs are compared by distribution: correct draws pass at the stated false-alarm rate and
wrong generators are caught (how a scenario declares its random outputs: tests/test_device_creation.py)."""
from __future__ import annotations

import numpy as np
import pytest

from harness.check.equivalence import compare_distribution
from scenarios.spec import Distribution

N = 1 << 16
STRICT = Distribution()  # alpha = 1e-9, the scenarios' rate


def _want(seed: int = 1, n: int = N) -> np.ndarray:
    return np.random.default_rng([seed, 99]).standard_normal(n)


def test_correct_draws_from_other_generators_pass():
    # Other algorithms (MT19937, Philox), float32 or float64, strided samples of a larger draw.
    for seed in range(40):
        gens = [np.random.Generator(np.random.MT19937(seed)), np.random.Generator(np.random.Philox(seed))]
        assert compare_distribution("x", gens[0].standard_normal(N, dtype=np.float32), _want(seed), STRICT) is None
        assert compare_distribution("x", gens[1].standard_normal(N), _want(seed), STRICT) is None
    big = np.random.default_rng(5).standard_normal((4 * N,), dtype=np.float32)
    assert compare_distribution("x", big, _want(5, 4 * N), STRICT) is None


def test_the_false_alarm_rate_is_at_most_alpha_and_the_tests_do_reject():
    """At alpha = 0.3 the three tests (each at 0.1) reject some correct draws, never more than 30%."""
    loose = Distribution(alpha=0.3, sample=2000)
    rejected = sum(compare_distribution("x", np.random.default_rng([s, 1]).standard_normal(2000),
                                        np.random.default_rng([s, 2]).standard_normal(2000), loose) is not None
                   for s in range(400))
    assert 0.08 < rejected / 400 <= 0.3 + 0.05, rejected


WRONG = {
    "uniform with the same mean and variance": lambda r: r.uniform(-np.sqrt(3), np.sqrt(3), N),
    "standard deviation 1.1": lambda r: 1.1 * r.standard_normal(N),
    "mean 0.05": lambda r: 0.05 + r.standard_normal(N),
    "Laplace with variance 1": lambda r: r.laplace(0, 1 / np.sqrt(2), N),
    "constant": lambda r: np.zeros(N),
}


@pytest.mark.parametrize("case", list(WRONG), ids=list(WRONG))
def test_wrong_generators_are_caught(case):
    m = compare_distribution("normal", WRONG[case](np.random.default_rng(3)), _want(), STRICT)
    assert m is not None and m.problem == "distribution"
    text = m.describe()
    assert text.startswith("output 'normal': not the reference's distribution") and "alpha/3" in text


def test_non_finite_values_fail_at_any_size():
    got = np.random.default_rng(0).standard_normal(8)
    got[5] = np.inf
    m = compare_distribution("x", got, _want(n=8), STRICT)
    assert m is not None and "1 non-finite" in m.describe()


def test_below_min_size_only_finiteness_is_checked():
    tiny = np.full(STRICT.min_size - 1, 7.0)  # obviously not N(0, 1), but too few to tell
    assert compare_distribution("x", tiny, _want(n=tiny.size), STRICT) is None
    m = compare_distribution("x", np.full(STRICT.min_size, 7.0), _want(n=STRICT.min_size), STRICT)
    assert m is not None


def test_shapes_must_match():
    m = compare_distribution("x", np.zeros(10), np.zeros(11), STRICT)
    assert m is not None and m.problem == "shape"
