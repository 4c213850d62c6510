"""cold_start in PyTorch: each run is one fresh process (impls/cold_start/torch_child.py) on the worker's device.

The child keeps the harness's environment, not its memory cap (torch.cuda.set_per_process_memory_fraction is a
call in the worker; the child's arrays are 4 MiB at most: a cold start is not about the pool) and points
torch.compile's Inductor and Triton caches at the run's folder. `cold_cache` gives each process an empty
folder; `warm_cache` one folder that an untimed process filled in prepare, kept for the worker's life and
shared by its runs (a process that hits the cache writes nothing new to it).
"""
from __future__ import annotations

from impls._shared.cold_start import Runs

RUNS = Runs("impls.cold_start.torch_child", "torch")


def cannot_run(device):
    if device.type == "cpu":  # Inductor's C++ path compiles with g++: about a minute per cold process on CI's host
        return "a cold torch.compile on the CPU compiles C++ for about a minute per process: timed on a GPU only"
    return None


def prepare(inputs, params, device):
    return RUNS.prepare(inputs, params, device.type)


def poison(state):
    pass  # every run's outputs are read back from a new file written by a new process


def run_cold_cache(state):
    return RUNS.run(state, warm=False)  # an empty cache folder for every process


def run_warm_cache(state):
    return RUNS.run(state, warm=True)
