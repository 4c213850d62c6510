"""A sweep of hostile cases across issue 49's eleven families, as a new user and as an attacker would try
them: `python -m tests.sweep_hostile [--family N ...] [--list]` runs each case in a fresh temporary folder,
prints every case that failed (what broke) and the summary "held H of N, failed F"; exit 1 if any failed.

A case observes only what both versions have: `python -m harness` (in-process through cli.main where
nothing but its output is at stake, else in a process of its own), make, signals, and the files on
disk. Each family's invariant is the issue's: quoted or refused, nothing written outside, readable by
its own tools, bounded, exit 2 on nothing compared, a stop keeps the result, one line and the right
status, a last place, meaningful bounds, text never markup. The cases are generated from lists of
hostile values, not drawn at random: a run repeats exactly. results/sweeps.md has the count, and what it
found against older code.
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import html.parser
import io
import itertools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
Case = tuple[int, str, Callable[[Path], "str | None"]]  # (family, name, run(tmp) -> None where it held, else why)
CASES: list[Case] = []


def case(family: int, name: str) -> Callable[[Callable[[Path], str | None]], Callable[[Path], str | None]]:
    def add(fn: Callable[[Path], str | None]) -> Callable[[Path], str | None]:
        CASES.append((family, name, fn))
        return fn
    return add


# -- helpers ----------------------------------------------------------------------------------------

def cli(argv: list[str]) -> tuple[int, str, str]:
    """`python -m harness argv` in this process: (exit status, stdout, stderr); a raise is status -1."""
    from harness.run import cli as harness_cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = harness_cli.main(argv)
        except BaseException:  # noqa: BLE001 - a traceback is what the sweep looks for
            err.write(traceback.format_exc())
            code = -1
    return code, out.getvalue(), err.getvalue()


def harness(args: list[Any], cwd: Path = ROOT, env: dict[str, str] | None = None, stdout: Any = subprocess.PIPE,
            stderr: Any = subprocess.PIPE, preexec: Any = None, timeout: float = 240) -> tuple[int, str, str]:
    """`python -m harness args` in a process of its own: (exit status, stdout, stderr) as text."""
    e = dict(os.environ, PYTHONPATH=str(ROOT)) | (env or {})
    try:
        r = subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=e, stdout=stdout, stderr=stderr,
                           timeout=timeout, preexec_fn=preexec)
    except subprocess.TimeoutExpired:
        return -9, "", f"(hung: killed after {timeout:g} s)"
    text = lambda b: b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")  # noqa: E731
    return r.returncode, text(r.stdout), text(r.stderr)


def refused(code: int, err: str, words: str = "") -> str | None:
    """None where the command refused in one line with exit 2 (naming `words`), else what it did."""
    lines = err.strip().splitlines()
    if code == 2 and len(lines) == 1 and lines[0].startswith("harness: error:") and words in lines[0]:
        return None
    return f"exit {code}, stderr: {err.strip()[-400:]!r}"


def no_traceback(err: str) -> str | None:
    return f"a traceback: {err.strip()[-400:]!r}" if "Traceback" in err or "Exception ignored" in err else None


def small_result(folder: Path, name: str = "20261201T000000Z_cpu_smoke.json", **changes: Any) -> Path:
    """A small valid result (tests/synthetic.py), changed at its top level by changes."""
    from tests import synthetic

    rows = [synthetic.row(fw, v, synthetic.samples(1e-3, seed=i)) for i, (fw, v) in
            enumerate([("torch", "sync_each"), ("torch", "async"), ("jax", "sync_each")])]
    doc = synthetic.doc(rows) | changes
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(doc))
    return folder / name


def fake_result(folder: Path, change: Callable[[dict], None] | None = None) -> Path:
    """The report's fake result (tests/report_fixture.py), changed by change."""
    from tests.report_fixture import fake_doc, write_fake_result

    path = write_fake_result(folder)
    if change is not None:
        doc = fake_doc()
        change(doc)
        path.write_text(json.dumps(doc))
    return path


@contextlib.contextmanager
def no_pixels():
    """Figure.savefig a stub (the slow rasterising): the charts' text is still laid out by matplotlib."""
    from matplotlib.figure import Figure

    real = Figure.savefig
    Figure.savefig = lambda self, buf, **kw: buf.write(b"\x89PNG\r\n\x1a\n")
    try:
        yield
    finally:
        Figure.savefig = real


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() and not p.is_symlink() else b"")
            for p in sorted(folder.rglob("*"))} if folder.exists() else {}


# -- family 1: what make hands the shell --------------------------------------------------------------

NAMES = ["zzz;touch${IFS}PWNED;.json", "a b.json", "$(touch PWNED).json", "`touch PWNED`.json", "x\";touch PWNED;\".json",
         "it's.json", "*.json", "?.json", "x&&touch PWNED.json", "x||touch PWNED.json", "x|touch PWNED.json",
         "x>PWNED.json", "x<PWNED.json", "${HOME}.json", "~.json", "x\ttab.json", "-rf.json", "--baseline.json",
         "x\\\";touch PWNED;#.json", "x';touch PWNED;'.json", "x$IFS$(touch${IFS}PWNED).json", "%.json", "#.json",
         "!.json", "x{a,b}.json", "[ab].json", "\u00e9\u6f22.json", "x\\.json", "=.json", "x:y.json"]


def _make(here: Path, *args: str) -> tuple[int, list[str] | None, str]:
    (here / "argv.py").write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    (here / "argv.py").chmod(0o755)
    r = subprocess.run(["make", "-s", "--no-print-directory", "-f", str(ROOT / "Makefile"), *args,
                        f"PYTHON={here / 'argv.py'}"], cwd=here, capture_output=True, text=True, timeout=60)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("[")]
    return r.returncode, (json.loads(lines[-1]) if lines else None), r.stderr


def _pwned(here: Path) -> str | None:
    found = [p.name for p in here.rglob("PWNED*")]
    return f"the shell ran something: {found}" if found else None


def _make_case(name: str, how: str) -> Callable[[Path], str | None]:
    def run(here: Path) -> str | None:
        value = name.replace("$", "$$")  # make's own syntax for one $ on its command line
        if how in ("runs", "results"):
            (here / how).mkdir()
            (here / how / "00000000T000000Z_cpu_smoke.json").write_text("{}")
            (here / how / f"z{name}").write_text("{}")
            code, argv, err = _make(here, "report")
            want = ["-m", "harness", "report", f"{how}/z{name}"]
        elif how == "RESULT":
            code, argv, err = _make(here, "report", f"RESULT={value}")
            want = ["-m", "harness", "report", name]
        elif how == "BASELINE":
            code, argv, err = _make(here, "regress", f"BASELINE={value}", f"CANDIDATE={value}")
            want = ["-m", "harness", "regress", "--baseline-tree", name, "--candidate-tree", name]
        else:
            code, argv, err = _make(here, "compare", f"ARGS=--out {value}")
            want = None  # split at blanks; never run
        return _pwned(here) or (None if want is None and code == 0 or argv == want
                                else f"make {how}: exit {code}, argv {argv}, {err[-200:]!r}")
    return run


if shutil.which("make"):
    for _name, _how in itertools.product(NAMES, ("runs", "results", "RESULT", "BASELINE", "ARGS")):
        case(1, f"make {_how} {_name!r}")(_make_case(_name, _how))


# -- family 2: a report writes into its result's own folder alone ----------------------------------------

def _folder_case(kind: str) -> Callable[[Path], str | None]:
    def run(tmp: Path) -> str | None:
        path = fake_result(tmp / "in")
        victim = tmp / "victim"
        victim.mkdir()
        (victim / "report.html").write_text("keep")
        stem = path.with_suffix("")
        if kind == "outside":
            stem.symlink_to(victim)
        elif kind == "relative outside":
            stem.symlink_to(Path("..") / "victim")
        elif kind == "sibling":
            (tmp / "in" / "other").mkdir()
            stem.symlink_to(tmp / "in" / "other")
        elif kind == "chain":
            (tmp / "in" / "hop").symlink_to(victim)
            stem.symlink_to(tmp / "in" / "hop")
        elif kind == "dangling":
            stem.symlink_to(tmp / "nowhere")
        elif kind == "loop":
            stem.symlink_to(tmp / "in" / "loop2")
            (tmp / "in" / "loop2").symlink_to(stem)
        elif kind == "file":
            stem.write_text("a file")
        elif kind == "fifo":
            os.mkfifo(stem)
        elif kind == "to a file outside":
            stem.symlink_to(victim / "report.html")
        elif kind == "parent link":  # the result's own folder reached through a link: its folder, still
            (tmp / "via").symlink_to(tmp / "in")
            path = tmp / "via" / path.name
        before = tree(victim)
        with no_pixels():
            code, _, err = cli(["report", str(path)])
        if tree(victim) != before:
            return f"wrote outside: {sorted(tree(victim))}"
        if kind == "parent link":
            return None if code == 0 else f"exit {code}: {err[-300:]!r}"
        return refused(code, err)
    return run


for _kind in ("outside", "relative outside", "sibling", "chain", "dangling", "loop", "file", "fifo",
              "to a file outside", "parent link"):
    case(2, f"report beside its result: R/ is {_kind}")(_folder_case(_kind))


# -- family 3: what a run writes, its own tools read ------------------------------------------------------

CALIBRATIONS = {
    "error only": [{"error": "torch worker did not answer within 900 s (killed)"}],
    "error and numbers": [{"error": "lost"}, {"tiny_op_s": 9e-6, "python_loop_s": 0.006, "at": 1.0}],
    "empty entry": [{}], "no entries": [], "null values": [{"tiny_op_s": None, "python_loop_s": None}],
    "long error": [{"error": "x" * 5000}], "markup error": [{"error": "<script>alert(1)</script> [x](y)"}],
    "unicode error": [{"error": "\u00e9\u6f22 \u2192"}],
}
BAD_CALIBRATIONS = {"error a number": [{"error": 5}], "negative loop": [{"python_loop_s": -1.0}],
                    "string loop": [{"python_loop_s": "fast"}], "entry a string": ["lost"]}


def _calibration_case(entries: list[Any], ok: bool) -> Callable[[Path], str | None]:
    def run(tmp: Path) -> str | None:
        from tests import synthetic

        rows = [synthetic.row("torch", v, synthetic.samples(1e-3)) for v in ("async", "sync_each")]
        doc = synthetic.doc(rows)
        doc["environment"]["machine"]["calibration"] = {"torch": entries}
        path = tmp / "20261201T000000Z_cpu_smoke.json"
        path.write_text(json.dumps(doc))
        with no_pixels():
            got = [cli(["report", str(path), "--out", str(tmp / "r")]), cli(["regress", "--baseline", str(path),
                                                                           "--candidate", str(path)])]
        for code, _, err in got:
            why = (None if code == 0 else f"exit {code}: {err[-300:]!r}") if ok else refused(code, err)
            if why:
                return why
        return None
    return run


for _n, _e in CALIBRATIONS.items():
    case(3, f"calibration {_n}: read by report and regress")(_calibration_case(_e, True))
for _n, _e in BAD_CALIBRATIONS.items():
    case(3, f"calibration {_n}: refused in one line")(_calibration_case(_e, False))


# -- family 4: a file's counts bounded as the command line's ----------------------------------------------

def _count_case(what: str, value: Any, ok: bool) -> Callable[[Path], str | None]:
    def run(tmp: Path) -> str | None:
        from harness.results.results import ResultError
        from tests import synthetic
        from tests.synthetic import load

        doc = synthetic.doc([synthetic.row("torch", v, synthetic.samples(1e-3)) for v in ("async", "sync_each")])
        if what == "processes":  # rows built apart: the synthetic document is checked as it is made
            doc["scenarios"]["async_dispatch"]["rows"] = [
                synthetic.row("torch", v, synthetic.samples(1e-3, n=2 * value), processes=value)
                for v in ("async", "sync_each")]
        else:
            if what == "fraction":
                doc["environment"]["gpu_memory_fraction"] = value
            else:
                doc[what] = value
        path = tmp / "20261201T000000Z_cpu_smoke.json"
        path.write_text(json.dumps(doc))
        if ok:  # within the command line's bounds: the file reads (a fresh run of it is the tests' business)
            try:
                load(path)
            except ResultError as e:
                return f"refused a count the command line allows: {e}"
            return None
        code, _, err = harness(["regress", "--baseline", str(path), "--out", str(tmp / "out")], timeout=120)
        return refused(code, err) or (f"wrote {sorted(tree(tmp / 'out'))}" if tree(tmp / "out") else None)
    return run


for _what, _values in (("processes", [(1, True), (16, True), (17, False), (64, False)]),
                       ("examples", [(10_000, True), (10_001, False), (10**9, False)]),
                       ("seed", [(2**32 - 1, True), (2**32, False), (2**63, False)]),
                       ("fraction", [(1.0, True), (0.5, True), (1.0001, False), (50.0, False), (0.0, False)])):
    for _v, _ok in _values:
        case(4, f"a baseline's {_what} of {_v}: {'read' if _ok else 'refused'}")(_count_case(_what, _v, _ok))


# -- family 5: a regress that compared nothing fails ------------------------------------------------------

SMALL = ["--frameworks", "torch", "--scenarios", "event_sync", "--size", "smoke", "--pairs", "2", "--max-pairs", "2",
         "--quiet"]


def _zero_case(kind: str) -> Callable[[Path], str | None]:
    def run(tmp: Path) -> str | None:
        scripts = {"exits 0": "exit 0", "exits 1": "exit 1", "prints garbage": "echo not a python; exit 0",
                   "sleeps then exits": "sleep 1; exit 0",
                   "no dependencies": f'exec "{sys.executable}" -S "$@"',
                   "python elsewhere": f'exec "{sys.executable}" -c "import sys; sys.exit(0)"'}
        if kind in scripts:
            py = tmp / "py.sh"
            py.write_text(f"#!/bin/sh\n{scripts[kind]}\n")
            py.chmod(0o755)
            side = ["--baseline-python", str(py)]
        elif kind == "import fault on the baseline":
            side = ["--baseline-python", sys.executable, "--baseline-env", "TRIPTYCH_FAULT=*:torch:import"]
        elif kind == "tree without the harness":
            (tmp / "empty").mkdir()
            side = ["--baseline-tree", str(tmp / "empty")]
        elif kind == "ref that does not exist":
            side = ["--baseline-tree", "no-such-ref-49"]
        elif kind == "a folder as interpreter":
            side = ["--baseline-python", str(tmp)]
        else:  # a result file pair with nothing in common
            a = small_result(tmp / "a")
            b = small_result(tmp / "b", scenarios={})
            code, out, err = cli(["regress", "--baseline", str(a), "--candidate", str(b)])
            return refused(code, err)
        code, out, err = harness(["regress", *side, *SMALL, "--out", str(tmp / "out")], cwd=tmp)
        last = err.strip().splitlines()[-1] if err.strip() else ""
        if code != 2 or not last.startswith("harness: error:"):
            return f"exit {code}: {err.strip()[-300:]!r}"
        return no_traceback(err)
    return run


for _kind in ("exits 0", "exits 1", "prints garbage", "sleeps then exits", "no dependencies", "python elsewhere",
              "import fault on the baseline", "tree without the harness", "ref that does not exist",
              "a folder as interpreter",
              "result files with nothing in common"):
    case(5, f"regress whose baseline {_kind}: exit 2")(_zero_case(_kind))


# -- family 6: every stop keeps the run ---------------------------------------------------------------------

def _stop_case(phase: str, sig: signal.Signals, to_group: bool) -> Callable[[Path], str | None]:
    def run(tmp: Path) -> str | None:
        from tests.test_stops import MEASURED, _stop_at

        (tmp / "tmp").mkdir()
        out = tmp / "out"
        code, err = _stop_at(phase, sig, to_group, out, isolation="process", TMPDIR=str(tmp / "tmp"))
        if no_traceback(err):
            return no_traceback(err)
        files = sorted(out.glob("*.json"))
        if phase == "exit":
            return None if code == 128 + sig.value and len(files) == 1 else f"exit {code}, {files}"
        measured = MEASURED.get(phase, False)
        if len(files) != 1:
            return f"exit {code}, results {files}: {err[-300:]!r}"
        doc = json.loads(files[0].read_text())
        if measured and not (doc["complete"] and code == 128 + sig.value):
            return f"exit {code}, complete {doc['complete']}"
        if not measured and not (doc["complete"] is False and code == 1):
            return f"exit {code}, complete {doc['complete']}"
        left = list((tmp / "tmp").glob("triptych-points-*"))
        return f"left {left}" if left else None
    return run


for _phase, _sig, _group in itertools.product(("startup", "calibration", "equivalence", "timing1", "shutdown", "result",
                                               "exit"), (signal.SIGHUP, signal.SIGQUIT), (False, True)):
    if _phase == "exit" and _group:
        continue
    case(6, f"{_sig.name} to the {'group' if _group else 'process'} at {_phase}")(_stop_case(_phase, _sig, _group))
for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    case(6, f"{_sig.name} to the group as a worker starts")(_stop_case("spawned", _sig, True))


# -- family 7: text that cannot be encoded or drawn -------------------------------------------------------

def _encoding_case(encoding: str, command: str) -> Callable[[Path], str | None]:
    def run(tmp: Path) -> str | None:
        path = small_result(tmp / "r")
        args = {"list": ["list"], "regress": ["regress", "--baseline", path, "--candidate", path],
                "report": ["report", path], "bad input": ["regress", "--baseline", tmp / "n\u00e9.json"]}[command]
        code, out, err = harness([str(a) for a in args], env={"PYTHONIOENCODING": encoding})
        want = 2 if command == "bad input" else 0
        return no_traceback(err) or (None if code == want else f"exit {code}: {err[-300:]!r}")
    return run


for _enc, _cmd in itertools.product(("ascii", "latin-1", "ascii:strict", "cp437"),
                                    ("list", "regress", "report", "bad input")):
    case(7, f"PYTHONIOENCODING={_enc} {_cmd}")(_encoding_case(_enc, _cmd))


def _bytes_case(option: str) -> Callable[[Path], str | None]:
    def run(tmp: Path) -> str | None:
        bad = os.path.join(os.fsencode(tmp), b"x\xff\xfe")
        path = os.fsencode(small_result(tmp / "r"))
        args = {"report --out": [b"report", path, b"--out", bad], "report RESULT": [b"report", bad + b".json"],
                "compare --out": [b"compare", b"--scenarios", b"event_sync", b"--frameworks", b"torch", b"--size",
                                  b"smoke", b"--isolation", b"none", b"--no-report", b"--quiet", b"--out", bad],
                "regress --baseline": [b"regress", b"--baseline", bad + b".json", b"--candidate", path],
                "regress --candidate": [b"regress", b"--baseline", path, b"--candidate", bad + b".json"],
                "regress --out": [b"regress", b"--baseline", path, b"--out", bad],
                "selfcheck --out": [b"selfcheck", b"--out", bad]}[option]
        code, out, err = harness(args, cwd=tmp, timeout=120)
        return refused(code, err, "not UTF-8") or (f"created {bad!r}" if os.path.exists(bad) else None)
    return run


for _opt in ("report --out", "report RESULT", "compare --out", "regress --baseline", "regress --candidate",
             "regress --out", "selfcheck --out"):
    case(7, f"a non-UTF-8 byte in {_opt}")(_bytes_case(_opt))

LABELS = ["$\\frac{1}{$", "$x^$", "$$", "\\$", "$\\undefined$", "a $ b $ c", "$" * 7, "$\\sqrt{$x$}$", "${}^{}_{}$",
          "$\\mathcal{X}$"]


def _label_case(label: str, where: str) -> Callable[[Path], str | None]:
    def change(doc: dict) -> None:
        pt = doc["scenarios"]["pinned_transfer"]
        if where == "point label":
            pt["points"][0]["label"] = label
            for r in pt["rows"]:
                if r["point"] == 0:
                    r["label"] = label
        else:  # a variant doc shows in the text; a framework's reason in the chart's "not timed" notes
            pt["rows"][[r["status"] for r in pt["rows"]].index("skipped")]["reason"] = label

    def run(tmp: Path) -> str | None:
        path = fake_result(tmp / "in", change)
        code, _, err = cli(["report", str(path), "--out", str(tmp / "out")])  # drawn for real: mathtext is there
        return None if code == 0 and (tmp / "out" / "pinned_transfer.png").exists() else f"exit {code}: {err[-300:]!r}"
    return run


for _label, _where in itertools.product(LABELS, ("point label", "row reason")):
    case(7, f"{_where} {_label!r} drawn")(_label_case(_label, _where))


def _surrogate_case(field: str) -> Callable[[Path], str | None]:
    def run(tmp: Path) -> str | None:
        path = fake_result(tmp / "in")
        text = path.read_text()
        marker = {"title": '"The host enqueues, the device computes"', "concept": '"Calls queue | kernels <and> return."',
                  "gpu": '"gpu": "NVIDIA H200"', "evidence": '"ratio = 0.006 < 0.1"',
                  "command": '"compare"]', "reason": '"JAX cannot pin a user\'s numpy array"'}[field]
        text = text.replace(marker, marker[:-1] + ' \\udc80 \\ud800"' + ("]" if marker.endswith("]") else ""), 1)
        path.write_text(text)
        with no_pixels():
            code, _, err = cli(["report", str(path), "--out", str(tmp / "out")])
        return None if code == 0 else f"exit {code}: {err[-300:]!r}"
    return run


for _field in ("title", "concept", "gpu", "evidence", "command", "reason"):
    case(7, f"a lone surrogate in {_field}")(_surrogate_case(_field))


# -- family 8: output that cannot be written ----------------------------------------------------------

def _output_case(command: str, where: str) -> Callable[[Path], str | None]:
    def run(tmp: Path) -> str | None:
        path = small_result(tmp / "r")
        args = {"list": ["list"], "regress": ["regress", "--baseline", path, "--candidate", path],
                "report": ["report", path], "docs --check": ["docs", "--check"],
                "bad input": ["regress", "--baseline", tmp / "nope.json"]}[command]
        want = {"bad input": 2, "docs --check": None}.get(command, 0)
        if where in ("closed pipe", "closed pipe on stderr"):
            r, w = os.pipe()
            os.close(r)
            try:
                code, out, err = harness([str(a) for a in args], stdout=w if where == "closed pipe" else subprocess.DEVNULL,
                                         stderr=w if where != "closed pipe" else subprocess.PIPE)
            finally:
                os.close(w)
            if where == "closed pipe":
                return no_traceback(err) or (None if want is None or code == want else f"exit {code}: {err[-300:]!r}")
            return None if want is None or code == want else f"exit {code}"
        with open("/dev/full", "w") as full:
            code, out, err = harness([str(a) for a in args], stdout=full if where == "/dev/full" else subprocess.DEVNULL,
                                     stderr=full if where != "/dev/full" else subprocess.PIPE)
        if where == "/dev/full":
            if want == 2:  # the refusal is stderr's; stdout had nothing to say
                return no_traceback(err) or refused(code, err)
            lines = err.strip().splitlines()
            ok = code == (2 if want == 0 else code) and len(lines) == 1 and "could not be written" in lines[0]
            return no_traceback(err) or (None if ok else f"exit {code}: {err[-300:]!r}")
        return None if want is None or code == want else f"exit {code}"
    return run


if os.path.exists("/dev/full"):
    for _cmd, _where in itertools.product(("list", "regress", "report", "docs --check", "bad input"),
                                          ("closed pipe", "/dev/full", "closed pipe on stderr", "/dev/full on stderr")):
        case(8, f"{_cmd} with {_where}")(_output_case(_cmd, _where))


# -- family 9: a last place for the measurements --------------------------------------------------------

ARGS = ["compare", "--size", "smoke", "--frameworks", "torch", "--scenarios", "event_sync", "--examples", "1",
        "--seed", "1", "--quiet", "--no-report", "--processes", "1", "--isolation", "none"]


def _rescue_case(limit: int, tmpdir: str, home: str) -> Callable[[Path], str | None]:
    def run(tmp: Path) -> str | None:
        env = {"TMPDIR": str(tmp / "tmp") if tmpdir == "ok" else str(tmp / "a-file"),
               "HOME": str(tmp / "home") if home == "ok" else str(tmp / "a-file")}
        (tmp / "a-file").write_text("not a folder")
        (tmp / "tmp").mkdir()
        (tmp / "home").mkdir()

        def limited() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        code, out, err = harness(ARGS + ["--out", str(tmp / "out")], cwd=tmp, env=env, preexec=limited)
        if no_traceback(err):
            return no_traceback(err)
        kept = [p for p in tmp.rglob("*.json*") if p.is_file() and "partial" not in p.name]
        readable = []
        for p in kept:
            with contextlib.suppress(Exception):
                data = p.read_bytes()
                readable.append(json.loads(gzip.decompress(data) if p.suffix == ".gz" else data))
        if not any(d.get("scenarios") for d in readable):
            lines = err.strip().splitlines()
            lost = code == 1 and lines and "the measurements are lost" in lines[-1]
            return None if lost and limit < 1500 else f"no readable result ({kept}); exit {code}: {err[-300:]!r}"
        if code != 1 or ("kept in" not in err and limit < 20_000):
            return f"exit {code}, the place not said: {err[-300:]!r}"
        return None
    return run


for _limit, _tmpdir, _home in itertools.product((6000, 9000, 1000), ("ok", "unusable"), ("ok", "unusable")):
    case(9, f"file-size limit {_limit} B, TMPDIR {_tmpdir}, HOME {_home}")(_rescue_case(_limit, _tmpdir, _home))


# -- family 10: meaningful bounds, options of another mode refused -----------------------------------------

def _bounds_case(argv: list[str], words: str) -> Callable[[Path], str | None]:
    def run(tmp: Path) -> str | None:
        good = small_result(tmp / "r")
        args = [a.format(good=good, out=tmp / "out", tmp=tmp) for a in argv]
        code, _, err = cli(args)
        return refused(code, err, words) or (f"wrote {sorted(tree(tmp / 'out'))}" if tree(tmp / "out") else None)
    return run


FILES = ["regress", "--baseline", "{good}", "--candidate", "{good}"]
FRESH = ["regress", "--baseline", "{good}", "--out", "{out}"]
INTERLEAVED = ["regress", "--baseline-tree", "{tmp}"]
BOUNDS = [(FILES + ["--fdr", v], "--fdr") for v in ("0", "-0.01", "1", "1.5", "100%", "0%", "500%", "nan", "inf", "-inf",
                                                  "lots", "", "1e-400")]
BOUNDS += [(FILES + ["--threshold", v], "--threshold") for v in ("nan", "inf", "0", "5000%", "1e-9", "")]
BOUNDS += [(FILES + ["--confidence", v], "--confidence") for v in ("nan", "inf", "0.4999", "1", "")]
BOUNDS += [(mode + [opt, val], opt) for mode in (FILES, FRESH) for opt, val in
           (("--pairs", "8"), ("--max-pairs", "20"), ("--seed", "3"), ("--size", "full"), ("--budget", "60"),
            ("--fdr", "0.1"), ("--world-size", "2"))]
BOUNDS += [(INTERLEAVED + opt, opt[0]) for opt in (["--isolation", "none"], ["--all"], ["--variants", "async"],
                                                   ["--allow-version-change"])]
BOUNDS += [(argv, "is empty") for argv in (["report", "{good}", "--out", ""], ["report", ""], FRESH[:-1] + [""],
                                           ["regress", "--baseline", "", "--candidate", "{good}"],
                                           ["regress", "--baseline", "{good}", "--candidate", " "],
                                           ["selfcheck", "--out", ""], ["compare", "--out", ""],
                                           ["compare", "--out", "   "], ["regress", "--baseline-tree", ""],
                                           ["regress", "--baseline-python", ""])]
BOUNDS += [(["compare", opt, v, "--out", "{out}"], opt) for opt, v in
           (("--timeout", "nan"), ("--timeout", "inf"), ("--budget", "nan"), ("--budget", "-1"),
            ("--startup-timeout", "0"), ("--gpu-memory-fraction", "nan"), ("--processes", "17"), ("--examples", "0"),
            ("--seed", "-1"), ("--world-size", "0"))]
for _argv, _words in BOUNDS:
    case(10, " ".join(a if a.strip() else repr(a) for a in _argv) + " refused")(_bounds_case(_argv, _words))


# -- family 11: a file's text, never markup -------------------------------------------------------------

PAYLOADS = ["[x](../../../../etc/passwd)", "<script>alert(1)</script>", "<img src=x onerror=alert(1)>",
            "![p](http://evil.example/p.png)", "[r]: http://evil.example", "<http://evil.example>",
            "**bold** __b__ _em_ *em*", "`code` ``co`de``", "~~gone~~", "- item\n\n# heading\n\n> quote",
            "a | b\n|---|", "<a href=javascript:alert(1)>x</a>", "&lt;script&gt;", "[x][r]\n\n[r]: http://e.example",
            "<!-- c --><svg onload=alert(1)>", "\\[x](y)", "1. list\n2. more", "<div style=x>d</div>",
            "*[x](y)*", "[![i](j)](k)"]


class _Elements(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.found.append((tag, dict(attrs)))


def _markup(page: str) -> tuple[list[str], dict[str, int]]:
    """(elements a file's text could have made, the count of each formatting tag) of an HTML page."""
    p = _Elements()
    p.feed(page)
    bad, count = [], {}
    for tag, attrs in p.found:
        src = attrs.get("src") or ""
        count[tag] = count.get(tag, 0) + 1
        if tag == "a" and not (attrs.get("href") or "").startswith("#"):
            bad.append(f"<a href={attrs.get('href')}>")
        elif tag == "img" and not (src.startswith("data:image/png;base64,") or
                                   (src.endswith(".png") and "/" not in src and ":" not in src)):
            bad.append(f"<img src={src}>")
        elif tag in ("script", "svg", "iframe", "object", "embed") or any(k.startswith("on") for k in attrs):
            bad.append(tag)
    return bad, count


def _md(md: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").enable("strikethrough").render(md)


_CLEAN: dict[str, dict[str, int]] = {}


def _clean_counts() -> dict[str, dict[str, int]]:
    if not _CLEAN:
        with tempfile.TemporaryDirectory() as d:
            path = fake_result(Path(d) / "in")
            with no_pixels():
                assert cli(["report", str(path), "--out", str(Path(d) / "out")])[0] == 0
            _CLEAN["html"] = _markup((Path(d) / "out" / "report.html").read_text())[1]
            _CLEAN["md"] = _markup(_md((Path(d) / "out" / "report.md").read_text()))[1]
    return _CLEAN


def _string_paths() -> list[tuple]:
    from tests.report_fixture import fake_doc

    def walk(x: Any, at: tuple = ()) -> Any:
        if isinstance(x, dict):
            for k, v in x.items():
                yield from walk(v, (*at, k))
        elif isinstance(x, list):
            for i, v in enumerate(x[:2]):
                yield from walk(v, (*at, i))
        elif isinstance(x, str):
            yield at
    return list(walk(fake_doc()))


def _markup_case(at: tuple, payload: str) -> Callable[[Path], str | None]:
    def change(doc: dict) -> None:
        box = doc
        for k in at[:-1]:
            box = box[k]
        box[at[-1]] = payload

    def run(tmp: Path) -> str | None:
        path = fake_result(tmp / "in", change)
        with no_pixels():
            code, _, err = cli(["report", str(path), "--out", str(tmp / "out")])
        if code == 2 and refused(code, err) is None:
            return None  # the loader refuses this text here: nothing is shown
        if code != 0:
            return f"exit {code}: {err[-300:]!r}"
        clean = _clean_counts()
        for kind, page in (("html", (tmp / "out" / "report.html").read_text()),
                           ("md", _md((tmp / "out" / "report.md").read_text()))):
            bad, count = _markup(page)
            more = {t: n for t, n in count.items() if t in ("strong", "em", "code", "del", "s", "h1", "h2", "h3", "h4",
                                                            "blockquote", "li", "ol", "table", "hr", "div", "style",
                                                            "span", "p", "br")
                    and n > clean[kind].get(t, 0)}
            if bad or more:
                return f"report.{kind}: {bad} {more}"
        return None
    return run


for _i, _at in enumerate(_string_paths()):
    case(11, f"{PAYLOADS[_i % len(PAYLOADS)]!r} at {'.'.join(map(str, _at))}")(
        _markup_case(_at, PAYLOADS[_i % len(PAYLOADS)]))
for _p in PAYLOADS:  # every payload in the free text a reader sees first
    case(11, f"{_p!r} in the first scenario's title")(_markup_case(("scenarios", "async_dispatch", "title"), _p))


# -- the sweep ----------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.sweep_hostile", description=__doc__.splitlines()[0])
    p.add_argument("--family", type=int, action="append", help="only this family (repeatable)")
    p.add_argument("--list", action="store_true", help="name the cases, run none")
    a = p.parse_args(argv)
    chosen = [c for c in CASES if not a.family or c[0] in a.family]
    if a.list:
        for fam, name, _ in chosen:
            print(f"{fam:2d} {name}")
        print(f"{len(chosen)} cases")
        return 0
    held, failed, by_family = 0, [], {}
    t0 = time.monotonic()
    for fam, name, fn in chosen:
        with tempfile.TemporaryDirectory(prefix="sweep-") as d:
            try:
                why = fn(Path(d))
            except Exception as e:  # noqa: BLE001 - the case itself broke: counted, said
                why = f"the case raised {type(e).__name__}: {e}"
        ok = why is None
        held += ok
        by_family.setdefault(fam, [0, 0])[0 if ok else 1] += 1
        if not ok:
            failed.append((fam, name, why))
            print(f"FAILED {fam:2d} {name}: {why}", flush=True)
    for fam, (h, f) in sorted(by_family.items()):
        print(f"family {fam:2d}: held {h} of {h + f}" + (f", failed {f}" if f else ""))
    print(f"held {held} of {len(chosen)}, failed {len(failed)} ({time.monotonic() - t0:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
