"""A result file is data to the report too (issue 49, families 2, 7 and 11): report writes only into the
result's own folder, draws and encodes whatever text a file holds, and shows that text as written, never
as a link, an emphasis or HTML the file chose, in report.html and in report.md as a Markdown viewer
renders it (markdown-it-py, CommonMark with tables: rich's own dependency).

`report` is called in-process (cli.main), except where a path's bytes must reach it as a shell would
hand them over; only its exit status, stderr and the files it writes are observed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run import cli
from tests.report_fixture import fake_doc, write_fake_result
from tests.sweep_hostile import _Elements  # the HTML elements a page holds: one parser for the test and the sweep

ROOT = Path(__file__).resolve().parent.parent

# -- family 2: the result's own folder --------------------------------------------------------------


@pytest.mark.parametrize("target", ["outside", "sibling"])
def test_a_link_beside_the_result_is_not_written_through(tmp_path, capsys, target):
    """R/ for R.json is a link: to a folder outside (a victim's files), or to another result's folder
    beside it. report refuses in one line and writes nothing anywhere."""
    path = write_fake_result(tmp_path / "in")
    victim = tmp_path / "victim" if target == "outside" else tmp_path / "in" / "other"
    victim.mkdir()
    (victim / "report.html").write_text("the victim's own")
    path.with_suffix("").symlink_to(victim)
    code = cli.main(["report", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (code, err)
    assert [p.name for p in victim.iterdir()] == ["report.html"]
    assert (victim / "report.html").read_text() == "the victim's own"


# -- family 11: text, never markup ----------------------------------------------------------------

PAYLOADS = ["[x](../../../../etc/passwd)", "<script>alert(1)</script>", "<img src=x onerror=alert(1)>",
            "![p](http://evil.example/p.png)", "[r]: http://evil.example", "<http://evil.example>",
            "**bold** _em_ `code` ~~gone~~", "- item\n\n# heading\n\n> quote", "a | b\n|---|"]


def _fields(doc: dict) -> dict[str, tuple]:
    """Free-text fields of the fake result, each as (container, key): what a file may hold as text."""
    scn = doc["scenarios"]["async_dispatch"]
    pt = doc["scenarios"]["pinned_transfer"]
    sp = doc["scenarios"]["sync_points"]
    env = doc["environment"]
    return {"title": (scn, "title"), "concept": (scn, "concept"), "variant doc": (scn["variants"][0], "doc"),
            "claim text": (scn["claims"][0], "text"), "evidence": (scn["claims"][0], "evidence"),
            "row reason": (next(r for r in pt["rows"] if r["status"] == "skipped"), "reason"),
            "point label": (pt["points"][0], "label"),
            "equivalence message": (sp["equivalence"], "message"), "gpu": (env, "gpu"),
            "device": (env["frameworks"]["torch"]["env"], "device"), "platform": (env["host"], "platform"),
            "check worst": (next(r for r in pt["rows"] if r["hazard"] and r["check"]["wrong"])["check"], "worst"),
            "floor why": (scn, "floor_why"),
            "cross problem": (pt["cross_framework"][0], "problems"), "command": (doc, "command")}


def _markup_from_the_file(page: str) -> list[str]:
    """Elements of an HTML page that a file's text could have made: a link that is not the report's own
    (to an anchor), an image that is not one of its pictures, a script, an element with an event."""
    p = _Elements()
    p.feed(page)
    bad = []
    for tag, attrs in p.found:
        src = attrs.get("src") or ""
        if tag == "a" and not (attrs.get("href") or "").startswith("#"):
            bad.append(f"<a href={attrs.get('href')}>")
        elif tag == "img" and not (src.startswith("data:image/png;base64,") or
                                   (src.endswith(".png") and "/" not in src and ":" not in src)):
            bad.append(f"<img src={src}>")
        elif tag == "script" or any(k.startswith("on") for k in attrs):
            bad.append(tag)
    return bad


def _markdown_html(md: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").enable("strikethrough").render(md)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> dict[str, str]:
    """The fake result's report.html and report.md (rendered) without any payload: what the report's own
    markup counts."""
    folder = tmp_path_factory.mktemp("clean")
    path = write_fake_result(folder / "in")
    assert cli.main(["report", str(path), "--out", str(folder / "out")]) == 0
    return {"report.html": (folder / "out" / "report.html").read_text(),
            "report.md": _markdown_html((folder / "out" / "report.md").read_text())}


@pytest.fixture
def no_pixels(monkeypatch):
    """The charts' rasterising, the one slow step, skipped: their labels are tested below, drawn."""
    from matplotlib.figure import Figure

    monkeypatch.setattr(Figure, "savefig", lambda self, buf, **kw: buf.write(b"\x89PNG\r\n\x1a\n"))


@pytest.mark.parametrize("field", list(_fields(fake_doc())))
def test_a_files_text_is_shown_as_written_never_as_markup(tmp_path, capsys, field, clean, no_pixels):
    """Every payload at once in one free-text field (tests/sweep_hostile.py tries them one by one, in
    every field)."""
    path = write_fake_result(tmp_path / "in")
    doc = fake_doc()
    box, key = _fields(doc)[field]
    payload = "\n".join(PAYLOADS)
    box[key] = [payload] if isinstance(box.get(key), list) else payload
    path.write_text(json.dumps(doc))
    code = cli.main(["report", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 0, err
    page = (tmp_path / "out" / "report.html").read_text()
    md = (tmp_path / "out" / "report.md").read_text()
    assert not _markup_from_the_file(page), f"report.html: {_markup_from_the_file(page)}"
    assert not _markup_from_the_file(_markdown_html(md)), f"report.md: {_markup_from_the_file(_markdown_html(md))}"
    # no more emphasis, code, headings, quotes, lists or tables than the same report without the payload
    for name, text in (("report.html", page), ("report.md", _markdown_html(md))):
        for tag in ("strong", "em", "code", "del", "h1", "h2", "h3", "blockquote", "li", "table", "hr"):
            assert text.count(f"<{tag}") <= clean[name].count(f"<{tag}"), (name, tag)


# -- family 7: text the report cannot encode or draw --------------------------------------------------

@pytest.mark.parametrize("label", ["$\\frac{1}{$", "$x^$", "price $5 and $6", "$$", "\\$"])
def test_a_label_with_dollars_is_drawn_as_text(tmp_path, capsys, label):
    """A sweep's point labels reach the chart's ticks: `$...$` would be matplotlib's mathtext."""
    path = write_fake_result(tmp_path / "in")
    doc = fake_doc()
    pt = doc["scenarios"]["pinned_transfer"]
    pt["points"][0]["label"] = label
    for r in pt["rows"]:
        if r["point"] == 0:
            r["label"] = label
    path.write_text(json.dumps(doc))
    assert cli.main(["report", str(path), "--out", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "pinned_transfer.png").read_bytes()[:4] == b"\x89PNG"


def test_a_lone_surrogate_in_a_files_text_is_shown_escaped(tmp_path, capsys):
    path = write_fake_result(tmp_path / "in")
    path.write_text(path.read_text().replace('"The host enqueues, the device computes"', '"title \\udc80 here"'))
    assert cli.main(["report", str(path), "--out", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    assert "title \\udc80 here" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_path_that_is_not_utf8_is_refused_in_one_line(tmp_path, command):
    """--out with a byte that is not UTF-8, as a shell hands it over: refused before any work, nothing
    written (compare once measured, wrote the result, then failed printing its name)."""
    out = os.path.join(os.fsencode(tmp_path), b"out\xff")
    path = write_fake_result(tmp_path / "in")
    args = ([b"report", os.fsencode(path)] if command == "report" else
            [b"compare", b"--size", b"smoke", b"--frameworks", b"torch", b"--scenarios", b"event_sync",
             b"--examples", b"1", b"--isolation", b"none", b"--no-report", b"--quiet"])
    r = subprocess.run([os.fsencode(sys.executable), b"-m", b"harness", *args, b"--out", out], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, timeout=300)
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2 and len(err.strip().splitlines()) == 1 and "not UTF-8" in err, (r.returncode, err[-2000:])
    assert not os.path.exists(out)
