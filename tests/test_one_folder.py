"""One run, one folder: a run claims its result's name and its pictures' folder atomically before
writing either, so that runs sharing one --out never share or replace each other's files (two runs
that ended in the same second once did: the second's timelines replaced the first's).

The two-runs test observes only the CLI and the files on disk, so it reads the same against any
version of the harness; the first two test claim_name itself (docs/reliability.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from tests.synthetic import load
from tests.conftest import backend_or_skip

ROOT = Path(__file__).resolve().parent.parent
DOC = {"created": "2026-12-01T00:00:00+00:00", "size": "smoke", "environment": {"gpu": None}}
TRIES = 10


def test_runs_that_claim_one_name_at_once_each_get_their_own(tmp_path):
    from harness.results.results import claim_name

    for attempt in range(TRIES):
        out = tmp_path / str(attempt)
        got: list[str] = []
        start = threading.Barrier(8)

        def claim() -> None:
            start.wait()
            got.append(claim_name(out, DOC))

        threads = [threading.Thread(target=claim) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(got)) == 8, got
        for name in got:  # each claim holds its placeholder and its own empty folder
            assert (out / name).is_file() and (out / Path(name).stem).is_dir()


def test_a_claimed_name_is_written_and_an_unclaimed_placeholder_is_not_replaced(tmp_path):
    from harness.results.results import claim_name, write_or_rescue

    name = claim_name(tmp_path, DOC)
    doc = {"x": 1}
    path, why = write_or_rescue(doc, tmp_path, name, claimed=True)
    assert why is None and path.name == name and json.loads(path.read_text()) == doc
    other = claim_name(tmp_path, DOC)  # another run's claim, not ours: never replaced
    path2, _ = write_or_rescue(doc, tmp_path, other)
    assert path2.name != other and (tmp_path / other).stat().st_size == 0


# Each of two processes measures once, then writes that run's result TRIES times, into --out <base>/<try>,
# as `compare` does (naming, result, timelines, report): both want one name and ask for it at one
# moment (a barrier in result_name), as two runs that end in the same second do.
DRIVER = """
import copy, os, sys, time
from pathlib import Path
from harness.results import results
from harness.run import cli, runner

barrier, base, tries = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
argv, now = sys.argv[4:], [0]
real_run, measured = runner.run_compare, []


def run_compare(opts, ui, checkpoint=None):
    if not measured:
        measured.append(real_run(opts, ui))
    return copy.deepcopy(measured[0])


def result_name(doc):
    (barrier / f"{now[0]}.{os.getpid()}").touch()
    end = time.monotonic() + 120
    while len(list(barrier.glob(f"{now[0]}.*"))) < 2:
        if time.monotonic() > end:
            sys.exit("the other run never came")
        time.sleep(0.001)
    return "same_cpu_smoke.json"


runner.run_compare, results.result_name = run_compare, result_name
for now[0] in range(tries):
    code = cli.main([*argv, "--out", str(base / str(now[0]))])
    if code != 0:
        sys.exit(code)
"""


def test_two_runs_into_one_folder_never_mix(tmp_path):
    backend_or_skip("torch")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    (tmp_path / "barrier").mkdir()
    args = [sys.executable, "-c", DRIVER, str(tmp_path / "barrier"), str(tmp_path / "out"), str(TRIES), "compare",
            "--size", "smoke", "--frameworks", "torch", "--scenarios", "event_sync", "--examples", "1",
            "--processes", "1", "--isolation", "none", "--quiet"]
    runs = [subprocess.Popen([*args, "--seed", str(seed)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    for p in runs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
    for attempt in range(TRIES):
        out = tmp_path / "out" / str(attempt)
        results = sorted(out.glob("*.json"))
        assert [r.name for r in results] == ["same_cpu_smoke-1.json", "same_cpu_smoke.json"], attempt
        seeds = set()
        for r in results:
            doc = load(r)
            seeds.add(doc["seed"])
            tl = doc["scenarios"]["event_sync"]["timelines"]
            # its own pictures, in the folder named after it, not the other run's
            assert tl["png"].startswith(f"{r.stem}/") and tl["trace"].startswith(f"{r.stem}/"), (attempt, r.name, tl)
            assert (r.parent / tl["png"]).is_file() and json.loads((r.parent / tl["trace"]).read_text())
            report = (r.parent / r.stem / "report.md").read_text()
            assert r.name in report and (r.parent / r.stem / "report.html").is_file()
        assert seeds == {1, 2}, attempt
        assert sorted(p.name for p in out.iterdir()) == ["same_cpu_smoke", "same_cpu_smoke-1",
                                                         "same_cpu_smoke-1.json", "same_cpu_smoke.json"], attempt
