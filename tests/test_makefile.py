"""What `make` hands the shell: a file name or a variable is data, never text of a command.

Each test runs the repository's Makefile from a folder of its own (`make -f`), with PYTHON= an
"interpreter" that prints the arguments it got as one JSON list: so it sees exactly what the harness
would get, and nothing the shell could run besides (a file PWNED appearing says something ran)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ["zzz;touch${IFS}PWNED;.json", "a b.json", "$(touch PWNED).json", "`touch PWNED`.json",
           "x\"; touch PWNED; \".json", "it's.json", "*.json"]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


@pytest.fixture
def here(tmp_path: Path) -> Path:
    (tmp_path / "argv.py").write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    (tmp_path / "argv.py").chmod(0o755)
    return tmp_path


def _make(here: Path, *args: str) -> tuple[int, list[str] | None, str]:
    """make in `here` with the repository's Makefile: (exit status, the harness's arguments, stderr)."""
    r = subprocess.run(["make", "-s", "--no-print-directory", "-f", str(ROOT / "Makefile"), *args,
                        f"PYTHON={here / 'argv.py'}"], cwd=here, capture_output=True, text=True, timeout=60)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("[")]
    return r.returncode, (json.loads(lines[-1]) if lines else None), r.stderr


def _ran_nothing(here: Path) -> None:
    assert not list(here.rglob("PWNED*")), sorted(p.name for p in here.rglob("*"))


@pytest.mark.parametrize("folder", ["runs", "results"])
@pytest.mark.parametrize("name", HOSTILE)
def test_the_newest_result_is_handed_over_as_one_name(here, folder, name):
    """`make report` without RESULT picks the newest result in runs/ (else results/): a name that the
    shell would read as commands (runs/zzz;touch${IFS}PWNED;.json) reaches the harness whole."""
    (here / folder).mkdir()
    (here / folder / "00000000T000000Z_cpu_smoke.json").write_text("{}")
    (here / folder / f"z{name}").write_text("{}")  # sorts after the timestamp: the newest
    code, argv, err = _make(here, "report")
    _ran_nothing(here)
    assert code == 0 and argv == ["-m", "harness", "report", f"{folder}/z{name}"], (code, argv, err)


@pytest.mark.parametrize("name", HOSTILE)
def test_result_baseline_and_candidate_are_data(here, name):
    for args, want in ((["report", f"RESULT={name}"], ["-m", "harness", "report", name]),
                       (["regress", f"BASELINE={name}", f"CANDIDATE={name}"],
                        ["-m", "harness", "regress", "--baseline-tree", name, "--candidate-tree", name])):
        args = [a.replace("$", "$$") for a in args]  # make expands $ in a value on its command line: $$ is one $
        code, argv, err = _make(here, *args)
        _ran_nothing(here)
        assert code == 0 and argv == want, (args, code, argv, err)


def test_args_are_split_at_blanks_and_never_run(here):
    (here / "a.json").write_text("{}")  # a glob would find it
    code, argv, err = _make(here, "compare", "ARGS=--out `touch PWNED` *;touch$${IFS}PWNED --quiet $$(touch PWNED)")
    _ran_nothing(here)
    assert code == 0 and argv == ["-m", "harness", "compare", "--out", "`touch", "PWNED`", "*;touch${IFS}PWNED",
                                  "--quiet", "$(touch", "PWNED)"], (code, argv, err)
