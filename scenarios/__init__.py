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

# Without a GPU a default run runs these: what a CPU can show in a few minutes on two cores, each for
# the reason given. The rest are about a GPU's machinery (streams, events, pinned copies over the host
# link, TF32, the driver's pools, two GPUs), or, like data_parallel, zero and collectives, cost minutes
# of rank groups on a CPU; they run when named (`compare --scenarios zero`).
CPU_RUN: dict[str, str] = {
    "async_dispatch": "the two clocks, host-return and device-done: JAX dispatches asynchronously on a CPU too",
    "dlpack_handoff": "a zero-copy hand-off between frameworks: the consumer sees the producer's data pointer",
    "ranks": "a group of rank processes, each taking its share, and the sum a forgotten sharding counts N times",
    "point_to_point": "send and receive between two ranks, and the receive buffer read before its wait",
    "tensor_parallel": "Megatron's column and row split, with its all-reduces counted",
    "donation": "an update in place or donated, its peak memory, and the read of what was donated",
}


def default_run(gpu: bool) -> tuple[str, ...]:
    """The scenarios a compare without --scenarios runs: every one but OPT_IN on a GPU, CPU_RUN without."""
    return DEFAULT_RUN if gpu else tuple(n for n in ORDER if n in CPU_RUN)

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
