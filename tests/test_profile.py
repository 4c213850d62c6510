"""Our variants in the tools GPU people use: NVTX ranges per row, and `compare --profile`'s traces.

On the CPU: a compare with --profile writes torch.profiler's Chrome trace and jax.profiler's trace of one
extra repeat per row into the run's folder, names them in a result that validates, links them from the
report, and changes no sample count; each row's warm-up and repeats are exactly one range each, named
scenario/framework/variant, never pushed inside a timed call. CuPy (GPU only) writes no trace.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from harness.measure import timing
from harness.results.results import ResultError, validate
from tests.synthetic import load
from harness.measure.timing import TimingConfig
from tests.conftest import backend_or_skip

SCENARIO = "sync_points"  # two variants, small and quick on the CPU in both frameworks
FIXED = TimingConfig(warmup=1, min_repeats=3, max_repeats=3, min_time_s=0.0)  # exactly 3 samples a row


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    """One `compare --profile` of torch and JAX on the CPU, in this process: (exit status, result file)."""
    backend_or_skip("torch")
    backend_or_skip("jax")
    from harness.run.cli import main

    out = tmp_path_factory.mktemp("runs")
    rc = main(["compare", "--scenarios", SCENARIO, "--frameworks", "torch,jax", "--size", "smoke", "--seed", "3",
               "--isolation", "none", "--no-equivalence", "--quiet", "--out", str(out), "--profile"])
    results = sorted(out.glob("*.json"))
    assert len(results) == 1, f"compare wrote {results}"
    return rc, results[0]


def _timed_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in doc["scenarios"][SCENARIO]["rows"] if r["status"] in ("ok", "wrong")]


def test_compare_profile_writes_each_frameworks_trace_of_every_row(profiled_run):
    rc, path = profiled_run
    assert rc == 0
    doc = load(path)  # validates, the rows' profile paths included
    rows = _timed_rows(doc)
    assert {r["framework"] for r in rows} == {"torch", "jax"} and len(rows) == 4
    for r in rows:
        prof, name = r["profile"], f"{SCENARIO}/{r['framework']}/{r['variant']} profiled"
        trace = path.parent / prof["trace"]
        assert trace.parent == path.with_suffix("") and trace.is_file(), prof  # in the run's own folder
        if r["framework"] == "torch":
            assert prof["tool"].startswith("torch.profiler") and trace.name.endswith(".trace.json")
            events = json.loads(trace.read_text())["traceEvents"]
        else:
            assert prof["tool"].startswith("jax.profiler") and trace.name.endswith(".trace.json.gz")
            with gzip.open(trace, "rt") as f:
                events = json.load(f)["traceEvents"]
            xplane = path.parent / prof["xplane"]
            assert xplane.is_file() and xplane.stat().st_size > 0
        # the profiled repeat's own annotation, and no other row's
        assert [e for e in events if e.get("name") == name], f"{trace.name} has no event {name!r}"
        others = {f"{SCENARIO}/{o['framework']}/{o['variant']} profiled" for o in rows} - {name}
        assert not [e for e in events if e.get("name") in others]


def test_the_report_links_every_trace(profiled_run):
    _, path = profiled_run
    doc = load(path)
    folder = path.with_suffix("")  # the report's folder
    md, page = (folder / "report.md").read_text(), (folder / "report.html").read_text()
    for r in _timed_rows(doc):
        for key in ("trace", "xplane"):
            if key not in r["profile"]:
                continue
            target = (path.parent / r["profile"][key]).resolve()
            md_links = [h for h in re.findall(r"\]\(([^)#]+)\)", md) if (folder / h).resolve() == target]
            html_links = [h for h in re.findall(r'<a href="([^"#]+)"', page) if (folder / h).resolve() == target]
            assert md_links and html_links, f"{target.name} is not linked from the report"


def test_a_profile_path_is_a_plain_file_inside_the_results_folder(profiled_run, tmp_path):
    """Like the timelines: no '..', no absolute path, no deeper folder; and the report links only a
    regular file (a symlink planted where a trace was is named, not linked)."""
    _, path = profiled_run
    doc = json.loads(path.read_text())
    row = _timed_rows(doc)[0]
    good = row["profile"]["trace"]
    for bad in ("../x.trace.json", "/etc/x.trace.json", "a/b/x.trace.json", "x.json", ".hidden.trace.json",
                "x.trace.json/", "x.png", "x.trace.json\n"):
        row["profile"]["trace"] = bad
        with pytest.raises(ResultError, match="profile.trace"):
            validate(doc)
    row["profile"]["trace"] = good
    row["profile"]["extra"] = "x"
    with pytest.raises(ResultError, match="profile"):
        validate(doc)
    del row["profile"]["extra"]
    validate(doc)

    from harness.report.html import build

    copy = tmp_path / path.name
    copy.write_text(json.dumps(doc))
    (tmp_path / path.stem).mkdir()
    inside = tmp_path / "real.trace.json"
    inside.write_text("{}")
    other = _timed_rows(doc)[1]["profile"]["trace"]
    os.symlink(inside, tmp_path / good)  # links where the traces should be, in the folder and out of it
    os.symlink(path.parent / other, tmp_path / other)
    md = build(doc, copy, tmp_path / "report")["report.md"].decode()
    for p in (good, other):
        assert f"`{p}` (not found next to the result)" in md
        assert not re.search(r"\]\([^)]*" + re.escape(Path(p).name) + r"\)", md)
    elsewhere = tmp_path / "elsewhere"  # a folder link on the way out: the regular files behind it are not linked
    elsewhere.mkdir()
    (elsewhere / path.name).write_text(json.dumps(doc))
    os.symlink(path.with_suffix(""), elsewhere / path.stem)
    md = build(doc, elsewhere / path.name, elsewhere / "report")["report.md"].decode()
    third = _timed_rows(doc)[2]["profile"]["trace"]
    assert (path.parent / third).is_file() and f"`{third}` (not found next to the result)" in md


def _counts(doc: dict[str, Any]) -> dict[tuple[str, str], int]:
    out = {}
    for r in _timed_rows(doc):
        t = r["timing"]
        assert all(len(v) == t["device_done"]["n"] for k, v in t["samples"].items()), t["samples"].keys()
        out[(r["framework"], r["variant"])] = t["device_done"]["n"]
    return out


def test_profile_changes_no_sample_count():
    """The profiled repeat is one more run after the timed ones, never a sample."""
    backend_or_skip("torch")
    backend_or_skip("jax")
    from harness.measure.profiling import plan_profiles
    from harness.run.progress import QuietUI
    from harness.run.runner import CompareOptions, run_compare

    counts = {}
    for profile in (False, True):
        opts = CompareOptions(scenarios=[SCENARIO], frameworks=["torch", "jax"], size="smoke", examples=1, seed=4,
                              isolation="none", equivalence=False, timing_config=FIXED, profile=profile)
        doc = run_compare(opts, QuietUI())
        assert all(("profile" in r) == profile for r in _timed_rows(doc))
        assert bool(plan_profiles(doc, "stem")) == profile
        validate(json.loads(json.dumps(doc)))
        counts[profile] = _counts(doc)
    assert counts[False] == counts[True] == {k: FIXED.max_repeats for k in counts[False]} and len(counts[True]) == 4


# -- NVTX ranges ------------------------------------------------------------------------------------


class _Recorder:
    """Stands in for Backend.range and around each timed call: the order of pushes, pops and calls."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.depth = 0  # open ranges

    @contextlib.contextmanager
    def range(self, name: str) -> Any:
        self.log.append(("push", name))
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            self.log.append(("pop", name))


@pytest.mark.parametrize("fw", ["torch", "jax"])
def test_each_row_has_one_warmup_range_and_one_repeats_range_outside_every_timed_call(fw, monkeypatch):
    b = backend_or_skip(fw)
    from harness.workers import handlers

    rec = _Recorder()
    monkeypatch.setattr(b, "range", rec.range)  # the process-wide instance the handlers use
    real = timing._timed_call

    def timed_call(*a: Any, **k: Any) -> Any:
        rec.log.append(("call", ""))
        pushes = len(rec.log)
        got = real(*a, **k)
        assert len(rec.log) == pushes, f"a range was pushed or popped inside a timed call: {rec.log[pushes:]}"
        rec.log.append(("done", ""))
        return got

    monkeypatch.setattr(timing, "_timed_call", timed_call)
    params = {"steps": 6, "batches": 2, "batch": 32, "dim": 8, "dtype": "float32", "seed": 1, "label": "tiny"}
    cfg = TimingConfig(warmup=2, min_repeats=3, max_repeats=3, min_time_s=0.0, profile=True)
    rows = handlers.time_point(fw, SCENARIO, params, cfg, True, progress=lambda _t: None)["rows"]
    variants = [r["variant"] for r in rows if r["status"] == "ok"]
    assert variants == ["item_each_step", "on_device"]
    ranges = [(op, n) for op, n in rec.log if op in ("push", "pop")]
    want = []
    for v in variants:
        row = f"{SCENARIO}/{fw}/{v}[tiny]"
        want += [("push", f"{row} warm-up"), ("pop", f"{row} warm-up"), ("push", f"{row} repeats"),
                 ("pop", f"{row} repeats")]
    for v in variants:  # profiled once every row of the point is timed: no profiler before a timed call
        want += [("push", f"{SCENARIO}/{fw}/{v}[tiny] profiled"), ("pop", f"{SCENARIO}/{fw}/{v}[tiny] profiled")]
    assert ranges == want
    # every timed call (first, warm-up, repeats) inside its row's warm-up or repeats range, 1 + 2 + 3 a row
    for v in variants:
        row = f"{SCENARIO}/{fw}/{v}[tiny]"
        for part, n in (("warm-up", 3), ("repeats", 3)):
            i, j = rec.log.index(("push", f"{row} {part}")), rec.log.index(("pop", f"{row} {part}"))
            assert [op for op, _ in rec.log[i + 1:j]] == ["call", "done"] * n


def test_an_unnamed_measurement_pushes_no_range(monkeypatch):
    """selfcheck and the host calibration measure unnamed: no range, nothing for them in a profile."""
    b = backend_or_skip("torch")
    rec = _Recorder()
    monkeypatch.setattr(b, "range", rec.range)  # the process-wide instance the handlers use
    x = b.to_device(__import__("numpy").ones(4, "float32"))
    timing.measure(lambda: x + 1, b, TimingConfig(warmup=1, min_repeats=2, max_repeats=2, min_time_s=0.0))
    assert rec.log == []


def test_torch_on_the_cpu_pushes_no_nvtx_range():
    """A CPU build's torch.cuda.nvtx raises: the range is torch.profiler's record_function alone there."""
    b = backend_or_skip("torch")
    if b.on_gpu:
        pytest.skip("torch has a CUDA device here: its ranges are NVTX")
    with pytest.raises(RuntimeError):
        b.fw.cuda.nvtx.range_push("x")  # what a range would meet, were it pushed
    with b.range("a/torch/row repeats"):
        pass
    assert b.env()["nvtx"].startswith("none")


def test_jax_pushes_an_nvtx_range_where_the_library_is_loaded(monkeypatch):
    """A TraceAnnotation is no NVTX range: on a GPU, JAX's range also pushes one through libnvToolsExt."""
    b = backend_or_skip("jax")
    calls = []

    class FakeNvtx:
        def nvtxRangePushA(self, name: bytes) -> int:  # noqa: N802 - the C name
            calls.append(("push", name))
            return 0

        def nvtxRangePop(self) -> int:  # noqa: N802
            calls.append(("pop", None))
            return 0

    monkeypatch.setattr(b, "_nvtx", FakeNvtx())
    with b.range("s/jax/v[4 KiB] repeats"):
        calls.append(("inside", None))
    assert calls == [("push", b"s/jax/v[4 KiB] repeats"), ("inside", None), ("pop", None)]


def test_a_rank_other_than_0_runs_the_profiled_repeat_and_sends_no_trace():
    backend_or_skip("torch")
    from harness.workers import handlers

    params = {"steps": 6, "batches": 2, "batch": 32, "dim": 8, "dtype": "float32", "seed": 1, "rank": 1}
    cfg = TimingConfig(warmup=1, min_repeats=2, max_repeats=2, min_time_s=0.0, profile=True)
    rows = handlers.time_point("torch", SCENARIO, params, cfg, True, progress=lambda _t: None)["rows"]
    kept = {"tool": rows[0]["profile"]["tool"], "why": "only rank 0's trace is kept"}
    assert [r["profile"] for r in rows] == [kept] * 2


def test_cupy_writes_no_trace_and_says_so():
    b = backend_or_skip("cupy")
    with b.profiling() as got:
        pass
    assert "files" not in got and "NVTX" in got["why"]
