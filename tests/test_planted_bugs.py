"""The checks must catch a deliberately wrong impl: in equivalence, in the timed run, and in reports."""
from __future__ import annotations

import numpy as np
import pytest

from harness import backends
from harness.check.equivalence import EquivalenceFailure, check_example, compare_arrays, run_equivalence
from harness.workers.execute import run_variants
from scenarios import get
from tests.conftest import backend_or_skip


def _break_one_element(monkeypatch, scenario, framework, variant, delta, on_device=False):
    """The variant's first output with its last element off by delta: a float64 numpy array, or with
    on_device a framework array of the output's own dtype and shape (what a device digest reads)."""
    import importlib

    impl = importlib.import_module(f"impls.{scenario}.{framework}_impl")
    original = getattr(impl, f"run_{variant}")

    def wrong(state):
        out = dict(original(state))
        key = next(iter(out))
        b = backends.get(framework)
        a = b.to_numpy(out[key]).astype(np.float64).copy()
        a.reshape(-1)[-1] += delta  # the last element: where tails and edge tiles go wrong
        out[key] = b.to_device(a.astype(b.to_numpy(out[key]).dtype)) if on_device else a
        return out

    monkeypatch.setattr(impl, f"run_{variant}", wrong)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_equivalence_catches_a_wrong_impl(monkeypatch, framework):
    backend_or_skip(framework)
    scn = get("async_dispatch")
    _break_one_element(monkeypatch, "async_dispatch", framework, "sync_each", 0.05)

    def execute(fw, params):
        return run_variants(scn, backends.get(fw), params)

    result = run_equivalence(scn, execute, [framework], max_examples=5, seed=1)
    assert result.status == "failed"
    msg = result.message
    assert f"async_dispatch/{framework}/sync_each" in msg
    assert "output 'x'" in msg and "allowed" in msg and "rtol=" in msg
    assert "python -m harness check async_dispatch" in msg


@pytest.mark.parametrize("fresh_processes", [False, True])
def test_an_example_that_starts_processes_is_reported_as_drawn_not_shrunk(fresh_processes):
    """A scenario whose every example starts fresh processes (max_examples set: cold_start, memory_pools)
    reports its first failing example as drawn: each shrinking step would start them again. Others shrink."""
    import dataclasses

    from hypothesis import strategies as st

    scn = dataclasses.replace(get("async_dispatch"), max_examples=5 if fresh_processes else None,
                              params=lambda: st.fixed_dictionaries({"k": st.integers(0, 10**9)}),
                              make_inputs=lambda p: {}, reference=lambda inputs, p: {})
    calls = []

    def execute(fw, params):
        calls.append(params["k"])
        if params["k"] > 1000:
            raise RuntimeError("the child failed")
        return {}

    result = run_equivalence(scn, execute, ["torch"], max_examples=5, seed=1)
    assert result.status == "failed" and "the child failed" in result.message, result.message
    failing = [k for k in calls if k > 1000]
    if fresh_processes:
        assert len(calls) <= 6 and len(set(failing)) == 1, calls  # the first failing example (and its replay)
    else:
        assert 1001 in failing and len(calls) > 6, calls  # shrunk to the smallest failing k


def test_mismatch_names_the_worst_element():
    scn = get("async_dispatch")
    params = {"m": 3, "n": 4, "steps": 2, "dtype": "float32", "seed": 0}
    ref = scn.reference(scn.make_inputs(params), params)
    a = {"x": ref["x"] + 0.0}
    b = {"x": ref["x"].copy()}
    b["x"][2, 3] += 1.0
    with pytest.raises(EquivalenceFailure, match=r"differs from the float64 reference.*\[2, 3\]"):
        check_example(scn, params, ref, {("torch", "async"): a, ("jax", "async"): b})


def test_frameworks_are_compared_on_the_reference_outputs_only():
    """An output beyond the reference's (JAX's barrier hands back the psum the harness waits on) is
    not a disagreement; a reference output that differs between frameworks still is."""
    scn = get("async_dispatch")
    params = {"m": 3, "n": 4, "steps": 2, "dtype": "float32", "seed": 0}
    ref = scn.reference(scn.make_inputs(params), params)
    plain, extra = {"x": ref["x"].copy()}, {"x": ref["x"].copy(), "arrived": np.ones(1)}
    check_example(scn, params, ref, {("torch", "async"): plain, ("jax", "async"): extra})
    check_example(scn, params, ref, {("jax", "async"): extra, ("torch", "async"): plain})


def test_bit_exact_tolerance_rejects_one_ulp():
    a = np.arange(10, dtype=np.float32)
    b = a.copy()
    b[7] = np.nextafter(b[7], np.float32(100))
    m = compare_arrays("y", b, a, 0.0, 0.0)
    assert m is not None and m.index == (7,) and m.n_bad == 1
    assert "bit-exact" in m.describe()


def test_nan_never_passes():
    a = np.ones(5)
    b = a.copy()
    b[1] = np.nan
    m = compare_arrays("y", b, a, 1.0, 1.0)
    assert m is not None and m.index == (1,)


def test_an_equal_inf_passes_whatever_the_other_elements_do():
    """Equal values pass on every path: an inf the reference also holds is not flagged because another
    element differs within tolerance (the bit-equal shortcut passes it when nothing differs)."""
    a = np.array([1.0, np.inf, -np.inf, 3.0], np.float32)
    b = a.copy()
    assert compare_arrays("y", b, a, 1e-5, 1e-6) is None
    b[0] = np.nextafter(b[0], np.float32(2))  # one ulp, inside the tolerance
    assert compare_arrays("y", b, a, 1e-5, 1e-6) is None
    b[3] = np.inf
    m = compare_arrays("y", b, a, 1e-5, 1e-6)
    assert m is not None and m.index == (3,) and m.n_bad == 1


def test_timed_check_counts_wrong_repeats(monkeypatch):
    from harness.measure import timing
    from harness.workers import handlers

    backend_or_skip("torch")
    _break_one_element(monkeypatch, "sync_points", "torch", "on_device", 1.0)
    rows = handlers.time_scenario("torch", "sync_points", get("sync_points").params_for_size("smoke") | {"seed": 3},
                                timing.preset("smoke"), progress=lambda _t: None)
    by = {r["variant"]: r for r in rows}
    assert by["item_each_step"]["status"] == "ok"
    assert by["on_device"]["status"] == "wrong"
    assert by["on_device"]["check"]["wrong"] == by["on_device"]["check"]["checked"] >= 2


@pytest.mark.parametrize("framework,variant,wrong", [("torch", "on_device", "uniform"),
                                                     ("jax", "host_then_copy", "std 1.1")])
def test_equivalence_catches_a_wrong_generator(monkeypatch, framework, variant, wrong):
    """A draw with the right mean and variance but the wrong law, or the right law but the wrong spread."""
    import dataclasses
    import importlib

    from hypothesis import strategies as st

    from scenarios import _strategies as S

    backend_or_skip(framework)
    impl = importlib.import_module(f"impls.device_creation.{framework}_impl")
    original = getattr(impl, f"run_{variant}")

    def broken(state):
        x = backends.get(framework).to_numpy(original(state)["normal"])
        if wrong == "uniform":
            return {"normal": np.random.default_rng(0).uniform(-np.sqrt(3), np.sqrt(3), x.shape).astype(np.float32)}
        return {"normal": x * np.float32(1.1)}

    monkeypatch.setattr(impl, f"run_{variant}", broken)
    scn = dataclasses.replace(get("device_creation"),
                              params=lambda: S.params(kind=st.just("normal"), n=st.just(1 << 16)))

    def execute(fw, params):
        return run_variants(scn, backends.get(fw), params)

    result = run_equivalence(scn, execute, [framework], max_examples=2, seed=1)
    assert result.status == "failed"
    assert f"device_creation/{framework}/{variant}" in result.message
    assert "not the reference's distribution" in result.message and "false-alarm rate <= 1e-09" in result.message


@pytest.mark.parametrize("variant", ["h2d_pageable", "d2h_pageable"])
def test_poison_makes_a_copy_that_never_happened_visible(monkeypatch, variant):
    """An impl that copies on its first call and afterwards hands back its destination without copying
    is caught on every checked repeat: the destination is poisoned (bits flipped) before each run, so
    the first call's bytes cannot pass for later copies."""
    import importlib

    from harness.measure import timing
    from harness.workers import handlers

    backend_or_skip("torch")
    impl = importlib.import_module("impls.pinned_transfer.torch_impl")
    dest = "dst" if variant.startswith("h2d") else "out_pageable"
    original, calls = getattr(impl, f"run_{variant}"), []

    def copies_once(state):
        calls.append(1)
        return original(state) if len(calls) == 1 else {"x": state[dest]}

    monkeypatch.setattr(impl, f"run_{variant}", copies_once)
    params = get("pinned_transfer").points("smoke")[0] | {"seed": 3}
    rows = handlers.time_scenario("torch", "pinned_transfer", params, timing.preset("smoke"),
                                progress=lambda _t: None)
    by = {r["variant"]: r for r in rows}
    assert by[variant]["status"] == "wrong"
    assert by[variant]["check"]["wrong"] == by[variant]["check"]["checked"] >= 2
    assert "bit-exact" in by[variant]["check"]["worst"]
    assert all(r["status"] in ("ok", "skipped") for v, r in by.items() if v != variant)


@pytest.mark.parametrize("rtol,atol", [(0.0, 0.0), (1e-3, 1e-4)])
def test_a_chunked_comparison_finds_what_one_pass_over_the_whole_output_finds(rtol, atol):
    """compare_arrays works in cache-sized chunks; the count, the worst element and its band must be those
    of one elementwise pass over the whole output (an oracle written out here), whatever the chunk: on
    its own (widen 1) and as the cross-framework check calls it (widen 2, the float64 reference as scale,
    outputs of two dimensions). The relative error it gives from the same pass is relative_error's."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra.numpy import array_shapes, arrays

    from harness.check.equivalence import relative_error

    values = st.sampled_from([0.0, 1.0, -2.5, 1e-7, 3.0000002, np.nan, np.inf, -np.inf])

    @settings(max_examples=200, deadline=None, database=None)
    @given(arrays(np.float32, array_shapes(min_dims=1, max_dims=2, max_side=12), elements=values), st.data(),
           st.integers(1, 9), st.sampled_from([1.0, 2.0]), st.booleans(), st.booleans())
    def prop(want, data, chunk, widen, scaled, reference):
        got = want.copy()
        for i in data.draw(st.lists(st.integers(0, want.size - 1), max_size=6)):
            got.reshape(-1)[i] = data.draw(values)
        if reference:  # a float32 output against a float64 reference, as a timed check meets it
            want = want.astype(np.float64)
        scale = data.draw(arrays(np.float64, want.shape, elements=values)) if scaled else None
        g, w = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(invalid="ignore"):
            allowed = widen * (atol + rtol * np.abs(w if scale is None else scale))
            err = np.abs(g - w)
            bad = (g != w) & ~(np.isnan(g) & np.isnan(w)) if rtol == atol == 0 else ~((err <= allowed) | (g == w))
            score = np.nan_to_num(err if rtol == atol == 0 else err - allowed, nan=np.inf, posinf=np.inf)
        m = compare_arrays("y", got, want, rtol, atol, widen, scale, chunk=chunk)
        errors: list[float] = []  # the relative error from the same pass: relative_error's, to the bit
        fused = compare_arrays("y", got, want, rtol, atol, widen, scale, chunk=chunk, errors=errors)
        assert errors == [relative_error({"y": got}, {"y": want}, chunk=chunk)], (errors, chunk)
        assert (fused is None) == (m is None) and (m is None or fused.describe() == m.describe())
        if not bad.any():
            assert m is None
            return
        worst = int(np.argmax(np.where(bad, score, -np.inf)))
        assert m is not None and m.n_bad == int(bad.sum()), (m, chunk)
        assert m.index == tuple(int(i) for i in np.unravel_index(worst, want.shape)), (m, worst, chunk)
        band = 0.0 if rtol == atol == 0 else allowed.reshape(-1)[worst]
        assert np.array_equal(m.allowed, band, equal_nan=True)

    prop()
