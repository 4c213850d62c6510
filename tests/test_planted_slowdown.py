"""A 15% slowdown of one timed row, planted the way TRIPTYCH_FAULT plants faults, is reported by
regress as a regression of that row and of no other: on synthetic files and on two real CPU runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from harness import faults
from harness.regress import regress
from tests.synthetic import doc, row, samples

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("async", "sync_each", "async_poll")


def test_the_slow_fault_parses_and_names_a_variant():
    (f,) = faults.parse("sync_points:torch:slow15:on_device")
    assert f.slow_pct == 15 and f.op == "on_device" and not f.hits("time", "torch", "sync_points")
    for bad in ("sync_points:torch:slow15", "sync_points:torch:slowx:on_device", "*:torch:slow15:on_device",
                "sync_points:torch:slow15:no_such_variant"):
        with pytest.raises(ValueError):
            faults.parse(bad)


def test_spin_stretches_the_timed_region_only_in_an_armed_child(monkeypatch):
    monkeypatch.setenv(faults.ENV, "sync_points:torch:slow15:on_device")
    with faults.slowed("torch", "sync_points", "on_device"):
        t0 = time.perf_counter()
        assert faults.spin(t0, t0 + 0.01) == t0 + 0.01  # the parent: never armed
    monkeypatch.setattr(faults, "_SLOW", [0.0, 1.0])  # as arm_worker leaves a child
    with faults.slowed("torch", "sync_points", "item_each_step"):
        assert faults._SLOW[0] == 0.0  # another variant
    with faults.slowed("torch", "sync_points", "on_device"):
        t0 = time.perf_counter()
        end = faults.spin(t0, t0 + 0.01)
        assert end - t0 >= 0.0115 and time.perf_counter() >= end
    assert faults._SLOW[0] == 0.0


def _run_rows(rng: np.random.Generator, slow: tuple[str, str] | None) -> list[dict]:
    """Every framework x variant, two processes each whose medians wander a few percent, as between
    processes on a real machine; the planted row's every repeat 15% longer."""
    rows = []
    for fw in ("torch", "cupy", "jax"):
        for i, v in enumerate(VARIANTS):
            times = []
            for p in range(2):
                times += samples(1e-3 * (1 + i) * float(np.exp(rng.normal(0, 0.02))), spread=0.03, n=20,
                                 seed=int(rng.integers(1 << 30)))
            if slow == (fw, v):
                times = [t * 1.15 for t in times]
            rows.append(row(fw, v, times))
    return rows


@pytest.mark.parametrize("seed", range(5))
def test_on_synthetic_files_the_planted_row_and_no_other_is_a_regression(seed):
    rng = np.random.default_rng(seed)
    res = regress(doc(_run_rows(rng, None)), doc(_run_rows(rng, ("cupy", "sync_each"))))
    flagged = [(r.framework, r.variant, r.verdict) for r in res.rows if r.verdict in ("regression", "improvement")]
    assert flagged == [("cupy", "sync_each", "regression")]


# The real slice: one framework, one scenario whose rows cost milliseconds of host compute each (stable
# on a loaded machine), timing only. The planted row is async_dispatch's `async`.
SLICE = ["--scenarios", "async_dispatch", "--frameworks", "torch", "--size", "smoke", "--no-equivalence",
         "--no-report"]


def _compare(out: Path, fault: str = "") -> Path:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{faults.ENV: fault})
    subprocess.run([sys.executable, "-m", "harness", "compare", *SLICE, "--out", str(out)], cwd=ROOT, env=env,
                   check=True, capture_output=True, timeout=600)
    return next(out.glob("*.json"))


def test_on_two_real_cpu_runs_the_planted_row_and_no_other_is_a_regression(tmp_path):
    base = json.loads(_compare(tmp_path / "base").read_text())
    cand = json.loads(_compare(tmp_path / "cand", "async_dispatch:torch:slow15:async").read_text())
    res = regress(base, cand)
    flagged = {(r.variant, r.verdict) for r in res.rows if r.verdict in ("regression", "improvement")}
    assert flagged == {("async", "regression")}, [(r.variant, r.verdict, r.ratio, r.lo, r.hi) for r in res.rows]
    slowed = next(r for r in res.rows if r.variant == "async")
    assert 1.10 < slowed.ratio < 1.22
