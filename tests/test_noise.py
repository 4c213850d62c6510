"""Noise between processes: the statistics, pooling a row's processes, claims judged against the
noise, and regress's host-speed judgement and old files."""
from __future__ import annotations

import numpy as np
import pytest

from harness.check.judging import judge_with_noise
from harness.measure.noise import hierarchical_medians, median_rel_halfwidth, process_ratio_interval, ratio_interval, rel_halfwidth, split
from harness.regress.regress import regress
from harness.results.model import ProcessTiming
from harness.workers.processes import pool_timing
from harness.results.model import Stats
from scenarios.spec import Claim, Verdict
from tests.synthetic import doc, row, samples


def test_the_medians_uncertainty_shrinks_with_repeats():
    rng = np.random.default_rng(0)
    x = rng.lognormal(0, 0.1, 400)
    assert median_rel_halfwidth(x[:4]) == float("inf")
    assert median_rel_halfwidth(x[:400]) < median_rel_halfwidth(x[:25]) < 0.1


def test_split_needs_counts_that_add_up():
    assert [len(p) for p in split([1, 2, 3, 4, 5], [2, 3])] == [2, 3]
    with pytest.raises(ValueError):
        split([1, 2, 3], [2, 2])


def test_the_hierarchical_interval_counts_the_difference_between_processes():
    """Three tight processes, one 20% off: resampling the repeats alone sees a sure median (the odd
    process is a minority); resampling the processes first sees the 20%."""
    a, b, c = (np.array(samples(m, spread=0.005, n=30, seed=i)) for i, m in enumerate((1.0, 1.0, 1.2)))
    pooled_only = rel_halfwidth([np.concatenate([a, b, c])])
    between = rel_halfwidth([a, b, c])
    assert between > 0.05 > 0.02 > pooled_only
    meds = hierarchical_medians([a, c], resamples=1000)
    assert meds.min() == pytest.approx(np.median(a), rel=0.01) and meds.max() == pytest.approx(np.median(c), rel=0.01)


def _timing(times: list[float], stopped: str = "noise") -> dict:
    st = Stats.of(times).to_dict()
    return {"first_call_s": 0.1, "host_return": st, "device_done": st, "device_events": None, "metrics": {"k": 1.0},
            "checked_repeats": 2, "wrong_repeats": 0, "worst": "", "stopped": stopped, "noise": 0.01,
            "samples": {"host_return": list(times), "device_done": list(times)}}


def test_the_process_interval_is_students_t_on_log_process_medians():
    """Against scipy's two-sample t interval on the logs of each process's median; None without two
    processes on both sides; and regress's interval is the hull of it and the bootstrap."""
    from scipy.stats import ttest_ind

    rng = np.random.default_rng(3)
    base = [rng.lognormal(np.log(m), 0.01, 25) for m in (1.0, 1.08, 0.97)]
    cand = [rng.lognormal(np.log(m), 0.01, 25) for m in (1.2, 1.31)]
    lb, lc = (np.log([np.median(p) for p in x]) for x in (base, cand))
    want = np.exp(ttest_ind(lc, lb).confidence_interval(0.95))
    assert process_ratio_interval(base, cand) == pytest.approx(tuple(want), rel=1e-12)
    assert process_ratio_interval(base[:1], cand) is None and process_ratio_interval(base, cand[:1]) is None
    _, lo, hi = ratio_interval(base, cand)
    assert lo == pytest.approx(want[0]) and hi == pytest.approx(want[1])  # here the wider of the two


def test_a_rows_processes_pool_into_one_timing():
    a, b = samples(1e-3, n=10, seed=1), samples(1.1e-3, n=14, seed=2)
    t = pool_timing([ProcessTiming.from_dict(_timing(a)), ProcessTiming.from_dict(_timing(b, "time_cap"))]).to_dict()
    assert t["samples"]["device_done"] == a + b and t["device_done"]["n"] == 24
    assert t["device_done"]["median"] == pytest.approx((np.median(a) + np.median(b)) / 2)  # each process one vote
    assert t["device_done"]["q1"] == pytest.approx(float(np.percentile(a + b, 25)))  # the spread: every repeat
    assert [(p["n"], p["stopped"]) for p in t["processes"]] == [(10, "noise"), (14, "time_cap")]
    assert t["noise"]["device_done"] > 0.02  # the 10% between the processes shows
    assert t["checked_repeats"] == 4 and "stopped" not in t


def test_a_process_that_ran_more_repeats_gets_no_more_say_in_the_rows_figure():
    """A process stops on time spent, so a faster one runs more repeats: pooled, its repeats would decide
    the median. Each process's median counts once, in the figure and in its bootstrap alike."""
    fast, slow = samples(1.0e-3, spread=0.01, n=100, seed=3), samples(1.5e-3, spread=0.01, n=50, seed=4)
    t = pool_timing([ProcessTiming.from_dict(_timing(fast)), ProcessTiming.from_dict(_timing(slow))]).to_dict()
    assert np.median(fast + slow) < 1.05e-3  # what the pooled repeats would say
    assert t["device_done"]["median"] == pytest.approx(1.25e-3, rel=0.01)
    draws = hierarchical_medians([np.asarray(fast), np.asarray(slow)], resamples=400)
    assert 1.2e-3 < float(np.median(draws)) < 1.3e-3 and draws.min() >= 0.98e-3 and draws.max() <= 1.52e-3


def _faster_claim(rows, fw, params) -> Verdict:
    a, b = rows["async"]["timing"]["device_done"]["median"], rows["sync_each"]["timing"]["device_done"]["median"]
    return Verdict("faster", fw, "confirmed" if a < b else "refuted", f"{a:.3g} vs {b:.3g}", {})


CLAIM = Claim("faster", "async is faster", _faster_claim)


def _rows(med_a: float, med_b: float, spread: float) -> dict:
    return {v: row("torch", v, samples(m, spread=spread, n=20, seed=i)) for i, (v, m) in
            enumerate((("async", med_a), ("sync_each", med_b)))}


def test_a_claim_inside_the_noise_is_inconclusive_and_one_outside_stands():
    clear = judge_with_noise(CLAIM, _rows(1e-3, 2e-3, 0.05), "torch", {})
    assert clear["verdict"] == "confirmed" and clear["holds_in"] >= 0.95
    inside = judge_with_noise(CLAIM, _rows(1e-3, 1.005e-3, 0.2), "torch", {})
    assert inside["verdict"] == "inconclusive" and "inside the run's noise" in inside["evidence"]
    flipped = judge_with_noise(CLAIM, _rows(1.005e-3, 1e-3, 0.2), "torch", {})
    assert flipped["verdict"] == "inconclusive"  # "refuted" from noise is no verdict either


def test_a_missing_variant_is_inconclusive():
    rows = _rows(1e-3, 2e-3, 0.05)
    del rows["sync_each"]
    assert judge_with_noise(CLAIM, rows, "torch", {})["verdict"] == "inconclusive"


def _calibrated(rows, tiny_op_s: float, gpu: str | None = None) -> dict:
    d = doc(rows, gpu=gpu)
    d["environment"]["machine"]["calibration"] = {
        "torch": [{"tiny_op_s": tiny_op_s, "python_loop_s": 0.03 * tiny_op_s / 6e-6},
                  {"tiny_op_s": tiny_op_s * 1.01, "python_loop_s": 0.0301 * tiny_op_s / 6e-6}]}
    return d


def test_a_slower_host_is_said_and_host_bound_rows_it_can_explain_are_unknown():
    """The candidate's host is 50% slower (a tiny op 9 µs against 6 µs) and so are its rows, which on a
    run without a GPU are all host-bound: the header says so, and nothing is a regression; the host can
    move such a row up to 1.5^ELASTICITY_MAX (1.84x), so a row 2.5x slower still is one, and a row slower
    on a faster host is one too."""
    base = _calibrated([row("torch", "async", samples(1e-3, seed=1))], 6e-6)
    cand = _calibrated([row("torch", "async", samples(1.5e-3, seed=2))], 9e-6)
    res = regress(base, cand)
    assert res.host is not None and res.host.differs and res.host.factor == pytest.approx(1.5, rel=0.01)
    assert any("50% slower" in n for n in res.notes)
    r = res.rows[0]
    assert r.verdict == "unknown" and "host" in r.why and "50% slower by the two runs' calibrations" in r.host, r
    import io

    from rich.console import Console

    from harness.regress.view import render

    said = io.StringIO()
    render(res, base, cand, Console(file=said, width=200))
    assert "an interleaved run of the two trees or interpreters (--baseline-tree" in said.getvalue()  # what can decide it
    got = {x: regress(base, _calibrated([row("torch", "async", samples(x * 1e-3, seed=2))], 9e-6)).rows[0].verdict
           for x in (1.9, 2.5)}
    assert got == {1.9: "unknown", 2.5: "regression"}, got  # 1.9x: beyond the host in step, within 1.84x
    faster = regress(base, _calibrated([row("torch", "async", samples(1.3e-3, seed=2))], 4e-6))
    assert faster.host.factor < 1 and faster.rows[0].verdict == "regression" and not faster.rows[0].host
    same = regress(base, _calibrated([row("torch", "async", samples(1.5e-3, seed=2))], 6.1e-6))
    assert not same.host.differs and same.rows[0].verdict == "regression"  # the same host: slower code


def test_device_bound_rows_are_not_excused_by_a_slower_host():
    def gpu_row(done: float, seed: int) -> dict:
        r = row("torch", "async", samples(done, seed=seed))
        r["timing"]["device_events"] = dict(r["timing"]["device_done"])  # the device busy all along
        return r

    res = regress(_calibrated([gpu_row(1e-3, 1)], 6e-6, gpu="H200"), _calibrated([gpu_row(1.5e-3, 2)], 9e-6, gpu="H200"))
    assert res.host.differs and res.rows[0].verdict == "regression" and "host" not in res.rows[0].why


def test_files_written_before_processes_still_compare_with_a_note():
    base = doc([row("torch", "async", samples(1e-3, seed=1), processes=0)])
    cand = doc([row("torch", "async", samples(1e-3, seed=2))])
    res = regress(base, cand)
    assert res.rows[0].method == "repeats" and res.rows[0].verdict == "unchanged"
    assert any("the baseline keeps one process's repeats" in n for n in res.notes)
    assert not any("candidate keeps" in n for n in res.notes)


def test_a_different_cpu_or_huge_pages_mode_is_named_in_the_header():
    base = doc([row("torch", "async", samples(1e-3, seed=1))])
    cand = doc([row("torch", "async", samples(1e-3, seed=2))])
    base["environment"]["host"] |= {"cpu_model": "Xeon A", "transparent_hugepages": "madvise"}
    cand["environment"]["host"] |= {"cpu_model": "Xeon B", "transparent_hugepages": "madvise"}
    notes = regress(base, cand).notes
    assert "CPU Xeon A → Xeon B (compared anyway)" in notes
    assert not any("huge pages" in n for n in notes)


def test_the_machine_is_described():
    from harness.measure.machine import host_env

    env = host_env()
    assert env["cpus"] >= 1 and env["kernel"] and env["cpu_model"]
    assert env["transparent_hugepages"] in (None, "always", "madvise", "never")


def test_a_communication_claim_is_undecided_at_one_rank_and_judged_at_two():
    talk = Claim("faster", "async is faster", _faster_claim, communicates=True)
    one = {v: r | {"ranks": 1} for v, r in _rows(1e-3, 2e-3, 0.05).items()}
    got = judge_with_noise(talk, one, "torch", {})
    assert got["verdict"] == "inconclusive" and got["evidence"] == "one rank, nothing communicated"
    assert judge_with_noise(CLAIM, one, "torch", {})["verdict"] == "confirmed"  # a claim about one process stands
    two = {v: r | {"ranks": 2} for v, r in _rows(1e-3, 2e-3, 0.05).items()}
    assert judge_with_noise(talk, two, "torch", {})["verdict"] == "confirmed"
    assert judge_with_noise(talk, _rows(1e-3, 2e-3, 0.05), "torch", {"world_size": 1})["verdict"] == "inconclusive"


def test_every_claim_about_moving_data_between_ranks_says_so():
    from scenarios import all_scenarios, get
    talking = {(s.name, c.id) for s in all_scenarios() for c in s.claims if c.communicates}
    assert {("data_parallel", "overlap_hides_comm"), ("data_parallel", "no_sync_one_over_a"),
            ("data_parallel", "bytes_2n1n"), ("zero", "comm_model"), ("zero", "memory_model"),
            ("tensor_parallel", "megatron_f_g"), ("point_to_point", "read_before_wait"),
            ("ranks", "forgotten_sharding"), ("collectives", "exact")} <= talking
    assert all(get(s).ranks for s, _ in talking)


def _collective_row(variant: str, status: str, wrong: int) -> dict:
    return {"scenario": "collectives", "framework": "torch", "variant": variant, "status": status, "ranks": 2,
            "check": {"checked": 3, "wrong": wrong, "worst": "", "max_rel_err": 0.0, "against": "reference"}}


def _judge_claims(scn, params, rows):
    """judge_claims on rows given as plain data, its verdicts as the result writes them."""
    from harness.check.judging import judge_claims
    from harness.results.model import Row

    return [c.to_dict() for c in judge_claims(scn, params, [Row.from_dict(r) for r in rows])]


def test_a_claim_about_the_checks_sees_the_wrong_rows_and_a_timing_claim_is_not_judged_without_them():
    from scenarios import get

    p = {"op": "all_reduce", "bytes": 4096, "dtype": "float32", "world_size": 2}
    rows = [_collective_row("out_of_place", "wrong", 3), _collective_row("in_place", "ok", 0)]
    (exact,) = _judge_claims(get("collectives"), p, rows)
    assert exact["verdict"] == "refuted" and "out_of_place 3 of 3" in exact["evidence"], exact
    rows[0]["status"] = "crashed"  # no outputs checked there: "out of place and in place" cannot be confirmed
    (exact,) = _judge_claims(get("collectives"), p, rows)
    assert exact["verdict"] == "inconclusive" and "out_of_place (crashed)" in exact["evidence"], exact
    rows = [_collective_row("out_of_place", "wrong", 3), _collective_row("in_place", "crashed", 0)]
    (exact,) = _judge_claims(get("collectives"), p, rows)  # wrong runs refute whatever else failed
    assert exact["verdict"] == "refuted", exact
    rows = [_collective_row("out_of_place", "wrong", 3), _collective_row("in_place", "ok", 0)]
    rows = [dict(r, scenario="donation", variant=v) for r, v in zip(rows, ("new_buffer", "in_place"))]
    same = next(c for c in _judge_claims(get("donation"), {}, rows) if c["claim"] == "same_time")
    assert same["verdict"] == "inconclusive" and "not judged without new_buffer (wrong)" in same["evidence"], same


def test_a_gpu_claim_whose_variant_cannot_run_on_a_cpu_is_not_decidable_there():
    gpu = Claim("faster", "async is faster", _faster_claim, gpu_only=True)
    rows = _rows(1e-3, 2e-3, 0.05)
    rows.pop(next(iter(rows)))
    got = judge_with_noise(gpu, rows, "torch", {}, on_cpu=True)
    assert got["verdict"] == "inconclusive" and got.get("not_decidable") == "cpu", got


def test_a_rank_hazard_with_no_checked_run_is_not_refuted():
    from scenarios._ranks import hazard_caught

    judge = hazard_caught("read_before_wait", "read_before_wait")
    row = {"ranks": 2, "check": {"wrong": 0, "checked": 0}}
    assert judge({"read_before_wait": row}, "torch", {}).verdict == "inconclusive"
    assert judge({"read_before_wait": row | {"check": {"wrong": 0, "checked": 3}}}, "torch", {}).verdict == "refuted"


def test_claims_are_not_judged_on_what_is_left_when_a_variant_failed():
    """pinned_transfer's link claim takes the best path among the variants: with the pinned path failed,
    the best of the rest would read as the framework missing the link's rate."""
    from scenarios import get

    floor = 1e-3
    p = {"n": (64 << 20) // 4, "dtype": "float32", "label": "64 MiB"}

    def row(variant, status, done):
        return {"scenario": "pinned_transfer", "framework": "torch", "variant": variant, "status": status,
                "floor_s": floor, "pct_of_floor": 100 * floor / done,
                "timing": {"device_done": {"median": done, "iqr": 0.0}, "host_return": {"median": done},
                           "metrics": {"link_bytes": 1}}, "check": {"wrong": 0, "checked": 1}}

    rows = [row("h2d_pageable", "ok", floor / 0.3), row("h2d_pageable_non_blocking", "ok", floor / 0.31),
            row("h2d_pinned_non_blocking", "error", floor / 0.97)]
    got = {c["claim"]: c for c in _judge_claims(get("pinned_transfer"), p, rows)}
    assert got["h2d_at_link"]["verdict"] == "inconclusive", got["h2d_at_link"]
    assert "h2d_pinned_non_blocking (error)" in got["h2d_at_link"]["evidence"]
