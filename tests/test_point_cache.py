"""The run's point cache: a point's inputs and reference are made once and read back the same."""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from harness.workers import point_cache
from scenarios import get


def _same(a, b, kind=np.ndarray) -> bool:
    return a.keys() == b.keys() and all(
        np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
        and type(b[k]) is kind and b[k].flags.writeable for k in a)


def test_a_second_process_reads_the_point_back_instead_of_making_it():
    scn = get("sync_points")
    params = scn.points("smoke")[0] | {"seed": 3}
    calls = []

    def counting(p):
        calls.append(p)
        return scn.make_inputs(p)

    other = dataclasses.replace(scn, make_inputs=counting)
    root = point_cache.start()
    try:
        made, ref = point_cache.inputs_and_reference(scn, params)
        again, ref2 = point_cache.inputs_and_reference(other, params)
        assert calls == []  # read back, not made
        # the inputs as fresh arrays (an impl copies from anonymous memory in every process); the reference,
        # which only the checks read, mapped: a write to it stays in its process
        assert _same(made, again) and _same(ref, ref2, np.memmap)
        for a in ref2.values():
            a[...] = 0
        assert _same(ref, point_cache.inputs_and_reference(other, params)[1], np.memmap)
        point_cache.inputs_and_reference(other, params | {"seed": 4})  # another point is made
        assert len(calls) == 1
        point_cache.clear()
        assert os.listdir(root) == []
    finally:
        point_cache.stop(root)
    assert not os.path.exists(root) and point_cache.ENV not in os.environ


def test_where_the_reference_is_too_costly_none_comes_back():
    scn = dataclasses.replace(get("sync_points"), cheap_reference=lambda p: False)
    params = scn.points("smoke")[0] | {"seed": 1}
    root = point_cache.start()
    try:
        first = point_cache.inputs_and_reference(scn, params)
        second = point_cache.inputs_and_reference(scn, params)
        assert first[1] is None and second[1] is None and _same(first[0], second[0])
    finally:
        point_cache.stop(root)


def test_a_compare_run_removes_its_cache():
    from harness.run.progress import QuietUI
    from harness.run.runner import CompareOptions, run_compare

    tmp = os.environ.get("TMPDIR", "/tmp")
    before = set(os.listdir(tmp))
    opts = CompareOptions(scenarios=["sync_points"], frameworks=["torch"], size="smoke", examples=1, seed=5,
                          isolation="none", equivalence=False)
    doc = run_compare(opts, QuietUI())
    assert {r["status"] for r in doc["scenarios"]["sync_points"]["rows"]} == {"ok"}
    assert not [n for n in set(os.listdir(tmp)) - before if n.startswith("triptych-points-")]
    assert point_cache.ENV not in os.environ
