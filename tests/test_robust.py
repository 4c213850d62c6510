"""Issue 14, one test per class of failure: a run is never lost, signals are honoured and named, exit
statuses tell the truth, a broken framework is failed (not skipped), output folders and pages behave."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness.results import files as writer
from harness.run import cli
from harness.run import cmd_compare, runner
from tests.synthetic import doc, row

ROOT = Path(__file__).resolve().parent.parent


def _fake_run(d):
    def run_compare(opts, ui, checkpoint=None):
        return json.loads(json.dumps(d))

    return run_compare


def _compare(tmp_path, monkeypatch, d, *extra):
    monkeypatch.setattr(cmd_compare, "run_compare", _fake_run(d))
    return cli.main(["compare", "--frameworks", "torch", "--scenarios", "async_dispatch", "--out",
                     str(tmp_path / "out"), "--quiet", "--seed", "1", *extra])


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob(".*tmp-*")]


def test_a_full_disk_at_the_final_write_keeps_the_measurements_elsewhere(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    real_link, real_replace = os.link, os.replace

    def full(real):
        def put(src, dst):
            if Path(dst).parent == out:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(src, dst)
        return put

    monkeypatch.setattr(writer.os, "link", full(real_link))
    monkeypatch.setattr(writer.os, "replace", full(real_replace))
    monkeypatch.setattr(writer, "rescue_folders", lambda: [tmp_path / "rescue"])
    assert _compare(tmp_path, monkeypatch, doc([row("torch", "async")]), "--no-report") == 1
    err = capsys.readouterr()
    (kept,) = (tmp_path / "rescue").glob("*.json")
    assert f"the measurements are kept in {kept}" in err.err and "No space left" in err.err
    assert "async_dispatch" in err.out  # the table is printed all the same
    assert json.loads(kept.read_text())["scenarios"]["async_dispatch"]["rows"]
    assert list(out.iterdir()) == []  # the claimed name and folder are given back


@pytest.mark.parametrize("where", ["timelines", "report"])
@pytest.mark.parametrize("stop", [KeyboardInterrupt(), runner.Stopped("SIGTERM")], ids=["SIGINT", "SIGTERM"])
def test_a_stop_while_drawing_keeps_the_result_and_no_half_folder(tmp_path, monkeypatch, capsys, where, stop):
    from harness.measure import timeline
    from harness.report import html as report_html

    def interrupted(*a, **k):
        raise stop

    d = doc([row("torch", "async")])
    d["scenarios"]["async_dispatch"]["rows"][0]["timeline"] = {"clock": "host", "lanes": ["main"],
                                                             "spans": [["main", "op", 0.0, 1e-3]], "why": ""}
    monkeypatch.setattr(timeline if where == "timelines" else report_html,
                        "render_png" if where == "timelines" else "build", interrupted)
    code = _compare(tmp_path, monkeypatch, d)
    name = "SIGINT" if isinstance(stop, KeyboardInterrupt) else "SIGTERM"
    assert code == 128 + signal.Signals[name].value  # not swallowed: non-zero
    (result,) = (tmp_path / "out").glob("*.json")
    assert f"stopped ({name}) after the result was written: {result} is complete" in capsys.readouterr().err
    assert json.loads(result.read_text())["scenarios"]["async_dispatch"]["timelines"]["png"]
    assert _leftovers(tmp_path / "out") == []
    if where == "timelines":
        assert not (tmp_path / "out" / result.stem).exists()


def test_files_are_0644_and_a_new_folder_appears_whole(tmp_path):
    os.umask(0o077)
    try:
        paths = writer.write_files(tmp_path / "new", {"a.txt": b"a", "b.txt": b"b"})
    finally:
        os.umask(0o022)
    assert [oct(p.stat().st_mode & 0o777) for p in paths] == ["0o644", "0o644"]
    assert oct((tmp_path / "new").stat().st_mode & 0o777) == "0o755"


def test_a_run_that_measured_nothing_exits_1(tmp_path, monkeypatch, capsys):
    d = doc([row("torch", "async", status="skipped")])
    d["environment"]["frameworks"]["torch"] = {"available": False, "why": "torch is not installed", "env": {}}
    assert _compare(tmp_path, monkeypatch, d, "--no-report") == 1
    assert "FAILED no framework started: nothing was measured" in capsys.readouterr().err


def test_refuted_claims_are_findings_not_failed_checks(tmp_path, monkeypatch, capsys):
    from harness.report.report import summary_status
    from harness.report.html import build

    d = doc([row("torch", "async")])
    d["scenarios"]["async_dispatch"]["claims"] = [{"claim": "returns_early", "text": "t", "framework": "torch",
                                                   "verdict": "refuted", "evidence": "e", "numbers": {}}]
    ok, problems = summary_status(d)
    assert ok and [p.kind for p in problems] == ["refuted"]
    md = build(d, tmp_path / "r.json")["report.md"].decode()
    assert "Every check passed" not in md and "Claims the numbers refuted" in md
    assert _compare(tmp_path, monkeypatch, d, "--no-report") == 0
    assert "REFUTED async_dispatch/torch: returns_early" in capsys.readouterr().err


# -- frameworks broken at import: a fake `torch` first on PYTHONPATH --------------------------------

FAKE = {"crash": "import os\nos.abort()\n", "hang": "import time\ntime.sleep(3600)\n",
        "raise": "raise RuntimeError('planted: a broken extension')\n"}


def _run(tmp_path, kind, *extra, **kw):
    pkg = tmp_path / "fake" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE[kind])
    env = dict(os.environ, PYTHONPATH=f"{pkg.parent}{os.pathsep}{ROOT}")
    args = [sys.executable, "-m", "harness", "compare", "--frameworks", "torch", "--scenarios", "async_dispatch",
            "--examples", "1", "--seed", "1", "--no-report", "--out", str(tmp_path / "out"), *extra]
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _started(p: subprocess.Popen) -> None:
    """Wait until the run is starting its frameworks (its progress line says so), then a little more."""
    seen = []
    while not seen or "starting torch" not in seen[-1]:  # after the CPU notice, where there is no GPU
        seen.append(p.stderr.readline())
        assert seen[-1] and len(seen) <= 3, seen
    time.sleep(3)


@pytest.mark.parametrize("kind,status", [("crash", "crashed"), ("hang", "timeout"), ("raise", "error")])
def test_a_framework_broken_at_import_is_failed_not_skipped(tmp_path, kind, status):
    p = _run(tmp_path, kind, "--timeout", "20", "--startup-timeout", "8")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 1, err[-2000:]
    (result,) = (tmp_path / "out").glob("*.json")
    d = json.loads(result.read_text())
    assert d["environment"]["frameworks"]["torch"]["status"] == status
    assert {r["status"] for r in d["scenarios"]["async_dispatch"]["rows"]} == {status}
    assert f"FAILED torch: {status} at start-up" in err


def test_sigterm_while_a_framework_hangs_at_start_up_is_honoured_at_once(tmp_path):
    p = _run(tmp_path, "hang", "--timeout", "600")
    _started(p)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert time.monotonic() - t0 < 30, "waited for the start-up timeout"
    (result,) = (tmp_path / "out").glob("*.json")
    why = json.loads(result.read_text())["not_run"][0]["why"]
    assert "stopped (SIGTERM) while the frameworks started" in why and p.returncode == 1


def test_ctrl_c_to_the_process_group_prints_no_worker_tracebacks(tmp_path):
    # A terminal's foreground job takes SIGINT as the default; a suite started in the background by a
    # non-interactive shell (`make test &`) inherits it ignored, and Python then installs no handler.
    p = _run(tmp_path, "hang", "--timeout", "600", start_new_session=True,
             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _started(p)
    os.killpg(p.pid, signal.SIGINT)  # what a terminal does: every process of the group
    out, err = p.communicate(timeout=120)
    assert "Traceback" not in err, err[-3000:]
    (result,) = (tmp_path / "out").glob("*.json")
    assert "stopped (SIGINT)" in json.loads(result.read_text())["not_run"][0]["why"]


def test_compare_and_its_report_need_no_jsonschema(tmp_path, monkeypatch, capsys):
    """The H200 has no jsonschema: compare renders its report from the document it just wrote."""
    d = doc([row("torch", "async")])  # built (and validated) while jsonschema is there
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    assert _compare(tmp_path, monkeypatch, d) == 0
    (result,) = (tmp_path / "out").glob("*.json")
    assert (tmp_path / "out" / result.stem / "report.html").is_file()
    assert "report:" in capsys.readouterr().out


def test_a_report_that_cannot_be_written_fails_the_run_but_keeps_the_result(tmp_path, monkeypatch, capsys):
    from harness.report import html as report_html

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report_html, "write_files", full)
    assert _compare(tmp_path, monkeypatch, doc([row("torch", "async")])) == 1
    assert "FAILED report not written: OSError: [Errno 28] No space left on device" in capsys.readouterr().err
    assert len(list((tmp_path / "out").glob("*.json"))) == 1


def test_sigterm_while_a_rank_is_busy_ends_the_run_at_once(tmp_path):
    """A rank that never answers (rank 1 hangs in its timing request; rank 0 waits for it in a collective)
    must not hold a stopped run for the polite close's ten seconds per process; no rank outlives it."""
    pytest.importorskip("torch")
    mark = f"TRIPTYCH_TEST_RUN={uuid.uuid4().hex}"  # inherited by every rank: other sessions' ranks lack it
    env = dict(os.environ, TRIPTYCH_FAULT="ranks:torch:hang:time", TRIPTYCH_FAULT_RANK="1",
               TRIPTYCH_TEST_RUN=mark.split("=")[1])
    args = [sys.executable, "-m", "harness", "compare", "--frameworks", "torch", "--scenarios", "ranks",
            "--world-size", "2", "--examples", "1", "--seed", "1", "--no-report", "--timeout", "600",
            "--out", str(tmp_path / "out")]
    p = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # the progress line of the hanging request
        line = p.stderr.readline()
        assert line, "the run ended before it timed the ranks"
        if "ranks · torch · timing" in line:
            break
    time.sleep(3)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=120)
    assert time.monotonic() - t0 < 8, "the stopped run waited for busy ranks to leave"
    (result,) = (tmp_path / "out").glob("*.json")
    assert "stopped (SIGTERM)" in json.loads(result.read_text())["not_run"][0]["why"]
    left = [d.name for d in Path("/proc").iterdir() if d.name.isdigit() and _environ_has(d, mark)]
    assert not left, f"processes of the run outlived it: {left}"


def _environ_has(proc: Path, entry: str) -> bool:
    try:
        return entry.encode() in (proc / "environ").read_bytes().split(b"\0")
    except OSError:  # gone, or not ours to read
        return False
