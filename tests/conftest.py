"""Shared test set-up: hypothesis profiles and the `gpu` marker.

`gpu` marks the GPU suite (`make test-gpu`, `pytest -m gpu`). Tests in it that need a GPU skip
themselves, with the framework's own reason, where there is none; those that don't (equivalence)
also run on the CPU.
"""
from __future__ import annotations

import os

import pytest

from harness import backends
from impls._shared.xla import use_cublas_gemms
from harness.equivalence import register_profiles

register_profiles()
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
use_cublas_gemms()  # as the runner does: JAX's GEMMs through cuBLAS, no Triton autotuning at compile time


def pytest_configure(config: pytest.Config) -> None:
    from hypothesis import settings

    if not config.getoption("hypothesis_profile", None):
        settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


def backend_or_skip(fw: str) -> backends.Backend:
    b = backends.get(fw)
    ok, why = b.available()
    if not ok:
        pytest.skip(f"{fw}: {why}")
    return b


def gpu_backend_or_skip(fw: str) -> backends.Backend:
    b = backend_or_skip(fw)
    if not b.on_gpu:
        pytest.skip(f"{fw} runs on the CPU here: this test needs a CUDA GPU")
    return b


def synthetic_row(variant, done, ret=None, iqr=0.0, link=1, pct=None, floor=None, **metrics):
    """A timing row as the worker writes it, with only what the claims read (for verdict tests)."""
    t = {"device_done": {"median": done, "iqr": iqr}, "host_return": {"median": done if ret is None else ret},
         "metrics": {"link_bytes": link, **metrics}}
    row = {"variant": variant, "timing": t, "check": {"wrong": 0, "checked": 0}}
    if pct is not None:
        row |= {"pct_of_floor": pct, "floor_s": floor}
    return row


def judge_claim(scenario, claim, rows, params, fw="torch"):
    from scenarios import get

    c = next(c for c in get(scenario).claims if c.id == claim)
    return c.judge({r["variant"]: r for r in rows}, fw, params)
