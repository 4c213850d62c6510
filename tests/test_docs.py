"""The generated docs: docs/porting.md and docs/scenarios.md (the scenario index) must match the specs.

When one fails, run `make docs` (`python -m harness docs`) and commit what it wrote.
"""
from __future__ import annotations


import re
import shutil
from pathlib import Path

import pytest

from harness.report import docs
from scenarios import ORDER, all_scenarios
from harness.results.model import Result, ScenarioResult
from harness.results.results import read
from tests.report_fixture import write_fake_result
from tests.test_cli import run

ROOT = Path(__file__).resolve().parent.parent


def test_committed_guide_and_index_are_fresh():
    """The one freshness check: the command a reader runs, and what it says."""
    r = run("docs", "--check")
    assert r.returncode == 0, f"{r.stderr} — run `make docs` (python -m harness docs) and commit"
    assert r.stdout.startswith("up to date: docs/porting.md, docs/scenarios.md"), r.stdout


def test_guide_covers_every_scenario_with_its_lesson_snippets_and_apis():
    """Each concept opens with its lesson, then the variant that shows it in the three impls side by side, then
    each framework's first key APIs (the spec lists them all)."""
    guide = (ROOT / docs.PORTING).read_text()
    for n, s in enumerate(all_scenarios(), 1):
        assert f'<a id="{s.name}"></a>' in guide and f"## {n}. {s.name} — {s.title}" in guide
        section = guide.split(f'<a id="{s.name}"></a>')[1].split('<a id="')[0]
        assert section.split("\n\n")[2] == f"**{docs.lesson(s.concept)}**", s.name
        v = docs._concept_variant(s)
        for fw in ("torch", "cupy", "jax"):
            code = docs.snippet(ROOT, s.name, fw, v.name)
            assert code is None or docs.pre(code) in section, (s.name, fw)
        for fw, apis in s.key_apis.items():
            for api in apis[:docs.API_LINES]:
                assert f"`{api}`" in section, (s.name, fw, api)
    for link in re.findall(r"\]\((\.\./[^)#]+)\)", guide):  # every relative link points at a file
        assert (ROOT / "docs" / link).resolve().exists(), link


def test_scenario_index_lists_every_scenario_in_order():
    from scenarios import OPT_IN

    text = (ROOT / docs.SCENARIOS).read_text()
    names = re.findall(r"^\| \d+ \| \[`(\w+)`\]\(\.\./scenarios/(\w+)\.py\)", text, re.M)
    assert names == [(n, n) for n in ORDER]
    for name in OPT_IN:
        assert f"- `{name}`: " in text


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A copy of what the generator reads: impls; results/ holds the fake H200 result."""
    shutil.copytree(ROOT / "impls", tmp_path / "impls", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_guide_shows_what_the_newest_gpu_result_measured(root):
    assert "No full-size GPU result is committed" in docs.porting_guide(root)
    fake = write_fake_result(root / "results")
    # An older full result and a smoke one are not picked.
    (root / "results" / "20250101T000000Z_nvidia-h200_full.json").write_text(fake.read_text().replace("1234", "77"))
    (root / "results" / "20270101T000000Z_cpu_smoke.json").write_text("not even JSON")
    guide = docs.porting_guide(root)
    assert f"Measured sections come from `results/{fake.name}` (NVIDIA H200, driver 580.159.04;" in guide
    assert "| `async` | 87.50 ms (550.0 µs)<br>k 85.75 ms |" in guide
    assert "JAX's call returns 2.1× later than PyTorch's at `async`" in guide
    assert "| While the device computes, the host is free. | " in guide and " | ✘ |" in guide  # JAX refuted (a count: no unit)
    assert "| `on_device` | 13.00 ms (13.00 ms)<br>k 12.74 ms | timeout | crashed |" in guide


def test_a_split_gpu_run_is_measured_scenario_by_scenario(root):
    """A budgeted run plus a later `--scenarios` run: each scenario comes from the newest file that has it."""
    import json

    older = write_fake_result(root / "results")
    doc = json.loads(older.read_text())
    kept = next(iter(doc["scenarios"]))
    doc["scenarios"] = {kept: doc["scenarios"][kept]}
    doc["scenarios"][kept]["rows"] = [dict(r, timing=dict(r["timing"], device_done=dict(
        r["timing"]["device_done"], median=0.0425))) if r.get("timing") else r for r in doc["scenarios"][kept]["rows"]]
    newer = root / "results" / "20991231T000000Z_nvidia-h200_full.json"
    newer.write_text(json.dumps(doc))
    guide = docs.porting_guide(root)
    assert f"Measured sections come from `results/{newer.name}`" in guide
    assert f"Measured sections come from `results/{older.name}`" in guide
    assert "42.50 ms" in guide  # the newer file's numbers for the scenario it holds
    others = [n for n in json.loads(older.read_text())["scenarios"] if n != kept]
    assert others, "the fixture needs a second scenario"
    assert f"`{others[0]}`" in guide.split(f"results/{older.name}")[1].split("\n")[0]


def test_guide_states_what_a_framework_cannot_express(root):
    impl = root / "impls" / "async_dispatch" / "jax_impl.py"
    impl.write_text(impl.read_text() + '\nNOT_EXPRESSIBLE = {"async_poll": "no way to poll"}\n')
    assert "**JAX** has no `async_poll`: no way to poll." in docs.porting_guide(root)


def test_stale_docs_are_found_and_rewritten(root):
    files = docs.generate(root)
    assert docs.stale(files, root) == [docs.PORTING, docs.SCENARIOS]  # neither is in the copy yet
    assert docs.write(files, root) == [docs.PORTING, docs.SCENARIOS]
    assert docs.stale(files, root) == [] and docs.write(files, root) == []
    assert oct((root / docs.PORTING).stat().st_mode & 0o777) == "0o644"
    index = root / docs.SCENARIOS
    index.write_text(index.read_text().replace("| 1 | [`", "| 9 | [`"))
    assert docs.stale(docs.generate(root), root) == [docs.SCENARIOS]


def test_the_guide_compares_no_rank_rows_and_decides_no_communication_claim_at_one_rank():
    def scn(ranks: int) -> dict:
        def row(fw, s):
            t = {"device_done": {"median": s}, "host_return": {"median": s}}
            return {"framework": fw, "variant": "collective", "status": "ok", "timing": t, "ranks": ranks}
        claims = [{"claim": c, "text": f"{c} text", "framework": "torch", "verdict": "confirmed", "evidence": "0 B vs 0 B"}
                  for c in ("bytes_model", "exact")]
        return {"variants": [{"name": "collective"}], "rows": [row("torch", 1e-5), row("jax", 1e-4)], "claims": claims}

    one = "\n".join(docs._measured(ROOT, ScenarioResult.from_dict(scn(1)), "results/x.json", frozenset({"bytes_model"})))
    assert "as long as" not in one and "*Not measured: one GPU.*" in one.replace("**", "*")
    assert not re.search(r"\d\s*(ms|µs|s)\b", one) and "| `collective`" not in one  # no figure, no table
    assert "bytes_model text" not in one and "| exact text | ✔" in one  # a claim not about communication stands
    two = "\n".join(docs._measured(ROOT, ScenarioResult.from_dict(scn(2)), "results/x.json", frozenset({"bytes_model"})))
    assert "JAX takes 10× as long as PyTorch" in two and "bytes_model text" in two


def test_a_sweep_shows_its_largest_point_and_its_claims_there():
    """The guide keeps a sweep to its largest point (the report has every point): its figures and its claims'
    verdicts there, a claim as a row and a framework as a column, with the claim's figure."""
    from tests.report_fixture import ok_row

    def claim(fw, label, verdict, ratio):
        return {"claim": "blocks", "text": "it blocks", "framework": fw, "label": label, "verdict": verdict,
                "evidence": "held 44%", "numbers": {"ratio": ratio}}

    rows = [ok_row("pinned_transfer", fw, "copy", t, t / 2, point=i, label=label)
            for i, (label, t) in enumerate((("4 KiB", 1e-5), ("64 MiB", 2e-3))) for fw in ("torch", "cupy")]
    scn = {"variants": [{"name": "copy"}], "points": [{"label": "4 KiB"}, {"label": "64 MiB"}], "rows": rows,
           "claims": [claim("torch", "4 KiB", "refuted", 0.4), claim("torch", "64 MiB", "confirmed", 2.5),
                      claim("cupy", "4 KiB", "confirmed", 3.0), claim("cupy", "64 MiB", "inconclusive", 1.1)]}
    text = "\n".join(docs._measured(ROOT, ScenarioResult.from_dict(scn), "results/x.json"))
    assert "largest point, 64 MiB" in text and "| `copy` | 2.00 ms (1.00 ms)" in text and "10.0 µs" not in text
    assert "| it blocks | ✔ 2.50× | · |" in text and "0.400×" not in text


def test_defaults_that_differ_give_each_settings_and_what_the_gpu_measured(tmp_path):
    from scenarios import all_scenarios

    part7 = [s for s in all_scenarios() if s.agree_by]
    assert {"matmul_precision", "donation"} <= {s.name for s in part7}
    s = part7[0]
    doc = {"scenarios": {s.name: {"rows": [{}], "claims": [
        {"claim": "x", "framework": "jax", "verdict": "confirmed", "evidence": "median error 2.1e-4 vs 1.2e-7"},
        {"claim": "y", "framework": "torch", "verdict": "inconclusive", "evidence": "inside the noise"}]}}}
    section = "\n".join(docs._defaults_that_differ(tmp_path, [(tmp_path / "results" / "r.json", Result.from_dict(doc))]))
    for setting in s.agree_by.values():
        assert docs._cell(setting) in section
    assert f"Measured: 1 confirmed, 1 inconclusive ([its claims](#{s.name}))." in section
    assert "Not yet measured on a GPU." in "\n".join(docs._defaults_that_differ(tmp_path, []))


def test_only_the_results_that_measure_a_scenario_are_loaded_and_the_guide_is_the_same(root, monkeypatch):
    """Loading validates a whole file (seconds for a big one), so `docs` loads only the newest file holding
    each scenario; the guide must be what loading every committed file gives."""
    import json

    newest = write_fake_result(root / "results")
    older = root / "results" / "20250101T000000Z_nvidia-h200_full.json"
    older.write_text(newest.read_text().replace("1234", "77"))  # every scenario it holds, newest holds too
    cpu = json.loads(newest.read_text())
    cpu["environment"]["gpu"] = None
    (root / "results" / "20991231T000000Z_cpu_full.json").write_text(json.dumps(cpu))
    loaded = []
    monkeypatch.setattr(docs, "read", lambda p: loaded.append(p.name) or read(p))
    guide = docs.porting_guide(root)
    assert loaded == [newest.name]
    loaded.clear()
    monkeypatch.setattr(docs, "_holds", lambda p: None)  # cannot tell: every file is loaded
    assert docs.porting_guide(root) == guide
    assert sorted(loaded) == sorted(p.name for p in (root / "results").glob("*.json"))


def test_a_damaged_result_that_would_be_read_stops_the_docs_with_one_line(root):
    fake = write_fake_result(root / "results")
    newer = root / "results" / "20991231T000000Z_nvidia-h200_full.json"
    newer.write_text(fake.read_text()[:-40])  # truncated
    with pytest.raises(docs.DocsError, match=f"{newer.name}: not JSON"):
        docs.porting_guide(root)
    newer.write_text(fake.read_text().replace('"median": 0.0875', '"median": -1', 1))  # a schema error
    with pytest.raises(docs.DocsError, match=f"{newer.name}: .*less than the minimum of 0"):
        docs.porting_guide(root)


def test_one_rank_times_one_point_per_operation_and_two_ranks_the_whole_sweep():
    """At one rank nothing is communicated: a rank scenario's sweep shrinks to each operation's first (smallest)
    point; the sweep runs at two ranks or more, and a scenario that is not run by ranks keeps its points."""
    from scenarios import get

    coll = get("collectives")
    whole = coll.points("full", 2)
    one = coll.points("full", 1)
    ops = list(dict.fromkeys(p["op"] for p in whole))
    assert len(whole) > len(ops) and [p["op"] for p in one] == ops
    assert all(p["bytes"] == min(q["bytes"] for q in whole if q["op"] == p["op"]) for p in one)
    assert coll.points("full", 3) == whole == coll.points("full")
    pinned = get("pinned_transfer")  # no ranks: its sweep is its own at any world size
    assert pinned.points("full", 1) == pinned.points("full")
