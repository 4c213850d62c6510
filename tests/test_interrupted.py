"""A run that is stopped from outside (SIGTERM from a job's time limit) or that spends its --budget
keeps the scenarios it finished: the result file is written, says it is incomplete, and names what
did not run and why."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.run.progress import QuietUI
from harness.report.report import summary_status
from harness.results.results import validate, write_atomic
from tests.synthetic import load
from harness.run.runner import NOT_REACHED, CompareOptions, run_compare
from tests.conftest import backend_or_skip

ROOT = Path(__file__).resolve().parent.parent


def test_a_spent_budget_starts_no_scenario_and_says_so(tmp_path):
    backend_or_skip("torch")
    opts = CompareOptions(scenarios=["async_dispatch", "sync_points"], frameworks=["torch"], size="smoke",
                          examples=1, seed=1, isolation="none", budget_s=1e-9)
    doc = run_compare(opts, QuietUI())
    assert doc["complete"] is False and doc["scenarios"] == {}
    assert [n["scenario"] for n in doc["not_run"]] == ["async_dispatch", "sync_points"]
    assert all("--budget of 1e-09 s was spent" in n["why"] for n in doc["not_run"])
    validate(doc)
    ok, problems = summary_status(doc)
    assert not ok and "async_dispatch: not run" in problems[0].text and problems[0].kind == "incomplete"
    load(write_atomic(doc, tmp_path))  # such a file is a valid result


def test_an_ample_budget_changes_nothing():
    backend_or_skip("torch")
    opts = CompareOptions(scenarios=["sync_points"], frameworks=["torch"], size="smoke", examples=1, seed=1,
                          isolation="none", budget_s=3600, equivalence=False)
    doc = run_compare(opts, QuietUI())
    assert doc["complete"] is True and doc["not_run"] == [] and "sync_points" in doc["scenarios"]
    assert doc["row_median"] == "processes"  # which median its rows hold (harness/measure/noise.py row_median)


def _compare_into_its_second_scenario(out, scenarios, **popen):
    """A smoke compare of torch in a process of its own, returned once its progress says that the second
    scenario (sync_points) has begun: the first is finished."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-m", "harness", "compare", "--size", "smoke", "--frameworks", "torch",
                          "--examples", "1", "--seed", "3", "--no-report", "--out", str(out),
                          "--scenarios", ",".join(scenarios)],
                         cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True, **popen)
    deadline = time.time() + 300
    for line in p.stderr:
        if "sync_points" in line or time.time() > deadline:
            break
    return p


def test_sigterm_keeps_the_finished_scenarios(tmp_path):
    backend_or_skip("torch")
    out = tmp_path / "res"
    p = _compare_into_its_second_scenario(out, ["async_dispatch", "sync_points", "device_creation", "pinned_transfer"],
                                          stdout=subprocess.PIPE)
    p.send_signal(signal.SIGTERM)
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 1, stderr[-2000:]
    assert len(list(out.glob("*.json"))) == 1, stderr[-3000:]
    (path,) = out.glob("*.json")
    doc = json.loads(path.read_text())
    validate(doc)
    assert doc["complete"] is False
    assert "async_dispatch" in doc["scenarios"]
    assert doc["not_run"][0]["why"].startswith("the run was stopped (SIGTERM)")
    assert {n["scenario"] for n in doc["not_run"]} >= {"device_creation", "pinned_transfer"}
    assert "not run" in stderr and "Traceback" not in stderr


def test_a_stop_that_is_swallowed_on_the_way_still_stops_the_run(monkeypatch):
    """Code the SIGTERM lands in may swallow the handler's exception: hypothesis, stopped mid-example
    while a worker was computing, once reported a bare AssertionError as a failed equivalence and the
    run went on (1 run in 7 of test_sigterm_keeps_the_finished_scenarios). The handler also records
    the signal, and the runner stops on the record."""
    backend_or_skip("torch")
    from harness.run import equiv_phase
    from harness.check.equivalence import EquivalenceResult

    real = equiv_phase.run_equivalence

    def swallowing(scn, execute, frameworks, *a, **kw):
        if scn.name != "sync_points":
            return real(scn, execute, frameworks, *a, **kw)
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises Stopped here
        except BaseException:  # noqa: BLE001 - what hypothesis did with it
            return EquivalenceResult("failed", 1, frameworks, "sync_points: AssertionError: ")
        raise AssertionError("the SIGTERM handler was not installed")

    monkeypatch.setattr(equiv_phase, "run_equivalence", swallowing)
    opts = CompareOptions(scenarios=["async_dispatch", "sync_points", "device_creation"], frameworks=["torch"],
                          size="smoke", examples=1, seed=1, isolation="none", timing=False)
    doc = run_compare(opts, QuietUI())
    assert list(doc["scenarios"]) == ["async_dispatch"] and doc["complete"] is False
    assert [n["scenario"] for n in doc["not_run"]] == ["sync_points", "device_creation"]
    assert doc["not_run"][0]["why"] == "the run was stopped (SIGTERM) during sync_points"


def test_the_cli_calls_budget_left_scenarios_incomplete_not_failed(tmp_path):
    backend_or_skip("torch")
    r = subprocess.run([sys.executable, "-m", "harness", "compare", "--size", "smoke", "--frameworks", "torch",
                        "--scenarios", "sync_points", "--budget", "1e-9", "--no-report", "--out", str(tmp_path)],
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "INCOMPLETE sync_points: not run (the --budget of 1e-09 s was spent" in r.stderr
    assert "FAILED" not in r.stderr


def test_a_run_killed_outright_leaves_its_checkpoint_with_the_finished_scenarios(tmp_path):
    """SIGKILL (or a machine that dies) gives the harness no chance to write its result: the checkpoint
    written after every scenario is then the run's record, a valid result that says it is incomplete."""
    backend_or_skip("torch")
    out = tmp_path / "res"
    p = _compare_into_its_second_scenario(out, ["async_dispatch", "sync_points", "device_creation"],
                                          stdout=subprocess.DEVNULL, start_new_session=True)
    os.killpg(p.pid, signal.SIGKILL)  # the harness and its workers, with no handler run
    p.wait(timeout=60)
    p.stderr.close()
    assert sorted(x.name.split(".", 1)[1] for x in out.glob("*.json")) == [f"pid{p.pid}.partial.json"]
    (path,) = out.glob("*.partial.json")
    doc = load(path)  # the one loader takes it: a result like any other
    assert doc["complete"] is False and list(doc["scenarios"]) == ["async_dispatch"]
    assert doc["scenarios"]["async_dispatch"]["rows"] and doc["scenarios"]["async_dispatch"]["equivalence"]
    assert [(n["scenario"], n["why"]) for n in doc["not_run"]] == [(s, NOT_REACHED)
                                                                   for s in ("sync_points", "device_creation")]


def test_a_finished_run_leaves_no_checkpoint(tmp_path):
    backend_or_skip("torch")
    out = tmp_path / "res"
    r = subprocess.run([sys.executable, "-m", "harness", "compare", "--size", "smoke", "--frameworks", "torch",
                        "--examples", "1", "--seed", "3", "--no-report", "--out", str(out), "--quiet",
                        "--scenarios", "sync_points"], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    assert [x.name for x in out.iterdir()] == [f"{Path(r.stdout.split('result: ')[1].split()[0]).name}"]


def test_a_stop_while_the_checkpoint_is_written_keeps_the_scenario_that_finished():
    """A signal that lands while a finished scenario is checkpointed stops the run between two scenarios:
    the scenario stays done, not also 'not run'."""
    backend_or_skip("torch")
    from harness.run.stops import Stopped

    def checkpoint(doc):
        raise Stopped("SIGTERM")  # what the handler raises when the signal lands inside the write

    opts = CompareOptions(scenarios=["sync_points", "async_dispatch"], frameworks=["torch"], size="smoke",
                          examples=1, seed=1, isolation="none", equivalence=False)
    doc = run_compare(opts, QuietUI(), checkpoint)
    assert list(doc["scenarios"]) == ["sync_points"]
    assert [(n["scenario"], n["why"]) for n in doc["not_run"]] == [
        ("async_dispatch", "the run was stopped (SIGTERM) between two scenarios")]
    validate(doc)
