"""Issue 31, a newcomer's first hour: `make compare` on a CPU runs what teaches there, says its figures
are indicative and ends with one honest line; and the small things a user trips on, one test each."""
from __future__ import annotations

import dataclasses
import io
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from harness.run import cli, runner
from harness.run import cmd_compare
from harness.check.judging import judge_claims, judge_with_noise
from harness.results.model import Row
from scenarios.spec import Claim, Verdict
from tests.synthetic import doc, row, samples, write

ROOT = Path(__file__).resolve().parent.parent


# -- claims about a GPU's machinery are not decided on a CPU ----------------------------------------


def _faster(rows, fw, p):
    a, b = (rows[v]["timing"]["device_done"]["median"] for v in ("sync_each", "async"))
    return Verdict("faster", fw, "confirmed" if b < a else "refuted", f"async / sync_each = {b / a:.2f}",
                   {"ratio": b / a})


def test_a_claim_about_the_gpu_is_not_decidable_on_a_cpu_and_stands_on_a_gpu():
    rows = {"sync_each": row("torch", "sync_each", samples(1e-3)), "async": row("torch", "async", samples(2e-3))}
    gpu_claim = Claim("faster", "async is faster", _faster, gpu_only=True)
    on_cpu = judge_with_noise(gpu_claim, rows, "torch", {}, on_cpu=True)
    assert on_cpu["verdict"] == "inconclusive" and on_cpu["not_decidable"] == "cpu"
    assert "not decidable on a CPU" in on_cpu["evidence"] and "async / sync_each = 2.00" in on_cpu["evidence"]
    assert judge_with_noise(gpu_claim, rows, "torch", {}, on_cpu=False)["verdict"] == "refuted"
    plain = Claim("faster", "async is faster", _faster)  # a claim a CPU decides (counted, numerical)
    assert judge_with_noise(plain, rows, "torch", {}, on_cpu=True)["verdict"] == "refuted"
    scn = dataclasses.replace(__import__("scenarios").get("async_dispatch"), claims=(gpu_claim,))
    both = [row("torch", "sync_each", samples(1e-3)), row("torch", "async", samples(2e-3)),
            row("jax", "sync_each", samples(1e-3)), row("jax", "async", samples(2e-3))]
    got = {c.framework: c.verdict for c in judge_claims(scn, {}, [Row.from_dict(r) for r in both], frozenset({"jax"}))}
    assert got == {"torch": "refuted", "jax": "inconclusive"}


def test_every_timing_claim_of_the_cpu_set_about_a_gpu_says_so_in_its_spec():
    """The CPU set's claims a CPU cannot decide are marked; those it can (counted, numerical) are not."""
    from scenarios import get

    marked = {(s, c.id) for s in ("async_dispatch", "dlpack_handoff", "ranks", "donation") for c in get(s).claims
              if c.gpu_only}
    assert marked == {("async_dispatch", "returns_early"), ("async_dispatch", "host_free"),
                      ("async_dispatch", "sync_cost"), ("dlpack_handoff", "ordered"), ("dlpack_handoff", "off_stream"),
                      ("dlpack_handoff", "copy_cost"), ("ranks", "shares_divide"), ("donation", "same_time")}


# -- the default set: the CPU's without a GPU, every scenario on one --------------------------------


def _resolved(monkeypatch, capsys, tmp_path, gpu: bool, *args: str) -> tuple[list[str], str]:
    """(the scenarios a compare runs, its stderr), the run itself faked."""
    got = {}

    def run_compare(opts, ui, checkpoint=None):
        got["opts"] = opts
        return doc([row("torch", "async")])

    monkeypatch.setattr(cmd_compare, "gpu_present", lambda: gpu)
    monkeypatch.setattr(cmd_compare, "run_compare", run_compare)
    cli.main(["compare", "--out", str(tmp_path), "--seed", "1", "--no-report", *args])
    return got["opts"].scenarios, capsys.readouterr().err


def test_a_cpu_runs_the_cpu_set_and_says_once_that_its_figures_are_indicative(monkeypatch, capsys, tmp_path):
    from scenarios import CPU_RUN, DEFAULT_RUN, ORDER

    scenarios, err = _resolved(monkeypatch, capsys, tmp_path, False)
    assert scenarios == [n for n in ORDER if n in CPU_RUN] and len(scenarios) < len(DEFAULT_RUN)
    assert err.count("CPU figures are indicative only") == 1 and "not decidable on a CPU" in err
    assert ", ".join(scenarios) in err
    scenarios, err = _resolved(monkeypatch, capsys, tmp_path, False, "--scenarios", "zero")  # named: run as asked
    assert scenarios == ["zero"] and err.count("indicative only") == 1 and "Without --scenarios" not in err
    scenarios, err = _resolved(monkeypatch, capsys, tmp_path, True)  # a GPU: the full default run, no CPU note
    assert scenarios == list(DEFAULT_RUN) and "indicative" not in err


# -- the last line ----------------------------------------------------------------------------------


def _claim(verdict: str, **kw) -> dict:
    return {"claim": "c", "text": "t", "framework": "torch", "verdict": verdict, "evidence": "e", "numbers": {}} | kw


def _doc_with(claims: list[dict], eq: str = "passed") -> dict:
    d = doc([row("torch", "sync_each"), row("torch", "async"), row("jax", "async", status="skipped")])
    d["scenarios"]["async_dispatch"] |= {"equivalence": {"status": eq, "examples": 2, "frameworks": ["torch"],
                                                         "message": "m"}, "claims": claims}
    return d


def test_the_last_line_says_whether_every_check_passed_and_counts_the_claims_honestly(tmp_path, monkeypatch, capsys):
    claims = [_claim("confirmed"), _claim("refuted"), _claim("inconclusive", not_decidable="cpu"),
              _claim("inconclusive"), _claim("inconclusive", not_decidable="cpu")]
    d = _doc_with(claims)
    monkeypatch.setattr(cmd_compare, "run_compare", lambda opts, ui, checkpoint=None: json.loads(json.dumps(d)))
    code = cli.main(["compare", "--frameworks", "torch", "--scenarios", "async_dispatch", "--out",
                     str(tmp_path / "out"), "--quiet", "--seed", "1", "--no-report"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert out[-1] == ("all checks passed: equivalence 1/1 scenarios; 2/2 timed rows right; claims 1 confirmed, "
                       "1 refuted (findings, listed above), 2 not decidable on a CPU, 1 inconclusive")
    d = _doc_with([_claim("confirmed")], eq="failed")
    code = cli.main(["compare", "--frameworks", "torch", "--scenarios", "async_dispatch", "--out",
                     str(tmp_path / "out"), "--quiet", "--seed", "1", "--no-report"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 1 and out[-1].startswith("NOT all checks passed (1 listed above): equivalence 0/1 scenarios")
    d = _doc_with([_claim("confirmed")])
    del d["scenarios"]["async_dispatch"]["equivalence"]  # --no-equivalence: nothing checked the impls
    code = cli.main(["compare", "--frameworks", "torch", "--scenarios", "async_dispatch", "--out",
                     str(tmp_path / "out"), "--quiet", "--seed", "1", "--no-report", "--no-equivalence"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and out[-1].startswith("every check that ran passed (no equivalence check ran)"), out[-1]


# -- --processes counts rank groups only where a selected scenario has ranks ------------------------


def test_the_jax_pool_check_counts_rank_groups_only_when_a_rank_scenario_is_selected(monkeypatch, tmp_path):
    from harness.run.parser import UsageError

    monkeypatch.setattr(cmd_compare, "gpu_present", lambda: True)
    cmd_compare.start_checks(tmp_path, 0.1, ["torch", "jax"], 8, ["sync_points", "donation"])  # 8 x 0.1 fits
    with pytest.raises(UsageError, match=r"x 16 JAX processes \(8 workers and as many rank groups"):
        cmd_compare.start_checks(tmp_path, 0.1, ["torch", "jax"], 8, ["sync_points", "ranks"])
    with pytest.raises(UsageError, match=r"x 8 JAX processes \(8 workers; no rank scenario is selected, each "
                                         r"keeping its pool\) is 1\.20 of the GPU: use --gpu-memory-fraction 0\.12 "):
        cmd_compare.start_checks(tmp_path, 0.15, ["jax"], 8, ["sync_points"])


# -- hazard rows have no % of the floor -------------------------------------------------------------


def test_a_hazard_row_gets_no_floor_and_no_view_shows_one_from_an_older_result():
    from harness.report.labels import pct_of_floor
    from harness.report.report import _extra_rows
    from scenarios import get

    scn = get("dlpack_handoff")
    scn = dataclasses.replace(scn, floor=lambda p, m, v: 1e-3)
    hazard, plain = row("torch", "export_off_stream", scenario="dlpack_handoff"), row("torch", "dlpack",
                                                                                     scenario="dlpack_handoff")
    assert hazard["hazard"] and not plain["hazard"]
    typed = [Row.from_dict(r) for r in (hazard, plain)]
    for r in typed:
        runner.add_floor(scn, {}, {"hbm_Bps": 1.0}, r)
    hazard, plain = (r.to_dict() for r in typed)
    assert "pct_of_floor" not in hazard and "floor_s" not in hazard and plain["pct_of_floor"] > 0
    old = Row.from_dict(dict(hazard, pct_of_floor=406.0, floor_s=1e-3))  # as results written before say
    plain = Row.from_dict(plain)
    assert pct_of_floor(old) is None and pct_of_floor(plain) == plain.pct_of_floor
    assert not [what for what, _ in _extra_rows([old], hazard=True) if what == "% of floor"]
    assert [vals for what, vals in _extra_rows([plain], hazard=False) if what == "% of floor"]


# -- make passes on what the harness's own status was -----------------------------------------------


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_says_the_harness_status_that_it_turns_into_2(tmp_path):
    def make(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["make", "--no-print-directory", *args, f"PYTHON={sys.executable}"], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)

    r = make("compare", "ARGS=--scenarios no_such_scenario")  # bad input: the harness exits 2
    assert r.returncode == 2
    assert "make compare: python -m harness compare exited 2 (1: a check failed or the run was cut short; 2: bad input" in r.stderr
    base = write(doc([row("torch", "async", samples(1e-3, seed=1))]), tmp_path / "a.json")
    cand = write(doc([row("torch", "async", samples(1.5e-3, seed=2))]), tmp_path / "b.json")
    r = make("regress", f"BASELINE={base}", f"CANDIDATE={cand}")  # a regression: the harness exits 1
    assert r.returncode == 2 and "make regress: python -m harness regress exited 1 (1: a regression;" in r.stderr


# -- set-up: no deprecation box about project.license -----------------------------------------------


def test_pyproject_license_is_an_spdx_expression_that_setuptools_takes_without_a_warning():
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} predates SPDX license expressions")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_configuration(Distribution(), ROOT / "pyproject.toml")
    deprecated = [str(w.message) for w in caught if "Deprecat" in w.category.__name__]
    assert not deprecated, deprecated[0][:300]


# -- list says what a scenario needs, from its spec -------------------------------------------------


def test_list_says_what_a_scenario_needs_from_its_spec(monkeypatch, capsys):
    from scenarios import _cache, get

    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "gpu_links: How GPUs talk" in out and "\n  needs 2 GPUs in one process" in out.split("gpu_links:")[1]
    assert "needs" not in out.split("sync_points:")[1].split("device_creation:")[0]
    monkeypatch.setitem(_cache, "gpu_links", dataclasses.replace(get("gpu_links"), devices=4))
    assert cli.main(["list"]) == 0
    assert "needs 4 GPUs in one process" in capsys.readouterr().out


# -- regress: rows skipped in both runs are one line, the verdict last ------------------------------


def test_regress_collapses_rows_skipped_in_both_runs_and_ends_with_its_verdict():
    from rich.console import Console

    from harness.regress.regress import regress
    from harness.regress.view import render

    rows = [row("torch", "async", samples(1e-3))] + [
        row(fw, v, status="skipped", reason="CuPy needs a CUDA GPU" if fw == "cupy" else "needs a CUDA device")
        for fw in ("cupy", "jax") for v in ("sync_each", "async", "async_poll")]
    d = doc(rows)
    res = regress(d, d)
    assert len(res.not_comparable) == 6
    buf = io.StringIO()
    render(res, d, d, Console(file=buf, width=300, color_system=None))
    lines = [x for x in buf.getvalue().splitlines() if x.strip()]
    said = [x for x in lines if "not comparable:" in x]
    assert said == ["  not comparable: 6 rows skipped in both runs (3 x CuPy needs a CUDA GPU; "
                    "3 x needs a CUDA device)"]
    assert lines[-1].startswith("compared 1 row: 0 regressions") and lines[-1].endswith("6 not comparable")


# -- a memory cap below what a point holds is refused before the run ---------------------------------


def test_a_cap_below_what_a_point_holds_is_refused_before_the_run(monkeypatch, tmp_path):
    """An H100 self-regress capped each process at 0.04 (3.2 GiB) against collectives' 6.25 GiB a JAX rank
    at 256 MiB: refused up front with what would hold it, not found out minutes into the point; off a GPU
    nothing is asked."""
    from harness.measure import machine
    from harness.run.parser import UsageError

    monkeypatch.setattr(cmd_compare, "gpu_present", lambda: True)
    monkeypatch.setattr(machine, "gpu_memory_bytes", lambda: 80 << 30)
    with pytest.raises(UsageError, match=r"^collectives at reduce 256 MiB holds at least 6\.25 GiB in a JAX process "
                                         r"\(the buffers its impl keeps at once\); --gpu-memory-fraction 0\.04 gives "
                                         r"3\.20 GiB of this GPU's 80\.0: use --gpu-memory-fraction 0\.08 or more$"):
        cmd_compare.start_checks(tmp_path, 0.04, ["torch", "jax"], 1, ["sync_points", "collectives"], "full", 2)
    cmd_compare.start_checks(tmp_path, 0.08, ["torch", "jax"], 1, ["sync_points", "collectives"], "full", 2)
    with pytest.raises(UsageError, match=r"holds at least 6\.00 GiB in a PyTorch process"):  # 24 buffers, not 25
        cmd_compare.start_checks(tmp_path, 0.07, ["torch"], 1, ["collectives"], "full", 2)
    # one rank times each operation's smallest point alone (Scenario.points): no 256 MiB buffer to hold
    cmd_compare.start_checks(tmp_path, 0.02, ["jax"], 1, ["collectives"], "full", 1)
    cmd_compare.start_checks(tmp_path, 0.04, ["torch", "jax"], 1, ["sync_points"], "full")  # no such point
    cmd_compare.start_checks(tmp_path, 0.04, ["torch", "jax"], 1, ["collectives"], "smoke")
    # a 24 GB card at compare's default: the fraction that holds the point, and as many processes as its JAX
    # pools (a worker and a rank group each) leave room for
    monkeypatch.setattr(machine, "gpu_memory_bytes", lambda: 24 << 30)
    with pytest.raises(UsageError, match=r"0\.15 gives 3\.60 GiB of this GPU's 24\.0: use --gpu-memory-fraction "
                                         r"0\.27 or more with --processes 1 or fewer$"):
        cmd_compare.start_checks(tmp_path, 0.15, ["torch", "jax"], 2, ["collectives"], "full", 2)
    cmd_compare.start_checks(tmp_path, 0.27, ["torch", "jax"], 1, ["collectives"], "full", 2)
    monkeypatch.setattr(machine, "gpu_memory_bytes", lambda: None)  # no GPU answers
    cmd_compare.start_checks(tmp_path, 0.04, ["torch", "jax"], 1, ["collectives"], "full")


def test_an_interleaved_regress_raises_its_default_cap_to_the_largest_point_where_its_pools_fit(monkeypatch):
    """Its 8 processes side by side get 0.08 by default; 0.09 holds collectives' 6.25 GiB on an 80 GB card
    with a hundredth to spare (0.72 of the GPU in all); a 40 GB card would need 1.36: left as it was."""
    from harness.measure import machine
    from harness.run import cmd_regress

    raised = lambda: cmd_regress._fraction_for_the_largest_point(0.08, 8, ["collectives"], "full", ["jax"], 2)  # noqa
    for gib, fraction in ((80, 0.09), (40, 0.08), (141, 0.08)):
        monkeypatch.setattr(machine, "gpu_memory_bytes", lambda gib=gib: gib << 30)
        assert raised() == pytest.approx(fraction), gib
    monkeypatch.setattr(machine, "gpu_memory_bytes", lambda: None)
    assert raised() == 0.08


def test_an_interleaved_regress_whose_default_cap_cannot_hold_a_point_says_so_and_writes_nothing(
        monkeypatch, tmp_path, capsys):
    from harness.measure import machine
    from harness.run import cli

    monkeypatch.setattr(machine, "gpu_memory_bytes", lambda: 40 << 30)  # a 40 GB card
    monkeypatch.setattr(cmd_compare, "gpu_present", lambda: True)
    code = cli.main(["regress", "--baseline-tree", ".", "--scenarios", "collectives", "--frameworks", "torch,jax",
                     "--size", "full", "--seed", "1", "--out", str(tmp_path / "out"), "--world-size", "2",
                     "--budget", "0.01", "--timeout", "30"])  # were it not refused: over in seconds, not a full run
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert ("the default cap, 0.08 of the GPU for each of 8 processes side by side, gives 3.20 GiB of this GPU's "
            "40.0: use --gpu-memory-fraction 0.16 or more") in err[0] and "--processes" not in err[0], err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
