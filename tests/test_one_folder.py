"""One run, one folder: a run claims its result's name and its pictures' folder atomically before
writing either, so that runs sharing one --out never share or replace each other's files (two runs
that ended in the same second once did: the second's timelines replaced the first's)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from harness.results import claim_name, load, write_or_rescue
from tests.conftest import backend_or_skip

ROOT = Path(__file__).resolve().parent.parent
DOC = {"created": "2026-12-01T00:00:00+00:00", "size": "smoke", "environment": {"gpu": None}}


def test_runs_that_claim_one_name_at_once_each_get_their_own(tmp_path):
    for attempt in range(10):
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
    name = claim_name(tmp_path, DOC)
    doc = {"x": 1}
    path, why = write_or_rescue(doc, tmp_path, name, claimed=True)
    assert why is None and path.name == name and json.loads(path.read_text()) == doc
    other = claim_name(tmp_path, DOC)  # another run's claim, not ours: never replaced
    path2, _ = write_or_rescue(doc, tmp_path, other)
    assert path2.name != other and (tmp_path / other).stat().st_size == 0


DRIVER = """
import sys
from harness import cli, results
results.result_name = lambda doc: "same_cpu_smoke.json"  # both runs want one name
sys.exit(cli.main(sys.argv[1:]))
"""


def test_two_runs_into_one_folder_never_mix(tmp_path):
    backend_or_skip("torch")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = [sys.executable, "-c", DRIVER, "compare", "--size", "smoke", "--frameworks", "torch", "--scenarios",
            "event_sync", "--examples", "1", "--processes", "1", "--isolation", "none", "--quiet", "--out",
            str(tmp_path)]
    runs = [subprocess.Popen([*args, "--seed", str(seed)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    for p in runs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    results = sorted(tmp_path.glob("*.json"))
    assert [r.name for r in results] == ["same_cpu_smoke-1.json", "same_cpu_smoke.json"]
    seeds = set()
    for r in results:
        doc = load(r)
        seeds.add(doc["seed"])
        tl = doc["scenarios"]["event_sync"]["timelines"]
        assert tl["png"].startswith(f"{r.stem}/") and (r.parent / tl["png"]).is_file()
        trace = json.loads((r.parent / tl["trace"]).read_text())  # its own trace, not the other run's
        assert trace and (r.parent / r.stem / "report.html").is_file()
        assert str(r) in (r.parent / r.stem / "report.md").read_text() or r.name in (
            r.parent / r.stem / "report.md").read_text()
    assert seeds == {1, 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same_cpu_smoke", "same_cpu_smoke-1",
                                                           "same_cpu_smoke-1.json", "same_cpu_smoke.json"]
