"""The command line: bad input is one line on stderr, exit 2, no traceback, no file; good input works."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results.results import read
from tests.synthetic import load

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600)


BAD = {
    "unknown scenario": (["compare", "--scenarios", "nope"], "unknown scenario 'nope'"),
    "empty scenario list": (["compare", "--scenarios", ","], "no scenario given"),
    "scenario twice": (["compare", "--scenarios", "sync_points,sync_points"], "listed twice"),
    "unknown framework": (["compare", "--frameworks", "tensorflow"], "unknown framework 'tensorflow'"),
    "bad size": (["compare", "--size", "huge"], "invalid choice: 'huge'"),
    "zero examples": (["compare", "--examples", "0"], "--examples must be between 1 and 10000, not 0"),
    "negative examples": (["compare", "--examples", "-3"], "--examples must be between"),
    "absurd examples": (["compare", "--examples", "99999999"], "--examples must be between"),
    "text examples": (["compare", "--examples", "many"], "--examples must be an integer"),
    "negative seed": (["compare", "--seed", "-1"], "--seed must be between"),
    "zero processes": (["compare", "--processes", "0"], "--processes must be between 1 and 16, not 0"),
    "zero timeout": (["compare", "--timeout", "0"], "timeout must be > 0"),
    "nothing to do": (["compare", "--no-equivalence", "--no-timing"], "leave nothing to do"),
    "bad isolation": (["compare", "--isolation", "threads"], "invalid choice: 'threads'"),
    "cpus not numbers": (["compare", "--cpus", "fast"], "use auto, all, or CPU numbers"),
    "cpus not ours": (["compare", "--cpus", "4096"], "this process may use CPUs"),
    "no command": ([], "the following arguments are required"),
    "unknown option": (["compare", "--fast"], "unrecognized arguments: --fast"),
    "check bad json": (["check", "sync_points", "--params", "{nope"], "--params is not JSON"),
    "check not an object": (["check", "sync_points", "--params", "[1, 2]"], "--params must be a JSON object"),
    "check missing param": (["check", "sync_points", "--params", '{"seed": 1}'], "--params do not fit sync_points"),
    "check huge int": (["check", "sync_points", "--params", '{"seed": 1' + "0" * 5000 + "}"],
                       "--params: an integer of 5001 digits (at most 40)"),
    "check absurd world size": (["check", "ranks", "--params", '{"world_size": 0}'],
                                "world_size must be an integer between 1 and 1024, not 0"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_is_one_line_and_exit_2(case, tmp_path):
    args, expected = BAD[case]
    r = run(*args, "--out", str(tmp_path / "res")) if args[:1] == ["compare"] else run(*args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("harness: error:") and expected in lines[0], lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert not (tmp_path / "res").exists() or not any((tmp_path / "res").iterdir())


def test_a_compare_run_refuses_other_timing_settings_in_its_environment(tmp_path):
    """$TRIPTYCH_TIMING sets one side of an interleaved regress; in a run's own environment every process would
    time on settings that the preset its result names does not describe."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRIPTYCH_TIMING='{"warmup_s": 0}')
    r = subprocess.run([sys.executable, "-m", "harness", "compare", "--scenarios", "launch_overhead", "--out",
                        str(tmp_path / "res")], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[-500:], r.stderr[-500:])
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("harness: error: $TRIPTYCH_TIMING is set here") and "--candidate-env" in line, line
    assert not (tmp_path / "res").exists() or not any((tmp_path / "res").iterdir())


def test_unwritable_out_folder(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    r = run("compare", "--out", str(blocker / "res"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("harness: error: cannot write to")


@pytest.mark.parametrize("kind", ["loop", "loop_below", "dangling"])
def test_a_symlink_out_folder_that_leads_nowhere_is_refused_up_front(tmp_path, kind):
    """Path.exists reads a loop or a dangling link as "not there yet": the run went ahead and failed
    only when it wrote its result."""
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    out = {"loop": tmp_path / "a", "loop_below": tmp_path / "a" / "res", "dangling": tmp_path / "dangling"}[kind]
    r = run("compare", "--scenarios", "sync_points", "--frameworks", "torch", "--no-timing", "--examples", "1",
            "--no-report", "--quiet", "--out", str(out))
    assert r.returncode == 2, (r.returncode, r.stdout[-1000:], r.stderr[-1000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"harness: error: cannot write to {out}: "), r.stderr
    assert ("symbolic links" in lines[0]) if kind != "dangling" else ("is a symlink to nothing" in lines[0])
    assert r.stdout == "" and sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "dangling"]


def test_the_harness_dependencies_are_pyprojects():
    import tomllib

    from harness.__main__ import DEPENDENCIES, _missing

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("=")[0].split("[")[0].strip() for d in deps} - {"pytest"}
    assert set(DEPENDENCIES) == names
    assert _missing(ModuleNotFoundError("x", name="rich.console")) == "rich"
    assert _missing(ModuleNotFoundError("x", name="torch")) is None  # a framework: the backends' skip


@pytest.mark.parametrize("how", ["rich", "make"])
def test_an_interpreter_without_the_dependencies_is_told_in_one_line(tmp_path, how):
    """`make compare PYTHON=python3` on an interpreter without rich (or numpy): which package, and how to
    get it; no traceback, no framework imported, nothing written."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = tmp_path / "res"
    if how == "rich":  # rich alone missing, as on a system python3 with numpy
        block = "import runpy, sys; sys.modules['rich'] = None; runpy.run_module('harness', run_name='__main__', alter_sys=True)"
        cmd = [sys.executable, "-c", block, "compare", "--out", str(out)]
        name = "rich"
    else:  # python -S: no site-packages at all
        cmd = ["make", "-s", "--no-print-directory", "compare", f"PYTHON={sys.executable} -S", f"ARGS=--out {out}"]
        name = "numpy"
        # and a Python that writes no bytecode: the run's first step looks for uncompiled packages (bytecode.py)
        env.pop("TRIPTYCH_PYCACHE", None)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, (r.returncode, r.stdout[-1000:], r.stderr[-1000:])
    # make's own line ("make: ***", or "make[1]: ***" when the suite itself runs under make) is not ours,
    # nor the Makefile's, which names the status that make turns into 2
    lines = [ln for ln in r.stderr.strip().splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", ln)
             and not ln.startswith("make compare: python -m harness compare exited 2 ")]
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), r.stderr
    assert f"has no '{name}'" in lines[0] and "pip install" in lines[0] and "Traceback" not in r.stderr
    assert not out.exists()


def test_list_names_every_scenario_in_short_lines_when_piped():
    from scenarios import ORDER, get

    r = run("list")  # stdout is a pipe here: plain lines, not a 170-column table
    assert r.returncode == 0
    for name in ORDER:
        assert f"{name}: {get(name).title}" in r.stdout
    assert max(map(len, r.stdout.splitlines())) <= 100
    assert "  overlapped (GPU only in PyTorch, CuPy)" in r.stdout  # JAX runs it on the CPU


def test_every_option_has_help():
    import argparse

    from harness.run.parser import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [f"{cmd} {opt.option_strings[0]}" for cmd, p in sub.choices.items() for opt in p._actions
               if opt.option_strings and opt.help in (None, "") and opt.dest != "help"]
    assert not missing


def test_defaults_come_from_compare_options():
    from harness.run.parser import build_parser
    from harness.run.runner import CompareOptions

    a = build_parser().parse_args(["compare"])
    assert (a.timeout, a.isolation, a.cpus, a.processes) == (CompareOptions.timeout_s, CompareOptions.isolation,
                                                             CompareOptions.cpus, CompareOptions.processes)
    assert a.out.name == "runs"


def test_without_jsonschema_a_result_is_checked_the_same(tmp_path, monkeypatch, capsys):
    """The GPU image has no jsonschema: report and regress read result files there with the same check
    (harness/results/schema_check.py), say nothing about it, and refuse a damaged file in the same one line."""
    from harness.run import cli
    from tests.report_fixture import write_fake_result

    path = write_fake_result(tmp_path)
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # import jsonschema now raises ImportError
    assert cli.main(["regress", "--baseline", str(path), "--candidate", str(path)]) == 0
    assert capsys.readouterr().err == ""
    doc = json.loads(path.read_text())
    del next(iter(doc["scenarios"].values()))["rows"][0]["status"]
    path.write_text(json.dumps(doc))
    assert cli.main(["report", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(".rows[0]: 'status' is a required property"), err


def test_check_reproduces_one_example():
    p = {"m": 5, "n": 3, "steps": 2, "dtype": "float16", "seed": 4}
    r = run("check", "async_dispatch", "--frameworks", "torch,jax", "--params", json.dumps(p))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "outputs match the reference and each other" in r.stdout


def test_compare_smoke_writes_a_valid_result(tmp_path):
    out = tmp_path / "res"
    r = run("compare", "--size", "smoke", "--examples", "2", "--seed", "7", "--out", str(out), "--processes", "2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    files = list(out.glob("*.json"))
    assert len(files) == 1 and not list(out.glob(".tmp-*"))
    doc = load(files[0])
    assert doc["seed"] == 7 and doc["size"] == "smoke"
    placed = doc["environment"]["cpus"]  # --cpus all, the default: which CPUs it kept and why
    assert placed == placed | {"mode": "all", "kept": placed["allowed"], "why": "every CPU this process may use"}
    fws = doc["environment"]["frameworks"]
    assert fws["torch"]["available"] and fws["jax"]["available"]
    if not fws["cupy"]["available"]:
        assert "CuPy needs a CUDA GPU" in fws["cupy"]["why"] or "not installed" in fws["cupy"]["why"]
        assert "cupy: skipped" in r.stdout
    for name, scn in doc["scenarios"].items():
        assert scn["equivalence"]["status"] == "passed", scn["equivalence"]
        if all(row["status"] == "skipped" for row in scn["rows"]):  # gpu_links on one device: the reason says so
            assert all("needs two" in row["reason"] or "CuPy" in row["reason"] for row in scn["rows"]), name
            continue
        base = {row["framework"]: row for row in scn["rows"] if row["variant"] == scn["variants"][0]["name"]}
        for fw in ("torch", "jax"):  # the baseline ran, or the framework cannot express it (JAX: blocking send)
            assert base[fw]["status"] == "ok" or "not expressible" in base[fw].get("reason", ""), (name, base[fw])
        assert scn["claims"], name
        for row in scn["rows"]:  # every process (rank rows: every round) and the host's speed just before
            if row["status"] == "ok":
                procs = row["timing"]["processes"]
                assert len(procs) == 2 and all(p["host_loop_s"] > 0 for p in procs), (name, row["variant"], procs)
    assert "equivalence: passed" in r.stdout
    # The report is rendered next to the result, in a folder named after it.
    report = files[0].with_suffix("")
    assert f"report: {report / 'report.html'}" in r.stdout
    assert {"report.md", "report.html"} <= {p.name for p in report.iterdir()}
    for name, scn in doc["scenarios"].items():
        timed = any(row["status"] == "ok" for row in scn["rows"])  # nothing timed (gpu_links here): no chart
        assert (report / f"{name}.png").exists() == timed and f'id="{name}"' in (report / "report.html").read_text()
    # A second run never overwrites the first.
    r2 = run("compare", "--size", "smoke", "--examples", "1", "--seed", "7", "--out", str(out),
             "--scenarios", "sync_points", "--frameworks", "torch", "--no-timing", "--no-report")
    assert r2.returncode == 0 and "report:" not in r2.stdout
    assert len(list(out.glob("*.json"))) == 2 and len([p for p in out.iterdir() if p.is_dir()]) == 1


def test_processes_sets_how_many_workers_time_each_row_and_regress_reruns_with_as_many(tmp_path):
    from harness.run.cmd_regress import _processes

    out = tmp_path / "res"
    r = run("compare", "--scenarios", "sync_points", "--frameworks", "torch", "--size", "smoke", "--seed", "2",
            "--processes", "3", "--no-equivalence", "--no-report", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    doc = load(next(out.glob("*.json")))
    rows = [row for row in doc["scenarios"]["sync_points"]["rows"] if row["status"] == "ok"]
    assert rows and all(len(row["timing"]["processes"]) == 3 for row in rows)
    assert _processes(read(next(out.glob("*.json")))) == 3  # it reads the typed result, as regress loads it


def test_processes_whose_jax_pools_would_not_fit_are_refused(monkeypatch, tmp_path):
    """JAX keeps its pool in every worker and rank group (torch and CuPy give theirs back): on a GPU,
    2 x processes x the fraction must fit in it."""
    from harness.run import cmd_compare
    from harness.run.parser import UsageError

    monkeypatch.setattr(cmd_compare, "gpu_present", lambda: True)
    with pytest.raises(UsageError, match=r"x 8 JAX processes .* is 1\.20 of the GPU: use --gpu-memory-fraction 0\.12 "):
        cmd_compare.start_checks(tmp_path, 0.15, ["torch", "jax"], 4)
    cmd_compare.start_checks(tmp_path, 0.15, ["torch", "cupy"], 4)
    cmd_compare.start_checks(tmp_path, 0.15, ["jax"], 3)
    monkeypatch.setattr(cmd_compare, "gpu_present", lambda: False)
    cmd_compare.start_checks(tmp_path, 0.15, ["jax"], 4)


def test_a_sweep_times_every_point(tmp_path, monkeypatch):
    """A size preset may be a sweep: every point is timed, labelled, judged and shown on its own."""
    import dataclasses

    from harness.run.progress import QuietUI
    from harness.run.runner import CompareOptions, run_compare
    from scenarios import _cache, get

    scn = get("sync_points")
    base = scn.sizes["smoke"]
    sweep = [base | {"steps": 4, "label": "4 steps"}, base | {"steps": 12, "label": "12 steps"}]
    monkeypatch.setitem(_cache, "sync_points", dataclasses.replace(scn, sizes={"smoke": sweep, "full": sweep}))
    opts = CompareOptions(scenarios=["sync_points"], frameworks=["torch"], size="smoke", examples=1, seed=5,
                          isolation="none", equivalence=False)
    doc = run_compare(opts, QuietUI())
    entry = doc["scenarios"]["sync_points"]
    assert [p["label"] for p in entry["points"]] == ["4 steps", "12 steps"]
    rows = [r for r in entry["rows"] if r["status"] == "ok"]
    assert sorted((r["point"], r["variant"]) for r in rows) == [(0, "item_each_step"), (0, "on_device"),
                                                                 (1, "item_each_step"), (1, "on_device")]
    assert {c["label"] for c in entry["claims"]} == {"4 steps", "12 steps"}


def test_a_default_compare_leaves_out_the_opt_in_scenarios_and_runs_them_when_named():
    from harness.run.parser import build_parser
    from scenarios import DEFAULT_RUN, OPT_IN, ORDER, default_run

    assert set(OPT_IN) == {"memory_pools", "cold_start"} and set(OPT_IN) <= set(ORDER)
    assert build_parser().parse_args(["compare"]).scenarios is None  # resolved by the run: GPU or CPU set
    default = list(default_run(gpu=True))
    assert default == list(DEFAULT_RUN) and not set(default) & set(OPT_IN) and "donation" in default
    assert build_parser().parse_args(["compare", "--scenarios", "cold_start"]).scenarios == ["cold_start"]


def test_the_progress_line_names_the_examples_the_equivalence_draws(monkeypatch):
    """A scenario whose examples start processes caps them (max_examples): the line says the cap, as the
    result does, not --examples."""
    import dataclasses

    from harness.run.progress import QuietUI
    from harness.run.runner import CompareOptions, run_compare
    from scenarios import _cache, get

    monkeypatch.setitem(_cache, "sync_points", dataclasses.replace(get("sync_points"), max_examples=1))
    steps: list[str] = []

    class Steps(QuietUI):
        def step(self, text, *args, **kw):
            steps.append(text)
            return super().step(text, *args, **kw)

    opts = CompareOptions(scenarios=["sync_points"], frameworks=["torch"], size="smoke", examples=3, seed=5,
                          isolation="none")
    doc = run_compare(opts, Steps())
    assert doc["scenarios"]["sync_points"]["equivalence"]["examples"] == 1
    assert any(s.startswith("sync_points · equivalence (1 examples") for s in steps), steps
