"""Fresh child processes (impls/_shared/child.py): a child's whole process group goes when it ends, times out or
its worker dies, and a child gets the signals a fresh interpreter has, not its worker's ignored ones."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from impls._shared.child import ROOT, ChildError, child_env, run_child

# A child that starts a grandchild in its own process group (as torch.compile's pool of compile workers
# is started), says its pid, then exits (argv[1] "exit") or waits forever ("hang").
SPAWNER = """
import os, subprocess, sys, time
from impls._shared.child import as_child, say
as_child()
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[2], "w").write(str(g.pid))
if sys.argv[1] == "hang":
    time.sleep(600)
say({"grandchild": g.pid})
"""
SIGNALS = """
import signal
from impls._shared.child import as_child, say
as_child()
say({"term": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
     "int": signal.getsignal(signal.SIGINT) is signal.default_int_handler})
"""


def _env(tmp_path: Path, **modules: str) -> dict[str, str]:
    for name, text in modules.items():
        (tmp_path / f"{name}.py").write_text(text)
    return child_env(PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))


def _gone(pid: int, within: float = 10.0) -> bool:
    """The process has exited (absent, or a zombie whose parent has not reaped it yet)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_what_a_child_started_goes_with_it_when_it_ends(tmp_path):
    got = run_child("spawner", ["exit", tmp_path / "pid"], _env(tmp_path, spawner=SPAWNER))
    assert _gone(got["grandchild"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_child_that_times_out_is_killed_with_what_it_started(tmp_path):
    with pytest.raises(ChildError, match="no answer within 10 s"):  # time enough to start on a loaded host
        run_child("spawner", ["hang", tmp_path / "pid"], _env(tmp_path, spawner=SPAWNER), timeout=10)
    assert _gone(int((tmp_path / "pid").read_text()))


def test_a_child_gets_the_signals_its_worker_ignores(tmp_path):
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN), signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:  # as harness/workers/protocol.py serve() has them in every worker
        got = run_child("signals", [], _env(tmp_path, signals=SIGNALS))
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])
    assert got["term"] and got["int"], got


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_dies_with_its_worker(tmp_path):
    """A worker killed outright (a timeout in the runner, the machine's out-of-memory killer) runs no cleanup:
    its child must not run on, holding memory, with nobody to wait for it."""
    env = _env(tmp_path, spawner=SPAWNER)
    worker = subprocess.Popen([sys.executable, "-c", "import sys; from impls._shared.child import run_child; "
                               f"run_child('spawner', ['hang', {str(tmp_path / 'pid')!r}], {env!r})"],
                              cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(subprocess.run(["ps", "-o", "pid=", "--ppid", str(worker.pid)], capture_output=True,
                               text=True).stdout.split()[0])
    worker.kill()
    worker.wait()
    try:
        assert _gone(child)
    finally:  # what the child started is left to its own end (impls/_shared/child.py): end it here
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signal.SIGKILL)
