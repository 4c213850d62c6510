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
    "matmul_precision",
    "memory_pools",
    "cold_start",
    "donation",
)

# Scenarios a default run leaves out, with why: they run when named (`compare --scenarios cold_start`).
OPT_IN: dict[str, str] = {
    "memory_pools": "every repeat of its fresh_process and beside_jax rows starts a process with a framework's real "
                    "defaults: several minutes on a GPU",
    "cold_start": "every repeat is a fresh process that imports, compiles and runs (torch's cold Inductor compile "
                  "alone took 74 s on a CPU): several minutes on a GPU",
}
DEFAULT_RUN: tuple[str, ...] = tuple(n for n in ORDER if n not in OPT_IN)

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
