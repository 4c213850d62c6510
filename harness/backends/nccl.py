"""This rank's CuPy communicator. torch and JAX keep a process-wide group that their impls reach by
themselves (torch.distributed, jax.distributed); CuPy keeps none, so the rank entry point
(harness/backends/dist.py) joins cupyx.distributed, leaves the communicator (an NCCLBackend) here, and
the CuPy impls take it from here."""
from __future__ import annotations

from typing import Any

_COMM: dict[str, Any] = {}


def set_comm(comm: Any) -> None:
    _COMM["cupy"] = comm


def cupy_comm() -> Any:
    return _COMM["cupy"]
