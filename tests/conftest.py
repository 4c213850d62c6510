"""Shared test set-up: hypothesis profiles and the `gpu` marker.

`gpu` marks the GPU suite (`make test-gpu`, `pytest -m gpu`). Tests in it that need a GPU skip
themselves, with the framework's own reason, where there is none; those that don't (equivalence)
also run on the CPU.
"""
from __future__ import annotations

import os

import pytest

from harness import backends
from harness.equivalence import register_profiles

register_profiles()
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


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
