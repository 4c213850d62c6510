"""The ordered registry of scenarios: the order is the order of the article and of every report."""
from __future__ import annotations

import importlib

from scenarios.spec import Scenario

ORDER: tuple[str, ...] = (
    "async_dispatch",
    "sync_points",
    "device_creation",
    "pinned_transfer",
    "copy_compute_overlap",
    "event_sync",
    "concurrent_kernels",
    "input_pipeline",
    "launch_overhead",
    "dlpack_handoff",
    "ranks",
    "point_to_point",
    "collectives",
    "gpu_links",
    "data_parallel",
    "zero",
    "tensor_parallel",
    "memory_pools",
    "cold_start",
)

_cache: dict[str, Scenario] = {}


def get(name: str) -> Scenario:
    if name not in ORDER:
        raise KeyError(f"unknown scenario {name!r} (known: {', '.join(ORDER)})")
    if name not in _cache:
        module = importlib.import_module(f"scenarios.{name}")
        scenario = module.SCENARIO
        assert scenario.name == name, f"scenarios/{name}.py defines {scenario.name!r}"
        _cache[name] = scenario
    return _cache[name]


def all_scenarios() -> list[Scenario]:
    return [get(n) for n in ORDER]
