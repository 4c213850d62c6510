"""The report a reader sees: the terminal table, report.md and a self-contained report.html.

Built from a hand-made result shaped like an H200 run (tests/report_fixture.py: sweeps, hazards,
skipped/error/timeout/crashed rows, floors, device events present and absent, a timeline picture and
a missing one, a scenario not timed). report.html is opened in headless Chromium where `chromium` is
installed (CI installs it): every image must load and every scenario must appear.
"""
from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.report import html as report_html
from harness.report.report import HIGH_SPREAD, render_terminal, scenario_table
from harness.results.model import Result, ScenarioResult
from harness.results.results import read
from tests.synthetic import load
from tests.report_fixture import fake_doc, write_fake_result
from tests.test_cli import run

SCENARIOS = list(fake_doc()["scenarios"])


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    return write_fake_result(tmp_path / "results")


def terminal_text(doc: dict) -> str:
    from rich.console import Console

    console = Console(record=True, width=220, color_system=None)
    render_terminal(doc, console)
    return console.export_text()


def test_terminal_table_is_compact_and_flags_high_spread(fake):
    doc = load(fake)
    text = terminal_text(doc)
    lines = text.splitlines()
    # One line per variant: device-done (host-return) in the table's unit, a flag where the spread is high.
    row = next(ln for ln in lines if ln.lstrip().startswith("async_poll"))
    assert row.split()[:2] == ["async_poll", "!"] and "(! 18%)" in row and "95.0 (87.6)" in row
    calm = next(ln for ln in lines if ln.lstrip().startswith("async "))
    assert "!" not in calm and "87.5 (0.550)" in calm and "87.5 (1.15)" in calm
    assert "Times in milliseconds (ms)" in text
    # A sweep names each point with its own unit; the hazard's wrong runs; footnoted skips and failures.
    assert re.search(r"4 MiB \(µs\)", text) and re.search(r"1 GiB \(ms\)", text)
    assert "17/20" in text and "skipped¹" in text and "error²" in text
    assert "¹ jax skipped: JAX cannot pin a user's numpy array" in text
    assert "[memory] kind 'pinned_host' | not supported" in text  # brackets survive rich's markup
    assert "timeout¹" in text and "crashed²" in text and "event_sync — Events order streams (not timed)" in text
    for name in SCENARIOS:
        assert name in text


def test_flag_follows_the_threshold(fake):
    doc = load(fake)
    scn = doc["scenarios"]["async_dispatch"]
    row = next(r for r in scn["rows"] if r["framework"] == "jax" and r["variant"] == "async_poll")
    dd = row["timing"]["device_done"]
    dd["q1"], dd["q3"] = dd["median"] * (1 - HIGH_SPREAD / 4), dd["median"] * (1 + HIGH_SPREAD / 4)
    dd["iqr"] = dd["q3"] - dd["q1"]
    from rich.console import Console

    console = Console(record=True, width=220, color_system=None)
    table, _ = scenario_table(ScenarioResult.from_dict(scn), ["torch", "cupy", "jax"])
    console.print(table)
    assert "(!" not in console.export_text()


def test_report_files(fake):
    page = report_html.make_report(fake)
    out = fake.with_suffix("")
    assert page == out / "report.html"
    names = {p.name for p in out.iterdir()}
    assert names == {"report.md", "report.html", "async_dispatch.png", "pinned_transfer.png", "sync_points.png",
                     "async_dispatch.timeline.png"}
    for n in names - {"report.md", "report.html"}:
        assert (out / n).read_bytes().startswith(report_html.PNG_MAGIC)
    md = (out / "report.md").read_text()
    for name in SCENARIOS:
        assert re.search(rf"^## \d+\. {name} — ", md, re.M)
    assert "![async_dispatch: timeline](async_dispatch.timeline.png)" in md
    assert "timeline picture `timelines/missing.png` could not be read" in md
    assert "Not timed in this run." in md
    # Host-return against device-done, % of floor, the hazard's count, claims with their numbers.
    assert "| `async` (hazard)" not in md and "`read_before_sync` (hazard)" in md
    assert "wrong 17/20 runs" in md and "98%" in md and "0.006" in md
    assert "**✗ refuted** — iterations = 12 ≤ 100 (cpu_iters 12)" in md
    assert "equivalence under hypothesis: **failed**" in md
    assert "float32 GEMM 51.0 TFLOP/s" in md and "4.23 TB/s" in md
    html = (out / "report.html").read_text()
    assert 'src="http' not in html and "<link" not in html and "<script" not in html  # self-contained
    embedded = re.findall(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(embedded) == 4
    for data in embedded:  # whole PNGs (a browser shows a truncated one as loaded, half drawn)
        png = base64.b64decode(data, validate=True)
        assert png.startswith(report_html.PNG_MAGIC) and png.endswith(b"IEND\xaeB`\x82")
    assert sorted(map(base64.b64decode, embedded)) == sorted((out / n).read_bytes() for n in names
                                                             if n.endswith(".png"))
    assert "&lt;and&gt;" in html  # the concept's text is escaped
    for name in SCENARIOS:
        assert f'id="{name}"' in html
    assert not list(fake.parent.glob(".*tmp*"))


def test_only_a_sweep_over_numbers_is_drawn_as_lines():
    from harness.report.html import ordered_sweep

    sizes = [{"n": 1024, "dtype": "float32", "label": "4 KiB", "seed": 1}, {"n": 262144, "dtype": "float32",
                                                                          "label": "1 MiB", "seed": 1}]
    kinds = [{"kind": "normal", "n": 16, "label": "normal", "seed": 1}, {"kind": "fill", "n": 16, "label": "fill",
                                                                         "seed": 1}]
    assert ordered_sweep(sizes) and not ordered_sweep(kinds)
    assert not ordered_sweep([{"n": 1, "flag": True}, {"n": 2, "flag": False}])


def test_report_handles_a_result_without_ceilings_or_timelines(fake):
    doc = json.loads(fake.read_text())
    doc["environment"]["machine"] = {}
    for scn in doc["scenarios"].values():
        scn.pop("timelines", None)
        for r in scn["rows"]:
            r.pop("floor_s", None), r.pop("pct_of_floor", None)
    fake.write_text(json.dumps(doc))
    report_html.make_report(fake)
    md = fake.with_suffix("").joinpath("report.md").read_text()
    assert "machine ceilings: not measured" in md and "% of floor" not in md and "Timeline" not in md


def test_report_survives_what_a_result_file_can_hold(fake):
    """NaN is written as null and infinities as strings; a metric may be missing. (A row that names a point
    the scenario lacks is refused when the file is loaded: tests/test_bad_input.py.)"""
    doc = json.loads(fake.read_text())
    rows = doc["scenarios"]["async_dispatch"]["rows"]
    rows[2]["timing"]["metrics"]["cpu_iters_while_waiting"] = None
    rows[0]["pct_of_floor"] = "inf"
    doc["scenarios"]["async_dispatch"]["claims"][0]["numbers"] = {"ratio": None, "host_return_s": "inf"}
    del doc["seed"]
    fake.write_text(json.dumps(doc))
    report_html.make_report(fake)
    text = terminal_text(load(fake))
    assert "cpu_iters_while_waiting" in text
    md = fake.with_suffix("").joinpath("report.md").read_text()
    assert "(ratio —, host_return_s inf)" in md


def test_rerender_replaces_files_and_nothing_partial(fake, monkeypatch):
    out = fake.with_suffix("")
    report_html.make_report(fake)
    first = (out / "report.html").read_bytes()
    doc = json.loads(fake.read_text())
    doc["seed"] = 98765
    fake.write_text(json.dumps(doc))
    report_html.make_report(fake)
    assert (out / "report.html").read_bytes() != first and b"98765" in (out / "report.html").read_bytes()
    # A failure while rendering writes nothing: everything is rendered before the first file is written.
    fresh = fake.parent / "fresh"

    def boom(*a, **k):
        raise RuntimeError("chart failed")

    monkeypatch.setattr(report_html, "chart_png", boom)
    with pytest.raises(RuntimeError):
        report_html.make_report(fake, fresh)
    assert not fresh.exists() and not list(fake.parent.glob(".fresh.tmp-*"))


BAD_REPORTS = {
    "missing file": (lambda d: d / "nope.json", "no such file"),
    "not json": (lambda d: _write(d / "x.json", "{ truncated"), "not JSON"),
    "wrong schema": (lambda d: _write(d / "x.json", json.dumps({"schema": "other/1"})), "schema 'other/1'"),
    "a folder": (lambda d: d, "is a folder"),
}


def _write(p: Path, text: str) -> Path:
    p.write_text(text)
    return p


@pytest.mark.parametrize("case", list(BAD_REPORTS), ids=list(BAD_REPORTS))
def test_report_bad_input_is_one_line_exit_2(case, tmp_path):
    make, expected = BAD_REPORTS[case]
    src = make(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    r = run("report", str(src), "--out", str(tmp_path / "rep"))
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error:") and expected in lines[0], r.stderr
    assert sorted(tmp_path.rglob("*")) == before


def test_report_out_is_a_file(fake):
    blocker = fake.parent / "a_file"
    blocker.write_text("x")
    r = run("report", str(fake), "--out", str(blocker))
    assert r.returncode == 2 and "exists and is not a folder" in r.stderr and blocker.read_text() == "x"


def test_report_command(fake, tmp_path):
    r = run("report", str(fake), "--out", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "rep" / "report.html").exists() and "report.html" in r.stdout


# ---------------------------------------------------------------------------------------------- Chromium

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# After the page has loaded: how many images decoded, and which scenario sections are in the DOM.
PROBE = """<script>window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  var ids = Array.prototype.slice.call(document.querySelectorAll("h2[id]")).map(function (h) { return h.id; });
  var p = document.createElement("pre"); p.id = "probe";
  p.textContent = "loaded " + ok + " of " + imgs.length + " ids " + ids.join(",");
  document.body.appendChild(p);
});</script>"""


def probe(page: Path, tmp_path: Path, extra: str = "") -> tuple[int, int, list[str]]:
    """Open a copy of the page (with the probe and `extra` HTML) in headless Chromium; read the probe back."""
    copy = tmp_path / f"probe-{len(extra)}.html"
    copy.write_text(page.read_text().replace("</body>", extra + PROBE + "</body>"))
    profile = tmp_path / f"profile-{len(extra)}"
    profile.mkdir()
    r = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=10000",
                        "--dump-dom", copy.as_uri()], capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="probe">loaded (\d+) of (\d+) ids ([^<]*)</pre>', r.stdout)
    assert m, f"chromium gave no probe (rc {r.returncode}): {r.stderr[-2000:]}"
    return int(m.group(1)), int(m.group(2)), m.group(3).split(",")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (CI installs Debian's `chromium` in .ci/run)")
def test_report_html_in_headless_chromium(fake, tmp_path):
    page = report_html.make_report(fake)
    loaded, total, ids = probe(page, tmp_path)
    assert (loaded, total) == (4, 4)
    for name in SCENARIOS:
        assert name in ids
    # The probe can fail: a broken picture is seen as not loaded.
    loaded, total, _ = probe(page, tmp_path, '<img alt="broken" src="data:image/png;base64,AAAA">')
    assert (loaded, total) == (4, 5)


WIDTH_PROBE = """<script>window.addEventListener("load", function () {
  var p = document.createElement("pre"); p.id = "width";
  p.textContent = "scroll " + document.documentElement.scrollWidth + " view " + window.innerWidth;
  document.body.appendChild(p);
});</script>"""
COMMITTED = sorted((Path(__file__).resolve().parent.parent / "results").glob("*_full.json"))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (CI installs Debian's `chromium` in .ci/run)")
@pytest.mark.parametrize("width", [1280, 1400])
def test_reports_do_not_scroll_sideways(tmp_path, width):
    """The committed reports, and a page whose navigation names every scenario (its links must wrap).
    A result committed without its report (a lease's `--no-report` run) has no page to measure."""
    from harness.report.render import render_html
    from scenarios import ORDER

    every = tmp_path / "every" / "report.html"
    every.parent.mkdir()
    every.write_text(render_html([("h", 1, "t", "top"), ("h", 2, "Summary", "summary"),
                                  *[("h", 2, n, n) for n in ORDER], ("h", 2, "Environment", "environment")], {}, "t"))
    reported = [r for r in COMMITTED if (r.with_suffix("") / "report.html").is_file()]
    for result in [*reported, every.parent.with_suffix(".json")]:
        copy = tmp_path / f"{result.stem}.html"
        copy.write_text((result.with_suffix("") / "report.html").read_text().replace("</body>", WIDTH_PROBE + "</body>"))
        profile = tmp_path / f"profile-{result.stem}"
        profile.mkdir()
        r = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},2000",
                            "--virtual-time-budget=10000", "--dump-dom", copy.as_uri()],
                           capture_output=True, text=True, timeout=120)
        m = re.search(r'<pre id="width">scroll (\d+) view (\d+)</pre>', r.stdout)
        assert m, r.stderr[-2000:]
        assert int(m.group(1)) <= int(m.group(2)), (result.name, m.group(0))


def _without_pictures(page: str) -> str:
    """report.html with its embedded PNGs blanked: matplotlib's bytes differ between versions/machines."""
    return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:image/png;base64,…", page)


@pytest.mark.parametrize("result", COMMITTED, ids=[p.stem for p in COMMITTED])
def test_committed_reports_equal_what_the_renderer_makes(result):
    """Re-rendering a committed result changes nothing a reader sees: report.md and the HTML text are
    equal, and the pictures are the same files (by name; their bytes depend on matplotlib's version).
    When this fails, run `python -m harness report results/<file>.json` and commit the folder. `read` reads
    through the typed model (harness/results/model.py), so this is also the model's check on every committed file.
    A result committed without its report is said, not passed."""
    folder = report_html.default_out(result)
    if not (folder / "report.md").is_file():
        pytest.skip(f"{result.name} is committed without its report ({folder.name}/report.md)")
    files = report_html.build(read(result), result, folder)
    assert files["report.md"].decode() == (folder / "report.md").read_text()
    assert _without_pictures(files["report.html"].decode()) == _without_pictures((folder / "report.html").read_text())
    drawn = {n for n in files if n.endswith(".png")}
    timelines = {Path(s["timelines"]["png"]).name for s in load(result)["scenarios"].values() if s.get("timelines")}
    assert {p.name for p in folder.glob("*.png")} == drawn | timelines
    assert all(files[n][:8] == report_html.PNG_MAGIC for n in drawn)


def test_a_metric_is_described_by_its_own_result_not_by_todays_spec(tmp_path):
    """A report says what each metric meant when the run measured it: the result's metrics_doc. A file
    written before results carried it gets no description rather than today's, which may describe another
    method (collectives' algbw was the slowest rank's single call before it was 20 calls' mean over ranks)."""
    from harness.report.html import _figures
    from tests.report_fixture import ok_row

    rows = [ok_row("collectives", "torch", "out_of_place", 1e-4, 1e-5, metrics={"algbw_GBps": 2.0})]
    old = {"rows": rows, "variants": [{"name": "out_of_place"}]}
    new = dict(old, metrics_doc={"algbw_GBps": "bytes / time as this run measured it"})
    text = lambda scn: repr(_figures("collectives", ScenarioResult.from_dict(scn), ["torch"], tmp_path / "r.json",  # noqa: E731
                                     None, {}))
    assert "as this run measured it" in text(new)
    assert "algbw_GBps`:" not in text(old)


def test_a_report_says_which_median_its_file_holds():
    """A file written since rows' medians are the processes' says so (row_median), and its report says so; an
    older file, whose rows pooled the repeats, keeps the words it was drawn with."""
    from harness.report.html import _clocks_said

    new, old = Result.from_dict({"row_median": "processes"}), Result.from_dict({})
    assert "The median of the worker processes' medians" in _clocks_said(new)
    assert "Medians over the repeats" in _clocks_said(old) and "processes' medians" not in _clocks_said(old)
