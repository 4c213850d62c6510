"""cold_start in CuPy: each run is one fresh process (impls/cold_start/cupy_child.py) on the worker's GPU.

The child keeps the harness's environment, not its memory cap (the memory pool's set_limit is a call in the
worker; the child's arrays are 4 MiB at most: a cold start is not about the pool) and points CuPy's kernel
cache (CUPY_CACHE_DIR) at the run's folder. `cold_cache` gives each process an empty folder; `warm_cache` one
folder that an untimed process filled in prepare, kept for the worker's life and shared by its runs (a process
that hits the cache writes nothing new to it).
"""
from __future__ import annotations

from impls._shared.cold_start import Runs

RUNS = Runs("impls.cold_start.cupy_child", "cupy")


def cannot_run(device):
    return None  # CuPy runs on a CUDA device only: the harness skips it where there is none


def prepare(inputs, params, device):
    return RUNS.prepare(inputs, params, "cuda")


def poison(state):
    pass  # every run's outputs are read back from a new file written by a new process


def run_cold_cache(state):
    return RUNS.run(state, warm=False)  # an empty cache folder for every process


def run_warm_cache(state):
    return RUNS.run(state, warm=True)
