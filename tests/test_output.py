"""Output that cannot be encoded or written (issue 49, families 7 and 8): no traceback, one line on stderr
where output was lost otherwise than by a reader that left, and the command's own exit status (a closed
pipe after `regress A A` is not "a regression").

Every command is `python -m harness` in a process of its own, its stdout a pipe whose reader already
left (what `| head -1` becomes once head has its line), /dev/full, or a pipe read in full under
PYTHONIOENCODING=ascii: only the CLI and its exit status are observed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import synthetic

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> Path:
    """A small result file that regress compares with itself (no regression) in a second."""
    path = tmp_path_factory.mktemp("r") / "20261201T000000Z_cpu_smoke.json"
    rows = [synthetic.row(fw, v, synthetic.samples(1e-3, seed=i)) for i, (fw, v) in
            enumerate([("torch", "sync_each"), ("torch", "async"), ("jax", "sync_each")])]
    path.write_text(json.dumps(synthetic.doc(rows)))
    return path


def _run(args: list[str], stdout: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(exit status, stderr, stdout where it could be read) of `python -m harness args`."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    cmd = [sys.executable, "-m", "harness", *args]
    if stdout == "closed pipe":
        r, w = os.pipe()
        os.close(r)  # the reader left before the first line
        try:
            p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=w, stderr=subprocess.PIPE, text=True, timeout=300)
        finally:
            os.close(w)
        return p.returncode, p.stderr, ""
    if stdout == "full":
        with open("/dev/full", "w") as full:
            p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
        return p.returncode, p.stderr, ""
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=300)
    return p.returncode, p.stderr.decode("ascii", "replace"), p.stdout.decode("ascii", "replace")


def _commands(result: Path) -> dict[str, list[str]]:
    return {"list": ["list"], "regress": ["regress", "--baseline", str(result), "--candidate", str(result)]}


@pytest.mark.parametrize("command", ["list", "regress"])
def test_a_reader_that_left_is_no_error_and_the_status_stays_the_commands(result, command):
    code, err, _ = _run(_commands(result)[command], "closed pipe")
    assert code == 0 and err == "", (code, err[-2000:])


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("command", ["list", "regress"])
def test_output_to_a_full_device_is_one_line_and_exit_2(result, command):
    code, err, _ = _run(_commands(result)[command], "full")
    assert code == 2 and "Traceback" not in err, (code, err[-2000:])
    assert err.strip().splitlines() == [err.strip()] and "could not be written (No space left on device)" in err, err


def test_text_the_encoding_cannot_hold_is_escaped_not_a_traceback(result):
    """PYTHONIOENCODING=ascii: regress's table holds '·' and '→'; they come out escaped."""
    code, err, out = _run(_commands(result)["regress"], "pipe", {"PYTHONIOENCODING": "ascii"})
    assert code == 0 and "Traceback" not in err, (code, err[-2000:])
    assert "compared 3 rows" in out and "\\xb7" in out, out[-2000:]
