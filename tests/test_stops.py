"""A run stopped at any moment (Ctrl-C, SIGTERM; to the process or to its group) keeps its result or
was stopped before it measured anything; a second signal during the stop changes nothing and prints
nothing; a stop that lands in a gc callback (hypothesis keeps one) is honoured without "Exception
ignored".

Every run is a real `compare` in a process of its own, paused at a phase by DRIVER: it wraps, for that
run only, a function that each version of the harness calls at that moment (starting the workers,
the first calibration, the first equivalence example, each timing round, closing the workers,
naming the result, drawing the timelines, writing the report), and waits there until a signal
arrives. Only the CLI, signals and the files on disk are observed, so these tests read the same
against any version of the harness (results/sweeps.md: how they read against dc804b0's)."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.results.results import validate
from tests.conftest import backend_or_skip

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["compare", "--size", "smoke", "--frameworks", "torch", "--scenarios", "event_sync", "--examples", "2",
        "--seed", "1", "--quiet"]
# phase: whether everything was measured when the run is stopped there (then the result is complete)
MEASURED = {"startup": False, "calibration": False, "equivalence": False, "timing1": False, "timing2": False,
            "shutdown": True, "result": True, "timelines": True, "report": True}

DRIVER = r"""
import os, runpy, select, signal, sys, time
from harness.run import equiv_phase
from harness.measure import timeline
from harness.report import html as report_html
from harness.results import results
from harness.run import runner
from harness.workers import processes, worker

PHASE, paused = os.environ["STOP_TEST_PHASE"], []
STOPS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}
wake_r, wake_w = os.pipe()  # every signal Python's handler sees writes a byte here, whatever the handler does
os.set_blocking(wake_r, False)
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)


def pause(phase):
    # Wait here for a signal: one handled (a byte on the wakeup pipe) or one left pending by a mask.
    if phase != PHASE or paused:
        return
    paused.append(phase)
    while select.select([wake_r], [], [], 0)[0]:
        os.read(wake_r, 512)
    os.write(2, f"harness: paused at {phase}\n".encode())
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if select.select([wake_r], [], [], 0.01)[0] or STOPS & signal.sigpending():
            return


def before(owner, name, phase):
    real = getattr(owner, name)

    def wrapped(*a, **kw):
        pause(phase)
        return real(*a, **kw)
    setattr(owner, name, wrapped)


before(runner.Run, "_hello_all", "startup")
before(runner.Run, "_calibrate", "calibration")
before(worker.LocalWorker, "close", "shutdown")
before(worker.ProcessWorker, "close", "shutdown")
before(results, "claim_name", "result")  # the final result's name (a checkpoint names none)
before(timeline, "write_timelines", "timelines")
before(report_html, "make_report", "report")

real_equivalence, real_time_point, processes_seen = equiv_phase.run_equivalence, processes.time_point, [0]


def run_equivalence(scn, execute, *a, **kw):
    def example(*x, **y):  # called inside hypothesis's example
        pause("equivalence")
        return execute(*x, **y)
    return real_equivalence(scn, example, *a, **kw)


def time_point(procs, frameworks, scn, params, cfg, timeout, step, detail, **kw):
    def process_step(fw, text):  # called as each timing process's request starts
        step(fw, text)
        processes_seen[0] += 1
        pause(f"timing{processes_seen[0]}")
    return real_time_point(procs, frameworks, scn, params, cfg, timeout, process_step, detail, **kw)


equiv_phase.run_equivalence, processes.time_point = run_equivalence, time_point
# "spawned": just after a worker process was started, while it imports (Ctrl-C to the group lands there)
real_start = worker.ProcessWorker._start


def _start(self):
    real_start(self)
    pause("spawned")


worker.ProcessWorker._start = _start
# "exit": in the interpreter's exit, among the exit handlers (registered once the result is written, so that
# it runs before those registered earlier: torch's)
real_release = results.release_folder


def release_folder(*a, **kw):
    import atexit
    if not paused:
        atexit.register(pause, "exit")
    return real_release(*a, **kw)


results.release_folder = release_folder
if os.environ.get("STOP_TEST_WAKE"):  # SIGUSR1 wakes a pause without stopping anything
    signal.signal(signal.SIGUSR1, lambda *a: None)
runpy.run_module("harness", run_name="__main__")  # as `python -m harness` (sys.argv[1:] are its arguments)
"""


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", **extra)


def _stop_at(phase: str, sig: signal.Signals, to_group: bool, out: Path, isolation: str | None = None,
             **env: str) -> tuple[int, str]:
    """Run compare paused at phase, send sig twice (50 ms apart) to it or to its group; (exit status, stderr)."""
    # a group: the framework's workers get the signal too; a second timing process needs --isolation process
    isolation = isolation or ("process" if to_group or phase == "timing2" else "none")
    p = subprocess.Popen([sys.executable, "-c", DRIVER, *ARGS, "--processes", "2", "--isolation", isolation, "--out",
                          str(out)] + ([] if phase == "report" else ["--no-report"]),
                         cwd=ROOT, env=_env(STOP_TEST_PHASE=phase, **env), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE,
                         text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    try:
        for line in p.stderr:
            lines.append(line)
            if f"paused at {phase}" in line:
                break
        else:
            p.wait(60)
            pytest.fail(f"the run never reached {phase} (exit {p.returncode}):\n{''.join(lines)[-3000:]}")
        kill = os.killpg if to_group else os.kill
        kill(p.pid, sig)
        time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            kill(p.pid, sig)
        rest = p.communicate(timeout=240)[1]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return p.returncode, "".join(lines) + rest


@pytest.mark.parametrize("to_group", [False, True], ids=["process", "group"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("phase", list(MEASURED))
def test_a_stop_at_each_phase_keeps_the_result(tmp_path, phase, sig, to_group):
    backend_or_skip("torch")
    out = tmp_path / "out"
    code, err = _stop_at(phase, sig, to_group, out)
    _kept(out, phase, sig, code, err)


def _kept(out: Path, phase: str, sig: signal.Signals, code: int, err: str) -> None:
    """What a stop at phase must leave: a valid result, complete where everything was measured; the exit
    status of a stop (or 1 where it cut the measuring short); no traceback, no half-written file."""
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    results = sorted(out.glob("*.json"))
    assert len(results) == 1, (code, err[-3000:])  # a result, also for a stop before anything was measured
    doc = json.loads(results[0].read_text())
    validate(doc)
    if MEASURED[phase]:  # everything was measured: the result is complete, the stop is honoured after it
        assert doc["complete"] is True and "event_sync" in doc["scenarios"], err[-2000:]
        assert code == 128 + sig.value, (code, err[-2000:])
        assert f"stopped ({sig.name}) after the result was written: {results[0]} is complete" in err, err[-2000:]
    else:
        assert doc["complete"] is False and doc["scenarios"] == {}, err[-2000:]
        assert doc["not_run"][0]["why"].startswith(f"the run was stopped ({sig.name})"), doc["not_run"]
        assert code == 1, (code, err[-2000:])
    assert not [p for p in out.rglob("*") if "tmp" in p.name], sorted(out.rglob("*"))


GC_DRIVER = """
import gc, os, runpy, signal
from harness.run import equiv_phase

armed = [False]

def callback(phase, info):
    if armed[0] and phase == "start":
        armed[0] = False
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):  # the handler runs here, inside the callback
            pass

real = equiv_phase.run_equivalence

def equivalence_with_a_collection(*a, **kw):
    armed[0] = True
    gc.collect()
    return real(*a, **kw)

equiv_phase.run_equivalence = equivalence_with_a_collection
gc.callbacks.insert(0, callback)
runpy.run_module("harness", run_name="__main__")
"""


def test_a_stop_in_a_gc_callback_is_honoured_without_a_traceback(tmp_path):
    """The signal's exception raised inside a gc callback cannot propagate: Python prints "Exception
    ignored in ..." and goes on (the run then ended exit 0, complete). Here a gc callback of the test's
    own receives the Ctrl-C, as hypothesis's gc_callback did during equivalence. A process of its own:
    pytest replaces sys.unraisablehook in its."""
    backend_or_skip("torch")
    r = subprocess.run([sys.executable, "-c", GC_DRIVER, *ARGS, "--processes", "1", "--isolation", "none",
                        "--no-report", "--examples", "30", "--out", str(tmp_path)], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode != 0 and "stopped (SIGINT)" in r.stderr, r.stderr[-2000:]
    (path,) = tmp_path.glob("*.json")
    assert json.loads(path.read_text())["complete"] is False or r.returncode == 130


def test_a_stopped_fresh_regress_says_so_and_keeps_its_candidate(tmp_path):
    """`regress` without --candidate reruns the baseline; stopped while timing it, it says so (it said
    "nothing comparable", exit 2, as if the files did not match) and keeps what the candidate measured."""
    backend_or_skip("torch")
    r = subprocess.run([sys.executable, "-m", "harness", *ARGS, "--processes", "1", "--isolation", "none",
                        "--no-report", "--out", str(tmp_path / "base")], cwd=ROOT, env=_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (baseline,) = (tmp_path / "base").glob("*.json")
    out = tmp_path / "cand"
    p = subprocess.Popen([sys.executable, "-c", DRIVER, "regress", "--baseline", str(baseline), "--isolation", "none",
                          "--quiet", "--out", str(out)], cwd=ROOT, env=_env(STOP_TEST_PHASE="timing1"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines = []
    try:
        for line in p.stderr:
            lines.append(line)
            if "paused at timing1" in line:
                os.kill(p.pid, signal.SIGTERM)
                break
        err = "".join(lines) + p.communicate(timeout=240)[1]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 128 + signal.SIGTERM, (p.returncode, err[-2000:])
    assert "stopped (SIGTERM) during the candidate run: nothing compared" in err and "Traceback" not in err, err
    (candidate,) = out.glob("*.json")
    assert json.loads(candidate.read_text())["complete"] is False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_outside_a_run_is_one_line_and_its_exit_status(tmp_path, sig):
    """Every command's signals are handled where a run's are (harness/run/stops.py, installed by the command
    line around the whole command): `report` stopped while it renders, twice 50 ms apart, exits 128 + the
    signal with one line and no traceback, and leaves no report half-written."""
    result = min(ROOT.glob("results/*_full.json"))
    p = subprocess.Popen([sys.executable, "-c", DRIVER, "report", str(result), "--out", str(tmp_path / "r")],
                         cwd=ROOT, env=_env(STOP_TEST_PHASE="report"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = p.stderr.readline()
        assert "paused at report" in line, line + p.stderr.read()
        os.kill(p.pid, sig)
        time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, sig)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 128 + sig.value and "Traceback" not in err, (p.returncode, err[-2000:])
    assert err.strip() == f"harness: stopped ({sig.name}) before a result was written", err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir()), sorted((tmp_path / "r").rglob("*"))


# -- issue 49, family 6: the other stops, a parent that is gone, the exit window, workers that start -------

# (phase, signal, to the group): a closed terminal or ssh session sends SIGHUP to the group; Ctrl-\ sends
# SIGQUIT; `kill -HUP` or `kill -QUIT` reach the process alone
OTHER_STOPS = [("startup", signal.SIGHUP, False), ("timing1", signal.SIGHUP, True), ("result", signal.SIGHUP, True),
               ("startup", signal.SIGQUIT, True), ("timing1", signal.SIGQUIT, False), ("result", signal.SIGQUIT, False)]


@pytest.mark.parametrize("phase,sig,to_group", OTHER_STOPS,
                         ids=[f"{p}-{s.name}-{'group' if g else 'process'}" for p, s, g in OTHER_STOPS])
def test_sighup_and_sigquit_stop_a_run_as_sigterm_does(tmp_path, phase, sig, to_group):
    """The result is kept and the exit status is 128 + the signal, as for SIGTERM; the workers, which get
    the group's signal too, neither die of it nor print; no point-cache folder is left behind."""
    backend_or_skip("torch")
    out = tmp_path / "out"
    (tmp_path / "tmp").mkdir()
    code, err = _stop_at(phase, sig, to_group, out, isolation="process", TMPDIR=str(tmp_path / "tmp"))
    _kept(out, phase, sig, code, err)
    assert not list((tmp_path / "tmp").glob("triptych-points-*")), sorted((tmp_path / "tmp").iterdir())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_while_the_interpreter_exits_keeps_the_documented_status(tmp_path, sig):
    """The run is done and its result written; the signal lands among the exit handlers (torch's among
    them): exit 128 + the signal, as for a stop at any moment after measuring began, no traceback
    ("Exception ignored in atexit callback" and exit 0, or killed: -2 / -15)."""
    backend_or_skip("torch")
    out = tmp_path / "out"
    code, err = _stop_at("exit", sig, False, out)
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    assert code == 128 + sig.value, (code, err[-2000:])
    (path,) = out.glob("*.json")
    doc = json.loads(path.read_text())
    validate(doc)
    assert doc["complete"] is True


def test_ctrl_c_to_the_group_while_workers_start_is_a_clean_stop(tmp_path):
    """The signal lands while a worker process imports (just started): it keeps the stop signals blocked
    until it serves (the resource tracker, which the first start launches, unblocked them in the thread
    that started the first worker): no KeyboardInterrupt traceback of a worker, a result that says the
    run was stopped while the frameworks started."""
    backend_or_skip("torch")
    out = tmp_path / "out"
    code, err = _stop_at("spawned", signal.SIGINT, True, out, isolation="process")
    _kept(out, "startup", signal.SIGINT, code, err)


def test_a_worker_whose_parent_died_leaves_quietly_and_takes_the_run_caches(tmp_path):
    """The parent is killed outright (SIGKILL: nothing of it runs) while its worker is inside a request
    (one that never answers: a planted hang). The worker leaves at once, without a BrokenPipeError
    traceback, and the run's point-cache and compilation folders in the temporary folder, which nobody
    else is left to remove, go with it."""
    backend_or_skip("torch")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = subprocess.Popen([sys.executable, "-c", DRIVER, *ARGS, "--processes", "1", "--isolation", "process", "--out",
                          str(tmp_path / "out"), "--no-report"], cwd=ROOT,
                         env=_env(STOP_TEST_PHASE="timing1", STOP_TEST_WAKE="1", TMPDIR=str(tmp),
                                  TRIPTYCH_FAULT="event_sync:torch:hang:time"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines = []
    try:
        for line in p.stderr:
            lines.append(line)
            if "paused at timing1" in line:
                break
        assert list(tmp.glob("triptych-points-*")), "the run made no cache folder to leave behind"
        os.kill(p.pid, signal.SIGUSR1)  # the request goes out, and its worker hangs in it...
        time.sleep(1.0)
        os.kill(p.pid, signal.SIGKILL)  # ... when its parent is gone
        try:
            err = "".join(lines) + p.communicate(timeout=30)[1]  # to its end: every worker closed its stderr
        except subprocess.TimeoutExpired:
            err = "".join(lines) + "(a worker outlived its parent by 30 s)"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)  # the session's workers, had any outlived it
        p.wait()
    assert "Traceback" not in err and "BrokenPipeError" not in err and "outlived" not in err, err[-3000:]
    assert not list(tmp.glob("triptych-points-*")), sorted(tmp.iterdir())
