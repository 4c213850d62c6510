"""The frameworks the harness compares, one backend class each; ``get(name)`` returns the process-wide instance.

A framework is one module here (a Backend subclass whose class attributes are its facts: display name,
colour, the module its import pulls in, its rank rendezvous, its porting-guide cells, whether it measures
the machine's ceilings) and one line in REGISTRY, in the order of every report. The rest of the harness
asks this module, never names a framework. Classes are imported on first use (backend_class) and import
no framework themselves: importing the harness touches no framework and no GPU.
"""
from __future__ import annotations

import importlib

from harness.backends.base import Backend, SyncCount, Unavailable

# name -> "module:Class", in the order of every report and table.
REGISTRY: dict[str, str] = {
    "torch": "harness.backends.torch_backend:TorchBackend",
    "cupy": "harness.backends.cupy_backend:CupyBackend",
    "jax": "harness.backends.jax_backend:JaxBackend",
}
FRAMEWORKS: tuple[str, ...] = tuple(REGISTRY)

_classes: dict[str, type[Backend]] = {}
_instances: dict[str, Backend] = {}


def backend_class(name: str) -> type[Backend]:
    """The framework's Backend subclass, its module imported on first use (it imports no framework)."""
    if name not in _classes:
        if name not in REGISTRY:
            raise KeyError(f"unknown framework {name!r} (known: {', '.join(FRAMEWORKS)})")
        module, cls = REGISTRY[name].split(":")
        _classes[name] = getattr(importlib.import_module(module), cls)
    return _classes[name]


def get(name: str) -> Backend:
    if name not in _instances:
        _instances[name] = backend_class(name)()
    return _instances[name]


def display_names() -> dict[str, str]:
    """{framework: how tables and reports name it}, in registry order."""
    return {fw: backend_class(fw).display_name for fw in FRAMEWORKS}


def in_prose(joiner: str = ", ", last: str = " and ", display: bool = False) -> str:
    """The frameworks as running text names them: "torch, CuPy and JAX" ("PyTorch, CuPy and JAX" with display)."""
    names = [getattr(backend_class(fw), "display_name" if display else "short_name") for fw in FRAMEWORKS]
    return joiner.join(names[:-1]) + last + names[-1] if len(names) > 1 else "".join(names)


def ceilings_framework() -> str | None:
    """The framework whose workers measure the machine's ceilings and a rank scenario's raw floor, if any."""
    return next((fw for fw in FRAMEWORKS if backend_class(fw).measures_ceilings), None)


def rendezvous_ports() -> int:
    """Ports a rank group needs beyond torchrun's MASTER_PORT: each framework's own rendezvous."""
    return sum(backend_class(fw).rank_ports for fw in FRAMEWORKS)


def rendezvous_env(host: str, ports: list[int]) -> dict[str, str]:
    """Every framework's rendezvous variables for one rank, each on its own ports of `ports`
    (rendezvous_ports() of them), so that the groups of one run never meet."""
    env: dict[str, str] = {}
    at = 0
    for fw in FRAMEWORKS:
        cls = backend_class(fw)
        env |= cls.rank_env(host, ports[at:at + cls.rank_ports])
        at += cls.rank_ports
    return env


__all__ = ["FRAMEWORKS", "REGISTRY", "Backend", "SyncCount", "Unavailable", "backend_class", "ceilings_framework",
           "display_names", "get", "in_prose", "rendezvous_env", "rendezvous_ports"]
