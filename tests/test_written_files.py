"""What a run writes, its own tools read (issue 49, families 3 and 9): a run that passed never leaves a
file that report and regress refuse (a worker that did not answer while the host's speed was measured
wrote an error where the schema wanted numbers), and a result that no folder can take is kept in a
last place, compressed, and said so, not lost in a traceback.

Each run is a real `compare` in a process of its own (a driver pauses or plants in it, for that run
only, through functions that every version calls: ProcessWorker.ask, results.claim_name); only its exit
status, its stderr and the files it writes are observed, so these tests read against 2037e8e too."""
from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run import cli
from tests import synthetic
from tests.conftest import backend_or_skip

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["compare", "--size", "smoke", "--frameworks", "torch", "--scenarios", "event_sync", "--examples", "1",
        "--seed", "1", "--quiet", "--no-report", "--processes", "1"]

# A worker that does not answer while the host's speed is measured: stopped (SIGSTOP) as the request goes
# out, and given half a second; the run replaces it for the next request.
STOPPED_CALIBRATION = r"""
import os, runpy, signal
from harness.workers import worker

real = worker.ProcessWorker.ask


def ask(self, req, timeout=None, progress=None, turn=None):
    if req.op != "calibrate":
        return real(self, req, timeout, progress, turn)
    if self._proc is None or not self._proc.is_alive():
        self._start()
    os.kill(self._proc.pid, signal.SIGSTOP)
    return real(self, req, 0.5, progress)


worker.ProcessWorker.ask = ask
runpy.run_module("harness", run_name="__main__")
"""

# The run's document damaged where it is named, just before it is written: what a writer's bug would do.
DAMAGED_DOCUMENT = r"""
import runpy
from harness.results import results

real = results.claim_name


def claim_name(out, doc):
    doc["isolation"] = 5  # the schema wants text
    return real(out, doc)


results.claim_name = claim_name
runpy.run_module("harness", run_name="__main__")
"""


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    """PYTHONPATH the checkout; a home and a temporary folder of the test's own (a rescue goes there)."""
    (tmp / "home").mkdir(exist_ok=True)
    (tmp / "tmp").mkdir(exist_ok=True)
    return dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(tmp / "home"), TMPDIR=str(tmp / "tmp"), **extra)


def _compare(driver: str, isolation: str, tmp: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """A compare run through a driver script (a planted fault) into tmp/out: its process and the one result it
    wrote, which no traceback preceded."""
    r = subprocess.run([sys.executable, "-c", driver, *ARGS, "--isolation", isolation, "--out", str(tmp / "out")],
                       cwd=ROOT, env=_env(tmp), capture_output=True, text=True, timeout=300)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    (path,) = (tmp / "out").glob("*.json")
    return r, path


def _read_back(path: Path, capsys) -> list[int]:
    """report's and regress's exit status on a written result."""
    codes = [cli.main(["report", str(path), "--out", str(path.parent / "report")]),
             cli.main(["regress", "--baseline", str(path), "--candidate", str(path)])]
    capsys.readouterr()
    return codes


def test_a_run_that_passed_writes_a_file_its_tools_read(tmp_path, capsys):
    """The calibration of the host's speed failed in the only worker (stopped); everything else passed."""
    backend_or_skip("torch")
    r, path = _compare(STOPPED_CALIBRATION, "process", tmp_path)
    assert json.loads(path.read_text())["environment"]["machine"]["calibration"]["torch"][0].get("error")
    if r.returncode == 0:  # it says it passed: its own tools read it
        assert _read_back(path, capsys) == [0, 0], r.stdout[-1000:]
    else:
        pytest.fail(f"exit {r.returncode}: {r.stderr[-2000:]}")


def test_a_result_its_readers_would_refuse_fails_the_run(tmp_path, capsys):
    """Whatever the run got wrong in its document, it is checked as report and regress check it before
    the run says it passed; the measurements are still written."""
    backend_or_skip("torch")
    r, path = _compare(DAMAGED_DOCUMENT, "none", tmp_path)
    assert r.returncode == 1 and "does not pass its own schema" in r.stderr, (r.returncode, r.stderr[-2000:])
    assert r.stdout.strip().splitlines()[-1].startswith("NOT all checks passed"), r.stdout[-1000:]
    assert json.loads(path.read_text())["scenarios"]["event_sync"]["rows"]


def test_a_calibration_error_is_a_typed_place_that_report_and_regress_read(tmp_path, capsys):
    rows = [synthetic.row("torch", v, synthetic.samples(1e-3)) for v in ("async", "sync_each")]
    doc = synthetic.doc(rows)
    doc["environment"]["machine"]["calibration"] = {
        "torch": [{"error": "torch worker did not answer within 900 s (killed)"},
                  {"tiny_op_s": 9e-6, "python_loop_s": 0.006, "at": 1.0}]}
    path = synthetic.write(doc, tmp_path / "20261201T000000Z_cpu_smoke.json")
    assert _read_back(path, capsys) == [0, 0]


def test_a_result_no_folder_can_take_is_kept_compressed_and_said(tmp_path):
    """A limit on the size of a file (ulimit -f) below the result's: its folder, the temporary folder and
    the home folder all refuse it; the compressed copy fits, and the one line says where it is."""
    backend_or_skip("torch")

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000))  # bytes: the result is ~11 kB, compressed ~3

    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "harness", *ARGS, "--isolation", "none", "--out", str(out)], cwd=ROOT,
                       env=_env(tmp_path), capture_output=True, text=True, timeout=300, preexec_fn=small_files)
    assert "Traceback" not in r.stderr and r.returncode == 1, (r.returncode, r.stderr[-3000:])
    kept = [p for p in tmp_path.rglob("*.json*") if p.suffix == ".gz"]
    assert len(kept) == 1, sorted(tmp_path.rglob("*"))
    assert f"the measurements are kept in {kept[0]}" in r.stderr, r.stderr
    assert str(tmp_path / "tmp") in r.stderr and str(tmp_path / "home") in r.stderr  # the places tried, said
    doc = json.loads(gzip.decompress(kept[0].read_bytes()))
    assert doc["scenarios"]["event_sync"]["rows"]
