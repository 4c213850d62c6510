"""cold_start in PyTorch: each run is one fresh process (impls/cold_start/torch_child.py) on the worker's device.

The child keeps the harness's settings (its memory cap among them: a cold start is not about the pool) and
points torch.compile's Inductor and Triton caches at the run's folder. `cold_cache` gives each process an empty
folder; `warm_cache` one folder that an untimed process filled in prepare, kept for the worker's life and
shared by its runs (a process that hits the cache writes nothing new to it).
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from harness.metrics import emit
from impls._shared.child import child_env, count_files, fresh_dir, run_child

CHILD = "impls.cold_start.torch_child"
_BASE = Path(tempfile.gettempdir()) / f"triptych-cold_start-torch-{os.getpid()}"  # made by the first prepare
atexit.register(shutil.rmtree, _BASE, True)
_WARM: dict[tuple, Path] = {}  # (platform, n, dtype) -> a cache folder filled by one process


def cannot_run(device):
    if device.type == "cpu":  # Inductor's C++ path compiles with g++: about a minute per cold process on CI's host
        return "a cold torch.compile on the CPU compiles C++ for about a minute per process: timed on a GPU only"
    return None


def child(state, cache, out_name):
    """One fresh process with `cache` as its cache folder: its phases and outputs."""
    before = count_files(cache)
    out = state["work"] / out_name
    got = run_child(CHILD, [state["platform"], cache, state["work"] / "x.npy", out], child_env())
    got["cache_files_added"] = count_files(cache) - before
    with np.load(out) as f:
        outputs = {"y": f["y"], "s": f["s"]}
    out.unlink()
    return got, outputs


def prepare(inputs, params, device):
    _BASE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="work-", dir=_BASE))  # removed with _BASE at exit
    np.save(work / "x.npy", inputs["x"])
    state = {"work": work, "platform": device.type, "runs": 0}
    key = (device.type, int(params["n"]), params["dtype"])
    if key not in _WARM:  # untimed: the process that fills the cache the warm runs read
        _WARM[key] = fresh_dir(_BASE, f"warm-{len(_WARM)}")
        child(state, _WARM[key], "fill.npz")
    state["warm"] = _WARM[key]
    return state


def poison(state):
    pass  # every run's outputs are read back from a new file written by a new process


def report(got, out):
    for k in ("import_s", "init_s", "first_call_s", "second_call_s", "process_s", "cache_files_added",
              "cache_hits", "compile_s"):
        if k in got:
            emit(k, got[k])
    return out


def run_cold_cache(state):
    state["runs"] += 1
    cache = fresh_dir(state["work"], "cache")  # empty for every process
    try:
        return report(*child(state, cache, f"out{state['runs']}.npz"))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def run_warm_cache(state):
    state["runs"] += 1
    return report(*child(state, state["warm"], f"out{state['runs']}.npz"))
