"""--cpus: which CPUs a run keeps (harness/workers/cpus.py), and what the result says about it."""
from __future__ import annotations

import os

import pytest

from harness.workers import cpus

pins = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="this platform cannot pin processes to CPUs")


def test_choose_keeps_the_fast_cpus_and_names_the_slow_ones():
    times = {c: [0.006, 0.0062, 0.0061] for c in range(6)} | {c: [0.012, 0.0125, 0.011] for c in range(6, 10)}
    keep, why = cpus.choose(times)
    assert keep == list(range(6)), keep
    assert "6-9" in why and "kept 0-5" in why, why


def test_choose_keeps_all_when_no_cpu_is_clearly_slower():
    times = {c: [0.006 * (1 + 0.02 * c)] * 3 for c in range(8)}
    assert cpus.choose(times) == (list(range(8)), "no CPU slower than the fastest by 25% in every round: all kept")


def test_choose_never_keeps_fewer_than_min_keep():
    times = {0: [0.005] * 3} | {c: [0.010 + 0.001 * c] * 3 for c in range(1, 8)}
    keep, _ = cpus.choose(times)
    assert keep == [0, 1, 2, 3], keep  # the fastest CPU and the next three fastest


def test_a_cpu_slow_in_some_rounds_only_is_kept():
    # the H200 VM's CPUs: each fast or slow by turns, independently (docs/design/host_speed.md)
    times = {c: [0.0065, 0.0115, 0.0065] if c % 2 else [0.0115, 0.0065, 0.0115] for c in range(8)}
    times[8] = [0.0115, 0.0118, 0.0112]  # slow in every round: dropped
    keep, why = cpus.choose(times)
    assert keep == list(range(8)) and "CPUs 8 ran" in why, (keep, why)


@pytest.mark.parametrize("spec,want", [("auto", "auto"), ("all", "all"), (" all ", "all")])
def test_parse_words(spec, want):
    assert cpus.parse(spec) == want


@pins
def test_parse_ranges_of_allowed_cpus():
    may = cpus.allowed()
    assert cpus.parse(cpus._ranges(may)) == may
    assert cpus._ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    with pytest.raises(cpus.CpuSpecError, match="may use CPUs"):
        cpus.parse(str(max(may) + 1))
    with pytest.raises(cpus.CpuSpecError, match="use auto, all"):
        cpus.parse("1-")
    with pytest.raises(cpus.CpuSpecError, match="may use CPUs"):  # refused at once, not expanded first
        cpus.parse("0-300000000000")


@pins
def test_place_pins_this_process_and_records_why():
    before = os.sched_getaffinity(0)
    first = min(before)
    try:
        placed = cpus.place([first])
        assert os.sched_getaffinity(0) == {first}
        assert placed["mode"] == "list" and placed["kept"] == str(first) and placed["why"] == "named by --cpus"
    finally:
        os.sched_setaffinity(0, before)


def test_steal_share_counts_steal_against_busy_time():
    a = {"user": 100, "nice": 0, "system": 50, "idle": 1000, "iowait": 10, "irq": 0, "softirq": 0, "steal": 0}
    b = a | {"user": 160, "system": 70, "idle": 1500, "steal": 20}
    assert cpus.steal_share(a, b) == pytest.approx(20 / 100)
    assert cpus.steal_share(None, b) is None
    assert cpus.steal_share(b, a) is None  # counters that went back
    assert cpus.cpu_times() is None or set(cpus.cpu_times()) == set(a)


@pins
def test_sweep_rounds_are_spread_in_time(monkeypatch):
    # a slow spell of the H200 VM lasts up to a few hundred ms: rounds back to back would all fall in one
    slept = []
    monkeypatch.setattr(cpus.time, "sleep", slept.append)
    monkeypatch.setattr(cpus, "python_loop_s", lambda repeats: 0.006)
    got = cpus.sweep(cpus.allowed()[:2], rounds=3, gap_s=0.5)
    assert slept == [0.5, 0.5] and all(v == [0.006] * 3 for v in got.values())


def test_auto_on_a_machine_with_one_slow_cpu_pins_the_run_to_the_others(monkeypatch):
    may = list(range(8))
    monkeypatch.setattr(cpus, "allowed", lambda: may)
    monkeypatch.setattr(cpus, "sweep", lambda c: {x: [0.012 if x == 5 else 0.006] * 6 for x in c})
    pinned = []
    monkeypatch.setattr(cpus.os, "sched_setaffinity", lambda pid, s: pinned.append(sorted(s)))
    placed = cpus.place("auto")
    assert pinned == [[0, 1, 2, 3, 4, 6, 7]] and placed["kept"] == "0-4,6-7" and "CPUs 5 ran" in placed["why"]
    assert placed["sweep_loop_s"]["5"] == [0.012] * 6


@pins
def test_a_run_pinned_to_one_cpu_records_it_and_gives_the_cpus_back(tmp_path):
    from harness.run.options import CompareOptions
    from harness.run.runner import run_compare
    from harness.run.progress import QuietUI

    before = os.sched_getaffinity(0)
    first = min(before)
    opts = CompareOptions(scenarios=["sync_points"], frameworks=["torch"], size="smoke", examples=1, seed=3,
                          equivalence=False, cpus=str(first))
    assert opts.cpus == [first]
    doc = run_compare(opts, QuietUI())
    placed = doc["environment"]["cpus"]
    assert placed["mode"] == "list" and placed["kept"] == str(first), placed
    assert os.sched_getaffinity(0) == before
    assert doc["scenarios"]["sync_points"]["rows"][0]["status"] == "ok"


def test_compare_options_refuse_a_bad_cpu_spec():
    from harness.run.options import CompareOptions

    with pytest.raises(ValueError, match="use auto, all"):
        CompareOptions(scenarios=["sync_points"], frameworks=["torch"], size="smoke", examples=1, seed=3, cpus="fast")
