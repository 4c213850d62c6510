"""Regression runs: timing changes judged against the runs' own spread, numerical changes, status
changes, comparability, and the command line end to end on real runs."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.measure.noise import ratio_ci_bootstrap
from harness.regress.regress import regress
from harness.regress.regress import RegressError, judge_timing, ratio_ci_iqr
from harness.results.model import Stats
from tests.conftest import backend_or_skip
from tests.synthetic import doc, load, row, samples, write

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(ROOT)) | (env or {})
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          env=e, timeout=600)


def one(base_times, cand_times, **kw):
    res = regress(doc([row("torch", "async", base_times)]), doc([row("torch", "async", cand_times)]), **kw)
    assert len(res.rows) == 1, res.not_comparable
    return res.rows[0]


# -- timing ---------------------------------------------------------------------------------------


def test_a_clear_slowdown_is_a_regression_and_a_speedup_an_improvement():
    r = one(samples(1e-3, seed=1), samples(1.3e-3, seed=2))
    assert r.verdict == "regression" and r.timing == "regression" and r.method == "processes"
    assert 1.25 < r.ratio < 1.35 and 1.1 < r.lo < r.ratio < r.hi
    r = one(samples(1e-3, seed=1), samples(0.7e-3, seed=2))
    assert r.verdict == "improvement" and r.hi < 1 / 1.1


def test_the_same_distribution_is_unchanged():
    r = one(samples(1e-3, seed=1), samples(1e-3, seed=2))
    assert r.verdict == "unchanged" and r.lo < 1 < r.hi


def test_a_change_hidden_in_noise_is_noisy_not_a_regression():
    r = one(samples(1e-3, spread=0.3, n=8, seed=1), samples(1.3e-3, spread=0.3, n=8, seed=2))
    assert r.verdict == "noisy" and r.lo < 1.1 and r.hi / r.lo > 1.1


def test_the_threshold_decides():
    base, cand = samples(1e-3, seed=1), samples(1.16e-3, seed=2)
    assert one(base, cand, threshold=0.10).verdict == "regression"
    assert one(base, cand, threshold=0.25).verdict == "unchanged"


def test_files_without_samples_fall_back_to_the_iqr():
    base = doc([row("torch", "async", samples(1e-3, seed=1), keep_samples=False)])
    cand = doc([row("torch", "async", samples(1.3e-3, seed=2), keep_samples=False)])
    (r,) = regress(base, cand).rows
    assert r.method == "iqr" and r.verdict == "regression"


def test_the_bootstrap_interval_covers_the_truth():
    """Over many pairs of runs with a known 20% slowdown, the 90% interval holds 1.2 about 90% of
    the time (and never judges the same distribution a regression)."""
    hits = false_alarms = 0
    for i in range(60):
        b, c = np.asarray(samples(1.0, 0.05, 30, seed=2 * i)), np.asarray(samples(1.2, 0.05, 30, seed=2 * i + 1))
        _, lo, hi = ratio_ci_bootstrap(b, c, 0.90, resamples=1000, seed=i)
        hits += lo <= 1.2 <= hi
        _, lo, hi = ratio_ci_bootstrap(b, np.asarray(samples(1.0, 0.05, 30, seed=1000 + i)), 0.90, resamples=1000)
        false_alarms += judge_timing(lo, hi, 0.10) == "regression"
    assert 0.75 <= hits / 60 <= 1.0 and false_alarms == 0


def test_the_iqr_interval_is_infinite_with_one_repeat():
    st = {"median": 1.0, "q1": 1.0, "q3": 1.0, "n": 1}
    assert ratio_ci_iqr(Stats.from_dict(st), Stats.from_dict(st | {"median": 2.0}), 0.95)[2] == float("inf")
    assert judge_timing(0.0, float("inf"), 0.1) == "noisy"


def test_unchanged_rules_a_change_of_the_threshold_out_both_ways():
    assert judge_timing(0.95, 1.05, 0.10) == "unchanged"
    assert judge_timing(0.92, 1.08, 0.10) == "unchanged"  # wider than the threshold, yet within it both ways
    assert judge_timing(1.07, 1.17, 0.10) == "noisy"  # past the threshold on one side: not ruled out
    assert judge_timing(0.86, 0.93, 0.10) == "noisy"
    assert judge_timing(1.11, 1.20, 0.10) == "regression" and judge_timing(0.80, 0.90, 0.10) == "improvement"
    assert judge_timing(float("nan"), float("nan"), 0.10) == "noisy"  # a bootstrap over zero medians


def test_file_regress_shows_the_figure_its_ratio_is_of_and_a_zero_one_is_not_compared():
    from harness.measure.noise import row_median, split

    t = [1e-3] * 20 + [2e-3] * 10  # two processes of 15: medians 1 and 2 ms, the pooled repeats' 1 ms
    (r,) = regress(doc([row("torch", "async", t)]), doc([row("torch", "async", t)])).rows
    assert r.base_s == pytest.approx(row_median(split(t, [15, 15]))) == pytest.approx(1.5e-3)
    zero = [0.0, 0.0, 0.0, 1e-3, 1e-3] * 2 + [1e-3] * 5  # the pooled median 1 ms, the processes' 0, 0, 1 ms
    with pytest.raises(RegressError, match="a zero device_done median"):  # not a ZeroDivisionError
        regress(doc([row("torch", "async", zero, processes=3)]), doc([row("torch", "async", t[:15], processes=3)]))


# -- numbers and status ---------------------------------------------------------------------------


def test_a_larger_numerical_error_is_a_regression():
    t = samples(1e-3)
    res = regress(doc([row("torch", "async", t, err=1e-6)]), doc([row("torch", "async", t, err=1e-4)]))
    (r,) = res.rows
    assert r.verdict == "regression" and r.numbers == "worse" and r.why == ["numbers"]
    # within the factor, or far below the dtype's tolerance: the same
    assert regress(doc([row("torch", "async", t, err=1e-6)]),
                   doc([row("torch", "async", t, err=1.5e-6)])).rows[0].numbers == "same"
    assert regress(doc([row("torch", "async", t, err=1e-9)]),
                   doc([row("torch", "async", t, err=1e-8)])).rows[0].numbers == "same"  # rtol 1e-4 (float32)


def test_numbers_are_judged_only_on_the_same_inputs():
    t = samples(1e-3)
    (r,) = regress(doc([row("torch", "async", t, err=1e-6)], seed=1),
                   doc([row("torch", "async", t, err=1e-3)], seed=2)).rows
    assert r.numbers == "" and r.verdict == "unchanged"


def test_numbers_are_judged_only_against_the_reference():
    """A variant checked against its framework's baseline output (no reference at the size) measures its
    distance from an output that moves too: JAX's data_parallel went from 0.0092 to 7.8e-5 between two runs
    of one commit and seed on the H200 (2026-12-03). Its numbers are not judged; its status still is."""
    t = samples(1e-3)
    base, cand = row("torch", "async", t, err=9.2e-3), row("torch", "async", t, err=7.8e-5)
    for r in (base, cand):
        r["check"]["against"] = "baseline"
    (r,) = regress(doc([base]), doc([cand])).rows
    assert r.numbers == "" and r.verdict == "unchanged"
    cand = row("torch", "async", t, status="wrong")
    cand["check"]["against"] = "baseline"
    assert regress(doc([base]), doc([cand])).rows[0].verdict == "regression"


def test_outputs_that_became_wrong_are_a_regression():
    t = samples(1e-3)
    (r,) = regress(doc([row("torch", "async", t)]), doc([row("torch", "async", t, status="wrong")])).rows
    assert r.verdict == "regression" and "ok → wrong" in r.status


def test_status_changes():
    t = samples(1e-3)
    res = regress(
        doc([row("torch", "sync_each", t), row("torch", "async", status="error"), row("torch", "async_poll", t),
             row("jax", "async", status="timeout"), row("jax", "sync_each", status="skipped")]),
        doc([row("torch", "sync_each", status="oom", reason="CUDA out of memory"), row("torch", "async", t),
             row("torch", "async_poll", status="skipped", reason="no GPU"), row("jax", "async", status="crashed"),
             row("jax", "sync_each", status="skipped")]))
    by = {(r.framework, r.variant): r for r in res.rows}
    assert by[("torch", "sync_each")].verdict == "regression" and "CUDA out of memory" in by[("torch", "sync_each")].status
    assert by[("torch", "async")].verdict == "improvement"
    why = dict(res.not_comparable)
    assert why["async_dispatch/torch/async_poll"].startswith("skipped in the candidate: no GPU")
    assert why["async_dispatch/jax/async"].startswith("failed in both (timeout, crashed)")
    assert why["async_dispatch/jax/sync_each"].startswith("skipped in both")


# -- comparability ---------------------------------------------------------------------------------


def test_different_gpus_compare_nothing():
    with pytest.raises(RegressError, match="baseline ran on NVIDIA H200, the candidate on no GPU"):
        regress(doc([row("torch", "async")], gpu="NVIDIA H200"), doc([row("torch", "async")]))


def test_the_code_versions_are_named_when_they_differ():
    base, cand = doc([row("torch", "async")]), doc([row("torch", "async")])
    base["environment"]["host"]["code"] = "1bbee5612345"
    cand["environment"]["host"]["code"] = "8514bbb12345+dirty"
    assert "triptych code 1bbee5612345 → 8514bbb12345+dirty" in regress(base, cand).notes
    cand["environment"]["host"]["code"] = "1bbee5612345"
    assert not any("triptych code" in n for n in regress(base, cand).notes)


def test_a_side_file_of_an_interleaved_regress_says_what_was_planted_or_changed_on_it():
    """A side file read as a result names the fault or the timing settings its side ran with (--candidate-env):
    a planted slowdown or a shorter warm-up must not read as the code's own figures."""
    base, cand = doc([row("torch", "async")]), doc([row("torch", "async")])
    cand["interleaved"] = {"side": "candidate", "code": ".", "python": "python3",
                           "env": {"TRIPTYCH_FAULT": "async_dispatch:torch:slow15:async", "OTHER": "1"}}
    base["interleaved"] = {"side": "baseline", "code": ".", "python": "python3", "env": {}}
    (note,) = [n for n in regress(base, cand).notes if "interleaved" in n]
    assert note.startswith("candidate: one side (candidate) of an interleaved regress, timed with "
                           "TRIPTYCH_FAULT=async_dispatch:torch:slow15:async:") and "OTHER" not in note, note
    base["interleaved"]["env"] = {"TRIPTYCH_TIMING": '{"warmup_s": 0}'}
    assert any(n.startswith('baseline: one side (baseline) of an interleaved regress, timed with '
                            'TRIPTYCH_TIMING={"warmup_s": 0}') for n in regress(base, cand).notes)


def test_a_copied_tree_states_its_commit(monkeypatch):
    from harness.measure.machine import code_version

    monkeypatch.setenv("TRIPTYCH_CODE", "04bc676abcde")
    assert code_version() == "04bc676abcde"


def test_host_env_names_the_commit_it_ran(monkeypatch):
    from harness.measure.machine import code_version

    monkeypatch.delenv("TRIPTYCH_CODE", raising=False)

    if not (ROOT / ".git").exists():
        assert code_version() is None
        return
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    if not head:  # git refuses this tree (not installed, or another owner): the code is unknown
        assert code_version() is None
        return
    assert code_version().split("+")[0] == head


def test_a_framework_version_change_is_said_and_its_rows_left_out_unless_asked():
    t = samples(1e-3)
    base = doc([row("torch", "async", t), row("jax", "async", t)], versions={"torch": "2.11.0"}, driver="570.1")
    cand = doc([row("torch", "async", samples(2e-3)), row("jax", "async", t)], versions={"torch": "2.12.0"},
               driver="575.2")
    res = regress(base, cand)
    assert [r.framework for r in res.rows] == ["jax"]
    assert ("async_dispatch/torch/async", "torch 2.11.0 → 2.12.0") in res.not_comparable
    assert any("driver 570.1 → 575.2" in n for n in res.notes)
    assert any("torch 2.11.0 → 2.12.0: its rows are not compared" in n for n in res.notes)
    res = regress(base, cand, across_versions=True)
    assert {r.framework: r.verdict for r in res.rows} == {"torch": "regression", "jax": "unchanged"}


def test_rows_at_other_params_or_only_in_one_file_are_listed():
    t = samples(1e-3)
    base = doc([row("torch", "async", t), row("torch", "sync_each", t)])
    cand = doc([row("torch", "async", t), row("jax", "async", t)])
    res = regress(base, cand)
    nc = dict(res.not_comparable)
    assert nc["async_dispatch/torch/sync_each"].startswith("not in the candidate")
    assert nc["async_dispatch/jax/async"] == "not in the baseline"
    with pytest.raises(RegressError, match="nothing comparable"):
        regress(base, doc([row("torch", "async", t)], params={"m": 128, "n": 32, "steps": 4, "dtype": "float32"}))


def test_filters():
    t = samples(1e-3)
    d = doc([row("torch", "async", t), row("jax", "async", t), row("torch", "sync_each", t)])
    assert {(r.framework, r.variant) for r in regress(d, d, frameworks=["jax"]).rows} == {("jax", "async")}
    assert {(r.framework, r.variant) for r in regress(d, d, variants=["sync_each"]).rows} == {("torch", "sync_each")}


# -- the command line ------------------------------------------------------------------------------


def test_cli_exit_1_on_a_regression_with_its_table(tmp_path):
    base = write(doc([row("torch", "async", samples(1e-3, seed=1)), row("torch", "sync_each", samples(2e-3))]),
                 tmp_path / "a.json")
    cand = write(doc([row("torch", "async", samples(1.5e-3, seed=2)), row("torch", "sync_each", samples(2e-3))]),
                 tmp_path / "b.json")
    r = run("regress", "--baseline", str(base), "--candidate", str(cand))
    assert r.returncode == 1, r.stderr
    assert "regression (time)" in r.stdout and "+49.9%" in r.stdout
    assert "compared 2 rows: 1 regression, 0 improvements, 1 unchanged" in r.stdout
    assert "medians within 10%: 50.0% of 2 timed rows (within 5%: 50.0%)" in r.stdout
    assert "sync_each" not in r.stdout.split("regressions and improvements")[1].split("compared")[0]  # unchanged: hidden
    r = run("regress", "--baseline", str(base), "--candidate", str(cand), "--all", "--variants", "sync_each")
    assert r.returncode == 0 and "sync_each" in r.stdout and "0 regressions" in r.stdout


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    backend_or_skip("torch")
    out = tmp_path_factory.mktemp("real")
    r = run("compare", "--size", "smoke", "--scenarios", "sync_points", "--frameworks", "torch", "--seed", "5",
            "--examples", "1", "--no-equivalence", "--quiet", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    (path,) = out.glob("*.json")
    return path


def test_a_real_run_against_itself_is_unchanged(real_run):
    doc_ = load(real_run)
    rows = doc_["scenarios"]["sync_points"]["rows"]
    assert all(len(r["timing"]["samples"]["device_done"]) == r["timing"]["device_done"]["n"] for r in rows)
    assert all(r["check"]["max_rel_err"] is not None for r in rows)
    r = run("regress", "--baseline", str(real_run), "--candidate", str(real_run))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 regressions" in r.stdout and "0 improvements" in r.stdout


def test_without_a_candidate_a_fresh_run_with_the_baselines_settings_is_compared(real_run, tmp_path):
    out = tmp_path / "fresh"
    r = run("regress", "--baseline", str(real_run), "--out", str(out), "--quiet")
    assert r.returncode in (0, 1), r.stderr[-2000:]  # 1 if the CPU's noise made a real regression
    (path,) = out.glob("*.json")
    assert f"candidate: {path}" in r.stdout and "compared 2 rows" in r.stdout
    fresh, base = load(path), load(real_run)
    assert (fresh["seed"], fresh["size"], list(fresh["scenarios"])) == (base["seed"], base["size"], ["sync_points"])
    assert list(fresh["environment"]["frameworks"]) == ["torch"]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
def test_make_regress(real_run, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    argv = tmp_path / "argv.py"  # an "interpreter" that prints the arguments make gives it, one JSON list
    argv.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    argv.chmod(0o755)
    r = subprocess.run(["make", "-s", "regress", f"PYTHON={sys.executable}"], cwd=ROOT, capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 2 and "BASELINE=path/to/result.json (or a git ref, a folder, a python) is required" in r.stderr
    r = subprocess.run(["make", "-s", "regress", f"PYTHON={sys.executable}", f"BASELINE={real_run}",
                        f"CANDIDATE={real_run}"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "0 regressions" in r.stdout, r.stdout + r.stderr
    # a ref, a folder or an interpreter: both sides in one interleaved run
    for baseline, option in (("HEAD~1", "--baseline-tree"), (str(ROOT), "--baseline-tree"),
                             (sys.executable, "--baseline-python"), (str(real_run), "--baseline")):
        cand = real_run if option == "--baseline" else sys.executable
        r = subprocess.run(["make", "-s", "regress", f"PYTHON={argv}", f"BASELINE={baseline}",
                            f"CANDIDATE={cand}"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout.splitlines()[-1])
        assert got[:4] == ["-m", "harness", "regress", option] and got[4] == str(baseline), got
        assert got[5] == ("--candidate" if option == "--baseline" else "--candidate-python"), got



def test_relative_error():
    from harness.check.equivalence import relative_error

    w = {"x": np.array([1.0, 2.0, 0.0, 4.0])}
    assert relative_error({"x": w["x"].copy()}, w) == 0.0
    assert relative_error({"x": np.array([1.1, 2.0, 0.0, 4.0])}, w) == pytest.approx(0.1)
    assert relative_error({"x": np.array([1.0, 2.0, 1e-9, 4.0])}, w) == pytest.approx(1e-9 / 4e-6)  # floored |want|
    assert relative_error({"x": np.array([1.0, 2.0, np.nan, 4.0])}, w) == float("inf")
    assert relative_error({}, w) == relative_error({"x": np.ones(3)}, w) == float("inf")
    # float32 against a float64 reference, equal at a chunk's ends: the middle still counts
    assert relative_error({"x": np.array([1, 2, 3, 4], np.float32)}, {"x": np.array([1.0, 2.0, 3.5, 4.0])}) == (
        pytest.approx(0.5 / 3.5))
    assert relative_error({"x": np.array([1, 2, 3, 4], np.float32)}, {"x": np.array([1.0, 2.0, 3.0, 4.0])}) == 0.0
    big = np.random.default_rng(0).standard_normal(10_001) + 5
    got = big * (1 + 1e-3 * (np.arange(big.size) == 9_999))
    assert relative_error({"x": got}, {"x": big}, chunk=1000) == pytest.approx(1e-3)


def test_a_wrong_impl_shows_in_the_rows_worst_relative_error(monkeypatch):
    from harness.measure import timing
    from harness.workers import handlers
    from scenarios import get
    from tests.test_planted_bugs import _break_one_element

    backend_or_skip("torch")
    params = get("sync_points").params_for_size("smoke") | {"seed": 3}

    def time_it():
        rows = handlers.time_scenario("torch", "sync_points", params, timing.preset("smoke"), lambda _t: None)
        return {r["variant"]: r["check"]["max_rel_err"] for r in rows}

    before = time_it()
    assert all(0 <= e < 1e-4 for e in before.values()), before  # float32 against the float64 reference
    _break_one_element(monkeypatch, "sync_points", "torch", "on_device", 1.0)
    after = time_it()
    assert after["item_each_step"] == before["item_each_step"] and after["on_device"] > 1e-3


def test_a_host_that_ran_slower_during_the_run_is_named():
    """Per point and process, each run records its host's Python-loop time; regress names a difference
    beyond its threshold and keeps quiet within it."""
    def with_host(*loop_s: float) -> dict:
        d = doc([row("torch", "async", processes=len(loop_s))])  # one measure per process
        for p, v in zip(d["scenarios"]["async_dispatch"]["rows"][0]["timing"]["processes"], loop_s):
            p["host_loop_s"] = v
        return d

    # one speed each, further apart than the threshold (the 2026-12-03 18:15 pair: 12.5 against 6.6 ms)
    note = next(n for n in regress(with_host(12.5e-3), with_host(6.6e-3)).notes if "host's speed during" in n)
    assert "at the slower in 100% of the measurements in the baseline and 0% in the candidate" in note, note
    assert "about 6.6 and 12.5 ms" in note and "move by up to 89%" in note, note
    assert not any("host's speed during" in n for n in regress(with_host(6.6e-3), with_host(6.9e-3)).notes)
    assert not any("host's speed during" in n for n in regress(doc([row("torch", "async")]), with_host(6e-3)).notes)
    # two speeds in both runs, the slower one more often in the candidate (the 20:13/20:22 pair: 45%, 58%)
    a = with_host(*[6.5e-3] * 6 + [11.5e-3] * 4)
    b = with_host(*[6.5e-3] * 4 + [11.5e-3] * 6)
    note = next(n for n in regress(a, b).notes if "host's speed during" in n)
    assert "at the slower in 40% of the measurements in the baseline and 60% in the candidate" in note, note
    assert not any("host's speed during" in n for n in regress(a, a).notes)  # same share: nothing to say
    # one speed over both runs (the few slower measurements of one run are below the pooled 90th percentile)
    note = next(n for n in regress(with_host(*[8e-3] * 2), with_host(*[6.6e-3] * 16)).notes if "during" in n)
    assert "took 8.0 ms [8.0-8.0] in the baseline and 6.6 ms [6.6-6.6]" in note and "move by 18%" in note, note



def test_the_agreement_line_counts_medians_within_the_threshold_and_half_of_it():
    import io

    from rich.console import Console

    from harness.regress.view import render

    base = doc([row("torch", "async", samples(1e-3, seed=1)), row("torch", "sync_each", samples(2e-3, seed=3))])
    cand = doc([row("torch", "async", samples(1.07e-3, seed=1)), row("torch", "sync_each", samples(2e-3, seed=3))])
    out = io.StringIO()
    render(regress(base, cand), base, cand, Console(file=out, width=200))
    assert "medians within 10%: 100.0% of 2 timed rows (within 5%: 50.0%)" in out.getvalue(), out.getvalue()


@pytest.mark.parametrize("pair", [("20261203T142224Z", "20261203T142358Z"), ("20261203T160645Z", "20261203T161811Z"),
                                  ("20261203T181518Z", "20261203T182448Z"), ("20261203T201354Z", "20261203T202246Z"),
                                  ("20261204T141307Z", "20261204T142212Z")], ids=lambda p: p[0])
def test_the_committed_back_to_back_runs_of_one_commit_on_the_h200(pair, monkeypatch):
    """Two full runs of one commit, minutes apart on the H200 (the host ran Python at two speeds): file
    regress calls no row a regression or an improvement. In two pairs a JAX collectives row moved further
    than a row that follows the host only in step can (docs/regress.md): the bound on an unmeasured row's
    sensitivity (env.ELASTICITY_MAX, from the runs' measured elasticities) is what keeps it unknown. At 1
    (every row in step at most, fitted ones too: stricter than a cap of 1.5 on fitted rows, but no row of
    these files has a fitted sensitivity) those two rows are flagged.
    Numbers are judged against the reference alone, so none of these is a numbers verdict."""
    from harness.regress import env

    base, cand = (load(ROOT / "results" / f"{stem}_nvidia-h200_full.json") for stem in pair)
    flagged = [(r.scenario, r.label, r.framework, r.verdict) for r in regress(base, cand).rows
               if r.verdict in ("regression", "improvement")]
    assert not flagged, flagged
    in_step = {"20261203T160645Z": [("collectives", "broadcast 4 KiB", "jax", "regression")],
               "20261203T201354Z": [("collectives", "all_reduce 1 MiB", "jax", "improvement")]}.get(pair[0], [])
    monkeypatch.setattr(env, "ELASTICITY_MAX", 1.0)
    flagged = [(r.scenario, r.label, r.framework, r.verdict) for r in regress(base, cand).rows
               if r.verdict in ("regression", "improvement")]
    assert flagged == in_step, flagged
