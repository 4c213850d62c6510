"""`export`: a result as a tidy CSV that pandas reads with no options, and a Markdown summary for a CI job's
page that shows a file's text as text. The figures are the result's own; bad input is one line, exit 2,
nothing written."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt  # rich's Markdown parser: CommonMark (raw HTML passes) with GFM's tables

from harness.report.export import COLUMNS, to_csv, to_markdown
from harness.results import files as writer
from harness.results.results import read
from harness.run import cli
from tests.report_fixture import fake_doc
from tests.synthetic import doc, row, samples, write

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "results" / "20261206T170754Z_nvidia-h100-80gb-hbm3_full.json"  # the kernel clock in 263 of 267 rows
NO_KERNEL = ROOT / "results" / "20261206T001025Z_nvidia-h100-80gb-hbm3_full.json"  # from before the kernel clock
FIGURES = ("median", "q1", "q3", "processes", "samples")


@pytest.fixture(scope="module")
def pd():
    return pytest.importorskip("pandas", reason="pandas comes with the test extra (pip install -e '.[test]')")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "export", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)


def clocks_in(d: dict) -> set[str]:
    """The clocks the file's rows read, from the JSON itself (not through the exporter's model)."""
    return {c for scn in d["scenarios"].values() for r in scn["rows"] for c in ("host_return", "device_done",
            "device_events", "kernel") if isinstance((r.get("timing") or {}).get(c), dict)}


def grid(d: dict) -> int:
    """scenarios x points x frameworks x variants x clocks, where a scenario's rows fill its grid."""
    n = 0
    for scn in d["scenarios"].values():
        fws, variants = {r["framework"] for r in scn["rows"]}, {r["variant"] for r in scn["rows"]}
        cells = len(scn.get("points") or [{}]) * len(fws) * len(variants)
        assert cells == len(scn["rows"]) or not scn["rows"], "a committed run's rows fill their grid"
        n += cells if scn["rows"] else 0
    return n * len(clocks_in(d))


def test_pandas_reads_the_csv_as_the_result_has_it(pd, tmp_path):
    out = tmp_path / "h100.csv"
    r = run(KERNEL, "--csv", "--out", out)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    df = pd.read_csv(out)
    d = json.loads(KERNEL.read_text())
    assert list(df.columns) == list(COLUMNS)
    assert set(df["clock"]) == clocks_in(d) == {"host_return", "device_done", "device_events", "kernel"}
    assert len(df) == grid(d) == 300 * 4
    for col in (*FIGURES, "point"):
        assert pd.api.types.is_numeric_dtype(df[col]), (col, df[col].dtype)
    assert set(df.loc[df["median"].notna(), "unit"]) == {"s"}
    at = df.set_index(["scenario", "point", "framework", "variant", "clock"]).sort_index()
    timed = 0
    for name, scn in d["scenarios"].items():
        for row in scn["rows"]:
            for clock in clocks_in(d):
                line = at.loc[(name, row["point"], row["framework"], row["variant"], clock)]
                assert line["status"] == row["status"]
                assert line["label"] == row["label"] or (row["label"] == "" and pd.isna(line["label"]))
                stats = (row.get("timing") or {}).get(clock)
                if isinstance(stats, dict):
                    timed += 1
                    assert line["median"] == pytest.approx(stats["median"], rel=1e-12)
                    assert (line["q1"], line["q3"]) == pytest.approx((stats["q1"], stats["q3"]), rel=1e-12)
                    assert line["samples"] == stats["n"] and line["processes"] == len(row["timing"]["processes"])
                else:
                    assert line[list(FIGURES)].isna().all() and isinstance(line["reason"], str)
    assert timed == df["median"].notna().sum() == 267 + 267 + 179 + 263  # host_return, device_done, events, kernel
    skipped = df[df["status"] == "skipped"]
    assert len(skipped) == 33 * 4 and skipped["median"].isna().all()
    assert "not expressible in jax" in skipped.loc[skipped["framework"] == "jax", "reason"].iloc[0]
    pinned = df[df["scenario"] == "pinned_transfer"]
    assert list(dict.fromkeys(pinned["label"])) == ["4 KiB", "1 MiB", "64 MiB"]
    assert json.loads(pinned["params"].iloc[0]) == {"n": 1024, "dtype": "float32"}  # no label, no seed
    assert run(KERNEL, "--csv").stdout == out.read_text()  # stdout: the same bytes


def test_a_file_from_before_the_kernel_clock_exports_without_it(pd, tmp_path):
    d = json.loads(NO_KERNEL.read_text())
    df = pd.read_csv(io.StringIO(to_csv(read(NO_KERNEL))))
    assert set(df["clock"]) == clocks_in(d) == {"host_return", "device_done", "device_events"}
    assert len(df) == grid(d) == sum(len(s["rows"]) for s in d["scenarios"].values()) * 3
    # a CPU run reads two clocks; its rows of one process (no timing.processes) count one process
    cpu = doc([row("torch", "async", samples(1e-3), processes=0), row("jax", "async", status="error", reason="boom")])
    df = pd.read_csv(io.StringIO(to_csv(read(write(cpu, tmp_path / "cpu.json")))))
    assert list(df["clock"]) == ["host_return", "device_done"] * 2
    assert list(df["processes"].iloc[:2]) == [1, 1] and df["median"].iloc[2:].isna().all()
    assert list(df["reason"].iloc[2:]) == ["boom", "boom"]


HOSTILE = {
    "gpu": "<script>alert(1)</script> GPU",
    "version": "[click](https://evil.example/x) ![pic](http://evil.example/p.png)",
    "title": "Calls | queue <img src=x onerror=alert(1)> **bold** `code` $x^2$ www.evil.example",
    "label": "4 KiB | <b>wide</b>",
    "message": "losses differ <iframe src=//evil.example></iframe> & &amp; mail me@evil.example\nsecond line",
}


def test_the_markdown_shows_a_files_text_as_text(tmp_path):
    d = fake_doc()
    d["environment"]["gpu"] = HOSTILE["gpu"]
    d["environment"]["frameworks"]["torch"]["env"]["version"] = HOSTILE["version"]
    d["scenarios"]["async_dispatch"]["title"] = HOSTILE["title"]
    for r in d["scenarios"]["pinned_transfer"]["rows"]:
        r["label"] = HOSTILE["label"] if r["point"] == 0 else r["label"]
    d["scenarios"]["sync_points"]["equivalence"]["message"] = HOSTILE["message"]
    path = tmp_path / "fake.json"
    path.write_text(json.dumps(d))
    md = to_markdown(read(path), path.name)
    html = MarkdownIt("commonmark").enable("table").render(md)
    for tag in ("<script", "<img", "<iframe", "<a ", "<b>", "<strong>bold", "<code>code", "<br"):
        assert tag not in html, (tag, html)
    # nor a bare URL, www. host or address that GitHub's Markdown would make a link of
    assert not re.search(r"(?<!\\)://|www\.evil|(?<!\\)@evil", md), md
    assert "&lt;script&gt;alert(1)&lt;/script&gt; GPU" in html and "&lt;b&gt;wide&lt;/b&gt;" in html
    assert "&lt;iframe src=//evil.example&gt;&lt;/iframe&gt; &amp; &amp;amp; mail" in html  # as written, one line
    # a "|" in a label stays inside its cell: every line of a table has the header's number of cells
    tables = html.split("<table>")[1:]
    assert len(tables) == 3  # one per timed scenario; event_sync was not timed
    for t in tables:
        head = t.split("</thead>")[0].count("<th>")
        assert all(tr.count("<td>") == head for tr in t.split("<tbody>")[1].split("<tr>")[1:]), t
    assert "4 KiB &#124; <b>" not in md and "4 KiB &#124; \\<b\\>wide" in md


def test_the_summary_of_a_committed_run():
    md = to_markdown(read(KERNEL), KERNEL.name)
    d = json.loads(KERNEL.read_text())
    assert "GPU NVIDIA H100 80GB HBM3 · driver 580.159.04 · torch 2.11.0+cu130 · cupy 14.2.0 · jax 0.11.2" in md
    assert md.count("\n### ") == len(d["scenarios"]) and md.count("equivalence: **passed**") == len(d["scenarios"])
    assert "| sync\\_each | 87.35 ms (kernel 87.34 ms) | 88.86 ms (kernel 88.84 ms) | 89.97 ms (kernel 86.89 ms) |" in md
    assert "claims: 9 confirmed\n" in md and "| 4 KiB | h2d\\_jit\\_transfer | skipped | skipped | 67.7 µs" in md
    assert "kernel" not in to_markdown(read(NO_KERNEL), NO_KERNEL.name).split("### ", 1)[1]


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    good = write(doc([row("torch", "async")]), d / "good.json")
    text = good.read_text()
    (d / "truncated.json").write_text(text[: len(text) // 2])
    (d / "notes.txt").write_text("hello")
    (d / "a_file").write_text("")
    (d / "link.json").symlink_to(good)
    return {"good": good, "missing": d / "nope.json", "truncated": d / "truncated.json", "notes": d / "notes.txt",
            "folder": d, "link": d / "link.json", "under_a_file": d / "a_file" / "x.csv"}


BAD = {  # args, words in the one line
    "no form": (["{good}"], "one of the arguments --csv --markdown is required"),
    "both forms": (["{good}", "--csv", "--markdown"], "not allowed with argument"),
    "missing": (["{missing}", "--csv"], "{missing}: no such file"),
    "truncated": (["{truncated}", "--csv"], "truncated?"),
    "not a result": (["{notes}", "--markdown"], "not a result file"),
    "out is the result": (["{good}", "--csv", "--out", "{good}"], "is the result file itself"),
    "out links to the result": (["{good}", "--csv", "--out", "{link}"], "is the result file itself"),
    "out is a folder": (["{good}", "--markdown", "--out", "{folder}"], "is a folder"),
    "out under a file": (["{good}", "--csv", "--out", "{under_a_file}"], "is not a folder"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, bad):
    args, words = BAD[case]
    names = {k: str(v) for k, v in bad.items()}
    before = {p: p.stat().st_mtime_ns for p in bad["folder"].iterdir()}
    r = run(*[a.format(**names) for a in args])
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[-500:], r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error:") and words.format(**names) in lines[0], r.stderr
    assert {p: p.stat().st_mtime_ns for p in bad["folder"].iterdir()} == before  # nothing written, nothing touched


def test_out_replaces_another_file_whole_or_not_at_all(tmp_path, monkeypatch, capsys):
    good = write(doc([row("torch", "async")]), tmp_path / "good.json")
    out = tmp_path / "summary.md"
    out.write_text("last run's summary\n")

    def full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer.os, "replace", full)
    assert cli.main(["export", str(good), "--markdown", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == f"harness: error: cannot write {out}: No space left on device"
    assert out.read_text() == "last run's summary\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "good.json", "summary.md"]  # no temporary file left
    monkeypatch.undo()
    assert cli.main(["export", str(good), "--markdown", "--out", str(out)]) == 0
    assert out.read_text() == to_markdown(read(good), good.name) and capsys.readouterr().out == f"export: {out}\n"
