"""A 15% slowdown of one timed row, planted the way TRIPTYCH_FAULT plants faults, is reported by
regress as a regression of that row and of no other: on two real runs of a quiet host, and on
synthetic files whose noise between processes is the H200's (there, as rates over many pairs)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from harness.measure import noise
from harness.workers import faults
from harness.regress.regress import regress
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


class _Device:
    """A backend whose every call's work takes 10 ms to finish (synchronize(outputs) waits it out)."""

    def load(self):
        return self

    def synchronize(self, outputs=None):
        if outputs is not None:
            time.sleep(0.01)

    def event_timer(self):
        return None


def test_a_planted_slowdown_stretches_the_named_rows_timed_region_by_its_share(monkeypatch, virtual_clock):
    """Wrapped around a worker's handler (as a child's serve loop does), slow50 makes that one
    variant's device_done half as long again, inside measure's timed region; host_return, the other
    variant and the impl and backend after the request are untouched."""
    from types import SimpleNamespace

    from harness import backends
    from harness.workers import execute
    from harness.workers.protocol import Request
    from harness.measure.timing import TimingConfig, measure

    device = _Device()
    impl = SimpleNamespace(run_on_device=lambda _s, y=1: {"y": y},  # a sibling calls it with an argument
                           run_item_each_step=lambda s: impl.run_on_device(s, 2))
    originals = dict(vars(impl))
    monkeypatch.setattr(backends, "get", lambda _fw: device)
    monkeypatch.setattr(execute, "load_impl", lambda _scn, _fw: impl)
    monkeypatch.setenv(faults.ENV, "sync_points:torch:slow50:on_device")
    cfg = TimingConfig(warmup=0, min_repeats=5, max_repeats=5, min_time_s=0.0)

    def handle(req, _progress):  # a handler times the impl's function as it finds it (execute.variant_call)
        return {v: measure(lambda v=v: getattr(impl, f"run_{v}")(None), device, cfg)
                for v in ("on_device", "item_each_step")}

    got = faults.planted_into("torch", handle)(Request("time", "torch", "sync_points", {}), print)
    slow, same = got["on_device"], got["item_each_step"]  # the sibling's call inside item_each_step: not slowed
    assert 1.49 < slow.device_done.median / same.device_done.median < 1.51, (slow.device_done, same.device_done)
    assert slow.host_return.median < 0.005 and same.host_return.median < 0.005
    assert vars(impl) == originals and "synchronize" not in vars(device)
    other = faults.planted_into("torch", handle)(Request("time", "torch", "async_dispatch", {}), print)
    assert other["on_device"].device_done.median < 0.0101  # another scenario: not slowed


# Noise between processes as measured on the H200 (docs/design/processes.md), log scale: a row whose time the
# device sets wanders about 0.5% between processes, a host-paced row (pageable copies, launch loops,
# JAX's small transfers) about 15%. (repeat spread, process sd)
DEVICE, HOST = (0.01, 0.005), (0.05, 0.15)


def _run_rows(rng: np.random.Generator, slow: tuple[str, str] | None) -> list[dict]:
    """Every framework x variant in two processes; JAX's rows host-paced, torch's and CuPy's device-paced.
    The planted row's every repeat is 15% longer."""
    rows = []
    for fw in ("torch", "cupy", "jax"):
        spread, proc_sd = HOST if fw == "jax" else DEVICE
        for i, v in enumerate(VARIANTS):
            times = []
            for p in range(2):
                times += samples(1e-3 * (1 + i) * float(np.exp(rng.normal(0, proc_sd))), spread=spread, n=20,
                                 seed=int(rng.integers(1 << 30)))
            if slow == (fw, v):
                times = [t * 1.15 for t in times]
            rows.append(row(fw, v, times))
    return rows


def _flagged(res) -> list[tuple[str, str, str]]:
    return [(r.framework, r.variant, r.verdict) for r in res.rows if r.verdict in ("regression", "improvement")]


def test_on_synthetic_files_the_planted_row_is_a_regression_and_no_unchanged_device_row_is():
    """Twenty pairs of runs, cupy/sync_each 15% slower in each candidate: it is a regression in at
    least 18 (two processes a run leave the t interval two degrees of freedom: a power near 95%, not
    100%); no unchanged device-paced row is ever flagged, and host-paced rows seldom (next test)."""
    found, device, host = 0, [], []
    for rng in map(np.random.default_rng, range(20)):
        flagged = _flagged(regress(doc(_run_rows(rng, None)), doc(_run_rows(rng, ("cupy", "sync_each")))))
        found += ("cupy", "sync_each", "regression") in flagged
        device += [f for f in flagged if f[0] != "jax" and f[:2] != ("cupy", "sync_each")]
        host += [f for f in flagged if f[0] == "jax"]
    # host-paced rows: about 2% of them expected (the next test), 11% from the bootstrap alone
    assert found >= 18 and device == [] and len(host) <= 0.07 * 3 * 20, (found, device, host)


def test_unchanged_host_paced_rows_are_flagged_at_the_intervals_rate_not_the_bootstraps(monkeypatch):
    """Sixty pairs of unchanged runs: no device-paced row flagged, and at most 3% of the host-paced ones
    (a 95% interval that must also clear the 10% threshold). The bootstrap alone, which sees at most
    three distinct draws of two processes, flags over 8% of them (noise.py's docstring)."""
    pairs = [(doc(_run_rows(rng, None)), doc(_run_rows(rng, None))) for rng in map(np.random.default_rng, range(60))]

    def flagged() -> tuple[int, int]:
        got = [f for b, c in pairs for f in _flagged(regress(b, c))]
        return sum(f[0] != "jax" for f in got), sum(f[0] == "jax" for f in got)

    device, host = flagged()
    assert device == 0 and host <= 0.03 * 3 * len(pairs), (device, host)
    monkeypatch.setattr(noise, "process_ratio_interval", lambda *a: None)
    assert flagged()[1] > 0.08 * 3 * len(pairs), "the bootstrap alone no longer shows why the t interval is needed"


# The real slice: one framework, two scenarios of sub-millisecond host-bound rows, timing only, the
# same seed; torch on one thread of the CPU (no GPU visible, also on a GPU machine), each row in four
# processes (Student's t on two would need a process spread under 1% to find 15%). The planted row is
# sync_points' `item_each_step`.
SLICE = ["--scenarios", "sync_points,launch_overhead", "--frameworks", "torch", "--size", "smoke", "--seed", "1",
         "--processes", "4", "--no-equivalence", "--no-report"]
# On a 2-core machine the same row moves by 20-100% from one run to the next: at load 5-6 while other
# suites ran, and also at low load inside a full `make test` (2026-12-03: the planted row came out 0.86x,
# 95% interval [0.63, 1.18], and regress rightly called it noisy). A 15% effect is not findable there, so
# this test runs only where a person says the host is quiet: TRIPTYCH_QUIET_HOST=1 (and a load average
# under half the cores). The lent H200's 16 idle vCPUs are not quiet either (2026-12-04, four processes
# a row: the planted row 0.77x [0.59, 1.12], two unplanted rows 0.68x and 0.58x: its host runs at two
# speeds, results/probes/host_speed.md); the test waits for a host that is.
QUIET = os.environ.get("TRIPTYCH_QUIET_HOST") == "1" and os.getloadavg()[0] <= 0.5 * (os.cpu_count() or 1)


def _compare(out: Path, fault: str = "") -> Path:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", **{faults.ENV: fault})
    subprocess.run([sys.executable, "-m", "harness", "compare", *SLICE, "--out", str(out)], cwd=ROOT, env=env,
                   check=True, capture_output=True, timeout=600)
    return next(out.glob("*.json"))


@pytest.mark.skipif(not QUIET, reason=f"needs a quiet host (TRIPTYCH_QUIET_HOST=1; load now {os.getloadavg()[0]:.1f} "
                                      f"on {os.cpu_count()} cores): between-run noise exceeds a 15% effect")
def test_on_two_real_cpu_runs_the_planted_row_and_no_other_is_a_regression(tmp_path):
    base = json.loads(_compare(tmp_path / "base").read_text())
    cand = json.loads(_compare(tmp_path / "cand", "sync_points:torch:slow15:item_each_step").read_text())
    res = regress(base, cand)
    flagged = {(r.variant, r.verdict) for r in res.rows if r.verdict in ("regression", "improvement")}
    assert flagged == {("item_each_step", "regression")}, [(r.variant, r.verdict, r.ratio, r.lo, r.hi)
                                                           for r in res.rows]
    cand_times = next(r for r in cand["scenarios"]["sync_points"]["rows"] if r["variant"] == "item_each_step")
    assert all(p["n"] >= 5 for p in cand_times["timing"]["processes"])
