"""The typed result (harness/results/model.py) and its one loader (harness/results/results.py read): every committed
result file reads into the model and writes back what it held, an older version is upgraded once, and
the records a run builds write the fields the files have. Rendering the committed reports from the
model is tests/test_report.py test_committed_reports_equal_what_the_renderer_makes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.results import results
from harness.results.model import CLOCKS, Check, Process, ProcessRow, ProcessTiming, Result, Row, Timing, counts_of
from harness.results.results import SCHEMA, ResultError, read, upgrade
from tests import synthetic
from harness.results.schema_check import Checker

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = sorted([*(ROOT / "results").glob("*.json"), *(ROOT / "results" / "regress").glob("*.json")])
SCHEMA_DIR = ROOT / "harness" / "results" / "schema"


def test_every_committed_result_is_found():
    assert len(COMMITTED) >= 20  # the glob found the files, not nothing


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
def test_a_committed_result_reads_into_the_model_and_writes_back_what_it_held(path):
    """to_dict(from_dict(d)) == upgrade(d), key order and nulls included: no field is lost or made up."""
    raw = json.loads(path.read_text())
    got = read(path)
    assert isinstance(got, Result) and all(isinstance(r, Row) for s in got.scenarios.values() for r in s.rows)
    assert json.dumps(got.to_dict()) == json.dumps(upgrade(raw))
    assert got.schema == SCHEMA


@pytest.mark.parametrize("path", [p for p in COMMITTED if '"triptych.result/1"' in p.read_text()[:200]],
                         ids=lambda p: p.name)
def test_a_version_1_file_is_valid_against_the_version_1_schema_and_upgrades_to_the_version_alone(path):
    """harness/results/schema/result-1.schema.json is what a /1 file was written against; its upgrade changes the
    version and nothing else (that the result is valid /2: read, above, validates after upgrading)."""
    raw = json.loads(path.read_text())
    Checker(json.loads((SCHEMA_DIR / "result-1.schema.json").read_text())).check(raw)
    up = upgrade(raw)
    assert up["schema"] == SCHEMA and list(up) == list(raw)
    assert {k: v for k, v in up.items() if k != "schema"} == {k: v for k, v in raw.items() if k != "schema"}


def test_an_unknown_version_is_refused_and_a_current_one_left_as_it_is(tmp_path):
    doc = json.loads(COMMITTED[0].read_text())
    assert upgrade(doc | {"schema": SCHEMA}) == doc | {"schema": SCHEMA}
    p = tmp_path / "x.json"
    p.write_text(json.dumps(doc | {"schema": "triptych.result/3"}))
    with pytest.raises(ResultError, match="is not 'triptych.result/2' nor 'triptych.result/1'"):
        read(p)


def test_what_the_model_does_not_know_is_kept_where_it_was():
    row = {"scenario": "s", "framework": "torch", "variant": "v", "future": {"a": 1}, "status": "ok",
           "timing": {"host_return": {}, "device_done": {}, "device_events": None, "noise": None, "later": [1],
                      "processes": [{"n": 3, "stopped": "noise", "noise": None, "median": 1.0,
                                     "first_call_s": 0.1, "new": True}]},
           "check": {"checked": 1, "wrong": 0, "worst": "", "max_rel_err": None, "by": "x"},
           "host_syncs": None, "sync_method": "m", "sync_why": ""}
    r = Row.from_dict(row)
    assert r.extra == {"future": {"a": 1}} and r.timing.extra == {"later": [1]}
    assert r.timing.processes[0].extra == {"new": True} and r.check.extra == {"by": "x"}
    assert json.dumps(r.to_dict()) == json.dumps(row)


def test_a_built_row_writes_the_fields_a_run_writes():
    """A skipped row has no timing keys; a timed one writes host_syncs, null or not, wherever the census
    ran (sync_method), and the nulls the files have (device_events, max_rel_err, a process's noise)."""
    skipped = Row(scenario="s", framework="jax", variant="v", hazard=False, setup_s=0.5, status="skipped",
                  reason="why")
    assert skipped.to_dict() == {"scenario": "s", "framework": "jax", "variant": "v", "hazard": False,
                                 "setup_s": 0.5, "status": "skipped", "reason": "why"}
    timed = Row(scenario="s", framework="jax", variant="v", status="ok",
                timing=Timing(host_return={"median": 1.0}, device_done={"median": 1.0}, device_events=None,
                              metrics={}, samples={}, noise=None, processes=[Process(n=2, stopped="noise", noise=None, median=1.0,
                                                             first_call_s=0.1)]),
                check=Check(checked=1, wrong=0, worst="", max_rel_err=None), sync_method="m", sync_why="w")
    d = timed.to_dict()
    assert list(d) == ["scenario", "framework", "variant", "status", "timing", "check", "host_syncs",
                       "sync_method", "sync_why"]
    assert d["host_syncs"] is None and d["check"]["max_rel_err"] is None and "against" not in d["check"]
    assert d["timing"]["device_events"] is None and d["timing"]["noise"] is None
    assert d["timing"]["processes"] == [{"n": 2, "stopped": "noise", "noise": None, "median": 1.0,
                                         "first_call_s": 0.1}]
    no_census = Row(scenario="s", framework="jax", variant="v", status="ok")
    assert "host_syncs" not in no_census.to_dict()


def test_a_process_timing_and_a_merged_one_write_their_keys_where_the_one_timing_before_them_did():
    """Each record's own fields stand among the shared ones (model._after) where a run always wrote them: a result
    file's timing, and the wire that an older tree's parent reads, are written as before the two were one record."""
    clocks = ["first_call_s", "host_return", "device_done", "device_events", "kernel", "kernel_source", "kernel_why",
              "metrics", "checked_repeats", "wrong_repeats", "worst", "samples"]
    spent = ["timed_s", "phase_s", "loop_s", "check_s", "repeats_s", "warm_s", "before_s", "agree_s"]
    ranks = ["rank_time", "slowest_rank", "slowest_rank_samples", "host_loops"]
    assert list(ProcessTiming._FIELDS) == [*clocks, "stopped", "noise", *spent,
                                           "host_loop_s", "host_loop_at", "row_loop_s", "served_s", "request_s", "kernel_s",
                                           *ranks]
    assert list(Timing._FIELDS) == [*clocks, "noise", "processes", *spent, "host_sensitivity", *ranks]


def test_a_workers_row_reads_as_its_process_timing_and_merges_into_a_row_of_the_same_keys():
    """The wire's row (a ProcessRow) holds one process's timing, its noise a number; merged, it is a Row whose
    keys keep the wire's order (the written file's), with the merged Timing in its place."""
    wire = {"scenario": "s", "framework": "torch", "variant": "v", "status": "ok", "timing": {
        "host_return": {"median": 1.0}, "device_done": {"median": 1.0}, "device_events": None, "metrics": {},
        "samples": {}, "stopped": "noise", "noise": 0.01, "host_loop_s": 0.007}, "wall_s": 1.0}
    per = ProcessRow.from_dict(wire)
    assert isinstance(per.timing, ProcessTiming) and per.timing.noise == 0.01 and per.timing.stopped == "noise"
    assert json.dumps(per.to_dict()) == json.dumps(wire)
    merged = per.merged(Timing(host_return=per.timing.host_return, device_done=per.timing.device_done,
                               device_events=None, metrics={}, samples={}, noise={}), wall_s=2.0)
    assert type(merged) is Row and isinstance(merged.timing, Timing) and merged.wall_s == 2.0
    assert list(merged.to_dict()) == list(wire) and merged.to_dict()["timing"]["noise"] == {}


def test_a_loaded_row_that_is_changed_writes_its_new_fields_after_its_old_ones():
    r = Row.from_dict({"scenario": "s", "framework": "torch", "variant": "v", "status": "ok", "wall_s": 1.0})
    r.point, r.label, r.wall_s = 3, "", 2.0
    assert list(r.to_dict().items()) == [("scenario", "s"), ("framework", "torch"), ("variant", "v"),
                                         ("status", "ok"), ("wall_s", 2.0), ("point", 3), ("label", "")]


def test_the_runner_writes_this_version_and_the_writer_takes_the_model(tmp_path):
    import datetime as dt

    from harness.run import runner
    from harness.workers import cpus

    opts = runner.CompareOptions(scenarios=[], frameworks=[], size="smoke", examples=1, seed=5)
    d = results.as_written(runner.document(opts, dt.datetime.now(dt.timezone.utc), {}, {}, {}, [],
                                           cpus.not_placed("all")))
    assert d["schema"] == SCHEMA == "triptych.result/2" and d["seed"] == 5
    p = results.write_atomic(Result.from_dict(d), tmp_path)
    assert read(p).to_dict() == d


def test_what_regress_asks_a_record_is_what_the_keys_said():
    """Timing.counts and one_process, Row.point_index and ScenarioResult.params_of (harness/regress reads them)
    agree with the file's keys in every committed result."""
    for path in COMMITTED:
        raw, got = synthetic.load(path), read(path)
        for name, scn in got.scenarios.items():
            points = raw["scenarios"][name].get("points") or [{}]
            for r, d in zip(scn.rows, raw["scenarios"][name]["rows"]):
                assert r.point_index == d.get("point", 0) and scn.params_of(r) == points[d.get("point", 0)]
                if r.timing is None:
                    continue
                t = d["timing"]
                assert r.timing.one_process == bool(t.get("samples") and not t.get("processes"))
                assert all(r.timing.counts(c) == counts_of(t, c) for c in CLOCKS)
