"""Hypothesis strategies shared by every scenario: one place for shapes, dtypes and seeds.

Shapes include odd and tiny sizes (1, primes) on purpose: tails and edge tiles are where impls break.
"""
from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

FLOAT_DTYPES = ("float32", "float16")  # float32 everywhere; float16 as the reduced precision numpy has


def dims(lo: int = 1, hi: int = 64) -> st.SearchStrategy[int]:
    """A dimension, biased towards the edges and odd sizes."""
    return st.one_of(st.sampled_from([v for v in (lo, 2, 3, 7, 17, 31, hi) if lo <= v <= hi]),
                     st.integers(lo, hi))


def float_dtypes(*allowed: str) -> st.SearchStrategy[str]:
    return st.sampled_from(allowed or FLOAT_DTYPES)


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**31 - 1)


def params(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A params dict; always carries a seed so that make_inputs is deterministic."""
    fields.setdefault("seed", seeds())
    return st.fixed_dictionaries(fields)
