"""What a run records about its own measuring: the timed share (seconds inside timed repeats against
the timing phase's wall time), the host's speed over the run with its timestamps, each row's
host_sensitivity, and the per-process budget decided from the variance at each level (Kalibera and
Jones). Each test fails where the recording or the rule is taken out."""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest

from harness.workers import processes
from harness.measure.calibrate import host_series
from harness.check import outputs
from harness.check.outputs import same_bytes
from harness.results.model import Phase, ProcessTiming, Result, Row
from harness.measure.noise import host_sensitivity
from harness.measure.timing import TimingConfig, measure
from tests.test_timing import FakeAsyncBackend

CFG = TimingConfig(warmup=0, min_repeats=10, max_repeats=10, min_time_s=0.0)


def _spin(s: float) -> None:
    end = time.perf_counter() + s
    while time.perf_counter() < end:
        pass


def test_measure_records_the_seconds_inside_timed_repeats_apart_from_untimed_work(virtual_clock):
    b = FakeAsyncBackend(latency=2e-3)
    m = measure(b.enqueue, b, CFG, before=lambda: _spin(3e-3), check=lambda out: _spin(5e-3))
    done = m.samples["device_done"]
    assert m.timed_s == pytest.approx(sum(done), rel=1e-9) and m.timed_s >= 10 * 2e-3
    assert m.check_s >= 2 * 5e-3  # the first repeat's check and the last's
    assert m.loop_s >= m.timed_s + 10 * 3e-3 + m.check_s  # poisoning and checks are outside the timed calls
    assert m.repeats_s <= m.loop_s and m.repeats_s >= m.timed_s
    assert 0.1 < m.timed_s / m.loop_s < 0.5
    d = m.to_dict()
    assert {k: d[k] for k in ("timed_s", "loop_s", "check_s", "repeats_s")} == {
        "timed_s": m.timed_s, "loop_s": m.loop_s, "check_s": m.check_s, "repeats_s": m.repeats_s}


def test_measure_splits_the_rest_of_its_time_into_warm_up_set_up_checks_and_agreement(virtual_clock):
    """The untimed part of a row, on a virtual clock: warm_s before the repeat loop (the first call and two
    warm-up calls, each with its set-up), before_s the set-up between repeats, agree_s the rank group's
    agreement (or the other side's turn), the warm-up's included; with the first check they add up to loop_s."""
    b = FakeAsyncBackend(latency=2e-3)
    cfg = TimingConfig(warmup=2, min_repeats=10, max_repeats=10, min_time_s=0.0)
    m = measure(b.enqueue, b, cfg, before=lambda: time.sleep(3e-3), check=lambda out: time.sleep(5e-3),
                agree=lambda stop: time.sleep(1e-3) or stop)
    # ten agreements after the repeats and one that ends the warm-up, which is not the warm-up's time
    assert m.before_s == pytest.approx(10 * 3e-3, rel=1e-2) and m.agree_s == pytest.approx(11 * 1e-3, rel=1e-2)
    assert m.warm_s == pytest.approx(3 * (3e-3 + 2e-3), rel=1e-2)
    assert m.check_s == pytest.approx(2 * 5e-3, rel=1e-2)
    assert m.repeats_s == pytest.approx(m.timed_s + m.before_s + 5e-3, rel=1e-2)  # the last check is inside
    assert m.loop_s == pytest.approx(m.warm_s + m.repeats_s + m.agree_s + 5e-3, rel=1e-3)
    d = m.to_dict()
    assert (d["warm_s"], d["before_s"], d["agree_s"]) == (m.warm_s, m.before_s, m.agree_s)
    assert measure(b.enqueue, b, cfg).before_s == 0.0  # no set-up, none counted


def test_a_repeat_of_several_calls_counts_every_call(virtual_clock):
    b = FakeAsyncBackend(latency=1e-3)
    m = measure(b.enqueue, b, CFG, calls=3)
    assert m.timed_s == pytest.approx(3 * sum(m.samples["device_done"]), rel=1e-9)


def _process(median: float, host_loop: float, at: float, timed: float = 0.5, phase: float = 1.0, n: int = 20,
             seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    done = [float(x) for x in median * np.exp(rng.normal(0, 0.005, n))]
    return {"first_call_s": 0.1, "host_return": None, "device_done": None, "device_events": None, "metrics": {},
            "checked_repeats": 2, "wrong_repeats": 0, "worst": "", "samples": {"host_return": done, "device_done": done},
            "stopped": "noise", "noise": 0.01, "timed_s": timed, "phase_s": phase, "loop_s": 0.8, "check_s": 0.1,
            "repeats_s": 0.7, "host_loop_s": host_loop, "host_loop_at": at}


def test_a_pooled_row_keeps_each_process_timed_share_host_loop_and_its_time():
    """Each process keeps its own seconds (what a first process pays that a later one does not), the row their
    sums; the host loop is a process's alone."""
    t = processes.pool_timing([ProcessTiming.from_dict(_process(1e-3, 0.010, 1000.0, 0.5, 1.0)),
                               ProcessTiming.from_dict(_process(1e-3, 0.012, 1010.0, 0.25, 2.0, seed=1))]).to_dict()
    assert t["timed_s"] == 0.75 and t["phase_s"] == 3.0 and t["check_s"] == pytest.approx(0.2)
    assert [(p["timed_s"], p["phase_s"], p["host_loop_s"], p["host_loop_at"]) for p in t["processes"]] == [
        (0.5, 1.0, 0.010, 1000.0), (0.25, 2.0, 0.012, 1010.0)]
    assert [(p["loop_s"], p["check_s"]) for p in t["processes"]] == [(0.8, 0.1), (0.8, 0.1)]
    assert "host_loop_at" not in t and "host_loop_s" not in t  # per process only
    first = dict(_process(1e-3, 0.010, 1000.0), loop_s=2.0, warm_s=0.5, check_s=1.2)  # the first process's checks
    t = processes.pool_timing([ProcessTiming.from_dict(first),
                               ProcessTiming.from_dict(dict(_process(1e-3, 0.012, 1010.0, seed=1), warm_s=0.2))]).to_dict()
    assert [(p["loop_s"], p.get("warm_s"), p["check_s"]) for p in t["processes"]] == [(2.0, 0.5, 1.2), (0.8, 0.2, 0.1)]
    assert (t["loop_s"], t["warm_s"], t["check_s"]) == pytest.approx((2.8, 0.7, 1.3))
    older = {k: v for k, v in _process(1e-3, 0.012, 1010.0, seed=1).items() if k != "repeats_s"}  # an older tree's
    t = processes.pool_timing([ProcessTiming.from_dict(_process(1e-3, 0.010, 1000.0)),
                               ProcessTiming.from_dict(older)]).to_dict()
    assert t.get("repeats_s") is None and t["loop_s"] == pytest.approx(1.6)  # not the first process's 0.7 alone
    assert t["host_sensitivity"] == {"slope": None, "r": None, "n": 2}  # two processes: nothing to regress on


def test_a_pooled_row_keeps_the_host_loops_beside_its_repeats_only_where_every_process_timed_them():
    """--host-covariate's loops (timing.host_loops) pool in process order like the samples; a process without them
    (a request that did not ask) leaves the row none rather than loops that no longer match its repeats. A file
    whose loops do not match its repeats is refused."""
    from harness.results import results
    from harness.results.results import ResultError
    from tests.synthetic import doc, row

    a, b = _process(1e-3, 0.010, 1000.0, n=3), _process(1e-3, 0.012, 1010.0, n=2, seed=1)
    a["host_loops"], b["host_loops"] = [6e-5, 6.1e-5, 5.9e-5], [1.1e-4, 1.2e-4]
    t = processes.pool_timing([ProcessTiming.from_dict(a), ProcessTiming.from_dict(b)])
    assert t.host_loops == [6e-5, 6.1e-5, 5.9e-5, 1.1e-4, 1.2e-4]
    assert processes.pool_timing([ProcessTiming.from_dict(a), ProcessTiming.from_dict(dict(b, host_loops=None))]
                                 ).host_loops is None
    r = row("torch", "async", [1e-3] * 4)
    d = doc([dict(r, timing=dict(r["timing"], host_loops=[6e-5] * 4))])
    results.validate(d, "x.json")
    d["scenarios"]["async_dispatch"]["rows"][0]["timing"]["host_loops"] = [6e-5] * 3
    with pytest.raises(ResultError, match="3 loops where samples.device_done has 4"):
        results.validate(d, "x.json")


def test_the_loops_identity_follows_the_loop_and_where_it_runs_not_their_docstrings(monkeypatch):
    """Two trees that time one loop at one place say the same (--host-covariate reads the loop on both sides);
    another loop length or other code says another; a docstring or a comment says the same."""
    from harness.measure import host_loop

    f = 'def f():\n    """{}"""\n    return {}  # {}\n'
    assert host_loop.code(f.format("a", 1, "x")) == host_loop.code(f.format("b", 1, "y"))
    assert host_loop.code(f.format("a", 1, "x")) != host_loop.code(f.format("a", 2, "x"))
    from harness.measure import timing

    before = timing.loop_identity()
    assert before == host_loop.identity(timing._timed_call) != host_loop.identity()  # where it runs counts
    monkeypatch.setattr(host_loop, "BESIDE", host_loop.BESIDE + 1)
    assert timing.loop_identity() != before


def _answer(timing: dict) -> dict:
    row = {"scenario": "s", "framework": "torch", "variant": "v", "status": "ok", "wall_s": 1.0, "timing": timing,
           "check": {"checked": 2, "wrong": 0, "worst": "", "max_rel_err": 0.0}}
    return {"rows": [row], "sample": None}


def test_two_processes_that_timed_the_same_repeats_bit_for_bit_fail_the_row():
    """A state shared between processes (a cache of timings, one worker asked twice) would pool one process's
    repeats twice and shrink the spread between processes that the row's interval rests on: the row fails and
    says why. Equal medians from different repeats are a measurement, and a clock too coarse to tell repeats
    apart proves nothing."""
    a, b, c = (_process(1e-3, 0.010, 1000.0 + i, seed=i) for i in range(3))
    (row,), _ = processes.merge([_answer(a), _answer(b), _answer(c)])
    assert row.status == "ok" and len(row.timing.processes) == 3
    (row,), _ = processes.merge([_answer(a), _answer(b), _answer(dict(a, host_loop_at=1010.0))])
    assert row.status == "error" and row.timing is None and row.check is None
    assert row.reason.startswith("processes 1 and 3 timed the same 20 repeats, bit for bit: they shared a state")
    ties = dict(b, samples={"device_done": sorted(b["samples"]["device_done"]), "host_return": b["samples"]["host_return"]})
    (row,), _ = processes.merge([_answer(b), _answer(ties)])  # the same repeats in another order: measured
    assert row.status == "ok"
    coarse = [1e-3, 1e-3, 2e-3] * 3  # two distinct values: a coarse clock's chance agreement, not a shared source
    flat = dict(a, samples={"device_done": coarse, "host_return": coarse})
    (row,), _ = processes.merge([_answer(flat), _answer(flat)])
    assert row.status == "ok"


def _typed(rows):
    return [Row.from_dict(r) for r in rows]


def test_the_timing_phase_share_of_a_scenario_and_of_the_run():
    procs = [{"request_s": 2.0, "served_s": 1.5}, {"request_s": 3.0, "served_s": 2.5}]  # one request each
    rows = [{"framework": "torch", "timing": {"timed_s": 3.0, "phase_s": 1.0, "processes": procs}},
            {"framework": "torch", "timing": {"timed_s": 1.0, "phase_s": 2.0, "processes": procs}},
            {"status": "skipped"}]
    p = processes.phase(_typed(rows), 10.0).to_dict()
    assert p == {"wall_s": 10.0, "timed_s": 4.0, "share": 0.4, "rows_s": 3.0, "requests_s": 5.0, "served_s": 4.0}
    parts = {"warm_s": 0.25, "before_s": 0.125, "check_s": 0.5, "agree_s": 0.0625}  # the rows' own split
    split = processes.phase(_typed([r | {"timing": r["timing"] | parts} for r in rows[:2]] + rows[2:]), 10.0).to_dict()
    assert split == p | {k: 2 * v for k, v in parts.items()}
    run = processes.run_phase([Phase.from_dict(p), processes.phase(_typed(rows[:1]), 5.0)]).to_dict()
    assert run["wall_s"] == 15.0 and run["timed_s"] == 7.0 and run["share"] == pytest.approx(7 / 15)
    assert run["requests_s"] == 10.0 and run["rows_s"] == 4.0 and "warm_s" not in run  # older rows: no split
    assert processes.run_phase([Phase.from_dict(split), Phase.from_dict(p)]).check_s == 1.0


def test_a_request_that_timed_some_rows_of_a_point_counts_once_whatever_its_place_in_each_row():
    """An interleaved run's later processes time a point's unknown rows only, so the same third process
    of two rows can be two requests: each counts in the timing phase, and a request shared by rows once."""
    req = [{"request_s": float(k), "served_s": k / 2, "host_loop_at": 1000.0 + k} for k in (1, 2, 3, 4)]
    rows = [{"framework": "jax", "point": 0, "timing": {"timed_s": 1.0, "phase_s": 1.0, "processes": req[:3]}},
            {"framework": "jax", "point": 0, "timing": {"timed_s": 1.0, "phase_s": 1.0,
                                                        "processes": req[:2] + req[3:]}}]
    p = processes.phase(_typed(rows), None)
    assert p.requests_s == 10.0 and p.served_s == 5.0 and p.wall_s == 10.0


def test_the_host_series_is_every_loop_measured_once_in_time_order():
    machine = {"calibration": {"torch": [{"python_loop_s": 0.01, "tiny_op_s": 1e-5, "at": 100.0},
                                         {"error": "crashed"}]}}
    procs = [{"n": 5, "host_loop_s": 0.02, "host_loop_at": 130.0}, {"n": 5, "host_loop_s": 0.011, "host_loop_at": 120.0}]
    rows = [{"framework": "torch", "variant": v, "point": 0, "timing": {"processes": procs}} for v in ("a", "b")]
    rows.append({"framework": "torch", "variant": "c", "point": 0, "status": "skipped"})
    series = host_series(machine, {"sync_points": {"rows": rows}})
    assert [(e["at"], e["loop_s"], e["scenario"]) for e in series] == [
        (100.0, 0.01, None), (120.0, 0.011, "sync_points"), (130.0, 0.02, "sync_points")]


@pytest.mark.parametrize("elasticity", [1.0, 0.0, 0.5])
def test_host_sensitivity_finds_a_planted_dependence_on_the_host(elasticity):
    rng = np.random.default_rng(3)
    loops = np.exp(rng.uniform(np.log(0.006), np.log(0.014), 8))  # a host twice as fast in some processes
    medians = 1e-4 * (loops / 0.01) ** elasticity * np.exp(rng.normal(0, 0.01, 8))
    h = host_sensitivity(list(medians), list(loops))
    assert h["n"] == 8 and h["slope"] == pytest.approx(elasticity, abs=0.1)
    assert (h["r"] > 0.9) if elasticity else (abs(h["r"]) < 0.9)
    # The same through a pooled row: its processes' medians against their host loops.
    t = processes.pool_timing([ProcessTiming.from_dict(_process(m, lp, 100.0 + i, seed=i))
                               for i, (m, lp) in enumerate(zip(medians, loops))]).to_dict()
    assert t["host_sensitivity"]["slope"] == pytest.approx(elasticity, abs=0.1)


def test_host_sensitivity_needs_three_processes_and_a_host_that_varied():
    assert host_sensitivity([1.0, 2.0], [0.01, 0.02]) == {"slope": None, "r": None, "n": 2}
    assert host_sensitivity([1.0, 2.0, 3.0], [0.01, 0.01, 0.01])["slope"] is None
    assert host_sensitivity([1.0, 2.0, 3.0], [0.01, None, 0.02])["n"] == 2


def _procs(means, within, n=20, repeat_s=1e-3, process_s=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return [(list(m + rng.normal(0, within, n)), n * repeat_s, n * repeat_s + process_s) for m in means]


def test_kalibera_jones_repeats_follow_the_variance_and_the_costs():
    # Between-process variance dominates: few repeats a process, more processes.
    few = processes.repeats_where_the_variance_is(_procs([1.0, 1.2, 0.9, 1.1], 0.001), 5, 200)
    assert few == 5
    # Within-process variance alone: as many repeats as the preset allows.
    assert processes.repeats_where_the_variance_is(_procs([1.0, 1.0, 1.0, 1.0], 0.05), 5, 200) == 200
    # In between, r = ceil(sqrt(c2 T1^2 / (c1 T2^2))) from the estimates, to the repeat.
    procs = _procs([1.0, 1.01, 0.99, 1.005], 0.02, seed=4)
    xs = [np.asarray(p[0]) for p in procs]
    t1 = np.mean([math.pi / 2 * ((np.percentile(x, 75) - np.percentile(x, 25)) / 1.349) ** 2 for x in xs])
    t2 = np.var([np.median(x) for x in xs], ddof=1) - t1 / 20
    want = math.ceil(math.sqrt(1.0 * t1 / (1e-3 * t2)))
    assert 5 < want < 200 and processes.repeats_where_the_variance_is(procs, 5, 200) == want
    # A process that costs more to start buys repeats instead.
    dear = [(x, r, w + 99.0) for x, r, w in procs]
    assert 9 * want <= processes.repeats_where_the_variance_is(dear, 5, 10_000) <= 10 * want + 1  # sqrt(100 x c2)
    assert processes.repeats_where_the_variance_is(procs[:1], 5, 200) is None


def test_kalibera_jones_plans_for_the_median_so_one_slow_repeat_buys_no_repeats():
    # Processes 2% apart, repeats 0.1%: a process's median is sure after a few repeats. One repeat in
    # 200 ten times slower (a host hiccup) leaves every median where it was; a sample variance would call
    # the repeats noisy and plan as many as the preset allows.
    procs = _procs([1.0, 1.02, 0.98, 1.01], 0.001, n=200)
    spiky = [(x[:-1] + [10.0], r, w) for x, r, w in procs]
    assert processes.repeats_where_the_variance_is(procs, 5, 200) == 5
    assert processes.repeats_where_the_variance_is(spiky, 5, 200) == 5


class _Pool:
    def __init__(self, log, means):
        self.log, self.means = log, means

    def request(self, op, scenario, params, cfg, first, seed=None, timeout=None, progress=None):
        i = len(self.log)
        self.log.append(cfg)
        t = _process(self.means[i], 0.01, float(i), seed=i)
        t["samples"]["device_done"] = list(self.means[i] + np.random.default_rng(i).normal(0, 1e-6, 20))
        t["repeats_s"], t["phase_s"] = 20 * 1e-3, 1.0 + 20 * 1e-3
        return {"rows": [{"variant": "sync_each", "status": "ok", "timing": t}], "sample": None}


def test_processes_after_the_first_two_run_the_planned_repeats():
    from scenarios import get

    log: list = []
    means = [1e-3, 1.3e-3, 0.9e-3, 1.1e-3, 1.2e-3, 1e-3]
    procs = [{"torch": _Pool(log, means)} for _ in means]
    cfg = TimingConfig(min_repeats=3, max_repeats=200)
    processes.time_point(procs, ["torch"], get("async_dispatch"), {}, cfg, 10, lambda *a: None, lambda *a: None)
    assert log[0] is cfg and log[1] is cfg  # the first two on the preset's budget
    assert all(dict(c.plan) == {"sync_each": 5} for c in log[2:])  # between-process noise: few repeats
    assert all(not c.kernel_clock for c in log[2:])  # and no traced kernel clock (processes.KERNEL_PROCESSES)
    planned = log[2].for_variant("sync_each")
    assert (planned.min_repeats, planned.max_repeats, planned.plan) == (3, 5, ())
    assert log[2].for_variant("async") == dataclasses.replace(cfg, kernel_clock=False).for_variant("async")
    b = FakeAsyncBackend(latency=1e-4)
    assert measure(b.enqueue, b, planned).device_done.n == 5


def test_same_bytes_is_bitwise():
    a = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.asarray(1.5)}
    assert same_bytes(a, {"x": a["x"].copy(), "s": np.asarray(1.5)})
    assert not same_bytes(a, {"x": a["x"].astype(np.float64), "s": a["s"]})
    assert not same_bytes(a, {"x": a["x"], "t": a["s"]})
    neg = a["x"].copy()
    neg[0, 0] = -0.0  # equal as numbers, not as bytes: compared in full
    assert not same_bytes(a, {"x": neg, "s": a["s"]})
    nan = np.array([np.nan], dtype=np.float32)
    assert same_bytes(nan, nan.copy())
    assert not same_bytes(np.array([object()]), np.array([object()]))
    assert same_bytes(np.zeros(0, np.float32), np.zeros(0, np.float32))


def test_same_bytes_sees_one_bit_anywhere_in_an_output_of_many_slices(monkeypatch):
    """same_bytes walks an output slice by slice: a flipped bit in the first, a middle or the last
    (partial) slice, in a non-contiguous view too, is a difference."""
    from harness.workers import handlers

    monkeypatch.setattr(outputs, "SAME_BYTES_SLICE", 64)
    a = np.random.default_rng(0).standard_normal(1000).astype(np.float32)  # 4000 bytes: 62.5 slices
    assert same_bytes(a, a.copy()) and same_bytes(a[::2], a.copy()[::2])
    for at in (0, 15, 16, 500, 999):
        b = a.copy()
        b.view(np.uint32)[at] ^= 1  # the lowest bit of one element
        assert not same_bytes(a, b), at
        assert not same_bytes(a[::1].reshape(10, 100), b.reshape(10, 100)), at
    b = a.copy()
    b.view(np.uint32)[998] ^= 1
    assert not same_bytes(a[::2], b[::2]) and same_bytes(a[1::2], b[1::2])


def test_same_bytes_reads_outputs_of_one_layout_in_memory_order_without_a_copy(monkeypatch):
    """A transposed output (torch's .cpu() keeps its strides) and its first check's copy share one
    layout: compared in memory order, with no contiguous copy of either; outputs whose layouts differ
    are compared element by element."""
    from harness.workers import handlers

    monkeypatch.setattr(outputs, "SAME_BYTES_SLICE", 64)
    a = np.random.default_rng(1).standard_normal((40, 25)).astype(np.float32).T  # F order
    first = np.array(a, copy=True)  # outputs.copied: order K keeps the layout
    assert first.strides == a.strides and not a.flags.c_contiguous
    copies = []
    real = np.ascontiguousarray
    monkeypatch.setattr(np, "ascontiguousarray", lambda v, *k, **kw: copies.append(v.shape) or real(v, *k, **kw))
    assert same_bytes(a, first) and not copies
    for at in (0, 333, 999):
        b = np.array(a, copy=True)
        flat = np.ravel(b, order="K")  # a view in memory order: the flip lands in b
        assert np.shares_memory(flat, b)
        flat.view(np.uint32)[at] ^= 1
        assert not same_bytes(a, b), at
    assert not copies
    assert same_bytes(a, np.ascontiguousarray(a)) and copies  # C against F: element order, copied


def test_a_compare_run_records_its_timed_share_and_its_host_over_time():
    """End to end, in this process: the result carries the run's and each scenario's timing_phase, each
    row's timed seconds per process, the host series with timestamps inside the run, and it validates."""
    from harness.run.progress import QuietUI
    from harness.results.results import as_written, validate
    from harness.run.runner import CompareOptions, run_compare
    from harness.report.measuring import blocks, host_speed_rows, phase_line

    t0 = time.time()
    doc = run_compare(CompareOptions(scenarios=["launch_overhead"], frameworks=["torch"], size="smoke", examples=1,
                                     seed=1, isolation="none", equivalence=False), QuietUI())
    t1 = time.time()
    validate(as_written(doc))
    run, scn = doc["timing_phase"], doc["scenarios"]["launch_overhead"]["timing_phase"]
    assert 0 < run["timed_s"] < run["wall_s"] and run == scn | {"share": run["share"]}
    rows = [r for r in doc["scenarios"]["launch_overhead"]["rows"] if r["status"] == "ok"]
    assert rows and sum(r["timing"]["timed_s"] for r in rows) == pytest.approx(run["timed_s"])
    for r in rows:
        t, p = r["timing"], r["timing"]["processes"][0]
        assert 0 < t["timed_s"] <= t["repeats_s"] <= t["loop_s"] <= t["phase_s"] <= p["served_s"] <= p["request_s"]
    assert run["rows_s"] <= run["served_s"] <= run["requests_s"] <= run["wall_s"]
    assert 0 < run["warm_s"] and run["timed_s"] + sum(run[k] for k in ("warm_s", "before_s", "check_s")) <= run["rows_s"]
    series = doc["host_speed"]
    assert len(series) >= 2 and all(t0 <= e["at"] <= t1 and e["loop_s"] > 0 for e in series)
    assert [e["at"] for e in series] == sorted(e["at"] for e in series)
    result = Result.from_dict(as_written(doc))
    assert phase_line(result).startswith("timed share:") and host_speed_rows(result)
    (table,) = [b for b in blocks(result) if b[0] == "table" and "timing phase" in b[1]]
    assert table[1][5:10] == ["first + warm-up", "set-up between repeats", "checks", "rank agreement",
                              "rest of the rows"], table[1]
    for name, cells in zip(doc["scenarios"], table[2]):  # the parts and the rest add up to the rows' time
        p = doc["scenarios"][name]["timing_phase"]
        assert float(cells[9].split()[0]) == pytest.approx(
            p["rows_s"] - p["timed_s"] - sum(p[k] for k in ("warm_s", "before_s", "check_s", "agree_s")), abs=0.06)
    older = {"scenarios": {n: s | {"timing_phase": {k: v for k, v in s["timing_phase"].items()
                                                    if k not in ("warm_s", "before_s", "check_s", "agree_s")}}
                               for n, s in doc["scenarios"].items()}, "timing_phase": run}
    assert "checks" not in [b for b in blocks(Result.from_dict(as_written(older))) if b[0] == "table"][0][1]  # from before


@pytest.fixture(params=["host copy", "device digest"])
def check_path(request, monkeypatch):
    """Both ways a check learns that outputs are bytes it has judged: the host copy compared, and the
    device digest (harness/backends/digest.py), here forced on for smoke outputs below its MIN_BYTES."""
    from harness.backends import base

    monkeypatch.setattr(base, "DIGEST_MIN_BYTES", 0 if request.param == "device digest" else math.inf)
    monkeypatch.setattr(base, "DIGEST_ON_CPU", request.param == "device digest")
    return request.param


def test_an_output_that_goes_wrong_after_a_right_one_is_still_caught(monkeypatch, check_path):
    """A checked output equal to the first keeps its verdict without a second comparison; one that
    differs (here: the last repeat's, one element off, a tensor of the same dtype and shape) is compared
    in full and counted wrong."""
    import importlib

    from harness import backends
    from harness.measure import timing
    from harness.workers import handlers
    from scenarios import get
    from tests.conftest import backend_or_skip

    backend_or_skip("torch")
    impl = importlib.import_module("impls.sync_points.torch_impl")
    original, calls = impl.run_on_device, []

    def late(state):
        out = dict(original(state))
        calls.append(1)
        if len(calls) > 4:  # the first call, one warm-up and the first timed repeat are right
            key = next(iter(out))
            a = backends.get("torch").to_numpy(out[key]).copy()
            a.reshape(-1)[-1] += 1.0
            out[key] = backends.get("torch").to_device(a)
        return out

    monkeypatch.setattr(impl, "run_on_device", late)
    cfg = timing.TimingConfig(warmup=1, min_repeats=6, max_repeats=6, min_time_s=0.0)
    rows = handlers.time_scenario("torch", "sync_points", get("sync_points").params_for_size("smoke") | {"seed": 3},
                                  cfg, progress=lambda _t: None)
    row = next(r for r in rows if r["variant"] == "on_device")
    assert row["status"] == "wrong" and (row["check"]["checked"], row["check"]["wrong"]) == (2, 1)


def test_an_output_in_a_buffer_the_impl_keeps_is_checked_on_its_own_bytes(monkeypatch, check_path):
    """An impl may hand back a buffer of its state (torch's d2h copies into a host tensor it keeps): the
    first checked output is kept as a copy, so a later run that leaves the poisoned bytes there is wrong."""
    import importlib

    from harness.measure import timing
    from harness.workers import handlers
    from scenarios import get
    from tests.conftest import backend_or_skip

    backend_or_skip("torch")
    impl = importlib.import_module("impls.pinned_transfer.torch_impl")
    original, calls = impl.run_d2h_pageable, []

    def lazy(state):  # copies while right; from the fifth call on, hands back the poisoned buffer as it is
        calls.append(1)
        return original(state) if len(calls) <= 4 else {"x": state["out_pageable"]}

    monkeypatch.setattr(impl, "run_d2h_pageable", lazy)
    scn = get("pinned_transfer")
    cfg = timing.TimingConfig(warmup=1, min_repeats=6, max_repeats=6, min_time_s=0.0)
    out = handlers.time_point("torch", "pinned_transfer", scn.points("smoke")[0] | {"seed": 1}, cfg, True,
                              progress=lambda _t: None)
    row = next(r for r in out["rows"] if r["variant"] == "d2h_pageable")
    assert len(calls) > 4 and row["status"] == "wrong" and row["check"]["wrong"] >= 1, row["check"]


def test_a_second_process_gets_the_verdict_on_the_same_bytes_and_compares_different_ones(monkeypatch, check_path):
    """Within a run (its point cache), a check against the reference is made once per distinct output:
    a later process whose outputs are the same bytes reuses it; a planted wrong element is compared
    in full and caught."""
    from harness.measure import timing
    from harness.workers import handlers, point_cache
    from scenarios import get
    from tests.conftest import backend_or_skip
    from tests.test_planted_bugs import _break_one_element

    backend_or_skip("torch")
    monkeypatch.setattr(point_cache, "DIGEST_MIN_BYTES", 0)  # smoke outputs are small: shortcut them too
    compared: list[str] = []
    real = outputs.compare_outputs
    monkeypatch.setattr(outputs, "compare_outputs",
                        lambda scn, params, got, want, variant, **kw: compared.append(variant) or real(
                            scn, params, got, want, variant=variant, **kw))
    root = point_cache.start()
    try:
        params = get("sync_points").params_for_size("smoke") | {"seed": 3}
        cfg = timing.TimingConfig(warmup=1, min_repeats=4, max_repeats=4, min_time_s=0.0)

        def one_process():
            return {r["variant"]: r for r in handlers.time_scenario("torch", "sync_points", params, cfg,
                                                                    progress=lambda _t: None)}

        first = one_process()
        n_first = len(compared)
        assert n_first and all(r["status"] == "ok" for r in first.values() if r["status"] != "skipped")
        again = one_process()
        assert len(compared) == n_first  # every output the same bytes as the first process's: no comparison
        assert {v: r["status"] for v, r in again.items()} == {v: r["status"] for v, r in first.items()}
        _break_one_element(monkeypatch, "sync_points", "torch", "on_device", 1.0, check_path == "device digest")
        broken = one_process()
        assert compared[n_first:] == ["on_device"] and broken["on_device"]["status"] == "wrong"
    finally:
        point_cache.stop(root)


def test_variants_judged_alike_compare_the_same_bytes_once_and_a_hazard_or_another_tolerance_on_its_own(
        monkeypatch, check_path):
    """donation's new_buffer and in_place write the same bytes and are judged alike (the scenario's tolerance,
    not a hazard): the second is not compared again, in this process or in a second one. The hazard keeps no
    error, and a variant of its own tolerance passes bytes another would not: each is judged on its own. A
    planted wrong element in one variant is still compared, and caught."""
    from dataclasses import replace

    from harness.check.equivalence import relative_error
    from harness.measure import timing
    from harness.workers import handlers, point_cache
    from scenarios import get
    from scenarios.spec import Tolerance
    from tests.conftest import backend_or_skip
    from tests.test_planted_bugs import _break_one_element

    backend_or_skip("torch")
    monkeypatch.setattr(point_cache, "DIGEST_MIN_BYTES", 0)  # smoke outputs are small: shortcut them too
    compared: list[str] = []
    seen: dict[str, tuple] = {}
    real = outputs.compare_outputs
    monkeypatch.setattr(outputs, "compare_outputs", lambda scn, params, got, want, variant, **kw: (
        compared.append(variant), seen.setdefault(variant, (got, want))) and real(scn, params, got, want,
                                                                                  variant=variant, **kw))
    scn = get("donation")
    params = scn.params_for_size("smoke") | {"seed": 5}
    cfg = timing.TimingConfig(warmup=1, min_repeats=4, max_repeats=4, min_time_s=0.0)
    alike = {v.name: outputs.judged_alike(v) for v in scn.variants}
    assert alike["new_buffer"] == alike["in_place"] != alike["read_after_update"]
    assert outputs.judged_alike(replace(scn.variants[1], tolerance=Tolerance({"float32": (1e-2, 1e-3)}))) not in (
        alike.values())

    def one_process():
        return {r["variant"]: r for r in handlers.time_scenario("torch", "donation", params, cfg,
                                                                progress=lambda _t: None)}

    root = point_cache.start()
    try:
        first = one_process()
        assert all(r["status"] == "ok" for r in first.values()) and first["read_after_update"]["check"]["wrong"] > 0
        assert compared[:1] == ["new_buffer"] and "in_place" not in compared and "read_after_update" in compared
        # the error the comparison's own pass found: relative_error's, to the bit (float32 rounding: not 0)
        err = first["new_buffer"]["check"]["max_rel_err"]
        assert err == relative_error(*seen["new_buffer"]) > 0 and first["in_place"]["check"]["max_rel_err"] == err
        n_first = len(compared)
        again = one_process()
        assert len(compared) == n_first and {v: r["status"] for v, r in again.items()} == (
            {v: r["status"] for v, r in first.items()})
        _break_one_element(monkeypatch, "donation", "torch", "in_place", 1.0, check_path == "device digest")
        broken = one_process()
        assert compared[n_first:] == ["in_place"] and broken["in_place"]["status"] == "wrong"
        assert broken["new_buffer"]["status"] == "ok"
    finally:
        point_cache.stop(root)


def test_with_a_device_digest_a_process_copies_to_the_host_only_outputs_it_has_not_judged(monkeypatch):
    """The first process copies each variant's first checked outputs once (none for the repeats after it,
    whose digests match); a second process of the run copies none: the digests recall the verdicts."""
    from harness import backends
    from harness.backends import base
    from harness.measure import timing
    from harness.workers import handlers, point_cache
    from scenarios import get
    from tests.conftest import backend_or_skip

    backend_or_skip("torch")
    monkeypatch.setattr(base, "DIGEST_MIN_BYTES", 0)
    monkeypatch.setattr(base, "DIGEST_ON_CPU", True)
    b = backends.get("torch").load()
    copies: list[int] = []
    real = b.to_numpy
    # sync_points' outputs are dicts of two tensors: a copy of the outputs is one call with the dict
    monkeypatch.setattr(b, "to_numpy", lambda x: (isinstance(x, dict) and copies.append(1)) or real(x))
    params = get("sync_points").params_for_size("smoke") | {"seed": 3}
    cfg = timing.TimingConfig(warmup=1, min_repeats=5, max_repeats=5, min_time_s=0.0)
    root = point_cache.start()
    try:
        def one_process():
            copies.clear()
            out = handlers.time_point("torch", "sync_points", params, cfg, False, progress=lambda _t: None)
            return [r for r in out["rows"] if r["status"] != "skipped"]

        timed = one_process()
        assert timed and all(r["status"] == "ok" and r["check"]["checked"] == 2 for r in timed)
        assert len(copies) == len(timed)  # the first check of each variant; the last matched its digest
        again = one_process()
        assert [r["status"] for r in again] == ["ok"] * len(timed) and copies == []
    finally:
        point_cache.stop(root)


def test_the_hierarchical_bootstrap_draws_the_median_of_the_chosen_processes_medians(monkeypatch):
    """Its draws have the distribution of the plain two-level loop (draw processes, draw each one's repeats,
    take each one's median, then their median), uneven repeat counts included, also when a process's draws
    are made in several slices."""
    from harness.measure import noise

    procs = [np.array(x) for x in ([1.0, 2.0, 3.0], [10.0, 20.0], [4.0], [5.0, 6.0, 7.0, 8.0], [30.0], [0.5, 40.0])]
    rng = np.random.default_rng(7)
    loop = []
    for _ in range(20_000):
        chosen = [procs[i] for i in rng.integers(0, len(procs), len(procs))]
        loop.append(np.median([np.median(p[rng.integers(0, p.size, p.size)]) for p in chosen]))
    loop = np.array(loop)
    monkeypatch.setattr(noise, "DRAW_MAX", 7)  # a slice of two draws at a time
    fast = noise.hierarchical_medians(procs, 40_000, seed=1)
    assert fast.shape == (40_000,) and np.isfinite(fast).all()
    for v in (2.0, 3.5, 4.0, 5.5, 6.5, 9.0, 15.0):  # discrete values: a median off by one slot moves these
        assert (fast <= v).mean() == pytest.approx((loop <= v).mean(), abs=0.015), v


def test_a_bit_exact_check_that_passes_is_one_comparison_and_one_that_fails_is_still_caught(monkeypatch):
    """pinned_transfer compares bit for bit: outputs that pass equal the reference, so their relative error
    is 0 without a second pass over them, and no digest is taken (one comparison costs less); a planted
    wrong element is still compared, caught, and given its real error."""
    from harness.measure import timing
    from harness.workers import handlers, point_cache
    from scenarios import get
    from tests.conftest import backend_or_skip
    from tests.test_planted_bugs import _break_one_element

    backend_or_skip("torch")
    monkeypatch.setattr(point_cache, "DIGEST_MIN_BYTES", 0)
    passes: list[str] = []
    real_err, real_digest = outputs.relative_error, point_cache.digest
    monkeypatch.setattr(outputs, "relative_error", lambda got, want: passes.append("error") or real_err(got, want))
    monkeypatch.setattr(point_cache, "digest", lambda got: passes.append("digest") or real_digest(got))
    scn = get("pinned_transfer")
    cfg = timing.TimingConfig(warmup=1, min_repeats=3, max_repeats=3, min_time_s=0.0)
    root = point_cache.start()
    try:
        def rows():
            out = handlers.time_point("torch", "pinned_transfer", scn.points("smoke")[0] | {"seed": 1}, cfg, True,
                                      progress=lambda _t: None)
            return {r["variant"]: r for r in out["rows"] if r["status"] != "skipped"}

        right = rows()
        assert passes == [] and right and all(r["status"] == "ok" and r["check"]["max_rel_err"] in (0.0, None)
                                              for r in right.values()), right
        victim = next(v for v, r in right.items() if not r["hazard"])
        _break_one_element(monkeypatch, "pinned_transfer", "torch", victim, 1.0)
        broken = rows()[victim]
        assert broken["status"] == "wrong" and broken["check"]["max_rel_err"] > 0 and "error" in passes
    finally:
        point_cache.stop(root)


def test_a_variant_whose_calls_are_fresh_processes_gets_no_warm_up_and_no_census(monkeypatch):
    """cold_start and memory_pools' child variants start a process a call (seconds each): a warm-up call
    warms nothing and the sync census would count the wait for the child, so neither is made. The same
    variant as an in-process one gets both."""
    import dataclasses
    import importlib

    from harness.measure import timing
    from harness.workers import handlers
    from scenarios import _cache, get
    from tests.conftest import backend_or_skip

    backend_or_skip("torch")
    impl = importlib.import_module("impls.sync_points.torch_impl")
    original, calls = impl.run_on_device, []
    monkeypatch.setattr(impl, "run_on_device", lambda state: calls.append(1) or original(state))
    cfg = timing.TimingConfig(warmup=2, min_repeats=3, max_repeats=3, min_time_s=0.0, warmup_s=0.05)
    scn = get("sync_points")
    params = scn.params_for_size("smoke") | {"seed": 3}
    counted = {}
    for fresh in (False, True):
        variants = tuple(dataclasses.replace(v, fresh_process=fresh) for v in scn.variants)
        monkeypatch.setitem(_cache, "sync_points", dataclasses.replace(scn, variants=variants))
        calls.clear()
        rows = {r["variant"]: r for r in handlers.time_point("torch", "sync_points", params, cfg, True,
                                                             progress=lambda _t: None)["rows"]}
        counted[fresh] = (len(calls), "host_syncs" in rows["on_device"])
    assert counted[True] == (1 + 3, False)  # the first call and the repeats
    assert counted[False][0] >= 1 + 2 + 3 + 1 and counted[False][1]  # warm-up calls and the census too


def test_a_verdict_against_a_framework_own_baseline_is_never_shared(monkeypatch):
    """Where a point has no reference, later variants are judged against the process's own baseline
    outputs, which may differ between processes: their verdicts stay in the process. Here the second
    process's baseline is one element off and its on_device outputs are the first process's bytes: they
    are compared again (and differ from that baseline), not given the first process's verdict."""
    import dataclasses

    from harness.backends import base
    from harness.measure import timing
    from harness.workers import handlers, point_cache
    from scenarios import _cache, get
    from tests.conftest import backend_or_skip
    from tests.test_planted_bugs import _break_one_element

    backend_or_skip("torch")
    monkeypatch.setattr(base, "DIGEST_MIN_BYTES", 0)
    monkeypatch.setattr(base, "DIGEST_ON_CPU", True)
    monkeypatch.setattr(point_cache, "DIGEST_MIN_BYTES", 0)
    monkeypatch.setitem(_cache, "sync_points", dataclasses.replace(get("sync_points"), cheap_reference=lambda p: False))
    params = get("sync_points").params_for_size("smoke") | {"seed": 3}
    cfg = timing.TimingConfig(warmup=1, min_repeats=3, max_repeats=3, min_time_s=0.0)
    root = point_cache.start()
    try:
        def one_process():
            return {r["variant"]: r for r in handlers.time_scenario("torch", "sync_points", params, cfg,
                                                                    progress=lambda _t: None)}

        first = one_process()
        assert first["on_device"]["check"]["against"] == "baseline" and first["on_device"]["status"] == "ok"
        _break_one_element(monkeypatch, "sync_points", "torch", "item_each_step", 1.0, on_device=True)
        second = one_process()
        assert second["on_device"]["status"] == "wrong", second["on_device"]["check"]
    finally:
        point_cache.stop(root)


def test_a_first_check_recomputes_output_metrics_that_a_remembered_verdict_lacks(monkeypatch):
    """A verdict remembered by a later repeat's check carries no output metrics; a process whose first
    outputs are those bytes still reports them (matmul_precision's errors against float64)."""
    import glob
    import json

    from harness.backends import base
    from harness.measure import timing
    from harness.workers import handlers, point_cache
    from scenarios import get
    from tests.conftest import backend_or_skip

    backend_or_skip("torch")
    monkeypatch.setattr(base, "DIGEST_MIN_BYTES", 0)
    monkeypatch.setattr(base, "DIGEST_ON_CPU", True)
    params = get("matmul_precision").params_for_size("smoke") | {"seed": 2}
    cfg = timing.TimingConfig(warmup=0, min_repeats=2, max_repeats=2, min_time_s=0.0)
    root = point_cache.start()
    try:
        def metrics():
            out = handlers.time_point("torch", "matmul_precision", params, cfg, False, progress=lambda _t: None)
            return {r["variant"]: r["timing"]["metrics"] for r in out["rows"] if r["status"] == "ok"}

        before = metrics()
        assert before and all("err_median" in m for m in before.values()), before
        stored = glob.glob(f"{root}/verdicts-*/*.json")
        assert stored
        for path in stored:  # as a later repeat's check would have left them
            with open(path) as f:
                known = json.load(f)
            known.pop("metrics", None)
            with open(path, "w") as f:
                json.dump(known, f)
        assert metrics() == before
    finally:
        point_cache.stop(root)


def test_a_variants_state_is_uploaded_before_its_first_call_is_timed(monkeypatch):
    """JAX has no device-wide synchronize, so the first timed call's own wait would not cover the state's
    uploads (as it does for torch and CuPy): the harness waits for the state itself after prepare."""
    from harness import backends
    from harness.measure import timing
    from harness.workers import handlers
    from scenarios import get
    from tests.conftest import backend_or_skip

    b = backend_or_skip("jax")
    order: list[str] = []
    prepared: list[object] = []
    real_load = handlers.load_impl

    def load(scenario, fw):
        impl = real_load(scenario, fw)

        class Spy:
            def __getattr__(self, name):
                return getattr(impl, name)

            @staticmethod
            def prepare(*a):
                prepared.append(impl.prepare(*a))
                order.append("prepare")
                return prepared[-1]

        return Spy()

    real_sync = type(b).synchronize

    def sync(self, outputs=None):
        order.append("state" if prepared and outputs is prepared[-1] else "other")
        return real_sync(self, outputs)

    def measured(*a, **kw):
        order.append("measure")
        return real_measure(*a, **kw)

    real_measure = timing.measure
    monkeypatch.setattr(handlers, "load_impl", load)
    monkeypatch.setattr(type(b), "synchronize", sync)
    monkeypatch.setattr(handlers, "measure", measured)
    scn = get("sync_points")
    params = scn.points("smoke")[0] | {"seed": 0}
    handlers.time_point("jax", "sync_points", params, timing.preset("smoke"), progress=lambda _t: None)
    first = order.index("prepare")
    assert order[first:first + 3] == ["prepare", "state", "measure"], order[:8]


def test_a_time_request_that_names_variants_times_those_and_the_baseline_where_they_are_checked_against_it(
        monkeypatch):
    """An interleaved run's later pairs ask for their unknown rows' variants only: the worker times those
    alone where the point has a reference, and the baseline as well where it has none (the others are
    checked against its outputs), so that a named variant is still checked."""
    from harness.measure import timing
    from harness.workers import handlers, point_cache
    from scenarios import get

    pytest.importorskip("torch")
    cfg = timing.TimingConfig(warmup=0, min_repeats=3, max_repeats=3, min_time_s=0.0)
    params = get("sync_points").params_for_size("smoke") | {"seed": 3}

    def variants(named):
        out = handlers.time_point("torch", "sync_points", params, cfg, False, progress=lambda _t: None, variants=named)
        return {r["variant"]: r for r in out["rows"]}

    assert set(variants(())) == {"item_each_step", "on_device"}
    got = variants(("on_device",))
    assert set(got) == {"on_device"} and got["on_device"]["check"]["against"] == "reference"
    made = point_cache.inputs_and_reference
    monkeypatch.setattr(point_cache, "inputs_and_reference", lambda scn, p: (made(scn, p)[0], None))
    got = variants(("on_device",))
    assert set(got) == {"item_each_step", "on_device"}
    assert got["on_device"]["check"]["against"] == "baseline" and got["on_device"]["check"]["checked"] >= 1


def test_a_worker_says_it_takes_named_variants_and_every_worker_kind_passes_them_on(monkeypatch):
    """The hello's "subsets" is what lets an interleaved run name variants at all; a process worker's
    request reaches the handler with them, and so does a rank's."""
    pytest.importorskip("torch")
    from harness.backends.dist import RankEnv
    from harness.measure import timing
    from harness.workers import handlers, rank_main
    from harness.workers.protocol import Request
    from harness.workers.worker import LocalWorker
    from scenarios import get

    assert handlers.hello("torch")["subsets"] is True
    cfg = timing.TimingConfig(warmup=0, min_repeats=3, max_repeats=3, min_time_s=0.0)
    params = get("sync_points").params_for_size("smoke")
    out = LocalWorker("torch").request("time", "sync_points", params, cfg, False, seed=3, variants=("on_device",))
    assert [r["variant"] for r in out["rows"]] == ["on_device"]
    seen = []
    monkeypatch.setattr(handlers, "time_point", lambda *a, **kw: seen.append(kw["variants"]))
    rank = rank_main.Rank("torch", RankEnv(rank=0, world_size=1, local_rank=0, addr="127.0.0.1", port=1))
    rank.answer(Request.make("time", "torch", "collectives", {"op": "broadcast"}, cfg, False, seed=1,
                             variants=("in_place",)), lambda _t: None)
    assert seen == [("in_place",)]


def test_outputs_with_the_baseline_device_digest_pass_without_a_host_copy_and_others_are_compared(monkeypatch):
    """Where a point has no reference, a variant whose outputs have the device digest of its process's
    baseline outputs holds the baseline's bytes: it passes with error 0, with no host copy and no
    comparison; a variant one element off is still copied, compared and counted wrong; and where the
    baseline holds a NaN (which fails a tolerance even against itself) every variant is compared."""
    import dataclasses

    from harness import backends
    from harness.backends import base
    from harness.measure import timing
    from harness.workers import handlers
    from scenarios import _cache, get
    from tests.conftest import backend_or_skip
    from tests.test_planted_bugs import _break_one_element

    backend_or_skip("torch")
    monkeypatch.setattr(base, "DIGEST_MIN_BYTES", 0)
    monkeypatch.setattr(base, "DIGEST_ON_CPU", True)
    scn = dataclasses.replace(get("pinned_transfer"), cheap_reference=lambda p: False)
    monkeypatch.setitem(_cache, "pinned_transfer", scn)
    b = backends.get("torch").load()
    copies: list[int] = []
    real = b.to_numpy
    # pinned_transfer's outputs are dicts of one tensor: a copy of the outputs is one call with the dict
    monkeypatch.setattr(b, "to_numpy", lambda x: (isinstance(x, dict) and copies.append(1)) or real(x))
    compared: list[str] = []
    real_compare = outputs.compare_outputs
    monkeypatch.setattr(outputs, "compare_outputs",
                        lambda scn, params, got, want, variant, **kw: compared.append(variant) or real_compare(
                            scn, params, got, want, variant=variant, **kw))
    cfg = timing.TimingConfig(warmup=1, min_repeats=3, max_repeats=3, min_time_s=0.0)

    def one_process():
        copies.clear(), compared.clear()
        out = handlers.time_point("torch", "pinned_transfer", scn.points("smoke")[0] | {"seed": 1}, cfg, False,
                                  progress=lambda _t: None)
        return {r["variant"]: r for r in out["rows"] if r["status"] != "skipped"}

    rows = one_process()
    later = [v for v in rows if v != scn.baseline.name]
    assert "h2d_pageable_non_blocking" in later, list(rows)
    assert all(rows[v]["status"] == "ok" and rows[v]["check"]["against"] == "baseline" for v in later)
    assert all(rows[v]["check"]["max_rel_err"] == 0.0 for v in later), {v: rows[v]["check"] for v in later}
    assert copies == [1] and compared == []  # the baseline's one copy: the later variants' want, the sample
    with pytest.MonkeyPatch.context() as broken:
        _break_one_element(broken, "pinned_transfer", "torch", "h2d_pageable_non_blocking", 1.0, on_device=True)
        rows = one_process()
    assert compared == ["h2d_pageable_non_blocking"] and rows["h2d_pageable_non_blocking"]["status"] == "wrong"
    # a baseline with a NaN: at a tolerance it fails even against itself, so no shortcut
    make = scn.make_inputs

    def with_nan(p):
        inputs = make(p)
        next(iter(inputs.values())).reshape(-1)[0] = np.nan
        return inputs

    scn = dataclasses.replace(scn, make_inputs=with_nan)
    monkeypatch.setitem(_cache, "pinned_transfer", scn)
    rows = one_process()
    assert sorted(compared) == sorted(later), (compared, later)


def test_two_processes_of_a_row_time_it_apart_so_their_figures_differ():
    """The process is the unit of a row's spread (Kalibera and Jones' plan, the regress's pairs, the row's
    interval): a cache of answers shared by forked workers, or one answer served to two processes, would make
    their figures one, and the spread between processes would read as none. A real run on the CPU: each
    process of a row has its own repeats, taken at its own time. (A worker reused for both requests would
    still pass here: that is the runner's own structure, one worker a process.)"""
    from harness.measure.noise import split
    from harness.run.progress import QuietUI
    from harness.run.runner import CompareOptions, run_compare

    doc = run_compare(CompareOptions(scenarios=["launch_overhead"], frameworks=["torch"], size="smoke", examples=1,
                                     seed=1, equivalence=False, processes=2), QuietUI())
    rows = [r for r in doc["scenarios"]["launch_overhead"]["rows"] if r["status"] == "ok"]
    assert rows
    for r in rows:
        t = r["timing"]
        procs = t["processes"]
        assert len(procs) == 2, r["variant"]
        first, second = split(t["samples"]["device_done"], [p["n"] for p in procs])
        assert list(first) != list(second), f"{r['variant']}: two processes gave the same repeats"
        assert procs[0]["host_loop_at"] != procs[1]["host_loop_at"], f"{r['variant']}: one host loop for two processes"
