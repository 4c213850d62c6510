"""A regress that compared nothing fails, and options that do not apply are refused (issue 49, families 5
and 10): an interleaved run whose baseline side never starts ended "compared 0 rows", exit 0, and a CI
gate went green; --isolation or --all with an interleaved run, and `compare --out ''`, were ignored or
meant the current folder. The one-line refusals of result-file options (--pairs, --seed, --fdr with
result files, --fdr's bounds) are in tests/test_bad_input.py.

Each command is `python -m harness` in a process of its own; only its exit status, stderr and files
are observed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import backend_or_skip

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--frameworks", "torch", "--scenarios", "event_sync", "--size", "smoke", "--pairs", "2", "--max-pairs", "2",
         "--quiet"]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)


def _interpreter(tmp_path: Path, kind: str) -> Path:
    """A baseline interpreter whose side never starts: one that exits 0 at once, or this Python without
    its site-packages (no numpy: the harness's dependencies missing)."""
    py = tmp_path / f"{kind}.sh"
    py.write_text("#!/bin/sh\nexit 0\n" if kind == "exits" else f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    py.chmod(0o755)
    return py


@pytest.mark.parametrize("kind", ["exits", "no_dependencies", "import_fails"])
def test_a_regress_whose_baseline_never_starts_exits_2_saying_so(tmp_path, kind):
    """Its baseline interpreter exits at once, or has no numpy (refused before any work), or its torch
    fails to import (a planted fault on the baseline side alone): nothing is compared."""
    backend_or_skip("torch")
    side = (["--baseline-python", str(_interpreter(tmp_path, kind))] if kind != "import_fails" else
            ["--baseline-python", sys.executable, "--baseline-env", "TRIPTYCH_FAULT=*:torch:import"])
    r = _run(["regress", *side, *SMALL, "--out", str(tmp_path / "out")], tmp_path)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 2, (r.returncode, r.stdout[-1000:], r.stderr[-1000:])
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("harness: error:"), r.stderr[-2000:]
    if kind == "import_fails":
        assert last.startswith("harness: error: compared no row") and "baseline" in last, last


@pytest.mark.parametrize("option", [["--isolation", "none"], ["--all"], ["--variants", "no_sync"]])
def test_options_of_result_files_are_refused_by_an_interleaved_run(tmp_path, option):
    r = _run(["regress", "--baseline-python", str(_interpreter(tmp_path, "exits")), *SMALL, *option, "--out",
              str(tmp_path / "out")], tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and option[0] in lines[0] and "interleaved run" in lines[0], r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("out", ["", " "])
def test_an_empty_out_is_refused_not_the_current_folder(tmp_path, out):
    r = _run(["compare", "--frameworks", "torch", "--scenarios", "event_sync", "--size", "smoke", "--examples", "1",
              "--isolation", "none", "--no-report", "--quiet", "--out", out], tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == "harness: error: argument --out: --out is empty: name a file " \
                                                      "or folder", (r.returncode, r.stderr[-2000:])
    assert list(tmp_path.iterdir()) == []
