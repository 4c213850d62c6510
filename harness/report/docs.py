"""Generated documentation: docs/porting.md and docs/scenarios.md (the scenario index), from the scenario specs.

`python -m harness docs` (or `make docs`) rewrites both; `python -m harness docs --check` and
tests/test_docs.py fail when the committed ones differ from what the specs (and the committed GPU
result) give now. The porting guide is written for a reader porting code: per concept its lesson in one
sentence, the variant that shows it in the three impls side by side, the first key APIs, the traps (each
framework note's first sentence; what a framework cannot express), and what the newest committed
full-size GPU result holding it measured: a table of figures in human units (a sweep's largest point),
the largest gaps between the frameworks, and its claims as a table (claim x framework: verdict, figure).
What one GPU cannot show is said once. The specs and the reports hold the rest. Nothing here imports a
framework: snippets and NOT_EXPRESSIBLE are read from the impl files' syntax tree.
"""
from __future__ import annotations

import ast
import html
import json
import re
from pathlib import Path
from typing import Any

from harness.backends import FRAMEWORKS, backend_class, in_prose
from harness.report.report import fmt_s, points_of, sig, timed
from harness.measure.timing import HAZARD_CHECKS, HAZARD_EVERY
from harness.results.files import read_regular, write_files
from harness.report.labels import NAMES, kernel_of, kernel_said
from harness.results.model import Json, Result, Row, ScenarioResult
from harness.results.results import MAX_BYTES, ResultError, read
from scenarios.spec import human_bytes
from scenarios import OPT_IN, all_scenarios

ROOT = Path(__file__).resolve().parent.parent.parent
PORTING = Path("docs/porting.md")
SCENARIOS = Path("docs/scenarios.md")
RESULT_NAME = re.compile(r"^\d{8}T\d{6}Z_[a-z0-9-]+_full(-\d+)?\.json$")
GAP = 1.2  # a framework this many times slower than the fastest at a variant is worth a line
GAP_LINES = 2  # such lines a scenario shows at most; its report has them all

# Defaults that differ between the frameworks and hold in every scenario, in the guide's order; each
# backend states its cell per topic (Backend.porting). The harness pins the first three
# (harness/backends/*.py) so that the frameworks compare like with like; a port has to pin them too.
DEFAULT_TOPICS: tuple[str, ...] = (
    "float32 matmul precision", "matrix-product library", "GPU memory at start", "wait for the device",
    "reads that wait (implicit syncs)", "user streams", "events", "host → device from numpy", "device → host",
    "sync detector", "first call",
)


class DocsError(Exception):
    """The docs cannot be generated (e.g. a committed result they read is damaged); str(self) is one line."""


# ---------------------------------------------------------------------------------------------- helpers

def not_expressible(root: Path, scenario: str, fw: str) -> dict[str, str]:
    """The impl's NOT_EXPRESSIBLE = {variant: why}, read from its syntax tree (no framework import)."""
    path = root / "impls" / scenario / f"{fw}_impl.py"
    if not path.exists():
        return {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "NOT_EXPRESSIBLE" for t in targets) and node.value is not None:
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    raise DocsError(f"{path}: NOT_EXPRESSIBLE must be a literal dict") from None
                return {str(k): str(v) for k, v in value.items()}
    return {}


API_LINES = 3  # of a scenario's key APIs per framework, the first (the spec lists them all)
SNIPPET_LINES = 7  # a snippet longer than this is cut; the impl has it whole


def snippet(root: Path, scenario: str, fw: str, variant: str) -> str | None:
    """The impl's run_<variant> function as written (decorators and docstring left out), or None where the
    impl has none; cut after SNIPPET_LINES lines."""
    path = root / "impls" / scenario / f"{fw}_impl.py"
    if not path.exists():
        return None
    text = path.read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == f"run_{variant}":
            body = node.body[1:] if (node.body and isinstance(node.body[0], ast.Expr)
                                     and isinstance(node.body[0].value, ast.Constant)) and len(node.body) > 1 else node.body
            lines = text.splitlines()[node.lineno - 1:node.lineno] + text.splitlines()[body[0].lineno - 1:node.end_lineno]
            return "\n".join(lines[:SNIPPET_LINES] + (["    ..."] if len(lines) > SNIPPET_LINES else []))
    return None


def pre(code: str) -> str:
    """Code as the text of an HTML <pre>: escaped, brackets too (`x[i](y)` is code, not a Markdown link)."""
    return html.escape(code).replace("[", "&#91;").replace("]", "&#93;")


def _concept_variant(s: Any) -> Any:
    """The variant that shows the concept: the first after the baseline that is no hazard (else the baseline)."""
    return next((v for v in s.variants[1:] if not v.hazard), s.baseline)


def _snippets(root: Path, s: Any) -> str:
    """The concept variant in the three impls side by side: an HTML table of <pre> cells (GitHub renders it)."""
    v = _concept_variant(s)
    cells = []
    for fw in FRAMEWORKS:
        code = snippet(root, s.name, fw, v.name)
        why = not_expressible(root, s.name, fw).get(v.name)
        cells.append(f"<pre>{pre(code)}</pre>" if code else f"<em>{html.escape(why or 'no such function')}</em>")
    head = "".join(f"<th>{NAMES[fw]}</th>" for fw in FRAMEWORKS)
    return (f"[`{v.name}`](../impls/{s.name}/):\n\n<table><tr>{head}</tr><tr>"
            + "".join(f'<td valign="top">{c}</td>' for c in cells) + "</tr></table>")


def _holds(path: Path) -> tuple[bool, set[str]] | None:
    """Whether a result file ran on a GPU and which scenarios it has rows for, from its JSON alone; None when
    it cannot tell (not JSON, not shaped like a result), so that results.read names what is wrong."""
    try:
        doc = Result.from_dict(json.loads(read_regular(path, MAX_BYTES)))  # typed, not validated: a peek
        return bool(doc.environment.gpu), {n for n, s in doc.scenarios.items() if getattr(s, "rows", None)}
    except (OSError, ValueError, RecursionError, KeyError, TypeError, AttributeError):
        return None


def gpu_results(root: Path, scenarios: list[str]) -> tuple[list[tuple[Path, Result]], int]:
    """The full-size GPU results committed in results/ that measure the given scenarios, newest first (file
    names start with their UTC time), and how many GPU results are committed in all.
    A time-limited GPU may split one `make compare` into several runs (`--budget`, then `--scenarios`), so
    each scenario is measured by the newest of these that holds it. Only those files are loaded, i.e.
    validated as a whole (seconds for a big one); the others are only parsed to see what they hold."""
    folder = root / "results"
    if not folder.is_dir():
        return [], 0
    found, committed, left = [], 0, set(scenarios)
    for path in sorted((p for p in folder.iterdir() if RESULT_NAME.match(p.name)), reverse=True):
        holds = _holds(path)
        if holds is not None and (not holds[0] or not holds[1] & left):
            committed += holds[0]
            continue
        try:
            doc = read(path)
        except ResultError as e:
            raise DocsError(str(e)) from None
        if doc.environment.gpu:
            committed += 1
            found.append((path, doc))
            left -= {n for n, scn in doc.scenarios.items() if scn.rows}
    return found, committed


def measured_by(results: list[tuple[Path, Result]], scenario: str) -> tuple[Path, ScenarioResult] | None:
    """The newest GPU result with rows for this scenario, and the scenario in it."""
    return next(((p, scn) for p, d in results if (scn := d.scenarios.get(scenario)) is not None and scn.rows), None)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _codes(apis: tuple[str, ...] | list[str]) -> str:
    return "<br>".join(f"`{a}`" for a in apis) or "—"


def _header() -> str:
    """A table's header over one column per framework (its display name), and the rule under it."""
    return ("| | " + " | ".join(NAMES[f] for f in FRAMEWORKS) + " |\n"
            + "|---" * (len(FRAMEWORKS) + 1) + "|\n")


def _defaults_table() -> str:
    """The frameworks' defaults side by side, each cell from its backend (Backend.porting)."""
    cells = {}
    for fw in FRAMEWORKS:
        porting = backend_class(fw).porting
        if missing := [t for t in DEFAULT_TOPICS if t not in porting]:
            raise DocsError(f"{fw}'s backend states no porting cell for {', '.join(missing)}")
        cells[fw] = porting
    return _header() + "\n".join(f"| **{_cell(topic)}** | " + " | ".join(_cell(cells[fw][topic]) for fw in FRAMEWORKS)
                                  + " |" for topic in DEFAULT_TOPICS)


# ---------------------------------------------------------------------------------------------- measured

def _gaps(rows: dict[str, Row], fws: list[str], variant: str, label: str) -> list[str]:
    """Frameworks far behind the fastest at one variant: device-done, and host-return where the call is async."""
    out = []
    at = f"`{variant}`" + (f" ({label})" if label else "")
    ok = [fw for fw in fws if timed(rows.get(fw))]
    done = {fw: rows[fw].timing.device_done.median for fw in ok}
    ret = {fw: rows[fw].timing.host_return.median for fw in ok}
    if len(done) > 1:
        best = min(done, key=done.get)
        out += [f"{NAMES.get(fw, fw)} takes {sig(d / done[best], 2)}× as long as {NAMES.get(best, best)} at {at}: "
                f"{fmt_s(d)} vs {fmt_s(done[best])} device-done" for fw, d in done.items() if d > GAP * done[best]]
    asynchronous = [fw for fw in ok if ret[fw] < 0.5 * done[fw]]
    if len(asynchronous) > 1:
        best = min(asynchronous, key=ret.get)
        out += [f"{NAMES.get(fw, fw)}'s call returns {sig(ret[fw] / ret[best], 2)}× later than "
                f"{NAMES.get(best, best)}'s at {at}: {fmt_s(ret[fw])} vs {fmt_s(ret[best])} host-return (dispatch cost)"
                for fw in asynchronous if ret[fw] > 1.5 * ret[best]]
    return out


def _measured(root: Path, scn: ScenarioResult, rel: str, talking: frozenset[str] = frozenset()) -> list[str]:
    """What the committed GPU result says about one scenario: a table of its figures, the gaps between the
    frameworks, the hazards that went wrong, and its claims as a table (claim x framework).
    ``talking``: the ids of its claims about communication, which a run of one rank cannot decide."""
    fws = [f for f in FRAMEWORKS if any(r.framework == f for r in scn.rows)]
    points = points_of(scn)
    report = Path(rel).with_suffix("") / "report.md"
    link = f", [report](../{report.as_posix()})" if (root / report).exists() else ""
    if _one_rank(scn):  # a rank scenario run by one rank: nothing moved between ranks, so no figure is published
        return [f"**{NOT_MEASURED_ONE_GPU}** The newest run ([{Path(rel).name}](../{rel}){link}) had one rank: see "
                "[what one GPU cannot show](#one-gpu)."] + _claims_table(scn, fws, talking)
    shown = [len(points) - 1] if len(points) > 1 else [0]  # a sweep: its largest point; the report has them all
    out = [f"**Measured** ([{Path(rel).name}](../{rel}){link}"
           + (f"; the sweep's largest point, {points[-1].get('label') or len(points) - 1}" if len(points) > 1 else "")
           + "): [how to read a cell](#clocks)."]
    header = ["variant"] + [NAMES.get(f, f) for f in fws]  # headers (a list), not a key
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes: list[str] = []
    for i in shown:
        label = str(points[i].get("label") or "")  # a point's params: data, by name
        for v in scn.variants or []:
            rows = {r.framework: r for r in scn.rows if r.variant == v.name and (r.point or 0) == i}
            if not rows:
                continue
            cells = []
            for fw in fws:
                r = rows.get(fw)
                if not timed(r):
                    cells.append(f"{r.status}" if r else "—")
                    continue
                t, kernel = r.timing, kernel_of(r.timing)
                cells.append(f"{fmt_s(t.device_done.median)} ({fmt_s(t.host_return.median)})"
                             + (f"<br>k {fmt_s(kernel.median)}" if kernel else ""))
                chk = r.check
                if v.hazard and chk is not None and chk.wrong:
                    notes.append(f"hazard `{v.name}` went wrong in {chk.wrong} of {chk.checked or 0} "
                                 f"runs in {NAMES.get(fw, fw)}" + (f" at {label}" if label else ""))
            lines.append("| " + " | ".join([f"`{v.name}`" + (" *(hazard)*" if v.hazard else "")
                                            ] + cells) + " |")
            if not v.hazard:
                notes += _gaps(rows, fws, v.name, label)
    out.append("\n".join(lines))
    if notes:  # the first few, and a link to the rest; all of them where the run wrote no report (--no-report)
        keep = GAP_LINES if link else len(notes)
        out.append("\n".join(f"- {_cell(n)}" for n in notes[:keep])
                   + (f"\n- and {len(notes) - keep} more gaps or wrong hazards: [the report]"
                      f"(../{report.as_posix()})" if len(notes) > keep else ""))
    last = str(points[shown[0]].get("label") or "")  # a point's params: data
    return out + _claims_table(scn, fws, frozenset(), last if len(points) > 1 else None)


NOT_MEASURED_ONE_GPU = "Not measured: one GPU."
ONE_GPU = ('<a id="one-gpu"></a>\n\n## What one GPU cannot show\n\nWhere a rank scenario (parts 2-6) says '
           "*Not measured: one GPU*, it ran with one rank, where nothing is communicated: its rows check each "
           "framework's path and time the calls' own overhead, which this guide does not compare. Claims about "
           "communication need two GPUs or more.")


def _clocks(rows: list[Row]) -> str:
    """How to read a measured cell, said once (harness/measure/kernel_clock.py, docs/measuring.md)."""
    return ('<a id="clocks"></a>\n\n## Reading the measured sections\n\n'
            "| in a cell | what it is |\n|---|---|\n"
            "| first figure | **device-done**: from the call until the device finished; what a user waits for |\n"
            "| (in brackets) | **host-return**: until the call handed control back; what the host pays |\n"
            f"| k | **kernel clock**: how long the call occupied the device ({_cell(kernel_said(rows))}) |\n\n"
            "The reports add the % of the physical floor and every point of a sweep. "
            "Each figure is the median of its worker processes' medians. In a claims table, ✔ is confirmed and ✘ "
            "refuted (each holding in 95% of 200 resamples of the run's repeats), · inconclusive; beside it, the "
            "claim's figure.")


def lesson(concept: str) -> str:
    """A concept's lesson: its first sentence."""
    m = re.match(r"(.+?[.!?])(\s|$)", concept.strip(), re.S)
    return m.group(1) if m else concept.strip()


def _one_rank(scn: ScenarioResult) -> bool:
    return {int(r.ranks) for r in scn.rows if r.ranks is not None} == {1}


VERDICT_MARK = {"confirmed": "✔", "refuted": "✘", "inconclusive": "·"}  # said once, under "Reading the measured sections"


def _figure(numbers: Json) -> str:
    """A claim's figure in human units: its ratio where it has one, else its one time or size; "" for a figure
    whose unit the guide cannot say (a count is in the report's evidence). numbers: keys are the figures' names
    (data)."""
    if not isinstance(numbers, dict) or not numbers:
        return ""
    if isinstance(numbers.get("ratio"), (int, float)):  # numbers: data, by name
        return f"{sig(numbers['ratio'], 3)}×"
    if len(numbers) == 1:
        (key, x), = numbers.items()
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            return fmt_s(x) if key.endswith("_s") else human_bytes(x) if key.endswith("bytes") else ""
    return ""


def _claims_table(scn: ScenarioResult, fws: list[str], skip: frozenset[str], label: str | None = None) -> list[str]:
    """The scenario's claims as a table: a row per claim (and point of a sweep where they differ; only the point
    `label` where one is named), a column per framework, each cell its verdict and figure; claims in `skip`
    (about communication, at one rank) left out."""
    claims = [c for c in scn.claims or [] if c.claim not in skip and (label is None or (c.label or "") == label)]
    if not claims:
        return []
    keys = list(dict.fromkeys((c.text, c.label or "") for c in claims))
    # a sweep whose points all read alike is one row
    by_text: dict[str, list[str]] = {}
    for text, label in keys:
        by_text.setdefault(text, []).append(label)
    rows = []
    for text, labels in by_text.items():
        verdicts = {lab: {c.framework: c for c in claims if c.text == text and (c.label or "") == lab} for lab in labels}
        same = len({tuple(sorted((f, c.verdict) for f, c in v.items())) for v in verdicts.values()}) == 1
        for lab in (labels[:1] if same else labels):
            cells = []
            for fw in fws:
                c = verdicts[lab].get(fw)
                figure = _figure(c.numbers or {}) if c is not None and c.verdict != "inconclusive" else ""
                cells.append("—" if c is None else f"{VERDICT_MARK.get(c.verdict, c.verdict)} {figure}".strip())
            at = f" ({lab})" if lab and not same else (" (every point)" if len(labels) > 1 else "")
            rows.append(f"| {_cell(text)}{at} | " + " | ".join(cells) + " |")
    return ["| claim | " + " | ".join(NAMES.get(f, f) for f in fws) + " |\n|" + "---|" * (len(fws) + 1) + "\n"
            + "\n".join(rows)]


def _traps(root: Path, s: Any) -> list[str]:
    """A scenario's traps: each framework note's first sentence (the trap; its reasons stay in the spec), and what
    a framework cannot express."""
    traps = [f"**{NAMES.get(fw, fw)}**: {lesson(s.framework_notes[fw])}" for fw in FRAMEWORKS if fw in s.framework_notes]
    for fw in FRAMEWORKS:
        for variant, why in not_expressible(root, s.name, fw).items():
            traps.append(f"**{NAMES[fw]}** has no `{variant}`: {lesson(why.split(': ')[0].rstrip('.') + '.')}")
    return traps  # GPU-only variants and hazards are marked where they appear (the measured table, scenarios.md)


def _defaults_that_differ(root: Path, results: list[tuple[Path, Result]]) -> list[str]:
    """Part 7: per scenario that measures a default (its spec's agree_by), the setting that makes the three
    agree and what the newest GPU result measured (its claims' verdicts and numbers)."""
    out = []
    for s in (s for s in all_scenarios() if s.agree_by):
        out.append(f"### [{s.title}](#{s.name})\n\n"
                   + _header()
                   + "| **to agree** | " + " | ".join(_cell(s.agree_by.get(f, "—")) for f in FRAMEWORKS) + " |")
        measured = measured_by(results, s.name)
        if measured is None:
            out.append("Not yet measured on a GPU.")
            continue
        claims = measured[1].claims or []
        counts = {w: sum(c.verdict == w for c in claims) for w in ("confirmed", "refuted", "inconclusive")}
        out.append(f"Measured: {', '.join(f'{n} {w}' for w, n in counts.items() if n)} "
                   f"([its claims](#{s.name})).")
    return ["The defaults below are measured as scenarios of their own (part 7): each framework runs with its "
            "real default, then with the setting that makes the three agree."] + out if out else []


def _where(result: Result) -> str:
    """The GPU, driver and framework versions a result was measured with."""
    env = result.environment
    # env, host: the backend's and the host's own facts (data)
    versions = ", ".join(f"{NAMES.get(fw, fw)} {(i.env or {}).get('version', '?')}"
                         for fw, i in (env.frameworks or {}).items() if i.available)
    return f"{env.gpu}, driver {(env.host or {}).get('driver', '?')}; {versions}"


def porting_guide(root: Path = ROOT) -> str:
    results, committed = gpu_results(root, [s.name for s in all_scenarios()])
    source = {s.name: measured_by(results, s.name) for s in all_scenarios()}
    used = [(p, d) for p, d in results if any(m is not None and m[0] == p for m in source.values())]
    parts = [
        "# Porting guide: " + " ⇄ ".join(NAMES[f] for f in FRAMEWORKS),
        "<!-- Generated by `python -m harness docs` (`make docs`) from scenarios/*.py, impls/ and the newest "
        "full-size GPU result in results/. Do not edit by hand: tests/test_docs.py fails when this file is stale. -->",
        "Each concept of the host/device paradigm, done three ways: its lesson, the three impls side by side, the "
        "traps, and what the GPU measured.",
        "## Defaults that differ everywhere",
        "The first three are pinned by the harness (`harness/backends/`) so that the three compare like with like; "
        "a port has to pin them too.",
        _defaults_table(),
        *_defaults_that_differ(root, results),
        "## Concepts",
        "\n".join(f"{n}. [`{s.name}`](#{s.name}) — {s.title}" for n, s in enumerate(all_scenarios(), 1)),
    ]
    if not used:
        parts.append("No full-size GPU result is committed in `results/` yet: the measured sections appear once "
                     "one is (`make compare` on a GPU, then `make docs`).")
    for path, doc in used:
        which = [name for name, m in source.items() if m is not None and m[0] == path]
        parts.append(f"Measured sections come from `{path.relative_to(root).as_posix()}` ({_where(doc)})"
                     + (f": {', '.join(f'`{n}`' for n in which)}." if len(used) > 1 else "."))
    if used:
        parts.append(_clocks([r for _, d in used for scn in d.scenarios.values() for r in scn.rows or []]))
    if any(s.ranks and _one_rank(m[1]) for s in all_scenarios() if (m := source[s.name]) is not None):
        parts.append(ONE_GPU)
    for n, s in enumerate(all_scenarios(), 1):
        parts.append(f'<a id="{s.name}"></a>\n\n## {n}. {s.name} — {s.title}')
        parts.append(f"**{lesson(s.concept)}**")
        parts.append(_snippets(root, s))
        parts.append(_header()
                     + "| **APIs** | " + " | ".join(_codes(s.key_apis.get(fw, ())[:API_LINES]) for fw in FRAMEWORKS) + " |")
        traps = _traps(root, s)
        parts.append(f"**Traps** ([spec](../scenarios/{s.name}.py)):\n\n"
                     + "\n".join(f"- {_cell(t)}" for t in traps) if traps else
                     f"The whole story: [the spec](../scenarios/{s.name}.py).")
        measured = source[s.name]
        if measured is not None:
            path, scn = measured
            parts += _measured(root, scn, path.relative_to(root).as_posix(),
                               frozenset(c.id for c in s.claims if c.communicates))
        elif committed:
            parts.append("*Not in any committed GPU result.*")
    return "\n\n".join(parts) + "\n"


def scenario_index() -> str:
    """docs/scenarios.md: every scenario in the order of every report, with its variants and its section of the
    porting guide, and the scenarios a default run leaves out."""
    lines = ["| # | scenario | concept | variants (baseline first) | porting guide |", "|---|---|---|---|---|"]
    for n, s in enumerate(all_scenarios(), 1):
        vs = ", ".join(f"`{v.name}`" + (" (hazard)" if v.hazard else "") for v in s.variants)
        lines.append(f"| {n} | [`{s.name}`](../scenarios/{s.name}.py) | {_cell(s.title)} | {vs} | "
                     f"[{in_prose(' ⇄ ', ' ⇄ ')}](porting.md#{s.name}) |")
    opt_in = "\n".join(f"- `{name}`: {why}" for name, why in OPT_IN.items())
    return "\n\n".join([
        "# Scenarios",
        "<!-- Generated by `python -m harness docs` (`make docs`) from scenarios/*.py. Do not edit by hand: "
        "tests/test_docs.py fails when this file is stale. -->",
        "One concept of the GPU host/device paradigm each, in the order of every report and of the "
        "[porting guide](porting.md). A *hazard* variant is wrong by design some of the time (a missing wait): "
        "it is left out of the equivalence check, and a sample of its timed runs (all of the first "
        f"{HAZARD_CHECKS}, then every {HAZARD_EVERY}th, and the last) is checked and counted.",
        "\n".join(lines),
        "A default `make compare` leaves these out; `--scenarios` names them to run them:\n\n" + opt_in,
        f"Each scenario's three implementations are `impls/<scenario>/{{{','.join(FRAMEWORKS)}}}_impl.py`; they "
        "define the same functions in the same order, so "
        f"`diff impls/sync_points/{FRAMEWORKS[0]}_impl.py impls/sync_points/{FRAMEWORKS[-1]}_impl.py` shows "
        "only the framework. **[porting.md](porting.md)** puts them side by side per concept: the APIs of "
        "the three, links to the impl files, the defaults that differ (precision, memory, streams, events, "
        "transfer paths), what one framework cannot express, and what the newest committed GPU result measured. "
        "It and this index are generated from the specs: `make docs` (`python -m harness docs`) rewrites them, "
        "and a test fails when the committed ones are stale. To add a scenario, see "
        "[CONTRIBUTING.md](CONTRIBUTING.md#add-a-scenario).",
    ]) + "\n"


def generate(root: Path = ROOT) -> dict[Path, str]:
    """{path relative to root: the text it should hold}."""
    return {PORTING: porting_guide(root), SCENARIOS: scenario_index()}


def stale(files: dict[Path, str], root: Path = ROOT) -> list[Path]:
    out = []
    for rel, text in files.items():
        path = root / rel
        if not path.exists() or path.read_text() != text:
            out.append(rel)
    return out


def write(files: dict[Path, str], root: Path = ROOT) -> list[Path]:
    """Write the files that changed, each through the one atomic writer; returns their paths."""
    written = stale(files, root)
    for rel in written:
        write_files((root / rel).parent, {rel.name: files[rel].encode()})
    return written
