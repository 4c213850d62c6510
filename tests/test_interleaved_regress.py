"""Interleaved regress (harness/run/interleave.py, harness/regress/regress.py judge_pairs) and the host-aware verdict
of file regress: the schedule cancels a host that drifts, the test is paired, false discoveries are
controlled across rows, a host speed change is never a regression; end to end on real processes."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
import pytest

from harness.run import interleave
from harness.run.interleave import Plan, Schedule, Side
from harness.regress.regress import Paired, judge_pairs, regress
from harness.results.model import Stats
from tests.conftest import backend_or_skip
from tests.synthetic import doc, load, row, samples

ROOT = Path(__file__).resolve().parent.parent


# -- the schedule, on fake workers whose host drifts -----------------------------------------------


class Host:
    """A host whose speed drifts by `step` (a factor) at every timing request, whichever side makes it."""

    def __init__(self, step: float, slow: dict[tuple[str, str], float] | None = None) -> None:
        self.step, self.t, self.slow = step, 0, slow or {}
        self.log: list[str] = []


class FakeWorker:
    spread = 0.0  # a subclass's noise between processes (_process_factor), seeded by the host's request count
    subsets = True  # False: an older tree's worker, which times every variant whatever the request names
    keeps_baseline = False  # True: a point without a reference, where a worker times the baseline too

    def __init__(self, fw: str, side: Side, host: Host) -> None:
        self.fw, self.side, self.host = fw, side, host
        self.asked: list[tuple[str, int, tuple[str, ...]]] = []  # (scenario, request count, variants named)

    def request(self, op, *args, seed=None, variants=(), timeout=None, progress=None, turn=None, cpu=None):
        if op == "hello":
            return {"available": True, "why": "fake", "env": {"version": "1.0"}, "on_gpu": False,
                    **({"subsets": True} if self.subsets else {})}
        assert op == "time"
        from scenarios import get

        scn = get(args[0])
        factor = self.host.step ** self.host.t
        self.host.t += 1
        self.host.log.append(self.side.name)
        self.asked.append((args[0], self.host.t, tuple(variants)))
        rng = np.random.default_rng(self.host.t)
        rows = []
        for v in scn.variants:
            if variants and self.subsets and v.name not in variants and not (self.keeps_baseline and v is scn.baseline):
                continue
            base = 1e-3 * self.host.slow.get((self.side.name, v.name), 1.0) * factor
            times = [float(x) for x in base * np.exp(rng.normal(0, 0.002, 20))]
            st = Stats.of(times).to_dict()
            rows.append({"scenario": scn.name, "framework": self.fw, "variant": v.name, "hazard": v.hazard,
                         "status": "ok", "wall_s": 0.1,
                         "check": {"against": "reference", "checked": 1, "wrong": 0, "worst": "", "max_rel_err": 0.0},
                         "timing": {"first_call_s": 0.1, "host_return": st, "device_done": dict(st),
                                    "device_events": None, "metrics": {}, "checked_repeats": 1, "wrong_repeats": 0,
                                    "worst": "", "samples": {"host_return": times, "device_done": times},
                                    "stopped": "noise", "noise": 0.01, "host_loop_s": 0.007 * factor}})
        out = {"rows": rows, "sample": None}
        return _process_factor(out, self.spread, self.host.t) if self.spread else out

    def close(self, grace=0.0):
        pass


def _sides() -> list[Side]:
    """Baseline and candidate: this tree and this interpreter on both sides (a side is mutated by a run)."""
    return [Side("baseline", str(ROOT), sys.executable), Side("candidate", str(ROOT), sys.executable)]


def _process_factor(out: dict, sd: float, seed: int) -> dict:
    """A time request's answer with every repeat of its rows times one factor, the process's own
    (lognormal, sd on the log scale): noise between processes, none added within one."""
    f = math.exp(np.random.default_rng(seed).normal(0, sd))
    for r in out["rows"]:
        r["timing"]["samples"]["device_done"] = [x * f for x in r["timing"]["samples"]["device_done"]]
    return out


class Undecided(FakeWorker):
    """Processes 30% apart: no row is decided within seven pairs."""

    def request(self, op, *args, **kw):
        out = super().request(op, *args, **kw)
        return _process_factor(out, 0.3, 300 + self.host.t) if op == "time" else out


def fake_run(step: float, order=interleave.pair_order, slow=None, pairs: int = 6, fws=("torch",)):
    host = Host(step, slow)
    sides = _sides()
    sched = Schedule(sides, list(fws), 60.0, world_size=2, make_worker=lambda fw, s, *_: FakeWorker(fw, s, host),
                     order=order)
    res = interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=pairs, max_pairs=pairs))
    return res, host


def test_pairs_run_in_a_b_b_a_order_and_pair_process_by_process():
    res, host = fake_run(1.0)
    assert host.log == ["baseline", "candidate", "candidate", "baseline"] * 3
    assert all(r.pairs == 6 for r in res.rows) and res.rows
    assert [len(p["processes"]) for p in (r["timing"] for r in res.docs[0]["scenarios"]["sync_points"]["rows"])] \
        == [6] * len(res.rows)
    assert all(r.verdict == "same" for r in res.rows)


def test_a_host_that_drifts_during_the_run_is_no_change_when_interleaved():
    # 12% slower at every process: A-B, B-A cancels it in the mean over pairs
    res, _ = fake_run(1.12)
    assert res.rows and not [r for r in res.rows if r.verdict == "different"], [(r.variant, r.ratio) for r in res.rows]


def test_the_drift_cancels_for_every_framework_of_a_pair():
    """Within a pair the second side runs the frameworks in the first side's reverse order, so each
    framework's A-to-B gap is mirrored in the next pair (B-A): no framework reads the drift as a change."""
    res, _ = fake_run(1.03, fws=("torch", "cupy", "jax"))
    assert {r.framework for r in res.rows} == {"torch", "cupy", "jax"}
    assert all(abs(r.ratio - 1) < 0.01 for r in res.rows), sorted({(r.framework, round(r.ratio, 3)) for r in res.rows})


class TwoSpeeds(FakeWorker):
    """A host at two speeds, 2x apart, drawn for each request (a process): every figure of the request and the loops
    timed beside its repeats (host_loops) follow it, each loop with 2% noise of its own."""

    def request(self, op, *args, **kw):
        out = super().request(op, *args, **kw)
        if op == "hello":
            return out | {"host_beside": "loop-a"}
        rng = np.random.default_rng(7000 + self.host.t)
        speed = 2.0 if rng.random() < 0.5 else 1.0
        for r in out["rows"]:
            t = r["timing"]
            t["samples"]["device_done"] = [x * speed for x in t["samples"]["device_done"]]
            if args[2].host_beside:  # asked for: --host-covariate, one loop on both sides
                t["host_loops"] = [6e-5 * speed * math.exp(rng.normal(0, 0.02)) for _ in t["samples"]["device_done"]]
        return out


def _two_speed_run(covariate: bool, pairs: int = 8) -> Any:
    host = Host(1.0, {("candidate", "item_each_step"): 1.15})
    sched = Schedule(_sides(), ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: TwoSpeeds(fw, s, host))
    res = interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=pairs, max_pairs=pairs,
                                     host_covariate=covariate))
    return {r.variant: r for r in res.rows}, res


def test_on_a_host_at_two_speeds_the_loops_beside_the_repeats_decide_what_the_plain_pairs_cannot():
    """A pair whose two processes met the host at different speeds reads 2x or 0.5x whatever the code did: the plain
    test leaves a 15% change unknown. Judged at equal host speeds (--host-covariate: the pairs' log ratios on the log
    ratios of their processes' median loops), the change is found, the unchanged row is not called different, and
    each says so."""
    plain, _ = _two_speed_run(False)
    assert plain["item_each_step"].verdict == "unknown" and plain["item_each_step"].theta is None
    adjusted, res = _two_speed_run(True)
    slow, same = adjusted["item_each_step"], adjusted["on_device"]
    assert slow.verdict == "different" and abs(slow.ratio - 1.15) < 0.02 and 0.9 < slow.theta < 1.1, slow
    assert same.verdict == "same" and abs(same.ratio - 1) < 0.05, same
    assert all(d["interleaved"]["host_covariate"] for d in res.docs)
    assert all(len(r["timing"]["host_loops"]) == len(r["timing"]["samples"]["device_done"])
               for d in res.docs for r in d["scenarios"]["sync_points"]["rows"])
    from harness.regress.view import paired_line

    assert "at equal host speeds (θ +" in paired_line(slow)


def test_a_process_loop_is_the_median_of_the_loops_beside_its_repeats():
    """One stall of the loop (an interrupt) does not move a process's covariate; a row without loops, or whose loops
    do not match its repeats, has none."""
    from harness.results.model import Row

    r = Row.from_dict(row("torch", "async", [1e-3] * 5, processes=2))  # 3 repeats, then 2
    assert interleave._process_loops(r) == []
    r.timing.host_loops = [6e-5, 9e-4, 6.2e-5, 1.1e-4, 1.2e-4]
    assert interleave._process_loops(r) == pytest.approx([6.2e-5, 1.15e-4])
    r.timing.host_loops = r.timing.host_loops[:4]
    assert interleave._process_loops(r) == []


def test_a_row_of_fewer_pairs_or_without_the_loop_is_judged_plain():
    """The covariate costs a degree of freedom, too many under COVARIATE_MIN_PAIRS pairs; a side whose processes
    did not time the loop (an older tree's worker) gives nothing to regress on."""
    from harness.regress.regress import COVARIATE_MIN_PAIRS

    few, _ = _two_speed_run(True, pairs=COVARIATE_MIN_PAIRS - 2)
    assert all(r.theta is None for r in few.values())
    r = Paired("s", "", "torch", "v", [1.0, 2.0, 1.0, 2.0, 1.0, 2.0], [2.3, 1.15, 1.15, 2.3, 2.3, 1.15],
               base_loop=[1.0] * 6, cand_loop=[])
    judge_pairs([r], 0.1, 0.95, covariate=True)
    assert r.theta is None and r.verdict == "unknown"
    # loops equal in every pair but for their own noise: no slope to fit, the plain test stands
    flat = Paired("s", "", "torch", "v", [1.0, 1.02, 0.99, 1.01, 1.0, 0.98], [1.2, 1.21, 1.19, 1.22, 1.2, 1.18],
                  base_loop=[6.0] * 6, cand_loop=[6.0, 6.01, 5.99, 6.0, 6.02, 5.98])
    judge_pairs([flat], 0.1, 0.95, covariate=True)
    assert flat.theta is None and flat.verdict == "different"


def test_judged_at_equal_host_speeds_null_rows_are_seldom_called_different():
    """Under no change, with pairs scrambled by a host at two speeds and a loop that tracks it, the covariate test
    keeps Benjamini-Hochberg's promise with no effect floor to hide behind: 4,000 unchanged rows of 6 pairs, none
    called different; its 95% intervals hold the truth in 94-96% of them (on n - 1 degrees of freedom, 93.5%)."""
    rng = np.random.default_rng(20261207)
    rows = []
    for i in range(4000):
        speed = np.where(rng.random((2, 6)) < 0.5, 2.0, 1.0)
        theta = rng.uniform(0, 1.5)  # device-paced to more than host-paced
        noise = np.exp(rng.normal(0, 0.05, (2, 6)))
        figures = 1e-3 * speed ** theta * noise
        loops = 0.006 * speed * np.exp(rng.normal(0, 0.02, (2, 6)))
        rows.append(Paired("s", str(i), "torch", "v", list(figures[0]), list(figures[1]),
                           base_loop=list(loops[0]), cand_loop=list(loops[1])))
    judge_pairs(rows, 0.0, 0.95, covariate=True)
    adjusted = [r for r in rows if r.theta is not None]  # the others' loops did not vary: judged plain
    assert len(adjusted) > 3900 and not [r for r in rows if r.verdict == "different"]
    covered = sum(r.lo <= 1 <= r.hi for r in adjusted) / len(adjusted)
    assert 0.94 <= covered <= 0.96, covered


def test_host_covariate_across_two_pythons_or_with_turns_call_is_refused_before_anything_starts(tmp_path):
    """The loop is timed by each side's interpreter: another Python moves the covariate with the change under test,
    and the intercept would take part of the change away. With --turns call it would run beside the other side's
    calls, outside the turns."""
    for extra, said in ((["--baseline-python", "/bin/sh"], "--host-covariate cannot be read with two Pythons"),
                        (["--turns", "call"], "--host-covariate cannot be read with --turns call"),
                        (["--candidate-env", 'TRIPTYCH_TIMING={"host_beside": true}'],
                         "--host-covariate cannot be read with --candidate-env TRIPTYCH_TIMING sets host_beside: the "
                         "loop is a setting of the side")):
        r = _regress("--baseline-tree", str(ROOT), "--host-covariate", *extra, "--scenarios", "launch_overhead",
                     "--out", str(tmp_path))
        assert r.returncode == 2 and said in r.stderr, r.stderr[-2000:]
        assert not list(tmp_path.iterdir())


def test_host_covariate_is_the_default_where_it_can_be_read_and_the_header_says_why_not_elsewhere():
    """On by default (an H100's planted and control runs found every plant it could and nothing else: docs/regress.md);
    not given, two Pythons or --turns call turn it off without refusing the run, and the header says why."""
    from harness.run.cmd_regress import _interleaved_options
    from harness.run.parser import build_parser
    from harness.regress.view import render_paired

    def options(*extra: str) -> tuple[Any, str]:
        a = build_parser().parse_args(["regress", "--baseline-tree", str(ROOT), *extra])
        return a, _interleaved_options(a, ["--baseline-tree"])

    host, sides = Host(1.0), _sides()
    sched = Schedule(sides, ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: FakeWorker(fw, s, host))
    res = interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=2))
    for extra, on, why in (((), True, ""), (("--no-host-covariate",), False, "--no-host-covariate"),
                           (("--baseline-python", "/bin/sh"), False, "two Pythons"),
                           (("--turns", "call"), False, "--turns call"),
                           (("--baseline-env", 'TRIPTYCH_TIMING={"host_beside": false}'), False,
                            "--baseline-env TRIPTYCH_TIMING sets host_beside")):
        a, plain_why = options(*extra)
        assert a.host_covariate is on and plain_why.startswith(why) and bool(plain_why) is not on, (extra, plain_why)
        said: list[str] = []
        render_paired(res, sides, Plan(["sync_points"], "smoke", 1, host_covariate=a.host_covariate,
                                       plain_why=plain_why), said.append)
        assert ("equal host speeds (--host-covariate)" in said[1]) is on, said[1]
        assert (f"every row plain, not at equal host speeds ({why}" in said[1]) is (not on), said[1]


def test_a_framework_that_starts_on_the_baseline_and_not_on_the_candidate_fails_the_run():
    from harness.regress.view import render_paired

    class Broken(FakeWorker):
        def request(self, op, *args, **kw):
            if op == "hello" and self.side.name == "candidate" and self.fw == "jax":
                return {"available": False, "why": "planted: jax failed to import", "env": {}, "on_gpu": False}
            return super().request(op, *args, **kw)

    host = Host(1.0)
    sides = _sides()
    sched = Schedule(sides, ["torch", "jax"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Broken(fw, s, host))
    plan = Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=2)
    res = interleave.run(sched, plan)
    said: list[str] = []
    assert res.lost and render_paired(res, sides, plan, said.append) == 1
    assert any("FAILED: jax" in line for line in said), said


def test_without_the_alternation_the_same_drift_reads_as_a_change():
    """What the interleaved test above guards against: A before B in every pair."""
    res, _ = fake_run(1.12, order=lambda k: (0, 1))
    assert any(r.verdict == "different" for r in res.rows)


def test_a_slowdown_planted_on_the_candidate_is_found_despite_the_drift():
    res, _ = fake_run(1.05, slow={("candidate", "on_device"): 1.15})
    got = {r.variant: r for r in res.rows}
    assert got["on_device"].verdict == "different" and got["on_device"].slower
    assert 1.12 < got["on_device"].ratio < 1.18
    assert all(r.verdict != "different" for v, r in got.items() if v != "on_device")


def test_unknown_rows_get_more_pairs_until_decided():
    host = Host(1.0)

    class Noisy(FakeWorker):
        def request(self, op, *args, **kw):
            out = super().request(op, *args, **kw)
            if op == "time":  # a process's own factor, 4%: two pairs cannot call it the same, more can
                _process_factor(out, 0.04, 100 + self.host.t)
            return out

    sides = _sides()
    sched = Schedule(sides, ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Noisy(fw, s, host))
    res = interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=20))
    assert all(r.verdict == "same" for r in res.rows) and 2 < res.pairs < 20 and not res.stopped
    res = interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=3))
    assert res.pairs == 3 and "--max-pairs 3" in res.stopped


def test_same_cpu_gives_every_pair_its_cpu_in_later_stages_and_added_pairs_too():
    """--same-cpu: the workers of the first pairs, of a later stage of them and of pairs added while rows are
    unknown are all started with their pair's CPU (interleave.pair_cpu), both sides the same one."""
    from harness.run.interleave import pair_cpu
    from harness.workers.cpus import allowed

    host, started = Host(1.0), []

    def make(fw, side, cpu=None):
        started.append((side.name, cpu))
        return Undecided(fw, side, host)

    sched = Schedule(_sides(), ["torch"], 60.0, world_size=2, make_worker=make)
    res = interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=4, max_pairs=7, same_cpu=True))
    assert res.pairs == 7 and len(started) == 14  # two stages of first pairs, then three added, a worker a side
    cpus = allowed()
    for k in range(7):  # pairs start in order, the two sides of a pair one after the other
        pair = started[2 * k:2 * k + 2]
        assert {name for name, _ in pair} == {"baseline", "candidate"}
        assert [cpu for _, cpu in pair] == [pair_cpu(k, "torch", ["torch"], cpus)] * 2, (k, started)


def test_each_side_records_its_timed_share_and_the_run_says_the_whole():
    """Issue 32 wants the timed share recorded: a side's timing phase is its own requests' round trips
    (the other side's interleave with them), against the seconds inside its timed repeats. And no process
    spends time on anything but timing."""
    import time as _time

    from harness.regress.view import render_paired

    host = Host(1.0)

    firsts: list[bool] = []

    class Timed(FakeWorker):
        def request(self, op, *args, **kw):
            out = super().request(op, *args, **kw)
            if op == "time":
                firsts.append(args[3])
                _time.sleep(0.02)
                for r in out["rows"]:
                    r["timing"] |= {"timed_s": 0.002, "phase_s": 0.01, "served_s": 0.02}
            return out

    sides = _sides()
    sched = Schedule(sides, ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Timed(fw, s, host))
    res = interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=2))
    for d in res.docs:
        ph = d["scenarios"]["sync_points"]["timing_phase"]
        n = len(d["scenarios"]["sync_points"]["rows"])
        assert ph["timed_s"] == pytest.approx(0.002 * 2 * n)  # two processes a side
        assert 0.04 <= ph["wall_s"] < 5 and ph["share"] == pytest.approx(ph["timed_s"] / ph["wall_s"])
        assert d["timing_phase"]["timed_s"] == pytest.approx(ph["timed_s"])
    # no process is a row's "first" (sync census, timeline, profile): every one only times
    assert firsts == [False] * 4
    said: list[str] = []
    render_paired(res, sides, Plan(["sync_points"], "smoke", 1), said.append)
    line = next(t for t in said if t.startswith("timed share: "))
    assert "baseline" in line and "candidate" in line and said[-1].startswith("compared")
    assert " of its requests' 0 s" not in line  # a smoke side's requests: under a second, not rounded to 0


def test_pairs_after_the_first_two_run_the_repeats_where_the_variance_is_the_same_on_both_sides():
    """Kalibera and Jones in an interleaved run: pairs 1-2 run the preset; from pair 3 on, each side's own
    processes decide the repeats (processes.plan), and both sides of a pair run the larger. Here the
    processes differ far more than their repeats (the host of a shared VM): few repeats a process."""
    from harness.measure.timing import preset

    def run(spread: dict[str, float]) -> list[tuple]:
        """The plans requested, in order, where each side's processes differ by spread[side] (log sd)."""
        host = Host(1.0)
        seen: list[tuple] = []

        class Costed(FakeWorker):
            def request(self, op, *args, **kw):
                out = super().request(op, *args, **kw)
                if op != "time":
                    return out
                seen.append(args[2].plan)
                shift = np.random.default_rng(1000 + host.t).normal(0, spread[self.side.name])  # the process's level
                for r in out["rows"]:
                    t = r["timing"]
                    t["samples"]["device_done"] = [x * math.exp(shift) for x in t["samples"]["device_done"]]
                    t["repeats_s"], t["phase_s"] = 0.02, 2.0  # a repeat costs 1 ms, a process's row 2 s
                return out

        sides = _sides()
        sched = Schedule(sides, ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Costed(fw, s, host))
        interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=4, max_pairs=4))
        return seen

    plans = run({"baseline": 0.2, "candidate": 0.2})
    assert plans[:4] == [()] * 4  # pairs 1 and 2: the preset
    later = plans[4:]
    assert later and all(later[0] == p for p in later[:2]) and all(later[2] == p for p in later[2:])
    assert later[0] and all(5 <= n < 20 for _, n in later[0]), later  # fewer than the 20 the preset ran
    # the candidate's processes agree (its own plan: every repeat the preset allows), the baseline's do not
    # (its own: few): both sides of pairs 3 and 4 run the larger
    most = preset("smoke").max_repeats
    assert all(p and all(n == most for _, n in p) for p in run({"baseline": 0.3, "candidate": 0.0})[4:])
    # the larger of the sides: a side whose processes agree (no variance between them) keeps the most
    per_side = [[{"rows": [{"variant": "v", "timing": {"samples": {"device_done": [1.0, 1.1] * 10},
                                                            "repeats_s": 0.02, "phase_s": 2.0}}], "sample": None}] * 2,
                [{"rows": [{"variant": "v", "timing": {"samples": {"device_done": [s, s * 1.1] * 10},
                                                       "repeats_s": 0.02, "phase_s": 2.0}}], "sample": None}
                 for s in (1.0, 3.0)]]
    from harness.measure.timing import preset
    cfg = preset("smoke")
    assert dict(interleave.planned(cfg, per_side).plan)["v"] == cfg.max_repeats
    assert dict(interleave.planned(cfg, per_side[1:] * 2).plan)["v"] < cfg.max_repeats
    assert interleave.planned(cfg, [per_side[1], [{"status": "error", "reason": "x"}]]) is cfg


def test_pairs_are_added_two_at_a_time_and_the_rate_is_split_over_the_looks(monkeypatch):
    """Unknown rows get an A-B and a B-A pair at a time (a drift linear over the two cancels in each step),
    and the run judges after the first pairs and after each step: the false-discovery rate is split over
    those looks, fewer than one a pair."""
    from harness.regress import regress as regress_mod

    host = Host(1.0)
    rates: list[float] = []
    real = regress_mod.judge_pairs
    monkeypatch.setattr(interleave, "judge_pairs", lambda rows, th, conf, fdr, cov: rates.append(fdr) or real(
        rows, th, conf, fdr, cov))

    logged: list[str] = []
    sides = _sides()
    sched = Schedule(sides, ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Undecided(fw, s, host),
                     log=logged.append)
    res = interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=7))
    assert res.pairs == 7 and "--max-pairs 7" in res.stopped
    assert interleave.looks(2, 7) == 4 and rates == [0.05 / 4] * 4  # after pairs 2, 4, 6 and 7
    assert [t for t in logged if t.startswith("pair")] == [
        f"pair{s}: 1 point(s) with unknown rows (1 request(s) a process, 2 row(s)), the cheapest first"
        for s in ("s 3-4", "s 5-6", " 7")]
    assert host.log == ["baseline", "candidate", "candidate", "baseline"] * 3 + ["baseline", "candidate"]


def test_added_pairs_go_to_the_cheapest_points_first_so_a_budget_cut_leaves_the_fewest_without():
    """After the first pairs, each point's pairs cost what they cost there (Schedule.pair_s): an added stage times
    the cheapest points first, a scenario's points together, so that a budget spent inside the stage leaves the
    costly points, not the cheap ones, without the added pairs. The first pairs keep the plan's order."""
    host, now = Host(1.0), [0.0]
    costs = {"device_creation": 10.0, "sync_points": 1.0}  # seconds a process: the plan's first scenario is dear

    class Costly(Undecided):
        def request(self, op, *args, **kw):
            if op == "time":
                now[0] += costs[args[0]]
            return super().request(op, *args, **kw)

    logged: list[str] = []
    sched = Schedule(_sides(), ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Costly(fw, s, host),
                     now=lambda: now[0], log=logged.append)
    # pairs 1-2: device_creation's two points (80 s), then sync_points (4 s); pairs 3-4 start before 100 s
    res = interleave.run(sched, interleave.Plan(["device_creation", "sync_points"], "smoke", 1, pairs=2,
                                                max_pairs=4, budget_s=100.0))
    assert sched.pair_s[("sync_points", 0)] == pytest.approx(2.0)  # a pair: a process of each side
    assert sched.pair_s[("device_creation", 0)] == pytest.approx(20.0)
    got = {(r.scenario, r.point): r.pairs for r in res.rows}
    assert got[("sync_points", 0)] == 4, got  # timed first in pairs 3-4: 4 s
    assert got[("device_creation", 0)] == 4 and got[("device_creation", 1)] == 2, got  # the budget ran out between
    assert "the cheapest first" in next(t for t in logged if t.startswith("pairs 3-4"))


def test_added_pairs_time_only_the_frameworks_with_an_unknown_row_at_a_point():
    """At one point JAX's rows differ by 30% between processes and stay unknown while torch's are decided
    after the first pairs; at another, the other way round: the added pairs time each point's undecided
    framework alone, and a framework undecided nowhere gets no worker at all."""
    host = Host(1.0)
    started: list[str] = []
    timed: list[tuple[str, str]] = []
    noisy = {("jax", "sync_points"), ("torch", "launch_overhead")}

    class HalfNoisy(FakeWorker):
        def __init__(self, fw, side, host):
            super().__init__(fw, side, host)
            started.append(fw)

        def request(self, op, *args, **kw):
            out = super().request(op, *args, **kw)
            if op == "time":
                timed.append((self.fw, args[0]))
                if (self.fw, args[0]) in noisy:
                    _process_factor(out, 0.3, 500 + self.host.t)
            return out

    def run(scenarios):
        started.clear()
        timed.clear()
        sides = _sides()
        sched = Schedule(sides, ["torch", "jax"], 60.0, world_size=2,
                         make_worker=lambda fw, s, *_: HalfNoisy(fw, s, host))
        res = interleave.run(sched, Plan(scenarios, "smoke", 1, pairs=4, max_pairs=8))
        return {(r.framework, r.scenario): r.pairs for r in res.rows}, res

    got, res = run(["sync_points", "launch_overhead"])
    assert set(got.items()) == {(("torch", "sync_points"), 4), (("jax", "sync_points"), 8),
                                (("torch", "launch_overhead"), 8), (("jax", "launch_overhead"), 4)}, got
    assert all(r.verdict == "same" for r in res.rows if (r.framework, r.scenario) not in noisy)
    assert {k: timed.count(k) for k in set(timed)} == {("torch", "sync_points"): 8, ("jax", "sync_points"): 16,
                                                       ("torch", "launch_overhead"): 16, ("jax", "launch_overhead"): 8}
    got, _ = run(["sync_points"])  # torch is decided everywhere: pairs 5-8 start JAX's workers alone
    assert got == {("torch", "sync_points"): 4, ("jax", "sync_points"): 8}, got
    assert started == ["torch", "jax"] * 8 + ["jax"] * 8


def test_added_pairs_time_only_the_unknown_rows_of_a_point_where_both_sides_can_be_asked_so():
    """sync_points' on_device differs by 30% between processes and stays unknown while item_each_step is
    decided after the first pairs: pairs 5-8 ask for on_device alone, and the decided row keeps its four
    pairs, also where the workers time the baseline beside on_device (a point without a reference). Where
    one side's workers are an older tree's (no "subsets" in their hello), nothing is named: both sides
    time every variant, as before, and both rows get every pair."""
    def run(old_side: str | None):
        host = Host(1.0)
        made: list[FakeWorker] = []

        class OneNoisy(FakeWorker):
            def request(self, op, *args, **kw):
                out = super().request(op, *args, **kw)
                if op == "time":
                    f = math.exp(np.random.default_rng(900 + self.host.t).normal(0, 0.3))
                    for r in out["rows"]:
                        if r["variant"] == "on_device":
                            r["timing"]["samples"]["device_done"] = [x * f for x in r["timing"]["samples"]["device_done"]]
                return out

        def make(fw, side, _cpu=None):
            w = OneNoisy(fw, side, host)
            w.subsets, w.keeps_baseline = side.name != old_side, True
            made.append(w)
            return w

        sched = Schedule(_sides(), ["torch"], 60.0, world_size=2, make_worker=make)
        res = interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=4, max_pairs=8))
        return {r.variant: (r.pairs, r.verdict) for r in res.rows}, [a for w in made for a in w.asked], res

    got, asked, res = run(None)
    assert got == {"item_each_step": (4, "same"), "on_device": (8, "unknown")}, got
    assert sorted({v for _, t, v in asked if t <= 8}) == [()]  # the first pairs: every variant
    assert sorted({v for _, t, v in asked if t > 8}) == [("on_device",)]
    assert all(len(d["scenarios"]["sync_points"]["rows"]) == 2 for d in res.docs)  # both rows in each side's file
    for old in ("baseline", "candidate"):
        got, asked, _ = run(old)
        assert {v for _, _, v in asked} == {()}, old
        assert got["item_each_step"][0] == 8 and got["on_device"][0] == 8, (old, got)


def test_a_request_for_some_rows_that_fails_fails_those_rows_and_no_decided_one():
    """The candidate's worker times out in pairs 5-6, asked for on_device alone: on_device is different
    (failed in the candidate), and item_each_step, decided same after four pairs and never asked again,
    keeps its pairs and its verdict in the run and in both sides' files."""
    from harness.workers.worker import WorkerLost

    host = Host(1.0)

    class FailsWhenNamed(FakeWorker):
        def request(self, op, *args, variants=(), **kw):
            if op == "time" and variants and self.side.name == "candidate":
                raise WorkerLost("torch worker did not answer within 60 s", "timeout")
            out = super().request(op, *args, variants=variants, **kw)
            if op == "time":
                f = math.exp(np.random.default_rng(700 + self.host.t).normal(0, 0.3))
                for r in out["rows"]:
                    if r["variant"] == "on_device":
                        r["timing"]["samples"]["device_done"] = [x * f for x in r["timing"]["samples"]["device_done"]]
            return out

    sched = Schedule(_sides(), ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: FailsWhenNamed(fw, s, host))
    res = interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=4, max_pairs=8))
    got = {r.variant: r for r in res.rows}
    assert (got["item_each_step"].verdict, got["item_each_step"].pairs) == ("same", 4)
    assert got["on_device"].verdict == "different" and got["on_device"].why == "failed in the candidate"
    for d in res.docs:
        rows = {r["variant"]: r for r in d["scenarios"]["sync_points"]["rows"]}
        assert rows["item_each_step"]["status"] == "ok" and len(rows["item_each_step"]["timing"]["processes"]) >= 4
    cand = {r["variant"]: r for r in res.docs[1]["scenarios"]["sync_points"]["rows"]}
    assert cand["on_device"]["status"] == "timeout"


def test_added_pairs_start_single_workers_and_rank_groups_only_for_the_frameworks_open_there():
    """A framework open only at a rank scenario's points gets rank groups and no single worker; one open
    only elsewhere gets single workers and no rank groups; one open nowhere gets neither."""
    open_points = {("sync_points", 0): {"jax"}, ("collectives", 2): {"torch"}, ("ranks", 0): {"torch", "jax"}}
    plain, ranked = interleave.needed(open_points, {"collectives", "ranks"}, ["torch", "cupy", "jax"])
    assert (plain, ranked) == (["jax"], ["torch", "jax"])
    assert interleave.needed({("collectives", 0): {"jax"}}, {"collectives"}, ["torch", "jax"]) == ([], ["jax"])
    sides = _sides()
    sched = Schedule(sides, ["torch", "cupy", "jax"], 60.0, world_size=2,
                     make_worker=lambda fw, s, *_: FakeWorker(fw, s, Host(1.0)))
    pairs, _ = sched.start_pairs([4, 5], ["jax"], ["torch"])
    assert [list(proc) for pair in pairs for proc in pair.processes] == [["jax"]] * 4
    assert [pair.groups.frameworks for pair in pairs] == [["torch"], ["torch"]]
    sched.close(pairs)


def test_the_budget_stops_the_first_pairs_between_points_and_names_what_it_left():
    """A run that must end inside a time-limited call: once --budget is spent no further point starts,
    the point that started keeps its stage's pairs (its rows stay paired and judged), the points left are
    listed as not timed, both sides' result files are incomplete (as compare's are when its budget cuts
    it) and the exit code says the run was cut short. A framework that did not start on one side keeps
    its own reason."""
    from harness.regress.view import render_paired
    from harness.report.report import problems_of

    host = Host(1.0)
    now = [0.0]

    class Slow(FakeWorker):
        def request(self, op, *args, **kw):
            if op == "hello" and self.side.name == "candidate" and self.fw == "jax":
                return {"available": False, "why": "planted: jax failed to import", "env": {}, "on_gpu": False}
            if op == "time":
                now[0] += 10.0  # every process takes 10 s of the budget
            return super().request(op, *args, **kw)

    sides = _sides()
    sched = Schedule(sides, ["torch", "jax"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Slow(fw, s, host),
                     now=lambda: now[0])
    plan = Plan(["device_creation", "sync_points"], "smoke", 1, pairs=4, max_pairs=8, budget_s=30.0)
    res = interleave.run(sched, plan)
    assert host.log == ["baseline", "candidate", "candidate", "baseline"]  # one point, the first stage's two pairs
    assert {(r.scenario, r.point) for r in res.rows} == {("device_creation", 0)}
    assert all(r.pairs == 2 for r in res.rows)
    assert res.not_timed == 2 and res.stopped == "the time budget of 30 s was spent; 2 point(s) not timed"
    left = [(what, why) for what, why in res.not_comparable if why.startswith("not timed")]
    second = _label("device_creation", 1)
    assert [w for w, _ in left] == [f"device_creation/{second}/torch", "sync_points/torch"], left
    for d in res.docs:
        assert not d["complete"] and [nr["scenario"] for nr in d["not_run"]] == ["device_creation", "sync_points"]
        assert "sync_points" not in d["scenarios"]  # none of its points was timed
        rows = [r for r in d["scenarios"]["device_creation"]["rows"] if r["point"] == 1]
        assert {r["framework"]: r["reason"] for r in rows if r["framework"] == "torch"}["torch"].startswith(
            "not timed: the time budget of 30 s")
        assert any(p.kind == "incomplete" for p in problems_of(d))
    jax_base = [r for r in res.docs[0]["scenarios"]["device_creation"]["rows"] if r["framework"] == "jax"]
    assert jax_base and all("time budget" not in (r.get("reason") or "") for r in jax_base)
    # the exit code, where every framework started on both sides: 1 cut short, 0 with every point timed
    sched.frameworks = ["torch"]
    for budget, code in ((30.0, 1), (None, 0)):
        now[0] = 0.0
        plan = Plan(["device_creation", "sync_points"], "smoke", 1, pairs=4, max_pairs=8, budget_s=budget)
        res = interleave.run(sched, plan)
        said: list[str] = []
        assert render_paired(res, sides, plan, said.append) == code and not res.lost, said
        assert ("INCOMPLETE: the time budget of 30 s was spent; 2 point(s) not timed" in said[-1]) == bool(code)
    assert res.not_timed == 0 and all(d["complete"] for d in res.docs)
    assert {(r.scenario, r.point) for r in res.rows} == {("device_creation", 0), ("device_creation", 1),
                                                         ("sync_points", 0)}


def test_a_budget_that_cannot_afford_every_first_pair_leaves_pairs_short_not_points_untimed():
    """The first four pairs time every point two pairs at a time: a budget spent in pairs 3-4 leaves the
    points after the one that started with two pairs (judged on them), every point timed, both files
    complete, no pair added, and the exit code 0 (the run says what was short)."""
    from harness.regress.view import render_paired

    host, now, alive = Host(1.0), [0.0], [0, 0]

    class Slow(FakeWorker):
        def __init__(self, *a):
            super().__init__(*a)
            alive[0] += 1
            alive[1] = max(alive)

        def request(self, op, *args, **kw):
            if op == "time":
                now[0] += 10.0
            return super().request(op, *args, **kw)

        def close(self, grace=0.0):
            alive[0] -= 1

    logged: list[str] = []
    sides = _sides()
    sched = Schedule(sides, ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Slow(fw, s, host),
                     now=lambda: now[0], log=logged.append)
    plan = Plan(["device_creation", "sync_points"], "smoke", 1, pairs=4, max_pairs=8, budget_s=130.0)
    res = interleave.run(sched, plan)  # pairs 1-2 over three points: 120 s; pairs 3-4 start one point
    assert host.log == ["baseline", "candidate", "candidate", "baseline"] * 4
    assert "pairs 3-4 over every point: starting their workers" in logged
    assert not [t for t in logged if t.endswith("unknown rows")]
    assert alive == [0, 4]  # a stage's two pairs at a time (their memory cap is sized so), all closed at the end
    got = {(r.scenario, r.point): r.pairs for r in res.rows}
    assert got == {("device_creation", 0): 4, ("device_creation", 1): 2, ("sync_points", 0): 2}, got
    assert res.not_timed == 0 and all(d["complete"] for d in res.docs)
    assert res.stopped == "the time budget of 130 s was spent; 2 point(s) with fewer than 4 pairs"
    said: list[str] = []
    assert res.short == 2 and render_paired(res, sides, plan, said.append) == 0, said
    assert said[-1].endswith("; first pairs cut: the time budget of 130 s was spent; 2 point(s) with fewer "
                             "than 4 pairs"), said


def test_a_failed_row_or_request_is_named_in_the_progress_where_it_happens():
    """A request that fails after minutes (a pool out of memory, a rank group killed) is named where it
    happens, with its seconds: a log that goes on as if it had been timed hides where the run's time went."""
    host, said = Host(1.0), []

    class Failing(FakeWorker):
        def request(self, op, *args, **kw):
            if op == "time" and self.fw == "jax" and self.side.name == "baseline":
                raise interleave.WorkerError("no answer in 120 s (group killed)\nthe rest", "timeout")
            out = super().request(op, *args, **kw)
            if op == "time" and self.side.name == "candidate":
                out["rows"][0].update(status="oom", reason="RESOURCE_EXHAUSTED: Out of memory\nallocation summary")
            return out

    sched = Schedule(_sides(), ["torch", "jax"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Failing(fw, s, host),
                     log=said.append)
    interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=2))
    oom = [line for line in said if "row(s) oom" in line]
    assert oom and all(line.endswith(": RESOURCE_EXHAUSTED: Out of memory") for line in oom), said
    assert sorted(line.split(":")[0].strip() for line in oom) == ["jax", "jax", "torch", "torch"], oom  # 2 pairs
    failed = [line for line in said if "jax failed (timeout" in line]
    assert len(failed) == 1 and failed[0].endswith("no answer in 120 s (group killed)"), said  # not asked again


def _signalled(run):
    """run() inside stops.handling(), as the command runs it, and the stop state cleared afterwards."""
    from harness.run import stops

    try:
        with stops.handling():
            return run()
    finally:
        stops.S.first = stops.S.late = None
        stops.S.mode = "raise"


def test_a_stop_during_the_timing_keeps_what_both_sides_timed_and_names_the_rest():
    """SIGTERM (a job's limit, `timeout`) landing in a request: every worker closes, the point timed on both
    sides is judged, the point it reached names what it cut (a framework's other side, a framework not
    started there), the point never reached is listed, both files are incomplete, and the exit code is
    143, as a stopped compare's."""
    import signal

    from harness.regress.view import render_paired

    host, closed = Host(1.0), []

    class Stopping(FakeWorker):
        def request(self, op, *args, **kw):
            if op == "time" and host.t == 9:  # device_creation's second point, after the baseline's torch
                os.kill(os.getpid(), signal.SIGTERM)  # its handler raises Stopped here, as in a real run
            return super().request(op, *args, **kw)

        def close(self, grace=0.0):
            closed.append((self.side.name, self.fw, grace))

    sides = _sides()
    sched = Schedule(sides, ["torch", "jax"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Stopping(fw, s, host))
    plan = Plan(["device_creation", "sync_points"], "smoke", 1, pairs=2, max_pairs=8)
    res = _signalled(lambda: interleave.run(sched, plan))
    assert res.signal == "SIGTERM" and res.stopped == "stopped (SIGTERM); 1 point(s) not timed", res.stopped
    assert len(closed) == 8 and {g for *_, g in closed} == {1.0}  # 2 pairs x 2 sides x 2, not waited for
    assert {(r.scenario, r.point) for r in res.rows} == {("device_creation", 0)} and all(r.pairs == 2 for r in res.rows)
    second = _label("device_creation", 1)
    assert (f"device_creation/{second}/torch",
            "not timed on the candidate side: stopped (SIGTERM) during this point") in res.not_comparable
    assert (f"device_creation/{second}/jax", "not timed here: stopped (SIGTERM) during this point") in res.not_comparable
    assert ("sync_points/torch", "not timed: stopped (SIGTERM) before this point") in res.not_comparable
    for d in res.docs:
        assert not d["complete"] and [nr["scenario"] for nr in d["not_run"]] == ["device_creation", "sync_points"]
    at_1 = [[r for r in d["scenarios"]["device_creation"]["rows"] if r["point"] == 1] for d in res.docs]
    torch_1 = [[r for r in rows if r["framework"] == "torch"] for rows in at_1]
    assert torch_1[0] and all(r["status"] == "ok" for r in torch_1[0])  # the baseline's process is kept
    assert torch_1[1] and all(r["status"] == "skipped" and "candidate side" in r["reason"] for r in torch_1[1])
    assert all(r["status"] == "skipped" and "stopped (SIGTERM)" in r["reason"]
               for rows in at_1 for r in rows if r["framework"] == "jax")
    said: list[str] = []
    assert render_paired(res, sides, plan, said.append) == 143
    assert "STOPPED: stopped (SIGTERM); 1 point(s) not timed" in said[-1], said


def test_a_stop_in_the_added_pairs_keeps_the_first_pairs_and_closes_the_added_ones():
    import signal

    host, started, closed = Host(1.0), [], []

    class Noisy(FakeWorker):  # processes that differ by 20%: two pairs leave the rows unknown
        spread = 0.2

        def __init__(self, *a):
            super().__init__(*a)
            started.append(self)

        def request(self, op, *args, **kw):
            if op == "time" and host.t == 4:  # pair 3's first request
                os.kill(os.getpid(), signal.SIGTERM)
            return super().request(op, *args, **kw)

        def close(self, grace=0.0):
            closed.append(self)

    sched = Schedule(_sides(), ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Noisy(fw, s, host))
    res = _signalled(lambda: interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=8)))
    assert res.signal == "SIGTERM" and res.stopped == "stopped (SIGTERM)" and res.not_timed == 0
    assert len(started) == 8 and sorted(map(id, closed)) == sorted(map(id, started))  # pairs 1-2, then 3-4
    assert all(d["complete"] for d in res.docs) and all(r.pairs == 2 for r in res.rows)


def test_a_stop_while_the_workers_start_closes_every_one_started():
    import signal

    from harness.run import stops

    made, closed = [], []

    class Starting(FakeWorker):
        def __init__(self, *a):
            super().__init__(*a)
            made.append(self)

        def request(self, op, *args, **kw):
            if op == "hello" and self.side.name == "candidate" and self.fw == "jax":
                os.kill(os.getpid(), signal.SIGTERM)
            return super().request(op, *args, **kw)

        def close(self, grace=0.0):
            closed.append(self)

    sched = Schedule(_sides(), ["torch", "jax"], 60.0, world_size=2,
                     make_worker=lambda fw, s, *_: Starting(fw, s, Host(1.0)))
    with pytest.raises(stops.Stopped):
        _signalled(lambda: sched.start_pairs([0, 1]))
    assert len(made) == 8 and sorted(map(id, closed)) == sorted(map(id, made))


def test_sigterm_to_a_real_run_writes_both_sides_files_and_exits_143(tmp_path):
    """`timeout` or a job's limit sends SIGTERM to a run that has timed for minutes: what it timed is kept."""
    import signal

    backend_or_skip("torch")
    e = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "harness", "regress", "--baseline-tree", str(ROOT), "--scenarios",
                          "launch_overhead,sync_points", "--frameworks", "torch", "--size", "smoke", "--seed", "3",
                          "--pairs", "2", "--max-pairs", "2", "--out", str(tmp_path)],
                         cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        for line in p.stderr:  # the second scenario's first request (scenarios run in their order: sync_points first)
            seen.append(line)
            if "launch_overhead · 0 · pair 1 · baseline" in line:
                p.send_signal(signal.SIGTERM)
                break
        out, err = p.communicate(timeout=300)
    finally:
        p.kill()
    err = "".join(seen) + err
    assert p.returncode == 143, out + err[-3000:]
    assert "harness: stopped (SIGTERM) during the timing: what was timed is in" in err, err[-3000:]
    assert "STOPPED: stopped (SIGTERM)" in out.splitlines()[-1], out
    docs = sorted((load(q) for q in tmp_path.glob("*.json")), key=lambda d: d["interleaved"]["side"])
    assert [d["interleaved"]["side"] for d in docs] == ["baseline", "candidate"]
    for d in docs:
        assert not d["complete"]
        assert all(r["status"] == "ok" for r in d["scenarios"]["sync_points"]["rows"])


def test_pairs_3_4_start_no_workers_once_the_budget_is_spent_and_a_framework_whose_worker_fails_keeps_its_pairs():
    """Each stage starts its own workers: none where the budget is already spent (every point keeps pairs
    1-2), and a framework whose worker does not start in a later stage keeps its earlier pairs there,
    neither failed nor judged on a missing side."""
    from harness.regress.view import render_paired

    host, now, made = Host(1.0), [0.0], []

    class Slow(FakeWorker):
        def __init__(self, *a):
            super().__init__(*a)
            made.append((self.side.name, self.fw))

        def request(self, op, *args, **kw):
            if op == "hello" and (self.side.name, self.fw) == ("candidate", "jax") and \
                    made.count(("candidate", "jax")) > 2:  # a third candidate JAX worker: pairs 3-4's
                return {"available": False, "why": "planted: out of memory at start", "env": {}, "on_gpu": False}
            if op == "time":
                now[0] += 10.0
            return super().request(op, *args, **kw)

    logged: list[str] = []
    sides = _sides()
    sched = Schedule(sides, ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Slow(fw, s, host),
                     now=lambda: now[0], log=logged.append)
    plan = Plan(["device_creation", "sync_points"], "smoke", 1, pairs=4, max_pairs=4, budget_s=120.0)
    res = interleave.run(sched, plan)  # pairs 1-2 over three points: 120 s, the whole budget
    assert len(made) == 4 and not [t for t in logged if "pairs 3-4" in t], logged
    assert res.short == 3 and res.not_timed == 0 and all(r.pairs == 2 for r in res.rows)
    assert render_paired(res, sides, plan, logged.append) == 0
    made.clear()
    now[0], logged[:] = 0.0, []
    sched.frameworks = ["torch", "jax"]
    res = interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=4, max_pairs=4))
    assert "jax: a worker of pairs 3-4 did not start: its rows are not timed in them" in logged, logged
    assert {r.framework: r.pairs for r in res.rows} == {"torch": 4, "jax": 2}
    assert not [r for r in res.rows if r.status] and render_paired(res, sides, plan, logged.append) == 0


def test_a_worker_that_does_not_start_in_the_added_pairs_leaves_its_rows_their_earlier_pairs():
    """As in a later stage of the first pairs: a start failure in pairs added for unknown rows is logged and
    those rows keep the pairs they have, neither failed nor called different."""
    from harness.regress.view import render_paired
    from harness.workers.worker import WorkerLost

    host, made, logged = Host(1.0), [], []

    class Flaky(FakeWorker):  # processes 20% apart: two pairs leave the rows unknown, so pairs 3-4 are added
        spread = 0.2

        def __init__(self, *a):
            super().__init__(*a)
            made.append(self)
            self.broken = self.side.name == "candidate" and len(made) > 4

        def request(self, op, *args, **kw):
            if self.broken:
                raise WorkerLost("candidate torch worker did not call back (exit code 1)", "crashed")
            return super().request(op, *args, **kw)

    sides = _sides()
    sched = Schedule(sides, ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Flaky(fw, s, host),
                     log=logged.append)
    plan = Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=4)
    res = interleave.run(sched, plan)
    assert "torch: a worker of pairs 3-4 did not start: its rows are not timed in them" in logged, logged
    assert res.rows and not [r for r in res.rows if r.status or r.verdict == "different"]
    assert all(r.pairs == 2 for r in res.rows) and render_paired(res, sides, plan, logged.append) == 0


def test_a_framework_whose_rank_groups_start_on_the_baseline_and_not_on_the_candidate_fails_the_run(monkeypatch):
    from harness.regress.view import render_paired

    host = Host(1.0)

    def group(self, fw, process):
        side = self.sides[process]

        class Group(FakeWorker):  # a rank group as the schedule sees one: it answers for all its ranks
            def request(self, op, *args, **kw):
                if op == "hello" and side.name == "candidate":
                    return {"available": False, "why": "planted: rank 0 died", "env": {}, "on_gpu": False}
                return super().request(op, *args, **kw)

        return Group(fw, side, host)

    monkeypatch.setattr(interleave.SideGroups, "make_group", group)
    sides = _sides()
    sched = Schedule(sides, ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: FakeWorker(fw, s, host))
    plan = Plan(["sync_points", "ranks"], "smoke", 1, pairs=2, max_pairs=2)
    res = interleave.run(sched, plan)
    assert res.lost == [("torch", "its ranks rank group: planted: rank 0 died")], res.lost
    said: list[str] = []
    assert render_paired(res, sides, plan, said.append) == 1 and any("FAILED: torch" in t for t in said), said
    for d in res.docs:
        rows = d["scenarios"]["ranks"]["rows"]
        assert rows and all(r["status"] == "skipped" and "did not start on the candidate side: planted" in r["reason"]
                            for r in rows), rows
    again = interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=2))  # the same schedule
    assert not again.lost and {r.scenario for r in again.rows} == {"sync_points"}  # nothing of the last run's


def test_a_stop_as_the_added_pairs_begin_still_returns_what_was_timed():
    """The signal lands in the first statement after stops.resume() (here: the log of the pairs to add)."""
    import signal

    host = Host(1.0)

    class Noisy(FakeWorker):
        spread = 0.3

    def log(text: str) -> None:
        if "point(s) with unknown rows" in text:
            os.kill(os.getpid(), signal.SIGINT)

    sched = Schedule(_sides(), ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Noisy(fw, s, host), log=log)
    try:
        res = _signalled(lambda: interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=6)))
    except KeyboardInterrupt:
        pytest.fail("the stop escaped run(): what both sides timed would not be written")
    assert res.signal == "SIGINT" and res.rows and all(r.pairs == 2 for r in res.rows)
    assert all(d["complete"] for d in res.docs)


def test_a_stop_between_a_pairs_two_sides_leaves_no_half_pair_in_either_file():
    host, calls = Host(1.0), [0]

    class StopAtFour(FakeWorker):
        def request(self, op, *args, **kw):
            if op == "time":
                calls[0] += 1
                if calls[0] == 4:  # pair 2 runs B-A: its candidate process is done, its baseline's not
                    raise KeyboardInterrupt
            return super().request(op, *args, **kw)

    sched = Schedule(_sides(), ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: StopAtFour(fw, s, host))
    res = _signalled(lambda: interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=2)))
    assert res.signal == "SIGINT" and all(r.pairs == 1 for r in res.rows)
    for d in res.docs:
        assert [len(r["timing"]["processes"]) for r in d["scenarios"]["sync_points"]["rows"]] == [1, 1]

    class Noisy(StopAtFour):  # processes 30% apart: two pairs leave the rows unknown, so pairs 3-4 are added
        spread = 0.3

    calls[0] = -2  # the stop at the sixth request: pair 3's second side (pairs 1-2 take four, pair 3's first one)
    sched = Schedule(_sides(), ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Noisy(fw, s, host))
    res = _signalled(lambda: interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=6)))
    assert res.signal == "SIGINT" and all(r.pairs == 2 for r in res.rows)
    for d in res.docs:
        assert [len(r["timing"]["processes"]) for r in d["scenarios"]["sync_points"]["rows"]] == [2, 2]


def _label(scenario: str, i: int) -> str:
    from scenarios import get

    return get(scenario).points("smoke")[i].get("label", "")


# -- the paired test and the false-discovery control -----------------------------------------------


def _rows(rng, n_rows: int, pairs: int, effect: float, between: float, within: float = 0.0) -> list[Paired]:
    """Rows whose pair k ran on a host of speed h_k (shared by both processes of the pair)."""
    out = []
    for i in range(n_rows):
        h = rng.choice([1.0, 2.0], pairs) * np.exp(rng.normal(0, between, pairs))
        base = h * np.exp(rng.normal(0, within, pairs))
        cand = h * effect * np.exp(rng.normal(0, within, pairs))
        out.append(Paired("s", "", "torch", f"v{i}", base.tolist(), cand.tolist()))
    return out


def test_the_test_is_paired_a_host_that_differs_between_pairs_cancels():
    rng = np.random.default_rng(3)
    rows = _rows(rng, 1, 6, 1.15, between=0.3, within=0.01) + _rows(rng, 1, 6, 1.0, between=0.3, within=0.01)
    judge_pairs(rows, 0.10, 0.95)
    assert rows[0].verdict == "different" and rows[0].slower and 1.12 < rows[0].ratio < 1.18
    assert rows[1].verdict == "same"
    shuffled = [Paired("s", "", "torch", "x", r.base, list(reversed(r.cand))) for r in rows]
    judge_pairs(shuffled, 0.10, 0.95)  # the same figures, unpaired: the hosts' spread hides both answers
    assert all(r.verdict == "unknown" for r in shuffled)


def test_false_discoveries_are_controlled_across_the_rows():
    rng = np.random.default_rng(7)
    null = _rows(rng, 300, 6, 1.0, between=0.0, within=0.09)
    real = _rows(rng, 3, 6, 1.4, between=0.0, within=0.01)
    rows = null + real
    judge_pairs(rows, 0.10, 0.95, fdr=0.05)
    assert all(r.verdict == "different" for r in real)
    assert not [r for r in null if r.verdict == "different"]
    assert sum(r.p <= 0.05 and abs(math.log(r.ratio)) >= math.log(1.1) for r in null) >= 3  # what BH spares


def test_each_row_says_the_smallest_change_its_pairs_could_have_found():
    """Two pairs over 200 rows (a self-regress cut short by its budget): at a few percent between pairs no
    row could have been called different, so "0 different" there refutes nothing, and the summary says so;
    at eight pairs a 1% spread finds a 10% change in every row. Planted 15% changes are found exactly
    where the figure says they can be."""
    from scipy import stats

    from harness.regress.regress import detectable
    from harness.regress.view import paired_line, render_paired

    x = np.log([1.05, 1.12, 0.98, 1.07])  # the figure itself: two-sided t at alpha over the pairs' spread
    want = math.expm1(stats.t.ppf(1 - 0.001 / 2, 3) * np.std(x, ddof=1) / 2)
    assert detectable([1.0] * 4, np.exp(x).tolist(), 0.10, 0.001) == pytest.approx(want) and want > 0.10
    # no spread: the sign test decides, whose p at n pairs is 2 / 2^n whatever the change
    assert detectable([1.0, 1.0], [1.0, 1.0], 0.10, 0.001) == math.inf
    assert detectable([1.0] * 12, [1.0] * 12, 0.10, 0.001) == pytest.approx(0.10)  # 2 / 2^12 = 0.0005
    for base, cand, alpha in (([0.0, 1.0], [1.0, 1.0], 0.001), ([1.0, 1.0, 1.0], [math.inf, 1.0, 1.0], 0.001),
                              ([1.0], [1.1], 0.001), ([1.0, 1.0], [1.1, 1.2], 1.5)):
        assert detectable(base, cand, 0.10, alpha) == math.inf, (base, cand, alpha)  # nothing to go by
    rng = np.random.default_rng(11)
    for pairs, could in ((2, 0), (8, 200)):
        rows = _rows(rng, 200, pairs, 1.0, between=0.0, within=0.01)
        if pairs == 2:  # one degree of freedom: a row whose two pairs agree by chance to 1e-4 would count
            for r in rows:
                r.cand[1] = r.cand[1] * (1.02 if r.cand[1] / r.base[1] >= r.cand[0] / r.base[0] else 1 / 1.02)
        judge_pairs(rows, 0.10, 0.95)
        assert sum(r.detectable <= 0.10 * (1 + 1e-9) for r in rows) == could, pairs
        assert all(r.detectable >= 0.10 * (1 - 1e-9) for r in rows)  # never below the effect floor
        res = SimpleNamespace(rows=rows, docs=[{"environment": {}}, {"environment": {}}], not_comparable=[],
                              lost=[], wall_s=0.0, pairs=pairs, signal="", stopped="", not_timed=0, short=0,
                              level=0.95)
        said: list[str] = []
        assert render_paired(res, _sides(), Plan(["sync_points"], "full", 1), said.append) == 0
        power = next(line for line in said if line.startswith("power:"))
        assert f"called different in {could} of 200 timed rows" in power
        assert ("no row could" in power) == (could == 0), power
    unknown = Paired("s", "", "torch", "v", [1.0] * 4, np.exp(x).tolist(), verdict="unknown", ratio=1.05, lo=0.9,
                     hi=1.2, detectable=0.254)
    assert paired_line(unknown).endswith("· would call 25% different")
    unknown.detectable = math.inf
    assert paired_line(unknown).endswith("· too few pairs to call any change different")
    for pairs in (2, 3, 4, 6):  # a planted 15% change among 200 rows: different where detectable says it can be
        rows = _rows(rng, 199, pairs, 1.0, between=0.0, within=0.01) + _rows(rng, 1, pairs, 1.15, 0.0, 0.01)
        judge_pairs(rows, 0.10, 0.95)
        planted = rows[-1]
        assert (planted.verdict == "different") == (planted.detectable < 0.15), (pairs, planted.detectable)


def test_the_summary_says_how_often_the_host_was_at_its_slower_speed():
    """A host that runs Python at two speeds moves the rows it paces between pairs: the summary gives the two
    speeds and each side's share at the slower, from the loop every request times; at one speed it says
    nothing."""
    from harness.regress.view import render_paired

    def said(base_loops: list[float], cand_loops: list[float]) -> list[str]:
        docs = [doc([row("torch", "async", samples(1e-3, n=20), processes=len(h), host_loop=h)])
                for h in (base_loops, cand_loops)]
        res = SimpleNamespace(rows=[], docs=docs, not_comparable=[], lost=[], wall_s=0.0, pairs=4, signal="",
                              stopped="", not_timed=0, short=0, level=0.95)
        out: list[str] = []
        render_paired(res, _sides(), Plan(["async_dispatch"], "full", 1), out.append)
        return [line for line in out if line.startswith("host:")]

    two = said([6.5e-3] * 3 + [12.5e-3] * 1, [6.5e-3] * 1 + [12.5e-3] * 3)
    assert len(two) == 1 and "about 6.5 and 12.5 ms" in two[0], two
    assert "slower in 25% of the baseline's measurements and 75% of the candidate's" in two[0], two
    assert said([6.5e-3] * 4, [6.7e-3] * 4) == []  # one speed: within the effect floor


def test_pairs_whose_ratios_are_all_equal_decide_nothing_at_a_few_pairs():
    """A coarse clock can make every pair's ratio the same: the t test has no spread to go by, and one
    quantum must not decide a row at two pairs (the sign test's p is 2 / 2^n)."""
    moved = Paired("s", "", "torch", "a", [1.0, 2.0], [1.12, 2.24])
    still = Paired("s", "", "torch", "b", [1.0, 2.0], [1.0, 2.0])
    judge_pairs([moved, still], 0.10, 0.95)
    assert (moved.verdict, still.verdict) == ("unknown", "unknown") and moved.p == 0.5 and still.hi == math.inf
    rounded = Paired("s", "", "torch", "c", [0.1, 0.3], [0.11, 0.33])  # equal ratios but for the last bits
    judge_pairs([rounded], 0.05, 0.95)
    assert rounded.verdict == "unknown" and rounded.p == 0.5, (rounded.p, rounded.verdict)


def test_the_intervals_are_split_over_the_looks_as_the_rate_is():
    """A row called same gets no more pairs, so each look is a chance to call a changed row same: the
    intervals' level is split over the looks (Bonferroni), as the false-discovery rate is."""
    from harness.regress.regress import paired_test

    host = Host(1.0)

    class Noisy(FakeWorker):
        spread = 0.05

    sched = Schedule(_sides(), ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Noisy(fw, s, host))
    res = interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=6))
    assert res.level == pytest.approx(1 - 0.05 / 3)  # looks after pairs 2, 4 and 6
    for r in res.rows:
        assert (r.lo, r.hi) == pytest.approx(paired_test(r.base, r.cand, res.level)[1:3])


def test_a_row_whose_clock_read_zero_gets_no_more_pairs_and_says_why():
    from harness.regress.view import paired_line

    res, host = fake_run(1.0, slow={("baseline", "on_device"): 0.0}, pairs=2)
    zero = next(r for r in res.rows if r.variant == "on_device")
    assert zero.verdict == "unknown" and not zero.decidable and "median of 0 or not finite" in zero.why
    assert "would call" not in paired_line(zero) and "p nan" in paired_line(zero)
    host.log.clear()
    sched = Schedule(_sides(), ["torch"], 60.0, world_size=2,
                     make_worker=lambda fw, s, *_: FakeWorker(fw, s, host))
    host.slow = {("baseline", "on_device"): 0.0}
    interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=6))
    assert len(host.log) == 4  # the other row is same after two pairs; this one is not re-timed


def test_a_failed_candidate_is_a_slower_difference():
    r = Paired("s", "", "torch", "v", [], [], status="ok → error: boom", why="failed in the candidate")
    judge_pairs([r], 0.10, 0.95)
    assert r.verdict == "different" and r.slower


# -- the host-aware verdict of file regress ---------------------------------------------------------


def _row(variant, per_process, loops, seed=0):
    rng = np.random.default_rng(seed)
    times = [float(t * x) for t in per_process for x in np.exp(rng.normal(0, 0.002, 10))]
    return row("torch", variant, times, processes=len(per_process), host_loop=loops)


def test_a_host_paced_row_on_a_slower_host_is_unknown_not_a_regression():
    fast, slow = [6.8e-3] * 3, [13.3e-3] * 3
    # host-paced: every process's time follows its host loop; within a run the host did not vary
    base = _row("async", [1e-3] * 3, fast)
    cand = _row("async", [1.95e-3] * 3, slow, seed=1)
    (r,) = regress(doc([base]), doc([cand])).rows
    assert r.verdict == "unknown" and "host speed changed (6.8 ms → 13.3 ms" in r.host and "not measurable" in r.host


def test_an_unmeasured_row_follows_the_host_as_far_as_a_measured_row_was_seen_to_and_no_further():
    """A host 1.96x slower (6.8 → 13.3 ms) and a row whose sensitivity cannot be fitted: a 2.4x move
    (more than in step, less than at env.ELASTICITY_MAX, 2.7x) is unknown; a 3.5x move is a regression
    the host cannot explain."""
    fast, slow = [6.8e-3] * 3, [13.3e-3] * 3
    base = _row("async", [1e-3] * 3, fast)
    got = {}
    for moved in (2.4, 3.5):
        (got[moved],) = regress(doc([base]), doc([_row("async", [moved * 1e-3] * 3, slow, seed=1)])).rows
    assert got[2.4].verdict == "unknown" and "not measurable" in got[2.4].host, got[2.4]
    assert got[3.5].verdict == "regression" and not got[3.5].host, got[3.5]


def test_host_loops_that_jitter_within_a_run_do_not_hide_a_host_change_between_runs():
    """A few % of jitter in each run's host loops fits a slope near 0; it says nothing of a host twice as
    slow in the other run, so the row still follows the host there."""
    jitter = [0.97, 1.03, 0.99, 1.01]
    base = _row("async", [1e-3] * 4, [6.8e-3 * j for j in jitter])
    cand = _row("async", [1.95e-3] * 4, [13.3e-3 * j for j in jitter[::-1]], seed=1)
    (r,) = regress(doc([base]), doc([cand])).rows
    assert r.verdict == "unknown" and "host speed changed" in r.host, r


def test_a_host_paced_row_whose_sensitivity_is_measured_is_unknown():
    # the baseline's processes mostly met the fast host, the candidate's mostly the slow one
    loops_b, loops_c = [6.8e-3] * 7 + [13.3e-3], [13.3e-3] * 7 + [6.8e-3]
    base = _row("async", [1e-3 * h / 6.8e-3 for h in loops_b], loops_b)
    cand = _row("async", [1e-3 * h / 6.8e-3 for h in loops_c], loops_c, seed=1)
    (r,) = regress(doc([base]), doc([cand])).rows
    assert r.timing == "unknown" and r.verdict == "unknown" and "sensitivity 1.00" in r.host, r
    # what the verdict would have been without the host's account
    assert r.lo > 1.1


def test_a_device_paced_row_that_the_host_cannot_explain_stays_a_regression():
    loops_b, loops_c = [6.8e-3, 13.3e-3, 6.8e-3, 13.3e-3], [13.3e-3, 13.3e-3, 6.8e-3, 13.3e-3]
    base = _row("async", [1e-3] * 4, loops_b)  # the same time at either host speed: insensitive, measured
    cand = _row("async", [1.3e-3] * 4, loops_c, seed=1)
    (r,) = regress(doc([base]), doc([cand])).rows
    assert r.verdict == "regression" and not r.host


def test_a_host_at_two_speeds_within_the_runs_explains_a_row_whose_own_loops_did_not_move():
    # the host flips between 6.8 and 13.3 ms within each run (sync_each's processes met both); async's
    # two processes a run read 6.8 ms before timing in both runs, yet may have run at either speed
    mixed = [6.8e-3, 13.3e-3, 13.3e-3, 6.8e-3]
    base = [_row("async", [1e-3] * 2, [6.8e-3] * 2), _row("sync_each", [2e-3] * 4, mixed, seed=2)]
    cand = [_row("async", [1.5e-3] * 2, [6.8e-3] * 2, seed=1), _row("sync_each", [2e-3] * 4, mixed, seed=3)]
    got = {r.variant: r for r in regress(doc(base), doc(cand)).rows}
    assert got["async"].verdict == "unknown" and "ran at 6.8 and 13.3 ms during the runs" in got["async"].host
    assert got["sync_each"].verdict == "unchanged"


def test_a_slowdown_on_a_faster_host_stays_a_regression_and_an_unchanged_host_explains_nothing():
    base = _row("async", [1e-3] * 3, [13.3e-3] * 3)
    cand = _row("async", [1.3e-3] * 3, [6.8e-3] * 3, seed=1)  # host faster: it cannot explain a slowdown
    assert regress(doc([base]), doc([cand])).rows[0].verdict == "regression"
    base = _row("async", [1e-3] * 3, [6.8e-3] * 3)
    cand = _row("async", [1.3e-3] * 3, [6.8e-3] * 3, seed=1)
    assert regress(doc([base]), doc([cand])).rows[0].verdict == "regression"


def _calibrated(d, loops, tiny=2e-5):
    """A file written before rows recorded their host loop: only every process's start-up calibration
    (a Python loop and a tiny op each)."""
    d["environment"]["machine"]["calibration"] = {"torch": [{"tiny_op_s": tiny, "python_loop_s": x} for x in loops]}
    return d


def test_in_files_without_the_rows_loops_the_start_up_calibration_shows_the_hosts_two_speeds():
    """The committed runs of 2026-12-03 afternoon recorded the host's loop only at each process's start:
    6.5 and 13.1 ms there. A row 1.5x faster in the candidate is then unknown (it may have met either
    speed, and its sensitivity cannot be measured), the start-up loop named as standing in for the row's;
    a 4x change is beyond it (2.0x at env.ELASTICITY_MAX: 2.9x)."""
    base = [_row("async", [1e-3] * 2, []), _row("sync_each", [4e-3] * 2, [], seed=2)]
    cand = [_row("async", [0.66e-3] * 2, [], seed=1), _row("sync_each", [1e-3] * 2, [], seed=3)]
    r = regress(_calibrated(doc(base), [13.1e-3, 13.0e-3]), _calibrated(doc(cand), [6.5e-3, 13.1e-3]))
    got = {x.variant: x for x in r.rows}
    assert got["async"].verdict == "unknown" and "start-up loop stands in" in got["async"].host, got["async"]
    assert "ran at 6.5 and 13.1 ms" in got["async"].host and got["sync_each"].verdict == "improvement"
    assert any("every process at its start" in n for n in r.notes), r.notes
    # a host that ran at one speed in both runs explains nothing
    steady = regress(_calibrated(doc(base), [13.1e-3, 13.0e-3]), _calibrated(doc(cand), [13.0e-3, 13.1e-3]))
    assert {x.variant: x.verdict for x in steady.rows} == {"async": "improvement", "sync_each": "improvement"}


def test_an_older_files_loop_stands_in_only_where_nothing_better_speaks():
    """The calibration's factor still speaks for a host-bound row where the two hosts differ beyond its
    noise (tiny ops twice as slow), even with two loop speeds at start-up; and in a pair of an older and a
    newer file, the newer row's own loops (8 processes, at both speeds, its time flat: measured not to
    follow the host) decide: a 1.3x slowdown stays a regression."""
    base, cand = _row("async", [1e-3] * 2, []), _row("async", [1.45e-3] * 2, [], seed=1)
    (r,) = regress(_calibrated(doc([base]), [10e-3, 10e-3], 1e-5), _calibrated(doc([cand]), [10e-3, 11.5e-3])).rows
    assert r.verdict == "unknown" and "host" in r.why and "by the two runs' calibrations" in r.host, r
    flat = _row("async", [1.3e-3] * 8, [6.8e-3, 13.3e-3] * 4, seed=1)
    (r,) = regress(_calibrated(doc([_row("async", [1e-3] * 8, [])]), [6.8e-3, 13.3e-3], 1e-5), doc([flat])).rows
    assert r.verdict == "regression", r


def test_the_calibrations_factor_counts_the_hosts_two_speeds_too():
    """Older files whose hosts differ (tiny ops 1.6x slower) and ran at two speeds (start-up loops 6 and
    9 ms, then 9.6 and 14.4 ms): a host-bound row 2.5x slower may have met the slow speed in one run and
    the fast in the other (2.4x, to the power of env.ELASTICITY_MAX), so it is unknown, as it is where the
    tiny ops agree; a host this much slower cannot make a row more surely a regression."""
    base, cand = _row("async", [1e-3] * 2, []), _row("async", [2.5e-3] * 2, [], seed=1)
    for tiny in (1.6e-5, 1e-5):
        (r,) = regress(_calibrated(doc([base]), [6e-3, 9e-3], 1e-5),
                       _calibrated(doc([cand]), [9.6e-3, 14.4e-3], tiny)).rows
        assert r.verdict == "unknown" and "ms during the runs" in r.host, (tiny, r)


# -- end to end: real worker processes of two sides -------------------------------------------------


def _regress(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(ROOT)) | (env or {})
    return subprocess.run([sys.executable, "-m", "harness", "regress", *args], cwd=ROOT, capture_output=True,
                          text=True, env=e, timeout=600)


def test_one_commit_against_itself_torch_and_jax(tmp_path):
    backend_or_skip("torch")
    backend_or_skip("jax")
    r = _regress("--baseline-tree", str(ROOT), "--scenarios", "launch_overhead", "--frameworks", "torch,jax",
                 "--size", "smoke", "--seed", "3", "--pairs", "2", "--max-pairs", "2", "--fdr", "0.01",
                 "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "at equal host speeds (--host-covariate)" in r.stdout.splitlines()[1], r.stdout  # the default
    assert "\ndifferent" not in r.stdout and "0 different (0 slower)" in r.stdout.splitlines()[-1], r.stdout
    assert "timed share: " in r.stdout
    # progress on stderr, each line with the seconds since the start: where the run's time went
    steps = [line for line in r.stderr.splitlines() if re.match(r"  \[ *\d+\.\ds\] ", line)]
    assert "starting the workers of 2 pairs" in steps[0] and "closing the workers" in steps[-1], r.stderr[-3000:]
    assert any("launch_overhead · 0 · pair 2 · candidate · jax" in line for line in steps)
    docs = sorted((load(p) for p in tmp_path.glob("*.json")), key=lambda d: d["interleaved"]["side"])
    assert [d["interleaved"]["side"] for d in docs] == ["baseline", "candidate"]
    assert all(len(r["timing"]["processes"]) == 2 for d in docs for r in d["scenarios"]["launch_overhead"]["rows"]
               if r["status"] == "ok")
    # by default (--host-covariate), each row carries the host's loop beside each of its repeats
    assert all(len(r["timing"]["host_loops"]) == len(r["timing"]["samples"]["device_done"])
               and min(r["timing"]["host_loops"]) > 0
               for d in docs for r in d["scenarios"]["launch_overhead"]["rows"] if r["status"] == "ok")


def test_a_planted_slowdown_on_the_candidate_alone_is_the_one_difference(tmp_path):
    # 100%: on CI's loaded 2 cores a smoke row's pairs spread so widely (a 30% plant measured +29.9% [-1.4%, +71.0%]
    # after 16 pairs, 12-06) that a smaller plant is a coin toss; the 15% plant's detection is a GPU must-show
    backend_or_skip("torch")
    r = _regress("--baseline-tree", str(ROOT), "--scenarios", "sync_points,launch_overhead", "--frameworks", "torch",
                 "--size", "smoke", "--seed", "3", "--pairs", "4", "--max-pairs", "16", "--quiet",
                 "--out", str(tmp_path), "--candidate-env", "TRIPTYCH_FAULT=launch_overhead:torch:slow100:eager")
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    different = [line for line in r.stdout.splitlines() if line.startswith("different")]
    assert len(different) == 1 and "launch_overhead  torch  eager" in different[0] and "SLOWER" in different[0], \
        r.stdout


def test_each_sides_processes_share_a_point_cache_of_their_own(monkeypatch):
    """A side's processes read a point's host inputs from one folder (as a compare run's do), the other side
    never from it; each folder is emptied after every point and removed with the run."""
    from harness.workers import point_cache

    seen: dict[str, set[str]] = {}
    found: list[tuple[str, list[str]]] = []  # (side, what its folder held) at each request
    cleared: list[str] = []
    real_clear = point_cache.clear
    monkeypatch.setattr(interleave.point_cache, "clear", lambda root=None: cleared.append(root) or real_clear(root))

    class CacheWorker(FakeWorker):
        def request(self, op, *args, **kw):
            if op == "time":
                folder = self.side.environ()[point_cache.ENV]
                seen.setdefault(self.side.name, set()).add(folder)
                found.append((self.side.name, sorted(os.listdir(folder))))
                Path(folder, f"{self.side.name}-point").mkdir(exist_ok=True)  # as a worker writes a point
            return super().request(op, *args, **kw)

    host = Host(1.0)
    sides = _sides()
    sched = Schedule(sides, ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: CacheWorker(fw, s, host))
    interleave.run(sched, Plan(["sync_points", "launch_overhead"], "smoke", 1, pairs=2, max_pairs=2))
    (base,), (cand,) = seen["baseline"], seen["candidate"]
    assert base != cand
    # per point, pairs A-B then B-A: each side's second process finds what its first wrote, never the other's
    assert found == [("baseline", []), ("candidate", []), ("candidate", ["candidate-point"]),
                     ("baseline", ["baseline-point"])] * 2
    assert cleared == [base, cand] * 2  # after each of the two points
    assert not os.path.exists(base) and not os.path.exists(cand) and all(not s.points for s in sides)


def test_real_workers_make_a_points_inputs_in_their_sides_cache(monkeypatch):
    backend_or_skip("torch")
    from harness.workers import point_cache

    held: list[list[str]] = []
    real_clear = point_cache.clear
    monkeypatch.setattr(interleave.point_cache, "clear",
                        lambda root=None: held.append(sorted(os.listdir(root))) or real_clear(root))
    sides = _sides()
    res = interleave.run(Schedule(sides, ["torch"], 120.0, world_size=2),
                         Plan(["launch_overhead"], "smoke", 3, pairs=2, max_pairs=2))
    assert res.rows and len(held) == 2, held  # one point, two sides
    assert all(len(names) == 1 and not names[0].startswith(".part") for names in held), held  # the point, whole
    assert held[0] == held[1]  # the same point's key: inputs made once on each side, in a folder of its own


def test_a_side_with_other_timing_settings_times_on_them_and_the_other_side_on_the_preset(monkeypatch):
    """--candidate-env TRIPTYCH_TIMING=...: the candidate's workers time on those settings (here 15 repeats a
    process) in every pair, also in the third and fourth, whose repeats are planned (here 5); the baseline's on
    the preset and the plan."""
    backend_or_skip("torch")
    monkeypatch.setattr(interleave.processes, "repeats_where_the_variance_is", lambda procs, lo, hi: 5)
    base, cand = _sides()
    cand.env = {"TRIPTYCH_TIMING": '{"min_repeats": 15, "max_repeats": 15}'}
    res = interleave.run(Schedule([base, cand], ["torch"], 120.0, world_size=2),
                         Plan(["launch_overhead"], "smoke", 3, pairs=4, max_pairs=4))
    counts = [[[p["n"] for p in r["timing"]["processes"]] for r in doc["scenarios"]["launch_overhead"]["rows"]
               if r["status"] == "ok"] for doc in res.docs]
    assert counts[1] and all(n == [15] * 4 for n in counts[1]), counts
    assert all(min(n[:2]) >= 5 and n[2:] == [5, 5] for n in counts[0]), counts


def _saying(hello: Callable[[Any], dict]) -> type:
    """A FakeWorker whose hello adds hello(worker) (what a tree's worker says of its TRIPTYCH_TIMING) and that counts
    the time requests it is asked (asked_to_time): a tree older or newer than this one, as its workers introduce it."""
    class Saying(FakeWorker):
        asked_to_time = 0

        def request(self, op, *args, **kw):
            Saying.asked_to_time += op == "time"
            out = super().request(op, *args, **kw)
            return out | hello(self) if op == "hello" else out

    return Saying


def test_a_side_whose_workers_ignore_its_timing_settings_fails_before_any_pair_is_timed():
    """An older tree's workers do not read TRIPTYCH_TIMING (their hello names none): its pairs would time on the
    preset while the run said otherwise, and a change of method would read as no change."""
    Older = _saying(lambda w: {"timing": w.side.env.get("TRIPTYCH_TIMING")} if w.fw == "torch"
                    and w.side.name == "baseline" else {})

    host = Host(1.0)
    base, cand = _sides()
    base.env = {"TRIPTYCH_TIMING": '{"warmup_s": 0}'}
    sched = Schedule([base, cand], ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Older(fw, s, host))
    assert interleave.run(sched, Plan(["launch_overhead"], "smoke", 1, pairs=2, max_pairs=2)).rows  # it reads it
    cand.env = {"TRIPTYCH_TIMING": '{"warmup_s": 0}'}  # an older candidate tree: it would not
    Older.asked_to_time = 0
    with pytest.raises(interleave.SideError, match="the candidate's workers \\(torch\\) do not time on its TRIPTYCH_TIMING"):
        interleave.run(sched, Plan(["launch_overhead"], "smoke", 1, pairs=2, max_pairs=2))
    assert Older.asked_to_time == 0


def test_a_side_whose_workers_do_not_take_a_timing_setting_fails_before_any_pair_is_timed():
    """A tree that reads TRIPTYCH_TIMING but predates a setting (its hello lists no timing_fields: it takes the older
    seven) would fail every request that names kernel_warm_s: refused before its pairs; a worker that lists it runs."""
    from harness.measure.timing import OVERRIDABLE

    fields: list[list[str]] = []  # what the workers' hello lists, once set
    Reads = _saying(lambda w: ({"timing": w.side.env.get("TRIPTYCH_TIMING")} if w.side.env else {})
                    | ({"timing_fields": fields[0]} if fields else {}))

    host = Host(1.0)
    base, cand = _sides()
    cand.env = {"TRIPTYCH_TIMING": '{"kernel_warm_s": 0.05, "warmup_s": 0}'}
    sched = Schedule([base, cand], ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Reads(fw, s, host))
    with pytest.raises(interleave.SideError, match="the candidate's torch workers do not take kernel_warm_s in its "
                                                   "TRIPTYCH_TIMING: a tree from before the setting"):
        interleave.run(sched, Plan(["launch_overhead"], "smoke", 1, pairs=2, max_pairs=2))
    assert Reads.asked_to_time == 0
    fields.append(list(OVERRIDABLE))
    assert interleave.run(sched, Plan(["launch_overhead"], "smoke", 1, pairs=2, max_pairs=2)).rows


def test_a_side_that_sets_the_host_loop_is_judged_plain_even_where_the_plan_reads_the_loop():
    """host_beside on one side ($TRIPTYCH_TIMING) makes the loop the change under test: a plan built in code that asks
    for the covariate gets every row judged plain, and says why, rather than a covariate one side lacks."""
    Reads = _saying(lambda w: ({"timing": w.side.env.get("TRIPTYCH_TIMING")} if w.side.env else {})
                    | {"timing_fields": ["host_beside"], "host_beside": "loop"})

    host = Host(1.0)
    base, cand = _sides()
    sched = Schedule([base, cand], ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Reads(fw, s, host))
    plan = Plan(["launch_overhead"], "smoke", 1, pairs=2, max_pairs=2, host_covariate=True)
    assert interleave.run(sched, plan).plain_why is None  # both sides time one loop: read as the covariate
    cand.env = {"TRIPTYCH_TIMING": '{"host_beside": true}'}
    res = interleave.run(sched, plan)
    assert res.rows and res.plain_why.startswith("the candidate's TRIPTYCH_TIMING sets host_beside"), res.plain_why


def test_a_side_is_a_folder_or_a_git_ref_checked_out_for_the_run(tmp_path):
    repo = tmp_path / "repo"
    (repo / "harness").mkdir(parents=True)
    (repo / "harness" / "worker.py").write_text("# v1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "v1: before the typed protocol"], check=True)
    with pytest.raises(interleave.SideError, match="predates the typed worker protocol"):
        with interleave.tree("HEAD", repo):
            pass
    with pytest.raises(interleave.SideError, match="predates the typed worker protocol"):
        with interleave.tree(str(repo), repo):
            pass
    (repo / "harness" / "worker.py").write_text("# v2\n")
    (repo / "harness" / "protocol.py").write_text("# v2\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "v2"], check=True)
    (repo / "harness" / "worker.py").write_text("# v3\n")
    with interleave.tree("HEAD", repo) as (where, label):
        assert (Path(where) / "harness" / "worker.py").read_text() == "# v2\n" and label.startswith("HEAD (")
    assert not Path(where).exists()
    assert len(subprocess.run([*git, "worktree", "list"], capture_output=True, text=True).stdout.splitlines()) == 1
    with interleave.tree(str(repo), repo) as (where, _):
        assert where == str(repo)
    with pytest.raises(interleave.SideError, match="neither a folder nor a git ref"):
        with interleave.tree("no-such-ref", repo):
            pass


def test_usage_errors():
    r = _regress("--baseline", "x.json", "--baseline-tree", "HEAD")
    assert r.returncode == 2 and "drop --baseline" in r.stderr
    r = _regress("--candidate-tree", "HEAD")
    assert r.returncode == 2 and "needs --baseline-tree or --baseline-python" in r.stderr
    r = _regress("--baseline-tree", ".", "--candidate-env", "TRIPTYCH_FAULT=*:torch:melt")
    assert r.returncode == 2 and "--candidate-env TRIPTYCH_FAULT: unknown kind 'melt'" in r.stderr, r.stderr
    small = ("--scenarios", "launch_overhead", "--frameworks", "torch", "--size", "smoke", "--pairs", "2",
             "--max-pairs", "2")  # were the check gone, a short run and not a refusal
    r = _regress("--baseline-tree", ".", *small, env={"TRIPTYCH_FAULT": "launch_overhead:torch:slow30:eager"})
    assert r.returncode == 2 and "$TRIPTYCH_FAULT is set here and would reach both sides alike" in r.stderr, r.stderr
    r = _regress("--baseline-tree", ".", *small, env={"TRIPTYCH_FAULT_RANK": "1"})
    assert r.returncode == 2 and "pass it with --candidate-env" in r.stderr, r.stderr
    r = _regress("--baseline-tree", ".", *small, "--candidate-env", 'TRIPTYCH_TIMING={"warmup": 0.5}')
    assert r.returncode == 2 and "--candidate-env $TRIPTYCH_TIMING: warmup must be a whole number" in r.stderr, r.stderr
    r = _regress("--baseline-tree", ".", *small, "--candidate-env", 'TRIPTYCH_TIMING={"min_repeats": 30}')
    assert r.returncode == 2 and "makes a timing that cannot run" in r.stderr, r.stderr  # smoke: 20 repeats at most
    r = _regress("--baseline-tree", ".", *small, "--baseline-env", 'TRIPTYCH_TIMING={"kernel_warm_s": 0.05}')
    assert r.returncode == 2 and "--baseline-env TRIPTYCH_TIMING: kernel_warm_s changes the traced kernel clock, " \
        "which this run traces only with --clock kernel" in r.stderr, r.stderr  # it would change nothing
    r = _regress("--baseline-tree", ".", *small, "--clock", "kernel", "--candidate-env", 'TRIPTYCH_TIMING={"kernel_warm_s": 9}')
    assert r.returncode == 2 and "kernel_warm_s must be at most 1 s" in r.stderr, r.stderr
    r = _regress("--baseline-tree", ".", *small, "--turns", "call", "--baseline-env", 'TRIPTYCH_TIMING={"warmup_s": 0}')
    assert r.returncode == 2 and "--baseline-env TRIPTYCH_TIMING: with --turns call" in r.stderr, r.stderr
    r = _regress("--baseline-tree", ".", *small, env={"TRIPTYCH_TIMING": '{"warmup_s": 0}'})
    assert r.returncode == 2 and "$TRIPTYCH_TIMING is set here" in r.stderr, r.stderr
    r = _regress("--baseline-python", "/no/such/python")
    assert r.returncode == 2 and "/no/such/python: cannot run it" in r.stderr, r.stderr
    r = _regress("--baseline-tree", "no-such-ref-or-folder")
    assert r.returncode == 2 and "neither a folder nor a git ref" in r.stderr, r.stderr


def test_a_sides_rank_groups_start_with_its_interpreter_tree_and_environment(tmp_path):
    sides = [Side("baseline", str(tmp_path), "/opt/py-a/bin/python", {"TRIPTYCH_FAULT": "x"}),
             Side("candidate", str(ROOT), sys.executable)]
    groups = interleave.SideGroups(sides, ["torch"], 2, 60.0)
    a, b = groups.make_group("torch", 0), groups.make_group("torch", 1)
    none = {"TRIPTYCH_COMPILE_CACHE": ""}  # no compiled programs shared within a side (interleave.side_caches)
    assert (a.python, a.cwd, a.env) == ("/opt/py-a/bin/python", str(tmp_path),
                                        {"PYTHONPATH": str(tmp_path), "TRIPTYCH_FAULT": "x"} | none)
    assert (b.python, b.cwd, b.env) == (sys.executable, str(ROOT), {"PYTHONPATH": str(ROOT)} | none)
    from harness.workers.ranks import RankGroup

    assert RankGroup.python == sys.executable and RankGroup.env == {} and RankGroup.cwd is None
    assert a.rank_main == b.rank_main == RankGroup.rank_main == "harness.workers.rank_main"


def test_a_side_from_before_the_stage_packages_runs_its_own_flat_workers(tmp_path):
    """A tree whose worker modules are harness/worker.py, protocol.py, rank_main.py (the same protocol, before
    harness/workers/) is driven through those: its rank groups run harness.rank_main, its workers harness.worker."""
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "protocol.py").write_text("")
    side = Side("baseline", str(tmp_path), sys.executable)
    assert interleave.SideGroups([side], ["torch"], 2, 60.0).make_group("torch", 0).rank_main == "harness.rank_main"
    assert interleave._workers(tmp_path) == "harness" and interleave._workers(ROOT) == "harness.workers"
    assert "from harness.worker import _serve" in interleave._CHILD.format(workers=interleave._workers(tmp_path))


def test_host_covariate_asks_for_the_loop_before_each_repeat_where_both_sides_time_one_loop():
    """The host's loop just before each repeat (TimingConfig.host_beside) is asked for with --host-covariate alone
    (it costs each repeat two short loops), and only where every worker's hello names one and the same loop at one
    place (harness/measure/timing.py loop_identity): an older tree's worker names none, and its TimingConfig has no
    such field, so it is sent the wire it reads; a tree that changed the loop names another."""
    from harness.measure.timing import preset
    from harness.regress.view import render_paired
    from harness.workers.protocol import Request

    seen: list[bool] = []

    def run(covariate: bool, loops: dict[str, str | None]) -> list[bool]:
        seen.clear()
        host = Host(1.0)

        class Asked(FakeWorker):
            def request(self, op, *args, **kw):
                out = super().request(op, *args, **kw)
                if op == "hello" and loops[self.side.name]:
                    out["host_beside"] = loops[self.side.name]
                if op == "time":
                    seen.append(args[2].host_beside)
                return out

        logged: list[str] = []
        sched = Schedule(_sides(), ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Asked(fw, s, host),
                         log=logged.append)
        plan = Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=2, host_covariate=covariate)
        res = interleave.run(sched, plan)
        assert seen, "no time request"
        assert covariate == any("judged plain" in line for line in logged) or all(seen), logged
        # the run as judged: its files and its header say whether the rows were read at equal host speeds
        said: list[str] = []
        render_paired(res, _sides(), plan, said.append)
        assert all(d["interleaved"]["host_covariate"] is (covariate and all(seen)) for d in res.docs)
        assert ("at equal host speeds (--host-covariate)" in said[1]) is (covariate and all(seen)), said[1]
        assert ("do not time one loop" in said[1]) is (covariate and not all(seen)), said[1]
        return list(seen)

    one = {"baseline": "loop-a", "candidate": "loop-a"}
    assert all(run(True, one)) and not any(run(False, one))
    assert not any(run(True, {"baseline": "loop-a", "candidate": "loop-b"}))
    assert not any(run(True, {"baseline": "loop-a", "candidate": None}))
    assert "host_beside" not in Request.make("time", "torch", "sync_points", {}, preset("full")).to_dict()["timing"]
    on = Request.make("time", "torch", "sync_points", {}, replace(preset("full"), host_beside=True)).to_dict()
    assert Request.from_dict(on).timing.host_beside is True


def test_a_row_without_a_p_value_does_not_poison_the_others():
    from harness.regress.regress import bh_adjust

    q = bh_adjust([0.001, float("nan"), 0.002])
    assert q[1] == 1.0 and q[0] <= 0.003 and q[2] <= 0.003, q


def test_a_run_judged_on_another_clock_asks_for_no_traced_kernel_clock_where_both_sides_can_leave_it_out():
    """The traced kernel clock cost 7-10 s a JAX point of an H100 regress (results/journal.md, 2026-12-06
    evening), none of it read where the run judges device_done: it is left out where every worker's hello
    says it can be, and kept for --clock kernel and for a side whose workers predate the option."""
    seen: list[bool] = []

    def run(clock: str, optional: bool) -> list[bool]:
        seen.clear()
        host = Host(1.0)

        class Asked(FakeWorker):
            def request(self, op, *args, **kw):
                out = super().request(op, *args, **kw)
                if op == "hello" and optional:
                    out["kernel_optional"] = True
                if op == "time":
                    seen.append(args[2].kernel_clock)
                return out

        sched = Schedule(_sides(), ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Asked(fw, s, host))
        interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=2, clock=clock))
        return list(seen)

    assert run("device_done", True) and not any(run("device_done", True))
    assert all(run("kernel", True)) and all(run("device_done", False))
