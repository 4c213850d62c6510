"""pinned_transfer: helpers, the claims' verdict logic, timed runs on the CPU, and (marked gpu) the
paths only a CUDA device has: pinned memory, non-blocking copies, the stale read. A copy that did not
happen is caught thanks to poison(): tests/test_planted_bugs.py."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

from harness import backends
from harness.measure import timing
from harness.results.model import Row
from harness.workers import handlers
from scenarios import get
from scenarios import pinned_transfer as PT
from tests.conftest import backend_or_skip, gpu_backend_or_skip, judge_claim, synthetic_row

DTYPES = ["float32", "float16", "int32", "uint8"]


# -- helpers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_flipped_bits_differ_from_the_data_everywhere(dtype):
    x = PT.make_inputs({"n": 5000, "dtype": dtype, "seed": 2})["x"]
    f = PT.flip_bits(x)
    assert f.dtype == x.dtype and np.all(f.view(f"u{x.itemsize}") == ~x.view(f"u{x.itemsize}"))
    assert not np.any(f == x)  # by value too: never equal, NaN or not
    assert np.count_nonzero(x) == x.size


def test_poison_hits_one_element_per_page_and_the_last():
    x = PT.make_inputs({"n": 5000, "dtype": "float32", "seed": 2})["x"]
    out = x.copy()
    PT.poison_host(out, PT.flip_bits(x))
    hit = np.flatnonzero(out != x)
    assert list(hit) == [0, 1024, 2048, 3072, 4096, 4999]
    assert PT.stale_fraction(out, x) == 1.0 and PT.stale_fraction(x, x) == 0.0
    half = x.copy()
    half[:2048] = out[:2048]  # the copy reached the last three pages only
    assert PT.stale_fraction(half, x) == pytest.approx(2 / 5)


def test_floor_is_bytes_over_the_measured_rate_of_the_direction():
    p = {"n": 1 << 20, "dtype": "float32"}
    machine = {"h2d_Bps": 50e9, "d2h_Bps": 40e9}
    assert PT.floor(p, machine, "h2d_pin_then_copy") == pytest.approx(4 * 2**20 / 50e9)
    assert PT.floor(p, machine, "d2h_read_before_sync") == pytest.approx(4 * 2**20 / 40e9)
    assert PT.floor(p, {}, "h2d_pageable") is None


def test_full_sweep_spans_latency_and_bandwidth_regimes():
    pts = get("pinned_transfer").points("full")
    sizes = [PT.nbytes(p) for p in pts]
    assert sizes[0] == 4 * PT.KiB and sizes[-1] >= PT.BANDWIDTH_REGIME and sizes == sorted(sizes)
    assert all(p["label"] for p in pts)


# -- the claims' verdicts, from synthetic rows ----------------------------------------------------


BIG = {"n": 64 << 20, "dtype": "float32", "label": "256 MiB"}


@pytest.mark.parametrize("held,verdict", [((1.0, 0.95), "confirmed"), ((1.0, 0.05), "refuted"),
                                          ((0.1, 0.1), "refuted")])
def test_pageable_blocks_verdict(held, verdict):
    rows = [synthetic_row("h2d_pageable", 1.0, held[0]), synthetic_row("h2d_pageable_non_blocking", 1.0, held[1])]
    v = judge_claim("pinned_transfer", "pageable_blocks", rows, BIG)
    assert v.verdict == verdict and v.numbers["non_blocking_held"] == held[1]
    rows = [synthetic_row("h2d_pageable", 1.0, link=0), synthetic_row("h2d_pageable_non_blocking", 1.0, link=0)]
    assert judge_claim("pinned_transfer", "pageable_blocks", rows, BIG).verdict == "inconclusive"


def test_at_link_takes_the_best_path_and_judges_only_the_bandwidth_regime():
    floor = PT.nbytes(BIG) / 55e9
    rows = [synthetic_row("h2d_pageable", floor / 0.15, pct=15.0, floor=floor),
            synthetic_row("h2d_pinned_non_blocking", floor / 0.97, pct=97.0, floor=floor),
            synthetic_row("d2h_pageable", floor / 0.03, pct=3.0, floor=floor),
            synthetic_row("d2h_pin_then_copy", floor / 0.80, pct=80.0, floor=floor, to_numpy_s=0.001)]
    h = judge_claim("pinned_transfer", "h2d_at_link", rows, BIG)
    d = judge_claim("pinned_transfer", "d2h_at_link", rows, BIG)
    assert h.verdict == "confirmed" and "h2d_pinned_non_blocking" in h.evidence
    assert h.numbers["memcpy_GBps"] == pytest.approx(55.0)
    assert d.verdict == "refuted" and "d2h_pin_then_copy" in d.evidence and "np.asarray" in d.evidence
    small = {"n": 1024, "dtype": "float32", "label": "4 KiB"}
    assert judge_claim("pinned_transfer", "h2d_at_link", rows, small).verdict == "inconclusive"
    no_ceiling = [synthetic_row("h2d_pageable", 1.0)]
    assert judge_claim("pinned_transfer", "h2d_at_link", no_ceiling, BIG).verdict == "inconclusive"
    with pytest.raises(KeyError):  # no D2H variant ran: the runner reports "did not run"
        judge_claim("pinned_transfer", "d2h_at_link", no_ceiling, BIG)


@pytest.mark.parametrize("pin,verdict", [(1.5, "confirmed"), (0.5, "refuted"), (1.001, "inconclusive")])
def test_pin_on_the_fly_verdict(pin, verdict):
    rows = [synthetic_row("h2d_pageable", 1.0, iqr=0.01), synthetic_row("h2d_pin_then_copy", pin, iqr=0.01)]
    assert judge_claim("pinned_transfer", "pin_on_the_fly_slower", rows, BIG).verdict == verdict


def test_stale_read_verdict():
    r = synthetic_row("d2h_read_before_sync", 1.0, stale_fraction=0.25)
    r["check"] = {"wrong": 7, "checked": 10}
    v = judge_claim("pinned_transfer", "read_before_sync_stale", [r], BIG)
    assert v.verdict == "confirmed" and "7 of 10" in v.evidence and v.numbers["stale_fraction"] == 0.25
    r["check"] = {"wrong": 0, "checked": 10}
    assert judge_claim("pinned_transfer", "read_before_sync_stale", [r], BIG).verdict == "refuted"


def test_the_table_shows_gbps_from_link_bytes_and_device_done():
    from harness.report.report import _extra_rows

    row = synthetic_row("h2d_pinned_non_blocking", 0.005, ret=0.00002, link=256 << 20) | {"status": "ok", "hazard": False}
    row["timing"]["device_done"]["median"] = 0.005
    assert ("GB/s", ["53.7"]) in _extra_rows([Row.from_dict(row)], hazard=False)  # 268.4 MB in 5 ms
    row["timing"]["metrics"]["link_bytes"] = 0
    assert all(name != "GB/s" for name, _ in _extra_rows([Row.from_dict(row)], hazard=False))


# -- timed runs where the frameworks run here ------------------------------------------------------


@pytest.mark.parametrize("fw", ["torch", "jax"])
def test_pinned_transfer_timed_rows(fw):
    b = backend_or_skip(fw)
    scn = get("pinned_transfer")
    rows = handlers.time_scenario(fw, "pinned_transfer", scn.points("smoke")[0] | {"seed": 5},
                                timing.preset("smoke"), progress=lambda _t: None)
    by = {r["variant"]: r for r in rows}
    assert [r["variant"] for r in rows] == [v.name for v in scn.variants]
    for v in scn.variants:
        row = by[v.name]
        if v.gpu_only and not b.on_gpu or v.name in getattr(importlib.import_module(
                f"impls.pinned_transfer.{fw}_impl"), "NOT_EXPRESSIBLE", {}):
            assert row["status"] == "skipped" and row["reason"]
            continue
        assert row["status"] == "ok", row
        assert row["timing"]["metrics"]["link_bytes"] == (4096 if b.on_gpu else 0)
        if not v.hazard:
            assert row["check"]["against"] == "reference" and row["check"]["checked"] >= 2


def test_jax_pinned_paths_run_on_the_cpu_backend_too():
    """JAX's CPU backend has the pinned_host memory kind: the GPU-only variants' code runs here for real."""
    b = backend_or_skip("jax")
    impl = importlib.import_module("impls.pinned_transfer.jax_impl")
    for dtype in DTYPES:
        p = {"n": 3001, "dtype": dtype, "seed": 9}
        x = PT.make_inputs(p)["x"]
        state = impl.prepare({"x": x}, p, b.device)
        assert state["pinned"].sharding.memory_kind == "pinned_host"
        for v in ("h2d_pinned_non_blocking", "h2d_pin_then_copy", "d2h_pin_then_copy"):
            impl.poison(state)
            out = getattr(impl, f"run_{v}")(state)["x"]
            b.synchronize(out)
            np.testing.assert_array_equal(b.to_numpy(out), x)
            assert b.to_numpy(out).dtype == x.dtype


def test_jax_reads_a_fresh_device_array_every_run():
    b = backend_or_skip("jax")
    impl = importlib.import_module("impls.pinned_transfer.jax_impl")
    p = {"n": 777, "dtype": "float16", "seed": 1}
    x = PT.make_inputs(p)["x"]
    state = impl.prepare({"x": x}, p, b.device)
    impl.poison(state)
    first = state["src"]
    np.testing.assert_array_equal(impl.run_d2h_pageable(state)["x"], x)
    impl.poison(state)
    assert state["src"] is not first and state["src"].unsafe_buffer_pointer() != first.unsafe_buffer_pointer()
    np.testing.assert_array_equal(impl.run_d2h_pageable(state)["x"], x)


# -- GPU only: run by the lead on the H200 (pytest -m gpu) ----------------------------------------

GPU_FWS = list(backends.FRAMEWORKS)


@pytest.mark.gpu
@pytest.mark.parametrize("fw", GPU_FWS)
def test_gpu_pinned_transfer_every_variant(fw):
    """Every variant runs on the GPU and is bit-exact; the stale read happens (a 2048^3 GEMM is queued
    ahead of the copy, so a host read right after enqueuing cannot find the data there)."""
    b = gpu_backend_or_skip(fw)
    impl = importlib.import_module(f"impls.pinned_transfer.{fw}_impl")
    skipped = set(getattr(impl, "NOT_EXPRESSIBLE", {}))
    rows = handlers.time_scenario(fw, "pinned_transfer", {"n": 16384, "dtype": "float32", "seed": 3},
                                timing.preset("smoke"), progress=lambda _t: None)
    for r in rows:
        if r["variant"] in skipped:
            assert r["status"] == "skipped"
            continue
        assert r["status"] == "ok", r
        assert r["timing"]["metrics"]["link_bytes"] == 65536
        if r["hazard"]:
            assert r["check"]["checked"] >= 3 and r["check"]["wrong"] >= 1, r["check"]
            assert 0 < r["timing"]["metrics"]["stale_fraction"] <= 1
        else:
            assert r["check"]["wrong"] == 0
    b.free_memory()


@pytest.mark.gpu
@pytest.mark.parametrize("fw", GPU_FWS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_pinned_transfer_dtypes_round_trip(fw, dtype):
    b = gpu_backend_or_skip(fw)
    impl = importlib.import_module(f"impls.pinned_transfer.{fw}_impl")
    p = {"n": 4099, "dtype": dtype, "seed": 4}
    x = PT.make_inputs(p)["x"]
    state = impl.prepare({"x": x}, p, b.device)
    for v in get("pinned_transfer").checked_variants:
        if v.name in getattr(impl, "NOT_EXPRESSIBLE", {}):
            continue
        impl.poison(state)
        b.synchronize()
        out = getattr(impl, f"run_{v.name}")(state)
        b.synchronize(out)
        np.testing.assert_array_equal(b.to_numpy(out)["x"], x, err_msg=f"{fw}/{v.name}/{dtype}")


@pytest.mark.gpu
def test_gpu_torch_pinned_paths_are_pinned():
    b = gpu_backend_or_skip("torch")
    impl = importlib.import_module("impls.pinned_transfer.torch_impl")
    p = {"n": 1 << 16, "dtype": "float32", "seed": 1}
    state = impl.prepare(PT.make_inputs(p), p, b.device)
    assert state["pinned"].is_pinned() and state["out_pinned"].is_pinned() and not state["host"].is_pinned()
    out = impl.run_d2h_pin_then_copy(state)["x"]  # .to("cpu", non_blocking=True) pins its destination
    b.synchronize()
    assert out.is_pinned()


@pytest.mark.gpu
def test_gpu_jax_h2d_results_are_device_arrays_with_the_right_bytes():
    """Checked by a device computation, so no host-side copy JAX might keep can stand in for the data."""
    b = gpu_backend_or_skip("jax")
    import jax

    impl = importlib.import_module("impls.pinned_transfer.jax_impl")
    p = {"n": 1 << 16, "dtype": "float32", "seed": 2}
    x = PT.make_inputs(p)["x"]
    state = impl.prepare({"x": x}, p, b.device)
    negate = jax.jit(lambda a: -a)
    for v in ("h2d_pageable", "h2d_pageable_non_blocking", "h2d_pinned_non_blocking", "h2d_pin_then_copy"):
        y = getattr(impl, f"run_{v}")(state)["x"]
        assert y.sharding.memory_kind == "device", v
        np.testing.assert_array_equal(np.asarray(negate(y)), -x, err_msg=v)


@pytest.mark.gpu
def test_gpu_jax_every_d2h_run_transfers():
    """After poison() the source is a new device array: reading it is a real device-to-host transfer
    (the transfer guard logs it), not the cached host copy of an array read before."""
    b = gpu_backend_or_skip("jax")
    impl = importlib.import_module("impls.pinned_transfer.jax_impl")
    p = {"n": 1 << 16, "dtype": "float32", "seed": 2}
    state = impl.prepare(PT.make_inputs(p), p, b.device)
    for _ in range(2):
        impl.poison(state)
        with b.sync_counter() as syncs:
            impl.run_d2h_pageable(state)
        assert syncs.count >= 1, syncs


def _owner(a: np.ndarray):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a.base.obj if isinstance(a.base, memoryview) else a.base


def test_prefaulted_is_an_equal_page_aligned_copy_of_its_own():
    import mmap

    x = np.arange(3 * PT.PAGE + 5, dtype=np.float32)
    got = PT.prefaulted(x)
    assert np.array_equal(got, x) and got.ctypes.data % PT.PAGE == 0
    assert isinstance(_owner(got), mmap.mmap) and got.flags.writeable
    got[0] = -1
    assert x[0] == 0  # a copy, not a view


@pytest.mark.parametrize("fw", ["torch", "jax"])
def test_pageable_buffers_are_prefaulted_in_prepare(fw):
    b = backend_or_skip(fw)
    impl = importlib.import_module(f"impls.pinned_transfer.{fw}_impl")
    p = {"n": 5000, "dtype": "float32", "seed": 3}
    state = impl.prepare(PT.SCENARIO.make_inputs(p), p, b.device)
    keys = ("host", "out_pageable") if fw == "torch" else ("host",)  # JAX's device_get allocates its own
    for key in keys:
        ptr = state[key].data_ptr() if fw == "torch" else state[key].ctypes.data
        assert ptr % PT.PAGE == 0, f"{key} is not a buffer of its own, made by prefaulted()"


def test_the_link_claims_judge_the_median_they_are_given_not_the_rows_stored_share():
    """The noise test redraws a row's median and judges again: a share stored in the row would not move."""
    floor, p = 1e-3, {"n": (64 << 20) // 4, "dtype": "float32", "label": "64 MiB"}
    row = synthetic_row("h2d_pinned_non_blocking", floor / 0.97, pct=93.3, floor=floor)
    v = judge_claim("pinned_transfer", "h2d_at_link", [row], p)
    assert v.verdict == "confirmed" and v.numbers["best_pct"] == pytest.approx(97.0), v


def test_a_hazard_with_no_checked_run_is_not_refuted():
    row = synthetic_row("d2h_read_before_sync", 1e-3)
    v = judge_claim("pinned_transfer", "read_before_sync_stale", [row], {"n": 1024, "dtype": "float32"})
    assert v.verdict == "inconclusive", v
