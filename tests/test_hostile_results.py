"""A result file is data, never a path: crafted and damaged files are refused by `report` and `regress`
with one line and exit 2, the same with and without jsonschema importable, and nothing is written
outside the output folder. In-process calls of the CLI, except where a file could hang the reader or
take its memory (a process of its own, bounded); the generated sweep is tests/test_sweep_results.py."""
from __future__ import annotations

import copy
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run import cli
from tests.report_fixture import fake_doc, timeline_png, write_fake_result

ROOT = Path(__file__).resolve().parent.parent


def _call(argv: list[str], capsys) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err


def _scn(doc):
    return doc["scenarios"]["async_dispatch"]


def _row(doc):
    return _scn(doc)["rows"][0]


def _timed(doc):
    return next(r for r in _scn(doc)["rows"] if r.get("timing"))


def _nested(depth: int) -> list:
    x: list = []
    for _ in range(depth):
        x = [x]
    return x


DAMAGED = {  # name: how the document is damaged (item 5 of issue 33, and the crafted keys of item 4)
    "traversal_key": lambda d: d["scenarios"].__setitem__("../../../../../tmp/x", d["scenarios"].pop("async_dispatch")),
    "absolute_key": lambda d: d["scenarios"].__setitem__("/../../../../..//@TMP@/abs",
                                                         d["scenarios"].pop("async_dispatch")),
    "markup_key": lambda d: d["scenarios"].__setitem__("<img src=x onerror=alert(1)>",
                                                       d["scenarios"].pop("async_dispatch")),
    "newline_key": lambda d: _timed(d)["timing"].__setitem__("samples", {"a\nharness: error: forged": [1.0]}),
    "markup_variant": lambda d: _row(d).__setitem__("variant", "<b>x</b>"),
    "markup_framework": lambda d: _row(d).__setitem__("framework", "torch<script>"),
    "png_outside": lambda d: _scn(d).__setitem__("timelines", {"png": "/etc/passwd.png"}),
    "png_traversal": lambda d: _scn(d).__setitem__("timelines", {"png": "../../x.png"}),
    "processes_n_missing": lambda d: _timed(d)["timing"].__setitem__("processes", [{"median": 1.0}]),
    "processes_n_string": lambda d: _timed(d)["timing"].__setitem__("processes", [{"n": "5"}]),
    "processes_n_negative": lambda d: _timed(d)["timing"].__setitem__("processes", [{"n": -3}]),
    "processes_n_not_summing": lambda d: _timed(d)["timing"].update(
        samples={"device_done": [1e-3] * _timed(d)["timing"]["device_done"]["n"]},
        processes=[{"n": _timed(d)["timing"]["device_done"]["n"]}, {"n": 1}]),
    "processes_string": lambda d: _timed(d)["timing"].__setitem__("processes", "two"),
    "host_loop_string": lambda d: _timed(d)["timing"].__setitem__("host_loop_s", "fast"),
    "claim_without_claim": lambda d: _scn(d).__setitem__("claims", [{"framework": "torch", "verdict": "refuted"}]),
    "claim_without_evidence": lambda d: _scn(d)["claims"][0].pop("evidence"),
    "claim_without_text": lambda d: _scn(d)["claims"][0].pop("text"),
    "cross_without_frameworks": lambda d: _scn(d).__setitem__("cross_framework", [{"status": "disagree"}]),
    "cross_without_elements": lambda d: _scn(d).__setitem__("cross_framework", [{"status": "agree", "frameworks": ["torch"]}]),
    "framework_without_env": lambda d: d["environment"]["frameworks"]["torch"].pop("env"),  # found by the sweep
    "created_nonsense": lambda d: d.__setitem__("created", "yesterday!"),
    "size_nonsense": lambda d: d.__setitem__("size", "huge"),
    "equivalence_bogus": lambda d: _scn(d).__setitem__("equivalence", {"status": "bogus"}),
    "duplicate_row": lambda d: _scn(d)["rows"].append(copy.deepcopy(_row(d))),
    "median_negative": lambda d: _timed(d)["timing"]["device_done"].__setitem__("median", -1),
    "status_great": lambda d: _row(d).__setitem__("status", "great"),
    "deep_nesting": lambda d: _scn(d).__setitem__("concept", _nested(500)),
}
RAW = {  # damage to the text itself
    "huge_int": lambda text: text.replace('"seed": ', '"seed": ' + "9" * 5000 + ", \"_s\": ", 1),
    "duplicate_key": lambda text: text.replace('"size": "full"', '"size": "full", "size": "smoke"', 1),
    "deep_text": lambda text: text[:-2] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
}


def _write(folder: Path, name: str) -> Path:
    path = write_fake_result(folder)
    if name in RAW:
        path.write_text(RAW[name](path.read_text()))
    else:
        doc = fake_doc()
        DAMAGED[name](doc)
        path.write_text(json.dumps(doc).replace("@TMP@", str(folder.parent)))  # an absolute folder of the test's
    return path


@pytest.mark.parametrize("jsonschema", [True, False], ids=["with_jsonschema", "without_jsonschema"])
@pytest.mark.parametrize("name", [*DAMAGED, *RAW])
def test_a_damaged_file_is_refused_in_one_line(tmp_path, monkeypatch, capsys, name, jsonschema):
    if not jsonschema:
        monkeypatch.setitem(sys.modules, "jsonschema", None)  # import jsonschema now raises ImportError
    path = _write(tmp_path / "in", name)
    out = tmp_path / "out"
    for argv in (["report", str(path), "--out", str(out)],
                 ["regress", "--baseline", str(path), "--candidate", str(path)]):
        code, err = _call(argv, capsys)
        assert code == 2, (argv[0], err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("harness: error:") and "Traceback" not in err, err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # nothing beside the result's folder either


def _report_process(path: Path, out: Path) -> tuple[int, str]:
    """`report` in a process of its own, bounded: a file that hangs an open or never ends a read must
    fail this test, not hang it or take the machine's memory."""
    def bounded() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    try:
        r = subprocess.run([sys.executable, "-m", "harness", "report", str(path), "--out", str(out)], cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=90,
                           preexec_fn=bounded)
    except subprocess.TimeoutExpired:
        pytest.fail(f"report {path} hung (90 s)")
    return r.returncode, r.stderr


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "outside_png"])
def test_a_timeline_file_that_is_not_a_picture_in_the_folder_is_refused(tmp_path, kind):
    """The path is clean; the file behind it is a FIFO (an open would hang), /dev/zero (a read would
    never end) or a picture outside the result's folder."""
    path = write_fake_result(tmp_path / "in")
    png = path.parent / "timelines" / "async_dispatch.png"
    png.unlink()
    if kind == "fifo":
        os.mkfifo(png)
    elif kind == "dev_zero":
        png.symlink_to("/dev/zero")
    else:
        (tmp_path / "secret.png").write_bytes(timeline_png())
        png.symlink_to(tmp_path / "secret.png")
    code, err = _report_process(path, tmp_path / "out")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "refused" in err, (code, err[-2000:])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "loop"])
def test_a_result_path_that_is_not_a_file_is_refused(tmp_path, kind):
    path = tmp_path / "r.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    else:
        path.symlink_to(tmp_path / "r2.json")
        (tmp_path / "r2.json").symlink_to(path)
    code, err = _report_process(path, tmp_path / "out")
    assert code == 2 and len(err.strip().splitlines()) == 1, (code, err[-2000:])
    assert ("not a regular file" in err) if kind != "loop" else ("symbolic links" in err), err


# The sweep of damaged files generated by hypothesis: tests/test_sweep_results.py.
