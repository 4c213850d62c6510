"""cold_start in JAX: each run is one fresh process (impls/cold_start/jax_child.py) on the worker's platform.

The child keeps the harness's settings (its memory cap among them: a cold start is not about the pool) and
points JAX's persistent compilation cache at the run's folder. `cold_cache` gives each process an empty
folder; `warm_cache` one folder that an untimed process filled in prepare, kept for the worker's life and
shared by its runs (a process that hits the cache writes nothing new to it).
"""
from __future__ import annotations

from impls._shared.cold_start import Runs

RUNS = Runs("impls.cold_start.jax_child", "jax")


def cannot_run(device):
    return None  # JAX's persistent cache works on the CPU backend too


def prepare(inputs, params, device):
    return RUNS.prepare(inputs, params, device.platform)


def poison(state):
    pass  # every run's outputs are read back from a new file written by a new process


def run_cold_cache(state):
    return RUNS.run(state, warm=False)  # an empty cache folder for every process


def run_warm_cache(state):
    return RUNS.run(state, warm=True)
