"""What the three cold_start impls share: each run is one fresh `python -m <child>` process, no framework here.

A worker keeps one folder of its own under the system's temporary folder (removed when it exits): each
prepare gets a work folder there with the input, and the first prepare of a (platform, size, dtype) fills a
warm cache folder with one untimed process, kept for the worker's life and shared by its warm runs.
`cold_cache` gives each process an empty folder. The phases the child times are emitted as metrics.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from harness.measure.metrics import emit
from impls._shared.child import child_env, count_files, fresh_dir, run_child

PHASES = ("import_s", "init_s", "first_call_s", "second_call_s", "process_s", "cache_files_added", "cache_hits",
          "compile_s")


class Runs:
    """One framework's runs: its child module and its folders."""

    def __init__(self, child: str, framework: str):
        self.module = child
        self.base = Path(tempfile.gettempdir()) / f"triptych-cold_start-{framework}-{os.getpid()}"
        self.warm: dict[tuple, Path] = {}  # (platform, n, dtype) -> a cache folder filled by one process
        atexit.register(shutil.rmtree, self.base, True)

    def child(self, state, cache, out_name):
        """One fresh process with `cache` as its cache folder: its phases and outputs."""
        before = count_files(cache)
        out = state["work"] / out_name
        got = run_child(self.module, [state["platform"], cache, state["work"] / "x.npy", out], child_env())
        got["cache_files_added"] = count_files(cache) - before
        with np.load(out) as f:
            outputs = {"y": f["y"], "s": f["s"]}
        out.unlink()
        return got, outputs

    def prepare(self, inputs, params, platform):
        self.base.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="work-", dir=self.base))  # removed with the base folder at exit
        np.save(work / "x.npy", inputs["x"])
        state = {"work": work, "platform": platform, "runs": 0}
        key = (platform, int(params["n"]), params["dtype"])
        if key not in self.warm:  # untimed: the process that fills the cache the warm runs read
            self.warm[key] = fresh_dir(self.base, f"warm-{len(self.warm)}")
            self.child(state, self.warm[key], "fill.npz")
        state["warm"] = self.warm[key]
        return state

    def run(self, state, warm):
        """One timed run: a fresh process on the warm folder, or on an empty one made for it."""
        state["runs"] += 1
        cache = state["warm"] if warm else fresh_dir(state["work"], "cache")
        try:
            got, out = self.child(state, cache, f"out{state['runs']}.npz")
        finally:
            if not warm:
                shutil.rmtree(cache, ignore_errors=True)
        for k in PHASES:
            if k in got:
                emit(k, got[k])
        return out
