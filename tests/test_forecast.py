"""The interleaved regress's forecast (harness/regress/forecast.py): before the pairs start, what the budget buys
and what change those pairs can find, from the newest earlier result of the same scenarios on the same GPU."""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from harness.regress import forecast
from harness.regress.regress import detectable
from harness.run import interleave
from harness.run.interleave import Plan, Schedule
from tests.synthetic import doc, row, samples, write
from tests.test_interleaved_regress import FakeWorker, Host, _sides

H100 = "NVIDIA H100 80GB HBM3"


def _result(gpu: str | None, size: str, processes: int = 4, wall: float = 20.0, spread: float = 0.01,
            created: str = "2026-12-01T00:00:00+00:00") -> dict:
    """A compare result of sync_points (every variant of torch and jax), each row in `processes` processes
    whose medians differ by `spread` on the log scale, its timing phase `wall` seconds."""
    from scenarios import get

    rng = np.random.default_rng(7)
    rows = []
    for fw in ("torch", "jax"):
        for v in get("sync_points").variants:
            times = [x * math.exp(rng.normal(0, spread)) for _ in range(processes)
                     for x in samples(1e-3, 0.001, 10, seed=int(rng.integers(1 << 30)))]
            rows.append(row(fw, v.name, times, scenario="sync_points", processes=processes))
    d = doc(rows, gpu=gpu, size=size, created=created)
    d["scenarios"]["sync_points"]["timing_phase"] = {"wall_s": wall, "timed_s": wall / 2, "share": 0.5}
    d["command"] = ["python -m harness", "compare"]
    return d


def test_the_newest_result_of_this_gpu_and_size_with_every_row_in_two_processes_is_the_one(tmp_path):
    write(_result(H100, "full"), tmp_path / "20261201T000000Z_nvidia-h100-80gb-hbm3_full.json")
    write(_result("NVIDIA H200", "full"), tmp_path / "20261203T000000Z_nvidia-h200_full.json")  # another GPU
    write(_result(H100, "smoke"), tmp_path / "20261203T000000Z_nvidia-h100-80gb-hbm3_smoke.json")  # another size
    write(_result(H100, "full", processes=1), tmp_path / "20261202T000000Z_nvidia-h100-80gb-hbm3_full.json")
    (tmp_path / "20261204T000000Z_nvidia-h100-80gb-hbm3_full.json").write_text("{not json")  # damaged: passed over
    side = _result(H100, "full") | {"command": ["python -m harness", "regress", "--baseline-tree", "main"]}
    write(side, tmp_path / "20261205T000000Z_nvidia-h100-80gb-hbm3_full.json")  # a regress's side file: not a compare
    found = forecast.earlier([tmp_path, tmp_path / "absent"], ["sync_points"], ["torch", "jax"], "full", H100)
    assert found is not None and found[0].name == "20261201T000000Z_nvidia-h100-80gb-hbm3_full.json"
    assert forecast.earlier([tmp_path], ["sync_points"], ["torch", "cupy"], "full", H100) is None  # no cupy rows
    assert forecast.earlier([tmp_path], ["launch_overhead"], ["torch"], "full", H100) is None
    assert forecast.earlier([tmp_path], ["event_sync"], [], "full", H100) is None  # no framework: no rows to go by
    assert forecast.gpu_slug(H100) == "nvidia-h100-80gb-hbm3" and forecast.gpu_slug(None) == "cpu"


def test_the_budget_buys_whole_pairs_of_both_sides_processes_and_a_share_of_each_stages_start(tmp_path):
    path = write(_result(H100, "full", processes=4, wall=40.0), tmp_path / "20261201T000000Z_nvidia-h100-80gb-hbm3_full.json")
    found = forecast.earlier([tmp_path], ["sync_points"], ["torch", "jax"], "full", H100)
    plan = SimpleNamespace(max_pairs=12, budget_s=600.0, threshold=0.10, clock="device_done")
    f = forecast.forecast(found, ["sync_points"], ["torch", "jax"], plan, start_s=10.0, added=2, fdr=0.01)
    assert f.pair_s == pytest.approx(2 * 40.0 / 4)  # a process of each side: the phase over its 4 processes
    assert f.pairs == 12  # 600 s // 25 s a pair is 24: capped by max_pairs
    f = forecast.forecast(found, ["sync_points"], ["torch", "jax"], SimpleNamespace(**{**vars(plan), "budget_s": 100.0}),
                          start_s=10.0, added=2, fdr=0.01)
    assert f.pairs == 4  # 100 s // 25 s
    assert f.rows == len(found[1].scenarios["sync_points"].rows) and str(path) == f.source
    lines = forecast.render(f)
    assert "buys about 4 pair(s)" in lines[0] and lines[0].startswith("forecast from 20261201T000000Z")
    note = ("forecast: counted with the plain paired test; from 6 pairs on, --host-covariate may narrow the intervals "
            "of rows that the host's speed moves")  # a forecast cannot fit the loop: it says so, where it can apply
    covariate = SimpleNamespace(**{**vars(plan), "host_covariate": True})
    assert note not in lines and note not in forecast.render(forecast.forecast(
        found, ["sync_points"], ["torch", "jax"], SimpleNamespace(**{**vars(covariate), "budget_s": 100.0}),
        start_s=10.0, added=2, fdr=0.01))  # 4 pairs: the covariate never applies
    assert note in forecast.render(forecast.forecast(found, ["sync_points"], ["torch", "jax"], covariate, start_s=10.0,
                                                     added=2, fdr=0.01))  # 12 pairs


def test_the_forecast_change_is_the_one_judge_pairs_would_find_at_that_spread():
    """change_at(process spread s, n pairs) is regress.detectable on n pairs whose log ratios spread sqrt(2) s:
    the forecast and the run's own power line use one rule."""
    rng = np.random.default_rng(3)
    for n, s in ((4, 0.02), (8, 0.05), (12, 0.01)):
        x = rng.normal(0, 1, n)
        x = (x - x.mean()) / x.std(ddof=1) * math.sqrt(2) * s  # log ratios of exactly that spread
        assert forecast.change_at(s, n, 1e-3, 0.10) == pytest.approx(detectable([1.0] * n, np.exp(x).tolist(), 0.10, 1e-3))
    assert forecast.change_at(0.05, 1, 1e-3, 0.10) == math.inf
    assert forecast.change_at(1e-4, 6, 1e-3, 0.10) == pytest.approx(0.10)  # never below the effect floor
    for n in (6, 12):  # equal ratios: judge_pairs' sign test, as detectable has it
        assert forecast.change_at(0.0, n, 1e-3, 0.10) == detectable([1.0] * n, [1.0] * n, 0.10, 1e-3)
    got = [forecast.change_at(0.05, n, 1e-4, 0.10) for n in range(2, 16)]
    assert all(a >= b for a, b in zip(got, got[1:])) and got[0] > got[-1]  # more pairs, a smaller change


def test_wider_spreads_between_processes_make_fewer_rows_able_to_find_the_threshold(tmp_path):
    found = {}
    for spread in (0.005, 0.2):
        folder = tmp_path / str(spread)
        write(_result(H100, "full", spread=spread), folder / "20261201T000000Z_nvidia-h100-80gb-hbm3_full.json")
        found[spread] = forecast.earlier([folder], ["sync_points"], ["torch", "jax"], "full", H100)
    plan = SimpleNamespace(max_pairs=8, budget_s=None, threshold=0.10, clock="device_done")
    tight, wide = (forecast.forecast(found[s], ["sync_points"], ["torch", "jax"], plan, 5.0, 2, 0.01) for s in (0.005, 0.2))
    assert tight.pairs == wide.pairs == 8 and tight.could == tight.rows and wide.could == 0
    assert wide.median_change > 0.10 and tight.median_change == pytest.approx(0.10)
    assert any("fewer scenarios" in line for line in forecast.render(wide))
    assert not any("fewer scenarios" in line for line in forecast.render(tight))


def _logged_run(history: tuple[Path, ...], max_pairs: int = 2) -> list[str]:
    host, said = Host(1.0), []

    class Logged(FakeWorker):
        def request(self, op, *args, **kw):
            if op == "time":
                said.append("<timed>")
            return super().request(op, *args, **kw)

    sched = Schedule(_sides(), ["torch"], 60.0, world_size=2, make_worker=lambda fw, s, *_: Logged(fw, s, host),
                     log=said.append)
    interleave.run(sched, Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=max_pairs, budget_s=300.0,
                               history=history))
    return said


def test_the_run_says_its_forecast_before_the_first_point_is_timed(tmp_path):
    write(_result(None, "smoke", wall=2.0), tmp_path / "20261201T000000Z_cpu_smoke.json")
    said = _logged_run((tmp_path,))
    first = next(i for i, t in enumerate(said) if t.startswith("forecast from 20261201T000000Z_cpu_smoke.json"))
    assert first < said.index("<timed>")
    assert any(t.startswith("forecast: at ") and "pairs a 10% change could be called different in" in t for t in said)
    said = _logged_run((tmp_path / "absent",))
    assert any(t.startswith("forecast: no earlier smoke result of these scenarios on this machine") for t in said)


def test_with_nothing_to_go_by_the_run_says_what_its_budget_buys_after_its_first_pairs(tmp_path):
    """No earlier result: the forecast comes from the first stage's own price and spreads, before any added pair,
    and only where pairs could be added."""
    said = _logged_run((tmp_path / "absent",), max_pairs=6)
    first = next(i for i, t in enumerate(said) if t.startswith("forecast from this run's first 2 pairs: a pair takes"))
    assert said.index("<timed>") < first  # after the first stage's requests
    assert any(t.startswith("forecast: at ") for t in said[first:])
    later = [i for i, t in enumerate(said) if "pair 3" in t]
    assert not later or first < later[0]
    assert not any("this run's first" in t for t in _logged_run((tmp_path / "absent",), max_pairs=2))


def test_the_first_pairs_forecast_prices_a_pair_by_the_stage_and_spreads_by_both_sides():
    plan = Plan(["sync_points"], "smoke", 1, pairs=2, max_pairs=10, budget_s=100.0)
    e = math.exp
    # two rows: one spread 0.1 on the log scale on both sides, one quiet; a stage of 2 pairs took 26 s, 6 s starting
    rows = [[[1.0, e(0.1 * math.sqrt(2))], [2.0, 2.0 * e(0.1 * math.sqrt(2))]], [[1.0, 1.0], [1.0, 1.0 + 1e-9]]]
    f = forecast.from_first_pairs(rows, 2, 26.0, 6.0, plan, 2, 0.05)
    assert f.pair_s == pytest.approx(10.0) and f.pairs == 7  # 100 s // (10 + 6 / 2)
    assert f.rows == 2 and f.source == "this run's first 2 pairs"
    alpha = 0.05 / 2
    assert f.could == sum(forecast.change_at(s, 7, alpha, 0.10) <= 0.10 for s in (0.1, 0.0))
    # one row whose sides spread 0.1 and 0.2: its spread is the root of their mean variance
    one = forecast.from_first_pairs([[[1.0, e(0.1 * math.sqrt(2))], [1.0, e(0.2 * math.sqrt(2))]]], 2, 26.0, 6.0,
                                    plan, 2, 0.05)
    assert one.median_change == pytest.approx(forecast.change_at(math.sqrt(0.025), 7, 0.05, 0.10))


def test_a_pair_is_priced_by_the_running_frameworks_requests_after_the_first_process(tmp_path):
    """The earlier run's round trips per framework and point, its later processes' (the first also counts syncs
    and traces timelines); a regress of torch alone pays torch's requests, not the phase of all three."""
    d = _result(H100, "full", processes=3)
    for r in d["scenarios"]["sync_points"]["rows"]:
        for i, p in enumerate(r["timing"]["processes"]):
            p["request_s"] = {"torch": 1.0, "jax": 9.0}[r["framework"]] * (5 if i == 0 else 1)
    write(d, tmp_path / "20261201T000000Z_nvidia-h100-80gb-hbm3_full.json")
    found = forecast.earlier([tmp_path], ["sync_points"], ["torch"], "full", H100)
    assert forecast.side_process_s(found[1], ["sync_points"], ["torch"]) == pytest.approx(1.0)
    assert forecast.side_process_s(found[1], ["sync_points"], ["torch", "jax"]) == pytest.approx(10.0)
    for r in d["scenarios"]["sync_points"]["rows"]:
        r["timing"]["kernel_source"] = "jax.profiler (CUPTI span)" if r["framework"] == "jax" else "CUDA events"
    write(d, tmp_path / "20261202T000000Z_nvidia-h100-80gb-hbm3_full.json")
    found = forecast.earlier([tmp_path], ["sync_points"], ["torch", "jax"], "full", H100)
    plan = SimpleNamespace(max_pairs=8, budget_s=100.0, threshold=0.10, clock="device_done")
    assert forecast.forecast(found, ["sync_points"], ["torch", "jax"], plan, 4.0, 2, 0.01, traced=False).upper
    assert not forecast.forecast(found, ["sync_points"], ["torch"], plan, 4.0, 2, 0.01, traced=False).upper
    assert not forecast.forecast(found, ["sync_points"], ["torch", "jax"], plan, 4.0, 2, 0.01, traced=True).upper


def test_a_regress_that_reads_no_kernel_clock_is_priced_without_the_earlier_runs_traces(tmp_path):
    """A result that kept each request's traced kernel clock (kernel_s) prices a pair without it for a regress that
    reads none, and says "about"; one written before it was kept can only say "at most". On the H100 the forecast
    said "at most 125 s" a pair, and pairs took 40-80 s (results/journal.md)."""
    d = _result(H100, "full", processes=3)
    for r in d["scenarios"]["sync_points"]["rows"]:
        r["timing"]["kernel_source"] = "jax.profiler (CUPTI span)" if r["framework"] == "jax" else "CUDA events"
        for p in r["timing"]["processes"]:
            p["request_s"] = {"torch": 1.0, "jax": 9.0}[r["framework"]]
            if r["framework"] == "jax":
                p["kernel_s"] = 6.0
    write(d, tmp_path / "20261203T000000Z_nvidia-h100-80gb-hbm3_full.json")
    found = forecast.earlier([tmp_path], ["sync_points"], ["torch", "jax"], "full", H100)
    both = ["torch", "jax"]
    assert forecast.side_process_s(found[1], ["sync_points"], both, traced=False) == pytest.approx(4.0)
    assert forecast.side_process_s(found[1], ["sync_points"], both, traced=True) == pytest.approx(10.0)
    plan = SimpleNamespace(max_pairs=8, budget_s=100.0, threshold=0.10, clock="device_done")
    f = forecast.forecast(found, ["sync_points"], both, plan, 4.0, 2, 0.01, traced=False)
    assert not f.upper and f.pair_s == pytest.approx(8.0) and "about 8 s" in forecast.render(f)[0]


def test_a_forecast_that_cannot_be_made_is_a_line_not_a_failed_run(tmp_path, monkeypatch):
    write(_result(None, "smoke", wall=2.0), tmp_path / "20261201T000000Z_cpu_smoke.json")
    monkeypatch.setattr(forecast, "side_process_s", lambda *a: 1 / 0)
    said = _logged_run((tmp_path,))
    assert any(t.startswith("forecast: 20261201T000000Z_cpu_smoke.json gives none: ZeroDivisionError") for t in said)
    assert "<timed>" in said
