"""A sweep of damaged result files: hypothesis damages a valid document's structure (a key deleted or
renamed, a value of the wrong type, negative, huge, NaN or a path, a row or list entry duplicated,
markup and path-like names, deep nesting) and `report` and `regress` read it in-process. Never a
traceback; exit 0 only for a file the loader accepts (and then every file written lies in the output
folder); a refused file exits 2 with one line; nothing is ever written outside the output folder.

Only the chart's rasterising (Figure.savefig) is a stub here, the one slow step (~0.8 s of a report's
0.9 s): the chart's data, axes and limits are still built from the damaged file, and tests/test_report.py
draws the real pictures of valid files."""
from __future__ import annotations

import contextlib
import copy
import io
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness.run import cli
from harness.results.results import ResultError
from tests.synthetic import load
from tests import synthetic
from tests.report_fixture import fake_doc, timeline_png

JAIL = "@JAIL@"  # replaced, when the file is written, by the folder the example's files live in
ESCAPE = Path("/tmp/triptych-sweep-escape")  # a name a file could point at; must never appear
PNG = timeline_png()


def _regress_doc() -> dict[str, Any]:
    """A small result of what regress reads: samples split over processes, each with its host loop."""
    rows = [synthetic.row(fw, v, synthetic.samples(1e-3, seed=i), processes=2)
            for i, (fw, v) in enumerate([("torch", "sync_each"), ("torch", "async"), ("jax", "sync_each"),
                                         ("jax", "async")])]
    for r in rows:
        for p in r["timing"]["processes"]:
            p["host_loop_s"] = 2e-8
    return synthetic.doc(rows, gpu="NVIDIA H200", size="full")


BASES = {"report": fake_doc(), "regress": _regress_doc()}


def _paths(x: Any, at: tuple = ()) -> Any:
    yield at
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _paths(v, (*at, k))
    elif isinstance(x, list):
        for i, v in enumerate(x[:3]):
            yield from _paths(v, (*at, i))


PATHS = {name: [p for p in _paths(doc) if p] for name, doc in BASES.items()}

NAMES = st.sampled_from([
    "../x", "../../x", "../../../sweep-escape", f"{JAIL}/abs", f"/../../../../..{JAIL}/abs2", str(ESCAPE),
    "<img src=x onerror=alert(1)>", "<b>x</b>", "a/b", "x" * 300, "", ".", "..", "a\x00b", "a\nb", "timelines",
    "report", "report.html", "torch<script>", "é漢字", "/dev/zero", "-rf", "async_dispatch", "torch", "jax",
])
NUMBERS = st.one_of(st.sampled_from([-1, 0, 1, -1e-9, 10**30, 2**63, 1e300, 1e308, -1e308, 0.5]),
                    st.floats(), st.integers())  # st.floats() includes NaN and ±inf: written as NaN, Infinity
JUNK = st.one_of(st.none(), st.booleans(), NUMBERS, NAMES, st.text(max_size=8),
                 st.lists(st.one_of(NUMBERS, NAMES), max_size=3),
                 st.dictionaries(NAMES, st.one_of(NUMBERS, NAMES), max_size=2), st.just({}), st.just([]))


def _nested(depth: int) -> list:
    x: list = []
    for _ in range(depth):
        x = [x]
    return x


def _alike(x: Any) -> st.SearchStrategy:
    if isinstance(x, bool):
        return st.booleans()
    if isinstance(x, (int, float)):
        return NUMBERS
    if isinstance(x, str):
        return st.one_of(NAMES, st.text(max_size=8))
    if isinstance(x, list):
        return st.one_of(st.just([]), st.just(x[:1]), st.just(x[::-1]), st.just(x + x[:1]))
    if isinstance(x, dict):
        return st.one_of(st.just({}), st.just(dict(list(x.items())[:1])))
    return JUNK


@st.composite
def damaged(draw: Any) -> tuple[str, dict[str, Any]]:
    base = draw(st.sampled_from(sorted(BASES)))
    doc = copy.deepcopy(BASES[base])
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.sampled_from(PATHS[base]))
        how = draw(st.sampled_from(["alike", "alike", "alike", "replace", "delete", "rename", "add", "duplicate",
                                    "nest"]))
        try:
            parent = doc
            for k in at[:-1]:
                parent = parent[k]
            key = at[-1]
            if how == "delete" and isinstance(parent, dict):
                del parent[key]
            elif how == "rename" and isinstance(parent, dict):
                parent[draw(NAMES)] = parent.pop(key)
            elif how == "add" and isinstance(parent, dict):
                parent[draw(NAMES)] = copy.deepcopy(parent[key]) if draw(st.booleans()) else draw(JUNK)
            elif how == "duplicate" and isinstance(parent, list):
                parent.insert(key, copy.deepcopy(parent[key]))
            elif how == "alike":  # the same kind of value, so that more damaged files get past the loader
                parent[key] = draw(_alike(parent[key]))
            elif how == "nest":
                parent[key] = _nested(draw(st.integers(20, 60)))
            else:
                parent[key] = draw(JUNK)
        except (KeyError, IndexError, TypeError):  # the path was removed by an earlier damage
            continue
    return base, doc


def _call(argv: list[str]) -> tuple[int, str]:
    """The CLI in-process: (exit status, stderr). An exception that escapes main is what the command
    line prints as a traceback and exit 1; it is returned as such, so that the sweep reads the same
    against any version of the harness (docs/reliability.md)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except Exception as e:  # noqa: BLE001 - recorded as the traceback it would print
            code = 1
            print(f"Traceback (most recent call last):\n{type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
    return code, err.getvalue()


def _listing(root: Path) -> set[Path]:
    return set(root.rglob("*"))


def _one_line(code: int, err: str) -> str | None:
    """Why (code, err) is not a one-line refusal with exit 2, or None."""
    lines = err.strip().splitlines()
    if "Traceback" in err:
        return "traceback: " + err.strip().splitlines()[-1][:200]
    if code != 2:
        return f"exit {code} on a refused file"
    if len(lines) != 1 or not lines[0].startswith("harness: error:"):
        return f"not one line: {err[-300:]!r}"
    return None


def _case(base: str, doc: dict[str, Any], jail: Path, accepted: bool | None = None) -> tuple[bool, list[str]]:
    """Feed one damaged document to report and regress inside jail: (whether the file counts as
    accepted, what went wrong: empty when nothing did). accepted: given (the verdict of another
    version's loader), or None to ask this harness's loader."""
    above = set(jail.parent.iterdir()) - {jail}
    good = synthetic.write(BASES[base], jail / "good" / "20261201T000000Z_nvidia-h200_full.json")
    folder, out = jail / "in", jail / "out"
    (folder / "timelines").mkdir(parents=True)
    (folder / "timelines" / "async_dispatch.png").write_bytes(PNG)
    path = folder / "20261202T100000Z_nvidia-h200_full.json"
    path.write_text(json.dumps(doc).replace(JAIL, str(jail)))
    before = _listing(jail)
    if accepted is None:
        try:
            load(path)
            accepted = True
        except ResultError:
            accepted = False
    wrong = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("matplotlib.figure.Figure.savefig", lambda self, buf, **kw: buf.write(PNG))
        code, err = _call(["report", str(path), "--out", str(out)])
    if accepted and code == 0:
        if err:
            wrong.append(f"report: exit 0 with {err[-300:]!r}")
    else:  # refused: by the loader, or (accepted) a timeline picture that the damage made unreadable
        why = _one_line(code, err)
        if why:
            wrong.append(f"report: {why}")
        elif out.exists():
            wrong.append(f"report: refused, but wrote {sorted(out.rglob('*'))[:3]}")
    for argv in (["regress", "--baseline", str(path), "--candidate", str(path)],
                 ["regress", "--baseline", str(good), "--candidate", str(path)]):
        code, err = _call(argv)
        if not accepted or code == 2:
            why = _one_line(code, err)
        else:
            why = None if code in (0, 1) and "Traceback" not in err else f"exit {code}: {err[-300:]!r}"
        if why:
            wrong.append(f"regress: {why}")
    new = _listing(jail) - before
    outside = {p for p in new if p != out and out not in p.parents} | (set(jail.parent.iterdir()) - {jail} - above)
    if ESCAPE.exists():
        outside.add(ESCAPE)
    if outside:
        wrong.append(f"wrote outside the output folder: {sorted(outside)[:3]}")
    return accepted, wrong


@settings(max_examples=120, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(case=damaged())
@pytest.mark.parametrize("jsonschema", [True, False], ids=["with_jsonschema", "without_jsonschema"])
def test_damaged_files_never_crash_report_or_regress(tmp_path_factory, jsonschema, case):
    base, doc = case
    jail = tmp_path_factory.mktemp("jail")
    with pytest.MonkeyPatch.context() as mp:
        if not jsonschema:  # as on the H200's image: import jsonschema raises ImportError
            mp.setitem(sys.modules, "jsonschema", None)
        accepted, wrong = _case(base, doc, jail)
    event(f"{base}: {'accepted' if accepted else 'refused'}")
    assert wrong == [], wrong
    shutil.rmtree(jail)


def test_the_sweep_starts_from_files_the_tools_accept(tmp_path):
    """Damage is measured from a base that loads, reports and compares cleanly."""
    for name, doc in BASES.items():
        path = synthetic.write(doc, tmp_path / name / "20261202T100000Z_nvidia-h200_full.json")
        load(path)
        if name == "report":
            (path.parent / "timelines").mkdir()
            (path.parent / "timelines" / "async_dispatch.png").write_bytes(PNG)
        assert _call(["report", str(path), "--out", str(tmp_path / name / "out")]) == (0, "")
        assert _call(["regress", "--baseline", str(path), "--candidate", str(path)]) == (0, "")
    assert all(r["timing"].get("processes") and r["timing"].get("samples")
               for r in BASES["regress"]["scenarios"]["async_dispatch"]["rows"])


def test_a_spread_far_beyond_its_median_gives_an_unbounded_interval(tmp_path):
    """Found by the sweep: an IQR hundreds of times its median overflowed exp() in regress's interval
    from the summary statistics (a file without samples), a traceback for a file the loader accepts."""
    rows = [synthetic.row(fw, "sync_each", keep_samples=False, processes=0) for fw in ("torch", "jax")]
    for r in rows:
        r["timing"]["device_done"].update(median=1e-9, q1=1e-9, q3=1.0, iqr=1.0 - 1e-9, max=1.0)
    path = synthetic.write(synthetic.doc(rows), tmp_path / "r.json")
    load(path)
    code, err = _call(["regress", "--baseline", str(path), "--candidate", str(path)])
    assert code == 0 and err == "", err


# -- the sweep as a tally, to read one set of damaged files against two versions of the harness -------
# python -m tests.test_sweep_results save 200 cases.json      (draws as the test does, derandomized)
# python -m tests.test_sweep_results tally cases.json [--oracle verdicts.json] [--without-jsonschema] > verdicts.json
# With --oracle (the tally of another version), a file counts as refused where that version's loader
# refused it: "exit 0 on a refused file" then means this version's tools read what that loader refuses.


class _Hung(BaseException):
    pass


def _save(n: int, to: Path) -> None:
    from hypothesis import Phase

    got: list[Any] = []

    @settings(max_examples=n, derandomize=True, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case=damaged())
    def collect(case: tuple[str, dict[str, Any]]) -> None:
        got.append(copy.deepcopy(case))

    collect()
    to.write_text(json.dumps({"bases": BASES, "cases": got}))
    print(f"{len(got)} damaged files in {to}")


def _tally(cases: Path, oracle: Path | None) -> dict[str, Any]:
    import resource
    import signal
    import tempfile

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a read of /dev/zero ends in MemoryError
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(_Hung()))
    saved = json.loads(cases.read_text())
    BASES.update(saved["bases"])
    verdicts = json.loads(oracle.read_text())["cases"] if oracle else None
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for i, (base, doc) in enumerate(saved["cases"]):
            jail = Path(root) / f"jail{i}"
            jail.mkdir()
            signal.alarm(60)
            try:
                accepted, wrong = _case(base, doc, jail, verdicts[i]["accepted"] if verdicts else None)
            except _Hung:
                accepted, wrong = bool(verdicts and verdicts[i]["accepted"]), ["hung (60 s)"]
            finally:
                signal.alarm(0)
            rows.append({"base": base, "accepted": accepted, "wrong": wrong})
            shutil.rmtree(jail, ignore_errors=True)
    kinds = {"traceback": "traceback", "exit 0 on a refused file": "exit 0 on a refused file",
             "not one line": "not one line", "outside": "wrote outside", "hung": "hung"}
    return {"files": len(rows), "accepted": sum(r["accepted"] for r in rows),
            "files_with_a_problem": sum(bool(r["wrong"]) for r in rows),
            "by_kind": {k: sum(any(w in x for x in r["wrong"]) for r in rows) for k, w in kinds.items()},
            "cases": rows}


if __name__ == "__main__":
    if sys.argv[1] == "save":
        _save(int(sys.argv[2]), Path(sys.argv[3]))
    else:
        if "--without-jsonschema" in sys.argv:
            sys.argv.remove("--without-jsonschema")
            sys.modules["jsonschema"] = None  # type: ignore[assignment]
        got = _tally(Path(sys.argv[2]), Path(sys.argv[4]) if len(sys.argv) > 4 else None)
        print(json.dumps(got, indent=1))
        print(json.dumps({k: v for k, v in got.items() if k != "cases"}), file=sys.stderr)
