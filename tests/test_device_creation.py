"""device_creation: floors, the claim's verdict, timed runs on the CPU and (marked gpu) on the device;
a deliberately wrong generator is caught in tests/test_planted_bugs.py."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harness import backends
from harness.measure import timing
from harness.workers import handlers
from harness.check.equivalence import compare_outputs
from scenarios import get
from tests.conftest import backend_or_skip, gpu_backend_or_skip, judge_claim, synthetic_row


def test_fill_is_exact_in_float32_and_never_zero():
    scn = get("device_creation")
    p = {"kind": "fill", "n": 3 * 1021 + 5, "seed": 0}
    want = scn.reference({}, p)["fill"]
    from scenarios.device_creation import host_numpy

    got = host_numpy("fill", p["n"], np.random.default_rng(0))
    assert got.dtype == np.float32 and np.array_equal(got.astype(np.float64), want)
    assert np.count_nonzero(want) == want.size


def test_floor_is_the_copy_or_one_write_of_the_array():
    dc = get("device_creation")
    machine = {"h2d_Bps": 1e9, "hbm_Bps": 1e12}
    assert dc.floor({"n": 1000, "kind": "fill"}, machine, "host_then_copy") == 4000 / 1e9
    assert dc.floor({"n": 1000, "kind": "fill"}, machine, "on_device") == 4000 / 1e12
    assert dc.floor({"n": 1000, "kind": "fill"}, {}, "on_device") is None


def test_scenario_declares_which_outputs_go_by_distribution():
    scn = get("device_creation")
    assert set(scn.distributions) == {"normal"}
    n = 1 << 16
    p = {"kind": "normal", "n": n, "seed": 4}
    want = scn.reference({}, p)
    other = {"normal": np.random.default_rng(8).standard_normal(n, dtype=np.float32)}
    assert compare_outputs(scn, p, other, want) is None  # different values, same law
    p_fill = {"kind": "fill", "n": 2048, "seed": 4}
    fill = scn.reference({}, p_fill)
    assert compare_outputs(scn, p_fill, {"fill": fill["fill"].astype(np.float32)}, fill) is None
    off = fill["fill"].astype(np.float32)
    off[1021] = np.nextafter(off[1021], np.float32(1e9))
    m = compare_outputs(scn, p_fill, {"fill": off}, fill)
    assert m is not None and m.index == (1021,) and "bit-exact" in m.describe()
    # Without the declaration, a random output would be compared element by element, and fail.
    plain = dataclasses.replace(scn, distributions={})
    assert compare_outputs(plain, p, other, want) is not None


@pytest.mark.parametrize("host,verdict", [(0.2, "confirmed"), (0.001, "refuted"), (0.0101, "inconclusive")])
def test_device_faster_verdict(host, verdict):
    p = {"kind": "normal", "n": 1 << 20}
    rows = [synthetic_row("host_then_copy", host, iqr=0.001, link=4 << 20, host_create_s=host / 2),
            synthetic_row("on_device", 0.01, iqr=0.001, link=0)]
    v = judge_claim("device_creation", "device_faster", rows, p)
    assert v.verdict == verdict and v.numbers["link_bytes_host_then_copy"] == 4 << 20
    rows[0]["timing"]["metrics"]["link_bytes"] = 0  # the "device" is the CPU: nothing to compare
    assert judge_claim("device_creation", "device_faster", rows, p).verdict == "inconclusive"


@pytest.mark.parametrize("fw", ["torch", "jax"])
def test_device_creation_timed_rows(fw):
    backend_or_skip(fw)
    for p in get("device_creation").points("smoke"):
        rows = handlers.time_scenario(fw, "device_creation", p | {"seed": 6}, timing.preset("smoke"),
                                    progress=lambda _t: None)
        by = {r["variant"]: r for r in rows}
        assert by["host_then_copy"]["status"] == by["on_device"]["status"] == "ok", rows
        assert by["host_then_copy"]["check"]["against"] == "reference"
        assert by["host_then_copy"]["timing"]["metrics"]["host_create_s"] > 0
        assert by["on_device"]["timing"]["metrics"]["link_bytes"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("fw", list(backends.FRAMEWORKS))
def test_gpu_device_creation_both_kinds(fw):
    b = gpu_backend_or_skip(fw)
    for kind in ("normal", "fill"):
        rows = handlers.time_scenario(fw, "device_creation", {"kind": kind, "n": 1 << 20, "seed": 8},
                                    timing.preset("smoke"), progress=lambda _t: None)
        by = {r["variant"]: r for r in rows}
        assert by["host_then_copy"]["status"] == by["on_device"]["status"] == "ok", rows
        assert by["host_then_copy"]["timing"]["metrics"]["link_bytes"] == 4 << 20
        assert by["on_device"]["timing"]["metrics"]["link_bytes"] == 0
    b.free_memory()
