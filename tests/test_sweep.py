"""The bad-input sweep of issue 14, kept: every case must answer with exit 2, one line on stderr that
names the problem, no traceback and nothing written. Check params are drawn from each scenario's own
strategy bounds; result files are damaged one field at a time and read by `report` and `regress`.
(The faults of the same sweep, which need child processes and signals, are tests/test_robust.py.)"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from harness.run import cli
from harness.check.param_bounds import domains
from scenarios import all_scenarios
from tests.synthetic import doc, row


def _good_params(name: str) -> dict[str, Any]:
    return {k: (d.lo if d.lo is not None else sorted(d.choices, key=str)[0]) for k, d in
            domains(next(s for s in all_scenarios() if s.name == name)).items()}


def _param_cases() -> list[tuple[str, dict[str, Any], str]]:
    cases = []
    for s in all_scenarios():
        good, ds = _good_params(s.name), domains(s)
        key = next(k for k, d in ds.items() if d.lo is not None and k != "seed")
        d = ds[key]
        cases += [(s.name, good | {key: d.lo - 1}, f"{key} must be between"),
                  (s.name, good | {key: d.hi * 1000 + 1}, f"{key} must be between"),
                  (s.name, good | {key: str(d.lo)}, f"{key} must be an integer"),
                  (s.name, good | {key: True}, f"{key} must be an integer"),
                  (s.name, good | {key: 1.5}, f"{key} must be an integer"),
                  (s.name, {k: v for k, v in good.items() if k != key}, f"missing {key}"),
                  (s.name, good | {"bogus": 1}, "no param 'bogus'")]
        if "dtype" in ds:
            cases.append((s.name, good | {"dtype": "complex128"}, "dtype must be one of"))
    return cases


PARAMS = _param_cases()


@pytest.mark.parametrize("scenario,params,expected", PARAMS, ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(PARAMS)])
def test_check_refuses_params_outside_the_strategy(scenario, params, expected, capsys):
    assert cli.main(["check", scenario, "--params", json.dumps(params), "--frameworks", "torch"]) == 2
    _one_line(capsys, expected)


def _row_path(d: dict[str, Any]) -> dict[str, Any]:
    return d["scenarios"]["async_dispatch"]["rows"][0]


def _set(path: Callable[[dict[str, Any]], dict[str, Any]], key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: path(d).__setitem__(key, value)


def _timing(d: dict[str, Any]) -> dict[str, Any]:
    return _row_path(d)["timing"]


def _dd(d: dict[str, Any]) -> dict[str, Any]:
    return _timing(d)["device_done"]


DAMAGE: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "negative median": (_set(_dd, "median", -1), "rows[0].timing.device_done.median: -1 is less than the minimum of 0"),
    "string median": (_set(_dd, "median", "fast"), "device_done.median: 'fast' is not of type 'number'"),
    "null median": (_set(_dd, "median", None), "device_done.median: None is not of type 'number'"),
    "overflowing median": (_set(_dd, "median", "OVERFLOW"), "the number 1e999 is too large for a float"),
    "huge n": (_set(_dd, "n", 10**30), "device_done.n"),
    "zero n": (_set(_dd, "n", 0), "device_done.n: 0 is less than the minimum of 1"),
    "null timing": (_set(_row_path, "timing", None), "rows[0].timing: None is not of type 'object'"),
    "list timing": (_set(_row_path, "timing", []), "rows[0].timing: [] is not of type 'object'"),
    "unknown status": (_set(_row_path, "status", "melted"), "rows[0].status: 'melted' is not one of"),
    "null row": (lambda d: d["scenarios"]["async_dispatch"]["rows"].__setitem__(0, None), "rows[0]: None is not"),
    "rows not a list": (_set(lambda d: d["scenarios"]["async_dispatch"], "rows", {}), "rows: {} is not of type 'array'"),
    "null scenario": (_set(lambda d: d["scenarios"], "async_dispatch", None), "scenarios.async_dispatch: None is not"),
    "scenarios a list": (_set(lambda d: d, "scenarios", []), "scenarios: [] is not of type 'object'"),
    "environment a string": (_set(lambda d: d, "environment", "gpu"), "environment: 'gpu' is not of type 'object'"),
    "frameworks a list": (_set(lambda d: d["environment"], "frameworks", []), "environment.frameworks: [] is not"),
    "framework null": (_set(lambda d: d["environment"]["frameworks"], "torch", None), "frameworks.torch: None is not"),
    "gpu a number": (_set(lambda d: d["environment"], "gpu", 7), "environment.gpu: 7 is not of type"),
    "negative seed": (_set(lambda d: d, "seed", -3), "seed: -3 is less than the minimum of 0"),
    "string seed": (_set(lambda d: d, "seed", "7"), "seed: '7' is not of type"),
    "negative examples": (_set(lambda d: d, "examples", -1), "examples: -1 is less than the minimum of 0"),
    "complete a string": (_set(lambda d: d, "complete", "yes"), "complete: 'yes' is not of type 'boolean'"),
    "created a number": (_set(lambda d: d, "created", 20261201), "created: 20261201 is not of type 'string'"),
    "not_run malformed": (_set(lambda d: d, "not_run", [{"scenario": "x"}]), "not_run[0]: 'why' is a required"),
    "sample a string": (lambda d: _timing(d)["samples"]["device_done"].__setitem__(0, "x"), "samples.device_done[0]"),
    "negative sample": (lambda d: _timing(d)["samples"]["device_done"].__setitem__(0, -1.0), "samples.device_done[0]"),
    "unknown clock": (lambda d: _timing(d)["samples"].__setitem__("sundial", []), "samples: 'sundial' is not one of"),
    "claim verdict": (_set(lambda d: d["scenarios"]["async_dispatch"], "claims", [
        {"claim": "c", "text": "t", "evidence": "e", "framework": "torch", "verdict": "maybe"}]),
                      "claims[0].verdict: 'maybe' is not one of"),
    "point out of range": (_set(_row_path, "point", 5), "rows[0].point: 5 names a point of 1"),
    "wrong schema": (_set(lambda d: d, "schema", "triptych.result/0"), "is not 'triptych.result/2'"),
}

RAW: dict[str, tuple[bytes, str]] = {
    "non-UTF-8 bytes": (b'{"schema": "\xff\xfe"}', "not UTF-8 text"),
    "NaN literal": (b'{"schema": NaN}', "JSON has no NaN"),
    "empty": (b"", "empty file"),
    "truncated": (b'{"schema": "triptych.result/1", "created', "not JSON"),
    "top-level list": (b"[1, 2]", "not a triptych result"),
    "top-level null": (b"null", "not a triptych result"),
}


def _damaged(tmp_path: Path, case: str) -> Path:
    path = tmp_path / "damaged.json"
    if case in RAW:
        path.write_bytes(RAW[case][0])
        return path
    d = copy.deepcopy(doc([row("torch", "async"), row("torch", "sync_each")]))
    DAMAGE[case][0](d)
    path.write_text(json.dumps(d).replace('"OVERFLOW"', "1e999"))  # a number past float64
    return path


FILES = [*DAMAGE, *RAW]


@pytest.mark.parametrize("command", ["report", "regress"])
@pytest.mark.parametrize("case", FILES)
def test_a_damaged_result_file_is_one_line_naming_the_field(tmp_path, capsys, command, case):
    path = _damaged(tmp_path, case)
    expected = DAMAGE[case][1] if case in DAMAGE else RAW[case][1]
    if command == "report":
        assert cli.main(["report", str(path), "--out", str(tmp_path / "rep")]) == 2
    else:
        good = tmp_path / "good.json"
        good.write_text(json.dumps(doc([row("torch", "async")])))
        assert cli.main(["regress", "--baseline", str(good), "--candidate", str(path)]) == 2
    _one_line(capsys, expected)
    assert not (tmp_path / "rep").exists()


FLAGS: dict[str, tuple[list[str], str]] = {
    "no command": ([], "the following arguments are required"),
    "unknown command": (["bench"], "invalid choice"),
    "unknown scenario": (["compare", "--scenarios", "warp"], "unknown scenario 'warp'"),
    "empty scenarios": (["compare", "--scenarios", ","], "no scenario given"),
    "twice": (["compare", "--scenarios", "sync_points,sync_points"], "listed twice"),
    "unknown framework": (["compare", "--frameworks", "mxnet"], "unknown framework 'mxnet'"),
    "bad size": (["compare", "--size", "huge"], "invalid choice: 'huge'"),
    "zero examples": (["compare", "--examples", "0"], "--examples must be between 1"),
    "absurd examples": (["compare", "--examples", "1e9"], "--examples must be an integer"),
    "negative seed": (["compare", "--seed", "-1"], "--seed must be between 0"),
    "zero timeout": (["compare", "--timeout", "0"], "timeout must be > 0"),
    "inf timeout": (["compare", "--timeout", "inf"], "timeout must be > 0"),
    "zero budget": (["compare", "--budget", "0"], "--budget must be > 0"),
    "bad isolation": (["compare", "--isolation", "vm"], "invalid choice: 'vm'"),
    "nothing to do": (["compare", "--no-equivalence", "--no-timing"], "leave nothing to do"),
    "memory fraction": (["compare", "--gpu-memory-fraction", "1.5"], "must be in (0, 1]"),
    "out is a file": (["compare", "--out", "{file}"], "exists and is not a folder"),
    "out under a file": (["compare", "--out", "{file}/sub"], "is not a folder"),
    "report without file": (["report"], "the following arguments are required"),
    "report missing": (["report", "{missing}"], "no such file"),
    "report no .json": (["report", "{file}"], "not a result file (their names end in .json)"),
    "report folder": (["report", "{dir}"], "is a folder, not a result file"),
    "report out is a file": (["report", "{good}", "--out", "{file}"], "exists and is not a folder"),
    "check unknown scenario": (["check", "warp", "--params", "{}"], "invalid choice"),
    "check not JSON": (["check", "sync_points", "--params", "{"], "--params is not JSON"),
    "check a list": (["check", "sync_points", "--params", "[]"], "--params must be a JSON object"),
    "check NaN": (["check", "launch_overhead", "--params", '{"n": NaN, "ops": 1, "dtype": "float32", "seed": 1}'],
                  "n must be an integer"),
    "regress threshold": (["regress", "--baseline", "{good}", "--candidate", "{good}", "--threshold", "0"],
                          "--threshold must be between"),
    "regress confidence": (["regress", "--baseline", "{good}", "--candidate", "{good}", "--confidence", "2"],
                           "--confidence must be between"),
    "regress clock": (["regress", "--baseline", "{good}", "--candidate", "{good}", "--clock", "sundial"],
                      "invalid choice"),
}


@pytest.mark.parametrize("case", list(FLAGS))
def test_bad_flags_are_one_line(tmp_path, capsys, case):
    args, expected = FLAGS[case]
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    (tmp_path / "good.json").write_text(json.dumps(doc([row("torch", "async")])))
    names = {"file": tmp_path / "file", "dir": tmp_path / "dir", "missing": tmp_path / "missing.json",
             "good": tmp_path / "good.json"}
    for key, value in names.items():
        args = [a.replace("{" + key + "}", str(value)) for a in args]
    if args[:1] == ["compare"] and "--out" not in args:
        args += ["--out", str(tmp_path / "out")]
    assert cli.main(args) == 2
    _one_line(capsys, expected)
    assert not (tmp_path / "out").exists() and not (tmp_path / "good").exists()


def test_the_sweep_has_at_least_134_cases():
    assert len(PARAMS) + 2 * len(FILES) + len(FLAGS) >= 134


def _one_line(capsys: Any, expected: str) -> None:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error:") and expected in lines[0], err
