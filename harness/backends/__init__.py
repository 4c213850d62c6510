"""One backend per framework, created lazily; ``get(name)`` returns the process-wide instance."""
from __future__ import annotations

from harness.backends.base import Backend, SyncCount, Unavailable

FRAMEWORKS: tuple[str, ...] = ("torch", "cupy", "jax")

_instances: dict[str, Backend] = {}


def _make(name: str) -> Backend:
    if name == "torch":
        from harness.backends.torch_backend import TorchBackend

        return TorchBackend()
    if name == "cupy":
        from harness.backends.cupy_backend import CupyBackend

        return CupyBackend()
    if name == "jax":
        from harness.backends.jax_backend import JaxBackend

        return JaxBackend()
    raise KeyError(f"unknown framework {name!r} (known: {', '.join(FRAMEWORKS)})")


def get(name: str) -> Backend:
    if name not in _instances:
        _instances[name] = _make(name)
    return _instances[name]


__all__ = ["FRAMEWORKS", "Backend", "SyncCount", "Unavailable", "get"]
