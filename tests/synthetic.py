"""Result documents built in the test, valid by harness/results/results.py's schema: what regress and the
bad-input tests compare, with timings whose change is known."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np

from harness.results.results import SCHEMA, read, validate
from harness.results.model import Stats
from scenarios import get

PARAMS = {"m": 64, "n": 32, "steps": 4, "dtype": "float32"}


def samples(median: float, spread: float = 0.01, n: int = 40, seed: int = 0) -> list[float]:
    """n log-normal repeats around median, relative spread ~spread."""
    rng = np.random.default_rng(seed)
    return [float(x) for x in median * np.exp(rng.normal(0.0, spread, n))]


def row(fw: str, variant: str, times: list[float] | None = None, *, status: str = "ok", err: float | None = 1e-6,
        reason: str = "", keep_samples: bool = True, scenario: str = "async_dispatch",
        processes: int = 2, host_loop: list[float] | None = None) -> dict[str, Any]:
    """A row timed in `processes` worker processes (the repeats split evenly among them, in order);
    processes=0: a file written before rows were timed in several processes (no timing.processes).
    host_loop: each process's host loop seconds (timing.processes[].host_loop_s)."""
    r: dict[str, Any] = {"scenario": scenario, "framework": fw, "variant": variant,
                         "hazard": get(scenario).variant(variant).hazard, "status": status, "point": 0, "label": ""}
    if status not in ("ok", "wrong"):
        return r | {"reason": reason or f"{status} for the test"}
    times = times if times is not None else samples(1e-3)
    st = Stats.of(times).to_dict()
    t = {"first_call_s": 0.1, "host_return": st, "device_done": dict(st), "device_events": None, "metrics": {},
         "checked_repeats": 2, "wrong_repeats": 2 if status == "wrong" else 0, "worst": ""}
    if keep_samples:
        t["samples"] = {"host_return": list(times), "device_done": list(times)}
    if processes:
        parts = np.array_split(np.asarray(times), processes)
        t["processes"] = [{"n": len(p), "stopped": "noise", "noise": 0.01, "median": float(np.median(p)),
                           "first_call_s": 0.1} for p in parts]
        for p, h in zip(t["processes"], host_loop or []):
            p["host_loop_s"] = h
    return r | {"timing": t, "check": {"against": "reference", "checked": 2, "wrong": t["wrong_repeats"],
                                       "worst": "output 'x'[0]: got 1.0, want 2.0" if status == "wrong" else "",
                                       "max_rel_err": err}}


def doc(rows: list[dict[str, Any]], *, gpu: str | None = None, seed: int = 1, size: str = "smoke",
        versions: dict[str, str] | None = None, driver: str | None = None, params: dict[str, Any] | None = None,
        created: str = "2026-12-01T00:00:00+00:00") -> dict[str, Any]:
    versions = versions or {}
    fws = sorted({r["framework"] for r in rows})
    scenarios: dict[str, Any] = {}
    for r in rows:
        name = r["scenario"]
        entry = scenarios.setdefault(name, {"title": get(name).title, "concept": "", "variants": [],
                                            "points": [(params or PARAMS) | {"seed": seed}], "rows": []})
        entry["rows"].append(copy.deepcopy(r))
    host = {"python": "3.12.0", "numpy": "2.0.0"} | ({"driver": driver} if driver else {})
    d = {"schema": SCHEMA, "created": created, "finished": created, "command": ["test"], "size": size, "seed": seed,
         "examples": 1, "isolation": "process",
         "environment": {"gpu": gpu, "host": host, "machine": {}, "gpu_memory_fraction": 0.3,
                         "frameworks": {fw: {"available": True, "why": "", "env": {"version": versions.get(fw, "1.0")}}
                                        for fw in fws}},
         "scenarios": scenarios}
    validate(d, "synthetic")
    return d


def write(d: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(d))
    return path


def load(path: Path | str) -> dict[str, Any]:
    """A result file as the plain document (harness.results.results.read, then to_dict): what a test that checks
    the file's format by key reads; the harness reads the typed Result."""
    return read(path).to_dict()
