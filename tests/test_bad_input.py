"""Bad input to `regress` and `compare`: one line on stderr, exit 2, no traceback, no partial file.
Result files: written atomically, never overwritten, validated when loaded."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results import files as writer, results
from harness.results.results import ResultError, write_atomic
from tests.synthetic import load
from tests.synthetic import doc, row, samples, write

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(ROOT)) | (env or {})
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True,
                          env=e, timeout=300)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("files")
    good = doc([row("torch", "async", samples(1e-3)), row("torch", "sync_each", samples(2e-3))])
    text = json.dumps(good)
    f = {"good": write(good, d / "good.json"),
         "gpu": write(doc([row("torch", "async")], gpu="NVIDIA H200"), d / "gpu.json"),
         "missing": d / "nope.json",
         "folder": d,
         "empty": d / "empty.json",
         "not_json": d / "not.json",
         "truncated": d / "truncated.json",
         "schema0": d / "schema0.json",
         "list": d / "list.json",
         "bad_status": d / "bad_status.json",
         "bad_samples": d / "bad_samples.json",
         "no_timing": d / "no_timing.json",
         # counts a file carries into a fresh run, beyond what the command line allows (issue 49, family 4)
         "processes17": d / "p17.json",
         "examples_huge": d / "examples.json", "seed_huge": d / "seed.json", "fraction_huge": d / "fraction.json"}
    seventeen = json.loads(text)
    seventeen["scenarios"]["async_dispatch"]["rows"] = [row("torch", v, samples(1e-3, n=34), processes=17)
                                                        for v in ("async", "sync_each")]
    f["processes17"].write_text(json.dumps(seventeen))
    f["examples_huge"].write_text(json.dumps(good | {"examples": 10**6}))
    f["seed_huge"].write_text(json.dumps(good | {"seed": 2**40}))
    f["fraction_huge"].write_text(json.dumps(good | {"environment": good["environment"] | {"gpu_memory_fraction": 5.0}}))
    f["empty"].write_text("")
    (d / "loop2.json").symlink_to(d / "loop.json")
    f["loop"] = d / "loop.json"
    f["loop"].symlink_to(d / "loop2.json")
    f["not_json"].write_text("Traceback (most recent call last):\n  oops\n")
    f["truncated"].write_text(text[: len(text) // 2])
    f["schema0"].write_text(json.dumps(good | {"schema": "triptych.result/0"}))
    f["list"].write_text("[1, 2]")
    bad = json.loads(text)
    bad["scenarios"]["async_dispatch"]["rows"][0]["status"] = "exploded"
    f["bad_status"].write_text(json.dumps(bad))
    bad = json.loads(text)
    bad["scenarios"]["async_dispatch"]["rows"][0]["timing"]["samples"]["device_done"].pop()
    f["bad_samples"].write_text(json.dumps(bad))
    bad = json.loads(text)
    del bad["scenarios"]["async_dispatch"]["rows"][0]["timing"]
    f["no_timing"].write_text(json.dumps(bad))
    return f


# (args with {name} for the fixture's files, expected words in the one line, extra environment)
BAD: dict[str, tuple[list[str], str, dict[str, str]]] = {
    # regress: the baseline
    "baseline missing": (["--baseline", "{missing}", "--candidate", "{good}"], "--baseline {missing}: no such file", {}),
    "baseline a folder": (["--baseline", "{folder}", "--candidate", "{good}"], "is a folder, not a result file", {}),
    "baseline a symlink loop": (["--baseline", "{loop}", "--candidate", "{good}"],
                                "--baseline {loop}: Too many levels of symbolic links", {}),
    "baseline empty": (["--baseline", "{empty}", "--candidate", "{good}"], "empty file", {}),
    "baseline not JSON": (["--baseline", "{not_json}", "--candidate", "{good}"], "not JSON (line 1", {}),
    "baseline truncated": (["--baseline", "{truncated}", "--candidate", "{good}"], "truncated?", {}),
    "baseline other schema": (["--baseline", "{schema0}", "--candidate", "{good}"],
                              "schema 'triptych.result/0' is not 'triptych.result/2'", {}),
    "baseline not an object": (["--baseline", "{list}", "--candidate", "{good}"], "not a triptych result (schema 'list'", {}),
    "baseline unknown status": (["--baseline", "{bad_status}", "--candidate", "{good}"],
                                "scenarios.async_dispatch.rows[0].status: 'exploded' is not one of", {}),
    "baseline samples lost": (["--baseline", "{bad_samples}", "--candidate", "{good}"],
                              "timing.samples.device_done: 39 samples where n is 40", {}),
    "baseline row without timing": (["--baseline", "{no_timing}", "--candidate", "{good}"], "rows[0]: 'timing' is a required property", {}),
    "no baseline": (["--candidate", "{good}"], "--baseline (a result file) or --baseline-tree / --baseline-python", {}),
    # regress: the candidate
    "candidate missing": (["--baseline", "{good}", "--candidate", "{missing}"], "--candidate {missing}: no such file", {}),
    "candidate a symlink loop": (["--baseline", "{good}", "--candidate", "{loop}"],
                                 "--candidate {loop}: Too many levels of symbolic links", {}),
    "candidate truncated": (["--baseline", "{good}", "--candidate", "{truncated}"], "--candidate", {}),
    "candidate other schema": (["--baseline", "{good}", "--candidate", "{schema0}"], "is not 'triptych.result/2'", {}),
    "nothing comparable": (["--baseline", "{gpu}", "--candidate", "{good}"],
                           "nothing comparable: the baseline ran on NVIDIA H200, the candidate on no GPU", {}),
    # regress: options
    "threshold zero": (["--baseline", "{good}", "--candidate", "{good}", "--threshold", "0"],
                       "--threshold must be between 0.1% and 500%, not 0", {}),
    "threshold negative": (["--baseline", "{good}", "--candidate", "{good}", "--threshold", "-0.1"],
                           "--threshold must be between", {}),
    "threshold absurd": (["--baseline", "{good}", "--candidate", "{good}", "--threshold", "5000%"],
                         "--threshold must be between", {}),
    "threshold text": (["--baseline", "{good}", "--candidate", "{good}", "--threshold", "lots"],
                       "--threshold must be a fraction (0.1) or a percentage (10%)", {}),
    "confidence absurd": (["--baseline", "{good}", "--candidate", "{good}", "--confidence", "1.5"],
                          "--confidence must be between 0.5 and 0.999", {}),
    "unknown clock": (["--baseline", "{good}", "--candidate", "{good}", "--clock", "sundial"], "invalid choice", {}),
    "unknown scenario": (["--baseline", "{good}", "--candidate", "{good}", "--scenarios", "warp_drive"],
                         "unknown scenario 'warp_drive'", {}),
    "scenario not in baseline": (["--baseline", "{good}", "--candidate", "{good}", "--scenarios", "sync_points"],
                                 "scenario 'sync_points' is not in the baseline", {}),
    "unknown framework": (["--baseline", "{good}", "--candidate", "{good}", "--frameworks", "mxnet"],
                          "unknown framework 'mxnet'", {}),
    "unknown variant": (["--baseline", "{good}", "--candidate", "{good}", "--variants", "async,telepathy"],
                        "unknown variant 'telepathy'", {}),
    "empty variant list": (["--baseline", "{good}", "--candidate", "{good}", "--variants", ","], "no variant given", {}),
    "candidate with --out": (["--baseline", "{good}", "--candidate", "{good}", "--out", "{out}"],
                             "--out only apply to a fresh candidate run", {}),
    "candidate with --timeout": (["--baseline", "{good}", "--candidate", "{good}", "--timeout", "5"],
                                 "--timeout only apply to a fresh candidate run", {}),
    # regress: a fresh candidate run
    "fresh: unwritable out": (["--baseline", "{good}", "--out", "{good}/res"], "cannot write to", {}),
    "fresh: zero timeout": (["--baseline", "{good}", "--out", "{out}", "--timeout", "0"], "timeout must be > 0", {}),
    "fresh: absurd timeout": (["--baseline", "{good}", "--out", "{out}", "--timeout", "1e9"], "at most a day", {}),
    "fresh: zero memory fraction": (["--baseline", "{good}", "--out", "{out}", "--gpu-memory-fraction", "0"],
                                    "--gpu-memory-fraction must be in (0, 1], not 0", {}),
    "fresh: bad fault spec": (["--baseline", "{good}", "--out", "{out}"], "TRIPTYCH_FAULT: unknown kind 'melt'",
                              {"TRIPTYCH_FAULT": "*:torch:melt"}),
    # issue 49, family 4: a file's counts are bounded as the command line's (17 processes started 17 workers)
    "fresh: a baseline timed by 17 processes": (["--baseline", "{processes17}", "--out", "{out}"],
                                                "timing.processes: 17 items, more than 16", {}),
    "fresh: a baseline of a million examples": (["--baseline", "{examples_huge}", "--out", "{out}"],
                                                "examples: 1000000 is greater than the maximum of 10000", {}),
    "fresh: a baseline seed beyond --seed's": (["--baseline", "{seed_huge}", "--out", "{out}"],
                                               "seed: 1099511627776 is greater than the maximum of 4294967295", {}),
    "fresh: a baseline memory fraction of 5": (["--baseline", "{fraction_huge}", "--out", "{out}"],
                                               "gpu_memory_fraction: 5.0 is greater than the maximum of 1", {}),
    # issue 49, family 10: bounds that mean something, named by their option; options of another mode refused
    "fdr zero": (["--baseline", "{good}", "--candidate", "{good}", "--fdr", "0"],
                 "--fdr must be above 0 and below 1 (100%), not 0", {}),
    "fdr 500%": (["--baseline", "{good}", "--candidate", "{good}", "--fdr", "500%"], "--fdr must be above 0", {}),
    "fdr one": (["--baseline", "{good}", "--candidate", "{good}", "--fdr", "1"], "--fdr must be above 0", {}),
    "pairs and seed with result files": (["--baseline", "{good}", "--candidate", "{good}", "--pairs", "8", "--seed", "3"],
                                         "--seed, --pairs only apply to an interleaved run", {}),
    "fdr with a fresh candidate": (["--baseline", "{good}", "--out", "{out}", "--fdr", "0.1"],
                                   "--fdr only applies to an interleaved run", {}),
    "size with result files": (["--baseline", "{good}", "--candidate", "{good}", "--size", "full"],
                               "--size only applies to an interleaved run", {}),
    "host covariate with result files": (["--baseline", "{good}", "--candidate", "{good}", "--host-covariate"],
                                         "--host-covariate only applies to an interleaved run", {}),
    "no host covariate with result files": (["--baseline", "{good}", "--candidate", "{good}", "--no-host-covariate"],
                                            "--no-host-covariate only applies to an interleaved run", {}),
    "fresh: an empty --out": (["--baseline", "{good}", "--out", ""], "--out is empty", {}),
    "an empty --baseline": (["--baseline", "", "--candidate", "{good}"], "--baseline is empty", {}),
}

BAD_COMPARE: dict[str, tuple[list[str], str, dict[str, str]]] = {
    "memory fractions that do not fit": (["--gpu-memory-fraction", "0.5"],
                                         "--gpu-memory-fraction 0.5 x 3 frameworks is 1.50 of the GPU", {}),
    "memory fraction absurd": (["--gpu-memory-fraction", "7"], "--gpu-memory-fraction must be in (0, 1]", {}),
    "memory fraction from a bad environment": ([], "TRIPTYCH_GPU_MEMORY_FRACTION='most' is not a number",
                                               {"TRIPTYCH_GPU_MEMORY_FRACTION": "most"}),
    "absurd seed": (["--seed", str(2**40)], "--seed must be between 0 and 4294967295", {}),
    "absurd timeout": (["--timeout", "1e12"], "timeout must be > 0 and at most a day", {}),
    "nan timeout": (["--timeout", "nan"], "timeout must be > 0", {}),
    "negative timeout": (["--timeout", "-5"], "timeout must be > 0", {}),
    "bad fault spec": ([], "TRIPTYCH_FAULT: 'x' is not <scenario>:<framework>:<kind>[:<op>]", {"TRIPTYCH_FAULT": "x"}),
}


def assert_one_line_exit_2(r: subprocess.CompletedProcess, expected: str, out: Path) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout[-1000:], r.stderr[-1000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("harness: error:") and expected in lines[0], lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert not out.exists() or not any(out.iterdir()), list(out.iterdir())  # no partial file


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_regress_input(case, files, tmp_path):
    args, expected, env = BAD[case]
    names = {k: str(v) for k, v in files.items()} | {"out": str(tmp_path / "out")}
    r = run("regress", *[a.format(**names) for a in args], env=env)
    assert_one_line_exit_2(r, expected.format(**names), tmp_path / "out")


@pytest.mark.parametrize("case", list(BAD_COMPARE), ids=list(BAD_COMPARE))
def test_bad_compare_input(case, tmp_path):
    args, expected, env = BAD_COMPARE[case]
    r = run("compare", *args, "--out", str(tmp_path / "out"), env=env)
    assert_one_line_exit_2(r, expected, tmp_path / "out")


def test_a_gpu_baseline_cannot_be_rerun_without_a_gpu(files, tmp_path):
    from harness.run.cli import gpu_present

    if gpu_present():
        pytest.skip("this machine has a GPU")
    r = run("regress", "--baseline", str(files["gpu"]), "--out", str(tmp_path / "out"))
    assert_one_line_exit_2(r, "the baseline ran on NVIDIA H200; this machine has no GPU to rerun it on",
                           tmp_path / "out")


# -- result files ---------------------------------------------------------------------------------


def test_results_are_never_overwritten(tmp_path):
    d = doc([row("torch", "async")])
    paths = [write_atomic(d, tmp_path) for _ in range(3)]
    assert len(set(paths)) == 3 and all(load(p)["created"] == d["created"] for p in paths)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)  # no temp files left


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    def no_link(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer.os, "link", no_link)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(doc([row("torch", "async")]), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_document_that_cannot_be_json_leaves_nothing(tmp_path):
    d = doc([row("torch", "async")])
    d["environment"]["oops"] = object()
    with pytest.raises(TypeError):
        write_atomic(d, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_name_taken_meanwhile_is_not_overwritten(tmp_path, monkeypatch):
    """Between the check for a free name and the link, another run may take it: link refuses."""
    d = doc([row("torch", "async")])
    first = write_atomic(d, tmp_path)
    real_exists, lies = Path.exists, [1]

    def exists_once_wrong(self: Path) -> bool:
        if self == first and lies:
            return not lies.pop()  # the first look says free
        return real_exists(self)

    monkeypatch.setattr(Path, "exists", exists_once_wrong)
    second = write_atomic(d, tmp_path)
    assert second != first and load(first) == load(second)


@pytest.mark.parametrize("key", ["schema", "created", "size", "environment", "scenarios"])
def test_validation_names_what_is_missing(key):
    d = doc([row("torch", "async")])
    del d[key]
    with pytest.raises(ResultError, match=key if key != "schema" else "schema None"):
        results.validate(d, "x.json")


def test_validation_rejects_a_row_at_a_point_that_does_not_exist():
    d = doc([row("torch", "async")])
    d["scenarios"]["async_dispatch"]["rows"][0]["point"] = 3
    with pytest.raises(ResultError, match=r"rows\[0\].point: 3 names a point of 1"):
        results.validate(d, "x.json")
