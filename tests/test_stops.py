"""A run stopped at any moment (Ctrl-C, SIGTERM; to the process or to its group) keeps its result or
was stopped before it measured anything; a second signal during the stop changes nothing and prints
nothing; a stop that lands in a gc callback (hypothesis keeps one) is honoured without "Exception
ignored". Runs are paused at a phase with $TRIPTYCH_PAUSE_AT (harness/stops.py) and stopped there."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness import cli, stops
from harness.results import validate
from tests.conftest import backend_or_skip

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["compare", "--size", "smoke", "--frameworks", "torch", "--scenarios", "event_sync", "--examples", "2",
        "--seed", "1", "--processes", "1", "--quiet"]
# phase: (exit status, whether the result holds the scenario, whether the run counts as complete)
MEASURING = {"startup": False, "calibration": False, "equivalence": False, "timing": False,
             "shutdown": True, "result": True, "timelines": True, "report": True}


def _stop_at(phase: str, sig: signal.Signals, twice: bool = True) -> threading.Thread:
    """A thread that waits until the run pauses at phase, then signals this process (twice)."""
    def send() -> None:
        end = time.monotonic() + 120
        while phase not in stops.S.reached and time.monotonic() < end:
            time.sleep(0.01)
        os.kill(os.getpid(), sig)
        if twice:
            time.sleep(0.05)
            os.kill(os.getpid(), sig)
    t = threading.Thread(target=send, daemon=True)
    t.start()
    return t


def _results(out: Path) -> list[Path]:
    return sorted(out.glob("*.json"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("phase", list(MEASURING))
def test_a_stop_at_each_phase_keeps_the_result(tmp_path, monkeypatch, capfd, phase, sig):
    backend_or_skip("torch")
    monkeypatch.setenv(stops.PAUSE_ENV, phase)
    out = tmp_path / "out"
    stops.S.reached = []
    before = signal.signal(sig, lambda *_: None)  # a second signal that comes after the run ended
    sender = _stop_at(phase, sig)
    try:
        code = cli.main([*ARGS, "--isolation", "none", "--out", str(out)]
                        + ([] if phase == "report" else ["--no-report"]))
        sender.join(5)
    finally:
        signal.signal(sig, before)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    assert stops.S.reached == [phase]
    (path,) = _results(out)  # a result, also for a stop before anything was measured
    doc = json.loads(path.read_text())
    validate(doc)
    if MEASURING[phase]:  # everything was measured: the result is complete, the stop is honoured after it
        assert doc["complete"] is True and "event_sync" in doc["scenarios"]
        assert code == 128 + sig.value, err[-2000:]
        assert f"stopped ({sig.name}) after the result was written: {path} is complete" in err
    else:
        assert doc["complete"] is False and doc["scenarios"] == {}
        assert doc["not_run"][0]["why"].startswith(f"the run was stopped ({sig.name})")
        assert code == 1, err[-2000:]
    assert not list(out.rglob(".*tmp-*"))


GC_DRIVER = """
import gc, os, signal, sys
from harness import cli, equiv_phase

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
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_stop_in_a_gc_callback_is_honoured_without_a_traceback(tmp_path):
    """The signal's exception raised inside a gc callback cannot propagate: Python prints "Exception
    ignored in ..." and goes on (the run then ended exit 0, complete). Here a gc callback of the test's
    own receives the Ctrl-C, as hypothesis's gc_callback did during equivalence. A process of its own:
    pytest replaces sys.unraisablehook in its."""
    backend_or_skip("torch")
    r = subprocess.run([sys.executable, "-c", GC_DRIVER, *ARGS, "--isolation", "none", "--no-report",
                        "--examples", "30", "--out", str(tmp_path)], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       capture_output=True, text=True, timeout=300)
    assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode != 0 and "stopped (SIGINT)" in r.stderr, r.stderr[-2000:]
    (path,) = _results(tmp_path)
    assert json.loads(path.read_text())["complete"] is False or r.returncode == 130


@pytest.mark.parametrize("phase,sig", [("equivalence", signal.SIGTERM), ("shutdown", signal.SIGINT)])
def test_a_stop_to_the_process_group_keeps_the_result(tmp_path, phase, sig):
    """What a terminal (Ctrl-C) or `timeout --kill-after` on a group does: every process of the group,
    the framework's worker included, gets the signal, twice."""
    backend_or_skip("torch")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", **{stops.PAUSE_ENV: phase})
    p = subprocess.Popen([sys.executable, "-m", "harness", *ARGS, "--no-report", "--out", str(tmp_path)], cwd=ROOT,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    for line in p.stderr:
        lines.append(line)
        if f"paused at {phase}" in line:
            break
    os.killpg(p.pid, sig)
    time.sleep(0.05)
    os.killpg(p.pid, sig)
    _, rest = p.communicate(timeout=120)
    err = "".join(lines) + rest
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    (path,) = _results(tmp_path)
    doc = json.loads(path.read_text())
    if phase == "shutdown":
        assert p.returncode == 128 + sig.value and doc["complete"] is True, err[-2000:]
    else:
        assert p.returncode == 1 and doc["not_run"][0]["why"].startswith(f"the run was stopped ({sig.name})")
